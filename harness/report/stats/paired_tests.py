"""Tests on paired differences ``d`` (nats/token), exact where they can be (DESIGN section 6).

Array functions take ``d`` of shape ``[..., n]`` (n = pairs, leading axes = independent
sets of differences, e.g. simulated studies) and return arrays of shape ``[...]``:

* :func:`t_test`: paired (one-sample) t-test of mean d = 0, two-sided and one-sided
  (H1: mean d < 0), with the 95 % t interval. With zero spread (sd = 0) t is 0/0 or
  +-inf: its p and interval are NaN (undefined), never 0.
* :func:`sign_flip_p`: the exact sign-flip permutation p of the mean over all 2^n sign
  patterns (Fisher 1935; Good 2005, ch. 3), counted by meet-in-the-middle: the 2^(n/2)
  partial sums of each half are enumerated and the pairs counted with a sorted search,
  so n <= 40 is exact in well under a second. With zero spread it is the only p.
* :func:`wilcoxon_p`: exact Wilcoxon signed-rank p on the non-zero d only (zeros are
  dropped, Wilcoxon 1945), with midranks for tied |d|; the null distribution of the
  positive rank sum over all 2^m sign patterns is counted exactly by dynamic
  programming on the doubled (integer) ranks: deterministic, no Monte Carlo.
* :func:`sign_test_p`: exact two-sided binomial sign test on the non-zero d.
* :func:`min_attainable_p`: the smallest two-sided p the three exact tests can reach with
  m non-zero differences, ``2 ** (1 - m)`` (0.0625 at m = 5).

All inputs must be finite (diverged runs are left out before pairing).
"""

from __future__ import annotations

import numpy as np
import scipy.stats

from harness.report.stats.floors import ZERO_SPREAD_NATS

MIN_PAIRS = 3  # fewer pairs: no test is run (DESIGN section 6: n >= 3)
CONF = 0.95  # the descriptive interval is a 95 % two-sided t interval (DESIGN section 6)
EXACT_MAX_N = 40  # sign-flip enumeration limit (2 x 2^20 partial sums)
MC_DRAWS = 2**17  # above EXACT_MAX_N: seeded Monte Carlo sign flips
# Two pattern sums closer than this (relative to sum |d|) count as equal: float summation
# order must not decide whether a tied pattern is "as extreme".
REL_TIE = 1e-9


def finite_array(name: str, values) -> np.ndarray:
    """``values`` as a float array; ValueError naming ``name`` if any value is NaN/inf."""
    arr = np.asarray(values, dtype=float)
    if not np.all(np.isfinite(arr)):
        raise ValueError(
            f"{name} has non-finite values {arr[~np.isfinite(arr)].tolist()}; "
            "diverged runs must be left out before pairing"
        )
    return arr


def min_attainable_p(n_nonzero) -> np.ndarray | float:
    """Smallest two-sided p of the exact sign-flip, Wilcoxon and sign tests on m non-zero d.

    Every d of one sign is the most extreme outcome; it and its mirror image have null
    probability ``2 * 2 ** -m``, so p >= ``2 ** (1 - m)``, capped at 1 (m = 0: p = 1).
    """
    m = np.asarray(n_nonzero, dtype=float)
    out = np.where(m > 0, np.minimum(1.0, 2.0 ** (1.0 - m)), 1.0)
    return float(out) if out.ndim == 0 else out


def zero_spread(d) -> np.ndarray:
    """``[...]`` bool: the n values of ``d`` ``[..., n]`` are all equal, up to the absolute
    tolerance :data:`harness.report.stats.floors.ZERO_SPREAD_NATS` (1e-6 nats/token): differences of NLLs
    that are equal in decimal differ in the last bits, and a tolerance relative to the largest
    |d| would call that rounding spread when every |d| is itself rounding (DESIGN 6)."""
    d = np.asarray(d, dtype=float)
    return np.ptp(d, axis=-1) <= ZERO_SPREAD_NATS


def t_test(d) -> dict[str, np.ndarray]:
    """Paired t-test of ``d`` ``[..., n]`` (Student 1908; df = n - 1).

    Returns a dict of ``[...]`` arrays: ``mean``, ``sd`` (ddof 1), ``t``, ``p`` (two-sided),
    ``p_less`` (one-sided, H1: mean < 0), ``ci_low``, ``ci_high`` (95 %), ``zero_spread``
    (bool). Values with n < :data:`MIN_PAIRS` or zero spread are NaN (``mean`` and ``sd``
    are kept where defined).
    """
    d = finite_array("d", d)
    n = d.shape[-1]
    mean = d.mean(axis=-1) if n else np.full(d.shape[:-1], np.nan)
    zero = zero_spread(d) if n >= 2 else np.zeros(d.shape[:-1], bool)
    sd = np.where(zero, 0.0, d.std(axis=-1, ddof=1)) if n >= 2 else np.full(d.shape[:-1], np.nan)
    nan = np.full(np.shape(mean), np.nan)
    if n < MIN_PAIRS:
        return dict(mean=mean, sd=sd, t=nan, p=nan, p_less=nan, ci_low=nan, ci_high=nan, zero_spread=zero)
    se = np.where(zero, np.nan, sd) / np.sqrt(n)
    t = mean / se
    df = n - 1
    half = scipy.stats.t.ppf(0.5 + CONF / 2, df) * se
    return dict(
        mean=mean,
        sd=sd,
        t=t,
        p=2 * scipy.stats.t.sf(np.abs(t), df),
        p_less=scipy.stats.t.cdf(t, df),
        ci_low=mean - half,
        ci_high=mean + half,
        zero_spread=zero,
    )


def _half_sums(x: np.ndarray) -> np.ndarray:
    """All 2^len(x) signed sums ``sum(s_i x_i)``, s in {-1, +1}."""
    sums = np.zeros(1)
    for v in x:
        sums = np.concatenate([sums + v, sums - v])
    return sums


def _sign_flip_one(d: np.ndarray, alternative: str) -> float:
    n = d.size
    obs = float(d.sum())
    tol = REL_TIE * float(np.abs(d).sum())
    if n > EXACT_MAX_N:  # seeded, so the same data always give the same p
        rng = np.random.default_rng(0)
        s = rng.choice((-1.0, 1.0), size=(MC_DRAWS, n)) @ d
        hits = np.sum(s <= obs + tol) if alternative == "less" else np.sum(np.abs(s) >= abs(obs) - tol)
        return float((hits + 1) / (MC_DRAWS + 1))
    a = _half_sums(d[: n // 2])
    b = np.sort(_half_sums(d[n // 2 :]))
    total = float(a.size * b.size)
    if alternative == "less":  # P(sum <= obs)
        return float(np.searchsorted(b, obs + tol - a, side="right").sum() / total)
    thr = abs(obs) - tol
    if thr <= 0:
        return 1.0
    upper = b.size - np.searchsorted(b, thr - a, side="left")  # a + b >= thr
    lower = np.searchsorted(b, -thr - a, side="right")  # a + b <= -thr
    return float(min(1.0, (upper.sum() + lower.sum()) / total))


def sign_flip_p(d, alternative: str = "two-sided") -> np.ndarray | float:
    """Exact sign-flip permutation p of the mean of ``d`` ``[..., n]``.

    Under H0 each d_i is symmetric about 0, so all 2^n sign patterns of ``d`` are equally
    likely. ``two-sided``: the share of patterns with ``|sum| >= |observed sum|``;
    ``less``: the share with ``sum <= observed sum`` (H1: mean < 0). Exact (all patterns)
    for n <= :data:`EXACT_MAX_N`, seeded Monte Carlo beyond. NaN for n < :data:`MIN_PAIRS`.

    Raises:
        ValueError: non-finite d, or an unknown ``alternative``.
    """
    if alternative not in ("two-sided", "less"):
        raise ValueError(f"alternative must be 'two-sided' or 'less', got {alternative!r}")
    d = finite_array("d", d)
    if d.shape[-1] < MIN_PAIRS:
        out = np.full(d.shape[:-1], np.nan)
    else:
        flat = d.reshape(-1, d.shape[-1])
        out = np.array([_sign_flip_one(row, alternative) for row in flat]).reshape(d.shape[:-1])
    return float(out) if out.ndim == 0 else out


def tied_ranks(a: np.ndarray) -> np.ndarray:
    """Midranks (1-based) of ``a`` ``[m]``, values within :data:`REL_TIE` of ``max |a|`` of
    their sorted neighbour counted as tied (so the ranks do not depend on last-bit noise)."""
    order = np.argsort(a, kind="stable")
    s = a[order]
    tol = REL_TIE * (np.abs(s).max() if s.size else 0.0)
    group = np.concatenate([[0], np.cumsum(np.diff(s) > tol)])
    pos = np.arange(1, s.size + 1, dtype=float)
    mid = np.array([pos[group == g].mean() for g in range(group[-1] + 1)]) if s.size else pos
    ranks = np.empty(s.size)
    ranks[order] = mid[group] if s.size else ranks
    return ranks


def _wilcoxon_one(d: np.ndarray) -> tuple[float, float]:
    nz = d[d != 0]
    m = nz.size
    if m == 0:
        return 0.0, 1.0  # no non-zero difference: no evidence against H0
    ranks2 = np.rint(2 * tied_ranks(np.abs(nz))).astype(np.int64)  # midranks are k/2
    counts = np.zeros(int(ranks2.sum()) + 1)
    counts[0] = 1.0
    for r in ranks2:  # counts[s] = sign patterns whose positive doubled-rank sum is s
        counts[r:] = counts[r:] + counts[: counts.size - r].copy()
    t_plus2 = int(ranks2[nz > 0].sum())
    cdf = counts[: t_plus2 + 1].sum() / 2.0**m
    sf = counts[t_plus2:].sum() / 2.0**m
    t_minus2 = int(ranks2.sum()) - t_plus2
    return min(t_plus2, t_minus2) / 2.0, float(min(1.0, 2 * min(cdf, sf)))


def wilcoxon_p(d) -> tuple[np.ndarray | float, np.ndarray | float]:
    """Exact two-sided Wilcoxon signed-rank test on the non-zero ``d`` ``[..., n]``.

    Returns ``(statistic, p)``: the statistic is the smaller of the positive and negative
    rank sums (scipy's convention); p = ``min(1, 2 min(P(T+ <= t), P(T+ >= t)))`` over all
    2^m sign patterns of the m non-zero differences (midranks for ties). p = 1 when every
    d is 0; NaN for n < :data:`MIN_PAIRS`.
    """
    d = finite_array("d", d)
    if d.shape[-1] < MIN_PAIRS:
        nan = np.full(d.shape[:-1], np.nan)
        stat, p = nan, nan.copy()
    else:
        flat = d.reshape(-1, d.shape[-1])
        res = np.array([_wilcoxon_one(row) for row in flat]).reshape(*d.shape[:-1], 2)
        stat, p = res[..., 0], res[..., 1]
    return (float(stat), float(p)) if np.ndim(stat) == 0 else (stat, p)


def sign_test_p(d) -> np.ndarray | float:
    """Exact two-sided sign test on the non-zero ``d`` ``[..., n]`` (binomial, p = 1/2).

    p = ``min(1, 2 P(K <= min(k, m - k)))`` with k negative of m non-zero differences
    (equal to ``scipy.stats.binomtest(k, m).pvalue``); 1 when every d is 0; NaN for
    n < :data:`MIN_PAIRS`.
    """
    d = finite_array("d", d)
    if d.shape[-1] < MIN_PAIRS:
        out = np.full(d.shape[:-1], np.nan)
    else:
        k = (d < 0).sum(axis=-1)
        m = (d != 0).sum(axis=-1)
        out = np.where(m > 0, np.minimum(1.0, 2 * scipy.stats.binom.cdf(np.minimum(k, m - k), m, 0.5)), 1.0)
    return float(out) if np.ndim(out) == 0 else out
