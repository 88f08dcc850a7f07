"""Shared helpers of the queue tests (tests/scheduling/test_queue.py, tests/commands/test_work_command.py): a small
grid's run configs, a queue in a temporary folder, and stub train functions.

The stubs live at module level so that 'spawn' worker processes can unpickle them
(as ``functools.partial``).
"""

from __future__ import annotations

import os
import sys
import time
import types
from pathlib import Path

import harness.train
from harness.cli import main as cli
from harness.scheduling.grids.grid import parse_grid
from harness.scheduling.queue.run_queue import RunQueue
from harness.scheduling.workers.loop import work

GRID_TOML = """\
name = "{name}"
corpus = "{corpus}"
sizes = ["tiny"]
seeds = {seeds}
budgets_tokens = [1024]   # 2 global batches of 512

[variants]
block_attnres = "parent"
rd_attnres = "treatment"
fixed_v = "control"
{extra}
[train]
batch_tokens = 512   # a batch the budget fits (harness queue refuses one it does not)
"""


# The stand-in runs' corpus: a path that is there on every machine (a worker checks that a run's corpus
# is there before it trains it); the stand-in trainers never read it.
STUB_CORPUS = str(Path(__file__).resolve().parent / "fixtures")


def configs(name="g", seeds=(0, 1), variants=("block_attnres", "rd_attnres", "fixed_v"), corpus=STUB_CORPUS):
    roles = ["parent", "treatment"] + ["control"] * (len(variants) - 2)
    grid = parse_grid(
        {
            "name": name,
            "corpus": corpus,
            "sizes": ["tiny"],
            "seeds": list(seeds),
            "budgets_tokens": [1000],
            "variants": dict(zip(variants, roles)),
        }
    )
    return grid.expand()


def new_queue(tmp_path, **kw) -> RunQueue:
    return RunQueue.open(None, tmp_path / "results", **kw)


def quiet(_msg: str) -> None:
    pass


# ----------------------------------------------------------------------------- stub train fns
# Module level so 'spawn' workers can unpickle them (as functools.partial).


def stub_append(log_path: str, config: dict, results_dir: Path) -> str:
    """Sleep 0.2 s, append the run id to a file with O_APPEND (one write per line)."""
    time.sleep(0.2)
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, (config.run_id + "\n").encode())
    finally:
        os.close(fd)
    return "done"


def stub_block_first(log_path: str, target: str, config: dict, results_dir: Path) -> str:
    """Record the attempt; the first attempt at ``target`` blocks until the process is killed."""
    attempts = Path(log_path).read_text().splitlines() if Path(log_path).exists() else []
    n = sum(line.split()[0] == config.run_id for line in attempts) + 1
    stub_line = f"{config.run_id} attempt={n} pid={os.getpid()}\n"
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.write(fd, stub_line.encode())
    os.close(fd)
    if config.run_id == target and n == 1:
        while True:
            time.sleep(0.05)
    return "done"


def blocking_cli_worker(results: str, started: str) -> None:
    """`harness work` (the real command) with a fake harness.train.runner whose training blocks."""
    fake = types.ModuleType("harness.train.runner")

    def train_run(config, results_dir, settings, **run_kwargs):
        Path(started).write_text(config.run_id)
        while True:
            time.sleep(0.05)

    fake.train_run, fake.record_failure = train_run, lambda *a: None
    fake.finished_status = lambda config, results_dir: None
    fake.finished_outcome = lambda config, results_dir: None
    sys.modules["harness.train.runner"] = fake
    harness.train.runner = fake
    sys.exit(cli(["work", "--results", results]))


def worker_process(results: str, train_fn, lease_s: float) -> None:
    queue = RunQueue.open(None, results, lease_timeout_s=lease_s)
    work(queue, train_fn, Path(results), beat_s=min(0.5, lease_s / 4), log=quiet)


def write_grid(tmp_path, seeds="[0, 1]", name="g", extra="", corpus=None) -> Path:
    if corpus is None:
        corpus = tmp_path / "corpus.jsonl"
        corpus.write_text('{"text": "hello"}\n')
    p = tmp_path / f"{name}.toml"
    p.write_text(GRID_TOML.format(name=name, corpus=corpus, seeds=seeds, extra=extra))
    return p
