"""From a budget in tokens to optimiser steps, and the learning-rate schedule over them (DESIGN 4).

Budgets are tokens, never steps: :class:`StepPlan` turns a run's budget and training
settings into whole optimiser steps (the budget rounded down to whole batches) and the
step intervals of evaluation, checkpoints and train-metric rows; :func:`lr_multiplier`
is the warmup + cosine (or WSD) schedule over the run's own steps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from harness.design.config import TrainConfig, check_budget

#: Wall-clock seconds between checkpoints when ``checkpoint_every_tokens`` is 0: a checkpoint
#: only serves a resume after a crash, so at most this much work is lost, and a short run
#: writes none (a ``small`` checkpoint is ~70 MB with its AdamW state, a ``120m`` one ~2 GB).
CHECKPOINT_EVERY_S = 300.0


@dataclass(frozen=True)
class StepPlan:
    """The steps of one run.

    Attributes:
        batch_size: sequences per optimiser step B (all ranks together).
        batch_tokens: tokens per optimiser step, ``B * T``.
        total_steps: optimiser steps, ``budget_tokens // batch_tokens``.
        eval_every: validation every this many steps (0 = only at the last step).
        ckpt_every: checkpoint every this many steps; 0 (the default, ``checkpoint_every_tokens``
            unset) checkpoints by wall time instead, every :data:`CHECKPOINT_EVERY_S` seconds.
        log_every: train-metric rows every this many steps (about 100 per run).
        stop_step: a planned stop (checkpoint, then :class:`~harness.train.runner.RunInterrupted`)
            at this step, or ``None``.
    """

    batch_size: int
    batch_tokens: int
    total_steps: int
    eval_every: int
    ckpt_every: int
    log_every: int
    stop_step: int | None = None

    @classmethod
    def of(
        cls,
        train: TrainConfig,
        *,
        size: str,
        context: int,
        budget_tokens: int,
        stop_after_tokens: int | None = None,
    ) -> StepPlan:
        """The plan of a run of ``budget_tokens`` tokens at context ``context`` (size ``size``).

        Raises:
            ValueError: a budget the run cannot train (:func:`harness.design.config.check_budget`).
        """
        check_budget(train, size=size, context=context, budget_tokens=budget_tokens)
        batch_size = train.batch_tokens // context
        batch_tokens = batch_size * context
        # whole optimiser steps: a budget that is not a multiple of the batch is rounded down
        total_steps = budget_tokens // batch_tokens
        eval_every = train.eval_every_tokens // batch_tokens if train.eval_every_tokens else 0
        ckpt = train.checkpoint_every_tokens // batch_tokens if train.checkpoint_every_tokens else 0
        return cls(
            batch_size=batch_size,
            batch_tokens=batch_tokens,
            total_steps=total_steps,
            eval_every=eval_every,
            ckpt_every=ckpt,
            log_every=max(1, total_steps // 100),
            stop_step=max(1, stop_after_tokens // batch_tokens) if stop_after_tokens else None,
        )

    @property
    def tokens(self) -> int:
        """Tokens the run trains on: ``total_steps * batch_tokens`` (at most the budget)."""
        return self.total_steps * self.batch_tokens


def lr_multiplier(step: int, total_steps: int, warmup_steps: int, cfg: TrainConfig) -> float:
    """LR multiplier at optimiser step ``step`` (0-based), in ``[min_lr_ratio, 1]`` after warmup.

    Warmup: linear from 1/warmup to 1. ``cosine``: half cosine from 1 to ``min_lr_ratio``
    over the remaining steps (Loshchilov & Hutter 2017, SGDR eq. 5). ``wsd``: constant,
    then linear decay to ``min_lr_ratio`` over the last ``decay_frac`` of the steps
    (warmup-stable-decay; Hu et al. 2024, MiniCPM, section 4).
    """
    if warmup_steps and step < warmup_steps:
        return (step + 1) / warmup_steps
    lo = cfg.min_lr_ratio
    if cfg.schedule == "cosine":
        span = max(1, total_steps - warmup_steps)
        progress = min(1.0, (step - warmup_steps) / span)
        return lo + (1 - lo) * 0.5 * (1 + math.cos(math.pi * progress))
    decay_steps = max(1, int(round(cfg.decay_frac * total_steps)))
    start = total_steps - decay_steps
    if step < start:
        return 1.0
    return 1 - (1 - lo) * min(1.0, (step - start + 1) / decay_steps)


def warmup_steps(cfg: TrainConfig, total_steps: int, batch_tokens: int) -> int:
    """Warmup length in steps: ``warmup_tokens // batch_tokens``, or 5 % of the run (at least 1)."""
    return cfg.warmup_tokens // batch_tokens if cfg.warmup_tokens else max(1, round(0.05 * total_steps))


__all__ = ["CHECKPOINT_EVERY_S", "StepPlan", "lr_multiplier", "warmup_steps"]
