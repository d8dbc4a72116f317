"""Clients of the env server: `RemoteEnv` (one env, a `jgem.core.Env`) and `AsyncBatchClient` (many envs).

Failure semantics (what the pool relies on): every request has a timeout; transport errors are retried
with exponential backoff, with no new attempt once `timeout` has passed, so one call ends within about
twice `timeout` (steps carry a sequence number, so a retried step is never applied twice);
when the server is gone or restarted, the in-flight episode ends as truncated with the reason in
`info["fault"]`, and the next `reset` re-creates the env (on a fallback url if the first stays down),
raising `jgem.core.EnvFault` only if no server answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import httpx

from jgem.core import Env, EnvFault, JgemError, StepResult, check_action
from jgem.envs.multiagent.base import check_actions
from jgem.envs.remote.protocol import INSTANCE_HEADER, bearer

_RETRY_STATUS = {502, 503, 504}


class _Gone(Exception):
    """The server answered that our env (or its whole instance) no longer exists."""


def _detail(r: httpx.Response) -> str:
    try:
        return str(r.json().get("detail", r.text))
    except ValueError:
        return r.text[:500]


def fault_payload(reason: str, obs: Any = "") -> dict:
    """The StepPayload of an episode ended by a fault."""
    return {
        "observation": obs,
        "reward": 0.0,
        "score": 0.0,
        "done": True,
        "terminated": False,
        "truncated": True,
        "info": {"fault": reason},
    }


class RemoteEnv(Env):
    """An env living on a jgem env server, driven over HTTP.

    `fallback_urls` are tried, in order, when `base_url` does not answer a create/reset.
    """

    def __init__(
        self,
        base_url: str,
        env_id: str,
        *,
        token: str | None = None,
        env_kwargs: dict | None = None,
        timeout: float = 30.0,
        retries: int = 3,
        backoff_s: float = 0.1,
        fallback_urls: tuple[str, ...] | list[str] = (),
        seed: int | None = None,
    ) -> None:
        super().__init__(seed=seed)
        self.urls = [base_url.rstrip("/"), *(u.rstrip("/") for u in fallback_urls)]
        self.env_id, self.token, self.env_kwargs = env_id, token, dict(env_kwargs or {})
        self.timeout, self.retries, self.backoff_s = timeout, retries, backoff_s
        self._url = 0
        self._http: httpx.Client | None = None
        self._id: int | None = None
        self._instance: str | None = None
        self._seq = 0
        self._running = False
        self._last_obs: Any = ""

    # -- transport ---------------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        return self.urls[self._url]

    def _client(self) -> httpx.Client:
        if self._http is None:
            t = httpx.Timeout(self.timeout, connect=min(self.timeout, 5.0))
            self._http = httpx.Client(base_url=self.base_url, timeout=t, headers=bearer(self.token))
        return self._http

    def _switch(self, url_index: int) -> None:
        if self._http is not None:
            self._http.close()
        self._http, self._url, self._id, self._instance = None, url_index, None, None

    def _post(self, path: str, body: dict) -> dict:
        """POST with retries on transport errors and 502-504; raises `_Gone` on 404/410, EnvFault otherwise."""
        headers = {INSTANCE_HEADER: self._instance} if self._instance else {}
        last = ""
        give_up = time.monotonic() + self.timeout  # no new attempt after this: a call ends within ~2 x timeout
        for attempt in range(self.retries + 1):
            if attempt:
                if time.monotonic() > give_up:
                    break
                time.sleep(self.backoff_s * 2 ** (attempt - 1))
            try:
                r = self._client().post(path, json=body, headers=headers)
            except httpx.TransportError as e:  # refused, reset, timed out: maybe transient
                last = f"{type(e).__name__}: {e}"
                continue
            if r.status_code in _RETRY_STATUS:
                last = f"HTTP {r.status_code}: {_detail(r)}"
                continue
            if r.status_code in (404, 410):
                raise _Gone(_detail(r))
            if r.status_code == 401:
                raise JgemError(f"{self.base_url} refused the token: {_detail(r)}; pass token= the server's --token")
            if r.status_code >= 400:
                raise EnvFault(f"{self.base_url}{path} answered HTTP {r.status_code}: {_detail(r)}")
            return r.json()
        raise EnvFault(f"{self.base_url}{path} failed (retried for {self.timeout:g} s): {last}")

    def _create(self) -> None:
        self._instance = None
        out = self._post("/create", {"env_id": self.env_id, "env_kwargs": self.env_kwargs})
        self._id, self._instance = int(out["id"]), out.get("instance")

    # -- Env API -----------------------------------------------------------------------------------
    def reset(self, seed: int | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed)
        self._running = False
        errors = []
        for k in range(len(self.urls)):
            if k:
                self._switch((self._url + 1) % len(self.urls))
            try:
                for _ in range(2):  # second round: our env was gone (reaped or server restarted), re-create it
                    if self._id is None:
                        self._create()
                    try:
                        out = self._post("/reset", {"id": self._id, "seed": seed})
                        break
                    except _Gone:
                        self._id = None
                else:
                    raise EnvFault("env vanished twice right after being created")
            except (EnvFault, _Gone) as e:
                errors.append(f"{self.base_url}: {e}")
                continue
            self._seq, self._running, self._last_obs = 0, True, out["observation"]
            if isinstance(out["observation"], dict):  # a multi-agent env: GEM's per-agent infos
                return out["observation"], out["info"]["agents"]
            return out["observation"], out["info"]
        raise EnvFault(f"no env server could reset {self.env_id!r}: " + "; ".join(errors))

    def step(self, action: str | dict[str, str]) -> StepResult:  # type: ignore[override]
        if isinstance(action, dict):
            check_actions(action, repr(self))
        else:
            check_action(action)
        if not self._running:
            raise JgemError(f"{self!r}: step() without a running episode; call reset() first")
        self._seq += 1
        try:
            out = self._post("/step", {"id": self._id, "action": action, "seq": self._seq})
        except (EnvFault, _Gone) as e:
            if isinstance(e, _Gone):
                self._id = None  # the server lost it: the next reset creates a new one
            self._running = False
            fault = {"fault": f"{self.base_url}: {e}"}
            if isinstance(self._last_obs, dict):
                agents = list(self._last_obs)
                return (
                    self._last_obs,
                    dict.fromkeys(agents, 0.0),
                    dict.fromkeys(agents, False),
                    dict.fromkeys(agents, True),
                    {a: dict(fault) for a in agents},
                )
            return self._last_obs, 0.0, False, True, fault
        self._last_obs = out["observation"]
        self._running = not out["done"]
        if isinstance(out["observation"], dict):  # a multi-agent env: GEM's five dicts
            info = out["info"]
            return out["observation"], info["rewards"], info["terminations"], info["truncations"], info["agents"]
        return out["observation"], out["reward"], out["terminated"], out["truncated"], out["info"]

    step._jgem_checks_action = True  # type: ignore[attr-defined]  # checked above: a str, or a dict of str

    def get_state(self) -> dict[str, Any]:
        """A handle to a server-side snapshot (the state itself stays on the server)."""
        if self._id is None:
            raise JgemError(f"{self!r} has no env on a server yet; call reset() before get_state()")
        try:
            key = self._post("/snapshot", {"id": self._id})["snapshot"]
        except _Gone as e:
            raise EnvFault(f"{self.base_url}: cannot snapshot: {e}") from e
        return {
            "url": self.base_url,
            "instance": self._instance,
            "snapshot": key,
            "seq": self._seq,
            "running": self._running,
            "last_obs": self._last_obs,
            "np_random": self.np_random.bit_generator.state,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        if state["url"] not in self.urls:
            raise JgemError(f"state was taken on {state['url']}, which this env does not use ({self.urls})")
        index = self.urls.index(state["url"])
        if index != self._url or self._instance != state["instance"]:
            self._switch(index)
        if self._id is None:
            self._create()
        if self._instance != state["instance"]:
            raise EnvFault(f"{self.base_url} restarted since the snapshot was taken; its snapshots are gone")
        try:
            self._post("/restore", {"id": self._id, "snapshot": state["snapshot"]})
        except _Gone as e:
            raise EnvFault(f"{self.base_url}: cannot restore: {e}") from e
        self._running, self._last_obs = state["running"], state["last_obs"]
        self._seq = 0  # the server counts steps from 0 after a restore
        self.np_random.bit_generator.state = state["np_random"]

    def spawn(self, same_state: bool = False) -> Env:
        clone = RemoteEnv(
            self.base_url,
            self.env_id,
            token=self.token,
            env_kwargs=self.env_kwargs,
            timeout=self.timeout,
            retries=self.retries,
            backoff_s=self.backoff_s,
            fallback_urls=[u for u in self.urls if u != self.base_url],
            seed=int(self.np_random.integers(2**63)),
        )
        clone.spec = self.spec
        if same_state:
            clone.set_state(self.get_state())
        return clone

    def close(self) -> None:
        if self._http is None:
            return
        if self._id is not None:
            # best effort: an unreachable server reaps the env itself after its idle timeout
            with contextlib.suppress(httpx.HTTPError):
                self._http.post(
                    "/close",
                    json={"id": self._id},
                    timeout=min(self.timeout, 2.0),
                    headers={INSTANCE_HEADER: self._instance} if self._instance else {},
                )
        self._http.close()
        self._http, self._id, self._running = None, None, False

    def __repr__(self) -> str:
        return f"<RemoteEnv {self.env_id} @ {self.base_url} id={self._id}>"


class AsyncBatchClient:
    """Many envs on one server, stepped with one request per batch (chunks of `max_batch`, sent concurrently).

    Every result is a StepPayload dict; an env whose step failed gets `fault_payload` (truncated, reason in
    `info["fault"]`).
    """

    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        timeout: float = 30.0,
        retries: int = 3,
        backoff_s: float = 0.1,
        max_batch: int = 512,
    ) -> None:
        self.base_url, self.retries, self.backoff_s = base_url.rstrip("/"), retries, backoff_s
        self.max_batch, self.timeout = max_batch, timeout
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            headers=bearer(token),
            timeout=httpx.Timeout(timeout, connect=min(timeout, 5.0)),
            limits=httpx.Limits(max_connections=64, max_keepalive_connections=64),
        )
        self._seq: dict[int, int] = {}
        self.instance: str | None = None

    async def _post(self, path: str, body: dict) -> dict:
        headers = {INSTANCE_HEADER: self.instance} if self.instance else {}
        last = ""
        give_up = time.monotonic() + self.timeout
        for attempt in range(self.retries + 1):
            if attempt:
                if time.monotonic() > give_up:
                    break
                await asyncio.sleep(self.backoff_s * 2 ** (attempt - 1))
            try:
                r = await self._http.post(path, json=body, headers=headers)
            except httpx.TransportError as e:
                last = f"{type(e).__name__}: {e}"
                continue
            if r.status_code in _RETRY_STATUS:
                last = f"HTTP {r.status_code}: {_detail(r)}"
                continue
            if r.status_code >= 400:
                raise EnvFault(f"{self.base_url}{path} answered HTTP {r.status_code}: {_detail(r)}")
            return r.json()
        raise EnvFault(f"{self.base_url}{path} failed (retried for {self.timeout:g} s): {last}")

    def _chunks(self, items: list) -> list[list]:
        return [items[i : i + self.max_batch] for i in range(0, len(items), self.max_batch)]

    async def create(self, count: int, env_id: str | None = None, env_kwargs: dict | None = None) -> list[int]:
        ids: list[int] = []
        for chunk in self._chunks(list(range(count))):
            out = await self._post("/batch/create", {"count": len(chunk), "env_id": env_id, "env_kwargs": env_kwargs})
            if self.instance is None:
                self.instance = out["instance"]
            ids.extend(out["ids"])
        return ids

    async def _batched(self, path: str, items: list[dict]) -> list[dict]:
        async def one(chunk: list[dict]) -> list[dict]:
            try:
                results = (await self._post(path, {"items": chunk}))["results"]
            except EnvFault as e:
                return [fault_payload(str(e)) for _ in chunk]
            return [fault_payload(r["error"]) if "error" in r else r for r in results]

        parts = await asyncio.gather(*(one(c) for c in self._chunks(items)))
        return [r for part in parts for r in part]

    async def reset(self, ids: list[int], seeds: list[int | None] | None = None) -> list[dict]:
        seeds = seeds if seeds is not None else [None] * len(ids)
        for i in ids:
            self._seq[i] = 0
        return await self._batched("/batch/reset", [{"id": i, "seed": s} for i, s in zip(ids, seeds)])

    async def step(self, ids: list[int], actions: list[str]) -> list[dict]:
        if len(ids) != len(actions):
            raise ValueError(f"{len(ids)} ids but {len(actions)} actions; pass one action per env")
        for i in ids:
            self._seq[i] = self._seq.get(i, 0) + 1
        return await self._batched(
            "/batch/step", [{"id": i, "action": a, "seq": self._seq[i]} for i, a in zip(ids, actions)]
        )

    async def close(self, ids: list[int]) -> None:
        await asyncio.gather(*(self._http.post("/close", json={"id": i}) for i in ids), return_exceptions=True)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncBatchClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
