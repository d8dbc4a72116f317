"""LearnerConfig: how the learner optimises and what loss it takes; plain data, light to import."""

from __future__ import annotations

from dataclasses import dataclass

ROUTING = ("replay", "recompute")  # LearnerConfig.routing: a mixture of experts' routing in the learner


@dataclass(frozen=True)
class LearnerConfig:
    """Optimisation and loss options; hashable, so it rides in TrainState as static data."""

    policy_loss: str = "ppo"  # a registered policy loss (jgem.algos.losses.POLICY_LOSSES): ppo, reinforce, gspo, cispo
    temperature: float = 1.0  # the sampling temperature; log-probs are of logits / temperature, as sampled
    lr: float = 1e-6
    schedule: str = "constant"  # constant | cosine | linear (decay after warmup to lr * min_lr_ratio)
    warmup_steps: int = 0
    decay_steps: int = 1000  # optimizer steps of the decay (cosine, linear)
    min_lr_ratio: float = 0.0
    b1: float = 0.9
    b2: float = 0.999
    adam_eps: float = 1e-8
    weight_decay: float = 0.0  # decoupled (AdamW), on matrices only
    max_grad_norm: float | None = 1.0
    clip_low: float = 0.2
    clip_high: float | None = None  # None: = clip_low; larger values are DAPO's clip-higher
    dual_clip: float | None = None
    kl_coef: float = 0.0
    kl_estimator: str = "k3"
    entropy_coef: float = 0.0
    aggregation: str = "token_mean"  # token_mean | seq_mean_token_mean | token_sum_norm
    loss_norm_constant: float | None = None  # token_sum_norm's constant (default T)
    epochs: int = 1
    minibatches: int = 1
    micro_batch_size: int | None = None  # rows per gradient-accumulation step; None: the whole minibatch
    shuffle: bool = True  # reshuffle rows between minibatches each epoch (only when minibatches > 1)
    logprob_chunk_size: int = 1024  # tokens per vocab-projection chunk (memory O(chunk * V))
    # keep a micro-batch's float32 logits for the backward pass (no vocab matmul there) when they fit in this
    # many MB; above it they are recomputed chunk by chunk. 0: always recompute
    keep_logits_mb: float = 512.0
    # critic (PPO with GAE); used only when the TrainState has critic params
    critic_lr: float = 1e-5
    critic_max_grad_norm: float | None = 1.0
    value_clip: float | None = 0.2
    # truncated importance sampling on the sampler/learner mismatch (bf16, kernels): each token's policy loss is
    # weighted by min(pi_learner / pi_sampler, tis_cap), pi_learner the learner's probability at the sampling
    # params (and PPO's ratio is taken against it). None: off. The same as correction "tis" with correction_high
    tis_cap: float | None = None
    # off-policy correction (jgem.algos.corrections.CORRECTIONS: none, tis, mis, icepop, geo_mask, decoupled): the
    # learner recomputes the proximal policy's log-probs (its params before this update), clips PPO's ratio around
    # them, and weighs or drops each token by pi_prox / pi_behaviour. none: the ratio is against the sampler's
    correction: str = "none"
    correction_low: float | None = None  # the correction's lower bound on pi_prox / pi_behaviour; None: its default
    correction_high: float | None = None  # its upper bound or cap; None: its default
    # a mixture of experts' routing in the learner's forwards (update, proximal, reference): "replay" runs each
    # token through the experts the sampler recorded for it (R3; the router still computes the gates and the
    # load-balancing loss), "recompute" lets the learner's router choose again. Both log how often the two differ
    # (train/routing_mismatch_frac). A dense model has no routing: ignored
    routing: str = "replay"

    @property
    def recomputes_proximal(self) -> bool:
        """The update first computes the learner's log-probs at the sampling params (a correction is on)."""
        return self.correction != "none" or self.tis_cap is not None

    def __post_init__(self):
        # The names (policy_loss, schedule, aggregation, kl_estimator, correction and its bounds) are checked against
        # their registries where those fill: jgem.algos.learner.config_errors (run by jgem.config.validate and
        # init_train_state).
        checks = [
            (self.epochs >= 1 and self.minibatches >= 1, "epochs and minibatches must be >= 1"),
            (self.micro_batch_size is None or self.micro_batch_size >= 1, "micro_batch_size must be >= 1 or None"),
            (self.keep_logits_mb >= 0, f"keep_logits_mb must be >= 0, got {self.keep_logits_mb}"),
            (self.tis_cap is None or self.tis_cap > 0, f"tis_cap must be > 0 or None, got {self.tis_cap}"),
            (self.routing in ROUTING, f"routing must be one of {', '.join(ROUTING)}, got {self.routing!r}"),
        ]
        for ok, msg in checks:
            if not ok:
                raise ValueError(f"LearnerConfig: {msg}")
