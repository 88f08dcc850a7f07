"""The tests a Provenance section runs over hardware classes (DESIGN section 13), as functions of arrays.

* **Agreement** of the classes on one comparison: Welch's heteroscedastic F (Welch 1951) of the classes'
  mean paired differences (:func:`welch_anova`) as the statistic, with two p's, the test's p the larger
  (:func:`class_agreement`): by permutation of the class labels over the pairs (every distinct relabelling
  where there are at most :data:`EXACT_LIMIT`, else :data:`PERMUTATIONS` seeded draws; exact when the
  hardware changes nothing, at any split and any law), and from the F law on ``(k - 1, min n_i - 1)`` df
  (:func:`spread_p`: valid when the hardware changes only a class's spread, where the permutation is not: the
  classes are then not exchangeable). The larger p rejects only where both do, so its level holds
  wherever either p's does (DESIGN section 13 gives the false alarms simulated); and the shift it detects
  (:func:`agreement_mde`, noncentral F).
* **Balance** of a comparison over classes, as pairs: the exact test that each straddling pair's orientation
  is a fair coin (:func:`orientation_test`; the sign test for two classes, Bowker's statistic beyond).

Which pairs enter, the floor, Holm and the words are :mod:`harness.report.stats.provenance`'s.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections import Counter
from dataclasses import dataclass

import numpy as np
import scipy.optimize
import scipy.stats

from harness.report.stats.floors import ZERO_SPREAD_NATS

PERMUTATIONS = 9_999  # seeded Monte Carlo relabellings where the distinct ones exceed EXACT_LIMIT
EXACT_LIMIT = 10_000  # at most this many distinct relabellings: every one is enumerated (an exact p)
SEED = 20261206  # the permutations' seed: a report is the same bytes every time it is built


@dataclass(frozen=True, slots=True)
class Agreement:
    """:func:`class_agreement`'s answer: Welch's ``f`` on ``(df1, df2)`` df (Welch's own), the test's ``p`` (the
    larger of ``p_permutation`` and ``p_spread``), the permutation's (``exact``: every distinct relabelling
    counted, else ``draws`` seeded ones), :func:`spread_p`'s, and ``min_p``, the smallest p this test can give
    at these class sizes (the permutation's)."""

    f: float
    df1: float
    df2: float
    p: float
    exact: bool
    draws: int
    min_p: float
    p_permutation: float
    p_spread: float


def welch_anova(groups: list[np.ndarray]) -> tuple[float, float, float, float]:
    """Welch's heteroscedastic one-way ANOVA (Welch 1951, Biometrika 38: 330-336).

    H0: the groups' means are equal, variances free. ``w_i = n_i / s_i^2``,
    ``F = [sum w_i (m_i - m_w)^2 / (k - 1)] / [1 + 2 (k - 2) / (k^2 - 1) * L]``, with
    ``L = sum (1 - w_i / W)^2 / (n_i - 1)``, on ``(k - 1, (k^2 - 1) / (3 L))`` degrees of freedom.
    With two groups it is Welch's t-test (F = t^2).

    Args:
        groups: k >= 2 one-dimensional arrays, each with n >= 2 and non-zero variance.

    Returns:
        ``(F, df1, df2, p)``, p the upper tail of F.

    Raises:
        ValueError: fewer than two groups, a group with fewer than two values or zero variance.
    """
    if len(groups) < 2:
        raise ValueError(f"Welch's ANOVA needs at least 2 groups, got {len(groups)}")
    n = np.array([g.size for g in groups], float)
    if (n < 2).any():
        raise ValueError(
            f"Welch's ANOVA needs at least 2 values per group, got sizes {n.astype(int).tolist()}"
        )
    var = np.array([g.var(ddof=1) for g in groups])
    if (var <= 0).any():
        raise ValueError("Welch's ANOVA needs a non-zero variance in every group")
    f, df2, _ = welch_statistic(np.array([g.mean() for g in groups]), var, n)
    df1 = float(len(groups) - 1)
    return float(f), df1, float(df2), float(scipy.stats.f.sf(f, df1, df2))


def welch_statistic(means, var, n) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Welch's F, its denominator df and its denominator correction ``c`` over the last axis (k groups):
    ``means``, ``var`` [..., k], ``n`` [k] (the arithmetic of :func:`welch_anova`, on many sets at once)."""
    k = n.size
    w = n / var
    total = w.sum(axis=-1, keepdims=True)
    m_w = (w * means).sum(axis=-1, keepdims=True) / total
    lam = ((1 - w / total) ** 2 / (n - 1)).sum(axis=-1)
    c = 1 + 2 * (k - 2) / (k * k - 1) * lam
    return (w * (means - m_w) ** 2).sum(axis=-1) / (k - 1) / c, (k * k - 1) / (3 * lam), c


@functools.lru_cache(maxsize=64)
def _relabellings(sizes: tuple[int, ...]) -> np.ndarray | None:
    """Every distinct assignment of ``sum(sizes)`` pairs to classes of these sizes, ``[P, n]`` class indices
    (the observed one, ``0...0 1...1 ...``, first); None where there are more than :data:`EXACT_LIMIT`.
    Cached per sizes (read-only): a grid's comparisons share their splits."""
    n = sum(sizes)
    count = math.factorial(n) // math.prod(math.factorial(s) for s in sizes)
    if count > EXACT_LIMIT:
        return None
    out = []

    def place(free: tuple[int, ...], k: int, row: list[int]) -> None:
        if k == len(sizes) - 1:
            for i in free:
                row[i] = k
            out.append(list(row))
            return
        for chosen in itertools.combinations(free, sizes[k]):
            for i in chosen:
                row[i] = k
            place(tuple(i for i in free if i not in chosen), k + 1, row)

    place(tuple(range(n)), 0, [0] * n)
    table = np.array(out)
    table.flags.writeable = False
    return table


def _welch_over(values: np.ndarray, labels: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Welch's F of ``values`` [..., n] split by each row of ``labels`` [P, n] (class sizes ``sizes`` [k]),
    [..., P]. A relabelled class whose values all tie has its variance floored at a tiny positive value, so its
    F is finite (large where that class's mean stands apart) and compared as any other; a NaN F (never
    expected) counts as extreme."""
    onehot = (labels == np.arange(sizes.size)[:, None, None]).astype(float)  # [k, P, n]
    s1 = np.stack([values @ o.T for o in onehot], axis=-1)  # [..., P, k]
    s2 = np.stack([(values * values) @ o.T for o in onehot], axis=-1)
    means = s1 / sizes
    var = np.maximum((s2 - sizes * means * means) / (sizes - 1), (ZERO_SPREAD_NATS * 1e-3) ** 2)
    f = welch_statistic(means, var, sizes)[0]
    return np.where(np.isnan(f), np.inf, f)


def permutation_p(
    values: np.ndarray, sizes, f: np.ndarray, draws: int = PERMUTATIONS, seed: int = SEED
) -> tuple[np.ndarray, bool, int, float]:
    """The permutation p of Welch's F for sets of pooled pairs at once: ``values`` [S, n] (each row the classes'
    paired differences in class order, sizes ``sizes`` [k]), ``f`` [S] their observed Welch F.

    Returns ``(p [S], exact, relabellings, min_p)``: the share of relabellings whose F is at least the observed
    (within a relative 1e-9: float ties count as ties), every distinct one where there are at most
    :data:`EXACT_LIMIT` (``exact``), else ``(1 + hits) / (1 + draws)`` over ``draws`` relabellings drawn with
    ``seed`` (the same draws for every row; each row's p is valid at any number of draws). ``min_p``: the
    fewest relabellings as extreme as any (the observed one and those that only swap classes of equal size)
    over all of them, or ``1 / (1 + draws)``. :func:`class_agreement` (one row) and the simulation
    (:mod:`harness.report.simulation.provenance`, many) both count here."""
    sizes = np.asarray(sizes)
    labels = _relabellings(tuple(int(x) for x in sizes))
    f = np.asarray(f, dtype=float)[:, None]
    if labels is not None:
        equal_swaps = math.prod(math.factorial(c) for c in Counter(sizes.tolist()).values())
        hits = (_welch_over(values, labels, sizes) >= f * (1 - 1e-9)).sum(axis=-1)
        return hits / len(labels), True, len(labels), equal_swaps / len(labels)
    observed = np.repeat(np.arange(sizes.size), sizes)
    drawn = np.random.default_rng(seed).permuted(np.tile(observed, (draws, 1)), axis=1)
    hits = (_welch_over(values, drawn, sizes) >= f * (1 - 1e-9)).sum(axis=-1)
    return (1 + hits) / (1 + draws), False, draws, 1 / (1 + draws)


def spread_p(f: float | np.ndarray, sizes) -> float | np.ndarray:
    """The p of Welch's F from the F law on ``(k - 1, min n_i - 1)`` df: the df of the smallest class's variance
    alone, not Welch's estimated df2. For two classes this is Welch's t against Student's t on ``min(n1, n2) -
    1`` df, whose level holds at every ratio of the two variances (Mickey and Brown 1966; Hsu 1938); Welch's
    own df2 is liberal when a 3-pair class is the noisier (df2 is estimated from its 2-df variance). For more
    classes the same df, checked by simulation (:mod:`harness.report.simulation.provenance`). ``sizes``: the
    k class sizes."""
    sizes = np.asarray(sizes)
    out = scipy.stats.f.sf(f, sizes.size - 1, int(sizes.min()) - 1)
    return float(out) if np.ndim(out) == 0 else out


def class_agreement(groups: list[np.ndarray], draws: int = PERMUTATIONS, seed: int = SEED) -> Agreement:
    """H0 "the hardware does not move the classes' mean paired difference", with Welch's F as the statistic: p =
    the larger of the permutation test's p (H0: the classes' paired differences are exchangeable) and
    :func:`spread_p`'s (H0: equal means, spreads free; module docstring).

    The permutation p and ``min_p``: :func:`permutation_p` (the report's :data:`PERMUTATIONS` and :data:`SEED`
    give the same bytes every build; a simulation passes fewer draws and its own seeds).

    Args:
        groups: k >= 2 arrays of paired differences (nats/token), each with >= 2 values and non-zero spread.

    Raises:
        ValueError: as :func:`welch_anova`.
    """
    f, df1, df2, _ = welch_anova(groups)
    sizes = np.array([g.size for g in groups])
    p, exact, count, min_p = permutation_p(np.concatenate(groups)[None], sizes, np.array([f]), draws, seed)
    perm, spread = float(p[0]), spread_p(f, sizes)
    return Agreement(f, df1, df2, max(perm, spread), exact, count, min_p, perm, spread)


def agreement_mde(groups: list[np.ndarray], level: float, power: float) -> float:
    """The smallest shift (nats/token) of one class's mean paired difference against the others' that the
    agreement test detects with probability ``power`` at ``level``: for each class j shifted by Delta, Welch's
    F is taken as noncentral F on (k - 1, min n_i - 1) df (the df :func:`spread_p` judges it on, the larger of
    the test's two p's as a rule) with noncentrality ``Delta^2 w_j (W - w_j) / (W c)`` (``w = n / s^2`` from the
    classes' sample variances, c Welch's denominator correction; for two classes Welch's t with noncentrality
    Delta / sqrt(s1^2/n1 + s2^2/n2)); the MDE is the largest over j (the least favourable class). Checked against the permutation test by simulation
    (:mod:`harness.report.simulation.provenance`). NaN with fewer than 2 usable groups."""
    if len(groups) < 2:
        return math.nan
    n = np.array([g.size for g in groups], float)
    var = np.array([g.var(ddof=1) for g in groups])
    if (n < 2).any() or not (var > 0).all():
        return math.nan
    k = n.size
    w = n / var
    total = w.sum()
    lam = float(((1 - w / total) ** 2 / (n - 1)).sum())
    c = 1 + 2 * (k - 2) / (k * k - 1) * lam
    df1, df2 = k - 1, float(n.min()) - 1
    crit = float(scipy.stats.f.isf(level, df1, df2))

    def gap(delta: float, wj: float) -> float:
        nc = delta * delta * wj * (total - wj) / total / c
        return float(scipy.stats.ncf.sf(crit, df1, df2, nc)) - power

    out = []
    for wj in w:
        unit = math.sqrt(total / (wj * (total - wj)))  # the shift whose noncentrality is 1 (times sqrt c)
        high = unit
        while gap(high, wj) < 0:
            high *= 2
        out.append(scipy.optimize.brentq(gap, 0.0, high, args=(wj,), xtol=unit * 1e-10))
    return float(max(out))


def orientation_test(oriented: dict[tuple[str, str], int]) -> float:
    """Exact two-sided p of H0 "each straddling pair's orientation is a fair coin" (the balance test that
    respects pairing; module docstring).

    ``oriented``: ``(class of first, class of second) -> pairs``. Per unordered pair of classes {a, b}
    with ``m`` straddling pairs, the number with the first variant on a is Binomial(m, 1/2) under H0,
    independently across class pairs. The statistic is Bowker's ``sum (n_ab - n_ba)^2 / (n_ab + n_ba)``;
    p = the probability under H0 of a statistic at least the observed (exact enumeration of every count
    vector; the sign test's two-sided p with two classes). 1 without a straddling pair.
    """
    totals: dict[tuple[str, str], tuple[int, int]] = {}
    for (a, b), count in oriented.items():
        key = (a, b) if a < b else (b, a)
        ab, ba = totals.get(key, (0, 0))
        totals[key] = (ab + count, ba) if (a, b) == key else (ab, ba + count)
    if not totals:
        return 1.0
    ms = [ab + ba for ab, ba in totals.values()]
    observed = sum((ab - ba) ** 2 / (ab + ba) for ab, ba in totals.values())
    # the distribution of the statistic: a convolution over class pairs of (statistic, probability)
    dist = {0.0: 1.0}
    for m in ms:
        pmf = scipy.stats.binom.pmf(np.arange(m + 1), m, 0.5)
        terms = [((2 * j - m) ** 2 / m, float(pmf[j])) for j in range(m + 1)]
        merged: dict[float, float] = {}
        for s, p in dist.items():
            for t, q in terms:
                key = round(s + t, 9)
                merged[key] = merged.get(key, 0.0) + p * q
        dist = merged
    return float(min(1.0, sum(p for s, p in dist.items() if s >= observed - 1e-9)))


__all__ = [
    "Agreement",
    "EXACT_LIMIT",
    "PERMUTATIONS",
    "SEED",
    "agreement_mde",
    "class_agreement",
    "orientation_test",
    "permutation_p",
    "spread_p",
    "welch_anova",
    "welch_statistic",
]
