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
``harness.analyze(RESULTS, grid=...)`` (the report's statistics), from :mod:`reports.api`.
"""

__version__ = "0.1.0"

API = ("results", "analyze")


def __getattr__(name: str):
    """``harness.results`` / ``harness.analyze``, imported on first use: deferred on purpose, so
    ``import harness`` (and ``harness --help``) loads no polars, DuckDB, numpy or statistics."""
    if name in API:
        from reports import api

        return getattr(api, name)
    raise AttributeError(f"module 'harness' has no attribute {name!r}")
