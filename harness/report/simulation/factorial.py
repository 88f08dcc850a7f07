"""Simulated 2 x 2 factorial studies through the report's own decision functions (DESIGN section 12).

Each study is one cell: per seed s and combination (a, b) of two binary factors, the final NLL is
``base_s + mu_ab + noise`` (noise ~ N(0, sd) per run, independent; ``base_s`` cancels in every contrast).
The contrasts are the weights of :data:`harness.report.stats.factorial.SPECS` applied per seed, tested with
:func:`harness.report.stats.decisions.two_sided_p`, Holm over the cell's factorial family (the four simple
effects and the interaction, :func:`harness.report.stats.decisions.holm`) and the numerical floor, exactly as
:func:`harness.report.stats.factorial.factorial_cells` does for one study, vectorised over the studies.

    python -m harness.report.simulation.factorial      # the table quoted in reports/LOG.md
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import numpy as np

from harness.report.simulation.rules import binomial_se
from harness.report.stats import decisions as dec
from harness.report.stats.factorial import INTERACTION, MAIN, SPECS
from harness.report.stats.floors import beyond_floor, verdict_mean
from harness.report.stats.power import power_at

NOISE_SD = 0.01  # nats/token per run
MAIN_A, MAIN_B = -0.08, -0.03  # planted main effects (nats/token): the first study's offset and decoupling
WEIGHTS = np.array([s.weights for s in SPECS])  # [7, 4] over (y_00, y_10, y_01, y_11)
FAMILY = np.array([s.kind != MAIN for s in SPECS])  # the factorial family of one cell
I_ROW = next(i for i, s in enumerate(SPECS) if s.kind == INTERACTION)


@dataclass(frozen=True, slots=True)
class InteractionRates:
    """Rates over ``studies`` simulated studies (binomial SEs beside them).

    ``raw``: the interaction's two-sided test rejects at alpha; ``established``: the interaction is
    established after Holm over the cell's family of five and the floor (what the report says);
    ``predicted``: the noncentral-t power of the raw test (:func:`harness.report.stats.power.power_at`).
    """

    studies: int
    interaction: float
    raw: float
    raw_se: float
    established: float
    established_se: float
    predicted: float


def cell_means(interaction: float) -> np.ndarray:
    """``[4]`` mean NLL offsets of (y_00, y_10, y_01, y_11): main effects MAIN_A, MAIN_B and the given
    interaction (nats/token) added to y_11."""
    return np.array([0.0, MAIN_A, MAIN_B, MAIN_A + MAIN_B + interaction])


def interaction_rates(
    n: int,
    studies: int,
    rng: np.random.Generator,
    *,
    interaction: float = 0.0,
    sd: float = NOISE_SD,
    alpha: float = 0.05,
) -> InteractionRates:
    """Rates of the interaction's verdict over ``studies`` studies of ``n`` seeds (see the class)."""
    y = (
        rng.normal(0.0, 1.0, size=(studies, n, 1))
        + cell_means(interaction)
        + rng.normal(0.0, sd, (studies, n, 4))
    )
    d = np.einsum("snc,kc->skn", y, WEIGHTS)  # [studies, 7, n] per-seed contrasts
    p, _ = dec.two_sided_p(d)
    holm = np.full(p.shape, np.nan)
    holm[:, FAMILY] = dec.holm(p[:, FAMILY])
    established = (holm < alpha) & beyond_floor(verdict_mean(d))
    raw = float((p[:, I_ROW] < alpha).mean())
    est = float(established[:, I_ROW].mean())
    predicted = (
        float(power_at(interaction, 2.0 * sd, n, alpha, "two-sided")) if interaction else alpha
    )  # Var I = 4 sd^2
    return InteractionRates(
        studies, interaction, raw, binomial_se(raw, studies), est, binomial_se(est, studies), predicted
    )


def table(studies: int = 20_000, seed: int = 20261203, alpha: float = 0.05) -> list[str]:
    """The interaction's rejection rates under a null and planted interactions, n = 5, 10, 20."""
    rng = np.random.default_rng(seed)
    lines = [
        f"2 x 2 factorial, main effects {MAIN_A:+g} and {MAIN_B:+g} nats/token, run noise sd {NOISE_SD:g}, "
        f"{studies} studies per row, alpha {alpha:g}",
        "interaction  n   raw rate (SE)      established after Holm (SE)   noncentral-t power",
    ]
    for inter in (0.0, 0.02, 0.04):
        for n in (5, 10, 20):
            r = interaction_rates(n, studies, rng, interaction=inter, alpha=alpha)
            lines.append(
                f"{inter:+.3f}      {n:<3} {r.raw:.4f} ({r.raw_se:.4f})    {r.established:.4f} "
                f"({r.established_se:.4f})              {r.predicted:.4f}"
            )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m harness.report.simulation.factorial", description=__doc__
    )
    parser.add_argument("--studies", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=20261203)
    args = parser.parse_args(argv)
    print("\n".join(table(args.studies, args.seed)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
