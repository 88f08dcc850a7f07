"""What a queue trial says: the records the queue hands out, and one run's trials folded into its state.

A trial is one attempt at a run (:mod:`harness.scheduling.queue.run_queue`: where the trials live). It
carries, as user attributes, the run's id (its *cell tag*), grid name, variant, role, seed, size,
budget_tokens, run config (the JSON of :meth:`harness.design.config.RunConfig.to_dict`), attempt counters
and, while it trains, the worker's lease (:mod:`harness.scheduling.queue.lease`). How a run ends:

    done       COMPLETE, value = the run's final validation NLL (nats/token), user attr ``val_nll``
    diverged   FAIL with user attrs ``status = "diverged"`` and the reason in ``error``
    pruned     PRUNED (a tuning trial stopped by its study's pruner, :mod:`harness.scheduling.tuning`)
    failed     FAIL with the error (``ending = "failed"``), retried while retries remain

A run's state is read from all trials with its tag:

    done / diverged / pruned   some trial ended so (above)
    running                    some trial is RUNNING
    queued                     some trial is WAITING, or the last one failed and asked to be requeued
    failed                     the last trial FAILed and asked for no retry

A trial discarded as a second live trial of its run (user attr ``ending = "duplicate"``,
:mod:`harness.scheduling.queue.run_queue`) does not count. A new attempt's trial is built by
:func:`attempt_template`; what an attempt's ending writes on its trial by :func:`finished_record`,
:func:`failed_record`, :func:`released_record` and :func:`reclaimed_record`; why a claim no longer holds
its run is read from the run's trials by :func:`lease_lost_reason`. Nothing here reads or writes a storage.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from optuna.distributions import json_to_distribution
from optuna.trial import FrozenTrial, TrialState, create_trial

from harness.common.terms import ERROR_CHARS, FINISHED, is_tune_grid
from harness.design.config import RunConfig
from harness.scheduling.queue.lease import Lease


@dataclass(frozen=True)
class Claim:
    """A run this worker has taken (its trial is RUNNING under this worker's lease).

    Attributes:
        trial_id: Optuna trial id of this attempt.
        run_id: the cell tag, ``grid:size:variant:s<seed>:<budget>``.
        grid: grid name (``tune:NAME`` for a tuning trial: :attr:`tuning`).
        config: the run (see :meth:`harness.scheduling.grids.grid.Grid.expand`).
        attempt: 1 for the first attempt, then 2, 3, ...
        failures: attempts of this run whose training raised, so far.
        reclaims: attempts of this run lost to a dead worker, so far.
        lease: the lease taken (its ``epoch`` is :attr:`epoch`).
        epoch: the fencing number of this attempt (:mod:`harness.train.fencing`): the trial's
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

    @property
    def tuning(self) -> bool:
        """Whether this is a tuning trial (its evaluations feed the study's pruner)."""
        return is_tune_grid(self.grid)


@dataclass(frozen=True)
class RunState:
    """The queue's view of one run (all its trials folded together).

    Attributes:
        run_id, grid: as in the run config.
        state: one of :data:`harness.common.terms.STATUSES`.
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
    """What :meth:`RunQueue.enqueue <harness.scheduling.queue.run_queue.RunQueue.enqueue>` did, by run id."""

    added: list[str] = field(default_factory=list)
    present: list[str] = field(default_factory=list)  # queued, running, done or diverged already
    failed: list[str] = field(default_factory=list)  # failed and left alone (retry_failed=False)
    retried: list[str] = field(default_factory=list)  # failed and queued again (retry_failed=True)


def is_duplicate(t: FrozenTrial) -> bool:
    """Whether trial ``t`` was discarded as a second live trial of its run (``ending = "duplicate"``)."""
    return t.user_attrs.get("ending") == "duplicate"


def lease_of(t: FrozenTrial) -> Lease:
    """Trial ``t``'s lease (its ``lease`` attribute; before that is written, one dated at its start, host ``""``)."""
    return lease_from(t.user_attrs.get("lease"), t.datetime_start.timestamp() if t.datetime_start else None)


def lease_from(d: dict | None, started: float | None) -> Lease:
    """A trial's lease from its ``lease`` attribute ``d``, or, before that is written, one dated at
    the trial's start ``started`` (unix seconds; now if unknown), host ``""``."""
    if d:
        return Lease.from_dict(d)
    start = time.time() if started is None else started
    return Lease(host="", pid=0, since=start, beat=start)  # popped, lease not yet written


def config_of(trial: FrozenTrial) -> RunConfig:
    """The run config ``trial`` carries (its ``config`` attribute)."""
    return RunConfig.from_dict(json.loads(trial.user_attrs["config"]))


def ended_as(t: FrozenTrial) -> str | None:
    """``done``, ``diverged`` or ``pruned`` if trial ``t`` ended its run so, else ``None``.

    A COMPLETE trial is ``done`` (a previous-layout trial says ``diverged`` in its
    ``status`` attribute); a diverged run is a FAIL trial with ``status = "diverged"``. A FAIL
    trial saying ``done`` or ``pruned`` is one whose worker wrote its outcome while another
    reclaimed it (the reclaimer's FAIL went through first): the run was requeued, and its next
    attempt reports the result file the worker wrote.
    """
    if t.state == TrialState.COMPLETE:
        return t.user_attrs.get("status", "done")
    if t.state == TrialState.PRUNED:
        return "pruned"
    if t.state == TrialState.FAIL and t.user_attrs.get("status") == "diverged":
        return "diverged"
    return None


def fold(trials: list[FrozenTrial]) -> RunState:
    """Fold all trials of one run (same ``run_id`` tag) into its :class:`RunState`."""
    real = sorted((t for t in trials if not is_duplicate(t)), key=lambda t: t.number) or sorted(
        trials, key=lambda t: t.number
    )
    last = real[-1]
    ua = last.user_attrs
    base = dict(run_id=ua["run_id"], grid=ua["grid"], config=config_of(last), trials=tuple(trials))
    ended = [t for t in real if ended_as(t)]
    if ended:
        t = ended[0]
        return RunState(
            state=ended_as(t),
            attempt=t.user_attrs.get("attempt", 1),
            wall_s=t.user_attrs.get("wall_s"),
            value=t.user_attrs.get("val_nll"),
            error=t.user_attrs.get("error") if ended_as(t) == "diverged" else None,
            **base,
        )
    running = [t for t in real if t.state == TrialState.RUNNING]
    if running:
        t = running[0]
        return RunState(state="running", attempt=t.user_attrs.get("attempt", 1), lease=lease_of(t), **base)
    waiting = [t for t in real if t.state == TrialState.WAITING]
    error = next((t.user_attrs["error"] for t in reversed(real) if t.user_attrs.get("error")), None)
    if waiting:
        return RunState(state="queued", attempt=waiting[0].user_attrs.get("attempt", 1), error=error, **base)
    if ua.get("requeue"):
        return RunState(state="queued", attempt=ua.get("attempt", 1), error=error, pending=True, **base)
    return RunState(
        state="failed", attempt=ua.get("attempt", 1), error=error, wall_s=ua.get("wall_s"), **base
    )


def superseded(trials: list[FrozenTrial], number: int) -> bool:
    """Whether the attempt ``number`` of a run (among its ``trials``) is a second live trial of it: another
    attempt ended the run, or an earlier one is live (the one with the lowest number is kept)."""
    return any(
        ended_as(s) or (s.state in (TrialState.WAITING, TrialState.RUNNING) and s.number < number)
        for s in trials
        if s.number != number and not is_duplicate(s)
    )


def finished_record(
    status: str, value: float | None, wall_s: float, error: str | None
) -> tuple[TrialState, dict, float | None]:
    """``(state, user attributes, value)`` of a trial whose run finished with ``status``: ``done`` a
    COMPLETE trial whose value is the final validation NLL ``value`` (nats/token; +inf with ``val_nll``
    None when it is not finite); ``diverged`` a FAIL trial with the reason ``error``, not requeued;
    ``pruned`` a PRUNED trial.

    Raises:
        ValueError: ``status`` is not one of :data:`~harness.common.terms.FINISHED`.
    """
    if status not in FINISHED:
        raise ValueError(f"status {status!r}; allowed: {', '.join(map(repr, FINISHED))}")
    ok_value = value is not None and math.isfinite(value)
    attrs = {"status": status, "wall_s": wall_s, "val_nll": float(value) if ok_value else None}
    state = {"done": TrialState.COMPLETE, "pruned": TrialState.PRUNED}.get(status, TrialState.FAIL)
    if state == TrialState.FAIL:
        attrs.update(error=(error or status)[-ERROR_CHARS:], ending=status, requeue=False)
    return state, attrs, (float(value) if ok_value else math.inf) if state == TrialState.COMPLETE else None


def failed_record(failures: int, error: str, wall_s: float, requeue: bool) -> dict:
    """The user attributes of an attempt whose training raised (a FAIL trial): the error's tail
    (:data:`~harness.common.terms.ERROR_CHARS`), the run's ``failures`` with this one, and ``requeue``."""
    return {
        "error": error[-ERROR_CHARS:],
        "ending": "failed",
        "failures": failures,
        "wall_s": wall_s,
        "requeue": requeue,
    }


def released_record(reason: str) -> dict:
    """The user attributes of an attempt given back unfinished (a FAIL trial, requeued, no retry counted)."""
    return {"error": reason, "ending": "released", "requeue": True}


def reclaimed_record(reclaims: int, why: str, requeue: bool, by: str) -> dict:
    """The user attributes of an attempt whose lease went stale (``why``), reclaimed by the worker ``by``
    (``host:pid``): the run's ``reclaims`` with this one, and ``requeue``."""
    return {
        "error": f"lease expired: {why}",
        "ending": "reclaimed",
        "reclaims": reclaims,
        "requeue": requeue,
        "reclaimed_by": by,
    }


def lease_lost_reason(claim: Claim, trial: FrozenTrial, later: list[FrozenTrial] | None) -> str | None:
    """Why ``claim`` no longer holds its run (who holds it now), or ``None`` while it does: its ``trial`` is
    still RUNNING under the claim's lease (same host, pid and epoch). ``later``: the run's attempts after
    the claim's, duplicates left out (needed once ``trial`` is no longer RUNNING)."""
    if trial.state == TrialState.RUNNING:
        lease = lease_of(trial)
        if (lease.host, lease.pid) == (claim.lease.host, claim.lease.pid) and lease.epoch in (
            None,
            claim.epoch,
        ):
            return None
        return f"lease lost to {lease.worker} (epoch {claim.epoch})"
    later = later or []
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


def orphans(failed: list[FrozenTrial], run_id: str | None = None) -> dict[str, FrozenTrial]:
    """``{run id: its latest failed attempt}`` among the FAIL trials ``failed`` of one study, for each run
    (or only ``run_id``) whose latest failed attempt asked to be requeued: the runs whose next attempt may
    never have been created (a process that died between the two steps)."""
    asking = {}
    for t in sorted(failed, key=lambda t: t.number):
        rid = t.user_attrs.get("run_id")
        if rid is not None and not is_duplicate(t) and (run_id is None or rid == run_id):
            asking[rid] = t
    return {rid: t for rid, t in asking.items() if t.user_attrs.get("requeue")}


def queue_order(t: FrozenTrial) -> tuple:
    """Queue order: the run's original enqueue position, then trial number (retries keep their slot)."""
    return order_key(t.user_attrs, t.number)


def order_key(user_attrs: dict, number: int) -> tuple:
    """:func:`queue_order` of a trial with these user attributes and this number."""
    o = user_attrs.get("order") or [0.0, 0]
    return (float(o[0]), int(o[1]), number)


# Trial attributes a retry carries over: a tuning trial's drawn parameters stay those of its run.
CARRIED_ATTRS = ("tune_pending", "tune_params", "tune_distributions")


def attempt_template(
    config: RunConfig,
    *,
    attempt: int,
    failures: int,
    reclaims: int,
    order: list,
    carried: Mapping[str, Any] | None = None,
) -> FrozenTrial:
    """The WAITING trial (Optuna's template, for ``create_new_trial``) of an attempt at ``config``'s run.

    ``attempt``, ``failures``, ``reclaims``: the attempt's counters; ``order``: its slot in the
    queue (``[queued_at seconds, index]``). ``carried``: attributes of the run's previous attempt
    (:data:`CARRIED_ATTRS`); a tuning trial's drawn parameters become the new trial's parameters too.
    """
    attrs = {
        "run_id": config.run_id,
        "grid": config.grid,
        "variant": config.variant,
        "role": config.role,
        "seed": config.seed,
        "size": config.size,
        "budget_tokens": config.budget_tokens,
        "config": json.dumps(config.to_dict(), sort_keys=True),
        "attempt": attempt,
        "failures": failures,
        "reclaims": reclaims,
        "order": order,
        **(carried or {}),
    }
    params, distributions = {}, {}
    if attrs.get("tune_params") and attrs.get("tune_distributions"):
        params = dict(attrs["tune_params"])
        distributions = {k: json_to_distribution(v) for k, v in attrs["tune_distributions"].items()}
    return create_trial(
        state=TrialState.WAITING, user_attrs=attrs, params=params, distributions=distributions
    )


__all__ = [
    "CARRIED_ATTRS",
    "attempt_template",
    "Claim",
    "RunState",
    "EnqueueResult",
    "is_duplicate",
    "lease_of",
    "lease_from",
    "config_of",
    "ended_as",
    "fold",
    "superseded",
    "finished_record",
    "failed_record",
    "released_record",
    "reclaimed_record",
    "lease_lost_reason",
    "orphans",
    "queue_order",
    "order_key",
]
