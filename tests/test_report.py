"""The report files and the `harness report` command (reports/build.py, render.py, figures.py).

Uses synthetic frames (reports/synthetic.py) and, for the command, an in-memory DuckDB
standing in for db.store.Store. The browser test needs Debian's chromium
(`apt-get install -y chromium`) and is skipped without it. CPU only, ~15 s:

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
    assert figs == ["figures/paired_diffs_small_1000000.png", "figures/routing_fixed_v_small_1000000.png",
                    "figures/routing_rd_attnres_small_1000000.png", "figures/val_curves_small_1000000.png"]
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
    for heading in ("# Paired significance report: grid synth", "## Headline: treatment vs parent",
                    "## Controls: do they reproduce the gain?", "## A/A check", "## All comparisons and exact tests",
                    "## Mixed model cross-check: nll ~ variant + (1 | seed)", "## Figures",
                    "## Methods, assumptions and the Holm family", "## Runs left out, and why"):
        assert heading in md, heading
    tp = result.stats.headline()[0]
    assert f"| small | 1_000_000 | 5/5 | {tp.test.mean_diff:+.4f} |" in md
    assert f"{100 * np.expm1(tp.test.mean_diff):+.2f} %" in md
    assert "Holm family at size small, budget 1_000_000: m = 9" in md
    assert "zero_method='wilcox'" in md and "(min 0.0625)" in md
    # Significant treatment, A/A copied bit for bit from the parent: no caveat, no noise-floor warning.
    assert "bit-identical: all 5 paired differences are exactly 0" in md and "| 0 (bit-identical) |" in md
    assert "treatment's own gain is not significant" not in md and "A/A noise floor at size" not in md
    for fig in result.figures:
        assert f"](figures/{fig.name}.png)" in md


def test_html_is_self_contained(full_report):
    result, out = full_report
    page = (out / "report.html").read_text()
    srcs = re.findall(r'<img [^>]*src="([^"]+)"', page)
    assert len(srcs) == len(result.figures) == 4
    for src, fig in zip(srcs, result.figures):
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1]) == fig.png
    assert not re.search(r'(src|href)="(https?:|//|file:)', page)
    assert page.count("<table>") == 5  # headline, controls, A/A, all comparisons, mixed model (nothing left out)


def test_partial_grid_report_lists_left_out_runs_and_insufficient(tmp_path):
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
    assert "seed 1 (rd_attnres: failed: loss is NaN at step 40)" in md
    tp = result.stats.headline()[0]
    assert tp.test.n == 2 and tp.verdict == ""
    assert "insufficient: 2 pair(s) < 3" in md
    # Controls still have 3 pairs vs the parent; their verdict needs G, which is insufficient.
    assert {c.test.n for c in result.stats.verdicts()} == {3}
    assert len(result.figures) == 4  # figures drawn despite the gaps


def test_report_of_two_seeds_does_not_crash(tmp_path):
    frames = synthetic_frames(grid="g2", seeds=(0, 1))
    result = build_report(Frames(**frames), tmp_path, grid="g2", figures=False)
    assert {c.verdict for c in result.stats.verdicts()} == {"insufficient"}
    table = pl.read_csv(tmp_path / "stats.csv")
    assert table["t_p"].is_nan().all() and (table["n_pairs"] == 2).all()


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
    assert re.search(r"small\s+1000000\s+5/5\s+-0\.0\d{3}", cap.out)
    assert "A/A dup_route_tied small 1000000: pass (bit-identical: all 5 paired differences are exactly 0)" in cap.out
    assert "NOTE:" not in cap.out and "treatment's own gain" not in cap.out


AA_NOISE = [0.004, -0.006, 0.0128, 0.002, -0.001]  # A/A - parent per seed, nats/token


def weak_noisy_frames(grid: str) -> dict[str, pl.DataFrame]:
    """A treatment with no true gain and an A/A control off the parent by AA_NOISE."""
    frames = synthetic_frames(grid=grid, effects={**DEFAULT_EFFECTS, "rd_attnres": -0.002})
    aa = pl.col("variant") == "dup_route_tied"
    frames["final"] = frames["final"].with_columns(
        pl.when(aa).then(pl.col("val_nll") + pl.col("seed").map_elements(lambda s: AA_NOISE[s], pl.Float64))
        .otherwise(pl.col("val_nll")).alias("val_nll"))
    return frames


def test_report_shows_noise_floor_and_gain_caveat(monkeypatch, capsys, tmp_path):
    frames = weak_noisy_frames("weak")
    result = build_report(Frames(**frames), tmp_path, grid="weak", figures=False)
    stats = result.stats
    (tp,) = stats.headline()
    assert not (tp.holm_p < 0.05 and tp.test.mean_diff < 0)  # the gain is not significant
    (aa,) = stats.aa_checks
    assert aa.max_abs_diff == pytest.approx(0.0128, abs=1e-12) and aa.status == "warn"
    # G of this draw is small, so |G|/2 < 0.0128: the noise floor dominates the gain.
    assert aa.noise_threshold == pytest.approx(abs(tp.test.mean_diff) / 2, abs=1e-15)
    assert aa.noise_threshold < 0.0128
    noise_text = ("A/A differences up to 0.0128 nats/token, the run-to-run numerical noise floor of this protocol "
                  "(float summation order diverges chaotically over 244 training steps)")  # 1e6 // 4096
    caveat = (f"the treatment's own gain is not significant (Holm p = {tp.holm_p:.3g} >= 0.05), so this verdict "
              "says little about the RD-AttnRes claim")
    md = (tmp_path / "report.md").read_text()
    page = (tmp_path / "report.html").read_text()
    controls = md[md.index("## Controls"):md.index("## A/A check")]
    warning = controls.index("- Warning: size small, budget 1_000_000 tokens: the treatment's own gain is not "
                             "significant")
    assert warning < controls.index("| control | size |")  # right above the verdict table
    verdict_rows = [line for line in controls.splitlines() if line.startswith("| ") and "| small |" in line]
    assert len(verdict_rows) == 4
    assert all("(treatment gain not significant)" in r and f"CAVEAT: {caveat}" in r for r in verdict_rows)
    assert noise_text in md and "| dup_route_tied | small | 1_000_000 | 5 | 244 | 0.0128 |" in md
    assert "A/A noise floor at size small, budget 1_000_000" in md[:md.index("## Controls")]  # under the headline
    for text in (noise_text, caveat):
        assert html_escape(text) in page, text
    assert "<strong>warn</strong>" in page
    table = pl.read_csv(tmp_path / "stats.csv")
    notes = table.filter(pl.col("kind") == "control_vs_parent")["note"].to_list()
    assert len(notes) == 4 and all(n.endswith(caveat) for n in notes)

    argv = ["report", "--grid", "weak", "--results", str(tmp_path), "--out", str(tmp_path / "o"), "--no-figures"]
    rc, cap = _run_cli(monkeypatch, capsys, frames, argv)
    assert rc == 0, cap.err
    verdict_lines = [line for line in cap.out.splitlines() if line.startswith("  ") and " 1000000  " in line]
    assert len(verdict_lines) == 4 and all(line.endswith(f"; NOTE: {caveat}") for line in verdict_lines)
    assert "warning: size small, budget 1_000_000 tokens: the treatment's own gain is not significant" in cap.out
    assert (f"A/A dup_route_tied small 1000000: warn ({noise_text}, are at least as large as the treatment's "
            "gain G = ") in cap.out  # here max |dNLL| > |G|, not merely >= |G|/2


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
    assert html.count("<table>") == 5 and html.count("<img ") == len(result.figures)
    assert "Headline: treatment vs parent" in html and "does not reproduce gain" in html

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
    assert fv["n_pairs"] == 2 and fv["verdict"] == "insufficient"
    md = (out / "report.md").read_text()
    assert ("| e2e-small-1000000-fixed_v-s2 | fixed_v | 2 | small | 1_000_000 | diverged "
            "| diverged: loss became NaN at step 70 |") in md
    assert len(list((out / "figures").glob("*.png"))) == 4

