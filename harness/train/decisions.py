"""When every rank of a run reads rank 0's decisions (its lease, a stop request, a checkpoint by its clock).

With several ranks rank 0 alone knows these, and each reading is a broadcast every rank must make at the
same step (DESIGN section 11). Reading at every step would add a host synchronisation per step; reading
at the log interval only (about 100 per run) lets a stop wait up to a log interval, which at paper
scale is minutes, past SLURM's ``KillWait`` (30 s). So a :class:`DecisionSchedule` reads them at the log
and evaluation steps and at steps rank 0 chooses by its clock: at each reading rank 0 measures the
seconds per step since the previous reading and names the next decision step, at most
:data:`DECISION_EVERY_S` seconds ahead at that rate (at least the next step, at most a log interval),
broadcast with its decisions, so every rank agrees. A stop request then takes effect within about
:data:`DECISION_EVERY_S` seconds plus a step (while the step time holds), whatever the model's size.
"""

from __future__ import annotations

import time
from collections.abc import Callable

DECISION_EVERY_S = 5.0  # seconds between two readings of rank 0's decisions, at most (at the measured rate)


class DecisionSchedule:
    """Which optimiser steps are decision steps (see the module docstring).

    Args:
        log_every: the run's log interval, steps (a decision step each; the longest gap chosen).
        eval_every: the run's evaluation interval, steps (0: none before the last step).
        every_s: the longest wait between two decision steps, seconds, at the measured step rate.
        clock: seconds (monotonic); a test passes a fake one.
    """

    def __init__(
        self,
        log_every: int,
        eval_every: int = 0,
        *,
        every_s: float = DECISION_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.log_every, self.eval_every, self.every_s, self.clock = log_every, eval_every, every_s, clock
        self.next_step = 0  # the segment's first step is one: it starts the clock
        self._last: tuple[int, float] | None = None  # (step, clock) of rank 0's last reading

    def due(self, step: int) -> bool:
        """Whether every rank reads rank 0's decisions after optimiser step ``step``."""
        return (
            step >= self.next_step
            or step % self.log_every == 0
            or bool(self.eval_every and step % self.eval_every == 0)
        )

    def gap(self, step: int) -> int:
        """Rank 0, at decision step ``step``: how many steps until the next one (1 .. ``log_every``), so
        that at the rate measured since the previous decision step at most ``every_s`` seconds pass."""
        now = self.clock()
        last, self._last = self._last, (step, now)
        if last is None or step <= last[0]:
            return 1  # no rate yet (the first step holds set-up and compilation): measure the next one
        per_step = (now - last[1]) / (step - last[0])
        if per_step <= 0:
            return self.log_every
        return max(1, min(self.log_every, int(self.every_s / per_step)))

    def agree(self, step: int, gap: int) -> None:
        """Every rank: rank 0's ``gap`` (broadcast) makes ``step + gap`` the next clock decision step."""
        self.next_step = step + gap


__all__ = ["DECISION_EVERY_S", "DecisionSchedule"]
