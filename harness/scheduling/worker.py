"""The worker loop of ``harness work``: take a queued run, train it, report it; repeat.

:func:`work` drives one :class:`~harness.scheduling.queue.RunQueue`: it reclaims stale
leases, claims the next run under a lease kept fresh by a
:class:`~harness.scheduling.lease.Heartbeat`, calls the train function, and tells the
queue the outcome (done / diverged, or failed with a retry while retries remain). The run
is trained inside its fence (:class:`~harness.scheduling.fence.ClaimFence`, made current by
:func:`harness.train.fencing.fenced`): when another worker took the run over meanwhile, training
stops with :class:`~harness.train.fencing.LeaseLost` before its next checkpoint or its result, the
worker says "lease lost to HOST:PID ...", and takes the next run. Every
queue operation is retried while the storage is unreachable
(:func:`~harness.scheduling.storage.retry_storage`). A ``KeyboardInterrupt`` (SIGTERM in
``harness work``) gives the run being trained back to the queue; so does a
:class:`~harness.train.stop.StopRequest` (``harness launch``'s tasks: a signal stops the
run at the next batch boundary, with a checkpoint), after which no other run is taken.

The default train function, :func:`train_unless_finished`, is
:func:`harness.train.train_run` unless the run's result file already says it finished
(its worker died before telling the queue); :func:`record_failure` writes a failed
attempt's result. Both import :mod:`harness.train` only when called, so the loop runs
with any other train function without loading Lightning.
"""

from __future__ import annotations

import errno
import os
import sys
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.common import live
from harness.common.faults import (
    RankDied,
    ResultsReadOnly,
    context_lost_stop,
    poisoned_stop,
    read_only_path,
    read_only_stop,
    run_poisoned_cuda,
    sticky_cuda_error,
)
from harness.common.files import FULL_BELOW, fmt_bytes, free_bytes, full_place, results_id
from harness.common.terms import FINISHED
from harness.design.config import RunConfig
from harness.scheduling.claiming import OrphanClock, claim_next, given_back_if_interrupted
from harness.scheduling.fence import ClaimFence
from harness.scheduling.lease import BEAT_S, Heartbeat
from harness.scheduling.storage import STORAGE_RETRY_S, retry_storage
from harness.scheduling.tuning import pruning_hook
from harness.train.execution import ExecutionSettings
from harness.train.fencing import LeaseLost, fenced

if TYPE_CHECKING:
    from harness.scheduling.queue import RunQueue
    from harness.train.stop import StopRequest

MAX_RETRIES = 2  # a run whose training raised is retried this many times, then stays failed


TrainFn = Callable[[RunConfig, Path], Any]
FailureFn = Callable[[RunConfig, Path, str], None]
SpaceFn = Callable[[RunConfig], int]
FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
# how torch's checkpoint writer says ENOSPC (a RuntimeError without an errno)
_FULL_WORDS = ("no space left on device", "disk quota exceeded", "file write failed")


class DiskFull(OSError):
    """The disk holding a run's checkpoints or result is full: the environment's fault, not the run's.
    The run was released (queued again, no retry spent) and the worker stops; the message (one
    line) names the full path, its free space and what the run needs."""


def _full_path(exc: BaseException, results_dir: Path) -> Path | None:
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
                st = os.stat(self.folder)
                same_id = results_id(self.folder) == self.id
            except FileNotFoundError:
                self.gone = "deleted"
            except OSError as exc:
                self.gone = f"unreachable: {exc.strerror}"
            else:
                if st.st_dev != self.identity[0]:
                    self.gone = "unmounted, or another file system mounted there"
                elif st.st_ino != self.identity[1] or not same_id:
                    self.gone = "replaced by another folder"
        return self.gone


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


def _results_lost(queue, claim, watch: FolderWatch) -> ResultsLost:
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


def _check_results(queue, call, claim, results_dir: Path) -> None:
    """Refuse (release ``claim`` and raise :class:`OtherResults`) a run whose grid the queue records
    for another results folder than ``results_dir`` (:meth:`RunQueue.bind_results`)."""
    owner = call(queue.results_of, claim.grid)
    if owner is None:
        return
    mine = results_id(results_dir)
    if mine == owner["id"]:
        return
    call(queue.release, claim, f"worker on another results folder ({results_dir}); run released")
    raise OtherResults(
        f"grid {claim.grid} belongs to the results folder {owner['path']} (id {owner['id']}); "
        f"this worker's --results {results_dir} is another folder "
        f"({'id ' + mine if mine else 'no .harness-id'}): {claim.run_id} released; start the "
        f"worker with --results {owner['path']} (the same folder, mounted on this machine)"
    )


def _disk_full(queue, call, claim, path: Path, need: int | None, why: str) -> DiskFull:
    """Release ``claim`` (no retry spent) and the one-line :class:`DiskFull` the worker stops with. A release
    the full disk refuses (the queue journal on it) is said in that line: nothing is torn
    (:func:`harness.scheduling.journal.append_whole`) and the run's lease covers it."""
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


def _rank_died(queue, call, claim, exc: RankDied) -> RankDied:
    """Release ``claim`` (no retry spent) and the one-line :class:`RankDied` the worker stops with: a
    machine that kills a rank would kill it again in the next run."""
    call(queue.release, claim, f"{exc}; run released (no retry spent)")
    return RankDied(
        exc.rank,
        exc.exit_code,
        f"{exc}; {claim.run_id} released and queued again (no retry spent); the worker stops: check "
        "the machine (memory, the GPU's health, the kernel log), then start the worker again",
    )


def fmt_duration(seconds: float) -> str:
    """``41 s``, ``12 min``, ``3.4 h``."""
    if seconds < 100:
        return f"{seconds:.0f} s"
    if seconds < 6000:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _outcome(result: Any) -> tuple[str, float | None, str | None]:
    """``(status, final val NLL or None, error or None)`` from a train function's return value.

    Accepted: a status string; ``(status, val_nll)``; a mapping with ``status`` and
    optionally ``val_nll`` (nats/token) and ``error`` (why a run diverged).
    """
    if isinstance(result, str):
        return result, None, None
    if isinstance(result, Mapping):
        return str(result.get("status")), result.get("val_nll"), result.get("error")
    if isinstance(result, tuple) and len(result) == 2:
        return str(result[0]), result[1], None
    return repr(result), None, None


def work(
    queue: RunQueue,
    train_fn: TrainFn,
    results_dir: Path,
    *,
    on_failure: FailureFn | None = None,
    grid: str | None = None,
    max_runs: int | None = None,
    wait: bool = False,
    poll_s: float = 10.0,
    max_retries: int = MAX_RETRIES,
    beat_s: float = BEAT_S,
    retry_s: float = STORAGE_RETRY_S,
    stop: StopRequest | None = None,
    space_needed: SpaceFn | None = None,
    log: Callable[[str], None] = print,
    settings: ExecutionSettings | None = None,
    check_run: Callable[[RunConfig], None] | None = None,
) -> Counter:
    """The worker loop: reclaim stale leases, take a run, train it, record the outcome; repeat.

    Args:
        queue: the run queue.
        train_fn: ``train_fn(config, results_dir)`` trains one run (resuming from its checkpoint if one
            exists) and returns ``'done'``, ``'diverged'`` or ``'pruned'`` (or see :func:`_outcome`); it
            raises on a crash. A tuning trial's run also gets ``on_eval=`` its study's pruning hook
            (:func:`harness.scheduling.tuning.pruning_hook`).
        results_dir: passed to ``train_fn`` and ``on_failure``. grid: only take runs of this grid.
        on_failure: ``on_failure(config, results_dir, error_text)`` records a crashed attempt (:func:`record_failure`).
        max_runs: stop after this many runs (``None``: no limit).
        wait: when nothing is queued, poll every ``poll_s`` seconds instead of stopping.
        max_retries: a crashed run is retried this many times before it stays failed.
        beat_s: lease refresh interval in seconds (well below the queue's lease timeout). retry_s: each
            queue operation is retried this long (seconds) while the storage is unreachable.
        stop: once it is asked (a signal), no further run is taken; with ``settings``, the train function
            also gets it as ``stop_requested=``, so that a run being trained stops at its next batch
            boundary, with a checkpoint, and is released.
        space_needed: ``space_needed(config)``: bytes of free space the run's checkpoints need
            (:func:`harness.train.checkpoint.space_needed`); a run is taken only when the results folder
            has that much free, else it is released and :class:`DiskFull` raised. log: the progress lines' sink.
        settings: the worker's :class:`~harness.train.execution.ExecutionSettings`, given whole: ``train_fn(config,
            results_dir, settings=settings, stop_requested=stop)``; ``None``: a stand-in's ``train_fn(c, r)``.
        check_run: ``check_run(config)`` refuses (``ValueError``) a run the settings cannot train: released.

    Returns:
        Counter of the outcomes of the runs taken: 'done', 'diverged', 'failed', 'lost' (lease lost).

    Raises:
        StorageUnavailable: the storage stayed unreachable for ``retry_s`` seconds (a run being finished
            stays RUNNING in the queue; the next worker reclaims it).
        ResultsLost: the results folder was deleted, unmounted or replaced since the worker started
            (checked every beat and before every write; the run is released).
        OtherResults: the grid of the run taken belongs to another results folder (run released).
        DiskFull: too little free space for a run, or a write hit ENOSPC/EDQUOT: the run is released
            (queued again, no retry spent) and the worker stops.
        RankDied / CudaContextLost: a child rank died, or a CUDA error poisoned the context (:mod:`harness.common.faults`):
            released the same way, the worker stops with one line naming the rank and its exit, or the error.

    A ``KeyboardInterrupt`` (also SIGTERM, a stopped run) after a claim releases it, then propagates.
    """
    _check_intervals(max_runs, poll_s, beat_s, retry_s)

    def call(method, *args, **kwargs):
        return retry_storage(lambda: method(*args, **kwargs), where=queue.where, retry_s=retry_s, log=log)

    run_kwargs = {} if settings is None else {"settings": settings, "stop_requested": stop}
    outcomes: Counter = Counter()
    watch = FolderWatch(Path(results_dir)) if Path(results_dir).is_dir() else None
    orphans = OrphanClock()
    while max_runs is None or sum(outcomes.values()) < max_runs:
        claim = claim_next(queue, call, grid, wait, poll_s, stop, orphans, log)
        if claim is None:
            break
        with given_back_if_interrupted(queue, call, claim, log):
            need = _admit(queue, call, claim, Path(results_dir), watch, space_needed, check_run)
            outcomes[
                _train_one(
                    queue,
                    call,
                    claim,
                    train_fn,
                    results_dir,
                    on_failure,
                    max_retries,
                    beat_s,
                    log,
                    need,
                    watch,
                    run_kwargs,
                )
            ] += 1
    return outcomes


def _check_intervals(max_runs: int | None, poll_s: float, beat_s: float, retry_s: float) -> None:
    """Raise ``ValueError`` (one line naming the value) for a run limit below 1 or a non-positive interval."""
    if max_runs is not None and max_runs < 1:
        raise ValueError(f"--max-runs {max_runs} must be at least 1")
    if poll_s <= 0 or beat_s <= 0:
        raise ValueError(f"poll interval ({poll_s} s) and beat interval ({beat_s} s) must be positive")
    if retry_s <= 0:
        raise ValueError(f"storage retry time {retry_s} s must be positive")


def _configured(queue, call, claim, check_run: Callable[[RunConfig], None] | None) -> None:
    """Release ``claim`` (no retry spent) and re-raise when ``check_run`` refuses its config."""
    if check_run is None:
        return
    try:
        check_run(claim.config)
    except ValueError as exc:
        call(queue.release, claim, f"configuration error: {exc}; run released (no retry spent)")
        raise ValueError(f"{exc}; {claim.run_id} released and queued again (no retry spent)") from None


def _admit(
    queue,
    call,
    claim,
    results_dir: Path,
    watch: FolderWatch | None,
    space_needed: SpaceFn | None,
    check_run=None,
):
    """The bytes ``claim`` needs (``None``: not known) once its results folder is still there, its own and
    has that much free; else the run is released and :class:`ResultsLost` / :class:`OtherResults` /
    :class:`DiskFull` raised; a run ``check_run`` refuses is released and its ``ValueError`` raised."""
    if watch is not None and watch.look() is not None:
        raise _results_lost(queue, claim, watch)
    _check_results(queue, call, claim, results_dir)
    _configured(queue, call, claim, check_run)
    need = space_needed(claim.config) if space_needed is not None else None
    if need is not None and free_bytes(results_dir) < need:
        raise _disk_full(queue, call, claim, results_dir, need, "not enough free space to start")
    return need


def _train_one(
    queue,
    call,
    claim,
    train_fn,
    results_dir,
    on_failure,
    max_retries,
    beat_s,
    log,
    need: int | None = None,
    watch: FolderWatch | None = None,
    run_kwargs: Mapping[str, Any] | None = None,
) -> str:
    """Train one claimed run inside its fence; every queue operation goes through ``call`` (retried).

    Returns the outcome: ``done``, ``diverged``, ``failed`` or ``lost`` (the lease was lost to
    another worker: the run is stopped, nothing more is written, the worker goes on).
    """
    done, total = call(queue.tally, claim.grid)
    again = f", attempt {claim.attempt}" if claim.attempt > 1 else ""
    log(f"[{done}/{total}] start {claim.run_id} (on {claim.lease.worker}, epoch {claim.epoch}{again})")
    t0 = time.monotonic()
    live.publish(None)  # the heartbeat sends this run's progress only, once its training publishes some
    heartbeat, fence = _fence(queue, call, claim, beat_s, watch)
    try:
        status, value, reason = _train_fenced(
            queue, call, claim, train_fn, results_dir, heartbeat, fence, run_kwargs or {}
        )
    except LeaseLost as exc:
        if watch is not None and watch.gone is not None:
            raise _results_lost(queue, claim, watch) from None
        return _lost(queue, call, claim, exc, log)
    except RankDied as exc:  # the machine's fault: no failed result, no retry spent
        raise _rank_died(queue, call, claim, exc) from None
    except Exception as exc:
        if watch is not None and watch.look() is not None:  # e.g. a FileNotFoundError of the lost folder
            raise _results_lost(queue, claim, watch) from None
        sticky = sticky_cuda_error(exc)
        if sticky is not None:  # a dead CUDA context: every later run here would fail the same way
            raise context_lost_stop(queue, call, claim, sticky) from None
        refused = read_only_path(exc)
        if refused is not None:  # the environment's fault: no failed result (it cannot be written)
            raise read_only_stop(queue, call, claim, Path(results_dir), refused) from None
        full = _full_path(exc, Path(results_dir))
        if full is not None:  # the environment's fault: no failed result, no retry spent
            raise _disk_full(
                queue, call, claim, full, need, f"{type(exc).__name__}: {exc}".splitlines()[0]
            ) from None
        outcome = _failed(queue, call, claim, exc, fence, results_dir, on_failure, max_retries, t0, log)
        poisoned = run_poisoned_cuda(exc)
        if poisoned is not None:  # the run's own failure, but no later run can use this context
            raise poisoned_stop(claim.run_id, poisoned) from None
        return outcome
    return _finished(queue, call, claim, status, value, reason, time.monotonic() - t0, log)


def _fence(queue, call, claim, beat_s: float, watch: FolderWatch | None) -> tuple[Heartbeat, ClaimFence]:
    """The heartbeat keeping ``claim``'s lease fresh (sending the run's live progress) and its fence."""
    if watch is None:
        heartbeat = Heartbeat(lambda: queue.beat(claim, live.current(claim.run_id)), beat_s)
        return heartbeat, ClaimFence(queue, claim, heartbeat, call)
    # every beat also looks at the results folder: a lost one stops the run within a beat
    heartbeat = Heartbeat(
        lambda: watch.look() is not None or queue.beat(claim, live.current(claim.run_id)), beat_s
    )
    return heartbeat, WatchedFence(watch, queue, claim, heartbeat, call)


def _train_fenced(
    queue, call, claim, train_fn, results_dir, heartbeat, fence, run_kwargs: Mapping[str, Any]
) -> tuple[str, Any, Any]:
    """``(status, val_nll, error)`` of ``train_fn`` run under the heartbeat and fence (with ``run_kwargs``:
    the worker's settings and stop request; a tuning trial's run with its pruning hook); raises :class:`_ReportedFailure` when it returned 'failed' and
    ``ValueError`` for a status that is not a finished one."""
    extra = dict(run_kwargs)
    if claim.tuning:
        extra["on_eval"] = call(pruning_hook, queue.storage, claim.grid, claim.trial_id)
    with heartbeat, fenced(fence):
        result = train_fn(claim.config, results_dir, **extra)
    status, value, reason = _outcome(result)
    if status == "failed":  # the train function recorded the failure itself
        raise _ReportedFailure(f"train function returned 'failed' for {claim.run_id}")
    if status not in FINISHED:
        raise ValueError(
            f"train function returned {status!r}; expected 'done', 'diverged', 'pruned' or 'failed'"
        )
    return status, value, reason


def _failed(
    queue, call, claim, exc: Exception, fence, results_dir, on_failure, max_retries, t0: float, log
) -> str:
    """Record a crashed attempt (its failed result file, written under the fence, then the queue's retry
    or final failure) and say so; call it while ``exc`` is being handled (its traceback is recorded).
    Returns ``failed``, or ``lost`` when the lease was lost before the failed result was written."""
    wall = time.monotonic() - t0
    error = traceback.format_exc()
    if on_failure is not None and not isinstance(exc, _ReportedFailure):
        try:
            with fenced(fence):  # the failed result file is written only while the lease is held
                on_failure(claim.config, results_dir, error)
        except LeaseLost as lost:
            return _lost(queue, call, claim, lost, log)
        except Exception as exc2:  # keep going: the queue still records the failure
            log(f"warning: recording the failure of {claim.run_id} failed: {exc2!r}")
    retried = call(queue.fail, claim, error, wall_s=wall, max_retries=max_retries)
    done, total = call(queue.tally, claim.grid)
    then = "retry queued" if retried else "no retries left"
    log(f"[{done}/{total}] failed {claim.run_id} ({fmt_duration(wall)}): {type(exc).__name__}: {exc}; {then}")
    return "failed"


def _finished(queue, call, claim, status: str, value, reason, wall: float, log) -> str:
    """Tell the queue a finished run's outcome (warning when its lease was lost meanwhile); ``status``."""
    if not call(queue.complete, claim, status, value=value, wall_s=wall, error=reason):
        log(
            f"warning: {claim.run_id} finished, but its lease was lost meanwhile (another worker "
            f"reclaimed it); the result file is written, the queue keeps the other attempt"
        )
    done, total = call(queue.tally, claim.grid)
    nll = f", val_nll {value:.4f}" if isinstance(value, (int, float)) and value == value else ""
    log(f"[{done}/{total}] {status} {claim.run_id} ({fmt_duration(wall)}{nll})")
    return status


def _lost(queue, call, claim, exc: LeaseLost, log) -> str:
    """Say that the run's lease was lost (naming who holds it now) and give the run up."""
    why = call(queue.lease_lost, claim) or exc.reason
    log(f"{why}: {claim.owner} stopped {claim.run_id} and wrote nothing more for it; the worker goes on")
    return "lost"


class _ReportedFailure(RuntimeError):
    """The train function returned 'failed' (it recorded the failure itself)."""


def train_unless_finished(
    config: RunConfig,
    results_dir: Path,
    settings: ExecutionSettings | None = None,
    *,
    stop_requested: Callable[[], str | None] | None = None,
    on_eval: Callable[[int, int, float], bool] | None = None,
) -> dict:
    """:func:`harness.train.train_run` with the worker's ``settings`` (whole;
    :class:`~harness.train.execution.ExecutionSettings`, default: its defaults), ``stop_requested`` and a
    tuning trial's ``on_eval``, unless an earlier attempt already wrote this run's finished result
    (its worker died before telling the queue): then that result, without training.

    Returns:
        ``{"status", "val_nll", "error"}``: what the queue records; the trained run's
        :class:`~harness.train.result_file.RunOutcome`, or read from the earlier attempt's result file
        (:func:`harness.train.runner.finished_outcome`).
    """
    from harness.train import runner  # lazy: torch and Lightning load only when training

    settings = settings if settings is not None else ExecutionSettings()
    status = runner.finished_status(config, results_dir)
    if status is None:
        outcome = runner.train_run(
            config, results_dir, settings, stop_requested=stop_requested, on_eval=on_eval
        )
        if hasattr(outcome, "as_dict"):  # a RunOutcome, trained here: it carries what the result file holds
            return outcome.as_dict()
        status = outcome  # a plain status (a stand-in train function): read the file below
    elif settings.progress:
        print(
            f"{config.run_id}: already {status} (its result file was written by an earlier attempt "
            "whose worker stopped before telling the queue); not trained again",
            file=sys.stderr,
            flush=True,
        )
    return runner.finished_outcome(config, results_dir) or {"status": status}


def record_failure(config: RunConfig, results_dir: Path, error_text: str) -> None:
    """:func:`harness.train.record_failure`: a failed result file for a crashed attempt."""
    from harness.train import runner  # lazy: torch and Lightning load only when training

    runner.record_failure(config, results_dir, error_text)


__all__ = [
    "MAX_RETRIES",
    "TrainFn",
    "FailureFn",
    "SpaceFn",
    "DiskFull",
    "ResultsReadOnly",
    "OtherResults",
    "ResultsLost",
    "FolderWatch",
    "fmt_duration",
    "work",
    "train_unless_finished",
    "record_failure",
]
