"""The Provenance section's tests simulated (harness/report/simulation/provenance.py, DESIGN section 13).

Seeded studies through the report's own functions; each rate against its bound within 2 binomial SEs. The
agreement test (Welch's F, permutation p) keeps its false alarms within alpha at the splits grids have
(18:2, 6/4/2, 18:3, 12+12) when the hardware changes nothing, and at 18:2 and 6/4/2 also when the smallest
class is only noisier, which a floor of 2 pairs does not (the floor's reason); its printed MDE is the shift it
detects about 80 % of the time (and, for two classes of equal size and spread, statsmodels' two-sample power
solver's); the balance test keeps its level; with no hardware effect, an established verdict is called
"NO" within the largest class in about 1 % of grids, where the old rule said NO in 40 % at 12 pairs.

    python -m pytest -q tests/stats/test_provenance_simulation.py
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from statsmodels.stats.power import TTestIndPower

from harness.report.simulation.provenance import (
    SD,
    agreement_rate,
    balance_rate,
    mde_power,
    within_rates,
)
from harness.report.stats.class_tests import agreement_mde, welch_anova
from harness.report.stats.provenance import NO

ALPHA = 0.05


def _bound(studies: int, rate: float = ALPHA) -> float:
    return rate + 2 * math.sqrt(rate * (1 - rate) / studies)


@pytest.mark.slow  # 4 x 1,000 permutation tests
@pytest.mark.parametrize("split", [(18, 2), (6, 4, 2)])
def test_the_floor_keeps_false_alarms_within_alpha_where_a_floor_of_two_does_not(split):
    studies = 1000
    rng = np.random.default_rng(sum(split))
    noisier = (SD,) * (len(split) - 1) + (2 * SD,)  # the 2-pair class: equal mean, twice the sd
    equal, _ = agreement_rate(split, studies, rng)
    noisy, _ = agreement_rate(split, studies, rng, sds=noisier)
    assert equal <= _bound(studies) and noisy <= _bound(studies), (equal, noisy)
    loose, _ = agreement_rate(split, studies, rng, sds=noisier, floor=2)
    assert loose > _bound(studies), loose  # the 2-pair class in the test: false alarms of 10-11 %


@pytest.mark.slow  # 2 x 1,000 permutation tests
@pytest.mark.parametrize("split", [(18, 3), (12, 12)])
def test_no_hardware_effect_keeps_false_alarms_within_alpha(split):
    rate, tested = agreement_rate(split, 1000, np.random.default_rng(31 + sum(split)))
    assert tested == 1.0 and rate <= _bound(1000), rate


def test_the_mde_is_statsmodels_two_sample_power_for_equal_classes():
    """Two classes of n pairs with equal sample sds s: Welch's df is 2 (n - 1) and its noncentrality
    Delta / sqrt(2 s^2 / n), the pooled two-sample t-test's, whose MDE statsmodels solves."""
    for n in (4, 6, 12):
        x = np.linspace(-1, 1, n)
        group = x / x.std(ddof=1) * SD
        es = TTestIndPower().solve_power(nobs1=n, alpha=0.01, power=0.8, ratio=1.0, alternative="two-sided")
        assert agreement_mde([group, group + 0.3], 0.01, 0.8) == pytest.approx(es * SD, rel=1e-6)


def test_the_mde_of_three_classes_is_where_welchs_test_has_the_power():
    rng = np.random.default_rng(5)
    sizes = (8, 6, 5)
    groups = [np.linspace(-1, 1, n) / np.linspace(-1, 1, n).std(ddof=1) * SD for n in sizes]
    mde = agreement_mde(groups, ALPHA, 0.8)
    hits = 0
    for _ in range(2000):  # the least favourable class (the smallest) shifted by the MDE
        sample = [rng.normal(0.0, SD, n) for n in sizes[:-1]] + [rng.normal(mde, SD, sizes[-1])]
        hits += welch_anova(sample)[3] < ALPHA
    assert abs(hits / 2000 - 0.8) < 0.05, hits / 2000


@pytest.mark.slow  # 2 x 600 permutation tests
@pytest.mark.parametrize("split", [(6, 6), (18, 6)])
def test_the_permutation_test_has_about_the_printed_power_at_its_mde(split):
    _, power = mde_power(split, 600, np.random.default_rng(41 + sum(split)), alpha=ALPHA)
    assert 0.7 < power < 0.9, power


def test_the_balance_test_keeps_its_level():
    rng = np.random.default_rng(7)
    for pairs, classes in ((10, 2), (20, 2), (12, 3)):
        assert balance_rate(pairs, 1500, rng, classes=classes) <= _bound(1500)


def test_without_a_hardware_effect_an_established_verdict_is_rarely_called_no():
    r = within_rates(12, 6, 4000, np.random.default_rng(8))
    assert r[NO] <= 0.03 and r["old_no"] > 0.3, r  # the old rule: every verdict the class missed was NO
    assert r[NO] + r["yes"] + r["not re-decidable"] == pytest.approx(1.0)
