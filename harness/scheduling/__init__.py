"""Scheduling: a grid becomes queued runs; workers take them, one worker per run (DESIGN 1.1-1.2, 10).

* :mod:`harness.scheduling.grid` -- read and check a grid TOML, expand it into
  :class:`~harness.design.config.RunConfig` s in queue order;
* :mod:`harness.scheduling.storage` -- where the queue lives (journal file, PostgreSQL),
  retrying a storage that is briefly unreachable, and holding a trial against takeover;
* :mod:`harness.scheduling.journal` -- the journal file backend that survives a torn
  write, names a corrupt line, and its repair (``harness queue --repair``);
* :mod:`harness.scheduling.queue` -- :class:`RunQueue`: the runs as Optuna trials, taken
  and finished atomically, retried and reclaimed;
* :mod:`harness.scheduling.queueadd` -- adding runs: a grid's runs (idempotent, under the grid's
  lock), a requeued run's next attempt, the attempts a dead process did not create;
* :mod:`harness.scheduling.queueread` -- the queue's studies (one per grid) and reading every
  run's trials out of them (:class:`RunQueue`'s reading half);
* :mod:`harness.scheduling.queueops` -- the storage operations a worker makes per run, whose
  cost does not grow with the queue's history (live trials, one run's trials, a claim, batches);
* :mod:`harness.scheduling.trials` -- what a queue trial says: the records (claim, run state) and
  one run's trials folded into its state;
* :mod:`harness.scheduling.lease` -- worker leases and their heartbeat (is a worker alive?);
* :mod:`harness.scheduling.fence` -- the :class:`~harness.train.fencing.Fence` of a claim: may this
  worker still write the run's checkpoints and result?
* :mod:`harness.scheduling.worker` -- the loop of ``harness work`` around
  :func:`harness.train.train_run`;
* :mod:`harness.scheduling.worker_run` -- a worker process: its options (:class:`WorkOptions`), its
  GPU claim, the loop run with them (``harness work`` and a launched task);
* :mod:`harness.scheduling.launch` -- workers submitted with submitit (a SLURM job array,
  local processes), the launch records and the jobs' states.
"""
