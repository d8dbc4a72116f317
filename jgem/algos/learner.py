"""The learner: `TrainState` and one jitted, sharded, donated `update(state, batch) -> (state, metrics)`.

Inside one call: `epochs` passes over the batch, each split into `minibatches` optimizer steps, each step
accumulating gradients over micro-batches with `lax.scan`. Losses are (sum, denominator) pairs, so the
accumulated gradient equals the full-minibatch gradient whatever the micro-batch size or device count.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx, struct
from jax.sharding import Mesh, NamedSharding

from jgem.algos import corrections, losses
from jgem.algos.config import LearnerConfig
from jgem.algos.critic import critic_values
from jgem.algos.types import TrainBatch
from jgem.models.head import token_logprobs, token_logprobs_routed  # noqa: F401 (token_logprobs: re-exported)
from jgem.models.lora import trainable
from jgem.models.moe import routing_mismatch
from jgem.registry import Registry
from jgem.sharding.rules import (
    DEFAULT_RULES,
    Rules,
    batch_spec,
    check_batch_size,
    constrain_tree,
    put_global,
    shard_tree,
    tree_shardings,
)

# learning-rate schedules by name: fn(cfg, lr) -> the schedule after the warmup (`make_schedule` adds that)
SCHEDULES: Registry = Registry("schedule")


@SCHEDULES.register("constant")
def _constant(cfg: LearnerConfig, lr: float) -> optax.Schedule:
    return optax.constant_schedule(lr)


@SCHEDULES.register("linear")
def _linear(cfg: LearnerConfig, lr: float) -> optax.Schedule:
    return optax.linear_schedule(lr, lr * cfg.min_lr_ratio, cfg.decay_steps)


@SCHEDULES.register("cosine")
def _cosine(cfg: LearnerConfig, lr: float) -> optax.Schedule:
    return optax.cosine_decay_schedule(lr, cfg.decay_steps, alpha=cfg.min_lr_ratio)


def config_errors(cfg: LearnerConfig, name: Callable[[str], str] = str) -> list[str]:
    """What `cfg` names that is not registered: its policy loss, schedule, aggregation, KL estimator or off-policy
    correction, and a correction's bounds it does not take or that cannot hold (each message names the field as
    `name(field)`). Here, not in the config, because these registries fill as the learner's modules load."""
    named = (
        ("policy_loss", losses.POLICY_LOSSES),
        ("schedule", SCHEDULES),
        ("aggregation", losses.AGGREGATIONS),
        ("kl_estimator", losses.KL_ESTIMATORS),
    )
    unknown = [e for k, reg in named for e in reg.name_errors(getattr(cfg, k), name(k))]
    return unknown + corrections.correction_errors(cfg, name)


class TrainState(struct.PyTreeNode):
    """Device state of the learner; graphdefs, config and mesh are static (part of the tree structure)."""

    step: jax.Array  # number of `update` calls
    params: Any  # nnx.State of what trains in the policy: every Param, or with LoRA only the adapters
    opt_state: Any
    rng: jax.Array
    model_state: Any = None  # the policy's other variables, not trained (with LoRA: the frozen base weights)
    critic_params: Any = None
    critic_opt_state: Any = None
    critic_state: Any = None
    ref_params: Any = None  # frozen reference policy for KL penalties (not trained; checkpointed with the rest)
    graphdef: Any = struct.field(pytree_node=False, default=None)
    critic_graphdef: Any = struct.field(pytree_node=False, default=None)
    cfg: LearnerConfig = struct.field(pytree_node=False, default=LearnerConfig())
    mesh: Mesh | None = struct.field(pytree_node=False, default=None)
    rules: Rules = struct.field(pytree_node=False, default=DEFAULT_RULES)
    # several policies as LoRA adapters on one base (`LoraConfig.adapters`): every trained leaf stacks them on its
    # first axis, and a batch's `adapter_ids` say whose each token is
    policies: int = struct.field(pytree_node=False, default=1)

    def model(self) -> nnx.Module:
        """The policy as an nnx module (for sampling and evaluation)."""
        return nnx.merge(self.graphdef, self.params, self.model_state)


def make_schedule(cfg: LearnerConfig, lr: float) -> optax.Schedule:
    """A linear warmup from 0 over `warmup_steps`, then the registered schedule `cfg.schedule` (from lr)."""
    decay = SCHEDULES.get(cfg.schedule)(cfg, lr)
    if cfg.warmup_steps == 0:
        return decay
    return optax.join_schedules([optax.linear_schedule(0.0, lr, cfg.warmup_steps), decay], [cfg.warmup_steps])


def make_optimizer(cfg: LearnerConfig, *, critic: bool = False, policies: int = 1) -> optax.GradientTransformation:
    """AdamW (decay on >= 2-d params only) behind global-norm clipping; with several `policies` (LoRA adapters
    stacked on every trained leaf's first axis), that optimizer for each policy apart (`per_policy`)."""
    lr, max_norm = (cfg.critic_lr, cfg.critic_max_grad_norm) if critic else (cfg.lr, cfg.max_grad_norm)
    adamw = optax.adamw(
        make_schedule(cfg, lr),
        b1=cfg.b1,
        b2=cfg.b2,
        eps=cfg.adam_eps,
        weight_decay=cfg.weight_decay,
        mask=lambda p: jax.tree.map(lambda x: x.ndim >= 2, p),
    )
    tx = adamw if max_norm is None else optax.chain(optax.clip_by_global_norm(max_norm), adamw)
    return tx if policies == 1 else per_policy(tx)


def per_policy(tx: optax.GradientTransformation) -> optax.GradientTransformation:
    """`tx` run for each policy apart, vmapped over the first axis of every leaf (the policies, stacked): each
    policy's gradient clipped by its own norm, its own moments and its own step count (bias correction, schedule),
    so a policy that sat a step out takes its next one as a policy training alone would."""
    return optax.GradientTransformation(jax.vmap(tx.init), jax.vmap(tx.update))


def policy_norms(tree: Any) -> jax.Array:
    """f32[P]: the global norm of each policy's part of `tree`, whose leaves stack the policies on their first axis
    (a model with several LoRA adapters: its trained params, their gradients)."""
    sq = [jnp.sum(jnp.square(x.astype(jnp.float32)), axis=tuple(range(1, x.ndim))) for x in jax.tree.leaves(tree)]
    return jnp.sqrt(functools.reduce(jnp.add, sq))


def _per_policy(v: jax.Array, x: jax.Array) -> jax.Array:
    """v[P] shaped to broadcast against x[P, ...]."""
    return v.reshape((-1,) + (1,) * (x.ndim - 1))


def init_train_state(
    model: nnx.Module,
    cfg: LearnerConfig,
    mesh: Mesh | None = None,
    *,
    critic: nnx.Module | None = None,
    seed: int = 0,
    rules: Rules = DEFAULT_RULES,
    reference: bool = False,
    optimizer: bool = True,
) -> TrainState:
    """Split `model` (and the optional `critic`) into what trains (`jgem.models.lora.trainable`: every Param, or
    a LoRA model's adapters and value head) and the rest, and build optimizer states for the former, placed on
    `mesh`. With `reference`, `ref_params` starts as a copy of the params (the KL penalty's reference policy;
    with LoRA, of the adapters: the reference is the frozen base plus its initial, zero-output adapters). Without
    `optimizer`, no optimizer state (`opt_state` None): a policy to sample from, not to update."""
    if errors := config_errors(cfg):
        raise ValueError("LearnerConfig: " + "; ".join(errors))
    graphdef, params, model_state = nnx.split(model, trainable(model), ...)
    policies = model.cfg.lora.policies
    if policies > 1:
        if critic is not None:
            raise ValueError(
                f"a critic with {policies} policies (LoRA adapters): the critic is one model, the policies several; "
                "use an estimator without a critic (rebn, rae, grpo, rloo, reinforce_pp)"
            )
        odd = [jax.tree_util.keystr(k) for k, x in jax.tree.leaves_with_path(params) if x.shape[:1] != (policies,)]
        if odd:
            raise ValueError(f"{policies} policies, but these trained weights are not stacked per policy: {odd}")
    critic_graphdef = critic_params = critic_state = critic_opt = None
    place = functools.partial(_place, mesh=mesh, rules=rules)
    params, model_state = place(params), place(model_state)
    opt = make_optimizer(cfg, policies=policies)
    opt_state = _init_opt(opt, params, mesh=mesh, rules=rules) if optimizer else None
    if critic is not None:
        critic_graphdef, critic_params, critic_state = nnx.split(critic, trainable(critic), ...)
        critic_params, critic_state = place(critic_params), place(critic_state)
        critic_opt = _init_opt(make_optimizer(cfg, critic=True), critic_params, mesh=mesh, rules=rules)
    ref_params = jax.tree.map(jnp.copy, params) if reference else None
    rng = jax.random.key_data(jax.random.key(seed))
    step = jnp.zeros((), jnp.int32)
    if mesh is not None:  # replicated, as update returns them: the second call must not recompile
        rng, step = (put_global(x, NamedSharding(mesh, jax.sharding.PartitionSpec())) for x in (rng, step))
    return TrainState(
        step=step,
        params=params,
        opt_state=opt_state,
        rng=rng,
        model_state=model_state,
        critic_params=critic_params,
        critic_opt_state=critic_opt,
        critic_state=critic_state,
        ref_params=ref_params,
        graphdef=graphdef,
        critic_graphdef=critic_graphdef,
        cfg=cfg,
        mesh=mesh,
        rules=rules,
        policies=policies,
    )


def reset_optimizer(state: TrainState) -> TrainState:
    """`state` with a fresh policy optimizer state for its current `cfg` (count 0, zero moments), placed like
    `init_train_state` places it; e.g. between a supervised phase and RL."""
    return state.replace(
        opt_state=_init_opt(
            make_optimizer(state.cfg, policies=state.policies), state.params, mesh=state.mesh, rules=state.rules
        )
    )


def _init_opt(optimizer: optax.GradientTransformation, params: Any, *, mesh: Mesh | None, rules: Rules) -> Any:
    """`optimizer.init(params)` computed straight into its shardings on `mesh` (the moments shard as their params):
    no unsharded copy on one device (an 8B model's AdamW moments would not fit one chip), and on several processes
    arrays whose shards orbax can save."""
    if mesh is None:
        return optimizer.init(params)
    shardings = tree_shardings(jax.eval_shape(optimizer.init, params), mesh, rules)
    return jax.jit(optimizer.init, out_shardings=shardings)(params)


def _place(tree: Any, *, mesh: Mesh | None, rules: Rules) -> Any:
    """Sharded on `mesh` by the logical rules, or fresh copies without one (update donates the state, and the
    caller's arrays must stay usable)."""
    return jax.tree.map(jnp.copy, tree) if mesh is None else shard_tree(tree, mesh, rules)


# ----------------------------------------------------------------------------- forward passes


def policy_loss(params, model_state, graphdef, batch: TrainBatch, cfg: LearnerConfig, policies: int = 1):
    """Micro-batch policy loss: (loss sum, (denominator, metric sums)). Differentiable in params.

    With several `policies` (the batch's `adapter_ids`), the sum and the denominator are per policy ([P]), each
    aggregated over that policy's tokens alone; the loss differentiated is their sum, and since an adapter's
    output depends only on its own tokens, adapter p's gradient is that of its own sum (the caller divides it by
    its own denominator).

    A mixture of experts (the batch's `expert_ids`) replays the recorded routing with `cfg.routing` "replay", adds
    `router_aux_loss_coef` x its load-balancing loss (weighted by the denominator, so the accumulated gradient is the
    micro-batches' aux losses averaged as the loss is) and counts the recorded choices its router would not make."""
    model = nnx.merge(graphdef, params, model_state)
    logp, entropy, routing = token_logprobs_routed(
        model,
        batch.tokens,
        batch.positions,
        batch.segment_ids,
        chunk_size=cfg.logprob_chunk_size,
        temperature=cfg.temperature,
        keep_logits_mb=cfg.keep_logits_mb,
        adapter_ids=batch.adapter_ids,
        expert_ids=replayed(batch.expert_ids, cfg),
    )
    mask = batch.loss_mask
    per_token, clipped = losses.POLICY_LOSSES.get(cfg.policy_loss)(logp, batch, cfg)
    if batch.is_weights is not None:
        per_token = per_token * batch.is_weights
    if cfg.kl_coef and batch.ref_logprobs is None:
        raise ValueError("kl_coef > 0 needs TrainBatch.ref_logprobs (reference-policy logprobs); pass them")
    # reported whenever reference logprobs are given, even without a penalty
    kl = (
        jnp.zeros_like(logp)
        if batch.ref_logprobs is None
        else losses.kl_penalty(logp, batch.ref_logprobs, cfg.kl_estimator)
    )
    # terms with a zero coefficient stay out of the graph: 0 * x still costs x's backward pass
    total = per_token
    if cfg.kl_coef:
        total = total + cfg.kl_coef * kl
    if cfg.entropy_coef:
        total = total - cfg.entropy_coef * entropy
    agg = lambda k: losses.aggregate(total, k, batch.segment_ids, cfg.aggregation, cfg.loss_norm_constant)
    m = mask.astype(jnp.float32)
    sg = jax.lax.stop_gradient
    per_policy = {}
    if batch.adapter_ids is None:
        loss_sum, denom = agg(mask)
    else:
        mine = [mask & (batch.adapter_ids == p) for p in range(policies)]
        sums, denom = (jnp.stack(x) for x in zip(*map(agg, mine)))
        loss_sum = sums.sum()
        per_policy = {"policy_loss": sg(sums), "policy_tokens": jnp.stack([k.sum() for k in mine]).astype(jnp.float32)}
    if model.cfg.sparse_layers:  # a mixture of experts: its load-balancing loss
        aux = routing.aux_loss()
        coef = model.cfg.router_aux_loss_coef
        if coef:
            loss_sum = loss_sum + coef * aux * sg(denom)
        per_policy["aux_loss"] = sg(aux * denom)
    if batch.expert_ids is not None:  # and the recorded routing against its router's own choice
        recorded = jnp.moveaxis(batch.expert_ids, 2, 0)  # [M, B, T, k], as the model routes
        mismatches, choices = routing_mismatch(recorded, routing.top_ids)
        per_policy |= {"routing_mismatches": mismatches, "routing_choices": choices}
    metric_sums = per_policy | {
        "pg_loss": sg(per_token * m).sum(),
        "entropy": sg(entropy * m).sum(),
        "kl": sg(kl * m).sum(),
        "clip_frac": (clipped * m).sum(),
        "ratio": sg(jnp.exp(logp - batch.old_logprobs) * m).sum(),
        "tokens": m.sum(),
        "loss": sg(loss_sum),
    }
    # sampler vs learner: meaningful on the first optimizer step, where the params are the sampling ones
    # (with a correction, old_logprobs are already the learner's; sampler_logprobs keeps the sampler's)
    sampler = batch.old_logprobs if batch.sampler_logprobs is None else batch.sampler_logprobs
    d = sg(logp) - sampler
    metric_sums |= {
        "logprob_diff_mean": (jnp.abs(d) * m).sum(),
        "sampler_kl": (losses.kl_penalty(sampler, sg(logp), "k3") * m).sum(),  # KL(sampler || learner), k3
        "logprob_diff_max": jnp.where(mask, jnp.abs(d), 0.0).max(),
    }
    return loss_sum, (denom, metric_sums)


def replayed(expert_ids: jax.Array | None, cfg: LearnerConfig) -> jax.Array | None:
    """The routing a policy forward replays: a batch's recorded `expert_ids` [B, T, M, k] as the model takes them
    ([M, B, T, k]) with `cfg.routing` "replay"; None (the router chooses) with "recompute" or a dense model."""
    if expert_ids is None or cfg.routing != "replay":
        return None
    return jnp.moveaxis(expert_ids, 2, 0)


def critic_loss(params, critic_state, graphdef, batch: TrainBatch, cfg: LearnerConfig):
    """Micro-batch value loss at value positions: (sum, (denominator, metric sums))."""
    critic = nnx.merge(graphdef, params, critic_state)
    v = critic_values(critic, batch.tokens, batch.positions, batch.segment_ids)
    per = losses.value_loss(v, batch.returns, batch.values, cfg.value_clip)
    s, d = losses.aggregate(per, batch.value_mask)
    return s, (d, {"value_loss": jax.lax.stop_gradient(s), "value_tokens": d})


# ----------------------------------------------------------------------------- the update


def _micro_layout(batch: TrainBatch, cfg: LearnerConfig, mesh: Mesh | None) -> tuple[int, int, int]:
    """(minibatches M, micro-batches per minibatch n, rows per micro-batch r) with checks naming the fix."""
    B = batch.tokens.shape[0]
    M = cfg.minibatches
    if B % M:
        raise ValueError(f"batch of {B} rows is not divisible into minibatches={M}; use a batch multiple of {M}")
    mb = B // M
    r = cfg.micro_batch_size or mb
    if mb % r:
        raise ValueError(
            f"minibatch of {mb} rows (batch {B} / minibatches {M}) is not divisible by "
            f"micro_batch_size {r}; use a micro_batch_size dividing {mb}"
        )
    if mesh is not None:
        check_batch_size(r, mesh, what="micro_batch_size (rows per micro-batch)")
    return M, mb // r, r


def _split(batch: TrainBatch, M: int, n: int, r: int, mesh: Mesh | None) -> TrainBatch:
    """[B, T] -> [M, n, r, T]: row (k*n + j)*M + m goes to minibatch m, micro-batch j, slot k.

    Minibatch membership (row mod M) does not depend on the micro-batch size, so results do not either; the
    sharded row axis stays the leading split axis (r), so each device keeps its own rows: no communication.
    """

    def f(x):
        if x is None:
            return None
        y = jnp.transpose(x.reshape((r, n, M) + x.shape[1:]), (2, 1, 0) + tuple(range(3, x.ndim + 2)))
        if mesh is not None:
            spec = jax.sharding.PartitionSpec(None, None, *batch_spec(x.ndim))
            y = jax.lax.with_sharding_constraint(y, NamedSharding(mesh, spec))
        return y

    return jax.tree.map(f, batch, is_leaf=lambda x: x is None)


def _where_tree(pred, a, b):
    return jax.tree.map(lambda x, y: jnp.where(pred, x, y), a, b)


def _optimizer_step(state: TrainState, mb: TrainBatch) -> tuple[TrainState, dict]:
    """One optimizer step on one minibatch [n, r, T]: accumulate grads over n micro-batches, apply if finite."""
    cfg, mesh, rules = state.cfg, state.mesh, state.rules
    has_critic = state.critic_params is not None
    grad_policy = jax.grad(policy_loss, has_aux=True)
    grad_critic = jax.grad(critic_loss, has_aux=True)

    def micro_out(x: TrainBatch) -> dict:
        g, (d, ms) = grad_policy(state.params, state.model_state, state.graphdef, x, cfg, state.policies)
        # keep the accumulators laid out like the params (fsdp/tensor sharded), not replicated
        out = {"g": constrain_tree(g, mesh, rules), "d": d, "m": ms}
        if has_critic:
            cg, (cd, cms) = grad_critic(state.critic_params, state.critic_state, state.critic_graphdef, x, cfg)
            out.update(cg=constrain_tree(cg, mesh, rules), cd=cd, cm=cms)
        return out

    def micro(acc, x: TrainBatch):
        out = micro_out(x)
        mx = jnp.maximum(acc["m"]["logprob_diff_max"], out["m"]["logprob_diff_max"])
        acc = jax.tree.map(jnp.add, acc, out)
        acc["m"]["logprob_diff_max"] = mx
        return acc, None

    shapes = jax.eval_shape(micro_out, jax.tree.map(lambda y: y[0], mb))
    acc0 = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)
    acc0["g"] = constrain_tree(acc0["g"], mesh, rules)
    if has_critic:
        acc0["cg"] = constrain_tree(acc0["cg"], mesh, rules)
    acc, _ = jax.lax.scan(micro, acc0, mb)

    d = jnp.maximum(acc["d"], 1e-9)  # [P] with several policies: each policy's gradient over its own denominator
    grads = jax.tree.map(lambda g: g / (d if d.ndim == 0 else _per_policy(d, g)), acc["g"])
    grad_norm = optax.global_norm(grads)
    finite = jnp.isfinite(grad_norm)
    plain = ("tokens", "loss", "logprob_diff_max", "policy_loss", "policy_tokens", "aux_loss")
    plain += ("routing_mismatches", "routing_choices")
    metrics = {k: v / jnp.maximum(acc["m"]["tokens"], 1.0) for k, v in acc["m"].items() if k not in plain}
    metrics["logprob_diff_max"] = acc["m"]["logprob_diff_max"]
    if "aux_loss" in acc["m"]:  # a mixture of experts: its load-balancing loss
        metrics["aux_loss"] = acc["m"]["aux_loss"] / d
    if "routing_choices" in acc["m"]:  # and its router against the recorded routing
        choices = acc["m"]["routing_choices"]
        metrics["routing_mismatch_frac"] = acc["m"]["routing_mismatches"] / jnp.maximum(choices, 1.0)
    metrics["grad_norm"] = grad_norm
    keep = None  # with several policies: which policies' params and moments this step updates
    if state.policies == 1:
        metrics["loss"] = acc["m"]["loss"] / d
    else:
        losses_p, norms = acc["m"]["policy_loss"] / d, policy_norms(grads)
        # a policy without tokens here keeps its params, moments and step count (AdamW would still move them); a
        # non-finite gradient skips the policies it reaches (through the shared loss sum and the adapters' one-hot
        # selection, in practice every one: a NaN adapter would poison every token's forward)
        keep = jnp.isfinite(norms) & (acc["m"]["policy_tokens"] > 0)
        finite = jnp.isfinite(norms).all()
        metrics["loss"] = losses_p.sum()
        for p in range(state.policies):
            metrics[f"policy{p}/loss"], metrics[f"policy{p}/grad_norm"] = losses_p[p], norms[p]
            metrics[f"policy{p}/tokens"] = acc["m"]["policy_tokens"][p]
    tx = make_optimizer(cfg, policies=state.policies)
    # the optimizer runs in each param's dtype, as its state was made (bf16 params: bf16 moments); the division
    # by the float32 token count made the gradients float32
    grads = jax.tree.map(lambda g, p: g.astype(p.dtype), grads, state.params)
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    new = {"params": params, "opt_state": opt_state}
    old = {"params": state.params, "opt_state": state.opt_state}
    if has_critic:
        cgrads = jax.tree.map(lambda g: g / jnp.maximum(acc["cd"], 1e-9), acc["cg"])
        cnorm = optax.global_norm(cgrads)
        finite = finite & jnp.isfinite(cnorm)
        cgrads = jax.tree.map(lambda g, p: g.astype(p.dtype), cgrads, state.critic_params)
        cupdates, copt = make_optimizer(cfg, critic=True).update(cgrads, state.critic_opt_state, state.critic_params)
        new.update(critic_params=optax.apply_updates(state.critic_params, cupdates), critic_opt_state=copt)
        old.update(critic_params=state.critic_params, critic_opt_state=state.critic_opt_state)
        metrics["value_loss"] = acc["cm"]["value_loss"] / jnp.maximum(acc["cd"], 1e-9)
        metrics["critic_grad_norm"] = cnorm
    # non-finite guard: a step with inf/nan gradients leaves params and optimizer state untouched
    if keep is None:
        kept = _where_tree(finite, new, old)
    else:  # per policy: every leaf (params, moments, step counts) stacks the policies first
        kept = jax.tree.map(lambda x, y: jnp.where(_per_policy(keep, x), x, y), new, old)
    kept = constrain_tree(kept, mesh, rules)
    metrics["skipped"] = (~finite).astype(jnp.float32)
    return state.replace(**kept), metrics


def _mismatch(learner: jax.Array, sampler: jax.Array, mask: jax.Array) -> dict[str, jax.Array]:
    """Sampler vs learner log-probs on the `mask` tokens: mean and max |difference|, and KL(sampler || learner)."""
    m = mask.astype(jnp.float32)
    n = jnp.maximum(m.sum(), 1.0)
    d = learner - sampler
    return {
        "logprob_diff_mean": (jnp.abs(d) * m).sum() / n,
        "logprob_diff_max": jnp.where(mask, jnp.abs(d), 0.0).max(),
        "sampler_kl": (losses.kl_penalty(sampler, learner, "k3") * m).sum() / n,
    }


def apply_update(state: TrainState, batch: TrainBatch) -> tuple[TrainState, dict[str, jax.Array]]:
    """epochs x minibatches optimizer steps on `batch`; returns the new state and averaged metrics (traceable: `update`
    is this jitted; `jgem.algos.step.train_step` runs it in the same program as the batch's preparation).

    Metrics: loss, pg_loss, entropy, kl, clip_frac, ratio, grad_norm (before clipping), skipped (number of
    steps dropped for non-finite gradients), adv_mean/std/min/max over loss tokens, lr, and the critic's
    value_loss / critic_grad_norm with a critic; the sampler/learner mismatch on action tokens at the sampling
    params (the first optimizer step's minibatch, or the whole batch with an off-policy correction, which computes
    the learner's log-probs of every token there anyway): logprob_diff_mean / logprob_diff_max (|learner - sampler|)
    and sampler_kl (KL(sampler || learner), k3); with a correction also is_masked_frac, is_capped_frac and
    is_weight_mean (`jgem.algos.corrections.correct`).
    """
    cfg, mesh = state.cfg, state.mesh
    batch.validate()  # shapes are static: this runs once, at trace time
    M, n, r = _micro_layout(batch, cfg, mesh)
    B = batch.tokens.shape[0]
    if state.critic_params is not None and batch.value_mask is None:
        raise ValueError("this TrainState has a critic; TrainBatch needs returns, values and value_mask")
    if state.critic_params is None:
        batch = batch.replace(returns=None, values=None, value_mask=None)

    whole_batch_mismatch, corrected = None, {}
    packed = batch  # the advantage metrics are of every action token, whatever a correction drops
    if cfg.recomputes_proximal:
        # the proximal policy's log-probs (the params before this update, i.e. the sampling ones in a synchronous
        # run): PPO's ratio is taken against them, and the registered correction weighs or drops each token by
        # pi_prox / pi_behaviour (`jgem.algos.corrections`)
        lp0 = policy_logprobs(
            state,
            state.params,
            batch.tokens,
            batch.positions,
            batch.segment_ids,
            adapter_ids=batch.adapter_ids,
            expert_ids=batch.expert_ids,
        )
        whole_batch_mismatch = _mismatch(lp0, batch.old_logprobs, batch.loss_mask)
        batch, corrected = corrections.correct(batch, lp0, cfg)

    rng, epoch_rng = jax.random.split(jax.random.wrap_key_data(state.rng))

    def epoch(st, key):
        data = batch
        if cfg.shuffle and M > 1:
            perm = jax.random.permutation(key, B)
            data = jax.tree.map(lambda x: jnp.take(x, perm, axis=0), batch)
        return jax.lax.scan(_optimizer_step, st, _split(data, M, n, r, mesh))

    state, metrics = jax.lax.scan(epoch, state, jax.random.split(epoch_rng, cfg.epochs))
    # the sampler/learner mismatch is the first optimizer step's (before any update: the sampling params), or
    # the whole batch's when a correction already computed the learner's log-probs of every token there
    first = {k: metrics.pop(k)[0, 0] for k in ("logprob_diff_mean", "logprob_diff_max", "sampler_kl")}
    first = whole_batch_mismatch or first
    if "routing_mismatch_frac" in metrics:  # the router against the record at the sampling params, as the above
        first["routing_mismatch_frac"] = metrics.pop("routing_mismatch_frac")[0, 0]
    # a skipped step's metrics are inf/nan: average the applied steps (nan if none), count the skipped
    applied = metrics["skipped"] == 0
    n_applied = applied.sum()
    policy = {k: metrics.pop(k) for k in list(metrics) if k.startswith("policy")}
    metrics = {
        k: (
            v.sum()
            if k == "skipped"
            else jnp.where(n_applied > 0, jnp.where(applied, v, 0.0).sum() / jnp.maximum(n_applied, 1), jnp.nan)
        )
        for k, v in metrics.items()
    }
    for p in range(state.policies if policy else 0):  # each policy's over the optimizer steps it took part in
        tokens = policy[f"policy{p}/tokens"]
        took = (tokens > 0) & applied
        n = took.sum()
        for name in ("loss", "grad_norm"):
            v = policy[f"policy{p}/{name}"]
            metrics[f"policy{p}/{name}"] = jnp.where(n > 0, jnp.where(took, v, 0.0).sum() / jnp.maximum(n, 1), jnp.nan)
        metrics[f"policy{p}/tokens"] = tokens.sum() / cfg.epochs  # the batch's, counted once
    metrics |= first | corrected
    m = packed.loss_mask
    adv = packed.advantages
    cnt = jnp.maximum(m.sum(), 1)
    adv_mean = jnp.where(m, adv, 0.0).sum() / cnt
    metrics.update(
        adv_mean=adv_mean,
        adv_std=jnp.sqrt(jnp.where(m, jnp.square(adv - adv_mean), 0.0).sum() / cnt),
        adv_min=jnp.where(m, adv, jnp.inf).min(),
        adv_max=jnp.where(m, adv, -jnp.inf).max(),
        lr=make_schedule(cfg, cfg.lr)(jnp.max(_opt_count(state.opt_state))),  # several policies: the furthest
    )
    state = state.replace(step=state.step + 1, rng=jax.random.key_data(rng))
    return state, metrics


update = jax.jit(apply_update, donate_argnums=0)


def rowwise(fn, arrays: tuple[jax.Array, ...], rows: int | None, mesh: Mesh | None) -> jax.Array:
    """fn(*[r, T] arrays) -> [r, T] over the batch `rows` rows at a time (a scan: the memory of one chunk; all rows
    when `rows` is None or does not divide them), laid out as `_split` lays out micro-batches (each device keeps its
    own rows). No gradient flows through the result."""
    B, T = arrays[0].shape
    r = rows if rows and B % rows == 0 else B
    chunks = jax.tree.map(lambda x: x[0], _split(arrays, 1, B // r, r, mesh))  # [B // r, r, T] each
    out = jax.lax.map(lambda xs: fn(*xs), chunks)
    return jax.lax.stop_gradient(jnp.swapaxes(out, 0, 1).reshape(B, T))  # _split's layout, undone


def policy_logprobs(
    state: TrainState, params: Any, tokens, positions, segment_ids, adapter_ids=None, *, expert_ids=None
) -> jax.Array:
    """f32[B, T] log-probs of the tokens under the policy with `params` (the state's, or its reference's), a
    micro-batch of rows at a time, no gradient; each token under its policy's adapter (`adapter_ids`) with several,
    and (a mixture of experts with routing "replay") through its recorded experts (`expert_ids` [B, T, M, k])."""
    cfg = state.cfg
    model = nnx.merge(state.graphdef, params, state.model_state)
    several, replay = adapter_ids is not None, replayed(expert_ids, cfg) is not None

    def one(tok, pos, seg, *rest):
        kw = dict(chunk_size=cfg.logprob_chunk_size, temperature=cfg.temperature, keep_logits_mb=0.0)
        ids = rest[0] if several else None
        experts = replayed(rest[-1], cfg) if replay else None
        return token_logprobs_routed(model, tok, pos, seg, adapter_ids=ids, expert_ids=experts, **kw)[0]

    arrays = (tokens, positions, segment_ids) + ((adapter_ids,) if several else ()) + ((expert_ids,) if replay else ())
    return rowwise(one, arrays, cfg.micro_batch_size, state.mesh)


def _opt_count(opt_state) -> jax.Array:
    """The optimizer's step count (what the schedule sees)."""
    # optax states are NamedTuples with a `count` field; plain tuples (chains) also have a `.count` method
    has_count = lambda x: "count" in getattr(x, "_fields", ())
    counts = [s.count for s in jax.tree.leaves(opt_state, is_leaf=has_count) if has_count(s)]
    return counts[-1] if counts else jnp.zeros((), jnp.int32)
