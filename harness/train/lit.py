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

A step is one global batch run as micro-batches (DESIGN section 11,
:mod:`harness.train.microbatch`): manual optimisation, so Lightning counts one optimiser step
per global batch (its ``accumulate_grad_batches`` would count every micro-batch as a batch of
the data module). Each micro-batch's token-mean loss is weighted by its share of the rank's
rows; under DDP the gradients are synchronised on the last micro-batch only.

A non-finite loss or gradient norm ends the run as ``diverged`` (step and tokens kept) and the
trainer is asked to stop; nothing raises. With several ranks the decision is reduced over them
(a non-finite loss on any rank makes the step change nothing on all; every rank runs the same
backward passes, so none waits alone in DDP's all-reduce). On a CPU this is read every step
and the step changes nothing (as before micro-batches). On CUDA the host never waits for the
device inside a step: the first non-finite step is kept on the device and read every
``log_every`` steps and before every evaluation and checkpoint (:meth:`LitLM.poll_divergence`,
reduced over the ranks), so a diverged run stops there, records the step where it diverged and
writes no checkpoint of its NaN weights.
"""

from __future__ import annotations

import math
import sys
import time
from contextlib import nullcontext

import lightning as L
import torch

from harness.design.config import TrainConfig
from harness.models.diagnostics import RoutingAccumulator, route_param_rows, route_param_snapshot
from harness.train.compiled import CompiledForward
from harness.train.environment import RunNumerics
from harness.train.execution import resolve_compile
from harness.train.loss import token_cross_entropy
from harness.train.microbatch import micro_slices, probe_micro_batch, resolve_micro_batch
from harness.train.ranks import sum_over_ranks
from harness.train.schedule import lr_multiplier, warmup_steps
from harness.train.timing import RunTimes
from harness.train.trainer import cuda_defaults


class LitLM(L.LightningModule):
    """Train one variant for ``total_steps`` optimiser steps of ``batch_tokens`` tokens.

    Args:
        model: the model (plain ``nn.Module``; tokens ``[B, T]`` -> logits ``[B, T, V]``).
        cfg: training settings.
        total_steps: optimiser steps in the run's budget (budget_tokens // batch_tokens).
        batch_tokens: global tokens per optimiser step (all ranks together).
        token_bytes: ``[V]`` UTF-8 bytes of each token id, for bits-per-byte; ``V`` is the
            tokenizer's vocabulary, the model's may be padded beyond it (its padding logits are
            never in the loss, so they are never targeted and bits-per-byte is unchanged).
        log_every: record train metrics every this many steps.
        compile: wrap the model in ``torch.compile`` (``auto``: with CUDA's defaults,
            :func:`~harness.train.execution.resolve_compile`); an execution setting. Left ``auto`` with
            ``numerics``, which decides it.
        micro_batch_size: sequences per micro-batch on one rank, or ``auto`` (resolved at the fit's
            start, :mod:`harness.train.microbatch`); an execution setting.
        numerics: how the run computes, as the runner decided it once
            (:func:`harness.train.environment.run_numerics`): whether the forward is compiled and whether
            the module takes CUDA's defaults (fused AdamW, the deferred divergence check); its routing path
            must be the model's. ``None`` (a benchmark, a test): decided here from ``compile`` and the
            device the module is on.

    Raises:
        ValueError: ``numerics`` with a ``compile`` other than ``auto``, or with another routing path than
            the model's.
    """

    def __init__(
        self,
        model,
        cfg: TrainConfig,
        *,
        total_steps: int,
        batch_tokens: int,
        token_bytes: torch.Tensor,
        log_every: int = 10,
        compile: bool | str = "auto",
        micro_batch_size: int | str = "auto",
        numerics: RunNumerics | None = None,
    ) -> None:
        super().__init__()
        if numerics is not None:
            if compile != "auto":
                raise ValueError(f"compile={compile!r} with numerics: the run's numerics decide compile")
            if getattr(model, "routing", numerics.routing) != numerics.routing:
                raise ValueError(f"the model routes {model.routing}, the run's numerics {numerics.routing}")
            compile = numerics.compiled
        self.numerics = numerics
        self.automatic_optimization = False  # one optimiser step per global batch of micro-batches
        self.model = model
        self.model.validate_tokens = False  # ids come from the tokenizer that sized the vocabulary
        self.cfg = cfg
        self.total_steps = total_steps
        self.batch_tokens = batch_tokens
        self.warmup_steps = warmup_steps(cfg, total_steps, batch_tokens)
        self.register_buffer("token_bytes", token_bytes.to(torch.int64), persistent=False)
        self.vocab_size = int(token_bytes.numel())  # the tokenizer's; logits beyond it are padding
        self.compile_setting = compile
        self.micro_batch_setting = micro_batch_size  # 'auto' or sequences, as asked
        self.micro_batch_size: int | None = None  # sequences per micro-batch, resolved at the fit's start
        self.micro_batch_note: str | None = None  # the auto probe's line (CUDA)
        self.log_every = max(1, log_every)
        self.records: list[dict] = []
        self.routing_rows: list[dict] = []
        self.pair_rows: list[dict] = []  # DuckDB route_pairs (degeneracy records, DESIGN section 3)
        self.param_rows: list[dict] = []  # DuckDB route_params
        # the routing parameters as built (before any checkpoint is loaded): their initial values
        self._route_init = route_param_snapshot(model)
        self.diverged: dict | None = None
        self.pruned: dict | None = (
            None  # {"step", "tokens", "val_nll"} when a tuning study's pruner stopped the run
        )
        self.last_eval: dict | None = (
            None  # {"step", "nll", "bpb", "ppl", "tokens", "bytes"} of the latest evaluate
        )
        self._compiled: CompiledForward | None = None  # the run's compiled forward (harness.train.compiled)
        # whether every earlier segment of a resumed run trained compiled (None: none, or not recorded)
        self._compiled_before: bool | None = None
        self.wall_s_before = 0.0  # wall time of earlier segments of a resumed run, seconds
        self.times = RunTimes()  # seconds per phase, earlier segments included (harness.train.timing)
        self.t_process_start = time.perf_counter()
        self._t_last = None
        self._tokens_last = 0
        self.last_grad_norm = float("nan")
        self._grad_norm: torch.Tensor | None = None
        self._last_loss: torch.Tensor | None = None
        # first step with a non-finite (loss, gradient norm), -1 = none; kept on the device (CUDA)
        self._first_bad: torch.Tensor | None = None
        self._bad_value: torch.Tensor | None = None

    # -- helpers ------------------------------------------------------------------
    @property
    def tokens_seen(self) -> int:
        return int(self.global_step) * self.batch_tokens

    def _record(self, split: str, name: str, value: float, step: int | None = None) -> None:
        step = int(self.global_step) if step is None else step
        self.records.append(
            dict(step=step, tokens=step * self.batch_tokens, split=split, name=name, value=float(value))
        )

    @property
    def _defaults_of(self) -> str:
        """The device type whose defaults this module takes: the run's numerics' where given
        (:attr:`~harness.train.environment.RunNumerics.defaults_of`), else ``cuda`` on CUDA and in a CPU twin
        (:func:`harness.train.trainer.cuda_defaults`), else the device's own."""
        if self.numerics is not None:
            return self.numerics.defaults_of
        return "cuda" if cuda_defaults(self.device.type) else self.device.type

    @property
    def sync_every_step(self) -> bool:
        """Whether the divergence check reads the device every step (not with CUDA's defaults, DESIGN
        section 11)."""
        return self._defaults_of != "cuda"

    def loss(self, logits: torch.Tensor, y: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
        """Cross-entropy (nats/token) of ``logits [B, T, V_model]`` against ``y [B, T]`` over the
        tokenizer's ``V`` ids only: the padding logits of a padded vocabulary are left out. bf16
        logits are never copied whole to float32 (:func:`harness.train.loss.token_cross_entropy`)."""
        if logits.shape[-1] != self.vocab_size:
            logits = logits[..., : self.vocab_size]
        return token_cross_entropy(logits, y, reduction)

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        if self._compiled is None and resolve_compile(self.compile_setting, self._defaults_of):
            # kept outside the module tree (not a submodule): a checkpoint then holds the weights
            # once, under the uncompiled names, so compiled and uncompiled runs load each other's.
            # A fresh one per run (dynamo's caches reset): a worker's 9th model compiles too
            object.__setattr__(self, "_compiled", CompiledForward(self.model))
        return (self._compiled if self._compiled is not None else self.model)(x)

    def compile_record(self) -> dict:
        """``{"compiled", "compile_graphs"}`` (``runs`` columns): whether every training forward of the
        run ran compiled (earlier segments of a resumed run too), and the graphs inductor compiled in
        this process (``None``: none asked for). A fall-back to eager is said in one line on stderr."""
        now = self._compiled.compiled if self._compiled is not None else None
        if now is False:
            print(
                f"warning: torch.compile fell back to eager in this run ({self._compiled.graphs} graphs "
                f"compiled, {self._compiled.eager_frames} frames left to eager); recorded as compiled = false",
                file=sys.stderr,
                flush=True,
            )
        graphs = self._compiled.graphs if self._compiled is not None else None
        return {"compiled": self._all_compiled(), "compile_graphs": graphs}

    def _all_compiled(self) -> bool:
        """Whether this process's and every earlier segment's training forwards all ran compiled."""
        now = self._compiled.compiled if self._compiled is not None else None
        segments = [v for v in (self._compiled_before, now) if v is not None]
        return bool(segments) and all(segments)

    # -- optimisation -------------------------------------------------------------
    def configure_optimizers(self):
        decay, no_decay = [], []
        for p in self.model.parameters():
            if not p.requires_grad:
                continue
            # 1-D tensors are RMSNorm gains and pseudo-queries: never decayed
            (decay if p.dim() >= 2 else no_decay).append(p)
        groups = [
            {"params": decay, "weight_decay": self.cfg.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ]
        # fused on CUDA (one kernel for all tensors); the per-tensor loop elsewhere, as the CPU runs were recorded
        fast = {"fused": True} if self._defaults_of == "cuda" else {"foreach": False}
        opt = torch.optim.AdamW(groups, lr=self.cfg.lr, betas=(self.cfg.beta1, self.cfg.beta2), **fast)
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda s: lr_multiplier(s, self.total_steps, self.warmup_steps, self.cfg)
        )
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    def on_fit_start(self) -> None:
        """Resolve the micro-batch size (``auto``: probed on CUDA, :mod:`harness.train.microbatch`)."""
        context = self.model.cfg.context
        local = self.batch_tokens // context // max(1, self.trainer.world_size)

        def probe():
            precision = self.trainer.precision_plugin.forward_context
            return probe_micro_batch(
                self.model,
                local_batch=local,
                context=context,
                vocab_size=self.vocab_size,
                device=self.device,
                forward_context=precision,
            )

        micro, note = resolve_micro_batch(
            self.micro_batch_setting, local_batch=local, device=self.device, probe=probe
        )
        if self.trainer.world_size > 1:  # every rank runs the same micro-batches: the smallest probed
            micro = int(self.all_gather(torch.tensor(micro, device=self.device)).min())
        self.micro_batch_size, self.micro_batch_note = micro, note
        if note is not None and self.trainer.is_global_zero:
            print(note, file=sys.stderr, flush=True)

    def _no_sync(self, last: bool):
        """DDP's gradient sync on the last micro-batch of a step only (none on one process)."""
        block = getattr(self.trainer.strategy, "block_backward_sync", None)
        return nullcontext() if last or block is None else block()

    def training_step(self, batch, batch_idx):
        """One optimiser step over this rank's rows of one global batch, in micro-batches.

        Order as Lightning's automatic optimisation had it: zero the gradients, forward and
        backward, clip the gradient norm, AdamW step, LR-schedule step. The optimiser and the
        schedule step even when the step diverged (then without gradients: nothing changes).
        """
        x, y = batch
        opt, sched = self.optimizers(), self.lr_schedulers()
        step = int(self.global_step)
        opt.zero_grad(set_to_none=True)
        parts = micro_slices(x.shape[0], self.micro_batch_size or x.shape[0])
        total = None
        for k, (rows, weight) in enumerate(parts):
            with self._no_sync(k == len(parts) - 1):
                loss = self.loss(self._forward(x[rows]), y[rows])
                if weight != 1.0:
                    loss = loss * weight
                # every micro-batch's backward runs even after a non-finite loss: under DDP the
                # other ranks wait in the last one's all-reduce (the gradients are dropped below)
                self.manual_backward(loss)
            total = loss.detach() if total is None else total + loss.detach()
        self._last_loss = total
        max_norm = self.cfg.grad_clip if self.cfg.grad_clip > 0 else float("inf")
        if self.sync_every_step:
            if self._any_rank(not torch.isfinite(total).all()):
                opt.zero_grad(set_to_none=True)
                several = self.trainer.world_size > 1
                self._mark_diverged(
                    f"non-finite training loss ({float(total)}"
                    + (" on this rank; non-finite on at least one)" if several else ")")
                )
            else:
                # after DDP's all-reduce every rank holds the same gradients, hence the same norm
                norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)
                self._grad_norm = norm
                self.last_grad_norm = float(norm)
                if not math.isfinite(self.last_grad_norm):
                    # drop the gradients so this optimiser step changes nothing, then stop
                    opt.zero_grad(set_to_none=True)
                    self._mark_diverged(f"non-finite gradient norm ({self.last_grad_norm})")
        else:
            self._grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)
            self._note_bad(step, total, self._grad_norm)
        opt.step()
        sched.step()

    def _note_bad(self, step: int, loss: torch.Tensor, norm: torch.Tensor) -> None:
        """Keep the first non-finite loss / gradient-norm step on the device (no host sync)."""
        values = torch.stack([loss.float(), norm.float()])
        if self._first_bad is None:
            self._first_bad = torch.full((2,), -1, dtype=torch.int64, device=values.device)
            self._bad_value = torch.zeros(2, dtype=torch.float32, device=values.device)
        bad = ~torch.isfinite(values) & (self._first_bad < 0)
        self._first_bad = torch.where(bad, torch.full_like(self._first_bad, step), self._first_bad)
        self._bad_value = torch.where(bad, values, self._bad_value)

    def poll_divergence(self) -> bool:
        """Read the device's divergence record (a host sync on CUDA; nothing to read elsewhere):
        mark the run diverged at its first non-finite step. Returns whether it diverged."""
        hits = []
        if self.diverged is None and self._first_bad is not None:
            first, value = self._first_bad.tolist(), self._bad_value.tolist()
            hits = [(s, i) for i, s in enumerate(first) if s >= 0]
            if hits:
                s, i = min(hits)
                what = "training loss" if i == 0 else "gradient norm"
                self._mark_diverged(f"non-finite {what} ({value[i]})", step=s)
        # a collective on every rank at the same points (never skipped by a rank that already knows)
        if self._any_rank(self.diverged is not None) and self.diverged is None:
            self._mark_diverged("non-finite training loss on another rank")  # stop alike
        return self.diverged is not None

    def record_train_step(self) -> None:
        """Record train loss, lr, grad norm and tokens/s every ``log_every`` steps (and at the
        last step). Called by :class:`~harness.train.progress.RunCallback` before it
        evaluates or checkpoints."""
        step = int(self.global_step)
        if step % self.log_every == 0 or step == self.total_steps:
            if self.poll_divergence():
                return
            now = time.perf_counter()
            tps = float("nan")
            if self._t_last is not None and now > self._t_last:
                tps = (self.tokens_seen - self._tokens_last) / (now - self._t_last)
            self._t_last, self._tokens_last = now, self.tokens_seen
            self.last_grad_norm = float(self._grad_norm) if self._grad_norm is not None else float("nan")
            self._record("train", "loss", float(self._last_loss))
            self._record("train", "lr", self.lr_schedulers().get_last_lr()[0])
            self._record("train", "grad_norm", self.last_grad_norm)
            if math.isfinite(tps):
                self._record("train", "tokens_per_s", tps)

    def _any_rank(self, flag) -> bool:
        """Whether ``flag`` holds on any rank: a decision every rank must take alike (skipping a
        step's update on one rank only would let the ranks' weights drift apart)."""
        flag = bool(flag)
        trainer = self._trainer
        if trainer is None or trainer.world_size < 2:
            return flag
        return trainer.strategy.reduce_boolean_decision(flag, all=False)

    def _mark_diverged(self, reason: str, step: int | None = None) -> None:
        step = int(self.global_step) if step is None else step
        self.diverged = {"step": step, "tokens": step * self.batch_tokens, "reason": reason}
        self.trainer.should_stop = True

    # -- evaluation -----------------------------------------------------------------
    @torch.no_grad()
    def evaluate(self, val_batches) -> dict:
        """Validation NLL (nats/token), bits-per-byte and perplexity over ``val_batches``
        (an iterable of ``(x, y)`` int64 ``[B, T]``), and routing rows on the same windows.

        Records ``val/nll``, ``val/bpb``, ``val/ppl`` at the current step, and appends the
        routing rows (DESIGN section 5, table ``routing``) to ``routing_rows`` and the
        degeneracy records (DESIGN section 3, tables ``route_pairs`` and ``route_params``) to
        ``pair_rows`` and ``param_rows``. Under DDP each rank evaluates its share of the
        fixed set (:meth:`~harness.data.datamodule.TokenDataModule.val_dataloader`) and the
        sums are added over the ranks, so every rank returns the same, global numbers.

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
        for batch_x, batch_y in val_batches:
            batch_x, batch_y = batch_x.to(self.device), batch_y.to(self.device)
            # in micro-batches, as training: never [B, T, V] float32 logits of a whole batch at once
            for rows, _ in micro_slices(batch_x.shape[0], self.micro_batch_size or batch_x.shape[0]):
                x, y = batch_x[rows], batch_y[rows]
                precision = (
                    self.trainer.precision_plugin.forward_context() if self._trainer else nullcontext()
                )
                with acc, precision:
                    logits = self.model(x)
                nll_sum += self.loss(logits, y, reduction="sum").double()
                n_tok += y.numel()
                n_bytes += self.token_bytes[y].sum().double()
        if was_training:
            self.model.train()
        if getattr(getattr(val_batches, "dataset", None), "rank_share", False):  # this rank's share: sum them
            acc.tokens = sum_over_ranks([nll_sum, n_tok, n_bytes, *acc.sum_tensors()], acc.tokens)
        nll = float(nll_sum / n_tok)
        out = {
            "nll": nll,
            "bpb": float(nll_sum / (math.log(2) * n_bytes)),
            "ppl": math.exp(min(nll, 700.0)),
            "tokens": int(n_tok),
            "bytes": int(n_bytes),
        }
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
        checkpoint["harness"] = {
            "records": self.records,
            "routing_rows": self.routing_rows,
            "pair_rows": self.pair_rows,
            "param_rows": self.param_rows,
            "diverged": self.diverged,
            "last_eval": self.last_eval,
            "wall_s": wall_s,
            "times": self.times.state(),
            "compiled": self._all_compiled() if self._compiled is not None else self._compiled_before,
        }

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        weights = checkpoint.get("state_dict", {})
        for key in [k for k in weights if k.startswith("_compiled.")]:
            del weights[key]  # a second copy of the weights, saved by compiled runs before it was left out
        state = checkpoint.get("harness", {})
        self.records = list(state.get("records", []))
        self.routing_rows = list(state.get("routing_rows", []))
        self.pair_rows = list(state.get("pair_rows", []))
        self.param_rows = list(state.get("param_rows", []))
        self.diverged = state.get("diverged")
        self.last_eval = state.get("last_eval")
        self.wall_s_before = float(state.get("wall_s", 0.0))
        self.times = RunTimes.from_state(state.get("times"))
        self._compiled_before = state.get("compiled")
