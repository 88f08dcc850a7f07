"""The report files and the `harness report` command (harness/report/build.py, render.py, figures.py).

Uses synthetic frames (harness/report/simulation/synthetic.py) and, for the command, an in-memory DuckDB
standing in for harness.store.store.Store (and the real store and queue journal end to end). The
HTML in a real browser: tests/render/test_report_html.py. CPU only, ~30 s:

    python -m pytest -q tests/report/test_report.py
"""

from __future__ import annotations

import base64
import json
import re
import sys
import types
import warnings
from html import escape as html_escape
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from harness.report.build import Frames, build_report
from harness.report.simulation.synthetic import DEFAULT_EFFECTS, synthetic_frames
from harness.report.stats.decisions import NOT_ASSESSED
from harness.report.stats.stats_table import CSV_COLUMNS
from harness.store.validate import result_filename

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def full_report(tmp_path_factory):
    """One complete report (tables and figures) on a 5-seed synthetic grid."""
    out = tmp_path_factory.mktemp("report")
    frames = synthetic_frames(grid="synth", n_layers=4)
    return build_report(Frames(**frames), out, grid="synth"), out


def test_files_written_and_stats_csv_contract(full_report):
    result, out = full_report
    names = {p.relative_to(out).as_posix() for p in result.paths}
    assert {"stats.csv", "pairs.csv", "report.md", "report.html"} <= names
    # Figures: training and validation curves, paired differences, gain fractions, routing of the
    # parent and of the two variants with a V route (dup_route's second route: n_layers=4 frames have none).
    figs = sorted(n for n in names if n.startswith("figures/"))
    assert figs == [
        "figures/curves_small_1000000.png",
        "figures/gain_fraction_small_1000000.png",
        "figures/paired_diffs_small_1000000.png",
        "figures/routing_block_attnres_small_1000000.png",
        "figures/routing_fixed_v_small_1000000.png",
        "figures/routing_rd_attnres_small_1000000.png",
    ]
    assert {f.cell for f in result.figures} == {("small", 1_000_000)}
    for f in figs:
        assert (out / f).read_bytes().startswith(PNG_MAGIC)
    table = pl.read_csv(out / "stats.csv")
    assert tuple(table.columns[: len(CSV_COLUMNS)]) == CSV_COLUMNS
    assert table.height == 10  # 1 + 4 controls + 4 treatment-vs-control + 1 reference
    pairs = pl.read_csv(out / "pairs.csv")
    assert pairs.height == 50 and pairs["diff"].to_list() == pytest.approx(
        (pairs["nll_first"] - pairs["nll_second"]).to_list(), abs=0
    )
    assert not list(out.glob("**/.*tmp*"))  # no temporary file left behind


def test_markdown_has_every_section(full_report):
    result, out = full_report
    md = (out / "report.md").read_text()
    for heading in (
        "# Paired significance report: grid synth",
        "## Verdict per cell",
        "## How to read this report",
        "## Grid status: which runs have finished",
        "## Analysis plan (fixed before the runs)",
        "## Step 1, the headline: is the treatment's gain established?",
        "## Step 2, controls: do they reproduce the gain?",
        "## A/A check",
        "## Divergence is an outcome: runs per variant",
        "## Descriptives: every comparison",
        "## Mixed model cross-check: nll ~ variant + (1 | seed)",
        "## Provenance: where the runs ran",
        "## Figures",
        "## Methods (DESIGN section 6)",
        "## Runs left out, and why",
    ):
        assert heading in md, heading
    (h,) = result.stats.headlines
    s = next(c.stats for c in result.stats.comparisons if c.comparison == h.comparison)
    assert h.established
    assert (
        f"| small, 1M | **gain established** | {h.mean:+.4f} [{s.ci_low:+.4f}, {s.ci_high:+.4f}] | 5/5 |"
        in md
    )
    assert (
        f"> **Size small, budget 1_000_000 tokens: gain established.** rd_attnres vs block_attnres: mean dNLL "
        f"{h.mean:+.4f} nats/token [{s.ci_low:+.4f}, {s.ci_high:+.4f}], lower at 5 of 5 seeds"
    ) in md
    assert f"{100 * np.expm1(h.mean):+.2f} %" in md
    # Whether the gain is established and why: n, mean d, one-sided p, Holm p, level.
    assert (
        f"size small, budget 1_000_000 tokens: **gain established** (n = 5, mean d = {h.mean:+.4f} nats/token, "
        f"one-sided t p = {h.p_one_sided:.3g}, Holm p = {h.holm_p:.3g} over 1 cell(s), level 0.05)"
    ) in md
    assert "| 0.05 | 0.5 | not set | 0.8 | 30 | none (one look) |" in md  # the plan, printed
    assert "bit-identical: all 5 paired differences are exactly 0" in md
    assert "| rd_attnres - block_attnres | small, 1M | 5/5 |" in md and "| 0.0625 | 0.0625 | 0.0625 |\n" in md
    for a in result.stats.assessments:
        assert f"| {a.control} | small, 1M | **{a.verdict}** |" in md
        assert f"{a.control}: **{a.verdict}**" in md  # its chip in the cell's banner
    assert (
        "A/A dup_route_tied: **pass**" in md
        and "### A/A check (identical to the parent in exact arithmetic): **pass**" in md
    )
    # No queue was given: the report says so and never that every run finished.
    assert "Queue not found (the queue was not read): this report sees only the 35 run(s)" in md
    assert "every run of the grid finished" not in md and "All 35 runs" not in md
    for fig in result.figures:
        assert f"](figures/{fig.name}.png)" in md


def test_html_is_self_contained(full_report):
    result, out = full_report
    page = (out / "report.html").read_text()
    srcs = re.findall(r'<img [^>]*src="([^"]+)"', page)
    assert len(srcs) == len(result.figures) == 6
    for src, fig in zip(srcs, result.figures):
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1]) == fig.png
    assert not re.search(r'(src|href)="(https?:|//|file:)', page)
    # legend, grid status, unigram plateau, plan, headline, controls, leave one seed out, A/A, divergence,
    # descriptives, mixed model, provenance (one class: no variant x hardware tables; nothing left out)
    assert page.count("<table>") == 12


def test_partial_grid_report_lists_left_out_runs_and_assesses_nothing(tmp_path):
    frames = synthetic_frames(grid="g", seeds=(0, 1, 2))
    runs = frames["runs"].with_columns(
        pl.when(pl.col("run_id") == "g-small-1000000-rd_attnres-s1")
        .then(pl.lit("failed"))
        .otherwise(pl.col("status"))
        .alias("status"),
        pl.when(pl.col("run_id") == "g-small-1000000-rd_attnres-s1")
        .then(pl.lit("loss is NaN at step 40"))
        .otherwise(pl.col("error"))
        .alias("error"),
    )
    final = frames["final"].filter(pl.col("run_id") != "g-small-1000000-rd_attnres-s1")
    result = build_report(Frames(final, runs, frames["metrics"], frames["routing"]), tmp_path, grid="g")
    md = (tmp_path / "report.md").read_text()
    assert (
        "| g-small-1000000-rd_attnres-s1 | rd_attnres | 1 | small, 1M | failed "
        "| failed: loss is NaN at step 40 |"
    ) in md
    assert "unpaired seed(s) 1: seed 1 (rd_attnres: failed: loss is NaN at step 40)" in md
    (h,) = result.stats.headlines
    # A failure for a numerical reason is a divergence: seed 1 counts as a loss of the treatment
    # (d = +max |d| of the two observed pairs), never a dropped pair (DESIGN 6).
    d_obs = [p.diff for p in result.stats.pairs if p.comparison == "rd_attnres - block_attnres"]
    assert h.n == 3 and h.seeds == (0, 1, 2) and not h.established and h.verdict == "undecided"
    assert [(i.seed, i.loser, i.value) for i in h.imputed] == [(1, "rd_attnres", max(abs(x) for x in d_obs))]
    assert (
        "**undecided** (n = 3, " in md
        and "Seed(s) 1 count as losses of rd_attnres, which diverged there" in md
    )
    # Controls have 3 pairs with the parent, but the gain is not established: no verdict, and the
    # row gives the MDE of the contrast at this budget.
    assert {a.verdict for a in result.stats.assessments} == {NOT_ASSESSED}
    assert "| rd_attnres | small, 1M | 2 | 0 | 1 | 0 | - | 1 |" in md  # the divergence table
    # curves, paired differences, three routing figures; no gain fraction (not assessed)
    assert len(result.figures) == 5


def test_report_of_two_seeds_does_not_crash(tmp_path):
    frames = synthetic_frames(grid="g2", seeds=(0, 1))
    result = build_report(Frames(**frames), tmp_path, grid="g2", figures=False)
    assert {a.verdict for a in result.stats.assessments} == {NOT_ASSESSED}
    table = pl.read_csv(tmp_path / "stats.csv")
    assert table["t_p"].is_nan().all() and (table["n_pairs"] == 2).all()
    assert all("fewer than 3 pairs: no test" in n for n in table["note"].to_list())
    md = (tmp_path / "report.md").read_text()  # written without figures: it says so, not "no pairs"
    assert (
        "No figure: this report was written without figures (`--no-figures`)." in md and "no pairs," not in md
    )


# --------------------------------------------------------------------------- the command


class FakeStore:
    """harness.store.store.Store stand-in: the frames as DuckDB views, queried with ? parameters."""

    def __init__(self, frames: dict[str, pl.DataFrame], results=None):
        import duckdb
        import pandas as pd

        # each stored run still has its result file (harness report checks: issue 40)
        self.runs_dir = Path(results or ".") / "runs"
        if results is not None and "runs" in frames:
            self.runs_dir.mkdir(parents=True, exist_ok=True)
            for run_id in frames["runs"]["run_id"].to_list():
                (self.runs_dir / result_filename(run_id)).touch()
        self.con = duckdb.connect()
        bench = pl.DataFrame(
            schema={
                "bench_id": pl.String,
                "created_at": pl.Datetime,
                "size": pl.String,
                "variant": pl.String,
                "step_ms": pl.Float64,
                "extra": pl.String,
            }
        )  # the store's bench table, empty (DESIGN 14's time multiplier reads it)
        frames = {
            "ingest_log": pl.DataFrame(schema={"file": pl.String, "error": pl.String}),
            "bench": bench,
            **frames,
        }
        for name, frame in frames.items():
            self.con.register(name, pd.DataFrame(frame.to_dict(as_series=False)))

    def result_path(self, run_id: str) -> Path:
        return self.runs_dir / result_filename(run_id)

    def query(self, sql: str, params=None, *, ingest: bool = True) -> pl.DataFrame:
        cur = self.con.execute(sql, params or [])
        cols = [d[0] for d in cur.description]
        return pl.DataFrame(cur.fetchall(), schema=cols, orient="row")


def _run_cli(monkeypatch, capsys, frames, argv):
    from harness import cli

    fake = types.ModuleType("harness.store.store")
    fake.Store = lambda results: FakeStore(frames, results)
    monkeypatch.setitem(sys.modules, "harness.store.store", fake)
    rc = cli.main(argv)
    return rc, capsys.readouterr()


def test_cli_report_writes_and_prints_headline(monkeypatch, capsys, tmp_path):
    frames = synthetic_frames(grid="rd_controls_small")
    argv = [
        "report",
        "--grid",
        "rd_controls_small",
        "--results",
        str(tmp_path),
        "--out",
        str(tmp_path / "o"),
        "--no-figures",
    ]
    rc, cap = _run_cli(monkeypatch, capsys, frames, argv)
    assert rc == 0, cap.err
    assert str(tmp_path / "o" / "stats.csv") in cap.out and str(tmp_path / "o" / "report.html") in cap.out
    assert re.search(
        r"size small, budget 1_000_000 tokens: gain established \(n = 5, mean d = -0\.0\d{3}", cap.out
    )
    assert "plan: alpha 0.05, rho 0.5, min_effect_nats not set, power 0.8, max_seeds 30" in cap.out
    assert (
        "A/A dup_route_tied small 1000000: bit-identical: all 5 paired differences are exactly 0" in cap.out
    )


AA_NOISE = [0.004, -0.006, 0.0128, 0.002, -0.001]  # A/A - parent per seed, nats/token


def weak_noisy_frames(grid: str) -> dict[str, pl.DataFrame]:
    """A treatment with no true gain and an A/A control off the parent by AA_NOISE."""
    frames = synthetic_frames(grid=grid, effects={**DEFAULT_EFFECTS, "rd_attnres": -0.002})
    aa = pl.col("variant") == "dup_route_tied"
    frames["final"] = frames["final"].with_columns(
        pl.when(aa)
        .then(pl.col("val_nll") + pl.col("seed").map_elements(lambda s: AA_NOISE[s], pl.Float64))
        .otherwise(pl.col("val_nll"))
        .alias("val_nll")
    )
    return frames


def test_weak_treatment_assesses_no_control_and_shows_the_noise_floor(monkeypatch, capsys, tmp_path):
    frames = weak_noisy_frames("weak")
    result = build_report(Frames(**frames), tmp_path, grid="weak", figures=False)
    stats = result.stats
    (h,) = stats.headlines
    assert not h.established and h.reason == "Holm p >= alpha"
    (aa,) = stats.aa_checks
    assert aa.max_abs == pytest.approx(0.0128, abs=1e-12) and aa.status == "warn"
    assert aa.threshold == pytest.approx(abs(h.mean) / 2, abs=1e-15) and aa.threshold < 0.0128
    md = (tmp_path / "report.md").read_text()
    page = (tmp_path / "report.html").read_text()
    why = (
        f"size small, budget 1_000_000 tokens: **undecided** (n = 5, mean d = {h.mean:+.4f} "
        f"nats/token, one-sided t p = {h.p_one_sided:.3g}, Holm p = {h.holm_p:.3g} over 1 cell(s), level 0.05): "
        f"Holm p >= level. MDE at n = 5: {h.mde_nats:.4g} nats/token (one-sided, power 0.8)"
    )
    assert (
        why in md
        and html_escape(why.replace("**", "")).replace("undecided", "<strong>undecided</strong>") in page
    )
    controls = md[md.index("## Step 2") : md.index("## A/A check")]
    assert (
        "Not assessed at size small, budget 1_000_000 tokens: the treatment's gain is not established"
        in controls
    )
    rows = [line for line in controls.splitlines() if line.startswith("| ") and "| small, 1M |" in line]
    assert len(rows) == 3  # the three controls; the A/A check is not one
    for a, line in zip(stats.assessments, rows):
        assert (
            a.verdict == NOT_ASSESSED and "| **not assessed** |" in line and f"| {a.mde_nats:.4g} |" in line
        )
    # The caveat is said once for the cell, not once per control row.
    assert controls.count("not established in this cell") == 0 and controls.count("Not assessed at") == 1
    assert "- why," not in controls
    noise = "max |d| = 0.0128 nats/token is the protocol's numerical noise floor"
    assert (
        noise.replace("|", "\\|") in md
        and "| dup_route_tied | small, 1M | **warn** | 5 | 244 | 0.0128 |" in md
    )
    assert "A/A dup_route_tied: **warn**" in md[: md.index("## Step 2")]  # in the cell's banner
    table = pl.read_csv(tmp_path / "stats.csv")
    ctrl = table.filter(pl.col("kind") == "control_vs_parent")
    assert ctrl["verdict"].to_list() == [NOT_ASSESSED] * 3 and ctrl["contrast_p"].is_nan().all()
    assert (ctrl["mde_nats"] > 0).all()

    argv = [
        "report",
        "--grid",
        "weak",
        "--results",
        str(tmp_path),
        "--out",
        str(tmp_path / "o"),
        "--no-figures",
    ]
    rc, cap = _run_cli(monkeypatch, capsys, frames, argv)
    assert rc == 0, cap.err
    assert why.replace("**", "") in cap.out
    verdict_lines = [line for line in cap.out.splitlines() if line.startswith("  ") and " 1000000  " in line]
    assert len(verdict_lines) == 3 and all(NOT_ASSESSED in line for line in verdict_lines)
    assert f"A/A dup_route_tied small 1000000: warn: {noise}" in cap.out


def test_cli_report_errors_are_one_line(monkeypatch, capsys, tmp_path):
    frames = synthetic_frames(grid="gA")
    rc, cap = _run_cli(monkeypatch, capsys, frames, ["report", "--grid", "nope", "--results", str(tmp_path)])
    assert rc == 2 and "no runs of grid 'nope' in the results store; grids there: gA" in cap.err

    sel = pl.col("run_id") == "gA-small-1000000-fixed_v-s4"
    frames["final"] = frames["final"].with_columns(
        pl.when(sel).then(pl.lit("other")).otherwise(pl.col("protocol_hash")).alias("protocol_hash")
    )
    frames["runs"] = frames["runs"].with_columns(
        pl.when(sel).then(pl.lit("other")).otherwise(pl.col("protocol_hash")).alias("protocol_hash"),
        pl.when(sel)
        .then(pl.col("config").str.replace("synthetic", "fineweb"))
        .otherwise(pl.col("config"))
        .alias("config"),
    )
    argv = [
        "report",
        "--grid",
        "gA",
        "--results",
        str(tmp_path),
        "--out",
        str(tmp_path / "o"),
        "--no-figures",
    ]
    rc, cap = _run_cli(monkeypatch, capsys, frames, argv)
    assert rc == 2 and "corpus: 'fineweb' != 'synthetic'" in cap.err and "seed=4" in cap.err
    assert len(cap.err.strip().splitlines()) == 1
    rc, cap = _run_cli(monkeypatch, capsys, frames, argv + ["--allow-partial"])
    assert rc == 0 and "warning: protocol mismatch, pair left out" in cap.out


def write_results(store, frames: dict[str, pl.DataFrame], only=None, edit=None) -> None:
    """Write the frames' runs as result files (run, metrics, routing), as workers do.

    ``only``: run ids to write (default all); ``edit``: run_id -> fields replaced in the run row.
    """
    metrics = frames["metrics"].partition_by("run_id", as_dict=True)
    routing = frames["routing"].partition_by("run_id", as_dict=True)
    for run in frames["runs"].iter_rows(named=True):
        rid = run["run_id"]
        if only is not None and rid not in only:
            continue
        run = {**run, "config": json.loads(run["config"]), **(edit or {}).get(rid, {})}
        store.write_result(
            {
                "run": run,
                "metrics": [
                    {k: v for k, v in m.items() if k != "run_id"}
                    for m in metrics[(rid,)].iter_rows(named=True)
                ],
                "routing": [
                    {k: v for k, v in r.items() if k != "run_id"}
                    for r in routing[(rid,)].iter_rows(named=True)
                ],
            }
        )


@pytest.mark.slow
def test_cli_report_on_the_real_store(capsys, tmp_path):
    """End to end through harness.store.store.Store: result files -> DuckDB -> SQL -> report."""
    from harness import cli
    from harness.store.store import Store

    frames = synthetic_frames(grid="e2e", seeds=(0, 1, 2), n_layers=2, n_evals=3)
    write_results(
        Store(tmp_path / "results"),
        frames,
        edit={"e2e-small-1000000-fixed_v-s2": dict(status="diverged", error="loss became NaN at step 70")},
    )
    rc = cli.main(["report", "--grid", "e2e", "--results", str(tmp_path / "results")])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    out = tmp_path / "results" / "reports" / "e2e"  # the default output folder
    assert str(out / "report.html") in cap.out
    table = pl.read_csv(out / "stats.csv")
    tp = table.filter(pl.col("comparison") == "rd_attnres - block_attnres").row(0, named=True)
    want = (
        frames["final"].filter(pl.col("variant") == "rd_attnres")["val_nll"]
        - frames["final"].filter(pl.col("variant") == "block_attnres")["val_nll"]
    ).mean()
    assert tp["n_pairs"] == 3 and tp["mean_diff"] == pytest.approx(want, abs=1e-12)
    fv = table.filter(pl.col("comparison") == "fixed_v - block_attnres").row(0, named=True)
    assert fv["n_pairs"] == 2 and "fewer than 3 pairs" in fv["note"]  # the control - parent descriptives
    # The verdict's contrast counts seed 2, where fixed_v diverged, as a loss for fixed_v (DESIGN 6).
    assert (fv["test_pairs"], str(fv["test_seeds"]), str(fv["imputed_seeds"])) == (3, "0 1 2", "2")
    assert "seed(s) 2 count as losses" in fv["note"] and fv["verdict"] == "does not reproduce gain"
    md = (out / "report.md").read_text()
    assert (
        "| e2e-small-1000000-fixed_v-s2 | fixed_v | 2 | small, 1M | diverged "
        "| diverged: loss became NaN at step 70 |"
    ) in md
    assert len(list((out / "figures").glob("*.png"))) == 6
    from harness.report.build import load_frames  # the curves read the training loss too

    loaded = load_frames(Store(tmp_path / "results"), "e2e").metrics
    for split, name in (("train", "loss"), ("val", "nll")):
        want = frames["metrics"].filter((pl.col("split") == split) & (pl.col("name") == name)).height
        assert loaded.filter((pl.col("split") == split) & (pl.col("name") == name)).height == want > 0
    # No queue journal in the results folder: said, and no claim that the grid finished.
    where = "queue.journal in the results folder"  # no absolute path of this machine in a report
    assert str(tmp_path) not in md
    assert f"Queue not found (no queue at {where}): this report sees only the 21 run(s)" in md
    assert "runs: Queue not found" in cap.out and "All 21 runs" not in md


def test_cli_report_reads_the_queue_and_says_what_is_unfinished(capsys, tmp_path):
    """A real queue journal next to a real store: 9 runs stored, one running, two the queue calls
    done (one result file unreadable, one not written yet), ten queued."""
    from harness import cli
    from harness.design.config import RunConfig
    from harness.scheduling.queue.run_queue import RunQueue
    from harness.store.store import Store
    from harness.store.validate import result_filename

    frames = synthetic_frames(grid="e2e", seeds=(0, 1, 2), n_layers=2, n_evals=3)
    results = tmp_path / "results"
    stored = [
        f"e2e-small-1000000-{v}-s{s}" for v in ("block_attnres", "rd_attnres", "fixed_v") for s in (0, 1, 2)
    ]
    store = Store(results)
    write_results(store, frames, only=stored)
    runs = frames["runs"].iter_rows(named=True)
    configs = [
        RunConfig(
            **{k: r[k] for k in ("run_id", "grid", "variant", "role", "seed", "size", "budget_tokens")},
            corpus=str(tmp_path / "corpus"),
        )
        for r in runs
    ]
    configs.sort(key=lambda c: c.run_id in stored)  # the unfinished first: claimed first
    queue = RunQueue.open(None, results, log=lambda m: None)
    queue.enqueue(configs)
    unreadable, running, not_written = (c.run_id for c in configs[:3])
    for rid in (unreadable, running, not_written):
        claim = queue.claim()
        assert claim.run_id == rid
        if rid != running:
            queue.complete(claim, "done", value=3.5, wall_s=1.0)
    (store.runs_dir / result_filename(unreadable)).write_text('{"run": ')  # a corrupt result file

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the report names the unreadable file itself (below), warns nothing
        rc = cli.main(["report", "--grid", "e2e", "--results", str(results), "--no-figures"])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    md = (results / "reports" / "e2e" / "report.md").read_text()
    sentence = (
        "9 of 21 runs done; 1 running, 9 queued, 1 finished, result not in the store, 1 result file "
        "unreadable — the verdicts below use the finished runs only."
    )
    assert f"> {sentence}" in md and f"runs: {sentence}" in cap.out
    assert "every run of the grid finished" not in md and "All 21" not in md
    status = md[md.index("## Grid status") : md.index("## Analysis plan")]
    assert "| **done** | 9 | block_attnres s0 s1 s2; rd_attnres s0 s1 s2; fixed_v s0 s1 s2 |" in status
    assert f"| **running** | 1 | {running.split('-')[3]} s{running[-1]} |" in status
    assert "| **queued** | 9 |" in status
    assert f"- detail, **result file unreadable** (1): {unreadable}: " in status
    assert (
        f"- detail, **finished, result not in the store** (1): {not_written}: the queue says done" in status
    )
    assert "Queue: read from queue.journal in the results folder." in status and str(tmp_path) not in md
    # The controls and A/A check without finished runs are named as such, not "none".
    roles = md.splitlines()[2]
    assert "A/A check: dup_route_tied (no run finished yet)" in roles and "fixed_v" in roles
    assert "dup_route (no run finished yet)" in roles and "param_matched (no run finished yet)" in roles
    assert "dup_route_tied: 0 of 3 runs finished" in md  # the A/A box
