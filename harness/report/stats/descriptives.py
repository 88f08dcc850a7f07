"""Descriptive statistics of one set of paired differences (DESIGN section 6): n, mean, sd, the 95 % t
interval, d_z, the perplexity change and the exact tests' p values, as a :class:`Descriptives`."""

from __future__ import annotations

import math

import numpy as np

from harness.report.stats import paired_tests as paired
from harness.report.stats.results import NAN, Descriptives


def describe(d) -> Descriptives:
    """:class:`Descriptives` of a 1-D array of paired differences (nats/token).

    Raises:
        ValueError: non-finite values, or not one-dimensional.
    """
    d = paired.finite_array("d", d)
    if d.ndim != 1:
        raise ValueError(f"d must be one-dimensional, got shape {d.shape}")
    t = {k: float(v) for k, v in paired.t_test(d).items()}
    w_stat, w_p = paired.wilcoxon_p(d)
    wins, losses = int((d < 0).sum()), int((d > 0).sum())
    mean, sd = t["mean"], t["sd"]
    return Descriptives(
        n=int(d.size),
        mean=mean,
        sd=sd,
        ci_low=t["ci_low"],
        ci_high=t["ci_high"],
        t_stat=t["t"],
        t_p=t["p"],
        d_z=mean / sd if sd > 0 else NAN,
        ppl_change=math.expm1(mean) if d.size else NAN,
        perm_p=float(paired.sign_flip_p(d)),
        wilcoxon_stat=float(w_stat),
        wilcoxon_p=float(w_p),
        sign_p=float(paired.sign_test_p(d)),
        min_p=float(paired.min_attainable_p(wins + losses)),
        wins=wins,
        losses=losses,
        ties=d.size - wins - losses,
        zero_spread=bool(t["zero_spread"]),
    )


__all__ = ["describe"]


def sample_sd(d: np.ndarray) -> float:
    """Sample SD (ddof 1) of paired differences ``d`` [n] (nats/token); 0 at zero spread (:func:`harness.report.stats.paired_tests.zero_spread`); NaN below 2 values."""
    return NAN if d.size < 2 else 0.0 if bool(paired.zero_spread(d)) else float(np.std(d, ddof=1))
