"""Sentences about result objects, shared by the report's sections, the robustness section and
``harness report``'s terminal summary."""

from __future__ import annotations

import math

from harness.common.terms import axes_label
from harness.report.render.fmt import cell_text as _cell
from harness.report.render.fmt import fmt_ci, fmt_nats, fmt_p, tokens_label
from harness.report.render.fmt import num as _num
from harness.report.stats.decisions import DOES_NOT_REPRODUCE, UNDECIDED
from harness.report.stats.divergence import effect_text, imputed_only
from harness.report.stats.floors import FLOOR_NATS
from harness.report.stats.looks import look_text
from harness.report.stats.paired_tests import MIN_PAIRS
from harness.report.stats.pairing import split_cell_size
from harness.report.stats.results import AA_NOISE_ABS, AA_NOISE_FRACTION, AACheck, ControlAssessment, Headline


def fmt_seq_p(p: float | None) -> str:
    """A sequential p (harness.report.stats.looks), 3 significant digits: exact at every value, above ``LOOKS_MAX_ALPHA`` too."""
    return fmt_p(p)


def needed_text(s, planned: float | None, what: str) -> str:
    """'min_effect_nats 0.01 needs 7 seeds' / 'not reachable at this budget' / why not computed."""
    if planned is None:
        return f"seeds needed: set min_effect_nats in the grid's [analysis] (the smallest {what} worth detecting)"
    if s.reachable:
        if s.at_looks:
            return f"{_num(planned, '.4g')} nats/token needs the look at {s.n} seeds (at its level and the observed sd)"
        return f"{_num(planned, '.4g')} nats/token needs {s.n} seeds (at the observed sd)"
    if math.isnan(s.power_at_max):
        return f"{_num(planned, '.4g')} nats/token: seeds needed not computable (no spread yet)"
    cap = f"the last look, {s.max_seeds} seeds" if s.at_looks else f"max_seeds = {s.max_seeds}"
    return f"{_num(planned, '.4g')} nats/token: not reachable at this budget (power {s.power_at_max:.2f} at {cap})"


def _mde_at(look) -> str:
    """Where an MDE is computed: 'n = 6', or 'look 2 (5 pairs, level 0.00523)'."""
    return f"look {look.k} ({look.n} pairs, level {look.level:.3g})" if look.planned else f"n = {look.n}"


def _mean_d(h: Headline) -> str:
    """The headline's mean d; one resting only on imputed values of diverged runs says so."""
    return fmt_nats(h.mean) if math.isnan(h.mean) else effect_text(h.mean, h.n, h.imputed)


def headline_sentence(h: Headline, power: float, min_effect: float | None = None) -> str:
    """Whether the gain is established in one cell, and why (n, mean d, one-sided p, Holm p, level)."""
    test = "exact one-sided sign-flip p (zero spread: t undefined)" if h.exact else "one-sided t p"
    if h.look.planned:
        earlier = (
            f", established at look {h.decided_look}" if h.established and h.decided_look < h.look.k else ""
        )
        facts = (
            f"n = {h.n}, mean d = {_mean_d(h)} nats/token, {look_text(h.look)}: {test} = "
            f"{fmt_p(h.p_one_sided)}; sequential p = {fmt_seq_p(h.sequential_p)}, Holm p = {fmt_p(h.holm_p)} over "
            f"{h.n_cells} cell(s){earlier}"
        )
    else:
        facts = (
            f"n = {h.n}, mean d = {_mean_d(h)} nats/token, {test} = {fmt_p(h.p_one_sided)}, "
            f"Holm p = {fmt_p(h.holm_p)} over {h.n_cells} cell(s), level {h.level:g}"
        )
    why = {
        "established": (
            "Holm p (of the sequential p) < alpha and mean d < 0"
            if h.look.planned
            else "Holm p < level and mean d < 0"
        ),
        "absent": (
            f"the one-sided test of H0 'gain >= {_num(min_effect, '.4g')} nats/token' rejects: Holm p "
            f"{fmt_p(h.absence_holm_p)} < alpha; the gain is at most {_num(h.gain_upper, '.3g')} nats/token "
            f"(upper one-sided bound at level {_num(h.gain_upper_level, '.3g')}, Holm-adjusted)"
        ),
        "mean within the numerical floor": (
            f"|mean d| <= {FLOOR_NATS:g} nats/token, the numerical floor: no verdict rests on float rounding"
        ),
        "before the first look": f"{h.n} pair(s): no look yet (the first is at {h.look.next_n} pairs)",
        "fewer than 3 pairs": f"{h.n} pair(s): the test needs at least {MIN_PAIRS}",
        "mean d >= 0": "the treatment is not better than the parent (mean d >= 0)",
        "Holm p >= alpha": "Holm p >= alpha (of the sequential p)" if h.look.planned else "Holm p >= level",
        "degenerate": f"the treatment is degenerate ({h.degenerate_reason})",
    }[h.reason]
    plan = (
        f"MDE at {_mde_at(h.look)}: {_num(h.mde_nats, '.4g')} nats/token (one-sided, power {power:g})"
        if not math.isnan(h.mde_nats)
        else f"MDE: none before the first look ({h.look.next_n} pairs)"
        if h.look.before_first
        else "MDE: needs >= 3 pairs with some spread"
    )
    if h.verdict == UNDECIDED:
        plan += f"; {needed_text(h.seeds_needed, min_effect, 'gain')}"
    extra = _divergence_text(h.imputed, h.dropped)
    if h.verdict == UNDECIDED:
        extra += _undecided_text(h, min_effect)
    return f"{_cell(h.size, h.budget_tokens)}: **{h.verdict}** ({facts}): {why}. {plan}.{extra}"


def _divergence_text(imputed: tuple, dropped: tuple) -> str:
    """' Seeds 3, 4 count as losses of rd_attnres (diverged; d = +0.015, the largest |d| observed).'"""
    out = ""
    for loser in dict.fromkeys(i.loser for i in imputed):
        mine = [i for i in imputed if i.loser == loser]
        out += (
            f" Seed(s) {', '.join(str(i.seed) for i in mine)} count as losses of {loser}, which diverged there "
            f"(d = {mine[0].value:+.4g}, the largest |d| observed, worst-case imputation)."
        )
    return out + (
        f" Seed(s) {', '.join(map(str, dropped))} left out: both sides diverged." if dropped else ""
    )


def _undecided_text(h: Headline, min_effect: float | None) -> str:
    """What would decide an undecided headline: seeds to establish the observed gain, or to show it absent."""
    parts = []
    if h.seeds_establish is not None:
        parts.append(
            f"to establish the observed gain ({fmt_nats(-h.mean)} nats/token): "
            + (
                f"{h.seeds_establish.n} seeds"
                if h.seeds_establish.reachable
                else "not reachable at this budget"
            )
        )
    if h.seeds_absent is not None:
        parts.append(
            f"to show it absent (< {_num(min_effect, '.4g')} nats/token) at the observed gain: "
            + (f"{h.seeds_absent.n} seeds" if h.seeds_absent.reachable else "not reachable at this budget")
        )
    elif min_effect is None:
        parts.append("to show it absent: set min_effect_nats in the grid's [analysis]")
    bound = (
        f" The gain is at most {_num(h.gain_upper, '.3g')} nats/token (upper one-sided bound at level "
        f"{_num(h.gain_upper_level, '.3g')}, Holm-adjusted)."
        if math.isfinite(h.gain_upper)
        else ""
    )
    return bound + (" Undecided; what would decide it: " + "; ".join(parts) + "." if parts else "")


def control_sentence(a: ControlAssessment, power: float) -> str:
    """Why a control got its verdict, and what the contrast could detect at this budget."""
    mde = (
        f"MDE of the contrast at {_mde_at(a.look)}: {_num(a.mde_nats, '.4g')} nats/token (two-sided, power "
        f"{power:g})"
        if not math.isnan(a.mde_nats)
        else f"MDE: none before the first look ({a.look.next_n} seeds)"
        if a.look.before_first
        else "MDE: needs >= 3 seeds with control, parent and treatment"
    )
    if a.reason == "degenerate":
        return f"degenerate: {a.degenerate_reason}; no contrast is tested, whatever it says"
    if a.reason in ("gain not established", "no treatment in this cell"):
        why = (
            "the treatment's gain is not established in this cell"
            if a.reason == "gain not established"
            else "no treatment runs in this cell"
        )
        return f"{why}, so no verdict; {mde}"
    if a.reason == "fewer than 3 pairs":
        return f"{a.n} seed(s) with control, parent and treatment: the contrast needs >= {MIN_PAIRS}; {mde}"
    if a.reason == "before the first look":
        return f"{a.n} seed(s) with control, parent and treatment: {look_text(a.look)}, nothing tested yet"
    test = "exact sign-flip p (zero spread)" if a.exact else "t p"
    if a.look.planned:
        test = f"{look_text(a.look)}: {test}"
        seq = f", sequential p {fmt_seq_p(a.sequential_p)}"
    else:
        seq = ""
    sign = (
        "the control lands nearer the parent"
        if a.verdict == DOES_NOT_REPRODUCE
        else "the control lands nearer the treatment"
    )
    lost = _divergence_text(a.imputed, a.dropped)
    family = f" over the grid's {a.family_size} assessed contrast(s)"
    if imputed_only(a.contrast_mean, a.n, a.imputed):
        sign += f" (mean e {effect_text(a.contrast_mean, a.n, a.imputed)})"
    if a.reason == "Holm p < alpha":
        return f"contrast {test} {fmt_p(a.contrast_p)}{seq}, Holm p {fmt_p(a.holm_p)}{family} < alpha: {sign}{lost}"
    if a.reason == "mean within the numerical floor":
        return (
            f"contrast mean e {a.contrast_mean:+.3g} is within the numerical floor ({FLOOR_NATS:g} nats/token): "
            f"no verdict from rounding (Holm p {fmt_p(a.holm_p)}){lost}"
        )
    return (
        f"contrast {test} {fmt_p(a.contrast_p)}{seq}, Holm p {fmt_p(a.holm_p)}{family} >= alpha; {mde}{lost}"
    )


def fraction_text(a: ControlAssessment) -> str:
    """'+0.40 [+0.23, +0.58]', '+0.40 unbounded' (the gain's 95 % CI covers 0), or '-'."""
    if math.isnan(a.fraction):
        return "-"
    return f"{a.fraction:+.2f}\n" + (
        f"[{a.fraction_low:+.2f}, {a.fraction_high:+.2f}]" if a.bounded else "unbounded"
    )


def cell_label(size: str, budget: int | None) -> str:
    """A cell in a table: 'small, 1M' (size, budget in tokens), then its axis values ('tiny, 2.048k, lr 0.001')."""
    preset, axes = split_cell_size(size)
    return f"{preset}, {'-' if budget is None else tokens_label(budget)}" + (
        f", {axes_label(axes)}" if axes else ""
    )


def mean_ci(mean: float, lo: float, hi: float) -> str:
    """Mean over its 95 % interval, on two lines in HTML (one in Markdown)."""
    return f"{fmt_nats(mean)}\n{fmt_ci(lo, hi)}"


def aa_sentence(a: AACheck, alpha: float) -> str:
    """The A/A check of one cell in one sentence."""
    scale = (
        f"half the treatment's |mean gain| ({AA_NOISE_FRACTION:g} x {abs(a.gain):.4g} = {a.threshold:.4g})"
        if math.isfinite(a.gain)
        else f"{AA_NOISE_ABS:g} nats/token (no treatment gain to compare with)"
    )
    steps = (
        f" over {a.steps[0]}-{a.steps[-1]} training steps"
        if a.steps and a.steps[0] != a.steps[-1]
        else (f" over {a.steps[0]} training steps" if a.steps else "")
    )
    test = ("exact sign-flip p (zero spread)" if a.exact else "paired t p") + f" = {fmt_p(a.p)}"
    untested = f"; {a.n} pair(s) < {MIN_PAIRS}: no offset test" if not a.tested else ""
    if a.tested and math.isfinite(a.floor) and abs(a.mean) <= a.floor and a.max_abs <= a.floor:
        test += f", mean offset within the float32 rounding of the NLL ({a.floor:.3g} nats/token): pass"
    elif a.tested:
        test += f", Holm p {fmt_p(a.holm_p)} over {a.n_cells} cell(s)"
    if a.status == "no pairs":
        return "no A/A pair (no seed where both runs finished)"
    if a.status == "bit-identical":
        return f"bit-identical: all {a.n} paired differences are exactly 0"
    if a.status == "FAIL":
        return (
            f"FAIL: systematic offset (mean {fmt_nats(a.mean, 6)} nats/token, beyond the float32 rounding of the "
            f"NLL {a.floor:.3g}; two-sided {test}, Holm p {fmt_p(a.holm_p)} < {alpha:g} over the grid's "
            f"{a.n_cells} cell(s)) for a variant equal to the parent in exact arithmetic. At this level a FAIL "
            f"means: if the harness were sound, a FAIL in any cell of this grid would happen in at most "
            f"{alpha:g} of grids; so a harness bug (pairing, data order, initialisation) or nondeterminism is "
            f"the likely cause; max |d| {a.max_abs:.3g}"
        )
    floor = (
        f"max |d| = {a.max_abs:.3g} nats/token is the protocol's numerical noise floor (float summation "
        f"order diverges chaotically{steps})"
    )
    if a.status == "warn":
        return (
            f"warn: {floor} and reaches {scale}: effects of the treatment's size cannot be told from noise at "
            f"this budget{untested}; no systematic offset ({test})"
            if a.tested
            else f"warn: {floor} and reaches {scale}{untested}"
        )
    return f"pass: {floor}, below {scale}" + (f"; no systematic offset ({test})" if a.tested else untested)


def needed_short(s, planned: float | None) -> str:
    """Seeds needed in a table cell: '7', 'not reachable (> 30)', 'no spread yet' or 'set min_effect_nats'."""
    if planned is None:
        return "set min_effect_nats"
    if s.reachable:
        return str(s.n)
    return "no spread yet" if math.isnan(s.power_at_max) else f"not reachable (> {s.max_seeds})"


__all__ = [
    "fmt_seq_p",
    "needed_text",
    "headline_sentence",
    "control_sentence",
    "fraction_text",
    "cell_label",
    "mean_ci",
    "aa_sentence",
    "needed_short",
]
