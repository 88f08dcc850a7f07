"""Write the paired significance report of a grid (stats.csv, report.md, report.html, figures).

Pairs each variant's finished runs with the parent's by seed (same size, budget and
protocol hash), then reports per size and budget: paired t-test with 95 % interval,
exact Wilcoxon and sign tests, wins k/n, Cohen's d_z, perplexity change, Holm-adjusted
p-values, TOST equivalence of each control vs the parent, a verdict per control, the
A/A check, and a mixed model nll ~ variant + (1 | seed) as a cross-check (DESIGN 6).
A control that cannot differ from the parent (two of its routes stayed identical, none of
the parameters it adds ever moved, or it equals the parent at every seed) gets the verdict
`invalid: degenerate`, whatever its statistics say (DESIGN 3).
The A/A check states its max |dNLL| (the protocol's numerical noise floor) and warns when
it reaches half the treatment's gain; control verdicts are marked when the treatment's
own gain is not significant.
Failed, diverged and unfinished runs are listed, never averaged in.

Files written to OUT (default reports/out/GRID/): stats.csv, pairs.csv, report.md,
report.html (self-contained) and figures/*.png.

example:
  harness report --grid rd_controls_small
  harness report --grid rd_controls_small --results /shared/results --out /tmp/report --allow-partial
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from reports.build import BuildResult


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``harness report``."""
    parser.add_argument("--grid", required=True, metavar="NAME", help="grid name (the `name` in its TOML)")
    parser.add_argument("--out", type=Path, default=None, metavar="DIR",
                        help="output folder (default: reports/out/NAME/)")
    parser.add_argument("--allow-partial", action="store_true",
                        help="leave out (with a warning) pairs whose protocol hashes differ and "
                        "duplicated runs, instead of stopping with an error")
    parser.add_argument("--alpha", type=float, default=0.05,
                        help="two-sided significance level for tests and verdicts (default 0.05)")
    parser.add_argument("--no-figures", action="store_true", help="skip the PNG figures (tables only)")


def headline_lines(result: BuildResult) -> list[str]:
    """Plain-text headline (treatment vs parent per size/budget), control verdicts (with the
    caveat when the treatment's own gain is not significant, the reason of a degenerate one)
    and each A/A status with its summary."""
    from reports.degeneracy import DEGENERATE
    from reports.render import fmt_ci, fmt_nats, fmt_p, fmt_pct

    stats = result.stats
    lines = [f"{'size':<8} {'budget':>12} {'wins':>6} {'mean dNLL':>10} {'95% CI':>20} {'ppl':>9} {'Holm p':>9}"]
    for c in stats.headline():
        lines.append(f"{c.size:<8} {c.budget_tokens:>12} {c.test.wins:>3}/{c.test.n:<2} "
                     f"{fmt_nats(c.test.mean_diff):>10} {fmt_ci(c.test.ci_low, c.test.ci_high):>20} "
                     f"{fmt_pct(c.test.ppl_change):>9} {fmt_p(c.holm_p):>9}")
    for w in stats.gain_warnings():
        lines.append(f"warning: {w}")
    for c in stats.verdicts():
        more = "" if math.isnan(c.more_seeds) else f" (~{int(c.more_seeds)} more seed(s): {c.deciding_test})"
        extra = f"; NOTE: {c.caveat}" if c.caveat else ""
        if c.verdict == DEGENERATE:  # the reason is the whole story
            extra = f": {c.note}"
        lines.append(f"  {c.first:<16} {c.size:<8} {c.budget_tokens:>12}  {c.verdict}{more}{extra}")
    for a in stats.aa_checks:
        lines.append(f"  A/A {a.variant} {a.size} {a.budget_tokens}: {a.status} ({a.summary})")
    return lines


def main(args: argparse.Namespace) -> int:
    """Build the report of ``args.grid`` from the store in ``args.results``; prints paths and headline."""
    from db.store import Store  # imported here: the report core works on frames without db
    from reports.build import build_report, load_frames

    if not 0 < args.alpha < 1:
        raise ValueError(f"--alpha must be in (0, 1), got {args.alpha}")
    out = args.out if args.out is not None else Path("reports") / "out" / args.grid
    frames = load_frames(Store(args.results), args.grid)
    result = build_report(frames, out, grid=args.grid, allow_partial=args.allow_partial,
                          alpha=args.alpha, figures=not args.no_figures)
    for w in result.stats.warnings:
        print(f"warning: {w}")
    for p in result.paths:
        print(p)
    print()
    print("\n".join(headline_lines(result)))
    return 0
