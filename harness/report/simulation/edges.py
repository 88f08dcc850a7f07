"""The edge cases of the decision rules simulated (:func:`edge_table`, the rules statistics v3 added;
docs/statistics.md): divergence where the treatment would lose, 'gain absent' at its boundary, one Holm
family over the grid's controls, the A/A check over cells, control error rates conditional on the
gate, float rounding. Printed by ``python -m harness.report.simulation.studies --tables edges`` (:mod:`harness.report.simulation.studies`).
"""

from __future__ import annotations

import numpy as np
import scipy.stats

from harness.report.simulation.rules import NOISE_SD, binomial_se
from harness.report.stats import decisions as dec
from harness.report.stats.divergence import impute
from harness.report.stats.floors import FLOOR_NATS, beyond_floor, verdict_mean

LOSS_RULES = ("every losing seed", "half the losing seeds", "the worst seed")


def lost_when_losing(d: np.ndarray, rule: str, rng: np.random.Generator) -> np.ndarray:
    """``[S, n]`` int: +1 where the treatment diverges (it would have lost there), else 0."""
    losing = d > 0
    if rule == "every losing seed":
        lost = losing
    elif rule == "half the losing seeds":
        lost = losing & (rng.random(d.shape) < 0.5)
    elif rule == "the worst seed":
        lost = np.zeros(d.shape, bool)
        np.put_along_axis(lost, d.argmax(axis=-1)[..., None], True, axis=-1)
        lost &= losing
    else:
        raise ValueError(f"rule must be one of {LOSS_RULES}, got {rule!r}")
    return lost.astype(int)


def divergence_null(
    n: int,
    studies: int,
    rng: np.random.Generator,
    *,
    rule: str = "every losing seed",
    alpha: float = 0.05,
    sd: float = NOISE_SD,
) -> tuple[float, float]:
    """Headline false-positive rate under a true null when the treatment diverges where it would lose.

    Returns ``(rate counting each lost seed as a loss (the report), rate dropping the lost pairs (v2))``.
    """
    d = rng.normal(0.0, sd, (studies, n)) - rng.normal(0.0, sd, (studies, n))
    lost = lost_when_losing(d, rule, rng)
    tested = impute(d, lost)[:, None]  # [S, 1 cell, n]: Holm runs over the last axis, the cells
    p, _ = dec.headline_p(tested)
    _, est = dec.decide_headline(np.full(p.shape, n), verdict_mean(tested), p, alpha)
    # v2: the lost pairs dropped, a one-sided t-test on the k observed pairs (k >= 3).
    obs = lost == 0
    k = obs.sum(axis=-1)
    mean = np.where(obs, d, 0.0).sum(axis=-1) / np.maximum(k, 1)
    var = np.where(obs, (d - mean[:, None]) ** 2, 0.0).sum(axis=-1) / np.maximum(k - 1, 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        p_drop = scipy.stats.t.cdf(mean / np.sqrt(var / np.maximum(k, 1)), np.maximum(k - 1, 1))
    dropped = (k >= 3) & (mean < 0) & (p_drop < alpha)
    return float(est.mean()), float(dropped.mean())


def absence_rate(
    n: int,
    studies: int,
    rng: np.random.Generator,
    *,
    gain: float,
    delta: float,
    cells: int = 1,
    alpha: float = 0.05,
    sd: float = NOISE_SD,
) -> float:
    """Share of studies with ``gain absent`` in at least one of ``cells`` cells (the report's one family
    of headline and absence tests), every cell with true gain ``gain`` (nats/token, > 0 = better)."""
    d = -gain + rng.normal(0.0, sd, (studies, cells, n)) - rng.normal(0.0, sd, (studies, cells, n))
    fam = headline_family(d, delta, alpha)
    return float((fam.absent & ~fam.established).any(axis=-1).mean())


def headline_family(d: np.ndarray, delta: float, alpha: float = 0.05) -> dec.HeadlineFamily:
    """The report's step 1 (:func:`harness.report.stats.decisions.decide_headlines`) on differences ``d``
    ``[S, K cells, n]``."""
    p, _ = dec.headline_p(d)
    p_abs, _ = dec.absence_p(d, delta)
    mean = d.mean(axis=-1)
    return dec.decide_headlines(np.full(p.shape, d.shape[-1]), mean, p, mean, p_abs, delta, alpha)


def wrong_headline_rate(
    n: int,
    studies: int,
    rng: np.random.Generator,
    *,
    delta: float,
    alpha: float = 0.05,
    sd: float = NOISE_SD,
    one_family: bool = True,
) -> float:
    """Share of two-cell grids with a wrong headline: cell 0 has no gain (``gain established`` is wrong),
    cell 1 a gain of exactly delta (``gain absent`` is wrong). ``one_family``: the report's single family
    (:func:`headline_family`); else the v3 rule, Holm over the cells per test (two families)."""
    gain = np.array([0.0, delta])[:, None]
    d = -gain + rng.normal(0.0, sd, (studies, 2, n)) - rng.normal(0.0, sd, (studies, 2, n))
    if one_family:
        fam = headline_family(d, delta, alpha)
        est, absent = fam.established, fam.absent & ~fam.established
    else:
        p, _ = dec.headline_p(d)
        _, est = dec.decide_headline(np.full(p.shape, n), d.mean(axis=-1), p, alpha)
        p_abs, _ = dec.absence_p(d, delta)
        absent = dec.decide_absence(np.full(p.shape, n), d.mean(axis=-1), p_abs, delta, alpha)[1] & ~est
    return float((est[:, 0] | absent[:, 1]).mean())


def grid_boundary_controls(
    n: int,
    studies: int,
    rng: np.random.Generator,
    *,
    cells: int = 3,
    gain: float = -0.012,
    rho: float = 0.5,
    alpha: float = 0.05,
    sd: float = NOISE_SD,
    grid_family: bool = True,
) -> float:
    """Share of grids with >= 1 wrong definite control verdict: one control per cell exactly at the
    boundary (it reproduces the fraction rho of a planted gain, so mean e = 0 and both definite
    verdicts are wrong). ``grid_family``: Holm over the grid's contrasts (v3), else per cell (v2)."""
    shape = (studies, cells, n)
    parent, treat = rng.normal(0.0, sd, shape), gain + rng.normal(0.0, sd, shape)
    control = rho * gain + rng.normal(0.0, sd, shape)
    d = treat - parent
    p, _ = dec.headline_p(d)
    _, est = dec.decide_headline(np.full(p.shape, n), d.mean(axis=-1), p, alpha)
    e = dec.reproduction_contrast(control - parent, d, rho)
    p_e, _ = dec.two_sided_p(e)
    none = np.zeros(est.shape, bool)
    if grid_family:
        _, codes = dec.decide_controls(est, none, np.full(est.shape, n), e.mean(axis=-1), p_e, alpha)
    else:  # each cell its own family (one control): v2
        _, codes = dec.decide_controls(
            est[..., None],
            none[..., None],
            np.full(est.shape + (1,), n),
            e.mean(axis=-1)[..., None],
            p_e[..., None],
            alpha,
        )
        codes = codes[..., 0]
    wrong = (codes == dec.V_DOES_NOT) | (codes == dec.V_REPRODUCES)
    return float(wrong.any(axis=-1).mean())


def aa_grid(
    n: int,
    studies: int,
    rng: np.random.Generator,
    *,
    cells: int = 3,
    alpha: float = 0.05,
    sd: float = NOISE_SD,
    floor: float = 2.4e-7,
) -> tuple[float, float]:
    """Share of correct grids (A/A = parent up to run noise) with an A/A FAIL in some cell:
    ``(Holm over the cells (v3), unadjusted per cell (v2))``."""
    d = rng.normal(0.0, sd, (studies, cells, n)) - rng.normal(0.0, sd, (studies, cells, n))
    p, _ = dec.two_sided_p(d)
    off = beyond_floor(d.mean(axis=-1), floor)
    holm = dec.holm(p)
    return float(((holm < alpha) & off).any(axis=-1).mean()), float(((p < alpha) & off).any(axis=-1).mean())


def _one_cell(parent, treat, control, rho: float, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """One cell per study, NLLs ``[S, n]``: ``(established [S], definite control verdict [S])``."""
    studies, n = parent.shape
    d = treat - parent
    p, _ = dec.headline_p(d[:, None])
    est = dec.decide_headline(np.full(p.shape, n), d.mean(axis=-1)[:, None], p, alpha)[1][:, 0]
    e = dec.reproduction_contrast(control - parent, d, rho)
    p_e, _ = dec.two_sided_p(e[:, None])
    _, codes = dec.decide_controls(
        est, np.zeros((studies, 1), bool), np.full((studies, 1), n), e.mean(axis=-1)[:, None], p_e, alpha
    )
    return est, (codes[:, 0] == dec.V_DOES_NOT) | (codes[:, 0] == dec.V_REPRODUCES)


def conditional_control_error(
    n: int,
    studies: int,
    rng: np.random.Generator,
    *,
    sd_parent: float,
    sd_treatment: float,
    sd_control: float | None = None,
    gain: float = -0.02,
    rho: float = 0.5,
    alpha: float = 0.05,
) -> tuple[float, float, float]:
    """A control at the boundary (f = rho: both definite verdicts wrong) in one cell.

    Returns ``(P(established), P(wrong | established), P(wrong and established))``; the control's sd
    defaults to the parent's.
    """
    sd_control = sd_parent if sd_control is None else sd_control
    parent = rng.normal(0.0, sd_parent, (studies, n))
    treat = gain + rng.normal(0.0, sd_treatment, (studies, n))
    control = rho * gain + rng.normal(0.0, sd_control, (studies, n))
    est, wrong = _one_cell(parent, treat, control, rho, alpha)
    p_est = float(est.mean())
    return p_est, float(wrong.sum() / max(est.sum(), 1)), float(wrong.mean())


def rounding_verdicts(
    n: int, studies: int, rng: np.random.Generator, *, alpha: float = 0.05, rho: float = 0.5
) -> tuple[float, float]:
    """Studies where every difference is float rounding: ``(share with a definite headline for a
    treatment of -1..0 ulp per seed, share with a definite verdict for a control exactly halfway
    between parent and a treatment with a large planted gain)``."""
    parent = 3.5 + rng.normal(0.0, 0.3, (studies, n))
    treat = np.where(rng.random((studies, n)) < 0.8, np.nextafter(parent, -np.inf), parent)
    d = (treat - parent)[:, None]  # [S, 1 cell, n]
    p, _ = dec.headline_p(d)
    _, est = dec.decide_headline(np.full(p.shape, n), d.mean(axis=-1), p, alpha)
    treat2 = parent - 0.05 + rng.normal(0.0, NOISE_SD, (studies, n))
    _, definite = _one_cell(parent, treat2, (parent + treat2) / 2, rho, alpha)
    return float(est.mean()), float(definite.mean())


def edge_table(studies: int = 20_000, seed: int = 20261227, alpha: float = 0.05) -> list[str]:
    """The edge-case tables (divergence, absence, grid families, A/A, conditional rates, rounding)
    as text lines."""
    rng = np.random.default_rng(seed)
    se = binomial_se(alpha, studies)
    lines = [
        f"Edge cases of the decision rules, alpha {alpha:g}, {studies} studies per row (binomial SE at alpha {se:.4f}), noise sd "
        f"{NOISE_SD} per run",
        "",
        "Divergence: true null, the treatment diverges where it would lose",
        f"{'n':>3} {'diverges at':>22} {'as loss':>10} {'dropped':>10}",
    ]
    for n in (3, 5, 8, 10):
        for rule in LOSS_RULES:
            r, r2 = divergence_null(n, studies, rng, rule=rule, alpha=alpha)
            lines.append(f"{n:>3} {rule:>22} {r:>10.4f} {r2:>10.4f}")
    delta = 0.006
    lines += [
        "",
        f"Gain absent (delta = {delta} nats/token): share of studies with 'gain absent' in some cell",
        f"{'n':>3} {'cells':>5} {'gain = delta':>13} {'gain = 0':>9}",
    ]
    for n in (3, 5, 10):
        for cells in (1, 3):
            lines.append(
                f"{n:>3} {cells:>5} {absence_rate(n, studies, rng, gain=delta, delta=delta, cells=cells):>13.4f}"
                f" {absence_rate(n, studies, rng, gain=0.0, delta=delta, cells=cells):>9.4f}"
            )
    lines += [
        "",
        "Families across the grid: 3 cells, one control per cell exactly at the boundary (f = rho); "
        "share of grids with >= 1 wrong definite verdict",
        f"{'n':>3} {'grid Holm':>10} {'per cell':>9}",
    ]
    for n in (5, 8):
        lines.append(
            f"{n:>3} {grid_boundary_controls(n, studies, rng):>10.4f} "
            f"{grid_boundary_controls(n, studies, rng, grid_family=False):>9.4f}"
        )
    lines += [
        "",
        "A/A check on a correct harness, 3 cells: share of grids with a FAIL",
        f"{'n':>3} {'Holm':>7} {'unadj.':>7}",
    ]
    for n in (3, 5, 10):
        a, b = aa_grid(n, studies, rng)
        lines.append(f"{n:>3} {a:>7.4f} {b:>7.4f}")
    lines += [
        "",
        "Controls conditional on the gate: f = 0.5 (both definite verdicts wrong), gain -0.02, rho 0.5",
        f"{'n':>3} {'sd parent':>9} {'sd treat':>9} {'P(est)':>7} {'P(wrong|est)':>12} {'P(wrong,est)':>12}",
    ]
    for n in (3, 5, 8):
        for sp, stt in ((0.005, 0.015), (0.015, 0.005), (0.01, 0.01)):
            pe, cond, joint = conditional_control_error(n, studies, rng, sd_parent=sp, sd_treatment=stt)
            lines.append(f"{n:>3} {sp:>9g} {stt:>9g} {pe:>7.4f} {cond:>12.4f} {joint:>12.4f}")
    lines += [
        "",
        f"Float rounding only (floor {FLOOR_NATS:g}): share with a definite verdict",
        f"{'n':>3} {'headline (ulp)':>14} {'halfway control':>15}",
    ]
    for n in (5, 8):
        h, c = rounding_verdicts(n, studies, rng, alpha=alpha)
        lines.append(f"{n:>3} {h:>14.4f} {c:>15.4f}")
    return lines
