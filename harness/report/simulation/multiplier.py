"""The compute multiplier simulated (DESIGN section 14), through the report's own functions
(:func:`harness.report.stats.multiplier_math.tokens_to_reach`, :func:`~harness.report.stats.multiplier_math.summarize_logs`,
:func:`~harness.report.stats.multiplier_math.multiplier_verdict`).

A study: ``n`` seeds, budgets ``B_1 < ... < B_k`` (doublings from 307,200 tokens, the third study's), each a
complete run of the parent and of the treatment at each seed. Final NLL::

    nll(parent, s, B)    = f(B)     + u_s + e        f(B) = 3.0 + 1.1 (B / 307,200)^-0.35  (nats/token)
    nll(treatment, s, B) = f(m B)   + u_s + e'       m: the planted multiplier, equal FLOPs per token

``u_s ~ N(0, seed_sd)`` shared by the seed's runs, ``e, e' ~ N(0, noise_sd)`` per run: ``noise_sd = 0.030``, the
committed cpu_study's sd of paired differences (0.042 nats/token at mini, 614,400 tokens) over sqrt 2. The
multiplier is read at the second budget where k >= 3 (a budget with the parent's runs on both sides, where
m = 1 and m = 1.2 are both interpolated) and at the smallest where k = 2 (m = 1 there sits on the curve's
end: about half the seeds are censored below, which blocks ``yes``). Rates:

* **false positives**: m = 1 (no effect), the share of studies whose verdict is ``yes`` (one test per cell, so
  Holm changes nothing), against alpha;
* **coverage**: m = 1.2, the share of studies whose interval covers 1.2 (censored seeds at their bound, as in
  the report), against 1 - alpha; with the share of seeds censored and left out.

    python -m harness.report.simulation.multiplier [--reps 2000]
"""

from __future__ import annotations

import argparse
import math

import numpy as np

from harness.report.simulation.rules import binomial_se
from harness.report.stats.multiplier_math import multiplier_verdict, summarize_logs, tokens_to_reach

FIRST_BUDGET = 307_200
NOISE_SD = 0.042 / math.sqrt(2)  # reports/cpu_study: sd of the paired differences over sqrt 2
SEED_SD = 0.02


def curve(tokens) -> np.ndarray:
    """f(B), the expected parent NLL at ``tokens`` (module docstring), nats/token."""
    return 3.0 + 1.1 * (np.asarray(tokens, dtype=float) / FIRST_BUDGET) ** -0.35


def budget_read(n_budgets: int) -> int:
    """The index of the budget the multiplier is read at (module docstring)."""
    return 1 if n_budgets >= 3 else 0


def simulate(
    n_seeds: int,
    n_budgets: int,
    planted: float,
    *,
    reps: int,
    alpha: float = 0.05,
    min_multiplier: float = 1.05,
    noise_sd: float = NOISE_SD,
    rng_seed: int = 0,
) -> dict[str, float]:
    """``reps`` simulated studies; returns the rates of ``yes``, ``no``, interval coverage of ``planted``
    and the shares of censored and left-out seeds (fractions)."""
    rng = np.random.default_rng(rng_seed)
    budgets = FIRST_BUDGET * 2.0 ** np.arange(n_budgets)
    at = budget_read(n_budgets)
    yes = no = covered = censored = left = 0
    for _ in range(reps):
        u = rng.normal(0, SEED_SD, n_seeds)
        parent = curve(budgets)[None, :] + u[:, None] + rng.normal(0, noise_sd, (n_seeds, n_budgets))
        treat = curve(planted * budgets[at]) + u + rng.normal(0, noise_sd, n_seeds)
        logs, above, below = [], 0, 0
        for s in range(n_seeds):
            reach = tokens_to_reach(budgets, parent[s], treat[s])
            if reach.reason:
                left += 1
                continue
            logs.append(math.log(reach.tokens / budgets[at]))
            above += reach.censored == "above"
            below += reach.censored == "below"
        censored += above + below
        summ = summarize_logs(np.array(logs), alpha, min_multiplier)
        verdict = multiplier_verdict(summ.n, summ.p_exceeds, summ.p_below_min, above, below, alpha)
        yes += verdict == "yes"
        no += verdict == "no"
        covered += bool(summ.ci_low <= planted <= summ.ci_high)
    return {
        "yes": yes / reps,
        "no": no / reps,
        "coverage": covered / reps,
        "censored": censored / (reps * n_seeds),
        "left_out": left / (reps * n_seeds),
    }


def table(reps: int, seeds=(3, 5, 12), budgets=(2, 3, 4), alpha: float = 0.05) -> list[str]:
    """The Markdown table of DESIGN section 14: per (seeds, budgets), the false-positive rate under m = 1 and the
    coverage of m = 1.2, each with its binomial SE, and the censored and left-out shares."""
    lines = [
        "| seeds | budgets (read at) | false positives (m = 1) | coverage of 1.2 | 'no' at m = 1 | 'yes' at m = 1.2 "
        "| censored (1 / 1.2) | left out (1 / 1.2) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for n in seeds:
        for k in budgets:
            null = simulate(n, k, 1.0, reps=reps, alpha=alpha, rng_seed=1000 * n + k)
            alt = simulate(n, k, 1.2, reps=reps, alpha=alpha, rng_seed=1000 * n + k + 500)
            lines.append(
                f"| {n} | {k} (B{budget_read(k) + 1}) | {null['yes']:.3f} +- {binomial_se(null['yes'], reps):.3f} | "
                f"{alt['coverage']:.3f} +- {binomial_se(alt['coverage'], reps):.3f} | {null['no']:.3f} | {alt['yes']:.3f} | "
                f"{null['censored']:.2f} / {alt['censored']:.2f} | {null['left_out']:.3f} / {alt['left_out']:.3f} |"
            )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=2000, help="studies per row (default 2000)")
    args = parser.parse_args(argv)
    print("\n".join(table(args.reps)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = ["FIRST_BUDGET", "NOISE_SD", "budget_read", "curve", "simulate", "table"]
