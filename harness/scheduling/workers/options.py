"""What one worker is asked to do (DESIGN section 10): :class:`WorkOptions`, ``harness work``'s options or the
task ``harness launch`` submits (:class:`harness.scheduling.workers.launched_task.WorkerTask`), with its
:class:`~harness.train.execution.ExecutionSettings`.

The command maps its options here and a launched task carries them whole, so nothing below parses a command
line; :func:`harness.scheduling.workers.start.run_worker` runs a worker as they say.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.corpus.spec import exists, resolve_corpus
from harness.scheduling.queue.lease import LEASE_TIMEOUT_S
from harness.scheduling.queue.storage import STORAGE_RETRY_S
from harness.scheduling.workers.retry import MAX_RETRIES
from harness.train.execution import ExecutionSettings


@dataclass(frozen=True)
class WorkOptions:
    """What one worker does (``harness work``'s options; see its help for each).

    Attributes:
        results: the results folder (result files, checkpoints, the default queue).
        storage: the queue storage URL (``None``: the journal in ``results``).
        grid: take only runs of this grid.
        max_runs: stop after this many runs (``None``: no limit).
        wait: poll an empty queue every ``poll_s`` seconds instead of stopping.
        retries: retries of a run whose training raised.
        lease_s: a lease not refreshed for this many seconds is reclaimed.
        storage_retry_s: how long an unreachable storage is retried, seconds.
        create: make ``results`` when it does not exist.
        devices, gpus: ranks per run and the GPUs to claim (:func:`~harness.scheduling.workers.start.worker_devices`).
        any_hardware: take a run whose seed's other runs trained on another hardware class
            (``[schedule] pair_hardware = "same"`` held it for that class; :mod:`harness.scheduling.queue.hardware_pairs`).
        settings: how each run executes (its ``devices`` set from the claim).
        corpus: where this machine has the corpus of the runs it claims (``--corpus``; ``None``: the
            path the queue records for each grid, else the run's config), checked against the grid's
            fingerprint (:mod:`harness.corpus.locate`).
    """

    results: str
    storage: str | None = None
    grid: str | None = None
    max_runs: int | None = None
    wait: bool = False
    poll_s: float = 10.0
    retries: int = MAX_RETRIES
    lease_s: float = LEASE_TIMEOUT_S
    storage_retry_s: float = STORAGE_RETRY_S
    create: bool = False
    devices: str | None = None
    gpus: str | None = None
    any_hardware: bool = False
    settings: ExecutionSettings = field(default_factory=ExecutionSettings)
    corpus: str | None = None

    def check(self) -> None:
        """Refuse what the worker cannot run with, before it touches the queue.

        Raises:
            ValueError: a negative ``retries``, a ``lease_s`` or ``storage_retry_s`` that is not positive.
            FileNotFoundError: a ``corpus`` that is not there.
            ValueError: an empty ``corpus``.
        """
        if self.retries < 0:
            raise ValueError(f"--retries {self.retries} must be >= 0")
        if self.lease_s <= 0:
            raise ValueError(f"--lease-s {self.lease_s:g}: must be positive (seconds)")
        if self.storage_retry_s <= 0:
            raise ValueError(f"--storage-retry-s {self.storage_retry_s:g} must be positive")
        if self.corpus is not None and not exists(resolve_corpus(self.corpus)):
            raise FileNotFoundError(
                f"--corpus {self.corpus} not found (a path to the corpus on this machine)"
            )


__all__ = ["WorkOptions"]
