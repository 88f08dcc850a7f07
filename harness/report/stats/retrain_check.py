"""The cross-machine A/A check: archived runs re-trained elsewhere, compared with their archived NLL (DESIGN 13).

A study's runs are bit-identical on one machine only (DESIGN section 4). Re-training K archived pairs
(seeds) on another machine with the same protocol hash moves each run's final validation NLL
(nats/token) by a *shift* ``new - archived``. A paired test is harmed only where the shift differs
between the two sides of a pair, so the check looks at the **shift of each paired difference**: for a
contrast with weights w over variants (``rd_attnres - block_attnres``: +1, -1) and seed s,
``d_s = sum_v w_v y_vs`` and its shift ``d_s(new) - d_s(archived)``.

Per contrast the K shifts of d get a mean with a two-sided 95 % Student t interval (df = K - 1), the
two-sided one-sample t-test p (H0: mean shift 0), Holm across the grid's contrasts
(:func:`harness.report.stats.decisions.holm`; the contrasts are tested together, as the section 6 A/A check is
across cells), and the MDE of that test at K pairs (:func:`harness.report.stats.power.mde`, noncentral t,
alpha 0.05 and power 0.8 unless given). Every shift is also given in units of

* the contrast's **seed sd**: the sample sd (ddof 1) of the archived d across every archived seed where
  all its runs are done (how much one new seed moves d; a run's shift uses its variant's NLL sd);
* the **smallest effect the study reports**: the smallest |mean d| among the contrasts whose archived
  95 % t interval excludes 0, else the plan's ``min_effect_nats``.

The answer, one of :data:`VERDICTS`: ``bit-identical`` (every new NLL equals its archived value exactly);
``a bias`` (some contrast's mean shift differs from 0 at Holm level alpha: this machine moves one variant
against its partner); else ``a fresh draw`` (the shifts look like noise, a new draw of each run: the
study's paired differences stay unbiased, within the MDE printed beside it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.stats

from harness.design.factorial import parse_factorial
from harness.report.stats.decisions import holm
from harness.report.stats.pairing import comparisons_for
from harness.report.stats.power import mde

BIT_IDENTICAL, FRESH_DRAW, BIAS = "bit-identical", "a fresh draw", "a bias"
VERDICTS = (BIT_IDENTICAL, FRESH_DRAW, BIAS)
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
    """The shifts of one contrast's paired differences over the K re-trained seeds (nats/token):
    ``mean`` with its 95 % t interval, ``sd`` (ddof 1), the two-sided t-test ``p`` and its ``holm_p`` across
    the contrasts, ``mde_nats`` (the smallest mean shift the test detects at ``n`` pairs), ``seed_sd`` (the
    archived d's sd across ``archive_seeds`` seeds), and the mean in units of it and of the smallest effect."""

    contrast: str
    n: int
    mean: float
    ci_low: float
    ci_high: float
    sd: float
    p: float
    holm_p: float
    mde_nats: float
    seed_sd: float
    archive_seeds: int
    archived_mean: float
    mean_in_sd: float
    mean_in_effect: float


@dataclass(frozen=True, slots=True)
class RetrainCheck:
    """The answer of the cross-machine A/A check (module docstring). ``smallest_effect`` (nats/token) is
    the unit beside the seed sd, ``smallest_effect_source`` says which contrast (or the plan) gave it."""

    runs: tuple[RunShift, ...]
    pairs: tuple[PairShift, ...]
    contrasts: tuple[ContrastShift, ...]
    smallest_effect: float
    smallest_effect_source: str
    alpha: float
    power: float
    verdict: str


def mean_interval(x, conf: float = CONF) -> tuple[float, float, float, float, float]:
    """``(mean, sd, ci_low, ci_high, p)`` of values ``x`` [n]: sd with ddof 1, the two-sided Student t
    interval at ``conf`` (df = n - 1) and the one-sample t-test's two-sided p of H0 mean = 0. At zero
    spread the interval is the mean itself and p is 1 at mean 0, else 0. NaN below 2 values."""
    x = np.asarray(x, dtype=float)
    if x.size < 2:
        return (float(x.mean()) if x.size else NAN), NAN, NAN, NAN, NAN
    mean, sd = float(x.mean()), float(x.std(ddof=1))
    if np.all(x == x[0]):
        return mean, 0.0, mean, mean, 1.0 if mean == 0 else 0.0
    se = sd / math.sqrt(x.size)
    half = float(scipy.stats.t.ppf(0.5 + conf / 2, x.size - 1)) * se
    p = float(2 * scipy.stats.t.sf(abs(mean / se), x.size - 1))
    return mean, sd, mean - half, mean + half, p


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

    Raises:
        ValueError: a re-trained run with no archived value, or no contrast with 2 re-trained seeds.
    """
    unknown = sorted(set(new) - set(archived))
    if unknown:
        raise ValueError(f"re-trained run {unknown[0]} has no archived NLL")
    effect, source = smallest_effect(contrasts, archived, min_effect_nats)
    runs = _run_shifts(archived, new, run_ids or {})
    pairs, out = _contrast_shifts(archived, new, contrasts, effect, alpha, power)
    if all(r.new == r.archived for r in runs):
        verdict = BIT_IDENTICAL
    elif any(c.holm_p < alpha for c in out):
        verdict = BIAS
    else:
        verdict = FRESH_DRAW
    return RetrainCheck(tuple(runs), tuple(pairs), tuple(out), effect, source, alpha, power, verdict)


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
    """Per contrast with >= 2 re-trained seeds: the shift of each seed's paired difference, and their mean
    with its interval, p, Holm p across the contrasts and MDE (module docstring)."""
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
        rows.append((c, list(shifts.values()), seed_sd, before))
    if not rows:
        raise ValueError(
            "no contrast has 2 re-trained seeds with all its variants: re-train at least 2 pairs"
        )
    tested = [mean_interval(x) for _, x, _, _ in rows]
    holm_p = holm(np.array([t[4] for t in tested]))
    out = [
        ContrastShift(
            contrast=c.label,
            n=len(x),
            mean=mean,
            ci_low=low,
            ci_high=high,
            sd=sd,
            p=p,
            holm_p=float(hp),
            mde_nats=mde(sd, len(x), alpha, power, "two-sided"),
            seed_sd=seed_sd,
            archive_seeds=len(before),
            archived_mean=float(np.mean(list(before.values()))),
            mean_in_sd=_ratio(mean, seed_sd),
            mean_in_effect=_ratio(mean, effect),
        )
        for (c, x, seed_sd, before), (mean, sd, low, high, p), hp in zip(rows, tested, holm_p, strict=True)
    ]
    return pairs, out


__all__ = [
    "BIAS",
    "BIT_IDENTICAL",
    "FRESH_DRAW",
    "VERDICTS",
    "Contrast",
    "ContrastShift",
    "PairShift",
    "RetrainCheck",
    "RunShift",
    "grid_contrasts",
    "mean_interval",
    "retrain_check",
    "smallest_effect",
]
