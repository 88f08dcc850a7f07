"""Where a run's wall time goes: training steps, evaluation, checkpoints, setup.

:class:`RunTimes` accumulates seconds per phase of one run (``runs`` columns ``train_s``,
``eval_s``, ``ckpt_s``, ``setup_s``; ``wall_s`` is the whole run), over every process
segment of a resumed run (the totals so far travel in its checkpoints):

* ``train_s`` -- inside optimiser steps: from Lightning's ``on_train_batch_start`` to its
  ``on_train_batch_end`` (forward, loss, backward, clipping, AdamW, LR schedule), every step;
* ``eval_s`` -- :meth:`~harness.train.lit.LitLM.evaluate` (validation NLL and the routing
  diagnostics), every evaluation;
* ``ckpt_s`` -- writing checkpoints;
* ``setup_s`` -- from the start of :func:`~harness.train.runner.build` to the first step of
  the segment (corpus, model, trainer, Lightning's start-up, restoring a checkpoint, the
  first batch).

What is left of ``wall_s`` is data loading between steps, Lightning's loop and hooks, and
the wind-down until the result is written. ``train_s / wall_s`` is the fraction of the
run spent training (``harness bench`` measures the loop itself, :mod:`harness.bench.loop`).
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass

PHASES = ("train_s", "eval_s", "ckpt_s", "setup_s")


@dataclass
class RunTimes:
    """Seconds per phase (see the module docstring), this segment plus earlier ones."""

    train_s: float = 0.0
    eval_s: float = 0.0
    ckpt_s: float = 0.0
    setup_s: float = 0.0

    @contextmanager
    def phase(self, name: str):
        """Add the seconds spent in the ``with`` block to phase ``name`` (one of :data:`PHASES`)."""
        if name not in PHASES:
            raise ValueError(f"unknown phase {name!r}; phases: {', '.join(PHASES)}")
        t0 = time.perf_counter()
        try:
            yield
        finally:
            setattr(self, name, getattr(self, name) + time.perf_counter() - t0)

    def add(self, name: str, seconds: float) -> None:
        """Add ``seconds`` to phase ``name``."""
        if name not in PHASES:
            raise ValueError(f"unknown phase {name!r}; phases: {', '.join(PHASES)}")
        setattr(self, name, getattr(self, name) + seconds)

    def state(self) -> dict[str, float]:
        """The totals, for a checkpoint or a ``runs`` row."""
        return asdict(self)

    @classmethod
    def from_state(cls, state: dict | None) -> RunTimes:
        """Totals read back from :meth:`state` (missing phases: 0; an old checkpoint: all 0)."""
        state = state or {}
        return cls(**{name: float(state.get(name, 0.0)) for name in PHASES})


__all__ = ["PHASES", "RunTimes"]
