"""The worker loop of ``harness work``: take a queued run, train it, report it; repeat.

:func:`work` drives one :class:`~harness.scheduling.queue.run_queue.RunQueue`: it reclaims stale
leases, claims the next run under a lease kept fresh by a
:class:`~harness.scheduling.queue.lease.Heartbeat`, calls the train function, and tells the
queue the outcome (done / diverged, or failed with a retry while retries remain; what spends a retry
and what releases a run: :mod:`harness.scheduling.workers.retry`). The run
is trained inside its fence (:class:`~harness.scheduling.workers.fence.ClaimFence`, made current by
:func:`harness.train.fencing.fenced`): when another worker took the run over meanwhile, training
stops with :class:`~harness.train.fencing.LeaseLost` before its next checkpoint or its result, the
worker says "lease lost to HOST:PID ...", and takes the next run. Every
queue operation is retried while the storage is unreachable
(:func:`~harness.scheduling.queue.storage.retry_storage`). A ``KeyboardInterrupt`` (SIGTERM in
``harness work``) gives the run being trained back to the queue; so does a
:class:`~harness.train.stop.StopRequest` (``harness launch``'s tasks: a signal stops the
run at the next batch boundary, with a checkpoint), after which no other run is taken.

The default train function, :func:`train_unless_finished`, is
:func:`harness.train.train_run` unless the run's result file already says it finished
(its worker died before telling the queue); :func:`record_failure` writes a failed
attempt's result. Both import :mod:`harness.train` only when called, so the loop runs
with any other train function without loading Lightning.

A worker's options are :class:`~harness.scheduling.workers.options.WorkOptions`, and its checks before
the first claim :mod:`harness.scheduling.workers.start`.
"""

from __future__ import annotations

import sys
import time
import traceback
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.common import live
from harness.common.faults import run_poisoned_cuda
from harness.common.terms import FINISHED
from harness.design.config import RunConfig
from harness.scheduling.queue.lease import BEAT_S, Heartbeat
from harness.scheduling.queue.storage import STORAGE_RETRY_S, StorageUnavailable, retry_storage
from harness.scheduling.tuning import pruning_hook
from harness.scheduling.workers.claiming import OrphanClock, claim_next
from harness.scheduling.workers.fence import ClaimFence, WatchedFence
from harness.scheduling.workers.retry import (
    MAX_RETRIES,
    admit,
    given_back_if_interrupted,
    located,
    poisoned_stop,
    released_for_its_pair,
    results_lost,
    retry_left,
    stop_for_environment,
)
from harness.train.execution import ExecutionSettings
from harness.train.fencing import FolderWatch, LeaseLost, fenced

if TYPE_CHECKING:
    from harness.corpus.locate import CorpusLocator
    from harness.scheduling.queue.hardware_pairs import PairGate
    from harness.scheduling.queue.run_queue import RunQueue
    from harness.train.stop import StopRequest

TrainFn = Callable[[RunConfig, Path], Any]
FailureFn = Callable[[RunConfig, Path, str], None]
SpaceFn = Callable[[RunConfig], int]


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


@dataclass(frozen=True)
class Training:
    """How a worker trains each run it claims: the train function and what it is given, typed.

    Attributes:
        train_fn: trains one run (see :func:`work`).
        results_dir: the results folder (result files, checkpoints).
        settings: the worker's :class:`~harness.train.execution.ExecutionSettings`, passed whole;
            ``None`` for a stand-in train function, called ``train_fn(config, results_dir)``.
        stop: the worker's stop request, passed as ``stop_requested`` (with ``settings``).
        on_failure: records a crashed attempt's failed result (``None``: the queue's record only).
        max_retries: a crashed run is retried this many times before it stays failed.
    """

    train_fn: TrainFn
    results_dir: Path
    settings: ExecutionSettings | None = None
    stop: StopRequest | None = None
    on_failure: FailureFn | None = None
    max_retries: int = MAX_RETRIES

    def __call__(self, config: RunConfig, on_eval: Callable[[int, int, float], bool] | None = None) -> Any:
        """Train the run ``config`` (its identity; its fence is the current one, :func:`fenced`).

        ``on_eval``: a tuning trial's pruning hook (:func:`harness.scheduling.tuning.pruning_hook`),
        ``None`` for a grid's run. Returns what the train function returns (:func:`_outcome`).
        """
        if self.settings is not None:
            return self.train_fn(
                config, self.results_dir, self.settings, stop_requested=self.stop, on_eval=on_eval
            )
        if on_eval is not None:
            return self.train_fn(config, self.results_dir, on_eval=on_eval)
        return self.train_fn(config, self.results_dir)


@dataclass(frozen=True)
class _Loop:
    """What every step of :func:`work` shares: the queue (each operation retried through ``call``), how
    runs train, the lease's beat, the results folder's watch and the progress lines' sink."""

    queue: RunQueue
    call: Callable[..., Any]
    training: Training
    beat_s: float
    watch: FolderWatch | None
    log: Callable[[str], None]

    @property
    def results_dir(self) -> Path:
        return Path(self.training.results_dir)


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
    corpus: CorpusLocator | None = None,
    pairs: PairGate | None = None,
) -> Counter:
    """The worker loop: reclaim stale leases, take a run, train it, record the outcome; repeat.

    Args:
        queue: the run queue.
        train_fn: ``train_fn(config, results_dir)`` trains one run (resuming from its checkpoint if one
            exists) and returns ``'done'``, ``'diverged'`` or ``'pruned'`` (or see :func:`_outcome`); it
            raises on a crash. A tuning trial's run also gets ``on_eval=`` its study's pruning hook
            (:func:`harness.scheduling.tuning.pruning_hook`). The call is :class:`Training`'s.
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
            results_dir, settings, stop_requested=stop, on_eval=...)``; ``None``: a stand-in's ``train_fn(c, r)``.
        check_run: ``check_run(config)`` refuses (``ValueError``) a run the settings cannot train: released.
        corpus: resolves each run's corpus on this machine (:class:`~harness.corpus.locate.CorpusLocator`:
            the worker's ``--corpus``, the queue's path, the config's); ``None``: the config's.
        pairs: the worker's hardware gate (:class:`~harness.scheduling.queue.hardware_pairs.PairGate`: a seed
            bound to another hardware class and numerics is left for a worker of that key; a seed is bound
            when a run of it is about to train, after the checks above); ``None``: none.

    Returns:
        Counter of the outcomes of the runs taken: 'done', 'diverged', 'failed', 'lost' (lease lost).

    Raises:
        StorageUnavailable: the storage stayed unreachable for ``retry_s`` seconds (a run being finished
            stays RUNNING in the queue; the next worker reclaims it).
        ResultsLost / OtherResults / DiskFull / RankDied / CudaContextLost / CorpusMissing: the environment's fault
            (:mod:`harness.scheduling.workers.retry`, :mod:`harness.common.faults`): the results folder was
            lost or is another's, too little free space or a write hit ENOSPC/EDQUOT, a child rank died,
            a CUDA error poisoned the context, the corpus is not here: the run is released (queued again, no retry spent) and the
            worker stops with one line naming the cause.

    A ``KeyboardInterrupt`` (also SIGTERM, a stopped run) after a claim releases it, then propagates.
    """
    _check_intervals(max_runs, poll_s, beat_s, retry_s)

    def call(method, *args, **kwargs):
        return retry_storage(lambda: method(*args, **kwargs), where=queue.where, retry_s=retry_s, log=log)

    training = Training(train_fn, Path(results_dir), settings, stop, on_failure, max_retries)
    watch = FolderWatch(Path(results_dir)) if Path(results_dir).is_dir() else None
    loop = _Loop(queue, call, training, beat_s, watch, log)
    outcomes, orphans = Counter(), OrphanClock()
    while max_runs is None or sum(outcomes.values()) < max_runs:
        claim = claim_next(queue, call, grid, wait, poll_s, stop, orphans, log, pairs)
        if claim is None:
            break
        with given_back_if_interrupted(queue, call, claim, log):
            need = admit(queue, call, claim, loop.results_dir, watch, space_needed, check_run)
            if corpus is not None:  # the corpus's path on this machine, or released (no retry spent)
                claim = located(corpus, queue, call, claim)
            if released_for_its_pair(queue, call, claim, pairs, log):  # the seed binds as its run trains
                continue
            outcomes[_train_one(loop, claim, need)] += 1
    return outcomes


def _check_intervals(max_runs: int | None, poll_s: float, beat_s: float, retry_s: float) -> None:
    """Raise ``ValueError`` (one line naming the value) for a run limit below 1 or a non-positive interval."""
    if max_runs is not None and max_runs < 1:
        raise ValueError(f"--max-runs {max_runs} must be at least 1")
    if poll_s <= 0 or beat_s <= 0:
        raise ValueError(f"poll interval ({poll_s} s) and beat interval ({beat_s} s) must be positive")
    if retry_s <= 0:
        raise ValueError(f"storage retry time {retry_s} s must be positive")


def _train_one(loop: _Loop, claim, need: int | None) -> str:
    """Train one claimed run inside its fence; every queue operation goes through ``loop.call`` (retried).
    ``need``: the bytes its checkpoints need (``None``: not known), named if the disk fills.

    Returns the outcome: ``done``, ``diverged``, ``failed`` or ``lost`` (the lease was lost to
    another worker: the run is stopped, nothing more is written, the worker goes on).
    """
    queue, call, watch, log, results_dir = loop.queue, loop.call, loop.watch, loop.log, loop.results_dir
    done, total = call(queue.tally, claim.grid)
    again = f", attempt {claim.attempt}" if claim.attempt > 1 else ""
    log(f"[{done}/{total}] start {claim.run_id} (on {claim.lease.worker}, epoch {claim.epoch}{again})")
    t0 = time.monotonic()
    live.publish(None)  # the heartbeat sends this run's progress only, once its training publishes some
    heartbeat, fence = _fence(loop, claim)
    try:
        status, value, reason = _train_fenced(loop, claim, heartbeat, fence)
    except LeaseLost as exc:
        if watch is not None and watch.gone is not None:
            raise results_lost(queue, claim, watch) from None
        return _lost(loop, claim, exc)
    except Exception as exc:
        # the environment's fault: the run is released (no retry spent) and the worker stops
        stop_for_environment(queue, call, claim, exc, results_dir, watch, need)
        outcome = _failed(loop, claim, exc, fence, t0)  # the run's own error: a retry spent
        poisoned = run_poisoned_cuda(exc)
        if poisoned is not None:  # the run's own failure, but no later run can use this context
            raise poisoned_stop(claim.run_id, poisoned) from None
        return outcome
    try:
        return _finished(loop, claim, status, value, reason, time.monotonic() - t0)
    except StorageUnavailable:
        if watch is not None and watch.look() is not None:  # the queue went with the results folder
            raise results_lost(queue, claim, watch) from None
        raise


def _fence(loop: _Loop, claim) -> tuple[Heartbeat, ClaimFence]:
    """The heartbeat keeping ``claim``'s lease fresh (sending the run's live progress) and its fence."""
    queue, call, watch = loop.queue, loop.call, loop.watch
    if watch is None:
        heartbeat = Heartbeat(lambda: queue.beat(claim, live.current(claim.run_id)), loop.beat_s)
        return heartbeat, ClaimFence(queue, claim, heartbeat, call)
    # every beat also looks at the results folder: a lost one stops the run within a beat
    heartbeat = Heartbeat(
        lambda: watch.look() is not None or queue.beat(claim, live.current(claim.run_id)), loop.beat_s
    )
    return heartbeat, WatchedFence(watch, queue, claim, heartbeat, call)


def _train_fenced(loop: _Loop, claim, heartbeat, fence) -> tuple[str, Any, Any]:
    """``(status, val_nll, error)`` of the run trained (:class:`Training`; a tuning trial's with its pruning
    hook) under the heartbeat and fence; raises :class:`_ReportedFailure` when it returned 'failed' and
    ``ValueError`` for a status that is not a finished one."""
    on_eval = None
    if claim.tuning:
        on_eval = loop.call(pruning_hook, loop.queue.storage, claim.grid, claim.trial_id)
    with heartbeat, fenced(fence):
        result = loop.training(claim.config, on_eval)
    status, value, reason = _outcome(result)
    if status == "failed":  # the train function recorded the failure itself
        raise _ReportedFailure(f"train function returned 'failed' for {claim.run_id}")
    if status not in FINISHED:
        raise ValueError(
            f"train function returned {status!r}; expected 'done', 'diverged', 'pruned' or 'failed'"
        )
    return status, value, reason


def _failed(loop: _Loop, claim, exc: Exception, fence, t0: float) -> str:
    """Record a crashed attempt (its failed result file, written under the fence, then the queue's retry
    or final failure) and say so; call it while ``exc`` is being handled (its traceback is recorded).
    Returns ``failed``, or ``lost`` when the lease was lost before the failed result was written."""
    queue, call, training = loop.queue, loop.call, loop.training
    wall = time.monotonic() - t0
    error = traceback.format_exc()
    if training.on_failure is not None and not isinstance(exc, _ReportedFailure):
        try:
            with fenced(fence):  # the failed result file is written only while the lease is held
                training.on_failure(claim.config, training.results_dir, error)
        except LeaseLost as lost:
            return _lost(loop, claim, lost)
        except Exception as exc2:  # keep going: the queue still records the failure
            loop.log(f"warning: recording the failure of {claim.run_id} failed: {exc2!r}")
    retried = call(queue.fail, claim, error, wall_s=wall, requeue=retry_left(claim, training.max_retries))
    done, total = call(queue.tally, claim.grid)
    then = "retry queued" if retried else "no retries left"
    loop.log(
        f"[{done}/{total}] failed {claim.run_id} ({fmt_duration(wall)}): {type(exc).__name__}: {exc}; {then}"
    )
    return "failed"


def _finished(loop: _Loop, claim, status: str, value, reason, wall: float) -> str:
    """Tell the queue a finished run's outcome (warning when its lease was lost meanwhile); ``status``."""
    queue, call = loop.queue, loop.call
    if not call(queue.complete, claim, status, value=value, wall_s=wall, error=reason):
        loop.log(
            f"warning: {claim.run_id} finished, but its lease was lost meanwhile (another worker "
            f"reclaimed it); the result file is written, the queue keeps the other attempt"
        )
    done, total = call(queue.tally, claim.grid)
    nll = f", val_nll {value:.4f}" if isinstance(value, (int, float)) and value == value else ""
    loop.log(f"[{done}/{total}] {status} {claim.run_id} ({fmt_duration(wall)}{nll})")
    return status


def _lost(loop: _Loop, claim, exc: LeaseLost) -> str:
    """Say that the run's lease was lost (naming who holds it now) and give the run up."""
    why = loop.call(loop.queue.lease_lost, claim) or exc.reason
    loop.log(f"{why}: {claim.owner} stopped {claim.run_id} and wrote nothing more for it; the worker goes on")
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
        (:func:`harness.train.result_file.finished_outcome`).
    """
    from harness.train import result_file, runner  # lazy: torch and Lightning load only when training

    settings = settings if settings is not None else ExecutionSettings()
    status = result_file.finished_status(config, results_dir)
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
    return result_file.finished_outcome(config, results_dir) or {"status": status}


def record_failure(config: RunConfig, results_dir: Path, error_text: str, settings=None) -> None:
    """:func:`harness.train.result_file.record_failure`: a failed result file for a crashed attempt (with the worker's
    :class:`~harness.train.execution.ExecutionSettings`: where it ran)."""
    from harness.train import result_file  # lazy: torch and Lightning load only when training

    result_file.record_failure(config, results_dir, error_text, settings)


def summary(outcomes: Mapping[str, int]) -> str:
    """``worker trained N runs: a done, b diverged, c failed[, d pruned][, e lost to another
    worker]`` of an outcome count."""
    pruned = f", {outcomes['pruned']} pruned" if outcomes.get("pruned") else ""
    lost = f", {outcomes['lost']} lost to another worker" if outcomes.get("lost") else ""
    return (
        f"worker trained {sum(outcomes.values())} runs: {outcomes.get('done', 0)} done, "
        f"{outcomes.get('diverged', 0)} diverged, {outcomes.get('failed', 0)} failed{pruned}{lost}"
    )


__all__ = [
    "TrainFn",
    "FailureFn",
    "SpaceFn",
    "Training",
    "fmt_duration",
    "work",
    "train_unless_finished",
    "record_failure",
    "summary",
]
