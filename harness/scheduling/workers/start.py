"""Starting a worker (DESIGN section 10): what ``harness work`` and each launched task run around the loop.

:func:`run_worker` checks the worker's :class:`~harness.scheduling.workers.options.WorkOptions`,
the results folder (:func:`check_writable`), opens the queue, checks the
corpus it would read and the settings against every queued run (:func:`checked_before_claims`: a
configuration error is refused here, before any claim, and spends no retry), claims the worker's GPUs
(:func:`worker_devices`), builds its hardware gate (``[schedule] pair_hardware``) and runs
:func:`harness.scheduling.workers.loop.work`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import tempfile
from collections import Counter
from pathlib import Path

from harness.common import console
from harness.common.terms import check_grid
from harness.scheduling.queue.lease import BEAT_S
from harness.scheduling.workers.claiming import nothing_queued
from harness.scheduling.workers.loop import record_failure, train_unless_finished, work
from harness.scheduling.workers.options import WorkOptions
from harness.scheduling.workers.starting import starting
from harness.train.execution import ExecutionSettings, check_threads, parse_devices, set_threads


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
    GPUs, or ``--gpus`` given) the worker's devices are chosen (:func:`harness.scheduling.workers.devices.assign`)
    and ``CUDA_VISIBLE_DEVICES`` is set to them before CUDA starts; the claim's locks are held
    until the worker stops. Elsewhere nothing is claimed.

    Raises:
        ValueError: a bad ``--devices`` or ``--gpus``, the two disagree, or not enough free
            GPUs on this node (:class:`~harness.scheduling.workers.devices.NoFreeDevice`).
    """
    from harness.scheduling.workers import (
        devices as gpu,  # lazy: nvidia-smi and the device locks, only to claim
    )

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


def nothing_to_claim(queue, grid: str | None) -> bool:
    """Whether a worker without ``--wait`` would stop at its first look (:func:`~harness.scheduling.workers.claiming.claim_next`):
    no live (queued or running) run of ``grid`` (``None``: any), and no run whose retry was never created
    (:meth:`~harness.scheduling.queue.run_queue.RunQueue.requeue_orphans` creates those, as the worker would).
    One read of the live trials; a run queued a moment later is taken by the next worker started."""
    if any(grid is None or t.grid == grid for t in queue.live()):
        return False
    return not queue.requeue_orphans()


def _sigterm(signum, frame):
    raise KeyboardInterrupt("SIGTERM")


def run_worker(options: WorkOptions, *, train_fn=None, on_failure=None, stop=None) -> Counter:
    """Run the worker loop (:func:`harness.scheduling.workers.loop.work`) as ``options`` say; returns the
    outcomes of the runs it trained.

    ``train_fn``/``on_failure`` default to :func:`~harness.scheduling.workers.loop.train_unless_finished`
    and :func:`~harness.scheduling.workers.loop.record_failure`. Without ``stop``, SIGTERM raises
    ``KeyboardInterrupt`` at once (the run is released, resuming from its last checkpoint);
    with a :class:`~harness.train.stop.StopRequest` (``harness launch``'s tasks) the caller
    owns the signals and a stop comes at the next batch boundary, with a checkpoint of it.

    Raises:
        ValueError: bad options (:meth:`WorkOptions.check`), a ``grid`` not queued (without ``wait``),
            no free GPU to claim.
        FileNotFoundError / OSError: the results folder is missing or not writable.
    """
    options.check()
    console.progress_mode()  # a bad $HARNESS_PROGRESS is one line now, not a traceback mid-run
    check_writable(Path(options.results), options.create)
    with starting(options.results) as claiming:  # `harness status` shows it starting until its loop begins
        return _run_worker(options, train_fn, on_failure, stop, claiming)


def _run_worker(options: WorkOptions, train_fn, on_failure, stop, claiming) -> Counter:
    """:func:`run_worker` once its options and results folder are checked; ``claiming()`` is called as
    the loop begins."""
    import optuna  # lazy: Optuna, only with a queue

    from harness.scheduling.queue.run_queue import RunQueue  # lazy: Optuna, only with a queue

    optuna.logging.set_verbosity(optuna.logging.WARNING)
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
    claim = settings = check_run = locator = pairs = space_needed = None
    if train_fn is None or options.corpus is not None:  # a stand-in train function reads no corpus
        # lazy: numpy, only where a corpus is read
        from harness.corpus.locate import CorpusLocator
        from harness.data.prepared import cache_dir

        locator = CorpusLocator(options.corpus, cache_dir(options.results))
        if options.corpus is not None:  # another text is refused before a run is claimed, as launch does
            counts = queue.counts(options.grid)
            locator.check_queue(queue, [g for g, c in counts.items() if c.get("queued")])
    if train_fn is None:
        check_threads(options.settings.threads)  # a bad --threads is refused even with nothing to claim
        devices, claim = worker_devices(options.devices, options.gpus, options.settings.accelerator)
        if not options.wait and nothing_to_claim(queue, options.grid):  # said before torch and Lightning load
            if claim is not None:
                claim.release()
            print(f"{nothing_queued(options.grid)}; worker stops")
            return Counter()
        from harness.train.checkpoint import space_needed  # lazy: torch loads only to train

        set_threads(options.settings.threads)
        settings, train_fn = options.settings.replace(devices=devices), train_unless_finished
        check_run = checked_before_claims(queue, options.grid, settings, claim)
        pairs = _pair_gate(settings, options.any_hardware)
    if on_failure is None:  # a failed attempt's file says where it ran, as a finished run's does

        def on_failure(config, results_dir, error_text):
            record_failure(config, results_dir, error_text, settings)

    previous = signal.signal(signal.SIGTERM, _sigterm) if stop is None else None
    claiming()  # from here its leases tell `harness status` it is a live worker
    try:
        with claim or contextlib.nullcontext():  # this worker's GPUs stay locked until it stops
            return work(
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
                pairs=pairs,
            )
    finally:
        if stop is None:
            signal.signal(signal.SIGTERM, previous)


def _pair_gate(settings: ExecutionSettings, anywhere: bool):
    """The worker's :class:`~harness.scheduling.queue.hardware_pairs.PairGate`: a run's key is the hardware class
    and numerics key (numerics, micro-batch size, world size) it gets here under ``settings``
    (:func:`harness.train.environment.run_numerics`, :func:`~harness.scheduling.queue.hardware_pairs.pair_key`)."""
    from harness.scheduling.queue.hardware_pairs import PairGate, pair_key  # lazy: Optuna, only with a queue
    from harness.train.environment import run_numerics  # lazy: torch loads only to train

    def classify(config) -> str:
        numerics = run_numerics(config, settings)
        return pair_key(numerics.hardware, numerics.key)

    return PairGate(classify, anywhere=anywhere)


__all__ = [
    "check_writable",
    "checked_before_claims",
    "nothing_to_claim",
    "worker_devices",
    "run_worker",
]
