"""bench/roofline.py's measurements on the tiny model at small sizes: the machine's limits are positive, each program's
fractions of them are in (0, 3] (1 is the limit; load moves a timed fraction), and XLA's cost analysis agrees
with the model's FLOP count within a sane factor (a count per device gone wrong, a loop counted the wrong number
of times, or zero bytes would fail)."""

import importlib.util
from pathlib import Path

import pytest
from flax import nnx

from jgem.models.config import preset
from jgem.models.transformer import Transformer

_PATH = Path(__file__).resolve().parents[1] / "bench" / "roofline.py"


@pytest.fixture(scope="module")
def roofline():
    spec = importlib.util.spec_from_file_location("bench_roofline", _PATH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _check(row: dict) -> None:
    # timed fractions: the machine is measured in this test too, and under the suite's load a measurement and a row
    # may each get one core or two (a contended run gave 1.1): above 3 is a count gone wrong, not load
    for k in ("frac_flops", "frac_bw", "frac_roofline", "xla_frac_flops"):
        assert 0 < row[k] <= 3, (k, row[k], row)
    # XLA's bytes count cache-resident operands too (the tiny model fits in the L3): they may pass DRAM's rate
    assert 0 < row["xla_frac_bw"] <= 5, row
    assert row["bound"] in ("compute", "memory")
    assert row["model_bytes"] > 0 and row["step_s"] > 0
    # XLA counts the same matmuls (plus norms, softmax, sampling or the optimizer): within 0.8x .. 2x of the model
    assert 0.8 <= row["xla_over_model_flops"] <= 2.0, row
    # XLA's bytes accessed include every operand: at least the fewest bytes, and not absurdly more
    assert 0.8 <= row["xla_over_model_bytes"] <= 100, row


def test_roofline_tiny(roofline):
    machine = roofline.measure_machine(stream_mib=32, matmul_n=512, reps=2)
    assert machine["bandwidth_gb_s"] > 0 and machine["peak_gflops"] > 0 and machine["xla_threads"] >= 1
    # a 512^3 matmul's peak is low: keep the higher of it and a 1024^3 one's (the rows' fractions are against it)
    machine = roofline.merge_machine(machine, roofline.measure_machine(stream_mib=32, matmul_n=1024, reps=2))
    assert len(machine["peak_gflops_all"]) == 2 and machine["peak_gflops"] == max(machine["peak_gflops_all"])
    cfg = preset("tiny")
    model = Transformer(cfg, rngs=nnx.Rngs(0))

    dec = roofline.decode_row(cfg, model, 4, prompt_len=16, new_tokens=16, chunk_steps=4, reps=2)
    dec = roofline.with_fractions(dec, machine)
    _check(dec)
    assert "?" in dec["xla_loops"]  # the chunk's loop: XLA costs its body once, one step
    assert dec["model_bytes"] >= cfg.num_params * 4  # one decode step reads at least the weights

    tr = roofline.with_fractions(roofline.train_row(cfg, model, batch=2, seq=64, reps=1), machine)
    _check(tr)
    # no loop of unknown length (known ones here: threefry's 5 rounds, and at the tests' XLA optimisation level 0 the
    # embedding gradient's scatter-add expanded to one trip per token: additions only, no matmul XLA counts once)
    assert "?" not in tr["xla_loops"], tr["xla_loops"]
    assert tr["model_flops"] > dec["model_flops"]
    assert "train" in roofline.table(machine, [dec, tr])
