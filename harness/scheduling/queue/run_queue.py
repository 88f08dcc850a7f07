"""The run queue on Optuna storage (DESIGN sections 1.1 and 9): many workers, each run trained once.

:class:`RunQueue` adds runs, hands each to one worker under a lease, and records how each attempt ends.
The layout: one Optuna study per grid, named after it (a tuning study ``tune:NAME`` is the grid of its
trials' runs), so Optuna's own tools (``optuna.load_study``, optuna-dashboard) show each grid's history;
one trial per attempt at a run, all the trials of a run in one study, addressed by their number there
(the storage's trial id comes from the public ``get_trial_id_from_study_id_trial_number``). What a trial
says and how a run's state is read from its trials: :mod:`harness.scheduling.queue.trials`; which runs a
queue or an import adds: :mod:`harness.scheduling.queue.adding`; where the storage lives and how an outage
is ridden out: :mod:`harness.scheduling.queue.storage`. A queue of the previous layout (one study
:data:`LEGACY_STUDY` for every grid) is refused by :meth:`RunQueue.open` with one line naming
``harness migrate``, which alone converts it (:mod:`harness.scheduling.queue.legacy`).

Taking a run uses the storage's atomic WAITING -> RUNNING transition (``set_trial_state_values(...,
RUNNING)`` returns False to all but one process), the primitive ``Study.ask`` pops enqueued trials
with; ``ask`` itself would create an untagged trial on an empty queue and cannot keep to one grid.
A tuning trial's parameters are drawn by the study's sampler when a worker takes it
(:func:`harness.scheduling.tuning.draw_params`), so the sampler conditions on every trial finished by
then. Finishing a trial is the other atomic step: a trial already finished by someone else raises
``UpdateFinishedTrialError``, so when two workers reclaim one stale run, one wins.

Retries and re-enqueueing never modify a trial back to WAITING: the old trial is marked FAIL (with
``requeue`` set just before, as the worker's retry policy decided: :mod:`harness.scheduling.workers.retry`)
and a new WAITING trial with the same tag is created by the one process whose FAIL transition went
through (the worker giving its run back, or the one reclaimer of a stale run that won: one new attempt
per lost run, however many workers saw it stale). A process dying between the two steps loses nothing:
:meth:`RunQueue.requeue_orphans`, which a worker runs when it finds nothing to claim, creates the missing
trial. Adding a grid's runs holds that grid's lock (:func:`~harness.scheduling.queue.storage.grid_lock`),
so two ``harness queue`` of one grid add each run once. Should two live trials of one run ever exist (an
orphan repaired while its process still lived), the one with the lowest trial number is kept and the
other is discarded when popped (user attr ``ending = "duplicate"``).

What a worker reads per run grows with neither the history nor the queue (so a claim stays as fast with
20,000 trials stored): the live trials (:meth:`RunQueue.live`, :mod:`harness.scheduling.queue.live_trials`),
the trials of the run it took, and its grid's run count (:meth:`RunQueue.tally`); :attr:`RunQueue.reads`
counts the reads of each kind.
"""

from __future__ import annotations

import os
import random
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from typing import Any

from optuna.exceptions import DuplicatedStudyError, UpdateFinishedTrialError
from optuna.storages import BaseStorage
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

from harness.common.interrupt import complete_before_interrupt
from harness.common.live import LiveProgress
from harness.common.terms import FINISHED, STATUSES
from harness.design.config import RunConfig
from harness.scheduling.queue.adding import (
    check_unchanged,
    check_unique,
    plan_attempts,
    restore_order,
    restored_trial,
)
from harness.scheduling.queue.hardware_pairs import TRIAL_ATTR, PairGate
from harness.scheduling.queue.lease import LEASE_TIMEOUT_S, Lease, hostname, stale_reason
from harness.scheduling.queue.live_trials import (
    LiveTrial,
    create_waiting,
    ensure_indexes,
    grid_run_ids,
    live_trials,
    run_trials,
    set_user_attrs,
    take_waiting,
)
from harness.scheduling.queue.storage import (
    STORAGE_RETRY_S,
    describe_storage,
    grid_lock,
    open_storage,
    retry_storage,
    trial_lock,
)
from harness.scheduling.queue.trials import (
    CARRIED_ATTRS,
    Claim,
    EnqueueResult,
    RunState,
    attempt_template,
    config_of,
    failed_record,
    finished_record,
    fold,
    is_duplicate,
    lease_lost_reason,
    orphans,
    queue_order,
    reclaimed_record,
    released_record,
    superseded,
)
from harness.scheduling.tuning import draw_params
from harness.train.fencing import LeaseLost

RUNS_ATTR = "runs"  # a grid study's attribute: how many runs its last `harness queue` counted
CORPUS_ATTR = "corpus"  # a grid study's attribute: its corpus's fingerprint, name and path (corpus_of)
LEGACY_STUDY = "harness"  # the previous layout's one study for every grid (refused; `harness migrate`)
FRESH_S = 1.0  # a live read younger than this is not read again before a claim answers "nothing queued"


class RunQueue:
    """The run queue on one Optuna storage: every study holding runs (see the module docstring).

    Args:
        storage: an Optuna storage (:func:`open_storage`).
        lease_timeout_s: a running trial whose lease has not beaten for this long
            (seconds) is reclaimed by :meth:`reclaim_stale`.
        create: kept for :meth:`open` (a missing journal file is created); studies are
            created when a grid's first run is enqueued.

    Attributes:
        reads: storage reads by kind: ``full`` (a study's every trial), ``live``, ``run``, ``failed``.
    """

    def __init__(
        self, storage: BaseStorage, *, lease_timeout_s: float = LEASE_TIMEOUT_S, create: bool = True
    ) -> None:
        if lease_timeout_s <= 0:
            raise ValueError(f"lease timeout {lease_timeout_s} s must be positive")
        self.storage = storage
        self.lease_timeout_s = float(lease_timeout_s)
        self.host = hostname()
        ensure_indexes(storage)
        self.reads: Counter = Counter()
        self._study_ids: dict[str, int] = {}  # study name -> id (ids never change; a deleted one is dropped)
        self._run_study: dict[str, int] = {}  # run id -> the study holding its trials
        self._waiting: dict[int, LiveTrial] = {}  # the WAITING trials read whole, by trial id (live_trials)
        self._snapshot: list[LiveTrial] | None = None  # the last live read, until a claim uses it
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

    # -- reading: the studies, a run's trials, the live trials

    def studies(self) -> dict[str, int]:
        """Study name -> study id of every study in the storage (queue studies and others)."""
        names = [s.study_name for s in self.storage.get_all_studies()]
        for name in names:
            if name not in self._study_ids:
                try:
                    self._study_ids[name] = self.storage.get_study_id_from_name(name)
                except KeyError:  # deleted meanwhile (a conversion of the previous layout)
                    continue
        self._study_ids = {n: self._study_ids[n] for n in names if n in self._study_ids}
        return dict(self._study_ids)

    def _find_study(self, grid: str) -> int | None:
        """Id of ``grid``'s study, or ``None`` when it has none (ids are kept once found)."""
        if grid not in self._study_ids:
            try:
                self._study_ids[grid] = self.storage.get_study_id_from_name(grid)
            except KeyError:
                return None
        return self._study_ids[grid]

    def study_of(self, grid: str) -> int:
        """Id of ``grid``'s study (minimised: trial values are NLLs), created when missing."""
        if self._find_study(grid) is None:
            try:
                self._study_ids[grid] = self.storage.create_new_study([StudyDirection.MINIMIZE], grid)
            except DuplicatedStudyError:  # another process created it first
                self._study_ids[grid] = self.storage.get_study_id_from_name(grid)
        return self._study_ids[grid]

    def grid_total(self, grid: str) -> int | None:
        """How many runs ``grid`` has, as the last :meth:`~harness.scheduling.queue.run_queue.RunQueue.enqueue`
        of it counted them (its study's :data:`RUNS_ATTR`): one small read, whatever the history;
        ``None`` for a grid queued before the count was kept, or with no study."""
        study_id = self._find_study(grid)
        if study_id is None:
            return None
        try:
            return self.storage.get_study_user_attrs(study_id).get(RUNS_ATTR)
        except KeyError:  # deleted meanwhile (a conversion of the previous layout)
            return None

    def _trials(self, grids: Collection[str] | None = None) -> list[FrozenTrial]:
        """Every trial that is an attempt at a run, over all studies (``grids``: only those grids'
        studies, so that reading one grid costs nothing for the others' history); records each
        run's study."""
        studies = self.studies()
        if grids is not None:
            studies = {n: sid for n, sid in studies.items() if n in grids}
        out = []
        for sid in studies.values():
            try:
                trials = self.storage.get_all_trials(sid, deepcopy=False)
            except KeyError:  # deleted meanwhile
                continue
            self.reads["full"] += 1
            for t in trials:
                if "run_id" in t.user_attrs:
                    self._run_study[t.user_attrs["run_id"]] = sid
                    out.append(t)
        return out

    def live(self) -> list[LiveTrial]:
        """Every live (WAITING or RUNNING) trial of a run, light (:func:`~harness.scheduling.queue.live_trials.live_trials`):
        one read whose cost does not grow with the finished history."""
        self.reads["live"] += 1
        return live_trials(self.storage, lambda: self.studies().values(), self._waiting)

    def run_trials(self, run_id: str, study_id: int) -> list[FrozenTrial]:
        """Every trial of one run (in its study ``study_id``), whole, by number; records the run's study."""
        self.reads["run"] += 1
        self._run_study[run_id] = study_id
        return run_trials(self.storage, run_id, study_id)

    def all_trials(self) -> list[FrozenTrial]:
        """Every attempt at every run (all studies), as Optuna's frozen trials."""
        return self._trials()

    def runs(self, grid: str | None = None) -> dict[str, RunState]:
        """Every run in the queue (optionally of one grid), by run id, in queue order."""
        by_run: dict[str, list[FrozenTrial]] = {}
        for t in sorted(self._trials(None if grid is None else {grid}), key=queue_order):
            if grid is None or t.user_attrs.get("grid") == grid:
                by_run.setdefault(t.user_attrs["run_id"], []).append(t)
        return {rid: fold(ts) for rid, ts in by_run.items()}

    def counts(self, grid: str | None = None) -> dict[str, Counter]:
        """grid -> Counter of run states (every state of :data:`harness.common.terms.STATUSES` present)."""
        out: dict[str, Counter] = {}
        for r in self.runs(grid).values():
            out.setdefault(r.grid, Counter({s: 0 for s in STATUSES}))[r.state] += 1
        return out

    def progress(self, grid: str) -> tuple[int, int]:
        """``(finished, total)`` runs of ``grid``; finished = done + diverged + pruned + failed."""
        c = self.counts(grid).get(grid, Counter())
        return sum(c[s] for s in FINISHED) + c["failed"], sum(c.values())

    # -- adding runs, and what a grid's study records

    def enqueue(
        self,
        configs: list[RunConfig],
        *,
        retry_failed: bool = False,
        attrs: Mapping[str, Any] | None = None,
        same_corpus: bool = False,
    ) -> EnqueueResult:
        """Add one trial per run config not yet in the queue (idempotent; which: :func:`plan_attempts
        <harness.scheduling.queue.adding.plan_attempts>`).

        A run already queued, running, done or diverged is left alone; a failed run is queued again only
        with ``retry_failed``. ``attrs``: more user attributes of each new trial (:data:`CARRIED_ATTRS`,
        e.g. ``tune_pending`` for a tuning trial). ``same_corpus``: the caller checked that the configs'
        corpus has the grid's fingerprint (:meth:`bind_corpus`), so a queued run whose ``corpus`` is another
        path (or a reference) to the same text is the same run.

        Raises:
            ValueError: two configs share a run id, or a run id already in the queue was
                queued with a different config (the message names the differing keys).
        """
        check_unique(configs)
        grids = sorted({c.grid for c in configs})
        with ExitStack() as stack:  # each grid's lock, in one order: concurrent queues add each run once
            alive = [stack.enter_context(grid_lock(self.storage, g)) for g in grids]
            existing = {rid: r for g in grids for rid, r in self.runs(g).items()}
            check_unchanged(existing, configs, ignore=("corpus",) if same_corpus else ())
            result, new = plan_attempts(
                existing, configs, retry_failed=retry_failed, attrs=attrs, queued_at=time.time()
            )
            batch: dict[int, list[FrozenTrial]] = {}  # study id -> the new trials (one write per study)
            for config, template in new:
                for keep_alive in alive:
                    keep_alive()
                batch.setdefault(self._study_for(config), []).append(template)
            self._snapshot = None
            counts = {  # [done/total]'s total
                self.study_of(g): len(
                    {rid for rid, r in existing.items() if r.grid == g}
                    | {c.run_id for c in configs if c.grid == g}
                )
                for g in grids
            }
            with complete_before_interrupt(f"queued {len(result.added) + len(result.retried)} run(s)"):
                for (
                    study_id,
                    templates,
                ) in batch.items():  # with the trials: no worker sees them without their count
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
        """Add the runs of an imported archive (:mod:`harness.store.archive`'s ``queue.json``) in the state
        they ended (:func:`~harness.scheduling.queue.adding.restored_trial`); runs already in the queue are
        left alone (idempotent). Returns the run ids added.

        Raises:
            ValueError: a run id already queued with a different config (as :meth:`enqueue`; with
                ``same_corpus``, a corpus given by another path or a reference to the same text is the same).
        """
        runs = restore_order(runs)
        configs = [RunConfig.from_dict(r["config"]) for r in runs]
        existing = {rid for g in {c.grid for c in configs} for rid in self.runs(g)}
        # adds nothing; raises on a changed config
        self.enqueue([c for c in configs if c.run_id in existing], same_corpus=same_corpus)
        added = []
        with complete_before_interrupt("restored the archive's runs into the queue"):
            for index, (c, r) in enumerate(zip(configs, runs)):
                if c.run_id not in existing:
                    self.storage.create_new_trial(
                        self._study_for(c), template_trial=restored_trial(c, r, index)
                    )
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

    def results_of(self, grid: str) -> dict | None:
        """``{"id", "path"}`` of the results folder ``grid``'s runs belong to
        (:meth:`~harness.scheduling.queue.run_queue.RunQueue.bind_results`), or ``None`` when none was
        recorded (a queue written before the check)."""
        studies = self.studies()
        if grid not in studies:
            return None
        return self.storage.get_study_user_attrs(studies[grid]).get("results")

    def bind_corpus(self, grid: str, fingerprint: str, name: str, path: str | None) -> None:
        """Record ``grid``'s corpus: its document fingerprint (what every run of the grid reads, checked
        by whoever re-points it), its file name, and ``path``, where workers find it unless their own
        ``--corpus`` says otherwise (:meth:`corpus_of`). A later call re-points the grid: callers check
        the new path's fingerprint against the recorded one first (:mod:`harness.corpus.locate`).

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

    def corpus_of(self, grid: str) -> dict | None:
        """``{"fingerprint", "name", "path"}`` of ``grid``'s corpus (:meth:`~harness.scheduling.queue.run_queue.RunQueue.
        bind_corpus`): its document fingerprint (its identity), its file name, and where it is found
        (``path``, ``None`` when no path was given here, e.g. an archive imported without ``--corpus``);
        ``None`` when none was recorded (a queue written before the record, a hub corpus)."""
        studies = self.studies()
        if grid not in studies:
            return None
        return self.storage.get_study_user_attrs(studies[grid]).get(CORPUS_ATTR)

    # -- taking a run

    def _live(self, reuse: bool = True) -> list[LiveTrial]:
        """The live trials: the last read not yet used by a claim when ``reuse``, else read now."""
        if not reuse or self._snapshot is None:
            self._snapshot, self._snapshot_at = self.live(), time.monotonic()
        return self._snapshot

    def claim(self, grid: str | None = None, pairs: PairGate | None = None) -> Claim | None:
        """Take the next queued run (optionally of one grid) under a fresh lease, or ``None``.

        ``pairs``: the worker's hardware gate (:class:`~harness.scheduling.queue.hardware_pairs.PairGate`):
        a run of a ``pair_hardware = "same"`` grid whose seed is bound to another class is left for that
        class (the gate's ``held`` says which); ``None``: every run is taken.

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
        claim = self._claim_from(live, grid, pairs)
        if claim is None and reused:
            claim = self._claim_from(self._live(reuse=False), grid, pairs)
            self._snapshot = None
        return claim

    def _claim_from(self, live: list[LiveTrial], grid: str | None, pairs: PairGate | None) -> Claim | None:
        left = sorted(
            (t for t in live if t.state == TrialState.WAITING and (grid is None or t.grid == grid)),
            key=lambda t: t.order,
        )
        lost = 0
        if pairs is not None:
            pairs.start()
        while left:
            t = left.pop(self._rng.randrange(min(len(left), 2**lost)) if lost else 0)
            may, key = (True, None) if pairs is None else pairs.admit(self.storage, t)
            if not may:
                continue  # its seed's other runs trained on another class or numerics key: held for that key
            lease = Lease.here(epoch=t.number)
            taken = {"lease": lease.to_dict(), **({TRIAL_ATTR: key} if key else {})}
            if not take_waiting(self.storage, t.trial_id, taken):
                lost += 1
                continue  # another worker popped it first
            trial_id = t.trial_id
            trials = self.run_trials(t.run_id, t.study_id)
            mine = next(s for s in trials if s.number == t.number)
            if superseded(trials, t.number):
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

    # -- holding it (harness.train.fencing)

    def lease_lost(self, claim: Claim) -> str | None:
        """Why ``claim`` no longer holds its run (who holds it now), or ``None`` while it does
        (:func:`~harness.scheduling.queue.trials.lease_lost_reason`). Reads the storage: the claim's trial,
        and the run's trials once it is no longer RUNNING."""
        trial = self.storage.get_trial(claim.trial_id)
        if trial.state == TrialState.RUNNING:
            return lease_lost_reason(claim, trial, None)
        study_id = self._run_study.get(claim.run_id) or self.study_of(claim.grid)
        trials = self.run_trials(claim.run_id, study_id)
        return lease_lost_reason(
            claim, trial, [t for t in trials if t.number > claim.epoch and not is_duplicate(t)]
        )

    @contextmanager
    def holding(self, claim: Claim) -> Iterator[None]:
        """A block during which ``claim`` holds its run and no one can take it over
        (:func:`~harness.scheduling.queue.storage.trial_lock`): the place to rename a result file.

        Raises:
            LeaseLost: on entry, when the lease is already lost (naming who holds it).
        """
        with trial_lock(self.storage, claim.trial_id):
            why = self.lease_lost(claim)
            if why is not None:
                raise LeaseLost(claim.run_id, why)
            yield

    def beat(self, claim: Claim, progress: LiveProgress | None = None) -> bool:
        """Refresh the claim's lease, with the run's live ``progress`` if given (one write either
        way); ``False`` if the run was meanwhile taken from this worker."""
        return self._set_attrs(claim.trial_id, {"lease": claim.lease.refreshed(progress=progress).to_dict()})

    # -- how an attempt ends, and the next attempt

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

    def complete(
        self, claim: Claim, status: str, *, value: float | None, wall_s: float, error: str | None = None
    ) -> bool:
        """Mark a trained run finished: ``status`` 'done', 'diverged' or 'pruned'.

        done: a COMPLETE trial whose value is ``value``, the final validation NLL
        (nats/token; +inf with ``val_nll`` None when the train function gave no finite NLL,
        which :func:`~harness.scheduling.workers.loop.train_unless_finished` always gives).
        diverged: a FAIL trial with ``status`` and the reason (``error``). pruned: a PRUNED
        trial (its reported NLLs are its intermediate values). Returns ``False`` if the
        lease was lost (another worker reclaimed the run).
        """
        state, attrs, value = finished_record(status, value, wall_s, error)
        return self._set_attrs(claim.trial_id, attrs) and self._finish(claim.trial_id, state, value)

    def fail(self, claim: Claim, error: str, *, wall_s: float, requeue: bool) -> bool:
        """Mark an attempt whose training raised (its failures counted one more), and queue the run's next
        attempt when ``requeue`` (the worker's retry policy decides: :func:`harness.scheduling.workers.retry.retry_left`).

        Returns whether a retry was queued (``False`` too when the lease was lost meanwhile).
        """
        attrs = failed_record(claim.failures + 1, error, wall_s, requeue)
        if not (self._set_attrs(claim.trial_id, attrs) and self._finish(claim.trial_id, TrialState.FAIL)):
            return False
        if requeue:
            self.requeue_attempt(self.storage.get_trial(claim.trial_id))
        return requeue

    def release(self, claim: Claim, reason: str, *, keep_attempt: bool = False) -> bool:
        """Give a run back unfinished (worker interrupted): it is requeued, no retry counted.
        ``keep_attempt``: the run never started here (its corpus is not on this machine), so its next
        trial keeps this attempt's number."""
        attrs = released_record(reason)
        if not (self._set_attrs(claim.trial_id, attrs) and self._finish(claim.trial_id, TrialState.FAIL)):
            return False
        self.requeue_attempt(self.storage.get_trial(claim.trial_id), keep_attempt=keep_attempt)
        return True

    def reclaim_stale(self, now: float | None = None, *, max_reclaims: int) -> list[tuple[str, str]]:
        """Fail and requeue every running attempt whose lease is stale (see :mod:`harness.scheduling.queue.lease`).

        Returns ``(run_id, reason)`` for each run reclaimed by this call. A run reclaimed more than
        ``max_reclaims`` times (the worker's retry policy:
        :data:`harness.scheduling.workers.retry.MAX_RECLAIMS`) stays failed. Of several workers that see one run stale, the
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
            requeue = reclaims <= max_reclaims
            attrs = reclaimed_record(reclaims, why, requeue, f"{self.host}:{os.getpid()}")
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

    def _new_trial(self, config: RunConfig, **attempt: Any) -> int:
        """A WAITING trial for ``config`` in its run's study (new run: its grid's study); ``attempt``: the
        counters, slot and carried attributes of :func:`~harness.scheduling.queue.trials.attempt_template`."""
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
            for rid, t in orphans(failed, run_id).items():
                trials = [s for s in self.run_trials(rid, sid) if not is_duplicate(s)]
                if trials and trials[-1].number == t.number:  # no later attempt: the retry was never created
                    self.requeue_attempt(trials[-1])
                    out.append(rid)
        return out


__all__ = [
    "LEGACY_STUDY",
    "RUNS_ATTR",
    "CORPUS_ATTR",
    "FRESH_S",
    "RunQueue",
]
