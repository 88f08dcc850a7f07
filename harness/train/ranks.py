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
* SIGTERM to rank 0 is a stop request (:class:`~harness.train.stop.StopRequest`,
  unless the caller owns the signals): all ranks checkpoint at the next step boundary and
  stop, and the run is given back (:class:`~harness.train.runner.RunInterrupted`). The
  children run in their own session (a terminal's Ctrl-C reaches rank 0 only), ignore
  SIGTERM and SIGINT (rank 0 decides) and die with rank 0 (``PR_SET_PDEATHSIG``). When
  rank 0 leaves the run on an error, children still running are killed.
* Lightning's own SIGTERM handling is switched off on every rank: its handler runs a collective
  inside the signal handler, which can pair with an unrelated collective of another rank, and its
  loop broadcasts a SIGTERM flag before every step (a host synchronisation per step).
* The rendezvous port is bound by rank 0 when the group is made and held until it ends (a
  ``TCPStore`` every rank joins): no other process can take it between choosing and binding.
* A child rank that dies stops the run within seconds (:class:`RankGroup`'s watcher): killed by
  a signal or exiting other than with its run's error, it is the machine's fault
  (:class:`~harness.common.faults.RankDied`, naming the rank and its exit status; a worker gives the run
  back, no retry spent).

Processes started by ``torchrun`` or by ``srun`` with several tasks (several nodes,
``--num-nodes``) are already ranks: then nothing is started here (:func:`started_externally`).
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

from harness.common.faults import CONTEXT_LOST_EXIT, RUN_ERROR_EXIT, CudaContextLost, RankDied
from harness.train.execution import ExecutionSettings
from harness.train.fencing import Fence
from harness.train.stop import StopRequest

#: the environment a rank process reads; rank 0 sets it on itself for the run and restores it after
AGENT_STORE_ENV = "TORCHELASTIC_USE_AGENT_STORE"  # "True": every rank joins rank 0's store as a client
RANK_ENV = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "NODE_RANK", AGENT_STORE_ENV)
SPEC_ENV = "HARNESS_RANK_SPEC"  # the child's JSON spec: run config, results folder, fencing epoch
SETTINGS_ENV = "HARNESS_RANK_SETTINGS"  # the child's ExecutionSettings, whole (ExecutionSettings.to_json)
WATCH_S = 0.5  # how often rank 0 looks for a dead child, seconds
CHILD = "import sys; from harness.train.rank_child import main; sys.exit(main())"  # not -m: harness.train imports us
STOP_GRACE_S = 30.0  # how long children get to finish after rank 0 left the run, seconds
# how long rank 0, leaving on an error, waits for a child to exit first, seconds: a child that raised
# closes its sockets (rank 0's collective fails) seconds before its exit status tells why (Lightning's
# teardown, its traceback); a child blocked in a collective waits this long for rank 0 to end the group
EXIT_WAIT_S = 15.0


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
            import torch  # lazy: only when a group of ranks is made

            return max(1, torch.cuda.device_count())
        return 1
    return int(devices)


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

    Entering binds the run's rendezvous store (a ``TCPStore`` server on a port the kernel picks, held
    by this process until the group ends, so no other process can take it between choosing and
    binding; every rank, rank 0 too, joins it as a client: ``TORCHELASTIC_USE_AGENT_STORE``, as under
    torchrun) and sets :data:`RANK_ENV` on this process for rank 0 (restored on exit). :meth:`start`
    starts ranks 1..n-1 (call it once the run is built, before it is fitted) and a watcher thread:
    a child that exits with a non-zero status is noticed within :data:`WATCH_S`; the other children
    are killed, the rendezvous store closed and an NCCL process group aborted, so rank 0 fails at its
    next collective (or rendezvous) instead of waiting for NCCL's timeout. Leaving destroys the
    process group, waits up to :data:`STOP_GRACE_S` for the children (not at all when leaving on an
    exception) and kills those still running.

    Raises:
        OSError: a child process could not be started (from :meth:`start`).
        RankDied: leaving on an exception after a child died by a signal or an exit status other than
            its run's own error (from ``__exit__``; the exception it replaces is its ``__cause__``): the
            machine's fault, the run is given back (:mod:`harness.common.faults`).
        RuntimeError: leaving on an exception after a child's training raised
            (:data:`~harness.common.faults.RUN_ERROR_EXIT`): the run's fault, a failed attempt.
        CudaContextLost: leaving on an exception after a child met a sticky CUDA error
            (:data:`~harness.common.faults.CONTEXT_LOST_EXIT`): released, the worker stops.
    """

    def __init__(self, n: int) -> None:
        if n < 2:
            raise ValueError(f"a rank group needs at least 2 ranks, got {n}")
        self.n = n
        self.children: list[subprocess.Popen] = []
        self._saved: dict[str, str | None] = {}
        self.env: dict[str, str] = {}
        self.store = None
        self.exited: tuple[int, int] | None = None  # (rank, status) of the first child that failed
        self._left = threading.Event()

    def __enter__(self) -> RankGroup:
        from torch.distributed import TCPStore  # lazy: only when a group is made

        # port 0: the kernel picks a free port and this server holds it for the group's life
        self.store = TCPStore("127.0.0.1", 0, self.n, is_master=True, wait_for_workers=False)
        self.env = {
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(self.store.port),
            "WORLD_SIZE": str(self.n),
            "NODE_RANK": "0",
            AGENT_STORE_ENV: "True",
        }
        self._saved = {k: os.environ.get(k) for k in RANK_ENV}
        os.environ.update(self.env, RANK="0", LOCAL_RANK="0")
        return self

    def start(self, spec: dict, settings: ExecutionSettings) -> None:
        """Start ranks 1..n-1, each running :func:`main` with ``spec`` (JSON: the run) and ``settings``
        (whole, :meth:`~harness.train.execution.ExecutionSettings.to_json`) in a new Python, and the watcher."""
        for rank in range(1, self.n):
            env = {
                **os.environ,
                **self.env,
                "RANK": str(rank),
                "LOCAL_RANK": str(rank),
                SPEC_ENV: json.dumps({**spec, "parent": os.getpid()}),
                SETTINGS_ENV: settings.to_json(),
            }
            self.children.append(
                subprocess.Popen([sys.executable, "-c", CHILD], env=env, start_new_session=True)
            )
        threading.Thread(target=self._watch, name="rank-watcher", daemon=True).start()

    def _watch(self) -> None:
        """Until the group ends: the first child that exited with a non-zero status is kept in
        :attr:`exited`; then the other children are killed, the rendezvous store is closed (a rank 0
        still waiting there for its peers fails now) and an NCCL process group aborted."""
        while not self._left.wait(WATCH_S):
            exited = self._first_exit()
            if exited is not None:
                self.exited = exited
                self._kill_children()
                self.store = None  # the server closes its connections: a waiting client raises
                _abort_nccl()
                return

    def _first_exit(self) -> tuple[int, int] | None:
        """``(rank, exit status)`` of the first child found exited with a non-zero status, else ``None``."""
        for rank, p in enumerate(self.children, start=1):
            code = p.poll()
            if code:
                return rank, code
        return None

    def __exit__(self, exc_type, exc, tb) -> None:
        import torch.distributed as dist  # lazy: only when a group is made

        exited = self._exit_behind(exc)  # before this rank's teardown makes the children fail too
        try:
            if dist.is_available() and dist.is_initialized():
                dist.destroy_process_group()  # the next run of this worker builds a new one
        finally:
            self._left.set()
            self._stop_children(grace_s=STOP_GRACE_S if exc is None else 0.0)
            self.store = None  # the port is free again
            for k, v in self._saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        if exited is not None:
            self._raise_exited(exited, exc)

    def _raise_exited(self, exited: tuple[int, int], exc: BaseException | None) -> None:
        rank, code = exited
        if code == RUN_ERROR_EXIT:  # the run's own error (a bug, a bad file): a failed attempt
            raise RuntimeError(
                f"rank {rank} of {self.n} raised (exit status {code}; its traceback is on stderr above)"
            ) from exc
        if code == CONTEXT_LOST_EXIT:  # its CUDA context is dead: the machine's fault
            raise CudaContextLost(
                f"rank {rank} of {self.n} met a CUDA error that poisons its context (exit status {code}; "
                "its traceback is on stderr above)"
            ) from exc
        raise RankDied(rank, code) from exc

    def check_children(self) -> None:
        """Raise when a child rank has exited with a non-zero status so far (what the watcher saw, which
        it records before it aborts NCCL, or a look now): called by rank 0 after every rank passed the
        run's end barrier, before it records the run, so a run whose collective a dead rank may have
        cut short (an aborted NCCL all-reduce can return partial sums without raising) is never
        recorded as done.

        Raises:
            RankDied: a child died by a signal or an exit status other than its run's error.
            RuntimeError: a child's training raised (:data:`~harness.common.faults.RUN_ERROR_EXIT`).
        """
        exited = self.exited or self._first_exit()
        if exited is not None:
            self._raise_exited(exited, None)

    def _exit_behind(self, exc: BaseException | None) -> tuple[int, int] | None:
        """``(rank, exit status)`` of the child whose exit made rank 0 leave on ``exc`` (``None`` when it
        left normally, was interrupted, or no child exited within :data:`EXIT_WAIT_S`): a collective
        can fail seconds before the child's exit status is there to tell why."""
        if exc is None or isinstance(exc, KeyboardInterrupt):
            return None
        deadline = time.monotonic() + EXIT_WAIT_S
        while self.exited is None and time.monotonic() < deadline:
            gone = all(p.poll() is not None for p in self.children)  # all gone (a lost lease: status 0)
            self.exited = self._first_exit()  # not only the watcher's look: it may not have run yet
            if gone:
                break
            time.sleep(0.05)
        return self.exited

    def _kill_children(self) -> None:
        for p in self.children:
            if p.poll() is None:
                p.kill()

    def _stop_children(self, grace_s: float) -> None:
        """Wait up to ``grace_s`` seconds for the children, then SIGKILL those still running
        (they hold nothing to save: rank 0 writes every checkpoint and the result)."""
        for p in self.children:
            try:
                p.wait(grace_s)
            except subprocess.TimeoutExpired:
                pass
        self._kill_children()
        for p in self.children:
            p.wait()


def _abort_nccl() -> None:
    """Abort the NCCL communicators of the default process group, if it is one: a collective waiting
    for a dead peer then fails now instead of after NCCL's timeout (gloo fails by itself: the peer's
    sockets close). Untested here (no GPUs): written against torch's ``ProcessGroup._get_backend``."""
    import torch  # lazy: only when a group is made
    import torch.distributed as dist

    try:
        if dist.is_initialized() and dist.get_backend() == "nccl":
            dist.group.WORLD._get_backend(torch.device("cuda")).abort()
    except Exception as exc:  # noqa: BLE001 - best effort: the collective's own timeout remains
        print(f"warning: aborting NCCL after a dead rank failed ({exc!r})", file=sys.stderr, flush=True)


def sum_over_ranks(tensors: list, count: int) -> int:
    """Sum ``tensors`` (each on this rank's device, any float dtype) over every rank, in place, in one
    all-reduce (as float64), and ``count``; returns the summed ``count``. Every rank must call it with
    tensors of the same shapes in the same order (an evaluation's token sums, DESIGN section 11)."""
    import torch  # lazy: only when several ranks evaluate
    import torch.distributed as dist

    total = torch.tensor([float(count)], dtype=torch.float64, device=tensors[0].device)
    flat = torch.cat([t.reshape(-1).double() for t in tensors] + [total])
    dist.all_reduce(flat)
    offset = 0
    for t in tensors:
        t.copy_(flat[offset : offset + t.numel()].view_as(t))
        offset += t.numel()
    return int(flat[-1].item())


def quiet_lightning_sigterm(trainer) -> None:
    """Switch off Lightning's SIGTERM handling on ``trainer`` (private hooks of Lightning 2.6, pinned
    in ``requirements.lock``): its notifier broadcasts from inside the signal handler, a collective
    the other ranks do not make at that point (a hang or a mismatched collective), and its training
    loop broadcasts a SIGTERM flag before every step and reads it back (a host synchronisation per
    step). A stop is rank 0's :class:`StopRequest`, broadcast at a decision step
    (:class:`~harness.train.progress.RunCallback`)."""
    trainer._signal_connector._sigterm_notifier_fn = lambda signum, frame: None
    trainer.fit_loop.epoch_loop._broadcast_sigterm_tensor = lambda: None


@dataclass(frozen=True)
class RunRanks:
    """How :func:`harness.train.runner.train_run` spreads a run over ranks.

    Attributes:
        n: ranks this process starts (> 1: it is rank 0 of a :class:`RankGroup`, on one node).
        several: the run has several ranks (started here, or by torchrun/srun).
        own_stop: the stop request SIGTERM sets (``None``: one rank, a caller's ``stop_requested``,
            or not the main thread, which alone can take signals).
        settings: what every rank trains with (``ddp``, ``n`` devices, one node when this process
            starts them).
    """

    n: int
    several: bool
    own_stop: StopRequest | None
    settings: ExecutionSettings


def plan_ranks(settings: ExecutionSettings, stop_requested, accelerator: str) -> RunRanks:
    """The :class:`RunRanks` of a run with ``settings`` on ``accelerator`` (resolved: ``cpu`` or
    ``gpu``); ``stop_requested`` is the caller's stop request (``None``: none)."""
    n = ranks_to_start(settings.devices, accelerator)  # > 1: starts the others
    several = n > 1 or started_externally()
    # With several ranks SIGTERM asks all of them to stop at a step boundary (rank 0's request is
    # broadcast), unless the caller owns the signals, or cannot have them (only the main thread can)
    main = threading.current_thread() is threading.main_thread()
    own_stop = StopRequest() if several and stop_requested is None and main else None
    if n > 1:
        strategy = "ddp" if settings.strategy == "auto" else settings.strategy
        settings = settings.replace(strategy=strategy, devices=n, num_nodes=1)
    return RunRanks(n=n, several=several, own_stop=own_stop, settings=settings)
