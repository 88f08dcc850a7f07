"""Render a :class:`reports.stats.ReportStats` as Markdown and as self-contained HTML.

The report is first laid out as a short list of blocks (heading, paragraph, bullet
list, table, figure); :func:`to_markdown` and :func:`to_html` turn the same blocks into
text, so the two formats cannot drift apart. HTML embeds each figure as a base64 PNG
``data:`` URI and carries its own CSS: one file, no network. Nothing here computes a
statistic; it only formats fields of the results objects.
"""

from __future__ import annotations

import base64
import html
import math
from dataclasses import dataclass

from reports.figures import FigureOut
from reports.pairing import cell_order
from reports.stats import (AA_NOISE_ABS, AA_NOISE_FRACTION, AA_TOL, MIN_PAIRS, WILCOXON_ZERO_METHOD, Comparison,
                           ReportStats)

PAPER_HEADLINE = ("Paper (RD-AttnRes, arXiv 2608.01075; 2.0B tokens, FineWeb-Edu): validation NLL lower "
                  "in 10/10 matched pairs (5 seeds x {120M, 343M}), mean dNLL -0.0301 / -0.0247 "
                  "nats/token, perplexity -2.97 % / -2.43 %.")


# --------------------------------------------------------------------------- blocks


@dataclass(frozen=True, slots=True)
class Heading:
    level: int
    text: str


@dataclass(frozen=True, slots=True)
class Para:
    text: str
    css: str = ""  # e.g. "warn", "note"


@dataclass(frozen=True, slots=True)
class Bullets:
    items: tuple[str, ...]
    css: str = ""


@dataclass(frozen=True, slots=True)
class Table:
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


@dataclass(frozen=True, slots=True)
class Image:
    fig: FigureOut


Block = Heading | Para | Bullets | Table | Image


# --------------------------------------------------------------------------- number formats


def fmt_p(p: float) -> str:
    """p-value: 3 significant digits, scientific below 1e-4, '-' when not computed."""
    if p is None or (isinstance(p, float) and math.isnan(p)):
        return "-"
    if p == 0:
        return "0"
    return f"{p:.2e}" if p < 1e-4 else f"{p:.3g}"


def fmt_nats(x: float, digits: int = 4) -> str:
    """Signed value in nats/token with a fixed number of decimals ('-' for NaN)."""
    return "-" if x is None or math.isnan(x) else f"{x:+.{digits}f}"


def fmt_pct(x: float) -> str:
    """Fraction as a signed percentage, e.g. -0.0297 -> '-2.97 %'."""
    return "-" if x is None or math.isnan(x) else f"{100 * x:+.2f} %"


def fmt_ci(lo: float, hi: float) -> str:
    return "-" if math.isnan(lo) else f"[{lo:+.4f}, {hi:+.4f}]"


def fmt_tokens(n: int | None) -> str:
    return "-" if n is None else f"{n:,}".replace(",", "_")


def _num(x: float, fmt: str = ".3g") -> str:
    return "-" if x is None or math.isnan(x) else format(x, fmt)


# --------------------------------------------------------------------------- layout


def _headline(stats: ReportStats) -> list[Block]:
    out: list[Block] = [Heading(2, "Headline: treatment vs parent")]
    rows = [c for c in stats.headline()]
    if not rows:
        return out + [Para("No treatment variant in this grid: no headline comparison.", "warn")]
    out.append(Table(
        ("size", "budget (tokens)", "pairs won", "mean dNLL (nats/token)", "95 % CI", "perplexity change",
         "paired t p", "Holm p", "seeds", "missing seeds"),
        tuple((c.size, fmt_tokens(c.budget_tokens), f"{c.test.wins}/{c.test.n}", fmt_nats(c.test.mean_diff),
               fmt_ci(c.test.ci_low, c.test.ci_high), fmt_pct(c.test.ppl_change), fmt_p(c.test.t_p),
               fmt_p(c.holm_p), " ".join(map(str, c.seeds)) or "-", c.missing_seeds or "none")
              for c in rows)))
    out.append(Para(f"dNLL = {stats.treatment} minus {stats.parent}, final validation NLL, same seed "
                    "and protocol; negative = the treatment is better. Perplexity change = "
                    "exp(mean dNLL) - 1. " + PAPER_HEADLINE, "note"))
    for a in stats.aa_checks:
        if a.status == "warn":  # the noise floor bears on the headline gain itself
            out.append(Para(f"A/A noise floor at size {a.size}, budget {fmt_tokens(a.budget_tokens)}: {a.variant} "
                            f"(identical to {stats.parent} in exact arithmetic) differs from it by up to "
                            f"{a.max_abs_diff:.3g} nats/token, at least half of |G|; see the A/A check below.",
                            "warn"))
    return out


def _why(c: Comparison) -> str:
    caveat = f"CAVEAT: {c.caveat}" if c.caveat else ""
    if c.verdict == "inconclusive" or c.verdict == "insufficient":
        need = "" if math.isnan(c.more_seeds) else (
            f"; power 0.8 needs about {int(c.seeds_needed)} pairs ({int(c.more_seeds)} more seed(s))")
        why = f"{c.note + '; ' if c.note else ''}would be decided by: {c.deciding_test}{need}"
    else:
        why = c.note
    return "; ".join(x for x in (caveat, why) if x)


def _controls(stats: ReportStats) -> list[Block]:
    out: list[Block] = [Heading(2, "Controls: do they reproduce the gain?")]
    vs = stats.verdicts()
    if not vs:
        return out + [Para("No control variant in this grid.", "warn")]
    by = {(c.comparison, c.size, c.budget_tokens): c for c in stats.comparisons}
    rows = []
    for c in vs:
        tc = by.get((f"{stats.treatment} - {c.first}", c.size, c.budget_tokens)) if stats.treatment else None
        verdict = f"**{c.verdict}**" + (" (treatment gain not significant)" if c.caveat else "")
        rows.append((c.first, c.size, fmt_tokens(c.budget_tokens), f"{c.test.wins}/{c.test.n}",
                     f"{fmt_nats(c.test.mean_diff)} {fmt_ci(c.test.ci_low, c.test.ci_high)}", fmt_p(c.holm_p),
                     "-" if tc is None else fmt_nats(tc.test.mean_diff), "-" if tc is None else fmt_p(tc.holm_p),
                     _num(c.tost_margin, ".4f"), fmt_p(c.tost_p), verdict, _why(c)))
    gain_warn = stats.gain_warnings()
    if gain_warn:  # right above the verdict table, where the verdicts are read
        out.append(Bullets(tuple(f"Warning: {w}" for w in gain_warn), "warn"))
    out.append(Table(("control", "size", "budget", "wins vs parent", "control - parent dNLL [95 % CI]",
                      "Holm p", "treatment - control dNLL", "Holm p", "TOST margin |G|/2", "TOST p",
                      "verdict", "why / what would decide it"), tuple(rows)))
    out.append(Para(
        f"Verdict rule (DESIGN 6; alpha = {stats.alpha}, Holm-adjusted paired t-test p-values, G = mean "
        "treatment-minus-parent dNLL): 'reproduces gain' = control - parent significantly below 0 and "
        "treatment - control not significantly below 0; 'does not reproduce gain' = treatment - control "
        "significantly below 0, or control - parent equivalent to 0 by TOST with margin |G|/2; "
        "'inconclusive' = anything else; 'insufficient' = fewer than "
        f"{MIN_PAIRS} pairs. 'Significantly below 0' = Holm p < alpha with a negative mean.", "note"))
    return out


def _aa(stats: ReportStats) -> list[Block]:
    out: list[Block] = [Heading(2, "A/A check (a control identical to the parent)")]
    if not stats.aa_checks:
        return out + [Para("No A/A control (dup_route_tied) in this grid: the harness's pairing is "
                           "not checked end to end.", "warn")]
    out.append(Table(("variant", "size", "budget", "pairs", "training steps", "max |dNLL|", "noise threshold",
                      "mean dNLL", "paired t p", "paired test", "status"),
                     tuple((a.variant, a.size, fmt_tokens(a.budget_tokens), str(a.n_pairs), a.steps or "-",
                            "0 (bit-identical)" if a.bit_identical else _num(a.max_abs_diff, ".3g"),
                            _num(a.noise_threshold, ".4g"), fmt_nats(a.mean_diff, 6), fmt_p(a.t_p),
                            a.test_status, f"**{a.status}**") for a in stats.aa_checks)))
    loud = tuple(f"{a.variant} ({a.size}, {fmt_tokens(a.budget_tokens)}): **{a.status}**: {a.explanation}"
                 for a in stats.aa_checks if a.status in ("warn", "FAIL"))
    quiet = tuple(f"{a.variant} ({a.size}, {fmt_tokens(a.budget_tokens)}): {a.status}: {a.explanation}"
                  for a in stats.aa_checks if a.status not in ("warn", "FAIL"))
    out += ([Bullets(loud, "warn")] if loud else []) + ([Bullets(quiet)] if quiet else [])
    out.append(Para(
        "Status: the paired test asks for a systematic offset (unadjusted paired t p < alpha -> FAIL; "
        f"all |dNLL| <= {AA_TOL:g} nats/token -> pass). Separately, the A/A variant sums floats in another "
        "order than the parent, and that ~1e-7 rounding difference per step diverges chaotically over the "
        "run, so max |dNLL| is the protocol's run-to-run numerical noise floor: when it reaches the noise "
        f"threshold ({AA_NOISE_FRACTION:g} x |G| of the treatment, or {AA_NOISE_ABS:g} nats/token with no "
        "treatment) a pass becomes warn (a FAIL stays FAIL).", "note"))
    return out


def _all_comparisons(stats: ReportStats) -> list[Block]:
    rows = []
    for c in stats.comparisons:
        t = c.test
        rows.append((c.comparison, c.size, fmt_tokens(c.budget_tokens), str(t.n), fmt_nats(t.mean_diff),
                     fmt_ci(t.ci_low, t.ci_high), fmt_p(t.t_p),
                     f"{fmt_p(t.wilcoxon_p)} (min {fmt_p(t.wilcoxon_min_p)})",
                     f"{fmt_p(t.sign_p)} (min {fmt_p(t.sign_min_p)})", f"{t.wins}/{t.n}", _num(t.d_z),
                     fmt_pct(t.ppl_change), fmt_p(c.holm_p), fmt_p(c.tost_p),
                     "; ".join(x for x in (t.note,) if x) or ""))
    return [Heading(2, "All comparisons and exact tests"),
            Para("Every row of stats.csv. 'min' = the smallest p-value the exact test can reach with "
                 "this many non-zero pairs, 2^(1-n): with 5 pairs no Wilcoxon or sign test can go below "
                 "0.0625, so their p-values cannot reach 0.05 whatever the data.", "note"),
            Table(("comparison", "size", "budget", "n", "mean dNLL", "95 % CI", "t p", "Wilcoxon p",
                   "sign p", "wins", "d_z", "ppl change", "Holm p", "TOST p", "note"), tuple(rows))]


def _mixed(stats: ReportStats) -> list[Block]:
    out: list[Block] = [Heading(2, "Mixed model cross-check: nll ~ variant + (1 | seed)")]
    paired = {(c.first, c.size, c.budget_tokens): c for c in stats.comparisons if c.second == stats.parent}
    order = {v: i for i, v in enumerate((stats.treatment, *stats.controls, *stats.references))}
    for m in stats.mixed:
        out.append(Heading(3, f"size {m.size}, budget {fmt_tokens(m.budget_tokens)} tokens"))
        if m.error:
            out.append(Para(f"Not available: {m.error}", "warn"))
        if m.coefs:
            out.append(Table(
                ("variant", f"estimate vs {stats.parent} (nats/token)", "SE", "95 % CI", "p (Wald z)",
                 "paired mean dNLL"),
                tuple((k.variant, fmt_nats(k.estimate), _num(k.se, ".2g"), fmt_ci(k.ci_low, k.ci_high),
                       fmt_p(k.p), fmt_nats(paired[(k.variant, m.size, m.budget_tokens)].test.mean_diff)
                       if (k.variant, m.size, m.budget_tokens) in paired else "-")
                      for k in sorted(m.coefs, key=lambda k: order.get(k.variant, len(order))))))
            out.append(Para(f"{m.n_obs} runs over {m.n_seeds} seeds; seed variance {m.seed_var:.3g} "
                            f"nats^2, residual variance {m.residual_var:.3g} nats^2; converged: "
                            f"{'yes' if m.converged else 'no'}.", "note"))
        out.append(Bullets(tuple(f"statsmodels warning: {w}" for w in m.warnings), "warn")
                   if m.warnings else Para("The fit raised no warning.", "note"))
    return out


def _methods(stats: ReportStats) -> list[Block]:
    fams = []
    for cell in sorted({(c.size, c.budget_tokens) for c in stats.comparisons}, key=cell_order):
        fam = [c.comparison for c in stats.comparisons
               if (c.size, c.budget_tokens) == cell and not math.isnan(c.holm_p)]
        fams.append(f"Holm family at size {cell[0]}, budget {fmt_tokens(cell[1])}: m = {len(fam)} "
                    f"({', '.join(fam) if fam else 'no test ran'}).")
    return [Heading(2, "Methods, assumptions and the Holm family"), Bullets((
        "Pairing: two finished runs are paired only if they share size, budget, seed and protocol_hash; "
        "a differing protocol is an error naming the differing config fields (or, with --allow-partial, "
        "the pair is left out and listed below).",
        "Response: final validation NLL in nats/token on the fixed held-out set; dNLL = first minus "
        "second (negative = the first variant is better).",
        f"Paired t-test (two-sided, df = n - 1) and its 95 % t interval; assumes the per-seed "
        f"differences are independent and roughly normal. Tests run only with >= {MIN_PAIRS} pairs.",
        f"Exact Wilcoxon signed-rank test (scipy, zero_method='{WILCOXON_ZERO_METHOD}': zero differences "
        "are dropped; with tied |d| the exact distribution is enumerated over all sign flips); assumes "
        "differences symmetric about their median. zero_method='pratt' is not used: with the exact "
        "method it reports p = 0.0625 for identical samples.",
        "Sign test (statsmodels, exact binomial, zero differences discarded): no distributional "
        "assumption. Non-finite values are rejected before any test (statsmodels' sign_test would "
        "silently drop a NaN).",
        "Smallest achievable two-sided p of the exact Wilcoxon and sign tests with n non-zero pairs: "
        "2^(1-n) (0.0625 at n = 5, 0.0039 at n = 9); shown next to each test.",
        "Cohen's d_z = mean(d) / sd(d); perplexity change = exp(mean dNLL) - 1.",
        "Multiplicity: Holm's step-down adjustment (statsmodels multipletests) of the paired t-test "
        "p-values within each size and budget; the family is treatment - parent, every control - "
        "parent (A/A check included) and treatment - every control. Comparisons whose test could not "
        "run are kept out (multipletests would count a NaN as a test). Reference rows "
        "(parent - reference) are descriptive and outside the family. Wilcoxon and sign tests are "
        "robustness checks and are not adjusted.",
        "Equivalence: TOST (statsmodels ttost_paired, two one-sided paired t-tests) of control - parent "
        "within +-|G|/2, G = mean treatment - parent dNLL at the same size and budget; not "
        "multiplicity-adjusted.",
        "Caveat on control verdicts: where the treatment's own gain (treatment - parent) is not "
        "significantly below 0 after Holm, each control verdict still follows the DESIGN 6 rule but is "
        "marked 'treatment gain not significant' (stats.csv note column): it then says little about the "
        "RD-AttnRes claim.",
        f"A/A noise floor: max |dNLL| of the A/A pairs compared with {AA_NOISE_FRACTION:g} x |G| (or "
        f"{AA_NOISE_ABS:g} nats/token with no treatment); at or above it the A/A status is warn, since "
        "effects of the treatment's size are then within the numerical noise of the protocol.",
        "Seeds needed (inconclusive verdicts): statsmodels TTestPower for power 0.8, observed d_z taken "
        "as the true effect, level alpha/m (Holm's first step) for the t-tests; TOST power approximated "
        "by one one-sided t-test at the nearer margin.",
        "Mixed model: statsmodels mixedlm, REML, random intercept per seed, fitted on centred NLL in "
        "millinats (statsmodels 0.15 flags a boundary fit at the nats scale even when the seed "
        "variance is clearly positive); estimates converted back to nats. Any warning it still "
        "raises is shown verbatim above.",
    ) + tuple(fams))]


def _left_out(stats: ReportStats) -> list[Block]:
    out: list[Block] = [Heading(2, "Runs left out, and why")]
    if stats.left_out:
        out.append(Table(("run", "variant", "seed", "size", "budget", "status", "reason"),
                         tuple((lo.run_id, lo.variant, str(lo.seed), lo.size, fmt_tokens(lo.budget_tokens),
                                lo.status, lo.reason) for lo in stats.left_out)))
    else:
        out.append(Para("None: every run of the grid finished and entered the statistics."))
    missing = [f"{c.comparison} ({c.size}, {fmt_tokens(c.budget_tokens)}): {c.missing_seeds}"
               for c in stats.comparisons if c.missing_seeds]
    out.append(Heading(3, "Missing seeds per comparison"))
    out.append(Bullets(tuple(missing)) if missing else Para("None: every comparison has every seed."))
    return out


def layout(stats: ReportStats, figures: list[FigureOut], *, generated: str = "") -> list[Block]:
    """The report as blocks, in reading order."""
    roles = (f"Parent: {stats.parent}; treatment: {stats.treatment or 'none'}; controls: "
             f"{', '.join(stats.controls) or 'none'}; references: {', '.join(stats.references) or 'none'}.")
    blocks: list[Block] = [
        Heading(1, f"Paired significance report: grid {stats.grid or '(all)'}"),
        Para(f"{generated + '. ' if generated else ''}alpha = {stats.alpha}, two-sided. {roles} "
             f"{len(stats.pairs)} pairs over {len(stats.comparisons)} comparisons; "
             f"{len(stats.left_out)} run(s) or pair(s) left out (listed at the end)."),
    ]
    if stats.warnings:
        blocks += [Heading(2, "Warnings"), Bullets(stats.warnings, "warn")]
    blocks += _headline(stats) + _controls(stats) + _aa(stats) + _all_comparisons(stats) + _mixed(stats)
    blocks.append(Heading(2, "Figures"))
    for f in figures:
        blocks += [Heading(3, f.title), Image(f), Para(f.caption, "note")]
    if not figures:
        blocks.append(Para("No figure: no pairs, validation curves or routing rows.", "note"))
    return blocks + _methods(stats) + _left_out(stats)


# --------------------------------------------------------------------------- writers


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def to_markdown(blocks: list[Block], figure_dir: str = "figures") -> str:
    """Markdown text; figures are linked as ``{figure_dir}/{name}.png``."""
    lines: list[str] = []
    for b in blocks:
        if isinstance(b, Heading):
            lines += ["#" * b.level + " " + b.text, ""]
        elif isinstance(b, Para):
            lines += [("> " if b.css == "warn" else "") + b.text, ""]
        elif isinstance(b, Bullets):
            lines += [f"- {_md_cell(i)}" for i in b.items] + [""]
        elif isinstance(b, Table):
            lines.append("| " + " | ".join(map(_md_cell, b.columns)) + " |")
            lines.append("|" + "|".join("---" for _ in b.columns) + "|")
            lines += ["| " + " | ".join(_md_cell(x) for x in row) + " |" for row in b.rows]
            lines.append("")
        elif isinstance(b, Image):
            lines += [f"![{b.fig.title}]({figure_dir}/{b.fig.name}.png)", ""]
    return "\n".join(lines).rstrip() + "\n"


_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto; max-width: 1200px;
       padding: 0 1em; color: #222; line-height: 1.45; }
h1 { font-size: 1.6em; } h2 { border-bottom: 1px solid #ccc; padding-bottom: .2em; margin-top: 1.8em; }
table { border-collapse: collapse; margin: .8em 0; font-size: .86em; }
th, td { border: 1px solid #ccc; padding: .25em .5em; text-align: left; vertical-align: top; }
th { background: #f2f2f2; } tr:nth-child(even) td { background: #fafafa; }
.warn { background: #fff4e5; border-left: 4px solid #f0a030; padding: .4em .8em; }
.note { color: #555; font-size: .92em; }
figure { margin: 1em 0; } img { max-width: 100%; border: 1px solid #eee; }
"""


def _inline_html(text: str) -> str:
    """Escape, then turn **bold** (used for verdicts) into <strong>."""
    out = html.escape(text)
    while out.count("**") >= 2:
        out = out.replace("**", "<strong>", 1).replace("**", "</strong>", 1)
    return out


def to_html(blocks: list[Block], title: str) -> str:
    """A complete, self-contained HTML page (inline CSS, figures as base64 PNG data URIs)."""
    parts = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
             f"<title>{html.escape(title)}</title>", f"<style>{_CSS}</style>", "</head>", "<body>"]
    for b in blocks:
        if isinstance(b, Heading):
            parts.append(f"<h{b.level}>{_inline_html(b.text)}</h{b.level}>")
        elif isinstance(b, Para):
            cls = f' class="{b.css}"' if b.css else ""
            parts.append(f"<p{cls}>{_inline_html(b.text)}</p>")
        elif isinstance(b, Bullets):
            cls = f' class="{b.css}"' if b.css else ""
            parts.append(f"<ul{cls}>" + "".join(f"<li>{_inline_html(i)}</li>" for i in b.items) + "</ul>")
        elif isinstance(b, Table):
            head = "".join(f"<th>{_inline_html(c)}</th>" for c in b.columns)
            body = "".join("<tr>" + "".join(f"<td>{_inline_html(x)}</td>" for x in row) + "</tr>"
                           for row in b.rows)
            parts.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
        elif isinstance(b, Image):
            data = base64.b64encode(b.fig.png).decode("ascii")
            parts.append(f'<figure><img alt="{html.escape(b.fig.title)}" '
                         f'src="data:image/png;base64,{data}"></figure>')
    parts += ["</body>", "</html>"]
    return "\n".join(parts) + "\n"


def render_markdown(stats: ReportStats, figures: list[FigureOut], *, generated: str = "",
                    figure_dir: str = "figures") -> str:
    """``report.md``: the report with figures linked from ``figure_dir``."""
    return to_markdown(layout(stats, figures, generated=generated), figure_dir)


def render_html(stats: ReportStats, figures: list[FigureOut], *, generated: str = "") -> str:
    """``report.html``: the same report, one self-contained file."""
    return to_html(layout(stats, figures, generated=generated),
                   f"Paired significance report: {stats.grid or '(all)'}")
