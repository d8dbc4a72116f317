"""A tiny env registered for the remote tests (imported by the test process and by `jgem-serve --import`)."""

from __future__ import annotations

import os

from jgem.core import Env
from jgem.registry import list_envs, register


class CountEnv(Env):
    """Observation `"<action>|<steps so far>|<start>"`; ends after `length` steps with reward 1 per step."""

    def __init__(self, length: int = 1000, seed: int | None = None) -> None:
        super().__init__(seed=seed)
        self.length = length
        self.t = 0
        self.start = 0

    def reset(self, seed: int | None = None):
        super().reset(seed)
        self.t, self.start = 0, int(self.np_random.integers(1_000_000))
        return f"start|0|{self.start}", {}

    def step(self, action: str):
        if action == "raise":
            raise RuntimeError("asked to raise")
        self.t += 1
        done = self.t >= self.length
        return f"{action}|{self.t}|{self.start}", 1.0, done, False, {"success": done} if done else {}

    def close(self) -> None:
        log = os.environ.get("JGEM_TEST_CLOSE_LOG")
        if log:  # lets a test see that a server's shutdown closed its envs
            with open(log, "a") as f:
                f.write("closed\n")


class OpensFileEnv(CountEnv):
    """Reads `path` when made (an OSError for a missing file, another for a directory); `boom` raises."""

    def __init__(self, path: str | None = None, boom: bool = False, seed: int | None = None) -> None:
        super().__init__(seed=seed)
        if boom:
            raise RuntimeError("constructor bug")
        if path is not None:
            with open(path) as f:
                f.read()


if "test:Count-v0" not in list_envs():
    register("test:Count-v0", "tests.agentgym.remote_envs:CountEnv")
if "test:Opens-v0" not in list_envs():
    register("test:Opens-v0", "tests.agentgym.remote_envs:OpensFileEnv")
