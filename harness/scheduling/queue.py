"""Run queue on Optuna storage (DESIGN section 1.1): many workers, each run trained once.

One Optuna study (``"harness"``) per storage; one *trial* per attempt at a run. A
trial carries, as user attributes, the run's id (its *cell tag*), grid name, run
config (the JSON of :meth:`harness.config.RunConfig.to_dict`), attempt counters and,
while it trains, the worker's lease (:mod:`harness.scheduling.lease`). A run's state is
read from all trials with its tag:

    done / diverged   some trial is COMPLETE (user attr ``status``)
    running           some trial is RUNNING
    queued            some trial is WAITING, or the last one failed and asked to be requeued
    failed            the last trial FAILed and asked for no retry

Where the storage lives and how an outage is ridden out: :mod:`harness.scheduling.storage`.
Trials are addressed by their number in the study; the storage's trial id, which its
write calls take, comes from the public ``get_trial_id_from_study_id_trial_number``.

Taking a run uses the storage's atomic WAITING -> RUNNING transition
(``set_trial_state_values(..., RUNNING)`` returns False to all but one process), the
same primitive ``Study.ask`` pops enqueued trials with; ``ask`` itself is not used
because on an empty queue it silently creates a new, untagged trial, and it cannot
restrict itself to one grid. Finishing a trial is the other atomic step: a trial
already finished by someone else raises ``UpdateFinishedTrialError``, so when two
workers reclaim one stale run, one wins.

Retries and re-enqueueing never modify a trial back to WAITING: the old trial is
marked FAIL (with ``requeue = true`` set just before) and a new WAITING trial with the
same tag is created by :meth:`RunQueue.requeue_orphans`, which any worker runs before
taking work, so a process dying between the two steps loses nothing. Should two
live trials of one run ever exist (two ``harness queue`` racing, two reclaimers
racing), the one with the lowest trial number is kept and the other is discarded when
popped (user attr ``ending = "duplicate"``).
"""

from __future__ import annotations

import json
import math
import os
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import optuna
from optuna.exceptions import UpdateFinishedTrialError
from optuna.storages import BaseStorage
from optuna.trial import FrozenTrial, TrialState, create_trial

from harness.config import RunConfig
from harness.fencing import LeaseLost
from harness.live import LiveProgress
from harness.scheduling.lease import LEASE_TIMEOUT_S, Lease, hostname, stale_reason
from harness.scheduling.storage import STORAGE_RETRY_S, describe_storage, open_storage, retry_storage, trial_lock
from harness.terms import ERROR_CHARS, FINISHED, STATUSES, config_diff

STUDY_NAME = "harness"
MAX_RECLAIMS = 5  # a run whose worker died this many times is not requeued again


# ----------------------------------------------------------------------------- records


@dataclass(frozen=True)
class Claim:
    """A run this worker has taken (its trial is RUNNING under this worker's lease).

    Attributes:
        trial_id: Optuna trial id of this attempt.
        run_id: the cell tag, ``grid:size:variant:s<seed>:<budget>``.
        grid: grid name.
        config: the run (see :meth:`harness.scheduling.grid.Grid.expand`).
        attempt: 1 for the first attempt, then 2, 3, ...
        failures: attempts of this run whose training raised, so far.
        reclaims: attempts of this run lost to a dead worker, so far.
        lease: the lease taken (its ``epoch`` is :attr:`epoch`).
        epoch: the fencing number of this attempt (:mod:`harness.fencing`): the trial's
            number, larger for every later attempt at the run.
    """

    trial_id: int
    run_id: str
    grid: str
    config: RunConfig
    attempt: int
    failures: int
    reclaims: int
    lease: Lease
    epoch: int

    @property
    def owner(self) -> str:
        """``host:pid`` of the worker holding the claim."""
        return self.lease.worker


@dataclass(frozen=True)
class RunState:
    """The queue's view of one run (all its trials folded together).

    Attributes:
        run_id, grid: as in the run config.
        state: one of :data:`harness.terms.STATUSES`.
        attempt: attempt number of the deciding trial.
        config: the run config.
        wall_s: training wall time in seconds of the finished attempt (``None`` otherwise).
        value: final validation NLL (nats/token) when the worker reported one.
        error: error text of the last failed attempt, if any.
        lease: the running attempt's lease (``None`` unless running; a RUNNING trial
            without a lease attribute gets one dated at the trial's start, host ``""``).
        pending: queued because a failed/released attempt asked to be requeued, and
            no new trial has been created yet (the next worker creates it).
    """

    run_id: str
    grid: str
    state: str
    attempt: int
    config: RunConfig
    wall_s: float | None = None
    value: float | None = None
    error: str | None = None
    lease: Lease | None = None
    pending: bool = False
    trials: tuple[FrozenTrial, ...] = field(default=(), repr=False)


@dataclass
class EnqueueResult:
    """What :meth:`RunQueue.enqueue` did, by run id."""

    added: list[str] = field(default_factory=list)
    present: list[str] = field(default_factory=list)  # queued, running, done or diverged already
    failed: list[str] = field(default_factory=list)  # failed and left alone (retry_failed=False)
    retried: list[str] = field(default_factory=list)  # failed and queued again (retry_failed=True)


def _is_dup(t: FrozenTrial) -> bool:
    return t.user_attrs.get("ending") == "duplicate"


def _lease_of(t: FrozenTrial) -> Lease:
    d = t.user_attrs.get("lease")
    if d:
        return Lease.from_dict(d)
    start = t.datetime_start.timestamp() if t.datetime_start else time.time()
    return Lease(host="", pid=0, since=start, beat=start)  # popped, lease not yet written


def _config_of(trial: FrozenTrial) -> RunConfig:
    return RunConfig.from_dict(json.loads(trial.user_attrs["config"]))


def fold(trials: list[FrozenTrial]) -> RunState:
    """Fold all trials of one run (same ``run_id`` tag) into its :class:`RunState`."""
    real = sorted((t for t in trials if not _is_dup(t)), key=lambda t: t.number) or sorted(
        trials, key=lambda t: t.number
    )
    last = real[-1]
    ua = last.user_attrs
    base = dict(run_id=ua["run_id"], grid=ua["grid"], config=_config_of(last), trials=tuple(trials))
    complete = [t for t in real if t.state == TrialState.COMPLETE]
    if complete:
        t = complete[0]
        return RunState(state=t.user_attrs.get("status", "done"), attempt=t.user_attrs.get("attempt", 1),
                        wall_s=t.user_attrs.get("wall_s"), value=t.user_attrs.get("val_nll"), **base)
    running = [t for t in real if t.state == TrialState.RUNNING]
    if running:
        t = running[0]
        return RunState(state="running", attempt=t.user_attrs.get("attempt", 1), lease=_lease_of(t), **base)
    waiting = [t for t in real if t.state == TrialState.WAITING]
    error = next((t.user_attrs["error"] for t in reversed(real) if t.user_attrs.get("error")), None)
    if waiting:
        return RunState(state="queued", attempt=waiting[0].user_attrs.get("attempt", 1), error=error, **base)
    if ua.get("requeue"):
        return RunState(state="queued", attempt=ua.get("attempt", 1), error=error, pending=True, **base)
    return RunState(state="failed", attempt=ua.get("attempt", 1), error=error,
                    wall_s=ua.get("wall_s"), **base)


# ----------------------------------------------------------------------------- the queue


class RunQueue:
    """The run queue on one Optuna storage (see the module docstring).

    Args:
        storage: an Optuna storage (:func:`open_storage`).
        study_name: the study holding the queue.
        lease_timeout_s: a running trial whose lease has not beaten for this long
            (seconds) is reclaimed by :meth:`reclaim_stale`.
        create: create the study if missing; with ``False`` a missing study is an empty queue.
    """

    def __init__(self, storage: BaseStorage, *, study_name: str = STUDY_NAME,
                 lease_timeout_s: float = LEASE_TIMEOUT_S, create: bool = True) -> None:
        if lease_timeout_s <= 0:
            raise ValueError(f"lease timeout {lease_timeout_s} s must be positive")
        self.storage = storage
        self.lease_timeout_s = float(lease_timeout_s)
        self.host = hostname()
        if create:
            optuna.create_study(storage=storage, study_name=study_name, direction="minimize",
                                load_if_exists=True)
        try:
            self.study_id: int | None = storage.get_study_id_from_name(study_name)
        except KeyError:
            self.study_id = None

    where = "(storage)"  # for messages; set by :meth:`open`

    @classmethod
    def open(cls, url: str | None, results: str | os.PathLike, *, retry_s: float = STORAGE_RETRY_S,
             log: Callable[[str], None] = print, **kwargs) -> "RunQueue":
        """:func:`open_storage` then the queue on it (``kwargs`` go to the constructor), retried
        while the storage is unreachable (:func:`retry_storage`).

        Raises:
            StorageUnavailable: unreachable for ``retry_s`` seconds.
        """
        where = describe_storage(url, results)
        queue = retry_storage(lambda: cls(open_storage(url, results, create=kwargs.get("create", True)),
                                          **kwargs), where=where, retry_s=retry_s, log=log)
        queue.where = where
        return queue

    # -- reading

    def _id_of(self, trial: FrozenTrial) -> int:
        """The storage's id of ``trial`` (what its write calls take), by the public API."""
        return self.storage.get_trial_id_from_study_id_trial_number(self.study_id, trial.number)

    def _trials(self) -> list[FrozenTrial]:
        if self.study_id is None:
            return []
        return [t for t in self.storage.get_all_trials(self.study_id, deepcopy=False)
                if "run_id" in t.user_attrs]

    def runs(self, grid: str | None = None) -> dict[str, RunState]:
        """Every run in the queue (optionally of one grid), by run id, in queue order."""
        by_run: dict[str, list[FrozenTrial]] = {}
        for t in sorted(self._trials(), key=_order):
            if grid is None or t.user_attrs.get("grid") == grid:
                by_run.setdefault(t.user_attrs["run_id"], []).append(t)
        return {rid: fold(ts) for rid, ts in by_run.items()}

    def counts(self, grid: str | None = None) -> dict[str, Counter]:
        """grid -> Counter of run states (every state of :data:`harness.terms.STATUSES` present)."""
        out: dict[str, Counter] = {}
        for r in self.runs(grid).values():
            out.setdefault(r.grid, Counter({s: 0 for s in STATUSES}))[r.state] += 1
        return out

    def progress(self, grid: str) -> tuple[int, int]:
        """``(finished, total)`` runs of ``grid``; finished = done + diverged + failed."""
        c = self.counts(grid).get(grid, Counter())
        return c["done"] + c["diverged"] + c["failed"], sum(c.values())

    # -- adding

    def enqueue(self, configs: list[RunConfig], *, retry_failed: bool = False) -> EnqueueResult:
        """Add one trial per run config not yet in the queue (idempotent).

        A run already queued, running, done or diverged is left alone; a failed run is
        queued again only with ``retry_failed``.

        Raises:
            ValueError: two configs share a run id, or a run id already in the queue was
                queued with a different config (the message names the differing keys).
        """
        ids = [c.run_id for c in configs]
        if len(set(ids)) != len(ids):
            dup = next(i for i in ids if ids.count(i) > 1)
            raise ValueError(f"run id {dup!r} appears twice in the configs to enqueue")
        existing = self.runs()
        conflicts = []
        for c in configs:
            r = existing.get(c.run_id)
            if r is not None and r.state != "failed":
                diff = config_diff(r.config.to_dict(), c.to_dict())
                if diff:
                    conflicts.append(f"{c.run_id} (differs in {', '.join(diff)})")
        if conflicts:
            more = f" and {len(conflicts) - 3} more" if len(conflicts) > 3 else ""
            raise ValueError(
                "these runs are already queued with a different config: "
                f"{'; '.join(conflicts[:3])}{more}. A run id names one config: rename the grid "
                "(its `name`), or undo the change"
            )
        result = EnqueueResult()
        queued_at = time.time()
        for index, c in enumerate(configs):
            r = existing.get(c.run_id)
            if r is None:
                self._new_trial(c, attempt=1, failures=0, reclaims=0, order=[queued_at, index])
                result.added.append(c.run_id)
            elif r.state != "failed":
                result.present.append(c.run_id)
            elif retry_failed:
                self._new_trial(c, attempt=r.attempt + 1, failures=0, reclaims=0, order=[queued_at, index])
                result.retried.append(c.run_id)
            else:
                result.failed.append(c.run_id)
        return result

    def _new_trial(self, config: RunConfig, *, attempt: int, failures: int, reclaims: int, order: list) -> int:
        assert self.study_id is not None
        attrs = {
            "run_id": config.run_id, "grid": config.grid,
            "config": json.dumps(config.to_dict(), sort_keys=True),
            "attempt": attempt, "failures": failures, "reclaims": reclaims, "order": order,
        }
        template = create_trial(state=TrialState.WAITING, user_attrs=attrs)
        return self.storage.create_new_trial(self.study_id, template_trial=template)

    def requeue_orphans(self, run_id: str | None = None) -> list[str]:
        """Create the next trial of every run whose last attempt ended asking to be requeued.

        Returns the run ids requeued. Idempotent up to races (a duplicate is discarded
        when popped).
        """
        out = []
        for rid, r in self.runs().items():
            if r.pending and (run_id is None or rid == run_id):
                last = max((t for t in r.trials if not _is_dup(t)), key=lambda t: t.number)
                ua = last.user_attrs
                self._new_trial(r.config, attempt=ua.get("attempt", 1) + 1, failures=ua.get("failures", 0),
                                reclaims=ua.get("reclaims", 0), order=ua.get("order", [time.time(), 0]))
                out.append(rid)
        return out

    # -- taking and finishing

    def claim(self, grid: str | None = None) -> Claim | None:
        """Take the next queued run (optionally of one grid) under a fresh lease, or ``None``."""
        if self.study_id is None:
            return None
        waiting = [t for t in self._trials() if t.state == TrialState.WAITING
                   and (grid is None or t.user_attrs.get("grid") == grid)]
        for t in sorted(waiting, key=_order):
            try:
                trial_id = self._id_of(t)
                if not self.storage.set_trial_state_values(trial_id, TrialState.RUNNING):
                    continue  # another worker popped it first
            except UpdateFinishedTrialError:
                continue
            lease = Lease.here(epoch=t.number)
            self.storage.set_trial_user_attr(trial_id, "lease", lease.to_dict())
            rid = t.user_attrs["run_id"]
            siblings = [s for s in self._trials() if s.user_attrs["run_id"] == rid
                        and s.number != t.number and not _is_dup(s)]
            if any(s.state == TrialState.COMPLETE
                   or (s.state in (TrialState.WAITING, TrialState.RUNNING) and s.number < t.number)
                   for s in siblings):
                self.storage.set_trial_user_attr(trial_id, "ending", "duplicate")
                self._finish(trial_id, TrialState.FAIL)
                continue
            ua = t.user_attrs
            return Claim(trial_id=trial_id, run_id=rid, grid=ua["grid"], config=_config_of(t),
                         attempt=ua.get("attempt", 1), failures=ua.get("failures", 0),
                         reclaims=ua.get("reclaims", 0), lease=lease, epoch=t.number)
        return None

    # -- fencing (harness.fencing)

    def lease_lost(self, claim: Claim) -> str | None:
        """Why ``claim`` no longer holds its run (who holds it now), or ``None`` while it does.

        Held means: its trial is still RUNNING under this claim's lease (same host, pid and
        epoch). Reads the storage.
        """
        trial = self.storage.get_trial(claim.trial_id)
        if trial.state == TrialState.RUNNING:
            lease = _lease_of(trial)
            if (lease.host, lease.pid) == (claim.lease.host, claim.lease.pid) and lease.epoch in (None, claim.epoch):
                return None
            return f"lease lost to {lease.worker} (epoch {claim.epoch})"
        later = sorted((t for t in self._trials() if t.user_attrs.get("run_id") == claim.run_id
                        and t.number > claim.epoch and not _is_dup(t)), key=lambda t: t.number)
        taken = [t for t in later if t.user_attrs.get("lease")]
        ua = trial.user_attrs
        ended = f"epoch {claim.epoch} was {trial.state.name.lower()}"
        if ua.get("ending") == "reclaimed":
            ended = f"epoch {claim.epoch} was reclaimed{' by ' + ua['reclaimed_by'] if ua.get('reclaimed_by') else ''}"
            ended += f" ({ua['error']})" if ua.get("error") else ""
        if taken:
            return f"lease lost to {_lease_of(taken[-1]).worker} (epoch {taken[-1].number}; {ended})"
        queued = f"; the run is queued again as epoch {later[-1].number}" if later else ""
        return f"lease lost: {ended}{queued}"

    @contextmanager
    def holding(self, claim: Claim) -> Iterator[None]:
        """A block during which ``claim`` holds its run and no one can take it over
        (:func:`~harness.scheduling.storage.trial_lock`): the place to rename a result file.

        Raises:
            LeaseLost: on entry, when the lease is already lost (naming who holds it).
        """
        with trial_lock(self.storage, claim.trial_id):
            why = self.lease_lost(claim)
            if why is not None:
                raise LeaseLost(claim.run_id, why)
            yield

    def _set_attrs(self, trial_id: int, attrs: Mapping[str, Any]) -> bool:
        try:
            for k, v in attrs.items():
                self.storage.set_trial_user_attr(trial_id, k, v)
        except UpdateFinishedTrialError:
            return False
        return True

    def _finish(self, trial_id: int, state: TrialState, value: float | None = None) -> bool:
        try:
            self.storage.set_trial_state_values(trial_id, state, None if value is None else [value])
        except UpdateFinishedTrialError:
            return False  # someone else finished it first
        return True

    def beat(self, claim: Claim, progress: LiveProgress | None = None) -> bool:
        """Refresh the claim's lease, with the run's live ``progress`` if given (one write either
        way); ``False`` if the run was meanwhile taken from this worker."""
        return self._set_attrs(claim.trial_id, {"lease": claim.lease.refreshed(progress=progress).to_dict()})

    def complete(self, claim: Claim, status: str, *, value: float | None, wall_s: float) -> bool:
        """Mark a trained run finished (``status`` 'done' or 'diverged').

        The trial's objective value is ``value`` (final validation NLL, nats/token) when
        finite, else +inf (Optuna needs a number; the results store has the real record).
        Returns ``False`` if the lease was lost (another worker reclaimed the run).
        """
        if status not in FINISHED:
            raise ValueError(f"status {status!r}; allowed: 'done', 'diverged'")
        ok_value = value is not None and math.isfinite(value)
        attrs = {"status": status, "wall_s": wall_s, "val_nll": float(value) if ok_value else None}
        return self._set_attrs(claim.trial_id, attrs) and self._finish(
            claim.trial_id, TrialState.COMPLETE, float(value) if ok_value else math.inf)

    def fail(self, claim: Claim, error: str, *, wall_s: float, max_retries: int) -> bool:
        """Mark an attempt whose training raised; requeue it while its ``max_retries``
        retries (:data:`harness.scheduling.worker.MAX_RETRIES` by default) are not spent.

        Returns whether a retry was queued.
        """
        failures = claim.failures + 1
        requeue = failures <= max_retries
        attrs = {"error": error[-ERROR_CHARS:], "ending": "failed", "failures": failures,
                 "wall_s": wall_s, "requeue": requeue}
        if not (self._set_attrs(claim.trial_id, attrs) and self._finish(claim.trial_id, TrialState.FAIL)):
            return False
        if requeue:
            self.requeue_orphans(claim.run_id)
        return requeue

    def release(self, claim: Claim, reason: str) -> bool:
        """Give a run back unfinished (worker interrupted): it is requeued, no retry counted."""
        attrs = {"error": reason, "ending": "released", "requeue": True}
        if not (self._set_attrs(claim.trial_id, attrs) and self._finish(claim.trial_id, TrialState.FAIL)):
            return False
        self.requeue_orphans(claim.run_id)
        return True

    def reclaim_stale(self, now: float | None = None) -> list[tuple[str, str]]:
        """Fail and requeue every running attempt whose lease is stale (see :mod:`harness.scheduling.lease`).

        Returns ``(run_id, reason)`` for each run reclaimed by this call. A run reclaimed
        :data:`MAX_RECLAIMS` times stays failed.
        """
        now = time.time() if now is None else now
        out = []
        for t in self._trials():
            if t.state != TrialState.RUNNING or _is_dup(t):
                continue
            why = stale_reason(_lease_of(t), now=now, timeout_s=self.lease_timeout_s, host=self.host)
            if why is None:
                continue
            reclaims = t.user_attrs.get("reclaims", 0) + 1
            attrs = {"error": f"lease expired: {why}", "ending": "reclaimed", "reclaims": reclaims,
                     "requeue": reclaims <= MAX_RECLAIMS, "reclaimed_by": f"{self.host}:{os.getpid()}"}
            trial_id = self._id_of(t)
            if self._set_attrs(trial_id, attrs) and self._finish(trial_id, TrialState.FAIL):
                out.append((t.user_attrs["run_id"], why))
        self.requeue_orphans()
        return out

    def live_workers(self, now: float | None = None) -> list[str]:
        """``host:pid`` of every worker holding a fresh lease (sorted)."""
        now = time.time() if now is None else now
        out = set()
        for r in self.runs().values():
            if r.lease is not None and stale_reason(r.lease, now=now, timeout_s=self.lease_timeout_s,
                                                    host=self.host) is None:
                out.add(r.lease.worker)
        return sorted(out)


def _order(t: FrozenTrial) -> tuple:
    """Queue order: the run's original enqueue position, then trial number (retries keep their slot)."""
    o = t.user_attrs.get("order") or [0.0, 0]
    return (float(o[0]), int(o[1]), t.number)


__all__ = ["STUDY_NAME", "MAX_RECLAIMS", "Claim", "RunState", "EnqueueResult", "fold", "RunQueue"]
