"""Launching workers through submitit, recording each launch, and asking after its jobs (DESIGN section 10).

``harness launch`` (:mod:`harness.commands.launch`) submits N workers, each a task that runs
``harness work``'s function, with submitit (:func:`submit`): ``slurm`` submits one job array
(one task per worker) with the resources of :class:`Resources`; ``local`` starts the same
pickled task as N processes on this machine (submitit's ``LocalExecutor``, one job per
worker): the same code path without a cluster. SLURM is asked to send submitit's
pre-timeout signal (``submitit.JobEnvironment.USR_SIG``, ``SIGUSR2``) ``signal_delay_s``
seconds before the time limit; the task turns it into a checkpoint, a release and a
requeue (:class:`harness.scheduling.workers.launched_task.WorkerTask`).

Each launch is recorded in ``RESULTS/launches/<id>/launch.json`` (:class:`LaunchRecord`:
job ids, executor, folder, time), beside submitit's files for its jobs (the sbatch script,
the pickled task, each task's log ``<job>_0_log.out`` and result). :func:`job_states` asks
after the jobs: SLURM through ``squeue`` (pending, running, and ended jobs the controller
still holds, ``MinJobAge``), then ``sacct`` (where the cluster keeps accounting); local jobs
by their controller process and the result submitit writes when a task ends.

submitit is imported only when something is submitted or a task's files are read.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import pickle
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from harness.common.files import atomic_write
from harness.scheduling.queue.lease import hostname, pid_alive

LAUNCH_DIR = "launches"
RECORD_NAME = "launch.json"
EXECUTORS = ("slurm", "local")
SIGNAL_DELAY_S = 90  # submitit's default: its pre-timeout signal comes this long before the limit
MAX_TIMEOUTS = 20  # a task that reaches its time limit is requeued this many times (preemptions are free)
LOCAL_TIME_MIN = 60 * 24 * 365  # local workers: no time limit to speak of
_MEM = re.compile(r"\d+[KMGT]?")
_SBATCH = re.compile(r"([A-Za-z][A-Za-z0-9-]*)(?:(?:=|\s+)(.+))?")


# ----------------------------------------------------------------------------- what to submit


def parse_sbatch_line(line: str) -> tuple[str, str | bool]:
    """One extra sbatch line (``--qos=high``, ``qos=high``, ``#SBATCH --account acct``,
    ``--exclusive``) as submitit's ``additional_parameters`` entry ``(key, value)``; ``True``
    for a flag without a value.

    Raises:
        ValueError: no option name, or a name sbatch could not have.
    """
    text = line.strip()
    if text.startswith("#SBATCH"):
        text = text[len("#SBATCH") :].strip()
    m = _SBATCH.fullmatch(text.lstrip("-"))
    if m is None:
        raise ValueError(
            f"--sbatch {line!r}: expected an sbatch option such as --qos=high, --account=NAME or --exclusive"
        )
    return m.group(1), (m.group(2).strip() if m.group(2) else True)


@dataclass(frozen=True)
class Resources:
    """What each worker asks the scheduler for.

    Attributes:
        workers: number of workers (SLURM: tasks of one job array; local: processes).
        gpus_per_worker: GPUs per worker (0: none requested; local: CUDA_VISIBLE_DEVICES
            gets worker i the GPUs ``i*G .. i*G+G-1``).
        cpus_per_worker: CPUs per worker (SLURM ``--cpus-per-task``; ``None``: the cluster's default).
        mem: memory per worker, sbatch's form (``16G``, ``4000M``; ``None``: the default).
        time_min: time limit per task, minutes (SLURM ``--time``; local: ``None`` = none).
        partition: SLURM partition (``None``: the default one).
        sbatch: extra sbatch options, ``{name: value or True}`` (:func:`parse_sbatch_line`).
        signal_delay_s: seconds before the time limit at which submitit's signal comes.
        job_name: the jobs' name.
    """

    workers: int
    gpus_per_worker: int = 0
    cpus_per_worker: int | None = None
    mem: str | None = None
    time_min: int | None = None
    partition: str | None = None
    sbatch: dict = field(default_factory=dict)
    signal_delay_s: int = SIGNAL_DELAY_S
    job_name: str = "harness-work"

    def check(self) -> None:
        """Raises ``ValueError`` naming the first bad value and what is allowed."""
        if self.workers < 1:
            raise ValueError(f"--workers {self.workers}: must be at least 1")
        if self.gpus_per_worker < 0:
            raise ValueError(f"--gpus-per-worker {self.gpus_per_worker}: must be >= 0")
        if self.cpus_per_worker is not None and self.cpus_per_worker < 1:
            raise ValueError(f"--cpus-per-worker {self.cpus_per_worker}: must be at least 1")
        if self.mem is not None and not _MEM.fullmatch(self.mem):
            raise ValueError(f"--mem {self.mem!r}: expected sbatch's form, e.g. 16G or 4000M")
        if self.time_min is not None and self.time_min < 1:
            raise ValueError(f"--time {self.time_min}: must be at least 1 minute")
        if self.signal_delay_s < 1:
            raise ValueError(f"--signal-delay-s {self.signal_delay_s}: must be at least 1 second")
        if self.time_min is not None and self.signal_delay_s >= 60 * self.time_min:
            raise ValueError(
                f"--signal-delay-s {self.signal_delay_s}: must be shorter than --time "
                f"{self.time_min} min, or no step would run before the signal"
            )

    def slurm_parameters(self) -> dict:
        """``SlurmExecutor.update_parameters`` keywords."""
        params = {
            "job_name": self.job_name,
            "time": self.time_min,
            "signal_delay_s": self.signal_delay_s,
            "cpus_per_task": self.cpus_per_worker,
            "mem": self.mem,
            "partition": self.partition,
            "gpus_per_node": self.gpus_per_worker or None,
            "stderr_to_stdout": True,
            "additional_parameters": dict(self.sbatch) or None,
        }
        return {k: v for k, v in params.items() if v is not None}

    def local_parameters(self, worker: int) -> dict:
        """``LocalExecutor.update_parameters`` keywords of worker ``worker`` (0-based)."""
        g = self.gpus_per_worker
        return {
            "timeout_min": self.time_min or LOCAL_TIME_MIN,
            "signal_delay_s": self.signal_delay_s,
            "gpus_per_node": g,
            "visible_gpus": tuple(range(worker * g, (worker + 1) * g)),
            "stderr_to_stdout": True,
        }


@contextmanager
def _stdio_detached() -> Iterator[None]:
    """Standard input and output of the processes started in the block are ``/dev/null``.

    submitit's local controllers outlive ``harness launch``; inheriting its stdout they would
    hold a pipe open (a caller reading ``harness launch | tee`` would wait for them). Their
    tasks write to their own log files.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(fd) for fd in (0, 1, 2)]
    null = os.open(os.devnull, os.O_RDWR)
    try:
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        yield
    finally:
        for fd, copy in zip((0, 1, 2), saved):
            os.dup2(copy, fd)
            os.close(copy)
        os.close(null)


@contextmanager
def _stderr_kept(kept: list[str]) -> Iterator[None]:
    """What the processes started in the block write to stderr (sbatch's ``error:`` lines) goes
    into ``kept`` (its lines) instead of the terminal, so a refusal is said in one line."""
    import tempfile  # lazy: only when submitting to SLURM

    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as f:
        try:
            os.dup2(f.fileno(), 2)
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            f.seek(0)
            kept += [line for line in f.read().decode(errors="replace").splitlines() if line.strip()]


@contextmanager
def _sigint_ignored() -> Iterator[None]:
    """SIGINT is ignored in the processes started in the block (an ignored signal stays ignored
    across exec, and Python then installs no ``KeyboardInterrupt`` handler).

    submitit's local controller turns a Ctrl-C into ``KeyboardInterrupt``, forwards SIGINT to its
    task and SIGKILLs it a second later; ignoring it, the controller waits while its task (which
    catches SIGINT as it does SIGTERM: :class:`harness.scheduling.workers.launched_task.WorkerTask`) releases its
    run, says ``worker stopped (SIGINT)`` and ends, as after SIGTERM (a Ctrl-C to the process group must not SIGKILL a task mid-step).
    """
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def submit(
    executor: str, folder: Path, tasks: Sequence[Callable[[], object]], resources: Resources
) -> list[str]:
    """Submit one job per task with submitit; returns their job ids (SLURM ``ARRAY_TASK`` of one
    array, or a plain id for one task; local: the controllers' process ids).

    Raises:
        ValueError: ``executor`` not one of :data:`EXECUTORS`, or SLURM's ``srun`` not on PATH.
        SubmitRefused: sbatch refused the job (its message: SLURM not configured or unreachable,
            an option it does not accept).
    """
    import submitit  # lazy: submitit, only to launch or read a job

    resources.check()
    if executor == "slurm":
        if shutil.which("srun") is None or shutil.which("sbatch") is None:
            raise ValueError(
                "--executor slurm: srun/sbatch not found on PATH; run harness launch where SLURM's "
                "client commands are (a login node), or use --executor local"
            )
        ex = submitit.SlurmExecutor(folder=folder, max_num_timeout=MAX_TIMEOUTS)
        ex.update_parameters(**resources.slurm_parameters())
        said: list[str] = []
        try:
            with _stderr_kept(said):
                jobs = ex.submit_array(list(tasks))
        except submitit.core.utils.FailedJobError as exc:  # sbatch's own reason, e.g. no slurm.conf
            last = [line for line in str(exc).strip().splitlines() + said if line.strip()]
            raise SubmitRefused(f"sbatch refused the job: {last[-1].strip() if last else exc}") from None
        if said:  # a warning of an accepted job is still shown
            print("\n".join(said), file=sys.stderr)
        return [j.job_id for j in jobs]
    if executor == "local":
        ids = []
        with _stdio_detached(), _sigint_ignored():
            for i, task in enumerate(tasks):
                ex = submitit.LocalExecutor(folder=folder, max_num_timeout=MAX_TIMEOUTS)
                ex.update_parameters(**resources.local_parameters(i))
                ids.append(ex.submit(task).job_id)
        return ids
    raise ValueError(f"--executor {executor!r}: allowed: {', '.join(EXECUTORS)}")


# ----------------------------------------------------------------------------- records


@dataclass(frozen=True)
class LaunchRecord:
    """One ``harness launch``, as written to ``RESULTS/launches/<id>/launch.json``.

    Attributes:
        id: ``<UTC time>-<executor>`` (sorts by time), the folder's name.
        executor: ``slurm`` or ``local``.
        created: UTC time of the launch, ISO 8601.
        host: the machine it was launched from (local jobs run there).
        folder: submitit's folder of these jobs (absolute).
        job_ids: one per worker (see :func:`submit`).
        results: the results folder the workers write to (absolute).
        storage: where the queue is (passwords hidden).
        command: the ``harness work`` arguments each worker runs (passwords hidden).
        resources: :class:`Resources` as a dict.
    """

    id: str
    executor: str
    created: str
    host: str
    folder: str
    job_ids: list[str]
    results: str
    storage: str
    command: list[str]
    resources: dict

    @property
    def array_id(self) -> str | None:
        """The SLURM job (array) id the task ids share, ``None`` for local jobs."""
        return self.job_ids[0].split("_")[0] if self.executor == "slurm" and self.job_ids else None


class SubmitRefused(ValueError):
    """``sbatch`` refused a job; the message is one line ending with sbatch's own reason."""


def launch_folder(
    results: str | os.PathLike, executor: str, now: dt.datetime | None = None
) -> tuple[str, Path]:
    """``(id, folder)`` of a new launch under ``RESULTS/launches`` (created; unique)."""
    now = now or dt.datetime.now(dt.UTC)
    base = f"{now:%Y%m%d-%H%M%S}-{executor}"
    root = Path(results).resolve() / LAUNCH_DIR
    root.mkdir(parents=True, exist_ok=True)
    for n in range(1000):
        name = base if n == 0 else f"{base}-{n}"
        try:
            (root / name).mkdir()
            return name, root / name
        except FileExistsError:
            continue
    raise RuntimeError(f"could not create a launch folder {root / base}-N")


def write_record(record: LaunchRecord) -> Path:
    """Write ``record`` into its folder atomically; returns the file."""
    path = Path(record.folder) / RECORD_NAME
    atomic_write(path, json.dumps(asdict(record), indent=1))
    return path


def read_records(results: str | os.PathLike) -> list[LaunchRecord]:
    """Every launch recorded under ``RESULTS/launches``, newest first (unreadable records skipped)."""
    root = Path(results) / LAUNCH_DIR
    out = []
    for path in sorted(root.glob(f"*/{RECORD_NAME}"), reverse=True) if root.is_dir() else []:
        try:
            out.append(LaunchRecord(**json.loads(path.read_text())))
        except (OSError, ValueError, TypeError):
            continue
    return out


# ----------------------------------------------------------------------------- job states


@dataclass(frozen=True)
class JobState:
    """One worker's job as the scheduler (or the local process table) sees it now.

    Attributes:
        job_id: as in :attr:`LaunchRecord.job_ids`.
        state: SLURM's job state (``PENDING``, ``RUNNING``, ``COMPLETED``, ``FAILED``,
            ``CANCELLED`` ...), local ``RUNNING``/``FINISHED``/``FAILED``/``ENDED``, or
            ``UNKNOWN``.
        restarts: times SLURM requeued it (``None`` when not known).
        detail: why the state is what it is (one line), or ``''``.
        result: what the task returned (its outcome counts), when it has finished.
    """

    job_id: str
    state: str
    restarts: int | None = None
    detail: str = ""
    result: dict | None = None


def _result(folder: str, job_id: str) -> tuple[str, object] | None:
    """The ``(outcome, value)`` submitit pickled when the task ended, or ``None``."""
    from submitit.core.utils import JobPaths  # lazy: submitit, only to launch or read a job

    path = JobPaths(folder, job_id=job_id, task_id=0).result_pickle
    try:
        with open(path, "rb") as f:
            return pickle.load(f)
    except (OSError, pickle.UnpicklingError, EOFError, ValueError, AttributeError, ImportError):
        return None


def log_path(record: LaunchRecord, job_id: str) -> Path:
    """The log file (stdout and stderr) of one worker's task."""
    from submitit.core.utils import JobPaths  # lazy: submitit, only to launch or read a job

    return JobPaths(record.folder, job_id=job_id, task_id=0).stdout


def _squeue(job: str) -> dict[str, tuple[str, int]]:
    """``task id -> (state, restarts)`` of every element of SLURM job ``job`` the controller holds."""
    fmt = "ArrayJobID:32,ArrayTaskID:32,JobID:32,State:32,RestartCnt:12"
    try:
        proc = subprocess.run(
            ["squeue", "-h", "-r", "-t", "all", "-j", job, "-O", fmt],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return {}
    out = {}
    for line in proc.stdout.splitlines() if proc.returncode == 0 else []:
        parts = line.split()
        if len(parts) == 5:
            array, task, jid, state, restarts = parts
            key = f"{array}_{task}" if task not in ("N/A", "") else jid
            out[key] = (state, int(restarts) if restarts.isdigit() else 0)
    return out


def _sacct(job: str) -> dict[str, str]:
    """``task id -> state`` from SLURM accounting (empty where the cluster keeps none)."""
    try:
        proc = subprocess.run(
            ["sacct", "-n", "-P", "-X", "-j", job, "-o", "JobID,State"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return {}
    pairs = (line.split("|") for line in proc.stdout.splitlines() if proc.returncode == 0 and "|" in line)
    return {jid: state.split()[0] for jid, state, *_ in pairs if state}


def job_states(record: LaunchRecord) -> list[JobState]:
    """The state of each of ``record``'s jobs, in :attr:`LaunchRecord.job_ids` order."""
    if record.executor == "slurm":
        return _slurm_states(record)
    return [_local_state(record, jid) for jid in record.job_ids]


def _finished(record: LaunchRecord, jid: str) -> dict | None:
    got = _result(record.folder, jid)
    return got[1] if got and got[0] == "success" and isinstance(got[1], dict) else None


def _slurm_states(record: LaunchRecord) -> list[JobState]:
    if shutil.which("squeue") is None:
        return [JobState(jid, "UNKNOWN", detail="squeue not found on PATH") for jid in record.job_ids]
    live = _squeue(record.array_id)
    missing = [jid for jid in record.job_ids if jid not in live]
    accounted = _sacct(record.array_id) if missing and shutil.which("sacct") else {}
    out = []
    for jid in record.job_ids:
        if jid in live:
            state, restarts = live[jid]
            out.append(JobState(jid, state, restarts, result=_finished(record, jid)))
        elif jid in accounted:
            out.append(JobState(jid, accounted[jid], result=_finished(record, jid)))
        else:
            out.append(
                JobState(
                    jid,
                    "UNKNOWN",
                    detail="not in squeue any more and no accounting record (sacct)",
                    result=_finished(record, jid),
                )
            )
    return out


def _local_state(record: LaunchRecord, jid: str) -> JobState:
    if record.host != hostname():
        return JobState(jid, "UNKNOWN", detail=f"a local job of host {record.host}")
    pid = int(jid)
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        cmdline = b""
    if pid_alive(pid) and b"submitit" in cmdline:  # the controller; its name guards against pid reuse
        return JobState(jid, "RUNNING")
    got = _result(record.folder, jid)
    if got is None:
        try:
            log = log_path(record, jid).read_text(errors="replace").splitlines()
        except OSError:
            log = []
        stopped = [ln for ln in log if ln.startswith("worker stopped (")]
        return JobState(
            jid,
            "ENDED",
            detail=stopped[-1].split(";")[0]
            if stopped
            else "the process is gone and left no result (killed?)",
        )
    if got[0] == "success":
        return JobState(jid, "FINISHED", result=got[1] if isinstance(got[1], dict) else None)
    lines = [ln for ln in str(got[1]).splitlines() if ln.strip()]
    return JobState(jid, "FAILED", detail=lines[-1].strip() if lines else "")


__all__ = [
    "LAUNCH_DIR",
    "RECORD_NAME",
    "EXECUTORS",
    "SIGNAL_DELAY_S",
    "MAX_TIMEOUTS",
    "parse_sbatch_line",
    "Resources",
    "submit",
    "LaunchRecord",
    "launch_folder",
    "SubmitRefused",
    "write_record",
    "read_records",
    "JobState",
    "log_path",
    "job_states",
]
