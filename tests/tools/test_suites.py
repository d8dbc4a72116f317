"""Task suites: math (generators, math-verify, files), code (sandboxed tests), QA (EM, search), rg ids."""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import pytest

import jgem
from jgem.core import JgemError
from jgem.envs.code import CodeEnv, normalize_tests
from jgem.envs.data.dataset import TERMINAL_STATE, last_boxed
from jgem.envs.data.hub import MissingDataError
from jgem.envs.math import grade_answer
from jgem.envs.qa import exact_match, normalize_answer


def boxed(x: str) -> str:
    return f"So the answer is \\boxed{{{x}}}."


def test_registering_suites_imports_nothing_heavy():
    code = (
        "import sys, jgem; ids = jgem.list_envs(); "
        "heavy = [m for m in ('bm25s', 'mcp', 'math_verify', 'reasoning_gym', 'pyarrow', 'jsonschema') "
        "if m in sys.modules]; "
        "print(len(ids), heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    n, heavy = out.split(" ", 1)
    assert int(n) > 130 and heavy.strip() == "[]"


@pytest.mark.parametrize("kind", ["arithmetic", "linear", "fractions", "word"])
@pytest.mark.parametrize("suffix", ["", "-medium", "-hard"])
def test_math_generators_are_reproducible_and_graded(kind, suffix):
    env = jgem.make(f"math:{kind}{suffix}")
    obs, _ = env.reset(seed=7)
    row = env.row
    assert obs.startswith(row["problem"]) and "\\boxed{}" in obs
    assert jgem.make(f"math:{kind}{suffix}").reset(seed=7)[0] == obs
    obs2, r, term, trunc, info = env.step(boxed(row["answer"]))
    assert (obs2, r, term, trunc, info["correct"]) == (TERMINAL_STATE, 1.0, True, False, True)
    env.reset(seed=7)
    num, slash, den = row["answer"].partition("/")
    wrong = f"{int(num) + 1}{slash}{den}"
    assert env.step(boxed(wrong))[1] == 0.0
    env.reset(seed=7)
    assert env.step(row["answer"])[1] == 0.0  # no box, no reward
    with pytest.raises(JgemError, match="call reset"):
        env.step(boxed(row["answer"]))


def test_generator_answers_are_right():
    for seed in range(30):
        env = jgem.make("math:arithmetic-hard")
        env.reset(seed=seed)
        expr = env.row["problem"].removeprefix("Compute ").rstrip(".")
        assert str(eval(expr)) == env.row["answer"]
        env = jgem.make("math:linear-hard")
        env.reset(seed=seed)
        lhs, rhs = env.row["problem"].removeprefix("Solve for x: ").rstrip(".").split(" = ")
        x = int(env.row["answer"])
        assert eval(lhs.replace("x", f"*({x})")) == eval(rhs.replace("x", f"*({x})"))
    easy, hard = jgem.make("math:arithmetic"), jgem.make("math:arithmetic-hard")
    easy.reset(seed=0)
    hard.reset(seed=0)
    assert easy.row["problem"].count(" ") < hard.row["problem"].count(" ")
    with pytest.raises(ValueError, match="difficulty must be"):
        jgem.make("math:arithmetic", difficulty=5)


@pytest.mark.parametrize(
    ("pred", "gold", "ok"),
    [
        ("0.75", "3/4", True),
        ("\\frac{6}{8}", "\\frac{3}{4}", True),
        ("x = 5", "5", True),
        ("1,2", "2,1", True),
        ("\\$1,000", "1000", True),
        ("6", "5", False),
        ("\\sqrt{2}", "2^{1/2}", True),
        ("banana", "5", False),
    ],
)
def test_math_verify_grading(pred, gold, ok):
    assert grade_answer(pred, [gold], timeout=2.0)[0] is ok


def test_grading_from_a_worker_thread_uses_the_grader_process():
    out = {}

    def work():
        out["ok"] = grade_answer("0.5", ["\\frac{1}{2}"], timeout=30.0)
        out["slow"] = grade_answer("\\int_0^1 x^2 dx", ["1/3"], timeout=1e-5)  # no process answers in 10 us
        out["after"] = grade_answer("2/4", ["0.5"], timeout=30.0)  # a new grader replaced the killed one

    t = threading.Thread(target=work)
    t.start()
    t.join(120)
    assert out == {"ok": (True, "math-verify"), "slow": (False, "grading timed out"), "after": (True, "math-verify")}


def test_math_files_and_gem_ids(tmp_path):
    rows = [{"question": "1+1?", "solution": "2"}, {"question": "2+2?", "solution": "4"}]
    jsonl = tmp_path / "m.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    env = jgem.make("math:GSM8K", path=str(jsonl), question_key="question", answer_key="solution")
    seen = set()
    for _ in range(2):  # one epoch visits every row once
        obs, _ = env.reset()
        seen.add(obs.split("?")[0])
        assert env.step(boxed(env.row["solution"]))[1] == 1.0
    assert seen == {"1+1", "2+2"}
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    pq.write_table(pa.Table.from_pylist([{"problem": "3+3?", "answer": "6"}]), tmp_path / "m.parquet")
    env = jgem.make("eval:MATH500", path=str(tmp_path / "m.parquet"))
    env.reset(seed=0)
    assert env.step(boxed("6"))[1] == 1.0
    with pytest.raises(MissingDataError, match=r"dataset 'axon-rl/GSM-8k' \(columns 'problem', 'answer'\)"):
        jgem.make("math:GSM8K", data_dir=str(tmp_path))
    with pytest.raises(ValueError, match=r"lacks column\(s\) \['problem', 'answer'\]"):
        jgem.make("math:GSM8K", path=str(jsonl))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        jgem.make("math:file", path=str(tmp_path / "nope.jsonl"))


def test_shipped_code_problems_pass_with_their_reference(sandbox):
    env = CodeEnv(sandbox=sandbox)
    rows = [json.loads(line) for line in jgem.envs.code.SHIPPED.read_text().splitlines()]
    assert len(rows) >= 20
    for row in rows:
        reward, info = env.grade(f"```python\n{row['solution']}\n```", row)
        assert reward == 1.0, (row["problem"], info)


def test_code_rewards(sandbox):
    env = jgem.make("code:Shipped", sandbox=sandbox)
    obs, _ = env.reset(seed=0)
    row = env.row
    assert obs.startswith(row["problem"]) and "```python" in obs
    assert env.step("I would not write code")[1] == -0.1
    env.reset(seed=0)
    _, r, _, _, info = env.step("```python\nprint('wrong')\n```")
    assert r == 0.0 and info["reason"].startswith("test 0 failed") and info["passed"] == 0
    quick = jgem.make("code:Shipped", sandbox=sandbox, timeout=0.3)
    quick.reset(seed=0)
    assert quick.step("```python\nwhile True: pass\n```")[4]["reason"] == "test 0 failed: timeout"
    env.reset(seed=0)
    _, r, _, _, info = env.step(f"Here:\n```python\n{row['solution']}\n```")
    assert r == 1.0 and info["passed"] == info["total"] > 0
    clone = env.spawn(same_state=True)  # clones share the sandbox and the rows
    assert clone.row == env.row and clone._sandbox is sandbox and clone.rows is env.rows
    with pytest.raises(MissingDataError, match="axon-rl/TACO-8k"):
        jgem.make("code:Taco8k", data_dir="/nonexistent")


def test_code_test_formats():
    as_dict = {"inputs": ["1\n", [2, 3]], "outputs": ["1\n", "5"]}
    assert normalize_tests(as_dict, 12) == [("1\n", "1\n"), ("2\n3", "5")]
    as_list = json.dumps([{"input": "a", "output": "b"}])
    assert normalize_tests(as_list, 12) == [("a", "b")]
    many = {"inputs": ["x" * i for i in range(1, 20)], "outputs": ["x"] * 19}
    kept = normalize_tests(many, 3)
    assert [len(i) for i, _ in kept] == [19, 18, 17]


def test_qa_normalisation_and_env():
    assert normalize_answer("The  Eiffel-Tower!") == "eiffeltower"
    assert exact_match("an Apple", ["apple"]) and not exact_match("apples", ["apple"])
    env = jgem.make("qa:FictionalWiki-multihop")
    obs, _ = env.reset(seed=3)
    assert "<answer>" in obs and env.row["hops"] >= 2
    gold = env.row["answer"][0]
    assert env.step(f"<think>...</think><answer>{gold.upper()}.</answer>")[1] == 1.0
    env.reset(seed=3)
    assert env.step("<answer>Paris</answer>")[1] == 0.0
    boxed_env = jgem.make("logic:RuleTaker-d0", path=str(jgem.envs.qa.SHIPPED), question_key="question")
    boxed_env.reset(seed=0)
    assert boxed_env.step(boxed(boxed_env.row["answer"][0]))[1] == 1.0
    with pytest.raises(MissingDataError, match="axon-rl/NaturalQuestions"):
        jgem.make("qa:NaturalQuestions", data_dir="/nonexistent")


def test_qa_with_search_finds_the_answer():
    env = jgem.make("qa:FictionalWiki-search")
    obs, _ = env.reset(seed=11)
    row = env.unwrapped.row
    assert "<search>" in obs
    info_obs, r, term, _, info = env.step(f"<search>{row['question']}</search>")
    assert info["use_tool"] and not term and r == 0.0
    assert row["answer"][0] in info_obs or row["hops"] > 1
    _, r, term, _, _ = env.step(f"<answer>{row['answer'][0]}</answer>")
    assert term and r == 1.0


def test_rg_ids_cover_reasoning_gym():
    import reasoning_gym

    from jgem.envs.suites import RG_DATASETS

    assert set(RG_DATASETS) == set(reasoning_gym.factory.DATASETS) - {"composite"}
    assert {f"rg:{n}" for n in RG_DATASETS} == set(jgem.list_envs("rg:"))


# Datasets that publish no reference answer (many valid solutions, scored by a verifier): answer is None.
RG_WITHOUT_REFERENCE = {"boxnet", "graph_color", "propositional_logic", "rubiks_cube", "rush_hour"}


@pytest.mark.slow
def test_every_rg_id_scores_its_reference_answer_1():
    from jgem.envs.suites import RG_DATASETS

    wrong, no_reference = [], set()
    for name in RG_DATASETS:
        env = jgem.make(f"rg:{name}", size=3)
        obs, _ = env.reset(seed=0)
        assert isinstance(obs, str) and len(obs) > 20, name
        if env.row["answer"] is None:
            no_reference.add(name)
            continue
        _, r, term, _, info = env.step(boxed(str(env.row["answer"])))
        if not (term and r == 1.0 and info["correct"]):
            wrong.append(f"{name}: {r}")
    assert wrong == []
    assert no_reference == RG_WITHOUT_REFERENCE


@pytest.mark.parametrize("name", ["basic_arithmetic", "leg_counting", "word_sorting", "spell_backward", "gsm_symbolic"])
def test_rg_envs_score_with_their_own_scorer(name):
    env = jgem.make(f"rg:{name}", size=5)
    obs, _ = env.reset(seed=1)
    assert obs.startswith(env.row["question"])
    assert jgem.make(f"rg:{name}", size=5).reset(seed=1)[0] == obs
    _, r, term, _, _ = env.step(boxed(str(env.row["answer"])))
    assert term and r == 1.0
    env.reset(seed=1)
    assert env.step("no box")[1] == 0.0


def test_last_boxed():
    assert last_boxed("\\boxed{1} then \\boxed{\\frac{1}{2}}") == "\\frac{1}{2}"
    assert last_boxed("\\boxed{unclosed") is None and last_boxed("nothing") is None
