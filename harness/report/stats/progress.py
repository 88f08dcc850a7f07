"""How far a grid has got: the queue's view of its runs next to the results store's.

A report must never claim that every run of a grid finished when some are still queued,
running, failed or unreadable (DESIGN section 6: divergence and missing runs are
outcomes). The store only holds finished runs; the queue (Optuna storage, read by
``harness report``) knows the rest. This module takes the queue's view as a plain
input, so it depends on neither the queue nor the store:

    queue: {run_id: QueuedRun(state, variant, role, seed, size, budget_tokens, error)}
           (or {run_id: state}); None where the queue was not found or not read.

and folds it with the store's ``runs`` frame (and the store's unreadable result files)
into one :class:`GridProgress`: a state per run, counts, and whether the grid is
complete. :mod:`harness.report.render.sections` words it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import unquote

import polars as pl

from harness.report.stats.pairing import of_grid

# Run states, in the order the report lists them. The first five are the queue's
# (harness.common.terms.STATUSES); the last two exist only where queue and store disagree.
DONE, DIVERGED, FAILED, RUNNING, QUEUED = "done", "diverged", "failed", "running", "queued"
NOT_IN_STORE = "finished, result not in the store"  # the queue says finished; no readable result yet
UNREADABLE = "result file unreadable"  # the store skipped its result file (ingest error)
STATES = (DONE, DIVERGED, FAILED, RUNNING, QUEUED, NOT_IN_STORE, UNREADABLE)
FINISHED = (DONE, DIVERGED, FAILED)
_QUEUE_STATES = (QUEUED, RUNNING, DONE, DIVERGED, FAILED)


@dataclass(frozen=True, slots=True)
class QueuedRun:
    """One run as the queue sees it (``state`` one of queued, running, done, diverged, failed)."""

    state: str
    variant: str | None = None
    role: str | None = None
    seed: int | None = None
    size: str | None = None
    budget_tokens: int | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class RunProgress:
    """One run of the grid: its state (one of :data:`STATES`) and where that came from."""

    run_id: str
    state: str
    variant: str | None
    role: str | None
    seed: int | None
    size: str | None
    budget_tokens: int | None
    detail: str = ""  # error text or why queue and store disagree


@dataclass(frozen=True, slots=True)
class GridProgress:
    """Every run of one grid known to the queue or the store, with its state.

    ``queue_found`` is False where the queue was not read; ``queue_note`` says why (e.g.
    "no queue journal at results/queue.journal"). ``complete`` is True only when the queue
    was read, nothing is queued or running, and every finished run's result is readable
    in the store: only then may a report say that every run finished.
    """

    runs: tuple[RunProgress, ...]
    queue_found: bool
    queue_note: str = ""

    @property
    def counts(self) -> Counter:
        """State -> number of runs (every state of :data:`STATES` present, zeros included)."""
        c = Counter({s: 0 for s in STATES})
        c.update(r.state for r in self.runs)
        return c

    @property
    def total(self) -> int:
        return len(self.runs)

    @property
    def complete(self) -> bool:
        c = self.counts
        return self.queue_found and self.total > 0 and sum(c[s] for s in FINISHED) == self.total

    def variants(self, role: str | None = None) -> list[str]:
        """Variants of the grid's runs (optionally of one role), in first-seen order."""
        out: list[str] = []
        for r in self.runs:
            if r.variant and r.variant not in out and (role is None or r.role == role):
                out.append(r.variant)
        return out

    def of_variant(self, variant: str) -> Counter:
        c = Counter({s: 0 for s in STATES})
        c.update(r.state for r in self.runs if r.variant == variant)
        return c


def _as_queued(value: QueuedRun | str | Mapping) -> QueuedRun:
    if isinstance(value, QueuedRun):
        q = value
    elif isinstance(value, str):
        q = QueuedRun(value)
    else:
        q = QueuedRun(**{k: value.get(k) for k in QueuedRun.__slots__})
    if q.state not in _QUEUE_STATES:
        raise ValueError(f"queue state {q.state!r} not understood; allowed: {', '.join(_QUEUE_STATES)}")
    return q


def unreadable_run_ids(unreadable: pl.DataFrame | None) -> dict[str, str]:
    """``{run_id: error}`` of the result files the store could not read.

    Args:
        unreadable: rows of the store's ``ingest_log`` with an error (columns ``file``,
            ``error``); a file name is the percent-quoted run id plus ``.json``
            (:func:`harness.store.validate.result_filename`).
    """
    if unreadable is None or unreadable.height == 0:
        return {}
    return {
        unquote(file[:-5] if file.endswith(".json") else file): str(error)
        for file, error in unreadable.select("file", "error").iter_rows()
    }


def _queue_states(
    queue: Mapping[str, QueuedRun | str | Mapping], stored: dict[str, dict], unreadable: dict[str, str]
) -> dict[str, RunProgress]:
    """The runs of ``queue`` whose outcome the store lacks (``stored``: run id -> its ``runs`` row), in
    queue order, each in the queue's state (a run the queue calls done or diverged: :data:`UNREADABLE`
    when its file was skipped, else :data:`NOT_IN_STORE`)."""
    out: dict[str, RunProgress] = {}
    for rid, value in queue.items():  # queue order first: the grid's own order
        q = _as_queued(value)
        s = stored.get(rid)
        if s is not None and (s["status"] in (DONE, DIVERGED) or q.state in FINISHED):
            continue  # the stored result is the outcome
        state, detail = q.state, q.error or ""
        if s is not None:  # stored as failed, queued again or running: the queue is newer
            detail = f"an earlier attempt failed: {s.get('error') or 'no error text'}"
        elif state in (DONE, DIVERGED):  # a failed run is an outcome; its error is the queue's
            state, detail = (
                (UNREADABLE, unreadable[rid])
                if rid in unreadable
                else (NOT_IN_STORE, f"the queue says {q.state}; no result file ingested yet")
            )
        out[rid] = RunProgress(
            run_id=rid,
            state=state,
            variant=q.variant,
            role=q.role,
            seed=q.seed,
            size=q.size,
            budget_tokens=q.budget_tokens,
            detail=detail,
        )
    return out


def grid_progress(
    runs: pl.DataFrame,
    queue: Mapping[str, QueuedRun | str | Mapping] | None,
    *,
    grid: str | None = None,
    queue_note: str = "",
    unreadable: Mapping[str, str] | None = None,
) -> GridProgress:
    """Fold the store's runs and the queue's view into one state per run.

    Args:
        runs: the store's ``runs`` frame (run_id, variant, role, seed, size, budget_tokens,
            status [, error, grid]); rows of other grids are dropped when ``grid`` is given.
        queue: ``{run_id: QueuedRun | state | {"state": ..., "variant": ...}}`` of this grid,
            or None where the queue was not found (``queue_note`` says why).
        unreadable: ``{run_id: error}`` of result files the store skipped (any grid): those of
            this grid's runs count, and those whose run id starts with ``GRID:`` (the run-id
            form of :func:`harness.common.terms.run_id`) where the queue does not list them.

    A stored result (done, diverged, or failed while the queue agrees) is the outcome; a
    run stored as failed that the queue has queued or running again takes the queue's
    state; a run the queue calls done or diverged but the store lacks is :data:`UNREADABLE`
    (its result file was skipped) or :data:`NOT_IN_STORE` (not ingested yet). Runs are listed
    in queue order, then the store's other runs.

    Raises:
        ValueError: a queue state outside queued, running, done, diverged, failed.
    """
    runs = of_grid(runs, grid)
    unreadable = dict(unreadable or {})
    stored = {r["run_id"]: r for r in runs.iter_rows(named=True)}
    out = _queue_states(queue or {}, stored, unreadable)
    for rid, r in stored.items():
        if rid in out:
            continue
        status = r["status"] if r["status"] in FINISHED else RUNNING if r["status"] == RUNNING else QUEUED
        out[rid] = RunProgress(
            run_id=rid,
            state=status,
            variant=r["variant"],
            role=r["role"],
            seed=r["seed"],
            size=r["size"],
            budget_tokens=r["budget_tokens"],
            detail=r.get("error") or "",
        )
    if queue:  # keep the queue's order, with the store's outcome where it has one
        order = {rid: i for i, rid in enumerate(queue)}
        out = dict(sorted(out.items(), key=lambda kv: order.get(kv[0], len(order))))
    for rid, error in unreadable.items():
        if rid not in out and grid is not None and rid.startswith(f"{grid}:"):
            out[rid] = RunProgress(
                run_id=rid,
                state=UNREADABLE,
                variant=None,
                role=None,
                seed=None,
                size=None,
                budget_tokens=None,
                detail=error,
            )
    return GridProgress(tuple(out.values()), queue is not None, queue_note)
