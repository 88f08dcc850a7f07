"""Power of the paired t-test: MDE, power at a planned effect, seeds needed (DESIGN sections 6, 8).

All from the noncentral t distribution via statsmodels ``TTestPower`` (one-sample /
paired t-test, df = n - 1; Cohen 1988, ch. 2). Effects and SDs are in nats/token; the
standardised effect is ``effect / sd``. ``alternative`` is ``"one-sided"`` (the headline:
H1 mean d < 0, tested at alpha in one tail) or ``"two-sided"`` (control contrasts).

Figures are computed from a *planned* effect (the plan's ``min_effect_nats``), never
from the observed one: an observed effect taken as the truth makes every study look
underpowered by exactly as much as it was unlucky, and its seeds-needed explodes near 0.
The SD is the nuisance parameter: the observed paired SD of the cell (or, in
``harness plan``, a pilot's). Seeds needed above ``max_seeds`` is "not reachable at
this budget", never a number.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
import scipy.integrate
import scipy.optimize
import scipy.special
import scipy.stats
from statsmodels.stats.power import TTestPower

from harness.design.analysis_plan import MIN_SEEDS, AnalysisPlan
from harness.report.stats.looks import increments, look_at

ALTERNATIVES = {"one-sided": "larger", "two-sided": "two-sided"}


def _alt(alternative: str) -> str:
    try:
        return ALTERNATIVES[alternative]
    except KeyError:
        raise ValueError(f"alternative must be one of {list(ALTERNATIVES)}, got {alternative!r}") from None


def _usable_sd(sd: float) -> bool:
    return sd is not None and math.isfinite(sd) and sd > 0


def power_at(effect_nats: float, sd: float, n, alpha: float, alternative: str) -> np.ndarray | float:
    """Power of the paired t-test with ``n`` pairs to detect a true mean |d| = ``effect_nats``.

    statsmodels' noncentral t (``TTestPower``); where scipy's noncentral t returns NaN (it does at 3-6
    pairs and small levels, inside the range an MDE is searched in: a NaN is never a power) the same
    power by :func:`_power_exact`. The two agree to 1.3e-11 wherever both are finite.

    Args:
        effect_nats: the planned gain size (> 0, nats/token).
        sd: SD of the paired differences (nats/token).
        n: pairs (int or array of ints, each >= 2).
        alpha: level (one tail for ``one-sided``).
        alternative: ``one-sided`` or ``two-sided``.

    Returns:
        power in [0, 1] (NaN when sd is not a positive finite number).
    """
    if not _usable_sd(sd):
        return float("nan") if np.ndim(n) == 0 else np.full(np.shape(n), np.nan)
    es = abs(effect_nats) / sd
    out = np.array(
        TTestPower().power(
            effect_size=es, nobs=np.asarray(n, dtype=float), alpha=alpha, alternative=_alt(alternative)
        ),
        dtype=float,
    )
    flat, ns = out.reshape(-1), np.broadcast_to(np.asarray(n), out.shape).reshape(-1)
    for i in np.flatnonzero(np.isnan(flat)):
        flat[i] = _power_exact(es, int(ns[i]), alpha, alternative == "two-sided")
    return float(flat[0]) if out.ndim == 0 else flat.reshape(out.shape)


def _power_exact(es: float, n: int, alpha: float, two_sided: bool) -> float:
    """Power of the one-sample t-test at standardised effect ``es`` with ``n`` values, without the noncentral
    t: given the sample sd ``s`` (``(n - 1) s^2 / sd^2`` is chi-square with n - 1 df, independent of the
    mean), the t statistic exceeds the critical ``c`` where the normal mean does, ``P = Phi(es sqrt(n) - c s /
    sd)`` (plus ``Phi(-es sqrt(n) - c s / sd)`` two-sided), integrated over the chi-square density
    (``scipy.integrate.quad``; as :func:`tost_power`)."""
    df = n - 1
    c = float(scipy.stats.t.isf(alpha / 2 if two_sided else alpha, df))
    nc = es * math.sqrt(n)
    log_norm = math.lgamma(df / 2) + (df / 2) * math.log(2)  # the chi-square density's normaliser

    def tail(q: float) -> float:
        s = math.sqrt(q / df)
        p = scipy.special.ndtr(nc - c * s) + (scipy.special.ndtr(-nc - c * s) if two_sided else 0.0)
        return float(p) * math.exp((df / 2 - 1) * math.log(q) - q / 2 - log_norm)

    lo, hi = (float(scipy.stats.chi2.ppf(x, df)) for x in (1e-15, 1 - 1e-15))
    value, _ = scipy.integrate.quad(tail, lo, hi, limit=200, epsabs=1e-14, epsrel=1e-12)
    return float(min(max(value, 0.0), 1.0))


def mde(sd: float, n: int, alpha: float, power: float, alternative: str) -> float:
    """Minimal detectable effect (nats/token): the true mean |d| that ``n`` pairs detect with
    probability ``power`` at level ``alpha`` (solves :func:`power_at` = power for the effect
    with a bracketing root finder; power rises monotonically in the effect).

    NaN with fewer than :data:`harness.design.analysis_plan.MIN_SEEDS` pairs or when sd is not positive.
    """
    if n < MIN_SEEDS or not _usable_sd(sd):
        return float("nan")

    alt = _alt(alternative)

    def gap(es: float) -> float:
        pw = float(TTestPower().power(effect_size=es, nobs=n, alpha=alpha, alternative=alt))
        return (_power_exact(es, n, alpha, alt == "two-sided") if math.isnan(pw) else pw) - power

    # brentq to 1e-13 (statsmodels' solve_power stops at ~3e-7).
    es = scipy.optimize.brentq(gap, 1e-9, 100.0, xtol=1e-13, rtol=1e-13)
    return float(es) * sd


@dataclass(frozen=True, slots=True)
class SeedsNeeded:
    """Seeds (pairs) a paired t-test needs to detect a planned effect.

    Attributes:
        n: the smallest n in [3, max_seeds] whose power reaches the target; None when no
            n up to ``max_seeds`` does ("not reachable at this budget") or it cannot be
            computed (no SD, no planned effect).
        reachable: ``n`` is not None.
        power_at_max: the power at ``max_seeds`` (NaN when it cannot be computed).
        max_seeds: the cap it was searched up to (with looks: the last look).
        at_looks: searched over the plan's looks only, each at its own level
            (:func:`planned_seeds`).
    """

    n: int | None
    reachable: bool
    power_at_max: float
    max_seeds: int
    at_looks: bool = False


def seeds_needed(
    effect_nats: float | None, sd: float, alpha: float, power: float, alternative: str, max_seeds: int
) -> SeedsNeeded:
    """Smallest number of pairs n (3 <= n <= ``max_seeds``) with power >= ``power``.

    Power is computed for every integer n in range (no root finding), so the answer is
    exactly the first n whose power reaches the target. ``effect_nats`` None (no planned
    effect) or an unusable SD gives ``n = None`` with ``power_at_max`` NaN.
    """
    if effect_nats is None or not effect_nats > 0 or not _usable_sd(sd):
        return SeedsNeeded(n=None, reachable=False, power_at_max=float("nan"), max_seeds=max_seeds)
    ns = np.arange(MIN_SEEDS, max_seeds + 1)
    pw = np.atleast_1d(power_at(effect_nats, sd, ns, alpha, alternative))
    hit = np.flatnonzero(pw >= power)
    if hit.size == 0:
        return SeedsNeeded(n=None, reachable=False, power_at_max=float(pw[-1]), max_seeds=max_seeds)
    return SeedsNeeded(n=int(ns[hit[0]]), reachable=True, power_at_max=float(pw[-1]), max_seeds=max_seeds)


def contrast_effect(min_effect_nats: float | None, rho: float) -> float | None:
    """The planned effect of a reproduction contrast ``e = c - (1 - rho) p - rho t``.

    With a true gain ``G = t - p`` of the planned size, a control that reproduces none of
    it has mean e = ``rho |G|`` and one that reproduces all of it ``(1 - rho) |G|`` (in
    opposite directions); the smaller, ``min(rho, 1 - rho) * min_effect_nats``, is what
    the contrast must detect for either definite verdict.
    """
    return None if min_effect_nats is None else min(rho, 1.0 - rho) * min_effect_nats


def look_mde(sd: float, pairs: int, plan: AnalysisPlan, alternative: str) -> float:
    """MDE (nats/token) of the test the report runs on ``pairs`` pairs under ``plan``.

    Without looks: :func:`mde` at alpha with all pairs. With looks (DESIGN section 8):
    the look reached (:func:`harness.report.stats.looks.look_at`), its seed count n_k and its level
    Delta_k; NaN before the first look.
    """
    look = look_at(pairs, plan.looks, plan.alpha)
    if look.before_first:
        return float("nan")
    return mde(sd, look.n, look.level, plan.power, alternative)


def planned_seeds(effect_nats: float | None, sd: float, plan: AnalysisPlan, alternative: str) -> SeedsNeeded:
    """Seeds needed for ``effect_nats`` under ``plan``.

    Without looks: :func:`seeds_needed` at alpha up to ``max_seeds``. With looks: the first
    look n_k whose power at its own level Delta_k reaches the plan's power. That power is a
    lower bound on the chance the sequential design has rejected by look k (the earlier looks
    only add to it), so the answer is conservative; no look reaching it: not reachable
    (``power_at_max`` = the power at the last look, ``max_seeds`` = the last look).
    """
    if not plan.looks:
        return seeds_needed(effect_nats, sd, plan.alpha, plan.power, alternative, plan.max_seeds)
    last = plan.looks[-1]
    if effect_nats is None or not effect_nats > 0 or not _usable_sd(sd):
        return SeedsNeeded(n=None, reachable=False, power_at_max=float("nan"), max_seeds=last, at_looks=True)
    pw = [
        power_at(effect_nats, sd, n, float(level), alternative)
        for n, level in zip(plan.looks, increments(plan.alpha, plan.looks))
    ]
    hit = next((n for n, p in zip(plan.looks, pw) if p >= plan.power), None)
    return SeedsNeeded(
        n=hit, reachable=hit is not None, power_at_max=float(pw[-1]), max_seeds=last, at_looks=True
    )


def holm_share_plan(plan: AnalysisPlan, share: int) -> AnalysisPlan:
    """``plan`` at level ``alpha / share``: the level Holm gives a contrast that must be rejected while
    ``share - 1`` other members of its family are not (Holm's step ``m - share + 1`` of m; ``share`` = m
    is its first step, Bonferroni). An MDE or seeds-needed computed at the plan's alpha overstates the
    power of a contrast tested in such a family (DESIGN sections 6, 12). Looks are kept (their
    increments are then spent from ``alpha / share``).

    Raises:
        ValueError: ``share`` < 1.
    """
    if share < 1:
        raise ValueError(f"a Holm share is a number of family members >= 1, got {share}")
    return plan if share == 1 else dataclasses.replace(plan, alpha=plan.alpha / share)


# Independent run noise sigma^2 per run (seed effects cancel in every paired contrast): a single
# difference y_1 - y_0 has variance 2 sigma^2, a factor's main effect ((y_10 - y_00) + (y_11 - y_01)) / 2
# sigma^2, the interaction y_11 - y_10 - y_01 + y_00 4 sigma^2 (DESIGN section 12). So the interaction's
# sd is sqrt(2) x a single difference's and 2 x a main effect's: for the same size it needs about 4x
# the seeds of a main effect (about 2x those of a single difference).
INTERACTION_SD_FACTOR = math.sqrt(2.0)


def interaction_sd(sd_single_difference: float) -> float:
    """The paired sd (nats/token) of the interaction contrast implied by a single difference's sd:
    ``sqrt(2) x sd_single_difference`` (independent run noise, :data:`INTERACTION_SD_FACTOR`)."""
    return INTERACTION_SD_FACTOR * sd_single_difference


def interaction_seeds(
    sd_single_difference: float, plan: AnalysisPlan, *, sd_interaction: float | None = None
) -> SeedsNeeded:
    """Seeds a 2 x 2 factorial needs to detect an interaction of size ``plan.min_effect_nats`` (DESIGN 12).

    The interaction I = (y_11 - y_10) - (y_01 - y_00) is tested two-sided per seed like any paired
    contrast; its planned size is the plan's ``min_effect_nats`` (one factor's gain absorbed
    entirely by the other). Its sd is ``sd_interaction`` when measured (a pilot's factorial rows),
    else :func:`interaction_sd` of ``sd_single_difference`` (e.g. the headline's sd). Under the
    plan's looks as :func:`planned_seeds`.

    Args:
        sd_single_difference: paired sd of one difference y_1 - y_0 (nats/token).
        plan: the analysis plan (alpha, power, looks, max_seeds, min_effect_nats).
        sd_interaction: the interaction's own paired sd (nats/token), if known.

    Returns:
        :class:`SeedsNeeded` (``n`` None: not reachable, or no ``min_effect_nats`` / no usable sd).
    """
    sd = sd_interaction if sd_interaction is not None else interaction_sd(sd_single_difference)
    return planned_seeds(plan.min_effect_nats, sd, plan, "two-sided")


def tost_power(margin_nats: float, sd: float, n: int, alpha: float, bias_nats: float = 0.0) -> float:
    """Power of the two one-sided t-tests (TOST; Schuirmann 1987) of H0 ``|mean| >= margin_nats`` at level
    ``alpha`` with ``n`` pairs whose true mean is ``bias_nats`` (nats/token) and sd ``sd``: the chance that
    the (1 - 2 alpha) t interval ``mean +- t_{1-alpha, n-1} s / sqrt(n)`` lies inside ``(-margin, +margin)``.

    Exact, not the noncentral-t approximation: given the sample sd ``s`` (``(n - 1) s^2 / sd^2`` is
    chi-square with n - 1 df, independent of the mean) the mean must lie within ``margin - t s / sqrt(n)``
    of 0, a normal probability; that is integrated over the chi-square density (``scipy.integrate.quad``).

    Returns:
        power in [0, 1]; NaN with n < 2, a non-positive margin or an unusable sd.
    """
    if n < 2 or not margin_nats > 0 or not _usable_sd(sd):
        return float("nan")
    df = n - 1
    t = float(scipy.stats.t.ppf(1 - alpha, df))
    se = sd / math.sqrt(n)
    q_max = df * (margin_nats / (t * se)) ** 2  # beyond it the interval is wider than the margins

    log_norm = math.lgamma(df / 2) + (df / 2) * math.log(2)  # the chi-square density's normaliser

    def inside(q: float) -> float:
        half = margin_nats - t * se * math.sqrt(q / df)  # the mean must lie in (-half, +half) + bias
        if half <= 0 or q <= 0:
            return 0.0
        p = scipy.special.ndtr((half - bias_nats) / se) - scipy.special.ndtr((-half - bias_nats) / se)
        return float(p) * math.exp((df / 2 - 1) * math.log(q) - q / 2 - log_norm)  # x chi2.pdf(q, df)

    # the chi-square mass lies in [lo, hi] (all but 1e-12 of it): integrate there, where quad sees it
    lo, hi = (float(scipy.stats.chi2.ppf(x, df)) for x in (1e-12, 1 - 1e-12))
    value, _ = scipy.integrate.quad(inside, lo, min(q_max, hi), limit=200, epsabs=1e-12)
    return float(min(max(value, 0.0), 1.0)) if q_max > lo else 0.0


def tost_pairs_needed(
    margin_nats: float, sd: float, alpha: float, power: float, max_pairs: int = 1000
) -> int | None:
    """The fewest pairs (:data:`~harness.design.analysis_plan.MIN_SEEDS` <= n <= ``max_pairs``) whose TOST at ``margin_nats`` has power >= ``power`` when
    the true mean is 0 (:func:`tost_power`): how many pairs would exclude a bias of the margin if there
    were none. None when even ``max_pairs`` do not, or the sd or margin is unusable.

    Power rises with n, so the search is a bisection on n.
    """
    if not margin_nats > 0 or not _usable_sd(sd):
        return None
    if tost_power(margin_nats, sd, max_pairs, alpha) < power:
        return None
    if tost_power(margin_nats, sd, MIN_SEEDS, alpha) >= power:
        return MIN_SEEDS
    low, high = MIN_SEEDS, max_pairs  # power(low) < power <= power(high)
    while high - low > 1:
        mid = (low + high) // 2
        if tost_power(margin_nats, sd, mid, alpha) >= power:
            high = mid
        else:
            low = mid
    return high
