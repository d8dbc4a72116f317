"""experiments.export: a trained run's policy loads in transformers with jgem's logits."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from experiments import export as export_cli
from jgem.train import Trainer
from jgem.train.loop import params_digest
from tests.train_utils import small_config


@pytest.mark.parity
def test_exported_run_loads_in_transformers_with_the_trained_logits(tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    # a warm-start step moves the params for sure (RL on equal returns may not), so init params would not pass
    cfg = small_config(str(tmp_path / "run"), steps=1, warm_start={"steps": 1, "episodes_per_step": 4})
    trainer = Trainer(cfg)
    init = params_digest(trainer.state.params)
    trainer.run()
    assert params_digest(trainer.state.params) != init
    out = tmp_path / "hf"
    files = export_cli.main([cfg.run_dir, "--out", str(out)])
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {Path(f).name for f in files}

    tok = AutoTokenizer.from_pretrained(out)
    ids = np.array([tok("Guess a number between 1 and 4. \\boxed{3}")["input_ids"]], np.int32)
    hf = AutoModelForCausalLM.from_pretrained(out).eval()
    with torch.no_grad():
        theirs = hf(torch.tensor(ids, dtype=torch.long)).logits.float().numpy()
    ours = np.asarray(trainer.state.model()(ids, np.arange(ids.shape[1])[None])[0])
    np.testing.assert_allclose(theirs, ours, atol=1e-4, rtol=1e-4)
