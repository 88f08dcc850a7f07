"""Words for a :class:`reports.stats.analysis.ReportStats`: the report's sections and the CLI summary.

Everything a person reads is written here and in :mod:`reports.render.summary` (the top of the
report: grid status, verdict banners, chips, how to read it); nothing here computes a
statistic. Sections are lists of blocks (:mod:`reports.render.blocks`), written out as Markdown
and as one self-contained HTML file. Sentence helpers (``headline_sentence``, ``control_sentence``,
``aa_sentence``) live in :mod:`reports.render.sentences`, shared with ``harness report``'s terminal summary.
"""

from __future__ import annotations

import math

from reports.render import factorial_section
from reports.render.blocks import Block, Box, Bullets, Chip, Heading, Image, Para, Table, to_html, to_markdown
from reports.render.figures import FigureOut
from reports.render.fmt import cell_text as _cell
from reports.render.fmt import fmt_ci, fmt_nats, fmt_p, fmt_pct, fmt_tokens, tokens_label
from reports.render.fmt import num as _num
from reports.render.fmt import seeds_text as _seeds
from reports.render.followup_section import blocks as followup_blocks
from reports.render.followup_section import summary as followup_summary
from reports.render.plateau_section import blocks as plateau_blocks
from reports.render.plateau_section import plateau_line
from reports.render.robustness_section import blocks as robustness_blocks
from reports.render.sentences import (
    aa_sentence,
    cell_label,
    control_sentence,
    fraction_text,
    headline_sentence,
    mean_ci,
    needed_short,
)
from reports.render.summary import (
    aa_chip,
    grid_status,
    how_to_read,
    progress_sentence,
    roles_text,
    verdict_banners,
    verdict_chip,
)
from reports.stats.analysis import AA_NOISE_ABS, AA_NOISE_FRACTION, Headline, ReportStats
from reports.stats.decisions import CONDITIONAL_RATES, NOT_ASSESSED
from reports.stats.floors import FLOOR_NATS
from reports.stats.looks import increments
from reports.stats.paired_tests import EXACT_MAX_N
from reports.stats.pairing import AA_VARIANTS
from reports.stats.progress import FINISHED, NOT_IN_STORE, UNREADABLE

PAPER_HEADLINE = (
    "Paper (RD-AttnRes, arXiv 2608.01075; 2.0B tokens, FineWeb-Edu): validation NLL lower "
    "in 10/10 matched pairs (5 seeds x {120M, 343M}), mean dNLL -0.0301 / -0.0247 "
    "nats/token, perplexity -2.97 % / -2.43 %."
)


# --------------------------------------------------------------------------- sections


def _plan(stats: ReportStats) -> list[Block]:
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
        Para(f"From {source}. " + _looks_text(p), "note"),
    ]


def _looks_text(p) -> str:
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


def _top_warnings(stats: ReportStats) -> list[Block]:
    items = [
        f"{r.variant} diverged at seed(s) {_seeds(r.diverged_seeds)} ({_cell(r.size, r.budget_tokens)}): "
        "each such seed counts as a loss for it in every test where its comparator finished (d = the largest "
        "|d| observed, with the sign of a loss; divergence table below)"
        for r in stats.diverged()
    ]
    items += _no_result_warnings(stats)
    items += [
        f"A/A check, {_cell(a.size, a.budget_tokens)}: {aa_sentence(a, stats.plan.alpha)}"
        for a in stats.aa_checks
        if a.status == "FAIL"
    ]
    items += list(stats.warnings)
    return [Heading(2, "Warnings"), Bullets(tuple(items), "warn")] if items else []


def _no_result_warnings(stats: ReportStats) -> list[str]:
    """Top-of-report warnings for runs with no result in the store (finished per the queue, or unreadable)."""
    p = stats.progress
    if p is None:
        return []
    out = []
    for state, what in (
        (NOT_IN_STORE, "the queue says finished but no result file is in the store"),
        (UNREADABLE, "its result file could not be read"),
    ):
        runs = [r for r in p.runs if r.state == state]
        if runs:
            out.append(
                f"{len(runs)} run(s) have no usable result ({what}): "
                + ", ".join(_run_label(r) for r in runs[:8])
                + (", ..." if len(runs) > 8 else "")
                + "; they are in no statistic (grid status below)"
            )
    return out


def _run_label(r) -> str:
    """'rd_attnres s0 (small, 1M)', or the run id where only the file name is known (an unreadable
    result file of a run the queue does not list)."""
    if r.variant is None:
        return r.run_id
    return f"{r.variant} s{r.seed} ({_cell(r.size, r.budget_tokens)})"


def _not_finished(stats: ReportStats, role: str, aa: bool | None = None) -> str | None:
    """'rd_attnres: 0 of 3 runs finished (1 running, 2 queued)' for the variants of ``role`` (A/A
    checks only, or none of them, with ``aa``) that the queue knows but no statistic has; None if none."""
    p, seen = stats.progress, {c.first for c in stats.comparisons} | {c.second for c in stats.comparisons}
    parts = []
    for v in p.variants(role):
        if v in seen or (aa is not None and (v in AA_VARIANTS) != aa):
            continue
        c = p.of_variant(v)
        rest = ", ".join(f"{n} {s}" for s, n in c.items() if n and s not in FINISHED)
        parts.append(
            f"{v}: {sum(c[s] for s in FINISHED)} of {sum(c.values())} runs finished"
            + (f" ({rest})" if rest else "")
        )
    return "; ".join(parts) or None


def _headline(stats: ReportStats) -> list[Block]:
    out: list[Block] = [Heading(2, "Step 1, the headline: is the treatment's gain established?")]
    if not stats.headlines:
        waiting = _not_finished(stats, "treatment")
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


def _controls(stats: ReportStats) -> list[Block]:
    out: list[Block] = [Heading(2, "Step 2, controls: do they reproduce the gain?")]
    if not stats.assessments:
        waiting = _not_finished(stats, "control", aa=False)
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
    out.append(
        Para(
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
    )
    return out


def _aa_box_chip(stats: ReportStats) -> Chip | None:
    """The worst A/A status of the grid (FAIL > warn > pass > no pairs) as the box's chip."""
    if not stats.aa_checks:
        return None
    order = ("FAIL", "warn", "bit-identical", "pass", "no pairs")
    return aa_chip(min(stats.aa_checks, key=lambda a: order.index(a.status)))


def _aa(stats: ReportStats) -> list[Block]:
    title = "A/A check (identical to the parent in exact arithmetic)"
    if not stats.aa_checks:
        waiting = _not_finished(stats, "control", aa=True)
        return [
            Box(
                title,
                Chip("no pairs" if waiting else "absent", "neutral"),
                (
                    Para(
                        f"No A/A pair has finished yet ({waiting})."
                        if waiting
                        else "No A/A variant (dup_route_tied) in this grid: the pairing is not checked end to end.",
                        "warn",
                    ),
                ),
                "aa-check",
            )
        ]
    table = Table(
        (
            "variant",
            "cell",
            "status",
            "pairs",
            "training steps",
            "max |dNLL|",
            "warn threshold",
            "mean dNLL",
            "offset p (two-sided)",
        ),
        tuple(
            (
                a.variant,
                cell_label(a.size, a.budget_tokens),
                aa_chip(a),
                str(a.n),
                "-" if not a.steps else f"{a.steps[0]}" + (f"-{a.steps[-1]}" if len(a.steps) > 1 else ""),
                "0 (bit-identical)" if a.status == "bit-identical" else _num(a.max_abs, ".3g"),
                _num(a.threshold, ".4g"),
                _num(a.mean, "+.3g"),
                fmt_p(a.p),
            )
            for a in stats.aa_checks
        ),
    )
    bad = any(a.status in ("warn", "FAIL") for a in stats.aa_checks)
    sentences = Bullets(
        tuple(
            f"{a.variant} ({_cell(a.size, a.budget_tokens)}): {aa_sentence(a, stats.plan.alpha)}"
            for a in stats.aa_checks
        ),
        "warn" if bad else "",
    )
    note = Para(
        "pass: bit-identical (every paired difference exactly 0) or a noise floor below the threshold. Otherwise the "
        "A/A variant sums floats in another order than the parent and that rounding difference diverges "
        "chaotically over the run, so its max |dNLL| is the protocol's numerical noise floor; warn when it reaches "
        f"{AA_NOISE_FRACTION:g} x the treatment's |mean gain| ({AA_NOISE_ABS:g} nats/token without a treatment). "
        "FAIL: a systematic offset: two-sided paired t p, Holm over the grid's cells, < alpha, and a mean offset beyond "
        "the float32 rounding of the NLL (one float32 ulp at the NLL's size); a FAIL thus has a family-wise false-alarm "
        "rate <= alpha per grid. The A/A check is in no control family. A seed where the A/A variant diverged and the "
        "parent did not counts as a loss for it (worst-case imputation).",
        "note",
    )
    return [Box(title, _aa_box_chip(stats), (table, sentences, note), "aa-check")]


def _divergence(stats: ReportStats) -> list[Block]:
    rows = tuple(
        (
            r.variant,
            cell_label(r.size, r.budget_tokens),
            str(r.done),
            str(r.diverged),
            str(r.failed),
            str(r.unfinished),
            _seeds(r.diverged_seeds) if r.diverged else "-",
            _seeds(r.failed_seeds) if r.failed else "-",
        )
        for r in stats.divergence
    )
    lost = tuple(
        f"{c.comparison} ({_cell(c.size, c.budget_tokens)}): unpaired seed(s) {_seeds(c.lost_seeds)}: "
        + "; ".join(c.missing)
        for c in stats.comparisons
        if c.missing
    )
    return [
        Heading(2, "Divergence is an outcome: runs per variant"),
        Table(
            ("variant", "cell", "done", "diverged", "failed", "unfinished", "diverged seeds", "failed seeds"),
            rows,
        ),
        Bullets(lost) if lost else Para("No comparison lost a pair.", "note"),
    ]


def _all_comparisons(stats: ReportStats) -> list[Block]:
    rows = []
    for c in stats.comparisons:
        s = c.stats
        rows.append(
            (
                c.comparison,
                cell_label(c.size, c.budget_tokens),
                f"{s.wins}/{s.n}",
                mean_ci(s.mean, s.ci_low, s.ci_high),
                _num(s.sd, ".3g"),
                _num(s.d_z, ".3g"),
                fmt_pct(s.ppl_change),
                fmt_p(s.t_p) if not s.zero_spread else "undefined (zero spread)",
                fmt_p(s.perm_p),
                fmt_p(s.wilcoxon_p),
                fmt_p(s.sign_p),
                fmt_p(s.min_p),
            )
        )
    return [
        Heading(2, "Descriptives: every comparison"),
        Para(
            "Reported, not used for verdicts. t p two-sided; sign-flip = exact permutation p of the mean over "
            "all 2^n sign patterns (the only p at zero spread); Wilcoxon signed-rank and sign test exact on the "
            "non-zero differences. 'min p' = the smallest p those three tests can reach with this many non-zero "
            "pairs, 2^(1-n): with 5 pairs none can go below 0.0625, whatever the data.",
            "note",
        ),
        Table(
            (
                "comparison",
                "cell",
                "wins (k/n)",
                "mean dNLL [95 % CI]",
                "sd",
                "d_z",
                "ppl change",
                "t p",
                "sign-flip p",
                "Wilcoxon p",
                "sign p",
                "min p",
            ),
            tuple(rows),
        ),
    ]


def _mixed(stats: ReportStats) -> list[Block]:
    out: list[Block] = [Heading(2, "Mixed model cross-check: nll ~ variant + (1 | seed)")]
    paired = {
        (c.first, c.size, c.budget_tokens): c.stats.mean
        for c in stats.comparisons
        if c.second == stats.parent
    }
    for m in stats.mixed:
        out.append(Heading(3, _cell(m.size, m.budget_tokens)))
        if m.error:
            out.append(Para(f"Not available: {m.error}", "warn"))
        if m.coefs:
            out.append(
                Table(
                    (
                        "variant",
                        f"estimate vs {stats.parent} (nats/token)",
                        "SE",
                        "95 % CI",
                        "p (Wald z)",
                        "paired mean dNLL",
                    ),
                    tuple(
                        (
                            k.variant,
                            fmt_nats(k.estimate),
                            _num(k.se, ".2g"),
                            fmt_ci(k.ci_low, k.ci_high),
                            fmt_p(k.p),
                            fmt_nats(paired.get((k.variant, m.size, m.budget_tokens), math.nan)),
                        )
                        for k in m.coefs
                    ),
                )
            )
            out.append(
                Para(
                    f"{m.n_obs} runs over {m.n_seeds} seeds; seed variance {m.seed_var:.3g} nats^2, residual "
                    f"variance {m.residual_var:.3g} nats^2; converged: {'yes' if m.converged else 'no'}.",
                    "note",
                )
            )
        out.append(
            Bullets(tuple(f"statsmodels warning: {w}" for w in m.warnings), "warn")
            if m.warnings
            else Para("The fit raised no warning.", "note")
        )
    return out


def _gain_vs_budget(stats: ReportStats) -> list[Block]:
    """Gain vs budget (DESIGN section 8): only for grids with several budgets at a size."""
    b = stats.budget
    if not b.points:
        return []
    out: list[Block] = [
        Heading(2, "Gain vs budget"),
        Table(
            ("comparison", "size", "budget", "pairs", "mean dNLL (nats/token) [95 % CI]"),
            tuple(
                (
                    p.comparison,
                    p.size,
                    fmt_tokens(p.budget_tokens),
                    str(p.n),
                    f"{fmt_nats(p.mean)} {fmt_ci(p.ci_low, p.ci_high)}",
                )
                for p in b.points
            ),
        ),
    ]
    out.append(
        Table(
            (
                "comparison",
                "size",
                "budgets",
                "pairs (seeds)",
                "slope of d per doubling [95 % CI]",
                "p (Wald z)",
                "fit",
            ),
            tuple(
                (
                    s.comparison,
                    s.size,
                    ", ".join(fmt_tokens(x) for x in s.budgets),
                    f"{s.n_obs} ({s.n_seeds})",
                    f"{fmt_nats(s.slope)} " + (fmt_ci(s.coef.ci_low, s.coef.ci_high) if s.coef else ""),
                    fmt_p(s.coef.p if s.coef else None),
                    s.error or ("; ".join(s.warnings) if s.warnings else "no warning"),
                )
                for s in b.slopes
            ),
        )
    )
    out.append(
        Para(
            "Descriptive: the slope of the paired difference on log2(budget) from the mixed model d ~ "
            "log2(budget) + (1 | seed) (statsmodels mixedlm, REML; fitted in millinats), i.e. how much the "
            "difference changes per doubling of the budget; a negative slope on a gain means it grows with "
            "the budget. No verdict rests on it; statsmodels warnings are shown as raised.",
            "note",
        )
    )
    return out


def _methods(stats: ReportStats) -> list[Block]:
    p = stats.plan
    return [
        Heading(2, "Methods (DESIGN section 6)"),
        Bullets(
            (
                "Pairing: two finished runs pair only if they share size, budget, seed and protocol_hash; a differing "
                "protocol is an error naming the differing config fields. Diverged and failed runs are outcomes (table "
                "above): a diverged run counts as a loss (divergence, below); a run that failed for another reason or "
                "never ran leaves its seed unpaired (stats.csv: missing_seeds).",
                "Response: final validation NLL in nats/token; d = first minus second (negative = the first is better).",
                f"Descriptives: mean with its 95 % t interval (df = n - 1), sd, d_z = mean / sd, wins, exp(mean) - 1, "
                f"two-sided t p; exact sign-flip p over all 2^n sign patterns (meet-in-the-middle, exact up to n = "
                f"{EXACT_MAX_N}); exact Wilcoxon signed-rank on the non-zero d, ties by midranks, its null counted over all "
                "2^m sign patterns (no Monte Carlo); exact sign test. Tests need >= 3 pairs. With zero spread the t "
                "statistic is 0/0 or infinite: its p and interval are undefined, never 0, and the sign-flip p is the only p.",
                f"Step 1 (gatekeeper): one-sided paired t-test of treatment - parent per cell (the exact one-sided sign-flip "
                f"p at zero spread), level {p.alpha:g}: 'gain established' where mean d < -{FLOOR_NATS:g} and the family's "
                "adjusted p < alpha. 'gain absent (< delta nats/token)', delta = min_effect_nats: the one-sided test of H0 "
                "'gain >= delta' (paired t on d + delta, upper alternative; exact sign-flip at zero spread) rejects and "
                f"mean d lies more than {FLOOR_NATS:g} above -delta. Both tests of every cell form ONE family: Holm with "
                "Shaffer's divisors (a cell's two nulls, gain <= 0 and gain >= delta, exclude each other, so the j-th "
                "smallest p is tested at alpha / the number of cells that still have an unrejected test, held at the first "
                "failing step); a wrong headline in any cell happens in <= alpha of grids (two separate families: up to "
                "0.08 at alpha 0.05 in a simulated two-cell grid). With one cell both tests run at alpha. The printed bound "
                "is the upper one-sided bound on the gain at the level the family tests that cell's absence at, which is "
                "below delta exactly where absence is shown. Established takes precedence (a real gain smaller than delta). "
                "Otherwise 'undecided', with the seeds that would establish the observed gain or show it absent at the "
                "observed sd (noncentral t, at the plan's power).",
                "Divergence is the worst outcome (worst-case imputation): a seed where one side of a comparison diverged (or "
                "failed with a numerical error: NaN, inf, overflow) and the other finished counts in every test as a loss "
                "for the side that diverged, d = +-max |d| observed in that comparison and cell (at least the floor); in a "
                "reproduction contrast a diverged control counts e = +max |e|, a diverged treatment e = -max |e|; a seed "
                "where both sides (or the parent of a contrast) diverged is left out. Simulated under a true null with a "
                "treatment that diverges where it would lose: false-positive rate <= alpha at n = 3-10 (dropping those "
                "pairs: up to 0.79). Descriptive rows show the observed pairs; each verdict's seeds are in stats.csv "
                "(test_pairs, test_seeds, imputed_seeds).",
                f"No verdict from rounding: every definite verdict needs its mean beyond an absolute floor of {FLOOR_NATS:g} "
                "nats/token (the A/A check: the float32 rounding of the NLL, one float32 ulp at its size); a control within "
                "the floor of the parent at every seed is degenerate; zero spread means max - min <= the floor (absolute).",
                f"Step 2 (only where the gain is established): reproduction contrast e = c - (1 - rho) p - rho t, rho = "
                f"{p.reproduce_fraction:g}; two-sided paired t-test; Holm over every assessed (cell, control) contrast of the "
                "grid. Degenerate controls and the A/A check are outside the family. The A/A offset tests: Holm over the "
                "cells.",
                "Controls are judged conditionally on the gate: the contrast e correlates with the gain's estimate when the "
                "treatment's and the parent's run-to-run variances differ (cov(e, d) = (1 - rho) var(p) - rho var(t)), so "
                "among the cells where the gain is established a control at the boundary (both definite verdicts wrong) "
                "gets a wrong definite verdict more often than alpha when the gate's power is low. Simulated (f = 0.5, "
                "gain -0.02 nats/token, alpha 0.05): "
                + "; ".join(
                    f"n = {n}, sd parent {a:g} / treatment {b:g}: {r:.3f}"
                    for (n, a, b), r in CONDITIONAL_RATES.items()
                )
                + " (equal variances: 0.05; gate power >= 0.75: <= 0.05). The rate over all cells stays below alpha. No "
                "rule based on the contrast's own test can remove this (the hypothesis fixes e, and so its covariance with "
                "d); a selective test conditioning on the gate would, and is not implemented.",
                "Gain fraction: f = mean(c - p) / mean(t - p) over the seeds where all three ran; 95 % Fieller interval from "
                "the paired means and their covariance (t quantile, df = n - 1); unbounded when the gain's own 95 % "
                "interval covers 0.",
                f"MDE and seeds needed: noncentral t (statsmodels TTestPower), power {p.power:g}, level alpha (one-sided for "
                "the headline, two-sided for contrasts), the cell's observed sd, the PLANNED effect (min_effect_nats for the "
                f"headline, min(rho, 1 - rho) x min_effect_nats for contrasts), never the observed effect; above max_seeds "
                f"= {p.max_seeds}: not reachable at this budget.",
                "Degenerate (DESIGN 3): from the routing records (two declared routes stayed identical, or none of the added "
                "parameters moved), or paired differences with the parent within the numerical floor "
                f"({FLOOR_NATS:g} nats/token) at every seed; the A/A check is exempt.",
                "Mixed model: statsmodels mixedlm, REML, random intercept per seed, fitted on centred NLL in millinats; "
                "a cross-check, in no verdict.",
            )
            + ((f"Looks (DESIGN section 8): {_looks_text(p)}",) if p.looks else ())
        ),
    ]


def _left_out(stats: ReportStats) -> list[Block]:
    out: list[Block] = [Heading(2, "Runs left out, and why")]
    p = stats.progress
    if stats.left_out:
        out.append(
            Table(
                ("run", "variant", "seed", "cell", "status", "reason"),
                tuple(
                    (
                        lo.run_id,
                        lo.variant,
                        str(lo.seed),
                        cell_label(lo.size, lo.budget_tokens),
                        lo.status,
                        lo.reason,
                    )
                    for lo in stats.left_out
                ),
            )
        )
    elif p.complete:
        out.append(Para(f"None: all {p.total} runs of the grid finished and entered the statistics."))
    else:
        out.append(
            Para("None of the finished runs in the results store was left out. " + progress_sentence(p)[0])
        )
    return out


def _figures(stats: ReportStats, figures: list[FigureOut]) -> list[Block]:
    """Figures per cell, in the order drawn; figures across cells (``cell`` None, e.g. gain vs
    budget, DESIGN 8) in their own section."""
    out: list[Block] = [Heading(2, "Figures")]
    figures = [f for f in figures if not f.name.startswith(factorial_section.FIGURE_PREFIX)]  # in its section
    if not figures:
        return out + [Para("No figure: no pairs, training or validation curves, or routing rows.", "note")]
    cells = [c for c in stats.cells if any(f.cell == c for f in figures)]
    for size, budget in cells:
        out.append(Heading(3, f"Size {size}, budget {tokens_label(budget)} tokens"))
        for f in figures:
            if f.cell == (size, budget):
                out += [Heading(4, f.title), Image(f), Para(f.caption, "note")]
    return out + _across_cells(stats, [f for f in figures if f.cell is None])


def _across_cells(stats: ReportStats, figures: list[FigureOut]) -> list[Block]:
    """Gain vs budget (DESIGN 8): figures that span the cells of a size (``FigureOut.cell`` None)."""
    budgets: dict[str, set[int]] = {}
    for size, budget in stats.cells:
        budgets.setdefault(size, set()).add(budget)
    several = [s for s, b in budgets.items() if len(b) > 1]
    if not figures and not several:
        return []
    out: list[Block] = [Heading(3, "Gain vs budget")]
    for f in figures:
        out += [Heading(4, f.title), Image(f), Para(f.caption, "note")]
    if not figures:
        out.append(
            Para(
                f"Size(s) {', '.join(several)} have several budgets; the per-cell tables above give each "
                "budget's paired difference (this report draws no gain-vs-budget figure yet).",
                "note",
            )
        )
    return out


def layout(stats: ReportStats, figures: list[FigureOut], *, generated: str = "") -> list[Block]:
    """The report as blocks, in reading order: status and verdicts first, then the evidence."""
    blocks: list[Block] = [
        Heading(1, f"Paired significance report: grid {stats.grid or '(all)'}"),
        Para(
            f"{generated + '. ' if generated else ''}{roles_text(stats)} {len(stats.pairs)} pairs over "
            f"{len(stats.comparisons)} comparisons; {len(stats.left_out)} run(s) or pair(s) left out.",
            "note",
        ),
        Para(*progress_sentence(stats.progress)),
    ]
    blocks += verdict_banners(stats) + _top_warnings(stats) + how_to_read(stats) + grid_status(stats)
    blocks += plateau_blocks(stats)
    blocks += _plan(stats) + _headline(stats) + _controls(stats) + followup_blocks(stats)
    blocks += robustness_blocks(stats) + factorial_section.blocks(stats, figures) + _aa(stats)
    blocks += _divergence(stats)
    blocks += _gain_vs_budget(stats) + _figures(stats, figures) + _all_comparisons(stats) + _mixed(stats)
    return blocks + _methods(stats) + _left_out(stats)


def summary_lines(stats: ReportStats) -> list[str]:
    """Plain-text summary for the terminal: headline per cell, control verdicts, A/A, divergence."""
    lines = [f"runs: {progress_sentence(stats.progress)[0]}"]
    lines += [
        f"plan: alpha {stats.plan.alpha:g}, rho {stats.plan.reproduce_fraction:g}, min_effect_nats "
        f"{_num(stats.plan.min_effect_nats, '.4g') if stats.plan.min_effect_nats else 'not set'}, power "
        f"{stats.plan.power:g}, max_seeds {stats.plan.max_seeds}, looks "
        f"{', '.join(map(str, stats.plan.looks)) or 'none'}"
    ]
    lines += [
        f"diverged: {r.variant} {r.size} {r.budget_tokens} seed(s) {_seeds(r.diverged_seeds)}"
        for r in stats.diverged()
    ]
    lines += [f"plateau: {plateau_line(r)}" for r in stats.plateau]
    for h in stats.headlines:
        lines.append(headline_sentence(h, stats.plan.power, stats.plan.min_effect_nats).replace("**", ""))
    for a in stats.assessments:
        lines.append(
            f"  {a.control:<16} {a.size:<8} {a.budget_tokens:>12}  {a.verdict}  "
            f"({control_sentence(a, stats.plan.power)})"
        )
    lines += followup_summary(stats)
    for a in stats.aa_checks:
        lines.append(f"  A/A {a.variant} {a.size} {a.budget_tokens}: {aa_sentence(a, stats.plan.alpha)}")
    return lines + factorial_section.summary_lines(stats)


def render_markdown(
    stats: ReportStats, figures: list[FigureOut], *, generated: str = "", figure_dir: str = "figures"
) -> str:
    """``report.md``: the report with figures linked from ``figure_dir``."""
    return to_markdown(layout(stats, figures, generated=generated), figure_dir)


def render_html(stats: ReportStats, figures: list[FigureOut], *, generated: str = "") -> str:
    """``report.html``: the same report, one self-contained file."""
    return to_html(
        layout(stats, figures, generated=generated), f"Paired significance report: {stats.grid or '(all)'}"
    )


__all__ = ["layout", "render_markdown", "render_html", "summary_lines"]
