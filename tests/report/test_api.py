"""The notebook API (``harness.results``, ``harness.analyze``; harness/report/api.py), run as the README shows it.

The README's ``## In a notebook`` Python block is executed as written, in a folder whose
``results/`` holds a synthetic grid named as the README names it (and again on grids without controls,
named for the quickstart's) (result files written as workers
write them, tests/report/test_report.py:write_results); its frames are checked against the numbers the
result files were made from. ~10 s:

    python -m pytest -q tests/report/test_api.py
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from test_report import write_results

import harness
from harness.report.simulation.synthetic import synthetic_frames
from harness.store.store import Store

ROOT = Path(__file__).resolve().parents[2]
GRID = "rd_controls_mini"  # the grid the README's example names


def readme_example() -> str:
    """The first ```python block of the README's ``## In a notebook`` section."""
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## In a notebook\n", 1)[1].split("\n## ", 1)[0]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("nb")
    frames = synthetic_frames(grid=GRID, seeds=(0, 1, 2, 3), n_layers=2, n_evals=3)
    store = Store(root / "results")
    write_results(store, frames)
    store.ingest()
    return root, frames


def test_readme_example_runs_and_its_frames_hold_the_stored_numbers(folder, monkeypatch):
    root, frames = folder
    db = root / "results" / "harness.duckdb"
    before = db.read_bytes()
    monkeypatch.chdir(root)
    ns: dict = {}
    exec(compile(readme_example(), "README.md:In a notebook", "exec"), ns)
    assert db.read_bytes() == before  # everything was ingested already: the API wrote nothing

    want = frames["final"].sort("run_id")
    got = ns["tables"]["final"].sort("run_id")
    assert got["run_id"].to_list() == want["run_id"].to_list()
    assert got["val_nll"].to_list() == want["val_nll"].to_list()  # exact: JSON floats round-trip
    assert set(ns["tables"]) == {"final", "runs", "metrics", "routing"}
    assert ns["tables"]["metrics"].height == frames["metrics"].height  # every metric, not only NLL
    assert ns["tables"]["routing"].height == frames["routing"].height
    assert (
        ns["curves"].height
        == frames["metrics"].filter((pl.col("split") == "val") & (pl.col("name") == "nll")).height
        > 0
    )

    # The headline's mean paired difference, computed here from the synthetic frames.
    f = frames["final"]
    t = f.filter(pl.col("variant") == "rd_attnres").sort("seed")["val_nll"].to_numpy()
    p = f.filter(pl.col("variant") == "block_attnres").sort("seed")["val_nll"].to_numpy()
    head = ns["headline"].row(0, named=True)
    assert ns["headline"].height == 1 and head["n"] == 4
    assert head["mean"] == pytest.approx(float(np.mean(t - p)), abs=1e-12)
    aa = ns["aa"].row(0, named=True)  # dup_route_tied is the parent bit for bit
    assert aa["variant"] == "dup_route_tied" and aa["max_abs"] == 0.0 and aa["status"] == "bit-identical"
    controls = set(ns["controls"]["control"])
    assert controls == set(f["variant"]) - {"rd_attnres", "block_attnres", "dup_route_tied", "prenorm"}
    row = ns["stats"].filter(pl.col("kind") == "treatment_vs_parent").row(0, named=True)
    assert row["mean_diff"] == head["mean"] and row["holm_p"] == head["holm_p"]


@pytest.mark.parametrize(
    "grid, variants",
    [
        ("quickstart_tiny", ("block_attnres", "rd_attnres", "dup_route_tied")),  # an A/A check, no control
        ("parent_treatment", ("block_attnres", "rd_attnres")),  # neither
    ],
)
def test_readme_example_runs_on_a_grid_without_controls_and_empty_tables_keep_their_columns(
    folder, tmp_path, monkeypatch, grid, variants
):
    """The quickstart grid has no control: the README's block runs there too, its empty tables holding
    the columns (and types) of a grid that has them."""
    frames = synthetic_frames(
        grid=grid, seeds=(0, 1, 2), n_layers=2, n_evals=3, effects={v: 0.0 for v in variants}
    )
    store = Store(tmp_path / "results")
    write_results(store, frames)
    store.ingest()
    monkeypatch.chdir(tmp_path)
    ns: dict = {}
    exec(compile(readme_example().replace(GRID, grid), f"README.md:In a notebook ({grid})", "exec"), ns)
    assert ns["controls"].height == 0 and ns["headline"].height == 1
    assert ns["aa"].height == ("dup_route_tied" in variants)
    full = harness.analyze(folder[0] / "results", grid=GRID)  # a grid with controls and an A/A check
    a = harness.analyze(tmp_path / "results", grid=grid)
    assert a.controls.to_frame().schema == full.controls.to_frame().schema
    assert a.aa.to_frame().schema == full.aa.to_frame().schema
    assert a.headline.to_frame().schema == full.headline.to_frame().schema


def test_analysis_objects_and_their_frames_agree(folder):
    root, _ = folder
    a = harness.analyze(root / "results", grid=GRID)
    h = a.headline[0]
    row = a.headline.to_frame().row(0, named=True)
    assert (row["mean"], row["verdict"], row["seeds_needed_n"], row["look_k"]) == (
        h.mean,
        h.verdict,
        h.seeds_needed.n,
        h.look.k,
    )
    c = a.controls.to_frame()
    assert c.height == len(a.controls) and c["seeds"][0] == " ".join(map(str, a.controls[0].seeds))


def test_unknown_grid_is_one_clear_error(folder):
    root, _ = folder
    with pytest.raises(ValueError, match=GRID):  # the message lists the grids there are
        harness.results(root / "results", grid="nope")
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        harness.nope  # noqa: B018


def test_import_harness_stays_cheap():
    """The API is imported on first use: `import harness` loads no polars, DuckDB or numpy."""
    code = (
        "import sys, harness; print(sorted(m for m in ('polars', 'duckdb', 'numpy', 'torch', 'harness.report.api') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"
