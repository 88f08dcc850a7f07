"""Run queue on Optuna storage (DESIGN sections 1.1 and 9): many workers, each run trained once.

:class:`RunQueue` adds runs (:mod:`harness.scheduling.queueadd`, its base :class:`~harness.scheduling.queueadd.RunAdder`),
hands each to one worker under a lease, and records how each attempt ends. The layout, one Optuna study per grid and one trial per attempt at a run, and reading it:
:mod:`harness.scheduling.queueread` (:class:`~harness.scheduling.queueread.QueueReader`, which
:class:`RunQueue` extends); what a trial says, how a run ends and how its state is read from its
trials: :mod:`harness.scheduling.trials`. Where the storage lives and how an outage is ridden out:
:mod:`harness.scheduling.storage`.

Taking a run uses the storage's atomic WAITING -> RUNNING transition (``set_trial_state_values(...,
RUNNING)`` returns False to all but one process), the primitive ``Study.ask`` pops enqueued trials
with; ``ask`` itself would create an untagged trial on an empty queue and cannot keep to one grid.
A tuning trial's parameters are drawn by the study's sampler when a worker takes it (:func:`harness.scheduling.tuning.draw_params`), so the
sampler conditions on every trial finished by then. Finishing a trial is the other atomic
step: a trial already finished by someone else raises ``UpdateFinishedTrialError``, so
when two workers reclaim one stale run, one wins.

Retries and re-enqueueing never modify a trial back to WAITING: the old trial is
marked FAIL (with ``requeue = true`` set just before) and a new WAITING trial with the
same tag is created by the one process whose FAIL transition went through (the worker
giving its run back, or the one reclaimer of a stale run that won: one new attempt per
lost run, however many workers saw it stale). A process dying between the two steps
loses nothing: :meth:`RunQueue.requeue_orphans`, which a worker runs when it finds
nothing to claim, creates the missing trial. Adding a grid's runs holds that grid's lock
(:func:`~harness.scheduling.storage.grid_lock`), so two ``harness queue`` of one grid add
each run once. Should two live trials of one run ever exist (an orphan repaired while its
process still lived), the one with the lowest trial number is kept and the other is
discarded when popped (user attr ``ending = "duplicate"``).

What a worker reads per run grows with neither the history nor the queue (issue 32): the live
trials (:meth:`~harness.scheduling.queueread.QueueReader.live`), the trials of the run it took,
and its grid's run count (:meth:`RunQueue.tally`).
"""

from __future__ import annotations

import math
import os
import random
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from optuna.exceptions import UpdateFinishedTrialError
from optuna.storages import BaseStorage
from optuna.trial import TrialState

from harness.common.live import LiveProgress
from harness.common.terms import ERROR_CHARS, FINISHED
from harness.scheduling.lease import LEASE_TIMEOUT_S, Lease, hostname, stale_reason
from harness.scheduling.queueadd import RunAdder
from harness.scheduling.queueops import (
    LiveTrial,
    ensure_indexes,
    grid_run_ids,
    set_user_attrs,
    take_waiting,
)
from harness.scheduling.queueread import LEGACY_STUDY
from harness.scheduling.storage import (
    STORAGE_RETRY_S,
    describe_storage,
    open_storage,
    retry_storage,
    trial_lock,
)
from harness.scheduling.trials import (
    CARRIED_ATTRS,
    Claim,
    EnqueueResult,
    RunState,
    config_of,
    ended_as,
    fold,
    is_duplicate,
    lease_of,
)
from harness.scheduling.tuning import draw_params
from harness.train.fencing import LeaseLost

MAX_RECLAIMS = 5  # a run whose worker died this many times is not requeued again
FRESH_S = 1.0  # a live read younger than this is not read again before a claim answers "nothing queued"


class RunQueue(RunAdder):
    """The run queue on one Optuna storage: every study holding runs (see the module docstring);
    adding runs: :class:`~harness.scheduling.queueadd.RunAdder`; reading them:
    :class:`~harness.scheduling.queueread.QueueReader`.

    Args:
        storage: an Optuna storage (:func:`open_storage`).
        lease_timeout_s: a running trial whose lease has not beaten for this long
            (seconds) is reclaimed by :meth:`reclaim_stale`.
        create: kept for :meth:`open` (a missing journal file is created); studies are
            created when a grid's first run is enqueued.
    """

    def __init__(
        self, storage: BaseStorage, *, lease_timeout_s: float = LEASE_TIMEOUT_S, create: bool = True
    ) -> None:
        if lease_timeout_s <= 0:
            raise ValueError(f"lease timeout {lease_timeout_s} s must be positive")
        super().__init__(storage)  # self._snapshot: the last live read, until a claim uses it
        self.lease_timeout_s = float(lease_timeout_s)
        self.host = hostname()
        ensure_indexes(storage)
        self._snapshot_at = 0.0  # when it was read (time.monotonic)
        self._claimed_from: list[LiveTrial] | None = None  # the read the last claim took its run from
        self._grid_runs: dict[str, set[str]] = {}  # grid -> every run id seen in it (for tally)
        self._rng = random.Random()  # where a worker that lost a race for a trial tries next

    where = "(storage)"  # for messages; set by :meth:`open`

    @classmethod
    def open(
        cls,
        url: str | None,
        results: str | os.PathLike,
        *,
        retry_s: float = STORAGE_RETRY_S,
        log: Callable[[str], None] = print,
        legacy: bool = False,
        **kwargs,
    ) -> RunQueue:
        """:func:`open_storage` then the queue on it (``kwargs`` go to the constructor), retried
        while the storage is unreachable (:func:`retry_storage`). A queue of the previous layout is
        refused unless ``legacy`` (``harness migrate``, which converts it).

        Raises:
            StorageUnavailable: unreachable for ``retry_s`` seconds.
            ValueError: the queue has the previous layout (one line naming ``harness migrate``).
        """
        where = describe_storage(url, results)
        queue = retry_storage(
            lambda: cls(open_storage(url, results, create=kwargs.get("create", True)), **kwargs),
            where=where,
            retry_s=retry_s,
            log=log,
        )
        queue.where = where
        if not legacy and LEGACY_STUDY in queue.studies():
            raise ValueError(
                f"queue {where} has the previous layout (one Optuna study {LEGACY_STUDY!r} for every grid); "
                "run `harness migrate` to convert it into one study per grid"
            )
        return queue

    # -- taking and finishing

    def _live(self, reuse: bool = True) -> list[LiveTrial]:
        """The live trials: the last read not yet used by a claim when ``reuse``, else read now."""
        if not reuse or self._snapshot is None:
            self._snapshot, self._snapshot_at = self.live(), time.monotonic()
        return self._snapshot

    def claim(self, grid: str | None = None) -> Claim | None:
        """Take the next queued run (optionally of one grid) under a fresh lease, or ``None``.

        Reads the live trials (or uses the last read, left by :meth:`tally` or
        :meth:`reclaim_stale`, read again before answering ``None`` unless it is under
        :data:`FRESH_S` old: an idle worker's poll is one read), and the claimed run's
        trials; never the finished history. Tries the waiting trials in queue order; after a
        race lost to another worker it tries a random one among the next 2, 4, 8, ... so that
        many workers starting at once spread over the list instead of queueing on one row.

        A tuning trial whose parameters are not drawn yet gets them now, from its study's
        sampler (:func:`harness.scheduling.tuning.draw_params`); its config then holds them.
        """
        reused = self._snapshot is not None and time.monotonic() - self._snapshot_at > FRESH_S
        live = self._live()
        self._snapshot = None  # the claim changes what is live: the next one reads again
        claim = self._claim_from(live, grid)
        if claim is None and reused:
            claim = self._claim_from(self._live(reuse=False), grid)
            self._snapshot = None
        return claim

    def _claim_from(self, live: list[LiveTrial], grid: str | None) -> Claim | None:
        left = sorted(
            (t for t in live if t.state == TrialState.WAITING and (grid is None or t.grid == grid)),
            key=lambda t: t.order,
        )
        lost = 0
        while left:
            t = left.pop(self._rng.randrange(min(len(left), 2**lost)) if lost else 0)
            lease = Lease.here(epoch=t.number)
            if not take_waiting(self.storage, t.trial_id, {"lease": lease.to_dict()}):
                lost += 1
                continue  # another worker popped it first
            trial_id = t.trial_id
            trials = self.run_trials(t.run_id, t.study_id)
            mine = next(s for s in trials if s.number == t.number)
            if any(
                ended_as(s) or (s.state in (TrialState.WAITING, TrialState.RUNNING) and s.number < t.number)
                for s in trials
                if s.number != t.number and not is_duplicate(s)
            ):
                self.storage.set_trial_user_attr(trial_id, "ending", "duplicate")
                self._finish(trial_id, TrialState.FAIL)
                continue
            ua = mine.user_attrs
            config = config_of(mine)
            if ua.get("tune_pending"):
                config = draw_params(self.storage, trial_id, config)
            self._claimed_from = live
            return Claim(
                trial_id=trial_id,
                run_id=t.run_id,
                grid=ua["grid"],
                config=config,
                attempt=ua.get("attempt", 1),
                failures=ua.get("failures", 0),
                reclaims=ua.get("reclaims", 0),
                lease=lease,
                epoch=t.number,
            )
        return None

    def tally(self, grid: str) -> tuple[int, int]:
        """``(finished, total)`` runs of ``grid``, as :meth:`progress` but from one read of the live
        trials (left for the next claim; right after a claim, the read it took its run from):
        total = the grid's runs as ``harness queue`` last counted them (:meth:`grid_total`; a grid
        queued before that count: every run this queue has seen, its history read once),
        finished = total - runs live now. A run whose retry is not created yet
        (:meth:`requeue_orphans`) counts as finished here."""
        live, self._claimed_from = self._claimed_from, None
        if live is None:
            live = self._live(reuse=False)
        mine = {t.run_id for t in live if t.grid == grid and t.ending != "duplicate"}
        total = self.grid_total(grid)
        if total is None:
            if grid not in self._grid_runs:
                self.reads["full"] += 1
                self._grid_runs[grid] = grid_run_ids(self.storage, grid, lambda: self.studies().values())
            self._grid_runs[grid] |= mine
            total = len(self._grid_runs[grid])
        return max(0, total - len(mine)), max(total, len(mine))

    # -- fencing (harness.train.fencing)

    def lease_lost(self, claim: Claim) -> str | None:
        """Why ``claim`` no longer holds its run (who holds it now), or ``None`` while it does.

        Held means: its trial is still RUNNING under this claim's lease (same host, pid and
        epoch). Reads the storage.
        """
        trial = self.storage.get_trial(claim.trial_id)
        if trial.state == TrialState.RUNNING:
            lease = lease_of(trial)
            if (lease.host, lease.pid) == (claim.lease.host, claim.lease.pid) and lease.epoch in (
                None,
                claim.epoch,
            ):
                return None
            return f"lease lost to {lease.worker} (epoch {claim.epoch})"
        study_id = self._run_study.get(claim.run_id) or self.study_of(claim.grid)
        later = [
            t
            for t in self.run_trials(claim.run_id, study_id)
            if t.number > claim.epoch and not is_duplicate(t)
        ]
        taken = [t for t in later if t.user_attrs.get("lease")]
        ua = trial.user_attrs
        ended = f"epoch {claim.epoch} was {trial.state.name.lower()}"
        if ua.get("ending") == "reclaimed":
            ended = f"epoch {claim.epoch} was reclaimed{' by ' + ua['reclaimed_by'] if ua.get('reclaimed_by') else ''}"
            ended += f" ({ua['error']})" if ua.get("error") else ""
        if taken:
            return f"lease lost to {lease_of(taken[-1]).worker} (epoch {taken[-1].number}; {ended})"
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
            set_user_attrs(self.storage, trial_id, dict(attrs))
        except UpdateFinishedTrialError:
            return False
        return True

    def _finish(self, trial_id: int, state: TrialState, value: float | None = None) -> bool:
        self._snapshot = self._claimed_from = None  # what is live changes: the next claim reads again
        try:
            self.storage.set_trial_state_values(trial_id, state, None if value is None else [value])
        except UpdateFinishedTrialError:
            return False  # someone else finished it first
        return True

    def beat(self, claim: Claim, progress: LiveProgress | None = None) -> bool:
        """Refresh the claim's lease, with the run's live ``progress`` if given (one write either
        way); ``False`` if the run was meanwhile taken from this worker."""
        return self._set_attrs(claim.trial_id, {"lease": claim.lease.refreshed(progress=progress).to_dict()})

    def complete(
        self, claim: Claim, status: str, *, value: float | None, wall_s: float, error: str | None = None
    ) -> bool:
        """Mark a trained run finished: ``status`` 'done', 'diverged' or 'pruned'.

        done: a COMPLETE trial whose value is ``value``, the final validation NLL
        (nats/token; +inf with ``val_nll`` None when the train function gave no finite NLL,
        which :func:`~harness.scheduling.worker.train_unless_finished` always gives).
        diverged: a FAIL trial with ``status`` and the reason (``error``). pruned: a PRUNED
        trial (its reported NLLs are its intermediate values). Returns ``False`` if the
        lease was lost (another worker reclaimed the run).
        """
        if status not in FINISHED:
            raise ValueError(f"status {status!r}; allowed: {', '.join(map(repr, FINISHED))}")
        ok_value = value is not None and math.isfinite(value)
        attrs = {"status": status, "wall_s": wall_s, "val_nll": float(value) if ok_value else None}
        state = {"done": TrialState.COMPLETE, "pruned": TrialState.PRUNED}.get(status, TrialState.FAIL)
        if state == TrialState.FAIL:
            attrs.update(error=(error or status)[-ERROR_CHARS:], ending=status, requeue=False)
        return self._set_attrs(claim.trial_id, attrs) and self._finish(
            claim.trial_id,
            state,
            (float(value) if ok_value else math.inf) if state == TrialState.COMPLETE else None,
        )

    def fail(self, claim: Claim, error: str, *, wall_s: float, max_retries: int) -> bool:
        """Mark an attempt whose training raised; requeue it while its ``max_retries``
        retries (:data:`harness.scheduling.worker.MAX_RETRIES` by default) are not spent.

        Returns whether a retry was queued.
        """
        failures = claim.failures + 1
        requeue = failures <= max_retries
        attrs = {
            "error": error[-ERROR_CHARS:],
            "ending": "failed",
            "failures": failures,
            "wall_s": wall_s,
            "requeue": requeue,
        }
        if not (self._set_attrs(claim.trial_id, attrs) and self._finish(claim.trial_id, TrialState.FAIL)):
            return False
        if requeue:
            self.requeue_attempt(self.storage.get_trial(claim.trial_id))
        return requeue

    def release(self, claim: Claim, reason: str, *, keep_attempt: bool = False) -> bool:
        """Give a run back unfinished (worker interrupted): it is requeued, no retry counted.
        ``keep_attempt``: the run never started here (its corpus is not on this machine), so its next
        trial keeps this attempt's number."""
        attrs = {"error": reason, "ending": "released", "requeue": True}
        if not (self._set_attrs(claim.trial_id, attrs) and self._finish(claim.trial_id, TrialState.FAIL)):
            return False
        self.requeue_attempt(self.storage.get_trial(claim.trial_id), keep_attempt=keep_attempt)
        return True

    def reclaim_stale(self, now: float | None = None) -> list[tuple[str, str]]:
        """Fail and requeue every running attempt whose lease is stale (see :mod:`harness.scheduling.lease`).

        Returns ``(run_id, reason)`` for each run reclaimed by this call. A run reclaimed
        :data:`MAX_RECLAIMS` times stays failed. Of several workers that see one run stale, the
        one whose FAIL transition goes through requeues it; the others skip it. Reads the live
        trials (or uses the last read, which a reclaim then leaves for the claim that follows).
        """
        now = time.time() if now is None else now
        out = []
        for t in self._live():
            if t.state != TrialState.RUNNING or t.ending == "duplicate":
                continue
            why = stale_reason(t.lease, now=now, timeout_s=self.lease_timeout_s, host=self.host)
            if why is None:
                continue
            trial = self.storage.get_trial(t.trial_id)
            if trial.state != TrialState.RUNNING:
                continue  # finished meanwhile (reclaimed by another worker)
            reclaims = trial.user_attrs.get("reclaims", 0) + 1
            requeue = reclaims <= MAX_RECLAIMS
            attrs = {
                "error": f"lease expired: {why}",
                "ending": "reclaimed",
                "reclaims": reclaims,
                "requeue": requeue,
                "reclaimed_by": f"{self.host}:{os.getpid()}",
            }
            if self._set_attrs(t.trial_id, attrs) and self._finish(t.trial_id, TrialState.FAIL):
                self._run_study[t.run_id] = t.study_id
                if requeue:
                    self.requeue_attempt(self.storage.get_trial(t.trial_id))
                out.append((t.run_id, why))
        if out:
            self._snapshot = None  # the new attempts are not in it
        return out

    def live_workers(self, now: float | None = None) -> list[str]:
        """``host:pid`` of every worker holding a fresh lease (sorted)."""
        now = time.time() if now is None else now
        return sorted(
            {
                t.lease.worker
                for t in self.live()
                if t.state == TrialState.RUNNING
                and stale_reason(t.lease, now=now, timeout_s=self.lease_timeout_s, host=self.host) is None
            }
        )


__all__ = [
    "LEGACY_STUDY",
    "MAX_RECLAIMS",
    "CARRIED_ATTRS",
    "Claim",
    "RunState",
    "EnqueueResult",
    "ended_as",
    "fold",
    "RunQueue",
]
