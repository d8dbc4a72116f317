"""The import structure: configs and the package root load no jax-heavy module, and the import contracts hold
(`.importlinter`: layers from experiments down to jgem.core, no import cycle anywhere)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("jax", "optax", "flax", "orbax", "transformers")


@pytest.mark.parametrize(
    "module",
    [
        "jgem",
        "jgem.config",
        "jgem.algos.config",
        "jgem.rollout.config",
        "jgem.models.config",
        "jgem.sharding.config",
        "jgem.registry",
    ],
)
def test_configs_and_the_package_root_load_no_heavy_module(module: str) -> None:
    """A fresh interpreter (what is loaded depends on what was imported before, so not this one)."""
    code = f"import sys, {module}; print(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", f"import {module} loaded {out.stdout.strip()}"


def test_the_import_contracts_hold() -> None:
    pytest.importorskip("importlinter", reason="import-linter is in the dev extra: pip install -e '.[dev]'")
    code = "import sys; from importlinter.cli import lint_imports; sys.exit(lint_imports(no_cache=True, no_logo=True))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]


def test_a_run_on_the_shipped_tokenizer_imports_no_pytorch(tmp_path) -> None:
    """The trainer, the shipped tokenizer and the TensorBoard writer load without PyTorch where it is installed (the
    parity extra): `AutoTokenizer` pulls transformers' model configs and with them PyTorch, and tensorboardX's writer
    imports it to accept torch tensors; each costs about 5 s of every training process's start-up. A tokenizer whose
    config names the generic fast class loads without it, and jgem.metrics imports tensorboardX without it."""
    pytest.importorskip("torch", reason="only meaningful where PyTorch is installed (the parity extra)")
    code = (
        "import sys, jgem.train\n"
        "from jgem.models.tokenizer import load_tokenizer\n"
        "from jgem.metrics import MetricsLogger\n"
        "tok = load_tokenizer()\n"
        f"log = MetricsLogger({str(tmp_path)!r}, console=False)\n"
        "log.log(0, {'loss': 1.5}); log.close()\n"
        "print(type(tok).__name__, 'torch' in sys.modules)\n"
        "import torch  # and a user's own `import torch` still works afterwards\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split()[-1] == "False", out.stdout
    assert list((tmp_path / "tb").glob("events.out.tfevents.*")), "no TensorBoard event file written"
