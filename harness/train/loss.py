"""The training loss: token cross-entropy over the tokenizer's ids, without a float32 copy of bf16 logits.

:func:`token_cross_entropy` is the token mean (or sum) of the NLL in nats. Float32 and float64
logits go to ``F.cross_entropy`` as they are (the loss the runs always had, bit for bit). Low-precision logits (bf16 under autocast) take :class:`_ChunkedNLL`: the log-sum-exp is
computed in float32 over chunks of :data:`CHUNK_BYTES` of float32 at a time, and only the
per-token log-sum-exp ``[N]`` is saved for the backward, which recomputes the softmax chunk by
chunk: ``d nll_i / d z_ij = softmax(z_i)_j - [j = y_i]`` (the cross-entropy gradient). So
neither a float32 copy of the ``[N, V]`` logits (1.6 GiB per 8,192 tokens of gpt2's 50,304
ids) nor a float32 log-softmax is ever held whole; the logits' own bf16 tensor is the only
``[N, V]`` tensor kept (DESIGN section 11).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

#: Bytes of float32 logits computed at a time (2**28 = 256 MiB: 1,334 tokens of 50,304 ids).
CHUNK_BYTES = 2**28


def _chunk_rows(n_classes: int) -> int:
    return max(1, CHUNK_BYTES // (4 * max(1, n_classes)))


class _ChunkedNLL(torch.autograd.Function):
    """Per-token NLL ``logsumexp(z_i) - z_{i, y_i}`` of low-precision logits, float32 chunk by chunk."""

    @staticmethod
    def forward(ctx, logits: Tensor, targets: Tensor) -> Tensor:
        rows = _chunk_rows(logits.shape[-1])
        lse = torch.empty(logits.shape[0], dtype=torch.float32, device=logits.device)
        for lo in range(0, logits.shape[0], rows):
            lse[lo : lo + rows] = torch.logsumexp(logits[lo : lo + rows].float(), dim=-1)
        ctx.save_for_backward(logits, targets, lse)
        return lse - logits.gather(1, targets[:, None]).squeeze(1).float()

    @staticmethod
    def backward(ctx, grad: Tensor):
        logits, targets, lse = ctx.saved_tensors
        rows = _chunk_rows(logits.shape[-1])
        out = torch.empty(logits.shape, dtype=logits.dtype, device=logits.device)
        for lo in range(0, logits.shape[0], rows):
            hi = min(lo + rows, logits.shape[0])
            p = torch.exp(logits[lo:hi].float() - lse[lo:hi, None])  # the softmax, float32
            p.scatter_add_(1, targets[lo:hi, None], torch.full((hi - lo, 1), -1.0, device=p.device))
            out[lo:hi] = (p * grad[lo:hi, None]).to(logits.dtype)
        return out, None


def token_cross_entropy(logits: Tensor, targets: Tensor, reduction: str = "mean") -> Tensor:
    """Cross-entropy (nats/token) of ``logits [..., V]`` against ``targets [...]``: ``mean`` or ``sum``
    over the tokens. Float32/float64 logits: exactly ``F.cross_entropy``; bf16 logits: computed in
    float32 without a float32 copy of the logits (module docstring).

    Raises:
        ValueError: ``reduction`` not ``mean`` or ``sum``.
    """
    if reduction not in ("mean", "sum"):
        raise ValueError(f"reduction={reduction!r}; allowed: 'mean', 'sum'")
    flat, ys = logits.flatten(0, -2), targets.flatten()
    if logits.dtype in (torch.float32, torch.float64):
        return F.cross_entropy(flat, ys, reduction=reduction)
    nll = _ChunkedNLL.apply(flat, ys)
    return nll.mean() if reduction == "mean" else nll.sum()


__all__ = ["CHUNK_BYTES", "token_cross_entropy"]
