"""The run's one Lightning callback: evaluate, checkpoint, stop on request, show progress.

All four happen in one ordered hook after each optimiser step (:meth:`RunCallback.on_train_batch_end`),
so their order is fixed: train-metric rows, then the evaluation (at every ``eval_every``
steps and at the last step), then the checkpoint (which therefore holds this step's
rows), then the progress display, then a stop: planned (``stop_after_tokens``) or asked
for by ``stop_requested`` (a signal, :class:`harness.scheduling.stop.StopRequest`), with a
checkpoint of that step either way.

Progress goes to stderr: a ``tqdm`` bar on a terminal (``HARNESS_PROGRESS=lines`` forces
lines), else one line every 10 % of the budget.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable

import lightning as L

from harness.train.schedule import StepPlan


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
        stop_requested: asked after every optimiser step before the last; a reason
            (string) stops the run there with a checkpoint, ``None`` goes on.
    """

    def __init__(self, plan: StepPlan, *, label: str, budget_tokens: int, progress: bool,
                 save_checkpoint: Callable, stop_requested: Callable[[], str | None] | None = None) -> None:
        self.plan, self.label, self.budget_tokens, self.progress = plan, label, budget_tokens, progress
        self.save_checkpoint = save_checkpoint
        self.stop_requested = stop_requested
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

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        plan, step = self.plan, int(trainer.global_step)
        if pl_module.diverged:
            return
        pl_module.record_train_step()  # before any checkpoint, so a resume keeps this step's rows
        if step == plan.total_steps or (plan.eval_every and step % plan.eval_every == 0):
            pl_module.evaluate(trainer.datamodule.val_dataloader())
        planned = plan.stop_step is not None and step >= plan.stop_step and step < plan.total_steps
        asked = self.stop_requested() if self.stop_requested is not None and step < plan.total_steps else None
        stopping = planned or bool(asked)
        if step < plan.total_steps and (step % plan.ckpt_every == 0 or stopping):
            self.save_checkpoint(trainer)
        self._show(pl_module, step)
        if stopping:
            why = f"on request ({asked})" if asked else "as asked"
            raise StopRequested(f"stopped after {pl_module.tokens_seen:,} tokens (step {step}) {why}")

    def on_exception(self, trainer, pl_module, exception):
        from lightning.pytorch.utilities.exceptions import SIGTERMException

        # Lightning raises SIGTERMException at a batch boundary: the state is whole, keep it
        if isinstance(exception, SIGTERMException) and not pl_module.diverged:
            self.save_checkpoint(trainer)

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
