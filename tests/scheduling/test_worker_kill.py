"""A worker killed with SIGKILL mid-run: another worker finishes the run from its
checkpoint, and the final NLL equals an uninterrupted run of the same cell (real
training on the FineWeb-Edu sample, tiny preset)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest
import warm

from harness.scheduling.grids.grid import load_grid
from harness.train import train_run
from harness.train.execution import ExecutionSettings

SAMPLE = Path(__file__).resolve().parents[3] / "shared/data/fineweb_edu_sample"
GRID = """
name = "killtest"
corpus = "{corpus}"
sizes = ["tiny"]
seeds = [3]
budgets_tokens = [24576]
[variants]
block_attnres = "parent"
rd_attnres = "treatment"
[train]
vocab_size = 512
batch_tokens = 1024
eval_tokens = 2048
eval_every_tokens = 8192
checkpoint_every_tokens = 1024
"""


def harness(*args, env, **kw):
    return warm.popen([sys.executable, "-m", "harness", *args], env=env, **kw)


@pytest.mark.slow  # trains real runs, kills a worker, trains them again
@pytest.mark.skipif(not SAMPLE.is_dir(), reason="sample corpus absent")
def test_sigkilled_worker_run_is_finished_by_another_and_matches(tmp_path):
    grid = tmp_path / "killtest.toml"
    grid.write_text(GRID.format(corpus=SAMPLE))
    results = tmp_path / "results"
    env = {**os.environ, "HARNESS_RESULTS": str(results)}
    assert warm.run([sys.executable, "-m", "harness", "queue", str(grid)], env=env).returncode == 0

    # worker A takes the first run (the parent), and is killed once it has checkpointed twice
    a = harness(
        "work",
        "--max-runs",
        "1",
        "--threads",
        "1",
        "--quiet",
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    ckpts = results / "checkpoints"
    deadline = time.time() + 120
    step = None
    while time.time() < deadline:
        found = list(ckpts.glob("*/*/last.ckpt")) if ckpts.exists() else []
        if found:
            import torch

            try:
                step = torch.load(found[0], map_location="cpu", weights_only=False)["global_step"]
            except Exception:
                step = None
            if step is not None and step >= 2:
                break
        time.sleep(0.05)
    assert step is not None and step >= 2, "worker A never checkpointed"
    os.kill(a.pid, signal.SIGKILL)
    a.wait()
    assert not list(results.glob("runs/*.json")), "worker A must have died mid-run"

    # worker B reclaims the dead worker's run (same host, pid gone) and finishes everything
    b = warm.run(
        [sys.executable, "-m", "harness", "work", "--lease-s", "5", "--threads", "1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert b.returncode == 0, b.stderr[-3000:]
    assert "resuming from step" in b.stderr

    con = duckdb.connect(str(results / "harness.duckdb"), read_only=True)
    rows = con.execute("select run_id, val_nll from final order by run_id").fetchall()
    n_runs = con.execute("select count(*), count(distinct run_id) from runs").fetchone()
    con.close()
    assert n_runs == (2, 2) and len(rows) == 2

    # the same cell trained without interruption gives the same final NLL, bit for bit
    cell = next(c for c in load_grid(grid).expand() if c.variant == "block_attnres")
    import torch

    torch.set_num_threads(1)
    train_run(cell, tmp_path / "clean", ExecutionSettings(progress=False))
    con = duckdb.connect(str(tmp_path / "clean" / "harness.duckdb"), read_only=True)
    clean = con.execute("select run_id, val_nll from final").fetchall()
    con.close()
    assert dict(rows)[cell.run_id] == clean[0][1]
