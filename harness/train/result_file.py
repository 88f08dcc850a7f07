"""A run's result file as the runner writes and reads it (DESIGN section 5): the ``runs`` row, a failed
attempt's file, and whether an earlier attempt already finished the run (:func:`finished_status`).
"""

from __future__ import annotations

import socket
from pathlib import Path

import torch

from harness.common.console import log
from harness.common.terms import ERROR_CHARS, FINISHED, config_diff, utc_now
from harness.design.config import RunConfig
from harness.store.runfile import read_result, result_path, run_end, write_result
from harness.train import fencing
from harness.train.environment import environment_record, run_numerics
from harness.train.execution import ExecutionSettings
from harness.train.fencing import Fence
from harness.train.protocol import code_version


class RunOutcome(str):
    """What :func:`harness.train.runner.train_run` returns: the run's status (``done``, ``diverged``,
    ``pruned``; it *is* that string, so ``outcome == "done"`` reads as before) with the end the
    queue records, so that a worker never re-reads the result file it just wrote.

    Attributes:
        val_nll: final validation NLL, nats/token, as the ``final`` view reads it (``None``
            without an evaluation, or on a rank other than 0, which writes no result).
        error: why a run diverged or was pruned (``None`` otherwise).
    """

    val_nll: float | None
    error: str | None

    def __new__(cls, status: str, val_nll: float | None = None, error: str | None = None) -> RunOutcome:
        out = super().__new__(cls, status)
        out.val_nll, out.error = val_nll, error
        return out

    @property
    def status(self) -> str:
        return str(self)

    def as_dict(self) -> dict:
        """``{"status", "val_nll", "error"}``, the shape :meth:`harness.store.store.Store.run_end` gives."""
        return {"status": self.status, "val_nll": self.val_nll, "error": self.error}


def time_split(row: dict) -> str:
    """``train 9.1 s (91 %), eval 0.5 s, setup 0.3 s, ckpt 0.1 s`` from a ``runs`` row."""
    wall = row["wall_s"] or float("nan")
    parts = [f"train {row['train_s']:.1f} s ({100 * row['train_s'] / wall:.0f} %)"]
    parts += [f"{name[:-2]} {row[name]:.1f} s" for name in ("eval_s", "setup_s", "ckpt_s")]
    return ", ".join(parts)


def run_row(config: RunConfig, *, fence: Fence, **fields) -> dict:
    """The ``runs`` row of ``config`` (DESIGN section 5) with ``fields`` added, stamped with
    the writer's ``owner`` and ``epoch`` (:mod:`harness.train.fencing`)."""
    row = {
        k: getattr(config, k) for k in ("run_id", "grid", "variant", "role", "seed", "size", "budget_tokens")
    }
    row.update(
        host=socket.gethostname(),
        code_version=code_version(),
        torch_version=torch.__version__,
        config=config.to_dict(),
        owner=fence.owner,
        epoch=fence.epoch,
    )
    row.update(fields)
    return row


def record_failure(
    config: RunConfig, results_dir: str | Path, error_text: str, settings: ExecutionSettings | None = None
) -> Path:
    """Write a ``failed`` result for ``config`` with the tail of ``error_text`` (no metric
    rows), while the run's lease is held (:func:`harness.train.fencing.current`). Returns the path.

    With the worker's ``settings``, the file carries where the attempt ran like a finished run's
    (``hardware``, ``numerics`` and ``environment``, :func:`harness.train.environment.environment_record`: a failure
    that happens on one machine only is then visible as such); a config whose numerics cannot be
    resolved (a bad ``[train]`` value, the likely cause of the failure) records none.

    Raises:
        LeaseLost: the run was taken over meanwhile; nothing was written.
    """
    fence = fencing.current()
    where = {}
    if settings is not None:
        try:
            environment = environment_record(run_numerics(config, settings))
        except ValueError:
            environment = None
        if environment is not None:
            where = {
                "hardware": environment["hardware"],
                "numerics": environment["numerics"],
                "environment": environment,
            }
    result = {
        "run": run_row(
            config,
            status="failed",
            error=str(error_text)[-ERROR_CHARS:],
            finished_at=utc_now().isoformat(),
            fence=fence,
            **where,
        ),
        "metrics": [],
        "routing": [],
    }
    return write_result(results_dir, result, commit=lambda: fence.holding("failed result file"))


def stored_result(config: RunConfig, results_dir: str | Path) -> tuple[dict | None, list[str]]:
    """The ``run`` row of ``config``'s result file and how its config differs from ``config``.

    Returns:
        ``(row, diff)``: ``row`` None when there is no result file; ``diff`` the differing
        fields with both values (:func:`harness.common.terms.config_diff`), over the fields of
        ``config`` (what the runner adds to a stored config is not compared).

    Raises:
        ValueError: the result file is unreadable (the message names it and why).
    """
    path = result_path(results_dir, config.run_id)
    if not path.exists():
        return None, []
    run = read_result(path)["run"]
    stored, payload = run.get("config") or {}, config.to_dict()
    return run, config_diff({k: stored.get(k) for k in payload}, payload, values=True)


def finished_status(config: RunConfig, results_dir: str | Path) -> str | None:
    """``'done'`` or ``'diverged'`` if the result file of ``config``'s run already holds that
    run finished, with the same config and code version; else ``None``.

    A worker that wrote the result file but died, or lost its queue storage, before the queue
    learned the run was finished leaves such a file behind; the worker that takes the run
    again reports it instead of training the run a second time (DESIGN section 10: every
    cell done exactly once). An unreadable file, a failed run, another config or another
    code version gives ``None`` (train again).
    """
    try:
        run, diff = stored_result(config, results_dir)
    except (OSError, ValueError):
        return None
    if (
        run is not None
        and run.get("status") in FINISHED
        and not diff
        and run.get("code_version") == code_version()
    ):
        return run["status"]
    return None


def finished_outcome(config: RunConfig, results_dir: str | Path) -> dict | None:
    """What the result file of ``config``'s run says about its end, for the queue:
    ``{"status", "val_nll", "error"}`` (:func:`harness.store.runfile.run_end`), or ``None``."""
    return run_end(results_dir, config.run_id)


def ingest_results(results_dir: str | Path, label: str, path: Path) -> None:
    """Ingest the result files of ``results_dir`` into DuckDB now, best effort: the result file
    ``path`` is already safe, and the next ``harness sql``/``report`` ingests what this leaves.

    DuckDB and polars load here, after the run is written, not with training (DESIGN section 11):
    a machine without them (a GPU node with only torch and Lightning) trains and writes results.
    ``lock_timeout_s=0``: a worker never waits on a reader; the file stays pending. Never raises
    for a failed ingest; logs why (debug for a lock, a warning otherwise).
    """
    try:
        from harness.store.connection import (
            StoreLockedError,  # lazy: the results store (DuckDB) only to ingest
        )
        from harness.store.store import Store  # lazy: the results store (DuckDB, polars) only to ingest
    except ImportError as exc:
        log.warning(f"[{label}] result saved in {path}; not ingested into DuckDB here ({exc})")
        return
    store = Store(results_dir, lock_timeout_s=0)
    try:
        store.ingest()
    except StoreLockedError as exc:  # a reader/writer elsewhere: the file stays pending, nothing is wrong
        log.debug(f"[{label}] result saved; DuckDB ingest deferred to the next reader ({exc})")
    except (
        Exception
    ) as exc:  # the result file is safe; the next `harness sql`/`report` ingests it (or says why)
        log.warning(
            f"[{label}] result saved in {path}; ingesting it into {store.db_path} failed "
            f"({type(exc).__name__}: {exc}); the next `harness sql` retries"
        )


__all__ = [
    "RunOutcome",
    "time_split",
    "run_row",
    "record_failure",
    "stored_result",
    "finished_status",
    "finished_outcome",
    "ingest_results",
]
