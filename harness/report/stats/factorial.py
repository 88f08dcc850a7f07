"""Factorial attribution, paired over seeds (DESIGN section 12).

A grid's ``[factorial]`` table (:mod:`harness.design.factorial`) names two binary factors A and B and the
variant at each combination. Per cell (size, budget) and seed s, with y_ab the final validation NLL
(nats/token) of the variant at A = a, B = b, every contrast is a per-seed weighted sum of the four
runs, tested like a paired difference (negative = lower NLL = the factor helps):

* simple effects: A at B = b, ``y_1b - y_0b``; B at A = a, ``y_a1 - y_a0`` (four per cell);
* main effects: the mean of a factor's two simple effects;
* the interaction ``I = (y_11 - y_10) - (y_01 - y_00)`` (= B's simple effect at A = 1 minus at A = 0,
  = A's at B = 1 minus at B = 0).

Runs pair as in :mod:`harness.report.stats.pairing`: one seed, one protocol hash (the hash leaves the variant
out, DESIGN 4); a contrast uses the seeds where all the runs it weighs finished. A seed where exactly one
of them diverged is a loss for that run, never a dropped seed (:mod:`harness.report.stats.divergence`): the
contrast is ``sign(w_v) x M`` (M = the largest |observed contrast|), as if the diverged variant were the
worst of them; two or more diverged: the seed is left out (named).

Each contrast: mean, 95 % t interval, wins (seeds < 0), a two-sided paired t-test (the exact sign-flip p
at zero spread), the plan's looks (:mod:`harness.report.stats.sequential`) and the numerical floor
(:mod:`harness.report.stats.floors`). **The factorial family** (Holm, :func:`harness.report.stats.decisions.holm`, on
the sequential p): the four simple effects and the interaction of every cell of the grid, five per cell:
the verdicts in words rest on exactly these. Main effects are tested and shown, in no family: the words
use only their sign. A contrast is *established* where its Holm p < alpha, its look has >= 3 pairs and
|mean| is beyond the floor.

Words (:func:`verdicts`, DESIGN 12; the factor names are the grid's): "X helps with and without Y" (both
simple effects of X established and negative; "hurts" when positive); "Y absorbs X" (interaction
established with sign opposing X's main effect, X's simple effect at Y = 1 not established); "no
interaction shown at these seeds" with the interaction's MDE (:mod:`harness.report.stats.power`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np
import polars as pl

from harness.design.analysis_plan import AnalysisPlan
from harness.design.factorial import Factorial
from harness.report.stats import decisions as dec
from harness.report.stats import paired_tests as paired
from harness.report.stats.descriptives import describe
from harness.report.stats.divergence import Imputed, LostSeeds, TestedDiffs, effect_text, worst_case
from harness.report.stats.floors import beyond_floor
from harness.report.stats.looks import Look
from harness.report.stats.pairing import ProtocolMismatchError
from harness.report.stats.power import SeedsNeeded, holm_share_plan, look_mde, planned_seeds
from harness.report.stats.results import Comparison
from harness.report.stats.sequential import SequentialTest, sequential_test

SIMPLE, MAIN, INTERACTION = "factorial_simple", "factorial_main", "factorial_interaction"
FACTORIAL_KINDS = (SIMPLE, MAIN, INTERACTION)  # stats.csv kinds of the factorial rows
COMBOS = ((0, 0), (1, 0), (0, 1), (1, 1))  # the order of the weights below: y_00, y_10, y_01, y_11
NAN = float("nan")
ESTABLISHED, NOT_ESTABLISHED, DESCRIPTIVE = "established", "not established", "descriptive (in no family)"


@dataclass(frozen=True, slots=True)
class ContrastSpec:
    """One contrast: its kind, the factor (0: A, 1: B; None: the interaction), the other factor's level
    for a simple effect, and its weights over (y_00, y_10, y_01, y_11)."""

    kind: str
    factor: int | None
    at: int | None
    weights: tuple[float, float, float, float]


SPECS = (
    ContrastSpec(SIMPLE, 0, 0, (-1.0, 1.0, 0.0, 0.0)),
    ContrastSpec(SIMPLE, 0, 1, (0.0, 0.0, -1.0, 1.0)),
    ContrastSpec(MAIN, 0, None, (-0.5, 0.5, -0.5, 0.5)),
    ContrastSpec(SIMPLE, 1, 0, (-1.0, 0.0, 1.0, 0.0)),
    ContrastSpec(SIMPLE, 1, 1, (0.0, -1.0, 0.0, 1.0)),
    ContrastSpec(MAIN, 1, None, (-0.5, -0.5, 0.5, 0.5)),
    ContrastSpec(INTERACTION, None, None, (1.0, -1.0, -1.0, 1.0)),
)


@dataclass(frozen=True, slots=True)
class FactorialContrast:
    """One contrast of one cell, tested (module docstring). Units: nats/token.

    ``comparison`` holds the label, the variants and the descriptives of the observed seeds (as a
    :class:`harness.report.stats.results.Comparison` of kind ``factorial_*``); ``n``, ``mean``, ``sd`` and
    ``seeds`` describe the tested values (observed plus ``imputed`` losses). ``p`` is the two-sided p at
    the current ``look`` (``exact``: the sign-flip p at zero spread), ``sequential_p`` what Holm sees,
    ``holm_p`` over the grid's ``family_size`` factorial contrasts (NaN: a main effect, or untested).
    ``mde_nats`` is the two-sided MDE at this look (NaN for a main effect), ``seeds_needed`` for the plan's ``min_effect_nats``.
    """

    comparison: Comparison
    spec: ContrastSpec
    factor: str  # the factor's name, or "A x B" for the interaction
    n: int
    seeds: tuple[int, ...]
    mean: float
    sd: float
    p: float
    exact: bool
    sequential_p: float
    deciding_mean: float
    decided_look: int
    look: Look
    holm_p: float
    family_size: int
    established: bool
    verdict: str
    reason: str
    mde_nats: float
    seeds_needed: SeedsNeeded
    imputed: tuple[Imputed, ...] = ()
    dropped: tuple[int, ...] = ()
    holm_share: int = 1  # mde_nats and seeds_needed are at alpha / holm_share (see _holm_shares)


@dataclass(frozen=True, slots=True)
class FactorialCell:
    """The factorial of one cell: the design, the mean NLL of each combination over the seeds where all
    four finished (``means``/``ci_low``/``ci_high`` by (a, b), 95 % t interval across seeds; ``n_all``
    those seeds), the seven contrasts in :data:`SPECS` order and the verdict sentences."""

    size: str
    budget_tokens: int
    design: Factorial
    n_all: int
    means: dict[tuple[int, int], float]
    ci_low: dict[tuple[int, int], float]
    ci_high: dict[tuple[int, int], float]
    contrasts: tuple[FactorialContrast, ...]
    verdicts: tuple[str, ...] = ()

    def contrast(self, kind: str, factor: int | None = None, at: int | None = None) -> FactorialContrast:
        """The contrast of ``kind`` for ``factor`` (0: A, 1: B) at the other's level ``at``."""
        return next(
            c for c in self.contrasts if (c.spec.kind, c.spec.factor, c.spec.at) == (kind, factor, at)
        )


def _labels(f: Factorial, spec: ContrastSpec) -> tuple[str, str, str, str]:
    """(factor name, comparison label, first, second) of a contrast."""
    a, b = f.factors
    v = {combo: f.variant(*combo) for combo in COMBOS}
    if spec.kind == INTERACTION:
        formula = f"({v[1, 1]} - {v[1, 0]}) - ({v[0, 1]} - {v[0, 0]})"
        return f"{a} x {b}", f"interaction {a} x {b}: {formula}", "", ""
    name, other = f.factors[spec.factor], f.factors[1 - spec.factor]
    if spec.kind == MAIN:
        return name, f"main effect of {name} (mean over {other} = 0, 1)", "", ""
    at = spec.at
    first, second = (v[1, at], v[0, at]) if spec.factor == 0 else (v[at, 1], v[at, 0])
    return name, f"{name} at {other}={at}: {first} - {second}", first, second


def cell_values(
    usable: pl.DataFrame, f: Factorial, size: str, budget: int, allow_partial: bool, warn: list[str]
) -> dict[int, dict[tuple[int, int], float]]:
    """``{seed: {(a, b): val_nll}}`` of the cell's usable runs of the four variants; a seed whose runs
    differ in protocol hash raises :class:`ProtocolMismatchError` (``allow_partial``: left out, a line in
    ``warn``)."""
    combo_of = {f.variant(*c): c for c in COMBOS}
    rows = usable.filter(
        (pl.col("size") == size)
        & (pl.col("budget_tokens") == budget)
        & pl.col("variant").is_in(list(combo_of))
    )
    out: dict[int, dict[tuple[int, int], float]] = {}
    hashes: dict[int, dict[str, str]] = {}
    for r in rows.iter_rows(named=True):
        out.setdefault(r["seed"], {})[combo_of[r["variant"]]] = r["val_nll"]
        hashes.setdefault(r["seed"], {})[r["variant"]] = r["protocol_hash"]
    for seed, by in sorted(hashes.items()):
        if len(set(by.values())) > 1:
            msg = f"factorial size={size} budget_tokens={budget} seed={seed}: protocol_hash differs: {by}"
            if not allow_partial:
                raise ProtocolMismatchError(msg + " (only runs with the same protocol are paired)")
            warn.append(msg + "; seed left out (--allow-partial)")
            del out[seed]
    return out


def tested_values(
    spec: ContrastSpec,
    f: Factorial,
    values: dict[int, dict[tuple[int, int], float]],
    lost: LostSeeds,
    size: str,
    budget: int,
) -> tuple[tuple[int, ...], np.ndarray, TestedDiffs]:
    """(observed seeds, observed contrast values, tested values) of one contrast in one cell: the seeds
    where every run it weighs finished, plus the seeds where exactly one of them diverged and the others
    finished, counted as a loss for it (module docstring)."""
    used = [c for c, w in zip(COMBOS, spec.weights) if w != 0]
    sign = {c: int(np.sign(w)) for c, w in zip(COMBOS, spec.weights) if w != 0}
    seeds = tuple(s for s in sorted(values) if all(c in values[s] for c in used))
    d = np.array([sum(w * values[s][c] for c, w in zip(COMBOS, spec.weights) if w != 0) for s in seeds])
    lost_by = {c: lost.of(f.variant(*c), size, budget) for c in used}
    done_by = {c: lost.done(f.variant(*c), size, budget) for c in used}
    losses, dropped = {}, []
    for s in sorted(set().union(*(set(x) for x in lost_by.values()))):
        gone = [c for c in used if s in lost_by[c]]
        if not all(s in done_by[c] for c in used if c not in gone):
            continue  # a run missing for another reason: the seed is missing, as for any pair
        if len(gone) == 1:
            c = gone[0]
            losses[s] = (sign[c], f.variant(*c), lost_by[c][s])
        else:
            dropped.append(s)
    return seeds, d, worst_case(seeds, d, losses, dropped)


class _Tested(NamedTuple):
    """One contrast before Holm: its comparison (observed seeds), tested values and sequential test."""

    spec: ContrastSpec
    factor: str
    comparison: Comparison
    tested: TestedDiffs
    test: SequentialTest


def _tests(
    f: Factorial, values, lost: LostSeeds, size: str, budget: int, plan: AnalysisPlan
) -> list[_Tested]:
    """The seven contrasts of one cell, each tested two-sided under the plan's looks."""
    out = []
    for spec in SPECS:
        name, label, first, second = _labels(f, spec)
        seeds, d, tested = tested_values(spec, f, values, lost, size, budget)
        every = sorted(set(values) | set(tested.seeds) | set(tested.dropped))
        missing = tuple(f"seed {s} (a run of this contrast did not finish)" for s in every if s not in seeds)
        comparison = Comparison(
            comparison=label,
            first=first,
            second=second,
            kind=spec.kind,
            size=size,
            budget_tokens=budget,
            seeds=seeds,
            stats=describe(d),
            missing=missing,
        )
        test = sequential_test(tested.d, plan, dec.two_sided_p)
        out.append(_Tested(spec, name, comparison, tested, test))
    return out


def _contrast(t: _Tested, holm_p: float, family: int, plan: AnalysisPlan) -> FactorialContrast:
    """The :class:`FactorialContrast` of one tested contrast, given its Holm p (NaN: not in the family)."""
    d, q, in_family = t.tested.d, t.test, t.spec.kind != MAIN
    n = int(d.size)
    sd = NAN if n < 2 else 0.0 if bool(paired.zero_spread(d)) else float(np.std(d, ddof=1))
    tested = math.isfinite(q.sequential_p)
    established = bool(
        in_family
        and tested
        and q.look.n >= paired.MIN_PAIRS
        and holm_p < plan.alpha
        and bool(beyond_floor(q.deciding_mean))
    )
    reason = (
        "before the first look"
        if q.look.before_first
        else "fewer than 3 pairs"
        if n < paired.MIN_PAIRS
        else "main effect: in no family"
        if not in_family
        else "Holm p < alpha"
        if established
        else "mean within the numerical floor"
        if holm_p < plan.alpha
        else "Holm p >= alpha"
    )
    verdict = DESCRIPTIVE if not in_family else ESTABLISHED if established else NOT_ESTABLISHED
    return FactorialContrast(
        comparison=t.comparison,
        spec=t.spec,
        factor=t.factor,
        n=n,
        seeds=t.tested.seeds,
        mean=float(d.mean()) if n else NAN,
        sd=sd,
        p=q.p,
        exact=q.exact,
        sequential_p=q.sequential_p,
        deciding_mean=q.deciding_mean,
        decided_look=q.decided_look,
        look=q.look,
        holm_p=holm_p if in_family else NAN,
        family_size=family if in_family and tested else 0,
        established=established,
        verdict=verdict,
        reason=reason,
        mde_nats=look_mde(sd, n, plan, "two-sided") if in_family else NAN,  # the words use these only
        seeds_needed=planned_seeds(plan.min_effect_nats, sd, plan, "two-sided"),
        imputed=t.tested.imputed,
        dropped=t.tested.dropped,
    )


def _holm_shares(cells: list[list[FactorialContrast]], plan: AnalysisPlan) -> list[list[FactorialContrast]]:
    """Each tested family member's MDE and seeds needed at the level Holm really gives it: alpha / k, k = 1
    + the other tested members of the grid's factorial family not established (they stay unrejected, so
    it can be rejected at best at Holm's step m - k + 1). Descriptive planning only: no verdict uses it."""
    members = [c for cs in cells for c in cs if c.spec.kind != MAIN and c.family_size]
    open_ = sum(not c.established for c in members)
    out = []
    for cs in cells:
        row = []
        for c in cs:
            if c.spec.kind == MAIN or not c.family_size:
                row.append(c)
                continue
            share = 1 + open_ - (not c.established)
            at = holm_share_plan(plan, share)
            row.append(
                replace(
                    c,
                    holm_share=share,
                    mde_nats=look_mde(c.sd, c.n, at, "two-sided"),
                    seeds_needed=planned_seeds(plan.min_effect_nats, c.sd, at, "two-sided"),
                )
            )
        out.append(row)
    return out


def holm_share_text(c: FactorialContrast) -> str:
    """Which level a factorial contrast's MDE is at: 'level alpha / 3 (Holm: 2 other contrasts of the
    family not established)' or 'level alpha (every other contrast of the family established)'."""
    if c.holm_share <= 1:
        return "level alpha (every other contrast of the family established)"
    return f"level alpha / {c.holm_share} (Holm: {c.holm_share - 1} other contrast(s) of the family not established)"


def _means(values) -> tuple[int, dict, dict, dict]:
    """Seeds with all four runs, and each combination's mean NLL with its 95 % t interval over them."""
    full = [s for s in sorted(values) if len(values[s]) == len(COMBOS)]
    means, low, high = {}, {}, {}
    for c in COMBOS:
        y = np.array([values[s][c] for s in full])
        t = paired.t_test(y) if y.size else {}
        means[c] = float(y.mean()) if y.size else NAN
        low[c] = float(t["ci_low"]) if y.size else NAN
        high[c] = float(t["ci_high"]) if y.size else NAN
    return len(full), means, low, high


def factorial_cells(
    usable: pl.DataFrame,
    cells,
    plan: AnalysisPlan,
    lost: LostSeeds,
    *,
    allow_partial: bool = False,
    warn: list[str] | None = None,
) -> tuple[FactorialCell, ...]:
    """The factorial of every cell of a grid whose plan has one (module docstring); () without.

    Args:
        usable: the grid's runs that may enter a statistic (:attr:`harness.report.stats.pairing.Pairing.usable`).
        cells: ``(size, budget_tokens)`` in report order.
        plan: the analysis plan; ``plan.factorial`` the design.
        lost: the grid's diverged runs (:class:`harness.report.stats.divergence.LostSeeds`).
        allow_partial: seeds whose four runs differ in protocol hash are left out with a warning.
        warn: receives warnings (cells without a run of the design).

    Raises:
        ProtocolMismatchError: runs of one seed differ in protocol hash (unless ``allow_partial``).
    """
    f, warn = plan.factorial, warn if warn is not None else []
    if f is None:
        return ()
    per_cell = []
    for size, budget in cells:
        values = cell_values(usable, f, size, budget, allow_partial, warn)
        if not values:
            warn.append(
                f"factorial size={size} budget_tokens={budget}: no finished run of {', '.join(f.variants)}"
            )
            continue
        per_cell.append((size, budget, values, _tests(f, values, lost, size, budget, plan)))
    in_family = [t.spec.kind != MAIN for *_, tests in per_cell for t in tests]
    p = np.array([t.test.sequential_p for *_, tests in per_cell for t in tests])
    adj = np.full(p.shape, NAN)
    adj[np.array(in_family, bool)] = dec.holm(p[np.array(in_family, bool)]) if p.size else []
    family = int(np.isfinite(adj).sum())
    built, k = [], 0
    for _, _, _, tests in per_cell:
        built.append([_contrast(t, float(adj[k + i]), family, plan) for i, t in enumerate(tests)])
        k += len(tests)
    built = _holm_shares(built, plan)
    out = []
    for (size, budget, values, _), contrasts in zip(per_cell, built):
        contrasts = tuple(contrasts)
        n_all, means, low, high = _means(values)
        cell = FactorialCell(size, budget, f, n_all, means, low, high, contrasts)
        out.append(replace(cell, verdicts=verdicts(cell, plan)))
    return tuple(out)


def _no_interaction(inter: FactorialContrast, plan: AnalysisPlan) -> str:
    """ "no interaction shown at these seeds ...", with its MDE and the seeds an interaction of
    ``min_effect_nats`` would need."""
    mde = (
        f"MDE {inter.mde_nats:.4f} nats/token" if math.isfinite(inter.mde_nats) else "MDE unknown (no spread)"
    )
    text = (
        f"no interaction shown at these seeds (n = {inter.look.n}; {mde} at power {plan.power:g}, "
        f"{holm_share_text(inter)}"
    )
    delta, need = plan.min_effect_nats, inter.seeds_needed
    if delta is not None and need.reachable:
        text += f"; an interaction of {delta:g} nats/token needs {need.n} seeds"
    elif delta is not None and math.isfinite(need.power_at_max):
        text += f"; an interaction of {delta:g} nats/token is not reachable within {need.max_seeds} seeds"
    return text + ")"


def _effect(c: FactorialContrast) -> str:
    """A contrast's mean for a verdict sentence; one resting only on imputed values says so."""
    return effect_text(c.mean, c.n, c.imputed)


def verdicts(cell: FactorialCell, plan: AnalysisPlan) -> tuple[str, ...]:
    """The verdict sentences of one cell (DESIGN 12; negative = lower NLL = helps), in the grid's names.

    "X helps (hurts) with and without Y": both simple effects of X established, same sign. "Y absorbs
    X": the interaction established with sign opposing X's main effect and X's simple effect at Y = 1
    not established. An established interaction without absorption is stated with B's two simple
    effects; an interaction not established gives "no interaction shown at these seeds" with its MDE.
    """
    names = cell.design.factors
    inter = cell.contrast(INTERACTION)
    out = []
    for x in (0, 1):
        s0, s1 = cell.contrast(SIMPLE, x, 0), cell.contrast(SIMPLE, x, 1)
        if s0.established and s1.established and np.sign(s0.mean) == np.sign(s1.mean):
            word = "helps" if s0.mean < 0 else "hurts"
            out.append(
                f"{names[x]} {word} with and without {names[1 - x]} ({_effect(s0)} nats/token without, "
                f"{_effect(s1)} with; both established)"
            )
    if not inter.established:
        tested = math.isfinite(inter.sequential_p)
        return tuple(
            out + [_no_interaction(inter, plan) if tested else f"interaction not tested ({inter.reason})"]
        )
    absorbed = False
    for x in (0, 1):
        m, s1 = cell.contrast(MAIN, x), cell.contrast(SIMPLE, x, 1)
        if m.mean != 0 and np.sign(inter.mean) == -np.sign(m.mean) and not s1.established:
            absorbed = True
            out.append(
                f"{names[1 - x]} absorbs {names[x]}: the interaction ({_effect(inter)} nats/token, "
                f"established) opposes {names[x]}'s main effect ({_effect(m)}), and {names[x]}'s effect "
                f"with {names[1 - x]} ({_effect(s1)}) is not established"
            )
    if not absorbed:
        b0, b1 = cell.contrast(SIMPLE, 1, 0), cell.contrast(SIMPLE, 1, 1)
        out.append(
            f"{names[0]} and {names[1]} interact (interaction {_effect(inter)} nats/token, established): "
            f"{names[1]}'s effect is {_effect(b1)} with {names[0]} and {_effect(b0)} without"
        )
    return tuple(out)


__all__ = [
    "COMBOS",
    "ContrastSpec",
    "FACTORIAL_KINDS",
    "FactorialCell",
    "FactorialContrast",
    "INTERACTION",
    "MAIN",
    "SIMPLE",
    "SPECS",
    "cell_values",
    "factorial_cells",
    "holm_share_text",
    "verdicts",
    "tested_values",
]
