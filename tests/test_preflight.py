"""Config mistakes a new user made (issue 49): each is one `error:` line naming the flag, met before the mesh, the
model or the env pool is built; a pipeline that cannot play ahead is a warning naming both numbers."""

from __future__ import annotations

import logging
import re
import shlex
import time
from pathlib import Path

import pytest

from experiments import train as train_cli
from jgem.config import TrainConfig, pipeline_warnings
from jgem.core import Env
from jgem.registry import register
from tests.test_cli_errors import _fails

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def nothing_built(monkeypatch):
    """Fails the test if the run gets as far as its mesh or its model."""
    import jgem.train.run

    def built(*args, **kwargs):
        raise AssertionError("the run built its mesh or model before refusing the config")

    monkeypatch.setattr(jgem.train.run, "split_meshes", built)
    monkeypatch.setattr(jgem.train.run, "build_models", built)


def _refused(argv: list[str], capsys) -> str:
    """The CLI's error for `argv`, checked to be the message alone (no traceback) and to come within seconds."""
    t0 = time.perf_counter()
    err = _fails(argv, capsys)
    assert time.perf_counter() - t0 < 30
    return err


def test_an_unwritable_run_dir_is_refused_before_anything_is_built(tmp_path, capsys, nothing_built) -> None:
    (tmp_path / "a-file").write_text("")
    run_dir = tmp_path / "a-file" / "run"
    err = _refused(["tiny", "--run-dir", str(run_dir)], capsys)
    assert f"--run-dir {run_dir} is inside {tmp_path / 'a-file'}, which is not a directory" in err
    assert "NotADirectoryError" not in err


def test_an_unwritable_run_dir_comes_with_the_configs_other_errors(tmp_path, capsys, nothing_built) -> None:
    (tmp_path / "a-file").write_text("")
    err = _refused(["tiny", "--run-dir", str(tmp_path / "a-file"), "--learner.lr", "nan"], capsys)
    assert "--learner.lr is nan" in err and f"--run-dir {tmp_path / 'a-file'} is not a directory" in err


def test_a_tool_format_the_chat_template_cannot_show_is_one_error(tmp_path, capsys, nothing_built) -> None:
    """The tiny tokenizer's template does not render tools=: hermes would hide the tools from the model."""
    run_dir = tmp_path / "run"
    args = ["tiny", "--run-dir", str(run_dir), "--env.tools", "python", "--env.tool-format", "hermes"]
    err = _refused(args, capsys)
    assert "--env.tool-format hermes with --model.tokenizer-path None (the tiny tokenizer): the chat template" in err
    assert "does not list the tools" in err and "--env.tool-format gem_tags" in err
    assert not run_dir.exists()


def test_a_token_budget_the_first_prompt_fills_is_refused_before_the_model(tmp_path, capsys, nothing_built) -> None:
    run_dir = tmp_path / "run"
    err = _refused(["tiny", "--run-dir", str(run_dir), "--rollout.max-episode-tokens", "40"], capsys)
    m = re.search(r"the first prompt of game:GuessTheNumber-v0-easy \(seed 0\) has (\d+) tokens", err)
    assert m is not None and int(m.group(1)) + 12 > 40
    assert "no room for --rollout.max-new-tokens 12 within --rollout.max-episode-tokens 40" in err
    assert "raise --rollout.max-episode-tokens" in err and "max_episode_tokens" not in err
    assert not run_dir.exists()


def test_a_remote_envs_first_prompt_is_checked_with_one_reset_on_its_server(tmp_path, capsys, nothing_built) -> None:
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    from tests.agentgym.conftest import TOKEN, Server

    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    server = Server()
    try:
        args = [
            "tiny", "--run-dir", str(tmp_path / "run"), "--warm-start.steps", "0",
            "--env.env-id", "test:Count-v0", "--env.backend", "remote", "--env.remote-urls", server.url,
            "--env.remote-token-file", str(token),
            "--rollout.max-new-tokens", "4", "--rollout.max-episode-tokens", "8",
        ]  # fmt: skip
        err = _refused(args, capsys)
    finally:
        server.stop()
    assert "the first prompt of test:Count-v0 (seed 0) has" in err
    assert "no room for --rollout.max-new-tokens 4 within --rollout.max-episode-tokens 8" in err


class ShortFirstEnv(Env):
    """Seed 0 (the run's first, which the preflight resets) opens with a short observation, every other seed with a
    long one: only the rollout engine meets a first prompt that does not fit."""

    def reset(self, seed: int | None = None):
        super().reset(seed)
        return "go" if seed == 0 else "go" + " word" * 300, {}

    def step(self, action: str):
        return "done", 0.0, True, False, {}


def test_the_engines_first_prompt_refusal_is_one_error_naming_the_flags(tmp_path, capsys) -> None:
    register("test-preflight:ShortFirst-v0", "tests.test_preflight:ShortFirstEnv", overwrite=True)
    args = [
        "tiny", "--run-dir", str(tmp_path / "run"), "--env.env-id", "test-preflight:ShortFirst-v0",
        "--warm-start.steps", "0", "--eval-every", "0", "--steps", "1", "--episodes-per-step", "2",
        "--env.num-envs", "2", "--rollout.max-episode-tokens", "128", "--no-plot", "--no-console",
    ]  # fmt: skip
    err = _fails(args, capsys)
    assert re.search(r"the first prompt of episode 1 has \d+ tokens \(test-preflight:ShortFirst-v0, seed 1\)", err)
    assert "no room for --rollout.max-new-tokens 12 within --rollout.max-episode-tokens 128" in err
    assert "raise --rollout.max-episode-tokens" in err and "ValueError" not in err


@pytest.mark.parametrize(
    ("mode", "flags", "warned"),
    [
        ("async", ["--env.num-envs", "8"], "--env.num-envs 64 ((1 + --pipeline.max-staleness 1) x 32)"),
        ("stream", ["--env.num-envs", "8", "--pipeline.max-staleness", "2"], "--env.num-envs 96"),
        ("off_policy", ["--env.num-envs", "16"], "--env.num-envs 64 ((1 + --pipeline.lag 1) x 32)"),
        ("async", ["--env.num-envs", "32"], None),  # as many envs as episodes: the freed ones play ahead
        ("async", ["--env.num-envs", "8", "--pipeline.max-staleness", "0"], None),  # the same as sync
        ("sync", ["--env.num-envs", "8"], None),
    ],
)
def test_a_pipeline_without_envs_to_play_ahead_is_warned_of(mode, flags, warned, tmp_path, caplog) -> None:
    """Logged as the run starts, before its mesh (the patched one stops the run there)."""
    import jgem.train.run

    cfg = train_cli.parse(["tiny", "--run-dir", str(tmp_path / "run"), "--pipeline.mode", mode, *flags])

    class Built(Exception):
        pass

    def built(*args, **kwargs):
        raise Built

    with pytest.MonkeyPatch.context() as mp, caplog.at_level(logging.WARNING, logger="jgem.train.run"):
        mp.setattr(jgem.train.run, "split_meshes", built)
        with pytest.raises(Built):
            jgem.train.run.Run(cfg)
    lines = [r.getMessage() for r in caplog.records if "--pipeline.mode" in r.getMessage()]
    if warned is None:
        assert lines == []
    else:
        (line,) = lines
        envs = flags[1]
        assert f"--pipeline.mode {mode} with --env.num-envs {envs}, fewer than --episodes-per-step 32" in line
        assert warned in line and "\n" not in line


def test_pipeline_warnings_name_fields_for_python_callers() -> None:
    from jgem.config import EnvConfig, PipelineConfig

    cfg = TrainConfig(env=EnvConfig(num_envs=4), episodes_per_step=8, pipeline=PipelineConfig(mode="async"))
    (line,) = pipeline_warnings(cfg)
    assert "env.num_envs 4, fewer than episodes_per_step 8" in line and "env.num_envs 16" in line


def test_the_documented_remote_commands_budget_fits_babyais_first_prompts() -> None:
    """docs/services.md's training command (BabyAI over env servers) once died at its first episodes: BabyAI's first
    prompts (up to ~730 tokens with the tiny tokenizer) outgrew the tiny preset's 512-token episodes."""
    pytest.importorskip("minigrid")
    import jgem
    from jgem.models.tokenizer import load_tokenizer
    from jgem.rollout.views import first_prompt
    from jgem.train.run import chat_format, pool_wrappers

    text = (ROOT / "docs" / "services.md").read_text()
    (cmd,) = [c for c in re.findall(r"```bash\n(.*?)```", text, re.S) if "experiments.train" in c]
    words = shlex.split(cmd.replace("\\\n", " "))
    cfg = train_cli.parse(words[words.index("experiments.train") + 1 :])
    chat = chat_format(cfg, load_tokenizer(cfg.model.tokenizer_path))
    env = jgem.make(cfg.env.env_id)
    for wrap in pool_wrappers(cfg.env, cfg.rollout):
        env = wrap(env)
    longest = max(len(first_prompt(chat, cfg.rollout.view, env.reset(seed=s)[0])[0]) for s in range(200))
    assert longest + cfg.rollout.max_new_tokens <= cfg.rollout.max_episode_tokens // 2  # room for a few turns too


def _rewriting_tokenizer(tmp_path: Path) -> Path:
    """The tiny tokenizer with Qwen3's template, thinking off for good: every generation prompt ends with an empty
    think block that the renders of later turns drop (not append-only)."""
    import json
    import shutil

    from jgem.models.tokenizer import TINY_TOKENIZER_DIR
    from tests.tools.native_tools import TEMPLATES

    d = tmp_path / "tokenizer"
    shutil.copytree(TINY_TOKENIZER_DIR, d)
    template = (TEMPLATES / "qwen3.jinja").read_text()
    off = "{%- if enable_thinking is defined and enable_thinking is false %}"
    assert off in template
    config = json.loads((d / "tokenizer_config.json").read_text())
    config["chat_template"] = template.replace(off, "{%- if true %}")
    (d / "tokenizer_config.json").write_text(json.dumps(config))
    return d


def test_the_chat_view_with_a_template_it_cannot_follow_is_one_error(tmp_path, capsys, nothing_built) -> None:
    run_dir = tmp_path / "run"
    err = _refused(
        ["tiny", "--run-dir", str(run_dir), "--model.tokenizer-path", str(_rewriting_tokenizer(tmp_path))], capsys
    )
    assert "--rollout.view chat with --model.tokenizer-path" in err and "use --rollout.view chat_per_turn" in err
    assert not run_dir.exists()


def test_a_template_rewrite_met_in_an_episode_is_one_error(tmp_path, capsys, monkeypatch) -> None:
    """The chat view refuses an observation mid-run (`TemplateRewriteError`): the CLI prints its message alone."""
    import jgem.train
    from jgem.models.tokenizer import TemplateRewriteError

    def meets_a_rewrite(cfg):
        raise TemplateRewriteError("the chat template rewrites the action just played once a tool message follows")

    monkeypatch.setattr(jgem.train, "train", meets_a_rewrite)
    err = _fails(["tiny", "--run-dir", str(tmp_path / "run")], capsys)
    assert err.strip() == "error: the chat template rewrites the action just played once a tool message follows"
