"""Reading the queue: its Optuna studies (one per grid) and every run's trials read out of them.

One Optuna study per grid, named after it (a tuning study ``tune:NAME`` is the grid of its
trials' runs), so Optuna's own tools (``optuna.load_study``, optuna-dashboard) show each
grid's history; one *trial* per attempt at a run (what a trial says, and how a run's state is
read from its trials: :mod:`harness.scheduling.trials`).

All the trials of one run live in one study. A queue written by the previous layout (one
study ``"harness"`` for every grid, :data:`LEGACY_STUDY`) is not read:
:meth:`RunQueue.open <harness.scheduling.queue.RunQueue.open>` refuses it with one line naming
``harness migrate``, which alone converts it (:mod:`harness.scheduling.legacy`).

Trials are addressed by their number in their study; the storage's trial id, which its
write calls take, comes from the public ``get_trial_id_from_study_id_trial_number``.

A worker reads only the live trials (:meth:`QueueReader.live`) and the trials of the run it
took (:meth:`QueueReader.run_trials`), never the finished history
(:mod:`harness.scheduling.queueops`); :attr:`QueueReader.reads` counts the reads of each kind.

:class:`QueueReader` only reads (and creates a grid's study when asked for its id);
:class:`harness.scheduling.queue.RunQueue` extends it with the writes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection

from optuna.exceptions import DuplicatedStudyError
from optuna.storages import BaseStorage
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial

from harness.common.terms import FINISHED, STATUSES
from harness.scheduling.queueops import LiveTrial, live_trials, run_trials
from harness.scheduling.trials import RunState, fold, queue_order

RUNS_ATTR = "runs"  # a grid study's attribute: how many runs its last `harness queue` counted
CORPUS_ATTR = "corpus"  # a grid study's attribute: its corpus's fingerprint, name and path (corpus_of)
LEGACY_STUDY = "harness"  # the previous layout's one study for every grid (refused; `harness migrate`)


class QueueReader:
    """The runs on one Optuna storage, read from every study holding them (see the module docstring).

    Args:
        storage: an Optuna storage (:func:`harness.scheduling.storage.open_storage`).
    """

    def __init__(self, storage: BaseStorage) -> None:
        self.storage = storage
        self._study_ids: dict[str, int] = {}  # study name -> id (ids never change; a deleted one is dropped)
        self._run_study: dict[str, int] = {}  # run id -> the study holding its trials
        self.reads: Counter = Counter()  # storage reads by kind: full (a study's every trial), live, run
        self._waiting: dict[int, LiveTrial] = {}  # the WAITING trials read whole, by trial id (live_trials)

    def _id_of(self, trial: FrozenTrial) -> int:
        """The storage's id of ``trial`` (what its write calls take), by the public API."""
        return self.storage.get_trial_id_from_study_id_trial_number(
            self._run_study[trial.user_attrs["run_id"]], trial.number
        )

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

    def results_of(self, grid: str) -> dict | None:
        """``{"id", "path"}`` of the results folder ``grid``'s runs belong to
        (:meth:`~harness.scheduling.queue.RunQueue.bind_results`), or ``None`` when none was
        recorded (a queue written before the check)."""
        studies = self.studies()
        if grid not in studies:
            return None
        return self.storage.get_study_user_attrs(studies[grid]).get("results")

    def corpus_of(self, grid: str) -> dict | None:
        """``{"fingerprint", "name", "path"}`` of ``grid``'s corpus (:meth:`~harness.scheduling.queue.RunQueue.
        bind_corpus`): its document fingerprint (its identity), its file name, and where it is found
        (``path``, ``None`` when no path was given here, e.g. an archive imported without ``--corpus``);
        ``None`` when none was recorded (a queue written before the record, a hub corpus)."""
        studies = self.studies()
        if grid not in studies:
            return None
        return self.storage.get_study_user_attrs(studies[grid]).get(CORPUS_ATTR)

    def grid_total(self, grid: str) -> int | None:
        """How many runs ``grid`` has, as the last :meth:`~harness.scheduling.queue.RunQueue.enqueue`
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
        """Every live (WAITING or RUNNING) trial of a run, light (:func:`~harness.scheduling.queueops.live_trials`):
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


__all__ = ["LEGACY_STUDY", "RUNS_ATTR", "QueueReader"]
