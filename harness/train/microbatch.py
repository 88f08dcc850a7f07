"""Micro-batches of one global batch (DESIGN section 11).

A step is one global batch of ``batch_tokens`` tokens (the protocol). Each rank gets its rows
``r::world`` of it (:mod:`harness.data.datamodule`) and runs them as micro-batches of
``micro_batch_size`` sequences: forward and backward per micro-batch, the gradients
accumulating, then one optimiser step. Micro-batch ``j`` of ``n_j`` rows out of the rank's ``n``
has its token-mean loss weighted by ``n_j / n`` (:func:`micro_slices`), so the accumulated
gradient is the gradient of the token mean over the rank's rows (every row holds ``T``
targets), and DDP's average over ranks makes it the token mean over the global batch.

``auto`` (:func:`resolve_micro_batch`):

* on CUDA, the largest divisor of the rank's rows whose forward+backward fits, probed on the
  device at the start of the fit (:func:`probe_micro_batch`): ascending over the divisors, each
  probe's peak memory predicts the next one's (linear in the rows); a candidate fits when its
  predicted or measured peak plus the AdamW moments stays under :data:`MEMORY_FRACTION` of the
  device's memory;
* elsewhere (the CPU), the whole per-rank batch: one micro-batch, exactly the computation of a
  run without micro-batches. CPU runs are small; set ``micro_batch_size`` to bound their memory.

The micro-batch size and the world size are execution settings, recorded per run
(``runs.micro_batch_size``, ``runs.world_size``) and outside the protocol hash.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import nullcontext

import torch

from harness.train.loss import token_cross_entropy

#: Share of the device's memory a probed micro-batch may use (the rest: allocator
#: fragmentation, the compiled graph's buffers, the evaluation's logits).
MEMORY_FRACTION = 0.85

AUTO = "auto"


def micro_slices(n_rows: int, micro: int) -> list[tuple[slice, float]]:
    """The micro-batches of ``n_rows`` rows: ``[(rows, weight)]`` with ``weight = n_j / n_rows``.

    The last micro-batch is smaller when ``micro`` does not divide ``n_rows``. One micro-batch
    (``micro >= n_rows``) has weight exactly 1.0, so its loss is used as is.

    Raises:
        ValueError: ``n_rows`` or ``micro`` not positive.
    """
    if n_rows <= 0 or micro <= 0:
        raise ValueError(f"n_rows={n_rows} and micro={micro} must be positive")
    return [
        (slice(start, min(start + micro, n_rows)), (min(start + micro, n_rows) - start) / n_rows)
        for start in range(0, n_rows, micro)
    ]


def divisors(n: int) -> list[int]:
    """Positive divisors of ``n``, ascending."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def probe_micro_batch(
    model: torch.nn.Module,
    *,
    local_batch: int,
    context: int,
    vocab_size: int,
    device: torch.device,
    forward_context: Callable = nullcontext,
    budget_bytes: int | None = None,
) -> tuple[int, str]:
    """The largest divisor of ``local_batch`` whose forward+backward fits on CUDA ``device``.

    Runs forward (inside ``forward_context()``, the training precision) and backward on random
    token ids of ``[m, context]`` for ascending divisors ``m``, measuring the peak allocated
    bytes of each; the gradients are dropped after each probe and the parameters are not
    changed. A candidate fits when ``peak + 2 * fp32 parameter bytes`` (the AdamW moments,
    not yet allocated) is at most ``budget_bytes`` (default :data:`MEMORY_FRACTION` of the
    device's total memory). Before probing a candidate its peak is predicted linearly from the
    last probe; a predicted misfit ends the search without running it.

    Returns:
        ``(m, note)``: the micro-batch size in sequences and a one-line description of the probe.

    Raises:
        RuntimeError: not even one sequence fits (the note of the failed probe is in the message).
    """
    total = torch.cuda.get_device_properties(device).total_memory
    budget = budget_bytes if budget_bytes is not None else int(MEMORY_FRACTION * total)
    moments = 2 * sum(p.numel() * 4 for p in model.parameters() if p.requires_grad)
    gen = torch.Generator(device="cpu").manual_seed(0)  # never the global RNG: data and init stay put
    best, best_peak, last = 0, 0, None
    for m in divisors(local_batch):
        if last is not None:
            m0, base, peak0 = last
            predicted = base + (peak0 - base) * m / m0
            if predicted + moments > budget:
                break
        tokens = torch.randint(0, vocab_size, (m, context), generator=gen).to(device)
        torch.cuda.synchronize(device)
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        try:
            with forward_context():
                logits = model(tokens)
            token_cross_entropy(logits, tokens).backward()  # the training loss: no float32 [m, T, V] copy
            torch.cuda.synchronize(device)
            peak = torch.cuda.max_memory_allocated(device)
        except torch.cuda.OutOfMemoryError:
            peak = None
        finally:
            logits = None
            for p in model.parameters():
                p.grad = None
            torch.cuda.empty_cache()
        if peak is None or peak + moments > budget:
            break
        best, best_peak, last = m, peak, (m, base, peak)
    gib = 2**30
    if best == 0:
        raise RuntimeError(
            f"micro_batch_size auto: one sequence of {context} tokens does not fit on {device} "
            f"({budget / gib:.1f} GiB allowed of {total / gib:.1f} GiB)"
        )
    note = (
        f"micro-batch {best} of {local_batch} sequences per rank (auto: probed forward+backward on "
        f"{torch.cuda.get_device_name(device)}, peak {best_peak / gib:.1f} GiB + AdamW moments "
        f"{moments / gib:.1f} GiB <= {budget / gib:.1f} GiB)"
    )
    return best, note


def resolve_micro_batch(
    setting: int | str, *, local_batch: int, device: torch.device, probe: Callable[[], tuple[int, str]]
) -> tuple[int, str | None]:
    """The micro-batch size of a run on ``device`` (see the module docstring).

    Args:
        setting: ``auto`` or a number of sequences (capped at ``local_batch``).
        local_batch: the rank's rows of one global batch.
        probe: called for ``auto`` on CUDA (:func:`probe_micro_batch` with the model bound).

    Returns:
        ``(m, note)``; ``note`` is the probe's line, or ``None`` when nothing was probed.
    """
    if setting != AUTO:
        return min(int(setting), local_batch), None
    if device.type == "cuda":
        return probe()
    return local_batch, None


__all__ = ["AUTO", "MEMORY_FRACTION", "micro_slices", "divisors", "probe_micro_batch", "resolve_micro_batch"]
