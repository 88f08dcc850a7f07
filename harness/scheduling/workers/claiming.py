"""Taking a run from the queue for the worker loop (:mod:`harness.scheduling.workers.loop`).

:func:`claim_next` reclaims stale leases (as many times as :data:`~harness.scheduling.workers.retry.MAX_RECLAIMS`
allows a run), claims the next queued run that the worker's hardware gate admits, and polls while asked
to wait; a stop asked meanwhile gives the claim back (:func:`~harness.scheduling.workers.retry.released_if_stopped`).
"""

from __future__ import annotations

import math
import time

from harness.scheduling.workers.retry import MAX_RECLAIMS, released_if_stopped


class OrphanClock:
    """When this worker last looked for runs whose retry was never created (monotonic seconds)."""

    def __init__(self) -> None:
        self.at = -math.inf

    def due(self, wait: bool, lease_timeout_s: float) -> bool:
        """Whether to look now: always before stopping; while polling, at most once per lease timeout
        (the look reads every failed trial, hence not in every poll). Resets the clock when due."""
        if wait and time.monotonic() - self.at < lease_timeout_s:
            return False
        self.at = time.monotonic()
        return True


def claim_next(queue, call, grid, wait: bool, poll_s: float, stop, orphans: OrphanClock, log, pairs=None):
    """The next claimed run (after reclaiming stale leases), polling while ``wait``; ``None`` once a stop
    is requested (a run claimed meanwhile is given back) or, without ``wait``, nothing is queued (both
    said in ``log``, with the runs ``pairs``, the worker's hardware gate, left for another class)."""
    while True:
        if stop is not None and stop.requested:
            log(f"stop requested ({stop.requested}); worker stops")
            return None
        # one read of the live trials, which the claim reuses
        for rid, why in call(queue.reclaim_stale, max_reclaims=MAX_RECLAIMS):
            log(f"reclaimed {rid}: {why}; queued again")
        claim = call(queue.claim, grid, pairs)
        if claim is not None:
            return None if released_if_stopped(queue, call, claim, stop, log) else claim
        # nothing waiting: requeue runs whose process died between failing an attempt and queueing the next
        if orphans.due(wait, queue.lease_timeout_s) and call(queue.requeue_orphans):
            continue
        held = _held_line(pairs)
        if not wait:
            log(f"{nothing_queued(grid, held)}; worker stops")
            return None
        stop.wait(poll_s) if stop is not None else time.sleep(
            poll_s
        )  # each poll: one read of the live trials


def nothing_queued(grid: str | None, held: str | None = None) -> str:
    """What a worker that finds nothing to take says: ``nothing queued`` (or ``held``, the runs its hardware
    gate left for another class), ``for grid NAME`` when it takes one grid's runs only."""
    return ("nothing queued" if held is None else held) + (f" for grid {grid}" if grid else "")


def _held_line(pairs) -> str | None:
    """What the last claim left waiting for another hardware class or numerics (the gate ``pairs`` of a
    grid's ``[schedule] pair_hardware = "same"``, :mod:`harness.scheduling.queue.hardware_pairs`), or
    ``None`` when nothing was held."""
    if pairs is None or not pairs.held:
        return None
    classes = ", ".join(sorted(set(pairs.held.values())))
    return (
        f"nothing queued for this worker's hardware class and numerics: {len(pairs.held)} run(s) wait for "
        f"{classes}, where "
        "their seed's other runs trained (`harness work --any-hardware` takes them)"
    )
