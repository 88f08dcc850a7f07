"""Issue 38 item 6: the headline's absence rule and its family (DESIGN 6 step 1).

* ``gain absent`` needs the mean's distance from -delta beyond the numerical floor (a zero-spread
  study 1e-7 above -delta was ``gain absent``);
* established and absent form ONE family (Holm with Shaffer's divisors): two Holm families gave a wrong
  headline in about 7 % of two-cell grids (one null cell, one cell whose gain equals delta).

Each rate's tolerance is 2 binomial SEs at the stated number of seeded studies (about 1 s of CPU).
"""

from __future__ import annotations

import numpy as np
import pytest

from harness.report.simulation.edges import wrong_headline_rate
from harness.report.simulation.rules import binomial_se
from harness.report.stats import decisions as dec

ALPHA = 0.05
STUDIES = 20_000


def _shaffer_reference(p_est: list[float], p_abs: list[float], alpha: float) -> tuple[list, list]:
    """A plain-loop reference: step-down over the 2K tests, the j-th smallest p at alpha / (cells that
    still have an unrejected test). Returns (rejected flags, adjusted p) in input order."""
    tests = [(p, c) for c, p in enumerate(p_est)] + [(p, c) for c, p in enumerate(p_abs)]
    order = sorted(range(len(tests)), key=lambda i: tests[i][0])
    rejected, adj, running, stop = [False] * len(tests), [0.0] * len(tests), 0.0, False
    for j, i in enumerate(order):
        open_cells = len({tests[k][1] for k in order[j:]})
        running = max(running, min(1.0, open_cells * tests[i][0]))
        adj[i] = running
        stop = stop or not tests[i][0] < alpha / open_cells
        rejected[i] = not stop
    return rejected, adj


def test_one_family_equals_a_plain_loop_and_holm_without_absence_tests():
    rng = np.random.default_rng(3801)
    for k in (1, 2, 3, 5):
        for _ in range(200):
            p = rng.uniform(0, 0.08, (2, k))
            fam = dec.decide_headlines(np.full(k, 5), np.full(k, -0.01), p[0], np.zeros(k), p[1], 0.01, ALPHA)
            rejected, adj = _shaffer_reference(list(p[0]), list(p[1]), ALPHA)
            got = np.concatenate([fam.holm_p, fam.absence_holm_p])
            assert np.allclose(got, adj, rtol=0, atol=1e-15), (p, got, adj)
            assert list(got < ALPHA) == rejected
            # The level each absence test ran at rejects exactly where the family does (the printed bound).
            assert list(p[1] < fam.absence_level) == rejected[k:]
    # One cell: both tests at alpha (their nulls exclude each other), the adjusted p are the raw p.
    fam = dec.decide_headlines(np.array([5]), np.array([-0.01]), [0.03], [0.0], [0.04], 0.01, ALPHA)
    assert (fam.holm_p[0], fam.absence_holm_p[0], fam.absence_level[0]) == (0.03, 0.04, ALPHA)
    # No absence tests (no min_effect_nats): exactly Holm over the cells, the v3 headline.
    p = rng.uniform(0, 0.1, (100, 4))
    mean = np.full(p.shape, -0.01)
    fam = dec.decide_headlines(np.full(p.shape, 5), mean, p, mean, np.full(p.shape, np.nan), None, ALPHA)
    holm_p, est = dec.decide_headline(np.full(p.shape, 5), mean, p, ALPHA)
    assert np.array_equal(fam.holm_p, holm_p) and np.array_equal(fam.established, est)
    assert not fam.absent.any() and np.isnan(fam.absence_holm_p).all()


@pytest.mark.parametrize("n,delta", [(10, 0.004), (5, 0.006)])
def test_one_family_keeps_the_wrong_headline_rate_of_a_two_cell_grid_at_alpha(n, delta):
    """Cell 0 has no gain, cell 1 a gain of exactly delta: `gain established` in cell 0 or `gain absent`
    in cell 1 is a wrong headline. Two Holm families: 0.08 / 0.06 of grids; one family: <= alpha."""
    rng = np.random.default_rng(3810 + n)
    tolerance = 2 * binomial_se(ALPHA, STUDIES)
    one = wrong_headline_rate(n, STUDIES, rng, delta=delta, alpha=ALPHA)
    two = wrong_headline_rate(n, STUDIES, rng, delta=delta, alpha=ALPHA, one_family=False)
    assert one <= ALPHA + tolerance, one
    assert two > ALPHA + 5 * binomial_se(ALPHA, STUDIES), two  # the flaw the single family removes


def test_absence_needs_the_distance_from_delta_beyond_the_floor():
    """Every seed's difference 1e-7 above -delta, zero spread: the exact sign-flip p is 2^-6 < alpha,
    but 1e-7 nats/token is float rounding, not evidence that the gain is below delta."""
    delta, n = 0.01, 6
    d = np.full((1, n), -delta + 1e-7)
    p, exact = dec.absence_p(d, delta)
    assert bool(exact[0]) and p[0] == 2.0**-n
    assert not dec.decide_absence([n], d.mean(axis=-1), p, delta, ALPHA)[1][0]
    fam = dec.decide_headlines([n], [1.0], [1.0], d.mean(axis=-1), p, delta, ALPHA)
    assert not fam.absent[0]
    # 1e-4 above -delta (beyond the floor), same zero spread: absent.
    d_far = np.full((1, n), -delta + 1e-4)
    p_far, _ = dec.absence_p(d_far, delta)
    assert dec.decide_absence([n], d_far.mean(axis=-1), p_far, delta, ALPHA)[1][0]
