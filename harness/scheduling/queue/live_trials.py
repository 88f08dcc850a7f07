"""The run queue's storage operations whose cost does not grow with its history: reads, a claim, batched writes.

Optuna's API reads a trial with every attribute (its config JSON, lease, error text), and has
no read by attribute; reading every trial of every study for each claim made the cost of a
run grow with every trial ever stored (a claim slowed as the history grew). What a worker needs per run is smaller:

* the *live* trials (WAITING and RUNNING) of every study, light (:class:`LiveTrial`: ids,
  state, run id, grid, queue order, lease): what a claim picks from and a reclaim judges
  (:func:`live_trials`; a waiting trial is read whole once per process, then by its id);
* the trials of one run (:func:`run_trials`): is a claimed trial a second live trial of its
  run, who holds the run now;
* the run ids of one grid (:func:`grid_run_ids`): the total of its ``[done/total]`` lines for
  a grid queued before ``harness queue`` kept that count (once per worker);
* taking a WAITING trial with its lease in one step, skipping a row another worker is taking
  (:func:`take_waiting`), and several attributes of a RUNNING trial in one write
  (:func:`set_user_attrs`);
* many WAITING trials created in one transaction (:func:`create_waiting`): ``harness queue``.

On PostgreSQL they are SQL on Optuna's own tables (``trials``, ``trial_user_attributes``; the
schema of the pinned Optuna 5.0.0, written through its own models) with two partial indexes
the harness adds (:func:`ensure_indexes`). Elsewhere (the journal file, whose trials Optuna
replays into memory) they are Optuna's state-filtered ``get_all_trials(..., deepcopy=False)``.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from optuna.exceptions import UpdateFinishedTrialError
from optuna.storages import BaseStorage
from optuna.trial import FrozenTrial, TrialState

from harness.scheduling.queue.lease import Lease
from harness.scheduling.queue.trials import lease_from, order_key

LIVE_STATES = (TrialState.WAITING, TrialState.RUNNING)
RUN_INDEX = "harness_trial_run_id"  # trial_user_attributes (value_json) WHERE key = 'run_id'
LIVE_INDEX = "harness_live_trials"  # trials (state) WHERE state IN ('WAITING', 'RUNNING')
_INDEXES = {
    RUN_INDEX: "CREATE INDEX IF NOT EXISTS {name} ON trial_user_attributes (value_json) WHERE key = 'run_id'",
    LIVE_INDEX: "CREATE INDEX IF NOT EXISTS {name} ON trials (state) WHERE state IN ('WAITING', 'RUNNING')",
}
# the trials first, then each attribute by one probe of the (trial_id, key) index: a join let the
# planner start from every run id attribute (stale statistics), a cost that grows with the history
_ATTR_SQL = "(SELECT value_json FROM trial_user_attributes a WHERE a.trial_id = t.trial_id AND a.key = '{}')"
_COLUMNS_SQL = """
SELECT * FROM (
    SELECT t.trial_id, t.study_id, t.number, t.state, t.datetime_start, {attrs}
    FROM trials t WHERE {{where}}) live
WHERE live.run IS NOT NULL
""".format(
    attrs=", ".join(
        f"{_ATTR_SQL.format(key)} AS {name}"
        for key, name in (
            ("run_id", "run"),
            ("grid", "grid"),
            ("order", "ord"),
            ("lease", "lease"),
            ("ending", "ending"),
        )
    )
)
# every RUNNING trial whole (its lease changes), every WAITING one by id only: what a waiting
# trial is (run, grid, order, number) never changes, so a process reads that once (_WAITING_SQL)
# one statement, so one snapshot: a trial taken meanwhile is in one of the two halves, never in neither
_LIVE_SQL = (
    _COLUMNS_SQL.format(where="state = 'RUNNING'")
    + """UNION ALL
SELECT trial_id, NULL, NULL, state, NULL, NULL, NULL, NULL, NULL, NULL FROM trials WHERE state = 'WAITING'
"""
)
_WAITING_SQL = _COLUMNS_SQL.format(where="trial_id = ANY(:ids)")
_RUN_SQL = """
SELECT t.trial_id, t.number, t.state, t.datetime_start, t.datetime_complete, a.key, a.value_json
FROM trials t JOIN trial_user_attributes a ON a.trial_id = t.trial_id
WHERE t.study_id = :study AND t.trial_id IN (
    SELECT trial_id FROM trial_user_attributes WHERE key = 'run_id' AND value_json = :run)
"""
_GRID_SQL = """
SELECT DISTINCT r.value_json FROM trial_user_attributes r
JOIN trial_user_attributes g ON g.trial_id = r.trial_id AND g.key = 'grid' AND g.value_json = :grid
WHERE r.key = 'run_id'
"""


@dataclass(frozen=True)
class LiveTrial:
    """A WAITING or RUNNING trial of the queue, light (no config, no error text).

    Attributes:
        trial_id, study_id, number: where it is (the number is its fencing epoch).
        state: ``WAITING`` or ``RUNNING``.
        run_id, grid: its run.
        order: its queue order key (:func:`harness.scheduling.queue.trials.order_key`).
        lease: a RUNNING trial's lease (one dated at its start before it is written); ``None``
            for a WAITING trial.
        ending: its ``ending`` attribute (``duplicate``: discarded as a second live trial).
    """

    trial_id: int
    study_id: int
    number: int
    state: TrialState
    run_id: str
    grid: str
    order: tuple
    lease: Lease | None
    ending: str | None


def _postgres(storage: BaseStorage):
    """The SQLAlchemy engine of a PostgreSQL storage, else ``None``."""
    engine = getattr(storage, "engine", None)
    return engine if engine is not None and engine.dialect.name == "postgresql" else None


def ensure_indexes(storage: BaseStorage) -> None:
    """Add the two partial indexes the PostgreSQL reads use, when missing (nothing elsewhere).

    Checked in ``pg_indexes`` first, so a worker starting on a queue that has them takes no
    lock on Optuna's tables. Two processes creating one at once: the loser's error is ignored.
    """
    engine = _postgres(storage)
    if engine is None:
        return
    import sqlalchemy  # lazy: SQLAlchemy, only on PostgreSQL

    with engine.connect() as conn:
        have = {
            r[0]
            for r in conn.execute(
                sqlalchemy.text("SELECT indexname FROM pg_indexes WHERE indexname IN (:a, :b)"),
                {"a": RUN_INDEX, "b": LIVE_INDEX},
            )
        }
    for name, sql in _INDEXES.items():
        if name not in have:
            try:
                with engine.begin() as conn:
                    conn.execute(sqlalchemy.text(sql.format(name=name)))
            except sqlalchemy.exc.DBAPIError:  # created meanwhile by another process
                pass


def _light(storage: BaseStorage, t: FrozenTrial, study_id: int) -> LiveTrial:
    """The :class:`LiveTrial` of ``t``; its storage id by Optuna's public API (an in-memory lookup
    on a journal), never the private ``FrozenTrial._trial_id``."""
    ua = t.user_attrs
    started = t.datetime_start.timestamp() if t.datetime_start else None
    return LiveTrial(
        trial_id=storage.get_trial_id_from_study_id_trial_number(study_id, t.number),
        study_id=study_id,
        number=t.number,
        state=t.state,
        run_id=ua["run_id"],
        grid=ua.get("grid", ""),
        order=order_key(ua, t.number),
        lease=lease_from(ua.get("lease"), started) if t.state == TrialState.RUNNING else None,
        ending=ua.get("ending"),
    )


def live_trials(
    storage: BaseStorage, study_ids: Callable[[], Iterable[int]], waiting: dict[int, LiveTrial] | None = None
) -> list[LiveTrial]:
    """The live (WAITING, RUNNING) queue trials of the storage: of the studies ``study_ids()`` names;
    PostgreSQL: of every study.

    PostgreSQL: one query returning every RUNNING trial whole and every WAITING one by id; the
    WAITING trials not in ``waiting`` (this process's earlier reads, by trial id) are read
    whole once, by a second query, and ``waiting`` keeps the ones waiting now. Cost: the live trials, never the
    finished ones; per waiting trial one integer after its first read. Elsewhere: one pass
    over the trials in memory, without copying (``waiting`` unused).
    """
    engine = _postgres(storage)
    if engine is None:
        out = []
        for sid in study_ids():
            try:
                trials = storage.get_all_trials(sid, deepcopy=False, states=LIVE_STATES)
            except KeyError:  # deleted meanwhile (a conversion of the previous layout)
                continue
            out += [_light(storage, t, sid) for t in trials if "run_id" in t.user_attrs]
        return out
    import sqlalchemy  # lazy: SQLAlchemy, only on PostgreSQL

    known = {} if waiting is None else waiting
    running, now_waiting = [], []
    with engine.connect() as conn:
        cursor = (
            conn.connection.dbapi_connection.cursor()
        )  # the driver's plain tuples: cheap per waiting trial
        try:
            cursor.execute(_LIVE_SQL)
            for row in cursor.fetchall():
                if row[1] is None:  # a WAITING trial, by id
                    now_waiting.append(row[0])
                else:
                    running.append(_live_row(row))
        finally:
            cursor.close()
        new = [tid for tid in now_waiting if tid not in known]
        if new:
            for row in conn.execute(sqlalchemy.text(_WAITING_SQL), {"ids": new}):
                known[row[0]] = replace(_live_row(row), state=TrialState.WAITING, lease=None)
    # a waiting trial without a run id is not cached: read again next time, in case its
    # attributes were still being written
    current = {tid: known[tid] for tid in now_waiting if tid in known}
    known.clear()
    known.update(current)
    return running + list(current.values())


def _live_row(row) -> LiveTrial:
    """A :class:`LiveTrial` from one row of ``_COLUMNS_SQL``."""
    tid, sid, number, state, start, run, grid, order, lease, ending = row
    loads = json.loads
    state = _state(state)
    if state == TrialState.RUNNING:
        started = start.replace(tzinfo=dt.UTC).timestamp() if start else None  # stored naive UTC
        lease = lease_from(loads(lease) if lease else None, started)
    o = loads(order) if order else None
    return LiveTrial(
        trial_id=tid,
        study_id=sid,
        number=number,
        state=state,
        run_id=loads(run),
        grid=loads(grid) if grid else "",
        order=order_key({"order": o}, number),
        lease=lease if state == TrialState.RUNNING else None,
        ending=loads(ending) if ending else None,
    )


def _utc(naive):
    """A naive UTC datetime (how Optuna's RDB storage keeps them) as Optuna hands it out: naive local time."""
    return None if naive is None else naive.replace(tzinfo=dt.UTC).astimezone().replace(tzinfo=None)


def run_trials(storage: BaseStorage, run_id: str, study_id: int) -> list[FrozenTrial]:
    """Every trial of run ``run_id`` in study ``study_id``, by trial number: state, number, dates and
    user attributes (on PostgreSQL without params or values: read those with ``get_trial``).

    PostgreSQL: one query through the run-id index; elsewhere: one pass over the study's
    trials in memory, without copying.
    """
    engine = _postgres(storage)
    if engine is None:
        trials = storage.get_all_trials(study_id, deepcopy=False)
        return sorted((t for t in trials if t.user_attrs.get("run_id") == run_id), key=lambda t: t.number)
    import sqlalchemy  # lazy: SQLAlchemy, only on PostgreSQL

    rows: dict[int, FrozenTrial] = {}
    with engine.connect() as conn:
        result = conn.execute(sqlalchemy.text(_RUN_SQL), {"run": json.dumps(run_id), "study": study_id})
        for tid, number, state, start, complete, key, value in result:
            if tid not in rows:
                rows[tid] = FrozenTrial(
                    number=number,
                    state=_state(state),
                    value=None,
                    datetime_start=_utc(start),
                    datetime_complete=_utc(complete),
                    params={},
                    distributions={},
                    user_attrs={},
                    system_attrs={},
                    intermediate_values={},
                    trial_id=tid,
                )
            rows[tid].user_attrs[key] = json.loads(value)
    return sorted(rows.values(), key=lambda t: t.number)


def _optuna_models():
    """Optuna's SQL models (``optuna.storages._rdb.models``): no public API names its tables, and the
    PostgreSQL paths write them as Optuna does (listed in tests/tooling/test_third_party_private.py PRIVATE_USES)."""
    from optuna.storages._rdb import models  # lazy: loads SQLAlchemy, only on PostgreSQL

    return models


def _state(state) -> TrialState:
    return state if isinstance(state, TrialState) else TrialState[state]


def take_waiting(storage: BaseStorage, trial_id: int, attrs: dict) -> bool:
    """WAITING -> RUNNING for trial ``trial_id`` and set its user ``attrs`` (the lease); ``False`` when
    another process took it (or is taking it) first.

    The storage's atomic transition, the one ``Study.ask`` pops enqueued trials with. PostgreSQL:
    one transaction that locks the trial's row with ``SKIP LOCKED`` (a row another worker holds
    is skipped at once instead of waited for: many workers starting together spread over the
    queue), sets the state and start time as Optuna's ``set_trial_state_values`` does, and the
    attributes; elsewhere ``set_trial_state_values`` then one ``set_trial_user_attr`` each.
    """
    engine = _postgres(storage)
    if engine is None:
        try:
            if not storage.set_trial_state_values(trial_id, TrialState.RUNNING):
                return False
        except UpdateFinishedTrialError:
            return False
        set_user_attrs(storage, trial_id, attrs)
        return True
    from sqlalchemy.orm import Session  # lazy: SQLAlchemy, only on PostgreSQL

    models = _optuna_models()

    with Session(engine) as session, session.begin():
        trial = (
            session.query(models.TrialModel)
            .filter(models.TrialModel.trial_id == trial_id)
            .with_for_update(skip_locked=True)
            .one_or_none()
        )
        if trial is None or trial.state != TrialState.WAITING:
            return False
        trial.state = TrialState.RUNNING
        trial.datetime_start = dt.datetime.now()
        _upsert_attrs(session, trial_id, attrs)
    return True


def _upsert_attrs(session, trial_id: int, attrs: dict) -> None:
    """Optuna's PostgreSQL upsert of user attributes (``_set_trial_attr_without_commit``), all in one statement."""
    from sqlalchemy.dialects.postgresql import insert  # lazy: SQLAlchemy, only on PostgreSQL

    models = _optuna_models()

    stmt = insert(models.TrialUserAttributeModel).values(
        [{"trial_id": trial_id, "key": k, "value_json": json.dumps(v)} for k, v in attrs.items()]
    )
    session.execute(
        stmt.on_conflict_do_update(
            index_elements=["trial_id", "key"], set_={"value_json": stmt.excluded.value_json}
        )
    )


def set_user_attrs(storage: BaseStorage, trial_id: int, attrs: dict) -> None:
    """Set several user attributes of a RUNNING trial: on PostgreSQL in one transaction holding the
    trial's row lock, as Optuna's ``set_trial_user_attr`` does for one (same upsert); elsewhere
    one ``set_trial_user_attr`` each.

    Raises:
        UpdateFinishedTrialError: the trial is finished (nothing written).
    """
    engine = _postgres(storage)
    if engine is None:
        for k, v in attrs.items():
            storage.set_trial_user_attr(trial_id, k, v)
        return
    from sqlalchemy.orm import Session  # lazy: SQLAlchemy, only on PostgreSQL

    models = _optuna_models()

    with Session(engine) as session, session.begin():
        trial = models.TrialModel.find_or_raise_by_id(trial_id, session, for_update=True)
        if trial.state.is_finished():
            raise UpdateFinishedTrialError(f"trial {trial_id} is already finished ({trial.state.name})")
        _upsert_attrs(session, trial_id, attrs)


def grid_run_ids(storage: BaseStorage, grid: str, study_ids: Callable[[], Iterable[int]]) -> set[str]:
    """The run ids of every trial of ``grid`` (any state; of the studies ``study_ids()`` names, on
    PostgreSQL of every study): one read of its history (once per worker)."""
    engine = _postgres(storage)
    if engine is None:
        out = set()
        for sid in study_ids():
            try:
                trials = storage.get_all_trials(sid, deepcopy=False)
            except KeyError:
                continue
            out |= {
                t.user_attrs["run_id"]
                for t in trials
                if "run_id" in t.user_attrs and t.user_attrs.get("grid") == grid
            }
        return out
    import sqlalchemy  # lazy: SQLAlchemy, only on PostgreSQL

    with engine.connect() as conn:
        return {
            json.loads(r[0]) for r in conn.execute(sqlalchemy.text(_GRID_SQL), {"grid": json.dumps(grid)})
        }


def create_waiting(
    storage: BaseStorage, study_id: int, templates: list[FrozenTrial], study_attrs: dict | None = None
) -> list[int]:
    """Create one WAITING trial per template in study ``study_id``, then set the study's user
    attributes ``study_attrs``; returns the trials' ids, in order.

    PostgreSQL: all in one transaction holding the study's row lock, as Optuna's
    ``create_new_trial`` does for one (trial numbers are the count of the study's earlier
    trials, its rule), so 2,000 runs queue in about a second rather than half a minute, and
    no reader sees the new trials without the attributes. Templates with parameters (a tuning
    trial's drawn ones), and other storages: one ``create_new_trial`` each, then the attributes.
    """
    engine = _postgres(storage)
    if engine is None or any(t.params for t in templates):
        ids = [storage.create_new_trial(study_id, template_trial=t) for t in templates]
        for key, value in (study_attrs or {}).items():
            storage.set_study_user_attr(study_id, key, value)
        return ids
    import sqlalchemy  # lazy: SQLAlchemy, only on PostgreSQL
    from sqlalchemy.dialects.postgresql import insert  # lazy: SQLAlchemy, only on PostgreSQL

    models = _optuna_models()

    trials, attrs = models.TrialModel.__table__, models.TrialUserAttributeModel.__table__
    with engine.begin() as conn:  # Core executemany: batched INSERTs, not one ORM object per row
        study = models.StudyModel.__table__
        if (
            conn.execute(
                sqlalchemy.select(study.c.study_id).where(study.c.study_id == study_id).with_for_update()
            ).first()
            is None
        ):
            raise KeyError(f"no study with id {study_id}")
        base = conn.execute(
            sqlalchemy.select(sqlalchemy.func.count())
            .select_from(trials)
            .where(trials.c.study_id == study_id)
        ).scalar_one()
        ids = list(
            conn.execute(
                trials.insert().returning(trials.c.trial_id, sort_by_parameter_order=True),
                [
                    {"number": base + i, "study_id": study_id, "state": TrialState.WAITING}
                    for i in range(len(templates))
                ],
            ).scalars()
        )
        if ids != sorted(
            ids
        ):  # numbers follow trial ids (Optuna's rule): refuse an insert that reordered them
            raise RuntimeError(f"trial ids of a batch came back out of order: {ids[:5]} ...")
        conn.execute(
            attrs.insert(),
            [
                {"trial_id": tid, "key": k, "value_json": json.dumps(v)}
                for tid, t in zip(ids, templates)
                for k, v in t.user_attrs.items()
            ],
        )
        table = models.StudyUserAttributeModel.__table__
        for key, value in (study_attrs or {}).items():  # Optuna's upsert of a study attribute
            row = insert(table).values(study_id=study_id, key=key, value_json=json.dumps(value))
            conn.execute(
                row.on_conflict_do_update(
                    index_elements=[table.c.study_id, table.c.key],
                    set_={"value_json": row.excluded.value_json},
                )
            )
    return ids


__all__ = [
    "LIVE_STATES",
    "LiveTrial",
    "ensure_indexes",
    "live_trials",
    "run_trials",
    "take_waiting",
    "set_user_attrs",
    "grid_run_ids",
    "create_waiting",
]
