"""Simulated studies through the report's own decision functions (DESIGN section 6).

Each simulated study is one grid: per seed, every variant's final NLL is
``base_s + effect_v + noise_vs`` (noise ~ N(0, sd) per run, independent across runs;
``base_s`` cancels in every paired difference and is left out). The parent's noise is
shared by all its comparisons, as in a real grid. The studies go through exactly the
functions :mod:`reports.stats` uses (:func:`reports.decisions.headline_p`,
:func:`~reports.decisions.decide_headline`, :func:`~reports.decisions.reproduction_contrast`,
:func:`~reports.decisions.two_sided_p`, :func:`~reports.decisions.decide_controls`),
vectorised over the studies.

    python -m reports.simulate            # the table quoted in reports/LOG.md
    python -m reports.simulate --studies 4000 --seed 1

Rates carry their binomial standard error ``sqrt(r (1 - r) / studies)``.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass

import numpy as np

from reports import decisions as dec

NOISE_SD = 0.003  # nats/token per run (reports/synthetic.py's default)
GAIN = -0.012  # planted treatment - parent gain, nats/token (4 noise SDs)
FRACTIONS = (0.0, 0.4, 1.0)  # share of the gain each simulated control reproduces
NS = (3, 5, 10)


def binomial_se(rate: float, studies: int) -> float:
    """Standard error of a rate estimated from ``studies`` independent studies."""
    return math.sqrt(max(rate * (1 - rate), 0.0) / studies)


def headline_false_positive_rate(n: int, studies: int, rng: np.random.Generator, *, alpha: float = 0.05,
                                 cells: int = 1, sd: float = NOISE_SD) -> float:
    """Share of null studies (no true gain anywhere) in which the gain is established in
    at least one of ``cells`` cells (Holm over the cells): the headline's family-wise
    false-positive rate."""
    parent = rng.normal(0.0, sd, size=(studies, cells, n))
    treatment = rng.normal(0.0, sd, size=(studies, cells, n))
    d = treatment - parent
    p, _ = dec.headline_p(d)
    _, established = dec.decide_headline(np.full(p.shape, n), d.mean(axis=-1), p, alpha)
    return float(established.any(axis=-1).mean())


@dataclass(frozen=True, slots=True)
class VerdictRates:
    """Rates over simulated studies of one n: the headline and each control's verdicts.

    ``verdicts[f]`` maps each verdict of :data:`reports.decisions.VERDICTS` to its rate for
    the control that reproduces a fraction ``f`` of the gain.
    """

    n: int
    studies: int
    gain: float
    established: float
    verdicts: dict[float, dict[str, float]]

    def wrong_definite(self, f: float, rho: float) -> float:
        """Rate of the definite verdict that is false for a control reproducing ``f``:
        ``reproduces gain`` when f < rho, ``does not reproduce gain`` when f > rho."""
        wrong = dec.REPRODUCES if f < rho else dec.DOES_NOT_REPRODUCE
        return self.verdicts[f][wrong]


def verdict_rates(n: int, studies: int, rng: np.random.Generator, *, gain: float = GAIN, sd: float = NOISE_SD,
                  fractions: tuple[float, ...] = FRACTIONS, alpha: float = 0.05, rho: float = 0.5) -> VerdictRates:
    """Simulate one cell with a parent, a treatment of true gain ``gain`` and one control per
    fraction in ``fractions`` (true control - parent = f x gain), ``n`` seeds each, and
    count every verdict."""
    k = len(fractions)
    parent = rng.normal(0.0, sd, size=(studies, 1, n))
    treatment = gain + rng.normal(0.0, sd, size=(studies, 1, n))
    controls = np.asarray(fractions)[:, None] * gain + rng.normal(0.0, sd, size=(studies, k, n))
    d_tp = (treatment - parent)[:, 0]  # [S, n]
    d_cp = controls - parent  # [S, k, n]
    p, _ = dec.headline_p(d_tp[:, None])
    _, established = dec.decide_headline(np.full(p.shape, n), d_tp.mean(axis=-1)[:, None], p, alpha)
    established = established[:, 0]
    e = dec.reproduction_contrast(d_cp, d_tp[:, None, :], rho)
    p_e, _ = dec.two_sided_p(e)
    _, codes = dec.decide_controls(established, np.zeros((studies, k), bool), np.full((studies, k), n),
                                   e.mean(axis=-1), p_e, alpha)
    verdicts = {f: {v: float((codes[:, j] == i).mean()) for i, v in enumerate(dec.VERDICTS)}
                for j, f in enumerate(fractions)}
    return VerdictRates(n, studies, gain, float(established.mean()), verdicts)


def table(studies: int = 20_000, seed: int = 20261201, alpha: float = 0.05, rho: float = 0.5) -> list[str]:
    """The simulation table as text lines (false-positive rates, then verdict rates)."""
    rng = np.random.default_rng(seed)
    se0 = binomial_se(alpha, studies)
    lines = [f"Headline false-positive rate under a true null (alpha {alpha:g}, {studies} studies per row, "
             f"binomial SE at alpha {se0:.4f}; DESIGN 6 asks alpha +- 0.02)",
             f"{'n':>3} {'cells':>5} {'rate':>7} {'SE':>7} {'expected':>9}"]
    for n in NS:
        for cells in (1, 3):
            r = headline_false_positive_rate(n, studies, rng, alpha=alpha, cells=cells)
            want = 1 - (1 - alpha / cells) ** cells  # Holm's first step is Bonferroni: P(min p < alpha / K)
            lines.append(f"{n:>3} {cells:>5} {r:>7.4f} {binomial_se(r, studies):>7.4f} {want:>9.4f}")
    lines += ["", f"Verdicts with a planted gain {GAIN:+.3f} nats/token (noise sd {NOISE_SD} per run), rho {rho:g}, "
                  f"alpha {alpha:g}, controls reproducing {', '.join(f'{f:.0%}' for f in FRACTIONS)} of it, "
                  f"{studies} studies per n",
              f"{'n':>3} {'f':>5} {'established':>11} {'does not':>9} {'reproduces':>10} {'inconcl.':>9} "
              f"{'not ass.':>9} {'wrong':>7}"]
    for n in NS:
        vr = verdict_rates(n, studies, rng, alpha=alpha, rho=rho)
        for f in FRACTIONS:
            v = vr.verdicts[f]
            lines.append(f"{n:>3} {f:>5.0%} {vr.established:>11.4f} {v[dec.DOES_NOT_REPRODUCE]:>9.4f} "
                         f"{v[dec.REPRODUCES]:>10.4f} {v[dec.INCONCLUSIVE]:>9.4f} {v[dec.NOT_ASSESSED]:>9.4f} "
                         f"{vr.wrong_definite(f, rho):>7.4f}")
    lines.append("wrong = the false definite verdict: 'reproduces gain' for f < rho, 'does not reproduce gain' "
                 "for f > rho")
    return lines


def main(argv: list[str] | None = None) -> int:
    """``python -m reports.simulate [--studies N] [--seed S]``: print :func:`table`."""
    parser = argparse.ArgumentParser(prog="python -m reports.simulate", description=__doc__.split("\n\n")[0])
    parser.add_argument("--studies", type=int, default=20_000, help="simulated studies per row (default 20000)")
    parser.add_argument("--seed", type=int, default=20261201, help="random seed (default 20261201)")
    args = parser.parse_args(argv)
    if args.studies < 100:
        parser.error(f"--studies {args.studies}: use at least 100")
    print("\n".join(table(args.studies, args.seed)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
