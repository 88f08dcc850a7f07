"""Model FLOPs utilisation (DESIGN sections 7 and 11). Its FLOPs per token are ``6 N + 12 L D T``,
:func:`harness.models.flops.model_flops_per_token` (the formula and its sources there): routing's own
arithmetic is left out, so MFU compares across variants and with published numbers. What a variant
spends, routing included (the report's compute multiplier, DESIGN section 14, and the bench JSON's
``training_flops_per_token``), is :func:`harness.models.flops.training_flops_per_token`.
"""

from __future__ import annotations


def mfu(flops_per_token: float, tokens_per_s: float, peak_flops: float) -> float:
    """Model FLOPs utilisation: ``flops_per_token * tokens_per_s / peak_flops`` (a fraction)."""
    return flops_per_token * tokens_per_s / peak_flops


__all__ = ["mfu"]
