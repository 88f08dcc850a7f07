"""The report's decision sections: the analysis plan, Step 1 (the headline: is the treatment's gain
established?) and Step 2 (controls: do they reproduce it?).

Words only (:mod:`harness.report.render.sections` puts the sections in reading order): each table and
sentence reads the verdicts of :class:`harness.report.stats.analysis.ReportStats`, nothing is computed here.
"""

from __future__ import annotations

import math

from harness.report.render.blocks import Block, Bullets, Heading, Para, Table
from harness.report.render.fmt import cell_text as _cell
from harness.report.render.fmt import fmt_nats, fmt_p, fmt_pct
from harness.report.render.fmt import num as _num
from harness.report.render.fmt import seeds_text as _seeds
from harness.report.render.sentences import (
    cell_label,
    control_sentence,
    fraction_text,
    headline_sentence,
    mean_ci,
    needed_short,
)
from harness.report.render.summary import (
    not_finished,
    verdict_chip,
)
from harness.report.stats.decisions import NOT_ASSESSED
from harness.report.stats.floors import FLOOR_NATS
from harness.report.stats.leave_one_out import influence_text
from harness.report.stats.looks import increments
from harness.report.stats.results import Headline, ReportStats

PAPER_HEADLINE = (
    "Paper (RD-AttnRes, arXiv 2608.01075; 2.0B tokens, FineWeb-Edu): validation NLL lower "
    "in 10/10 matched pairs (5 seeds x {120M, 343M}), mean dNLL -0.0301 / -0.0247 "
    "nats/token, perplexity -2.97 % / -2.43 %."
)


def plan_blocks(stats: ReportStats) -> list[Block]:
    """The analysis plan's table (alpha, rho, min_effect_nats, power, max_seeds, looks) and where it came from."""
    p = stats.plan
    looks = ", ".join(map(str, p.looks)) or "none (one look)"
    source = {
        "[analysis]": "the grid's [analysis] table",
        "defaults": "the defaults (no [analysis] stored with the runs)",
        "stored with the runs": "the grid's [analysis] table, as stored with its runs",
    }.get(p.source, p.source)
    return [
        Heading(2, "Analysis plan (fixed before the runs)"),
        Table(
            ("alpha", "reproduce_fraction (rho)", "min_effect_nats", "power", "max_seeds", "looks"),
            (
                (
                    f"{p.alpha:g}",
                    f"{p.reproduce_fraction:g}",
                    _num(p.min_effect_nats, ".4g") if p.min_effect_nats else "not set",
                    f"{p.power:g}",
                    str(p.max_seeds),
                    looks,
                ),
            ),
        ),
        Para(f"From {source}. " + looks_text(p), "note"),
    ]


def looks_text(p) -> str:
    """How the plan's alpha is spent: once at alpha, or over the looks (DESIGN section 8)."""
    if not p.looks:
        return (
            f"Every test reads once at level alpha = {p.alpha:g}. No looks are planned, so adding seeds and "
            "reading again would test the same hypothesis twice at the full alpha (harness topup needs looks)."
        )
    levels = ", ".join(f"{n} pairs: {x:.3g}" for n, x in zip(p.looks, increments(p.alpha, p.looks)))
    return (
        f"Sequential looks: the one-sided headline alpha {p.alpha:g} is spent over the looks with the "
        f"O'Brien-Fleming-type Lan-DeMets function alpha(t) = 2 - 2 Phi(z_(1-alpha/2) / sqrt(t)), t = n_k / "
        f"n_K (DESIGN section 8); look k tests the first n_k pairs at the increment ({levels}), which sum to "
        "alpha (union bound). A look that rejected stands: Holm is applied to the sequential p, the smallest "
        "alpha whose spending would have rejected at a look so far. The control contrasts spend their alpha "
        "over the same looks (two-sided). Pairs between looks or past the last enter no test until the next "
        "look; before the first look nothing is tested."
    )


def headline_blocks(stats: ReportStats) -> list[Block]:
    """Step 1: the headline table per cell (verdict, mean dNLL, p, Holm p, MDE, seeds needed) and its sentences."""
    out: list[Block] = [Heading(2, "Step 1, the headline: is the treatment's gain established?")]
    if not stats.headlines:
        waiting = not_finished(stats, "treatment")
        return out + [
            Para(
                f"No treatment run has a finished parent pair yet ({waiting}): there is no gain to "
                "establish yet, and no control is assessed."
                if waiting
                else "No treatment variant in this grid: there is no gain to establish, and no control "
                "is assessed.",
                "warn",
            )
        ]
    power, planned = stats.plan.power, stats.plan.min_effect_nats
    needed = (f"seeds needed for {_num(planned, '.4g')}",) if planned else ()
    out.append(
        Table(
            (
                "cell",
                "verdict",
                "mean dNLL [95 % CI]",
                "wins",
                "perplexity change",
                "one-sided p",
                "Holm p",
                "level",
                "look",
                f"MDE (power {power:g})",
                *needed,
                "seeds",
            ),
            tuple(
                (
                    cell_label(h.size, h.budget_tokens),
                    verdict_chip(h.verdict),
                    _mean_ci(stats, h),
                    _wins(stats, h),
                    _ppl(stats, h),
                    fmt_p(h.p_one_sided) + (" (exact)" if h.exact else ""),
                    fmt_p(h.holm_p),
                    _num(h.level, ".3g"),
                    f"{h.look.k} of {h.look.n_looks}" if h.look.planned else "-",
                    _num(h.mde_nats, ".4g"),
                    *((needed_short(h.seeds_needed, planned),) if planned else ()),
                    _seeds(_comp(stats, h).seeds),
                )
                for h in stats.headlines
            ),
        )
    )
    out.append(
        Bullets(
            tuple(headline_sentence(h, power, planned) for h in stats.headlines),
            "good" if all(h.established for h in stats.headlines) else "warn",
        )
    )
    out.append(
        Para(
            f"dNLL = {stats.treatment} minus {stats.parent}, final validation NLL, same seed and protocol; "
            "negative = the treatment is better. One-sided paired t-test (H1: mean dNLL < 0), level "
            f"{stats.plan.alpha:g}; the gain is established where n >= 3, mean dNLL < -{FLOOR_NATS:g} (the "
            "numerical floor) and the adjusted p < alpha; it is absent (< min_effect_nats) where the one-sided "
            "test of H0 'gain >= min_effect_nats' rejects; both tests of every cell in one family over the "
            "cells (Holm, Shaffer's divisors: see Methods); otherwise undecided. A seed where the treatment diverged and the parent did not counts as a loss. "
            + ("" if planned else "Seeds needed: set min_effect_nats in the grid's [analysis]. ")
            + PAPER_HEADLINE,
            "note",
        )
    )
    return out


def _comp(stats: ReportStats, h: Headline):
    return next(
        c
        for c in stats.comparisons
        if (c.comparison, c.size, c.budget_tokens) == (h.comparison, h.size, h.budget_tokens)
    )


def _wins(stats, h):
    s = _comp(stats, h).stats
    return f"{s.wins}/{s.n}"


def _mean_ci(stats, h):
    s = _comp(stats, h).stats
    return mean_ci(s.mean, s.ci_low, s.ci_high)  # the observed pairs (the sentence gives the tested mean)


def _ppl(stats, h):
    return fmt_pct(_comp(stats, h).stats.ppl_change)


def controls_blocks(stats: ReportStats) -> list[Block]:
    """Step 2: one row per (control, cell) with its reproduction contrast, gain fraction and verdict."""
    out: list[Block] = [Heading(2, "Step 2, controls: do they reproduce the gain?")]
    if not stats.assessments:
        waiting = not_finished(stats, "control", aa=False)
        return out + [
            Para(
                f"No control has a finished pair with the parent yet ({waiting})."
                if waiting
                else "No control variant in this grid.",
                "warn",
            )
        ]
    rho, power = stats.plan.reproduce_fraction, stats.plan.power
    by = {(c.comparison, c.size, c.budget_tokens): c for c in stats.comparisons}
    not_est = [h for h in stats.headlines if not h.established]
    if not_est or not stats.headlines:
        cells = ", ".join(_cell(h.size, h.budget_tokens) for h in not_est) or "every cell (no treatment)"
        out.append(
            Para(
                f"Not assessed at {cells}: the treatment's gain is not established there, so no control "
                "can reproduce it or fail to; each such control shows its descriptives and the MDE of its "
                "contrast at this budget.",
                "warn",
            )
        )
    rows, details = [], []
    planned = stats.assessments[0].planned_effect
    for a in stats.assessments:
        cp = by[(f"{a.control} - {stats.parent}", a.size, a.budget_tokens)].stats
        rows.append(
            (
                a.control,
                cell_label(a.size, a.budget_tokens),
                verdict_chip(a.verdict, short=True),
                mean_ci(cp.mean, cp.ci_low, cp.ci_high),
                f"{cp.wins}/{cp.n}",
                f"{fmt_nats(a.contrast_mean)}\nn = {a.n}",
                f"{fmt_p(a.contrast_p)}\nHolm {fmt_p(a.holm_p)}" if math.isfinite(a.contrast_p) else "-",
                fraction_text(a),
                _num(a.mde_nats, ".4g"),
                *((needed_short(a.seeds_needed, planned),) if planned else ()),
            )
        )
        # The not-assessed caveat is said once, above the table; other rows say why.
        details.append("" if a.verdict == NOT_ASSESSED else control_sentence(a, power))
    out.append(
        Table(
            (
                "control",
                "cell",
                "verdict",
                "control - parent dNLL [95 % CI]",
                "wins vs parent",
                f"contrast e (rho {rho:g}): mean, seeds",
                "contrast p, Holm p",
                "gain fraction f [95 % Fieller]",
                f"MDE of e (power {power:g})",
                *((f"seeds needed for e = {_num(planned, '.4g')}",) if planned else ()),
            ),
            tuple(rows),
            tuple(details),
        )
    )
    if any(math.isfinite(a.fraction) and not a.bounded for a in stats.assessments):
        out.append(
            Para(
                "f unbounded: the treatment's own 95 % interval of the gain covers 0, so no finite Fieller "
                "interval exists for the fraction of it a control reproduces.",
                "note",
            )
        )
    out.append(_contrast_note(stats, planned))
    return out


def _contrast_note(stats: ReportStats, planned: float | None) -> Para:
    """How Step 2's reproduction contrast and its verdicts are defined (the note under its table)."""
    rho = stats.plan.reproduce_fraction
    return Para(
        f"Reproduction contrast per seed: e = c - (1 - rho) p - rho t with rho = {rho:g} (p parent, t treatment): "
        "mean e < 0 means the control lands nearer the treatment, mean e > 0 nearer the parent. Two-sided paired "
        f"t-test on e (the exact sign-flip p where e has zero spread), Holm over every assessed (cell, control) "
        "contrast of the grid, level "
        f"{stats.plan.alpha:g}: 'does not reproduce gain' = Holm p < alpha and mean e > 0; 'reproduces gain' = Holm "
        "p < alpha and mean e < 0 (both need |mean e| beyond the numerical floor, "
        f"{FLOOR_NATS:g} nats/token); 'inconclusive' otherwise. Controls are assessed only where the headline "
        "established the gain; 'invalid: degenerate' (a control that cannot differ from the parent, DESIGN 3) takes "
        "precedence over every verdict. f = mean(c - p) / mean(t - p) with its 95 % Fieller interval; the A/A check "
        "is not a control and enters no family. Planned contrast effect = min(rho, 1 - rho) x min_effect_nats"
        + (
            "."
            if planned
            else "; seeds needed: set min_effect_nats in the grid's [analysis] (the smallest gain worth "
            "detecting)."
        ),
        "note",
    )


def influence_blocks(stats: ReportStats) -> list[Block]:
    """Leave one seed out: each established verdict, its Holm p, the largest Holm p over the n analyses
    without one seed and that seed (:mod:`harness.report.stats.leave_one_out`; descriptive)."""
    if not stats.influence:
        return []
    return [
        Heading(2, "Does each established verdict survive dropping any one seed?"),
        Table(
            (
                "verdict",
                "cell",
                "comparison",
                "Holm p",
                "largest Holm p without one seed",
                "that seed",
                "held",
            ),
            tuple(
                (
                    i.verdict,
                    cell_label(i.size, i.budget_tokens),
                    i.comparison,
                    fmt_p(i.holm_p),
                    fmt_p(i.max_holm_p),
                    str(i.worst_seed),
                    "yes, without every seed" if i.survives else f"no: not without seed {i.worst_seed}",
                )
                for i in stats.influence
            ),
        ),
        Bullets(tuple(f"{i.comparison} ({i.verdict}): {influence_text(i)}" for i in stats.influence)),
        Para(
            f"The same analysis run {stats.influence[0].analyses} more times, each without one seed (its runs "
            "dropped in every cell, every family recomputed; each look that held the seed tests the same seeds "
            "minus that one, its level spent from the looks so shrunk). Descriptive: it enters no family and "
            "changes no verdict.",
            "note",
        ),
    ]
