"""A small HTTP search service so many env pools share one BM25 index (stdlib http.server).

    python -m jgem.envs.tools.search_server --corpus corpus.jsonl --port 8765

POST /search {"query": str, "k": int} -> {"passages": [{"title", "text", "score"}]}; GET /health.
Point `SearchTool("http://host:8765")` at it.
"""

from __future__ import annotations

import argparse
import json
import threading
from dataclasses import asdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from jgem.envs.tools.search import DEFAULT_CORPUS, BM25Index

MAX_K = 100
MAX_BODY = 1 << 20


def _handler(index: BM25Index) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _send(self, code: int, payload: dict) -> None:
            body = json.dumps(payload).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802
            if self.path == "/health":
                self._send(200, {"ok": True, "passages": len(index)})
            else:
                self._send(404, {"error": f"no route {self.path}; use POST /search or GET /health"})

        def do_POST(self) -> None:  # noqa: N802
            if self.path != "/search":
                self._send(404, {"error": f"no route {self.path}; use POST /search"})
                return
            n = int(self.headers.get("Content-Length") or 0)
            if n > MAX_BODY:
                self._send(413, {"error": f"request body over {MAX_BODY} bytes"})
                return
            try:
                req = json.loads(self.rfile.read(n))
                query, k = str(req["query"]), int(req.get("k", 3))
            except (ValueError, KeyError, TypeError) as e:
                self._send(400, {"error": f'expected JSON {{"query": str, "k": int}}: {e}'})
                return
            passages = index.search(query, max(0, min(k, MAX_K)))
            self._send(200, {"passages": [asdict(p) for p in passages]})

        def log_message(self, format: str, *args: object) -> None:  # quiet: one line per query is noise
            pass

    return Handler


class SearchServer:
    """A running service; `url` is what SearchTool takes. Use as a context manager or call close()."""

    def __init__(self, index: BM25Index, host: str = "127.0.0.1", port: int = 0) -> None:
        self._httpd = ThreadingHTTPServer((host, port), _handler(index))
        self._httpd.daemon_threads = True
        self.url = f"http://{host}:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="jgem-search", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> SearchServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Serve a BM25 index over HTTP.")
    ap.add_argument("--corpus", default=str(DEFAULT_CORPUS), help="JSONL with title/text fields")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8765)
    ap.add_argument("--cache-dir", default=None)
    args = ap.parse_args(argv)
    index = BM25Index.from_jsonl(args.corpus, cache_dir=args.cache_dir)
    httpd = ThreadingHTTPServer((args.host, args.port), _handler(index))
    print(json.dumps({"url": f"http://{args.host}:{httpd.server_address[1]}", "passages": len(index)}), flush=True)
    httpd.serve_forever()


if __name__ == "__main__":
    main()
