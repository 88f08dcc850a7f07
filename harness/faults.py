"""A fault of the machine a run trains on, not of the run: :class:`RankDied`.

Light on purpose (no torch): the worker loop (:mod:`harness.scheduling.worker`) catches it
without loading the training stack, releases the run (queued again, no retry spent) and stops,
as it does for a full disk (DESIGN section 10's fault model; section 11's dead rank).
"""

from __future__ import annotations

import signal

#: a child rank's exit status when its training raised (Python's own for an uncaught exception):
#: the run's error, which rank 0 meets too, not the machine's
RUN_ERROR_EXIT = 1


def describe_exit(code: int) -> str:
    """``exit code 3`` or ``killed by SIGKILL`` for a ``subprocess`` return code (negative: a signal)."""
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


class RankDied(OSError):
    """A child rank of a run died (a signal, or an exit other than its run's own error) while rank 0
    trained the run: the machine's fault (out of memory, a GPU lost, an operator's kill), so the run
    is given back, not failed.

    Attributes:
        rank: the dead rank's global rank (1..N-1).
        exit_code: its ``subprocess`` return code (negative: killed by that signal).
    """

    def __init__(self, rank: int, exit_code: int, message: str | None = None) -> None:
        self.rank, self.exit_code = rank, exit_code
        super().__init__(
            message
            or f"rank {rank} died ({describe_exit(exit_code)}, exit status {exit_code}) while the run trained"
        )

    def __reduce__(self):  # picklable with its fields (a launched worker's result crosses processes)
        return type(self), (self.rank, self.exit_code, str(self))


__all__ = ["RUN_ERROR_EXIT", "RankDied", "describe_exit"]
