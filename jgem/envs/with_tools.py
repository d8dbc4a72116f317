"""Tools from the training config: `EnvConfig.tools` names them, `tool_wrapper` wraps every env of the pool.

`tools=("python",)` gives any suite GEM's Python tool (`ToolEnv` with a `PythonTool`); `"search"` a BM25
`SearchTool` (the shipped corpus, a JSONL corpus or a search server URL); `"mcp"` an `MCPTool` on a server
URL or a stdio command line. The wrapper is a `functools.partial` of a module-level function, so process
workers can build it; each process opens one search index and one MCP connection per server, shared by
its envs (tools are shared services, docs/tools.md) and by every pool it builds: the process owns them, so
closing an env or a pool leaves them open, and they are closed at exit.

`EnvConfig.tool_format` says how the model calls them (`jgem.envs.tools.formats`): GEM's tags, or a native format
whose function schemas go to the chat template (`tool_schemas`, which the run's `ChatFormat` takes as `tools=`).
"""

from __future__ import annotations

import atexit
import functools
import shlex
from collections.abc import Callable
from typing import Any

from jgem.core import Env

TOOLS = ("python", "search", "mcp")


def tool_errors(tools: tuple[str, ...], mcp_server: str | None, tool_format: str = "gem_tags") -> list[str]:
    """What is wrong with a tools config (empty when nothing): unknown names, duplicates, mcp without a server, an
    unknown tool format or one without tools."""
    from jgem.envs.tools.formats import FORMATS

    errors = [f"env.tools has unknown tool {t!r}; choose from {', '.join(TOOLS)}" for t in tools if t not in TOOLS]
    if tool_format not in FORMATS:
        errors.append(f"env.tool-format {tool_format!r} is unknown; choose from {', '.join(FORMATS.names())}")
    elif tool_format != "gem_tags" and not tools:
        errors.append(
            f"env.tool-format {tool_format} formats tool calls, but env.tools names no tool; add one (--env.tools "
            "python, search or mcp) or drop --env.tool-format"
        )
    if len(set(tools)) != len(tools):
        errors.append(f"env.tools {tuple(tools)!r} names a tool twice")
    if "mcp" in tools and not mcp_server:
        errors.append(
            "env.tools has 'mcp' but env.mcp-server is not set; pass a URL (http://host:port/mcp) or a command "
            "line ('python -m jgem.envs.tools.mcp_servers.demo_server')"
        )
    return errors


@functools.cache
def _search_tool(corpus: str | None, topk: int, timeout: float) -> Any:
    from jgem.envs.tools.search import BM25Index, SearchTool

    if corpus is not None and corpus.startswith(("http://", "https://")):
        return SearchTool(corpus, topk=topk, timeout=timeout)
    return SearchTool(BM25Index.from_jsonl(corpus) if corpus else None, topk=topk, timeout=timeout)


@functools.cache
def _mcp_tool(server: str, timeout: float) -> Any:
    from jgem.envs.tools.mcp import MCPTool, StdioServer

    if server.startswith(("http://", "https://")):
        tool = MCPTool(server, timeout=timeout)
    else:
        command, *args = shlex.split(server)
        tool = MCPTool(StdioServer(command, tuple(args)), timeout=timeout)
    atexit.register(tool.close)
    return tool


def build_tools(
    tools: tuple[str, ...],
    *,
    timeout: float,
    search_corpus: str | None = None,
    search_topk: int = 3,
    mcp_server: str | None = None,
) -> list[Any]:
    """The named tools, in the order given (search and mcp shared within the process)."""
    built = []
    for name in tools:
        if name == "python":
            from jgem.envs.tools.python import PythonTool

            built.append(PythonTool(timeout=timeout))
        elif name == "search":
            built.append(_search_tool(search_corpus, search_topk, timeout))
        elif name == "mcp":
            built.append(_mcp_tool(mcp_server, timeout))
        else:
            raise ValueError(f"unknown tool {name!r}; choose from {', '.join(TOOLS)}")
    return built


def add_tools(
    env: Env,
    *,
    tools: tuple[str, ...],
    max_tool_uses: int | None,
    timeout: float,
    search_corpus: str | None = None,
    search_topk: int = 3,
    mcp_server: str | None = None,
    tool_format: str = "gem_tags",
) -> Env:
    """`env` inside a ToolEnv with the named tools, in the order given, called in `tool_format`."""
    from jgem.envs.tools.tool_env import ToolEnv

    built = build_tools(
        tools, timeout=timeout, search_corpus=search_corpus, search_topk=search_topk, mcp_server=mcp_server
    )
    return ToolEnv(env, built, max_tool_uses=max_tool_uses, close_tools=False, tool_format=tool_format)


def tool_schemas(env_cfg: Any) -> list[dict[str, Any]] | None:
    """The JSON schemas the chat template lists for `env_cfg` (an `EnvConfig`): `ChatFormat(..., tools=...)`.
    None with no tools or in the gem_tags format (the tools' instructions are then part of the observation)."""
    from jgem.envs.tools.formats import get_format

    fmt = get_format(env_cfg.tool_format)
    if not env_cfg.tools or not fmt.native:
        return None
    built = build_tools(
        tuple(env_cfg.tools),
        timeout=env_cfg.tool_timeout,
        search_corpus=env_cfg.search_corpus,
        search_topk=env_cfg.search_topk,
        mcp_server=env_cfg.mcp_server,
    )
    return fmt.schemas(built)


def tool_wrapper(env_cfg: Any) -> tuple[Callable[[Env], Env], ...]:
    """The pool wrapper for `env_cfg.tools` (an `EnvConfig`); `()` when it names none."""
    if not env_cfg.tools:
        return ()
    return (
        functools.partial(
            add_tools,
            tools=tuple(env_cfg.tools),
            max_tool_uses=env_cfg.max_tool_uses,
            timeout=env_cfg.tool_timeout,
            search_corpus=env_cfg.search_corpus,
            search_topk=env_cfg.search_topk,
            mcp_server=env_cfg.mcp_server,
            tool_format=env_cfg.tool_format,
        ),
    )
