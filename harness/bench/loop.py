"""The Lightning training loop against a bare PyTorch loop on the same model and batches."""

from __future__ import annotations

import time
from pathlib import Path

import torch

from harness.bench.settings import BenchConfig, sync
from harness.bench.steps import train_step
from harness.data.datamodule import TokenDataModule, TrainBatches
from harness.design.config import train_config
from harness.models import build_model
from harness.models.sizes import get_size
from harness.train.lit import LitLM
from harness.train.trainer import make_trainer, quiet_lightning, resolve_precision


def loop_throughput(
    cfg: BenchConfig, prepared, device: torch.device, batch_size: int, root: Path
) -> dict[str, list[float]]:
    """Seconds per loop iteration of the Lightning loop and the bare loop.

    Returns ``{"lightning": [...], "bare": [...]}``: ``loop_rounds * loop_steps`` values
    each, the time between the ends of consecutive steps after ``warmup`` steps of every
    round (one whole iteration: next batch, hooks, step). Tokens/s is ``B * T`` over the
    median iteration, which a stall of the shared machine in a few steps cannot move.
    """
    loops = _Loops(cfg, prepared, device, batch_size, root)
    out: dict[str, list[float]] = {"lightning": [], "bare": []}
    for r in range(cfg.loop_rounds):
        order = ("lightning", "bare") if r % 2 == 0 else ("bare", "lightning")
        for name in order:
            out[name].extend(loops.lightning() if name == "lightning" else loops.bare())
    return out


class _Loops:
    """The two loops of :func:`loop_throughput` on one model config and one data module: each call of
    :meth:`lightning` / :meth:`bare` is one round, returning its iteration times (seconds)."""

    def __init__(self, cfg: BenchConfig, prepared, device: torch.device, batch_size: int, root: Path) -> None:
        quiet_lightning()
        self.cfg, self.device, self.root = cfg, device, root
        context = get_size(cfg.size).context
        train = train_config(cfg.size)
        self.n_steps = n_steps = cfg.warmup + cfg.loop_steps
        log_every = max(1, n_steps // 100)  # as a run's StepPlan.log_every
        self.dm = TokenDataModule(prepared, context, batch_size, cfg.seed, eval_tokens=context)
        token_bytes = torch.from_numpy(prepared.token_bytes())

        def lit_for(model) -> LitLM:
            return LitLM(
                model,
                train,
                total_steps=n_steps,
                batch_tokens=batch_size * context,
                token_bytes=token_bytes,
                log_every=log_every,
                compile=cfg.compile,
            )

        self.lit = lit_for(
            build_model(cfg.loop_variant, cfg.size, seed=cfg.seed, vocab_size=prepared.vocab_size)
        )
        self.bare_model = build_model(
            cfg.loop_variant, cfg.size, seed=cfg.seed, vocab_size=prepared.vocab_size
        ).to(device)
        self.bare_lit = lit_for(
            self.bare_model
        )  # optimiser groups and schedule only; also turns off token checks
        self.bare_forward = torch.compile(self.bare_model) if cfg.compile else self.bare_model
        self.max_norm = train.grad_clip if train.grad_clip > 0 else float("inf")

    def iterations(self, stamps: list[float]) -> list[float]:
        """The times between the ends of consecutive steps after the warm-up."""
        return [stamps[i] - stamps[i - 1] for i in range(self.cfg.warmup, self.n_steps)]

    def lightning(self) -> list[float]:
        """One round of the Lightning loop (``trainer.fit``), stamped at every batch end."""
        import lightning as L  # lazy: Lightning loads only to train

        device = self.device

        class Clock(L.Callback):
            def __init__(self) -> None:
                self.stamps: list[float] = []

            def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
                sync(device)
                self.stamps.append(time.perf_counter())

        clock = Clock()
        accelerator = "gpu" if device.type == "cuda" else "cpu"
        trainer = make_trainer(
            accelerator=accelerator,
            precision=resolve_precision("auto", accelerator),
            max_steps=self.n_steps,
            callbacks=[clock],
            root=self.root,
        )
        trainer.fit(self.lit, datamodule=self.dm)
        return self.iterations(clock.stamps)

    def bare(self) -> list[float]:
        """One round of the bare PyTorch loop on the same batches."""
        from torch.utils.data import DataLoader  # lazy: only for the Lightning loop

        opt_cfg = self.bare_lit.configure_optimizers()  # fresh AdamW state each round, as Lightning's fit
        opt, sched = opt_cfg["optimizer"], opt_cfg["lr_scheduler"]["scheduler"]
        batches = iter(DataLoader(TrainBatches(self.dm.schedule), batch_size=None))
        stamps = []
        for _ in range(self.n_steps):
            x, y = next(batches)
            x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
            train_step(self.bare_forward, self.bare_model, opt, sched, x, y, self.max_norm, self.device)
            sync(self.device)
            stamps.append(time.perf_counter())
        return self.iterations(stamps)
