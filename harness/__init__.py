"""RD-AttnRes ablation and controls harness.

The stages of one run, and of a study, each a package; imports point one way
(``commands`` -> ``scheduling`` -> ``train`` -> ``models`` / ``data``; nothing imports
``commands``):

* :mod:`harness.data` -- corpus text -> split -> tokenizer -> token files -> batches;
* :mod:`harness.models` -- the decoder family and depth routing (plain PyTorch);
* :mod:`harness.train` -- one run: build -> fit (Lightning) -> result file;
* :mod:`harness.scheduling` -- grids, the Optuna-backed run queue, leases, the worker loop;
* :mod:`harness.bench` -- routing and harness overhead (``harness bench``);
* :mod:`harness.commands` -- one module per ``harness`` subcommand; :mod:`harness.cli` the entry point.

Top-level modules: :mod:`harness.design.config` (size presets, training settings, :class:`RunConfig`),
:mod:`harness.common.terms` (roles, statuses, run ids, config differences), :mod:`harness.common.files`
(atomic file replacement), :mod:`harness.design.analysis_plan` (a grid's ``[analysis]`` table, read by the
grid parser and the report) and :mod:`harness.train.fencing` (who may still write a run's checkpoints
and result: owner, epoch, :class:`~harness.train.fencing.LeaseLost`). Siblings: ``controls`` (control-variant specs), ``db`` (DuckDB
store), ``reports`` (statistics and the report).

The notebook API: ``harness.results(RESULTS, grid=...)`` (a grid's tables as polars frames) and
``harness.analyze(RESULTS, grid=...)`` (the report's statistics), from :mod:`harness.report.api`.
"""

import os
import signal
import sys
import threading

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


# A Ctrl-C in the command's first second (importing torch, Optuna, Lightning) would otherwise be a
# KeyboardInterrupt traceback from the import machinery; the command then installs its own handling.
if _started_as_command() and threading.current_thread() is threading.main_thread():
    signal.signal(signal.SIGINT, _interrupted_while_loading)

API = ("results", "analyze")


def __getattr__(name: str):
    """``harness.results`` / ``harness.analyze``, imported on first use: deferred on purpose, so
    ``import harness`` (and ``harness --help``) loads no polars, DuckDB, numpy or statistics."""
    if name in API:
        from harness.report import api

        return getattr(api, name)
    raise AttributeError(f"module 'harness' has no attribute {name!r}")
