"""The slot engine's programs are shared between engines of one layout, and the decode state stays on the device."""

from __future__ import annotations

import jax
import pytest
from flax import nnx

from jgem.models.config import preset
from jgem.models.transformer import init_model
from jgem.rollout.config import Sampling
from jgem.rollout.slots import SlotEngine

COMPILE_EVENTS = ("/jax/core/compile/jaxpr_trace_duration", "/jax/core/compile/backend_compile_duration")


@pytest.fixture(scope="module")
def model():
    cfg = preset("tiny", num_layers=2, hidden_size=64, intermediate_size=128, num_heads=4, num_kv_heads=2)
    return cfg, nnx.split(init_model(cfg, seed=0))


class CompileCounter:
    """Traces and XLA compilations while `on`, from jax.monitoring's duration events."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.on = False
        jax.monitoring.register_event_duration_secs_listener(self._event)

    def _event(self, event: str, duration: float, **_) -> None:
        if self.on and event in COMPILE_EVENTS:
            self.events.append(event)


def _play(eng: SlotEngine, split, key) -> list[list[int]]:
    """A prefill into three slots, a copy, and two decode chunks: every program an engine runs."""
    eng.extend(split, [(0, [5, 6, 7, 8], 0), (2, [9, 10], 0)])
    eng.copy([0], [1])
    args = dict(last=[8, 8, 3], pos=[4, 4, 2], ntok=[0, 0, 0], limit=[6] * 3, episode=[0, 1, 2], turn=[0] * 3)
    out: list[list[int]] = [[], [], []]
    for _ in range(2):
        handle, _ = eng.decode(split, [0, 1, 2], **args, key=key, sampling=Sampling())
        for i, (t, _) in enumerate(eng.fetch(handle)):
            out[i] += t.tolist()
        args["last"] = [o[-1] if o else x for o, x in zip(out, args["last"])]
        args["pos"] = [4 + len(out[0]), 4 + len(out[1]), 2 + len(out[2])]
        args["ntok"] = [len(o) for o in out]
    return out


def test_a_second_engine_of_the_same_configuration_compiles_nothing(model):
    cfg, split = model
    counter = CompileCounter()
    key = jax.random.key(1)
    # a slot length no other test uses: the first engine compiles its programs here
    make = lambda: SlotEngine(cfg, num_slots=4, max_len=88, eos_ids=[-5], chunk_steps=3, extend_chunk=16)
    first = make()
    counter.on = True
    ref = _play(first, split, key)
    assert first.num_compilations == 2  # one extend, one decode
    assert counter.events
    counter.events.clear()
    second = make()
    got = _play(second, split, key)
    counter.on = False
    assert counter.events == []  # no trace, no XLA compilation: the second engine ran the first's programs
    assert second.num_compilations == 0
    assert got == ref and all(len(t) == 6 for t in got)


def test_a_chunk_that_goes_on_sends_nothing_to_the_device(model):
    """Decode state lives on the device: a chunk whose slots go on where the last one stopped uploads nothing; a slot
    that starts an action (or restarts) uploads only its own row, and gives the tokens a fresh engine gives."""
    cfg, split = model
    key = jax.random.key(2)
    eng = SlotEngine(cfg, num_slots=4, max_len=64, eos_ids=[-5], chunk_steps=2)
    eng.extend(split, [(s, [5 + s, 6, 7], 0) for s in range(4)])
    state = dict(last=[8] * 4, pos=[3] * 4, ntok=[0] * 4, limit=[6] * 4, episode=[10, 11, 12, 13], turn=[0] * 4)
    toks: list[list[int]] = [[] for _ in range(4)]
    for chunk in range(3):
        if chunk:  # every slot goes on: the host passes what the device already holds
            state["last"] = [t[-1] for t in toks]
            state["pos"] = [3 + len(t) for t in toks]
            state["ntok"] = [len(t) for t in toks]
        with jax.transfer_guard_host_to_device("disallow_explicit" if chunk else "allow"):
            handle, _ = eng.decode(split, range(4), **state, key=key, sampling=Sampling())
        for i, (t, _) in enumerate(eng.fetch(handle)):
            toks[i] += t.tolist()
    assert all(len(t) == 6 for t in toks)
    # slot 1 restarts its action: its row (one per shard, padded to a power of two) is all that goes up
    before = eng._mirror.copy()
    state["last"][1], state["pos"][1], state["ntok"][1] = 8, 3, 0
    sent = []
    send = eng._send
    eng._send = lambda want, changed, k: (sent.append((changed.tolist(), k)), send(want, changed, k))
    handle, _ = eng.decode(split, [1], **{k: [v[1]] for k, v in state.items()}, key=key, sampling=Sampling())
    assert sent == [([1], 1)], (sent, before)  # slots 0, 2, 3 reached their limit: the device stopped them itself
    ((again, _),) = eng.fetch(handle)
    assert len(again) == 2 and again.tolist() == toks[1][:2]


def test_slots_of_different_policies_decode_in_one_chunk_exactly_as_each_policy_alone():
    """Several policies as LoRA adapters on one base (`lora.adapters` 3): 6 slots, each set to its policy
    (`set_adapter`), prefill and decode in the same chunks; every slot samples exactly the tokens and log-probs it
    samples when every slot is on its policy (the same programs and draws), and the policies sample differently."""
    import jax.numpy as jnp
    import numpy as np

    from jgem.models.config import LoraConfig
    from jgem.models.transformer import Transformer

    cfg = preset("tiny", num_layers=2, hidden_size=64, intermediate_size=128, num_heads=4, num_kv_heads=2)
    cfg = cfg.replace(lora=LoraConfig(rank=4, alpha=32.0, adapters=3))
    model = Transformer(cfg, rngs=nnx.Rngs(0))
    state = nnx.state(model, nnx.LoRAParam)  # move every adapter off its zero init, as training does
    keys = iter(jax.random.split(jax.random.key(7), len(jax.tree.leaves(state))))
    nnx.update(model, jax.tree.map(lambda x: x + 0.3 * jax.random.normal(next(keys), x.shape, jnp.float32), state))
    split = nnx.split(model)
    mixed = [2, 0, 1, 1, 2, 0]

    def play(adapters):
        eng = SlotEngine(cfg, num_slots=6, max_len=64, eos_ids=[-5], chunk_steps=4)
        for s, a in enumerate(adapters):
            eng.set_adapter(s, a)
        eng.extend(split, [(s, [5 + s, 6, 7, 8], 0) for s in range(6)])
        state = dict(last=[8] * 6, pos=[4] * 6, ntok=[0] * 6, limit=[8] * 6, episode=list(range(6)), turn=[0] * 6)
        toks, lps = [[] for _ in range(6)], [[] for _ in range(6)]
        for _ in range(2):
            handle, _ = eng.decode(split, list(range(6)), **state, key=jax.random.key(3), sampling=Sampling())
            for i, (t, lp) in enumerate(eng.fetch(handle)):
                toks[i] += t.tolist()
                lps[i] += lp.tolist()
            state["last"] = [t[-1] for t in toks]
            state["pos"] = [4 + len(t) for t in toks]
            state["ntok"] = [len(t) for t in toks]
        return toks, lps

    got = play(mixed)
    alone = {p: play([p] * 6) for p in range(3)}
    for s, p in enumerate(mixed):
        assert got[0][s] == alone[p][0][s] and len(got[0][s]) == 8
        np.testing.assert_array_equal(got[1][s], alone[p][1][s])
    assert len({str(alone[p][0]) for p in range(3)}) == 3  # the policies sample differently
    # `generate` takes each prompt's adapter: the mixed batch samples what each policy alone samples there
    from jgem.rollout.generate import generate

    eng = SlotEngine(cfg, num_slots=6, max_len=64, eos_ids=[-5], chunk_steps=4)
    prompts = [[5 + s, 6, 7, 8] for s in range(6)]
    run = lambda adapters: generate(eng, split, prompts, jax.random.key(3), max_new_tokens=8, adapters=adapters)
    out, each = run(mixed), {p: run([p] * 6) for p in range(3)}
    for s, p in enumerate(mixed):
        assert out[s][0].tolist() == each[p][s][0].tolist()
        np.testing.assert_array_equal(out[s][1], each[p][s][1])
    assert len({str([t.tolist() for t, _ in each[p]]) for p in range(3)}) == 3
