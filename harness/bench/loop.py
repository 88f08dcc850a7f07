"""The Lightning training loop against a bare PyTorch loop on the same model and batches."""

from __future__ import annotations

import time
from pathlib import Path

import torch

from harness.bench.config import BenchConfig, sync
from harness.bench.steps import train_step
from harness.config import get_size, train_config


def loop_throughput(cfg: BenchConfig, prepared, device: torch.device, batch_size: int,
                    root: Path) -> dict[str, list[float]]:
    """Seconds per loop iteration of the Lightning loop and the bare loop.

    Returns ``{"lightning": [...], "bare": [...]}``: ``loop_rounds * loop_steps`` values
    each, the time between the ends of consecutive steps after ``warmup`` steps of every
    round (one whole iteration: next batch, hooks, step). Tokens/s is ``B * T`` over the
    median iteration, which a stall of the shared machine in a few steps cannot move.
    """
    import lightning as L
    from torch.utils.data import DataLoader

    from harness.data.datamodule import TokenDataModule, TrainBatches
    from harness.models import build_model
    from harness.train.lit import LitLM
    from harness.train.trainer import make_trainer, quiet_lightning, resolve_precision

    quiet_lightning()
    context = get_size(cfg.size).context
    train = train_config(cfg.size, compile=cfg.compile)
    n_steps = cfg.warmup + cfg.loop_steps
    batch_tokens = batch_size * context
    log_every = max(1, n_steps // 100)  # as a run's StepPlan.log_every
    dm = TokenDataModule(prepared, context, batch_size, cfg.seed, eval_tokens=context)
    token_bytes = torch.from_numpy(prepared.token_bytes())

    def lit_for(model) -> LitLM:
        return LitLM(model, train, total_steps=n_steps, batch_tokens=batch_tokens, token_bytes=token_bytes,
                     log_every=log_every)

    lit = lit_for(build_model(cfg.loop_variant, cfg.size, seed=cfg.seed, vocab_size=prepared.vocab_size))
    bare_model = build_model(cfg.loop_variant, cfg.size, seed=cfg.seed, vocab_size=prepared.vocab_size).to(device)
    bare_lit = lit_for(bare_model)  # optimiser groups and schedule only; also turns off token checks
    bare_forward = torch.compile(bare_model) if cfg.compile else bare_model
    max_norm = train.grad_clip if train.grad_clip > 0 else float("inf")

    class Clock(L.Callback):
        def __init__(self) -> None:
            self.stamps: list[float] = []

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            sync(device)
            self.stamps.append(time.perf_counter())

    def iterations(stamps: list[float]) -> list[float]:
        return [stamps[i] - stamps[i - 1] for i in range(cfg.warmup, n_steps)]

    def run_lightning() -> list[float]:
        clock = Clock()
        accelerator = "gpu" if device.type == "cuda" else "cpu"
        trainer = make_trainer(accelerator=accelerator, precision=resolve_precision("auto", accelerator),
                               max_steps=n_steps, callbacks=[clock], root=root)
        trainer.fit(lit, datamodule=dm)
        return iterations(clock.stamps)

    def run_bare() -> list[float]:
        opt_cfg = bare_lit.configure_optimizers()  # fresh AdamW state each round, as Lightning's fit
        opt, sched = opt_cfg["optimizer"], opt_cfg["lr_scheduler"]["scheduler"]
        batches = iter(DataLoader(TrainBatches(dm.schedule), batch_size=None))
        stamps = []
        for _ in range(n_steps):
            x, y = next(batches)
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            train_step(bare_forward, bare_model, opt, sched, x, y, max_norm, device)
            sync(device)
            stamps.append(time.perf_counter())
        return iterations(stamps)

    out: dict[str, list[float]] = {"lightning": [], "bare": []}
    for r in range(cfg.loop_rounds):
        order = ("lightning", "bare") if r % 2 == 0 else ("bare", "lightning")
        for name in order:
            out[name].extend(run_lightning() if name == "lightning" else run_bare())
    return out
