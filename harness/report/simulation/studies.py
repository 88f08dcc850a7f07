"""Simulated studies through the report's own decision functions (DESIGN sections 6 and 8).

Each simulated study is one grid: per seed, every variant's final NLL is
``base_s + effect_v + noise_vs`` (noise ~ N(0, sd) per run, independent across runs;
``base_s`` cancels in every paired difference and is left out). The parent's noise is
shared by all its comparisons, as in a real grid. The studies go through exactly the
functions :mod:`harness.report.stats.analysis` uses, vectorised over the studies:
:func:`harness.report.stats.decisions.headline_p`, :func:`~harness.report.stats.decisions.absence_p`,
:func:`~harness.report.stats.decisions.decide_headline`, :func:`~harness.report.stats.decisions.decide_absence`,
:func:`~harness.report.stats.decisions.reproduction_contrast`, :func:`~harness.report.stats.decisions.two_sided_p`,
:func:`~harness.report.stats.decisions.decide_controls` (one family over the grid),
:func:`~harness.report.stats.decisions.holm` (the A/A offset tests over the cells) and
:func:`harness.report.stats.divergence.impute` (a diverged seed counts as a loss).

Four tables, each with its own default seed so the numbers quoted in reports/LOG.md reproduce
(this module is the command):

* the decision rules (:mod:`harness.report.simulation.rules`): the headline's false-positive rate, each control verdict's
  rate under a planted gain, and sequential looks (DESIGN section 8), read at the plan's looks
  (default 3, 5, 10 seeds) and topped up whenever the cell is open
  (:func:`harness.report.stats.topup.cell_open`), through the report's look functions
  (:func:`harness.report.stats.looks.at_looks`, :func:`~harness.report.stats.looks.sequential_p`). A study's
  decision at look k depends only on its first n_k seeds, so every study is drawn with n_K seeds
  and read at each look in turn; a study that closed at look k keeps its verdicts from look k;
* the edge cases (:mod:`harness.report.simulation.edges`, the rules statistics v3 added; docs/statistics.md): divergence
  where the treatment would lose, 'gain absent' at its boundary, one Holm family over the grid's
  controls, the A/A check over cells, control error rates conditional on the gate, float rounding;
* the cross-machine A/A check (:mod:`harness.report.simulation.retrain`, DESIGN section 13): each verdict's
  rate for re-trained runs that are new draws or nudges, with and without a bias;
* the Provenance section's tests (:mod:`harness.report.simulation.provenance`, DESIGN section 13): the
  agreement test's false alarms and power at grid splits, its floor, its MDE, the balance test, and the
  verdicts re-decided within the largest class.

    python -m harness.report.simulation.studies                          # every table (about 15 minutes on 2 cores)
    python -m harness.report.simulation.studies --tables rules --studies 4000 --seed 1
    python -m harness.report.simulation.studies --tables edges --studies 100000
    python -m harness.report.simulation.studies --tables retrain --studies 4000
    python -m harness.report.simulation.studies --tables provenance --studies 2000   # about 10 minutes

Rates carry their binomial standard error ``sqrt(r (1 - r) / studies)``.
"""

from __future__ import annotations

import argparse

from harness.report.simulation import provenance, retrain
from harness.report.simulation.edges import (
    edge_table,
)
from harness.report.simulation.rules import (
    table,
)

TABLES = {
    "rules": (table, 20261201),
    "edges": (edge_table, 20261227),
    "retrain": (retrain.table, 20261206),
    "provenance": (provenance.table, 20261206),
}  # name: (table, default seed)


def main(argv: list[str] | None = None) -> int:
    """``python -m harness.report.simulation.studies [--tables all|rules|edges|retrain|provenance] [--studies N] [--seed S]``: print the tables
    (each at its own default seed unless ``--seed`` is given)."""
    parser = argparse.ArgumentParser(
        prog="python -m harness.report.simulation.studies", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--tables", choices=["all", *TABLES], default="all", help="which tables to print (default all)"
    )
    parser.add_argument(
        "--studies", type=int, default=20_000, help="simulated studies per row (default 20000)"
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=None,
        help="random seed (default: 20261201 rules, 20261227 edges, 20261206 retrain and provenance)",
    )
    args = parser.parse_args(argv)
    if args.studies < 100:
        parser.error(f"--studies {args.studies}: use at least 100")
    chosen = list(TABLES) if args.tables == "all" else [args.tables]
    lines: list[str] = []
    for name in chosen:
        make, seed = TABLES[name]
        lines += ([""] if lines else []) + make(args.studies, seed if args.seed is None else args.seed)
    print("\n".join(lines))
    return 0


__all__ = [
    "TABLES",
    "main",
]

if __name__ == "__main__":
    raise SystemExit(main())
