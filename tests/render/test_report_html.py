"""report.html in a real headless browser (Debian's chromium; tests/browser.py).

Three reports (synthetic frames): an established gain with controls of every definite
verdict; a weak treatment with a noisy A/A check (warn); two budgets with a degenerate
control and an A/A check that FAILs. Each is opened at 1400 and 900 CSS px and measured
by a probe script: nothing wider than the window, no table in a scrolling frame, no cell
narrower than 40 px or clipping its text, a verdict banner per cell, a coloured chip per
verdict (one colour per tone), the A/A check in its own box with pass / warn / FAIL. No
chromium is a failure with the install line, never a skip. ~60 s on 2 CPU cores:

    python -m pytest -q tests/render/test_report_html.py
"""

from __future__ import annotations

import re

import matplotlib.image
import polars as pl
import pytest

from harness.report.build import Frames, build_report
from harness.report.render.summary import AA_DISPLAY, VERDICT_TONES, verdict_chip
from harness.report.simulation.synthetic import DEFAULT_EFFECTS, synthetic_frames
from harness.report.stats import decisions as dec

import browser

WIDTHS = (1400, 900)
MIN_CELL_PX = 40
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _established(tmp):
    return synthetic_frames(grid="est", n_layers=4)


def _weak(tmp):
    frames = synthetic_frames(grid="weak", effects={**DEFAULT_EFFECTS, "rd_attnres": -0.002})
    noise = [0.004, -0.006, 0.0128, 0.002, -0.001]
    frames["final"] = frames["final"].with_columns(
        pl.when(pl.col("variant") == "dup_route_tied")
        .then(pl.col("val_nll") + pl.col("seed").map_elements(lambda s: noise[s], pl.Float64))
        .otherwise(pl.col("val_nll"))
        .alias("val_nll")
    )
    return frames


def _broken(tmp):
    """Two budgets; dup_route identical to the parent (degenerate); the A/A check off by a constant."""
    frames = synthetic_frames(grid="broken", budgets=(1_000_000, 4_000_000), n_layers=3)
    parent = (
        frames["final"]
        .filter(pl.col("variant") == "block_attnres")
        .select("seed", "budget_tokens", pl.col("val_nll").alias("p"))
    )
    frames["final"] = (
        frames["final"]
        .join(parent, on=["seed", "budget_tokens"])
        .with_columns(
            pl.when(pl.col("variant") == "dup_route")
            .then(pl.col("p"))
            .when(pl.col("variant") == "dup_route_tied")
            .then(pl.col("p") + 0.01 + 1e-4 * pl.col("seed"))
            .otherwise(pl.col("val_nll"))
            .alias("val_nll")
        )
        .drop("p")
    )
    return frames


def _mixed_hardware(tmp):
    """The established grid trained half on a CPU class and half on a GPU class, one treatment run moved:
    the provenance section's banner and its variant x hardware tables, with long class keys."""
    frames = synthetic_frames(grid="mixedhw", n_layers=4)
    cpu, gpu = (
        "cpu-amd-epyc-7b13-avx512/fp32/torch2.5.1/eager",
        "cuda-nvidia-h100-80gb-hbm3/bf16/torch2.5.1/inductor",
    )
    on_gpu = (pl.col("seed") >= 3) | (pl.col("run_id") == "mixedhw-small-1000000-rd_attnres-s0")
    frames["runs"] = frames["runs"].with_columns(
        hardware=pl.when(on_gpu).then(pl.lit(gpu)).otherwise(pl.lit(cpu))
    )
    return frames


CASES = {"established": _established, "weak": _weak, "broken": _broken, "mixed_hardware": _mixed_hardware}


@pytest.fixture(scope="module", params=list(CASES))
def report(request, tmp_path_factory):
    out = tmp_path_factory.mktemp(request.param)
    frames = CASES[request.param](out)
    result = build_report(Frames(**frames), out, grid=frames["runs"]["grid"][0])
    measured = {w: browser.measure(out / "report.html", w) for w in WIDTHS}
    return request.param, result, out, measured


@pytest.mark.slow  # Chromium
def test_case_verdicts_are_what_the_layout_test_needs(report):
    """The three reports between them show every definite verdict and every A/A status."""
    name, result, _, _ = report
    s = result.stats
    verdicts = {a.verdict for a in s.assessments} | {h.verdict for h in s.headlines}
    aa = {a.status for a in s.aa_checks}
    want = {
        "established": ({dec.GAIN_ESTABLISHED, dec.DOES_NOT_REPRODUCE, dec.INCONCLUSIVE}, {"bit-identical"}),
        "weak": ({dec.GAIN_NOT_ESTABLISHED, dec.NOT_ASSESSED}, {"warn"}),
        "broken": ({dec.DEGENERATE}, {"FAIL"}),
        "mixed_hardware": ({dec.GAIN_ESTABLISHED, dec.DOES_NOT_REPRODUCE}, {"bit-identical"}),
    }[name]
    assert want[0] <= verdicts and aa == want[1], (verdicts, aa)


@pytest.mark.slow  # Chromium
@pytest.mark.parametrize("width", WIDTHS)
def test_nothing_overflows_and_no_cell_is_squeezed(report, width):
    name, result, _, measured = report
    m, dom, log = measured[width]
    assert m["innerWidth"] == width
    assert m["scrollWidth"] <= m["innerWidth"], f"{name} at {width} px: page {m['scrollWidth']} px wide"
    wide = [t for t in m["tables"] if t["tableWidth"] > t["wrapWidth"] + 1]
    assert not wide, f"{name} at {width} px: tables wider than the page: {wide}"
    assert all(t["right"] <= width for t in m["tables"])
    assert m["narrowestCell"]["width"] >= MIN_CELL_PX, m["narrowestCell"]
    assert not m["clipped"], f"cells clipping their text: {m['clipped']}"
    assert m["imagesOk"] == m["images"] == len(result.figures) and m["imagesWiderThanViewport"] == 0
    assert 'data-js-error="' not in dom and not re.search(
        r"CONSOLE.*(Failed to load|Refused|Not allowed)", log
    )
    if name == "mixed_hardware":  # the banner line and the variant x hardware tables, drawn within the page
        assert (
            dom.count("Hardware: MIXED.") == 2 and "Variant x hardware: paired differences per class" in dom
        )
    # Contents: a sticky column beside the report on wide screens, under the header on narrow ones.
    assert m["tocPosition"] == ("sticky" if width >= 1250 else "static")


@pytest.mark.slow  # Chromium
def test_verdict_banners_chips_and_the_aa_box(report):
    name, result, out, measured = report
    s = result.stats
    m = measured[900][0]
    # One banner per cell, carrying the headline verdict, its border in the verdict's colour.
    assert [b["verdict"] for b in m["banners"]] == [s.headline(*c).verdict for c in s.cells]
    tone_color = {}
    for chip in m["chips"]:
        assert chip["tone"] in ("good", "bad", "warn", "neutral", "invalid", "info"), chip
        tone_color.setdefault(chip["tone"], set()).add(chip["bg"])
    assert all(len(c) == 1 for c in tone_color.values()), tone_color  # one colour per tone...
    colors = [next(iter(c)) for c in tone_color.values()]
    assert len(set(colors)) == len(colors)  # ...and a different one for each tone
    border = {"good": "rgb(11, 110, 79)", "warn": "rgb(138, 83, 0)", "bad": "rgb(179, 38, 30)"}
    for b in m["banners"]:  # an A/A FAIL in the cell frames its banner in red, whatever the verdict
        tone = "bad" if name == "broken" else VERDICT_TONES[b["verdict"]]
        assert b["bg"] == border[tone]
        assert ("FAILED in this cell" in b["text"]) == (name == "broken")
    texts = [(c["text"], c["tone"]) for c in m["chips"]]
    for a in s.assessments:  # in the banner and in the controls table
        chip = verdict_chip(a.verdict, short=True)
        assert texts.count((chip.text, chip.tone)) >= 2
    # The legend: a chip for every verdict string of harness.report.stats.decisions and every A/A status.
    for v in (*dec.VERDICTS, dec.GAIN_ESTABLISHED, dec.GAIN_NOT_ESTABLISHED):
        assert (v, VERDICT_TONES[v]) in texts, v
    for shown, tone in AA_DISPLAY.values():
        assert (shown, tone) in texts
    # The A/A check in its own box: its chip is the worst status, the box framed in its colour.
    want = {
        "established": ("pass", "rgb(11, 110, 79)"),
        "weak": ("warn", "rgb(138, 83, 0)"),
        "broken": ("FAIL", "rgb(179, 38, 30)"),
        "mixed_hardware": ("pass", "rgb(11, 110, 79)"),
    }[name]
    assert (m["aaBox"]["chip"], m["aaBox"]["border"]) == want
    page = (out / "report.html").read_text()
    aa_box = page[page.index('<section class="box') : page.index("</section>")]
    assert "dup_route_tied" in aa_box and "Step 2" not in aa_box
    controls = page[page.index('id="step-2-controls') : page.index('<section class="box')]
    assert "dup_route_tied" not in controls  # the A/A check is not listed as a control


@pytest.mark.slow  # Chromium
@pytest.mark.parametrize("width", WIDTHS)
def test_screenshots_show_a_drawn_page(report, width, tmp_path):
    _, _, out, _ = report
    shot = browser.screenshot(out / "report.html", tmp_path / f"{width}.png", width, 1600)
    assert shot.read_bytes().startswith(PNG_MAGIC)
    pixels = matplotlib.image.imread(shot)[..., :3]
    assert pixels.shape[:2] == (1600, width)
    dark = (pixels.mean(axis=-1) < 0.5).mean()
    assert pixels.std() > 0.05 and 0.005 < dark < 0.5  # text, tables and chips drawn, not blank


def test_no_chromium_is_a_failure_with_the_install_line(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(browser.BrowserError, match=r"apt-get install -y chromium"):
        browser.chromium()


@pytest.mark.slow  # Chromium
def test_single_file_report_shows_every_figure_without_its_folder(tmp_path, capsys):
    """`harness report --single-file` on a real store writes report.html alone; opened in Chromium from a
    folder without figures/ (the normal report's figures deleted), every figure loads, and nothing on the
    page points outside the file."""
    import shutil

    from test_report import write_results

    from harness import cli
    from harness.store.store import Store

    frames = synthetic_frames(grid="one", seeds=(0, 1, 2), n_layers=2, n_evals=3)
    results, out = tmp_path / "results", tmp_path / "report"
    write_results(Store(results), frames)
    assert cli.main(["report", "--grid", "one", "--results", str(results), "--out", str(out)]) == 0
    n_figures = len(list((out / "figures").glob("*.png")))
    shutil.rmtree(out)
    assert (
        cli.main(["report", "--grid", "one", "--results", str(results), "--out", str(out), "--single-file"])
        == 0
    )
    assert [p.name for p in out.iterdir()] == ["report.html"]
    assert f"{out / 'report.html'}\n" in capsys.readouterr().out
    page = (out / "report.html").read_text()
    outside = [u for u in re.findall(r'(?:src|href)="([^"]*)"', page) if not u.startswith(("data:", "#"))]
    assert outside == []
    moved = tmp_path / "elsewhere" / "report.html"  # as an attachment: alone in another folder
    moved.parent.mkdir()
    shutil.move(out / "report.html", moved)
    measured, _, log = browser.measure(moved, 1400)
    assert measured["images"] == n_figures >= 6, log[-2000:]
    assert measured["imagesOk"] == n_figures, log[-2000:]
