"""Live curves in the trackers researchers already watch: TensorBoard, W&B, MLflow, CSV.

DuckDB stays the store of record; a tracker is a copy for watching, an execution setting outside
the protocol hash (``[train] loggers`` or ``harness run/work --logger NAME``). Each run streams,
through Lightning's own logger classes, what :class:`~harness.train.lit.LitLM` records: ``train/loss``,
``train/lr``, ``train/grad_norm``, ``train/tokens_per_s``, ``val/nll`` (nats/token), ``val/bpb``,
``val/ppl`` and the routing diagnostics per evaluation (``routing/SITE/LLAYER/js_qk_v``,
``routing/SITE/LLAYER/ROUTE/entropy``), at the optimiser step. Grouped by grid, named by run id:

* ``tensorboard``: event files in ``RESULTS/tb/GRID/RUN`` (``tensorboard --logdir RESULTS/tb``);
* ``wandb``: project ``$WANDB_PROJECT`` (default ``rd-harness``), group GRID, files under RESULTS
  (``$WANDB_DIR`` wins); ``WANDB_MODE=offline`` writes a run ``wandb sync`` uploads later;
* ``mlflow``: experiment GRID at ``$MLFLOW_TRACKING_URI``, default the SQLite store
  ``sqlite:///RESULTS/mlflow.db`` (the local store MLflow 3 recommends; its ``file:`` store is in
  maintenance mode and cannot be read without ``MLFLOW_ALLOW_FILE_STORE=true``), which
  ``mlflow.search_runs`` and ``mlflow ui --backend-store-uri`` read with no opt-in; workers sharing a
  results folder open it in turn under ``RESULTS/mlflow.db.lock`` (a fresh store's schema migration
  is not safe to run twice at once), and ``$MLFLOW_TRACKING_URI`` is left as it was (Lightning's
  logger exports it);
* ``csv``: ``RESULTS/csv/GRID/RUN/metrics.csv``.

Hyper-parameters: the run's config (flattened), role, seed and protocol hash. Only rank 0 logs.
A tracker that fails (package missing, W&B not logged in, MLflow server down, a read-only store)
never fails a run: one warning line naming it and the error's root cause (the clients' own logs of
it are muted), and training goes on without it. A full disk (ENOSPC, EDQUOT) under a tracker's files
is the environment's, not the tracker's: it stops the run as any other write would (the worker
releases it with its one disk-full line), and TensorBoard's writer thread, which meets it first,
prints no traceback of its own.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import warnings
from pathlib import Path

import lightning as L
from filelock import FileLock

from harness.common.console import OneLineWarning
from harness.common.faults import FULL_ERRNOS
from harness.common.files import fmt_bytes, free_bytes
from harness.design.config import RunConfig
from harness.design.settings import TRACKERS
from harness.store.validate import result_filename

DEFAULT_WANDB_PROJECT = "rd-harness"
MLFLOW_DB = "mlflow.db"  # the default MLflow store, in the results folder
WANDB_TAG_CHARS = 64  # the longest tag W&B accepts
#: The clients' loggers that log a failure (with its traceback and SQL) before raising it: muted while a
#: tracker is called, as the one warning says it.
_CLIENT_LOGGERS = ("mlflow", "alembic", "sqlalchemy", "wandb", "lightning.pytorch.loggers.mlflow")


@contextlib.contextmanager
def _quiet_clients():
    """Mute the trackers' own loggers for a call (restored after)."""
    loggers = [logging.getLogger(n) for n in _CLIENT_LOGGERS]  # their children inherit the level
    saved = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        for lg, level in zip(loggers, saved):
            lg.setLevel(level)


def _root(exc: BaseException) -> BaseException:
    """The error ``exc`` came from (the last of its ``__cause__`` / ``__context__`` chain)."""
    seen = exc
    while (seen.__cause__ or seen.__context__) is not None:
        seen = seen.__cause__ or seen.__context__
    return seen


def _why(exc: BaseException) -> str:
    """'OperationalError: attempt to write a readonly database': the root cause, its first line."""
    root = _root(exc)
    text = str(root).strip().splitlines()
    return f"{type(root).__name__}: {text[0] if text else ''}".rstrip(": ")


def _disk_full(exc: BaseException) -> OSError | None:
    """The ENOSPC / EDQUOT error in ``exc``'s chain, else None."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in FULL_ERRNOS:
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def _full_at(full: OSError, where) -> OSError:
    """``full`` naming the file it refused, else ``where`` (TensorBoard's writer thread names none)."""
    return OSError(full.errno, os.strerror(full.errno), full.filename or str(where))


_thread_hook = threading.excepthook


def _writer_thread_hook(args) -> None:
    """TensorBoard's async writer thread re-raises its error (a full disk) in the thread that logs next,
    where :class:`Trackers` handles it; printing it from the thread as well is only noise."""
    if type(args.thread).__name__ == "_AsyncWriterThread":
        return
    _thread_hook(args)


def mlflow_uri(results_dir: Path) -> str:
    """The MLflow tracking URI runs log to: ``$MLFLOW_TRACKING_URI`` when set, else the SQLite store
    ``sqlite:////ABS/RESULTS/mlflow.db`` (an absolute path: four slashes)."""
    return (
        os.environ.get("MLFLOW_TRACKING_URI")
        or f"sqlite:///{(Path(results_dir).resolve() / MLFLOW_DB).as_posix()}"
    )


def _folder(run_id: str) -> str:
    """A file-safe, distinct folder name for a run id (the result file's name, without .json)."""
    return result_filename(run_id)[: -len(".json")]


def make_logger(name: str, config: RunConfig, results_dir: Path, *, tags: dict[str, str] | None = None):
    """A Lightning logger ``name`` (one of :data:`harness.design.train_table.TRACKERS`) for one run. ``tags``
    (``{"hardware": class, "code_version": commit}``) become MLflow run tags and W&B tags (the values, cut
    to W&B's 64 characters); TensorBoard and CSV keep them among the hyper-parameters (:func:`hyperparameters`).

    Raises:
        ModuleNotFoundError and whatever the tracker's client raises (caught by :class:`Trackers`).
    """
    results_dir = Path(results_dir).resolve()
    run = _folder(config.run_id)
    if name == "tensorboard":
        from lightning.pytorch.loggers import TensorBoardLogger  # lazy: only when that tracker is in use

        threading.excepthook = _writer_thread_hook
        return TensorBoardLogger(
            save_dir=results_dir / "tb", name=config.grid, version=run, default_hp_metric=False
        )
    if name == "csv":
        from lightning.pytorch.loggers import CSVLogger  # lazy: only when that tracker is in use

        return CSVLogger(save_dir=results_dir / "csv", name=config.grid, version=run)
    if name == "mlflow":
        from lightning.pytorch.loggers import MLFlowLogger  # lazy: only when that tracker is in use

        uri, user_uri = mlflow_uri(results_dir), os.environ.get("MLFLOW_TRACKING_URI")
        # the default store's artifacts in RESULTS/mlartifacts, not the working directory's ./mlruns
        where = {} if user_uri else {"artifact_location": (results_dir / "mlartifacts").as_uri()}
        # The client opens the store as it is built (an empty SQLite file gets MLflow's tables, then its
        # schema migrations, then the grid's experiment): workers sharing a results folder take turns from
        # the constructor to the run, or a second one fails on the first one's half-migrated tables.
        # Lightning's logger calls mlflow.set_tracking_uri, which exports $MLFLOW_TRACKING_URI: put back as it
        # was, or this process's next run (another results folder) would log to this one's store.
        try:
            with FileLock(str(results_dir / f"{MLFLOW_DB}.lock")):
                logger = MLFlowLogger(
                    experiment_name=config.grid, run_name=config.run_id, tracking_uri=uri, tags=tags, **where
                )
                logger.experiment  # noqa: B018 -- the property creates the experiment and the run
        finally:
            if user_uri is None:
                os.environ.pop("MLFLOW_TRACKING_URI", None)
            else:
                os.environ["MLFLOW_TRACKING_URI"] = user_uri
        return logger
    if name == "wandb":
        from lightning.pytorch.loggers import WandbLogger  # lazy: only when that tracker is in use

        save_dir = os.environ.get("WANDB_DIR") or str(results_dir)
        return WandbLogger(
            name=config.run_id,
            group=config.grid,
            id=run.replace("%", "-"),
            resume="allow",
            project=os.environ.get("WANDB_PROJECT") or DEFAULT_WANDB_PROJECT,
            save_dir=save_dir,
            tags=[str(v)[:WANDB_TAG_CHARS] for v in (tags or {}).values()],
        )
    raise ValueError(f"logger {name!r}; allowed: {', '.join(TRACKERS)}")


def hyperparameters(config: RunConfig, protocol_hash: str, environment: dict | None = None) -> dict:
    """The run's config flattened to ``a.b`` keys, plus its protocol hash and, given the environment record
    (:mod:`harness.train.environment`), its hardware class (``hardware``) and the record under
    ``environment.`` (scalars only; a list becomes its text)."""
    flat: dict = {"protocol_hash": protocol_hash}

    def walk(prefix: str, value) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(f"{prefix}{k}.", v)
        else:
            flat[prefix[:-1]] = value if isinstance(value, (int, float, str, bool)) else str(value)

    walk("", config.to_dict())
    if environment is not None:
        flat["hardware"] = environment["hardware"]
        walk("environment.", {k: v for k, v in environment.items() if k != "hardware"})
    return flat


def routing_metrics(rows: list[dict]) -> dict[int, dict[str, float]]:
    """Routing rows (table ``routing``: one per layer, site, route and source) -> ``{tokens: {metric: value}}``:
    JS(QK, V) per site and layer, the entropy (nats) of each route's depth distribution."""
    out: dict[int, dict[str, float]] = {}
    for r in rows:
        m = out.setdefault(int(r["tokens"]), {})
        key = f"routing/{r['site']}/L{r['layer']}"
        if r.get("js_qk_v") is not None:
            m[f"{key}/js_qk_v"] = float(r["js_qk_v"])
        if r.get("entropy") is not None:
            m[f"{key}/{r['route']}/entropy"] = float(r["entropy"])
    return out


class Trackers(L.Callback):
    """Streams a :class:`~harness.train.lit.LitLM`'s new metric and routing rows to the chosen loggers.

    Rows recorded before this process started training (a resumed run's) are not sent again.
    Each logger call is guarded: the first failure of a tracker is one warning and that tracker
    is dropped; the run goes on.
    """

    def __init__(
        self,
        names: tuple[str, ...],
        config: RunConfig,
        results_dir: Path,
        *,
        protocol_hash: str,
        environment: dict | None = None,
    ):
        self.config, self.results_dir, self.protocol_hash = config, Path(results_dir), protocol_hash
        self.environment = environment  # harness.train.environment's record: hyper-parameters and tags
        self.names = tuple(dict.fromkeys(names))
        self.loggers: dict[str, object] = {}
        self._records = self._routing = 0
        self._opened = False
        self._ended: str | None = None  # the run's status once finish() is called

    def _guard(self, name: str, fn) -> None:
        if name not in self.loggers:
            return
        logger = self.loggers[name]
        try:
            with _quiet_clients():
                fn(logger)
        except Exception as exc:  # noqa: BLE001 -- a tracker never fails a run
            self.loggers.pop(name, None)
            full = _disk_full(exc)
            if full is not None:
                self._disk_full(name, _full_at(full, getattr(logger, "log_dir", None) or self.results_dir))
                return
            warnings.warn(
                f"logger {name} failed ({_why(exc)}); the run goes on without it (its results are in DuckDB)",
                OneLineWarning,
                stacklevel=2,
            )

    def _disk_full(self, name: str, full: OSError) -> None:
        """A full disk under tracker ``name``'s files: the environment's, not the tracker's. While the run
        trains, raised (the run stops as for any write; a worker says its one disk-full line and releases
        the run); once the run has ended (:meth:`finish`), one warning line for a finished run, nothing for
        an interrupted one (the error on its way says it)."""
        if self._ended is None:
            raise full
        if self._ended != "interrupted":
            warnings.warn(
                f"logger {name}: disk full: {full.filename} ({fmt_bytes(free_bytes(full.filename))} free); "
                f"its files end early (the run is {self._ended}; its results are in DuckDB)",
                OneLineWarning,
                stacklevel=3,
            )

    def _open(self) -> None:
        self._opened = True
        for name in self.names:
            try:
                if name == "mlflow":
                    # lazy: optional and heavy; imported before muting, as its import sets its loggers' levels
                    import mlflow  # noqa: F401, PLC0415
                with _quiet_clients():
                    self.loggers[name] = make_logger(name, self.config, self.results_dir, tags=self._tags())
            except Exception as exc:  # noqa: BLE001
                full = _disk_full(exc)
                if full is not None:
                    raise _full_at(full, self.results_dir) from None
                hint = " (pip install 'rd-harness[tracking]')" if isinstance(exc, ModuleNotFoundError) else ""
                warnings.warn(
                    f"logger {name} could not start ({_why(exc)}){hint}; the run goes on without it",
                    OneLineWarning,
                    stacklevel=2,
                )
                continue
            hp = hyperparameters(self.config, self.protocol_hash, self.environment)
            self._guard(name, lambda lg, hp=hp: lg.log_hyperparams(hp))

    def _tags(self) -> dict[str, str] | None:
        """The run's tags: its hardware class and training commit (``None`` without an environment record)."""
        if self.environment is None:
            return None
        return {"hardware": self.environment["hardware"], "code_version": self.environment["code_version"]}

    def on_train_start(self, trainer, pl_module) -> None:
        if not trainer.is_global_zero:
            return
        self._records, self._routing = len(pl_module.records), len(pl_module.routing_rows)
        if not self._opened:
            self._open()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.is_global_zero:
            self.flush(pl_module)

    def flush(self, lit) -> None:
        """Send the rows ``lit`` recorded since the last flush (steps are optimiser steps)."""
        if not self.loggers:
            return
        by_step: dict[int, dict[str, float]] = {}
        for r in lit.records[self._records :]:
            by_step.setdefault(int(r["step"]), {})[f"{r['split']}/{r['name']}"] = float(r["value"])
        for tokens, m in routing_metrics(lit.routing_rows[self._routing :]).items():
            by_step.setdefault(tokens // lit.batch_tokens, {}).update(m)
        self._records, self._routing = len(lit.records), len(lit.routing_rows)
        for step in sorted(by_step):
            for name in list(self.loggers):
                self._guard(name, lambda lg, step=step: lg.log_metrics(by_step[step], step=step))

    def finish(self, lit, status: str) -> None:
        """Flush what the final evaluation added and close every tracker (``status``: the run's)."""
        if not self._opened:
            return
        self._ended = status
        self.flush(lit)
        for name in list(self.loggers):
            self._guard(name, lambda lg: lg.finalize("success" if status in ("done", "pruned") else "failed"))
        if "wandb" in self.loggers:
            import wandb  # lazy: only when W&B is in use (optional, heavy)

            self._guard("wandb", lambda lg: wandb.finish())
        self.loggers.clear()
