"""Fencing (harness.train.fencing, DESIGN 10): a worker stopped past its lease writes nothing more for
the run another worker took over; owners never share a checkpoint; a stale result write is
refused, and one that slipped through is ignored at ingest; an unreadable checkpoint is set
aside and the run resumes from the previous good one.

Real processes (SIGSTOP / SIGCONT of a real ``harness work``), real training on the FineWeb-Edu
sample (tiny preset, seconds), a real journal queue and a real PostgreSQL server.
``python -m pytest -q tests/train/test_fencing.py``.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing as mp
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import warm
from test_runner import final_rows  # tests/ is on sys.path under pytest (no package)

from harness.design.config import RunConfig
from harness.scheduling.grids.grid import load_grid
from harness.scheduling.queue.lease import Heartbeat
from harness.scheduling.queue.run_queue import RunQueue
from harness.scheduling.workers.fence import ClaimFence
from harness.scheduling.workers.retry import MAX_RECLAIMS
from harness.store.store import Store
from harness.train import RunInterrupted, train_run
from harness.train.checkpoint import SET_ASIDE, checkpoint_dir, checkpoint_step, prepare_resume
from harness.train.execution import ExecutionSettings
from harness.train.fencing import Fence, LeaseLost

from queue_stubs import configs

SAMPLE = Path(__file__).resolve().parents[3] / "shared/data/fineweb_edu_sample"
HOST = socket.gethostname()
TRAIN = {"vocab_size": 512, "batch_tokens": 1024, "eval_tokens": 2048, "checkpoint_every_tokens": 1024}
GRID = """
name = "stoptest"
corpus = "{corpus}"
sizes = ["tiny"]
seeds = [3]
budgets_tokens = [65536]
[variants]
block_attnres = "parent"
[train]
vocab_size = 512
batch_tokens = 1024
eval_tokens = 2048
checkpoint_every_tokens = 1024
"""


@pytest.mark.slow  # trains on real text past a lease
@pytest.mark.skipif(not SAMPLE.is_dir(), reason="sample corpus absent")
def test_a_worker_stopped_past_its_lease_loses_the_run_and_writes_nothing(tmp_path):
    grid = tmp_path / "stoptest.toml"
    grid.write_text(GRID.format(corpus=SAMPLE))
    results = tmp_path / "results"
    env = {**os.environ, "HARNESS_RESULTS": str(results)}
    assert warm.run([sys.executable, "-m", "harness", "queue", str(grid)], env=env).returncode == 0
    work = [sys.executable, "-m", "harness", "work", "--threads", "1", "--lease-s", "5"]

    # worker A takes the run; once it has a checkpoint it is stopped (SIGSTOP) past its lease
    a = warm.popen(work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 180
    while not list(results.glob("checkpoints/*/e0/last.ckpt")):
        assert time.time() < deadline and a.poll() is None, "worker A never checkpointed"
        time.sleep(0.05)
    os.kill(a.pid, signal.SIGSTOP)
    try:
        time.sleep(7)  # > --lease-s 5: A's lease is stale, A is alive (stopped), so only the timeout tells
        # worker B reclaims the run (epoch 1) and resumes from a copy of A's checkpoint
        b = warm.popen(work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        lines = []
        for line in b.stdout:
            lines.append(line)
            if "resuming from step" in line:
                break
        assert any("resuming from step" in ln and "copied from e0" in ln for ln in lines), "".join(lines)
    finally:
        os.kill(a.pid, signal.SIGCONT)  # A wakes up while B trains the run
    out_b = "".join(lines) + b.communicate(timeout=300)[0]
    out_a = a.communicate(timeout=300)[0]
    assert b.returncode == 0 and "1 done" in out_b, out_b[-3000:]
    assert a.returncode == 0, out_a[-3000:]
    # A says who has the run now, stops it and goes on (nothing else queued: it stops)
    assert f"lease lost to {HOST}:{b.pid} (epoch 1; epoch 0 was reclaimed by {HOST}:{b.pid}" in out_a, out_a[
        -3000:
    ]
    assert f"{HOST}:{a.pid} stopped stoptest:tiny:block_attnres:s3:65536 and wrote nothing more" in out_a
    assert "0 done, 0 diverged, 0 failed, 1 lost to another worker" in out_a

    # the result file is B's, and B's only; no checkpoint of either owner is left behind
    (path,) = results.glob("runs/*.json")
    run = json.loads(path.read_text())["run"]
    assert (run["owner"], run["epoch"], run["status"]) == (f"{HOST}:{b.pid}", 1, "done")
    assert not list(results.glob("checkpoints/*/*/last.ckpt"))
    rows = final_rows(results)

    # and it ends exactly as an uninterrupted run of the cell (B resumed from A's checkpoint)
    (cell,) = load_grid(grid).expand()
    torch.set_num_threads(1)
    train_run(cell, tmp_path / "clean", ExecutionSettings(progress=False))
    assert rows == final_rows(tmp_path / "clean")


def _result(config: RunConfig, fence: Fence) -> dict:
    run = {
        k: getattr(config, k) for k in ("run_id", "grid", "variant", "role", "seed", "size", "budget_tokens")
    }
    return {
        "run": {**run, "status": "done", "owner": fence.owner, "epoch": fence.epoch},
        "metrics": [{"step": 1, "tokens": 1000, "split": "val", "name": "nll", "value": 3.0 + fence.epoch}],
    }


def test_a_stale_claim_can_neither_check_nor_write_and_its_file_is_ignored_at_ingest(tmp_path):
    results = tmp_path / "results"
    q = RunQueue.open(None, results)
    (config,) = configs(seeds=(0,), variants=("block_attnres", "rd_attnres"))[:1]
    q.enqueue([config])
    a = q.claim()
    assert q.reclaim_stale(
        now=time.time() + 10_000, max_reclaims=MAX_RECLAIMS
    )  # A presumed dead; its run is queued again
    b = q.claim()
    assert (a.epoch, b.epoch, b.run_id) == (0, 1, a.run_id)
    fence_a = ClaimFence(q, a, Heartbeat(lambda: q.beat(a)))
    fence_b = ClaimFence(q, b, Heartbeat(lambda: q.beat(b)))
    assert q.beat(a) is False  # A's heartbeat is refused from now on
    with pytest.raises(
        LeaseLost, match=rf"lease lost to {HOST}:{os.getpid()} \(epoch 1; epoch 0 was reclaimed"
    ):
        fence_a.check("checkpoint")
    fence_b.check("checkpoint")

    store = Store(results)
    path = store.write_result(_result(config, fence_b), commit=lambda: fence_b.holding("result file"))
    written = path.read_bytes()
    with pytest.raises(LeaseLost, match="result file not written"):
        store.write_result(_result(config, fence_a), commit=lambda: fence_a.holding("result file"))
    assert path.read_bytes() == written and not list(path.parent.glob(".*.tmp"))
    assert store.query("select owner, epoch from runs").rows() == [(fence_b.owner, 1)]

    # a stale write that got past the fence (no commit guard) is kept out of the tables, and named
    store.write_result(_result(config, fence_a))
    assert store.query("select epoch, status from runs").rows() == [(1, "done")]
    ((name, why),) = store.unreadable()
    assert (
        name == path.name
        and "stale write: epoch 0" in why
        and f"the store keeps epoch 1 by {fence_b.owner}" in why
    )
    assert q.complete(b, "done", value=4.0, wall_s=1.0) and not q.complete(a, "done", value=3.0, wall_s=1.0)


def _reclaim(url: str | None, results: str, done) -> None:
    """In another process: reclaim every lease as if they were all stale."""
    q = RunQueue.open(url, results)
    q.reclaim_stale(now=time.time() + 10_000, max_reclaims=MAX_RECLAIMS)
    done.set()


@pytest.mark.parametrize("backend", ["journal", pytest.param("postgres", marks=pytest.mark.slow)])
def test_while_the_result_is_renamed_no_one_can_take_the_run_over(tmp_path, backend, request):
    url = request.getfixturevalue("pg_url") if backend == "postgres" else None
    q = RunQueue.open(url, tmp_path)
    q.enqueue(configs(seeds=(0,))[:1])
    claim = q.claim()
    fence = ClaimFence(q, claim, Heartbeat(lambda: q.beat(claim)))
    ctx = mp.get_context("spawn")
    done = ctx.Event()
    with fence.holding("result file"):
        other = ctx.Process(target=_reclaim, args=(url, str(tmp_path), done))
        other.start()
        # held: the reclaimer waits on the journal lock / the trial's row lock
        assert not done.wait(3) and other.is_alive()
        assert q.lease_lost(claim) is None
    assert done.wait(60)  # released: the reclaim goes through, after the (would-be) rename
    other.join(30)
    assert "reclaimed" in q.lease_lost(claim)


class Epoch(Fence):
    """The fence of an owner with a fixed epoch that never loses its lease (one process plays
    several owners in turn)."""

    def __init__(self, epoch: int):
        self.epoch = epoch


@pytest.mark.slow  # 2 s on 2 cores: out of the developer's loop (`pytest -m "not slow"`)
@pytest.mark.skipif(not SAMPLE.is_dir(), reason="sample corpus absent")
def test_owners_never_share_a_checkpoint_and_an_unreadable_one_is_set_aside(tmp_path, capsys):
    torch.set_num_threads(1)
    config = RunConfig.create("rd_attnres", "tiny", 0, 12 * 1024, str(SAMPLE), grid="ck", train=TRAIN)
    results = tmp_path / "results"
    folder = checkpoint_dir(results, config.run_id)
    with pytest.raises(RunInterrupted):  # a planned stop, checkpoint on disk
        train_run(
            config, results, ExecutionSettings(progress=False, stop_after_tokens=4 * 1024), fence=Epoch(0)
        )
    e0 = (folder / "e0" / "last.ckpt").read_bytes()
    with pytest.raises(RunInterrupted):  # the next owner resumes from a copy, in its own folder
        train_run(
            config, results, ExecutionSettings(progress=True, stop_after_tokens=8 * 1024), fence=Epoch(1)
        )
    assert "resuming from step 4" in capsys.readouterr().err
    assert (folder / "e0" / "last.ckpt").read_bytes() == e0  # never written by epoch 1
    assert checkpoint_step(folder / "e1" / "last.ckpt") == 8
    with open(folder / "e1" / "last.ckpt", "r+b") as f:  # a disk error cuts the newest checkpoint
        f.truncate(4000)

    assert train_run(config, results, ExecutionSettings(progress=True), fence=Epoch(2)) == "done"
    err = capsys.readouterr().err
    assert f"checkpoint {folder / 'e1' / 'last.ckpt'} is unreadable" in err
    assert "resuming from step 4" in err and "copied from e0" in err  # the previous good one
    (aside,) = (results / "checkpoints" / SET_ASIDE).iterdir()
    assert aside.name.startswith(f"{folder.name}-e1-") and aside.stat().st_size == 4000  # renamed, kept
    assert not folder.exists()  # every owner's checkpoints go once the result is written

    train_run(config, tmp_path / "clean", ExecutionSettings(progress=False))
    assert final_rows(results) == final_rows(tmp_path / "clean")  # as if never interrupted


def test_with_no_readable_checkpoint_left_the_run_starts_from_scratch_and_says_so(tmp_path):
    config = RunConfig.create("rd_attnres", "tiny", 0, 4096, "/c", grid="ck")
    local = checkpoint_dir(tmp_path, config.run_id) / "local"
    local.mkdir(parents=True)
    (local / "last.ckpt").write_bytes(b"PK\x03\x04 torn")
    said = []
    own, step, source = prepare_resume(tmp_path, config, None, warn=said.append)
    assert (own, step, source) == (local, None, "")
    assert len(said) == 2 and "is unreadable" in said[0] and "starts from scratch" in said[1]
    assert not (local / "last.ckpt").exists()
    (aside,) = (tmp_path / "checkpoints" / SET_ASIDE).iterdir()
    assert hashlib.sha256(aside.read_bytes()).digest() == hashlib.sha256(b"PK\x03\x04 torn").digest()
