"""The ``harness`` command (DESIGN section 1.1).

Each subcommand lives in its own module under :mod:`harness.commands`; the module's
docstring is the subcommand's help text (with an example), ``add_arguments(parser)``
declares its options and ``main(args) -> int`` runs it. Every subcommand gets
``--results DIR`` (default ``$HARNESS_RESULTS`` or ``./results``).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from harness.files import default_results

# name -> module under harness.commands, in the order of the research loop.
COMMANDS = {
    "run": "run",
    "queue": "queue",
    "work": "work",
    "launch": "launch",
    "status": "status",
    "sql": "sql",
    "report": "report",
    "plan": "plan",
    "topup": "topup",
    "bench": "bench",
    "sizes": "sizes",
}

# Commands that only read results: a mistyped --results must not create an empty store.
READS_RESULTS = ("sql", "report", "topup")

EPILOG = """\
the research loop, one command each:
  harness queue ablations/rd_controls_small.toml   # expand a grid into runs, enqueue them
  harness work                                     # one or many workers train queued runs
  harness launch --executor slurm --workers 8      # ... or a SLURM job array of workers (submitit)
  harness sql "select variant, seed, val_nll from final order by 1, 2"
  harness report --grid rd_controls_small          # paired significance report
  harness plan ablations/rd_controls_small.toml --pilot rd_controls_small   # MDE, seeds needed, cost
  harness topup --grid rd_controls_small           # add seeds up to the next look where still undecided

see `harness COMMAND --help` for each command's options and an example.
"""


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser (subcommand modules are imported here)."""
    parser = argparse.ArgumentParser(
        prog="harness",
        description="Ablation and controls harness for depth-routing Transformers "
        "(RD-AttnRes vs Block AttnRes and its controls).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module_name in COMMANDS.items():
        module = importlib.import_module(f"harness.commands.{module_name}")
        doc = (module.__doc__ or "").strip()
        summary = doc.splitlines()[0] if doc else name
        p = sub.add_parser(
            name, help=summary, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
        )
        p.add_argument(
            "--results", type=Path, default=default_results(), metavar="DIR",
            help="results folder: harness.duckdb, the default queue journal, run files, "
            "checkpoints (default: $HARNESS_RESULTS or ./results)",
        )
        module.add_arguments(p)
        p.set_defaults(_main=module.main)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``harness`` console script; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "_main", None):
        parser.print_help()
        return 2
    try:
        if args.command in READS_RESULTS and not args.results.exists():
            raise FileNotFoundError(f"results folder {str(args.results)!r} does not exist "
                                    "(set --results DIR or $HARNESS_RESULTS)")
        return int(args._main(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except (ValueError, FileNotFoundError) as exc:
        # Bad input: one clear line, no traceback.
        print(f"harness {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except ConnectionError as exc:
        # e.g. harness.scheduling.storage.StorageUnavailable after its retries: one line, no traceback
        print(f"harness {args.command}: error: {exc}", file=sys.stderr)
        return 1
