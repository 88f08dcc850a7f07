"""The top of the report: grid status, one verdict banner per cell, verdict chips, and how
to read the rest.

Words only, like :mod:`harness.report.render.sections`: every verdict string of :mod:`harness.report.stats.decisions`
and every A/A status of :mod:`harness.report.stats.analysis` gets a tone (:data:`VERDICT_TONES`,
:data:`AA_DISPLAY`), which :mod:`harness.report.render.blocks` draws as a coloured chip. The grid status
comes from :class:`harness.report.stats.progress.GridProgress`: the report says how many runs are
done, running, queued, failed or unreadable, and never that the grid finished unless the
queue says so.
"""

from __future__ import annotations

import math
from collections import defaultdict

from harness.common.terms import ROLES
from harness.report.render.blocks import Banner, Block, Bullets, Chip, Heading, Para, Table
from harness.report.render.fmt import fmt_ci, fmt_nats, fmt_p, fmt_tokens, num
from harness.report.render.sentences import cell_label
from harness.report.stats import decisions as dec
from harness.report.stats.pairing import AA_VARIANTS, AXIS_SEP, cell_name
from harness.report.stats.progress import (
    DIVERGED,
    DONE,
    FAILED,
    FINISHED,
    NOT_IN_STORE,
    QUEUED,
    RUNNING,
    STATES,
    UNREADABLE,
    GridProgress,
)
from harness.report.stats.results import AACheck, ReportStats

# Tone of every verdict (harness.report.stats.decisions) in the report's colours (harness.report.render.blocks).
VERDICT_TONES = {
    dec.GAIN_ESTABLISHED: "good",
    dec.GAIN_NOT_ESTABLISHED: "warn",
    dec.GAIN_ABSENT_PREFIX: "info",  # "gain absent (< delta nats/token)": a definite null result
    dec.DOES_NOT_REPRODUCE: "good",
    dec.REPRODUCES: "bad",
    dec.INCONCLUSIVE: "warn",
    dec.NOT_ASSESSED: "neutral",
    dec.DEGENERATE: "invalid",
}
VERDICT_SHORT = {dec.NOT_ASSESSED: "not assessed"}  # chips in banners and tables; the legend and the
# caveat said once above the controls table give the full verdict
VERDICT_MEANING = {
    dec.GAIN_ESTABLISHED: "step 1: the treatment beats the parent in this cell (n >= 3, mean dNLL < 0, Holm p < "
    "alpha); its controls are judged in step 2",
    dec.GAIN_NOT_ESTABLISHED: "step 1: neither a gain nor its absence is shown at these seeds; the headline says "
    "how many seeds would decide it; no control is assessed there",
    dec.GAIN_ABSENT_PREFIX: "step 1: the gain is smaller than min_effect_nats (one-sided test of H0 'gain >= "
    "min_effect_nats', Holm over the cells): a null result; no control is assessed there",
    dec.DOES_NOT_REPRODUCE: "the control lands nearer the parent: the confound it stands for does not explain the "
    "gain",
    dec.REPRODUCES: "the control lands nearer the treatment: the confound it stands for can explain the gain",
    dec.INCONCLUSIVE: "the gain is established but the contrast cannot tell at this many seeds (see MDE and seeds "
    "needed)",
    dec.NOT_ASSESSED: "no verdict: the gain it would reproduce is not established in this cell",
    dec.DEGENERATE: "the variant cannot differ from the parent (DESIGN 3): no test, whatever the numbers say",
}
# A/A status (harness.report.stats.results.AA_STATUSES) -> (what the report shows, tone). DESIGN 6: bit-identical and a
# noise floor below half the gain pass; a noise floor reaching it warns; a systematic offset FAILs.
AA_DISPLAY = {
    "bit-identical": ("pass", "good"),
    "pass": ("pass", "good"),
    "warn": ("warn", "warn"),
    "FAIL": ("FAIL", "bad"),
    "no pairs": ("no pairs", "neutral"),
}
AA_MEANING = {
    "pass": "A/A check: every paired difference is exactly 0 (bit-identical), or the numerical noise floor stays "
    "below half the treatment's gain",
    "warn": "A/A check: the numerical noise floor reaches half the treatment's gain; effects of that size cannot be "
    "told from noise at this budget",
    "FAIL": "A/A check: a systematic offset for a variant equal to the parent: the harness is broken, nothing in "
    "the report can be trusted",
    "no pairs": "A/A check: no seed where both runs finished",
}
STATE_TONES = {
    DONE: "good",
    DIVERGED: "warn",
    FAILED: "bad",
    RUNNING: "info",
    QUEUED: "neutral",
    NOT_IN_STORE: "warn",
    UNREADABLE: "bad",
}


def verdict_chip(verdict: str, *, short: bool = False) -> Chip:
    """The chip of a headline or control verdict (raises KeyError on an unknown verdict)."""
    tone = VERDICT_TONES[dec.GAIN_ABSENT_PREFIX if dec.is_absent(verdict) else verdict]
    return Chip(VERDICT_SHORT.get(verdict, verdict) if short else verdict, tone, verdict)


def aa_chip(a: AACheck) -> Chip:
    """pass / warn / FAIL / no pairs, with the A/A status as hover text."""
    text, tone = AA_DISPLAY[a.status]
    return Chip(text, tone, a.status)


# --------------------------------------------------------------------------- grid status


def _count_list(c, states) -> str:
    return ", ".join(f"{c[s]} {s}" for s in states if c[s])


def progress_sentence(p: GridProgress) -> tuple[str, str]:
    """One sentence on how far the grid has got, and its tone.

    Only a queue that was read, with nothing queued or running and every finished run
    readable in the store, gives "All N runs of the grid finished".
    """
    c = p.counts
    if p.complete:
        tail = _count_list(c, FINISHED)
        return (
            f"All {p.total} runs of the grid finished ({tail}).",
            "good" if c[DONE] == p.total else "warn",
        )
    others = _count_list(c, [s for s in STATES if s != DONE])
    if p.queue_found:
        return (
            f"{c[DONE]} of {p.total} runs done"
            + (f"; {others}" if others else "")
            + " — the verdicts below use the finished runs only.",
            "warn",
        )
    return (
        f"Queue not found ({p.queue_note}): this report sees only the {p.total} run(s) in the results store ("
        f"{_count_list(c, STATES) or 'none'}); runs still queued or running elsewhere are not counted, so the "
        "grid may be incomplete — the verdicts below use the finished runs only.",
        "warn",
    )


def _which(runs, several_cells: bool, cap: int = 12) -> str:
    """'block_attnres s0 s1 ...; rd_attnres s0 ...': variants by role (parent, treatment, controls, references),
    then as first listed; seeds in numeric order, so a grid imported from an archive (whose queue is in
    run-id order) reads as the one that was queued."""
    first = {}
    for r in runs:
        first.setdefault(r.variant, len(first))
    rank = {role: i for i, role in enumerate(ROLES)}
    runs = sorted(
        runs,
        key=lambda r: (rank.get(r.role, len(rank)), first[r.variant], r.seed if r.seed is not None else -1),
    )
    groups: dict[str, list[str]] = defaultdict(list)
    for r in runs:
        key = r.variant or r.run_id
        if several_cells and r.variant:
            key += f" ({cell_label(r.size, r.budget_tokens or 0)})"
        groups[key].append(f"s{r.seed}" if r.seed is not None else "")
    items = [f"{k} {' '.join(x for x in v if x)}".strip() for k, v in groups.items()]
    return "; ".join(items[:cap]) + (f"; ... and {len(items) - cap} more" if len(items) > cap else "")


def grid_status(stats: ReportStats) -> list[Block]:
    """The grid status section: a table of run states with counts (the sentence opens the report)."""
    p = stats.progress
    cells = {(r.size, r.budget_tokens) for r in p.runs}
    rows, details = [], []
    for s in STATES:
        runs = [r for r in p.runs if r.state == s]
        if not runs:
            continue
        rows.append((Chip(s, STATE_TONES[s]), str(len(runs)), _which(runs, len(cells) > 1)))
        errs = [f"{r.run_id}: {r.detail}" for r in runs if r.detail and s in (UNREADABLE, NOT_IN_STORE)]
        details.append("; ".join(errs[:5]) + (f"; ... and {len(errs) - 5} more" if len(errs) > 5 else ""))
    out: list[Block] = [Heading(2, "Grid status: which runs have finished")]
    if rows:
        out.append(
            Table(("state", "runs", "which (variant and seeds)"), tuple(rows), tuple(details), "detail")
        )
    queue = (
        (f"Queue: {p.queue_note}." if p.queue_note else "Queue: read.")
        if p.queue_found
        else (f"Queue: not found ({p.queue_note}); states come from the results store only.")
    )
    out.append(
        Para(
            queue + " Failed and diverged runs are outcomes (divergence table below); a failed run's error "
            "is listed under 'Runs left out'.",
            "note",
        )
    )
    return out


def roles_text(stats: ReportStats) -> str:
    """'Parent: ...; treatment: ...; controls: ...; A/A check: ...; references: ...', naming the
    variants of the grid that have no finished run yet (from the queue)."""
    p = stats.progress
    seen = {c.first for c in stats.comparisons} | {c.second for c in stats.comparisons}

    def names(have, role, aa=None):
        out = list(have)
        for v in p.variants(role):
            if v not in out and (aa is None or (v in AA_VARIANTS) == aa):
                out.append(v)
        return ", ".join(v if v in seen else f"{v} (no run finished yet)" for v in out) or "none"

    return (
        f"Parent: {names([stats.parent], 'parent')}; treatment: "
        f"{names([stats.treatment] if stats.treatment else [], 'treatment')}; controls: "
        f"{names(stats.controls, 'control', aa=False)}; A/A check: {names(stats.aa_variants, 'control', aa=True)}; "
        f"references: {names(stats.references, 'reference')}."
    )


# --------------------------------------------------------------------------- verdict banners


def _tp(stats: ReportStats, size: str, budget: int):
    label = f"{stats.treatment} - {stats.parent}"
    return next(
        (c for c in stats.comparisons if (c.comparison, c.size, c.budget_tokens) == (label, size, budget)),
        None,
    )


def _banner_text(stats: ReportStats, size: str, budget: int) -> tuple[Chip, str]:
    h = stats.headline(size, budget)
    if h is None:
        return (
            Chip("no headline", "neutral"),
            "No treatment run has a finished parent pair in this cell: there is "
            "no gain to establish here, and no control is assessed.",
        )
    c = _tp(stats, size, budget)
    ci = f" {fmt_ci(c.stats.ci_low, c.stats.ci_high)}" if math.isfinite(c.stats.ci_low) else ""
    facts = f"mean dNLL {fmt_nats(h.mean)} nats/token{ci}, lower at {c.stats.wins} of {c.stats.n} seeds"
    if math.isfinite(h.p_one_sided):
        # with looks the Holm p is of the sequential p, tested at alpha; the look's level is the raw p's
        look = f" (look level {h.level:g})" if stats.plan.looks else ""
        facts += f", one-sided p {fmt_p(h.p_one_sided)}{look}, Holm p {fmt_p(h.holm_p)}"
    who = f"{stats.treatment} vs {stats.parent}"
    if h.reason == "degenerate":
        text = f"{who}: the treatment is degenerate ({h.degenerate_reason}); no test, and no control is assessed."
    elif h.established:
        text = (
            f"{who}: {facts} < {stats.plan.alpha:g}. The gain is established; the controls are judged below."
        )
    elif h.absent:
        text = (
            f"{who}: {facts}. The gain is absent: at most {num(h.gain_upper, '.3g')} nats/token (Holm-adjusted "
            f"upper bound), below min_effect_nats; no control is assessed in this cell."
        )
    else:
        why = {
            "fewer than 3 pairs": f"{h.n} pair(s), the test needs 3",
            "before the first look": "no look reached yet",
            "mean d >= 0": "the treatment is not better than the parent",
            "mean within the numerical floor": "|mean dNLL| is within the numerical floor (float rounding)",
            "Holm p >= alpha": f"Holm p >= {stats.plan.alpha:g}",
        }[h.reason]
        mde = (
            f"; at {h.n} seeds the test detects gains of about {num(h.mde_nats, '.3g')} nats/token (MDE)"
            if math.isfinite(h.mde_nats)
            else ""
        )
        text = f"{who}: {facts}. Undecided ({why}){mde}. No control is assessed in this cell."
    return verdict_chip(h.verdict), text


def verdict_banners(stats: ReportStats) -> list[Block]:
    """One banner per cell: the headline verdict in words, then each control's and the A/A chip."""
    out: list[Block] = [Heading(2, "Verdict per cell")]
    if not stats.cells:
        return out + [Para("No finished pair of runs yet: no verdict.", "warn")]
    p = stats.progress
    for size, budget in stats.cells:
        chip, text = _banner_text(stats, size, budget)
        todo = [r for r in p.runs if (r.size, r.budget_tokens) == (size, budget) and r.state not in FINISHED]
        if todo:
            c = {s: sum(r.state == s for r in todo) for s in STATES}
            text += (
                f" {len(todo)} run(s) of this cell have not finished ("
                + ", ".join(f"{n} {s}" for s, n in c.items() if n)
                + "): this verdict may change."
            )
        chips = [
            (a.control, verdict_chip(a.verdict, short=True))
            for a in stats.assessments
            if (a.size, a.budget_tokens) == (size, budget)
        ]
        aa = [a for a in stats.aa_checks if (a.size, a.budget_tokens) == (size, budget)]
        chips += [(f"A/A {a.variant}", aa_chip(a)) for a in aa]
        failed = [a.variant for a in aa if a.status == "FAIL"]
        if failed:
            text += (
                f" The A/A check ({', '.join(failed)}) FAILED in this cell: a variant equal to the parent is "
                "not, so the harness is broken and no verdict here can be trusted."
            )
        out.append(
            Banner(
                cell_name(size, fmt_tokens(budget)),
                chip,
                text,
                tuple(chips),
                "bad" if failed else "",
            )
        )
    return out


def how_to_read(stats: ReportStats) -> list[Block]:
    """A short guide and the legend of every chip (all verdicts and A/A statuses)."""
    t, par = stats.treatment or "the treatment", stats.parent
    rho = stats.plan.reproduce_fraction
    legend = [
        (verdict_chip(v), VERDICT_MEANING[v])
        for v in (
            dec.GAIN_ESTABLISHED,
            dec.GAIN_ABSENT_PREFIX,
            dec.GAIN_NOT_ESTABLISHED,
            dec.DOES_NOT_REPRODUCE,
            dec.REPRODUCES,
            dec.INCONCLUSIVE,
            dec.NOT_ASSESSED,
            dec.DEGENERATE,
        )
    ]
    legend += [(Chip(text, tone), AA_MEANING[text]) for text, tone in dict(AA_DISPLAY.values()).items()]
    cell_axes = (
        ", axis values: each value of an [axes] setting is its own cell"
        if any(AXIS_SEP in size for size, _ in stats.cells)
        else ""
    )
    return [
        Heading(2, "How to read this report"),
        Bullets(
            (
                f"A cell is one (size, budget{cell_axes}). Read its banner above first. Step 1 asks whether {t} beats {par}: a "
                "one-sided paired t-test on the final validation NLL over matched seeds, Holm over the cells: 'gain "
                "established', 'gain absent (< min_effect_nats)' (a one-sided test that the gain is smaller than the plan's "
                "min_effect_nats) or 'undecided'. Only where the gain is established does step 2 judge the controls. A seed "
                "where a variant diverged and its comparator finished counts as a loss for it.",
                "dNLL = first minus second, in nats/token, at the same seed and protocol: negative means the first is "
                "better. Intervals are 95 %; 'wins k/n' counts the seeds where the first is better.",
                f"A control reproduces the gain when it lands nearer {t} than rho = {rho:g} of the way from {par} "
                "(reproduction contrast e < 0 with Holm p < alpha): the confound it stands for can then explain the gain. "
                "The gain fraction f puts the control on the line from the parent (0) to the treatment (1).",
                "The A/A check trains a variant equal to the parent in exact arithmetic: any difference is numerical "
                "noise, and a systematic one means the harness is broken (its box below).",
                "The grid status says how many runs have finished; verdicts use finished runs only. Figures per cell "
                "follow the tables; every number is also in stats.csv and pairs.csv next to this file.",
            )
        ),
        Table(("chip", "meaning"), tuple(legend)),
    ]


def not_finished(stats: ReportStats, role: str, aa: bool | None = None) -> str | None:
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
