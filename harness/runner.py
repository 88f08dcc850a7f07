"""One run end to end: corpus -> model -> Lightning fit -> result file (DESIGN sections 4-5).

:func:`train_run` is what ``harness run`` and every queue worker call. It is
idempotent per ``run_id``: checkpoints live in ``RESULTS/checkpoints/<run>/last.ckpt``
(written atomically), and calling it again for the same run resumes from there, ending
with the same numbers as an uninterrupted run (bit-identical on CPU). The finished run
is written atomically to its own result file through :class:`db.store.Store`, then
ingested into DuckDB when the lock is free (otherwise by the next reader).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import os
import shutil
import socket
import sys
import time
import warnings
from pathlib import Path

import lightning as L
import torch

from harness.config import get_size, train_config
from harness.files import atomic_path, atomic_write
from harness.protocol import code_version, protocol_dict, protocol_hash, safe_name
from harness.terms import NAME_RE, config_diff, run_id

STATUSES = ("done", "diverged", "failed")


class RunInterrupted(KeyboardInterrupt):
    """The run stopped before its budget (``stop_after_tokens``, SIGTERM, Ctrl-C) with a
    checkpoint on disk; calling :func:`train_run` again resumes it. A ``KeyboardInterrupt``,
    so a queue worker gives the run back to the queue instead of recording a failure."""


class _StopRequested(Exception):
    """Raised inside the trainer at ``stop_after_tokens``, after the checkpoint."""


def make_run_config(variant: str, size: str, seed: int, budget_tokens: int, corpus: str, *,
                    grid: str = "adhoc", role: str | None = None, train: dict | None = None) -> dict:
    """The run config dict queued and stored per run (``runs.config``).

    ``train`` holds only overrides of the preset's training defaults (grid ``[train]``,
    then command line). ``role`` defaults to the variant spec's role.

    Raises:
        ValueError: unknown variant or size, a variant whose head groups cannot split the
            size's heads, bad budget or seed, bad train keys.
    """
    from harness.models import get_spec

    spec = get_spec(variant)
    preset = get_size(size)
    if spec.residual != "prenorm":
        try:  # a split of the heads that this size cannot make fails now, not in a worker
            spec.sites["attn"].head_counts(preset.n_heads)
        except ValueError as exc:
            raise ValueError(f"variant {variant!r} at size {size!r}: {exc}") from None
    if not NAME_RE.match(grid):
        raise ValueError(f"grid name {grid!r}: use letters, digits, '_', '.', '-' (starting with a letter or digit)")
    if int(budget_tokens) <= 0:
        raise ValueError(f"budget_tokens={budget_tokens} must be a positive number of tokens")
    if int(seed) < 0:
        raise ValueError(f"seed={seed} must be >= 0")
    train = dict(train or {})
    train_config(size, **train)  # validate now, not in a worker hours later
    rid = run_id(grid, size, variant, seed, budget_tokens)
    if grid == "adhoc" and train:
        # a hand-made sweep (`harness run --set lr=...`) keeps one result per setting
        digest = hashlib.sha256(json.dumps(train, sort_keys=True).encode()).hexdigest()[:8]
        rid = f"{rid}:{digest}"
    return {
        "run_id": rid, "grid": grid, "variant": variant,
        "role": role or spec.role, "size": size, "seed": int(seed), "budget_tokens": int(budget_tokens),
        "corpus": corpus, "train": train,
    }


def cache_dir(results_dir: Path) -> Path:
    """Prepared-corpus cache: ``$HARNESS_CACHE`` or ``RESULTS/cache`` (content-addressed, shareable)."""
    return Path(os.environ.get("HARNESS_CACHE") or Path(results_dir) / "cache")


def checkpoint_dir(results_dir: Path, run_id: str) -> Path:
    return Path(results_dir) / "checkpoints" / safe_name(run_id)


def _run_row(config: dict, **fields) -> dict:
    row = {k: config[k] for k in ("run_id", "grid", "variant", "role", "seed", "size", "budget_tokens")}
    row.update(host=socket.gethostname(), code_version=code_version(),
               torch_version=torch.__version__, config=config)
    row.update(fields)
    return row


def record_failure(config: dict, results_dir: Path, error_text: str) -> Path:
    """Write a ``failed`` result for ``config`` with ``error_text`` (the run's rows are kept
    if an earlier attempt's checkpoint had any). Returns the result file path."""
    from db.store import Store

    now = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
    result = {"run": _run_row(config, status="failed", error=str(error_text)[-8000:], finished_at=now.isoformat()),
              "metrics": [], "routing": []}
    return Store(results_dir).write_result(result)


def finished_status(config: dict, results_dir: Path) -> str | None:
    """``'done'`` or ``'diverged'`` if the result file of ``config``'s run already holds that
    run finished, with the same config and code version; else ``None``.

    A worker that wrote the result file but died, or lost its queue storage, before the queue
    learned the run was finished leaves such a file behind; the worker that takes the run
    again reports it instead of training the run a second time (DESIGN section 10: every
    cell done exactly once). An unreadable file, a failed run, another config or another
    code version gives ``None`` (train again).
    """
    from db.store import Store

    store = Store(results_dir)
    path = store.result_path(config["run_id"])
    if not path.exists():
        return None
    try:
        run = store.read_result(path)["run"]
    except (OSError, ValueError):
        return None
    stored = run.get("config") or {}
    same = not config_diff({k: stored.get(k) for k in config}, config)
    if run.get("status") in ("done", "diverged") and same and run.get("code_version") == code_version():
        return run["status"]
    return None


def _quiet_lightning() -> None:
    """Keep Lightning's banner lines and known-harmless warnings out of run output."""
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)
    logging.getLogger("lightning.fabric").setLevel(logging.WARNING)
    for pattern in (r".*val_dataloader.*validation_step.*", r".*LeafSpec.*is deprecated.*",
                    r".*does not have many workers.*", r".*`max_epochs` was not set.*"):
        warnings.filterwarnings("ignore", message=pattern)


class _Progress(L.Callback):
    """Evaluate, checkpoint, stop-on-request and show progress in one ordered hook."""

    def __init__(self, runner: "_Run") -> None:
        self.r = runner
        self.bar = None
        self.t0 = None
        self.tokens0 = 0
        self.next_print = 0.0

    def on_train_start(self, trainer, pl_module):
        self.t0 = time.perf_counter()
        self.tokens0 = pl_module.tokens_seen
        if self.r.progress and trainer.is_global_zero:
            if sys.stderr.isatty() and os.environ.get("HARNESS_PROGRESS", "bar") != "lines":
                from tqdm import tqdm

                self.bar = tqdm(total=self.r.budget_tokens, initial=self.tokens0, unit="tok", unit_scale=True,
                                desc=self.r.label, dynamic_ncols=True, leave=False)
            else:
                self.next_print = self.tokens0 + 0.1 * self.r.budget_tokens

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        r = self.r
        step = int(trainer.global_step)
        if pl_module.diverged:
            return
        pl_module.record_train_step()  # before any checkpoint, so a resume keeps this step's rows
        if step == r.total_steps or (r.eval_every and step % r.eval_every == 0):
            pl_module.evaluate(trainer.datamodule.val_dataloader())
        if step < r.total_steps and (step % r.ckpt_every == 0 or (r.stop_step and step >= r.stop_step)):
            r.save_checkpoint(trainer)
        self._show(pl_module)
        if r.stop_step and step >= r.stop_step and step < r.total_steps:
            raise _StopRequested(f"stopped after {pl_module.tokens_seen:,} tokens (step {step}) as asked")

    def on_exception(self, trainer, pl_module, exception):
        from lightning.pytorch.utilities.exceptions import SIGTERMException

        # Lightning raises SIGTERMException at a batch boundary: the state is whole, keep it
        if isinstance(exception, SIGTERMException) and not pl_module.diverged:
            self.r.save_checkpoint(trainer)

    def _show(self, pl_module):
        tokens = pl_module.tokens_seen
        if self.bar is not None:
            self.bar.update(tokens - self.bar.n)
            last = pl_module.records[-1] if pl_module.records else None
            if last and last["split"] == "val" and last["name"] == "ppl":
                self.bar.set_postfix(val_nll=f"{pl_module.records[-3]['value']:.3f}")
        elif self.r.progress and tokens >= self.next_print and self.t0 is not None:
            rate = (tokens - self.tokens0) / max(time.perf_counter() - self.t0, 1e-9)
            eta = (self.r.budget_tokens - tokens) / max(rate, 1e-9)
            print(f"[{self.r.label}] {100 * tokens / self.r.budget_tokens:3.0f}% {tokens:,}/{self.r.budget_tokens:,} "
                  f"tokens, {rate:,.0f} tok/s, ETA {eta:,.0f} s", file=sys.stderr, flush=True)
            self.next_print = tokens + 0.1 * self.r.budget_tokens

    def on_train_end(self, trainer, pl_module):
        if self.bar is not None:
            self.bar.close()


class _Run:
    """State of one :func:`train_run` call (kept small; the work is in ``execute``)."""

    def __init__(self, config: dict, results_dir: Path, *, progress: bool, accelerator: str,
                 devices: int | str, strategy: str, num_nodes: int, stop_after_tokens: int | None) -> None:
        self.config = config
        self.results_dir = Path(results_dir)
        self.progress = progress
        self.accelerator, self.devices, self.strategy, self.num_nodes = accelerator, devices, strategy, num_nodes
        self.train = train_config(config["size"], **config.get("train", {}))
        self.size = get_size(config["size"])
        self.budget_tokens = int(config["budget_tokens"])
        if self.train.batch_tokens % self.size.context:
            raise ValueError(f"batch_tokens={self.train.batch_tokens} must be a multiple of the "
                             f"{config['size']} context ({self.size.context} tokens)")
        self.batch_size = self.train.batch_tokens // self.size.context
        self.batch_tokens = self.batch_size * self.size.context
        if self.budget_tokens < self.batch_tokens:
            raise ValueError(f"budget_tokens={self.budget_tokens} is less than one batch "
                             f"(batch_tokens={self.batch_tokens}); raise the budget or lower batch_tokens")
        # whole optimiser steps: a budget that is not a multiple of the batch is rounded down
        self.total_steps = self.budget_tokens // self.batch_tokens
        self.eval_every = self.train.eval_every_tokens // self.batch_tokens if self.train.eval_every_tokens else 0
        ck = self.train.checkpoint_every_tokens // self.batch_tokens if self.train.checkpoint_every_tokens else 0
        self.ckpt_every = max(1, ck or self.total_steps // 10)
        self.stop_step = (max(1, stop_after_tokens // self.batch_tokens) if stop_after_tokens else None)
        self.ckpt_dir = checkpoint_dir(self.results_dir, config["run_id"])
        self.label = f"{config['variant']} s{config['seed']}"

    def save_checkpoint(self, trainer) -> None:
        """Atomic (:func:`harness.files.atomic_path`), so a kill never leaves a torn file.

        ``trainer.save_checkpoint`` is collective: every rank calls it, rank 0 writes."""
        path = self.ckpt_dir / "last.ckpt"
        if trainer.is_global_zero:
            with atomic_path(path) as tmp:
                trainer.save_checkpoint(tmp, weights_only=False)
        else:
            trainer.save_checkpoint(path, weights_only=False)  # writes nothing off rank 0
        trainer.strategy.barrier("harness-checkpoint")

    def _check_checkpoint_config(self) -> None:
        """Refuse to resume a checkpoint written for a different config (it would mix them)."""
        saved = self.ckpt_dir / "config.json"
        if saved.exists():
            old = json.loads(saved.read_text())
            diff = config_diff(old, self.config, values=True)
            if diff:
                raise ValueError(
                    f"a checkpoint of run {self.config['run_id']} in {self.ckpt_dir} was written with a "
                    f"different config ({'; '.join(diff)}); delete that folder to start over, or run "
                    "the same config to resume it")
        else:
            atomic_write(saved, json.dumps(self.config, sort_keys=True, indent=1))

    def _fit(self, trainer, lit, dm, ckpt: Path) -> None:
        """``trainer.fit`` with resume; stops and signals become :class:`RunInterrupted`."""
        from lightning.pytorch.utilities.exceptions import SIGTERMException

        lit.t_process_start = time.perf_counter()
        try:
            trainer.fit(lit, datamodule=dm, ckpt_path=str(ckpt) if ckpt.exists() else None)
        except _StopRequested as exc:
            raise RunInterrupted(f"{exc}; checkpoint at step {trainer.global_step}") from None
        except SIGTERMException:
            raise RunInterrupted(f"terminated (SIGTERM) after step {trainer.global_step}; "
                                 "checkpoint saved") from None
        except SystemExit:  # Lightning turns Ctrl-C into a graceful shutdown and sys.exit(1)
            raise RunInterrupted(f"interrupted at step {trainer.global_step}; resumes from the last "
                                 "checkpoint") from None

    def precision(self, accelerator: str) -> str:
        if self.train.precision != "auto":
            return self.train.precision
        return "bf16-mixed" if accelerator in ("gpu", "cuda") else "32-true"

    def execute(self) -> str:
        _quiet_lightning()
        from db.store import Store
        from harness.data import prepare_corpus
        from harness.datamodule import TokenDataModule
        from harness.lit import LitLM
        from harness.models import build_model, count_params

        cfg, train = self.config, self.train
        started = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
        t_start = time.perf_counter()
        prepared = prepare_corpus(
            cfg["corpus"], cache_dir=cache_dir(self.results_dir),
            vocab_size=train.vocab_size or self.size.vocab_size, tokenizer=train.tokenizer,
            val_fraction=train.val_fraction, max_docs=train.max_docs or None,
        )
        model = build_model(cfg["variant"], cfg["size"], seed=cfg["seed"], vocab_size=prepared.vocab_size)
        counts = count_params(model)
        dm = TokenDataModule(prepared, self.size.context, self.batch_size, cfg["seed"], train.eval_tokens)
        lit = LitLM(model, train, total_steps=self.total_steps, batch_tokens=self.batch_tokens,
                    token_bytes=torch.from_numpy(prepared.token_bytes()),
                    log_every=max(1, self.total_steps // 100))
        accelerator = self.accelerator
        if accelerator == "auto":
            accelerator = "gpu" if torch.cuda.is_available() else "cpu"
        precision = self.precision(accelerator)
        protocol = protocol_dict(data_meta=prepared.protocol_meta, size=cfg["size"], model=model.cfg,
                                 train=train, budget_tokens=self.budget_tokens, eval_windows=dm.n_val_windows,
                                 precision=precision)
        trainer = L.Trainer(
            accelerator=accelerator, devices=self.devices, strategy=self.strategy, num_nodes=self.num_nodes,
            precision=precision, max_steps=self.total_steps, logger=False, enable_checkpointing=False,
            enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
            limit_val_batches=0, use_distributed_sampler=False, callbacks=[_Progress(self)],
            default_root_dir=self.ckpt_dir,
        )
        ckpt = self.ckpt_dir / "last.ckpt"
        self._check_checkpoint_config()
        resumed_from = None
        if ckpt.exists():
            resumed_from = int(torch.load(ckpt, map_location="cpu", weights_only=False)["global_step"])
            if self.progress:
                print(f"[{self.label}] resuming from step {resumed_from} ({ckpt})", file=sys.stderr, flush=True)
        elif self.progress and self.total_steps * self.batch_tokens != self.budget_tokens:
            print(f"[{self.label}] training {self.total_steps} steps x {self.batch_tokens:,} tokens = "
                  f"{self.total_steps * self.batch_tokens:,} tokens (budget {self.budget_tokens:,}, rounded "
                  f"down to whole steps)", file=sys.stderr, flush=True)
        tokens_before = (resumed_from or 0) * self.batch_tokens
        t_fit = time.perf_counter()
        self._fit(trainer, lit, dm, ckpt)
        fit_s = time.perf_counter() - t_fit
        if not lit.diverged:
            last_val = max((r["step"] for r in lit.records if r["split"] == "val"), default=-1)
            if last_val != self.total_steps:  # resumed at the very end: the final eval is owed
                lit.evaluate(dm.val_dataloader())
        if not trainer.is_global_zero:
            return "diverged" if lit.diverged else "done"
        tokens_this = lit.tokens_seen - tokens_before
        status = "diverged" if lit.diverged else "done"
        run = _run_row(
            cfg, status=status, protocol_hash=protocol_hash(protocol), n_params=counts["total"],
            n_trainable=counts["trainable"], wall_s=lit.wall_s_before + time.perf_counter() - t_start,
            tokens_per_s=tokens_this / fit_s if fit_s > 0 and tokens_this > 0 else None,  # this segment
            tokens_seen=lit.tokens_seen, steps=int(trainer.global_step),
            error=lit.diverged["reason"] if lit.diverged else None,
            diverged_step=lit.diverged["step"] if lit.diverged else None,
            started_at=started.isoformat(), finished_at=dt.datetime.now(dt.timezone.utc).replace(tzinfo=None).isoformat(),
        )
        run["config"] = {**cfg, "protocol": protocol, "batch_size": self.batch_size, "total_steps": self.total_steps,
                         "precision": precision, "devices": trainer.world_size,
                         "resumed_from_step": resumed_from}
        # lock_timeout_s=0: a worker never waits on a reader; the file stays pending and the
        # next `harness sql`/`report` ingests it
        store = Store(self.results_dir, lock_timeout_s=0)
        store.write_result({"run": run, "metrics": lit.records, "routing": lit.routing_rows,
                            "route_pairs": lit.pair_rows, "route_params": lit.param_rows})
        shutil.rmtree(self.ckpt_dir, ignore_errors=True)
        try:
            store.ingest()
        except Exception as exc:  # locked by a reader/writer elsewhere: the file stays pending
            if self.progress:
                print(f"[{self.label}] result saved; DuckDB ingest deferred ({type(exc).__name__})", file=sys.stderr)
        if self.progress:
            final = {r["name"]: r["value"] for r in lit.records if r["split"] == "val" and r["step"] == lit.global_step}
            if status == "done":
                print(f"[{self.label}] done: val_nll {final['nll']:.4f} nats/token, bpb {final['bpb']:.4f}, "
                      f"ppl {final['ppl']:.2f} ({lit.tokens_seen:,} tokens, {run['wall_s']:.1f} s)",
                      file=sys.stderr, flush=True)
            else:
                print(f"[{self.label}] diverged at step {lit.diverged['step']} ({lit.diverged['tokens']:,} tokens): "
                      f"{lit.diverged['reason']}", file=sys.stderr, flush=True)
        return status


def train_run(config: dict, results_dir: Path, *, progress: bool = True, accelerator: str = "auto",
              devices: int | str = 1, strategy: str = "auto", num_nodes: int = 1,
              stop_after_tokens: int | None = None) -> str:
    """Train (or resume) one run and write its result file.

    Args:
        config: a run config from :func:`make_run_config` (or a grid cell).
        results_dir: results folder (result files, checkpoints, corpus cache, DuckDB).
        progress: show a progress bar (a line every 10 % when stderr is not a terminal).
        accelerator, devices, strategy, num_nodes: passed to ``lightning.Trainer``
            (``devices=4, strategy="ddp"`` for several GPUs; multi-node via torchrun/SLURM).
        stop_after_tokens: checkpoint and raise :class:`RunInterrupted` after this many
            tokens (a planned stop; calling again resumes).

    Returns:
        ``done`` or ``diverged`` (a diverged run is recorded, not raised).

    Raises:
        RunInterrupted: stopped at ``stop_after_tokens``.
        ValueError / FileNotFoundError: bad config or corpus (nothing is written).
    """
    return _Run(config, results_dir, progress=progress, accelerator=accelerator, devices=devices,
                strategy=strategy, num_nodes=num_nodes, stop_after_tokens=stop_after_tokens).execute()
