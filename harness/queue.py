"""Run queue on Optuna storage (DESIGN section 1.1): many workers, each run trained once.

One Optuna study (``"harness"``) per storage; one *trial* per attempt at a run. A
trial carries, as user attributes, the run's id (its *cell tag*), grid name, run
config (JSON), attempt counters and, while it trains, the worker's lease
(:mod:`harness.lease`). A run's state is read from all trials with its tag:

    done / diverged   some trial is COMPLETE (user attr ``status``)
    running           some trial is RUNNING
    queued            some trial is WAITING, or the last one failed and asked to be requeued
    failed            the last trial FAILed and asked for no retry

Storage (``--storage``): by default a journal file ``RESULTS/queue.journal``
(``JournalFileBackend`` with ``JournalFileOpenLock``, an O_EXCL lock file that works on
NFSv3+ shared filesystems); ``journal:PATH`` or a path ending in ``.journal`` for a
journal elsewhere; ``postgresql://...`` for an RDB server (psycopg 3, the ``postgres``
extra; ``postgresql+psycopg2://...`` for psycopg2). SQLite is refused: with several
processes Optuna's SQLite storage hands one enqueued trial to two workers.

An unreachable storage (a PostgreSQL server restarting, a shared filesystem gone for a
moment) is retried with exponential backoff for a bounded time, then the worker stops
with one line naming the storage (:func:`retry_storage`, :class:`StorageUnavailable`);
the queue itself lives in the storage, so nothing is lost, and a worker started once it
is back takes up the runs (a run left RUNNING by the stopped worker is reclaimed).

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

import importlib.util
import json
import math
import os
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import optuna
from optuna.exceptions import UpdateFinishedTrialError
from optuna.storages import BaseStorage
from optuna.trial import FrozenTrial, TrialState, create_trial

from harness.terms import config_diff
from harness.lease import BEAT_S, LEASE_TIMEOUT_S, Heartbeat, Lease, hostname, stale_reason

STUDY_NAME = "harness"
JOURNAL_NAME = "queue.journal"
MAX_RETRIES = 2  # a run whose training raised is retried this many times, then stays failed
MAX_RECLAIMS = 5  # a run whose worker died this many times is not requeued again
ERROR_CHARS = 8000  # tail of the traceback kept in the queue (the result file keeps it all)
STATES = ("queued", "running", "done", "diverged", "failed")

SQLITE_REFUSED = (
    "sqlite storage is refused for the run queue: with several worker processes Optuna's "
    "SQLite storage hands the same enqueued trial to two workers (about 1 in 4 with 8 "
    "workers). Use the default journal file (RESULTS/queue.journal), journal:/shared/path.journal "
    "for workers on several machines sharing a filesystem, or postgresql://USER:PASS@HOST/DB"
)
# SQLAlchemy driver name -> (module to import, what to pip install). Which driver a URL uses
# is SQLAlchemy's call: a plain postgresql:// is psycopg 3 with the pinned SQLAlchemy 2.1.
_POSTGRES_DRIVERS = {
    "psycopg": ("psycopg", "'rd-harness[postgres]' (psycopg 3)"),
    "psycopg2": ("psycopg2", "psycopg2-binary"),
    "pg8000": ("pg8000", "pg8000"),
}
STORAGE_RETRY_S = 60.0  # a worker retries an unreachable storage this long (seconds), then stops
COMMAND_RETRY_S = 10.0  # `harness queue` / `harness status` give up sooner (someone is waiting)
RETRY_FIRST_S, RETRY_MAX_S = 0.5, 10.0  # backoff: first wait, doubled up to this (seconds)


# ----------------------------------------------------------------------------- storage


def parse_storage(url: str | None, results: str | os.PathLike) -> tuple[str, str]:
    """Classify a ``--storage`` value: ``("journal", path)`` or ``("rdb", url)``.

    ``None`` means the default journal ``results/queue.journal``.

    Raises:
        ValueError: an ``sqlite:`` URL (see :data:`SQLITE_REFUSED`) or anything else not
            understood; the message lists the accepted forms.
    """
    if url is None:
        return "journal", str(Path(results) / JOURNAL_NAME)
    if url.startswith("sqlite"):
        raise ValueError(f"--storage {url}: {SQLITE_REFUSED}")
    if url.startswith("journal:"):
        path = url[len("journal:"):]
        if not path:
            raise ValueError("--storage journal: needs a file path, e.g. journal:/shared/queue.journal")
        return "journal", path
    if url.startswith("postgresql:") or url.startswith("postgresql+"):
        return "rdb", url
    if "://" not in url and url.endswith(".journal"):
        return "journal", url
    raise ValueError(
        f"--storage {url!r} not understood; allowed: postgresql://USER:PASS@HOST/DB, "
        "journal:/shared/path/queue.journal, or a file path ending in .journal "
        "(default: RESULTS/queue.journal; sqlite is refused, see --help)"
    )


class NoQueue(FileNotFoundError):
    """There is no queue journal to open (``create=False``): an answer, not an outage."""


def open_storage(url: str | None, results: str | os.PathLike, *, create: bool = True) -> BaseStorage:
    """Open the queue's Optuna storage (see :func:`parse_storage` for the accepted forms).

    Raises:
        ValueError: unaccepted URL, or a PostgreSQL URL whose driver is not installed.
        NoQueue: ``create=False`` and the journal file does not exist.
    """
    kind, where = parse_storage(url, results)
    if kind == "rdb":
        module, install = postgres_driver(where)
        if importlib.util.find_spec(module) is None:
            raise ValueError(
                f"--storage {where.split(':', 1)[0]}://...: the PostgreSQL driver {module!r} is not "
                f"installed; install it with: pip install {install}"
            )
        # Our leases replace Optuna's heartbeat (which only runs inside Study.optimize).
        return optuna.storages.RDBStorage(where, engine_kwargs={"pool_pre_ping": True})
    from optuna.storages.journal import JournalFileBackend, JournalFileOpenLock, JournalStorage

    path = Path(where)
    if not path.exists():
        if not create:
            raise NoQueue(f"no queue journal at {path}")
        path.parent.mkdir(parents=True, exist_ok=True)
    return JournalStorage(JournalFileBackend(str(path), lock_obj=JournalFileOpenLock(str(path))))


def postgres_driver(url: str) -> tuple[str, str]:
    """``(module, pip package)`` of the DBAPI driver SQLAlchemy uses for a ``postgresql`` URL.

    Raises:
        ValueError: a driver SQLAlchemy does not know, or one Optuna cannot use (async).
    """
    import sqlalchemy

    scheme = url.split(":", 1)[0]
    try:
        driver = sqlalchemy.engine.make_url(url).get_dialect().driver
    except (sqlalchemy.exc.ArgumentError, sqlalchemy.exc.NoSuchModuleError):
        driver = scheme.partition("+")[2]
    if driver not in _POSTGRES_DRIVERS:
        raise ValueError(f"--storage {scheme}://...: driver {driver!r} not supported; use postgresql:// "
                         f"(psycopg 3) or postgresql+psycopg2://")
    return _POSTGRES_DRIVERS[driver]


class StorageUnavailable(ConnectionError):
    """The queue storage stayed unreachable through every retry of :func:`retry_storage`.

    The message is one line: the storage (no password), the tries, the seconds spent and
    the last error's first line.
    """


def _unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` means the storage could not be reached (worth retrying), not a bad request.

    RDB: a lost or refused connection (SQLAlchemy ``OperationalError``/``InterfaceError``,
    also when Optuna wraps it in ``StorageInternalError``). Journal: any ``OSError`` of the
    file system (a shared folder gone for a moment), except :class:`NoQueue` and an
    inner :class:`StorageUnavailable` (its retries are spent).
    """
    import sqlalchemy.exc

    seen = exc
    while seen is not None:
        if isinstance(seen, (sqlalchemy.exc.OperationalError, sqlalchemy.exc.InterfaceError)):
            return True
        if isinstance(seen, OSError) and not isinstance(seen, (NoQueue, StorageUnavailable)):
            return True
        seen = seen.__cause__
    return False


def _first_line(exc: BaseException) -> str:
    root = exc.__cause__ if isinstance(exc, optuna.exceptions.StorageInternalError) and exc.__cause__ else exc
    text = str(root).strip().splitlines()
    return f"{type(root).__name__}: {text[0] if text else ''}".strip()


def retry_storage(fn: Callable[[], Any], *, where: str, retry_s: float = STORAGE_RETRY_S,
                  log: Callable[[str], None] = print) -> Any:
    """``fn()``, called again while it fails because the storage is unreachable.

    Waits 0.5 s, then doubles the wait up to 10 s (:data:`RETRY_FIRST_S`,
    :data:`RETRY_MAX_S`), for at most ``retry_s`` seconds in all; each retry is logged.
    Other errors propagate at once.

    Raises:
        StorageUnavailable: still unreachable after ``retry_s`` seconds.
    """
    t0 = time.monotonic()
    wait, tries = RETRY_FIRST_S, 0
    while True:
        tries += 1
        try:
            return fn()
        except Exception as exc:
            if not _unreachable(exc):
                raise
            spent = time.monotonic() - t0
            if spent + wait > retry_s:
                raise StorageUnavailable(
                    f"queue storage {where} unreachable: gave up after {tries} tries in {spent:.0f} s "
                    f"(last error: {_first_line(exc)})") from None
            log(f"queue storage {where} unreachable ({_first_line(exc)}); retry {tries} in {wait:g} s")
            time.sleep(wait)
            wait = min(2 * wait, RETRY_MAX_S)


def describe_storage(url: str | None, results: str | os.PathLike) -> str:
    """Short human description of where the queue lives (passwords hidden)."""
    kind, where = parse_storage(url, results)
    if kind == "journal":
        return where
    scheme, rest = where.split("://", 1)
    return f"{scheme}://{rest.rsplit('@', 1)[-1]}"


# ----------------------------------------------------------------------------- records


@dataclass(frozen=True)
class Claim:
    """A run this worker has taken (its trial is RUNNING under this worker's lease).

    Attributes:
        trial_id: Optuna trial id of this attempt.
        run_id: the cell tag, ``grid:size:variant:s<seed>:<budget>``.
        grid: grid name.
        config: the run config dict (see :meth:`harness.grid.Grid.expand`).
        attempt: 1 for the first attempt, then 2, 3, ...
        failures: attempts of this run whose training raised, so far.
        reclaims: attempts of this run lost to a dead worker, so far.
        lease: the lease taken.
    """

    trial_id: int
    run_id: str
    grid: str
    config: dict
    attempt: int
    failures: int
    reclaims: int
    lease: Lease


@dataclass(frozen=True)
class RunState:
    """The queue's view of one run (all its trials folded together).

    Attributes:
        run_id, grid: as in the run config.
        state: one of :data:`STATES`.
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
    config: dict
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


def fold(trials: list[FrozenTrial]) -> RunState:
    """Fold all trials of one run (same ``run_id`` tag) into its :class:`RunState`."""
    real = sorted((t for t in trials if not _is_dup(t)), key=lambda t: t.number) or sorted(
        trials, key=lambda t: t.number
    )
    last = real[-1]
    ua = last.user_attrs
    base = dict(run_id=ua["run_id"], grid=ua["grid"], config=json.loads(ua["config"]), trials=tuple(trials))
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
        """grid -> Counter of run states (every state of :data:`STATES` present)."""
        out: dict[str, Counter] = {}
        for r in self.runs(grid).values():
            out.setdefault(r.grid, Counter({s: 0 for s in STATES}))[r.state] += 1
        return out

    def progress(self, grid: str) -> tuple[int, int]:
        """``(finished, total)`` runs of ``grid``; finished = done + diverged + failed."""
        c = self.counts(grid).get(grid, Counter())
        return c["done"] + c["diverged"] + c["failed"], sum(c.values())

    # -- adding

    def enqueue(self, configs: list[dict], *, retry_failed: bool = False) -> EnqueueResult:
        """Add one trial per run config not yet in the queue (idempotent).

        A run already queued, running, done or diverged is left alone; a failed run is
        queued again only with ``retry_failed``.

        Raises:
            ValueError: two configs share a run id, or a run id already in the queue was
                queued with a different config (the message names the differing keys).
        """
        ids = [c["run_id"] for c in configs]
        if len(set(ids)) != len(ids):
            dup = next(i for i in ids if ids.count(i) > 1)
            raise ValueError(f"run id {dup!r} appears twice in the configs to enqueue")
        existing = self.runs()
        conflicts = []
        for c in configs:
            r = existing.get(c["run_id"])
            if r is not None and r.state != "failed":
                diff = config_diff(r.config, json.loads(json.dumps(c)))
                if diff:
                    conflicts.append(f"{c['run_id']} (differs in {', '.join(diff)})")
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
            r = existing.get(c["run_id"])
            if r is None:
                self._new_trial(c, attempt=1, failures=0, reclaims=0, order=[queued_at, index])
                result.added.append(c["run_id"])
            elif r.state != "failed":
                result.present.append(c["run_id"])
            elif retry_failed:
                self._new_trial(c, attempt=r.attempt + 1, failures=0, reclaims=0, order=[queued_at, index])
                result.retried.append(c["run_id"])
            else:
                result.failed.append(c["run_id"])
        return result

    def _new_trial(self, config: dict, *, attempt: int, failures: int, reclaims: int, order: list) -> int:
        assert self.study_id is not None
        attrs = {
            "run_id": config["run_id"], "grid": config["grid"],
            "config": json.dumps(config, sort_keys=True),
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
                if not self.storage.set_trial_state_values(t._trial_id, TrialState.RUNNING):
                    continue  # another worker popped it first
            except UpdateFinishedTrialError:
                continue
            lease = Lease.here()
            self.storage.set_trial_user_attr(t._trial_id, "lease", lease.to_dict())
            rid = t.user_attrs["run_id"]
            siblings = [s for s in self._trials() if s.user_attrs["run_id"] == rid
                        and s._trial_id != t._trial_id and not _is_dup(s)]
            if any(s.state == TrialState.COMPLETE
                   or (s.state in (TrialState.WAITING, TrialState.RUNNING) and s.number < t.number)
                   for s in siblings):
                self.storage.set_trial_user_attr(t._trial_id, "ending", "duplicate")
                self._finish(t._trial_id, TrialState.FAIL)
                continue
            ua = t.user_attrs
            return Claim(trial_id=t._trial_id, run_id=rid, grid=ua["grid"], config=json.loads(ua["config"]),
                         attempt=ua.get("attempt", 1), failures=ua.get("failures", 0),
                         reclaims=ua.get("reclaims", 0), lease=lease)
        return None

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

    def beat(self, claim: Claim) -> bool:
        """Refresh the claim's lease; ``False`` if the run was meanwhile taken from this worker."""
        return self._set_attrs(claim.trial_id, {"lease": claim.lease.refreshed().to_dict()})

    def complete(self, claim: Claim, status: str, *, value: float | None, wall_s: float) -> bool:
        """Mark a trained run finished (``status`` 'done' or 'diverged').

        The trial's objective value is ``value`` (final validation NLL, nats/token) when
        finite, else +inf (Optuna needs a number; the results store has the real record).
        Returns ``False`` if the lease was lost (another worker reclaimed the run).
        """
        if status not in ("done", "diverged"):
            raise ValueError(f"status {status!r}; allowed: 'done', 'diverged'")
        ok_value = value is not None and math.isfinite(value)
        attrs = {"status": status, "wall_s": wall_s, "val_nll": float(value) if ok_value else None}
        return self._set_attrs(claim.trial_id, attrs) and self._finish(
            claim.trial_id, TrialState.COMPLETE, float(value) if ok_value else math.inf)

    def fail(self, claim: Claim, error: str, *, wall_s: float, max_retries: int = MAX_RETRIES) -> bool:
        """Mark an attempt whose training raised; requeue it while retries remain.

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
        """Fail and requeue every running attempt whose lease is stale (see :mod:`harness.lease`).

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
                     "requeue": reclaims <= MAX_RECLAIMS}
            if self._set_attrs(t._trial_id, attrs) and self._finish(t._trial_id, TrialState.FAIL):
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


# ----------------------------------------------------------------------------- the worker


TrainFn = Callable[[dict, Path], Any]
FailureFn = Callable[[dict, Path, str], None]


def fmt_duration(seconds: float) -> str:
    """``41 s``, ``12 min``, ``3.4 h``."""
    if seconds < 100:
        return f"{seconds:.0f} s"
    if seconds < 6000:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _outcome(result: Any) -> tuple[str, float | None]:
    """``(status, final val NLL or None)`` from a train function's return value.

    Accepted: a status string; ``(status, val_nll)``; a mapping with ``status`` and
    optionally ``val_nll``.
    """
    if isinstance(result, str):
        return result, None
    if isinstance(result, Mapping):
        return str(result.get("status")), result.get("val_nll")
    if isinstance(result, tuple) and len(result) == 2:
        return str(result[0]), result[1]
    return repr(result), None


def work(queue: RunQueue, train_fn: TrainFn, results_dir: Path, *, on_failure: FailureFn | None = None,
         grid: str | None = None, max_runs: int | None = None, wait: bool = False, poll_s: float = 10.0,
         max_retries: int = MAX_RETRIES, beat_s: float = BEAT_S, retry_s: float = STORAGE_RETRY_S,
         log: Callable[[str], None] = print) -> Counter:
    """The worker loop: reclaim stale leases, take a run, train it, record the outcome; repeat.

    Args:
        queue: the run queue.
        train_fn: ``train_fn(config, results_dir)`` trains one run (resuming from its
            checkpoint if one exists) and returns ``'done'`` or ``'diverged'`` (or see
            :func:`_outcome`); it raises on a crash.
        results_dir: passed to ``train_fn`` and ``on_failure``.
        on_failure: ``on_failure(config, results_dir, error_text)`` records a crashed
            attempt in the results store (``harness.runner.record_failure``).
        grid: only take runs of this grid.
        max_runs: stop after this many runs (``None``: no limit).
        wait: when nothing is queued, poll every ``poll_s`` seconds instead of stopping.
        max_retries: a crashed run is retried this many times before it stays failed.
        beat_s: lease refresh interval in seconds (well below the queue's lease timeout).
        retry_s: each queue operation is retried this long while the storage is
            unreachable (:func:`retry_storage`).
        log: where the one-line progress messages go.

    Returns:
        Counter of outcomes of the runs this worker trained: 'done', 'diverged', 'failed'.

    Raises:
        StorageUnavailable: the storage stayed unreachable for ``retry_s`` seconds (a run
            being finished stays RUNNING in the queue; the next worker reclaims it).

    A ``KeyboardInterrupt`` (``harness work`` turns SIGTERM into one) releases the run
    being trained back to the queue, then propagates.
    """
    if max_runs is not None and max_runs < 1:
        raise ValueError(f"--max-runs {max_runs} must be at least 1")
    if poll_s <= 0 or beat_s <= 0:
        raise ValueError(f"poll interval ({poll_s} s) and beat interval ({beat_s} s) must be positive")
    if retry_s <= 0:
        raise ValueError(f"storage retry time {retry_s} s must be positive")

    def call(method, *args, **kwargs):
        return retry_storage(lambda: method(*args, **kwargs), where=queue.where, retry_s=retry_s, log=log)

    outcomes: Counter = Counter()
    n = 0
    while max_runs is None or n < max_runs:
        for rid, why in call(queue.reclaim_stale):
            log(f"reclaimed {rid}: {why}; queued again")
        claim = call(queue.claim, grid)
        if claim is None:
            if wait:
                time.sleep(poll_s)
                continue
            log("nothing queued" + (f" for grid {grid}" if grid else "") + "; worker stops")
            break
        n += 1
        outcomes[_train_one(queue, call, claim, train_fn, results_dir, on_failure, max_retries, beat_s,
                            log)] += 1
    return outcomes


def _train_one(queue, call, claim, train_fn, results_dir, on_failure, max_retries, beat_s, log) -> str:
    """Train one claimed run; every queue operation goes through ``call`` (retried)."""
    done, total = call(queue.progress, claim.grid)
    again = f", attempt {claim.attempt}" if claim.attempt > 1 else ""
    log(f"[{done}/{total}] start {claim.run_id} (on {claim.lease.worker}{again})")
    t0 = time.monotonic()
    heartbeat = Heartbeat(lambda: queue.beat(claim), beat_s)
    try:
        with heartbeat:
            result = train_fn(claim.config, results_dir)
        status, value = _outcome(result)
        if status == "failed":  # the train function recorded the failure itself
            raise _ReportedFailure(f"train function returned 'failed' for {claim.run_id}")
        if status not in ("done", "diverged"):
            raise ValueError(f"train function returned {status!r}; expected 'done', 'diverged' or 'failed'")
    except Exception as exc:
        wall = time.monotonic() - t0
        error = traceback.format_exc()
        if on_failure is not None and not isinstance(exc, _ReportedFailure):
            try:
                on_failure(claim.config, results_dir, error)
            except Exception as exc2:  # keep going: the queue still records the failure
                log(f"warning: recording the failure of {claim.run_id} failed: {exc2!r}")
        retried = call(queue.fail, claim, error, wall_s=wall, max_retries=max_retries)
        done, total = call(queue.progress, claim.grid)
        then = "retry queued" if retried else "no retries left"
        log(f"[{done}/{total}] failed {claim.run_id} ({fmt_duration(wall)}): "
            f"{type(exc).__name__}: {exc}; {then}")
        return "failed"
    except BaseException:
        call(queue.release, claim, "worker interrupted (KeyboardInterrupt or SIGTERM); run released")
        log(f"released {claim.run_id}: queued again; a retry resumes from its checkpoint")
        raise
    wall = time.monotonic() - t0
    if not call(queue.complete, claim, status, value=value, wall_s=wall):
        log(f"warning: {claim.run_id} finished, but its lease was lost meanwhile (another worker "
            f"reclaimed it); the result file is written, the queue keeps the other attempt")
    done, total = call(queue.progress, claim.grid)
    log(f"[{done}/{total}] {status} {claim.run_id} ({fmt_duration(wall)})")
    return status


class _ReportedFailure(RuntimeError):
    """The train function returned 'failed' (it recorded the failure itself)."""


__all__ = [
    "STUDY_NAME", "JOURNAL_NAME", "MAX_RETRIES", "MAX_RECLAIMS", "STATES", "SQLITE_REFUSED",
    "STORAGE_RETRY_S", "COMMAND_RETRY_S", "parse_storage", "NoQueue", "open_storage", "postgres_driver",
    "StorageUnavailable", "retry_storage", "describe_storage", "Claim", "RunState", "EnqueueResult", "fold",
    "RunQueue", "fmt_duration", "work",
]
