"""Each established verdict says whether it survives dropping any one seed (descriptive).

The factorial study's "decoupling on top of the offset: established, Holm p 0.029" rested on a few
seeds; nothing said so. Every established verdict now carries the largest Holm p over the n analyses
without one seed and that seed; it enters no family and changes no verdict. Checked against scipy's
t-tests on the differences with each seed removed by hand.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np
import pytest
import scipy.stats

from harness.design.analysis_plan import AnalysisPlan
from harness.report.render.decision_sections import influence_blocks
from harness.report.simulation.synthetic import frames_from_values
from harness.report.stats.analysis import analyze
from harness.report.stats.leave_one_out import leave_one_seed_out
from harness.report.stats.stats_table import stats_frame

N = 8


def _values() -> dict[str, list[float]]:
    rng = np.random.default_rng(4)
    parent = 3.5 + rng.normal(0, 0.05, N)
    treat = parent - 0.04 + rng.normal(0, 0.01, N)
    control = parent - 0.001 + rng.normal(0, 0.003, N)  # lands near the parent: does not reproduce
    return {"block_attnres": list(parent), "rd_attnres": list(treat), "fixed_v": list(control)}


def _study(values):
    fr = frames_from_values(values)
    plan = AnalysisPlan()
    stats = analyze(fr["final"], fr["runs"], plan=plan, degenerate={})
    again = functools.partial(analyze, degenerate={}, cross_checks=False)
    return stats, leave_one_seed_out(stats, fr["final"], fr["runs"], again)


def test_the_largest_holm_p_without_one_seed_equals_scipys_t_tests_without_it():
    values = _values()
    stats, influence = _study(values)
    h, a = stats.headlines[0], stats.assessments[0]
    assert h.established and a.verdict == "does not reproduce gain"
    p, t, c = (np.array(values[v]) for v in ("block_attnres", "rd_attnres", "fixed_v"))
    d, e = t - p, (c - p) - 0.5 * (t - p)
    # one cell, one control: each family has one member, so the Holm p is the p itself
    head = [scipy.stats.ttest_1samp(np.delete(d, s), 0.0, alternative="less").pvalue for s in range(N)]
    cont = [scipy.stats.ttest_1samp(np.delete(e, s), 0.0).pvalue for s in range(N)]
    by_kind = {i.kind: i for i in influence}
    assert set(by_kind) == {"headline", "control"}
    ih, ic = by_kind["headline"], by_kind["control"]
    assert ih.holm_p == pytest.approx(h.holm_p) and ih.analyses == N
    assert ih.max_holm_p == pytest.approx(max(head), rel=1e-9) and ih.worst_seed == int(np.argmax(head))
    assert ic.max_holm_p == pytest.approx(max(cont), rel=1e-9) and ic.worst_seed == int(np.argmax(cont))
    assert ih.survives == (max(head) < 0.05) and ic.survives == (max(cont) < 0.05)
    # it changes nothing else: the verdicts and Holm p are those of the analysis with every seed
    assert stats.headlines[0].holm_p == pytest.approx(
        scipy.stats.ttest_1samp(d, 0.0, alternative="less").pvalue
    )


def test_a_verdict_resting_on_one_seed_does_not_survive_and_the_report_says_which():
    values = _values()
    t = np.array(values["rd_attnres"])
    p = np.array(values["block_attnres"])
    d0 = t - p + 0.04  # the noise alone; a gain just large enough to be established with every seed
    for gain in np.linspace(0.001, 0.02, 200):
        d = d0 - gain
        full = scipy.stats.ttest_1samp(d, 0.0, alternative="less").pvalue
        head = [scipy.stats.ttest_1samp(np.delete(d, s), 0.0, alternative="less").pvalue for s in range(N)]
        if full < 0.05 <= max(head):
            break
    else:
        raise AssertionError("no borderline gain found")
    values["rd_attnres"] = list(p + d)
    stats, influence = _study(values)
    assert stats.headlines[0].established
    ih = next(i for i in influence if i.kind == "headline")
    assert max(head) >= 0.05 and not ih.survives and ih.worst_seed == int(np.argmax(head))
    stats = dataclasses.replace(stats, influence=influence)
    frame = stats_frame(stats)
    row = frame.filter(frame["kind"] == "treatment_vs_parent").row(0, named=True)
    assert row["loo_max_holm_p"] == pytest.approx(max(head)) and row["loo_worst_seed"] == ih.worst_seed
    assert row["loo_survives"] is False and row["verdict"] == "gain established"  # the verdict stands
    other = frame.filter(frame["kind"] == "treatment_vs_control").row(0, named=True)
    assert math.isnan(other["loo_max_holm_p"]) and other["loo_worst_seed"] is None
    md = " ".join(str(b) for b in influence_blocks(stats))
    assert f"does not survive dropping seed {ih.worst_seed}" in md
    assert "enters no family and changes no verdict" in md


def test_no_established_verdict_means_no_extra_analysis():
    rng = np.random.default_rng(5)
    parent = 3.5 + rng.normal(0, 0.05, 5)
    values = {"block_attnres": list(parent), "rd_attnres": list(parent + rng.normal(0, 0.02, 5))}
    calls = []
    fr = frames_from_values(values)
    stats = analyze(fr["final"], fr["runs"], plan=AnalysisPlan(), degenerate={})
    assert not stats.headlines[0].established
    assert leave_one_seed_out(stats, fr["final"], fr["runs"], lambda *a, **k: calls.append(1)) == ()
    assert not calls
