"""Lightning wrapper for any variant (the only place that trains or logs).

:class:`LitLM` wraps a :class:`~harness.models.gpt.DepthRoutedLM`: AdamW with no weight
decay on 1-D tensors (RMSNorm gains, pseudo-queries), warmup + cosine (or WSD) over the
run's own budget in tokens, gradient clipping, optional ``torch.compile``. It records
metric rows itself (``records``: run-independent dicts ``step, tokens, split, name,
value``) and keeps them in its checkpoints, so a resumed run keeps its earlier rows;
Lightning's loggers are not used for results (CSVLogger deletes an earlier metrics file
when it reopens a version folder).

Validation (:meth:`LitLM.evaluate`) runs over the fixed validation windows: NLL in
nats/token, bits-per-byte = sum NLL / (ln 2 * bytes of the predicted tokens), perplexity
= exp(NLL), plus the routing diagnostics of DESIGN section 3 on the same windows. The
latest evaluation's numbers are kept in :attr:`LitLM.last_eval` (and in checkpoints): a
run's final metrics are read from there, not from the metric rows.

A non-finite loss or gradient norm ends the run as ``diverged`` (step and tokens kept):
the step is skipped and the trainer is asked to stop; nothing raises. With several ranks
the decision is reduced over them (a non-finite loss on any rank skips the step on all).
"""

from __future__ import annotations

import math
import time
from contextlib import nullcontext

import lightning as L
import torch
import torch.nn.functional as F

from harness.config import TrainConfig
from harness.models.diagnostics import RoutingAccumulator, route_param_rows, route_param_snapshot
from harness.train.schedule import lr_multiplier, warmup_steps
from harness.train.timing import RunTimes


class LitLM(L.LightningModule):
    """Train one variant for ``total_steps`` optimiser steps of ``batch_tokens`` tokens.

    Args:
        model: the model (plain ``nn.Module``; tokens ``[B, T]`` -> logits ``[B, T, V]``).
        cfg: training settings.
        total_steps: optimiser steps in the run's budget (budget_tokens // batch_tokens).
        batch_tokens: global tokens per optimiser step (all ranks together).
        token_bytes: ``[V]`` UTF-8 bytes of each token id, for bits-per-byte.
        log_every: record train metrics every this many steps.
    """

    def __init__(self, model, cfg: TrainConfig, *, total_steps: int, batch_tokens: int,
                 token_bytes: torch.Tensor, log_every: int = 10) -> None:
        super().__init__()
        self.model = model
        self.model.validate_tokens = False  # ids come from the tokenizer that sized the vocabulary
        self.cfg = cfg
        self.total_steps = total_steps
        self.batch_tokens = batch_tokens
        self.warmup_steps = warmup_steps(cfg, total_steps, batch_tokens)
        self.register_buffer("token_bytes", token_bytes.to(torch.int64), persistent=False)
        self.log_every = max(1, log_every)
        self.records: list[dict] = []
        self.routing_rows: list[dict] = []
        self.pair_rows: list[dict] = []  # DuckDB route_pairs (degeneracy records, DESIGN section 3)
        self.param_rows: list[dict] = []  # DuckDB route_params
        # the routing parameters as built (before any checkpoint is loaded): their initial values
        self._route_init = route_param_snapshot(model)
        self.diverged: dict | None = None
        self.pruned: dict | None = None  # {"step", "tokens", "val_nll"} when a tuning study's pruner stopped the run
        self.last_eval: dict | None = None  # {"step", "nll", "bpb", "ppl", "tokens", "bytes"} of the latest evaluate
        self._compiled = None
        self.wall_s_before = 0.0  # wall time of earlier segments of a resumed run, seconds
        self.times = RunTimes()  # seconds per phase, earlier segments included (harness.train.timing)
        self.t_process_start = time.perf_counter()
        self._t_last = None
        self._tokens_last = 0
        self.last_grad_norm = float("nan")

    # -- helpers ------------------------------------------------------------------
    @property
    def tokens_seen(self) -> int:
        return int(self.global_step) * self.batch_tokens

    def _record(self, split: str, name: str, value: float, step: int | None = None) -> None:
        step = int(self.global_step) if step is None else step
        self.records.append(dict(step=step, tokens=step * self.batch_tokens, split=split, name=name, value=float(value)))

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.cfg.compile and self._compiled is None:
            self._compiled = torch.compile(self.model)
        # `is not None`: a compiled module's truthiness calls len(), which modules lack
        return (self._compiled if self._compiled is not None else self.model)(x)

    # -- optimisation -------------------------------------------------------------
    def configure_optimizers(self):
        decay, no_decay = [], []
        for name, p in self.model.named_parameters():
            if not p.requires_grad:
                continue
            # 1-D tensors are RMSNorm gains and pseudo-queries: never decayed
            (decay if p.dim() >= 2 else no_decay).append(p)
        groups = [
            {"params": decay, "weight_decay": self.cfg.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ]
        opt = torch.optim.AdamW(groups, lr=self.cfg.lr, betas=(self.cfg.beta1, self.cfg.beta2),
                                foreach=False)
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda s: lr_multiplier(s, self.total_steps, self.warmup_steps, self.cfg)
        )
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None):
        if self.diverged is not None:  # this step's loss was non-finite on some rank: no update
            optimizer.zero_grad(set_to_none=True)
            return
        max_norm = self.cfg.grad_clip if self.cfg.grad_clip > 0 else float("inf")
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)
        self.last_grad_norm = float(norm)
        # after DDP's all-reduce every rank holds the same gradients, hence the same norm
        if not math.isfinite(self.last_grad_norm):
            # drop the gradients so this optimiser step changes nothing, then stop
            optimizer.zero_grad(set_to_none=True)
            self._mark_diverged(f"non-finite gradient norm ({self.last_grad_norm})")

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self._forward(x)
        loss = F.cross_entropy(logits.float().flatten(0, 1), y.flatten())
        if self._any_rank(not torch.isfinite(loss).all()):
            several = self._trainer is not None and self.trainer.world_size > 1
            self._mark_diverged(f"non-finite training loss ({float(loss)}"
                                + (" on this rank; non-finite on at least one)" if several else ")"))
            if not several:
                return None  # skip this step; the trainer stops before the next one
            # Lightning refuses a skipped step (None) under DDP: a loss whose gradient is exactly 0
            # for every parameter runs DDP's backward on every rank, and configure_gradient_clipping
            # then drops the gradients, so the optimiser step changes nothing
            return 0.0 * sum(p.sum() for p in self.model.parameters() if p.requires_grad)
        self._last_loss = loss.detach()
        return loss

    def record_train_step(self) -> None:
        """Record train loss, lr, grad norm and tokens/s every ``log_every`` steps (and at the
        last step). Called by :class:`~harness.train.progress.RunCallback` before it
        evaluates or checkpoints."""
        step = int(self.global_step)
        if step % self.log_every == 0 or step == self.total_steps:
            now = time.perf_counter()
            tps = float("nan")
            if self._t_last is not None and now > self._t_last:
                tps = (self.tokens_seen - self._tokens_last) / (now - self._t_last)
            self._t_last, self._tokens_last = now, self.tokens_seen
            self._record("train", "loss", float(self._last_loss))
            self._record("train", "lr", self.lr_schedulers().get_last_lr()[0])
            self._record("train", "grad_norm", self.last_grad_norm)
            if math.isfinite(tps):
                self._record("train", "tokens_per_s", tps)

    def _any_rank(self, flag) -> bool:
        """Whether ``flag`` holds on any rank: a decision every rank must take alike (skipping a
        step's backward on one rank only would leave the others waiting in DDP's all-reduce)."""
        flag = bool(flag)
        trainer = self._trainer
        if trainer is None or trainer.world_size < 2:
            return flag
        return trainer.strategy.reduce_boolean_decision(flag, all=False)

    def _mark_diverged(self, reason: str) -> None:
        self.diverged = {"step": int(self.global_step), "tokens": self.tokens_seen, "reason": reason}
        self.trainer.should_stop = True

    # -- evaluation -----------------------------------------------------------------
    @torch.no_grad()
    def evaluate(self, val_batches) -> dict:
        """Validation NLL (nats/token), bits-per-byte and perplexity over ``val_batches``
        (an iterable of ``(x, y)`` int64 ``[B, T]``), and routing rows on the same windows.

        Records ``val/nll``, ``val/bpb``, ``val/ppl`` at the current step, and appends the
        routing rows (DESIGN section 5, table ``routing``) to ``routing_rows`` and the
        degeneracy records (DESIGN section 3, tables ``route_pairs`` and ``route_params``) to
        ``pair_rows`` and ``param_rows``. Under DDP
        every rank evaluates the whole fixed set (the data module gives each rank all
        windows), so every rank returns the same, global numbers.

        Returns:
            ``{"nll": nats/token, "bpb": bits/byte, "ppl": perplexity, "tokens": predicted
            tokens, "bytes": their UTF-8 bytes}``; also kept, with ``"step"``, in :attr:`last_eval`.
        """
        with self.times.phase("eval_s"):
            return self._evaluate(val_batches)

    def _evaluate(self, val_batches) -> dict:
        was_training = self.model.training
        self.model.eval()
        nll_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        n_tok = torch.zeros((), dtype=torch.float64, device=self.device)
        n_bytes = torch.zeros((), dtype=torch.float64, device=self.device)
        acc = RoutingAccumulator(self.model)
        for x, y in val_batches:
            x, y = x.to(self.device), y.to(self.device)
            precision = self.trainer.precision_plugin.forward_context() if self._trainer else nullcontext()
            with acc, precision:
                logits = self.model(x)
            nll_sum += F.cross_entropy(logits.float().flatten(0, 1), y.flatten(), reduction="sum").double()
            n_tok += y.numel()
            n_bytes += self.token_bytes[y].sum().double()
        if was_training:
            self.model.train()
        nll = float(nll_sum / n_tok)
        out = {"nll": nll, "bpb": float(nll_sum / (math.log(2) * n_bytes)), "ppl": math.exp(min(nll, 700.0)),
               "tokens": int(n_tok), "bytes": int(n_bytes)}
        for name in ("nll", "bpb", "ppl"):
            self._record("val", name, out[name])
        self.last_eval = {"step": int(self.global_step), **out}
        diagnostics = acc.result()
        self.routing_rows.extend(diagnostics.rows(tokens=self.tokens_seen))
        self.pair_rows.extend(diagnostics.pair_rows(tokens=self.tokens_seen))
        self.param_rows.extend(route_param_rows(self.model, self._route_init, self.tokens_seen))
        return out

    # -- checkpoint state -------------------------------------------------------------
    def on_save_checkpoint(self, checkpoint: dict) -> None:
        wall_s = self.wall_s_before + time.perf_counter() - self.t_process_start
        checkpoint["harness"] = {"records": self.records, "routing_rows": self.routing_rows,
                                 "pair_rows": self.pair_rows, "param_rows": self.param_rows,
                                 "diverged": self.diverged, "last_eval": self.last_eval, "wall_s": wall_s,
                                 "times": self.times.state()}

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        state = checkpoint.get("harness", {})
        self.records = list(state.get("records", []))
        self.routing_rows = list(state.get("routing_rows", []))
        self.pair_rows = list(state.get("pair_rows", []))
        self.param_rows = list(state.get("param_rows", []))
        self.diverged = state.get("diverged")
        self.last_eval = state.get("last_eval")
        self.wall_s_before = float(state.get("wall_s", 0.0))
        self.times = RunTimes.from_state(state.get("times"))

