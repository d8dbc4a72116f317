"""The wire contract shared by the env server and its clients (no FastAPI or httpx imports here).

AgentGym's contract, keyed by an integer env id:
  POST /create {"env_id"?, "env_kwargs"?}        -> {"id", "instance"}
  POST /reset  {"id", "seed"? | "data_idx"?}      -> StepPayload (reward 0, done false)
  POST /step   {"id", "action", "seq"?}           -> StepPayload
  GET  /observation?id=N                          -> {"observation"}
  POST /close  {"id"}                             -> {"closed": true}
jgem's additions: POST /batch/create {"count", "env_id"?, "env_kwargs"?} -> {"ids"}, POST /batch/reset
{"items": [reset bodies]}, POST /batch/step {"items": [step bodies]} -> {"results": [StepPayload | {"error"}]},
POST /snapshot {"id"} -> {"snapshot"}, POST /restore {"id", "snapshot"}, GET /health, GET /metrics.

A StepPayload is {"observation", "reward", "score", "done", "terminated", "truncated", "info"}: AgentGym's
four fields plus GEM's. `seq` numbers the steps of one episode (1, 2, ...): a retried step with the number of the
last applied step returns that step's result again instead of stepping twice.

Multi-agent envs (`jgem.envs.multiagent`) extend the contract with an agent field:
  POST /step {"id", "action": {agent: text, ...}, "seq"?}   the joint action of every active agent -> StepPayload
      packed as the pool packs it: "observation" a dict per agent, "reward" the sum, "done" the episode is over,
      "info" {"agents": per-agent infos (each with "active": acts next), "rewards", "terminations", "truncations"}
  POST /step {"id", "action": text, "agent", "seq"?}         one agent's action (an agent as its own client): the env
      steps when every active agent has sent its own; the answer is that agent's view (a StepPayload of its own
      observation, reward, flags and info, plus "agent" and "seq"), or {"waiting_for": [agents], "seq"} until then
  GET  /observation?id=N&agent=A                             agent A's view of the last reset or step (only A's
      observation and info)
  POST /reset {"id", "seed"?, "agent"?}                      the packed payload, or with "agent" that agent's view
A retried agent action with the number of the step that applied it answers that agent's view of that step again.
The agent-less calls (a joint /step, /reset and /observation without "agent") answer every seat's observations:
they are the trainer's. One bearer token guards a server, so agent clients that must not read each other's
secrets need servers (tokens) of their own or a proxy that adds "agent" for them.
"""

from __future__ import annotations

import math
from typing import Any

TOKEN_HEADER = "Authorization"
INSTANCE_HEADER = "X-Jgem-Instance"
DEFAULT_MAX_BODY_BYTES = 1 << 20  # 1 MiB: ample for text actions, small enough to refuse abuse
DEFAULT_PORT = 8700


def bearer(token: str | None) -> dict[str, str]:
    """Request headers carrying `token` (none without one)."""
    return {TOKEN_HEADER: f"Bearer {token}"} if token else {}


def jsonable(value: Any, _depth: int = 0) -> Any:
    """`value` as plain JSON types: numpy scalars/arrays become numbers/lists, anything else its repr.

    Infos travel over the wire; an env that puts an object in its info must not break the server.
    """
    if _depth > 20:
        return repr(value)
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, dict):
        return {str(k): jsonable(v, _depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(v, _depth + 1) for v in value]
    tolist = getattr(value, "tolist", None)  # numpy scalars and arrays
    if callable(tolist):
        return jsonable(tolist(), _depth + 1)
    return repr(value)


def step_payload(obs: Any, reward: float, terminated: bool, truncated: bool, info: dict, score: float) -> dict:
    return {
        "observation": jsonable(obs),
        "reward": float(reward),
        "score": float(score),
        "done": bool(terminated or truncated),
        "terminated": bool(terminated),
        "truncated": bool(truncated),
        "info": jsonable(info),
    }
