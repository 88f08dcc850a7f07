"""The report's Methods section (DESIGN section 6): how pairing, each test, the families, the
worst-case imputation of divergence, power and the looks work, with the plan's numbers filled in.
"""

from __future__ import annotations

from harness.report.render.blocks import Block, Bullets, Heading
from harness.report.render.decision_sections import looks_text
from harness.report.stats.decisions import CONDITIONAL_RATES
from harness.report.stats.floors import FLOOR_NATS
from harness.report.stats.paired_tests import EXACT_MAX_N
from harness.report.stats.results import ReportStats


def methods_blocks(stats: ReportStats) -> list[Block]:
    """The Methods section (DESIGN section 6), with the plan's alpha, rho, power and max_seeds."""
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
            + ((f"Looks (DESIGN section 8): {looks_text(p)}",) if p.looks else ())
        ),
    ]
