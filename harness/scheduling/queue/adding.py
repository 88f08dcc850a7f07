"""Adding runs to the queue (DESIGN sections 1.1 and 9): which of a grid's runs become new attempts, and an
imported archive's runs as they ended.

:meth:`RunQueue.enqueue <harness.scheduling.queue.run_queue.RunQueue.enqueue>` is idempotent: a run
already queued, running, done or diverged is left alone, a failed run is queued again only when asked,
and a run id already queued with another config is refused, naming the keys that differ (a run id names
one config). :meth:`RunQueue.restore <harness.scheduling.queue.run_queue.RunQueue.restore>` adds an
archive's runs in the state they ended in (:data:`RESTORED_STATES`). The queue writes what is planned
here, under each grid's lock (:func:`~harness.scheduling.queue.storage.grid_lock`); what a new trial
holds: :func:`harness.scheduling.queue.trials.attempt_template`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from optuna.trial import FrozenTrial, TrialState, create_trial

from harness.common.terms import config_diff, queue_order_key
from harness.design.config import RunConfig
from harness.scheduling.queue.trials import EnqueueResult, RunState, attempt_template

#: How an imported run's state is recorded (``queued`` and ``running``: WAITING, queued again here).
RESTORED_STATES = {
    "done": TrialState.COMPLETE,
    "pruned": TrialState.PRUNED,
    "diverged": TrialState.FAIL,
    "failed": TrialState.FAIL,
}


def check_unique(configs: list[RunConfig]) -> None:
    """Refuse a list of configs to enqueue in which two share a run id.

    Raises:
        ValueError: ``run id 'ID' appears twice in the configs to enqueue``.
    """
    ids = [c.run_id for c in configs]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise ValueError(f"run id {dup!r} appears twice in the configs to enqueue")


def check_unchanged(
    existing: Mapping[str, RunState], configs: list[RunConfig], ignore: tuple[str, ...]
) -> None:
    """Refuse configs whose run id is already in the queue (``existing``, not failed) with another config.

    Args:
        ignore: last key parts not compared (``("corpus",)``: the caller checked that the corpus is the
            same text by its fingerprint, given by another path or a reference).

    Raises:
        ValueError: the first three such runs with the keys that differ, and how many more.
    """
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


def plan_attempts(
    existing: Mapping[str, RunState],
    configs: list[RunConfig],
    *,
    retry_failed: bool,
    attrs: Mapping[str, Any] | None,
    queued_at: float,
) -> tuple[EnqueueResult, list[tuple[RunConfig, FrozenTrial]]]:
    """What :meth:`~harness.scheduling.queue.run_queue.RunQueue.enqueue` adds: each config's run sorted into
    added / present / retried / failed, and the WAITING trial of each run to add, in the configs' order
    (its slot in the queue: ``[queued_at, index]``; ``attrs``: carried user attributes).

    A new run starts at attempt 1; a failed run queued again (``retry_failed``) takes the next attempt
    number with its failure and reclaim counts reset.
    """
    result, new = EnqueueResult(), []
    for index, c in enumerate(configs):
        r = existing.get(c.run_id)
        if r is not None and r.state != "failed":
            result.present.append(c.run_id)
        elif r is not None and not retry_failed:
            result.failed.append(c.run_id)
        else:
            attempt = 1 if r is None else r.attempt + 1
            template = attempt_template(
                c, attempt=attempt, failures=0, reclaims=0, order=[queued_at, index], carried=attrs
            )
            new.append((c, template))
            (result.added if r is None else result.retried).append(c.run_id)
    return result, new


def restore_order(runs: list[dict]) -> list[dict]:
    """An archive's runs (``queue.json`` entries) by role, variant, then seed numerically (s2 before s10):
    the order ``harness status`` and a report list them."""
    return sorted(runs, key=lambda r: queue_order_key(r["config"]["role"], r["config"]["run_id"]))


def restored_trial(config: RunConfig, run: Mapping[str, Any], index: int) -> FrozenTrial:
    """The trial of an imported run (an archive's ``queue.json`` entry ``run``) in the state it ended:
    ``done`` a COMPLETE trial (value ``val_nll``, +inf when none), ``diverged`` and ``failed`` FAIL trials
    not requeued, ``pruned`` PRUNED, ``queued`` and ``running`` a WAITING trial (no worker here holds it);
    slot ``[0, index]`` in the queue."""
    t = attempt_template(config, attempt=run.get("attempt") or 1, failures=0, reclaims=0, order=[0.0, index])
    state = RESTORED_STATES.get(run["state"], TrialState.WAITING)
    attrs = dict(t.user_attrs)
    if state != TrialState.WAITING:
        attrs.update(status=run["state"], wall_s=run.get("wall_s"), val_nll=run.get("val_nll"))
    if state == TrialState.FAIL:
        attrs.update(error=run.get("error") or run["state"], ending=run["state"], requeue=False)
    value = run.get("val_nll")
    values = [math.inf if value is None else value] if state == TrialState.COMPLETE else None
    return create_trial(state=state, values=values, user_attrs=attrs)


__all__ = [
    "RESTORED_STATES",
    "check_unique",
    "check_unchanged",
    "plan_attempts",
    "restore_order",
    "restored_trial",
]
