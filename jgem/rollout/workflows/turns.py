"""The default workflow, `turns`: one agent, one env, observation -> action -> observation until the game ends, the
turn limit or the token budget, in the rollout config's view (`jgem.rollout.views`).

- chat view: one stream; each observation is appended after the action (`observation_suffix`), so every token is
  prefilled once and the episode trains as one row;
- per-turn chat view: every turn's prompt is the template's rendering of the conversation so far, a new segment
  that keeps the slot's keys and values up to the first token the template changed;
- per-turn view: every turn's prompt is a fresh template of GEM's history text, a new segment prefilled afresh.

The engine played exactly this loop before workflows existed: the same params, bit for bit, on every pipeline
mode (`tests/rollout/test_workflows.py` pins them). `begin` and `turn` are its two halves, which the other shipped
workflows reuse (a branch of a tree, the compacting agent between its summaries).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from jgem.rollout.config import PromptBudgetError
from jgem.rollout.views import first_prompt, observation_suffix
from jgem.rollout.workflow import Context, Stream, Trajectory, Workflow, register_workflow


@dataclass
class Play:
    """One agent's game: its env, its stream, its trajectory, the env messages the stream holds, the last
    observation."""

    env: int
    stream: Stream
    traj: Trajectory
    num_messages: int
    obs: Any = None
    steps: int = 0  # env steps played (the turn limit counts them; a workflow's extra turns, a summary, do not)


async def begin(ctx: Context, traj: Trajectory, env: int | None = None) -> Play | None:
    """Reset `env` (the episode's by default) and open a stream on its first prompt; None (and `traj` ended as a
    fault) when the reset faulted. Raises PromptBudgetError when the first prompt leaves no room for an action."""
    cfg, spec = ctx.cfg, traj.spec
    env = ctx.env if env is None else env
    obs, info = await ctx.reset(env, spec.seed)
    if "fault" in info:
        end(traj, info, truncated=True)
        return None
    tokens, num_messages = first_prompt(ctx.chat, cfg.view, obs)
    if len(tokens) + cfg.max_new_tokens > cfg.max_episode_tokens:
        new, budget = "--rollout.max-new-tokens", "--rollout.max-episode-tokens"
        name = f"{ctx.env_name}, " if ctx.env_name else ""
        raise PromptBudgetError(
            f"the first prompt of episode {spec.episode_id} has {len(tokens)} tokens ({name}seed "
            f"{spec.seed}), which leaves no room for {new} {cfg.max_new_tokens} within "
            f"{budget} {cfg.max_episode_tokens} (RolloutConfig.max_episode_tokens); raise {budget} (each "
            "later turn needs room too)"
        )
    stream = ctx.open(tokens, share=cfg.view != "per_turn", episode_id=spec.episode_id)
    return Play(env, stream, traj, num_messages, obs)


async def turn(ctx: Context, p: Play, shown: Callable[[Play, list], list] | None = None) -> bool:
    """One turn: sample an action, step the env, record it; then the next prompt (or the episode's end: the game,
    a fault, the turn limit, the token budget). Returns whether the episode ended (`p.traj` then holds its end).
    `shown(p, obs)`, chat view: the messages the stream gets in place of the env's `obs` (the new ones, after
    `p.num_messages` and the action, may be edited)."""
    cfg, chat, traj = ctx.cfg, ctx.chat, p.traj
    per_turn = cfg.view != "chat"  # each turn owns its prompt (the per-turn views)
    action = await ctx.generate(p.stream, ctx.token_limit(p.steps, traj.spec))
    obs, reward, terminated, truncated, info = await ctx.step(ctx.text(action), p.env)
    traj.record(action, reward)
    p.steps += 1
    ctx.stats.turns += 1
    ctx.stats.action_tokens += len(action.ids)
    fault = "fault" in info
    done = terminated or truncated or fault
    if not done and p.steps >= ctx.max_turns:
        done, truncated = True, True
    next_prompt = None
    if not terminated and not fault:  # the state the episode goes on in (or was cut in)
        if per_turn:
            next_prompt = first_prompt(chat, cfg.view, obs)[0]
        else:  # appended in place (copying the stream every turn would be quadratic in its length)
            seen = obs if shown is None else shown(p, obs)
            ctx.append(p.stream, observation_suffix(chat, p.num_messages, action.ids, seen))
            next_prompt = p.stream.tokens
    p.obs = obs
    if not done:
        if per_turn:
            ctx.new_segment(p.stream, next_prompt, keep_prefix=cfg.view == "chat_per_turn")
        p.num_messages = 0 if cfg.view == "per_turn" else len(obs)
        if len(p.stream.tokens) + cfg.max_new_tokens > cfg.max_episode_tokens:
            ctx.stats.budget_truncations += 1
            done, truncated = True, True
    if done:
        if truncated and next_prompt is not None:
            traj.next_prompt = list(next_prompt)
        end(traj, info, truncated=truncated)
    return done


def end(traj: Trajectory, info: dict, *, truncated: bool) -> Trajectory:
    """`traj` ended: its success (the env's last info), whether it was cut, its fault."""
    traj.success, traj.truncated, traj.fault = bool(info.get("success", False)), truncated, info.get("fault")
    return traj


class Turns(Workflow):
    name = "turns"

    async def run(self, ctx: Context, spec) -> Trajectory:
        traj = ctx.trajectory(own_prompts=ctx.cfg.view != "chat")
        p = await begin(ctx, traj)
        while p is not None and not await turn(ctx, p):
            pass
        return traj


register_workflow("turns", Turns())
