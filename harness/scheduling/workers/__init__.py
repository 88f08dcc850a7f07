"""A worker process (DESIGN section 10): what ``harness work`` and each launched task run.

* :mod:`~harness.scheduling.workers.options` -- what one worker is asked to do (``harness work``'s
  options, a launched task's);
* :mod:`~harness.scheduling.workers.start` -- starting a worker: its checks before the first claim, the
  queue, its GPUs and hardware gate, then the loop;
* :mod:`~harness.scheduling.workers.starting` -- a worker that has started but claims no run yet, as
  ``harness status`` lists it ("starting workers");
* :mod:`~harness.scheduling.workers.loop` -- the loop: claim a run, train it, tell the queue; repeat;
* :mod:`~harness.scheduling.workers.claiming` -- taking a run (stale leases reclaimed first);
* :mod:`~harness.scheduling.workers.retry` -- the retry policy: which faults spend a retry, how many,
  and every release of a claimed run (the environment's faults, a configuration error, an interrupt);
* :mod:`~harness.scheduling.workers.fence` -- may this worker still write the claimed run?
* :mod:`~harness.scheduling.workers.devices` -- the GPUs a worker trains on, and refusing a GPU request
  on a machine without one;
* :mod:`~harness.scheduling.workers.launched_task` -- the submitit task of ``harness launch``.

Workers use the queue (:mod:`harness.scheduling.queue`) and never change its layout; they parse no
command line (the commands map their options to :class:`~harness.scheduling.workers.options.WorkOptions`).
"""
