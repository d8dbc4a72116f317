"""MCP tool: calls tools of an MCP server (stdio subprocess or streamable HTTP) via the `mcp` SDK.

The agent writes `<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>` (GEM's
`<tool_name>`/`<arguments>` form works too). Tools are discovered once, at connection; arguments
are validated against each tool's JSON schema before the call; calls have a timeout and transport
failures are retried on a fresh connection. The reply is `<tool_response>...</tool_response>`.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections.abc import Sequence
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any

from jgem.envs.tools.base import Tool, ToolResult, argument_problem, function_schema

_JSON_CALL = re.compile(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", re.DOTALL)
_XML_CALL = re.compile(
    r"<tool_call>\s*<tool_name>([^<]+)</tool_name>\s*<arguments>(.*?)</arguments>\s*</tool_call>", re.DOTALL
)
_ANY_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_REQUEST_TIMEOUT = -32001  # JSON-RPC codes (mcp_types.jsonrpc): kept literal so importing this module stays light
# Parse error, no such method, invalid params. Not -32600 (invalid request): the SDK reports an expired
# HTTP session (404) with it, and the cure for that is a new session.
_CALL_ERRORS = {-32700, -32601, -32602}


@dataclass(frozen=True)
class StdioServer:
    """An MCP server started as a subprocess that speaks over stdin/stdout."""

    command: str
    args: tuple[str, ...] = ()
    env: dict[str, str] | None = field(default=None, hash=False)
    cwd: str | None = None


@dataclass(frozen=True)
class MCPCall:
    name: str
    arguments: dict[str, Any]
    error: str | None = None  # set when the tag was there but its content was unusable


def parse_tool_call(action: str) -> MCPCall | None:
    """The first `<tool_call>` of the action, or None when there is none."""
    m = _ANY_CALL.search(action)
    if m is None:
        return None
    xml = _XML_CALL.match(action, m.start())
    if xml is not None:
        name, raw = xml.group(1).strip(), xml.group(2)
    else:
        raw = m.group(1)
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as e:
            return MCPCall("", {}, f"the <tool_call> is not valid JSON ({e.msg} at char {e.pos})")
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
            return MCPCall("", {}, 'a <tool_call> must be {"name": <tool name>, "arguments": {...}}')
        name, raw = obj["name"], obj.get("arguments", {})
    if isinstance(raw, str):
        try:
            raw = json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError as e:
            return MCPCall(name, {}, f"the arguments of {name!r} are not valid JSON ({e.msg})")
    if not isinstance(raw, dict):
        return MCPCall(name, {}, f"the arguments of {name!r} must be a JSON object")
    return MCPCall(name, raw)


def _result(body: str, ok: bool) -> ToolResult:
    """GEM's reply (`body` inside <tool_response>) for the tag format; `body` alone for a native tool message."""
    return ToolResult(f"\n<tool_response>\n{body}\n</tool_response>\n", ok=ok, content=body)


class MCPTool(Tool):
    """Connects on construction (tool discovery happens then) and keeps the session open.

    `server`: a URL (streamable HTTP, e.g. "http://127.0.0.1:8931/mcp") or a StdioServer.
    `tools`: only expose these tool names (default: all the server lists).
    """

    name = "mcp"

    def __init__(
        self,
        server: str | StdioServer,
        timeout: float = 30.0,
        max_retries: int = 2,
        retry_delay: float = 0.5,
        connect_timeout: float = 30.0,
        tools: Sequence[str] | None = None,
    ) -> None:
        self.server = server
        self.timeout = timeout
        self.max_retries = max_retries
        self.retry_delay = retry_delay
        self.connect_timeout = connect_timeout
        self._only = set(tools) if tools is not None else None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="jgem-mcp", daemon=True)
        self._thread.start()
        self._client: Any = None
        self._stop: asyncio.Event | None = None
        self._closed = False
        self.tools: dict[str, dict[str, Any]] = {}  # name -> {"description", "input_schema"}
        self._connect()

    # -- connection (runs on the tool's own event loop thread) ----------------------------------
    def _run(self, coro: Any, timeout: float) -> Any:
        fut = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return fut.result(timeout)
        except FutureTimeout:
            fut.cancel()
            raise TimeoutError(f"no answer from the MCP server within {timeout} s") from None

    def _connect(self) -> None:
        started = threading.Event()
        error: list[BaseException] = []

        async def hold() -> None:
            from mcp import Client, StdioServerParameters

            if isinstance(self.server, StdioServer):
                target: Any = StdioServerParameters(
                    command=self.server.command, args=list(self.server.args), env=self.server.env, cwd=self.server.cwd
                )
            else:
                target = self.server
            self._stop = asyncio.Event()
            try:
                # The handshake waits for the server to start (an import can take seconds); calls use `timeout`.
                async with Client(target, read_timeout_seconds=self.connect_timeout, mode="legacy") as client:
                    self._client = client
                    await self._discover(client)
                    started.set()
                    await self._stop.wait()
            except BaseException as e:  # reported to the caller of _connect, or ends a dead session
                error.append(e)
            finally:
                self._client = None
                started.set()

        self._session_task = asyncio.run_coroutine_threadsafe(hold(), self._loop)
        if not started.wait(self.connect_timeout) or self._client is None:
            cause = error[0] if error else TimeoutError(f"no handshake within {self.connect_timeout} s")
            self._disconnect()
            raise ConnectionError(f"cannot connect to MCP server {self.server!r}: {cause!r}") from cause

    async def _discover(self, client: Any) -> None:
        tools: dict[str, dict[str, Any]] = {}
        cursor = None
        while True:
            listing = await client.list_tools(cursor=cursor)
            for t in listing.tools:
                if self._only is None or t.name in self._only:
                    tools[t.name] = {"description": t.description or "", "input_schema": t.input_schema or {}}
            cursor = listing.next_cursor
            if not cursor:
                break
        if self._only is not None and self._only - set(tools):
            raise ValueError(f"the server has no tool(s) {sorted(self._only - set(tools))}; it has {sorted(tools)}")
        if not self.tools:
            self.tools = tools

    def _disconnect(self) -> None:
        if self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        try:
            self._session_task.result(timeout=10)
        except Exception:
            self._session_task.cancel()

    # -- Tool protocol --------------------------------------------------------------------------
    def instruction(self) -> str:
        specs = "\n".join(
            json.dumps({"name": n, "description": t["description"], "parameters": t["input_schema"]})
            for n, t in sorted(self.tools.items())
        )
        return (
            "You can call tools. To call one, write exactly one\n"
            '<tool_call>{"name": "<tool name>", "arguments": {<arguments as JSON>}}</tool_call>\n'
            "and the result comes back inside <tool_response>...</tool_response>. Available tools:\n"
            f"<tools>\n{specs}\n</tools>"
        )

    def parse(self, action: str) -> MCPCall | None:
        return parse_tool_call(action)

    def functions(self) -> list[dict[str, Any]]:
        return [function_schema(n, t["description"], t["input_schema"]) for n, t in sorted(self.tools.items())]

    def invoke(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        return self.execute(MCPCall(name, arguments))

    def validate(self, call: MCPCall) -> str | None:
        """Why `call` cannot be sent, or None if it matches the tool's schema."""
        if call.error:
            return call.error
        spec = self.tools.get(call.name)
        if spec is None:
            return f"unknown tool {call.name!r}; available tools: {', '.join(sorted(self.tools))}"
        return argument_problem(call.name, call.arguments, spec["input_schema"])

    def execute(self, call: MCPCall) -> ToolResult:
        problem = self.validate(call)
        if problem is not None:
            return _result(f"Error: {problem}", ok=False)
        last: BaseException | None = None
        for attempt in range(self.max_retries + 1):
            if self._closed:
                break
            try:
                if self._client is None:
                    self._connect()
                result = self._run(
                    self._client.call_tool(call.name, call.arguments, read_timeout_seconds=self.timeout),
                    self.timeout + 1.0,
                )
                return self._format(result)
            except Exception as e:
                code = getattr(getattr(e, "error", None), "code", None)
                if isinstance(e, TimeoutError) or code == _REQUEST_TIMEOUT:
                    # A slow tool stays slow: do not run it again.
                    return _result(f"Error: no result within {self.timeout} s", ok=False)
                if code in _CALL_ERRORS:  # the server rejected this call: retrying cannot help
                    return _result(f"Error: {e}", ok=False)
                last = e  # transport trouble (server restarted, connection dropped): reconnect, retry
                self._disconnect()
                if attempt < self.max_retries:
                    time.sleep(self.retry_delay * (attempt + 1))
        return _result(f"Error: MCP call failed: {last}", ok=False)

    @staticmethod
    def _format(result: Any) -> ToolResult:
        parts = []
        for block in result.content:
            text = getattr(block, "text", None)
            parts.append(text if text is not None else f"[{getattr(block, 'type', 'content')}]")
        if not parts and result.structured_content is not None:
            parts.append(json.dumps(result.structured_content))
        body = "\n".join(parts)
        ok = not result.is_error
        return _result(body if ok else f"Error: {body}", ok=ok)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._disconnect()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)

    def __getstate__(self) -> dict[str, Any]:
        raise TypeError("an MCPTool holds a live connection; build it inside the process that uses it")
