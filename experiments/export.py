"""Export a trained policy as an HF checkpoint: `python -m experiments.export RUN_DIR_OR_CHECKPOINT --out DIR
[--dtype bfloat16]`.

RUN_DIR exports the run's latest checkpoint; RUN_DIR/checkpoints/STEP that step. DIR gets config.json,
safetensors weights (jgem.models.hf.save_pretrained) and the run's tokenizer files, so
`transformers.AutoModelForCausalLM.from_pretrained(DIR)` and `AutoTokenizer.from_pretrained(DIR)` load it
(and `--model.path DIR` trains on from it). A LoRA run's adapters are merged into the weights they adapt,
W + (alpha / rank) A B, so DIR holds a plain model of the base's shapes. A run of several policies (LoRA adapters on
one base, `--rollout.policies`) writes each policy's model to DIR/policy<P>, or `--adapter P`'s alone to DIR. The
critic (PPO) is not exported.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path


def export(path: str | Path, out: str | Path, *, dtype: str | None = None, adapter: int | None = None) -> list[str]:
    """Writes the checkpoint's policy to `out` (several policies: each to `out`/policy<P>, or `adapter`'s to `out`);
    returns the files written (under `out`)."""
    from experiments.eval import load_run
    from jgem.models.hf import save_pretrained
    from jgem.models.tokenizer import load_tokenizer

    run, step = load_run(path)
    cfg = run.cfg.model
    policies = run.model_cfg.lora.policies
    if adapter is not None and not 0 <= adapter < policies:
        run.close()
        raise ValueError(f"--adapter {adapter}: the run at {path} has {policies} policies (0..{policies - 1})")
    if adapter is None and policies > 1:
        outs = {p: Path(out) / f"policy{p}" for p in range(policies)}
    else:
        outs = {adapter if policies > 1 else None: Path(out)}
    files = []
    try:
        tokenizer = load_tokenizer(cfg.tokenizer_path or cfg.path)
        model = run.state.model()
        for p, where in outs.items():
            written = save_pretrained(model, run.model_cfg, where, dtype=dtype, adapter=p)
            written += list(tokenizer.save_pretrained(str(where)))
            files += [str(Path(where).relative_to(out) / Path(f).name) if where != Path(out) else f for f in written]
    finally:
        run.close()
    print(f"exported step {step} of {path} to {', '.join(map(str, outs.values()))}")
    return files


def main(argv: Sequence[str] | None = None) -> list[str]:
    parser = argparse.ArgumentParser(prog="python -m experiments.export", description=__doc__.split("\n\n")[1])
    parser.add_argument("path", help="a run directory (latest checkpoint) or RUN_DIR/checkpoints/STEP")
    parser.add_argument("--out", required=True, help="the HF checkpoint directory to write")
    parser.add_argument("--dtype", help="convert the weights, e.g. bfloat16; default: the param dtype")
    parser.add_argument(
        "--adapter", type=int, help="a run of several policies: export policy ADAPTER's model alone (default: each)"
    )
    parser.add_argument("--import", dest="imports", action="append", default=[], help="import MODULE first")
    args = parser.parse_args(argv)
    from experiments.train import fail
    from jgem.config import ConfigError
    from jgem.registry import import_modules

    try:
        import_modules(args.imports)
        return export(args.path, args.out, dtype=args.dtype, adapter=args.adapter)
    except ConfigError as e:  # the run's config cannot be built here (e.g. its --import module is missing)
        fail(
            e.render(
                lambda p: "--import" if p == "env.imports" else f"the run's {p}", header=f"cannot export {args.path}:"
            )
        )
    except (FileNotFoundError, ImportError, ValueError) as e:
        fail(str(e))


if __name__ == "__main__":
    main()
