"""One module per ``harness`` subcommand: docstring = help (with an example),
``add_arguments(parser)`` and ``main(args) -> int``; :data:`harness.cli.COMMANDS` maps the names.

In the order of the research loop:

* :mod:`~harness.commands.prepare` -- a corpus streamed into token shards once, before the workers;
* :mod:`~harness.commands.run` -- train one run and store its result;
* :mod:`~harness.commands.tune` -- tune a variant's training settings before freezing the protocol;
* :mod:`~harness.commands.queue` -- a grid expanded into runs and added to the run queue;
* :mod:`~harness.commands.work` -- a worker: train queued runs until the queue is empty;
* :mod:`~harness.commands.launch` -- workers launched with submitit (SLURM, local processes);
* :mod:`~harness.commands.status` -- the queue's runs per grid and state, progress, ETAs, launched jobs;
* :mod:`~harness.commands.sql` -- read-only SQL on the results database;
* :mod:`~harness.commands.export` -- a grid's rows of a results table to Parquet or CSV;
* :mod:`~harness.commands.archive` -- a grid's results as one portable file;
* :mod:`~harness.commands.restore` -- ``harness import``: an archive restored into a results folder;
* :mod:`~harness.commands.retrain` -- archived pairs re-trained here (the re-train check);
* :mod:`~harness.commands.report` -- the paired significance report of a grid;
* :mod:`~harness.commands.plan` -- the MDE, seeds needed and their cost, before the runs;
* :mod:`~harness.commands.topup` -- seeds added up to the next look where a cell can still decide;
* :mod:`~harness.commands.followup` -- the factorial grid that separates a treatment from a control;
* :mod:`~harness.commands.bench` -- routing and harness overhead;
* :mod:`~harness.commands.sizes` -- the size presets x variants table with parameter counts;
* :mod:`~harness.commands.migrate` -- a queue of the previous layout converted to one study per grid;
* :mod:`~harness.commands.options` -- the options several commands share, declared once.
"""
