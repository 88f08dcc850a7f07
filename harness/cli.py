"""The ``harness`` command (DESIGN section 1.1).

Each subcommand lives in its own module under :mod:`harness.commands`; the module's
docstring is the subcommand's help text (with an example), ``add_arguments(parser)``
declares its options and ``main(args) -> int`` runs it. Every subcommand gets
``--results DIR`` (default ``$HARNESS_RESULTS`` or ``./results``) and ``--verbose``
(internal retries and deferred ingests, :mod:`harness.common.console`).

Start-up stays light: ``harness CMD ...`` imports CMD's module only (the others are listed by
the first line of their docstring, read from the source: :func:`summary`), and a command module
imports torch, Lightning, Optuna, DuckDB, polars or submitit only inside its ``main``
(``harness --help`` and ``harness CMD --help`` load none of them; tests/commands/test_cli_startup.py checks).
"""

from __future__ import annotations

import argparse
import errno
import importlib
import importlib.util
import math
import os
import re
import signal
import sys
from collections.abc import Collection
from pathlib import Path

from harness.common.console import setup_logging
from harness.common.files import default_results, fmt_bytes, free_bytes, full_disk
from harness.common.interrupt import (
    InterruptedAfterWrite,
    InterruptedBeforeWrite,
    InterruptedIncomplete,
    prompt_exit,
)

# name -> module under harness.commands, in the order of the research loop.
COMMANDS = {
    "prepare": "prepare",
    "run": "run",
    "tune": "tune",
    "queue": "queue",
    "work": "work",
    "launch": "launch",
    "status": "status",
    "sql": "sql",
    "export": "export",
    "archive": "archive",
    "import": "restore",
    "retrain": "retrain",
    "report": "report",
    "plan": "plan",
    "topup": "topup",
    "followup": "followup",
    "bench": "bench",
    "sizes": "sizes",
    "migrate": "migrate",
}

# Commands that only read results: a mistyped --results must not create an empty store.
READS_RESULTS = ("sql", "export", "report", "topup", "migrate", "followup", "archive")

EPILOG = """\
the research loop, one command each:
  harness tune --variant block_attnres --size small --budget-tokens 98304 --trials 12 \
      --grid ablations/rd_controls_small.toml --name parent_small   # tune, then freeze (--show --write-grid)
  harness prepare ablations/rd_paper.toml          # stream a corpus into token shards sized for the grid
  harness queue ablations/rd_controls_small.toml   # expand a grid into runs, enqueue them
  harness work                                     # one or many workers train queued runs
  harness launch --executor slurm --workers 8      # ... or a SLURM job array of workers (submitit)
  harness sql "select variant, seed, val_nll from final order by 1, 2"
  harness export --grid rd_controls_small --format parquet --out final.parquet
  harness report --grid rd_controls_small          # paired significance report
  harness archive --grid rd_controls_small --out g.tar.gz   # one file: results + queue, to share
  harness import g.tar.gz --results other/          # ... restored elsewhere: report, topup, work
  harness retrain g.tar.gz --pairs 4 --results aa/  # re-train 4 pairs here: same, perturbed, redrawn or biased?
  harness plan ablations/rd_controls_small.toml --pilot rd_controls_small   # MDE, seeds needed, cost
  harness topup --grid rd_controls_small           # add seeds up to the next look where still undecided

see `harness COMMAND --help` for each command's options and an example.
"""


def summary(name: str) -> str:
    """The first line of command ``name``'s module docstring, read from its source without importing it
    (so ``harness --help`` loads no command's dependencies)."""
    spec = importlib.util.find_spec(f"harness.commands.{COMMANDS[name]}")
    with open(spec.origin, encoding="utf-8") as f:
        match = re.match(r'\s*"""\s*(.*)', f.read(4096))
    return match.group(1).rstrip('"').strip() if match else name


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line (the harness's rule for bad input), exit 2."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def build_parser(commands: Collection[str] | None = None) -> argparse.ArgumentParser:
    """The argument parser. ``commands``: the subcommands whose modules are imported and whose
    options are declared (default: all); the others are listed by name and summary only, so
    ``harness CMD ...`` imports CMD's module alone (tests/commands/test_cli_startup.py)."""
    parser = _Parser(
        prog="harness",
        description="Ablation and controls harness for depth-routing Transformers "
        "(RD-AttnRes vs Block AttnRes and its controls).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, module_name in COMMANDS.items():
        if commands is not None and name not in commands:
            sub.add_parser(name, help=summary(name))
            continue
        module = importlib.import_module(f"harness.commands.{module_name}")
        doc = (module.__doc__ or "").strip()
        p = sub.add_parser(
            name,
            help=doc.splitlines()[0] if doc else name,
            description=doc,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        p.add_argument(
            "--results",
            type=Path,
            default=default_results(),
            metavar="DIR",
            help="results folder: harness.duckdb, the default queue journal, run files, "
            "checkpoints (default: $HARNESS_RESULTS or ./results)",
        )
        p.add_argument(
            "--verbose",
            action="store_true",
            help="also print internal retries that usually succeed (a DuckDB ingest deferred while "
            "another process holds the database, a queue storage briefly unreachable)",
        )
        module.add_arguments(p)
        p.set_defaults(_main=module.main)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``harness`` console script; returns the exit status.

    Called as the process's entry (``argv`` None: the console script, ``python -m harness``), a
    Ctrl-C after the command ends (in the interpreter's shutdown: torch's and DuckDB's exit
    callbacks) ends the process at once with 130 instead of a traceback from an exit callback.
    """
    try:
        return _run(sys.argv[1:] if argv is None else list(argv))
    finally:
        if argv is None:
            signal.signal(signal.SIGINT, _exit_interrupted)


def _exit_interrupted(signum, frame) -> None:
    """SIGINT during the interpreter's shutdown: the command's output is flushed; skip the rest."""
    os._exit(130)


def _run(argv: list[str]) -> int:
    """:func:`main` of a given argument list."""
    # the top level takes no option but --help, so the first other word names the command
    command = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser([command] if command in COMMANDS else [])
    args = parser.parse_args(argv)
    if not getattr(args, "_main", None):
        parser.print_help()
        return 2
    setup_logging(args.verbose)
    try:
        if args.command in READS_RESULTS and not args.results.exists():
            raise FileNotFoundError(
                f"results folder {str(args.results)!r} does not exist (set --results DIR or $HARNESS_RESULTS)"
            )
        if args.results.exists() and not args.results.is_dir():
            raise NotADirectoryError(
                f"--results {str(args.results)!r} is a file, not a folder "
                "(set --results DIR or $HARNESS_RESULTS)"
            )
        check_finite(args)
        with prompt_exit(130) as ctrl_c:  # Ctrl-C ends every command within GRACE_S, wherever it lands
            try:
                status = int(args._main(args) or 0)
            except Exception:
                # a library that turned the Ctrl-C into its own error (DuckDB: "Query interrupted")
                if ctrl_c.seen:
                    raise KeyboardInterrupt from None
                raise
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit
        return status
    except KeyboardInterrupt as exc:
        print(
            f"interrupted ({exc})"
            if isinstance(exc, (InterruptedAfterWrite, InterruptedBeforeWrite, InterruptedIncomplete))
            else "interrupted",
            file=sys.stderr,
        )
        return 130
    except BrokenPipeError:
        # `harness status | head`: the reader is gone; end quietly, as a shell tool killed by SIGPIPE
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    except (ValueError, FileNotFoundError, NotADirectoryError) as exc:
        # Bad input: one clear line, no traceback.
        print(
            f"harness {args.command}: error: {_os_error(exc, args.results) if isinstance(exc, OSError) else exc}",
            file=sys.stderr,
        )
        return 2
    except ConnectionError as exc:
        # e.g. harness.scheduling.queue.storage.StorageUnavailable after its retries: one line, no traceback
        print(f"harness {args.command}: error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        # the environment (a read-only or full disk, a locked database, a file where a folder
        # should be): one line naming the file, no traceback
        print(f"harness {args.command}: error: {_os_error(exc, args.results)}", file=sys.stderr)
        return 1
    except Exception as exc:
        if not type(exc).__module__.startswith("_duckdb"):
            raise
        # a database DuckDB cannot use (its own words, first line), e.g. a disk that filled mid-query
        full = full_disk(args.results)
        print(
            f"harness {args.command}: error: {full + '; ' if full else ''}results database: "
            f"{str(exc).strip().splitlines()[0]}",
            file=sys.stderr,
        )
        return 1


def check_finite(args: argparse.Namespace) -> None:
    """Refuse NaN and infinities in every float option (``--lease-s nan`` would never
    reclaim: ``age > nan`` is never true).

    Raises:
        ValueError: naming the option and its value.
    """
    for name, value in vars(args).items():
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"--{name.replace('_', '-')} {value}: must be a finite number")


def _os_error(exc: OSError, results: Path | str = "the results folder") -> str:
    """One line for an ``OSError``: its own message, or ``strerror: file`` for a bare system error; a full
    disk names the file (else ``results``) and its free space."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT) and exc.strerror:  # the folder and its free space
        where = exc.filename or results
        return (
            f"disk full: {where} ({exc.strerror}, {fmt_bytes(free_bytes(where))} free); free space there, "
            "or point --results elsewhere"
        )
    if exc.strerror and exc.filename:
        return f"{exc.strerror}: {exc.filename}" + (f" -> {exc.filename2}" if exc.filename2 else "")
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
