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
* the re-train check (:mod:`harness.report.simulation.retrain`, DESIGN section 13): each verdict's
  rate for re-trained runs that are new draws or nudges, with and without a bias;
* the Provenance section's tests (:mod:`harness.report.simulation.provenance`, DESIGN section 13): the
  agreement test's false alarms and power at grid splits, its floor, its MDE, the balance test, and the
  verdicts re-decided within the largest class.

    python -m harness.report.simulation.studies                          # every table (about 15 minutes on 2 cores)
    python -m harness.report.simulation.studies --tables rules --studies 4000 --seed 1
    python -m harness.report.simulation.studies --tables edges --studies 100000
    python -m harness.report.simulation.studies --tables retrain --studies 4000
    python -m harness.report.simulation.studies --tables provenance --studies 2000   # about 20 minutes
    python -m harness.report.simulation.studies --tables provenance,retrain --studies 2000 --json rows.json

Rates carry their binomial standard error ``sqrt(r (1 - r) / studies)``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from harness.report.simulation import provenance, retrain
from harness.report.simulation.edges import (
    edge_table,
)
from harness.report.simulation.rules import (
    Row,
    table,
)

TABLES = {
    "rules": (table, 20261201),
    "edges": (edge_table, 20261227),
    "retrain": (retrain.table, 20261206),
    "provenance": (provenance.table, 20261206),
}  # name: (table, default seed)
ROW_TABLES = ("retrain", "provenance")  # the tables that also keep their rates as rows (--json)


def _tables(value: str) -> list[str]:
    """``--tables``: ``all`` or names from :data:`TABLES`, comma-separated (argparse type)."""
    names = list(TABLES) if value == "all" else [v.strip() for v in value.split(",") if v.strip()]
    bad = [v for v in names if v not in TABLES]
    if bad or not names:
        raise argparse.ArgumentTypeError(
            f"{value!r}: allowed are all or a comma-separated list of {', '.join(TABLES)}"
        )
    return list(dict.fromkeys(names))


def main(argv: list[str] | None = None) -> int:
    """``python -m harness.report.simulation.studies [--tables all|NAME[,NAME...]] [--studies N] [--seed S]
    [--json FILE]``: print the tables (each at its own default seed unless ``--seed`` is given); ``--json``
    also writes every row of the chosen tables that keep rows (:data:`ROW_TABLES`) as a list of objects with
    ``table``, ``setting``, ``truth``, ``says``, ``rate`` and ``studies``
    (:class:`harness.report.simulation.rules.Row`), the file written whole only once every table is done."""
    parser = argparse.ArgumentParser(
        prog="python -m harness.report.simulation.studies", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--tables",
        type=_tables,
        default="all",
        help=f"all (default) or a comma-separated list of {', '.join(TABLES)}",
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
    parser.add_argument(
        "--json",
        type=Path,
        default=None,
        metavar="FILE",
        help=f"also write every row as JSON (tables {', '.join(ROW_TABLES)} only)",
    )
    args = parser.parse_args(argv)
    if args.studies < 100:
        parser.error(f"--studies {args.studies}: use at least 100")
    chosen = args.tables
    if args.json is not None:
        without = [t for t in chosen if t not in ROW_TABLES]
        if without:
            parser.error(
                f"--json: table(s) {', '.join(without)} keep no rows; allowed: {', '.join(ROW_TABLES)}"
            )
        if not args.json.parent.is_dir():
            parser.error(f"--json {args.json}: no folder {args.json.parent}")
    lines: list[str] = []
    rows: list[Row] = []
    for name in chosen:
        make, seed = TABLES[name]
        seed = seed if args.seed is None else args.seed
        made = make(args.studies, seed, rows=rows) if name in ROW_TABLES else make(args.studies, seed)
        lines += ([""] if lines else []) + made
    print("\n".join(lines))
    if args.json is not None:
        text = json.dumps([dataclasses.asdict(r) for r in rows], indent=1) + "\n"
        tmp = args.json.with_name(args.json.name + ".tmp")
        tmp.write_text(text)
        tmp.replace(args.json)
    return 0


__all__ = [
    "ROW_TABLES",
    "TABLES",
    "main",
]

if __name__ == "__main__":
    raise SystemExit(main())
