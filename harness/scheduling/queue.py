"""Run queue on Optuna storage (DESIGN sections 1.1 and 9): many workers, each run trained once.

:class:`RunQueue` adds runs, hands each to one worker under a lease, and records how each attempt
ends. The layout, one Optuna study per grid and one trial per attempt at a run, and reading it:
:mod:`harness.scheduling.queueread` (:class:`~harness.scheduling.queueread.QueueReader`, which
:class:`RunQueue` extends); what a trial says, how a run ends and how its state is read from its
trials: :mod:`harness.scheduling.trials`. Where the storage lives and how an outage is ridden out:
:mod:`harness.scheduling.storage`.

Taking a run uses the storage's atomic WAITING -> RUNNING transition
(``set_trial_state_values(..., RUNNING)`` returns False to all but one process), the
same primitive ``Study.ask`` pops enqueued trials with; ``ask`` itself is not used
because on an empty queue it silently creates a new, untagged trial, and it cannot
restrict itself to one grid. A tuning trial's parameters are drawn by the study's
sampler when a worker takes it (:func:`harness.scheduling.tuning.draw_params`), so the
sampler conditions on every trial finished by then. Finishing a trial is the other atomic
step: a trial already finished by someone else raises ``UpdateFinishedTrialError``, so
when two workers reclaim one stale run, one wins.

Retries and re-enqueueing never modify a trial back to WAITING: the old trial is
marked FAIL (with ``requeue = true`` set just before) and a new WAITING trial with the
same tag is created by :meth:`RunQueue.requeue_orphans`, which any worker runs before
taking work, so a process dying between the two steps loses nothing. Adding a grid's
runs holds that grid's lock (:func:`~harness.scheduling.storage.grid_lock`), so two
``harness queue`` of one grid add each run once. Should two live trials of one run ever
exist (two reclaimers racing), the one with the lowest trial number is kept and the other is discarded when
popped (user attr ``ending = "duplicate"``).
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any, Callable, Mapping

from optuna.exceptions import UpdateFinishedTrialError
from optuna.storages import BaseStorage
from optuna.trial import TrialState, create_trial

from harness.config import RunConfig
from harness.fencing import LeaseLost
from harness.live import LiveProgress
from harness.scheduling.lease import LEASE_TIMEOUT_S, Lease, hostname, stale_reason
from harness.scheduling.queueread import LEGACY_STUDY, QueueReader
from harness.scheduling.storage import (STORAGE_RETRY_S, describe_storage, grid_lock, open_storage, retry_storage,
                                       trial_lock)
from harness.scheduling.trials import (Claim, EnqueueResult, RunState, config_of, ended_as, fold, is_duplicate,
                                       lease_of, queue_order)
from harness.terms import ERROR_CHARS, FINISHED, config_diff

MAX_RECLAIMS = 5  # a run whose worker died this many times is not requeued again
# Trial attributes a retry carries over: a tuning trial's drawn parameters stay those of its run.
CARRIED_ATTRS = ("tune_pending", "tune_params", "tune_distributions")


class RunQueue(QueueReader):
    """The run queue on one Optuna storage: every study holding runs (see the module docstring);
    reading them: :class:`~harness.scheduling.queueread.QueueReader`.

    Args:
        storage: an Optuna storage (:func:`open_storage`).
        lease_timeout_s: a running trial whose lease has not beaten for this long
            (seconds) is reclaimed by :meth:`reclaim_stale`.
        create: kept for :meth:`open` (a missing journal file is created); studies are
            created when a grid's first run is enqueued.
    """

    def __init__(self, storage: BaseStorage, *, lease_timeout_s: float = LEASE_TIMEOUT_S,
                 create: bool = True) -> None:
        if lease_timeout_s <= 0:
            raise ValueError(f"lease timeout {lease_timeout_s} s must be positive")
        super().__init__(storage)
        self.lease_timeout_s = float(lease_timeout_s)
        self.host = hostname()

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

    # -- adding

    def enqueue(self, configs: list[RunConfig], *, retry_failed: bool = False,
                attrs: Mapping[str, Any] | None = None) -> EnqueueResult:
        """Add one trial per run config not yet in the queue (idempotent).

        A run already queued, running, done or diverged is left alone; a failed run is
        queued again only with ``retry_failed``. ``attrs``: more user attributes of each new
        trial (:data:`CARRIED_ATTRS`, e.g. ``tune_pending`` for a tuning trial).

        Raises:
            ValueError: two configs share a run id, or a run id already in the queue was
                queued with a different config (the message names the differing keys).
        """
        ids = [c.run_id for c in configs]
        if len(set(ids)) != len(ids):
            dup = next(i for i in ids if ids.count(i) > 1)
            raise ValueError(f"run id {dup!r} appears twice in the configs to enqueue")
        with ExitStack() as stack:  # each grid's lock, in one order: concurrent queues add each run once
            alive = [stack.enter_context(grid_lock(self.storage, g)) for g in sorted({c.grid for c in configs})]
            return self._enqueue(configs, retry_failed=retry_failed, attrs=attrs,
                                 keep_alive=lambda: [f() for f in alive])

    def _enqueue(self, configs: list[RunConfig], *, retry_failed: bool, attrs: Mapping[str, Any] | None,
                 keep_alive: Callable[[], Any]) -> EnqueueResult:
        """:meth:`enqueue` under its grids' locks (``keep_alive`` keeps them fresh)."""
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
            keep_alive()
            r = existing.get(c.run_id)
            if r is None:
                self._new_trial(c, attempt=1, failures=0, reclaims=0, order=[queued_at, index], carried=attrs)
                result.added.append(c.run_id)
            elif r.state != "failed":
                result.present.append(c.run_id)
            elif retry_failed:
                self._new_trial(c, attempt=r.attempt + 1, failures=0, reclaims=0, order=[queued_at, index],
                                carried=attrs)
                result.retried.append(c.run_id)
            else:
                result.failed.append(c.run_id)
        return result

    def _new_trial(self, config: RunConfig, *, attempt: int, failures: int, reclaims: int, order: list,
                   carried: Mapping[str, Any] | None = None) -> int:
        """A WAITING trial for ``config`` in its run's study (new run: its grid's study).

        ``carried``: attributes of the run's previous attempt (:data:`CARRIED_ATTRS`); a
        tuning trial's drawn parameters become the new trial's parameters too.
        """
        attrs = {
            "run_id": config.run_id, "grid": config.grid, "variant": config.variant, "role": config.role,
            "seed": config.seed, "size": config.size, "budget_tokens": config.budget_tokens,
            "config": json.dumps(config.to_dict(), sort_keys=True),
            "attempt": attempt, "failures": failures, "reclaims": reclaims, "order": order,
            **(carried or {}),
        }
        params, distributions = {}, {}
        if attrs.get("tune_params") and attrs.get("tune_distributions"):
            from optuna.distributions import json_to_distribution

            params = dict(attrs["tune_params"])
            distributions = {k: json_to_distribution(v) for k, v in attrs["tune_distributions"].items()}
        template = create_trial(state=TrialState.WAITING, user_attrs=attrs, params=params,
                                distributions=distributions)
        study_id = self._run_study[config.run_id] if config.run_id in self._run_study else self.study_of(config.grid)
        trial_id = self.storage.create_new_trial(study_id, template_trial=template)
        self._run_study[config.run_id] = study_id
        return trial_id

    def bind_results(self, grid: str, folder: str | os.PathLike, folder_id: str) -> None:
        """Record that ``grid``'s results go to the results folder ``folder`` (stable id ``folder_id``,
        :func:`harness.files.results_id`), so workers on another folder refuse its runs
        (:meth:`results_of`). Recorded once per grid.

        Raises:
            ValueError: the grid's results already go to another folder (naming both).
        """
        study_id = self.study_of(grid)
        have = self.storage.get_study_user_attrs(study_id).get("results")
        if have is None:
            self.storage.set_study_user_attr(study_id, "results", {"id": folder_id, "path": str(folder)})
        elif have["id"] != folder_id:
            raise ValueError(f"grid {grid} in this queue belongs to the results folder {have['path']} (id {have['id']}); "
                             f"{folder} is another folder (id {folder_id}): queue it with --results {have['path']}, "
                             "or rename the grid")

    def results_of(self, grid: str) -> dict | None:
        """``{"id", "path"}`` of the results folder ``grid``'s runs belong to (:meth:`bind_results`),
        or ``None`` when none was recorded (a queue written before the check)."""
        studies = self.studies()
        if grid not in studies:
            return None
        return self.storage.get_study_user_attrs(studies[grid]).get("results")

    def requeue_orphans(self, run_id: str | None = None) -> list[str]:
        """Create the next trial of every run whose last attempt ended asking to be requeued.

        Returns the run ids requeued. Idempotent up to races (a duplicate is discarded
        when popped).
        """
        out = []
        for rid, r in self.runs().items():
            if r.pending and (run_id is None or rid == run_id):
                last = max((t for t in r.trials if not is_duplicate(t)), key=lambda t: t.number)
                ua = last.user_attrs
                self._new_trial(r.config, attempt=ua.get("attempt", 1) + 1, failures=ua.get("failures", 0),
                                reclaims=ua.get("reclaims", 0), order=ua.get("order", [time.time(), 0]),
                                carried={k: ua[k] for k in CARRIED_ATTRS if k in ua})
                out.append(rid)
        return out

    # -- taking and finishing

    def claim(self, grid: str | None = None) -> Claim | None:
        """Take the next queued run (optionally of one grid) under a fresh lease, or ``None``.

        A tuning trial whose parameters are not drawn yet gets them now, from its study's
        sampler (:func:`harness.scheduling.tuning.draw_params`); its config then holds them.
        """
        waiting = [t for t in self._trials() if t.state == TrialState.WAITING
                   and (grid is None or t.user_attrs.get("grid") == grid)]
        for t in sorted(waiting, key=queue_order):
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
                        and s.number != t.number and not is_duplicate(s)]
            if any(ended_as(s)
                   or (s.state in (TrialState.WAITING, TrialState.RUNNING) and s.number < t.number)
                   for s in siblings):
                self.storage.set_trial_user_attr(trial_id, "ending", "duplicate")
                self._finish(trial_id, TrialState.FAIL)
                continue
            ua = t.user_attrs
            config = config_of(t)
            if ua.get("tune_pending"):
                from harness.scheduling.tuning import draw_params

                config = draw_params(self.storage, trial_id, config)
            return Claim(trial_id=trial_id, run_id=rid, grid=ua["grid"], config=config,
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
            lease = lease_of(trial)
            if (lease.host, lease.pid) == (claim.lease.host, claim.lease.pid) and lease.epoch in (None, claim.epoch):
                return None
            return f"lease lost to {lease.worker} (epoch {claim.epoch})"
        later = sorted((t for t in self._trials() if t.user_attrs.get("run_id") == claim.run_id
                        and t.number > claim.epoch and not is_duplicate(t)), key=lambda t: t.number)
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

    def complete(self, claim: Claim, status: str, *, value: float | None, wall_s: float,
                 error: str | None = None) -> bool:
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
            claim.trial_id, state, (float(value) if ok_value else math.inf) if state == TrialState.COMPLETE else None)

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
            if t.state != TrialState.RUNNING or is_duplicate(t):
                continue
            why = stale_reason(lease_of(t), now=now, timeout_s=self.lease_timeout_s, host=self.host)
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


__all__ = ["LEGACY_STUDY", "MAX_RECLAIMS", "CARRIED_ATTRS", "Claim", "RunState", "EnqueueResult", "ended_as", "fold",
           "RunQueue"]
