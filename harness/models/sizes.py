"""Size presets and the model's configuration (DESIGN section 2).

One frozen :class:`SizePreset` per size (``tiny`` is the CI model); derived values (SwiGLU
hidden width, AttnRes block size) are computed in one place, :func:`derive`, which gives
the :class:`ModelConfig` a :class:`~harness.models.gpt.DepthRoutedLM` is built from.
Plain Python: the model package depends on nothing outside itself but torch.
"""

from __future__ import annotations

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
# in size order, smallest first (the report sorts its cells by it: harness.report.stats.pairing.cell_order)
SIZES: dict[str, SizePreset] = {
    "tiny": SizePreset("tiny", n_layers=2, d_model=64, n_heads=2, context=64, vocab_size=1024),
    # mini: the CPU demo and study size (the first study's, reports/LOG.md): ~0.9M parameters, ~7,000 tokens/s on one core;
    # a 64-token context and a 512-token BPE vocabulary leave the unigram plateau within 0.5M tokens.
    "mini": SizePreset("mini", n_layers=4, d_model=128, n_heads=4, context=64, vocab_size=512),
    "small": SizePreset("small", n_layers=6, d_model=256, n_heads=4, context=256, vocab_size=4096),
    "120m": SizePreset("120m", n_layers=12, d_model=768, n_heads=12, context=1024, vocab_size=50304),
    "343m": SizePreset("343m", n_layers=24, d_model=1024, n_heads=16, context=1024, vocab_size=50304),
}


#: The model's vocabulary is the tokenizer's rounded up to a multiple of this (DESIGN section 11:
#: GPT-2's 50257 -> 50304, the width that tensor cores tile without a ragged edge).
VOCAB_MULTIPLE = 64


def padded_vocab(vocab_size: int, multiple: int = VOCAB_MULTIPLE) -> int:
    """``vocab_size`` rounded up to a multiple of ``multiple`` (50257 -> 50304; 512 stays 512).

    The extra ids are padding: no token maps to them, and the training loss and the
    evaluation leave their logits out (:meth:`harness.train.lit.LitLM.loss`).
    """
    return -(-vocab_size // multiple) * multiple


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
    base.update(
        {
            k: v
            for k, v in overrides.items()
            if k in ("n_layers", "d_model", "n_heads", "context", "vocab_size")
        }
    )
    base["mlp_hidden"] = overrides.get("mlp_hidden", mlp_hidden(base["d_model"]))
    base["block_size"] = overrides.get("block_size", default_block_size(base["n_layers"]))
    for key in ("tie_embeddings", "rope_base", "norm_eps"):
        if key in overrides:
            base[key] = overrides[key]
    return ModelConfig(**base)


__all__ = [
    "SizePreset",
    "SIZES",
    "VOCAB_MULTIPLE",
    "padded_vocab",
    "get_size",
    "mlp_hidden",
    "default_block_size",
    "ModelConfig",
    "derive",
]
