"""One run on N ranks of this machine (DESIGN section 11).

``harness run --devices N`` and a worker of ``harness work --devices N`` train ONE run on
N ranks: the process that built the run (the worker, which holds the run's lease) is rank
0, and it starts ranks 1..N-1 as child processes running :func:`main` around that run only, never around the worker loop (Lightning's own launcher re-executes
the whole command line, so each further rank of ``harness work`` would claim a run of its
own). Every rank gets ``MASTER_ADDR``/``MASTER_PORT``, ``WORLD_SIZE``, ``RANK``,
``LOCAL_RANK`` and ``NODE_RANK``; with ``LOCAL_RANK`` set, Lightning's
``LightningEnvironment`` takes the processes as started externally and launches none.

* Rank 0 writes the checkpoints and the result file; it alone knows the lease, a stop
  request and a pruner's verdict, and :class:`~harness.train.progress.RunCallback`
  broadcasts its decisions, so every rank stops at the same step.
* The children start after rank 0 has prepared the checkpoint to resume from, so they
  read the same file and write nothing of their own (:class:`RankFence`).
* Rank r reads rows ``r::N`` of every global batch (:mod:`harness.data.datamodule`): the
  global batch, and so the paired protocol, does not depend on N.
* SIGTERM to rank 0 is a stop request (:class:`~harness.scheduling.stop.StopRequest`,
  unless the caller owns the signals): all ranks checkpoint at the next step boundary and
  stop, and the run is given back (:class:`~harness.train.runner.RunInterrupted`). The
  children run in their own session (a terminal's Ctrl-C reaches rank 0 only), ignore
  SIGTERM and SIGINT (rank 0 decides) and die with rank 0 (``PR_SET_PDEATHSIG``). When
  rank 0 leaves the run on an error, children still running are killed.
* Lightning's own SIGTERM handler is switched off on every rank: it runs a collective
  inside the signal handler, which can pair with an unrelated collective of another rank.

Processes started by ``torchrun`` or by ``srun`` with several tasks (several nodes,
``--num-nodes``) are already ranks: then nothing is started here (:func:`started_externally`).
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
from contextlib import closing

from harness.fencing import Fence

#: the environment a rank process reads; rank 0 sets it on itself for the run and restores it after
RANK_ENV = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "NODE_RANK")
SPEC_ENV = "HARNESS_RANK_SPEC"  # the child's JSON spec: run config, results folder, trainer settings
CHILD = "import sys; from harness.train.rank_child import main; sys.exit(main())"  # not -m: harness.train imports us
STOP_GRACE_S = 30.0  # how long children get to finish after rank 0 left the run, seconds


def started_externally() -> bool:
    """Whether this process is already one rank of several: ``LOCAL_RANK`` set (our children,
    ``torchrun``) or a SLURM step of several tasks (:func:`harness.train.trainer.cluster_environment`)."""
    return "LOCAL_RANK" in os.environ or int(os.environ.get("SLURM_NTASKS", "1")) > 1


def env_rank() -> int:
    """This process's global rank as its launcher set it (``RANK``; ``SLURM_PROCID`` in a SLURM
    step of several tasks), 0 when it is the only process."""
    if "RANK" in os.environ:
        return int(os.environ["RANK"])
    if int(os.environ.get("SLURM_NTASKS", "1")) > 1:
        return int(os.environ.get("SLURM_PROCID", "0"))
    return 0


def ranks_to_start(devices: int | str, accelerator: str) -> int:
    """How many ranks this process must run the run on itself: ``devices`` (``auto``: every
    visible GPU on a GPU, 1 elsewhere), or 1 when the ranks were started externally."""
    if started_externally():
        return 1
    if devices == "auto":
        if accelerator in ("gpu", "cuda"):
            import torch

            return max(1, torch.cuda.device_count())
        return 1
    return int(devices)


def free_port() -> int:
    """A TCP port free on this host now (the rendezvous port of one run's ranks)."""
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RankFence(Fence):
    """The fence of ranks 1..N-1: rank 0's epoch (so they read its checkpoint folder) and never
    lost by themselves; rank 0 checks the lease and broadcasts what it found."""

    def __init__(self, epoch: int | None) -> None:
        self.epoch = epoch


def die_with_parent(parent: int) -> None:
    """Have the kernel SIGKILL this process when its parent (rank 0) dies; exit at once when
    it is already gone. Set by the child itself (a ``preexec_fn`` is unsafe in a process with
    threads, as a worker is: its lease heartbeat)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (
        OSError,
        AttributeError,
    ):  # not glibc Linux: a child outlives a SIGKILLed rank 0 until its timeout
        return
    if os.getppid() != parent:  # rank 0 died before the line above
        os._exit(1)


class RankGroup:
    """Rank 0's side of one run on ``n`` local ranks: a context manager around the run.

    Entering sets :data:`RANK_ENV` on this process for rank 0 (restored on exit);
    :meth:`start` starts ranks 1..n-1 (call it once the run is built, before it is fitted);
    leaving destroys the process group, waits up to :data:`STOP_GRACE_S` for the children
    (not at all when leaving on an exception) and kills those still running.

    Raises (from :meth:`start`):
        OSError: a child process could not be started.
    """

    def __init__(self, n: int) -> None:
        if n < 2:
            raise ValueError(f"a rank group needs at least 2 ranks, got {n}")
        self.n = n
        self.children: list[subprocess.Popen] = []
        self._saved: dict[str, str | None] = {}
        self.env: dict[str, str] = {}

    def __enter__(self) -> RankGroup:
        self.env = {
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(free_port()),
            "WORLD_SIZE": str(self.n),
            "NODE_RANK": "0",
        }
        self._saved = {k: os.environ.get(k) for k in RANK_ENV}
        os.environ.update(self.env, RANK="0", LOCAL_RANK="0")
        return self

    def start(self, spec: dict) -> None:
        """Start ranks 1..n-1, each running :func:`main` with ``spec`` (JSON) in a new Python."""
        for rank in range(1, self.n):
            env = {
                **os.environ,
                **self.env,
                "RANK": str(rank),
                "LOCAL_RANK": str(rank),
                SPEC_ENV: json.dumps({**spec, "parent": os.getpid()}),
            }
            self.children.append(
                subprocess.Popen([sys.executable, "-c", CHILD], env=env, start_new_session=True)
            )

    def __exit__(self, *exc) -> None:
        import torch.distributed as dist

        try:
            if dist.is_available() and dist.is_initialized():
                dist.destroy_process_group()  # the next run of this worker builds a new one
        finally:
            self._stop_children(grace_s=STOP_GRACE_S if exc[0] is None else 0.0)
            for k, v in self._saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    def _stop_children(self, grace_s: float) -> None:
        """Wait up to ``grace_s`` seconds for the children, then SIGKILL those still running
        (they hold nothing to save: rank 0 writes every checkpoint and the result)."""
        for p in self.children:
            try:
                p.wait(grace_s)
            except subprocess.TimeoutExpired:
                pass
        for p in self.children:
            if p.poll() is None:
                p.kill()
                p.wait()


def quiet_lightning_sigterm(trainer) -> None:
    """Switch off Lightning's SIGTERM notifier on ``trainer`` (a private hook of Lightning 2.6,
    pinned in ``requirements.lock``): in a run of several ranks it broadcasts from inside the
    signal handler, a collective the other ranks do not make at that point (a hang or a
    mismatched collective); a stop is rank 0's :class:`StopRequest`, broadcast at a step boundary."""
    trainer._signal_connector._sigterm_notifier_fn = lambda signum, frame: None
