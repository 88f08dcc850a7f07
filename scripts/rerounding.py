"""Which execution settings re-round a run on this machine (docs/design.md section 13, "Settings that re-round").

Trains one tiny run (``rd_attnres``, seed 0, 8,192 tokens, batch_tokens 1,024 = 16 sequences, the sample corpus)
under one setting and prints its final validation NLL and last training loss as JSON, to compare bit for bit
with the baseline (1 torch thread, ``auto`` micro-batch: a CPU's whole batch):

    for s in baseline threads2 micro1 micro3 deterministic compile; do
        .venv/bin/python scripts/rerounding.py $s; done

Settings: ``baseline``, ``threads2`` (2 torch threads), ``microN`` (``--micro-batch-size N``),
``deterministic`` (``torch.use_deterministic_algorithms(True)``), ``compile`` (``torch.compile``).
Each run trains in a temporary results folder (the corpus cache: ``$HARNESS_CACHE``).
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import torch

from harness.design.config import RunConfig
from harness.store.runfile import read_result, result_path
from harness.train.execution import ExecutionSettings, set_threads
from harness.train.runner import train_run

CORPUS = Path(__file__).resolve().parents[2] / "shared/data/fineweb_edu_sample"
TRAIN = {"batch_tokens": 1024, "vocab_size": 512, "eval_tokens": 2048}


def main(which: str) -> dict:
    threads, settings = 1, ExecutionSettings(progress=False)
    if which == "threads2":
        threads = 2
    elif which.startswith("micro"):
        settings = settings.replace(micro_batch_size=int(which[5:]))
    elif which == "deterministic":
        torch.use_deterministic_algorithms(True)
    elif which == "compile":
        settings = settings.replace(compile=True)
    elif which != "baseline":
        raise SystemExit(f"setting {which!r}; allowed: baseline, threads2, microN, deterministic, compile")
    set_threads(threads)
    config = RunConfig.adhoc("rd_attnres", "tiny", 0, 8192, str(CORPUS), train=TRAIN)
    with tempfile.TemporaryDirectory() as results:
        outcome = train_run(config, results, settings)
        run = read_result(result_path(results, config.run_id))
    losses = [m["value"] for m in run["metrics"] if m["split"] == "train" and m["name"] == "loss"]
    env = run["run"]["environment"]["run"]
    return {
        "setting": which,
        "val_nll": outcome.val_nll,
        "last_train_loss": losses[-1] if losses else None,
        "micro_batch_size": run["run"]["micro_batch_size"],
        "threads": env["threads"],
        "deterministic": env["deterministic"],
        "compile": env["compile"],
    }


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1] if len(sys.argv) > 1 else "baseline")))
