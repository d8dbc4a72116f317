"""ModelConfig: the shapes and options of a Qwen3 / Qwen2 / Llama decoder, presets, and HF config.json I/O."""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

Family = Literal["qwen3", "qwen2", "llama", "qwen3_moe"]
FAMILIES: tuple[str, ...] = ("qwen3", "qwen2", "llama", "qwen3_moe")
_ARCHITECTURES = {
    "qwen3": "Qwen3ForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "llama": "LlamaForCausalLM",
    "qwen3_moe": "Qwen3MoeForCausalLM",
}
_DTYPES = ("float32", "bfloat16", "float16")
ATTENTION = ("auto", "xla", "blockwise", "cudnn", "splash")  # jgem.models.attention
# Rematerialisation of each decoder block in the backward pass (jgem.models.transformer.remat_policy):
# none; full = nothing_saveable (recompute the block); dots_saveable / dots_with_no_batch_dims_saveable (keep
# matmul outputs); offload_dots (matmul outputs without batch dims go to pinned host memory, accelerators only).
REMAT = ("none", "full", "nothing_saveable", "dots_saveable", "dots_with_no_batch_dims_saveable", "offload_dots")
# The projections a LoRA adapter can sit on (jgem.models.layers; the names of their weights).
LORA_TARGETS = ("q", "k", "v", "o", "gate", "up", "down")
_REMAT_BOOLS = {True: "full", False: "none", "true": "full", "false": "none", "True": "full", "False": "none"}


def remat_name(value: bool | str) -> str:
    """A remat policy name from a policy name or the old bool (True = "full", False = "none")."""
    name = _REMAT_BOOLS.get(value, value) if isinstance(value, (bool, str)) else value
    if name not in REMAT:
        raise ValueError(f"remat={value!r} is not a remat policy; use one of {REMAT} (or True/False)")
    return name


@dataclass(frozen=True)
class RopeScaling:
    """Llama 3 frequency-dependent RoPE scaling (HF `rope_type: "llama3"`)."""

    factor: float = 8.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192


@dataclass(frozen=True)
class LoraConfig:
    """Low-rank adapters (jgem.models.lora): each targeted projection W computes x W + (alpha / rank) x A B, with
    A[in, rank] and B[rank, out] trained and W frozen. rank 0: no adapters (every weight trains)."""

    rank: int = 0
    alpha: float = 16.0  # the adapters' output is scaled by alpha / rank
    targets: tuple[str, ...] = LORA_TARGETS  # any of LORA_TARGETS
    # several policies on one base model: a set of adapters per policy, stacked [adapters, ...] on each projection;
    # every row of a forward names the policy it runs with (`adapter_ids`)
    adapters: int = 1

    def __post_init__(self):
        object.__setattr__(self, "targets", tuple(self.targets))  # a list, as read back from JSON
        if isinstance(self.rank, bool) or not isinstance(self.rank, int) or self.rank < 0:
            raise ValueError(f"lora.rank is {self.rank!r}; it must be an integer >= 0 (0: no adapters)")
        if isinstance(self.alpha, bool) or not isinstance(self.alpha, int | float) or not 0 < self.alpha < math.inf:
            raise ValueError(f"lora.alpha is {self.alpha!r}; it must be a finite number > 0")
        if isinstance(self.adapters, bool) or not isinstance(self.adapters, int) or self.adapters < 1:
            raise ValueError(f"lora.adapters is {self.adapters!r}; it must be an integer >= 1 (one per policy)")
        bad = [t for t in self.targets if t not in LORA_TARGETS]
        if bad or not self.targets or len(set(self.targets)) != len(self.targets):
            raise ValueError(
                f"lora.targets is {self.targets!r}; it must name each projection at most once, "
                f"one or more of {LORA_TARGETS}"
            )

    @property
    def policies(self) -> int:
        """How many policies the model holds: `adapters` with LoRA on, else 1 (the model itself)."""
        return self.adapters if self.rank else 1

    @property
    def scale(self) -> float:
        """alpha / rank, the adapters' output scale (0 without adapters)."""
        return self.alpha / self.rank if self.rank else 0.0


@dataclass(frozen=True)
class ModelConfig:
    family: Family
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rope_theta: float = 1_000_000.0
    rope_scaling: RopeScaling | None = None
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = False
    max_position_embeddings: int = 32768
    qk_norm: bool = False  # qwen3: RMSNorm over head_dim on q and k before RoPE
    qkv_bias: bool = False  # qwen2: biases on the q, k, v projections
    dtype: str = "float32"  # compute dtype
    param_dtype: str = "float32"
    remat: str = "none"  # a policy name (REMAT); True / False are read as "full" / "none"
    attention: str = "auto"  # ATTENTION: auto picks by platform and shape (jgem.models.attention.choose)
    # the cache-free forward (training, log-probs) as one lax.scan over the layers: the compiler sees one block, and
    # the backward pass keeps one input per layer (jgem.models.transformer._scan_blocks; docs/scaling.md)
    scan_layers: bool | None = None  # None: scan on GPU and TPU, loop on CPU (where scanning compiles slower)
    lora: LoraConfig = LoraConfig()  # adapters on the projections; rank 0 (the default): none
    # Mixture of experts (family "qwen3_moe", HF's Qwen3MoeConfig names; jgem.models.moe). num_experts 0: dense.
    # Layer i is sparse when i is not in mlp_only_layers and (i + 1) % decoder_sparse_step == 0; the other layers
    # keep the dense MLP of width intermediate_size.
    num_experts: int = 0
    num_experts_per_tok: int = 0  # k: each token's experts
    moe_intermediate_size: int = 0  # each expert's SwiGLU width
    norm_topk_prob: bool = False  # renormalise the k gates to sum to 1 (Qwen3-30B-A3B, 235B-A22B: True)
    decoder_sparse_step: int = 1
    mlp_only_layers: tuple[int, ...] = ()
    router_aux_loss_coef: float = 0.001  # the load-balancing loss's weight in the learner's loss (HF's default)
    # expert parallelism (a mesh with an `expert` axis, jgem.models.moe): each expert shard's buffer of (token, expert)
    # pairs holds capacity x (its share under perfect balance) rows; pairs past it are dropped and counted
    # (`Routing.dropped`). 0 (the default): the buffer holds the worst case, nothing is ever dropped
    expert_capacity_factor: float = 0.0

    def __post_init__(self):
        object.__setattr__(self, "remat", remat_name(self.remat))
        object.__setattr__(self, "mlp_only_layers", tuple(self.mlp_only_layers))  # a list, as read from JSON
        if self.attention not in ATTENTION:
            raise ValueError(f"attention={self.attention!r} is not an implementation; use one of {ATTENTION}")
        if self.family not in FAMILIES:
            raise ValueError(f"family {self.family!r} is not supported; use one of {FAMILIES}")
        for name in ("dtype", "param_dtype"):
            if getattr(self, name) not in _DTYPES:
                raise ValueError(f"{name}={getattr(self, name)!r} is not supported; use one of {_DTYPES}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_heads {self.num_heads} is not a multiple of num_kv_heads {self.num_kv_heads}; "
                "grouped-query attention needs whole groups"
            )
        if self.head_dim % 2:
            raise ValueError(f"head_dim {self.head_dim} must be even for rotary embeddings")
        self._check_moe()

    def _check_moe(self) -> None:
        def whole(name: str, lo: int) -> int:
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                raise ValueError(f"{name} is {v!r}; it must be an integer >= {lo}")
            return v

        e = whole("num_experts", 0)
        if (self.family == "qwen3_moe") != (e > 0):
            raise ValueError(
                f"num_experts is {e} for family {self.family!r}: a mixture of experts is family 'qwen3_moe' with "
                "num_experts >= 1, every other family is dense (num_experts 0)"
            )
        c = self.router_aux_loss_coef
        if isinstance(c, bool) or not isinstance(c, int | float) or not 0 <= c < math.inf:
            raise ValueError(f"router_aux_loss_coef is {c!r}; it must be a finite number >= 0")
        cf = self.expert_capacity_factor
        if isinstance(cf, bool) or not isinstance(cf, int | float) or not 0 <= cf < math.inf:
            raise ValueError(f"expert_capacity_factor is {cf!r}; use 0 (never drop) or a capacity factor > 0")
        if not e:
            return
        k = whole("num_experts_per_tok", 1)
        if k > e:
            raise ValueError(f"num_experts_per_tok is {k}; it must be at most num_experts ({e})")
        whole("moe_intermediate_size", 1)
        whole("decoder_sparse_step", 1)
        if not isinstance(self.norm_topk_prob, bool):
            raise ValueError(f"norm_topk_prob is {self.norm_topk_prob!r}; it must be a bool")
        bad = [i for i in self.mlp_only_layers if isinstance(i, bool) or not isinstance(i, int)]
        bad += [i for i in self.mlp_only_layers if i not in bad and not 0 <= i < self.num_layers]
        if bad:
            raise ValueError(
                f"mlp_only_layers {list(self.mlp_only_layers)} has {bad}: each must be a layer index in "
                f"[0, num_layers={self.num_layers})"
            )
        if self.lora.rank:
            raise ValueError(
                f"lora.rank is {self.lora.rank} on a mixture of experts (num_experts {e}): LoRA adapters on MoE "
                "models are not implemented yet; use lora.rank 0"
            )

    def is_sparse(self, layer: int) -> bool:
        """Whether decoder layer `layer` is a mixture of experts (HF's Qwen3MoeDecoderLayer rule)."""
        return (
            self.num_experts > 0 and layer not in self.mlp_only_layers and (layer + 1) % self.decoder_sparse_step == 0
        )

    @property
    def sparse_layers(self) -> tuple[int, ...]:
        """The indices of the mixture-of-experts layers, in order (empty for a dense model)."""
        return tuple(i for i in range(self.num_layers) if self.is_sparse(i))

    def replace(self, **changes: Any) -> ModelConfig:
        return dataclasses.replace(self, **changes)

    @property
    def num_lora_params(self) -> int:
        """The adapters' parameter count: rank x (in + out) of each targeted projection in every layer, for each of
        the `lora.adapters` policies."""
        d, f, r = self.hidden_size, self.intermediate_size, self.lora.rank
        q, kv = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        sizes = {"q": (d, q), "k": (d, kv), "v": (d, kv), "o": (q, d), "gate": (d, f), "up": (d, f), "down": (f, d)}
        return self.lora.adapters * self.num_layers * sum(r * sum(sizes[t]) for t in self.lora.targets)

    @property
    def num_params(self) -> int:
        """Parameter count (without a value head or LoRA adapters)."""
        d, h, n, k, f = self.hidden_size, self.head_dim, self.num_heads, self.num_kv_heads, self.intermediate_size
        attn = d * n * h + 2 * d * k * h + n * h * d
        if self.qkv_bias:
            attn += n * h + 2 * k * h
        if self.qk_norm:
            attn += 2 * h
        layer = attn + 2 * d
        sparse = len(self.sparse_layers)
        moe = d * self.num_experts + 3 * d * self.moe_intermediate_size * self.num_experts  # router, experts
        embed = self.vocab_size * d * (1 if self.tie_word_embeddings else 2)
        return self.num_layers * layer + (self.num_layers - sparse) * 3 * d * f + sparse * moe + embed + d

    @property
    def num_active_params(self) -> int:
        """Parameters one token runs through: `num_params` with each MoE layer's experts counted k times, not E."""
        unused = (self.num_experts - self.num_experts_per_tok) * 3 * self.hidden_size * self.moe_intermediate_size
        return self.num_params - len(self.sparse_layers) * unused

    # ------------------------------------------------------------------ HF config.json

    @classmethod
    def from_hf(cls, path_or_dict: str | os.PathLike | Mapping[str, Any], **overrides: Any) -> ModelConfig:
        """Reads an HF config (a dict, a config.json path, or a checkpoint directory).

        Both the old layout (`rope_theta`, `rope_scaling`) and transformers 5's `rope_parameters` are accepted.
        `overrides` (e.g. dtype="bfloat16") replace fields of the result.
        """
        if isinstance(path_or_dict, Mapping):
            d = dict(path_or_dict)
        else:
            p = os.fspath(path_or_dict)
            if os.path.isdir(p):
                p = os.path.join(p, "config.json")
            if not os.path.exists(p):
                raise FileNotFoundError(f"no HF config at {p}; pass a checkpoint directory containing config.json")
            with open(p) as f:
                d = json.load(f)
        family = d.get("model_type")
        if family not in FAMILIES:
            raise ValueError(
                f"model_type {family!r} (architectures {d.get('architectures')}) is not supported; "
                f"jgem implements {FAMILIES}"
            )
        bad = []
        if d.get("hidden_act", "silu") != "silu":
            bad.append(f"hidden_act={d['hidden_act']!r} (only 'silu')")
        if d.get("use_sliding_window"):
            bad.append("use_sliding_window=True (only full attention)")
        if any(t != "full_attention" for t in d.get("layer_types") or ()):
            bad.append(f"layer_types={sorted(set(d['layer_types']))} (only 'full_attention')")
        if d.get("mlp_bias"):
            bad.append("mlp_bias=True")
        if family == "llama" and d.get("attention_bias"):
            bad.append("attention_bias=True for llama")
        if family in ("qwen3", "qwen3_moe") and d.get("attention_bias"):
            bad.append(f"attention_bias=True for {family}")
        rope = dict(d.get("rope_parameters") or {})
        legacy = d.get("rope_scaling")
        if legacy:
            rope = {**rope, **legacy}
        theta = float(rope.get("rope_theta", d.get("rope_theta", 10000.0)))
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        scaling = None
        if rope_type == "llama3":
            scaling = RopeScaling(
                factor=float(rope["factor"]),
                low_freq_factor=float(rope["low_freq_factor"]),
                high_freq_factor=float(rope["high_freq_factor"]),
                original_max_position_embeddings=int(rope["original_max_position_embeddings"]),
            )
        elif rope_type not in ("default", None):
            bad.append(f"rope type {rope_type!r} (only 'default' and 'llama3')")
        if bad:
            raise ValueError(f"unsupported HF config fields for {family}: " + "; ".join(bad))
        n_heads = int(d["num_attention_heads"])
        hidden = int(d["hidden_size"])
        cfg = cls(
            family=family,
            vocab_size=int(d["vocab_size"]),
            hidden_size=hidden,
            intermediate_size=int(d["intermediate_size"]),
            num_layers=int(d["num_hidden_layers"]),
            num_heads=n_heads,
            num_kv_heads=int(d.get("num_key_value_heads") or n_heads),
            head_dim=int(d.get("head_dim") or hidden // n_heads),
            rope_theta=theta,
            rope_scaling=scaling,
            rms_norm_eps=float(d.get("rms_norm_eps", 1e-6)),
            tie_word_embeddings=bool(d.get("tie_word_embeddings", False)),
            max_position_embeddings=int(d.get("max_position_embeddings", 32768)),
            qk_norm=family in ("qwen3", "qwen3_moe"),
            qkv_bias=family == "qwen2",
            **_moe_from_hf(d, family),
        )
        return cfg.replace(**overrides) if overrides else cfg

    def to_hf_dict(self) -> dict[str, Any]:
        """An HF config dict that transformers' `AutoConfig.for_model(**d)` / `from_pretrained` accepts."""
        arch = _ARCHITECTURES[self.family]
        rope: dict[str, Any] = {"rope_type": "default", "rope_theta": self.rope_theta}
        if self.rope_scaling is not None:
            rope = {"rope_type": "llama3", "rope_theta": self.rope_theta, **dataclasses.asdict(self.rope_scaling)}
        d: dict[str, Any] = {
            "architectures": [arch],
            "model_type": self.family,
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "hidden_act": "silu",
            "max_position_embeddings": self.max_position_embeddings,
            "rms_norm_eps": self.rms_norm_eps,
            "tie_word_embeddings": self.tie_word_embeddings,
            "rope_theta": self.rope_theta,
            "rope_parameters": rope,
            "torch_dtype": self.param_dtype,
        }
        if self.rope_scaling is not None:
            d["rope_scaling"] = {k: v for k, v in rope.items() if k != "rope_theta"}
        if self.family in ("qwen3", "qwen3_moe"):
            d["attention_bias"] = False
        if self.family == "llama":
            d.update(attention_bias=False, mlp_bias=False)
        if self.family in ("qwen3", "qwen2", "qwen3_moe"):
            d["use_sliding_window"] = False
        if self.family == "qwen3_moe":  # as Qwen's published config.json names them
            d.update(
                num_experts=self.num_experts,
                num_experts_per_tok=self.num_experts_per_tok,
                moe_intermediate_size=self.moe_intermediate_size,
                norm_topk_prob=self.norm_topk_prob,
                decoder_sparse_step=self.decoder_sparse_step,
                mlp_only_layers=list(self.mlp_only_layers),
                router_aux_loss_coef=self.router_aux_loss_coef,
            )
        return d


def _moe_from_hf(d: Mapping[str, Any], family: str) -> dict[str, Any]:
    """The MoE fields of an HF config dict (Qwen3MoeConfig: `num_experts`, which transformers 5 writes back as
    `num_local_experts`); none for a dense family."""
    if family != "qwen3_moe":
        return {}
    experts = d.get("num_experts", d.get("num_local_experts", 128))  # Qwen3MoeConfig's defaults where absent
    return dict(
        num_experts=int(experts),
        num_experts_per_tok=int(d.get("num_experts_per_tok", 8)),
        moe_intermediate_size=int(d.get("moe_intermediate_size", 768)),
        norm_topk_prob=bool(d.get("norm_topk_prob", False)),
        decoder_sparse_step=int(d.get("decoder_sparse_step", 1)),
        mlp_only_layers=tuple(int(i) for i in d.get("mlp_only_layers") or ()),
        router_aux_loss_coef=float(d.get("router_aux_loss_coef", 0.001)),
    )


# ---------------------------------------------------------------------- presets

_QWEN = dict(rope_theta=1_000_000.0, rms_norm_eps=1e-6)
_LLAMA32 = dict(
    family="llama",
    vocab_size=128256,
    rope_theta=500_000.0,
    rope_scaling=RopeScaling(32.0, 1.0, 4.0, 8192),
    rms_norm_eps=1e-5,
    tie_word_embeddings=True,
    max_position_embeddings=131072,
)


def _qwen3(**kw: Any) -> ModelConfig:
    base = dict(family="qwen3", vocab_size=151936, head_dim=128, qk_norm=True, max_position_embeddings=40960, **_QWEN)
    return ModelConfig(**{**base, **kw})


# Qwen3-30B-A3B and Qwen3-235B-A22B: every layer sparse, 8 of 128 experts, renormalised gates
_QWEN3_MOE = dict(
    family="qwen3_moe",
    num_kv_heads=4,
    num_experts=128,
    num_experts_per_tok=8,
    norm_topk_prob=True,
)


def _qwen2(**kw: Any) -> ModelConfig:
    base = dict(family="qwen2", vocab_size=151936, qkv_bias=True, max_position_embeddings=32768, **_QWEN)
    return ModelConfig(**{**base, **kw})


# the demo / test model's shape (tiny), shared by its Qwen2 and mixture-of-experts twins (tiny-qwen2, tiny-moe)
_TINY = dict(
    vocab_size=1024,
    hidden_size=128,
    intermediate_size=384,
    num_layers=4,
    num_heads=4,
    num_kv_heads=2,
    head_dim=32,
    tie_word_embeddings=True,
    max_position_embeddings=4096,
)

PRESETS: dict[str, ModelConfig] = {
    # Published shapes (the HF config.json of each model).
    "qwen3-0.6b": _qwen3(
        hidden_size=1024, intermediate_size=3072, num_layers=28, num_heads=16, num_kv_heads=8, tie_word_embeddings=True
    ),
    "qwen3-1.7b": _qwen3(
        hidden_size=2048, intermediate_size=6144, num_layers=28, num_heads=16, num_kv_heads=8, tie_word_embeddings=True
    ),
    "qwen3-4b": _qwen3(
        hidden_size=2560, intermediate_size=9728, num_layers=36, num_heads=32, num_kv_heads=8, tie_word_embeddings=True
    ),
    "qwen3-8b": _qwen3(hidden_size=4096, intermediate_size=12288, num_layers=36, num_heads=32, num_kv_heads=8),
    # (intermediate_size, the dense MLP's width, is unused where every layer is sparse; config.json carries it)
    "qwen3-30b-a3b": _qwen3(
        **_QWEN3_MOE, hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768, num_layers=48, num_heads=32
    ),
    "qwen3-235b-a22b": _qwen3(
        **_QWEN3_MOE, hidden_size=4096, intermediate_size=12288, moe_intermediate_size=1536, num_layers=94, num_heads=64
    ),
    "qwen2.5-0.5b": _qwen2(
        hidden_size=896,
        intermediate_size=4864,
        num_layers=24,
        num_heads=14,
        num_kv_heads=2,
        head_dim=64,
        tie_word_embeddings=True,
    ),
    "qwen2.5-1.5b": _qwen2(
        hidden_size=1536,
        intermediate_size=8960,
        num_layers=28,
        num_heads=12,
        num_kv_heads=2,
        head_dim=128,
        tie_word_embeddings=True,
    ),
    "qwen2.5-3b": _qwen2(
        hidden_size=2048,
        intermediate_size=11008,
        num_layers=36,
        num_heads=16,
        num_kv_heads=2,
        head_dim=128,
        tie_word_embeddings=True,
    ),
    "qwen2.5-7b": _qwen2(
        vocab_size=152064,
        hidden_size=3584,
        intermediate_size=18944,
        num_layers=28,
        num_heads=28,
        num_kv_heads=4,
        head_dim=128,
    ),
    "llama3.2-1b": ModelConfig(
        hidden_size=2048, intermediate_size=8192, num_layers=16, num_heads=32, num_kv_heads=8, head_dim=64, **_LLAMA32
    ),
    "llama3.2-3b": ModelConfig(
        hidden_size=3072, intermediate_size=8192, num_layers=28, num_heads=24, num_kv_heads=8, head_dim=128, **_LLAMA32
    ),
    # The demo / test model (~0.9M params); vocab matches the repo's tiny tokenizer budget.
    "tiny": _qwen3(**_TINY),
    # The demo's model as a mixture of experts (Qwen3-MoE): every layer sparse, 2 of 8 experts of width 96 per token
    # (the active MLP half of tiny's 384), renormalised gates; for routing replay's CLI runs and tests
    "tiny-moe": _qwen3(
        **_TINY,
        family="qwen3_moe",
        num_experts=8,
        num_experts_per_tok=2,
        moe_intermediate_size=96,
        norm_topk_prob=True,
    ),
    "tiny-qwen2": _qwen2(**_TINY),
    "tiny-llama": ModelConfig(
        **{
            **_LLAMA32,
            "vocab_size": 1024,
            "max_position_embeddings": 4096,
            "rope_scaling": RopeScaling(8.0, 1.0, 4.0, 256),
        },
        hidden_size=128,
        intermediate_size=384,
        num_layers=4,
        num_heads=4,
        num_kv_heads=2,
        head_dim=32,
    ),
    # ~100M params, for benchmarks.
    "100m": _qwen3(
        vocab_size=32000,
        hidden_size=768,
        intermediate_size=2048,
        num_layers=12,
        num_heads=12,
        num_kv_heads=4,
        head_dim=64,
        tie_word_embeddings=True,
        max_position_embeddings=8192,
    ),
}


def preset(name: str, **overrides: Any) -> ModelConfig:
    """A named config; `overrides` replace fields (e.g. dtype="bfloat16", remat=True)."""
    if name not in PRESETS:
        raise ValueError(f"unknown model preset {name!r}; choose one of {sorted(PRESETS)}")
    cfg = PRESETS[name]
    return cfg.replace(**overrides) if overrides else cfg
