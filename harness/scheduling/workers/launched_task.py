"""The task a launched worker runs (``harness launch``): ``harness work`` under submitit's
requeue protocol (DESIGN section 10). Its own module so that ``harness launch --help`` and the
other commands never import submitit; ``harness.commands.launch`` loads it only to launch.
"""

from __future__ import annotations

import signal

import submitit

from harness.scheduling.workers.loop import summary
from harness.scheduling.workers.options import WorkOptions
from harness.scheduling.workers.start import run_worker
from harness.train.stop import StopRequest


class WorkerTask(submitit.helpers.Checkpointable):
    """One launched worker: :func:`~harness.scheduling.workers.start.run_worker` with its options, and
    signals turned into a stop at the next batch boundary (:class:`~harness.train.stop.StopRequest`).

    After a stop by ``SIGUSR1``/``SIGUSR2`` the handler that submitit installed for its
    signal (``submitit.JobEnvironment.USR_SIG``) is called: it calls :meth:`checkpoint`,
    stores what it returns as the job's task and requeues the job (SLURM ``scontrol requeue``,
    locally exit code 144, which restarts the process), then exits. After ``SIGTERM`` or ``SIGINT``
    (a Ctrl-C to the process group of a local launch) the task
    exits with 130; SLURM requeues the job itself when it preempts or requeues it. Either
    way the run being trained is back in the queue first, with a checkpoint of its last step.

    Args:
        options: what the worker does (:class:`~harness.scheduling.workers.options.WorkOptions`: its
            results folder absolute, storage, grid, threads ...), pickled whole with the task.

    Returns (when called):
        the outcome counts of the runs it trained (``done``, ``diverged``, ``failed``).
    """

    def __init__(self, options: WorkOptions) -> None:
        self.options = options

    def __call__(self) -> dict:
        stop = StopRequest()
        outcomes = None
        with stop.catching(signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM, signal.SIGINT) as previous:
            try:
                outcomes = run_worker(self.options, stop=stop)
            except KeyboardInterrupt:
                if not stop.requested:
                    raise
        if outcomes is not None:
            print(summary(outcomes), flush=True)
        if not stop.requested:
            return dict(outcomes)
        handler = previous.get(getattr(signal, "SIG" + submitit.JobEnvironment.USR_SIG))
        usr = [s for s in stop.signals if s in (signal.SIGUSR1, signal.SIGUSR2)]
        if usr and callable(handler):
            print(
                f"worker stopped ({stop.requested}); its run, if any, is back in the queue with a checkpoint "
                "of its last step; requeueing this task",
                flush=True,
            )
            handler(usr[0], None)  # submitit's: self.checkpoint(), requeue, exit
        print(
            f"worker stopped ({stop.requested}); its run, if any, is back in the queue with a checkpoint "
            "of its last step; the task ends",
            flush=True,
        )
        raise SystemExit(130)

    def checkpoint(self, *args, **kwargs) -> submitit.helpers.DelayedSubmission:
        """The task to requeue: a fresh worker with the same arguments. What a requeued worker
        needs is in the queue (the released run) and in the run's checkpoint file."""
        return submitit.helpers.DelayedSubmission(WorkerTask(self.options))


__all__ = ["WorkerTask"]
