"""The re-train check simulated (DESIGN section 13): how often each answer of
:mod:`harness.report.stats.retrain_check` is wrong, through its own functions.

Each study is one archive of a grid with a parent, a treatment and a control (the check's three
contrasts: treatment - parent, control - parent, treatment - control). Per seed s and variant v the
archived final NLL is ``base_s + noise_vs`` (noise ~ N(0, ``sd``) per run; ``base_s`` and the variants'
effects cancel in every paired difference and are left out). K of the N archived seeds are re-trained:

* ``redraw``: each re-trained run is a new, independent draw (``base_s + fresh noise``), the law the
  redraw ratio's 1 stands for;
* ``perturb``: each run is nudged, ``archived + N(0, nudge x sd)`` (redraw ratio ``nudge^2 / 2``; the
  committed study measured about 0.06, a nudge of 0.35);

and the re-training machine may add a ``bias`` (nats/token) to the treatment's runs. Every study goes
through the check's own per-contrast functions (:func:`~harness.report.stats.retrain_check.mean_interval`,
:func:`~harness.report.stats.retrain_check.tost`, :func:`~harness.report.stats.retrain_check.redraw_ratio`),
Holm (:func:`harness.report.stats.decisions.holm`) and :func:`~harness.report.stats.retrain_check.decide`, with
the smallest effect fixed at ``effect`` (the study would take it from the archive). Rates carry their
binomial SE.

    python -m harness.report.simulation.studies --tables retrain
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np

from harness.report.simulation.rules import Row, binomial_se
from harness.report.stats.decisions import holm
from harness.report.stats.retrain_check import (
    CANNOT_TELL,
    PERTURBATION_RATIO,
    VERDICTS,
    decide,
    mean_interval,
    redraw_ratio,
    tost,
)

SD = 0.02  # nats/token per run (the factorial study's paired sd is about 0.04 = sqrt(2) x 0.028)
EFFECT = 0.0173  # the smallest effect the factorial study reports (nats/token)
MOVEMENT_EFFECT = 0.2  # a smallest effect so large that every TOST excludes it: the movement words decide
NUDGE = 0.35  # a perturbation's sd in run sds: redraw ratio NUDGE^2 / 2 = 0.061 (measured: 0.036-0.127, pooled 0.06)
ARCHIVE_SEEDS = 24
# parent, treatment, control: the check's contrasts (grid_contrasts of these roles), weights per variant
WEIGHTS = np.array([[-1.0, 1.0, 0.0], [-1.0, 0.0, 1.0], [0.0, 1.0, -1.0]])
MOVES = ("redraw", "perturb")
_SHORT = {CANNOT_TELL: "cannot tell (at K)"}  # a column header for the long verdict


def simulate_studies(
    k: int,
    studies: int,
    rng: np.random.Generator,
    *,
    move: str,
    bias: float = 0.0,
    sd: float = SD,
    nudge: float = NUDGE,
    archive_seeds: int = ARCHIVE_SEEDS,
) -> tuple[np.ndarray, np.ndarray]:
    """``(archived [S, N, 3], new [S, K, 3])`` final NLLs (parent, treatment, control) of ``studies`` studies,
    the first K seeds re-trained (module docstring)."""
    if move not in MOVES:
        raise ValueError(f"move must be one of {MOVES}, got {move!r}")
    base = rng.normal(3.8, 0.05, (studies, archive_seeds, 1))
    archived = base + rng.normal(0.0, sd, (studies, archive_seeds, 3))
    if move == "redraw":
        new = base[:, :k] + rng.normal(0.0, sd, (studies, k, 3))
    else:
        new = archived[:, :k] + rng.normal(0.0, nudge * sd, (studies, k, 3))
    new[..., 1] += bias
    return archived, new


def check_verdicts(archived: np.ndarray, new: np.ndarray, effect: float, alpha: float = 0.05) -> list[str]:
    """The check's verdict on each study (``archived [S, N, 3]``, ``new [S, K, 3]``): the per-contrast statistics
    :func:`~harness.report.stats.retrain_check.retrain_check` computes, vectorised over the studies, then
    :func:`~harness.report.stats.retrain_check.decide` per study."""
    k, n = new.shape[1], archived.shape[1]
    d_arch, d_new = archived @ WEIGHTS.T, new @ WEIGHTS.T  # [S, N, C], [S, K, C]
    shifts = np.moveaxis(d_new - d_arch[:, :k], 1, -1)  # [S, C, K]
    mean, _, _, _, p = mean_interval(shifts)
    tost_p, _ = tost(shifts, effect, alpha)
    _, low, high = redraw_ratio(shifts, d_arch.std(axis=1, ddof=1), n)
    holm_p = holm(p)  # over the last axis: the contrasts of each study
    identical = np.all(new == archived[:, :k], axis=(1, 2))
    return [
        decide(
            [k] * WEIGHTS.shape[0],
            holm_p[s],
            mean[s],
            tost_p[s],
            high[s],
            low[s],
            identical=bool(identical[s]),
            effect=effect,
            alpha=alpha,
        )[0]
        for s in range(new.shape[0])
    ]


def verdict_rates(
    k: int, studies: int, rng: np.random.Generator, *, effect: float = EFFECT, alpha: float = 0.05, **scenario
) -> dict[str, float]:
    """Share of ``studies`` simulated studies (:func:`simulate_studies` with ``scenario``) per verdict of
    :data:`harness.report.stats.retrain_check.VERDICTS`."""
    counts = Counter(check_verdicts(*simulate_studies(k, studies, rng, **scenario), effect, alpha))
    return {v: counts[v] / studies for v in VERDICTS}


def ratio_coverage(
    k: int, studies: int, rng: np.random.Generator, *, move: str, archive_seeds: int = ARCHIVE_SEEDS
) -> tuple[float, float]:
    """``(coverage, below)`` of the redraw ratio's 95 % interval for one contrast (treatment - parent)
    over ``studies``: the share of intervals holding the true ratio (``NUDGE^2 / 2`` under ``perturb``: the
    shift of a difference has variance 2 (nudge sd)^2, twice the seed variance of a difference 4 sd^2; 1
    under ``redraw``), and the share lying wholly below 1 (a 'perturbed' claim for this contrast)."""
    truth = NUDGE**2 / 2 if move == "perturb" else 1.0
    archived, new = simulate_studies(k, studies, rng, move=move, archive_seeds=archive_seeds)
    d_arch, d_new = archived[..., 1] - archived[..., 0], new[..., 1] - new[..., 0]
    _, low, high = redraw_ratio(d_new - d_arch[:, :k], d_arch.std(axis=1, ddof=1), archive_seeds)
    return float(((low <= truth) & (truth <= high)).mean()), float((high < 1).mean())


def _truth(move: str, nudge: float, bias: float) -> str:
    """The planted truth of a row in words: "redrawn", "perturbed" (with its redraw ratio), plus any bias."""
    what = "redrawn" if move == "redraw" else f"perturbed (redraw ratio {nudge**2 / 2:.3g})"
    return what if bias == 0 else f"{what}, a bias of {bias:.4g} nats/token"


def table(
    studies: int = 4_000, seed: int = 20261206, alpha: float = 0.05, rows: list | None = None
) -> list[str]:
    """The re-train check's verdict rates per scenario and K, as text lines (quoted in reports/LOG.md); each verdict's
    rate also appended to ``rows`` (:class:`~harness.report.simulation.rules.Row`)."""
    rng = np.random.default_rng(seed)
    boundary = math.sqrt(2 * PERTURBATION_RATIO)  # the nudge whose redraw ratio is PERTURBATION_RATIO
    lines = [
        f"Re-train check, {studies} studies per row (binomial SE at alpha {binomial_se(alpha, studies):.4f}); "
        f"run sd {SD}, {ARCHIVE_SEEDS} archive seeds, parent/treatment/control (3 contrasts), smallest effect "
        f"{EFFECT} (and {MOVEMENT_EFFECT}, where the TOST passes and the movement decides); a perturbation nudges "
        f"each run by {NUDGE} run sd (redraw ratio {NUDGE**2 / 2:.3g}), the boundary one by {boundary:.3g} "
        f"(redraw ratio {PERTURBATION_RATIO:g}, the largest that still says 'redrawn' is wrong)",
        "",
        f"{'move':>8} {'ratio':>6} {'bias':>7} {'effect':>7} {'K':>3} "
        + " ".join(f"{_SHORT.get(v, v):>22}" for v in VERDICTS),
    ]
    scenarios = [("redraw", NUDGE), ("perturb", NUDGE), ("perturb", boundary)]
    for move, nudge in scenarios:
        for effect, biases in ((EFFECT, (0.0, EFFECT / 2, EFFECT, 2 * EFFECT)), (MOVEMENT_EFFECT, (0.0,))):
            for bias in biases:
                for k in (2, 3, 5, 8, 16):
                    rates = verdict_rates(
                        k, studies, rng, move=move, nudge=nudge, bias=bias, effect=effect, alpha=alpha
                    )
                    ratio = 1.0 if move == "redraw" else nudge**2 / 2
                    lines.append(
                        f"{move:>8} {ratio:>6.3g} {bias:>7.4f} {effect:>7.4f} {k:>3} "
                        + " ".join(f"{rates[v]:>22.4f}" for v in VERDICTS)
                    )
                    setting = f"K = {k} pairs, smallest effect {effect:g} nats/token"
                    for v in VERDICTS:
                        if rows is not None:
                            rows.append(
                                Row("retrain", setting, _truth(move, nudge, bias), v, rates[v], studies)
                            )
    lines += [
        "",
        "The redraw ratio's 95 % interval, one contrast",
        f"{'move':>8} {'K':>3} {'coverage':>9} {'below 1':>8}",
    ]
    for move in MOVES:
        for k in (3, 8, 16, ARCHIVE_SEEDS):
            cover, below = ratio_coverage(k, studies, rng, move=move)
            lines.append(f"{move:>8} {k:>3} {cover:>9.4f} {below:>8.4f}")
    return lines


__all__ = [
    "EFFECT",
    "MOVEMENT_EFFECT",
    "MOVES",
    "NUDGE",
    "check_verdicts",
    "ratio_coverage",
    "simulate_studies",
    "table",
    "verdict_rates",
]
