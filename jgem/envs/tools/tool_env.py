"""ToolEnv: GEM's ToolEnvWrapper semantics on jgem's Tool protocol.

An action that calls a tool is answered by the tool and never reaches the env, nor uses an env turn.
After `max_tool_uses` calls in an episode the agent is told to answer, and later actions go to the
env. Tool calls earn `tool_reward`, plus `tool_success_reward` when they succeed (both default 0).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from jgem.core import Env, StepResult, Wrapper
from jgem.envs.tools.base import Tool, ToolResult

LIMIT_MESSAGE = "\n\nReached the maximum number of tool use. Please output final answer directly."


class ToolEnv(Wrapper):
    """Adds tools to an env. Tools are tried in order; the first that parses and succeeds answers.

    `close()` closes the tools too, unless `close_tools` is False: tools shared by many envs (one MCP session
    for a whole pool) belong to whoever made them, and one env's close (the pool rebuilding a faulted env, or
    closing) must not end them for the others.
    """

    def __init__(
        self,
        env: Env,
        tools: Sequence[Tool],
        max_tool_uses: int | None = 5,
        tool_reward: float = 0.0,
        tool_success_reward: float = 0.0,
        close_tools: bool = True,
    ) -> None:
        super().__init__(env)
        if not tools:
            raise ValueError("ToolEnv needs at least one tool")
        if max_tool_uses is not None and max_tool_uses < 0:
            raise ValueError(f"max_tool_uses must be >= 0 or None (unlimited), got {max_tool_uses}")
        self.tools = list(tools)
        self.max_tool_uses = max_tool_uses
        self.tool_reward = tool_reward
        self.tool_success_reward = tool_success_reward
        self.close_tools = close_tools
        self.tool_use_counter = 0
        self.tool_success_counter = 0

    def instructions(self) -> str:
        text = "\n".join(t.instruction() for t in self.tools)
        return f"Available tools:\n{text}" if len(self.tools) > 1 else text

    def reset(self, seed: int | None = None) -> tuple[Any, dict[str, Any]]:
        prev_uses, prev_success = self.tool_use_counter, self.tool_success_counter
        self.tool_use_counter = self.tool_success_counter = 0
        obs, info = self.env.reset(seed=seed)
        info = dict(info)
        info.update(
            tool_use_counter=0,
            tool_success_counter=0,
            prev_ep_tool_use_counter=prev_uses,
            prev_ep_tool_success_counter=prev_success,
            use_tool=False,
        )
        return f"{obs}\n{self.instructions()}", info

    def _call_tools(self, action: str) -> tuple[Tool, ToolResult] | None:
        first = None
        for tool in self.tools:
            call = tool.parse(action)
            if call is None:
                continue
            result = tool.execute(call)
            if result.ok:
                return tool, result
            first = first or (tool, result)  # keep trying: a later tool may handle this action
        return first

    def step(self, action: str) -> StepResult:
        used = None
        if self.max_tool_uses is None or self.tool_use_counter < self.max_tool_uses:
            used = self._call_tools(action)
        if used is None:
            obs, reward, terminated, truncated, info = self.env.step(action)
            info = dict(info)
            info["use_tool"] = False
        else:
            tool, result = used
            self.tool_use_counter += 1
            obs, reward = result.text, self.tool_reward
            if result.ok:
                self.tool_success_counter += 1
                reward += self.tool_success_reward
            if self.tool_use_counter == self.max_tool_uses:
                obs += LIMIT_MESSAGE
            terminated = truncated = False
            info = {"use_tool": True, "tool": tool.name, "tool_ok": result.ok}
        info["tool_use_counter"] = self.tool_use_counter
        info["tool_success_counter"] = self.tool_success_counter
        return obs, float(reward), terminated, truncated, info

    def close(self) -> None:
        if self.close_tools:
            for tool in self.tools:
                tool.close()
        self.env.close()
