"""What every stage shares; imports nothing from harness.

* :mod:`harness.common.files` -- where results live by default; replacing a file so no reader or crash
  sees half of it (:func:`~harness.common.files.atomic_write`);
* :mod:`harness.common.console` -- what processes print: ``$HARNESS_PROGRESS``, ``--verbose``, terminals
  several workers share;
* :mod:`harness.common.interrupt` -- Ctrl-C that ends a command promptly, whatever it is inside;
* :mod:`harness.common.terms` -- the shared vocabulary: roles, run statuses, run ids, config differences;
* :mod:`harness.common.faults` -- what goes wrong around a run: the exception types and how an error is
  told apart (what a worker does about each is :mod:`harness.scheduling.workers.retry`'s);
* :mod:`harness.common.live` -- the live progress of the run this process trains, for ``harness status``.
"""
