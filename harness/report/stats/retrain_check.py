"""The re-train check: archived runs re-trained elsewhere, compared with their archived NLL (DESIGN 13).

A study's runs are bit-identical on one machine only (DESIGN section 4). Re-training K archived pairs
(seeds) on another machine with the same protocol hash moves each run's final validation NLL
(nats/token) by a *shift* ``new - archived``. A paired test is harmed only where the shift differs
between the two sides of a pair, so the check looks at the **shift of each paired difference**: for a
contrast with weights w over variants (``rd_attnres - block_attnres``: +1, -1) and seed s,
``d_s = sum_v w_v y_vs`` and its shift ``d_s(new) - d_s(archived)``. Per contrast, over its K shifts:

* **a bias?** the mean shift with its two-sided 95 % Student t interval (df = K - 1) and the one-sample
  t-test p (H0: mean shift 0), Holm across the grid's m contrasts
  (:func:`harness.report.stats.decisions.holm`; tested together, as the section 6 A/A check is across
  cells). Its MDE is priced at the level Holm gives a contrast's first step, ``alpha / m``
  (:func:`harness.report.stats.power.mde`, noncentral t, power 0.8 unless given), with the power
  against a bias of the smallest effect beside it;
* **how large a bias do the K pairs exclude?** the two one-sided t-tests (TOST, Schuirmann 1987) of
  H0 ``|mean shift| >= delta`` (delta = the smallest effect the study reports) at level alpha, and
  the *equivalence bound*: the largest |end| of the (1 - 2 alpha) t interval, the smallest margin the
  TOST would reject at (every |bias| at or above it is excluded). Claiming no contrast is biased by
  delta needs each contrast's TOST to reject (the intersection-union principle, Berger 1982): no
  multiplicity adjustment. With it, the pairs that would exclude delta if there were no bias
  (:func:`harness.report.stats.power.tost_pairs_needed`, at the shifts' own sd);
* **how far did the runs move?** Under a *redraw* the re-trained d is an independent draw of the same
  law as the archived one, so ``Var(shift) = 2 Var(d)``; a *perturbation* (a run nudged, not re-drawn)
  gives far less. The **redraw ratio** ``var(shifts) / (2 seed_sd^2)`` (seed_sd: the sd of the archived
  d across every archived seed, N of them) with a 95 % interval from the F distribution on (K - 1, N - 1)
  df (exact when the shifts are independent of the archive, a perturbation; conservative under a
  redraw, where the K re-trained seeds enter both variances: checked by simulation,
  :mod:`harness.report.simulation.retrain`), and the archived/new correlation of d across the K seeds
  with its Fisher-z 95 % interval (K >= 4). A redraw gives a ratio near 1 and a correlation near 0.

Every shift is also given in units of the contrast's **seed sd** (a run's: its variant's NLL sd across the
archive's seeds) and of the **smallest effect the study reports**: the smallest |mean d| among the
contrasts whose archived 95 % t interval excludes 0, else the plan's ``min_effect_nats``.

The answer, one of :data:`VERDICTS`, decided in this order:

1. ``bit-identical``: every new NLL equals its archived value exactly;
2. ``too few pairs to tell``: fewer than 3 pairs in some contrast (no MDE can be priced, no verdict rests on
   fewer: DESIGN section 6);
3. ``a bias``: some contrast's mean shift differs from 0 at Holm level alpha, beyond the numerical floor
   (this machine moves one variant against its partner);
4. ``too few pairs to tell``: no bias shown, but some contrast's TOST does not exclude a bias of the
   smallest effect (the pairs neither show a bias nor rule one out);
5. ``perturbed``: every contrast's redraw-ratio interval lies below 1 (the runs moved, far less than new
   draws);
6. ``redrawn``: every contrast's redraw-ratio interval lies above :data:`PERTURBATION_RATIO` (it excludes
   every perturbation that matters: a re-trained d keeping three quarters of its seed's draw);
7. ``cannot tell perturbed from redrawn`` (at K pairs): neither interval rule holds; the K pairs do not say
   which. "Redrawn" is a finding, never the fallthrough.

Each word is wrong at most 2.5 % of the time at its boundary (one tail of a 95 % interval: a redraw called
perturbed, a perturbation of ratio :data:`PERTURBATION_RATIO` called redrawn), at any K; simulated in
:mod:`harness.report.simulation.retrain`.

An MDE above the smallest effect alone does not make step 4: it is the power a test had before the data,
and where the TOST excludes the smallest effect the pairs did tell. With no smallest effect (nothing
resolved, no plan), step 4 is skipped and the words say so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.stats

from harness.design.analysis_plan import MIN_SEEDS
from harness.design.factorial import parse_factorial
from harness.report.stats.decisions import holm
from harness.report.stats.floors import beyond_floor
from harness.report.stats.pairing import comparisons_for
from harness.report.stats.power import mde, power_at, tost_pairs_needed

BIT_IDENTICAL, TOO_FEW, BIAS, PERTURBED, REDRAWN, CANNOT_TELL = (
    "bit-identical",
    "too few pairs to tell",
    "a bias",
    "perturbed",
    "redrawn",
    "cannot tell perturbed from redrawn",  # said with "at K pairs" (:func:`cannot_tell`)
)
VERDICTS = (BIT_IDENTICAL, TOO_FEW, BIAS, PERTURBED, REDRAWN, CANNOT_TELL)
# The largest redraw ratio that is still a perturbation that matters: shifts of variance r x a redraw's leave
# the re-trained d a correlation of 1 - r with its archived one, so up to 0.25 it keeps three quarters of its
# seed's draw; twice the largest ratio measured on a perturbing machine (0.127, reports/factorial_study).
# "redrawn" needs every contrast's interval above it (module docstring).
PERTURBATION_RATIO = 0.25
CONF = 0.95
NAN = float("nan")


@dataclass(frozen=True, slots=True)
class Contrast:
    """A paired contrast of a grid: its label and its weights ``((variant, weight), ...)``."""

    label: str
    weights: tuple[tuple[str, float], ...]

    def value(self, nll: dict[str, float]) -> float:
        """``sum_v w_v nll[v]`` (nats/token) for one seed's NLL by variant."""
        return float(sum(w * nll[v] for v, w in self.weights))


def grid_contrasts(roles: dict[str, str], factorial: dict | None = None) -> tuple[Contrast, ...]:
    """The grid's paired contrasts: its report's comparisons (DESIGN section 6, from ``roles``: variant ->
    parent/treatment/control/reference), then the factorial's simple effects and interaction (DESIGN section
    12, from the stored ``[factorial]`` table) that are not already among them (same weights).

    Raises:
        ValueError: no parent, or more than one parent or treatment.
    """
    by = {
        r: sorted(v for v, role in roles.items() if role == r)
        for r in ("parent", "treatment", "control", "reference")
    }
    if len(by["parent"]) != 1 or len(by["treatment"]) > 1:
        raise ValueError(f"a grid needs one parent and at most one treatment; roles: {roles}")
    out = [
        Contrast(f"{first} - {second}", ((first, 1.0), (second, -1.0)))
        for first, second, _ in comparisons_for(
            by["parent"][0], (by["treatment"] or [None])[0], tuple(by["control"]), tuple(by["reference"])
        )
    ]
    if factorial:
        f = parse_factorial(factorial)
        (a, b), y = f.factors, f.variant
        extra = [
            (f"{a} at {b}=0: {y(1, 0)} - {y(0, 0)}", {y(1, 0): 1.0, y(0, 0): -1.0}),
            (f"{a} at {b}=1: {y(1, 1)} - {y(0, 1)}", {y(1, 1): 1.0, y(0, 1): -1.0}),
            (f"{b} at {a}=0: {y(0, 1)} - {y(0, 0)}", {y(0, 1): 1.0, y(0, 0): -1.0}),
            (f"{b} at {a}=1: {y(1, 1)} - {y(1, 0)}", {y(1, 1): 1.0, y(1, 0): -1.0}),
            (
                f"interaction {a} x {b}: ({y(1, 1)} - {y(1, 0)}) - ({y(0, 1)} - {y(0, 0)})",
                {y(1, 1): 1.0, y(1, 0): -1.0, y(0, 1): -1.0, y(0, 0): 1.0},
            ),
        ]
        seen = [_canonical(dict(c.weights)) for c in out]
        for label, weights in extra:
            if (
                _canonical(weights) not in seen
                and _canonical({v: -w for v, w in weights.items()}) not in seen
            ):
                out.append(Contrast(label, tuple(weights.items())))
                seen.append(_canonical(weights))
    return tuple(out)


def _canonical(weights: dict[str, float]) -> tuple:
    return tuple(sorted((v, w) for v, w in weights.items() if w))


@dataclass(frozen=True, slots=True)
class RunShift:
    """One re-trained run: archived and new final val NLL (nats/token), ``shift = new - archived``, and the
    shift in units of its variant's seed sd (the NLL's sd across the archive's seeds)."""

    run_id: str
    variant: str
    seed: int
    archived: float
    new: float
    shift: float
    shift_in_sd: float


@dataclass(frozen=True, slots=True)
class PairShift:
    """One contrast at one seed: archived and new paired difference d (nats/token), its shift, and the
    shift in units of the contrast's seed sd and of the smallest effect the study reports."""

    contrast: str
    seed: int
    archived: float
    new: float
    shift: float
    shift_in_sd: float
    shift_in_effect: float


@dataclass(frozen=True, slots=True)
class ContrastShift:
    """The shifts of one contrast's paired differences over its ``n`` re-trained seeds (nats/token; module
    docstring).

    A bias: ``mean`` with its 95 % t interval, ``sd`` (ddof 1), the two-sided t-test ``p`` and its ``holm_p``
    across the contrasts; ``mde_nats`` the smallest mean shift the test detects at ``n`` pairs at level
    ``mde_level`` (Holm's first step, alpha / contrasts) and ``power_at_effect`` its power against a bias of
    the smallest effect. Equivalence: ``tost_p`` (H0 |mean shift| >= the smallest effect), ``bound`` (the
    smallest margin the TOST rejects at: every larger bias is excluded) and ``pairs_to_exclude`` (pairs
    whose TOST would exclude the smallest effect with the plan's power if there were no bias; None: not
    within 1000). Movement: ``var_ratio`` = var(shifts) / (2 seed_sd^2) with its 95 % F interval, ``corr``
    the archived/new correlation of d with its Fisher-z 95 % interval (NaN below 4 pairs). ``seed_sd``:
    the archived d's sd across ``archive_seeds`` seeds; the mean in units of it and of the smallest effect.
    """

    contrast: str
    n: int
    mean: float
    ci_low: float
    ci_high: float
    sd: float
    p: float
    holm_p: float
    mde_nats: float
    mde_level: float
    power_at_effect: float
    tost_p: float
    bound: float
    pairs_to_exclude: int | None
    var_ratio: float
    var_ratio_low: float
    var_ratio_high: float
    corr: float
    corr_low: float
    corr_high: float
    seed_sd: float
    archive_seeds: int
    archived_mean: float
    mean_in_sd: float
    mean_in_effect: float

    @property
    def below_redraw(self) -> bool:
        """The redraw ratio's interval lies below 1: these shifts are smaller than a redraw's."""
        return math.isfinite(self.var_ratio_high) and self.var_ratio_high < 1


@dataclass(frozen=True, slots=True)
class RetrainCheck:
    """The answer of the re-train check (module docstring). ``smallest_effect`` (nats/token) is
    the unit beside the seed sd and the TOST's margin, ``smallest_effect_source`` says which contrast (or the
    plan) gave it; ``reason`` says in a few words why the verdict is what it is (the rule that decided)."""

    runs: tuple[RunShift, ...]
    pairs: tuple[PairShift, ...]
    contrasts: tuple[ContrastShift, ...]
    smallest_effect: float
    smallest_effect_source: str
    alpha: float
    power: float
    verdict: str
    reason: str = ""


def _scalar(*arrays):
    """Each array as a float where it is 0-d (one set of values), else as it is."""
    return tuple(float(a) if np.ndim(a) == 0 else a for a in arrays)


def mean_interval(x, conf: float = CONF):
    """``(mean, sd, ci_low, ci_high, p)`` of values ``x`` [..., n] (leading axes: independent sets, e.g.
    simulated studies; floats for one set): sd with ddof 1, the two-sided Student t interval at ``conf``
    (df = n - 1) and the one-sample t-test's two-sided p of H0 mean = 0. At zero spread the interval is the
    mean itself and p is 1 at mean 0, else 0. NaN below 2 values."""
    x = np.asarray(x, dtype=float)
    n = x.shape[-1]
    if n < 2:
        mean = x.mean(axis=-1) if n else np.full(x.shape[:-1], NAN)
        nan = np.full(np.shape(mean), NAN)
        return _scalar(mean, nan, nan, nan, nan)
    mean, sd = x.mean(axis=-1), x.std(axis=-1, ddof=1)
    flat = np.all(x == x[..., :1], axis=-1)
    se = np.where(flat, 1.0, sd) / math.sqrt(n)
    half = float(scipy.stats.t.ppf(0.5 + conf / 2, n - 1)) * se
    p = 2 * scipy.stats.t.sf(np.abs(mean / se), n - 1)
    return _scalar(
        mean,
        np.where(flat, 0.0, sd),
        np.where(flat, mean, mean - half),
        np.where(flat, mean, mean + half),
        np.where(flat, np.where(mean == 0, 1.0, 0.0), p),
    )


def tost(x, margin: float, alpha: float):
    """``(p, bound)``: the two one-sided t-tests (Schuirmann 1987) of H0 ``|mean| >= margin`` on values ``x``
    [..., n] (nats/token; df = n - 1; leading axes as :func:`mean_interval`): ``p`` = the larger of the two
    one-sided p's; ``bound`` = the largest |end| of the (1 - 2 alpha) t interval, i.e. the smallest margin
    the TOST rejects at level alpha. At zero spread p is 0 where |mean| < margin, else 1, and the bound is
    |mean|. NaN below 2 values (p also NaN without a positive finite margin)."""
    x = np.asarray(x, dtype=float)
    n = x.shape[-1]
    if n < 2:
        nan = np.full(x.shape[:-1], NAN)
        return _scalar(nan, nan)
    mean, flat = x.mean(axis=-1), np.all(x == x[..., :1], axis=-1)
    se = np.where(flat, 1.0, x.std(axis=-1, ddof=1)) / math.sqrt(n)
    bound = np.where(flat, np.abs(mean), np.abs(mean) + float(scipy.stats.t.ppf(1 - alpha, n - 1)) * se)
    if not (math.isfinite(margin) and margin > 0):
        return _scalar(np.full(np.shape(mean), NAN), bound)
    p_low = scipy.stats.t.sf((mean + margin) / se, n - 1)  # H0: mean <= -margin
    p_high = scipy.stats.t.cdf((mean - margin) / se, n - 1)  # H0: mean >= +margin
    p = np.where(flat, np.where(np.abs(mean) < margin, 0.0, 1.0), np.maximum(p_low, p_high))
    return _scalar(p, bound)


def redraw_ratio(shifts, seed_sd, archive_seeds: int, conf: float = CONF):
    """``(ratio, low, high)``: ``var(shifts) / (2 seed_sd^2)`` (ddof 1; 1 under a redraw, far below under a
    perturbation) with its ``conf`` interval from the F distribution on (K - 1, ``archive_seeds`` - 1) df,
    K = the shifts' last axis: ``ratio / F_{(1+conf)/2}`` to ``ratio / F_{(1-conf)/2}`` (the ratio of two
    sample variances over their true ratio is F-distributed when the samples are independent). Leading
    axes of ``shifts`` (and of ``seed_sd``) as :func:`mean_interval`. NaN below 2 shifts or 2 archive seeds
    or without a positive seed sd."""
    x = np.asarray(shifts, dtype=float)
    seed_sd = np.asarray(seed_sd, dtype=float)
    k = x.shape[-1]
    usable = np.isfinite(seed_sd) & (seed_sd > 0)
    if k < 2 or archive_seeds < 2:
        nan = np.full(np.broadcast_shapes(x.shape[:-1], seed_sd.shape), NAN)
        return _scalar(nan, nan, nan)
    ratio = np.where(usable, x.var(axis=-1, ddof=1) / (2 * np.where(usable, seed_sd, 1.0) ** 2), NAN)
    df = (k - 1, archive_seeds - 1)
    tail = (1 - conf) / 2
    return _scalar(
        ratio,
        ratio / float(scipy.stats.f.ppf(1 - tail, *df)),
        ratio / float(scipy.stats.f.ppf(tail, *df)),
    )


def correlation(archived, new, conf: float = CONF) -> tuple[float, float, float]:
    """``(r, low, high)``: Pearson's r of ``archived`` and ``new`` paired differences [K] with the Fisher-z
    ``conf`` interval ``tanh(atanh r -+ z / sqrt(K - 3))``; NaN below 4 pairs or with a constant side."""
    a, b = np.asarray(archived, dtype=float), np.asarray(new, dtype=float)
    if a.size < 4 or np.all(a == a[0]) or np.all(b == b[0]):
        return NAN, NAN, NAN
    r = float(np.corrcoef(a, b)[0, 1])
    if abs(r) >= 1:
        return r, r, r
    half = float(scipy.stats.norm.ppf(0.5 + conf / 2)) / math.sqrt(a.size - 3)
    return r, math.tanh(math.atanh(r) - half), math.tanh(math.atanh(r) + half)


def _ratio(x: float, unit: float) -> float:
    return x / unit if unit and math.isfinite(unit) and unit > 0 else NAN


def smallest_effect(
    contrasts: tuple[Contrast, ...], archived: dict[tuple[str, int], float], min_effect_nats: float | None
) -> tuple[float, str]:
    """The smallest |mean d| among ``contrasts`` whose archived 95 % t interval excludes 0, with its label;
    else ``(min_effect_nats, "the plan's min_effect_nats")``, else NaN."""
    found = []
    for c in contrasts:
        d = _archived_values(c, archived)
        mean, _, low, high, _ = mean_interval(list(d.values()))
        if math.isfinite(low) and (low > 0 or high < 0):
            found.append((abs(mean), c.label))
    if found:
        value, label = min(found)
        return value, label
    if min_effect_nats:
        return float(min_effect_nats), "the plan's min_effect_nats"
    return NAN, "none: no contrast's interval excludes 0 and the plan sets no min_effect_nats"


def _archived_values(c: Contrast, nll: dict[tuple[str, int], float]) -> dict[int, float]:
    """Seed -> d of contrast ``c`` at every seed where all its variants have an NLL."""
    seeds = set.intersection(*({s for v2, s in nll if v2 == v} for v, _ in c.weights))
    return {s: c.value({v: nll[(v, s)] for v, _ in c.weights}) for s in sorted(seeds)}


def retrain_check(
    archived: dict[tuple[str, int], float],
    new: dict[tuple[str, int], float],
    contrasts: tuple[Contrast, ...],
    *,
    run_ids: dict[tuple[str, int], str] | None = None,
    min_effect_nats: float | None = None,
    alpha: float = 0.05,
    power: float = 0.8,
) -> RetrainCheck:
    """Compare re-trained runs with the archive (module docstring).

    Args:
        archived: (variant, seed) -> final val NLL (nats/token) of every done archived run.
        new: (variant, seed) -> the re-trained run's final val NLL; each key must be in ``archived``.
        contrasts: :func:`grid_contrasts`.
        run_ids: (variant, seed) -> run id, for the per-run rows.
        min_effect_nats: the plan's, the fallback for the smallest effect.
        alpha, power: the plan's level (the t-tests, Holm, the TOST) and the power an MDE and a
            pairs-needed are priced at.

    Raises:
        ValueError: a re-trained run with no archived value, or no contrast with 2 re-trained seeds.
    """
    unknown = sorted(set(new) - set(archived))
    if unknown:
        raise ValueError(f"re-trained run {unknown[0]} has no archived NLL")
    effect, source = smallest_effect(contrasts, archived, min_effect_nats)
    runs = _run_shifts(archived, new, run_ids or {})
    pairs, out = _contrast_shifts(archived, new, contrasts, effect, alpha, power)
    verdict, reason = decide(
        *zip(
            *((c.n, c.holm_p, c.mean, c.tost_p, c.var_ratio_high, c.var_ratio_low) for c in out), strict=True
        ),
        identical=all(r.new == r.archived for r in runs),
        effect=effect,
        alpha=alpha,
    )
    return RetrainCheck(tuple(runs), tuple(pairs), tuple(out), effect, source, alpha, power, verdict, reason)


def cannot_tell(n: int) -> str:
    """The words of :data:`CANNOT_TELL` at ``n`` pairs."""
    return f"{CANNOT_TELL} at {n} pairs"


def decide(
    n, holm_p, mean, tost_p, ratio_high, ratio_low, *, identical: bool, effect: float, alpha: float
) -> tuple[str, str]:
    """``(verdict, reason)`` of the check, in the module docstring's order, from per-contrast values
    (sequences over the contrasts): pairs ``n``, ``holm_p`` of the mean shift, the ``mean`` shift
    (nats/token), ``tost_p`` at the smallest effect and the redraw ratio's 95 % bounds ``ratio_high`` and
    ``ratio_low``.
    ``identical``: every re-trained NLL equals its archived one exactly; ``effect``: the smallest effect
    (NaN: none, no equivalence step). :func:`retrain_check` and the simulation
    (:mod:`harness.report.simulation.retrain`) both decide here."""
    if identical:
        return BIT_IDENTICAL, "every new NLL equals its archived value"
    if min(n) < MIN_SEEDS:
        return TOO_FEW, f"{min(n)} pairs: a test needs {MIN_SEEDS}"
    if any(h < alpha and beyond_floor(m) for h, m in zip(holm_p, mean, strict=True)):
        return BIAS, "a contrast's mean shift differs from 0 at Holm level alpha"
    if math.isfinite(effect) and not all(p < alpha for p in tost_p):
        return TOO_FEW, "no bias shown, and a bias of the smallest effect not excluded"
    if all(math.isfinite(h) and h < 1 for h in ratio_high):
        return PERTURBED, "every contrast's redraw-ratio interval lies below 1"
    if all(math.isfinite(lo) and lo > PERTURBATION_RATIO for lo in ratio_low):
        return REDRAWN, f"every contrast's redraw-ratio interval lies above {PERTURBATION_RATIO:g}"
    return CANNOT_TELL, (
        f"at {min(n)} pairs a redraw-ratio interval reaches 1 and one reaches {PERTURBATION_RATIO:g} "
        "(or cannot be computed)"
    )


def _run_shifts(archived: dict, new: dict, run_ids: dict) -> list[RunShift]:
    """Per re-trained run: its shift, in nats and in its variant's NLL sd across the archive's seeds."""
    out = []
    for (v, s), y in sorted(new.items()):
        sd = float(np.std([x for (v2, _), x in archived.items() if v2 == v], ddof=1))
        shift = y - archived[(v, s)]
        out.append(
            RunShift(run_ids.get((v, s), f"{v}:s{s}"), v, s, archived[(v, s)], y, shift, _ratio(shift, sd))
        )
    return out


def _contrast_shifts(
    archived: dict, new: dict, contrasts: tuple[Contrast, ...], effect: float, alpha: float, power: float
) -> tuple[list[PairShift], list[ContrastShift]]:
    """Per contrast with >= 2 re-trained seeds: the shift of each seed's paired difference, and the
    contrast's row (module docstring: a bias, equivalence, movement)."""
    pairs, rows = [], []
    for c in contrasts:
        before, after = _archived_values(c, archived), _archived_values(c, new)
        if len(after) < 2:
            continue
        seed_sd = mean_interval(list(before.values()))[1]
        shifts = {s: after[s] - before[s] for s in after}
        pairs += [
            PairShift(c.label, s, before[s], after[s], x, _ratio(x, seed_sd), _ratio(x, effect))
            for s, x in shifts.items()
        ]
        rows.append((c, shifts, seed_sd, before, after))
    if not rows:
        raise ValueError(
            "no contrast has 2 re-trained seeds with all its variants: re-train at least 2 pairs"
        )
    tested = [mean_interval(list(x.values())) for _, x, _, _, _ in rows]
    holm_p = holm(np.array([t[4] for t in tested]))
    level = alpha / len(rows)  # Holm's first step over the m contrasts: what a single bias must beat
    out = []
    for (c, shifts, seed_sd, before, after), (mean, sd, low, high, p), hp in zip(
        rows, tested, holm_p, strict=True
    ):
        x = list(shifts.values())
        tost_p, bound = tost(x, effect, alpha)
        ratio = redraw_ratio(x, seed_sd, len(before))
        corr = correlation([before[s] for s in shifts], [after[s] for s in shifts])
        usable = math.isfinite(effect) and effect > 0
        out.append(
            ContrastShift(
                contrast=c.label,
                n=len(x),
                mean=mean,
                ci_low=low,
                ci_high=high,
                sd=sd,
                p=p,
                holm_p=float(hp),
                mde_nats=mde(sd, len(x), level, power, "two-sided"),
                mde_level=level,
                power_at_effect=power_at(effect, sd, len(x), level, "two-sided")
                if usable and len(x) >= MIN_SEEDS
                else NAN,
                tost_p=tost_p,
                bound=bound,
                pairs_to_exclude=tost_pairs_needed(effect, sd, alpha, power) if usable else None,
                var_ratio=ratio[0],
                var_ratio_low=ratio[1],
                var_ratio_high=ratio[2],
                corr=corr[0],
                corr_low=corr[1],
                corr_high=corr[2],
                seed_sd=seed_sd,
                archive_seeds=len(before),
                archived_mean=float(np.mean(list(before.values()))),
                mean_in_sd=_ratio(mean, seed_sd),
                mean_in_effect=_ratio(mean, effect),
            )
        )
    return pairs, out


__all__ = [
    "BIAS",
    "BIT_IDENTICAL",
    "CANNOT_TELL",
    "PERTURBATION_RATIO",
    "PERTURBED",
    "REDRAWN",
    "TOO_FEW",
    "VERDICTS",
    "Contrast",
    "ContrastShift",
    "PairShift",
    "RetrainCheck",
    "RunShift",
    "cannot_tell",
    "correlation",
    "decide",
    "grid_contrasts",
    "mean_interval",
    "redraw_ratio",
    "retrain_check",
    "smallest_effect",
    "tost",
]
