"""Mixed-model cross-check ``nll ~ variant + (1 | seed)`` per cell (DESIGN section 6).

statsmodels ``mixedlm`` (REML, random intercept per seed). In a balanced, complete
cell its fixed effect per variant equals the paired mean difference (reports/LOG.md):
it is a cross-check of the pairing, not new evidence, and enters no verdict.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, replace

import numpy as np
import polars as pl

NAN = float("nan")


@dataclass(frozen=True, slots=True)
class MixedCoef:
    """Fixed effect of one variant vs the parent in the mixed model (nats/token)."""

    variant: str
    estimate: float
    se: float
    p: float
    ci_low: float
    ci_high: float


@dataclass(frozen=True, slots=True)
class MixedModelCheck:
    """``nll ~ variant + (1 | seed)`` at one size and budget (statsmodels ``mixedlm``, REML).

    Fitted on NLL in millinats/token (centred) for numerical conditioning; estimates are
    reported back in nats/token. ``warnings`` holds every warning the fit raised
    (boundary fits are common with few seeds); ``error`` is set if the fit failed.
    """

    size: str
    budget_tokens: int
    n_obs: int
    n_seeds: int
    coefs: tuple[MixedCoef, ...]
    seed_var: float  # nats^2
    residual_var: float  # nats^2
    converged: bool
    warnings: tuple[str, ...]
    error: str = ""


_COEF_RE = re.compile(r"\[T\.(.+)\]$")


SCALE = 1000.0  # fits run in millinats/token (see fit_mixed_model)


def fit_reml(formula: str, y, columns: dict, seeds) -> tuple[object | None, tuple[str, ...], str]:
    """Fit ``formula`` with a random intercept per seed (statsmodels ``mixedlm``, REML).

    Args:
        formula: patsy formula on ``y`` and the names in ``columns``.
        y: the response in nats/token; fitted centred and in millinats (x :data:`SCALE`),
            so estimates and SEs of effects come back x SCALE.
        columns: further columns of the design (name -> values, one per y).
        seeds: the grouping factor, one per y.

    Returns:
        ``(result or None, warnings raised, error text or "")``; a fit that raises (a singular
        design) is returned as an error, never raised.
    """
    # Deferred on purpose: pandas and statsmodels' formula interface (patsy) are heavy, and only the
    # mixed-model fit needs them (`harness plan` without a pilot imports this module and never fits).
    import pandas as pd  # lazy: statsmodels' formula interface needs pandas
    import statsmodels.formula.api as smf

    y = np.asarray(y, dtype=float)
    df = pd.DataFrame({"y": (y - y.mean()) * SCALE, **columns, "seed": list(seeds)})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            res = smf.mixedlm(formula, df, groups=df["seed"]).fit(reml=True)
        except Exception as exc:  # singular designs etc.: report, do not crash the report
            msgs = tuple(dict.fromkeys(str(w.message) for w in caught))
            return None, msgs, f"fit failed: {type(exc).__name__}: {exc}"
    return res, tuple(dict.fromkeys(f"{w.category.__name__}: {w.message}" for w in caught)), ""


def fixed_effect(res, name: str, label: str) -> MixedCoef:
    """Fixed effect ``name`` of a :func:`fit_reml` result, back in nats/token (Wald SE, z p, 95 % interval).
    A covariance whose diagonal is not positive (a degenerate fit) gives a NaN SE, p and interval, which the
    report prints as such; numpy's "invalid value encountered in sqrt" is not passed on to the terminal."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "invalid value encountered in sqrt", RuntimeWarning)
        ci = res.conf_int()
        return MixedCoef(
            variant=label,
            estimate=float(res.fe_params[name]) / SCALE,
            se=float(res.bse_fe[name]) / SCALE,
            p=float(res.pvalues[name]),
            ci_low=float(ci.loc[name, 0]) / SCALE,
            ci_high=float(ci.loc[name, 1]) / SCALE,
        )


def fit_mixed_model(usable: pl.DataFrame, size: str, budget: int, parent: str) -> MixedModelCheck:
    """Fit ``nll ~ variant + (1 | seed)`` on the finished runs of one size and budget.

    statsmodels 0.15 flags "MLE may be on the boundary" on NLL in nats even when the
    seed variance is clearly positive (variances ~1e-5 sit below its tolerance); the
    response is therefore centred and scaled to millinats. Warnings that remain are
    reported, never silenced.
    """
    sub = usable.filter((pl.col("size") == size) & (pl.col("budget_tokens") == budget))
    n_seeds = sub["seed"].n_unique()
    variants = sorted(set(sub["variant"].to_list()))
    base = MixedModelCheck(
        size=size,
        budget_tokens=budget,
        n_obs=sub.height,
        n_seeds=n_seeds,
        coefs=(),
        seed_var=NAN,
        residual_var=NAN,
        converged=False,
        warnings=(),
    )
    if n_seeds < 2 or len(variants) < 2 or parent not in variants:
        return replace(
            base,
            error=f"not fitted: needs >= 2 seeds and the parent plus another "
            f"variant (have {n_seeds} seed(s), variants {variants})",
        )
    y = np.asarray(sub["val_nll"].to_list(), dtype=float)
    res, msgs, error = fit_reml(
        f"y ~ C(variant, Treatment({parent!r}))",
        y,
        {"variant": sub["variant"].to_list()},
        sub["seed"].to_list(),
    )
    if res is None:
        return replace(base, warnings=msgs, error=error)
    coefs = [
        fixed_effect(res, name, m.group(1)) for name in res.fe_params.index if (m := _COEF_RE.search(name))
    ]
    return MixedModelCheck(
        size=size,
        budget_tokens=budget,
        n_obs=sub.height,
        n_seeds=n_seeds,
        coefs=tuple(coefs),
        seed_var=float(res.cov_re.iloc[0, 0]) / SCALE**2,
        residual_var=float(res.scale) / SCALE**2,
        converged=bool(res.converged),
        warnings=msgs,
    )
