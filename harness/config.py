"""Size presets and training configuration (DESIGN section 2 and 4).

One frozen dataclass per concern; derived values (MLP hidden size, AttnRes block
size) are computed in one place, :func:`derive`. Precedence for training settings:
preset defaults, then a grid's ``[train]`` table, then command-line flags.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, fields


@dataclass(frozen=True)
class SizePreset:
    """Architecture of one model size (DESIGN section 2).

    Attributes:
        name: preset name.
        n_layers: number of transformer layers L (each has an attention and an MLP sublayer).
        d_model: width D.
        n_heads: attention heads H (D must be divisible by H).
        context: context length T in tokens.
        vocab_size: default vocabulary size V (the tokenizer's size overrides it at run time).
    """

    name: str
    n_layers: int
    d_model: int
    n_heads: int
    context: int
    vocab_size: int


# 120m/343m use the GPT-2 vocabulary padded to a multiple of 64 (50304), the field's
# usual choice; with it the presets land at about 124M and 355M parameters.
SIZES: dict[str, SizePreset] = {
    "tiny": SizePreset("tiny", n_layers=2, d_model=64, n_heads=2, context=64, vocab_size=1024),
    "small": SizePreset("small", n_layers=6, d_model=256, n_heads=4, context=256, vocab_size=4096),
    "120m": SizePreset("120m", n_layers=12, d_model=768, n_heads=12, context=1024, vocab_size=50304),
    "343m": SizePreset("343m", n_layers=24, d_model=1024, n_heads=16, context=1024, vocab_size=50304),
}


def get_size(name: str) -> SizePreset:
    """Return the preset called ``name``.

    Raises:
        ValueError: ``name`` is not a preset; the message lists the valid ones.
    """
    try:
        return SIZES[name]
    except KeyError:
        raise ValueError(f"unknown size {name!r}; valid sizes: {', '.join(SIZES)}") from None


def mlp_hidden(d_model: int) -> int:
    """SwiGLU hidden width: 8/3 * D rounded up to a multiple of 64 (DESIGN section 2)."""
    return int(math.ceil(8 * d_model / 3 / 64) * 64)


def default_block_size(n_layers: int, target_blocks: int = 6) -> int:
    """AttnRes block size in sublayers: even, chosen so the model has about 4-8 blocks.

    A model has ``2 * n_layers`` sublayers (attention and MLP each count one, DESIGN
    section 3); the block size is the even number nearest ``2 * n_layers / target_blocks``
    and at least 2. tiny (L=2) -> 2, small (L=6) -> 2, 120m (L=12) -> 4, 343m (L=24) -> 8.
    """
    raw = 2 * n_layers / target_blocks
    return max(2, 2 * int(round(raw / 2)))


@dataclass(frozen=True)
class ModelConfig:
    """Everything :class:`harness.models.gpt.DepthRoutedLM` needs (derived from a preset).

    Attributes:
        n_layers, d_model, n_heads, context, vocab_size: see :class:`SizePreset`.
        mlp_hidden: SwiGLU hidden width.
        block_size: AttnRes block size in sublayers (even).
        tie_embeddings: LM head shares the token embedding matrix.
        rope_base: RoPE frequency base.
        norm_eps: RMSNorm epsilon.
    """

    n_layers: int
    d_model: int
    n_heads: int
    context: int
    vocab_size: int
    mlp_hidden: int
    block_size: int
    tie_embeddings: bool = True
    rope_base: float = 10000.0
    norm_eps: float = 1e-6

    def __post_init__(self) -> None:
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")
        if (self.d_model // self.n_heads) % 2:
            raise ValueError(f"head size {self.d_model // self.n_heads} must be even for RoPE")
        if self.block_size < 2 or self.block_size % 2:
            raise ValueError(f"block_size={self.block_size} must be an even number >= 2")
        for name in ("n_layers", "d_model", "n_heads", "context", "vocab_size", "mlp_hidden"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name}={getattr(self, name)} must be positive")


def derive(size: str, **overrides) -> ModelConfig:
    """Build the :class:`ModelConfig` of a preset, with optional field overrides.

    Raises:
        ValueError: unknown size or unknown override key (the message lists the allowed keys).
    """
    preset = get_size(size)
    base = dict(
        n_layers=preset.n_layers,
        d_model=preset.d_model,
        n_heads=preset.n_heads,
        context=preset.context,
        vocab_size=preset.vocab_size,
    )
    allowed = {f.name for f in fields(ModelConfig)}
    unknown = set(overrides) - allowed
    if unknown:
        raise ValueError(f"unknown model override(s) {sorted(unknown)}; allowed: {sorted(allowed)}")
    base.update({k: v for k, v in overrides.items() if k in ("n_layers", "d_model", "n_heads", "context", "vocab_size")})
    base["mlp_hidden"] = overrides.get("mlp_hidden", mlp_hidden(base["d_model"]))
    base["block_size"] = overrides.get("block_size", default_block_size(base["n_layers"]))
    for key in ("tie_embeddings", "rope_base", "norm_eps"):
        if key in overrides:
            base[key] = overrides[key]
    return ModelConfig(**base)


@dataclass(frozen=True)
class TrainConfig:
    """Optimiser, schedule and evaluation settings of one run (DESIGN section 4).

    Every field can be set by a grid's ``[train]`` table; unknown keys are errors.
    Budgets and intervals are in tokens, never steps.

    Attributes:
        lr: peak AdamW learning rate.
        min_lr_ratio: final LR of the cosine as a fraction of ``lr``.
        warmup_tokens: linear warmup length in tokens (0 = derive 5 % of the budget).
        schedule: ``cosine`` (warmup + cosine to ``min_lr_ratio``) or ``wsd``
            (warmup-stable-decay, linear decay over the last ``decay_frac`` of the budget).
        decay_frac: fraction of the budget spent decaying under ``wsd``.
        weight_decay: AdamW decoupled weight decay (not applied to norms, biases,
            embeddings' gains or pseudo-queries).
        beta1, beta2: AdamW betas.
        grad_clip: gradient-norm clip (0 disables).
        batch_tokens: tokens per optimiser step (batch size = batch_tokens // context).
        eval_every_tokens: validation interval in tokens (0 = only at the end).
        eval_tokens: size of the fixed validation token set (capped by the corpus).
        val_fraction: fraction of documents held out for validation (document-level split).
        vocab_size: BPE vocabulary size trained on the corpus (0 = the preset's).
        max_docs: use only the first ``max_docs`` documents of the corpus (0 = all; a hub
            stream is always cut, at 50,000 documents by default).
        tokenizer: ``bpe`` (trained on the training split) or ``gpt2`` (tiktoken).
        checkpoint_every_tokens: checkpoint interval for resume (0 = at evals only).
        precision: ``auto`` (fp32 on CPU, bf16-mixed on CUDA), ``32-true`` or ``bf16-mixed``.
        compile: wrap the model in ``torch.compile``.
    """

    lr: float = 3e-3
    min_lr_ratio: float = 0.1
    warmup_tokens: int = 0
    schedule: str = "cosine"
    decay_frac: float = 0.2
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0
    batch_tokens: int = 4096
    eval_every_tokens: int = 0
    eval_tokens: int = 32768
    val_fraction: float = 0.05
    vocab_size: int = 0
    max_docs: int = 0
    tokenizer: str = "bpe"
    checkpoint_every_tokens: int = 0
    precision: str = "auto"
    compile: bool = False

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            kind = {"int": int, "float": float, "bool": bool, "str": str}[f.type]
            ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
            if kind is float and isinstance(value, int) and not isinstance(value, bool):
                object.__setattr__(self, f.name, float(value))
                ok = True
            if not ok:
                raise ValueError(f"{f.name}={value!r} must be {'an' if f.type == 'int' else 'a'} {f.type}")
        if self.schedule not in ("cosine", "wsd"):
            raise ValueError(f"schedule={self.schedule!r}; allowed: 'cosine', 'wsd'")
        if self.tokenizer not in ("bpe", "gpt2"):
            raise ValueError(f"tokenizer={self.tokenizer!r}; allowed: 'bpe', 'gpt2'")
        if self.precision not in ("auto", "32-true", "bf16-mixed"):
            raise ValueError(f"precision={self.precision!r}; allowed: 'auto', '32-true', 'bf16-mixed'")
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise ValueError(f"lr={self.lr} must be a positive finite number")
        if not 0 < self.val_fraction < 1:
            raise ValueError(f"val_fraction={self.val_fraction} must be in (0, 1)")
        for name in ("min_lr_ratio", "beta1", "beta2"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"{name}={getattr(self, name)} must be in [0, 1]")
        if not 0 < self.decay_frac <= 1:
            raise ValueError(f"decay_frac={self.decay_frac} must be in (0, 1]")
        for name in ("weight_decay", "grad_clip"):
            if not (getattr(self, name) >= 0 and math.isfinite(getattr(self, name))):
                raise ValueError(f"{name}={getattr(self, name)} must be a finite number >= 0")
        for name in ("batch_tokens", "eval_tokens"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name}={getattr(self, name)} must be positive")
        for name in ("warmup_tokens", "eval_every_tokens", "vocab_size", "max_docs", "checkpoint_every_tokens"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}={getattr(self, name)} must be >= 0")

    @classmethod
    def parse_value(cls, key: str, raw: str):
        """Convert a command-line string to the type of field ``key`` (``--set KEY=VALUE``).

        Ints accept ``_`` separators (``100_000``); bools accept true/false/1/0/yes/no.

        Raises:
            ValueError: unknown key (listing the allowed ones) or a value of the wrong type.
        """
        types = {f.name: f.type for f in fields(cls)}
        if key not in types:
            raise ValueError(f"unknown training setting {key!r}; allowed: {sorted(types)}")
        kind, text = types[key], raw.strip()
        try:
            if kind == "int":
                return int(text.replace("_", ""))
            if kind == "float":
                return float(text.replace("_", ""))
            if kind == "bool":
                low = text.lower()
                if low in ("true", "1", "yes", "on"):
                    return True
                if low in ("false", "0", "no", "off"):
                    return False
                raise ValueError
        except ValueError:
            raise ValueError(f"{key}={raw!r} is not {'an' if kind == 'int' else 'a'} {kind}") from None
        return text

    @classmethod
    def from_dict(cls, values: dict, *, where: str = "[train]") -> "TrainConfig":
        """Build from a mapping (a grid's ``[train]`` table); unknown keys raise ``ValueError``."""
        allowed = {f.name for f in fields(cls)}
        unknown = set(values) - allowed
        if unknown:
            raise ValueError(f"{where}: unknown key(s) {sorted(unknown)}; allowed: {sorted(allowed)}")
        return cls(**values)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


# Per-size defaults of the training settings (preset level of the precedence chain).
TRAIN_DEFAULTS: dict[str, dict] = {
    "tiny": dict(lr=3e-3, batch_tokens=2048, eval_tokens=8192),
    "small": dict(lr=2e-3, batch_tokens=4096, eval_tokens=32768),
    "120m": dict(lr=6e-4, batch_tokens=524288, eval_tokens=4_194_304, weight_decay=0.1),
    "343m": dict(lr=3e-4, batch_tokens=524288, eval_tokens=4_194_304, weight_decay=0.1),
}


def train_config(size: str, **overrides) -> TrainConfig:
    """Training settings of a preset with overrides applied (preset, then grid, then CLI)."""
    get_size(size)
    values = dict(TRAIN_DEFAULTS.get(size, {}))
    values.update(overrides)
    return TrainConfig.from_dict(values)


__all__ = [
    "SizePreset", "SIZES", "get_size", "mlp_hidden", "default_block_size", "ModelConfig",
    "derive", "TrainConfig", "TRAIN_DEFAULTS", "train_config",
]
