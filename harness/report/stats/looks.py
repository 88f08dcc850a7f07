"""Sequential looks: alpha spending over the seed counts at which a grid is read (DESIGN section 8).

A plan with ``looks = [3, 5, 10]`` may be read at 3, 5 and 10 pairs. Its alpha is spent
over the looks with the O'Brien-Fleming-type Lan-DeMets function (Lan & DeMets 1983)

    alpha(t) = 2 - 2 Phi(z_{1 - alpha/2} / sqrt(t)),     t = n_k / n_K,

and look k tests at the increment ``Delta_k = alpha(t_k) - alpha(t_{k-1})`` (alpha(0) = 0).
The increments sum to alpha, so by the union bound the chance of a false claim over all
looks is at most alpha, whatever the data-dependent choice to add seeds (valid,
conservative: it ignores the correlation between looks).

Which look a cell is at (:func:`look_at`): the largest look <= its number of pairs n.
The test at look k uses the first ``n_k`` pairs in seed order, exactly the planned look
(extra pairs between looks, or past the last look, are shown descriptively and enter no
test: a look taken at a data-dependent n would not hold its level). With n below the
first look there is no look yet: nothing is tested.

Once a look has rejected, the rejection stands (a group-sequential trial that stopped
for efficacy stays stopped, even if seeds are added later for another question). This is
the *sequential p* (:func:`sequential_p`): the smallest level gamma whose spending would
have rejected at one of the looks so far, ``min_i Delta_i^{-1}(p_i)``; it is a valid
p-value (P(seq p <= gamma) <= gamma under the null, by the union bound) and Holm over
cells (or controls) is applied to it exactly as to an ordinary p. For one cell, seq p <
alpha exactly when some look's p is below its increment at alpha.

Validity of that shortcut needs every increment to grow with the level, which holds for gamma <
:data:`~harness.design.analysis_plan.LOOKS_MAX_ALPHA` = 2 (1 - Phi(1)) = 0.317 (then z_{1-gamma/2} > 1 >= t;
see reports/LOG.md): levels above it are never spent, and a plan with looks needs alpha below
it (:func:`harness.design.analysis_plan.parse_plan`). Above it the sequential p is still the exact
value (it decides nothing, and Holm prints it): look i's increment rises with gamma up to its own
peak :func:`increment_peak` (look 1's all the way to gamma = 1, where it is 1) and is inverted on that
increasing range; a p above a look's peak is one that look cannot reject at any level. The inversion
bisects on log gamma, so a p of 1e-15 keeps its significant digits.

Shapes: ``p`` ``[..., L]`` (L looks, NaN where a look is not reached), ``d`` ``[..., n]``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.special
import scipy.stats

from harness.report.stats.floors import verdict_mean

_BISECT_STEPS = 80  # halvings of [log 1e-300, log peak]: 690 / 2^80, below float resolution
_GAMMA_MIN = 1e-300  # levels below are 0 (a p below every look's increment at 1e-300)


def spent(alpha, t) -> np.ndarray | float:
    """Alpha spent by information fraction ``t`` (0 <= t <= 1): ``2 - 2 Phi(z_{1-alpha/2} / sqrt(t))``.

    Lan & DeMets (1983), O'Brien-Fleming type; ``spent(alpha, 1) = alpha``, ``spent(alpha, 0) = 0``.
    Broadcasts over ``alpha`` and ``t``. Phi through ``scipy.special`` (``ndtri``, ``ndtr``), the functions
    ``scipy.stats.norm.isf`` and ``.sf`` call, bit for bit, without their per-call argument checks
    (:func:`sequential_p` calls this 160 times per p).
    """
    alpha, t = np.asarray(alpha, dtype=float), np.asarray(t, dtype=float)
    z = -scipy.special.ndtri(alpha / 2)  # z_{1 - alpha/2} = norm.isf(alpha / 2)
    with np.errstate(divide="ignore"):
        out = np.where(t > 0, 2 * scipy.special.ndtr(-(z / np.sqrt(np.where(t > 0, t, 1.0)))), 0.0)
    return float(out) if out.ndim == 0 else out


def increments(alpha, looks) -> np.ndarray:
    """Levels of the looks ``[..., K]``: ``Delta_k = spent(t_k) - spent(t_{k-1})``, t_k = n_k / n_K.

    Args:
        alpha: the level spent over all looks (scalar or ``[...]``).
        looks: increasing seed counts n_1 < ... < n_K.

    Returns:
        ``[..., K]`` levels summing to alpha.
    """
    return _delta(np.asarray(alpha, dtype=float)[..., None], looks)


def _delta(gamma, looks) -> np.ndarray:
    """``Delta_i(gamma_i)`` elementwise: ``gamma`` ``[..., K]`` (or broadcastable) against the K looks."""
    looks = np.asarray(looks, dtype=float)
    t = looks / looks[-1]
    t_prev = np.concatenate([[0.0], t[:-1]])
    return np.asarray(spent(gamma, t)) - np.asarray(spent(gamma, t_prev))


@dataclass(frozen=True, slots=True)
class Look:
    """Where a cell with ``pairs`` pairs stands in the plan's looks.

    Attributes:
        k: the look reached, 1-based (the largest look <= pairs); 0 before the first look
            or when the plan has no looks.
        n_looks: K, the number of planned looks (0: none; the report reads once at alpha).
        n: the pairs the test uses: the look's seed count n_k (all pairs without looks,
            0 before the first look).
        level: the level of this look's test, ``Delta_k`` (alpha without looks; NaN before
            the first look).
        next_n: the next look's seed count (None at or past the last look, or without looks).
        pairs: the pairs available.
    """

    k: int
    n_looks: int
    n: int
    level: float
    next_n: int | None
    pairs: int

    @property
    def planned(self) -> bool:
        """The plan has looks."""
        return self.n_looks > 0

    @property
    def before_first(self) -> bool:
        """Looks are planned and none is reached yet."""
        return self.planned and self.k == 0

    @property
    def last(self) -> bool:
        """At (or past) the last look: the plan's alpha is spent."""
        return self.planned and self.k == self.n_looks


def look_at(pairs: int, looks: tuple[int, ...], alpha: float) -> Look:
    """The look a cell with ``pairs`` pairs is at (module docstring: largest look <= pairs)."""
    if not looks:
        return Look(k=0, n_looks=0, n=int(pairs), level=float(alpha), next_n=None, pairs=int(pairs))
    k = int(np.searchsorted(np.asarray(looks), pairs, side="right"))  # looks <= pairs
    level = float(increments(alpha, looks)[k - 1]) if k else float("nan")
    nxt = int(looks[k]) if k < len(looks) else None
    return Look(
        k=k, n_looks=len(looks), n=int(looks[k - 1]) if k else 0, level=level, next_n=nxt, pairs=int(pairs)
    )


def at_looks(
    d, looks: tuple[int, ...], test: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]
) -> tuple[np.ndarray, np.ndarray]:
    """p and mean at each look reached, from the first ``n_k`` differences ``d[..., :n_k]``.

    Args:
        d: ``[..., n]`` paired differences in seed order (nats/token).
        looks: the planned looks.
        test: ``d [..., m] -> (p [...], exact [...])``, e.g. :func:`harness.report.stats.decisions.headline_p`.

    Returns:
        ``(p [..., K], mean [..., K])``, NaN at looks beyond n.
    """
    d = np.asarray(d, dtype=float)
    n = d.shape[-1]
    shape = d.shape[:-1] + (len(looks),)
    p, mean = np.full(shape, np.nan), np.full(shape, np.nan)
    for i, nk in enumerate(looks):
        if nk <= n:
            p[..., i] = test(d[..., :nk])[0]
            mean[..., i] = verdict_mean(d[..., :nk])  # exact where it meets the floor
    return p, mean


def increment_peak(looks: tuple[int, ...]) -> np.ndarray:
    """``[K]`` the level gamma at which look i's increment ``Delta_i(gamma)`` peaks (1 for the first look).

    With z = z_{1-gamma/2}, ``Delta_i = 2 [Phi-bar(z / sqrt(t_i)) - Phi-bar(z / sqrt(t_{i-1}))]`` has
    ``dDelta_i/dz = 0`` where ``phi(z / a) / a = phi(z / b) / b`` (a = sqrt(t_i), b = sqrt(t_{i-1})):
    ``z*^2 = ln(t_i / t_{i-1}) / (1 / t_{i-1} - 1 / t_i)``; Delta_i rises with gamma for z > z*, i.e. for
    gamma < 2 Phi-bar(z*). z* <= 1 for every pair of looks, so the peak is >= ``LOOKS_MAX_ALPHA``.
    """
    t = np.asarray(looks, dtype=float) / float(looks[-1])
    peak = np.ones(t.shape)
    if t.size > 1:
        a, b = t[1:], t[:-1]
        z = np.sqrt(np.log(a / b) / (1 / b - 1 / a))
        peak[1:] = 2 * scipy.stats.norm.sf(z)
    return peak


def sequential_p(p, looks: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """The sequential p over the looks reached: ``min_i Delta_i^{-1}(p_i)`` (module docstring).

    Each ``Delta_i^{-1}(p_i)`` (the least level gamma whose i-th increment equals p_i) is found by
    bisection on log gamma over look i's increasing range ``[1e-300, increment_peak_i]``, vectorised;
    a p above that look's peak increment is not rejected at that look at any level (+inf), and the
    first look's increment reaches 1, so a reached first look always gives a value <= 1.

    Args:
        p: ``[..., K]`` nominal p at each look (NaN: look not reached).
        looks: the K planned looks.

    Returns:
        ``(seq_p [...], deciding [...])``: the sequential p (NaN when no look is reached) and
        the 0-based index of the look attaining it (-1 when none).
    """
    p = np.asarray(p, dtype=float)
    reached = np.isfinite(p)
    peak = np.broadcast_to(increment_peak(looks), p.shape)
    target = np.where(reached, p, 1.0)
    lo, hi = np.full(p.shape, np.log(_GAMMA_MIN)), np.log(peak)
    for _ in range(_BISECT_STEPS):
        mid = (lo + hi) / 2
        above = _delta(np.exp(mid), looks) >= target  # Delta_i(mid) >= p_i: mid rejects, go lower
        hi, lo = np.where(above, mid, hi), np.where(above, lo, mid)
    gamma = np.minimum(np.exp(hi), peak)
    gamma = np.where(_delta(peak, looks) >= target, gamma, np.inf)  # above the peak: never rejected
    gamma = np.where(_delta(_GAMMA_MIN, looks) >= target, 0.0, gamma)
    gamma = np.where(reached, gamma, np.inf)
    deciding = np.argmin(gamma, axis=-1)
    seq = np.minimum(np.take_along_axis(gamma, deciding[..., None], axis=-1)[..., 0], 1.0)
    none = ~reached.any(axis=-1)
    return np.where(none, np.nan, seq), np.where(none, -1, deciding)


def look_text(look) -> str:
    """'look 2 of 3 (5 of 6 pairs tested), level 0.00523' / 'before the first look (3 pairs)' / ''."""
    if not look.planned:
        return ""
    if look.before_first:
        return f"before the first look ({look.pairs} pair(s), first look at {look.next_n})"
    tested = f"{look.n} of {look.pairs} pairs tested" if look.n < look.pairs else f"{look.n} pairs"
    return f"look {look.k} of {look.n_looks} ({tested}), level {look.level:.3g}"


__all__ = [
    "look_text",
    "spent",
    "increments",
    "increment_peak",
    "Look",
    "look_at",
    "at_looks",
    "sequential_p",
]
