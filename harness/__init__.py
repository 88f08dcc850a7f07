"""RD-AttnRes ablation and controls harness.

The stages of a run (corpus -> data -> model -> training -> result) and of a study (grid -> queue ->
workers -> report), each a package; imports point one way, down these layers (highest first; the
packages of one layer never import each other; docs/layout.md):

1. :mod:`harness.commands` -- one module per ``harness`` subcommand;
2. :mod:`harness.scheduling` -- grids, the run queue, workers, launching, tuning;
   :mod:`harness.bench` -- routing and harness overhead (``harness bench``);
   :mod:`harness.report` -- the paired significance report and the notebook API;
3. :mod:`harness.train` -- one run: build -> fit (Lightning) -> result file;
4. :mod:`harness.design` -- what a study is, fixed before its runs (:class:`~harness.design.config.RunConfig`);
5. :mod:`harness.models` -- the decoder family and depth routing (plain PyTorch);
   :mod:`harness.data` -- a corpus's documents -> tokenizer -> token shards -> batches;
   :mod:`harness.store` -- the results store (result files, DuckDB, archives);
6. :mod:`harness.corpus` -- what a corpus is and where, before any token;
7. :mod:`harness.common` -- what every stage shares (files, terminal, Ctrl-C, terms, faults).

At the top only the entry points: :mod:`harness.cli` (the ``harness`` command, mapping subcommands to
:mod:`harness.commands`) and :mod:`harness.__main__` (``python -m harness``).

The notebook API: ``harness.results(RESULTS, grid=...)`` (a grid's tables as polars frames) and
``harness.analyze(RESULTS, grid=...)`` (the report's statistics), from :mod:`harness.report.api`.
"""

# The first lines of the package: the start-up handler goes in before anything else is imported (a Ctrl-C
# in the command's first second, importing torch, Optuna, Lightning, would otherwise be a KeyboardInterrupt
# traceback from the import machinery; the command then installs its own handling). os and sys are loaded
# with the interpreter, and _signal is the built-in module under signal (which first imports enum).
import _signal
import os
import sys

__version__ = "0.1.0"


def _interrupted_while_loading(signum, frame) -> None:
    """Ctrl-C before the command's own handling starts (:func:`harness.cli.main` loading its modules,
    parsing its options): nothing is written yet, so end at once, as a handled Ctrl-C does."""
    try:
        os.write(2, b"interrupted\n")
    finally:
        os._exit(130)


def _started_as_command() -> bool:
    """Whether this process is the ``harness`` command (its console script, or ``python -m harness``),
    not a library user (a notebook, a test) nor another module run with ``-m`` (a rank child)."""
    argv = getattr(sys, "orig_argv", None) or []
    as_module = any(a == "-m" and b == "harness" for a, b in zip(argv, argv[1:], strict=False))
    return as_module or os.path.basename(getattr(sys, "argv", [""])[0] or "") == "harness"


if _started_as_command():
    try:
        _signal.signal(_signal.SIGINT, _interrupted_while_loading)
    except ValueError:  # imported first in another thread than the main one: its handlers are not ours to set
        pass

API = ("results", "analyze")


def __getattr__(name: str):
    """``harness.results`` / ``harness.analyze``, imported on first use: deferred on purpose, so
    ``import harness`` (and ``harness --help``) loads no polars, DuckDB, numpy or statistics."""
    if name in API:
        from harness.report import api

        return getattr(api, name)
    raise AttributeError(f"module 'harness' has no attribute {name!r}")
