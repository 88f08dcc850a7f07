"""Taking a run from the queue for the worker loop (:mod:`harness.scheduling.workers.loop`), and giving
it back when the worker is interrupted.

:func:`claim_next` reclaims stale leases, claims the next queued run and polls while asked to
wait; :func:`given_back_if_interrupted` guards everything between a claim and its outcome, so
that a Ctrl-C or SIGTERM landing anywhere there (not only inside training) releases the run
at once instead of leaving it to its lease.

Owns taking a run and giving it back on an interrupt. Must not train.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def given_back_if_interrupted(queue, call, claim, log) -> Iterator[None]:
    """Release ``claim`` when a ``KeyboardInterrupt`` (Ctrl-C; SIGTERM in ``harness work``; a stopped
    run's :class:`~harness.train.runner.RunInterrupted`) or ``SystemExit`` ends the block, wherever it
    lands after the claim: before training too (the start line, the fence, the lazy imports). An
    ``Exception`` passes: the block has settled the claim itself. Releasing a claim already settled
    changes nothing (the queue's transition from running fails), so nothing is said then."""
    try:
        yield
    except Exception:
        raise
    except BaseException:
        if call(queue.release, claim, "worker interrupted (KeyboardInterrupt or SIGTERM); run released"):
            log(f"released {claim.run_id}: queued again; a retry resumes from its checkpoint")
        raise


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


def claim_next(queue, call, grid, wait: bool, poll_s: float, stop, orphans: OrphanClock, log):
    """The next claimed run (after reclaiming stale leases), polling while ``wait``; ``None`` once a stop
    is requested (a run claimed meanwhile is given back) or, without ``wait``, nothing is queued (both
    said in ``log``)."""
    while True:
        if stop is not None and stop.requested:
            log(f"stop requested ({stop.requested}); worker stops")
            return None
        for rid, why in call(queue.reclaim_stale):  # one read of the live trials, which the claim reuses
            log(f"reclaimed {rid}: {why}; queued again")
        claim = call(queue.claim, grid)
        if claim is not None:
            return None if stopped_after_claim(queue, call, claim, stop, log) else claim
        # nothing waiting: requeue runs whose process died between failing an attempt and queueing the next
        if orphans.due(wait, queue.lease_timeout_s) and call(queue.requeue_orphans):
            continue
        held = _held_line(queue)
        if not wait:
            log(
                ("nothing queued" if held is None else held)
                + (f" for grid {grid}" if grid else "")
                + "; worker stops"
            )
            return None
        stop.wait(poll_s) if stop is not None else time.sleep(
            poll_s
        )  # each poll: one read of the live trials


def _held_line(queue) -> str | None:
    """What the last claim left waiting for another hardware class or numerics (a grid's ``[schedule]
    pair_hardware = "same"``, :mod:`harness.scheduling.queue.hardware_pairs`), or ``None`` when nothing was held."""
    pairs = getattr(queue, "pairs", None)  # a stand-in queue has no hardware gate
    if pairs is None or not pairs.held:
        return None
    classes = ", ".join(sorted(set(pairs.held.values())))
    return (
        f"nothing queued for this worker's hardware class and numerics: {len(pairs.held)} run(s) wait for "
        f"{classes}, where "
        "their seed's other runs trained (`harness work --any-hardware` takes them)"
    )


def stopped_after_claim(queue, call, claim, stop, log) -> bool:
    """Whether a stop was asked while claiming; then ``claim`` is given back untouched."""
    if stop is None or not stop.requested:
        return False
    call(queue.release, claim, f"worker stopped ({stop.requested}) before training; run released")
    log(f"stop requested ({stop.requested}); released {claim.run_id}; worker stops")
    return True
