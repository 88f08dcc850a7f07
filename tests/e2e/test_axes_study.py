"""A grid with ``[axes] lr = [0.001, 0.004]`` on real text: queue -> plan -> train (harness work) -> report -> sql.

2 variants x 3 seeds x 2 lr values at the tiny preset, 2048 tokens each (12 runs). Each lr value is its own
cell: the report gives each a banner naming it and the line across the axis, and each cell's p, Holm p and
verdict must agree with an independent computation (scipy's paired t-test on the store's final NLLs, Holm
by hand over the two cells).
"""

from __future__ import annotations

import csv
import os
import sys
from pathlib import Path

import pytest
import warm
from scipy import stats as sps

SAMPLE = Path(__file__).resolve().parents[3] / "shared/data/fineweb_edu_sample"
GRID = """
name = "ax_tiny"
corpus = "{corpus}"
sizes = ["tiny"]
seeds = [0, 1, 2]
budgets_tokens = [2048]
[variants]
block_attnres = "parent"
rd_attnres = "treatment"
[axes]
lr = [0.001, 0.004]
[train]
vocab_size = 512
batch_tokens = 512
eval_tokens = 1024
eval_every_tokens = 2048
"""
ALPHA = 0.05  # the default plan's


def harness(*args, env):
    proc = warm.run([sys.executable, "-m", "harness", *args], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, f"harness {' '.join(args)}:\n{proc.stdout}\n{proc.stderr[-3000:]}"
    return proc.stdout


@pytest.mark.slow  # about 3 min on 2 loaded cores: trains 12 tiny runs, then re-trains 8
@pytest.mark.skipif(not SAMPLE.is_dir(), reason="sample corpus absent")
def test_an_lr_axis_gives_a_verdict_per_value_and_the_line_across_it(tmp_path):
    grid = tmp_path / "ax_tiny.toml"
    grid.write_text(GRID.format(corpus=SAMPLE))
    env = {
        **os.environ,
        "HARNESS_RESULTS": str(tmp_path / "results"),
        "HARNESS_PROGRESS": "lines",
    }
    assert "queued 12 runs" in harness("queue", str(grid), env=env)
    status = harness("status", env=env).splitlines()
    rows = {
        ln.split()[0] if not ln.startswith("  ") else " ".join(ln.split()[:2]): ln.split() for ln in status
    }
    assert (
        rows["ax_tiny"][1:2] == ["12"] and rows["lr 0.001"][2:3] == ["6"] and rows["lr 0.004"][2:3] == ["6"]
    )
    plan = harness("plan", "--sd", "0.001", str(grid), env=env)
    for lr in ("0.001", "0.004"):
        assert f"cell tiny@lr={lr}/2_048 as written: 2 variants x 3 seeds = 6 runs, 12_288 tokens" in plan
    harness("work", "--threads", "1", "--quiet", env=env)
    out = tmp_path / "report"
    harness("report", "--grid", "ax_tiny", "--out", str(out), "--no-figures", env=env)

    rows = csv.DictReader(
        harness(
            "sql", "select lr, variant, seed, val_nll from final", "--format", "csv", env=env
        ).splitlines()
    )
    y = {(float(r["lr"]), r["variant"], int(r["seed"])): float(r["val_nll"]) for r in rows}
    assert len(y) == 12
    by_lr = harness("sql", "select lr, variant, avg(val_nll) from final group by all order by 1, 2", env=env)
    assert "0.001" in by_lr and "0.004" in by_lr and "rd_attnres" in by_lr

    # the independent computation: scipy's one-sided paired t-test per cell, Holm over the two cells
    p = {}
    for lr in (0.001, 0.004):
        t = [y[(lr, "rd_attnres", s)] for s in range(3)]
        b = [y[(lr, "block_attnres", s)] for s in range(3)]
        p[lr] = sps.ttest_rel(t, b, alternative="less").pvalue
    lo, hi = sorted(p, key=p.get)
    holm = {lo: min(1.0, 2 * p[lo])}
    holm[hi] = min(1.0, max(holm[lo], p[hi]))

    stats = {
        r["size"]: r for r in csv.DictReader((out / "stats.csv").open()) if r["kind"] == "treatment_vs_parent"
    }
    md = (out / "report.md").read_text()
    held = []
    for lr in (0.001, 0.004):
        row = stats[f"tiny@lr={lr}"]
        assert float(row["p_one_sided"]) == pytest.approx(p[lr], rel=1e-9, abs=1e-12)
        assert float(row["holm_p"]) == pytest.approx(holm[lr], rel=1e-9, abs=1e-12)
        established = holm[lr] < ALPHA and float(row["mean_diff"]) < 0
        assert (row["verdict"] == "gain established") == established
        held += [str(lr)] * established
        assert f"**Size tiny, budget 2_048 tokens, lr {lr}: {row['verdict']}" in md
    assert "Holm runs over the 2 cell(s)" in md
    line = (
        "every value of lr (0.001, 0.004)"
        if len(held) == 2
        else "none of the values of lr (0.001, 0.004)"
        if not held
        else f"some values of lr: {held[0]}"
    )
    assert f"The gain is established at {line}" in md

    # the archive carries the axis; harness retrain re-trains seeds 0 1 of every cell and checks each cell apart
    archive = tmp_path / "ax.tar.gz"
    harness("archive", "--grid", "ax_tiny", "--out", str(archive), env=env)
    again = [*("retrain", "--results", str(tmp_path / "again"), "--pairs", "2", "--threads", "1", "--quiet")]
    again += ["--corpus", str(SAMPLE)]
    text = harness(*again, "--csv", str(tmp_path / "rt.csv"), str(archive), env=env)
    for lr in ("0.001", "0.004"):
        cell = text.split(f"## Cell Size tiny, budget 2_048 tokens, lr {lr}\n")[1].split("## Cell")[0]
        assert "Re-trained here: 4 runs (seeds 0 1)" in cell and "**Verdict: bit-identical" in cell
    rows = list(csv.DictReader((tmp_path / "rt.csv").open()))
    runs = {(r["cell"], r["run_id"]) for r in rows if r["level"] == "run"}
    assert runs == {
        (f"tiny@lr={lr}/2048", f"ax_tiny:tiny:{v}:s{s}:2048:lr={lr}")
        for lr in ("0.001", "0.004")
        for v in ("block_attnres", "rd_attnres")
        for s in (0, 1)
    }
