"""Live progress of the run this process is training, for ``harness status``.

The training callback (:class:`harness.train.progress.RunCallback`) publishes what its run
has done after every optimiser step (:func:`publish`: a reference swap, no I/O); a queue
worker's lease heartbeat (:mod:`harness.scheduling.queue.lease`, every few seconds) reads the
latest (:func:`current`) and writes it into the run's lease in the queue storage, where
``harness status`` shows tokens, tokens/s and an ETA per running run. The write rate is the
heartbeat's, whatever the step rate. No torch, no Optuna: both sides import this module.

Throughput counts optimiser steps only (:class:`StepRate`): the set-up before the first step
(imports, the corpus, the model, the data loader's start) and the evaluations are not training,
so a first ETA never spreads them over the tokens left (issue 66: "74 tok/s, ETA 194 s" for a run
that ended 30 s later).
"""

from __future__ import annotations

import time
from dataclasses import dataclass


@dataclass(frozen=True)
class LiveProgress:
    """How far one run is.

    Attributes:
        run_id: the run (the queue's cell tag).
        tokens: training tokens seen so far (a resumed run counts from its checkpoint).
        total_tokens: the tokens the run trains in all (its budget rounded down to whole steps).
        tokens_per_s: training throughput of this process's optimiser steps (tokens/s,
            :meth:`StepRate.tokens_per_s`: set-up and evaluations left out); None before the first step.
        at: unix time (seconds) of this measurement.
    """

    run_id: str
    tokens: int
    total_tokens: int
    tokens_per_s: float | None
    at: float

    def eta_s(self, now: float | None = None) -> float | None:
        """Seconds left at this throughput, less the time since ``at`` (>= 0); None without a rate."""
        if not self.tokens_per_s or self.tokens_per_s <= 0:
            return None
        left = max(self.total_tokens - self.tokens, 0) / self.tokens_per_s
        return max(left - max((time.time() if now is None else now) - self.at, 0.0), 0.0)


class StepRate:
    """Tokens per second over optimiser steps alone, and the ETA it gives.

    Fed one ``(tokens, seconds)`` per step (the step's wall time, from its batch's start to its end
    before any evaluation or checkpoint: :class:`harness.train.progress.RunCallback`). The process's
    first step pays one-off costs (allocations, a compiled model's compilation), so it counts only
    until a second step is timed; from then on the rate is the later steps' tokens over their seconds.
    """

    def __init__(self) -> None:
        self.first: tuple[int, float] | None = None  # (tokens, seconds) of this process's first step
        self.tokens = 0  # of the steps after the first
        self.seconds = 0.0

    def add(self, tokens: int, seconds: float) -> None:
        """One optimiser step of ``tokens`` tokens that took ``seconds`` (>= 0)."""
        if self.first is None:
            self.first = (tokens, seconds)
        else:
            self.tokens += tokens
            self.seconds += seconds

    def tokens_per_s(self) -> float | None:
        """Tokens/s of the steps timed (the first one alone until there is a second), or None before any."""
        tokens, seconds = (self.tokens, self.seconds) if self.tokens else (self.first or (0, 0.0))
        return tokens / seconds if tokens and seconds > 0 else None

    def eta_s(self, tokens_left: int) -> float | None:
        """Seconds ``tokens_left`` more tokens take at :meth:`tokens_per_s`; None without a rate."""
        rate = self.tokens_per_s()
        return max(tokens_left, 0) / rate if rate else None


_current: LiveProgress | None = None


def publish(progress: LiveProgress | None) -> None:
    """Make ``progress`` this process's latest (None: no run in progress)."""
    global _current
    _current = progress


def current(run_id: str | None = None) -> LiveProgress | None:
    """The latest published progress (of ``run_id`` only, when given), or None."""
    p = _current
    if p is None or (run_id is not None and p.run_id != run_id):
        return None
    return p


__all__ = ["LiveProgress", "StepRate", "publish", "current"]
