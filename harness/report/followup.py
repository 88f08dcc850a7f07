"""The follow-up a report proposes when a control does better than the treatment (DESIGN section 12).

Where a control reproduces the gain with a gain fraction whose 95 % Fieller interval lies above 1
(:func:`absorbing`), the next question is whether the treatment's change still helps on top of the
control's: a 2 x 2 factorial on paired seeds, parent (0, 0), control (1, 0), treatment (0, 1) and
the treatment with the control's additions (1, 1) (:func:`composed_variant`). ``harness followup``
writes that grid (:func:`grid_text`) with a plan from the source grid's own runs
(:func:`plan_followup`); the report names it (:mod:`harness.report.render.followup_section`).

Plan arithmetic. With independent run noise of variance s^2 per run, one paired difference has
variance 2 s^2, a main effect (the mean of two simple effects) s^2, and the interaction
``I = (y11 - y10) - (y01 - y00)`` 4 s^2: twice a main effect's sd, so about 4x its seeds for the same
size, and sqrt(2) times one paired difference's sd. The interaction's sd is estimated per cell as
``sqrt(sd(t - p)^2 + sd(c - p)^2)`` from the source grid's pairs (the two differences the
interaction subtracts), and the seeds come from :func:`harness.report.stats.power.planned_seeds`
(two-sided, over two looks).
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass

from harness.design.analysis_plan import AnalysisPlan
from harness.models.spec import VariantSpec
from harness.report.stats.decisions import GAIN_ESTABLISHED, REPRODUCES
from harness.report.stats.looks import increments
from harness.report.stats.paired_tests import MIN_PAIRS
from harness.report.stats.pairing import split_cell_size
from harness.report.stats.power import holm_share_plan, planned_seeds, power_at
from harness.report.stats.results import ControlAssessment, ReportStats
from harness.report.stats.seed_planning import FAMILY_PER_CELL

KINDS = ("queries", "offsets", "routes")  # what a composed spec may add, by name (harness.models.compose)
N_VARIANTS = 4  # every seed of a 2 x 2 factorial trains all four cells


def does_better(stats: ReportStats) -> tuple[ControlAssessment, ...]:
    """The controls that reproduce the gain with a bounded gain fraction whose 95 % interval lies above 1."""
    return tuple(
        a
        for a in stats.assessments
        if a.verdict == REPRODUCES and a.bounded and math.isfinite(a.fraction_low) and a.fraction_low > 1
    )


def absorbing(stats: ReportStats) -> tuple[ControlAssessment, ...]:
    """:func:`does_better`, except a control the grid's own ``[factorial]`` already crosses with the
    treatment (its factorial section is that follow-up): the controls to propose a follow-up for."""
    return tuple(a for a in does_better(stats) if not _crossed(stats, a.control))


def _crossed(stats: ReportStats, control: str) -> bool:
    """Whether the grid's factorial holds ``control``, the treatment and the parent."""
    fac = stats.plan.factorial
    return fac is not None and {control, stats.treatment, stats.parent} <= set(fac.variants)


def followup_command(grid: str, control: str) -> str:
    """The ``harness followup`` line that writes the factorial for ``control`` in ``grid``."""
    return f"harness followup --grid {grid} --absorb {control} --out {grid}_{control}_factorial.toml"


def _added(spec: VariantSpec, over: VariantSpec) -> frozenset[tuple[str, str, str]]:
    """``(site, kind, name)`` of every query, offset and route ``spec`` has and ``over`` lacks."""
    out = set()
    for site, s in spec.sites.items():
        o = over.sites.get(site)
        for kind in KINDS:
            out |= {(site, kind, n) for n in set(getattr(s, kind)) - set(getattr(o, kind) if o else ())}
    return frozenset(out)


def control_additions(control: str, parent: str, specs: dict[str, VariantSpec]) -> frozenset:
    """What ``control`` adds to ``parent``, as ``(site, kind, name)`` (empty for unknown variants)."""
    if control not in specs or parent not in specs:
        return frozenset()
    return _added(specs[control], specs[parent])


def composed_variant(treatment: str, control: str, parent: str, specs: dict[str, VariantSpec]) -> str | None:
    """The shipped (or ``$HARNESS_SPEC_PATH``) composed spec = the treatment with the control's additions.

    A spec qualifies when its ``base`` is ``treatment`` and the names it adds (queries, offsets, routes
    per site) are exactly those ``control`` adds to ``parent`` (for param_matched: the attention offset
    ``b_qk``, so ``rd_offset``). None when no spec qualifies or the control adds no named part.
    """
    want = control_additions(control, parent, specs)
    if not want or treatment not in specs:
        return None
    hits = sorted(n for n, s in specs.items() if s.base == treatment and _added(s, specs[treatment]) == want)
    return hits[0] if hits else None


@dataclass(frozen=True, slots=True)
class CellSd:
    """One source cell's paired sds (nats/token) and the interaction's, over ``n`` seeds."""

    size: str
    budget_tokens: int
    n: int
    sd_tp: float  # treatment - parent
    sd_cp: float  # control - parent
    gain: float  # the treatment's observed gain, -mean(t - p)

    @property
    def sd_interaction(self) -> float:
        """``sqrt(sd_tp^2 + sd_cp^2)``: the sd of a difference of two paired differences."""
        return math.hypot(self.sd_tp, self.sd_cp)


@dataclass(frozen=True, slots=True)
class FollowupPlan:
    """The seeds, looks and cost of the factorial follow-up (module docstring for the arithmetic)."""

    cells: tuple[CellSd, ...]
    sd: float  # the interaction sd planned with: the largest over the cells
    effect: float  # the planned interaction (min_effect_nats)
    looks: tuple[int, int]
    reachable: bool
    power: float  # at the last look, at its level (Holm's alpha / family), for ``effect``
    power_absorbed: float  # the same for full absorption (|I| = the largest observed gain)
    headline_seeds: int | None  # seeds a simple effect of size ``effect`` needs at sd(t - p) (one-sided)
    plan: AnalysisPlan  # the written [analysis] table
    family: (
        int  # the factorial contrasts Holm tests the interaction among (FAMILY_PER_CELL x the grid's cells)
    )


def cell_sds(stats: ReportStats, control: str) -> tuple[CellSd, ...]:
    """Each cell with >= 3 pairs of both treatment - parent and control - parent, and finite sds."""
    by = {(c.comparison, c.size, c.budget_tokens): c.stats for c in stats.comparisons}
    out = []
    for h in stats.headlines:
        tp = by.get((f"{stats.treatment} - {stats.parent}", h.size, h.budget_tokens))
        cp = by.get((f"{control} - {stats.parent}", h.size, h.budget_tokens))
        if tp is None or cp is None or min(tp.n, cp.n) < MIN_PAIRS:
            continue
        if math.isfinite(tp.sd) and math.isfinite(cp.sd) and tp.sd + cp.sd > 0:
            out.append(CellSd(h.size, h.budget_tokens, min(tp.n, cp.n), tp.sd, cp.sd, -tp.mean))
    return tuple(out)


def _looks_plan(source: AnalysisPlan, effect: float, n_last: int) -> AnalysisPlan:
    """The source's plan with ``min_effect_nats`` = effect and looks at n_last / 2 and n_last seeds."""
    return dataclasses.replace(
        source, min_effect_nats=effect, looks=(n_last // 2, n_last), max_seeds=n_last, factorial=None
    )


def plan_followup(cells: tuple[CellSd, ...], source: AnalysisPlan) -> FollowupPlan:
    """Looks ``(n/2, n)`` with the smallest even n (6 <= n <= cap) whose last look reaches the plan's power
    for an interaction of ``min_effect_nats`` (the source's, else the largest observed gain) at the largest
    interaction sd of the cells; cap = max(the source's max_seeds, 30). None reaching it: n = cap and
    ``reachable`` False. Powers and seeds are priced at the level the follow-up's report will test at: the
    interaction at alpha / m (Holm over the grid's m factorial contrasts, its first step:
    :func:`~harness.report.stats.power.holm_share_plan`), a simple effect at alpha / cells (Holm over the cells).
    The written plan keeps the source's alpha (Holm divides it when the report tests).

    Raises:
        ValueError: no cells (nothing to plan from).
    """
    if not cells:
        raise ValueError("no cell with >= 3 finished pairs of the treatment and the control to plan from")
    sd = max(c.sd_interaction for c in cells)
    gain = max(abs(c.gain) for c in cells)
    effect = source.min_effect_nats if source.min_effect_nats else gain
    cap = max(source.max_seeds, AnalysisPlan().max_seeds)
    cap -= cap % 2
    n_cells = len({c.size for c in cells}) * len(
        {c.budget_tokens for c in cells}
    )  # the grid: sizes x budgets
    family = FAMILY_PER_CELL * n_cells
    chosen, reachable = cap, False
    for n in range(6, cap + 1, 2):
        if planned_seeds(
            effect, sd, holm_share_plan(_looks_plan(source, effect, n), family), "two-sided"
        ).reachable:
            chosen, reachable = n, True
            break
    plan = _looks_plan(source, effect, chosen)
    tested = holm_share_plan(plan, family)
    need = planned_seeds(effect, sd, tested, "two-sided")
    absorbed = power_at(gain, sd, chosen, _last_level(tested), "two-sided")
    head = planned_seeds(effect, max(c.sd_tp for c in cells), holm_share_plan(plan, n_cells), "one-sided")
    return FollowupPlan(
        cells=cells,
        sd=sd,
        effect=effect,
        looks=plan.looks,
        reachable=reachable,
        power=need.power_at_max,
        power_absorbed=float(absorbed),
        headline_seeds=head.n,
        plan=plan,
        family=family,
    )


def _last_level(plan: AnalysisPlan) -> float:
    """The last look's share of alpha (DESIGN 8)."""
    return float(increments(plan.alpha, plan.looks)[-1])


@dataclass(frozen=True, slots=True)
class Source:
    """What the follow-up copies from the source grid's runs (their stored configs)."""

    grid: str
    corpus: str
    parent: str
    treatment: str
    control: str
    composed: str
    train: dict  # variant -> its [train] overrides (the parent's is the grid's [train])
    cells: tuple[tuple[str, int], ...]  # (size, budget_tokens)
    why: str  # what the source's report says of the control (why_text)


def why_text(stats: ReportStats, control: str) -> str:
    """What the source grid's report says of ``control``: where it does better than the treatment, or not."""
    found = [a for a in does_better(stats) if a.control == control]
    if not found:
        return (
            f"asked for by hand: {control}'s gain fraction interval lies above 1 in no cell of {stats.grid}."
        )
    return (
        "; ".join(
            f"{control} reproduces {stats.treatment}'s gain and does better than it at {a.size}, {a.budget_tokens:_} "
            f"(gain fraction {a.fraction:.2f}, 95 % interval {a.fraction_low:.2f} to {a.fraction_high:.2f})"
            for a in found
        )
        + "."
    )


def unestablished_lines(
    stats: ReportStats, cells: tuple[CellSd, ...], control: str, composed: str
) -> list[str]:
    """One line per planned cell whose headline is not ``gain established`` (said so that nobody reads the factorial as testing absorption): there the
    factorial cannot ask whether ``control`` absorbs a gain, only whether the treatment's change
    helps on top of the control's additions ((1,1) ``composed`` against (1,0) ``control``)."""
    planned = {(c.size, c.budget_tokens) for c in cells}
    t, p = stats.treatment, stats.parent
    return [
        f"note: at {h.size}, {h.budget_tokens:_} the headline is '{h.verdict}': {t}'s gain over {p} is not "
        f"established there, so the follow-up tests whether {t}'s change helps on top of {control}'s "
        f"({composed} (1,1) against {control} (1,0)), not whether {control} absorbs a gain"
        for h in stats.headlines
        if (h.size, h.budget_tokens) in planned and h.verdict != GAIN_ESTABLISHED
    ]


def _value(v) -> str:
    """A TOML value: JSON's spelling of strings, numbers, booleans and lists is TOML's."""
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {_value(x)}" for k, x in v.items()) + " }"
    return json.dumps(v)


def _cost_lines(src: Source, fp: FollowupPlan, speed: dict) -> list[str]:
    """Runs, tokens and worker-hours of each look at the store's measured tokens/s per size."""
    out = []
    for k, n in enumerate(fp.looks, 1):
        runs = N_VARIANTS * n * len(src.cells)
        tokens = N_VARIANTS * n * sum(b for _, b in src.cells)
        secs = [
            N_VARIANTS * n * b / speed[s].tokens_per_s
            for s, b in src.cells
            if s in speed and speed[s].tokens_per_s
        ]
        hours = f"{sum(secs) / 3600:.2f} worker-hours" if len(secs) == len(src.cells) else "time unknown"
        out.append(f"#   up to look {k} ({n} seeds): {runs} runs, {tokens:_} tokens, {hours}")
    for s in sorted({s for s, _ in src.cells}):
        where = speed[s].source if s in speed else "no finished run or bench of this size in the store"
        tps = f"{speed[s].tokens_per_s:.0f} tokens/s" if s in speed and speed[s].tokens_per_s else "unknown"
        out.append(f"#   size {s}: {tps} per worker ({where})")
    return out


def _header(src: Source, fp: FollowupPlan, speed: dict) -> list[str]:
    t, c, p, tc = src.treatment, src.control, src.parent, src.composed
    sds = "; ".join(
        f"{x.size} {x.budget_tokens:_}: sd(t - p) {x.sd_tp:.4g}, sd(c - p) {x.sd_cp:.4g} over {x.n} seeds, "
        f"interaction sd {x.sd_interaction:.4g}"
        for x in fp.cells
    )
    reach = (
        f"reaches power {fp.plan.power:g} at look 2 ({fp.power:.2f})"
        if fp.reachable
        else f"NOT reachable within {fp.looks[-1]} seeds (power {fp.power:.2f} there): the plan says so"
    )
    return [
        f"# The factorial follow-up of grid {src.grid}, written by `harness followup` (DESIGN 12).",
        f"# Why: {src.why}",
        f"# Question: does {t}'s change still help on top of {c}'s, or does {c} absorb it (an interaction)?",
        f"#   (0, 0) {p}   (1, 0) {c}   (0, 1) {t}   (1, 1) {tc} = {t} with {c}'s additions",
        f"# Plan, from {src.grid}'s own runs in the store: {sds}.",
        "# The interaction (1,1) - (1,0) - (0,1) + (0,0) subtracts two paired differences: sd = sqrt(sd(t - p)^2 +",
        "# sd(c - p)^2), sqrt 2 times one difference's, 2 times a main effect's (about 4x a main effect's seeds).",
        f"# Planned interaction {fp.effect:.4g} nats/token (min_effect_nats) at sd {fp.sd:.4g}, two-sided, alpha "
        f"{fp.plan.alpha:g} / {fp.family} (Holm over the {fp.family} factorial contrasts, the level its test is",
        f"# sure of) spent over looks {fp.looks[0]} and {fp.looks[1]}:",
        f"# {reach}; full absorption (|I| = the gain, {max(abs(x.gain) for x in fp.cells):.4g}) has power "
        f"{fp.power_absorbed:.2f}. A simple effect of that size needs "
        f"{fp.headline_seeds if fp.headline_seeds is not None else 'more than the looks'} seeds (one-sided).",
        "# Cost (4 variants per seed):",
        *_cost_lines(src, fp, speed),
        "# Run: harness queue THIS_FILE && harness work; harness report --grid NAME; harness topup --grid NAME",
    ]


def _axis_value(text: str):
    """An axis value read back from a cell's name (``0.001`` -> 0.001, ``256`` -> 256, ``wsd`` -> ``"wsd"``)."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text, text)


def grid_text(name: str, src: Source, fp: FollowupPlan, speed: dict) -> str:
    """The follow-up grid as TOML text: header, the four variants, [factorial], [train], [analysis]."""
    t, c, p, tc = src.treatment, src.control, src.parent, src.composed
    sizes = list(dict.fromkeys(split_cell_size(s)[0] for s, _ in src.cells))
    budgets = sorted({b for _, b in src.cells})
    axes: dict[str, list] = {}  # a grid with [axes]: the follow-up sweeps the cells' values again
    for s, _ in src.cells:
        for k, v in split_cell_size(s)[1]:
            if _axis_value(v) not in axes.setdefault(k, []):
                axes[k].append(_axis_value(v))
    lines = [
        *_header(src, fp, speed),
        f"name = {_value(name)}",
        f"description = {_value(f'follow-up of {src.grid}: {c} x {t} factorial ({p}, {c}, {t}, {tc})')}",
        f"corpus = {_value(src.corpus)}",
        f"sizes = {_value(sizes)}",
        f"seeds = {_value(list(range(fp.looks[0])))}",
        f"budgets_tokens = {_value(budgets)}",
        "",
        "[variants]",
        f'{p} = "parent"',
        f'{t} = "treatment"',
        f'{c} = "control"',
        f'{tc} = "reference"',
        "",
        "[factorial]",
        f"factors = {_value([c, t])}",
        f"levels = {{ {p} = [0, 0], {c} = [1, 0], {t} = [0, 1], {tc} = [1, 1] }}",
        "",
        *(["[axes]", *(f"{k} = {_value(v)}" for k, v in axes.items()), ""] if axes else []),
        "[train]",
        *(f"{k} = {_value(v)}" for k, v in src.train[p].items()),
    ]
    for v in (t, c, tc):
        extra = {k: x for k, x in src.train.get(v, src.train[t]).items() if src.train[p].get(k) != x}
        lines += ["", f"[train.{v}]", *(f"{k} = {_value(x)}" for k, x in extra.items())] if extra else []
    a = fp.plan
    lines += [
        "",
        "[analysis]",
        f"alpha = {a.alpha!r}",
        f"reproduce_fraction = {a.reproduce_fraction!r}",
        f"min_effect_nats = {a.min_effect_nats:.6g}",
        f"power = {a.power!r}",
        f"looks = {_value(list(a.looks))}",
        f"max_seeds = {a.max_seeds}",
    ]
    return "\n".join(lines) + "\n"
