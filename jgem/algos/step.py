"""One training step as one device program: a structural batch goes up, the metrics come down.

After the rollout the host packs the episodes into a `StepInputs` (tokens, masks, the sampler's log-probs, which
episode and turn each action token belongs to, the per-turn rewards `[E, K]`) and uploads it once. `train_step`
then runs, in one jitted program: the reference policy's log-probs (a KL penalty), the critic's values (PPO;
also of the states truncated episodes were cut in: rows of their own that only the critic reads), each turn's
summed KL (REINFORCE++), the registered advantage estimator, the gather of turn advantages and critic targets
onto the tokens, and the learner's `apply_update`. Statistics that span the batch (ReBN's mean and std, group
statistics) are reductions over the global, sharded `[E, K]` arrays inside the program: on several processes XLA's
collectives, not host all-gathers. `prepare` alone (jitted as `prepare_batch`) gives the `TrainBatch` the update
sees, for tests and tools.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import jax
import jax.numpy as jnp
from flax import nnx, struct

from jgem.algos.advantages import compute_advantages
from jgem.algos.algorithms import Algorithm
from jgem.algos.critic import critic_values
from jgem.algos.learner import TrainState, apply_update, policy_logprobs, rowwise
from jgem.algos.types import TrainBatch


@struct.dataclass
class StepInputs:
    """What the host packs after a rollout (B rows of T tokens; E episodes of at most K turns).

    tokens, positions, segment_ids i32[B, T]  as in TrainBatch
    loss_mask bool[B, T]                      sampled action tokens
    old_logprobs f32[B, T]                    the sampler's log-probs on action tokens
    token_episode, token_turn i32[B, T]       the (global) episode and turn of each action token and value position;
                                              -1 elsewhere
    rewards f32[E, K], turn_mask bool[E, K]   per-turn rewards of every episode (all processes': E is global)
    group_ids i32[E]                          episodes of one start state share an id
    role_ids i32[E]                           the seat each episode played in a multi-agent game (0 otherwise)
    value_mask bool[B, T] | None              the last prompt token of each turn, where a critic scores it (critic only)
    bootstrap_tokens, bootstrap_positions, bootstrap_segment_ids i32[Bb, Tb] | None
                                              the prompts of the states truncated episodes were cut in, packed into
                                              rows of their own (critic only: the update never sees them)
    bootstrap_episode i32[Bb, Tb] | None      the (global) episode each such prompt belongs to, at its last token
    adapter_ids i32[B, T] | None              several policies (LoRA adapters on one base): each token's policy
    policy_ids i32[E] | None                  and each episode's; the estimator's statistics (ReBN's mean and std, a
                                              group's baseline) are then per policy, so every policy's advantages are
                                              those of a batch of its own episodes
    expert_ids i32[B, T, M, k] | None         a mixture of experts (only): each token's recorded experts in its M
                                              sparse layers (-1: none), replayed by the policy's forwards with
                                              `LearnerConfig.routing` "replay"
    """

    tokens: jax.Array
    positions: jax.Array
    segment_ids: jax.Array
    loss_mask: jax.Array
    old_logprobs: jax.Array
    token_episode: jax.Array
    token_turn: jax.Array
    rewards: jax.Array
    turn_mask: jax.Array
    group_ids: jax.Array
    role_ids: jax.Array | None = None
    value_mask: jax.Array | None = None
    bootstrap_tokens: jax.Array | None = None
    bootstrap_positions: jax.Array | None = None
    bootstrap_segment_ids: jax.Array | None = None
    bootstrap_episode: jax.Array | None = None
    adapter_ids: jax.Array | None = None
    policy_ids: jax.Array | None = None
    expert_ids: jax.Array | None = None


@dataclass(frozen=True)
class StepSpec:
    """How the batch becomes advantages (static: part of the compiled program's identity).

    advantage: a registered estimator (`ADVANTAGES`), or None for a supervised step (every action token's
    advantage is 1: cross-entropy on the teacher's actions with the reinforce loss). reward_kl_coef > 0 folds each
    turn's summed log pi_old - log pi_ref into its reward (an algorithm with kl="reward")."""

    advantage: str | None
    gamma: float = 1.0
    lam: float = 0.95
    reward_kl_coef: float = 0.0

    @staticmethod
    def of(algorithm: Algorithm, *, gamma: float, lam: float, kl_coef: float) -> StepSpec:
        """An RL step of a registered `algorithm` (its KL coefficient goes to the rewards when its kl is "reward")."""
        coef = kl_coef if algorithm.kl == "reward" else 0.0
        return StepSpec(algorithm.advantage, gamma=gamma, lam=lam, reward_kl_coef=coef)


def reference_logprobs(state: TrainState, sb: StepInputs) -> jax.Array:
    """f32[B, T] log-probs of the batch's tokens under the frozen reference policy."""
    return policy_logprobs(
        state, state.ref_params, sb.tokens, sb.positions, sb.segment_ids, sb.adapter_ids, expert_ids=sb.expert_ids
    )


def values(state: TrainState, tokens, positions, segment_ids) -> jax.Array:
    """f32[B, T] the critic's value at every position."""
    critic = nnx.merge(state.critic_graphdef, state.critic_params, state.critic_state)
    one = lambda tok, pos, seg: critic_values(critic, tok, pos, seg).astype(jnp.float32)
    return rowwise(one, (tokens, positions, segment_ids), state.cfg.micro_batch_size, state.mesh)


def _turn_sums(x: jax.Array, where: jax.Array, sb: StepInputs) -> jax.Array:
    """f32[E, K]: the sum of x[B, T] over the `where` tokens of each (episode, turn)."""
    E, K = sb.rewards.shape
    e = jnp.where(where & (sb.token_episode >= 0), sb.token_episode, E)  # E: out of range, dropped
    k = jnp.clip(sb.token_turn, 0, K - 1)
    return jnp.zeros((E, K), jnp.float32).at[e, k].add(jnp.where(where, x, 0.0).astype(jnp.float32), mode="drop")


def _on_tokens(table: jax.Array, where: jax.Array, sb: StepInputs) -> jax.Array:
    """f32[B, T]: table[E, K] at each `where` token's (episode, turn); 0 elsewhere."""
    E, K = table.shape
    e = jnp.clip(sb.token_episode, 0, E - 1)
    k = jnp.clip(sb.token_turn, 0, K - 1)
    return jnp.where(where, table[e, k], 0.0)


def prepare(state: TrainState, sb: StepInputs, spec: StepSpec) -> TrainBatch:
    """The `TrainBatch` the learner updates on, computed from `sb` on the devices."""
    if spec.advantage is None:  # supervised: every action token counts once, nothing else is needed
        adv = _on_tokens(sb.turn_mask.astype(jnp.float32), sb.loss_mask, sb)
        batch = TrainBatch(sb.tokens, sb.positions, sb.segment_ids, sb.loss_mask, adv, sb.old_logprobs)
        return batch.replace(adapter_ids=sb.adapter_ids, expert_ids=sb.expert_ids)
    ref = reference_logprobs(state, sb) if state.ref_params is not None else None
    options: dict = {}
    critic = state.critic_params is not None
    if critic:
        if sb.value_mask is None or sb.bootstrap_tokens is None:
            raise ValueError("a TrainState with a critic needs StepInputs.value_mask and the bootstrap_* arrays")
        v = values(state, sb.tokens, sb.positions, sb.segment_ids)
        options["values"] = _turn_sums(v, sb.value_mask, sb)
        bv = values(state, sb.bootstrap_tokens, sb.bootstrap_positions, sb.bootstrap_segment_ids)
        E = sb.rewards.shape[0]
        mark = sb.bootstrap_episode >= 0
        boot_e = jnp.where(mark, sb.bootstrap_episode, E)  # E: out of range, dropped
        options["bootstrap_values"] = jnp.zeros((E,), jnp.float32).at[boot_e].add(jnp.where(mark, bv, 0.0), mode="drop")
    if spec.reward_kl_coef:
        if ref is None:
            raise ValueError("reward_kl_coef > 0 needs a TrainState with ref_params (init_train_state(reference=True))")
        options["kl"] = _turn_sums(sb.old_logprobs - ref, sb.loss_mask, sb)
    estimate = lambda turn_mask: compute_advantages(
        spec.advantage,
        sb.rewards,
        turn_mask,
        group_ids=sb.group_ids,
        role_ids=sb.role_ids,
        gamma=spec.gamma,
        lam=spec.lam,
        kl_coef=spec.reward_kl_coef,
        **options,
    )
    if sb.policy_ids is None:
        out = estimate(sb.turn_mask)
    else:  # each policy's episodes alone (the others masked out), then each episode takes its own policy's
        out = None
        for p in range(state.policies):
            mine = sb.policy_ids[:, None] == p
            part = estimate(sb.turn_mask & mine)
            out = part if out is None else jax.tree.map(functools.partial(jnp.where, mine), part, out)
    batch = TrainBatch(
        sb.tokens,
        sb.positions,
        sb.segment_ids,
        sb.loss_mask,
        _on_tokens(out.advantages, sb.loss_mask, sb),
        sb.old_logprobs,
        ref_logprobs=ref,
        adapter_ids=sb.adapter_ids,
        expert_ids=sb.expert_ids,
    )
    if critic:
        batch = batch.replace(
            returns=_on_tokens(out.returns, sb.value_mask, sb),
            values=jnp.where(sb.value_mask, v, 0.0),
            value_mask=sb.value_mask,
        )
    return batch


prepare_batch = jax.jit(prepare, static_argnames="spec")


@functools.partial(jax.jit, static_argnames="spec", donate_argnums=0)
def train_step(state: TrainState, sb: StepInputs, spec: StepSpec) -> tuple[TrainState, dict[str, jax.Array]]:
    """`prepare` then `apply_update`, one program: the new state and the update's metrics."""
    return apply_update(state, prepare(state, sb, spec))
