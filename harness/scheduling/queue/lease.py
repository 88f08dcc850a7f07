"""Worker leases: who is training a queued run, and is that worker still alive?

Optuna's heartbeats exist only for its RDB storage, and only inside
``Study.optimize``; the journal file queue has none. So a worker holding a run keeps
a *lease* on it, ``{host, pid, since, beat}``, and refreshes ``beat`` (unix seconds)
from a background thread every few seconds (:class:`Heartbeat`), with the run's live
progress (:class:`harness.common.live.LiveProgress`: tokens, tokens/s) when the training
publishes one, so ``harness status`` can show it at no extra write. Another worker
treats the lease as stale, and re-enqueues the run, when

* the last beat is older than the lease timeout (any host; clocks of the machines
  must agree to well within the timeout), or
* the holder ran on this same host and its pid is gone (no need to wait).

This module knows nothing about Optuna; :mod:`harness.scheduling.queue.run_queue` stores the lease as a
trial user attribute.

It reads and writes no trial itself: the queue hands :class:`Heartbeat` the function that writes a beat.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass

from harness.common.live import LiveProgress

LEASE_TIMEOUT_S = 120.0  # a worker that has not beaten for this long is presumed dead
BEAT_S = 10.0  # how often a worker refreshes its lease


def hostname() -> str:
    """This machine's host name (the ``host`` of its leases)."""
    return socket.gethostname()


@dataclass(frozen=True)
class Lease:
    """One worker's claim on one run.

    Attributes:
        host: host name of the worker.
        pid: process id of the worker on ``host``.
        since: unix time (seconds) the worker took the run.
        beat: unix time (seconds) of the last refresh.
        progress: how far the run was at the last refresh (None before its first step, or from
            a worker that does not publish progress).
        epoch: the attempt's fencing number (its trial number: grows with every new owner
            of the run; :mod:`harness.train.fencing`), ``None`` in leases written before it existed.
    """

    host: str
    pid: int
    since: float
    beat: float
    progress: LiveProgress | None = None
    epoch: int | None = None

    @property
    def worker(self) -> str:
        """``host:pid``, the worker's name in messages."""
        return f"{self.host}:{self.pid}"

    @classmethod
    def here(cls, now: float | None = None, *, epoch: int | None = None) -> Lease:
        """A fresh lease for the calling process."""
        now = time.time() if now is None else now
        return cls(host=hostname(), pid=os.getpid(), since=now, beat=now, epoch=epoch)

    def refreshed(self, now: float | None = None, progress: LiveProgress | None = None) -> Lease:
        """The same lease with ``beat`` set to ``now`` and the run's latest ``progress``."""
        return Lease(
            self.host, self.pid, self.since, time.time() if now is None else now, progress, self.epoch
        )

    def to_dict(self) -> dict:
        d = asdict(self)
        if d["progress"] is None:
            del d["progress"]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Lease:
        p = d.get("progress")
        progress = (
            None
            if not p
            else LiveProgress(
                run_id=str(p["run_id"]),
                tokens=int(p["tokens"]),
                total_tokens=int(p["total_tokens"]),
                tokens_per_s=None if p.get("tokens_per_s") is None else float(p["tokens_per_s"]),
                at=float(p["at"]),
            )
        )
        epoch = d.get("epoch")
        return cls(
            host=str(d["host"]),
            pid=int(d["pid"]),
            since=float(d["since"]),
            beat=float(d["beat"]),
            progress=progress,
            epoch=None if epoch is None else int(epoch),
        )


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this host and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    try:  # a killed but not yet reaped child still answers kill(0); /proc tells (Linux)
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
        return state not in (b"Z", b"X")
    except (OSError, IndexError):
        return True


def stale_reason(lease: Lease, *, now: float, timeout_s: float, host: str | None = None) -> str | None:
    """Why ``lease`` is stale, or ``None`` if its holder may still be working.

    Args:
        lease: the lease to judge.
        now: current unix time (seconds).
        timeout_s: a lease whose last beat is older than this is stale.
        host: the judging machine's host name (default: :func:`hostname`); the pid check
            only applies to leases held on this host.
    """
    age = now - lease.beat
    if age > timeout_s:
        return f"worker {lease.worker} last beat {age:.0f} s ago (lease timeout {timeout_s:g} s)"
    if lease.host == (host or hostname()) and lease.pid != os.getpid() and not pid_alive(lease.pid):
        return f"worker {lease.worker} is no longer running"
    return None


class Heartbeat:
    """Calls ``beat()`` every ``interval_s`` seconds from a daemon thread while in a ``with`` block.

    ``beat`` returns ``False`` when the lease was lost (another worker reclaimed the run);
    the thread then stops and :attr:`lost` is set. Other exceptions from ``beat`` (say,
    a storage hiccup) are kept in :attr:`last_error` and the thread keeps beating.
    :meth:`paused` holds the beats off for a block (a beat in progress finishes first).
    """

    def __init__(self, beat: Callable[[], bool], interval_s: float = BEAT_S) -> None:
        if interval_s <= 0:
            raise ValueError(f"heartbeat interval {interval_s} must be positive")
        self._beat = beat
        self.interval_s = interval_s
        self.lost = False
        self.last_error: BaseException | None = None
        self._stop = threading.Event()
        self._beating = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="harness-lease", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            with self._beating:
                try:
                    if not self._beat():
                        self.lost = True
                        return
                except Exception as exc:  # keep beating; the lease may still be fine
                    self.last_error = exc

    @contextmanager
    def paused(self) -> Iterator[None]:
        """No beat during the block (the caller uses the storage alone, e.g. under its lock)."""
        with self._beating:
            yield

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


__all__ = ["LEASE_TIMEOUT_S", "BEAT_S", "hostname", "Lease", "pid_alive", "stale_reason", "Heartbeat"]
