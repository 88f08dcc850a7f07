"""The run's one Lightning callback: evaluate, checkpoint, stop on request, show progress, time.

All four happen in one ordered hook after each optimiser step (:meth:`RunCallback.on_train_batch_end`),
so their order is fixed: train-metric rows, then the evaluation (at every ``eval_every``
steps and at the last step), then the checkpoint (which therefore holds this step's
rows; every ``checkpoint_every_tokens``, by default every :data:`CHECKPOINT_EVERY_S`
seconds), then the progress display, then a planned stop. The same hooks time the run's
phases into ``pl_module.times`` (:mod:`harness.train.timing`): each step from
``on_train_batch_start`` to ``on_train_batch_end`` is ``train_s``, each checkpoint
``ckpt_s``, and the time from ``t_setup`` to the segment's first step ``setup_s``.

Progress goes to stderr: a ``tqdm`` bar on a terminal (``HARNESS_PROGRESS=lines`` forces
lines), else one line every 10 % of the budget.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable

import lightning as L

from harness.train.schedule import CHECKPOINT_EVERY_S, StepPlan


class StopRequested(Exception):
    """Raised inside the trainer at the plan's ``stop_step``, after the checkpoint."""


class RunCallback(L.Callback):
    """Evaluate, checkpoint, stop-on-request and show progress (see the module docstring).

    Args:
        plan: the run's steps and intervals.
        label: the run's name in progress lines (``variant s<seed>``).
        budget_tokens: the run's budget, for the percentage shown.
        progress: show progress at all.
        save_checkpoint: ``save_checkpoint(trainer)`` writes the run's checkpoint.
        t_setup: ``time.perf_counter()`` when the run's setup began (default: now).
    """

    def __init__(self, plan: StepPlan, *, label: str, budget_tokens: int, progress: bool,
                 save_checkpoint: Callable, t_setup: float | None = None) -> None:
        self.plan, self.label, self.budget_tokens, self.progress = plan, label, budget_tokens, progress
        self._save = save_checkpoint
        self.t_setup = time.perf_counter() if t_setup is None else t_setup
        self.t_step: float | None = None  # perf_counter at the start of the current step
        self.stepped = False  # a step ran in this process (setup_s is counted once)
        self.t_ckpt: float | None = None  # perf_counter of this segment's last checkpoint
        self.bar = None
        self.t0: float | None = None
        self.tokens0 = 0
        self.next_print = 0.0

    def on_train_start(self, trainer, pl_module):
        self.t0 = time.perf_counter()
        self.tokens0 = pl_module.tokens_seen
        if self.progress and trainer.is_global_zero:
            if sys.stderr.isatty() and os.environ.get("HARNESS_PROGRESS", "bar") != "lines":
                from tqdm import tqdm

                self.bar = tqdm(total=self.budget_tokens, initial=self.tokens0, unit="tok", unit_scale=True,
                                desc=self.label, dynamic_ncols=True, leave=False)
            else:
                self.next_print = self.tokens0 + 0.1 * self.budget_tokens

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.t_step = time.perf_counter()
        if not self.stepped:
            self.stepped = True
            pl_module.times.add("setup_s", self.t_step - self.t_setup)

    def save_checkpoint(self, trainer, pl_module) -> None:
        with pl_module.times.phase("ckpt_s"):
            self._save(trainer)
        self.t_ckpt = time.perf_counter()

    def _checkpoint_due(self, trainer, step: int) -> bool:
        """Every ``plan.ckpt_every`` steps, or (``ckpt_every`` 0) once :data:`CHECKPOINT_EVERY_S`
        seconds have passed since the last checkpoint or the segment's start. Rank 0's clock
        decides for every rank (saving is collective)."""
        if self.plan.ckpt_every:
            return step % self.plan.ckpt_every == 0
        due = time.perf_counter() - (self.t_ckpt or self.t_setup) >= CHECKPOINT_EVERY_S
        return bool(trainer.strategy.broadcast(due, src=0)) if trainer.world_size > 1 else due

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if self.t_step is not None:
            pl_module.times.add("train_s", time.perf_counter() - self.t_step)
            self.t_step = None
        plan, step = self.plan, int(trainer.global_step)
        if pl_module.diverged:
            return
        pl_module.record_train_step()  # before any checkpoint, so a resume keeps this step's rows
        if step == plan.total_steps or (plan.eval_every and step % plan.eval_every == 0):
            pl_module.evaluate(trainer.datamodule.val_dataloader())
        stopping = plan.stop_step is not None and step >= plan.stop_step and step < plan.total_steps
        if step < plan.total_steps and (stopping or self._checkpoint_due(trainer, step)):
            self.save_checkpoint(trainer, pl_module)
        self._show(pl_module, step)
        if stopping:
            raise StopRequested(f"stopped after {pl_module.tokens_seen:,} tokens (step {step}) as asked")

    def on_exception(self, trainer, pl_module, exception):
        from lightning.pytorch.utilities.exceptions import SIGTERMException

        # Lightning raises SIGTERMException at a batch boundary: the state is whole, keep it
        if isinstance(exception, SIGTERMException) and not pl_module.diverged:
            self.save_checkpoint(trainer, pl_module)

    def _show(self, pl_module, step: int) -> None:
        tokens = pl_module.tokens_seen
        if self.bar is not None:
            self.bar.update(tokens - self.bar.n)
            if pl_module.last_eval is not None and pl_module.last_eval["step"] == step:
                self.bar.set_postfix(val_nll=f"{pl_module.last_eval['nll']:.3f}")
        elif self.progress and tokens >= self.next_print and self.t0 is not None:
            rate = (tokens - self.tokens0) / max(time.perf_counter() - self.t0, 1e-9)
            eta = (self.budget_tokens - tokens) / max(rate, 1e-9)
            print(f"[{self.label}] {100 * tokens / self.budget_tokens:3.0f}% {tokens:,}/{self.budget_tokens:,} "
                  f"tokens, {rate:,.0f} tok/s, ETA {eta:,.0f} s", file=sys.stderr, flush=True)
            self.next_print = tokens + 0.1 * self.budget_tokens

    def on_train_end(self, trainer, pl_module):
        if self.bar is not None:
            self.bar.close()


__all__ = ["StopRequested", "RunCallback"]
