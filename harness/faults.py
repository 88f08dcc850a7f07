"""A fault of the machine a run trains on, not of the run: :class:`RankDied`, :class:`ResultsReadOnly`.

Light on purpose (no torch): the worker loop (:mod:`harness.scheduling.worker`) catches it
without loading the training stack, releases the run (queued again, no retry spent) and stops,
as it does for a full disk (DESIGN section 10's fault model; section 11's dead rank).
"""

from __future__ import annotations

import errno
import signal
from pathlib import Path

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


class ResultsReadOnly(OSError):
    """The results folder became read-only (a remount, a file system that went read-only after an
    error): the environment's fault, not the run's. No failed result is written (it could not be),
    the run is released where the queue can still be written (else its lease expires), and the
    worker stops with one line naming the folder."""


def read_only_path(exc: BaseException) -> str | None:
    """The file a read-only file system refused (EROFS) in ``exc`` or an error it came from, else None."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno == errno.EROFS:
            return str(seen.filename or "")
        seen = seen.__cause__ or seen.__context__
    return None


def read_only_stop(queue, call, claim, results_dir: Path, refused: str) -> ResultsReadOnly:
    """Release ``claim`` if the queue can still be written, and the one line the worker stops with."""
    try:
        call(queue.release, claim, f"results folder read-only ({refused}); run released (no retry spent)")
        told = "released and queued again (no retry spent)"
    except Exception:  # the queue is on the same read-only disk: the lease expires instead
        told = "not released (the queue is read-only too): another worker takes it once its lease expires"
    stop = ResultsReadOnly(
        f"results folder {results_dir} is read-only (writing {refused or 'a file'} failed with EROFS); "
        f"{claim.run_id} {told}; the worker stops: remount it read-write or point --results elsewhere"
    )
    stop.errno = errno.EROFS
    return stop


__all__ = [
    "RUN_ERROR_EXIT",
    "RankDied",
    "ResultsReadOnly",
    "describe_exit",
    "read_only_path",
    "read_only_stop",
]
