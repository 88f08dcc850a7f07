"""The report's evidence sections: the A/A check, divergence as an outcome, the descriptives of
every comparison, the mixed-model cross-check and gain vs budget (DESIGN sections 3, 6 and 8).

Words only (:mod:`harness.report.render.sections` puts the sections in reading order); no verdict rests
on these sections except the A/A status, computed in :mod:`harness.report.stats.analysis`.
"""

from __future__ import annotations

import math

from harness.report.render.blocks import Block, Box, Bullets, Chip, Heading, Para, Table
from harness.report.render.fmt import cell_text as _cell
from harness.report.render.fmt import fmt_ci, fmt_nats, fmt_p, fmt_pct, fmt_tokens
from harness.report.render.fmt import num as _num
from harness.report.render.fmt import seeds_text as _seeds
from harness.report.render.sentences import (
    aa_sentence,
    cell_label,
    mean_ci,
)
from harness.report.render.summary import (
    aa_chip,
    not_finished,
)
from harness.report.stats.results import AA_NOISE_ABS, AA_NOISE_FRACTION, ReportStats


def _aa_box_chip(stats: ReportStats) -> Chip | None:
    """The worst A/A status of the grid (FAIL > warn > pass > no pairs) as the box's chip."""
    if not stats.aa_checks:
        return None
    order = ("FAIL", "warn", "bit-identical", "pass", "no pairs")
    return aa_chip(min(stats.aa_checks, key=lambda a: order.index(a.status)))


def aa_blocks(stats: ReportStats) -> list[Block]:
    """The A/A check's box: status, max |dNLL| against its threshold and the offset test per cell."""
    title = "A/A check (identical to the parent in exact arithmetic)"
    if not stats.aa_checks:
        waiting = not_finished(stats, "control", aa=True)
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


def divergence_blocks(stats: ReportStats) -> list[Block]:
    """Runs per variant and cell by outcome (done, diverged, failed, unfinished) and the unpaired seeds."""
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


def comparisons_blocks(stats: ReportStats) -> list[Block]:
    """The descriptives of every comparison (t interval, sign-flip, Wilcoxon, sign test): no verdict."""
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


def mixed_blocks(stats: ReportStats) -> list[Block]:
    """The mixed-model cross-check nll ~ variant + (1 | seed) per cell, beside the paired means."""
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


def gain_vs_budget_blocks(stats: ReportStats) -> list[Block]:
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
