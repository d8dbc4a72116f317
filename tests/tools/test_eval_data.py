"""GEM's evaluation ids from local data: registrations as GEM's, the data layouts read, one clear error for missing
data, and grading (math-verify, the code tests in the sandbox, exact match with F1 reported)."""

from __future__ import annotations

import json
import shutil

import pytest

import jgem
from jgem.envs.data import make_eval_samples as samples
from jgem.envs.data.hub import MissingDataError
from jgem.envs.suites import EVAL_IDS, EVAL_SUITES, GEM_DATASETS

SAMPLES = samples.OUT
MATH_IDS = [i for i in EVAL_IDS if EVAL_IDS[i][0].endswith("MathFileEnv")]
QA_IDS = [i for i in EVAL_IDS if EVAL_IDS[i][0].endswith("QAEnv")]


@pytest.fixture(autouse=True)
def _no_data_env(monkeypatch):
    monkeypatch.delenv("JGEM_DATA", raising=False)  # a developer's own data dir must not answer for the samples


def expected_rows(env_id: str) -> list[dict]:
    """The rows the sample builder wrote for `env_id`'s split, as the builder's own tables give them."""
    _, dataset, split, _ = EVAL_IDS[env_id]
    if dataset == "axon-rl/math-eval":
        return [{"problem": p, "answer": a} for p, a in samples.MATH[split]]
    if dataset == "axon-rl/CodeContest":
        return [
            {"problem": p, "tests": {"inputs": i, "outputs": o}}
            for (p, _, i), o in zip(samples.CODE, samples.CODE_OUTPUTS, strict=True)
        ]
    if dataset == "google-research-datasets/nq_open":
        return [{"question": q, "answer": a} for q, a in samples.NQ_OPEN]
    return [{"question": q, "answer": a} for q, a in samples.SEARCH[split]]


def test_registrations_are_gems():
    """Every dataset id of GEM 0.1.0 (but its image-based Geometry3K) is registered with GEM's dataset, split and
    columns; the eval ids serve row i for seed i."""
    gem_registration = pytest.importorskip("gem.envs.registration")
    pytest.importorskip("gem.envs")
    gem_ids = {
        i: s.kwargs
        for i, s in gem_registration.ENV_REGISTRY.items()
        if i.split(":")[0] in ("math", "code", "qa", "logic", "eval") and i != "math:Geometry3K"
    }
    ours = {**GEM_DATASETS, **EVAL_IDS}
    assert set(gem_ids) <= set(ours) and set(EVAL_IDS) == {i for i in gem_ids if i.startswith("eval:")}
    for env_id, kw in gem_ids.items():
        spec = jgem.registry.spec(env_id)
        cls = spec.load()
        defaults = {k: p.default for k, p in __import__("inspect").signature(cls).parameters.items()}
        got = {**defaults, **spec.kwargs}
        assert got["dataset"] == kw["dataset_name"] and got["split"] == kw.get("split"), env_id
        for key in ("question_key", "answer_key", "test_key", "extract_boxed"):
            if key in kw:
                assert got[key] == kw[key], (env_id, key)
        assert got["index_seeds"] is env_id.startswith("eval:"), env_id


def test_committed_samples_are_what_the_builder_writes(tmp_path):
    samples.build(tmp_path)
    ours = sorted(p.relative_to(SAMPLES) for p in SAMPLES.rglob("*") if p.is_file())
    fresh = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    assert ours == fresh and all((SAMPLES / p).read_bytes() == (tmp_path / p).read_bytes() for p in ours)


@pytest.mark.parametrize("env_id", list(EVAL_IDS))
def test_every_eval_id_reads_its_split_in_order(env_id, monkeypatch):
    rows = expected_rows(env_id)
    env = jgem.make(env_id, data_dir=str(SAMPLES))
    assert [dict(r) for r in env.rows] == rows
    for i in range(2 * len(rows)):  # index_seeds: seed i serves row i % n
        env.reset(seed=i)
        assert env.row == rows[i % len(rows)]
    monkeypatch.setenv("JGEM_DATA", str(SAMPLES))  # $JGEM_DATA is the data dir when data_dir= is not given
    assert [dict(r) for r in jgem.make(env_id).rows] == rows


def test_the_layouts_of_a_local_copy(tmp_path):
    """The same split read from a repository copy in parquet, from `<split>.jsonl`, and from save_to_disk."""
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = expected_rows("eval:QaOpen")
    repo = tmp_path / "parquet" / "google-research-datasets/nq_open"
    (repo / "nq_open").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows), repo / "nq_open/validation-00000-of-00001.parquet")
    shutil.copy(SAMPLES / "google-research-datasets/nq_open/README.md", repo / "README.md")
    single = tmp_path / "single" / "google-research-datasets/nq_open"
    single.mkdir(parents=True)
    (single / "validation.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    saved = tmp_path / "saved" / "google-research-datasets/nq_open"
    datasets.DatasetDict({"validation": datasets.Dataset.from_list(rows)}).save_to_disk(str(saved))
    for root in ("parquet", "single", "saved"):
        env = jgem.make("eval:QaOpen", data_dir=str(tmp_path / root))
        assert [dict(r) for r in env.rows] == rows, root
    # path= names the dataset folder itself, or one file
    assert len(jgem.make("eval:QaOpen", path=str(saved)).rows) == 3
    assert len(jgem.make("eval:QaOpen", path=str(single / "validation.jsonl")).rows) == 3


def test_missing_data_is_one_error_naming_what_goes_where(tmp_path):
    with pytest.raises(MissingDataError) as e:
        jgem.make("eval:AIME24")
    msg = str(e.value)
    assert "split 'aime24' of the Hugging Face dataset 'axon-rl/math-eval'" in msg
    assert "$JGEM_DATA/axon-rl/math-eval/" in msg and "aime24.parquet or aime24.jsonl" in msg
    assert "$JGEM_DATA is not set" in msg and "data_dir=" in msg and "--data-dir" in msg
    with pytest.raises(MissingDataError, match=f"folder {tmp_path}/google-research-datasets/nq_open/ "):
        jgem.make("eval:QaOpen", data_dir=str(tmp_path))
    with pytest.raises(MissingDataError, match=r"holds the splits \['aime24', 'amc', .*not 'gsm8k'"):
        jgem.make("eval:AIME24", data_dir=str(SAMPLES), split="gsm8k")
    with pytest.raises(ValueError, match=r"lacks column\(s\) \['query'\]: it has \['answer', 'problem'\]"):
        jgem.make("eval:AIME24", data_dir=str(SAMPLES), question_key="query")
    with pytest.raises(MissingDataError, match="axon-rl/GSM-8k"):  # a training id with one split
        jgem.make("math:GSM8K")


def test_math_eval_rows_graded_by_math_verify():
    for env_id in MATH_IDS:
        env = jgem.make(env_id, data_dir=str(SAMPLES))
        for seed, row in enumerate(expected_rows(env_id)):
            env.reset(seed=seed)
            _, r, term, trunc, info = env.step(f"The answer is \\boxed{{{row['answer']}}}.")
            assert (r, term, trunc, info["success"]) == (1.0, True, False, True), (env_id, row)
            env.reset(seed=seed)
            assert env.step("\\boxed{123456789}")[4]["success"] is False
    env = jgem.make("eval:MATH500", data_dir=str(SAMPLES))
    env.reset(seed=1)  # 18/24: math-verify accepts an equal value written otherwise
    assert env.step("\\boxed{0.75}")[1] == 1.0


def test_code_contest_runs_its_tests_in_the_sandbox(sandbox):
    env = jgem.make("eval:CodeContest", data_dir=str(SAMPLES), sandbox=sandbox)
    for seed, solution in enumerate(samples.CODE_SOLUTIONS):
        env.reset(seed=seed)
        _, r, _, _, info = env.step(f"```python\n{solution}\n```")
        assert r == 1.0 and info["passed"] == info["total"] == 3, info
    env.reset(seed=0)
    _, r, _, _, info = env.step("```python\nprint(3)\n```")  # right on the first test only
    assert r == 0.0 and info["reason"] == "test 1 failed: wrong output" and info["passed"] == 1
    env.reset(seed=0)
    assert env.step("no code")[1] == -0.1


@pytest.mark.parametrize("env_id", QA_IDS)
def test_qa_exact_match_and_f1(env_id):
    env = jgem.make(env_id, data_dir=str(SAMPLES))
    for seed, row in enumerate(expected_rows(env_id)):
        for gold in row["answer"]:  # any of the answers, in any case, with punctuation and articles around it
            env.reset(seed=seed)
            _, r, _, _, info = env.step(f"<think>...</think><answer> The {gold.upper()}! </answer>")
            assert r == 1.0 and info["success"] and info["f1"] == 1.0
        env.reset(seed=seed)
        _, r, _, _, info = env.step(f"<answer>perhaps {row['answer'][0]}</answer>")
        assert r == 0.0 and not info["success"] and 0.0 < info["f1"] < 1.0
        env.reset(seed=seed)
        assert env.step(f"\\boxed{{{row['answer'][0]}}}")[4]["reason"] == "no <answer> tag"


def test_suites_name_registered_eval_ids():
    assert set(EVAL_SUITES) == {"math", "code", "qa"}
    assert set(EVAL_SUITES["math"]) == set(MATH_IDS) and EVAL_SUITES["code"] == ("eval:CodeContest",)
    assert set(EVAL_SUITES["qa"]) == {i for i in QA_IDS if i != "eval:QaOpen"}  # GEM's QA table: search-eval
