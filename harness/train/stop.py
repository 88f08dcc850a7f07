"""Stop requests: a signal asks a worker to stop at the next batch boundary (DESIGN section 10).

A scheduler warns a job before it ends it: SLURM sends SIGTERM on preemption and on
``scontrol requeue`` (SIGKILL follows after ``KillWait``, 30 s by default), and, with
``--signal``, a user signal some time before the time limit (submitit's pre-timeout
signal: ``SIGUSR2``, 90 s before, :data:`submitit.JobEnvironment.USR_SIG`). A handler that
raised at once could land in the middle of an optimiser step and would lose the steps
since the last checkpoint, so :class:`StopRequest`'s handler only records the signal:

* the run's callback (:class:`harness.train.progress.RunCallback`) asks after every
  optimiser step, writes a checkpoint of that step and stops the run (it resumes from
  there, bit-identically on CPU);
* the worker loop (:func:`harness.scheduling.workers.loop.work`) then gives the run back to the
  queue and takes no other one; asked between runs, it takes none.

What follows (a requeue, an exit) is the caller's: ``harness launch``'s task
(:class:`harness.scheduling.workers.launched_task.WorkerTask`).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class StopRequest:
    """A request, made by a signal (or :meth:`request`), that a worker stop at the next batch boundary.

    Calling the object returns the reason (the first signal's name, e.g. ``'SIGUSR2'``) or
    ``None``: the form :class:`~harness.train.progress.RunCallback` asks for.
    """

    def __init__(self) -> None:
        self._event = threading.Event()
        self._reason: str | None = None
        self.signals: list[int] = []  # signal numbers received, in order

    def request(self, reason: str) -> None:
        """Ask for a stop (the first reason is kept)."""
        if self._reason is None:
            self._reason = reason
        self._event.set()

    def __call__(self) -> str | None:
        return self._reason

    @property
    def requested(self) -> str | None:
        """The reason a stop was asked for, or ``None``."""
        return self._reason

    def wait(self, timeout_s: float) -> bool:
        """Sleep up to ``timeout_s`` seconds, less when a stop is asked; returns whether one was."""
        return self._event.wait(timeout_s)

    def _handler(self, signum: int, frame: Any) -> None:
        self.signals.append(signum)
        self.request(signal.Signals(signum).name)

    @contextmanager
    def catching(self, *signums: int) -> Iterator[dict[int, Any]]:
        """Within the block, each of ``signums`` only records a stop request.

        Yields the handlers that were installed before (signal number -> handler, as
        :func:`signal.getsignal` gives them), which are put back on leaving the block.
        Must be entered from the main thread (Python runs signal handlers there).
        """
        previous = {s: signal.signal(s, self._handler) for s in signums}
        try:
            yield previous
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler if handler is not None else signal.SIG_DFL)


__all__ = ["StopRequest"]
