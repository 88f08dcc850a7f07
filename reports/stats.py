"""Paired statistics over matched seeds (DESIGN section 6).

The question per size and budget: does the treatment (``rd_attnres``) beat the parent
(``block_attnres``), and does any control reproduce the gain? Every comparison pairs two
variants' final validation NLL (nats/token) by seed and tests the paired differences
``d_s = first_s - second_s`` (negative = the first variant is better).

Tests (all two-sided, H0: the differences are centred on 0):

* paired t-test and 95 % t interval (statsmodels ``DescrStatsW``; df = n - 1);
* exact Wilcoxon signed-rank (scipy; ``zero_method='wilcox'`` drops zero differences;
  with tied ``|d|`` the exact permutation distribution is enumerated, because scipy's
  ``method='exact'`` ignores ties);
* sign test (statsmodels ``sign_test``; zero differences discarded);
* Cohen's ``d_z = mean(d) / sd(d)`` and the perplexity change ``exp(mean d) - 1``;
* Holm adjustment of the t-test p-values within the family of one size and budget
  (statsmodels ``multipletests``);
* TOST equivalence of control vs parent with margin ``|G| / 2``, G = mean
  treatment-minus-parent difference (statsmodels ``ttost_paired``);
* a mixed model ``nll ~ variant + (1 | seed)`` as a cross-check (statsmodels ``mixedlm``).

Beside the DESIGN 6 rule, which is applied unchanged, two statements say what the numbers
are worth: the A/A check reports its max |dNLL| as the protocol's numerical noise floor
and warns when it reaches half the treatment's |G| (:func:`_aa_check`); and every control
verdict whose treatment gain is not significant after Holm carries a caveat
(:func:`gain_caveat`, :meth:`ReportStats.gain_warnings`).

Library traps guarded here (measured with statsmodels 0.15 / scipy 1.17): ``sign_test``
silently drops NaN and ``multipletests`` counts a NaN as a test, so non-finite values
are rejected or kept out of the family; Wilcoxon with ``zero_method='pratt'`` and the
exact method reports p = 0.0625 for identical samples, so ``'wilcox'`` is used and the
all-zero case is handled explicitly; with n pairs the smallest achievable two-sided
Wilcoxon or sign-test p-value is ``2 ** (1 - n)`` (0.0625 for 5 pairs) and is reported
beside each test.

Results are frozen dataclasses with named fields; :meth:`ReportStats.to_frame` gives the
``stats.csv`` table. Nothing here formats text for humans beyond short notes.
"""

from __future__ import annotations

import math
import re
import warnings
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import polars as pl
import scipy.stats
from statsmodels.stats.descriptivestats import sign_test
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.power import TTestPower
from statsmodels.stats.weightstats import DescrStatsW, ttost_paired

from reports.pairing import AA_VARIANTS, LeftOut, Pair, PairedSet, pair_runs, steps_by_run

ALPHA = 0.05
MIN_PAIRS = 3  # fewer pairs: statistics reported as insufficient
POWER = 0.8  # target power of the "how many more seeds" calculation
AA_TOL = 1e-5  # nats/token: |d| at or below this counts as numerically identical
# A/A noise floor: A/A differences this large make effects of the treatment's size
# indistinguishable from run-to-run numerical noise (status `warn`, see _aa_check).
AA_NOISE_FRACTION = 0.5  # of the treatment's |G| at the same size and budget
AA_NOISE_ABS = 1e-3  # nats/token, used when there is no treatment gain to compare with
WILCOXON_ZERO_METHOD = "wilcox"
_MAX_EXACT_ENUM = 20  # 2**20 sign flips is still quick

# stats.csv column contract (DESIGN section 6), in order; extra columns follow.
CSV_COLUMNS = (
    "comparison", "size", "budget_tokens", "n_pairs", "seeds", "mean_diff", "ci_low",
    "ci_high", "t_p", "wilcoxon_p", "sign_p", "wins", "d_z", "ppl_change", "holm_p",
    "tost_p", "verdict",
)
EXTRA_COLUMNS = (
    "first", "second", "kind", "sd_diff", "t_stat", "df", "wilcoxon_stat",
    "wilcoxon_method", "wilcoxon_min_p", "n_nonzero", "sign_min_p", "family_size",
    "tost_margin", "missing_seeds", "code_versions", "deciding_test", "seeds_needed",
    "more_seeds", "note",
)
VERDICTS = ("reproduces gain", "does not reproduce gain", "inconclusive", "insufficient")

NAN = float("nan")


# --------------------------------------------------------------------------- one comparison


@dataclass(frozen=True, slots=True)
class PairedTest:
    """Tests on paired differences ``d = first - second`` (nats/token).

    Attributes:
        n: number of pairs.
        mean_diff, sd_diff: mean and sample SD (ddof 1) of d, nats/token.
        ci_low, ci_high: two-sided (1 - alpha) t interval of the mean, df = n - 1.
        t_stat, df, t_p: paired t-test of mean d = 0, two-sided.
        wilcoxon_stat, wilcoxon_p: exact Wilcoxon signed-rank test (statistic = the
            smaller of the positive and negative rank sums, scipy's convention).
        wilcoxon_method: ``exact``, ``exact enumeration (ties)``, ``normal approximation``
            or ``none`` (no non-zero difference).
        n_nonzero: pairs with d != 0 (the Wilcoxon and sign tests use only these).
        wilcoxon_min_p, sign_min_p: smallest p-value the test can reach with
            ``n_nonzero`` pairs, ``min(1, 2 ** (1 - n_nonzero))``.
        sign_p: exact two-sided sign test (binomial, p = 1/2).
        wins, losses, ties: pairs with d < 0, d > 0, d == 0.
        d_z: Cohen's d_z = mean / sd (Cohen 1988, paired design).
        ppl_change: perplexity ratio minus one, ``exp(mean_diff) - 1``.
        note: why a value is missing or was set by convention ('' if nothing to say).
    """

    n: int
    mean_diff: float
    sd_diff: float
    ci_low: float
    ci_high: float
    t_stat: float
    df: float
    t_p: float
    wilcoxon_stat: float
    wilcoxon_p: float
    wilcoxon_method: str
    n_nonzero: int
    wilcoxon_min_p: float
    sign_p: float
    sign_min_p: float
    wins: int
    losses: int
    ties: int
    d_z: float
    ppl_change: float
    note: str = ""

    @property
    def sufficient(self) -> bool:
        """At least :data:`MIN_PAIRS` pairs, so the tests were run."""
        return self.n >= MIN_PAIRS


def _finite_1d(name: str, values: Any) -> np.ndarray:
    arr = np.asarray(values, dtype=float)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        # statsmodels' sign_test would silently drop a NaN: refuse instead.
        raise ValueError(f"{name} has non-finite values {arr[~np.isfinite(arr)].tolist()}; "
                         "diverged runs must be left out before pairing")
    return arr


def min_achievable_p(n_nonzero: int) -> float:
    """Smallest two-sided p of an exact Wilcoxon or sign test on ``n_nonzero`` pairs.

    All differences of one sign: each test's null probability of that outcome is
    ``2 ** -n`` per tail, so p = ``2 ** (1 - n)`` (0.0625 at n = 5), capped at 1.
    """
    return min(1.0, 2.0 ** (1 - n_nonzero)) if n_nonzero > 0 else 1.0


def _wilcoxon(d: np.ndarray) -> tuple[float, float, str]:
    """Exact Wilcoxon signed-rank on the non-zero differences: (statistic, p, method)."""
    nz = d[d != 0]
    if nz.size == 0:
        # No non-zero difference: no evidence against H0; scipy's answer depends on
        # zero_method (pratt/exact gives 0.0625), so the convention is set here.
        return 0.0, 1.0, "none"
    tied = np.unique(np.abs(nz)).size < nz.size
    if not tied:
        method: Any = "exact"
        label = "exact"
    elif nz.size <= _MAX_EXACT_ENUM:
        # scipy's exact table assumes untied ranks; enumerate all 2**n sign flips instead.
        method = scipy.stats.PermutationMethod(n_resamples=2 ** nz.size)
        label = "exact enumeration (ties)"
    else:
        method, label = "approx", "normal approximation"
    res = scipy.stats.wilcoxon(d, zero_method=WILCOXON_ZERO_METHOD, method=method)
    return float(res.statistic), float(res.pvalue), label


def paired_test(first: Any, second: Any, alpha: float = ALPHA) -> PairedTest:
    """Paired tests of ``first - second`` (DESIGN section 6).

    Args:
        first, second: 1-D arrays of the same length ``n``, values in nats/token (e.g.
            final validation NLL), aligned by seed.
        alpha: level of the two-sided confidence interval (0.05 -> 95 %).

    Returns:
        :class:`PairedTest`. With fewer than :data:`MIN_PAIRS` pairs only the descriptive
        fields (n, mean, wins, perplexity change) are filled; tests are NaN and ``note``
        says "insufficient". With zero spread (all d equal) the t statistic is undefined:
        all-zero d gives t_p = 1 and CI [0, 0]; equal non-zero d gives t_p = 0; d_z is NaN.

    Raises:
        ValueError: shapes differ, or a value is NaN/inf.
    """
    x1 = _finite_1d("first", first)
    x2 = _finite_1d("second", second)
    if x1.shape != x2.shape:
        raise ValueError(f"first and second must have the same length, got {x1.size} and {x2.size}")
    d = x1 - x2
    n = int(d.size)
    wins, losses = int(np.sum(d < 0)), int(np.sum(d > 0))
    ties = n - wins - losses
    n_nonzero = wins + losses
    min_p = min_achievable_p(n_nonzero)
    mean = float(np.mean(d)) if n else NAN
    ppl = math.expm1(mean) if n else NAN
    sd = float(np.std(d, ddof=1)) if n >= 2 else NAN
    if n < MIN_PAIRS:
        return PairedTest(n, mean, sd, NAN, NAN, NAN, NAN, NAN, NAN, NAN, "none", n_nonzero,
                          min_p, NAN, min_p, wins, losses, ties, NAN, ppl,
                          note=f"insufficient: {n} pair(s) < {MIN_PAIRS}")
    notes = []
    df = float(n - 1)
    if sd > 0:
        ds = DescrStatsW(d)
        t_stat, t_p, _ = ds.ttest_mean(0.0)
        ci_low, ci_high = ds.tconfint_mean(alpha=alpha)
        d_z = mean / sd
    elif mean == 0.0:
        t_stat, t_p, ci_low, ci_high, d_z = NAN, 1.0, 0.0, 0.0, NAN
        notes.append("all differences exactly 0: t statistic 0/0, p set to 1, CI [0, 0]")
    else:
        t_stat, t_p, ci_low, ci_high, d_z = math.copysign(math.inf, mean), 0.0, mean, mean, NAN
        notes.append("all differences equal and non-zero: zero spread, t infinite, p set to 0")
    w_stat, w_p, w_method = _wilcoxon(d)
    if n_nonzero:
        _, s_p = sign_test(d, 0.0)
    else:
        s_p = 1.0  # statsmodels raises here; no non-zero pair = no evidence
        notes.append("Wilcoxon (zero_method='wilcox') and sign test drop zero differences, "
                     "none left: p set to 1")
    if ties and n_nonzero:
        notes.append(f"{ties} zero difference(s) dropped by the Wilcoxon and sign tests")
    return PairedTest(n, mean, sd, float(ci_low), float(ci_high), float(t_stat), df, float(t_p),
                      w_stat, w_p, w_method, n_nonzero, min_p, float(s_p), min_p, wins, losses,
                      ties, float(d_z), ppl, note="; ".join(notes))


def tost_p(first: Any, second: Any, margin: float) -> float:
    """TOST p-value for equivalence of ``first - second`` to 0 within ``+-margin``.

    H0: |mean d| >= margin; two one-sided paired t-tests (Schuirmann 1987), p = the
    larger of the two (statsmodels ``ttost_paired``). NaN with fewer than
    :data:`MIN_PAIRS` pairs or a non-positive or NaN margin. With zero spread the
    limit is used: 0 if |mean d| < margin, else 1.

    Raises:
        ValueError: non-finite values or unequal lengths.
    """
    x1, x2 = _finite_1d("first", first), _finite_1d("second", second)
    if x1.shape != x2.shape:
        raise ValueError(f"first and second must have the same length, got {x1.size} and {x2.size}")
    if x1.size < MIN_PAIRS or not margin > 0:
        return NAN
    d = x1 - x2
    if np.std(d) == 0:
        return 0.0 if abs(float(np.mean(d))) < margin else 1.0
    return float(ttost_paired(x1, x2, -margin, margin)[0])


def seeds_needed(effect_size: float, alpha: float, alternative: str = "two-sided",
                 power: float = POWER) -> float:
    """Pairs needed for a paired t-test to reach ``power`` (statsmodels ``TTestPower``).

    Args:
        effect_size: standardised effect d_z (> 0).
        alpha: significance level of that test.
        alternative: ``two-sided`` or ``larger`` (one-sided, e.g. one half of a TOST).

    Returns:
        the required number of pairs rounded up, or NaN if the effect is 0/NaN or the
        solver fails (effect too small for any sensible n).
    """
    if not (effect_size > 0 and math.isfinite(effect_size)):
        return NAN
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            n = TTestPower().solve_power(effect_size=effect_size, nobs=None, alpha=alpha,
                                         power=power, alternative=alternative)
        n = float(np.asarray(n).item())
    except Exception:  # the root finder gives up on tiny effects
        return NAN
    return float(math.ceil(max(n, 2.0))) if math.isfinite(n) else NAN


# --------------------------------------------------------------------------- records


@dataclass(frozen=True, slots=True)
class Comparison:
    """One row of ``stats.csv``: ``first - second`` at one size and budget.

    ``kind`` is ``treatment_vs_parent``, ``control_vs_parent``, ``treatment_vs_control``
    (the Holm family) or ``parent_vs_reference`` (descriptive, outside the family).
    ``holm_p`` is NaN outside the family or when the t-test could not run; ``tost_p``
    and ``verdict`` are set on ``control_vs_parent`` rows only. ``caveat`` is set on
    ``control_vs_parent`` rows when the treatment's own gain at that size and budget is
    not significantly below 0 (Holm): the verdict still follows DESIGN section 6, but a
    control cannot reproduce (or fail to reproduce) a gain that is not established.
    """

    comparison: str
    first: str
    second: str
    kind: str
    size: str
    budget_tokens: int
    seeds: tuple[int, ...]
    test: PairedTest
    missing_seeds: str = ""
    code_versions: tuple[str, ...] = ()
    holm_p: float = NAN
    family_size: int = 0
    tost_margin: float = NAN
    tost_p: float = NAN
    verdict: str = ""
    deciding_test: str = ""
    seeds_needed: float = NAN
    more_seeds: float = NAN
    note: str = ""
    caveat: str = ""

    def as_row(self) -> dict[str, Any]:
        """The ``stats.csv`` row (contract columns, then extras); ``note`` joins the test's
        note, the verdict's note and the caveat."""
        t = self.test
        notes = [x for x in (t.note, self.note, self.caveat) if x]
        return {
            "comparison": self.comparison, "size": self.size, "budget_tokens": self.budget_tokens,
            "n_pairs": t.n, "seeds": " ".join(str(s) for s in self.seeds),
            "mean_diff": t.mean_diff, "ci_low": t.ci_low, "ci_high": t.ci_high, "t_p": t.t_p,
            "wilcoxon_p": t.wilcoxon_p, "sign_p": t.sign_p, "wins": f"{t.wins}/{t.n}",
            "d_z": t.d_z, "ppl_change": t.ppl_change, "holm_p": self.holm_p,
            "tost_p": self.tost_p, "verdict": self.verdict,
            "first": self.first, "second": self.second, "kind": self.kind,
            "sd_diff": t.sd_diff, "t_stat": t.t_stat, "df": t.df,
            "wilcoxon_stat": t.wilcoxon_stat, "wilcoxon_method": t.wilcoxon_method,
            "wilcoxon_min_p": t.wilcoxon_min_p, "n_nonzero": t.n_nonzero,
            "sign_min_p": t.sign_min_p, "family_size": self.family_size,
            "tost_margin": self.tost_margin, "missing_seeds": self.missing_seeds,
            "code_versions": " ".join(self.code_versions), "deciding_test": self.deciding_test,
            "seeds_needed": self.seeds_needed, "more_seeds": self.more_seeds,
            "note": "; ".join(notes),
        }


@dataclass(frozen=True, slots=True)
class AACheck:
    """The A/A check: an ``==parent`` control vs the parent must show no effect.

    The A/A variant equals the parent in exact arithmetic, but its backward sums floats
    in another order; those ~1e-7 rounding differences per step grow chaotically over a
    run into real NLL differences. Their size is the numerical noise floor of the
    protocol, which a paired test cannot see (it only asks for a systematic offset).

    Attributes:
        max_abs_diff, mean_diff: max |d| and mean d over the A/A pairs, nats/token.
        t_p: unadjusted paired t-test p (stricter than Holm for a sanity check).
        test_status: the paired test alone: ``pass`` (all |d| <= ``AA_TOL`` or t_p >=
            alpha), ``FAIL`` (significant difference: a harness bug or nondeterminism)
            or ``insufficient`` (fewer than :data:`MIN_PAIRS` pairs, or none).
        status: ``test_status``, except that a ``pass`` or ``insufficient`` becomes
            ``warn`` when ``max_abs_diff >= noise_threshold`` (a ``FAIL`` stays ``FAIL``).
        gain: G, the treatment-minus-parent mean at this size and budget (NaN if none).
        noise_threshold: ``AA_NOISE_FRACTION * |G|``, or ``AA_NOISE_ABS`` without G.
        steps: training steps of the A/A pairs' runs as text (``"244"``, ``"120-244"``,
            ``""`` if the configs do not say).
        bit_identical: every difference is exactly 0.
        summary: one line (the CLI prints it); ``explanation``: the full text.
    """

    variant: str
    size: str
    budget_tokens: int
    n_pairs: int
    max_abs_diff: float
    mean_diff: float
    t_p: float
    status: str
    explanation: str
    test_status: str = ""
    gain: float = NAN
    noise_threshold: float = NAN
    steps: str = ""
    bit_identical: bool = False
    summary: str = ""


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


@dataclass(frozen=True, slots=True)
class ReportStats:
    """Everything the report shows, computed once by :func:`analyze`."""

    grid: str
    alpha: float
    parent: str
    treatment: str | None
    controls: tuple[str, ...]
    references: tuple[str, ...]
    comparisons: tuple[Comparison, ...]
    pairs: tuple[Pair, ...]
    left_out: tuple[LeftOut, ...]
    aa_checks: tuple[AACheck, ...]
    mixed: tuple[MixedModelCheck, ...]
    warnings: tuple[str, ...] = field(default=())

    def to_frame(self) -> pl.DataFrame:
        """``stats.csv`` as a polars frame: contract columns, then extra columns."""
        rows = [c.as_row() for c in self.comparisons]
        schema = {c: None for c in CSV_COLUMNS + EXTRA_COLUMNS}
        if not rows:
            return pl.DataFrame({c: [] for c in schema})
        return pl.DataFrame(rows).select(list(schema))

    def pairs_frame(self) -> pl.DataFrame:
        """All matched pairs: comparison, size, budget, seed, run ids, NLLs, diff."""
        cols = list(Pair.__slots__)
        return pl.DataFrame([{c: getattr(p, c) for c in cols} for p in self.pairs],
                            schema={c: None for c in cols} if not self.pairs else None)

    def headline(self) -> list[Comparison]:
        """Treatment-minus-parent comparisons (the paper's headline table), per size/budget."""
        return [c for c in self.comparisons if c.kind == "treatment_vs_parent"]

    def verdicts(self) -> list[Comparison]:
        """Control-minus-parent comparisons, each carrying its control's verdict."""
        return [c for c in self.comparisons if c.kind == "control_vs_parent"]

    def gain_warnings(self) -> list[str]:
        """One warning per size and budget whose control verdicts rest on a treatment gain
        that is not significant (treatment - parent not significantly below 0 after Holm).

        The verdicts themselves are unchanged (DESIGN section 6); this says how little they mean.
        """
        out = []
        for tp in self.headline():
            if _sig_below(tp, self.alpha):
                continue
            controls = [c.first for c in self.verdicts() if (c.size, c.budget_tokens) == (tp.size, tp.budget_tokens)]
            if not controls:
                continue
            budget = f"{tp.budget_tokens:,}".replace(",", "_")
            out.append(f"size {tp.size}, budget {budget} tokens: the treatment's own gain is not "
                       f"significant ({tp.comparison}: mean dNLL {_signed(tp.test.mean_diff)} nats/token, "
                       f"{tp.test.wins}/{tp.test.n} pairs won, {_holm_text(tp, self.alpha)}). The "
                       f"verdicts of {', '.join(controls)} at this size and budget follow the DESIGN 6 rule, "
                       "but a control can neither reproduce nor fail to reproduce a gain that is not "
                       "established, so they say little about the RD-AttnRes claim; establish the gain "
                       "first (more seeds or a longer budget).")
        return out


# --------------------------------------------------------------------------- analysis


def analyze(final: pl.DataFrame, runs: pl.DataFrame, *, grid: str | None = None,
            allow_partial: bool = False, alpha: float = ALPHA,
            aa_variants: tuple[str, ...] = AA_VARIANTS) -> ReportStats:
    """Pair runs by seed and compute every comparison of DESIGN section 6.

    Args:
        final: one row per finished run: run_id, variant, role, seed, size,
            budget_tokens, protocol_hash, val_nll (nats/token) [, grid].
        runs: one row per run (any status): run_id, variant, role, seed, size,
            budget_tokens, protocol_hash, status [, error, code_version, config, grid].
        grid: keep only rows of this grid (where the frame has a ``grid`` column).
        allow_partial: a protocol mismatch or a duplicated run becomes a warning and
            the pair/run is left out, instead of an error.
        alpha: two-sided significance level for tests, intervals and verdicts.
        aa_variants: controls that are A/A checks (identical to the parent).

    Returns:
        :class:`ReportStats`.

    Raises:
        ValueError, ProtocolMismatchError: see :func:`reports.pairing.pair_runs`.
    """
    pairing = pair_runs(final, runs, grid=grid, allow_partial=allow_partial, aa_variants=aa_variants)
    comparisons = [
        Comparison(s.comparison, s.first, s.second, s.kind, s.size, s.budget_tokens, s.seeds,
                   paired_test(s.first_values, s.second_values, alpha),
                   missing_seeds="; ".join(s.missing), code_versions=s.code_versions)
        for s in pairing.sets
    ]
    by_key = {(s.comparison, s.size, s.budget_tokens): s for s in pairing.sets}
    comparisons = _holm_tost_verdicts(comparisons, by_key, alpha)
    gains = {(c.size, c.budget_tokens): c.test.mean_diff for c in comparisons if c.kind == "treatment_vs_parent"}
    steps_of = steps_by_run(runs)
    aa = []
    for c in comparisons:
        if c.kind != "control_vs_parent" or c.first not in aa_variants:
            continue
        ps = by_key[(c.comparison, c.size, c.budget_tokens)]
        steps = {steps_of[r] for p in ps.pairs for r in (p.run_first, p.run_second) if r in steps_of}
        aa.append(_aa_check(c, [p.diff for p in ps.pairs], alpha,
                            gain=gains.get((c.size, c.budget_tokens), NAN), steps=steps))
    mixed = [fit_mixed_model(pairing.usable, size, budget, pairing.parent) for size, budget in pairing.cells]
    warn = list(pairing.warnings)
    warn += [f"mixed model size={m.size} budget_tokens={m.budget_tokens}: {w}" for m in mixed for w in m.warnings]
    return ReportStats(grid or "", alpha, pairing.parent, pairing.treatment, pairing.controls,
                       pairing.references, tuple(comparisons), pairing.pairs, pairing.left_out,
                       tuple(aa), tuple(mixed), tuple(warn))


# --------------------------------------------------------------------------- family, verdicts


FAMILY_KINDS = ("treatment_vs_parent", "control_vs_parent", "treatment_vs_control")


def _holm_tost_verdicts(comps: list[Comparison], sets: dict[tuple[str, str, int], PairedSet],
                        alpha: float) -> list[Comparison]:
    """Holm within each (size, budget) family, then TOST and the verdict per control.

    The family of one size and budget is every treatment-vs-parent, control-vs-parent
    and treatment-vs-control comparison whose t-test ran (reference rows stay outside).
    TOST p-values are not multiplicity-adjusted.
    """
    out = list(comps)
    cells = {(c.size, c.budget_tokens) for c in comps}
    for size, budget in cells:
        idx = [i for i, c in enumerate(out) if (c.size, c.budget_tokens) == (size, budget)]
        fam = [i for i in idx if out[i].kind in FAMILY_KINDS and math.isfinite(out[i].test.t_p)]
        if fam:
            # Only finite p-values enter: multipletests would count a NaN as a test.
            adj = multipletests([out[i].test.t_p for i in fam], alpha=alpha, method="holm")[1]
            for i, p in zip(fam, adj):
                out[i] = replace(out[i], holm_p=float(p), family_size=len(fam))
        by_label = {out[i].comparison: out[i] for i in idx}
        tp = next((out[i] for i in idx if out[i].kind == "treatment_vs_parent"), None)
        g = tp.test.mean_diff if tp is not None and tp.test.sufficient else NAN
        margin = abs(g) / 2 if math.isfinite(g) else NAN
        for i in idx:
            c = out[i]
            if c.kind != "control_vs_parent":
                continue
            if tp is None:
                out[i] = replace(c, note="no treatment variant in the grid: no gain to reproduce, no verdict")
                continue
            ps = sets[(c.comparison, size, budget)]
            tost = tost_p(ps.first_values, ps.second_values, margin)
            tc = by_label.get(f"{tp.first} - {c.first}")
            out[i] = _verdict(replace(c, tost_margin=margin, tost_p=tost), tc, alpha)
            if not _sig_below(tp, alpha):
                # The rule above is kept as DESIGN 6 states it; this only says what it is worth.
                out[i] = replace(out[i], caveat=gain_caveat(tp, alpha))
    return out


def _sig_below(c: Comparison | None, alpha: float) -> bool:
    return c is not None and c.holm_p < alpha and c.test.mean_diff < 0


def _signed(x: float) -> str:
    return f"{x:+.4f}" if math.isfinite(x) else "n/a"


def _holm_text(tp: Comparison, alpha: float) -> str:
    """'Holm p = 0.23' with why it is not a significant gain (untested, >= alpha, or positive mean)."""
    if not math.isfinite(tp.holm_p):
        return f"Holm p = n/a: {tp.test.n} pair(s), the test needs >= {MIN_PAIRS}"
    if tp.holm_p >= alpha:
        return f"Holm p = {tp.holm_p:.3g} >= {alpha:g}"
    return f"Holm p = {tp.holm_p:.3g}, but mean dNLL {tp.test.mean_diff:+.4f} >= 0: the treatment is worse"


def gain_caveat(tp: Comparison, alpha: float = ALPHA) -> str:
    """Note for a control verdict when the treatment's gain ``tp`` (treatment - parent) is not
    significantly below 0 after Holm: the verdict says little about the RD-AttnRes claim."""
    return (f"the treatment's own gain is not significant ({_holm_text(tp, alpha)}), so this verdict "
            "says little about the RD-AttnRes claim")


def _verdict(cp: Comparison, tc: Comparison | None, alpha: float) -> Comparison:
    """DESIGN section 6 verdict for control ``cp.first`` (cp = control - parent, tc = treatment - control)."""
    if not cp.test.sufficient:
        return replace(cp, verdict="insufficient", deciding_test=f"any: needs >= {MIN_PAIRS} pairs",
                        seeds_needed=float(MIN_PAIRS), more_seeds=float(MIN_PAIRS - cp.test.n))
    reproduces = _sig_below(cp, alpha) and not _sig_below(tc, alpha)
    equivalent = cp.tost_p < alpha
    not_reproduce = _sig_below(tc, alpha) or equivalent
    if reproduces and not not_reproduce:
        return replace(cp, verdict="reproduces gain")
    if not_reproduce and not reproduces:
        why = ([f"{tc.comparison} significantly below 0"] if _sig_below(tc, alpha) else []) + (
            [f"{cp.comparison} equivalent to 0 within +-{cp.tost_margin:.4g} (TOST)"] if equivalent else [])
        return replace(cp, verdict="does not reproduce gain", note=" and ".join(why))
    note = ("conflicting: control - parent significantly below 0 yet equivalent to 0 within "
            "the margin (a real but small gain)") if reproduces else ""
    return _power_plan(replace(cp, verdict="inconclusive", note=note), tc, alpha)


def _power_plan(cp: Comparison, tc: Comparison | None, alpha: float) -> Comparison:
    """Name the test most likely to decide an inconclusive verdict and the seeds it needs.

    Candidates (observed effects taken as true; Holm's first step alpha/m as the level):
    paired t on control - parent (towards "reproduces"), paired t on treatment - control
    and TOST on control - parent (towards "does not reproduce"; TOST power approximated
    by one one-sided t-test at the nearer margin).
    """
    m = max(cp.family_size, 1)
    cands = []
    if cp.test.mean_diff < 0:
        cands.append((seeds_needed(abs(cp.test.d_z), alpha / m), cp.test.n,
                      f"paired t-test {cp.comparison} (towards 'reproduces gain')"))
    if tc is not None and tc.test.sufficient and tc.test.mean_diff < 0:
        cands.append((seeds_needed(abs(tc.test.d_z), alpha / m), tc.test.n,
                      f"paired t-test {tc.comparison} (towards 'does not reproduce gain')"))
    if cp.tost_margin > 0 and abs(cp.test.mean_diff) < cp.tost_margin and cp.test.sd_diff > 0:
        eff = (cp.tost_margin - abs(cp.test.mean_diff)) / cp.test.sd_diff
        cands.append((seeds_needed(eff, alpha, "larger"), cp.test.n,
                      f"TOST {cp.comparison}, margin +-{cp.tost_margin:.4g} (towards 'does not reproduce gain')"))
    cands = [c for c in cands if math.isfinite(c[0])]
    if not cands:
        return replace(cp, deciding_test="none expected to decide at the observed effect sizes")
    need, have, name = min(cands)
    return replace(cp, deciding_test=name, seeds_needed=need, more_seeds=max(0.0, need - have))


def _steps_text(steps: set[int]) -> str:
    if not steps:
        return ""
    lo, hi = min(steps), max(steps)
    return str(lo) if lo == hi else f"{lo}-{hi}"


def _aa_check(c: Comparison, diffs: list[float], alpha: float, *, gain: float = NAN,
              steps: set[int] | frozenset[int] = frozenset()) -> AACheck:
    """Judge an A/A control: it is the parent in exact arithmetic, so no effect is allowed.

    Two questions, answered separately:

    * Systematic offset (``test_status``): unadjusted paired t-test p >= alpha (stricter
      than Holm for a sanity check) -> ``pass``, else ``FAIL``; all |d| <= ``AA_TOL`` ->
      ``pass``; fewer than :data:`MIN_PAIRS` pairs -> ``insufficient``.
    * Noise floor: float summation order differs between the A/A variant and the parent
      by ~1e-7 per step and diverges chaotically over the run, so the A/A differences
      measure the protocol's run-to-run numerical noise. When ``max |d| >=
      AA_NOISE_FRACTION * |gain|`` (``AA_NOISE_ABS`` nats/token when ``gain`` is NaN) an
      effect of the treatment's size cannot be told from noise: ``status`` becomes
      ``warn`` (a ``FAIL`` stays ``FAIL``). The max |d| is always stated, also with
      fewer than :data:`MIN_PAIRS` pairs.

    Args:
        c: the A/A control - parent comparison.
        diffs: its paired differences, nats/token.
        alpha: level of the paired test.
        gain: G = mean treatment - parent at the same size and budget (nats/token), NaN if none.
        steps: training steps of the runs in the pairs (from their configs; may be empty).
    """
    t = c.test
    max_abs = max((abs(d) for d in diffs), default=NAN)
    steps_s = _steps_text(set(steps))
    over = f"over {steps_s} training steps" if steps_s else "over the training steps"
    if math.isfinite(gain):
        threshold = AA_NOISE_FRACTION * abs(gain)
        size = "comparable to" if max_abs < abs(gain) else "at least as large as"
        scale = (f"{size} the treatment's gain G = {gain:+.4f} nats/token (max |dNLL| >= "
                 f"|G|/2 = {threshold:.4g})")
        below = f"below |G|/2 = {threshold:.4g} nats/token (G = {gain:+.4f})"
    else:
        threshold = AA_NOISE_ABS
        scale = (f"at least {AA_NOISE_ABS:g} nats/token (no treatment gain G at this size and budget "
                 "to compare with)")
        below = f"below {AA_NOISE_ABS:g} nats/token (no treatment gain G to compare with)"
    base = dict(gain=gain, noise_threshold=threshold, steps=steps_s)

    def done(status: str, test_status: str, summary: str, detail: str = "", bit: bool = False) -> AACheck:
        expl = summary + (f"; {detail}" if detail else "")
        return AACheck(c.first, c.size, c.budget_tokens, t.n, max_abs, t.mean_diff, t.t_p, status, expl,
                       test_status=test_status, bit_identical=bit, summary=summary, **base)

    if not t.n:
        return done("insufficient", "insufficient", "no A/A pair (no seed where both runs finished)")
    if max_abs == 0.0:
        zm = WILCOXON_ZERO_METHOD
        detail = (f"the t statistic is 0/0 (p reported as 1, CI [0, 0]); the Wilcoxon signed-rank test "
                  f"(zero_method='{zm}') and the sign test drop zero differences, leaving none (p reported "
                  "as 1); scipy's zero_method='pratt' with the exact method would report p = 0.0625 here, "
                  "which is an artefact")
        if not t.sufficient:
            detail += f" (only {t.n} pair(s); fewer than {MIN_PAIRS})"
        return done("pass", "pass", f"bit-identical: all {t.n} paired differences are exactly 0", detail, True)

    if max_abs <= AA_TOL:
        test_status = "pass"
        test_text = (f"max |dNLL| {max_abs:.3g} nats/token <= {AA_TOL:g}: numerically identical "
                     "(floating-point reduction order)")
    elif not t.sufficient:
        test_status = "insufficient"
        test_text = f"{t.n} pair(s) < {MIN_PAIRS}: no paired test run"
    elif t.t_p >= alpha:
        test_status = "pass"
        test_text = (f"no systematic offset (paired t p = {t.t_p:.3g} >= {alpha:g}, mean dNLL "
                     f"{t.mean_diff:+.4g} nats/token)")
    else:
        test_status = "FAIL"
        test_text = (f"significant difference (paired t p = {t.t_p:.3g} < {alpha:g}, mean "
                     f"{t.mean_diff:.4g} nats/token) for a variant equal to the parent in exact "
                     "arithmetic: a harness bug (pairing, data order, initialisation) or nondeterminism")
    if max_abs >= threshold:
        noise = (f"A/A differences up to {max_abs:.3g} nats/token, the run-to-run numerical noise floor of "
                 f"this protocol (float summation order diverges chaotically {over}), are {scale}; "
                 "effects of this size cannot be told apart from noise at this budget; more seeds or a "
                 "longer budget are needed")
        if test_status == "FAIL":
            return done("FAIL", test_status, test_text, noise)
        return done("warn", test_status, noise, f"{test_text} (the paired test alone: {test_status})")
    floor = (f"A/A differences up to {max_abs:.3g} nats/token over {t.n} pair(s) (the numerical noise "
             f"floor of this protocol: float summation order diverges {over}) are {below}")
    return done(test_status, test_status, f"{test_text}; {floor}")


_COEF_RE = re.compile(r"\[T\.(.+)\]$")


def fit_mixed_model(usable: pl.DataFrame, size: str, budget: int, parent: str) -> MixedModelCheck:
    """Fit ``nll ~ variant + (1 | seed)`` on the finished runs of one size and budget.

    statsmodels 0.15 flags "MLE may be on the boundary" on NLL in nats even when the
    seed variance is clearly positive (variances ~1e-5 sit below its tolerance); the
    response is therefore centred and scaled to millinats. Warnings that remain are
    reported, never silenced.
    """
    import pandas as pd  # statsmodels' formula interface needs pandas
    import statsmodels.formula.api as smf

    sub = usable.filter((pl.col("size") == size) & (pl.col("budget_tokens") == budget))
    n_seeds = sub["seed"].n_unique()
    variants = sorted(set(sub["variant"].to_list()))
    base = MixedModelCheck(size, budget, sub.height, n_seeds, (), NAN, NAN, False, ())
    if n_seeds < 2 or len(variants) < 2 or parent not in variants:
        return replace(base, error=f"not fitted: needs >= 2 seeds and the parent plus another "
                                       f"variant (have {n_seeds} seed(s), variants {variants})")
    scale = 1000.0
    y = np.asarray(sub["val_nll"].to_list(), dtype=float)
    df = pd.DataFrame({"y": (y - y.mean()) * scale, "variant": sub["variant"].to_list(),
                       "seed": sub["seed"].to_list()})
    formula = f"y ~ C(variant, Treatment({parent!r}))"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            res = smf.mixedlm(formula, df, groups=df["seed"]).fit(reml=True)
        except Exception as exc:  # singular designs etc.: report, do not crash the report
            msgs = tuple(dict.fromkeys(str(w.message) for w in caught))
            return replace(base, warnings=msgs, error=f"fit failed: {type(exc).__name__}: {exc}")
    msgs = tuple(dict.fromkeys(f"{w.category.__name__}: {w.message}" for w in caught))
    ci = res.conf_int()
    coefs = []
    for name in res.fe_params.index:
        m = _COEF_RE.search(name)
        if m:
            coefs.append(MixedCoef(m.group(1), float(res.fe_params[name]) / scale,
                                   float(res.bse_fe[name]) / scale, float(res.pvalues[name]),
                                   float(ci.loc[name, 0]) / scale, float(ci.loc[name, 1]) / scale))
    return MixedModelCheck(size, budget, sub.height, n_seeds, tuple(coefs),
                           float(res.cov_re.iloc[0, 0]) / scale**2, float(res.scale) / scale**2,
                           bool(res.converged), msgs)
