"""The report files and the `harness report` command (reports/build.py, render.py, figures.py).

Uses synthetic frames (reports/synthetic.py) and, for the command, an in-memory DuckDB
standing in for db.store.Store. The browser test needs Debian's chromium
(`apt-get install -y chromium`) and is skipped without it. CPU only, ~20 s:

    python -m pytest -q tests/test_report.py
"""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
import sys
import tempfile
import types
from html import escape as html_escape

import numpy as np
import polars as pl
import pytest

from reports.build import Frames, build_report
from reports.decisions import NOT_ASSESSED
from reports.stats import CSV_COLUMNS
from reports.synthetic import DEFAULT_EFFECTS, synthetic_frames

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
    # Figures: paired differences, validation curves, routing of the two variants with a V route.
    figs = sorted(n for n in names if n.startswith("figures/"))
    assert figs == ["figures/gain_fraction_small_1000000.png", "figures/paired_diffs_small_1000000.png",
                    "figures/routing_fixed_v_small_1000000.png", "figures/routing_rd_attnres_small_1000000.png",
                    "figures/val_curves_small_1000000.png"]
    for f in figs:
        assert (out / f).read_bytes().startswith(PNG_MAGIC)
    table = pl.read_csv(out / "stats.csv")
    assert tuple(table.columns[: len(CSV_COLUMNS)]) == CSV_COLUMNS
    assert table.height == 10  # 1 + 4 controls + 4 treatment-vs-control + 1 reference
    pairs = pl.read_csv(out / "pairs.csv")
    assert pairs.height == 50 and pairs["diff"].to_list() == pytest.approx(
        (pairs["nll_first"] - pairs["nll_second"]).to_list(), abs=0)
    assert not list(out.glob("**/.*tmp*"))  # no temporary file left behind


def test_markdown_has_every_section(full_report):
    result, out = full_report
    md = (out / "report.md").read_text()
    for heading in ("# Paired significance report: grid synth", "## Analysis plan (fixed before the runs)",
                    "## Step 1, the headline: is the treatment's gain established?",
                    "## Step 2, controls: do they reproduce the gain?", "## A/A check",
                    "## Divergence is an outcome: runs per variant", "## Descriptives: every comparison",
                    "## Mixed model cross-check: nll ~ variant + (1 | seed)", "## Figures",
                    "## Methods (DESIGN section 6)", "## Runs left out, and why"):
        assert heading in md, heading
    (h,) = result.stats.headlines
    s = next(c.stats for c in result.stats.comparisons if c.comparison == h.comparison)
    assert h.established
    assert f"| small | 1_000_000 | 5/5 | {h.mean:+.4f} [{s.ci_low:+.4f}, {s.ci_high:+.4f}] |" in md
    assert f"{100 * np.expm1(h.mean):+.2f} %" in md
    # Whether the gain is established and why: n, mean d, one-sided p, Holm p, level.
    assert (f"size small, budget 1_000_000 tokens: **gain established** (n = 5, mean d = {h.mean:+.4f} nats/token, "
            f"one-sided t p = {h.p_one_sided:.3g}, Holm p = {h.holm_p:.3g} over 1 cell(s), level 0.05)") in md
    assert "| 0.05 | 0.5 | not set | 0.8 | 30 | none (one look) |" in md  # the plan, printed
    assert "(min 0.0625)" in md and "bit-identical: all 5 paired differences are exactly 0" in md
    for a in result.stats.assessments:
        assert f"| {a.control} | small | 1_000_000 |" in md and f"**{a.verdict}**" in md
    for fig in result.figures:
        assert f"](figures/{fig.name}.png)" in md


def test_html_is_self_contained(full_report):
    result, out = full_report
    page = (out / "report.html").read_text()
    srcs = re.findall(r'<img [^>]*src="([^"]+)"', page)
    assert len(srcs) == len(result.figures) == 5
    for src, fig in zip(srcs, result.figures):
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1]) == fig.png
    assert not re.search(r'(src|href)="(https?:|//|file:)', page)
    # plan, headline, controls, A/A, divergence, descriptives, mixed model (nothing left out)
    assert page.count("<table>") == 7


def test_partial_grid_report_lists_left_out_runs_and_assesses_nothing(tmp_path):
    frames = synthetic_frames(grid="g", seeds=(0, 1, 2))
    runs = frames["runs"].with_columns(
        pl.when(pl.col("run_id") == "g-small-1000000-rd_attnres-s1").then(pl.lit("failed"))
        .otherwise(pl.col("status")).alias("status"),
        pl.when(pl.col("run_id") == "g-small-1000000-rd_attnres-s1").then(pl.lit("loss is NaN at step 40"))
        .otherwise(pl.col("error")).alias("error"))
    final = frames["final"].filter(pl.col("run_id") != "g-small-1000000-rd_attnres-s1")
    result = build_report(Frames(final, runs, frames["metrics"], frames["routing"]), tmp_path, grid="g")
    md = (tmp_path / "report.md").read_text()
    assert ("| g-small-1000000-rd_attnres-s1 | rd_attnres | 1 | small | 1_000_000 | failed "
            "| failed: loss is NaN at step 40 |") in md
    assert "lost seed(s) 1: seed 1 (rd_attnres: failed: loss is NaN at step 40)" in md
    (h,) = result.stats.headlines
    assert h.n == 2 and not h.established
    assert "**gain not established** (n = 2, " in md and "2 pair(s): the test needs at least 3" in md
    # Controls have 3 pairs with the parent, but the gain is not established: no verdict, and the
    # row gives the MDE of the contrast at this budget (2 seeds with all three: not computable).
    assert {a.verdict for a in result.stats.assessments} == {NOT_ASSESSED}
    assert "| rd_attnres | small | 1_000_000 | 2 | 0 | 1 | 0 | - | 1 |" in md  # the divergence table
    assert len(result.figures) == 4  # paired differences, curves, two routing figures; no gain fraction (2 seeds)


def test_report_of_two_seeds_does_not_crash(tmp_path):
    frames = synthetic_frames(grid="g2", seeds=(0, 1))
    result = build_report(Frames(**frames), tmp_path, grid="g2", figures=False)
    assert {a.verdict for a in result.stats.assessments} == {NOT_ASSESSED}
    table = pl.read_csv(tmp_path / "stats.csv")
    assert table["t_p"].is_nan().all() and (table["n_pairs"] == 2).all()
    assert all("fewer than 3 pairs: no test" in n for n in table["note"].to_list())


# --------------------------------------------------------------------------- the command


class FakeStore:
    """db.store.Store stand-in: the frames as DuckDB views, queried with ? parameters."""

    def __init__(self, frames: dict[str, pl.DataFrame]):
        import duckdb
        import pandas as pd

        self.con = duckdb.connect()
        for name, frame in frames.items():
            self.con.register(name, pd.DataFrame(frame.to_dict(as_series=False)))

    def query(self, sql: str, params=None, *, ingest: bool = True) -> pl.DataFrame:
        cur = self.con.execute(sql, params or [])
        cols = [d[0] for d in cur.description]
        return pl.DataFrame(cur.fetchall(), schema=cols, orient="row")


def _run_cli(monkeypatch, capsys, frames, argv):
    from harness import cli

    fake = types.ModuleType("db.store")
    fake.Store = lambda results: FakeStore(frames)
    monkeypatch.setitem(sys.modules, "db.store", fake)
    rc = cli.main(argv)
    return rc, capsys.readouterr()


def test_cli_report_writes_and_prints_headline(monkeypatch, capsys, tmp_path):
    frames = synthetic_frames(grid="rd_controls_small")
    argv = ["report", "--grid", "rd_controls_small", "--results", str(tmp_path), "--out", str(tmp_path / "o"),
            "--no-figures"]
    rc, cap = _run_cli(monkeypatch, capsys, frames, argv)
    assert rc == 0, cap.err
    assert str(tmp_path / "o" / "stats.csv") in cap.out and str(tmp_path / "o" / "report.html") in cap.out
    assert re.search(r"size small, budget 1_000_000 tokens: gain established \(n = 5, mean d = -0\.0\d{3}", cap.out)
    assert "plan: alpha 0.05, rho 0.5, min_effect_nats not set, power 0.8, max_seeds 30" in cap.out
    assert "A/A dup_route_tied small 1000000: bit-identical: all 5 paired differences are exactly 0" in cap.out


AA_NOISE = [0.004, -0.006, 0.0128, 0.002, -0.001]  # A/A - parent per seed, nats/token


def weak_noisy_frames(grid: str) -> dict[str, pl.DataFrame]:
    """A treatment with no true gain and an A/A control off the parent by AA_NOISE."""
    frames = synthetic_frames(grid=grid, effects={**DEFAULT_EFFECTS, "rd_attnres": -0.002})
    aa = pl.col("variant") == "dup_route_tied"
    frames["final"] = frames["final"].with_columns(
        pl.when(aa).then(pl.col("val_nll") + pl.col("seed").map_elements(lambda s: AA_NOISE[s], pl.Float64))
        .otherwise(pl.col("val_nll")).alias("val_nll"))
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
    why = (f"size small, budget 1_000_000 tokens: **gain not established** (n = 5, mean d = {h.mean:+.4f} "
           f"nats/token, one-sided t p = {h.p_one_sided:.3g}, Holm p = {h.holm_p:.3g} over 1 cell(s), level 0.05): "
           f"Holm p >= level. MDE at n = 5: {h.mde_nats:.4g} nats/token (one-sided, power 0.8)")
    assert why in md and html_escape(why.replace("**", "")).replace("gain not established", "<strong>gain not "
                                                                   "established</strong>") in page
    controls = md[md.index("## Step 2"):md.index("## A/A check")]
    assert "Not assessed at size small, budget 1_000_000 tokens: the treatment's gain is not established" in controls
    rows = [line for line in controls.splitlines() if line.startswith("| ") and "| small |" in line]
    assert len(rows) == 3  # the three controls; the A/A check is not one
    for a, line in zip(stats.assessments, rows):
        assert a.verdict == NOT_ASSESSED and f"**{NOT_ASSESSED}**" in line
        assert (f"the treatment's gain is not established in this cell, so no verdict; MDE of the contrast at n = 5: "
                f"{a.mde_nats:.4g} nats/token (two-sided, power 0.8)") in line
    noise = "max |d| = 0.0128 nats/token is the protocol's numerical noise floor"
    assert noise.replace("|", "\\|") in md and "| dup_route_tied | small | 1_000_000 | 5 | 244 | 0.0128 |" in md
    assert "A/A noise floor, size small, budget 1_000_000" in md[:md.index("## Step 2")]
    table = pl.read_csv(tmp_path / "stats.csv")
    ctrl = table.filter(pl.col("kind") == "control_vs_parent")
    assert ctrl["verdict"].to_list() == [NOT_ASSESSED] * 3 and ctrl["contrast_p"].is_nan().all()
    assert (ctrl["mde_nats"] > 0).all()

    argv = ["report", "--grid", "weak", "--results", str(tmp_path), "--out", str(tmp_path / "o"), "--no-figures"]
    rc, cap = _run_cli(monkeypatch, capsys, frames, argv)
    assert rc == 0, cap.err
    assert why.replace("**", "") in cap.out
    verdict_lines = [line for line in cap.out.splitlines() if line.startswith("  ") and " 1000000  " in line]
    assert len(verdict_lines) == 3 and all(NOT_ASSESSED in line for line in verdict_lines)
    assert f"A/A dup_route_tied small 1000000: warn: {noise}" in cap.out


def test_cli_report_errors_are_one_line(monkeypatch, capsys, tmp_path):
    frames = synthetic_frames(grid="gA")
    rc, cap = _run_cli(monkeypatch, capsys, frames, ["report", "--grid", "nope", "--results", str(tmp_path)])
    assert rc == 2 and "no runs for grid 'nope'; grids in the store: gA" in cap.err

    sel = pl.col("run_id") == "gA-small-1000000-fixed_v-s4"
    frames["final"] = frames["final"].with_columns(
        pl.when(sel).then(pl.lit("other")).otherwise(pl.col("protocol_hash")).alias("protocol_hash"))
    frames["runs"] = frames["runs"].with_columns(
        pl.when(sel).then(pl.lit("other")).otherwise(pl.col("protocol_hash")).alias("protocol_hash"),
        pl.when(sel).then(pl.col("config").str.replace("synthetic", "fineweb"))
        .otherwise(pl.col("config")).alias("config"))
    argv = ["report", "--grid", "gA", "--results", str(tmp_path), "--out", str(tmp_path / "o"), "--no-figures"]
    rc, cap = _run_cli(monkeypatch, capsys, frames, argv)
    assert rc == 2 and "corpus: 'fineweb' != 'synthetic'" in cap.err and "seed=4" in cap.err
    assert len(cap.err.strip().splitlines()) == 1
    rc, cap = _run_cli(monkeypatch, capsys, frames, argv + ["--allow-partial"])
    assert rc == 0 and "warning: protocol mismatch, pair left out" in cap.out


# --------------------------------------------------------------------------- headless browser


def _chromium() -> str | None:
    return next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)


CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
# Test-only probe appended to a copy of the page: counts decoded images, records script errors.
PROBE = ('<script>window.addEventListener("error",function(e){document.body.setAttribute("data-js-error",'
         'String(e.message))});window.addEventListener("load",function(){var ok=0;for(var i of document.images)'
         '{if(i.complete&&i.naturalWidth>0)ok++;}document.body.setAttribute("data-images-ok",String(ok));});'
         '</script>')


@pytest.mark.skipif(_chromium() is None, reason="no chromium binary (apt-get install -y chromium)")
def test_html_opens_in_headless_chromium(full_report, tmp_path):
    result, out = full_report
    probe = tmp_path / "probe.html"
    probe.write_text((out / "report.html").read_text().replace("</body>", PROBE + "</body>"))
    with tempfile.TemporaryDirectory() as profile:
        dom = subprocess.run([_chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}",
                              "--virtual-time-budget=5000", "--enable-logging=stderr", "--v=0",
                              "--dump-dom", probe.as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    html = dom.stdout
    assert f'data-images-ok="{len(result.figures)}"' in html  # every figure decoded
    assert 'data-js-error="' not in html
    assert not re.search(r"CONSOLE.*(Failed to load|Refused|Not allowed)", dom.stderr)
    assert html.count("<table>") == 7 and html.count("<img ") == len(result.figures)
    assert "Step 1, the headline" in html and "does not reproduce gain" in html

    shot = tmp_path / "shot.png"
    with tempfile.TemporaryDirectory() as profile:
        run = subprocess.run([_chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--window-size=1200,1600",
                              f"--screenshot={shot}", (out / "report.html").as_uri()],
                             capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and shot.read_bytes().startswith(PNG_MAGIC), run.stderr[-2000:]
    import matplotlib.image

    pixels = matplotlib.image.imread(shot)[..., :3]
    dark = (pixels.mean(axis=-1) < 0.5).mean()
    assert pixels.std() > 0.05 and 0.005 < dark < 0.5  # text and tables drawn, not blank


def test_cli_report_on_the_real_store(capsys, tmp_path):
    """End to end through db.store.Store: result files -> DuckDB -> SQL -> report."""
    store_mod = pytest.importorskip("db.store")
    from harness import cli

    frames = synthetic_frames(grid="e2e", seeds=(0, 1, 2), n_layers=2, n_evals=3)
    store = store_mod.Store(tmp_path / "results")
    metrics = frames["metrics"].partition_by("run_id", as_dict=True)
    routing = frames["routing"].partition_by("run_id", as_dict=True)
    for run in frames["runs"].iter_rows(named=True):
        rid = run["run_id"]
        run = {**run, "config": json.loads(run["config"])}
        if rid == "e2e-small-1000000-fixed_v-s2":
            run.update(status="diverged", error="loss became NaN at step 70")
        store.write_result({
            "run": run,
            "metrics": [{k: v for k, v in m.items() if k != "run_id"} for m in metrics[(rid,)].iter_rows(named=True)],
            "routing": [{k: v for k, v in r.items() if k != "run_id"} for r in routing[(rid,)].iter_rows(named=True)],
        })
    out = tmp_path / "out"
    rc = cli.main(["report", "--grid", "e2e", "--results", str(tmp_path / "results"), "--out", str(out)])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    table = pl.read_csv(out / "stats.csv")
    tp = table.filter(pl.col("comparison") == "rd_attnres - block_attnres").row(0, named=True)
    want = (frames["final"].filter(pl.col("variant") == "rd_attnres")["val_nll"]
            - frames["final"].filter(pl.col("variant") == "block_attnres")["val_nll"]).mean()
    assert tp["n_pairs"] == 3 and tp["mean_diff"] == pytest.approx(want, abs=1e-12)
    fv = table.filter(pl.col("comparison") == "fixed_v - block_attnres").row(0, named=True)
    assert fv["n_pairs"] == 2 and fv["verdict"] == "inconclusive" and "fewer than 3 pairs" in fv["note"]
    md = (out / "report.md").read_text()
    assert ("| e2e-small-1000000-fixed_v-s2 | fixed_v | 2 | small | 1_000_000 | diverged "
            "| diverged: loss became NaN at step 70 |") in md
    assert len(list((out / "figures").glob("*.png"))) == 5

