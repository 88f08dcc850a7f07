"""One run on several ranks (DESIGN section 11; harness.train.ranks), on the CPU with gloo.

Real training of the tiny preset on the FineWeb-Edu sample: the process that calls
``train_run`` (or ``harness work``) is rank 0 and starts the other rank itself. A 2-rank run
reads rows r::2 of the same global batches as the 1-process run, so their numbers agree
to float32 rounding (DDP averages two half-batch gradients instead of one full-batch
mean), and a stopped 2-rank run resumes from its checkpoint to the uninterrupted 2-rank
numbers. A few minutes on 2 shared CPU cores.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest
import torch
import warm

from harness.design.config import RunConfig
from harness.scheduling.queue.run_queue import RunQueue
from harness.train import RunInterrupted, train_run
from harness.train.checkpoint import checkpoint_dir, owner_dir, resume_step
from harness.train.execution import ExecutionSettings

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT.parent / "shared/data/fineweb_edu_sample"
# 16 sequences of 64 tokens per global batch (8 per rank), a 512-token BPE vocabulary
TRAIN = {"vocab_size": 512, "batch_tokens": 1024, "eval_tokens": 2048, "lr": 3e-3}
STEPS = 20


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    if not SAMPLE.is_dir():
        pytest.fail(f"sample corpus {SAMPLE} absent")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the child rank gets the same (its spec carries it)
    yield
    torch.set_num_threads(threads)


def cfg(seed=0, steps=STEPS, grid="adhoc") -> RunConfig:
    return RunConfig.adhoc("rd_attnres", "tiny", seed, steps * 1024, str(SAMPLE), grid=grid, train=TRAIN)


def final(results: Path) -> dict:
    con = duckdb.connect(str(results / "harness.duckdb"), read_only=True)
    try:
        rows = con.execute("select run_id, val_nll, val_bpb from final").fetchall()
        world = con.execute("select json_extract(config, '$.devices') from runs").fetchall()
    finally:
        con.close()
    return {"rows": rows, "devices": [int(w[0]) for w in world]}


def rank_children(results: Path) -> list[int]:
    """Pids of rank processes (harness.train.rank_child) still alive that train into ``results``."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            if (
                b"harness.train.rank_child" in (proc / "cmdline").read_bytes()
                and str(results).encode() in (proc / "environ").read_bytes()
            ):
                pids.append(int(proc.name))
        except (OSError, ValueError):
            continue
    return pids


@pytest.mark.slow  # 18 s on 2 cores: out of the developer's loop (`pytest -m "not slow"`)
def test_two_ranks_equal_one_process_and_a_stopped_two_rank_run_resumes(tmp_path):
    one, two, parts = tmp_path / "one", tmp_path / "two", tmp_path / "parts"
    config = cfg()
    assert train_run(config, one, ExecutionSettings(progress=False, accelerator="cpu")) == "done"
    assert train_run(config, two, ExecutionSettings(progress=False, accelerator="cpu", devices=2)) == "done"
    a, b = final(one), final(two)
    assert (a["devices"], b["devices"]) == ([1], [2])
    (_, nll1, bpb1), (_, nll2, bpb2) = a["rows"][0], b["rows"][0]
    assert abs(nll1 - nll2) <= 1e-4 and abs(bpb1 - bpb2) <= 1e-4, (nll1, nll2)

    with pytest.raises(RunInterrupted, match=r"step 10"):
        train_run(
            config,
            parts,
            ExecutionSettings(progress=False, accelerator="cpu", devices=2, stop_after_tokens=10 * 1024),
        )
    assert resume_step(owner_dir(checkpoint_dir(parts, config.run_id), None)) == 10
    assert not rank_children(parts)
    assert train_run(config, parts, ExecutionSettings(progress=False, accelerator="cpu", devices=2)) == "done"
    ((_, nll3, bpb3),) = final(parts)["rows"]
    assert abs(nll3 - nll2) <= 1e-6 and abs(bpb3 - bpb2) <= 1e-6, (nll2, nll3)
    assert not rank_children(parts)


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT), "HARNESS_PROGRESS": "lines"}


@pytest.mark.slow  # 10 s on 2 cores: out of the developer's loop (`pytest -m "not slow"`)
def test_work_devices_2_trains_one_run_on_two_ranks_while_another_stays_queued(tmp_path):
    results = tmp_path / "results"
    q = RunQueue.open(None, results)
    first, second = cfg(seed=0, steps=4, grid="g"), cfg(seed=1, steps=4, grid="g")
    q.enqueue([first, second])
    out = warm.run(
        [
            sys.executable,
            "-m",
            "harness",
            "work",
            "--results",
            str(results),
            "--devices",
            "2",
            "--accelerator",
            "cpu",
            "--threads",
            "1",
            "--max-runs",
            "1",
        ],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    runs = q.runs()
    assert sorted(r.state for r in runs.values()) == ["done", "queued"], out.stdout
    assert runs[first.run_id].state == "done" and runs[second.run_id].state == "queued"
    assert final(results)["devices"] == [2]
    assert "worker trained 1 runs: 1 done" in out.stdout
    assert not rank_children(results)


@pytest.mark.slow  # 13 s on 2 cores: out of the developer's loop (`pytest -m "not slow"`)
def test_sigterm_stops_both_ranks_with_a_checkpoint_and_releases_the_run(tmp_path):
    results = tmp_path / "results"
    q = RunQueue.open(None, results)
    config = cfg(seed=2, steps=2000, grid="g")  # far longer than the test
    q.enqueue([config])
    p = warm.popen(
        [
            sys.executable,
            "-m",
            "harness",
            "work",
            "--results",
            str(results),
            "--devices",
            "2",
            "--accelerator",
            "cpu",
            "--threads",
            "1",
        ],
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 600
    for line in p.stderr:  # a progress line: both ranks are training
        if "tok/s" in line:
            break
        assert time.time() < deadline
    assert rank_children(results)
    p.send_signal(signal.SIGTERM)
    stdout, stderr = p.communicate(timeout=300)
    assert p.returncode == 130, stdout + stderr
    state = q.runs()[config.run_id]
    assert (state.state, state.attempt) == ("queued", 2), stdout
    assert f"released {config.run_id}" in stdout
    (ckpt,) = checkpoint_dir(results, config.run_id).glob("e*/last.ckpt")  # the claim's epoch folder
    step = resume_step(ckpt.parent)
    assert step is not None and step > 0, stderr  # the stop's checkpoint, at a step boundary
    assert not rank_children(results)


@pytest.mark.slow  # 12 s on 2 cores: out of the developer's loop (`pytest -m "not slow"`)
def test_a_sigkilled_rank_0_takes_its_other_ranks_with_it(tmp_path):
    """A worker SIGKILLed mid-run (DESIGN section 10's fault model) leaves no rank process
    behind holding a device: the kernel kills them with it (PR_SET_PDEATHSIG)."""
    results = tmp_path / "results"
    p = warm.popen(
        [
            sys.executable,
            "-m",
            "harness",
            "run",
            "--variant",
            "rd_attnres",
            "--size",
            "tiny",
            "--seed",
            "3",
            "--budget-tokens",
            str(2000 * 1024),
            "--corpus",
            str(SAMPLE),
            "--results",
            str(results),
            "--devices",
            "2",
            "--accelerator",
            "cpu",
            "--threads",
            "1",
            *[f"--set={k}={v}" for k, v in TRAIN.items()],
        ],
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 600
    for line in p.stderr:
        if "tok/s" in line:
            break
        assert time.time() < deadline
    assert rank_children(results)
    p.kill()
    p.wait()
    deadline = time.time() + 30
    while rank_children(results):
        assert time.time() < deadline, rank_children(results)
        time.sleep(0.2)


@pytest.mark.slow
def test_a_diverging_two_rank_run_is_recorded_as_diverged_on_every_rank(tmp_path):
    """Every rank takes the divergence decision at the same step (the loss flag is reduced over
    ranks, the gradient norm is the same after DDP's all-reduce): the run ends as diverged
    instead of one rank waiting for the other's backward."""
    config = RunConfig.adhoc(
        "rd_attnres", "tiny", 0, 6 * 1024, str(SAMPLE), train={**TRAIN, "lr": 1e30, "grad_clip": 0.0}
    )
    assert (
        train_run(config, tmp_path, ExecutionSettings(progress=False, accelerator="cpu", devices=2))
        == "diverged"
    )
    con = duckdb.connect(str(tmp_path / "harness.duckdb"), read_only=True)
    try:
        status, step, error, devices = con.execute(
            "select status, diverged_step, error, json_extract(config, '$.devices') from runs"
        ).fetchone()
    finally:
        con.close()
    assert (status, int(devices)) == ("diverged", 2) and step < 6 and "non-finite training loss" in error, (
        error
    )
    assert not rank_children(tmp_path)
