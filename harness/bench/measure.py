"""The whole benchmark: data, the variants' step arms, the loops, then :func:`~harness.bench.result.assemble`."""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import numpy as np
import torch

from harness.bench.loop import loop_throughput
from harness.bench.profile import compare, kernel_profiling, profile_steps
from harness.bench.ratios import narrow_enough, step_ratio_pairs
from harness.bench.result import assemble
from harness.bench.routing_cost import routing_pairs, routing_path_arms
from harness.bench.settings import (
    MAX_DEFAULT_BATCH,
    PARENT,
    PRECISION_RATIO,
    BenchConfig,
    autocast,
    default_precision,
    default_variants,
    other_precision,
    resolve_device,
)
from harness.bench.steps import StepArm, fit_arms, peak_step_bytes, time_steps
from harness.common.terms import utc_now
from harness.data import PreparedCorpus, prepare_corpus, token_dtype
from harness.data.datamodule import TrainSchedule
from harness.design.config import corpus_key, train_config
from harness.models import build_model, count_params
from harness.models.sizes import get_size
from harness.train.microbatch import MEMORY_FRACTION, probe_micro_batch
from harness.train.trainer import cpu_bf16_support, enable_tf32

# -- data -----------------------------------------------------------------------------


def synthetic_corpus(folder: Path, vocab_size: int, context: int, n_windows: int, seed: int):
    """A :class:`~harness.data.PreparedCorpus` of uniform random tokens in ``folder``.

    ``n_windows`` training windows of ``context + 1`` tokens and one validation window;
    every token is 1 byte for bits-per-byte purposes (never evaluated here).
    """

    folder.mkdir(parents=True, exist_ok=True)
    dtype = token_dtype(vocab_size)
    rng = np.random.default_rng([seed, 7])
    splits = {}
    for split, n in (("train", n_windows * context + 1), ("val", context + 1)):
        shard = {"file": f"{split}-00000.bin", "tokens": n}  # one shard per split, the corpus format
        rng.integers(0, vocab_size, size=n).astype(dtype.newbyteorder("<")).tofile(folder / shard["file"])
        splits[split] = {"tokens": n, "shards": [shard]}
    np.save(folder / "token_bytes.npy", np.ones(vocab_size, dtype=np.int64))
    meta = {
        "tokenizer": {"name": "synthetic", "vocab_size": vocab_size, "eos_id": 0},
        "splits": splits,
        "synthetic": True,
    }
    return PreparedCorpus(
        dir=folder,
        vocab_size=vocab_size,
        dtype=dtype.name,
        fingerprint=f"synthetic-{vocab_size}-{seed}",
        meta=meta,
    )


def _prepare_data(cfg: BenchConfig, folder: Path, batch_size: int, n_steps: int):
    """The loops' corpus: ``cfg.corpus`` prepared like a run, or synthetic tokens."""
    preset = get_size(cfg.size)
    if cfg.corpus:
        return prepare_corpus(
            corpus_key(cfg.corpus, cfg.size, train_config(cfg.size)), cache_dir=Path(cfg.cache_dir)
        )
    return synthetic_corpus(folder, preset.vocab_size, preset.context, batch_size * max(n_steps, 2), cfg.seed)


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
    old_tf32 = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    enable_tf32(device.type)  # float32 matmuls as a run on this device does them (TF32 on CUDA)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    # every variant (and each loop's model) compiles its own graph of the same forward code
    torch._dynamo.config.recompile_limit = max(old_limit, 4 * len(variants) + 8)
    preset = get_size(cfg.size)
    batch_size, micro_note = _step_batch(cfg, device, len(variants) + bool(cfg.precision_ratio))
    micro_batches = _micro_batches(cfg, device, batch_size)
    if micro_note:
        say(micro_note)
    created = utc_now()
    try:
        with tempfile.TemporaryDirectory(prefix="harness-bench-") as tmp:
            prepared = _prepare_data(cfg, Path(tmp) / "data", batch_size, cfg.warmup + cfg.loop_steps)
            x, y = _first_batch(prepared, preset.context, batch_size, cfg.seed)
            total_steps = cfg.warmup + cfg.steps + 1
            say(
                f"building {len(variants)} variants ({cfg.size}, a step of {micro_batches} micro-batch(es) of "
                f"{batch_size} x {preset.context} tokens, {'compiled' if cfg.compile else 'eager'}, {device.type})"
            )
            # Inductor's CPU kernels show in a profile only if compiled with the marks on
            with kernel_profiling(bool(cfg.profile_rounds) and cfg.compile and device.type == "cpu"):
                every_arm, precision_arms = _arms(
                    cfg, variants, device, (x, y), prepared.vocab_size, total_steps, say, micro_batches
                )
                arms = [arm for arm in every_arm if not arm.failed]
                pairs = _live_pairs(_pairs(cfg, variants, precision_arms), arms)
                samples, peak_mb, profile = _measure(cfg, arms, pairs, say)
                arms = [arm for arm in arms if not arm.failed]
            n_params = {arm.name: arm.n_params for arm in arms}
            missing = {arm.name: arm.failed for arm in every_arm if arm.failed}
            del arms, every_arm
            loops = _loops(cfg, prepared, device, batch_size, Path(tmp) / "lightning", n_params, say)
    finally:
        torch.set_num_threads(old_threads)
        torch._dynamo.config.recompile_limit = old_limit
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old_tf32
    if precision_arms and not set(precision_arms.values()) <= set(peak_mb):
        precision_arms = None  # one of the pair is out: no ratio (missing_arms says why)
    result = assemble(
        cfg,
        [v for v in variants if v in peak_mb],
        device,
        batch_size,
        preset.context,
        samples,
        peak_mb,
        loops,
        n_params,
        created,
        precision_arms,
        micro_batch_note=micro_note,
        micro_batches=micro_batches,
        missing_arms=missing,
        routing_arms=[v for v in routing_path_arms(cfg, variants) if f"{v}@per_site" in peak_mb],
    )
    if profile is not None:
        result["profile"] = profile
    return result


def _pairs(cfg: BenchConfig, variants: list[str], precision_arms: dict | None) -> dict[str, tuple[str, str]]:
    """Every timed ratio's ``(arm a, arm b)``: the variants', the precision pair's, two-phase/per-site."""
    return {**step_ratio_pairs(variants, precision_arms), **routing_pairs(routing_path_arms(cfg, variants))}


def _arms(
    cfg: BenchConfig,
    variants: list[str],
    device: torch.device,
    batch,
    vocab_size: int,
    total_steps: int,
    say,
    micro_batches: int = 1,
) -> tuple[list[StepArm], dict | None]:
    """A :class:`StepArm` per variant, plus (``--precision-ratio``) the parent in the other precision, timed
    in the same rounds; and ``precision -> arm name`` of that pair (``None`` without it). Every arm's
    step is ``micro_batches`` micro-batches of ``batch``, and every arm has run one step
    (:func:`~harness.bench.steps.fit_arms`): the other-precision arm at a smaller micro-batch (same
    step tokens) if it did not fit, an arm that still ran out of memory with ``failed`` set."""
    arms = [
        StepArm(v, cfg, device, batch, vocab_size, total_steps, micro_batches=micro_batches) for v in variants
    ]
    arms += [
        StepArm(
            v, cfg, device, batch, vocab_size, total_steps, micro_batches=micro_batches, routing="per_site"
        )
        for v in routing_path_arms(cfg, variants)
    ]
    if not cfg.precision_ratio:
        fit_arms(arms, set(), say)
        return arms, None
    base = PARENT if PARENT in variants else variants[0]
    extra = StepArm(
        base,
        cfg,
        device,
        batch,
        vocab_size,
        total_steps,
        precision=other_precision(device),
        micro_batches=micro_batches,
    )
    arms.append(extra)
    support = cpu_bf16_support() if device.type == "cpu" else ""
    say(f"precision: {base} also in {extra.precision} ({support})")
    fit_arms(arms, {extra.name}, say)  # its own micro-batch: float32 needs more memory than bf16
    if extra.micro_batches != micro_batches:
        say(
            f"{extra.name}: {extra.micro_batches} micro-batches of {extra.x.shape[0]} (the others: {micro_batches})"
        )
    return arms, {default_precision(device): base, extra.precision: extra.name}


def _measure(cfg: BenchConfig, arms: list[StepArm], pairs: dict, say) -> tuple[dict, dict, dict | None]:
    """``(samples, peak_mb, profile)`` of ``arms`` (each has run its first warmup step, :func:`_arms`):
    the interleaved step times, one step's peak memory each, and the ``--profile`` rounds. An arm that
    runs out of memory is left out from there on (``failed`` set)."""
    more = (
        f", up to {cfg.max_steps} until every interval is narrower than {100 * cfg.interval_width:g} %"
        if cfg.max_steps > cfg.steps
        else ""
    )
    say(f"timing {cfg.steps} interleaved rounds{more} after {cfg.warmup} warmup step(s) per arm")
    samples = time_steps(
        arms,
        cfg.steps,
        cfg.warmup - 1,  # the first warmup step was fit_arms'
        max_steps=cfg.max_steps,
        enough=narrow_enough(cfg.interval_width, pairs),
        progress=say,
    )
    say(f"measuring peak memory, one step per arm ({len(next(iter(samples.values()), []))} rounds timed)")
    arms = [arm for arm in arms if not arm.failed]  # out of memory while timed
    peak_mb = {v: b / 2**20 for v, b in peak_step_bytes(arms, say).items()}
    arms = [arm for arm in arms if not arm.failed]
    if not cfg.profile_rounds:
        return samples, peak_mb, None
    return samples, peak_mb, _profile(arms, cfg.profile_rounds, _live_pairs(pairs, arms), say)


def _live_pairs(pairs: dict[str, tuple[str, str]], arms: list[StepArm]) -> dict[str, tuple[str, str]]:
    """The ratio pairs both of whose arms are still in ``arms`` (none left out after an out-of-memory)."""
    live = {arm.name for arm in arms if not arm.failed}
    return {key: pair for key, pair in pairs.items() if set(pair) <= live}


def _loops(
    cfg: BenchConfig, prepared, device: torch.device, batch_size: int, root: Path, n_params: dict, say
) -> dict[str, list[float]]:
    """The Lightning and bare loops' iteration times (:func:`loop_throughput`; ``{}`` without loop rounds);
    the loop variant's parameter count is added to ``n_params`` when no arm had it."""
    if not cfg.loop_rounds:
        return {}
    say(
        f"Lightning vs bare loop ({cfg.loop_variant}): {cfg.loop_rounds} round(s) of "
        f"{cfg.warmup} + {cfg.loop_steps} steps"
    )
    loops = loop_throughput(cfg, prepared, device, batch_size, root)
    if cfg.loop_variant not in n_params:
        n_params[cfg.loop_variant] = count_params(
            build_model(cfg.loop_variant, cfg.size, seed=cfg.seed, vocab_size=prepared.vocab_size)
        )["total"]
    return loops


def _step_batch(cfg: BenchConfig, device: torch.device, n_arms: int) -> tuple[int, str | None]:
    """Sequences per timed step, and the CUDA probe's line when it chose them.

    ``cfg.batch_size`` when set. Else on a CPU the preset's global batch, at most
    :data:`MAX_DEFAULT_BATCH` (the CPU ratios stay as they were measured); on CUDA the
    micro-batch a run would use (:func:`harness.train.microbatch.probe_micro_batch` on the
    parent, in the device's precision), with the memory the other ``n_arms - 1`` arms hold
    (parameters, gradients, AdamW moments: 16 bytes a parameter) set aside.
    """
    preset = get_size(cfg.size)
    rows = max(1, train_config(cfg.size).batch_tokens // preset.context)
    if cfg.batch_size:
        return cfg.batch_size, None
    if device.type != "cuda":
        return min(rows, MAX_DEFAULT_BATCH), None

    model = build_model(PARENT, cfg.size, seed=cfg.seed, vocab_size=preset.vocab_size).to(device)
    others = (n_arms - 1) * 16 * count_params(model)["total"]
    budget = int(MEMORY_FRACTION * torch.cuda.get_device_properties(device).total_memory) - others
    try:
        return probe_micro_batch(
            model,
            local_batch=rows,
            context=preset.context,
            vocab_size=preset.vocab_size,
            device=device,
            forward_context=lambda: autocast(device),
            budget_bytes=budget,
        )
    finally:
        del model
        torch.cuda.empty_cache()


def _micro_batches(cfg: BenchConfig, device: torch.device, batch_size: int) -> int:
    """Micro-batches per timed step: ``cfg.micro_batches`` when set; else on CUDA the preset's
    global batch in micro-batches of ``batch_size`` sequences (rounded up: the step trains at
    least the global batch), and 1 on a CPU (:class:`~harness.bench.settings.BenchConfig`)."""
    if cfg.micro_batches:
        return cfg.micro_batches
    if device.type != "cuda":
        return 1
    rows = max(1, train_config(cfg.size).batch_tokens // get_size(cfg.size).context)
    return math.ceil(rows / batch_size)


def _profile(arms, rounds: int, pairs, say) -> dict:
    """The ``profile`` entry of the result (:mod:`harness.bench.profile`); a profiler failure
    is recorded there (``error``) and printed, and the timings already taken are kept."""
    say(f"profiling {rounds} interleaved round(s)")
    try:
        arms_profile = profile_steps(arms, rounds)
    except Exception as exc:  # the timing result must not be lost to a profiler problem
        say(f"profile failed: {type(exc).__name__}: {exc}")
        return {"rounds": rounds, "error": f"{type(exc).__name__}: {exc}"}
    cuda = arms[0].device.type == "cuda"
    # every pair as step time a / step time b, the precision pair too (its ratio key is a
    # throughput ratio, fp32 time / bf16 time, which would flip the sign of its differences)
    time_pairs = dict(pairs)
    if PRECISION_RATIO in time_pairs:
        fp32, bf16 = time_pairs.pop(PRECISION_RATIO)
        time_pairs[f"{bf16}/{fp32}"] = (bf16, fp32)
    return {
        "rounds": rounds,
        "time": "self CUDA time" if cuda else "self CPU time",
        "arms": arms_profile,
        "pairs": compare(arms_profile, time_pairs),
    }


def _first_batch(prepared, context: int, batch_size: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    return TrainSchedule(prepared, context, batch_size, seed).batch(0)
