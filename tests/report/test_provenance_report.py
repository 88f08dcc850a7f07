"""The report's provenance section through ``harness report`` (DESIGN 13): result files written as workers
write them, with a hardware class, then read by DuckDB and rendered. A grid half on one class and half on
another gets one banner line at the top and the variant x hardware table, and says what its tests could have
seen; a treatment moved on one class is named at the top of the banner; a class with 2 pairs says "too few
pairs to tell"; a grid on one class says so in one line; result files written before the record read as
'unknown'. No host name or path reaches the report. CPU only, a few seconds each."""

from __future__ import annotations

import json
import math
from html import escape

import polars as pl

from harness import cli
from harness.report.simulation.synthetic import frames_from_values

GRID = "hw"
A, B = "cpu-amd-epyc-7b13-avx512/fp32/torch2.5.1/eager", "cuda-nvidia-h100/bf16/torch2.5.1/inductor"
HOST = "lab-node-17.example.org"
PARENT = [3.10, 3.12, 3.08, 3.11, 3.09, 3.13, 3.07, 3.115]
GAIN = [-0.031, -0.028, -0.035, -0.030, -0.026, -0.033, -0.029, -0.032]


def write_folder(
    results,
    hardware,
    values: dict[str, list[float]] | None = None,
    numerics=lambda v, s: None,
    commit=None,
    settings=lambda v, s: None,
) -> None:
    """A results folder of parent, treatment and one control over 8 seeds (or ``values``: variant -> final NLL
    per seed); ``hardware(variant, seed)`` is the run's class, or None for a result file written before the
    record (no ``hardware`` key); ``numerics(variant, seed)`` its numerics (None: not recorded); ``commit``
    its training commit (None: the synthetic frames'); ``settings(variant, seed)`` its ``(micro-batch size,
    world size)`` (None: not recorded)."""
    from harness.store.store import Store

    store = Store(results)
    treat = [p + g for p, g in zip(PARENT, GAIN, strict=True)]
    ctrl = [p + g / 4 for p, g in zip(PARENT, GAIN, strict=True)]
    values = values or {"block_attnres": PARENT, "rd_attnres": treat, "fixed_v": ctrl}
    frames = frames_from_values(values, grid=GRID)
    for run in frames["runs"].iter_rows(named=True):
        nll = values[run["variant"]][run["seed"]]
        row = {**run, "config": json.loads(run["config"]), "host": HOST, "owner": f"{HOST}:4242"}
        hw = hardware(run["variant"], run["seed"])
        if hw is not None:
            row |= {"hardware": hw, "environment": {"cpu": "AMD EPYC 7B13", "torch": "2.5.1"}}
        if numerics(run["variant"], run["seed"]) is not None:
            row["numerics"] = numerics(run["variant"], run["seed"])
        if commit is not None:
            row["code_version"] = commit
        if settings(run["variant"], run["seed"]) is not None:
            row["micro_batch_size"], row["world_size"] = settings(run["variant"], run["seed"])
        metrics = [dict(step=100, tokens=run["budget_tokens"], split="val", name="nll", value=nll)]
        store.write_result({"run": row, "metrics": metrics, "routing": []})


def report(results, out, capsys, *extra):
    """``harness report`` on the folder: (report.md, report.html, stats.csv, stdout)."""
    rc = cli.main(
        ["report", "--grid", GRID, "--results", str(results), "--out", str(out), "--no-figures", *extra]
    )
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    md, html = (out / "report.md").read_text(), (out / "report.html").read_text()
    return md, html, pl.read_csv(out / "stats.csv"), cap.out


def _no_machine_names(tmp_path, *texts):
    for text in texts:
        assert HOST not in text and "4242" not in text and str(tmp_path) not in text


def test_a_grid_half_on_each_class_gets_the_banner_and_the_variant_x_hardware_table(tmp_path, capsys):
    # Seeds 0-3 on A, 4-7 on B; the treatment's seed 3 ran on B: one straddling pair per comparison it is in.
    write_folder(tmp_path / "r", lambda v, s: B if s >= 4 or (v, s) == ("rd_attnres", 3) else A)
    md, html, table, out = report(tmp_path / "r", tmp_path / "out", capsys)
    banner = (
        f"> Hardware: MIXED. The 24 finished runs ran on 2 hardware classes ({B} (13), {A} (11)); 2 pair(s) "
        f"straddle two classes and 2 comparison(s) are imbalanced across classes. No comparison's classes are "
        "shown to disagree (3 tested, smallest Holm p 1); no test can reject at Holm's level."
    )  # 4 + 3 or 4 + 4 pairs: the smallest p, 1/35 or 2/70, is above 0.05 / 3
    top = md[: md.index("## Verdict per cell")]
    assert top.count("Hardware:") == 1 and banner in top  # one line, at the top
    section = md[md.index("## Provenance: where the runs ran") : md.index("## Methods")]
    assert f"| rd_attnres | 8 | {B} (5), {A} (3) | unknown (8) | abc1234 (8) |" in section
    assert f"| block_attnres | 8 | {A} (4), {B} (4) | unknown (8) | abc1234 (8) |" in section
    assert (
        f"| rd_attnres - block_attnres | small, 1M | {A}: 3 vs 4; {B}: 5 vs 4 | NO | 1 with the first on {B}, the "
        f"second on {A} | 1 (exact sign test on the straddling pairs) |"
    ) in section
    assert f"| rd_attnres - block_attnres | small, 1M | 3 | {B} | {A} |" in section  # the straddling pair
    assert "### Variant x hardware: paired differences per class" in section
    d = {
        hw: [g for s, g in enumerate(GAIN) if s in seeds] for hw, seeds in ((A, (0, 1, 2)), (B, (4, 5, 6, 7)))
    }
    for hw, x in d.items():
        assert f"| on one class | {hw} | {len(x)} | {sum(x) / len(x):+.4f} [" in section
    assert f"| straddling two classes | - | 1 | {GAIN[3]:+.4f} - | no |" in section
    assert (
        "| no disagreement shown: p 0.656 (permutation 0.629 exact, spreads free 0.656), Holm p 1; MDE "
        in section
    )  # 4 vs 3 pairs: 35 relabellings; the test's p the larger of the two (Welch's t on 2 df)
    # the balance table's column of straddling pairs is not named with the word a class could be called
    assert (
        "| runs per class (first vs second) | balanced | pairs across two classes, by side | p |" in section
    )
    assert f"### Every verdict within the largest class ({B})" in section
    assert "| small, 1M | headline | gain established | gain established | 4 | 1.00 | yes |" in section
    row = table.filter(pl.col("comparison") == "rd_attnres - block_attnres").row(0, named=True)
    assert (row["hardware_balanced"], row["straddling_pairs"]) == (False, 1)
    # The HTML holds the same section and banner, and the terminal summary the line.
    assert (
        "Provenance: where the runs ran" in html
        and "Variant x hardware: paired differences per class" in html
    )
    assert (
        html.count("Hardware: MIXED.") == 2 and "Hardware: MIXED." in out
    )  # the banner and the section's line
    _no_machine_names(tmp_path, md, html, (tmp_path / "out" / "stats.csv").read_text())


def test_a_grid_on_one_class_says_so_in_one_line(tmp_path, capsys):
    write_folder(tmp_path / "r", lambda v, s: A)
    md, html, table, out = report(tmp_path / "r", tmp_path / "out", capsys)
    line = f"Hardware: one class, all 24 finished runs on {A}."
    assert md.count("Hardware:") == 1 and line in md and line in out and line in html
    numerics = next(x for x in md.splitlines() if x.startswith("Numerics: "))
    assert numerics in out  # the terminal summary says the numerics as report.md does
    assert md.index(line) > md.index("## Provenance: where the runs ran")  # no banner at the top
    assert "Variant x hardware" not in md and "straddle" not in md and "largest class" not in md
    assert set(table["hardware_balanced"].to_list()) == {True} and set(table["straddling_pairs"]) == {0}
    _no_machine_names(tmp_path, md, html)


def test_result_files_from_before_the_record_read_unknown(tmp_path, capsys):
    write_folder(tmp_path / "r", lambda v, s: None)
    md, html, table, out = report(tmp_path / "r", tmp_path / "out", capsys)
    line = "Hardware: unknown. All 24 finished runs predate the hardware record (class 'unknown')"
    assert md.count("Hardware:") == 1 and line in md and line in out and escape(line) in html
    assert "| rd_attnres | 8 | unknown (8) | unknown (8) | abc1234 (8) |" in md
    assert set(table["hardware_classes"].to_list()) == {'{"unknown": [8, 8]}'}
    # the column is there, and 'unknown' (the ingest's word for no record): the store never guesses
    from harness.store.store import Store

    stored = Store(tmp_path / "r").query("SELECT DISTINCT hardware FROM runs", [])
    assert stored["hardware"].to_list() == ["unknown"]


def test_a_grid_continued_after_the_record_mixes_unknown_with_the_new_class(tmp_path, capsys):
    """Seeds 0-3 from result files written before the record, seeds 4-7 on a recorded class: a mix, never a
    guess that the old runs ran on the new class."""
    write_folder(tmp_path / "r", lambda v, s: A if s >= 4 else None)
    md, _, table, _ = report(tmp_path / "r", tmp_path / "out", capsys)
    top = md[: md.index("## Verdict per cell")]
    assert (
        f"> Hardware: MIXED. The 24 finished runs ran on 2 hardware classes ({A} (12), unknown (12)) "
        "('unknown': written before the hardware record); 0 pair(s) straddle two classes"
    ) in top
    assert f"| block_attnres | 8 | {A} (4), unknown (4) | unknown (8) | abc1234 (8) |" in md
    assert [json.loads(x) for x in table["hardware_classes"]] == [{A: [4, 4], "unknown": [4, 4]}] * 3


def test_a_treatment_moved_on_one_class_is_named_first_and_a_two_pair_class_is_too_few_to_tell(
    tmp_path, capsys
):
    """Parent and treatment, 8 seeds, 4 per class; on class B the treatment's runs are 0.3 nats/token worse (a
    kernel that treats the variants differently). The banner opens with the disagreement, before any count;
    the per-class table prints the exact permutation p (4 + 4 pairs: 70 relabellings, the observed one and its
    swap the most extreme, p 2/70) and the MDE. Moving seeds 6-7 to a third class leaves it 2 pairs: too few
    pairs to tell, in its row."""
    treat = [p + g + (0.3 if s >= 4 else 0.0) for s, (p, g) in enumerate(zip(PARENT, GAIN, strict=True))]
    values = {"block_attnres": PARENT, "rd_attnres": treat}
    write_folder(tmp_path / "r", lambda v, s: B if s >= 4 else A, values)
    md, html, table, out = report(tmp_path / "r", tmp_path / "out", capsys)
    top = md[: md.index("## Verdict per cell")]
    line = next(x for x in top.splitlines() if x.startswith("> Hardware:"))
    assert line.startswith(
        "> Hardware: MIXED, and the classes disagree on rd_attnres - block_attnres (small, 1M): p 0.0286, "
        f"Holm p 0.0286 (mean paired difference per class: {A} -0.0310, {B} +0.2700 nats/token): the hardware "
        "moved these comparisons"
    ), line
    assert line.index("disagree") < line.index("finished runs") and "nothing is pooled unseen" not in md
    assert "Hardware: MIXED, and the classes disagree on rd_attnres - block_attnres" in out
    section = md[md.index("### Variant x hardware") : md.index("### Every verdict")]
    assert (
        "| DISAGREE: p 0.0286 (permutation 0.0286 exact, spreads free 8.15e-07), Holm p 0.0286; MDE "
        in section
    )
    row = table.filter(pl.col("comparison") == "rd_attnres - block_attnres").row(0, named=True)
    assert (
        row["hardware_agree_p"] == row["hardware_agree_holm_p"] == 2 / 70
        and row["hardware_agree_mde_nats"] > 0
    )

    c = "cuda-nvidia-a100/tf32/torch2.5.1/eager"
    write_folder(tmp_path / "r3", lambda v, s: c if s >= 6 else B if s >= 4 else A, values)
    md, _, table, _ = report(tmp_path / "r3", tmp_path / "out3", capsys)
    section = md[md.index("### Variant x hardware") : md.index("### Every verdict")]
    assert f"| on one class | {c} | 2 | " in section and "| too few pairs to tell |" in section
    assert "| too few pairs to tell: fewer than two classes with >= 3 pairs and a spread |" in section
    row = table.filter(pl.col("comparison") == "rd_attnres - block_attnres").row(0, named=True)
    assert row["hardware_agree_note"].startswith("too few pairs to tell") and math.isnan(
        row["hardware_agree_p"]
    )
    top = md[: md.index("## Verdict per cell")]
    assert "too few pairs to tell whether the hardware moved any comparison" in top


def test_numerics_show_beside_hardware_and_a_mix_gets_a_banner_line(tmp_path, capsys):
    """Seeds 0-3 trained with per_site/1, seeds 4-7 with two_phase/2, the treatment's seed 3 with two_phase/2:
    one pair per comparison it is in straddles two numerics; the banner says so in one line, the table per
    variant."""
    write_folder(
        tmp_path / "r",
        lambda v, s: A,
        numerics=lambda v, s: "two_phase/2" if s >= 4 or (v, s) == ("rd_attnres", 3) else "per_site/1",
    )
    md, html, _, _ = report(tmp_path / "r", tmp_path / "out", capsys)
    top = md[: md.index("## Verdict per cell")]
    line = (
        "Numerics: MIXED. The 24 finished runs trained with 2 numerics (two_phase/2 (13), per_site/1 (11); read "
        "from each result file, else implied by the run's training commit where known "
        "(harness/models/numerics.py)); 2 pair(s) straddle two numerics"
    )
    assert f"> {line}" in top and "Hardware:" not in top  # one class: only the numerics banner
    section = md[md.index("## Provenance: where the runs ran") : md.index("## Methods")]
    assert line in section
    assert f"| rd_attnres | 8 | {A} (8) | two_phase/2 (5), per_site/1 (3) | abc1234 (8) |" in section
    assert f"| fixed_v | 8 | {A} (8) | per_site/1 (4), two_phase/2 (4) | abc1234 (8) |" in section
    assert html.count("Numerics: MIXED.") == 2


def test_runs_from_before_the_record_read_the_numerics_their_commit_implies(tmp_path, capsys):
    """The committed factorial study's training commit implies per_site/1 (harness/models/numerics.py); another
    commit implies nothing: 'unknown', never a guess."""
    from harness.models.numerics import KNOWN_COMMITS

    study = next(c for c, n in KNOWN_COMMITS.items() if n == "per_site/1")
    write_folder(tmp_path / "known", lambda v, s: None, commit=study)
    md, _, _, _ = report(tmp_path / "known", tmp_path / "out1", capsys)
    assert "Numerics: one, all 24 finished runs trained with per_site/1 (" in md
    assert f"| rd_attnres | 8 | unknown (8) | per_site/1 (8) | {study} (8) |" in md
    write_folder(tmp_path / "other", lambda v, s: None, commit=study + "-dirty")
    md, _, _, _ = report(tmp_path / "other", tmp_path / "out2", capsys)
    assert "Numerics: unknown. All 24 finished runs predate the numerics record" in md
    assert f"| rd_attnres | 8 | unknown (8) | unknown (8) | {study}-dirty (8) |" in md


def test_a_pair_straddling_micro_batch_sizes_is_named_in_words(tmp_path, capsys):
    """Issue 67: every run at micro-batch 16 on one rank but the treatment's seed 1 at micro-batch 1 and the
    control's seed 5 on 2 ranks: one class, one code, yet the pairs those runs are in straddle a setting that
    re-rounds a run (DESIGN 13). The Numerics line is MIXED, at the top and in the section, and names each such
    pair in words; before, it read 'Numerics: one'."""
    write_folder(
        tmp_path / "r",
        lambda v, s: A,
        numerics=lambda v, s: "two_phase/2",
        settings=lambda v, s: (
            (1, 1) if (v, s) == ("rd_attnres", 1) else (16, 2) if (v, s) == ("fixed_v", 5) else (16, 1)
        ),
    )
    md, html, _, out = report(tmp_path / "r", tmp_path / "out", capsys)
    line = (
        "Numerics: MIXED. The 24 finished runs trained with two_phase/2 (read from each result file, else implied "
        "by the run's training commit where known (harness/models/numerics.py)) at 3 settings that re-round a run "
        "(micro-batch 16, world size 1 (22), micro-batch 1, world size 1 (1), micro-batch 16, world size 2 (1), "
        "read from each result file; 'unknown': not recorded); 4 pair(s) straddle them (seed 1: rd_attnres at "
        "micro-batch 1, block_attnres at 16; seed 1: rd_attnres at micro-batch 1, fixed_v at 16; seed 5: fixed_v on "
        "2 ranks, block_attnres on 1 rank; seed 5: rd_attnres on 1 rank, fixed_v on 2 ranks): their paired "
        "differences carry another float sum, as a pair straddling two hardware classes carries the machines'."
    )
    top = md[: md.index("## Verdict per cell")]
    assert f"> {line}" in top, top
    section = md[md.index("## Provenance: where the runs ran") : md.index("## Methods")]
    assert line in section and line in out
    assert html.count("Numerics: MIXED.") == 2


def test_one_micro_batch_or_none_recorded_leaves_the_numerics_line_as_it_was(tmp_path, capsys):
    """Runs sharing one micro-batch size and world size (every committed study), or recording none (result files
    written before the columns: unknown, never guessed), keep the one-line 'Numerics: one' text; a pair of a
    recorded and an unrecorded run straddles 'unknown'."""
    expected = (
        "Numerics: one, all 24 finished runs trained with two_phase/2 (read from each result file, else implied by "
        "the run's training commit where known (harness/models/numerics.py))."
    )
    for name, settings in (("one", lambda v, s: (16, 1)), ("none", lambda v, s: None)):
        write_folder(tmp_path / name, lambda v, s: A, numerics=lambda v, s: "two_phase/2", settings=settings)
        md, _, _, _ = report(tmp_path / name, tmp_path / f"out-{name}", capsys)
        assert expected in md and "settings that re-round" not in md
    write_folder(
        tmp_path / "half",
        lambda v, s: A,
        numerics=lambda v, s: "two_phase/2",
        settings=lambda v, s: None if (v, s) == ("block_attnres", 0) else (16, 1),
    )
    md, _, _, _ = report(tmp_path / "half", tmp_path / "out-half", capsys)
    assert (
        "seed 0: rd_attnres at micro-batch 16 on 1 rank, block_attnres at unknown on unknown ranks" in md
    ), md
