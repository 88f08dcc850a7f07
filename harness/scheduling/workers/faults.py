"""What a worker meets that is the environment's fault, not the run's (DESIGN section 10).

A results folder that is lost (:class:`~harness.train.fencing.FolderWatch`, :class:`WatchedFence`,
:class:`ResultsLost`),
that belongs to another queue (:class:`OtherResults`) or is full (:class:`DiskFull`), and a child
rank that died (:class:`~harness.common.faults.RankDied`): each releases the claimed run (no retry
spent) and stops the worker with one line saying what to check. :mod:`harness.scheduling.workers.loop`
calls these around each run it trains.

Owns the environment's faults a worker meets, each releasing the run with no retry spent. Must not judge
the run's own failures (the loop does).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from harness.common.faults import RankDied
from harness.common.files import FULL_BELOW, fmt_bytes, free_bytes, full_place, results_id
from harness.scheduling.workers.fence import ClaimFence
from harness.train.fencing import FolderWatch, LeaseLost

FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
# how torch's checkpoint writer says ENOSPC (a RuntimeError without an errno)
_FULL_WORDS = ("no space left on device", "disk quota exceeded", "file write failed")


class DiskFull(OSError):
    """The disk holding a run's checkpoints or result is full: the environment's fault, not the run's.
    The run was released (queued again, no retry spent) and the worker stops; the message (one
    line) names the full path, its free space and what the run needs."""


def full_path(exc: BaseException, results_dir: Path) -> Path | None:
    """The path a full disk refused (the error's file, else the results folder) when ``exc`` or an
    error it came from is ENOSPC / EDQUOT (or torch's words for it on a disk that is full); else None."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in FULL_ERRNOS:
            return full_place(seen.filename, results_dir) if seen.filename else results_dir
        if any(w in str(seen).lower() for w in _FULL_WORDS) and free_bytes(results_dir) < FULL_BELOW:
            return results_dir
        seen = seen.__cause__ or seen.__context__
    return None


class ResultsLost(OSError):
    """The worker's results folder is gone (deleted, unmounted, or replaced by another folder) since
    it started: the run was released (when the queue could still be reached) and the worker stops,
    creating nothing there."""


class WatchedFence(ClaimFence):
    """A :class:`ClaimFence` that also stops the run, writing nothing, once the results folder is lost
    (so a checkpoint or result never re-creates the folder tree)."""

    def __init__(self, watch: FolderWatch, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.watch = watch

    def _folder(self, what: str) -> None:
        why = self.watch.look()
        if why is not None:
            raise LeaseLost(
                self.claim.run_id, f"results folder {self.watch.folder} {why}; {what} not written"
            )

    def lost(self) -> str | None:
        if self.watch.gone is not None:
            return f"results folder {self.watch.folder} {self.watch.gone}"
        return super().lost()

    def check(self, what: str) -> None:
        self._folder(what)
        super().check(what)

    @contextmanager
    def holding(self, what: str) -> Iterator[None]:
        self._folder(what)
        with super().holding(what):
            yield


def results_lost(queue, claim, watch: FolderWatch) -> ResultsLost:
    """Release ``claim`` once, best effort (the queue may live in the lost folder: then the next worker
    reclaims the run once its lease is stale), and the one-line :class:`ResultsLost` the worker stops with."""
    journal = getattr(getattr(queue.storage, "journal", None), "_file_path", None)
    try:
        if journal is not None and Path(os.path.abspath(journal)).is_relative_to(
            os.path.abspath(watch.folder)
        ):
            raise FileNotFoundError(
                journal
            )  # the queue went with the folder: write nothing in what is there now
        queue.release(claim, f"results folder {watch.folder} {watch.gone}; run released")
        released = f"{claim.run_id} released"
    except Exception as exc:  # noqa: BLE001 - the queue went with the folder: say so, do not retry
        released = (
            f"{claim.run_id} not released ({type(exc).__name__}: the queue is unreachable; another worker "
            "reclaims it once its lease is stale)"
        )
    lost = ResultsLost(
        f"results folder {watch.folder} {watch.gone} while this worker used it; {released}; the "
        "worker stops and creates nothing there (check the mount, then start the worker again)"
    )
    lost.errno = errno.ENOENT
    return lost


class OtherResults(ValueError):
    """A run's grid belongs to another results folder than the worker's ``--results`` (by the id
    in ``RESULTS/.harness-id``): the run was released and the worker stops, naming both folders."""


def check_results(queue, call, claim, results_dir: Path, watch: FolderWatch | None = None) -> None:
    """Refuse (release ``claim`` and raise :class:`OtherResults`) a run whose grid the queue records
    for another results folder than ``results_dir`` (:meth:`RunQueue.bind_results`); when the folder
    went away since the worker started (``watch``), :func:`results_lost` says so instead."""
    owner = call(queue.results_of, claim.grid)
    if owner is None:
        return
    mine = results_id(results_dir)
    if mine == owner["id"]:
        return
    if watch is not None and watch.look() is not None:  # deleted between the worker's look and this read
        raise results_lost(queue, claim, watch)
    call(queue.release, claim, f"worker on another results folder ({results_dir}); run released")
    raise OtherResults(
        f"grid {claim.grid} belongs to the results folder {owner['path']} (id {owner['id']}); "
        f"this worker's --results {results_dir} is another folder "
        f"({'id ' + mine if mine else 'no .harness-id'}): {claim.run_id} released; start the "
        f"worker with --results {owner['path']} (the same folder, mounted on this machine)"
    )


def disk_full(queue, call, claim, path: Path, need: int | None, why: str) -> DiskFull:
    """Release ``claim`` (no retry spent) and the one-line :class:`DiskFull` the worker stops with. A release
    the full disk refuses (the queue journal on it) is said in that line: nothing is torn
    (:func:`harness.scheduling.queue.journal.append_whole`) and the run's lease covers it."""
    try:
        call(queue.release, claim, f"disk full at {path}: {why}; run released (no retry spent)")
        released = f"{claim.run_id} released and queued again (no retry spent)"
    except OSError as exc:
        if exc.errno not in FULL_ERRNOS:
            raise
        released = (
            f"{claim.run_id} could not be released: the queue journal is on the full disk ({exc.filename}); "
            "nothing was torn, no retry is spent, and a worker reclaims the run once this one has stopped"
        )
    needs = f"; {claim.run_id} needs about {fmt_bytes(need)} for its checkpoints" if need else ""
    full = DiskFull(
        f"disk full: {path} ({why}, {fmt_bytes(free_bytes(path))} free){needs}; {released}; the worker "
        "stops: free space there or point --results elsewhere"
    )
    full.errno = errno.ENOSPC
    return full


def rank_died(queue, call, claim, exc: RankDied) -> RankDied:
    """Release ``claim`` (no retry spent) and the one-line :class:`RankDied` the worker stops with: a
    machine that kills a rank would kill it again in the next run."""
    call(queue.release, claim, f"{exc}; run released (no retry spent)")
    return RankDied(
        exc.rank,
        exc.exit_code,
        f"{exc}; {claim.run_id} released and queued again (no retry spent); the worker stops: check "
        "the machine (memory, the GPU's health, the kernel log), then start the worker again",
    )


__all__ = [
    "FULL_ERRNOS",
    "DiskFull",
    "full_path",
    "ResultsLost",
    "WatchedFence",
    "results_lost",
    "OtherResults",
    "check_results",
    "disk_full",
    "rank_died",
]
