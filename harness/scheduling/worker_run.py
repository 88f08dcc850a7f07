"""A worker process around the loop (DESIGN section 10): what ``harness work`` and a launched task run.

:class:`WorkOptions` is what one worker is asked to do (``harness work``'s options, or the task
``harness launch`` submits, :class:`harness.scheduling.worker_task.WorkerTask`), with its
:class:`~harness.train.execution.ExecutionSettings`; :func:`run_worker` checks them, opens the queue,
claims the worker's GPUs (:func:`worker_devices`) and runs :func:`harness.scheduling.worker.work`.
Neither parses a command line: the command maps its options here, and a launched task carries
its options whole.
"""

from __future__ import annotations

import contextlib
import os
import signal
import tempfile
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from harness.common import console
from harness.common.terms import check_grid
from harness.scheduling import worker
from harness.scheduling.lease import BEAT_S, LEASE_TIMEOUT_S
from harness.scheduling.storage import STORAGE_RETRY_S
from harness.scheduling.worker import MAX_RETRIES
from harness.train.execution import ExecutionSettings, parse_devices, set_threads


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
        devices, gpus: ranks per run and the GPUs to claim (:func:`worker_devices`).
        settings: how each run executes (its ``devices`` set from the claim).
        corpus: where this machine has the corpus of the runs it claims (``--corpus``; ``None``: the
            path the queue records for each grid, else the run's config), checked against the grid's
            fingerprint (:mod:`harness.scheduling.corpus_check`).
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
    settings: ExecutionSettings = field(default_factory=ExecutionSettings)
    corpus: str | None = None

    def check(self) -> None:
        """Refuse what the worker cannot run with, before it touches the queue.

        Raises:
            ValueError: a negative ``retries``, a ``lease_s`` or ``storage_retry_s`` that is not positive.
            FileNotFoundError: a ``corpus`` that is not there.
        """
        if self.retries < 0:
            raise ValueError(f"--retries {self.retries} must be >= 0")
        if self.lease_s <= 0:
            raise ValueError(f"--lease-s {self.lease_s:g}: must be positive (seconds)")
        if self.storage_retry_s <= 0:
            raise ValueError(f"--storage-retry-s {self.storage_retry_s:g} must be positive")
        if self.corpus is not None and not os.path.exists(os.path.expanduser(self.corpus)):
            raise FileNotFoundError(
                f"--corpus {self.corpus} not found (a path to the corpus on this machine)"
            )


def check_writable(results: Path, create: bool = False) -> None:
    """A worker writes checkpoints and result files under ``results``: fail now, with the
    system's own reason (read-only file system, permission denied), not after a run trained.

    Raises:
        FileNotFoundError: ``results`` does not exist and ``create`` is false (a mistyped
            path would otherwise become a new, empty queue).
        OSError: ``results`` cannot be created or written.
    """
    try:
        results.stat()
    except FileNotFoundError:  # not NotADirectoryError: a file on the path is said by mkdir below
        if not create:
            raise FileNotFoundError(
                f"results folder {str(results)!r} does not exist; `harness queue GRID.toml "
                "--results DIR` makes it, or pass --create (set --results DIR or "
                "$HARNESS_RESULTS)"
            ) from None
    results.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryFile(dir=results, prefix=".probe-"):
        pass


def worker_devices(devices: str | None, gpus: str | None, accelerator: str):
    """``--devices``/``--gpus``/``--accelerator`` -> ``(ranks per run, device claim or None)``.

    On a GPU worker (``--accelerator gpu``, or ``auto`` on a node where ``nvidia-smi`` lists
    GPUs, or ``--gpus`` given) the worker's devices are chosen (:func:`harness.scheduling.devices.assign`)
    and ``CUDA_VISIBLE_DEVICES`` is set to them before CUDA starts; the claim's locks are held
    until the worker stops. Elsewhere nothing is claimed.

    Raises:
        ValueError: a bad ``--devices`` or ``--gpus``, the two disagree, or not enough free
            GPUs on this node (:class:`~harness.scheduling.devices.NoFreeDevice`).
    """
    from harness.scheduling import devices as gpu  # lazy: nvidia-smi and the device locks, only to claim

    n = parse_devices(devices) if devices is not None else len(gpu.parse_gpus(gpus)) if gpus else 1
    if not (gpus or accelerator in ("gpu", "cuda") or (accelerator == "auto" and gpu.node_gpu_count())):
        return n, None
    if n == "auto":
        n = len(gpu.parse_gpus(gpus)) if gpus else len(gpu.visible_devices())
    chosen, claim = gpu.assign(gpus, n)
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(chosen)
    print(
        f"worker trains on GPU(s) {','.join(chosen)} ({n} rank(s) per run)"
        + ("" if claim is None else f"; locked in {gpu.lock_dir()}"),
        flush=True,
    )
    return n, claim


def checked_before_claims(queue, grid: str | None, settings: ExecutionSettings, claim):
    """Refuse, before any claim, settings Lightning would reject and a queued run whose batch they
    cannot split (:mod:`harness.train.settings_check`): a configuration error spends no retry.
    Returns the per-run check the worker applies to each run it claims (runs queued later, ``--wait``).

    Raises:
        ValueError: one line naming the option, its value and what is allowed (``claim``'s GPU
            locks are let go first).
    """
    from harness.train.settings_check import check_run, check_settings  # lazy: Lightning

    try:
        check_settings(settings)
        checked = set()
        for state in queue.runs(grid).values():
            config = state.config
            key = (config.size, config.model_config(1).context, config.train_config().batch_tokens)
            if state.state in ("queued", "running") and key not in checked:
                checked.add(key)
                check_run(config, settings)
    except ValueError:
        if claim is not None:
            claim.release()
        raise
    return lambda config: check_run(config, settings)


def _sigterm(signum, frame):
    raise KeyboardInterrupt("SIGTERM")


def summary(outcomes: Mapping[str, int]) -> str:
    """``worker trained N runs: a done, b diverged, c failed[, d pruned][, e lost to another
    worker]`` of an outcome count."""
    pruned = f", {outcomes['pruned']} pruned" if outcomes.get("pruned") else ""
    lost = f", {outcomes['lost']} lost to another worker" if outcomes.get("lost") else ""
    return (
        f"worker trained {sum(outcomes.values())} runs: {outcomes.get('done', 0)} done, "
        f"{outcomes.get('diverged', 0)} diverged, {outcomes.get('failed', 0)} failed{pruned}{lost}"
    )


def run_worker(options: WorkOptions, *, train_fn=None, on_failure=None, stop=None) -> Counter:
    """Run the worker loop (:func:`harness.scheduling.worker.work`) as ``options`` say; returns the
    outcomes of the runs it trained.

    ``train_fn``/``on_failure`` default to :func:`~harness.scheduling.worker.train_unless_finished`
    and :func:`~harness.scheduling.worker.record_failure`. Without ``stop``, SIGTERM raises
    ``KeyboardInterrupt`` at once (the run is released, resuming from its last checkpoint);
    with a :class:`~harness.train.stop.StopRequest` (``harness launch``'s tasks) the caller
    owns the signals and a stop comes at the next batch boundary, with a checkpoint of it.

    Raises:
        ValueError: bad options (:meth:`WorkOptions.check`), a ``grid`` not queued (without ``wait``),
            no free GPU to claim.
        FileNotFoundError / OSError: the results folder is missing or not writable.
    """
    import optuna  # lazy: Optuna, only with a queue

    from harness.scheduling.queue import RunQueue  # lazy: Optuna, only with a queue

    options.check()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    space_needed = None
    if train_fn is None:
        from harness.train.checkpoint import space_needed  # lazy: torch loads only to train

        set_threads(options.settings.threads)
    on_failure = on_failure or worker.record_failure
    console.progress_mode()  # a bad $HARNESS_PROGRESS is one line now, not a traceback mid-run
    check_writable(Path(options.results), options.create)
    queue = RunQueue.open(
        options.storage, options.results, lease_timeout_s=options.lease_s, retry_s=options.storage_retry_s
    )
    if options.grid is not None:
        try:
            check_grid(options.grid, (r.grid for r in queue.runs().values()), queue.where)
        except ValueError as exc:
            if not options.wait:
                raise
            print(f"note: {exc}; waiting for it to be queued (--wait)")
    claim = settings = check_run = locator = None
    if train_fn is None or options.corpus is not None:  # a stand-in train function reads no corpus
        from harness.data.prepared import cache_dir  # lazy: numpy, only where a corpus is read
        from harness.scheduling.corpus_check import CorpusLocator

        locator = CorpusLocator(options.corpus, cache_dir(options.results))
    if train_fn is None:
        devices, claim = worker_devices(options.devices, options.gpus, options.settings.accelerator)
        settings, train_fn = options.settings.replace(devices=devices), worker.train_unless_finished
        check_run = checked_before_claims(queue, options.grid, settings, claim)
    previous = signal.signal(signal.SIGTERM, _sigterm) if stop is None else None
    try:
        with claim or contextlib.nullcontext():  # this worker's GPUs stay locked until it stops
            return worker.work(
                queue,
                train_fn,
                options.results,
                on_failure=on_failure,
                grid=options.grid,
                max_runs=options.max_runs,
                wait=options.wait,
                poll_s=options.poll_s,
                max_retries=options.retries,
                beat_s=min(BEAT_S, options.lease_s / 4),
                retry_s=options.storage_retry_s,
                stop=stop,
                space_needed=space_needed,
                settings=settings,
                check_run=check_run,
                corpus=locator,
            )
    finally:
        if stop is None:
            signal.signal(signal.SIGTERM, previous)


__all__ = [
    "WorkOptions",
    "check_writable",
    "checked_before_claims",
    "worker_devices",
    "summary",
    "run_worker",
]
