"""Routing overhead and harness overhead, measured interleaved (``harness bench``, DESIGN section 7).

Two measurements, each interleaved in one process (A B A B ...) so that machine drift
(other jobs on a shared machine, clock changes) falls on every arm alike:

1. **Training-step time per variant.** One step (:func:`train_step`) = forward,
   cross-entropy, backward, gradient clipping, AdamW step with the parameter groups of
   :class:`harness.lit.LitLM`, in the order of Lightning's automatic optimisation, on one
   fixed batch. After ``warmup`` steps per variant (the first one compiles under
   ``--compile``), each of ``steps`` rounds runs one step of every variant, in an order
   rotated by one each round (round ``r`` starts with variant ``r mod n``). Reported:
   the median over rounds, in milliseconds, and ``batch_tokens / step_s`` in tokens/s.
2. **Harness overhead.** The Lightning training loop (a ``Trainer`` configured like
   :mod:`harness.runner`, :class:`~harness.lit.LitLM`,
   :class:`~harness.datamodule.TokenDataModule`) against a bare PyTorch loop over the same
   batches: same initial weights, same :func:`train_step` (AdamW groups, LR schedule,
   clipping), same ``DataLoader`` of :class:`~harness.datamodule.TrainBatches`.
   ``loop_rounds`` rounds alternate which loop goes first; each round runs ``warmup``
   steps, then times each of ``loop_steps`` iterations from the end of one step to the end
   of the next (data loading and every hook included). Reported: ``B * T`` tokens over
   the median iteration time, in tokens/s.

**Peak memory** of a variant's training step, in MiB (2^20 bytes): the bytes its
persistent state holds (parameters, buffers, optimiser state) plus the largest number of
bytes allocated above the step's start at any moment during one step, which starts with
the gradients freed (so they count once, in the step). On CUDA the latter is ``torch.cuda.max_memory_allocated()`` minus
``torch.cuda.memory_allocated()`` at the step's start; on CPU it is the running sum, in
time order, of the allocator events that ``torch.profiler`` records with
``profile_memory=True``. Both count tensor memory only (not the allocator's cache, code
or the Python heap), so variants compare on the same footing.

**Ratios** (DESIGN section 7): ``block_attnres/prenorm``, ``rd_attnres/block_attnres`` and
``<control>/block_attnres`` are ratios of median step times (lower is better);
``lightning/bare`` is the ratio of median tokens/s (higher is better). Peak-memory
ratios against the parent are reported separately (``peak_mem_ratios``).

**MFU** (model FLOPs utilisation) = ``6 * N_params * tokens_per_s / peak_flops``, the
6N FLOPs per trained token of Kaplan et al. 2020 (arXiv 2001.08361, section 2.1), with
the device's dense bf16 peak from :data:`PEAK_FLOPS` or ``peak_tflops``.

On CUDA, steps run under bf16 autocast (the Lightning loop under ``bf16-mixed``), and
timings synchronise the device before reading the clock.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import platform
import socket
import statistics
import tempfile
import sys
import time
import uuid
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from harness.config import get_size, train_config
from harness.files import atomic_write

PARENT = "block_attnres"
REFERENCE = "prenorm"
TREATMENT = "rd_attnres"
LOOPS = ("lightning", "bare")
MAX_DEFAULT_BATCH = 32  # sequences: the paper presets' 512-sequence batches do not fit one step

#: Dense bf16 peak FLOP/s by a substring of ``torch.cuda.get_device_name()`` (vendor data
#: sheets; H100/H200 SXM 989.4 TFLOP/s, A100 312 TFLOP/s). First match wins.
PEAK_FLOPS: dict[str, float] = {"H200": 989e12, "H100": 989e12, "A100": 312e12}

#: Goals of the benchmark issue: ratio key -> (comparison, bound). Step-time ratios and
#: ``lightning/bare`` live in ``ratios``; ``mem:`` keys in ``peak_mem_ratios``.
TARGETS: dict[str, tuple[str, float]] = {
    "block_attnres/prenorm": ("<=", 1.05),
    "rd_attnres/block_attnres": ("<=", 1.02),
    "<control>/block_attnres": ("<=", 1.02),
    "lightning/bare": (">=", 0.97),
    "mem:rd_attnres/block_attnres": ("<=", 1.05),
}


@dataclass(frozen=True)
class BenchConfig:
    """Settings of one benchmark.

    Attributes:
        size: size preset (``tiny``, ``small``, ``120m``, ``343m``).
        variants: variants to time; empty = :func:`default_variants`.
        compile: wrap every model in ``torch.compile``.
        steps: timed rounds (one step of every variant per round).
        warmup: untimed steps per variant (and per loop round) before timing, >= 1.
        batch_size: sequences per step (0 = the preset's training batch, at most 32).
        loop_variant: the variant trained by the Lightning and bare loops.
        loop_steps: timed steps per loop round.
        loop_rounds: rounds of (Lightning, bare) loops; 0 skips the loop comparison.
        corpus: corpus spec for the loops' data (None = synthetic uniform tokens).
        cache_dir: prepared-corpus cache (needed with ``corpus``).
        device: ``auto`` (CUDA when available), ``cpu`` or ``cuda``.
        threads: torch CPU threads (0 = torch's default).
        seed: initialisation and data seed.
        peak_tflops: device peak TFLOP/s for MFU (0 = look up :data:`PEAK_FLOPS`).
    """

    size: str = "small"
    variants: tuple[str, ...] = ()
    compile: bool = False
    steps: int = 20
    warmup: int = 3
    batch_size: int = 0
    loop_variant: str = PARENT
    loop_steps: int = 10
    loop_rounds: int = 3
    corpus: str | None = None
    cache_dir: Path | None = None
    device: str = "auto"
    threads: int = 0
    seed: int = 0
    peak_tflops: float = 0.0

    def __post_init__(self) -> None:
        from harness.models import get_spec

        get_size(self.size)  # ValueError names the valid sizes
        for v in (*self.variants, self.loop_variant):
            get_spec(v)  # ValueError names the valid variants
        if len(set(self.variants)) != len(self.variants):
            raise ValueError(f"variants listed twice: {list(self.variants)}")
        for name, low in (("steps", 1), ("warmup", 1), ("batch_size", 0), ("loop_steps", 1),
                          ("loop_rounds", 0), ("threads", 0), ("seed", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name}={value!r} must be an integer >= {low}")
        if self.device not in ("auto", "cpu", "cuda"):
            raise ValueError(f"device={self.device!r}; allowed: 'auto', 'cpu', 'cuda'")
        if self.device == "cuda" and not torch.cuda.is_available():
            raise ValueError("device='cuda' but torch sees no CUDA device")
        if not (self.peak_tflops >= 0 and math.isfinite(self.peak_tflops)):
            raise ValueError(f"peak_tflops={self.peak_tflops} must be a finite number >= 0")
        if self.corpus and self.cache_dir is None:
            raise ValueError("a corpus needs a cache_dir for the prepared tokens")


def default_variants() -> list[str]:
    """``prenorm``, ``block_attnres``, ``rd_attnres``, then every control spec (table order)."""
    from harness.models import available_variants, get_spec

    controls = [v for v in available_variants() if get_spec(v).role == "control"]
    return [REFERENCE, PARENT, TREATMENT, *controls]


def resolve_device(name: str) -> torch.device:
    """``auto`` -> ``cuda`` when available, else ``cpu``."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(name)


def device_peak_flops(device: torch.device, peak_tflops: float = 0.0) -> float | None:
    """Peak FLOP/s for MFU: ``peak_tflops * 1e12`` if given, else :data:`PEAK_FLOPS` by
    CUDA device name; None when unknown (e.g. any CPU)."""
    if peak_tflops:
        return peak_tflops * 1e12
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((flops for key, flops in PEAK_FLOPS.items() if key in name), None)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _autocast(device: torch.device):
    return torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else nullcontext()


# -- data -----------------------------------------------------------------------------


def synthetic_corpus(folder: Path, vocab_size: int, context: int, n_windows: int, seed: int):
    """A :class:`~harness.data.PreparedCorpus` of uniform random tokens in ``folder``.

    ``n_windows`` training windows of ``context + 1`` tokens and one validation window;
    every token is 1 byte for bits-per-byte purposes (never evaluated here).
    """
    from harness.data import PreparedCorpus, token_dtype

    folder.mkdir(parents=True, exist_ok=True)
    dtype = token_dtype(vocab_size)
    rng = np.random.default_rng([seed, 7])
    for split, n in (("train", n_windows * context + 1), ("val", context + 1)):
        rng.integers(0, vocab_size, size=n).astype(dtype.newbyteorder("<")).tofile(folder / f"{split}.bin")
    np.save(folder / "token_bytes.npy", np.ones(vocab_size, dtype=np.int64))
    meta = {"tokenizer": {"name": "synthetic", "vocab_size": vocab_size, "eos_id": 0}, "synthetic": True}
    return PreparedCorpus(dir=folder, vocab_size=vocab_size, dtype=dtype.name,
                          fingerprint=f"synthetic-{vocab_size}-{seed}", meta=meta)


def _prepare_data(cfg: BenchConfig, folder: Path, batch_size: int, n_steps: int):
    """The loops' corpus: ``cfg.corpus`` prepared like a run, or synthetic tokens."""
    preset = get_size(cfg.size)
    train = train_config(cfg.size)
    if cfg.corpus:
        from harness.data import prepare_corpus

        return prepare_corpus(cfg.corpus, cache_dir=Path(cfg.cache_dir),
                              vocab_size=train.vocab_size or preset.vocab_size, tokenizer=train.tokenizer,
                              val_fraction=train.val_fraction)
    return synthetic_corpus(folder, preset.vocab_size, preset.context, batch_size * max(n_steps, 2), cfg.seed)


# -- one variant's training step --------------------------------------------------------


def train_step(forward, model, opt, sched, x, y, max_norm: float, device: torch.device) -> None:
    """One optimiser step in the order of Lightning's automatic optimisation (as under
    :class:`harness.lit.LitLM`): forward and loss, ``zero_grad(set_to_none=True)``,
    backward, gradient clipping, AdamW step, LR-schedule step.

    The order matters on CPU: it decides which buffers the allocator can reuse (the last
    step's gradients live through the forward), which moves step times by ~10 %.
    """
    with _autocast(device):
        logits = forward(x)
    loss = F.cross_entropy(logits.float().flatten(0, 1), y.flatten())
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    opt.step()
    sched.step()


class StepArm:
    """One variant's model, optimiser and :func:`train_step` on a fixed batch."""

    def __init__(self, variant: str, cfg: BenchConfig, device: torch.device, batch: tuple[torch.Tensor, torch.Tensor],
                 vocab_size: int, total_steps: int) -> None:
        from harness.lit import LitLM
        from harness.models import build_model, count_params

        self.variant = variant
        self.device = device
        self.model = build_model(variant, cfg.size, seed=cfg.seed, vocab_size=vocab_size).to(device)
        self.n_params = count_params(self.model)["total"]
        self.train = train_config(cfg.size)
        x, y = batch
        self.x, self.y = x.to(device), y.to(device)
        # LitLM only supplies the optimiser groups and schedule (and turns off token checks).
        lit = LitLM(self.model, self.train, total_steps=total_steps, batch_tokens=x.numel(),
                    token_bytes=torch.ones(vocab_size, dtype=torch.int64))
        opt = lit.configure_optimizers()
        self.opt, self.sched = opt["optimizer"], opt["lr_scheduler"]["scheduler"]
        self.forward = torch.compile(self.model) if cfg.compile else self.model
        self.max_norm = self.train.grad_clip if self.train.grad_clip > 0 else float("inf")

    def step(self) -> None:
        train_step(self.forward, self.model, self.opt, self.sched, self.x, self.y, self.max_norm, self.device)

    def free_grads(self) -> None:
        """Drop the gradients (``set_to_none``), leaving only persistent state."""
        self.opt.zero_grad(set_to_none=True)

    def persistent_bytes(self) -> int:
        """Bytes of parameters, buffers and optimiser state (each storage counted once;
        gradients are counted in the step's transient part, see :func:`peak_step_bytes`)."""
        tensors = [*self.model.parameters(), *self.model.buffers()]
        for state in self.opt.state.values():
            tensors.extend(t for t in state.values() if torch.is_tensor(t))
        seen: dict[tuple, int] = {}
        for t in tensors:
            storage = t.untyped_storage()
            seen[(t.device.type, storage.data_ptr())] = storage.nbytes()
        return sum(seen.values())


def time_steps(arms: list[StepArm], steps: int, warmup: int) -> dict[str, list[float]]:
    """Interleaved per-step times in ms: ``{variant: [steps values]}`` (see module docstring)."""
    device = arms[0].device
    for arm in arms:
        for _ in range(warmup):
            arm.step()
    _sync(device)
    times: dict[str, list[float]] = {arm.variant: [] for arm in arms}
    n = len(arms)
    for r in range(steps):
        for k in range(n):
            arm = arms[(r + k) % n]
            _sync(device)
            t0 = time.perf_counter()
            arm.step()
            _sync(device)
            times[arm.variant].append((time.perf_counter() - t0) * 1e3)
    return times


@contextmanager
def _quiet_stderr():
    """Silence file descriptor 2 (Kineto prints two log lines at every profiler start/stop)."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def peak_step_bytes(arms: list[StepArm]) -> dict[str, int]:
    """Peak tensor bytes of one training step of each arm (module docstring, "Peak memory").

    On CPU all arms run in one profiler session; each step is marked with
    ``record_function`` and its allocator events are summed within its own window.
    """
    device = arms[0].device
    out: dict[str, int] = {}
    if device.type == "cuda":
        for arm in arms:
            arm.free_grads()
            _sync(device)
            start = torch.cuda.memory_allocated(device)
            torch.cuda.reset_peak_memory_stats(device)
            arm.step()
            _sync(device)
            out[arm.variant] = arm.persistent_bytes() + torch.cuda.max_memory_allocated(device) - start
        return out
    from torch.profiler import ProfilerActivity, profile, record_function

    for arm in arms:  # the last step's gradients: freed before profiling, so every free is seen
        arm.free_grads()
    prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
    with _quiet_stderr():
        prof.start()
    try:
        for i, arm in enumerate(arms):
            with record_function(f"harness-bench-step/{i}"):
                arm.step()
    finally:
        with _quiet_stderr():
            prof.stop()
    events = list(prof.profiler.kineto_results.events())
    windows = {e.name(): (e.start_ns(), e.end_ns()) for e in events if e.name().startswith("harness-bench-step/")}
    memory = sorted((e.start_ns(), e.nbytes()) for e in events if e.name() == "[memory]")
    for i, arm in enumerate(arms):
        lo, hi = windows[f"harness-bench-step/{i}"]
        running = transient = 0
        for t, nbytes in memory:  # +bytes for an allocation, -bytes for a free, in time order
            if lo <= t <= hi:
                running += nbytes
                transient = max(transient, running)
        out[arm.variant] = arm.persistent_bytes() + transient
    return out


# -- Lightning loop against a bare loop ---------------------------------------------------


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

    from harness.datamodule import TokenDataModule, TrainBatches
    from harness.lit import LitLM
    from harness.models import build_model
    from harness.runner import _quiet_lightning

    _quiet_lightning()
    context = get_size(cfg.size).context
    train = train_config(cfg.size, compile=cfg.compile)
    n_steps = cfg.warmup + cfg.loop_steps
    batch_tokens = batch_size * context
    dm = TokenDataModule(prepared, context, batch_size, cfg.seed, eval_tokens=context)
    token_bytes = torch.from_numpy(prepared.token_bytes())

    def lit_for(model) -> LitLM:
        return LitLM(model, train, total_steps=n_steps, batch_tokens=batch_tokens, token_bytes=token_bytes,
                     log_every=max(1, n_steps // 100))  # as harness.runner

    lit = lit_for(build_model(cfg.loop_variant, cfg.size, seed=cfg.seed, vocab_size=prepared.vocab_size))
    bare_model = build_model(cfg.loop_variant, cfg.size, seed=cfg.seed, vocab_size=prepared.vocab_size).to(device)
    bare_lit = lit_for(bare_model)  # optimiser groups and schedule only; also turns off token checks
    bare_forward = torch.compile(bare_model) if cfg.compile else bare_model
    max_norm = train.grad_clip if train.grad_clip > 0 else float("inf")

    class Clock(L.Callback):
        def __init__(self) -> None:
            self.stamps: list[float] = []

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            _sync(device)
            self.stamps.append(time.perf_counter())

    def iterations(stamps: list[float]) -> list[float]:
        return [stamps[i] - stamps[i - 1] for i in range(cfg.warmup, n_steps)]

    def run_lightning() -> list[float]:
        clock = Clock()
        trainer = L.Trainer(
            accelerator="gpu" if device.type == "cuda" else "cpu", devices=1,
            precision="bf16-mixed" if device.type == "cuda" else "32-true", max_steps=n_steps, logger=False,
            enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
            num_sanity_val_steps=0, limit_val_batches=0, use_distributed_sampler=False, callbacks=[clock],
            default_root_dir=root,
        )
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
            _sync(device)
            stamps.append(time.perf_counter())
        return iterations(stamps)

    out: dict[str, list[float]] = {"lightning": [], "bare": []}
    for r in range(cfg.loop_rounds):
        order = ("lightning", "bare") if r % 2 == 0 else ("bare", "lightning")
        for name in order:
            out[name].extend(run_lightning() if name == "lightning" else run_bare())
    return out


# -- the whole benchmark ---------------------------------------------------------------


def ratio_keys(variants: list[str]) -> list[tuple[str, str]]:
    """``(numerator, denominator)`` step-time pairs of DESIGN section 7 among ``variants``."""
    pairs = []
    if REFERENCE in variants and PARENT in variants:
        pairs.append((PARENT, REFERENCE))
    if PARENT in variants:
        pairs += [(v, PARENT) for v in variants if v not in (PARENT, REFERENCE)]
    return pairs


def target_for(key: str, kind: str = "time") -> tuple[str, float] | None:
    """The issue's goal for a ratio key (``kind`` ``time`` or ``mem``), or None."""
    from harness.models import get_spec

    if kind == "mem":
        return TARGETS.get(f"mem:{key}")
    if key in TARGETS:
        return TARGETS[key]
    num, _, den = key.partition("/")
    if den == PARENT and num != TREATMENT and get_spec(num).role == "control":
        return TARGETS["<control>/block_attnres"]
    return None


def meets(value: float | None, target: tuple[str, float] | None) -> bool | None:
    """Whether ``value`` meets ``target`` (None when either is missing)."""
    if value is None or target is None:
        return None
    op, bound = target
    return value <= bound if op == "<=" else value >= bound


def run_bench(cfg: BenchConfig, *, progress=None) -> dict:
    """Run the benchmark and return its result (the JSON of DESIGN section 7, plus details).

    Keys: ``size``, ``compile``, ``threads``, ``torch``, ``step_ms`` (variant -> median ms),
    ``peak_mem_mb`` (variant -> MiB), ``ratios`` (step-time ratios and ``lightning/bare``),
    and further ``peak_mem_ratios``, ``tokens_per_s`` (variant -> training-step tokens/s),
    ``loop_tokens_per_s`` (``lightning``/``bare`` -> median tokens/s), ``mfu`` (or None),
    ``samples_ms`` / ``loop_samples_ms`` (raw per-step times), ``targets``, ``n_params``,
    ``method``, ``device``, ``batch_size``, ``context``, ``steps``, ``warmup``, ``bench_id``,
    ``host``, ``created_at``.

    ``progress`` (optional callable taking a string) receives one line per phase.

    Raises:
        ValueError: bad settings (see :class:`BenchConfig`).
    """
    say = progress or (lambda msg: None)
    variants = list(cfg.variants) or default_variants()
    device = resolve_device(cfg.device)
    old_threads, old_limit = torch.get_num_threads(), torch._dynamo.config.recompile_limit
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    # every variant (and each loop's model) compiles its own graph of the same forward code
    torch._dynamo.config.recompile_limit = max(old_limit, 4 * len(variants) + 8)
    preset = get_size(cfg.size)
    batch_size = cfg.batch_size or max(1, min(train_config(cfg.size).batch_tokens // preset.context, MAX_DEFAULT_BATCH))
    created = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
    try:
        with tempfile.TemporaryDirectory(prefix="harness-bench-") as tmp:
            prepared = _prepare_data(cfg, Path(tmp) / "data", batch_size, cfg.warmup + cfg.loop_steps)
            x, y = _first_batch(prepared, preset.context, batch_size, cfg.seed)
            total_steps = cfg.warmup + cfg.steps + 1
            say(f"building {len(variants)} variants ({cfg.size}, batch {batch_size} x {preset.context} tokens, "
                f"{'compiled' if cfg.compile else 'eager'}, {device.type})")
            arms = [StepArm(v, cfg, device, (x, y), prepared.vocab_size, total_steps) for v in variants]
            say(f"timing {cfg.steps} interleaved rounds after {cfg.warmup} warmup step(s) per variant")
            samples = time_steps(arms, cfg.steps, cfg.warmup)
            say("measuring peak memory, one step per variant")
            peak_mb = {v: b / 2**20 for v, b in peak_step_bytes(arms).items()}
            n_params = {arm.variant: arm.n_params for arm in arms}
            del arms
            loops: dict[str, list[float]] = {}
            if cfg.loop_rounds:
                say(f"Lightning vs bare loop ({cfg.loop_variant}): {cfg.loop_rounds} round(s) of "
                    f"{cfg.warmup} + {cfg.loop_steps} steps")
                loops = loop_throughput(cfg, prepared, device, batch_size, Path(tmp) / "lightning")
                if cfg.loop_variant not in n_params:
                    from harness.models import build_model, count_params

                    n_params[cfg.loop_variant] = count_params(
                        build_model(cfg.loop_variant, cfg.size, seed=cfg.seed, vocab_size=prepared.vocab_size))["total"]
    finally:
        torch.set_num_threads(old_threads)
        torch._dynamo.config.recompile_limit = old_limit
    return assemble(cfg, variants, device, batch_size, preset.context, samples, peak_mb, loops, n_params, created)


def _first_batch(prepared, context: int, batch_size: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    from harness.datamodule import TrainSchedule

    return TrainSchedule(prepared, context, batch_size, seed).batch(0)


def assemble(cfg: BenchConfig, variants: list[str], device: torch.device, batch_size: int, context: int,
             samples: dict[str, list[float]], peak_mb: dict[str, float], loops: dict[str, list[float]],
             n_params: dict[str, int], created: dt.datetime) -> dict:
    """Medians, ratios, MFU and targets from raw samples (pure function of its inputs)."""
    batch_tokens = batch_size * context
    step_ms = {v: statistics.median(samples[v]) for v in variants}
    ratios = {f"{a}/{b}": step_ms[a] / step_ms[b] for a, b in ratio_keys(variants)}
    mem_ratios = {f"{a}/{b}": peak_mb[a] / peak_mb[b] for a, b in ratio_keys(variants)}
    loop_tps = {name: batch_tokens / statistics.median(loops[name]) for name in LOOPS if loops.get(name)}
    if len(loop_tps) == 2:
        ratios["lightning/bare"] = loop_tps["lightning"] / loop_tps["bare"]
    tokens_per_s = {v: batch_tokens / (step_ms[v] / 1e3) for v in variants}
    peak = device_peak_flops(device, cfg.peak_tflops)
    mfu = None
    if peak:
        mfu = {v: 6 * n_params[v] * tokens_per_s[v] / peak for v in variants}
        mfu.update({name: 6 * n_params[cfg.loop_variant] * tps / peak for name, tps in loop_tps.items()})
    targets = {}
    for kind, table in (("time", ratios), ("mem", mem_ratios)):
        for key, value in table.items():
            target = target_for(key, kind)
            if target:
                targets[f"mem:{key}" if kind == "mem" else key] = {
                    "value": value, "op": target[0], "bound": target[1], "met": meets(value, target)}
    return {
        "size": cfg.size, "compile": cfg.compile, "threads": cfg.threads or torch.get_num_threads(),
        "torch": torch.__version__,
        "step_ms": step_ms, "peak_mem_mb": peak_mb, "ratios": ratios,
        "peak_mem_ratios": mem_ratios, "tokens_per_s": tokens_per_s, "loop_tokens_per_s": loop_tps,
        "mfu": mfu, "peak_flops": peak, "targets": targets, "n_params": n_params,
        "samples_ms": samples, "loop_samples_ms": {k: [1e3 * t for t in v] for k, v in loops.items()},
        "device": device.type, "device_name": _device_name(device), "batch_size": batch_size, "context": context,
        "batch_tokens": batch_tokens, "steps": cfg.steps, "warmup": cfg.warmup, "loop_variant": cfg.loop_variant,
        "loop_steps": cfg.loop_steps, "loop_rounds": cfg.loop_rounds, "corpus": cfg.corpus or "synthetic",
        "seed": cfg.seed, "method": METHOD[device.type],
        "bench_id": f"bench-{created:%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}", "host": socket.gethostname(),
        "created_at": created.isoformat(),
    }


METHOD = {
    "cpu": {
        "step_ms": "median over interleaved rounds of one step (fwd+loss+bwd+clip+AdamW) per variant, rotated order",
        "peak_mem_mb": "params+buffers+optimiser state + peak of torch.profiler CPU allocator events over "
                       "one step (grads freed first)",
        "loop": "B*T / median seconds per loop iteration (end of step to end of next step, after warmup), "
                "alternating Lightning/bare rounds",
    },
    "cuda": {
        "step_ms": "median over interleaved rounds, cuda.synchronize around each step, bf16 autocast",
        "peak_mem_mb": "params+buffers+optimiser state + (cuda.max_memory_allocated - allocated at step start)",
        "loop": "B*T / median seconds per loop iteration, alternating rounds (Lightning bf16-mixed, "
                "bare bf16 autocast)",
    },
}


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return platform.processor() or platform.machine()


def bench_rows(result: dict) -> list[dict]:
    """Rows for the DuckDB table ``bench`` (``db/schema.sql``): one per variant (its step
    time, peak memory, training-step tokens/s) and one per loop (``lightning``, ``bare``:
    ms per step and tokens/s of the loop, no peak memory)."""
    common = {k: result[k] for k in ("bench_id", "created_at", "host", "size", "compile", "threads")}
    common["torch_version"] = result["torch"]
    info = {k: result[k] for k in ("device", "device_name", "batch_size", "context", "steps", "warmup")}
    rows = []
    for v, ms in result["step_ms"].items():
        ratio = result["ratios"].get(f"{v}/{PARENT}") if v != PARENT else 1.0
        extra = {"kind": "step", **info, "n_params": result["n_params"][v], "ratio_vs_parent": ratio,
                 "mem_ratio_vs_parent": result["peak_mem_ratios"].get(f"{v}/{PARENT}") if v != PARENT else 1.0,
                 "mfu": result["mfu"][v] if result["mfu"] else None}
        rows.append({**common, "variant": v, "step_ms": ms, "peak_mem_mb": result["peak_mem_mb"][v],
                     "tokens_per_s": result["tokens_per_s"][v], "extra": extra})
    for name, tps in result["loop_tokens_per_s"].items():
        extra = {"kind": "loop", **info, "model_variant": result["loop_variant"], "loop_steps": result["loop_steps"],
                 "rounds": result["loop_rounds"], "lightning/bare": result["ratios"].get("lightning/bare"),
                 "mfu": result["mfu"][name] if result["mfu"] else None}
        rows.append({**common, "variant": name, "step_ms": result["batch_tokens"] / tps * 1e3, "peak_mem_mb": None,
                     "tokens_per_s": tps, "extra": extra})
    return rows


def write_json(result: dict, path: Path) -> Path:
    """Write ``result`` to ``path`` atomically (temporary file, then rename)."""
    return atomic_write(path, json.dumps(result, indent=2, allow_nan=False) + "\n")


def format_report(result: dict) -> str:
    """Human-readable table of medians, ratios against the parent and the issue's targets."""
    lines = [
        f"harness bench: size {result['size']}, {'compiled' if result['compile'] else 'eager'}, "
        f"{result['device']} ({result['device_name']}), {result['threads']} thread(s), torch {result['torch']}",
        f"batch {result['batch_size']} x {result['context']} tokens; {result['steps']} interleaved rounds after "
        f"{result['warmup']} warmup step(s); medians",
        "",
    ]
    parent_ms = result["step_ms"].get(PARENT)
    parent_mb = result["peak_mem_mb"].get(PARENT)
    head = f"{'variant':<16} {'step_ms':>9} {'vs parent':>9} {'tokens/s':>10} {'peak_MiB':>9} {'vs parent':>9}"
    if result["mfu"]:
        head += f" {'MFU':>6}"
    lines += [head, "-" * len(head)]
    for v, ms in result["step_ms"].items():
        mb = result["peak_mem_mb"][v]
        rel = f"{ms / parent_ms:9.3f}" if parent_ms else f"{'':9}"
        rel_mb = f"{mb / parent_mb:9.3f}" if parent_mb else f"{'':9}"
        line = f"{v:<16} {ms:9.1f} {rel} {result['tokens_per_s'][v]:10.0f} {mb:9.1f} {rel_mb}"
        if result["mfu"]:
            line += f" {100 * result['mfu'][v]:5.1f}%"
        lines.append(line)
    if result["loop_tokens_per_s"]:
        lines.append("")
        lines.append(f"training loop ({result['loop_variant']}, {result['loop_rounds']} rounds x "
                     f"{result['loop_steps']} steps): " + ", ".join(
                         f"{k} {v:,.0f} tokens/s" for k, v in result["loop_tokens_per_s"].items()))
    lines.append("")
    lines.append("ratios against the issue's targets:")
    for key, t in result["targets"].items():
        mark = "ok" if t["met"] else "MISSED"
        lines.append(f"  {key:<34} {t['value']:7.3f}  (target {t['op']} {t['bound']})  {mark}")
    others = [k for k in result["ratios"] if k not in result["targets"]]
    for key in others:
        lines.append(f"  {key:<34} {result['ratios'][key]:7.3f}")
    lines.append("")
    lines.append("method: " + "; ".join(f"{k}: {v}" for k, v in result["method"].items()))
    return "\n".join(lines)


__all__ = [
    "BenchConfig", "run_bench", "default_variants", "bench_rows", "write_json", "format_report", "assemble",
    "time_steps", "peak_step_bytes", "loop_throughput", "StepArm", "train_step", "synthetic_corpus",
    "device_peak_flops", "PEAK_FLOPS", "TARGETS",
]
