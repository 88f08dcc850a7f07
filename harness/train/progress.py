"""The run's one Lightning callback: evaluate, checkpoint, stop on request, show progress, time.

All four happen in one ordered hook after each optimiser step (:meth:`RunCallback.on_train_batch_end`),
so their order is fixed: train-metric rows, then the evaluation (at every ``eval_every``
steps and at the last step) and its hook (``on_eval``: a tuning trial reports the NLL to
its study's pruner, which may end the run as ``pruned``), then the checkpoint (which
therefore holds this step's rows; every ``checkpoint_every_tokens``, by default every
:data:`CHECKPOINT_EVERY_S` seconds), then the progress display, then a stop: planned
(``stop_after_tokens``) or asked for by ``stop_requested`` (a signal,
:class:`harness.train.stop.StopRequest`), with a checkpoint of that step either way.
With several ranks, rank 0's decisions (its lease, a stop request, a checkpoint by its clock) are
broadcast at decision steps only (:mod:`harness.train.decisions`: the log and evaluation steps and steps
rank 0's clock picks, at most about 5 s apart), so the steps between make no host synchronisation of
the harness's and a stop takes effect within seconds, whatever a step costs.
The same hooks time the run's phases into ``pl_module.times`` (:mod:`harness.train.timing`):
each step from ``on_train_batch_start`` to ``on_train_batch_end`` is ``train_s``, each
checkpoint ``ckpt_s``, and the time from ``t_setup`` to the segment's first step ``setup_s``.

Progress goes to stderr (modes: :mod:`harness.common.console`, ``$HARNESS_PROGRESS``): a ``tqdm``
bar on a terminal no other harness process is training on, else complete lines prefixed
with the run, one per 10 % of the budget and at least one a minute. A bar that finds another
worker on its terminal (checked every few seconds) gives way to lines. After every step the
run's tokens and tokens/s are published for the lease heartbeat (:mod:`harness.common.live`).
Tokens/s and the ETA, in lines, on the bar and in ``harness status``, count the optimiser steps only
(:class:`harness.common.live.StepRate`), never the set-up before the first step nor evaluations.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import lightning as L

from harness.common import console, live
from harness.train.decisions import DecisionSchedule
from harness.train.fencing import LeaseLost
from harness.train.schedule import CHECKPOINT_EVERY_S, StepPlan

SHARE_CHECK_S = 2.0  # how often a bar looks for another worker on its terminal (seconds)


class StopRequested(Exception):
    """Raised inside the trainer at the plan's ``stop_step``, after the checkpoint."""


class RunCallback(L.Callback):
    """Evaluate, checkpoint, stop-on-request and show progress (see the module docstring).

    Args:
        plan: the run's steps and intervals.
        label: the run's name in progress lines (``variant s<seed>``).
        budget_tokens: the run's budget, for the percentage shown.
        progress: show progress at all (``$HARNESS_PROGRESS=off`` also turns it off).
        save_checkpoint: ``save_checkpoint(trainer)`` writes the run's checkpoint (it checks
            the run's lease first, :mod:`harness.train.fencing`).
        run_id: the run's id, under which its live progress is published.
        check_lease: called first after every optimiser step (with several ranks: by rank 0 at each
            decision step, :mod:`harness.train.decisions`, its verdict broadcast); raises
            :class:`~harness.train.fencing.LeaseLost` when the lease is known to be lost (no I/O).
        on_eval: ``on_eval(step, tokens, val_nll) -> bool``, called after every evaluation
            before the last step (val NLL in nats/token); ``True`` stops the run there as
            pruned (:attr:`harness.train.lit.LitLM.pruned`).
        stop_requested: asked after every optimiser step before the last (with several ranks: by rank
            0 at each decision step); a reason (string) stops the run there with a checkpoint, ``None``
            goes on.
        t_setup: ``time.perf_counter()`` when the run's setup began (default: now).
    """

    def __init__(
        self,
        plan: StepPlan,
        *,
        label: str,
        budget_tokens: int,
        progress: bool,
        save_checkpoint: Callable,
        run_id: str = "",
        check_lease: Callable[[], None] = lambda: None,
        on_eval: Callable[[int, int, float], bool] | None = None,
        stop_requested: Callable[[], str | None] | None = None,
        t_setup: float | None = None,
    ) -> None:
        self.plan, self.label, self.budget_tokens, self.progress = plan, label, budget_tokens, progress
        self._save, self.run_id = save_checkpoint, run_id
        self.check_lease = check_lease
        self.on_eval = on_eval
        self.stop_requested = stop_requested
        self.t_setup = time.perf_counter() if t_setup is None else t_setup
        self.decisions = DecisionSchedule(plan.log_every, plan.eval_every)
        self.t_step: float | None = None  # perf_counter at the start of the current step
        self.stepped = False  # a step ran in this process (setup_s is counted once)
        self.t_ckpt: float | None = None  # perf_counter of this segment's last checkpoint
        self.bar = None
        self.val_nll = ""  # the bar's last validation NLL, kept in its postfix
        self.terminal: console.SharedTerminal | None = None
        self.tokens0 = 0
        self.rate = live.StepRate()  # tokens/s over this process's steps (set-up and evaluations left out)
        self.tokens_before_step = 0  # the run's tokens when the current step began
        self.next_print = 0.0
        self.next_print_t = 0.0
        self.next_share_check = 0.0

    def on_train_start(self, trainer, pl_module):
        self.tokens0 = pl_module.tokens_seen
        if not trainer.is_global_zero:
            self.progress = False
            return
        self.progress = self.progress and console.progress_mode() != "off"
        if not self.progress:
            return
        self.terminal = console.SharedTerminal(sys.stderr).__enter__()
        if (
            console.progress_mode() == "auto"
            and console.terminal_id(sys.stderr)
            and not self.terminal.others()
        ):
            from tqdm import tqdm  # lazy: only for a live progress bar

            self.bar = tqdm(
                total=self.budget_tokens,
                initial=self.tokens0,
                unit="tok",
                unit_scale=True,
                desc=self.label,
                # tqdm's own rate would count the set-up before the first step: ours, in the postfix
                bar_format="{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} tok{postfix}",
                dynamic_ncols=True,
                leave=False,
                file=sys.stderr,
            )
            self.next_share_check = time.monotonic() + SHARE_CHECK_S
        else:
            self._lines_from(self.tokens0)

    def _lines_from(self, tokens: int) -> None:
        self.next_print = tokens + console.LINE_EVERY_FRACTION * self.budget_tokens
        self.next_print_t = time.monotonic() + console.LINE_EVERY_S

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.t_step = time.perf_counter()
        self.tokens_before_step = pl_module.tokens_seen
        if not self.stepped:
            self.stepped = True
            pl_module.times.add("setup_s", self.t_step - self.t_setup)

    def save_checkpoint(self, trainer, pl_module) -> None:
        with pl_module.times.phase("ckpt_s"):
            self._save(trainer)
        self.t_ckpt = time.perf_counter()

    def _checkpoint_due(self, step: int) -> bool:
        """Every ``plan.ckpt_every`` steps, or (``ckpt_every`` 0) once :data:`CHECKPOINT_EVERY_S`
        seconds have passed since the last checkpoint or the segment's start (this rank's clock: with
        several ranks rank 0's, read at a decision step, :mod:`harness.train.decisions`)."""
        if self.plan.ckpt_every:
            return step % self.plan.ckpt_every == 0
        return time.perf_counter() - (self.t_ckpt or self.t_setup) >= CHECKPOINT_EVERY_S

    def _rank0_decisions(self, trainer, step: int) -> tuple[str | None, bool]:
        """``(stop request's reason or None, checkpoint due)`` after ``step``, the same on every rank.

        Raises:
            LeaseLost: rank 0's lease is lost (every rank raises it at the same step).
        """
        if trainer.world_size < 2:  # its lease was checked first thing after the step
            return self._asked(step), self._checkpoint_due(step)
        if not self.decisions.due(step):
            return None, bool(self.plan.ckpt_every) and self._checkpoint_due(step)
        # rank 0 alone knows its lease, its signals and its clock: one broadcast, before any checkpoint,
        # which also names the next decision step (by rank 0's clock: a stop waits seconds, not steps)
        gap = self.decisions.gap(step) if trainer.is_global_zero else None
        lost, asked, due, gap = self._from_rank0(
            trainer, (self._lease_lost(), self._asked(step), self._checkpoint_due(step), gap)
        )
        self.decisions.agree(step, gap)
        if lost is not None:
            raise LeaseLost(*lost)
        return asked, due

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if self.t_step is not None:
            took = time.perf_counter() - self.t_step
            pl_module.times.add("train_s", took)
            self.rate.add(pl_module.tokens_seen - self.tokens_before_step, took)
            self.t_step = None
        plan, step = self.plan, int(trainer.global_step)
        if trainer.world_size < 2:
            self.check_lease()  # a worker whose run was taken over stops here, writing nothing more
        if pl_module.diverged:  # the same on every rank (LitLM reduces the decision)
            return
        pl_module.record_train_step()  # before any checkpoint, so a resume keeps this step's rows
        if pl_module.diverged:  # read at this step's log interval (on CUDA not every step)
            return
        if step == plan.total_steps or (plan.eval_every and step % plan.eval_every == 0):
            if pl_module.poll_divergence():  # never evaluate (nor checkpoint) diverged weights
                return
            nll = pl_module.evaluate(trainer.datamodule.val_dataloader())["nll"]
            if step < plan.total_steps and self._from_rank0(
                trainer, self.on_eval is not None and bool(self.on_eval(step, pl_module.tokens_seen, nll))
            ):
                pl_module.pruned = {"step": step, "tokens": pl_module.tokens_seen, "val_nll": nll}
                trainer.should_stop = True
                self._show(pl_module, step)
                return
        planned = plan.stop_step is not None and step >= plan.stop_step and step < plan.total_steps
        asked, due = self._rank0_decisions(trainer, step)
        stopping = planned or bool(asked)
        if step < plan.total_steps and (stopping or due):
            if pl_module.poll_divergence():
                return
            self.save_checkpoint(trainer, pl_module)
        self._show(pl_module, step)
        if stopping:
            why = f"on request ({asked})" if asked else "as asked"
            raise StopRequested(f"stopped after {pl_module.tokens_seen:,} tokens (step {step}) {why}")

    @staticmethod
    def _from_rank0(trainer, value):
        """Rank 0's ``value`` on every rank: a decision only rank 0 can make (its lease, its
        signals, its tuning study's pruner) taken by all ranks at the same step."""
        if trainer.world_size < 2:
            return value
        return trainer.strategy.broadcast(value if trainer.is_global_zero else None, src=0)

    def _lease_lost(self) -> tuple[str, str] | None:
        """``(run_id, reason)`` when :attr:`check_lease` raises, else ``None``."""
        try:
            self.check_lease()
        except LeaseLost as exc:
            return exc.run_id, exc.reason
        return None

    def _asked(self, step: int) -> str | None:
        """The stop request's reason after ``step`` (never after the last step), or ``None``."""
        return (
            self.stop_requested()
            if self.stop_requested is not None and step < self.plan.total_steps
            else None
        )

    def on_exception(self, trainer, pl_module, exception):
        # lazy: Lightning loads only to train
        from lightning.pytorch.utilities.exceptions import SIGTERMException

        self._close()
        # Lightning raises SIGTERMException at a batch boundary: the state is whole, keep it
        if isinstance(exception, SIGTERMException) and not pl_module.poll_divergence():
            try:
                self.save_checkpoint(trainer, pl_module)
            except LeaseLost:  # the run is someone else's now: nothing to keep
                pass

    def _show(self, pl_module, step: int) -> None:
        tokens = pl_module.tokens_seen
        rate = self.rate.tokens_per_s()
        if self.run_id:
            live.publish(live.LiveProgress(self.run_id, tokens, self.plan.tokens, rate, time.time()))
        if not self.progress:
            return
        now = time.monotonic()
        if self.bar is not None and now >= self.next_share_check:
            self.next_share_check = now + SHARE_CHECK_S
            if self.terminal is not None and self.terminal.others():
                self.bar.close()  # leave=False: the bar's line is cleared, nothing half-drawn stays
                self.bar = None
                self.next_print = self.next_print_t = 0  # a line at once, then the usual rate
        left = self.rate.eta_s(self.plan.tokens - tokens)
        eta = f"{left:,.0f} s" if left is not None else "?"
        if self.bar is not None:
            if pl_module.last_eval is not None and pl_module.last_eval["step"] == step:
                self.val_nll = f", val_nll {pl_module.last_eval['nll']:.3f}"
            self.bar.set_postfix_str(f"{rate or 0:,.0f} tok/s, ETA {eta}{self.val_nll}", refresh=False)
            self.bar.update(tokens - self.bar.n)
        elif tokens >= self.next_print or now >= self.next_print_t or tokens >= self.plan.tokens:
            last = pl_module.last_eval
            nll = f", val_nll {last['nll']:.4f}" if last is not None and last["step"] == step else ""
            print(
                f"[{self.label}] {100 * tokens / self.budget_tokens:3.0f}% {tokens:,}/{self.budget_tokens:,} "
                f"tokens, {rate or 0:,.0f} tok/s, ETA {eta}{nll}",
                file=sys.stderr,
                flush=True,
            )
            self._lines_from(tokens)

    def _close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        if self.terminal is not None:
            self.terminal.__exit__(None, None, None)
            self.terminal = None

    def on_train_end(self, trainer, pl_module):
        self._close()

    def teardown(self, trainer, pl_module, stage):
        self._close()


__all__ = ["StopRequested", "RunCallback"]
