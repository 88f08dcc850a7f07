"""A tiny [factorial] grid on real text: queue -> train (harness work) -> report with the factorial section.

4 variants x 3 seeds at the tiny preset, 2048 tokens each. The report must carry the factorial section
(verdict sentences, table, interaction plot), ``stats.csv`` its seven rows per cell, and the rows must be
the per-seed contrasts of the store's final NLLs.
"""

from __future__ import annotations

import csv
import os
import sys
from pathlib import Path

import pytest
import warm

SAMPLE = Path(__file__).resolve().parents[3] / "shared/data/fineweb_edu_sample"
GRID = """
name = "fact_tiny"
corpus = "{corpus}"
sizes = ["tiny"]
seeds = [0, 1, 2]
budgets_tokens = [2048]
[variants]
block_attnres = "parent"
rd_attnres = "treatment"
param_matched = "control"
rd_offset = "reference"
[factorial]
factors = ["offset", "decoupled_v"]
levels = {{ block_attnres = [0, 0], param_matched = [1, 0], rd_attnres = [0, 1], rd_offset = [1, 1] }}
[train]
vocab_size = 512
batch_tokens = 512
eval_tokens = 1024
eval_every_tokens = 2048
[analysis]
min_effect_nats = 0.02
"""
LEVELS = {"block_attnres": (0, 0), "param_matched": (1, 0), "rd_attnres": (0, 1), "rd_offset": (1, 1)}


def harness(*args, env):
    proc = warm.run([sys.executable, "-m", "harness", *args], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, f"harness {' '.join(args)}:\n{proc.stdout}\n{proc.stderr[-3000:]}"
    return proc.stdout


@pytest.mark.slow  # 155 s on 2 shared cores: trains 12 tiny runs
@pytest.mark.skipif(not SAMPLE.is_dir(), reason="sample corpus absent")
def test_a_factorial_grid_queues_trains_and_reports_its_factorial(tmp_path):
    grid = tmp_path / "fact_tiny.toml"
    grid.write_text(GRID.format(corpus=SAMPLE))
    env = {
        **os.environ,
        "HARNESS_RESULTS": str(tmp_path / "results"),
        "HARNESS_PROGRESS": "lines",
    }
    assert "queued 12 runs" in harness("queue", str(grid), env=env)
    harness("work", "--threads", "1", "--quiet", env=env)
    out = tmp_path / "report"
    harness("report", "--grid", "fact_tiny", "--out", str(out), env=env)
    final = csv.DictReader(
        harness("sql", "select variant, seed, val_nll from final", "--format", "csv", env=env).splitlines()
    )
    y = {(LEVELS[r["variant"]], int(r["seed"])): float(r["val_nll"]) for r in final}
    assert len(y) == 12
    rows = [r for r in csv.DictReader((out / "stats.csv").open()) if r["kind"].startswith("factorial_")]
    assert [r["kind"] for r in rows] == ["factorial_simple"] * 2 + ["factorial_main"] + [
        "factorial_simple"
    ] * 2 + ["factorial_main", "factorial_interaction"]
    inter = [y[(1, 1), s] - y[(1, 0), s] - y[(0, 1), s] + y[(0, 0), s] for s in range(3)]
    assert float(rows[-1]["mean_diff"]) == pytest.approx(sum(inter) / 3, abs=1e-9)
    assert rows[-1]["n_pairs"] == "3" and rows[-1]["family_size"] == "5"
    simple = [y[(1, 0), s] - y[(0, 0), s] for s in range(3)]
    assert float(rows[0]["mean_diff"]) == pytest.approx(sum(simple) / 3, abs=1e-9)
    md = (out / "report.md").read_text()
    assert "## Factorial attribution: offset x decoupled_v" in md
    assert (
        "figures/factorial_tiny_2048.png" in md and (out / "figures/factorial_tiny_2048.png").stat().st_size
    )
    assert "interaction shown" in md or "interact (interaction" in md or "absorbs" in md
    assert "Factorial attribution" in (out / "report.html").read_text()
