"""The trainer as parts (issue 51): the step is written once against the sampler side and the transport, with no
branch on the pipeline mode or the process role; the pipeline, dynamic sampling and the warm start see the run
through narrow parts, not the trainer; the staleness controller and the timer do what the step relies on."""

from __future__ import annotations

import ast
import inspect
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from jgem.config import PipelineConfig, TrainConfig
from jgem.metrics import Timer
from jgem.rollout.episode import Episode, Transition
from jgem.train.pipeline import Staleness
from jgem.train.transport import InProcess, SplitMeshes

TRAIN = Path(__file__).resolve().parents[1] / "jgem" / "train"


def test_the_training_step_has_no_branch_on_mode_or_role():
    from jgem.train.loop import Trainer

    tree = ast.parse(textwrap.dedent(inspect.getsource(Trainer.train_step)))
    branches = [n for n in ast.walk(tree) if isinstance(n, ast.If | ast.IfExp | ast.Match)]
    assert not branches, [ast.unparse(b)[:80] for b in branches]


@pytest.mark.parametrize("module", ["pipeline.py", "dynamic.py", "warm_start.py"])
def test_the_pipeline_dynamic_sampling_and_the_warm_start_do_not_reach_into_the_trainer(module):
    tree = ast.parse((TRAIN / module).read_text())
    reach = [ast.unparse(n) for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr in ("trainer", "roles")]
    assert not reach, reach


def _episode(versions: list[int]) -> Episode:
    n = len(versions)
    t = Transition(0, 0, 1, np.full(n, 2), np.zeros(n, np.float32), prompt_ids=np.ones(1, np.int32))
    t.versions = np.array(versions, np.int32)
    return Episode(0, 0, "test", 0, [t])


def test_staleness_bounds_what_is_submitted_and_checks_async_tokens():
    cfg = TrainConfig(steps=5, pipeline=PipelineConfig(mode="async", max_staleness=2))
    s = Staleness.of(cfg)
    assert (s.ahead, s.submit_through(0), s.submit_through(3)) == (2, 2, 4)  # never past the run's last step
    assert s.measure([_episode([3, 4])], 4) == {"pipeline/staleness_mean": 0.5, "pipeline/staleness_max": 1.0}
    with pytest.raises(AssertionError, match="3 versions old"):
        s.measure([_episode([1])], 4)
    stream = Staleness.of(TrainConfig(steps=5, pipeline=PipelineConfig(mode="stream", max_staleness=2)))
    assert stream.measure([_episode([1])], 4)["pipeline/staleness_max"] == 3.0  # stream bounds submission only
    off = Staleness.of(TrainConfig(steps=5, pipeline=PipelineConfig(mode="off_policy", lag=1)))
    assert (off.ahead, Staleness.of(TrainConfig(steps=5)).submit_through(1)) == (1, 1)


def test_the_timer_adds_up_each_phase():
    timer = Timer()
    for _ in range(2):
        with timer("collect"):
            time.sleep(0.01)
    with timer("update"):
        pass
    m = timer.metrics()
    assert set(m) == {"time/collect_s", "time/update_s"} and 0.02 <= m["time/collect_s"] < 1.0


def test_one_process_transports_move_nothing_but_split_meshes_publish():
    published = []
    one, split = InProcess(), SplitMeshes(lambda full: published.append(full))
    for t in (one, split):
        assert (
            t.episodes([1, 2]) == [1, 2]
            and t.from_learners("x", lambda: 3) == 3
            and t.from_samplers("y", lambda: 4) == 4
        )
        assert t.update(lambda meanwhile: {"loss": float(meanwhile is None)}, None) == {"loss": 1.0}
        t.publish()
    split.publish(full=True)
    assert published == [False, True]
