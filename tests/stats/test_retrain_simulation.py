"""The re-train check's error rates, simulated (harness/report/simulation/retrain.py, DESIGN section 13).

Seeded studies of a parent/treatment/control grid re-trained as new draws or as small nudges, with or
without a bias on the treatment, through the check's own functions; each rate within 2 binomial SEs of its
bound: 'a bias' on an unbiased machine at most alpha (Holm over the contrasts), 'perturbed' for new draws and
'redrawn' for perturbed runs each at most 2.5 % (one tail of a 95 % interval) at K = 3, 5, 8, a claim that excludes a bias of the smallest effect when the
bias is exactly that at most alpha (the TOST), and the redraw ratio's interval covering its true value 95 %
of the time under a perturbation (the F pivot is exact there; conservative under a redraw). A small batch
also goes through retrain_check itself and gets the same verdicts. CPU only, a few seconds.

    python -m pytest -q tests/stats/test_retrain_simulation.py
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness.report.simulation.retrain import (
    EFFECT,
    MOVEMENT_EFFECT,
    NUDGE,
    check_verdicts,
    ratio_coverage,
    simulate_studies,
    verdict_rates,
)
from harness.report.stats.retrain_check import (
    BIAS,
    CANNOT_TELL,
    PERTURBATION_RATIO,
    PERTURBED,
    REDRAWN,
    grid_contrasts,
    retrain_check,
)

STUDIES = 4000
ALPHA = 0.05


def _se(rate: float) -> float:
    return math.sqrt(rate * (1 - rate) / STUDIES)


@pytest.mark.parametrize(("move", "k"), [("redraw", 3), ("redraw", 8), ("perturb", 3), ("perturb", 8)])
def test_an_unbiased_machine_is_called_a_bias_at_most_alpha(move, k):
    rates = verdict_rates(k, STUDIES, np.random.default_rng(100 + k), move=move)
    assert rates[BIAS] <= ALPHA + 2 * _se(ALPHA), rates


@pytest.mark.parametrize("k", [3, 5, 8])
def test_perturbed_and_redrawn_are_each_said_wrongly_at_most_5_percent(k):
    """The effect large (the TOST passes, the movement words decide): new draws are called "perturbed", and
    perturbed runs (the measured nudge, and the boundary one whose redraw ratio is PERTURBATION_RATIO)
    "redrawn", each at most 2.5 % + 2 SE (one tail of a 95 % interval; the issue's bound is 5 %). The old
    rule said "redrawn" for 14 % of perturbed runs at K = 3 (every interval not below 1 fell through to it)."""
    rng = np.random.default_rng(200 + k)
    redraw = verdict_rates(k, STUDIES, rng, move="redraw", effect=MOVEMENT_EFFECT)
    assert redraw[PERTURBED] <= 0.025 + 2 * _se(0.025), redraw
    for nudge in (NUDGE, math.sqrt(2 * PERTURBATION_RATIO)):
        perturb = verdict_rates(k, STUDIES, rng, move="perturb", nudge=nudge, effect=MOVEMENT_EFFECT)
        assert perturb[REDRAWN] <= 0.025 + 2 * _se(0.025), (nudge, perturb)
    if k == 3:  # at 3 pairs a redraw is seldom told apart: the words say so, not "redrawn" by default
        assert redraw[CANNOT_TELL] > 0.8, redraw


def test_new_draws_of_every_archived_seed_are_mostly_called_redrawn():
    rates = verdict_rates(24, STUDIES, np.random.default_rng(224), move="redraw", effect=MOVEMENT_EFFECT)
    assert rates[REDRAWN] > 0.85 and rates[PERTURBED] == 0.0, rates


@pytest.mark.parametrize(("move", "k"), [("perturb", 3), ("perturb", 4), ("redraw", 16)])
def test_a_bias_of_the_smallest_effect_is_excluded_at_most_alpha(move, k):
    """Perturbed and redrawn both claim every contrast's TOST excluded the smallest effect; with the treatment
    biased by exactly that effect, that claim is wrong, and is made at most alpha of the time."""
    rates = verdict_rates(k, STUDIES, np.random.default_rng(300 + k), move=move, bias=EFFECT)
    assert rates[PERTURBED] + rates[REDRAWN] <= ALPHA + 2 * _se(ALPHA), rates


@pytest.mark.parametrize("k", [3, 8, 24])
def test_the_redraw_ratio_interval_covers_a_perturbation_95_percent(k):
    cover, _ = ratio_coverage(k, STUDIES, np.random.default_rng(400 + k), move="perturb")
    assert abs(cover - 0.95) <= 2 * _se(0.95), cover
    cover, below = ratio_coverage(k, STUDIES, np.random.default_rng(500 + k), move="redraw")
    assert cover >= 0.95 - 2 * _se(0.95) and below <= 0.025 + 2 * _se(0.025)  # conservative under a redraw


def test_a_perturbation_at_8_pairs_is_called_perturbed():
    rates = verdict_rates(8, STUDIES, np.random.default_rng(600), move="perturb")
    assert rates[PERTURBED] > 0.85, rates


def test_the_simulation_decides_as_retrain_check_does():
    rng = np.random.default_rng(700)
    archived, new = simulate_studies(4, 40, rng, move="perturb", bias=EFFECT / 2)
    roles = {"p": "parent", "t": "treatment", "c": "control"}
    contrasts = grid_contrasts(roles)
    assert [c.label for c in contrasts] == ["t - p", "c - p", "t - c"]  # the simulation's WEIGHTS
    got = check_verdicts(archived, new, EFFECT)
    for s in range(40):
        arch = {
            (v, i): float(archived[s, i, j]) for j, v in enumerate("ptc") for i in range(archived.shape[1])
        }
        renew = {(v, i): float(new[s, i, j]) for j, v in enumerate("ptc") for i in range(new.shape[1])}
        check = retrain_check(arch, renew, contrasts, min_effect_nats=EFFECT)
        simulated = check_verdicts(archived[s : s + 1], new[s : s + 1], check.smallest_effect)[0]
        assert check.verdict == simulated
    assert len(set(got)) > 1  # the batch is not one verdict throughout
