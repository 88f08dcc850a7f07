"""The retry policy: which faults spend a retry, how many, and every release of a claimed run (DESIGN
section 10).

How an attempt at a run ends, and what it costs the run:

* **the run's own error** (its training raised; a device-side assert it caused): its failed result is
  written and one retry spent; a run whose :data:`MAX_RETRIES` retries are spent stays ``failed``
  (:func:`retry_left`). A CUDA context the run poisoned also stops the worker (:func:`poisoned_stop`).
* **the environment's fault** (the results folder lost, another queue's, read-only or full; a child rank
  that died; a dead CUDA context; a corpus not on this machine): the run is released, queued again with
  no retry spent, and the worker stops with one line saying what to check (:func:`stop_for_environment`,
  over the types and tests of :mod:`harness.common.faults`).
* **a configuration error** (settings that cannot train the run, a corpus of another text): released, no
  retry spent, the worker stops (:func:`admit`, :func:`located`); refused before any claim where it can
  be (:mod:`harness.scheduling.workers.start`).
* **an interrupt** (Ctrl-C, SIGTERM, a stop asked while claiming): released, no retry spent
  (:func:`given_back_if_interrupted`, :func:`released_if_stopped`).
* **a seed bound meanwhile to another hardware class** (``[schedule] pair_hardware = "same"``: another
  worker's run of the seed started training first): released for a worker of that class, no retry spent,
  and the worker goes on (:func:`released_for_its_pair`). None of the above binds a seed: a seed is bound
  when a run of it trains, not when a claim is released untrained (DESIGN section 13).
* **a worker that died**: its lease goes stale and another worker reclaims the run, queued again until
  it was reclaimed :data:`MAX_RECLAIMS` times (:meth:`RunQueue.reclaim_stale
  <harness.scheduling.queue.run_queue.RunQueue.reclaim_stale>` with that limit).

The queue records what is decided here (:meth:`~harness.scheduling.queue.run_queue.RunQueue.fail`'s
``requeue``, ``release``, ``reclaim_stale``'s ``max_reclaims``) and holds no policy of its own. Every
queue operation goes through the worker's ``call`` (retried while the storage is unreachable).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from harness.common.faults import (
    FULL_ERRNOS,
    CorpusMissing,
    CudaContextLost,
    DiskFull,
    OtherResults,
    RankDied,
    ResultsLost,
    ResultsReadOnly,
    full_path,
    read_only_path,
    sticky_cuda_error,
)
from harness.common.files import fmt_bytes, free_bytes, results_id
from harness.train.fencing import FolderWatch

#: A run whose training raised is retried this many times, then stays failed (``harness work --retries``).
MAX_RETRIES = 2
#: A run whose worker died (its lease went stale) this many times is not queued again.
MAX_RECLAIMS = 5
NO_RETRY = "run released (no retry spent)"  # the reason a released attempt records, after what happened
REQUEUED = "released and queued again (no retry spent)"  # said after the run id in the worker's line


def retry_left(claim, max_retries: int) -> bool:
    """Whether ``claim``'s run is queued again after this attempt's own failure: its failures, this one
    counted, are at most ``max_retries``."""
    return claim.failures + 1 <= max_retries


@contextmanager
def given_back_if_interrupted(queue, call, claim, log) -> Iterator[None]:
    """Release ``claim`` when a ``KeyboardInterrupt`` (Ctrl-C; SIGTERM in ``harness work``; a stopped
    run's :class:`~harness.train.runner.RunInterrupted`) or ``SystemExit`` ends the block, wherever it
    lands after the claim: before training too (the start line, the fence, the lazy imports). An
    ``Exception`` passes: the block has settled the claim itself. Releasing a claim already settled
    changes nothing (the queue's transition from running fails), so nothing is said then."""
    try:
        yield
    except Exception:
        raise
    except BaseException:
        if call(queue.release, claim, "worker interrupted (KeyboardInterrupt or SIGTERM); run released"):
            log(f"released {claim.run_id}: queued again; a retry resumes from its checkpoint")
        raise


def released_if_stopped(queue, call, claim, stop, log) -> bool:
    """Whether a stop was asked while claiming; then ``claim`` is given back untouched."""
    if stop is None or not stop.requested:
        return False
    call(queue.release, claim, f"worker stopped ({stop.requested}) before training; run released")
    log(f"stop requested ({stop.requested}); released {claim.run_id}; worker stops")
    return True


def admit(queue, call, claim, results_dir: Path, watch: FolderWatch | None, space_needed, check_run):
    """The bytes ``claim`` needs (``None``: not known) once its results folder is still there
    (:func:`results_lost`), its own (:func:`check_results`) and has that much free (``space_needed(config)``,
    else :func:`disk_full`), and ``check_run(config)`` accepts its settings (else a configuration error):
    each refusal releases the run (no retry spent) and raises the worker's one-line stop."""
    if watch is not None and watch.look() is not None:
        raise results_lost(queue, claim, watch)
    check_results(queue, call, claim, results_dir, watch)
    if check_run is not None:
        try:
            check_run(claim.config)
        except ValueError as exc:
            call(queue.release, claim, f"configuration error: {exc}; {NO_RETRY}")
            raise ValueError(f"{exc}; {claim.run_id} {REQUEUED}") from None
    need = space_needed(claim.config) if space_needed is not None else None
    if need is not None and free_bytes(results_dir) < need:
        raise disk_full(queue, call, claim, results_dir, need, "not enough free space to start")
    return need


def located(corpus, queue, call, claim):
    """``claim`` with the path of its corpus on this machine (:meth:`CorpusLocator.locate
    <harness.corpus.locate.CorpusLocator.locate>`). A corpus not here (:class:`CorpusMissing`) or not the
    grid's text (a configuration error) releases the run, no retry spent and its attempt number kept (it
    never started), and raises the worker's one-line stop."""
    try:
        return corpus.locate(queue, call, claim)
    except CorpusMissing as exc:
        call(queue.release, claim, f"{exc}; {NO_RETRY}", keep_attempt=True)
        raise CorpusMissing(f"{exc}; {claim.run_id} {REQUEUED}") from None
    except (ValueError, FileNotFoundError) as exc:  # another text, or a corpus gone while it was read
        call(queue.release, claim, f"configuration error: {exc}; {NO_RETRY}", keep_attempt=True)
        raise ValueError(f"{exc}; {claim.run_id} {REQUEUED}") from None


def released_for_its_pair(queue, call, claim, pairs, log) -> bool:
    """Bind ``claim``'s seed to this worker's hardware class and numerics as its run is about to train
    (:meth:`PairGate.bind <harness.scheduling.queue.hardware_pairs.PairGate.bind>`; ``pairs``: the worker's
    gate, ``None``: none). Whether the seed was bound meanwhile to another worker's key: then the run is
    released for a worker of that key (no retry spent, its attempt number kept: it never started) and said
    in ``log``; the worker goes on."""
    if pairs is None:
        return False
    other = call(pairs.bind, queue.storage, call(queue.study_of, claim.grid), claim)
    if other is None:
        return False
    call(queue.release, claim, f"its seed was bound to {other} meanwhile; {NO_RETRY}", keep_attempt=True)
    log(
        f"{claim.run_id}: its seed's other runs train on {other} (bound by another worker meanwhile); "
        f"{REQUEUED} for a worker of that class"
    )
    return True


def stop_for_environment(
    queue, call, claim, exc: Exception, results_dir: Path, watch: FolderWatch | None, need: int | None
) -> None:
    """Release ``claim`` (no retry spent) and raise the worker's one-line stop when ``exc``, raised while
    the run trained, is the environment's fault: a child rank died, the results folder was lost, a CUDA
    context is dead, the results folder is read-only or a disk is full (``need``: the bytes the run's
    checkpoints need, named then). Returns when ``exc`` is the run's own error (a retry spent)."""
    if isinstance(exc, RankDied):  # the machine's fault: no failed result
        raise rank_died(queue, call, claim, exc) from None
    if watch is not None and watch.look() is not None:  # e.g. a FileNotFoundError of the lost folder
        raise results_lost(queue, claim, watch) from None
    sticky = sticky_cuda_error(exc)
    if sticky is not None:  # a dead CUDA context: every later run here would fail the same way
        raise context_lost_stop(queue, call, claim, sticky) from None
    refused = read_only_path(exc)
    if refused is not None:  # no failed result (it cannot be written)
        raise read_only_stop(queue, call, claim, results_dir, refused) from None
    full = full_path(exc, results_dir)
    if full is not None:  # no failed result
        why = f"{type(exc).__name__}: {exc}".splitlines()[0]
        raise disk_full(queue, call, claim, full, need, why) from None


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
        call(queue.release, claim, f"disk full at {path}: {why}; {NO_RETRY}")
        released = f"{claim.run_id} {REQUEUED}"
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
    call(queue.release, claim, f"{exc}; {NO_RETRY}")
    return RankDied(
        exc.rank,
        exc.exit_code,
        f"{exc}; {claim.run_id} {REQUEUED}; the worker stops: check "
        "the machine (memory, the GPU's health, the kernel log), then start the worker again",
    )


def read_only_stop(
    queue, call: Callable[..., Any], claim, results_dir: Path, refused: str
) -> ResultsReadOnly:
    """Release ``claim`` if the queue can still be written, and the one line the worker stops with."""
    try:
        call(queue.release, claim, f"results folder read-only ({refused}); {NO_RETRY}")
        told = REQUEUED
    except Exception:  # the queue is on the same read-only disk: the lease expires instead
        told = "not released (the queue is read-only too): another worker takes it once its lease expires"
    stop = ResultsReadOnly(
        f"results folder {results_dir} is read-only (writing {refused or 'a file'} failed with EROFS); "
        f"{claim.run_id} {told}; the worker stops: remount it read-write or point --results elsewhere"
    )
    stop.errno = errno.EROFS
    return stop


def context_lost_stop(queue, call, claim, error: str) -> CudaContextLost:
    """Release ``claim`` (no retry spent) and the one-line :class:`CudaContextLost` the worker stops with."""
    call(queue.release, claim, f"CUDA context lost ({error}); {NO_RETRY}")
    return CudaContextLost(
        f"CUDA context lost: {error}; {claim.run_id} {REQUEUED}; the worker "
        "stops (this process cannot use the GPU again): check the GPU (nvidia-smi, the kernel log for an "
        "Xid), then start the worker again"
    )


def poisoned_stop(run_id: str, error: str) -> CudaContextLost:
    """The one line a worker stops with after recording ``run_id``'s failure on a context it poisoned
    (its retry spent, as any failure of the run's own)."""
    return CudaContextLost(
        f"CUDA context poisoned by {run_id}: {error}; recorded as that run's failure (its retry, if any, runs "
        "in a fresh process); the worker stops (this process cannot use the GPU again): fix the run's cause "
        "(CUDA_LAUNCH_BLOCKING=1 shows the kernel; e.g. a token id >= vocab_size), then start the worker again"
    )


__all__ = [
    "MAX_RETRIES",
    "MAX_RECLAIMS",
    "retry_left",
    "given_back_if_interrupted",
    "released_if_stopped",
    "admit",
    "located",
    "released_for_its_pair",
    "stop_for_environment",
    "results_lost",
    "check_results",
    "disk_full",
    "rank_died",
    "read_only_stop",
    "context_lost_stop",
    "poisoned_stop",
]
