"""Fencing: who may still write a run's checkpoints and its result (DESIGN section 10).

A queued run is trained by the worker holding its lease. A worker stopped past its lease
(SIGSTOP, a frozen VM, a network partition) is presumed dead and its run is given to
another worker; when the first one wakes up it must not write anything more for that
run. Every claim therefore carries an *owner* (``host:pid``) and an *epoch*, a number
that grows with every new attempt at the run (the attempt's Optuna trial number), and
the run's writes go through a :class:`Fence`:

* :meth:`Fence.lost` -- free (no I/O): the reason the lease is known to be lost (the
  heartbeat saw it), else ``None``; checked after every optimiser step;
* :meth:`Fence.check` -- asks the queue; raises :class:`LeaseLost`; called before each
  checkpoint;
* :meth:`Fence.holding` -- a block in which the lease is checked and held against any
  takeover, as tightly as the storage allows (the journal's lock, a row lock on
  PostgreSQL); the result file is renamed into place inside it.

Checkpoints live in one folder per epoch, and result files carry ``owner`` and ``epoch``,
so a write that slipped through is still told apart (:mod:`harness.train.checkpoint`,
:mod:`db.ingest`). The fence of a run trained by hand (``harness run``) is the open
:class:`Fence`: owner this process, no epoch, never lost.

The fence of the run being trained reaches :func:`harness.train.train_run` through
:func:`fenced` (a context variable), so train functions keep their two-argument form.
This module is plain Python: the queue implements the fence
(:class:`harness.scheduling.fence.ClaimFence`), training only uses it.
"""

from __future__ import annotations

import contextvars
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager


class LeaseLost(RuntimeError):
    """This worker no longer holds the run's lease: it must stop the run and write nothing more.

    Attributes:
        run_id: the run.
        reason: who holds it now, or why it was taken (one line).
    """

    def __init__(self, run_id: str, reason: str):
        self.run_id, self.reason = run_id, reason
        super().__init__(f"{run_id}: {reason}")


class Fence:
    """The open fence: owner ``host:pid`` of this process, no epoch, never lost.

    Subclasses (a queue claim) override :meth:`lost`, :meth:`check` and :meth:`holding`.

    Attributes:
        owner: ``host:pid`` of the writer, stamped in checkpoints' folders and result files.
        epoch: the attempt's number (grows with every new owner of the run), ``None`` for
            a run trained by hand.
    """

    epoch: int | None = None

    @property
    def owner(self) -> str:
        return f"{socket.gethostname()}:{os.getpid()}"

    def lost(self) -> str | None:
        """Why the lease is known to be lost, without asking anyone; ``None`` if not known."""
        return None

    def check(self, what: str) -> None:
        """Raise :class:`LeaseLost` unless the lease is still held (``what``: the write about to happen)."""

    @contextmanager
    def holding(self, what: str) -> Iterator[None]:
        """A block during which the lease is held and cannot be taken over; raises
        :class:`LeaseLost` on entry when it is already lost."""
        yield


OPEN = Fence()
_current: contextvars.ContextVar[Fence | None] = contextvars.ContextVar("harness_fence", default=None)


def current() -> Fence:
    """The fence of the run being trained in this context (:data:`OPEN` outside :func:`fenced`)."""
    return _current.get() or OPEN


@contextmanager
def fenced(fence: Fence) -> Iterator[Fence]:
    """Make ``fence`` the :func:`current` one for the block (the queue worker wraps a run in it)."""
    token = _current.set(fence)
    try:
        yield fence
    finally:
        _current.reset(token)


__all__ = ["LeaseLost", "Fence", "OPEN", "current", "fenced"]
