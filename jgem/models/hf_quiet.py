"""Import before the first `import transformers`: drops its notice that PyTorch is missing, nothing else.

transformers logs "PyTorch was not found. Models won't be available ..." at import when torch is absent; jgem uses
its tokenizers and configs only (the models are jgem's own, in JAX), so the notice is noise on every command. Its
other warnings pass through.
"""

from __future__ import annotations

import logging

NOTICE = "PyTorch was not found."


class _NoTorchNotice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(NOTICE)


def install() -> None:
    """Filter the notice out of the `transformers` logger (the one that logs it); idempotent."""
    logger = logging.getLogger("transformers")
    if not any(isinstance(f, _NoTorchNotice) for f in logger.filters):
        logger.addFilter(_NoTorchNotice())


install()
