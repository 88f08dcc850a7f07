"""A child rank's entry (:mod:`harness.train.ranks` starts it with ``python -c``): build the run
rank 0 described, fit it, write nothing of its own.

Its own module because it imports :mod:`harness.train.runner`, which imports :mod:`harness.train.ranks`.
"""

from __future__ import annotations

import json
import os
import signal
import traceback
from pathlib import Path

import torch

from harness.common.faults import CONTEXT_LOST_EXIT, sticky_cuda_error
from harness.design.config import RunConfig
from harness.train.execution import ExecutionSettings
from harness.train.fencing import LeaseLost
from harness.train.ranks import SETTINGS_ENV, SPEC_ENV, RankFence, die_with_parent
from harness.train.runner import RunInterrupted, train_run


def main() -> int:
    """A child rank: build the run ``$HARNESS_RANK_SPEC`` names with the execution settings
    ``$HARNESS_RANK_SETTINGS`` holds (rank 0's, whole: :class:`~harness.train.execution.ExecutionSettings`),
    fit it, and let rank 0 record it.

    The spec holds ``config`` (:meth:`RunConfig.to_dict`), ``results_dir``, ``epoch`` (rank 0's
    fencing epoch) and ``parent`` (rank 0's pid). Exit status 0 also when the run stopped early or its
    lease was lost (rank 0 says so); :data:`~harness.common.faults.RUN_ERROR_EXIT` (1) when the run raised,
    with its traceback on stderr (rank 0 tells that apart from a rank the machine killed);
    :data:`~harness.common.faults.CONTEXT_LOST_EXIT` (3) when it met a CUDA error that poisons its context.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # rank 0 decides when to stop
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    spec = json.loads(os.environ[SPEC_ENV])
    die_with_parent(int(spec["parent"]))
    settings = ExecutionSettings.from_json(os.environ[SETTINGS_ENV])
    if settings.threads:
        torch.set_num_threads(settings.threads)
    try:
        train_run(
            RunConfig.from_dict(spec["config"]),
            Path(spec["results_dir"]),
            settings,
            fence=RankFence(spec["epoch"]),
        )
    except (RunInterrupted, LeaseLost):
        return 0
    except Exception as exc:
        if sticky_cuda_error(exc) is None:
            raise  # the run's own error: RUN_ERROR_EXIT, with its traceback
        traceback.print_exc()
        return CONTEXT_LOST_EXIT  # rank 0 releases the run and its worker stops
    return 0
