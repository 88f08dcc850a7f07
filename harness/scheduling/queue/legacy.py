"""Convert a queue of the previous layout (one study ``"harness"`` for every grid) into one
study per grid, the layout :mod:`harness.scheduling.queue.run_queue` writes; run by ``harness migrate``
(:mod:`harness.commands.migrate`) only, never implicitly. The only module that reads the previous
layout: every other command refuses it (:meth:`RunQueue.open <harness.scheduling.queue.run_queue.RunQueue.open>`).

A conversion copies every trial of the old study into its grid's study and then deletes the old
study. It runs only while none of the old study's runs is running (a worker of an older harness
may be writing to it); a queued run is copied as queued. A copied trial carries
``converted_from`` (its number in the old study), so a conversion cut short is finished by the
next one without copying a trial twice. Copies follow the new layout: a done run's value is its
final validation NLL (from ``values``, e.g. the result files; else the old trial's), a diverged
run is a FAIL trial with its reason.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from optuna.trial import FrozenTrial, TrialState

from harness.scheduling.queue.lease import stale_reason
from harness.scheduling.queue.run_queue import LEGACY_STUDY, RunQueue
from harness.scheduling.queue.trials import fold, lease_from
from harness.store.store import Store


def _copy(t: FrozenTrial, value: float | None) -> FrozenTrial:
    """The new-layout template of old trial ``t`` (``value``: the run's final NLL if known)."""
    ua = dict(t.user_attrs, converted_from=t.number)
    state, values = t.state, t.values
    if t.state == TrialState.RUNNING:  # its worker is gone (a stale lease): queued again, resuming
        state = TrialState.WAITING
        ua.pop("lease", None)
    if t.state == TrialState.COMPLETE:
        status = ua.get("status", "done")
        nll = value if value is not None else ua.get("val_nll")
        if status == "done" and nll is not None and math.isfinite(nll):
            ua["val_nll"], values = float(nll), [float(nll)]
        else:  # diverged, or done without a known NLL: not a ranked value
            state, values = TrialState.FAIL, None
            ua.update(
                ending=status,
                requeue=False,
                error=ua.get("error")
                or (
                    status
                    if status != "done"
                    else "done; final validation NLL not found when the queue was converted"
                ),
            )
    return FrozenTrial(
        number=0,
        state=state,
        value=None,
        values=values,
        datetime_start=t.datetime_start,
        datetime_complete=t.datetime_complete,
        params=t.params,
        distributions=t.distributions,
        user_attrs=ua,
        system_attrs={},
        intermediate_values=t.intermediate_values,
        trial_id=0,
    )


def _held(trials: list[FrozenTrial], queue: RunQueue, now: float) -> bool:
    """A run of the old study is running under a fresh lease (a worker of an older harness may be
    training it); a running trial whose lease is stale is copied as queued (:func:`_copy`)."""
    if fold(trials).state != "running":
        return False
    for t in trials:
        if t.state == TrialState.RUNNING:
            started = t.datetime_start.timestamp() if t.datetime_start else None
            lease = lease_from(t.user_attrs.get("lease"), started)
            if stale_reason(lease, now=now, timeout_s=queue.lease_timeout_s, host=queue.host) is None:
                return True
    return False


def convert(
    queue: RunQueue,
    *,
    values: Callable[[str], float | None] | None = None,
    log: Callable[[str], None] = print,
) -> int:
    """Convert the old study of ``queue``'s storage, if there is one and it is idle.

    Args:
        queue: the queue (its storage is converted).
        values: ``values(run_id)`` -> the run's final validation NLL (nats/token) or None.
        log: where the one-line messages go.

    Returns:
        The number of trials copied (0: nothing to convert, or not idle; the message says which).
    """
    storage = queue.storage
    try:
        sid = storage.get_study_id_from_name(LEGACY_STUDY)
    except KeyError:
        return 0
    old = [t for t in storage.get_all_trials(sid) if "run_id" in t.user_attrs]
    by_run: dict[str, list[FrozenTrial]] = {}
    for t in old:
        by_run.setdefault(t.user_attrs["run_id"], []).append(t)
    now = time.time()
    busy = [rid for rid, ts in by_run.items() if _held(ts, queue, now)]
    if busy:
        log(
            f"queue of the previous layout (one study {LEGACY_STUDY!r} for every grid): {len(busy)} of its "
            "runs are running (a worker of an older harness?); run `harness migrate` again once they end"
        )
        return 0
    copied, grids = 0, set()
    for rid, trials in by_run.items():
        grid = trials[0].user_attrs["grid"]
        target = queue.study_of(grid)
        have = {
            t.user_attrs.get("converted_from")
            for t in storage.get_all_trials(target)
            if t.user_attrs.get("run_id") == rid
        }
        value = values(rid) if values is not None else None
        for t in sorted(trials, key=lambda x: x.number):
            if t.number not in have:
                storage.create_new_trial(target, template_trial=_copy(t, value))
                copied += 1
        grids.add(grid)
    storage.delete_study(sid)
    log(
        f"converted the queue of the previous layout: {copied} trial(s) of study {LEGACY_STUDY!r} copied into "
        f"{len(grids)} studies, one per grid ({', '.join(sorted(grids))}); study {LEGACY_STUDY!r} removed"
    )
    return copied


def result_values(results_dir) -> Callable[[str], float | None]:
    """``values`` for :func:`convert`: a done run's final NLL from its result file in ``results_dir``."""
    store = Store(results_dir)

    def value(run_id: str) -> float | None:
        end = store.run_end(run_id)
        return end["val_nll"] if end and end["status"] == "done" else None

    return value


__all__ = ["convert", "result_values"]
