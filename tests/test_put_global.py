"""`jgem.sharding.rules.put_global` across 2 JAX processes: every input kind ends as an array orbax can save."""

from __future__ import annotations

import pytest

from tests.multiprocess import run_workers


@pytest.mark.multiprocess
def test_put_global_gives_saveable_arrays_from_any_input_across_processes(tmp_path):
    """`jax.device_put` of a process-local jax.Array onto a sharding spanning processes gave arrays whose
    `addressable_shards` raised, so orbax could not save them (the warm start's checkpoint crash of issue 31);
    arrays spanning processes already (load_pretrained's) must pass through too (they crashed the first fix)."""
    results = run_workers("tests.put_global_worker", [tmp_path / f"p{i}.json" for i in range(2)], devices=1)
    for r in results:
        assert r.pop("restored_equal") is True
        assert len(r) == 10
        for key, row in r.items():
            assert row["equal"], key
            assert row["shards"] == 1, key  # one device a process: one addressable shard each
            assert ("spec=P('data'" in row["spec"]) == key.endswith("-data"), (key, row["spec"])
