"""No verdict rests on rounding when divergence is imputed (issue 47).

Where one variant diverges at every seed, every tested difference is imputed. At exactly the
floor (1e-6) the float mean of 12 of them is 1.0000000000000002e-06 (beyond the floor: "established")
and of 8 exactly 1e-06 (within it: "not established"), so the verdict flipped with n by rounding. An
imputed difference is now at least twice the floor, so the mean lies beyond it at every n and the
verdict follows the exact sign-flip p (zero spread) alone.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from test_factorial_stats import draws, study  # tests/ is on sys.path under pytest (no package)

from harness.design.analysis_plan import AnalysisPlan
from harness.report.render.sentences import control_sentence, headline_sentence
from harness.report.simulation.synthetic import frames_from_values
from harness.report.stats.analysis import analyze
from harness.report.stats.divergence import impute
from harness.report.stats.factorial import INTERACTION, SIMPLE, verdicts
from harness.report.stats.floors import FLOOR_NATS, IMPUTED_NATS

NS = range(3, 31)


def test_the_float_mean_of_imputed_values_never_sits_on_the_floor():
    assert (
        np.mean(np.full(12, FLOOR_NATS)) > FLOOR_NATS == np.mean(np.full(8, FLOOR_NATS))
    )  # the old rounding
    for n in NS:
        values = impute(np.zeros(n), -np.ones(n, dtype=int))
        assert np.all(values == -IMPUTED_NATS) and -values.mean() > FLOOR_NATS, n


def _headline(n: int):
    """The parent diverged at every one of n seeds, the treatment finished: every d imputed (-M)."""
    fr = frames_from_values({"block_attnres": [math.nan] * n, "rd_attnres": list(3.5 + 0.01 * np.arange(n))})
    return analyze(fr["final"], fr["runs"], plan=AnalysisPlan()).headlines[0]


@pytest.mark.parametrize("n", [8, 12])
def test_a_headline_whose_every_pair_is_imputed_is_decided_by_its_exact_p_at_8_and_12(n):
    h = _headline(n)
    assert h.n == n and len(h.imputed) == n
    assert h.mean == pytest.approx(-IMPUTED_NATS, rel=1e-12) and h.mean < -FLOOR_NATS
    assert h.exact and h.p_one_sided == pytest.approx(2.0**-n)  # zero spread: the exact one-sided sign-flip p
    assert h.verdict == "gain established"  # 1/256 and 1/4096 < 0.05: the same verdict at both n


def test_the_headline_verdict_follows_the_sign_flip_p_at_every_n():
    for n in NS:
        h = _headline(n)
        assert h.mean < -FLOOR_NATS, n
        assert (h.verdict == "gain established") == (2.0**-n < 0.05), (n, h.verdict)


@pytest.mark.parametrize("n", [8, 12])
def test_factorial_contrasts_whose_every_pair_is_imputed_are_decided_by_their_exact_p(n):
    y = draws(n, 0.0, 5)
    y[:, 3] = math.nan  # rd_offset (offset and decoupled_v) diverged at every seed
    cell = study(y)[0].factorial[0]
    for c in (cell.contrast(INTERACTION), cell.contrast(SIMPLE, 0, 1), cell.contrast(SIMPLE, 1, 1)):
        assert len(c.imputed) == n and c.mean == pytest.approx(IMPUTED_NATS, rel=1e-12), c.spec
        assert c.mean > FLOOR_NATS and c.p == pytest.approx(2.0 ** (1 - n))  # two-sided sign-flip p
        assert c.reason != "mean within the numerical floor"
        assert c.established == (c.holm_p < 0.05), (n, c.spec, c.holm_p)


def test_the_factorial_verdict_does_not_flip_with_n_by_rounding():
    verdicts = {}
    for n in NS:
        y = draws(n, 0.0, 5)
        y[:, 3] = math.nan
        inter = study(y)[0].factorial[0].contrast(INTERACTION)
        assert inter.mean > FLOOR_NATS, n
        verdicts[n] = inter.established
    # the interaction's p 2^(1-n) falls with n: once established, established at every larger n
    first = min(n for n, e in verdicts.items() if e)
    assert all(verdicts[n] == (n >= first) for n in NS), verdicts


def _no_rounded_zero(text: str) -> None:
    assert "+0.0000" not in text and "-0.0000" not in text, text
    assert "resting only on the imputed values of runs that diverged" in text, text


def test_an_interaction_established_only_from_imputed_values_says_so():
    n = 8
    y = draws(n, 0.0, 5)
    y[:, 3] = math.nan  # rd_offset diverged at every seed: every contrast with it is imputed
    cell = study(y)[0].factorial[0]
    assert cell.contrast(INTERACTION).established
    words = " ".join(verdicts(cell, AnalysisPlan()))
    _no_rounded_zero(words)
    assert "rd_offset at seed(s) 0, 1, 2, 3, 4, 5, 6, 7" in words
    assert f"{IMPUTED_NATS:+.3g}" in words  # the value itself, 3 significant digits


def test_a_headline_established_only_from_imputed_values_says_so():
    h = _headline(8)
    assert h.verdict == "gain established"
    _no_rounded_zero(headline_sentence(h, 0.8))


def test_a_headline_with_real_differences_keeps_its_four_decimals():
    fr = frames_from_values(
        {"block_attnres": [3.5, 3.6, 3.7, 3.8, math.nan], "rd_attnres": [3.49, 3.58, 3.69, 3.785, 3.7]}
    )
    h = analyze(fr["final"], fr["runs"], plan=AnalysisPlan()).headlines[0]
    assert len(h.imputed) == 1
    text = headline_sentence(h, 0.8)
    assert f"mean d = {h.mean:+.4f} nats/token" in text and "resting only" not in text


def test_a_control_decided_only_from_imputed_values_says_so():
    n = 8
    fr = frames_from_values({"block_attnres": [3.5] * n, "rd_attnres": [3.25] * n, "fixed_v": [math.nan] * n})
    a = analyze(fr["final"], fr["runs"], plan=AnalysisPlan()).assessments[0]
    assert a.verdict == "does not reproduce gain" and len(a.imputed) == n
    _no_rounded_zero(control_sentence(a, 0.8))
