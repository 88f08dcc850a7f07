"""Training: one :class:`~harness.design.config.RunConfig` in, one result file out (DESIGN sections 4-5).

The only package that uses Lightning or records metrics. Modules, in the order a run uses them:

* :mod:`harness.train.execution` -- how a run executes (:class:`ExecutionSettings`: devices, precision,
  compile, threads, loggers), one object from the command line or a worker to the runner;
* :mod:`harness.train.settings_check` -- settings Lightning would refuse, and a bad
  ``$HARNESS_HARDWARE_CLASS``, refused before a run is claimed;
* :mod:`harness.train.environment` -- where a run's numbers came from: the environment record, the hardware
  class, a run's numerics decided once;
* :mod:`harness.train.hardware_override` -- ``$HARNESS_HARDWARE_CLASS``, checked without torch (``harness
  launch`` refuses a bad one before it starts a worker);
* :mod:`harness.train.schedule` -- budget in tokens -> optimiser steps and intervals
  (:class:`StepPlan`); the warmup + cosine/WSD learning-rate schedule;
* :mod:`harness.train.microbatch` -- micro-batches of one global batch;
* :mod:`harness.train.loss` -- the token cross-entropy, without a float32 copy of bf16 logits;
* :mod:`harness.train.compiled` -- one run's ``torch.compile``, its graphs counted, a fall-back seen;
* :mod:`harness.train.lit` -- :class:`LitLM`, the Lightning module around any variant:
  AdamW groups, clipping, divergence, evaluation (NLL, bits-per-byte, routing rows);
* :mod:`harness.train.trainer` -- :func:`make_trainer`, the one ``Trainer`` configuration
  (shared with ``harness bench``);
* :mod:`harness.train.progress` -- the run's callback: evaluate, checkpoint, stop, show;
* :mod:`harness.train.decisions` -- when every rank reads rank 0's decisions (lease, stop, checkpoint);
* :mod:`harness.train.stop` -- a signal asks a worker (and its run) to stop at the next batch
  boundary (:class:`StopRequest`; the worker loop and the runner both read it);
* :mod:`harness.train.fencing` -- who may still write a run's checkpoints and its result;
* :mod:`harness.train.checkpoint` -- checkpoint folder, atomic save, resume, config check;
* :mod:`harness.train.trackers` -- live curves in TensorBoard, W&B, MLflow, CSV;
* :mod:`harness.train.timing` -- where a run's wall time goes;
* :mod:`harness.train.protocol` -- the protocol dict and hash that pairing relies on;
* :mod:`harness.train.result_file` -- a run's result file as the runner writes and reads it;
* :mod:`harness.train.ranks` -- one run on N ranks of this machine: rank 0 starts the others
  (:mod:`harness.train.rank_child`, a child rank's entry);
* :mod:`harness.train.runner` -- :func:`train_run` = build -> fit -> record;
* :mod:`harness.train.retrain` -- an archive's runs re-trained here with their archived configs and
  numerics, for the re-train check (``harness retrain``; its statistics:
  :mod:`harness.report.stats.retrain_check`).
"""

import importlib

# Lazy (PEP 562): the runner loads torch and Lightning; importing a light module of this package
# (harness.train.execution, harness.train.fencing) must not, so `harness --help` stays fast.
_RUNNER = {"RunInterrupted", "train_run"}


def __getattr__(name: str):
    if name in _RUNNER:
        return getattr(importlib.import_module("harness.train.runner"), name)
    raise AttributeError(f"module 'harness.train' has no attribute {name!r}")


__all__ = ["RunInterrupted", "train_run"]
