"""Model FLOPs per trained token, for MFU (DESIGN sections 7 and 11).

``flops_per_token = 6 N + 12 L D T`` (PaLM, Chowdhery et al. 2022, arXiv 2204.02311,
appendix B; the count nanoGPT's ``estimate_mfu`` uses):

* ``6 N``: every parameter takes part in one multiply-add (2 FLOPs) per token in the forward
  pass and two in the backward pass (Kaplan et al. 2020, arXiv 2001.08361, section 2.1). ``N``
  counts a tied embedding once: its FLOPs are the LM head's matmul, the lookup is free.
* ``12 L D T``: attention's score and value matmuls, ``Q K^T`` and ``A V``, each ``2 T D`` FLOPs
  per token and layer forward, times 3 for forward + backward; counted over the whole
  ``T x T`` matrix (causal masking halves the useful work; the convention counts it whole).

Depth routing's own arithmetic (per site and token ``O(S R D)`` for ``S`` sources and ``R``
routes, under 1 % of a 120m step) and the element-wise work of norms and activations are
not model FLOPs in this convention and are left out, so MFU compares across variants and
with published numbers.
"""

from __future__ import annotations


def attention_flops_per_token(n_layers: int, d_model: int, context: int) -> int:
    """``12 L D T``: the attention matmuls' FLOPs per trained token (forward + backward)."""
    return 12 * n_layers * d_model * context


def model_flops_per_token(n_params: int, n_layers: int, d_model: int, context: int) -> int:
    """``6 N + 12 L D T`` FLOPs per trained token (see the module docstring)."""
    return 6 * n_params + attention_flops_per_token(n_layers, d_model, context)


def mfu(flops_per_token: float, tokens_per_s: float, peak_flops: float) -> float:
    """Model FLOPs utilisation: ``flops_per_token * tokens_per_s / peak_flops`` (a fraction)."""
    return flops_per_token * tokens_per_s / peak_flops


__all__ = ["attention_flops_per_token", "model_flops_per_token", "mfu"]
