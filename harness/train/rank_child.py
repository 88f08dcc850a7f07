"""A child rank's entry (:mod:`harness.train.ranks` starts it with ``python -c``): build the run
rank 0 described, fit it, write nothing of its own.

Its own module because it imports :mod:`harness.train.runner`, which imports :mod:`harness.train.ranks`.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import torch

from harness.config import RunConfig
from harness.fencing import LeaseLost
from harness.train.ranks import SPEC_ENV, RankFence, die_with_parent
from harness.train.runner import RunInterrupted, train_run


def main() -> int:
    """A child rank: build the run ``$HARNESS_RANK_SPEC`` names, fit it, and let rank 0 record it.

    The spec holds ``config`` (:meth:`RunConfig.to_dict`), ``results_dir``, ``epoch`` (rank
    0's fencing epoch), ``accelerator``, ``devices``, ``strategy``, ``stop_after_tokens``,
    ``micro_batch_size``, ``threads`` and ``parent`` (rank 0's pid). Exit status 0 also when the run stopped early or its lease was lost (rank 0
    says so); 1 on an error, with its traceback on stderr.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # rank 0 decides when to stop
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    spec = json.loads(os.environ[SPEC_ENV])
    die_with_parent(int(spec["parent"]))
    if spec.get("threads"):
        torch.set_num_threads(int(spec["threads"]))
    try:
        train_run(
            RunConfig.from_dict(spec["config"]),
            Path(spec["results_dir"]),
            progress=False,
            accelerator=spec["accelerator"],
            devices=spec["devices"],
            strategy=spec["strategy"],
            stop_after_tokens=spec["stop_after_tokens"],
            fence=RankFence(spec["epoch"]),
            micro_batch_size=spec.get("micro_batch_size"),
        )
    except (RunInterrupted, LeaseLost):
        return 0
    return 0
