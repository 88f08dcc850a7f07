"""The sequential p is exact above GAMMA_MAX and for tiny p (DESIGN section 8).

The bisection used to run on [0, 0.317] and printed 1 for any p no level up to 0.317 rejects: the
factorial study's interaction at look 2 (looks 12 and 24; t p 0.1894 at look 1, 0.1695 at look 2)
read "sequential p 1, Holm p 1", where the exact value is 0.3534 (look 1's increment inverted on its
increasing range); on a linear scale a p of 1e-15 kept no significant digit. Every value here is
checked against an independent inversion (scipy's bounded minimiser for each increment's peak and
Brent's root finder on log gamma).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.optimize
import scipy.stats

from harness.report.stats.decisions import holm
from harness.report.stats.looks import increment_peak, sequential_p


def _increment(gamma: float, t: float, t_prev: float) -> float:
    """Lan-DeMets O'Brien-Fleming increment, written out again: 2 Phi-bar(z / sqrt t) - the same at t_prev."""
    z = scipy.stats.norm.isf(gamma / 2)
    prev = 2 * scipy.stats.norm.sf(z / math.sqrt(t_prev)) if t_prev > 0 else 0.0
    return 2 * scipy.stats.norm.sf(z / math.sqrt(t)) - prev


def reference_sequential_p(p: list[float], looks: tuple[int, ...]) -> float:
    """min over looks of the least gamma whose increment reaches p_i, by scipy (independent)."""
    t = [n / looks[-1] for n in looks]
    best = math.inf
    for i, pi in enumerate(p):
        if not math.isfinite(pi):
            continue
        tp = t[i - 1] if i else 0.0
        if i == 0:
            peak = 1.0
        else:
            res = scipy.optimize.minimize_scalar(
                lambda g, ti=t[i], tp=tp: -_increment(g, ti, tp),
                bounds=(1e-9, 1.0),
                method="bounded",
                options={"xatol": 1e-12},
            )
            peak = float(res.x)
        if _increment(peak, t[i], tp) < pi:
            continue  # this look cannot reject at any level
        root = scipy.optimize.brentq(
            lambda x, ti=t[i], tp=tp, pi=pi: _increment(math.exp(x), ti, tp) - pi,
            math.log(1e-300),
            math.log(peak),
            xtol=1e-13,
            rtol=1e-13,
        )
        best = min(best, math.exp(root))
    return min(best, 1.0)


def test_the_peaks_are_where_scipy_finds_each_increments_maximum():
    looks = (12, 24)
    peak = increment_peak(looks)
    res = scipy.optimize.minimize_scalar(
        lambda g: -_increment(g, 1.0, 0.5), bounds=(1e-9, 1.0), method="bounded", options={"xatol": 1e-12}
    )
    assert peak[0] == 1.0 and peak[1] == pytest.approx(res.x, rel=1e-5)
    assert peak[1] > 0.3173  # the old search stopped below it


def test_the_factorial_studys_interaction_is_0_3534_at_look_2_and_its_look_1_holm_p_0_7068():
    looks = (12, 24)
    p_look1, p_look2 = (
        0.1893639800807539,
        0.16947955110421803,
    )  # reports/factorial_study: interaction t p
    seq, deciding = sequential_p([p_look1, p_look2], looks)
    assert float(seq) == pytest.approx(reference_sequential_p([p_look1, p_look2], looks), rel=1e-9)
    assert round(float(seq), 4) == 0.3534 and int(deciding) == 0
    # look 1's factorial family of four (t p at 12 seeds); Holm over their sequential p
    family = [4.310681958815573e-7, 1.8370792581727772e-6, 0.034669274573780925, 0.2789357337954274]
    family.append(p_look1)
    seqs = np.array([float(sequential_p([x, math.nan], looks)[0]) for x in family])
    ref = np.array([reference_sequential_p([x, math.nan], looks) for x in family])
    assert seqs == pytest.approx(ref, rel=1e-9)
    adjusted = holm(seqs)
    assert [round(float(x), 4) for x in adjusted[-2:]] == [0.7068, 0.7068]  # the two rows that printed 1
    assert np.all(adjusted < 1)


@pytest.mark.parametrize("looks", [(12, 24), (3, 5, 10), (8, 16), (4, 8, 12, 24)])
def test_the_sequential_p_equals_scipys_inversion_over_the_whole_range(looks):
    rng = np.random.default_rng(len(looks))
    ps = [10.0 ** rng.uniform(-14, 0, len(looks)) for _ in range(40)] + [np.full(len(looks), 0.9)]
    for p in ps:
        got = float(sequential_p(p, looks)[0])
        assert got == pytest.approx(reference_sequential_p(list(p), looks), rel=1e-7), (looks, p)
        assert got < 1 or p[0] >= 1  # a first look reached always inverts below 1


@pytest.mark.parametrize("p", [1e-12, 3.3e-15, 7.7e-20, 1e-40])
def test_tiny_sequential_p_keeps_three_significant_digits(p):
    looks = (12, 24)
    for vector in ([math.nan, p], [p, math.nan], [0.5, p]):
        if not math.isfinite(vector[0]) and not math.isfinite(vector[1]):
            continue
        ref = reference_sequential_p([x if math.isfinite(x) else math.nan for x in vector], looks)
        got = float(sequential_p([x if math.isfinite(x) else math.nan for x in vector], looks)[0])
        assert got == pytest.approx(ref, rel=1e-6), vector
        assert got > 0
