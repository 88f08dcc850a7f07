"""Launch workers with submitit: a SLURM job array, or local processes, each running `harness work`.

--executor slurm submits one job array of --workers tasks (sbatch through submitit); each
task runs `harness work` (the same worker loop, on the same queue storage and results
folder, which must be on a filesystem every node sees) until nothing is queued or
--max-runs. --executor local starts the same pickled task as local processes (submitit's
LocalExecutor): one machine, the same code path.

Preemption and time limits: SLURM sends submitit's pre-timeout signal (SIGUSR2)
--signal-delay-s seconds before a task's --time; SIGUSR1 does the same, and SIGTERM
(preemption, `scontrol requeue`, scancel) stops the task too. The task stops its run at
the next batch boundary with a checkpoint of that step, gives the run back to the queue
(another worker, or this one once restarted, resumes it from the checkpoint, with the
same numbers as an uninterrupted run) and is requeued: after SIGUSR1/SIGUSR2 by submitit
(`scontrol requeue`, at most 20 times for time limits; locally the process restarts);
after SIGTERM by SLURM itself when it preempts or requeues (a scancel stays cancelled).
A task killed outright is covered by its lease (--lease-s of `harness work`).

Each launch is recorded in RESULTS/launches/<id>/ (launch.json: job ids, executor, time;
submitit's sbatch script, pickles and each task's log <job>_<task>_0_log.out); `harness status`
shows the jobs' states (squeue/sacct, or the local processes).

Extra sbatch lines: --sbatch=--qos=high --sbatch=--account=NAME (repeat; write
--sbatch=LINE with '=' when LINE starts with '-').

example:
  harness launch --executor slurm --workers 8 --gpus-per-worker 1 --cpus-per-worker 8 --mem 64G \\
      --time 240 --partition gpu --storage "$STORAGE" --results /shared/rd/results
  harness launch --executor local --workers 2 --threads 1
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys

from harness.commands.options import (
    add_setting_argument,
    add_storage,
    parse_micro_batch,
)
from harness.common.terms import NAME_RE
from harness.scheduling.launch import EXECUTORS, SIGNAL_DELAY_S
from harness.scheduling.workers.options import WorkOptions
from harness.train.execution import ExecutionSettings
from harness.train.hardware_override import class_override

SLURM_TIME_MIN = 240  # default --time of a SLURM task, minutes (a task is requeued at its limit)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--executor",
        choices=EXECUTORS,
        required=True,
        help="slurm: one job array through sbatch; local: processes on this machine",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help="workers (SLURM: tasks of the job array; default: 1)",
    )
    parser.add_argument(
        "--gpus-per-worker",
        type=int,
        default=0,
        metavar="G",
        help="GPUs per worker (default: 0); G > 0 makes its runs use the GPU, each run trained "
        "on G ranks (DDP), one per GPU",
    )
    parser.add_argument(
        "--cpus-per-worker",
        type=int,
        default=None,
        metavar="C",
        help="CPUs per worker (SLURM --cpus-per-task; default: the cluster's default)",
    )
    parser.add_argument("--mem", default=None, metavar="M", help="memory per worker, e.g. 16G (SLURM --mem)")
    parser.add_argument(
        "--time",
        type=int,
        default=None,
        metavar="MIN",
        help=f"time limit per task in minutes (default: {SLURM_TIME_MIN} on SLURM, none locally); "
        "the task checkpoints and is requeued at the limit",
    )
    parser.add_argument(
        "--partition", default=None, metavar="P", help="SLURM partition (default: the default one)"
    )
    parser.add_argument(
        "--sbatch",
        action="append",
        default=[],
        metavar="LINE",
        help="extra sbatch option, e.g. --sbatch=--qos=high (repeatable)",
    )
    parser.add_argument(
        "--signal-delay-s",
        type=int,
        default=SIGNAL_DELAY_S,
        metavar="S",
        help=f"submitit's pre-timeout signal comes S seconds before --time (default: {SIGNAL_DELAY_S})",
    )
    parser.add_argument("--job-name", default="harness-work", metavar="NAME", help="the jobs' name")
    # the `harness work` options each worker runs with (the results folder is --results)
    add_storage(parser)
    parser.add_argument("--grid", metavar="NAME", default=None, help="workers only take runs of this grid")
    parser.add_argument(
        "--any-hardware", action="store_true", help="workers run `harness work --any-hardware` (see its help)"
    )
    parser.add_argument(
        "--corpus",
        metavar="PATH",
        default=None,
        help="where the workers' machines have the corpus: workers run `harness work --corpus PATH` "
        "(checked against the grid's corpus fingerprint; default: the path the queue records)",
    )
    add_setting_argument(
        parser,
        "threads",
        scope="per worker",
        default=None,
        default_words="--cpus-per-worker, else 1 on SLURM and cores / workers locally",
    )
    parser.add_argument(
        "--max-runs",
        type=int,
        default=None,
        metavar="N",
        help="each worker stops after N runs (default: when nothing is queued)",
    )
    # workers run `harness work --micro-batch-size N --routing R`: one numerics key per cluster
    add_setting_argument(parser, "micro_batch_size")
    add_setting_argument(parser, "routing")


def _queue_check(args: argparse.Namespace, storage: str | None) -> str:
    """One line on what the workers will find; raises ``ValueError`` when nothing is queued."""
    from harness.scheduling.queue.run_queue import RunQueue
    from harness.scheduling.queue.storage import COMMAND_RETRY_S, describe_storage

    where = describe_storage(storage, args.results)
    try:
        queue = RunQueue.open(
            storage,
            args.results,
            create=False,
            retry_s=COMMAND_RETRY_S,
            log=lambda msg: print(msg, file=sys.stderr),
        )
    except FileNotFoundError:
        raise ValueError(f"no queue at {where}; queue a grid first: harness queue GRID.toml") from None
    counts = queue.counts(args.grid)
    if args.grid and args.grid not in counts:
        grids = sorted(queue.counts())
        raise ValueError(
            f"no runs of grid {args.grid!r} in {where}"
            + (f"; grids there: {', '.join(grids)}" if grids else "")
        )
    _check_gpus(args, queue)
    if args.corpus is not None:  # the workers' --corpus, checked as each worker would, before any is started
        from harness.corpus.locate import CorpusLocator
        from harness.data.prepared import cache_dir

        waiting = [g for g, c in counts.items() if c["queued"]]
        CorpusLocator(args.corpus, cache_dir(args.results)).check_queue(queue, waiting)
    queued = sum(c["queued"] for c in counts.values())
    if queued == 0:
        total = sum(sum(c.values()) for c in counts.values())
        raise ValueError(
            f"nothing queued in {where}"
            + (f" for grid {args.grid}" if args.grid else "")
            + f" ({total} runs, none waiting): nothing for workers to do"
        )
    return f"{queued} runs queued in {where}" + (f" (grid {args.grid})" if args.grid else "")


def _check_gpus(args: argparse.Namespace, queue) -> None:
    """Refuse ``--gpus-per-worker G`` before submitting anything: on a local machine without a GPU, or
    where a queued run's batch does not split over G ranks (each worker would refuse it, one line each).

    Raises:
        ValueError: naming the option, the run and the counts allowed.
    """
    if not args.gpus_per_worker:
        return
    from harness.scheduling.workers.devices import visible_devices
    from harness.train.execution import ExecutionSettings
    from harness.train.settings_check import check_run  # lazy: Lightning, only with GPUs asked for

    if args.executor == "local" and not visible_devices():
        raise ValueError(
            f"--gpus-per-worker {args.gpus_per_worker}: this machine has no GPU (nvidia-smi lists none, "
            "CUDA_VISIBLE_DEVICES names none); use --gpus-per-worker 0 to train on the CPU"
        )
    settings = ExecutionSettings(accelerator="gpu", devices=args.gpus_per_worker)
    for state in queue.runs(args.grid).values():
        if state.state == "queued":
            check_run(state.config, settings, option="--gpus-per-worker")


def main(args: argparse.Namespace) -> int:
    import dataclasses
    import datetime as dt

    from harness.scheduling import launch
    from harness.scheduling.queue.lease import hostname
    from harness.scheduling.queue.storage import describe_storage, parse_storage

    args.results = args.results.resolve()
    storage = args.storage
    kind, where = parse_storage(storage, args.results)  # raises on a bad URL
    if storage is not None and kind == "journal":  # tasks may start in another folder
        storage = f"journal:{os.path.abspath(where)}"
    if args.threads is not None and args.threads < 0:
        raise ValueError(f"--threads {args.threads}: must be >= 0 (0 = torch's default)")
    if args.max_runs is not None and args.max_runs < 1:
        raise ValueError(f"--max-runs {args.max_runs}: must be at least 1")
    cores = os.cpu_count() or 1
    if args.executor == "local" and args.threads is not None and args.threads > cores:
        raise ValueError(f"--threads {args.threads}: expected 0 to {cores} (this machine's CPU cores)")
    if not NAME_RE.fullmatch(args.job_name):
        raise ValueError(
            f"--job-name {args.job_name!r}: a letter or digit, then letters, digits, '.', '_' or '-'"
        )
    if args.partition is not None and args.executor != "slurm":
        raise ValueError("--partition: only with --executor slurm")
    if args.corpus is not None:  # checked here, before submitting: the workers read the same path or glob
        from harness.corpus.spec import check_corpus, resolve_corpus

        check_corpus(resolve_corpus(args.corpus), source="harness launch --corpus")
    sbatch = dict(launch.parse_sbatch_line(line) for line in args.sbatch)
    if sbatch and args.executor != "slurm":
        raise ValueError("--sbatch: only with --executor slurm")
    time_min = args.time if args.time is not None else (SLURM_TIME_MIN if args.executor == "slurm" else None)
    resources = launch.Resources(
        workers=args.workers,
        gpus_per_worker=args.gpus_per_worker,
        cpus_per_worker=args.cpus_per_worker,
        mem=args.mem,
        time_min=time_min,
        partition=args.partition,
        sbatch=sbatch,
        signal_delay_s=args.signal_delay_s,
        job_name=args.job_name,
    )
    resources.check()
    # each worker's start refuses a bad $HARNESS_HARDWARE_CLASS (settings_check): said here, before any
    # worker is started, not in each worker's log after "started N worker(s)"
    class_override()
    found = _queue_check(args, storage)
    options = _work_options(args, storage)
    shown = _work_argv(options, describe_storage(storage, args.results) if storage else None)

    from harness.scheduling.workers.launched_task import (
        WorkerTask,  # lazy: submitit, only to launch (not for --help)
    )

    made_root = not (args.results / launch.LAUNCH_DIR).exists()
    launch_id, folder = launch.launch_folder(args.results, args.executor)
    try:
        job_ids = launch.submit(
            args.executor, folder, [WorkerTask(options) for _ in range(args.workers)], resources
        )
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)  # nothing half-written
        if made_root:
            with contextlib.suppress(OSError):  # nor an empty launches/ (only where still empty)
                folder.parent.rmdir()
        raise
    record = launch.LaunchRecord(
        id=launch_id,
        executor=args.executor,
        created=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        host=hostname(),
        folder=str(folder),
        job_ids=job_ids,
        results=str(args.results),
        storage=describe_storage(storage, args.results),
        command=shown,
        resources=dataclasses.asdict(resources),
    )
    launch.write_record(record)

    _say_launched(args, record, job_ids, resources, found, shown)
    return 0


def _work_options(args: argparse.Namespace, storage: str | None) -> WorkOptions:
    """What every worker does (threads: --threads, else the CPUs per worker); G GPUs per worker train
    each run on G ranks (harness.train.ranks; its GPUs: CUDA_VISIBLE_DEVICES)."""
    threads = args.threads
    if threads is None:
        local = max(1, (os.cpu_count() or 1) // args.workers)
        threads = args.cpus_per_worker or (1 if args.executor == "slurm" else local)
    gpus = args.gpus_per_worker
    settings = ExecutionSettings(
        threads=threads,
        accelerator="gpu" if gpus else "auto",
        micro_batch_size=parse_micro_batch(args.micro_batch_size),
        routing=args.routing,
    )
    return WorkOptions(
        results=str(args.results),
        storage=storage,
        grid=args.grid,
        max_runs=args.max_runs or None,
        devices=str(gpus) if gpus else None,
        any_hardware=args.any_hardware,
        settings=settings,
        corpus=args.corpus,
    )


def _work_argv(options: WorkOptions, storage_shown: str | None) -> list[str]:
    """The ``harness work`` command line that does what ``options`` say, for records and output
    (``storage_shown``: the storage without its password)."""
    argv = ["--results", options.results, "--threads", str(options.settings.threads)]
    argv += ["--storage", storage_shown] if storage_shown else []
    argv += ["--grid", options.grid] if options.grid else []
    argv += ["--max-runs", str(options.max_runs)] if options.max_runs else []
    argv += ["--accelerator", "gpu", "--devices", options.devices] if options.devices else []
    argv += ["--any-hardware"] if options.any_hardware else []
    argv += ["--corpus", options.corpus] if options.corpus else []
    micro, routing = options.settings.micro_batch_size, options.settings.routing
    argv += ["--micro-batch-size", str(micro)] if micro is not None else []
    argv += ["--routing", routing] if routing is not None else []
    return argv


def _say_launched(
    args: argparse.Namespace, record, job_ids: list[str], resources, found: str, shown: list[str]
) -> None:
    """What was started (SLURM job and tasks, or local processes), how to watch and stop it."""
    import submitit  # lazy: its signal name, printed after a launch (not for --help)

    each = "harness work " + " ".join(shown)
    if args.executor == "slurm":
        array = record.array_id
        tasks = " ".join(job_ids)
        print(f"submitted {args.workers} worker(s) to SLURM as job {array} (tasks {tasks}); {found}")
        print(f"  each task runs: {each}")
        print(
            f"  per task: {_resources_line(resources)}; submitit's signal SIG{submitit.JobEnvironment.USR_SIG} "
            f"{resources.signal_delay_s} s before the time limit checkpoints and requeues it"
        )
        print(f"  folder: {record.folder} (sbatch script, task logs {array}_*_log.out)")
        print(
            f"watch: harness status --results {args.results}   or   squeue -j {array}   "
            f"(cancel: scancel {array})"
        )
    else:
        print(
            f"started {args.workers} worker(s) as local processes (submitit LocalExecutor), "
            f"controller pid(s) {' '.join(job_ids)}; {found}"
        )
        print(f"  each runs: {each}")
        print(f"  folder: {record.folder} (logs <pid>_0_log.out)")
        print(
            f"watch: harness status --results {args.results}   (stop: kill -TERM {' '.join(job_ids)}: "
            "each worker releases its run at the next batch boundary)"
        )


def _resources_line(r) -> str:
    parts = [
        f"{r.cpus_per_worker} CPU(s)" if r.cpus_per_worker else "the default CPUs",
        f"{r.gpus_per_worker} GPU" if r.gpus_per_worker else "no GPU",
        f"memory {r.mem}" if r.mem else "the default memory",
        f"time limit {r.time_min} min",
        f"partition {r.partition}" if r.partition else "the default partition",
    ]
    parts += [f"--{k}" + ("" if v is True else f"={v}") for k, v in r.sbatch.items()]
    return ", ".join(parts)
