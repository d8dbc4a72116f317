"""Envs over HTTP: `jgem-serve` (server.py) and its clients (client.py). The bearer token both sides use comes
from a file (first line) or the `JGEM_SERVE_TOKEN` environment variable, never from a config that is saved."""

from __future__ import annotations

from pathlib import Path

TOKEN_ENV = "JGEM_SERVE_TOKEN"


def read_token_file(path: str | Path) -> str:
    """The bearer token in the first line of `path`, stripped; a ValueError when it cannot be read or is empty
    (the message names the file, never its contents)."""
    try:
        lines = Path(path).expanduser().read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise ValueError(f"cannot read a token from {str(path)!r} ({e.strerror or type(e).__name__})") from None
    except UnicodeDecodeError:
        raise ValueError(f"cannot read a token from {str(path)!r} (not UTF-8 text)") from None
    token = (lines or [""])[0].strip()
    if not token:
        raise ValueError(f"{str(path)!r} is empty; its first line must be the token")
    return token
