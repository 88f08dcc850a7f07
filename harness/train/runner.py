"""One run end to end: build -> fit -> record (DESIGN sections 4-5).

:func:`train_run` is what ``harness run`` and every queue worker call, with a
:class:`~harness.design.config.RunConfig`; it is three short steps:

* :func:`build` -- prepare the corpus, build the model, the data module, the Lightning
  module and the trainer, compute the protocol, and check the run's checkpoint folder;
* :func:`fit` -- train to the budget (resuming from the checkpoint if there is one), then
  make sure the final evaluation exists; the final metrics are what
  :meth:`~harness.train.lit.LitLM.evaluate` returned;
* :func:`record` -- write the result file, remove the checkpoint, ingest into DuckDB.

Idempotent per ``run_id``: checkpoints live in ``RESULTS/checkpoints/<run>/<owner>/last.ckpt``
(:mod:`harness.train.checkpoint`; one folder per owner, so a worker whose run was taken
over cannot touch the new owner's), and training the same run again resumes from there,
ending with the same numbers as an uninterrupted run (bit-identical on CPU). The
finished run is written atomically to its own result file through
:func:`harness.store.runfile.write_result`, then ingested into DuckDB when the lock is free (otherwise by
the next reader; DuckDB and polars load only then, :func:`~harness.train.result_file.ingest_results`).
"""

from __future__ import annotations

import datetime as dt
import functools
import shutil
import signal
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import lightning as L
import torch

from harness.common import console
from harness.common.terms import utc_now
from harness.data import PreparedCorpus, cache_dir, prepare_corpus
from harness.data.datamodule import TokenDataModule
from harness.data.unigram import train_counts, unigram_nll
from harness.design.config import RunConfig
from harness.models import count_params
from harness.models.sizes import get_size
from harness.store.runfile import result_end, write_result
from harness.train import fencing
from harness.train.checkpoint import checkpoint_dir, owner_dir, prepare_resume, resume_step, save_checkpoint
from harness.train.environment import RunNumerics, environment_record, run_numerics
from harness.train.execution import ExecutionSettings
from harness.train.fencing import Fence, LeaseLost
from harness.train.lit import LitLM
from harness.train.progress import RunCallback, StopRequested
from harness.train.protocol import protocol_dict, protocol_hash
from harness.train.ranks import (
    RankGroup,
    env_rank,
    plan_ranks,
    quiet_lightning_sigterm,
)
from harness.train.result_file import (
    RunOutcome,
    ingest_results,
    run_row,
    time_split,
)
from harness.train.schedule import StepPlan
from harness.train.trackers import Trackers
from harness.train.trainer import (
    describe_precision,
    enable_tf32,
    make_trainer,
    quiet_lightning,
    resolve_accelerator,
)


class RunInterrupted(KeyboardInterrupt):
    """The run stopped before its budget (``stop_after_tokens``, ``stop_requested``, SIGTERM, Ctrl-C) with a
    checkpoint on disk; calling :func:`train_run` again resumes it. A ``KeyboardInterrupt``,
    so a queue worker gives the run back to the queue instead of recording a failure."""


@dataclass
class Run:
    """A built run, ready to fit (see :func:`build`)."""

    config: RunConfig
    results_dir: Path
    plan: StepPlan
    prepared: PreparedCorpus
    lit: LitLM
    dm: TokenDataModule
    trainer: L.Trainer
    n_params: dict[str, int]
    protocol: dict
    precision: str
    ckpt_dir: Path  # this owner's checkpoint folder (harness.train.checkpoint.owner_dir)
    fence: Fence
    resumed_from: int | None
    progress: bool
    started: dt.datetime
    t_start: float  # perf_counter at the start of build, seconds
    trackers: Trackers | None = None  # live curves (harness.train.trackers); None without loggers
    environment: dict | None = None  # where it runs (harness.train.environment; the machine's part read once)


@dataclass(frozen=True)
class Fitted:
    """What :func:`fit` gives :func:`record`.

    Attributes:
        final: the final :meth:`~harness.train.lit.LitLM.evaluate` (nats/token, bits/byte,
            perplexity, ``step``), ``None`` for a diverged run.
        fit_s: seconds in ``trainer.fit`` in this process.
        tokens: tokens trained in this process (a resumed run counts only its new part).
    """

    final: dict | None
    fit_s: float
    tokens: int


def build(
    config: RunConfig,
    results_dir: str | Path,
    settings: ExecutionSettings,
    *,
    fence: Fence | None = None,
    on_eval=None,
    stop_requested: Callable[[], str | None] | None = None,
) -> Run:
    """Everything a run needs before ``fit`` (arguments as :func:`train_run`).

    Raises:
        ValueError / FileNotFoundError: bad settings or corpus (nothing is written but the
            corpus cache), or a checkpoint folder holding another config's checkpoint.
    """
    fence = fence if fence is not None else fencing.current()
    if not isinstance(config, RunConfig):
        raise TypeError(f"train_run takes a harness.design.config.RunConfig, got {type(config).__name__}")
    started, t_start = utc_now(), time.perf_counter()
    quiet_lightning()
    results_dir = Path(results_dir)
    settings = settings.for_run(config)  # the command line's settings with the grid's, merged once
    numerics = run_numerics(config, settings)  # how the run computes here, decided once
    say = functools.partial(_say, config, show=settings.progress)  # what the long steps are doing
    say(f"preparing the corpus ({config.corpus}) ...")
    train, plan, prepared = _plan_and_corpus(config, results_dir, settings)
    say(f"building the {config.size} {config.variant} model and its data loaders ...")
    model, dm, lit = _model_and_modules(config, train, settings, numerics, plan, prepared, t_start)
    accelerator, precision = numerics.accelerator, numerics.precision
    enable_tf32(accelerator)  # on a GPU, float32 matmuls (outside bf16 autocast) use tensor cores
    protocol = _protocol(config, prepared, model, dm, precision)
    environment = environment_record(numerics)  # after TF32: the flags as trained
    ckpt_dir = owner_dir(checkpoint_dir(results_dir, config.run_id), fence.epoch)
    callback = _callback(
        config,
        plan,
        fence,
        ckpt_dir,
        results_dir=Path(results_dir),
        progress=settings.progress,
        on_eval=on_eval,
        stop_requested=stop_requested,
        t_start=t_start,
    )
    names = settings.loggers  # the grid's and the command line's
    trackers = (
        Trackers(names, config, results_dir, protocol_hash=protocol_hash(protocol), environment=environment)
        if names
        else None
    )
    trainer = make_trainer(
        accelerator=accelerator,
        devices=settings.devices,
        strategy=settings.strategy,
        num_nodes=settings.num_nodes,
        precision=precision,
        max_steps=plan.total_steps,
        root=ckpt_dir,
        callbacks=[callback] + ([trackers] if trackers else []),
    )
    resumed_from, source = _resume_point(config, results_dir, fence, ckpt_dir)
    if settings.progress:
        _say_start(config, train, plan, accelerator, ckpt_dir, resumed_from, source)
    return Run(
        config=config,
        results_dir=results_dir,
        plan=plan,
        prepared=prepared,
        lit=lit,
        dm=dm,
        trainer=trainer,
        n_params=count_params(model),
        protocol=protocol,
        precision=precision,
        ckpt_dir=ckpt_dir,
        fence=fence,
        resumed_from=resumed_from,
        progress=settings.progress,
        started=started,
        t_start=t_start,
        trackers=trackers,
        environment=environment,
    )


def _protocol(
    config: RunConfig, prepared: PreparedCorpus, model, dm: TokenDataModule, precision: str
) -> dict:
    """The run's protocol (:func:`~harness.train.protocol.protocol_dict`), ``precision`` the concrete one."""
    return protocol_dict(
        config,
        data_meta=prepared.protocol_meta,
        model=model.cfg,
        eval_windows=dm.n_val_windows,
        precision=precision,
    )


def _plan_and_corpus(config: RunConfig, results_dir: Path, settings: ExecutionSettings):
    """``(train, plan, prepared)``: the run's train settings, step plan and corpus."""
    train, preset = config.train_config(), get_size(config.size)
    plan = StepPlan.of(
        train,
        size=config.size,
        context=preset.context,
        budget_tokens=config.budget_tokens,
        stop_after_tokens=settings.stop_after_tokens,
    )
    prepared = prepare_corpus(config.corpus_key(), cache_dir=cache_dir(results_dir))
    return train, plan, prepared


def _model_and_modules(
    config: RunConfig,
    train,
    settings: ExecutionSettings,
    numerics: RunNumerics,
    plan: StepPlan,
    prepared: PreparedCorpus,
    t_start: float,
) -> tuple:
    """``(model, data module, Lightning module)`` of the run, on ``numerics``' routing path, compiled as
    ``numerics`` decided and split into micro-batches as ``settings`` (merged with the grid's) say; the
    module's clock starts at ``t_start``."""
    model = config.build_model(prepared, routing=numerics.routing)
    context = get_size(config.size).context  # the preset's, as the step plan's
    dm = TokenDataModule(prepared, context, plan.batch_size, config.seed, train.eval_tokens)
    lit = LitLM(
        model,
        train,
        total_steps=plan.total_steps,
        batch_tokens=plan.batch_tokens,
        token_bytes=torch.from_numpy(prepared.token_bytes()),
        log_every=plan.log_every,
        micro_batch_size=settings.micro_batch_size,
        numerics=numerics,
    )
    lit.t_process_start = t_start  # a checkpoint's wall_s counts this segment from here
    return model, dm, lit


def _callback(
    config: RunConfig,
    plan: StepPlan,
    fence: Fence,
    ckpt_dir: Path,
    *,
    results_dir: Path,
    progress: bool,
    on_eval,
    stop_requested,
    t_start: float,
) -> RunCallback:
    """The run's :class:`RunCallback`: checkpoints written only under the fence, the lease checked."""

    def checkpoint(trainer) -> None:
        fence.check("checkpoint")  # asks the queue: a stale worker writes no checkpoint
        save_checkpoint(trainer, ckpt_dir, commit=lambda: fence.holding("checkpoint"), root=results_dir)

    def check_lease() -> None:
        why = fence.lost()
        if why is not None:
            raise LeaseLost(config.run_id, why)

    return RunCallback(
        plan,
        label=config.label,
        budget_tokens=config.budget_tokens,
        progress=progress,
        save_checkpoint=checkpoint,
        run_id=config.run_id,
        check_lease=check_lease,
        on_eval=on_eval,
        stop_requested=stop_requested,
        t_setup=t_start,
    )


def _resume_point(
    config: RunConfig, results_dir: Path, fence: Fence, ckpt_dir: Path
) -> tuple[int | None, str]:
    """``(step resumed from or None, where the checkpoint came from)``; rank 0 puts the checkpoint in place."""
    if env_rank() == 0:
        _, resumed_from, source = prepare_resume(results_dir, config, fence.epoch)
        return resumed_from, source
    # rank 0 put the checkpoint to resume from in place (harness.train.ranks); read, never write
    return resume_step(ckpt_dir), ""


def _say(config: RunConfig, text: str, *, show: bool) -> None:
    """``[variant sN] text`` on stderr (:func:`harness.common.console.phase`): what a long step is doing."""
    console.phase(f"[{config.label}] {text}", show=show)


def _say_start(
    config: RunConfig,
    train,
    plan: StepPlan,
    accelerator: str,
    ckpt_dir: Path,
    resumed_from: int | None,
    source: str,
) -> None:
    """The start lines on stderr: the precision chosen, and where the run resumes or how its budget rounds."""
    if train.precision == "auto-bf16":
        print(
            f"[{config.label}] {describe_precision(train.precision, accelerator)}",
            file=sys.stderr,
            flush=True,
        )
    if resumed_from is not None:
        print(
            f"[{config.label}] resuming from step {resumed_from} ({ckpt_dir / 'last.ckpt'}"
            f"{', ' + source if source else ''})",
            file=sys.stderr,
            flush=True,
        )
    elif plan.tokens != config.budget_tokens:
        print(
            f"[{config.label}] training {plan.total_steps} steps x {plan.batch_tokens:,} tokens = "
            f"{plan.tokens:,} tokens (budget {config.budget_tokens:,}, rounded down to whole steps)",
            file=sys.stderr,
            flush=True,
        )


def fit(run: Run) -> Fitted:
    """Train ``run`` to its budget (from its checkpoint, if any), then the final evaluation.

    Raises:
        RunInterrupted: a planned stop, SIGTERM or Ctrl-C (a checkpoint is on disk).
    """
    from lightning.pytorch.utilities.exceptions import SIGTERMException  # lazy: Lightning loads only to train

    lit, trainer = run.lit, run.trainer
    ckpt = run.ckpt_dir / "last.ckpt"
    tokens_before = (run.resumed_from or 0) * run.plan.batch_tokens
    t_fit = time.perf_counter()
    _say(run.config, "starting training (Lightning's set-up, then the first step) ...", show=run.progress)
    try:
        trainer.fit(lit, datamodule=run.dm, ckpt_path=str(ckpt) if ckpt.exists() else None)
    except StopRequested as exc:
        raise RunInterrupted(f"{exc}; checkpoint at step {trainer.global_step}") from None
    except SIGTERMException:
        raise RunInterrupted(
            f"terminated (SIGTERM) after step {trainer.global_step}; checkpoint saved"
        ) from None
    except SystemExit:  # Lightning turns Ctrl-C into a graceful shutdown and sys.exit(1)
        raise RunInterrupted(
            f"interrupted at step {trainer.global_step}; resumes from the last checkpoint"
        ) from None
    fit_s = time.perf_counter() - t_fit
    final = None
    if lit.pruned:
        final = lit.last_eval  # the evaluation the pruner judged
    elif not lit.diverged:
        final = lit.last_eval
        if final is None or final["step"] != run.plan.total_steps:  # resumed at the very end: owed
            lit.evaluate(run.dm.val_dataloader())
            final = lit.last_eval
    return Fitted(final=final, fit_s=fit_s, tokens=lit.tokens_seen - tokens_before)


def record(run: Run, fitted: Fitted) -> RunOutcome:
    """Write the run's result file (rank 0 only), remove its checkpoint, ingest it.

    Returns:
        ``done``, ``diverged`` or ``pruned``, with the final validation NLL the result file holds.
    """
    lit, config, plan = run.lit, run.config, run.plan
    status = "diverged" if lit.diverged else "pruned" if lit.pruned else "done"
    error = lit.diverged["reason"] if lit.diverged else None
    if lit.pruned:
        error = (
            f"pruned by the tuning study's pruner at step {lit.pruned['step']} ({lit.pruned['tokens']:,} "
            f"tokens): val_nll {lit.pruned['val_nll']:.4f}"
        )
    if not run.trainer.is_global_zero:
        return RunOutcome(status, error=error)
    row = run_row(
        config,
        status=status,
        protocol_hash=protocol_hash(run.protocol),
        n_params=run.n_params["total"],
        n_trainable=run.n_params["trainable"],
        wall_s=lit.wall_s_before + time.perf_counter() - run.t_start,
        tokens_per_s=fitted.tokens / fitted.fit_s
        if fitted.fit_s > 0 and fitted.tokens > 0
        else None,  # this segment
        tokens_seen=lit.tokens_seen,
        steps=int(run.trainer.global_step),
        **lit.times.state(),
        epochs=plan.tokens / len(run.prepared.tokens("train")),  # passes over the train split (DESIGN 11)
        micro_batch_size=lit.micro_batch_size,
        world_size=int(run.trainer.world_size),
        **lit.compile_record(),  # compiled: every training forward ran compiled (a result says how it was computed)
        unigram_nll=unigram_nll(train_counts(run.prepared), run.dm.val_targets()),  # the plateau (nats/token)
        error=error,
        diverged_step=lit.diverged["step"] if lit.diverged else None,
        started_at=run.started.isoformat(),
        finished_at=utc_now().isoformat(),
        hardware=run.environment["hardware"],
        numerics=run.environment["numerics"],
        environment=run.environment,
        fence=run.fence,
    )
    row["config"] = _stored_config(run)
    result = {
        "run": row,
        "metrics": lit.records,
        "routing": lit.routing_rows,
        "route_pairs": lit.pair_rows,
        "route_params": lit.param_rows,
    }
    # renamed into place only while the lease is held: a worker whose run was taken over writes nothing
    path = write_result(run.results_dir, result, commit=lambda: run.fence.holding("result file"))
    shutil.rmtree(run.ckpt_dir.parent, ignore_errors=True)  # every owner's checkpoints of this run
    ingest_results(run.results_dir, config.label, path)
    if run.progress:
        if status == "done":
            final = fitted.final
            print(
                f"[{config.label}] done: val_nll {final['nll']:.4f} nats/token, bpb {final['bpb']:.4f}, "
                f"ppl {final['ppl']:.2f} ({lit.tokens_seen:,} tokens, {row['wall_s']:.1f} s: {time_split(row)})",
                file=sys.stderr,
                flush=True,
            )
        elif status == "pruned":
            print(f"[{config.label}] {error}", file=sys.stderr, flush=True)
        else:
            print(
                f"[{config.label}] diverged at step {lit.diverged['step']} ({lit.diverged['tokens']:,} tokens): "
                f"{lit.diverged['reason']}",
                file=sys.stderr,
                flush=True,
            )
    return RunOutcome(**result_end(result))


def _stored_config(run: Run) -> dict:
    """The ``config`` column of the run's row: its config with the protocol and what the run resolved."""
    return {
        **run.config.to_dict(),
        "protocol": run.protocol,
        "batch_size": run.plan.batch_size,
        "total_steps": run.plan.total_steps,
        "precision": run.precision,
        "devices": run.trainer.world_size,
        "strategy": type(run.trainer.strategy).__name__,
        "resumed_from_step": run.resumed_from,
    }


def train_run(
    config: RunConfig,
    results_dir: str | Path,
    settings: ExecutionSettings | None = None,
    *,
    fence: Fence | None = None,
    on_eval=None,
    stop_requested: Callable[[], str | None] | None = None,
) -> RunOutcome:
    """Train (or resume) one run and write its result file: :func:`build`, :func:`fit`, :func:`record`.

    Args:
        config: the run (:meth:`RunConfig.create`, :meth:`RunConfig.adhoc` or a queued payload).
        results_dir: results folder (result files, checkpoints, corpus cache, DuckDB).
        settings: how the run executes (:class:`~harness.train.execution.ExecutionSettings`, default: its
            defaults; outside the protocol hash). ``accelerator``, ``devices``, ``strategy`` and
            ``num_nodes`` go to ``lightning.Trainer`` (``devices=4, strategy="ddp"`` for several GPUs;
            multi-node via torchrun/SLURM). ``devices`` N > 1 in a process that is not already a
            rank trains the run on N ranks of this machine: this process is rank 0 and starts the
            others with the same settings, serialised whole (:mod:`harness.train.ranks`; strategy
            ``auto`` is ``ddp`` there). With several ranks (also under torchrun/srun) SIGTERM stops
            every rank at the next step with a checkpoint (:class:`RunInterrupted`), unless
            ``stop_requested`` is given (its caller owns the signals). ``stop_after_tokens``:
            checkpoint and raise :class:`RunInterrupted` after this many tokens (a planned stop;
            calling again resumes). ``micro_batch_size``, ``compile``: ``None`` = the grid's ``[train]``
            value, else ``auto``; ``loggers``: trackers besides the grid's ``[train] loggers``
            (:meth:`~harness.train.execution.ExecutionSettings.for_run`, DESIGN section 11).
        fence: who may write this run's checkpoints and result (:mod:`harness.train.fencing`);
            default :func:`harness.train.fencing.current` (a queue worker's claim, or the open fence).
        on_eval: ``on_eval(step, tokens, val_nll) -> bool`` after each evaluation before the
            last step; ``True`` ends the run there as ``pruned`` (a tuning trial's pruner,
            :func:`harness.scheduling.tuning.pruning_hook`).
        stop_requested: asked after every optimiser step; a reason (a signal's name,
            :class:`harness.train.stop.StopRequest`) checkpoints that step and raises
            :class:`RunInterrupted`.

    Returns:
        a :class:`~harness.train.result_file.RunOutcome`: the status ``done``, ``diverged`` or ``pruned``
        (a diverged run is recorded, not raised) with the final validation NLL and the error, what
        the queue records.

    Raises:
        RunInterrupted: stopped at ``stop_after_tokens``, on ``stop_requested``, by SIGTERM or Ctrl-C.
        LeaseLost: the run was taken over by another worker; nothing more was written.
        ValueError / FileNotFoundError: bad config or corpus (no result is written).
        TypeError: ``config`` is not a :class:`~harness.design.config.RunConfig`.
    """
    settings = settings if settings is not None else ExecutionSettings()
    ranks = plan_ranks(settings, stop_requested, resolve_accelerator(settings.accelerator))
    if ranks.n > 1:
        fence = fence if fence is not None else fencing.current()
    with (
        RankGroup(ranks.n) if ranks.n > 1 else nullcontext() as group,
        ranks.own_stop.catching(signal.SIGTERM) if ranks.own_stop else nullcontext(),
    ):
        run = build(
            config,
            results_dir,
            ranks.settings,
            fence=fence,
            on_eval=on_eval,
            stop_requested=stop_requested or ranks.own_stop,
        )
        if ranks.several:
            quiet_lightning_sigterm(run.trainer)
        if group is not None:
            _start_ranks(group, run, ranks.settings)
        return _fit_and_record(run, group)


def _start_ranks(group: RankGroup, run: Run, settings: ExecutionSettings) -> None:
    """Start the other ranks of ``group`` on the run ``run`` (rank 0, this process) has built, with
    rank 0's ``settings`` whole (no progress of their own; rank 0's resolved accelerator and threads)."""
    child = settings.replace(
        progress=False,
        accelerator=resolve_accelerator(settings.accelerator),
        threads=settings.threads or torch.get_num_threads(),
    )
    group.start(
        {
            "config": run.config.to_dict(),
            "results_dir": str(run.results_dir.resolve()),
            "epoch": run.fence.epoch,
        },
        child,
    )


def _fit_and_record(run: Run, group: RankGroup | None = None) -> RunOutcome:
    """:func:`fit` then :func:`record`; the run's trackers (rank 0) are finished with its status either way.

    With several ranks the run is recorded only once every rank passed an end barrier after the run's
    last collective (the final evaluation) and, on rank 0 of a :class:`RankGroup`, no child rank has
    died (:meth:`RankGroup.check_children`): a dead rank releases the run as the machine's fault
    (:class:`~harness.common.faults.RankDied`) instead of a result that its cut-short collective made wrong.
    """
    outcome = RunOutcome("interrupted")
    try:
        fitted = fit(run)
        if run.trainer.world_size > 1:
            run.trainer.strategy.barrier("harness-run-end")  # every rank is through every collective
            if group is not None:
                group.check_children()
        outcome = record(run, fitted)
    finally:
        if run.trackers is not None and run.trainer.is_global_zero:
            run.trackers.finish(run.lit, outcome.status)
    return outcome


__all__ = [
    "RunInterrupted",
    "Run",
    "Fitted",
    "build",
    "fit",
    "record",
    "train_run",
]
