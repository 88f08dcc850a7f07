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
:mod:`harness.store.ingest`). The fence of a run trained by hand (``harness run``) is the open
:class:`Fence`: owner this process, no epoch, never lost.

The fence of the run being trained reaches :func:`harness.train.train_run` through
:func:`fenced` (a context variable), so train functions keep their two-argument form.
This module is plain Python: the queue implements the fence
(:class:`harness.scheduling.workers.fence.ClaimFence`), training only uses it.
"""

from __future__ import annotations

import contextvars
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from harness.common.files import results_id


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


class FolderWatch:
    """Whether the results folder is still the one the worker started on: same device, inode and
    id (``RESULTS/.harness-id``, written now if missing: a new folder may get a freed inode's number).

    :meth:`look` stats it (the heartbeat calls it every beat, the fence before every write);
    :attr:`gone` is the reason once it is lost (free to read, checked after every optimiser step).
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.id = results_id(folder, create=True)
        st = os.stat(folder)
        self.identity = (st.st_dev, st.st_ino)
        self.gone: str | None = None

    def look(self) -> str | None:
        """Why the folder is lost, or ``None`` while it is the one the worker started on."""
        if self.gone is None:
            try:
                # the id first: an unmount between the two reads is then seen as one (the new stat)
                now_id = results_id(self.folder)
                st = os.stat(self.folder)
            except FileNotFoundError:
                self.gone = "deleted"
            except OSError as exc:
                self.gone = f"unreachable: {exc.strerror}"
            else:
                if st.st_dev != self.identity[0]:
                    self.gone = "unmounted, or another file system mounted there"
                elif st.st_ino == self.identity[1] and now_id is None:
                    self.gone = "deleted"  # being emptied (rm -r): its id file went first
                elif st.st_ino != self.identity[1] or now_id != self.id:
                    self.gone = "replaced by another folder"
        return self.gone


class FolderFence(Fence):
    """The fence of a run trained by hand (``harness run``): no other owner can take the run, but it
    stops, writing nothing more, once its results folder is lost (deleted, unmounted or replaced:
    :class:`FolderWatch`). :meth:`lost` looks at most once every ``every_s`` seconds (one ``stat``
    and a small read), :meth:`check` and :meth:`holding` before every write."""

    def __init__(self, watch: FolderWatch, run_id: str, every_s: float = 1.0) -> None:
        self.watch, self.run_id, self.every_s = watch, run_id, every_s
        self._next = time.monotonic() + every_s

    def _why(self) -> str | None:
        why = self.watch.look()
        return None if why is None else f"results folder {self.watch.folder} {why}"

    def lost(self) -> str | None:
        if self.watch.gone is None and time.monotonic() >= self._next:
            self._next = time.monotonic() + self.every_s
            self.watch.look()
        return None if self.watch.gone is None else f"results folder {self.watch.folder} {self.watch.gone}"

    def check(self, what: str) -> None:
        why = self._why()
        if why is not None:
            raise LeaseLost(self.run_id, f"{why}; {what} not written")

    @contextmanager
    def holding(self, what: str) -> Iterator[None]:
        self.check(what)
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


__all__ = ["LeaseLost", "Fence", "FolderWatch", "FolderFence", "OPEN", "current", "fenced"]
