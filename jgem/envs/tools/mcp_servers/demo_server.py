"""A small MCP server: calculator, clock and key-value store (stdio or streamable HTTP).

python -m jgem.envs.tools.mcp_servers.demo_server                      # stdio
python -m jgem.envs.tools.mcp_servers.demo_server --http --port 8931   # http://127.0.0.1:8931/mcp
"""

from __future__ import annotations

import argparse
import ast
import datetime as dt
import operator
import time

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("jgem-demo", instructions="Calculator, clock and a key-value store.", log_level="WARNING")
_store: dict[str, str] = {}
_OPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
}


def _eval(node: ast.AST) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > 100:
            raise ValueError("exponent too large (limit 100)")
        return _OPS[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_eval(node.operand))
    raise ValueError(f"unsupported expression element: {type(node).__name__}")


@server.tool()
def add(a: float, b: float) -> float:
    """Add two numbers."""
    return a + b


@server.tool()
def calculate(expression: str) -> str:
    """Evaluate an arithmetic expression with + - * / // % ** and parentheses."""
    try:
        return str(_eval(ast.parse(expression, mode="eval").body))
    except (SyntaxError, ValueError, ZeroDivisionError, OverflowError) as e:
        raise ToolError(f"cannot evaluate {expression!r}: {e}") from None


@server.tool()
def now(utc_offset_hours: int = 0) -> str:
    """The current time as ISO 8601, at a UTC offset in hours."""
    tz = dt.timezone(dt.timedelta(hours=utc_offset_hours))
    return dt.datetime.now(tz).isoformat(timespec="seconds")


@server.tool()
def sleep(seconds: float) -> str:
    """Wait `seconds` (at most 30), then say so. For testing timeouts."""
    time.sleep(min(seconds, 30.0))
    return f"slept {seconds} s"


@server.tool()
def kv_set(key: str, value: str) -> str:
    """Store `value` under `key`."""
    _store[key] = value
    return "ok"


@server.tool()
def kv_get(key: str) -> str:
    """The value stored under `key`."""
    if key not in _store:
        raise ToolError(f"no key {key!r}; stored keys: {sorted(_store)}")
    return _store[key]


@server.tool()
def kv_list() -> list[str]:
    """All stored keys, sorted."""
    return sorted(_store)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--http", action="store_true", help="serve streamable HTTP instead of stdio")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8931)
    args = ap.parse_args(argv)
    if args.http:
        server.run("streamable-http", host=args.host, port=args.port, streamable_http_path="/mcp")
    else:
        server.run("stdio")


if __name__ == "__main__":
    main()
