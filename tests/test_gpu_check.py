"""scripts/gpu_check.sh, the prepared GPU check (issue 18): its syntax, the commands it would
run on a GPU (each parsed by the harness's own argument parser), and its CPU fallback, which
runs tiny versions of the same three steps (bench, a grid drained by a worker, a DDP run) for
real. The GPU mode itself has not run anywhere yet (docs/paper-scale.md)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from harness.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_check.sh"


def _env() -> dict:
    return {
        **os.environ,
        "HARNESS": str(Path(sys.executable).with_name("harness")),
        "HARNESS_PROGRESS": "lines",
        "PYTHON": sys.executable,
    }


def test_script_parses_as_bash():
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)


def test_dry_run_prints_the_gpu_commands_and_each_parses(tmp_path):
    out = subprocess.run(
        [str(SCRIPT), "--dry-run", str(tmp_path)], capture_output=True, text=True, env=_env(), check=True
    ).stdout
    lines = {line.split("] ", 1)[0][1:]: line.split("] ", 1)[1] for line in out.splitlines()}
    assert set(lines) == {"bench", "grid", "ddp"}
    parser = build_parser()
    bench = shlex.split(lines["bench"])
    args = parser.parse_args(bench[1:])
    assert (args.command, args.size, args.compile, args.device) == ("bench", "120m", True, "cuda")
    assert args.variant == ["prenorm", "block_attnres", "rd_attnres"]
    ddp = parser.parse_args(shlex.split(lines["ddp"])[1:])
    assert (ddp.command, ddp.devices, ddp.strategy, ddp.accelerator) == ("run", "1", "ddp", "gpu")
    script, *grid_args = shlex.split(lines["grid"])[2:]  # bash -c SCRIPT HARNESS GRID RESULTS ACCEL
    assert grid_args[-1] == "gpu" and "work --results" in script
    assert not (tmp_path / "summary.txt").read_text()  # nothing ran


@pytest.mark.slow  # trains: a bench, a drained grid and a DDP run
def test_cpu_fallback_runs_every_step(tmp_path):
    proc = subprocess.run(
        [str(SCRIPT), "--cpu", str(tmp_path)], capture_output=True, text=True, env=_env(), timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = (tmp_path / "summary.txt").read_text().splitlines()
    assert [line.split(":")[0] for line in summary] == ["bench", "grid", "ddp"]
    assert all(": exit 0 in " in line for line in summary), summary
    bench = json.loads((tmp_path / "bench.json").read_text())
    assert bench["device"] == "cpu" and set(bench["precision_ratios"]) == {"bf16/fp32"}
    assert bench["ratio_intervals"]["rd_attnres/block_attnres"] is not None  # 6 rounds: an interval
    assert set(bench["profile"]["pairs"]) >= {"block_attnres/prenorm", "rd_attnres/block_attnres"}
    con = duckdb.connect(str(tmp_path / "results" / "harness.duckdb"), read_only=True)
    try:
        rows = con.execute(
            "SELECT grid, variant, status, config->>'strategy', train_s > 0, train_s <= wall_s "
            "FROM runs ORDER BY grid, variant, seed"
        ).fetchall()
    finally:
        con.close()
    assert [r[:3] for r in rows] == [("gpu_check", "block_attnres", "done")] * 2 + [
        ("gpu_check", "rd_attnres", "done")
    ] * 2 + [("gpu_check_ddp", "rd_attnres", "done")]
    assert rows[-1][3] == "DDPStrategy" and all(r[4] and r[5] for r in rows)


def test_paper_dry_run_prints_the_paper_commands_and_each_parses(tmp_path):
    out = subprocess.run(
        [str(SCRIPT), "--paper", "--dry-run", str(tmp_path)],
        capture_output=True,
        text=True,
        env=_env(),
        check=True,
    ).stdout
    lines = {line.split("] ", 1)[0][1:]: line.split("] ", 1)[1] for line in out.splitlines()}
    assert set(lines) == {
        "paper_corpus",
        "paper_bench",
        "paper_ddp",
        *(f"paper_{s}_{v}" for s in ("120m", "343m") for v in ("block_attnres", "rd_attnres")),
    }
    parser = build_parser()
    bench = parser.parse_args(shlex.split(lines["paper_bench"])[1:])
    assert (bench.command, bench.size, bench.compile, bench.device) == ("bench", "120m", True, "cuda")
    assert bench.variant == ["block_attnres", "rd_attnres"]
    for size in ("120m", "343m"):
        run = parser.parse_args(shlex.split(lines[f"paper_{size}_rd_attnres"])[1:])
        sets = dict(item.split("=") for item in run.set)
        # the paper's global batch, >= 20 optimiser steps, a 50,304-token BPE, micro-batches auto (probed)
        assert (run.size, sets["batch_tokens"], sets["vocab_size"]) == (size, "524288", "50304")
        assert run.budget_tokens // int(sets["batch_tokens"]) >= 20 and run.micro_batch_size is None
    ddp = parser.parse_args(shlex.split(lines["paper_ddp"])[1:])
    assert (ddp.devices, ddp.strategy, ddp.accelerator) == ("2", "ddp", "gpu")
    assert not (tmp_path / "summary.txt").read_text()  # nothing ran


@pytest.mark.slow  # 17 s on 2 cores: out of the developer's loop (`pytest -m "not slow"`)
def test_paper_cpu_fallback_trains_micro_batched_runs_and_says_pass_per_check(tmp_path):
    proc = subprocess.run(
        [str(SCRIPT), "--paper", "--cpu", str(tmp_path)],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = (tmp_path / "summary.txt").read_text().splitlines()
    assert [line.split(":")[0] for line in summary[:4]] == [
        "paper_corpus",
        "paper_bench",
        "paper_tiny_block_attnres",
        "paper_tiny_rd_attnres",
    ]
    checks = [line for line in summary if line.startswith(("PASS", "FAIL"))]
    assert len(checks) == 2 and all(line.startswith("PASS") for line in checks), summary
    assert all("20 steps of 1,024 tokens, micro-batch 4, world size 1" in line for line in checks)
    assert any(line.startswith("INFO bench tiny block_attnres") for line in summary)
