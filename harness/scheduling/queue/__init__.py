"""The run queue on Optuna storage (DESIGN sections 1.1 and 9): one study per grid, one trial per attempt.

* :mod:`~harness.scheduling.queue.run_queue` -- :class:`~harness.scheduling.queue.run_queue.RunQueue`:
  adding runs, reading them, taking one under a lease, recording how each attempt ends;
* :mod:`~harness.scheduling.queue.adding` -- which of a grid's runs a queue adds, and an imported
  archive's runs in the state they ended;
* :mod:`~harness.scheduling.queue.live_trials` -- the storage operations a worker makes per run, whose
  cost does not grow with the queue's history;
* :mod:`~harness.scheduling.queue.trials` -- what a queue trial says (what each ending writes on it), and
  one run's trials folded into its state;
* :mod:`~harness.scheduling.queue.hardware_pairs` -- ``[schedule] pair_hardware``: both runs of a seed on
  one hardware class and numerics;
* :mod:`~harness.scheduling.queue.storage` -- where the queue lives (journal file, PostgreSQL) and
  riding out an outage; :mod:`~harness.scheduling.queue.journal` -- the journal file that survives a
  torn write, and its repair;
* :mod:`~harness.scheduling.queue.lease` -- the lease a worker holds on a run and its heartbeat;
* :mod:`~harness.scheduling.queue.legacy` -- converting the previous layout (``harness migrate``).

Nothing here trains a run or reads a grid file: the queue stores
:class:`~harness.design.config.RunConfig` s and never imports :mod:`harness.scheduling.workers` or
:mod:`harness.scheduling.grids`.
"""
