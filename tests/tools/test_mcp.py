"""MCP tool against the shipped demo server, started as a real subprocess (stdio and HTTP)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest

from jgem.envs.tools.mcp import MCPTool, StdioServer, parse_tool_call

pytestmark = pytest.mark.slow  # each server start imports the mcp SDK (seconds on a busy CPU)
SERVER = ("-m", "jgem.envs.tools.mcp_servers.demo_server")


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _start_http(port: int) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, *SERVER, "--http", "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("the demo MCP server did not start")


def call(name: str, **arguments) -> str:
    import json

    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def test_parse_tool_call_forms():
    assert parse_tool_call('x <tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call>').arguments == {"a": 1}
    gem = parse_tool_call('<tool_call><tool_name>add</tool_name><arguments>{"a": 2}</arguments></tool_call>')
    assert (gem.name, gem.arguments) == ("add", {"a": 2})
    assert parse_tool_call("<tool_call>{oops}</tool_call>").error.startswith("the <tool_call> is not valid JSON")
    assert parse_tool_call("no call") is None


@pytest.fixture(scope="module")
def stdio_tool():
    tool = MCPTool(StdioServer(sys.executable, SERVER), timeout=2.0)
    yield tool
    tool.close()


def test_stdio_discovery_calls_and_validation(stdio_tool):
    tool = stdio_tool
    assert {"add", "calculate", "now", "kv_set", "kv_get", "kv_list", "sleep"} <= set(tool.tools)
    assert '"name": "calculate"' in tool.instruction()
    assert tool(call("add", a=2, b=3)).text == "\n<tool_response>\n5.0\n</tool_response>\n"
    assert "1023" in tool(call("calculate", expression="2**10 - 1")).text
    assert tool(call("kv_set", key="color", value="teal")).ok
    assert "teal" in tool(call("kv_get", key="color")).text
    missing = tool(call("kv_get", key="nope"))
    assert not missing.ok and "no key 'nope'" in missing.text
    bad = tool(call("add", a="two", b=3))  # rejected by the schema before any call
    assert not bad.ok and "invalid arguments for 'add' at a" in bad.text
    assert "required property" in tool(call("add", a=1)).text
    assert "unknown tool 'nope'" in tool(call("nope")).text
    assert tool(call("now", utc_offset_hours=0)).text.count("T") == 1


def test_stdio_timeout_does_not_break_the_session(stdio_tool):
    t = time.monotonic()
    res = stdio_tool(call("sleep", seconds=10))
    assert not res.ok and "no result within 2.0 s" in res.text and time.monotonic() - t < 5
    assert stdio_tool(call("add", a=1, b=1)).ok


def test_http_server_and_reconnect_after_restart():
    port = _free_port()
    proc = _start_http(port)
    tool = None
    try:
        tool = MCPTool(f"http://127.0.0.1:{port}/mcp", timeout=5.0, max_retries=2, retry_delay=0.2)
        assert tool(call("add", a=1, b=2)).text == "\n<tool_response>\n3.0\n</tool_response>\n"
        proc.kill()
        proc.wait()
        proc = _start_http(port)  # the old session is gone: the tool reconnects and retries
        assert "7.0" in tool(call("add", a=3, b=4)).text
    finally:
        if tool is not None:
            tool.close()
        proc.kill()
        proc.wait()


def test_connect_failure_says_where():
    with pytest.raises(ConnectionError, match="cannot connect to MCP server"):
        MCPTool(f"http://127.0.0.1:{_free_port()}/mcp", connect_timeout=5.0)
