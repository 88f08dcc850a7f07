"""Scheduling: a grid becomes queued runs; workers take them, one worker per run (DESIGN 1.1-1.2, 10).

Three sub-packages and two modules, each one concept; imports point ``workers`` -> ``queue`` and
``grids``, ``launch`` -> ``queue``, and ``queue`` / ``grids`` -> ``tuning``, never back:

* :mod:`harness.scheduling.grids` -- a grid file: read, checked, expanded into
  :class:`~harness.design.config.RunConfig` s, edited (tuned settings written in), and what it needs of
  its corpus;
* :mod:`harness.scheduling.queue` -- the run queue on Optuna storage: :class:`RunQueue
  <harness.scheduling.queue.run_queue.RunQueue>`, its storage and journal file, what a trial says, the
  lease a worker holds on a run, and converting the previous layout (``harness migrate``);
* :mod:`harness.scheduling.workers` -- a worker process: its options, its GPUs, the loop that claims and
  trains runs inside their fence, and the retry policy (which faults spend a retry; releasing a run);
* :mod:`harness.scheduling.launch` -- workers submitted with submitit (a SLURM job array, local
  processes), the launch records and the jobs' states;
* :mod:`harness.scheduling.tuning` -- tuning studies (``harness tune``): the search space and the
  sampler's draws.
"""
