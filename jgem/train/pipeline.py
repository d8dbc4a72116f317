"""The pipeline: the rollout engine as a producer that is never drained at a step boundary, the learner as its
consumer (`--pipeline.mode sync | off_policy | async | stream`; sync is the same pipeline with nothing ahead).

Policy versions count RL updates: the learner at step s holds version s. Step s's episodes are the same
`Run.specs(s)` as in a synchronous run, their tokens drawn from stream 2s of the run's key, so they are those a
synchronous run would sample with the same policy. The producer may run `ahead` steps in front of the learner: at
step s the episodes of steps up to s + ahead are submitted (queued into the engine, which starts them as slots
free), and the learner takes step s's episodes (whole groups: a step's) as soon as they have all finished, while
the later steps' go on playing in the other slots and their envs keep stepping through the update.

- off_policy, `lag` K (ahead = K): step s + K's episodes are submitted at version s and played by it to their end,
  so step s trains on episodes of version max(0, s - K) exactly, whatever the timing, slot count or backend. The
  engine plays each version's slots in a chunk of their own, so up to K + 1 policies are live: the learner's params
  of version v are copied (`keep`) before an update when an episode still needs them, and dropped once none does.
  K = 0 runs the same programs on the same episodes as `sync`: the same params bit for bit.
- async, `max_staleness` N (ahead = N): every queued and live episode takes each new policy when the update that
  made it ends (`RolloutEngine.adopt_version`: partial rollouts; `stale_kv` keeps or recomputes the keys and values
  of their streams). Step s + N is submitted at version s, so every token step s + N trains on was sampled by a
  version in [s, s + N]: no trained token is more than N updates stale (checked every step,
  `pipeline/staleness_max`). Which version samples which token depends on timing.
- stream, `max_staleness` N (ahead = N; AReaL's bound on how far the producer runs ahead): submitted and versioned
  as async, but step s trains whichever whole groups have finished first (the oldest step's first), so a step never
  waits for one slow episode: the slow one trains at a later step, when it is done. Steps still train
  `episodes_per_step` episodes each and never starve (the steps up to s + N are submitted, s of them trained), but
  the step -> episodes map and the tokens' staleness depend on timing: N bounds what is submitted ahead, not the age
  of a trained token (logged every step, `pipeline/staleness_mean` / `_max`; the off-policy corrections weight it).
  A batch's group ids are made unique over steps (`group_stride`).

A checkpoint or an evaluation first drains the pipeline (the in-flight episodes play to their end, with the
policies they would have had); a checkpoint then stores the finished episodes of the steps ahead (a pickle per
process beside the checkpoints, `pipeline/step-S.process-P.pkl`, removed once no committed checkpoint is older), so
a resumed run trains on exactly the episodes the interrupted one would have. In off_policy mode resume is exact; in
async mode the drain only fixes the timing of what was in flight at the checkpoint. A resume that raises `steps`
submits the steps past the old end at the learner's version (they were never played ahead).

Dynamic sampling's extra rounds are played by the learner's policy in every mode (deterministic: an off_policy
step's older version may be gone after a drain or a resume), ahead of the queued steps.

A multi-agent run against an opponent pool (`--rollout.opponent pool`) plays its members' versions too: the pipeline
keeps their params beside the kept ones (`jgem.train.opponents`), saves them with a checkpoint and restores them on
resume.
"""

from __future__ import annotations

import dataclasses
import pickle
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import numpy as np

from jgem.checkpoint import committed_steps
from jgem.config import TrainConfig
from jgem.rollout.config import MAX_RESAMPLE_ROUNDS
from jgem.rollout.engine import RolloutEngine, RolloutStats
from jgem.rollout.episode import Episode
from jgem.rollout.workflows.agents import POOL
from jgem.sharding.mesh import process_max
from jgem.train.dynamic import dynamic_sample
from jgem.train.evaluate import episode_metrics
from jgem.train.opponents import OpponentPool
from jgem.train.side import SamplerSide


@dataclasses.dataclass(frozen=True)
class Staleness:
    """How far the producer runs ahead of the learner and what that bounds (AReaL's `StalenessController`): at step
    s the steps up to s + `ahead` are submitted (`submit_through`); async bounds the age of every trained token by
    `ahead` updates (`measure` checks it), off_policy trains each step at exactly `ahead` (lag) updates old, stream
    bounds only what is submitted ahead. sync: nothing ahead."""

    mode: str = "sync"
    ahead: int = 0
    steps: int = 0

    @classmethod
    def of(cls, cfg: TrainConfig) -> Staleness:
        return cls(cfg.pipeline.mode, cfg.pipeline.ahead, cfg.steps)

    def submit_through(self, step: int) -> int:
        """The last step to submit while the learner is at step `step`."""
        return min(step + self.ahead, self.steps - 1)

    def measure(self, episodes: list[Episode], step: int) -> dict[str, float]:
        """The staleness of the tokens step `step` trains on (`pipeline/staleness_mean`, `_max`); async: none may
        be more than `ahead` updates old."""
        stale = staleness(episodes, step)
        if self.mode == "async" and stale.size and stale.max() > self.ahead:
            raise AssertionError(f"step {step} would train on tokens {stale.max()} versions old (max {self.ahead})")
        return {
            "pipeline/staleness_mean": float(stale.mean()) if stale.size else 0.0,
            "pipeline/staleness_max": float(stale.max()) if stale.size else 0.0,
        }


@dataclasses.dataclass
class RolloutBatch:
    """A step's episodes as the sampler side hands them over: those played (round 0, which the rollout metrics
    describe), those to train (dynamic sampling's kept groups), and the sampler side's metrics of the step."""

    played: list[Episode]
    episodes: list[Episode]
    metrics: dict[str, float]


class NoSampler:
    """The sampler side of a role split's learner process: it plays nothing (its episodes come from the samplers'
    processes, `jgem.train.transport.ProcessSplit`) and reports no rollout metrics."""

    mode = "none"
    engine = None

    def step(self, step: int) -> RolloutBatch:
        return RolloutBatch([], [], {})

    def metrics(self, batch: RolloutBatch, step: int) -> dict[str, float]:
        return {}

    def start(self, step: int) -> None:
        pass

    before_update = after_update = drain = save = restore = start

    def close(self) -> None:
        pass

    def meanwhile(self, step: int, update_done: Callable[[], bool]) -> None:
        pass

    def prune(self, checkpoints: Path) -> None:
        pass


class Pipeline:
    """Producer and consumer of one run (module docstring): `step(s)` is step s's episodes as the trainer takes them
    (`batch`, dynamic sampling's `extra` rounds, their staleness); `before_update` / `meanwhile` / `after_update`
    bracket the learner's update of that step; `drain`, `save`, `restore` serve evaluations and checkpoints. sync is
    the pipeline with nothing ahead: the same path, the same programs on the same episodes as off_policy lag 0."""

    def __init__(self, side: SamplerSide) -> None:
        self.side = side
        self.cfg = side.cfg.pipeline
        self.mode = self.cfg.mode
        self.staleness = Staleness.of(side.cfg)
        self.key = jax.random.key(side.cfg.seed)  # step s draws from stream 2s: fold_in(key, 2s), as `Run.collect`
        self.next_submit = 0  # the first step not submitted yet
        self.kept: dict[int, Any] = {}  # off_policy: version -> params still playing in-flight episodes
        self.during_update = 0  # split meshes: action tokens sampled while the last update ran (`meanwhile`)
        self.drained: RolloutStats | None = None  # the last drain's work, reported with the next step
        # stream: step -> group id -> its episode ids, submitted and not trained yet (submission order)
        self.untrained: dict[int, dict[int, list[int]]] = {}
        r = side.cfg.rollout
        self.pool = OpponentPool(side) if r.workflow == "agents" and r.opponent == POOL else None

    @property
    def engine(self) -> RolloutEngine:
        return self.side.engine

    def step(self, step: int) -> RolloutBatch:
        """Step `step`'s episodes: played (`batch`), with dynamic sampling the groups without signal dropped and
        more played (`extra`), their staleness measured."""
        cfg = self.side.cfg
        played = episodes = self.batch(step)
        metrics = {}
        if cfg.rollout.dynamic_sampling:
            episodes, metrics = dynamic_sample(self.side, step, played, lambda r: self.extra(step, r))
        return RolloutBatch(played, episodes, metrics | self.staleness.measure(episodes, step))

    def metrics(self, batch: RolloutBatch, step: int) -> dict[str, float]:
        """The sampler side's metrics of step `step` (after its update): its episodes', the engine's counters, the
        horizon and the curriculum's stage, the pool's faults, split meshes' publication."""
        side = self.side
        out = episode_metrics(batch.played, "rollout") | side.engine.metrics() | batch.metrics
        out |= {
            "rollout/max_turns": float(side.horizon(step)),  # the env's limit, or the curriculum's below it
            "curriculum/stage": float(side.stage(step)),
        }
        if self.pool is not None:
            out |= self.pool.age(batch.played, step)
        if side.publisher is not None:  # split meshes: the update's publication to the sampler's devices
            out |= {
                "pipeline/publish_bytes": float(side.publisher.bytes),
                "pipeline/publish_s": side.publisher.seconds,
                "pipeline/tokens_during_update": float(self.during_update),  # played while the learner updated
            }
        return out

    def start(self, step: int) -> None:
        """Begin at `step` (a fresh run's first step, or where a resume left off)."""
        self.next_submit = max(self.next_submit, step)

    def batch(self, step: int) -> list[Episode]:
        """Step `step`'s episodes (submitting the steps the staleness controller allows first), as soon as they have
        finished; stream: a step's worth of whole groups, the first to finish. The engine's stats count from here
        (and the last drain's work)."""
        side = self.side
        self.engine.stats = self.step_stats()
        last = self.staleness.submit_through(step)
        # submitted at version `step`: step + ahead, or at the start every step up to it (off_policy: max(0, s - K))
        for s in range(self.next_submit, last + 1):
            specs = side.specs(s)
            self.engine.submit(specs, self.key, stream=2 * s, max_turns=side.horizon(s), version=step)
            if self.mode == "stream":
                self._track(s, specs)
        self.next_submit = max(self.next_submit, last + 1)
        if self.mode == "stream":
            return self._first_finished(step)
        ids = [e.episode_id for e in side.specs(step)]
        self.engine.run(self.models(step), until=lambda: self.engine.finished(ids, stream=2 * step))
        return self.engine.take(ids, stream=2 * step)

    def extra(self, step: int, round: int) -> list[Episode]:
        """Dynamic sampling's extra `round` of step `step`, played by the learner's policy (version `step`, in every
        mode: an older one may be gone after a drain or a resume), ahead of the steps already queued."""
        side = self.side
        specs = side.specs(step, round=round)
        self.engine.submit(specs, self.key, stream=2 * step, max_turns=side.horizon(step), version=step, front=True)
        ids = [e.episode_id for e in specs]
        self.engine.run(self.models(step), until=lambda: self.engine.finished(ids, stream=2 * step))
        return self._unique_groups(step, self.engine.take(ids, stream=2 * step))

    def _track(self, step: int, specs) -> None:
        groups = self.untrained.setdefault(step, defaultdict(list))
        for e in specs:
            groups[e.group_id].append(e.episode_id)

    def _finished_groups(self) -> list[tuple[int, int, list[int]]]:
        """stream: (step, group id, episode ids) of the finished untrained groups, the oldest step's first."""
        done = self.engine.finished
        return [
            (s, g, ids)
            for s in sorted(self.untrained)
            for g, ids in sorted(self.untrained[s].items())
            if done(ids, stream=2 * s)
        ]

    def _first_finished(self, step: int) -> list[Episode]:
        """stream: the first whole groups to finish, `episodes_per_step` episodes (this process's share), as soon as
        that many have (the oldest step's first among those finished)."""
        n = len(self.side.specs(step))

        def enough() -> bool:
            return sum(len(ids) for _, _, ids in self._finished_groups()) >= n

        self.engine.run(self.models(step), until=enough)
        out: list[Episode] = []
        for s, g, ids in self._finished_groups():
            if len(out) >= n:
                break
            out += self._unique_groups(s, self.engine.take(ids, stream=2 * s))
            del self.untrained[s][g]
            if not self.untrained[s]:
                del self.untrained[s]
        return out

    def _unique_groups(self, step: int, episodes: list[Episode]) -> list[Episode]:
        """stream: a batch mixes steps, whose group ids repeat; step `step`'s get step * group_stride(...) added."""
        if self.mode == "stream":
            stride = group_stride(self.side.cfg.episodes_per_step)
            for e in episodes:
                e.group_id += step * stride
        return episodes

    def models(self, step: int) -> dict[int, Any]:
        """The policies the engine plays with: the learner's (version `step`) and, off_policy, every kept one (with
        split meshes, the sampler's copies), and the opponent pool's members."""
        out = self.pool.models() if self.pool is not None else {}
        out |= {v: self.side.policy(p) for v, p in self.kept.items()}
        out[step] = self.side.policy()
        return out

    def meanwhile(self, step: int, update_done: Callable[[], bool]) -> None:
        """While the update of step `step` runs (until `update_done()`): with split meshes the engine plays on
        with version `step` (the steps ahead), until the update is done or nothing is left to play. On one mesh
        the update holds the devices, so there is nothing to overlap."""
        if self.side.publisher is None:
            return
        done = lambda: not self.engine.busy or update_done()
        before = self.engine.stats.action_tokens
        self.engine.run(self.models(step), until=done, poll=0.01)  # envs may all be busy when the update ends
        self.during_update = self.engine.stats.action_tokens - before

    def before_update(self, step: int) -> None:
        """off_policy: keep version `step`'s params when in-flight or queued episodes still need them (the update
        donates them), and drop the versions none needs; the same for the opponent pool's members."""
        if self.mode == "off_policy":
            used = self.engine.versions_in_use()
            # every process keeps the same versions (lockstep); agreed on the sampler's devices (its decision)
            oldest = -process_max([-min(used, default=step + 1)], self.side.rollout_mesh)[0]
            self.kept = {v: p for v, p in self.kept.items() if v >= oldest}
            if oldest <= step:
                self.kept[step] = self.side.snapshot()
        if self.pool is not None:
            self.pool.before_update(step, self.kept)

    def after_update(self, step: int) -> None:
        """async and stream: every queued and live episode goes on with version `step + 1`."""
        if self.mode in ("async", "stream"):
            self.engine.adopt_version(step + 1, stale_kv=self.cfg.stale_kv)

    def drain(self, step: int) -> None:
        """Play every submitted episode to its end (before an evaluation or a checkpoint); the learner is at
        version `step`. Its work is the next step's to report (`drained`, the steps ahead it played)."""
        self.engine.stats = RolloutStats()
        self.engine.run(self.models(step))  # in lockstep, with every process (one that has nothing plays padding)
        self.drained, self.kept = self.engine.stats, {}

    def step_stats(self) -> RolloutStats:
        """The engine's counters for a step starting now: from zero, or from the drain since the last step."""
        stats, self.drained = self.drained or RolloutStats(), None
        return stats

    # -- checkpoints -------------------------------------------------------------------------------

    def path(self, step: int) -> Path:
        return Path(self.side.run_dir) / "pipeline" / f"step-{step}.process-{jax.process_index()}.pkl"

    def save(self, step: int) -> None:
        """After `drain`, before checkpoint `step` is saved: the finished episodes of the steps ahead of it, per
        process (written whole, then renamed). Nothing runs ahead in sync (or with a bound of 0): no file. The
        opponent pool's members a resume from `step` needs are written first."""
        if self.pool is not None:
            self.pool.save(step)
        if not self.staleness.ahead:
            return
        pending = {s: self.engine.take(ids, stream=2 * s) for s, ids in self._pending_ids(step).items()}
        for s, eps in pending.items():  # still the engine's until they are trained
            self.engine.put_back(eps, stream=2 * s)
        f = self.path(step)
        f.parent.mkdir(parents=True, exist_ok=True)
        tmp = f.with_suffix(".tmp")
        tmp.write_bytes(pickle.dumps({"step": step, "pending": pending}))
        tmp.replace(f)

    def prune(self, checkpoints: Path) -> None:
        """Remove the files of steps before the oldest checkpoint committed in `checkpoints` (no resume can use
        them; a checkpoint still being written keeps the files of those before it)."""
        if self.pool is not None:
            self.pool.prune(checkpoints)
        committed = committed_steps(checkpoints)
        for old in self.path(0).parent.glob(f"step-*.process-{jax.process_index()}.pkl"):
            if committed and int(old.name.split(".")[0].split("-")[1]) < min(committed):
                old.unlink(missing_ok=True)

    def restore(self, step: int) -> None:
        """The pending episodes saved with checkpoint `step` back into the engine; submission goes on after them.
        The opponent pool's members at `step` back onto the sampler's devices."""
        if self.pool is not None:
            self.pool.restore(step)
        if not self.staleness.ahead:
            return
        f = self.path(step)
        mesh = self.side.rollout_mesh
        if step == 0 and not process_max([f.exists()], mesh)[0]:
            return  # the warm start's checkpoint: nothing was submitted yet
        if process_max([not f.exists()], mesh)[0]:  # on every process together (they run in lockstep)
            raise FileNotFoundError(
                f"{f} (or another process's) is missing: checkpoint {step} of a {self.mode} pipeline needs the "
                "episodes it had played ahead (saved beside it); resume from a checkpoint that has them, or start the "
                "run again"
            )
        saved = pickle.loads(f.read_bytes())
        for s, eps in saved["pending"].items():
            self.engine.put_back(eps, stream=2 * s)
            if self.mode == "stream":
                self._track(s, eps)
        self.next_submit = max([step, *(s + 1 for s in saved["pending"])])

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()

    def _pending_ids(self, step: int) -> dict[int, list[int]]:
        if self.mode == "stream":  # every step's untrained groups, older steps' slow ones too
            return {s: [i for ids in groups.values() for i in ids] for s, groups in self.untrained.items()}
        return {s: [e.episode_id for e in self.side.specs(s)] for s in range(step, self.next_submit)}


def group_stride(episodes_per_step: int) -> int:
    """stream: more than any group id of a step (its rounds' episodes over all processes): batches that mix steps
    keep their groups apart."""
    return (MAX_RESAMPLE_ROUNDS + 1) * episodes_per_step * jax.process_count()


def staleness(episodes: list[Episode], version: int) -> np.ndarray:
    """Per trained action token: how many updates older than the learner (at `version`) its sampling policy is."""
    v = [t.versions for e in episodes if e.fault is None for t in e.transitions if t.versions is not None]
    return version - np.concatenate(v) if v else np.zeros(0, np.int32)
