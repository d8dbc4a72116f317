"""The opponent pool's membership (jgem/train/opponents.py): which past versions the sampler keeps before an update,
on a stand-in engine (the trainer-level runs are in tests/rollout/test_agents_workflow.py)."""

from types import SimpleNamespace

from jgem.rollout.workflows.agents import pool_span, pool_versions
from jgem.train.opponents import OpponentPool


def test_pool_versions_are_the_last_members_up_to_a_version():
    assert pool_versions(0, 10, 4) == [0]
    assert pool_versions(35, 10, 4) == [0, 10, 20, 30]
    assert pool_versions(59, 10, 4) == [20, 30, 40, 50]
    assert pool_versions(11, 1, 2) == [10, 11]
    assert pool_span(9, 12, 1, 2) == [8, 9, 10, 11, 12]  # the pools at 9 .. 12 together
    assert pool_span(5, 4, 1, 2) == []


def _pool(params, *, runs, held, every=1, size=2):
    engine = SimpleNamespace(versions_in_use=lambda pinned=False: set(held if pinned else runs))
    cfg = SimpleNamespace(rollout=SimpleNamespace(pool_every=every, pool_size=size))
    side = SimpleNamespace(cfg=cfg, engine=engine, rollout_mesh=None, snapshot=lambda: "copy")
    pool = OpponentPool(side)
    pool.params = dict(params)
    return pool


def test_a_game_keeps_the_version_it_drew_until_it_ends_and_nothing_else_old_is_kept():
    # before the update of step 11 (every version kept, pools of 2): the runs are at 11, so games can still draw from
    # pool_versions(11) = [10, 11] and, after the update, [11, 12]; a game that drew 8 when it started holds 8 (its
    # frozen seat may not have opened its stream yet): 8 stays, 9 goes, and 11 (a member) is copied before the
    # update donates it
    pool = _pool({8: "p8", 9: "p9", 10: "p10"}, runs={11}, held={8})
    pool.before_update(11, kept={})
    assert pool.params == {8: "p8", 10: "p10", 11: "copy"}
    # off_policy's copy of the version is shared, not made twice; a run still at version 9 keeps the pools it draws from
    pool = _pool({8: "p8", 9: "p9", 10: "p10"}, runs={9, 11}, held=set())
    pool.before_update(11, kept={11: "kept11"})
    assert pool.params == {8: "p8", 9: "p9", 10: "p10", 11: "kept11"}
    # a version that is not a member (every 10) is not copied; nothing held, nothing old kept
    pool = _pool({0: "p0", 10: "p10"}, runs={13}, held=set(), every=10, size=1)
    pool.before_update(13, kept={})
    assert pool.params == {10: "p10"}
