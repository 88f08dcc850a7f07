"""Live progress of the run this process is training, for ``harness status``.

The training callback (:class:`harness.train.progress.RunCallback`) publishes what its run
has done after every optimiser step (:func:`publish`: a reference swap, no I/O); a queue
worker's lease heartbeat (:mod:`harness.scheduling.queue.lease`, every few seconds) reads the
latest (:func:`current`) and writes it into the run's lease in the queue storage, where
``harness status`` shows tokens, tokens/s and an ETA per running run. The write rate is the
heartbeat's, whatever the step rate. No torch, no Optuna: both sides import this module.
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
        tokens_per_s: mean training throughput since this process started the run, evaluations
            included (tokens/s); None before the first step.
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


__all__ = ["LiveProgress", "publish", "current"]
