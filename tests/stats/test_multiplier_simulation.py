"""The compute multiplier simulated through the report's own functions (DESIGN section 14,
harness/report/simulation/multiplier.py): under no effect its 'yes' stays within alpha + 2 SE, and its
interval covers a planted multiplier of 1.2 at 95 % +- 2 SE. One row of section 14's table per test, at
fewer studies (fixed generator seeds: the numbers are reproducible); the full table:
``python -m harness.report.simulation.multiplier``."""

from __future__ import annotations

import pytest

from harness.report.simulation.multiplier import simulate
from harness.report.simulation.rules import binomial_se

REPS = 600


@pytest.mark.parametrize(("seeds", "budgets"), [(12, 3), (5, 4), (3, 2)])
def test_false_positives_within_alpha_and_coverage_of_1_2_within_2_se(seeds, budgets):
    null = simulate(seeds, budgets, 1.0, reps=REPS, rng_seed=11)
    assert null["yes"] <= 0.05 + 2 * binomial_se(0.05, REPS)
    alt = simulate(seeds, budgets, 1.2, reps=REPS, rng_seed=12)
    assert abs(alt["coverage"] - 0.95) <= 2 * binomial_se(0.95, REPS)
    assert alt["yes"] > null["yes"]  # the test has power against 1.2
