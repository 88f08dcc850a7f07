"""Training: one :class:`~harness.design.config.RunConfig` in, one result file out (DESIGN sections 4-5).

The only package that uses Lightning or records metrics. Modules, in the order a run uses them:

* :mod:`harness.train.schedule` -- budget in tokens -> optimiser steps and intervals
  (:class:`StepPlan`); the warmup + cosine/WSD learning-rate schedule;
* :mod:`harness.train.lit` -- :class:`LitLM`, the Lightning module around any variant:
  AdamW groups, clipping, divergence, evaluation (NLL, bits-per-byte, routing rows);
* :mod:`harness.train.trainer` -- :func:`make_trainer`, the one ``Trainer`` configuration
  (shared with ``harness bench``);
* :mod:`harness.train.progress` -- the run's callback: evaluate, checkpoint, stop, show;
* :mod:`harness.train.stop` -- a signal asks a worker (and its run) to stop at the next batch
  boundary (:class:`StopRequest`; the worker loop and the runner both read it);
* :mod:`harness.train.checkpoint` -- checkpoint folder, atomic save, resume, config check;
* :mod:`harness.train.protocol` -- the protocol dict and hash that pairing relies on;
* :mod:`harness.train.ranks` -- one run on N ranks of this machine: rank 0 starts the others;
* :mod:`harness.train.runner` -- :func:`train_run` = build -> fit -> record.
"""

import importlib

# Lazy (PEP 562): the runner loads torch and Lightning; importing a light module of this package
# (harness.train.execution, harness.train.fencing) must not, so `harness --help` stays fast.
_RUNNER = {"RunInterrupted", "finished_status", "record_failure", "train_run"}


def __getattr__(name: str):
    if name in _RUNNER:
        return getattr(importlib.import_module("harness.train.runner"), name)
    raise AttributeError(f"module 'harness.train' has no attribute {name!r}")


__all__ = ["RunInterrupted", "finished_status", "record_failure", "train_run"]
