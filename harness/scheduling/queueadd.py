"""Adding runs to the queue (DESIGN sections 1.1 and 9): a grid's runs, a failed run's next attempt.

:class:`RunAdder` is the half of :class:`~harness.scheduling.queue.RunQueue` that creates trials:
:meth:`~RunAdder.enqueue` (a grid's runs, idempotent, under the grid's lock so two ``harness queue``
add each run once), :meth:`~RunAdder.restore` (an imported archive's runs, as they ended),
:meth:`~RunAdder.requeue_attempt` (the next attempt of a run whose attempt failed asking to be
requeued), :meth:`~RunAdder.requeue_orphans` (the attempts a dead process did not create) and
:meth:`~RunAdder.bind_results` (the results folder a grid writes to). Taking runs and recording how
they end: :mod:`harness.scheduling.queue`; what a new trial holds:
:func:`harness.scheduling.trials.attempt_template`.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from typing import Any

from optuna.storages import BaseStorage
from optuna.trial import FrozenTrial, TrialState, create_trial

from harness.common.terms import config_diff, queue_order_key
from harness.design.config import RunConfig
from harness.scheduling.queueops import LiveTrial, create_waiting
from harness.scheduling.queueread import CORPUS_ATTR, RUNS_ATTR, QueueReader
from harness.scheduling.storage import grid_lock
from harness.scheduling.trials import CARRIED_ATTRS, EnqueueResult, attempt_template, config_of, is_duplicate

# How :meth:`RunAdder.restore` records an imported run's state (queued and running: WAITING).
RESTORED_STATES = {
    "done": TrialState.COMPLETE,
    "pruned": TrialState.PRUNED,
    "diverged": TrialState.FAIL,
    "failed": TrialState.FAIL,
}


class RunAdder(QueueReader):
    """Creates the queue's WAITING trials on one Optuna storage; the base of
    :class:`~harness.scheduling.queue.RunQueue` (use that: it also takes and finishes runs).

    Args:
        storage: an Optuna storage (:func:`~harness.scheduling.storage.open_storage`).
    """

    def __init__(self, storage: BaseStorage) -> None:
        super().__init__(storage)
        self._snapshot: list[LiveTrial] | None = None  # the last live read, until a claim uses it

    def enqueue(
        self,
        configs: list[RunConfig],
        *,
        retry_failed: bool = False,
        attrs: Mapping[str, Any] | None = None,
        same_corpus: bool = False,
    ) -> EnqueueResult:
        """Add one trial per run config not yet in the queue (idempotent).

        A run already queued, running, done or diverged is left alone; a failed run is
        queued again only with ``retry_failed``. ``attrs``: more user attributes of each new
        trial (:data:`CARRIED_ATTRS`, e.g. ``tune_pending`` for a tuning trial). ``same_corpus``: the
        caller checked that the configs' corpus has the grid's fingerprint (:meth:`bind_corpus`), so a
        queued run whose ``corpus`` is another path (or a reference) to the same text is the same run.

        Raises:
            ValueError: two configs share a run id, or a run id already in the queue was
                queued with a different config (the message names the differing keys).
        """
        ids = [c.run_id for c in configs]
        if len(set(ids)) != len(ids):
            dup = next(i for i in ids if ids.count(i) > 1)
            raise ValueError(f"run id {dup!r} appears twice in the configs to enqueue")
        with ExitStack() as stack:  # each grid's lock, in one order: concurrent queues add each run once
            alive = [
                stack.enter_context(grid_lock(self.storage, g)) for g in sorted({c.grid for c in configs})
            ]
            return self._enqueue(
                configs,
                retry_failed=retry_failed,
                attrs=attrs,
                keep_alive=lambda: [f() for f in alive],
                ignore=("corpus",) if same_corpus else (),
            )

    def _enqueue(
        self,
        configs: list[RunConfig],
        *,
        retry_failed: bool,
        attrs: Mapping[str, Any] | None,
        keep_alive: Callable[[], Any],
        ignore: tuple[str, ...] = (),
    ) -> EnqueueResult:
        """:meth:`enqueue` under its grids' locks (``keep_alive`` keeps them fresh)."""
        existing = {
            rid: r for grid in sorted({c.grid for c in configs}) for rid, r in self.runs(grid).items()
        }
        conflicts = []
        for c in configs:
            r = existing.get(c.run_id)
            if r is not None and r.state != "failed":
                diff = config_diff(r.config.to_dict(), c.to_dict(), ignore=ignore)
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
        batch: dict[int, list] = {}  # study id -> the new trials' templates (one write per study)
        for index, c in enumerate(configs):
            keep_alive()
            r = existing.get(c.run_id)
            if r is None:
                batch.setdefault(self._study_for(c), []).append(
                    attempt_template(
                        c, attempt=1, failures=0, reclaims=0, order=[queued_at, index], carried=attrs
                    )
                )
                result.added.append(c.run_id)
            elif r.state != "failed":
                result.present.append(c.run_id)
            elif retry_failed:
                batch.setdefault(self._study_for(c), []).append(
                    attempt_template(
                        c,
                        attempt=r.attempt + 1,
                        failures=0,
                        reclaims=0,
                        order=[queued_at, index],
                        carried=attrs,
                    )
                )
                result.retried.append(c.run_id)
            else:
                result.failed.append(c.run_id)
        self._snapshot = None
        counts = {
            self.study_of(g): len(
                {rid for rid, r in existing.items() if r.grid == g}  # [done/total]'s total
                | {c.run_id for c in configs if c.grid == g}
            )
            for g in {c.grid for c in configs}
        }
        for study_id, templates in batch.items():  # with the trials: no worker sees them without their count
            create_waiting(
                self.storage,
                study_id,
                templates,
                {RUNS_ATTR: counts.pop(study_id)} if study_id in counts else None,
            )
        for study_id, n in counts.items():
            self.storage.set_study_user_attr(study_id, RUNS_ATTR, n)
        return result

    def restore(self, runs: list[dict], *, same_corpus: bool = False) -> list[str]:
        """Add the runs of an imported archive (:mod:`db.archive`'s ``queue.json``) as they ended:
        ``done`` a COMPLETE trial (value ``val_nll``), ``diverged`` and ``failed`` FAIL trials not
        requeued, ``pruned`` PRUNED, ``queued`` and ``running`` a WAITING trial (queued again: no
        worker here holds it). Runs already in the queue are left alone (idempotent). Returns the
        run ids added.

        Raises:
            ValueError: a run id already queued with a different config (as :meth:`enqueue`; with
                ``same_corpus``, a corpus given by another path or a reference to the same text is the same).
        """
        # by role, variant, then seed numerically (s2 before s10): the order `harness status` and a report list
        runs = sorted(runs, key=lambda r: queue_order_key(r["config"]["role"], r["config"]["run_id"]))
        configs = [RunConfig.from_dict(r["config"]) for r in runs]
        existing = {rid for g in {c.grid for c in configs} for rid in self.runs(g)}
        # adds nothing; raises on a changed config
        self.enqueue([c for c in configs if c.run_id in existing], same_corpus=same_corpus)
        added = []
        for index, (c, r) in enumerate(zip(configs, runs)):
            if c.run_id in existing:
                continue
            t = attempt_template(c, attempt=r.get("attempt") or 1, failures=0, reclaims=0, order=[0.0, index])
            state = RESTORED_STATES.get(r["state"], TrialState.WAITING)
            attrs = dict(t.user_attrs)
            if state != TrialState.WAITING:
                attrs.update(status=r["state"], wall_s=r.get("wall_s"), val_nll=r.get("val_nll"))
            if state == TrialState.FAIL:
                attrs.update(error=r.get("error") or r["state"], ending=r["state"], requeue=False)
            value = r.get("val_nll")
            values = [math.inf if value is None else value] if state == TrialState.COMPLETE else None
            done = create_trial(state=state, values=values, user_attrs=attrs)
            self.storage.create_new_trial(self._study_for(c), template_trial=done)
            added.append(c.run_id)
        for g in {c.grid for c in configs}:
            self.storage.set_study_user_attr(self.study_of(g), RUNS_ATTR, len(self.runs(g)))
        self._snapshot = None
        return added

    def _study_for(self, config: RunConfig) -> int:
        """The study of ``config``'s run: the one holding its trials, else its grid's (recorded)."""
        if config.run_id not in self._run_study:
            self._run_study[config.run_id] = self.study_of(config.grid)
        return self._run_study[config.run_id]

    def _new_trial(self, config: RunConfig, **attempt: Any) -> int:
        """A WAITING trial for ``config`` in its run's study (new run: its grid's study); ``attempt``: the
        counters, slot and carried attributes of :func:`~harness.scheduling.trials.attempt_template`."""
        template = attempt_template(config, **attempt)
        self._snapshot = None
        return self.storage.create_new_trial(self._study_for(config), template_trial=template)

    def requeue_attempt(self, last: FrozenTrial, *, keep_attempt: bool = False) -> None:
        """The next attempt at the run whose attempt ``last`` (a frozen trial) just failed asking to be
        requeued: same config, slot in the queue and carried attributes, attempt + 1 (the same number
        with ``keep_attempt``: an attempt that never started)."""
        ua = last.user_attrs
        self._new_trial(
            config_of(last),
            attempt=ua.get("attempt", 1) + (0 if keep_attempt else 1),
            failures=ua.get("failures", 0),
            reclaims=ua.get("reclaims", 0),
            order=ua.get("order", [time.time(), 0]),
            carried={k: ua[k] for k in CARRIED_ATTRS if k in ua},
        )

    def bind_results(self, grid: str, folder: str | os.PathLike, folder_id: str) -> None:
        """Record that ``grid``'s results go to the results folder ``folder`` (stable id ``folder_id``,
        :func:`harness.common.files.results_id`), so workers on another folder refuse its runs
        (:meth:`results_of`). Recorded once per grid.

        Raises:
            ValueError: the grid's results already go to another folder (naming both).
        """
        study_id = self.study_of(grid)
        have = self.storage.get_study_user_attrs(study_id).get("results")
        if have is None:
            self.storage.set_study_user_attr(study_id, "results", {"id": folder_id, "path": str(folder)})
        elif have["id"] != folder_id:
            raise ValueError(
                f"grid {grid} in this queue belongs to the results folder {have['path']} (id {have['id']}); "
                f"{folder} is another folder (id {folder_id}): queue it with --results {have['path']}, "
                "or rename the grid"
            )

    def bind_corpus(self, grid: str, fingerprint: str, name: str, path: str | None) -> None:
        """Record ``grid``'s corpus: its document fingerprint (what every run of the grid reads, checked
        by whoever re-points it), its file name, and ``path``, where workers find it unless their own
        ``--corpus`` says otherwise (:meth:`corpus_of`). A later call re-points the grid: callers check
        the new path's fingerprint against the recorded one first (:mod:`harness.scheduling.corpus_check`).

        Raises:
            ValueError: ``fingerprint`` differs from the one already recorded (naming both).
        """
        study_id = self.study_of(grid)
        have = self.storage.get_study_user_attrs(study_id).get(CORPUS_ATTR)
        if have is not None and have["fingerprint"] != fingerprint:
            raise ValueError(
                f"grid {grid} reads corpus {have['name']} of fingerprint {have['fingerprint'][:16]}; "
                f"this corpus has fingerprint {fingerprint[:16]}: another text, nothing changed"
            )
        record = {"fingerprint": fingerprint, "name": name, "path": path}
        if have != record:
            self.storage.set_study_user_attr(study_id, CORPUS_ATTR, record)

    def requeue_orphans(self, run_id: str | None = None) -> list[str]:
        """Create the next trial of every run whose last attempt ended asking to be requeued, and
        whose process died before it created it.

        Reads the failed trials of every study (not the finished history), then the trials of each
        run whose latest failed attempt asked to be requeued. Returns the run ids requeued.
        Idempotent up to races (a duplicate is discarded when popped).
        """
        out = []
        for sid in self.studies().values():
            try:
                failed = self.storage.get_all_trials(sid, deepcopy=False, states=(TrialState.FAIL,))
            except KeyError:  # deleted meanwhile (a conversion of the previous layout)
                continue
            self.reads["failed"] += 1
            asking = {}  # run id -> its latest failed attempt, when that one asked to be requeued
            for t in sorted(failed, key=lambda t: t.number):
                rid = t.user_attrs.get("run_id")
                if rid is not None and not is_duplicate(t) and (run_id is None or rid == run_id):
                    asking[rid] = t
            for rid, t in asking.items():
                if not t.user_attrs.get("requeue"):
                    continue
                trials = [s for s in self.run_trials(rid, sid) if not is_duplicate(s)]
                if trials and trials[-1].number == t.number:  # no later attempt: the retry was never created
                    self.requeue_attempt(trials[-1])
                    out.append(rid)
        return out
