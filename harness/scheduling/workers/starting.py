"""Workers that have started but claim no run yet, as ``harness status`` shows them ("starting").

A worker holds no lease until its first claim, which comes after its checks and its imports (torch,
Lightning, the queue: 10-30 s on a busy machine); the queue alone cannot tell it from no worker at all,
and ``status`` said "live workers: 0" for half a minute after two workers started (issue 66). So
from the moment its results folder is known good until the loop begins claiming, a worker keeps a
marker file ``RESULTS/.HOST-PID.starting`` (:func:`starting`; removed as the worker stops, so a refused
worker leaves the folder as it found it), and ``status`` lists the
markers of workers still alive (:func:`starting_workers`): on this host, its process exists; on
another host, the marker is younger than the lease timeout (a worker that died starting there
drops off the list after it). No write to the queue: a worker's start costs no queue operation.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from harness.scheduling.queue.lease import LEASE_TIMEOUT_S, hostname, pid_alive

SUFFIX = ".starting"  # RESULTS/.HOST-PID.starting


@contextlib.contextmanager
def starting(results: str | os.PathLike) -> Iterator[Callable[[], None]]:
    """This worker is starting (see the module docstring) for the ``with`` block, or until it calls the
    function the block gets (``claiming()``: its loop begins, its leases say it from then on). A marker
    that cannot be written (a read-only folder) is skipped: the worker starts all the same, unseen by
    ``status`` until its first claim."""
    marker: Path | None = Path(results) / f".{hostname()}-{os.getpid()}{SUFFIX}"
    try:
        marker.write_text(f"{time.time()}\n")
    except OSError:
        marker = None
    for gone in _markers(results, alive=False):  # of this host's workers killed while starting
        with contextlib.suppress(OSError):
            gone.unlink()

    def claiming() -> None:
        if marker is not None:
            marker.unlink(missing_ok=True)

    try:
        yield claiming
    finally:
        claiming()


def _markers(results: str | os.PathLike, *, alive: bool) -> Iterator[Path]:
    """This host's markers in ``results`` whose process is alive (``alive``) or gone (not ``alive``)."""
    here = hostname()
    try:
        markers = sorted(Path(results).glob(f".*{SUFFIX}"))
    except OSError:
        return
    for marker in markers:
        host, _, pid = marker.name[1 : -len(SUFFIX)].rpartition("-")
        if host == here and pid.isdigit() and pid_alive(int(pid)) == alive:
            yield marker


def starting_workers(
    results: str | os.PathLike, *, now: float | None = None, timeout_s: float = LEASE_TIMEOUT_S
) -> list[tuple[str, float]]:
    """``[(host:pid, seconds since it started)]`` of the workers starting on ``results`` (sorted by
    name): markers of live processes on this host, and markers younger than ``timeout_s`` from other
    hosts (reads only)."""
    now = time.time() if now is None else now
    here, out = hostname(), []
    try:
        markers = sorted(Path(results).glob(f".*{SUFFIX}"))
    except OSError:
        return []
    for marker in markers:
        host, _, pid = marker.name[1 : -len(SUFFIX)].rpartition("-")
        try:
            since = float(marker.read_text().strip())
        except (OSError, ValueError):  # removed meanwhile, or being written
            continue
        if not pid.isdigit() or (host == here and not pid_alive(int(pid))):
            continue  # a worker of this host that died before its first claim
        if host != here and now - since > timeout_s:
            continue
        out.append((f"{host}:{pid}", max(now - since, 0.0)))
    return out


__all__ = ["starting", "starting_workers"]
