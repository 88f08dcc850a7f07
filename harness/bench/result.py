"""The benchmark's result: medians, paired ratios, MFU and targets assembled from raw samples into one JSON
document (:func:`assemble`), and its file (:func:`write_json`)."""

from __future__ import annotations

import datetime as dt
import json
import math
import platform
import socket
import statistics
import uuid
from pathlib import Path

import torch

from harness.bench import intervals
from harness.bench.flops import mfu as model_mfu
from harness.bench.ratios import loop_ratio, paired_summary, ratio_keys, ratio_targets, step_ratio_pairs
from harness.bench.routing_cost import routing_cost_fields, routing_pairs, routing_path_fields
from harness.bench.settings import LOOPS, PRECISION_RATIO, BenchConfig, default_precision, device_peak_flops
from harness.common.files import atomic_write
from harness.models import get_spec
from harness.models.flops import ROUTING_PATHS, model_flops_per_token, training_flops_per_token
from harness.models.sizes import derive, get_size
from harness.train.environment import hardware_class


def assemble(
    cfg: BenchConfig,
    variants: list[str],
    device: torch.device,
    batch_size: int,
    context: int,
    samples: dict[str, list[float]],
    peak_mb: dict[str, float],
    loops: dict[str, list[float]],
    n_params: dict[str, int],
    created: dt.datetime,
    precision_arms: dict[str, str] | None = None,
    micro_batch_note: str | None = None,
    micro_batches: int = 1,
    missing_arms: dict[str, str] | None = None,
    routing_arms: list[str] | None = None,
) -> dict:
    """Medians, paired ratios with intervals, MFU and targets from raw samples (pure function).

    MFU counts ``6 N + 12 L D T`` FLOPs per token (:mod:`harness.bench.flops`); it is ``None``
    when the device's bf16 peak is unknown (any CPU, an unlisted GPU), and ``mfu_note`` says why.
    ``micro_batch_note``: how the step's batch was chosen (the CUDA probe's line), if it was.
    A timed step is ``micro_batches`` micro-batches of ``batch_size`` sequences of ``context``
    tokens (``step_tokens``), as a training step (DESIGN section 11): tokens/s and MFU are of
    that step, ``micro_batch_ms`` is its time per micro-batch; ``batch_tokens`` stays one
    micro-batch's tokens (the loops' step).

    ``samples`` holds one step time per round (ms) per arm name: every variant, and the arms
    of ``precision_arms`` (``{"32-true": arm, "bf16-mixed": arm}``; one of them a variant).
    ``missing_arms``: arm name -> why it has no figures (an out-of-memory: an arm that does not fit is a finding, not a failed bench); the
    precision ratio is then ``None`` if it was one of the pair.
    ``routing_arms``: variants also timed on the per-site routing path (arm ``<variant>@per_site``):
    ``routing_paths`` holds their medians and the paired ratios two-phase / per-site. ``routing_cost`` is the
    bytes model's estimate.
    """
    batch_tokens = batch_size * context
    step_tokens = batch_tokens * micro_batches
    step_ms = {v: statistics.median(samples[v]) for v in variants}
    pairs = step_ratio_pairs(variants, precision_arms)
    summary = paired_summary(samples, pairs)
    ratios = {k: s["value"] for k, s in summary.items() if k != PRECISION_RATIO}
    mem_ratios = {f"{a}/{b}": peak_mb[a] / peak_mb[b] for a, b in ratio_keys(variants)}
    loop_tps = {name: batch_tokens / statistics.median(loops[name]) for name in LOOPS if loops.get(name)}
    if len(loop_tps) == 2:
        summary["lightning/bare"] = loop_ratio(loops)
        ratios["lightning/bare"] = summary["lightning/bare"]["value"]
    precision = _precision_fields(cfg, summary, samples, peak_mb, precision_arms, missing_arms)
    tokens_per_s = {v: step_tokens / (step_ms[v] / 1e3) for v in variants}
    mfu = _mfu(cfg, device, context, n_params, tokens_per_s, loop_tps)
    targets = ratio_targets(ratios, mem_ratios, summary)
    return {
        "size": cfg.size,
        "compile": cfg.compile,
        "threads": cfg.threads or torch.get_num_threads(),
        "torch": torch.__version__,
        "step_ms": step_ms,
        "peak_mem_mb": {v: peak_mb[v] for v in variants},
        "ratios": ratios,
        **_interval_fields(cfg, summary),
        **precision,
        "peak_mem_ratios": mem_ratios,
        "tokens_per_s": tokens_per_s,
        "loop_tokens_per_s": loop_tps,
        **mfu,
        "micro_batch_note": micro_batch_note,
        "missing_arms": missing_arms or {},
        "micro_batches": micro_batches,
        "micro_batch_ms": {v: ms / micro_batches for v, ms in step_ms.items()},
        "targets": targets,
        "n_params": n_params,
        "samples_ms": samples,
        "loop_samples_ms": {k: [1e3 * t for t in v] for k, v in loops.items()},
        "batch_size": batch_size,
        "context": context,
        "batch_tokens": batch_tokens,
        "step_tokens": step_tokens,
        "steps": len(next(iter(samples.values()))) if samples else 0,
        **_routing_fields(cfg, variants, samples, routing_arms or []),
        **_provenance(cfg, device, created),
    }


def _routing_fields(cfg: BenchConfig, variants: list[str], samples: dict, routed: list[str]) -> dict:
    """:func:`assemble`'s ``routing_paths`` (measured) and ``routing_cost`` (the bytes model's estimate)."""
    summary = paired_summary(samples, routing_pairs(routed))
    return {
        "routing_paths": routing_path_fields(samples, summary, routed),
        "routing_cost": routing_cost_fields(cfg.size, variants),
    }


def _interval_fields(cfg: BenchConfig, summary: dict) -> dict:
    """The ratios' intervals in :func:`assemble`'s result: ``ratio_intervals``, ``ratio_rounds`` and how they
    were computed (``intervals``: level, target width, each width)."""
    return {
        "ratio_intervals": {k: list(s["interval"]) if s["interval"] else None for k, s in summary.items()},
        "ratio_rounds": {k: s["n"] for k, s in summary.items()},
        "intervals": {
            "level": intervals.LEVEL,
            "target_width": cfg.interval_width,
            "widths": {k: s["width"] if math.isfinite(s["width"]) else None for k, s in summary.items()},
            "method": "median of the per-round paired ratios; distribution-free order-statistic "
            "interval for the median (binomial ranks)",
        },
    }


def _precision_fields(
    cfg: BenchConfig,
    summary: dict,
    samples: dict[str, list[float]],
    peak_mb: dict[str, float],
    precision_arms: dict[str, str] | None,
    missing_arms: dict[str, str] | None,
) -> dict:
    """The precision comparison's keys of :func:`assemble` (``precision_ratios``, ``precision_step_ms``,
    ``precision_arms``, ``precision_peak_mem_mb``): none without it, a ``None`` ratio when an arm is missing."""
    if precision_arms:
        return {
            "precision_ratios": {PRECISION_RATIO: summary[PRECISION_RATIO]["value"]},
            "precision_step_ms": {p: statistics.median(samples[a]) for p, a in precision_arms.items()},
            "precision_arms": precision_arms,
            "precision_peak_mem_mb": {p: peak_mb[a] for p, a in precision_arms.items() if a in peak_mb},
        }
    return {"precision_ratios": {PRECISION_RATIO: None}} if missing_arms and cfg.precision_ratio else {}


def _provenance(cfg: BenchConfig, device: torch.device, created: dt.datetime) -> dict:
    """Where and how :func:`assemble`'s result was measured: the device, the rounds asked for, the loops,
    the corpus and seed, the method, and the result's id, host and time."""
    return {
        "device": device.type,
        "device_name": _device_name(device),
        # the class a run on this device and precision records (DESIGN 13): the report's time multiplier per
        # class reads this bench's step ratios for it (DESIGN 14)
        "hardware": hardware_class(device.type, default_precision(device), bool(cfg.compile)),
        "min_steps": cfg.steps,
        "max_steps": cfg.max_steps,
        "warmup": cfg.warmup,
        "loop_variant": cfg.loop_variant,
        "loop_steps": cfg.loop_steps,
        "loop_rounds": cfg.loop_rounds,
        "corpus": cfg.corpus or "synthetic",
        "seed": cfg.seed,
        "method": METHOD[device.type],
        "bench_id": f"bench-{created:%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}",
        "host": socket.gethostname(),
        "created_at": created.isoformat(),
    }


def _mfu(
    cfg: BenchConfig, device: torch.device, context: int, n_params: dict, tokens_per_s: dict, loop_tps: dict
) -> dict:
    """``mfu`` (per variant and loop; ``None`` without a known bf16 peak, ``mfu_note`` says why),
    ``flops_per_token`` (``6 N + 12 L D T``, :mod:`harness.bench.flops`), ``training_flops_per_token`` (routing
    included, :func:`harness.models.flops.training_flops_per_token`) and ``peak_flops`` of the device."""
    peak, why = device_peak_flops(device, cfg.peak_tflops)
    preset = get_size(cfg.size)
    flops = {
        v: model_flops_per_token(n, preset.n_layers, preset.d_model, context) for v, n in n_params.items()
    }
    shape = derive(cfg.size, context=context)
    spent = {}  # routing included: what the report's compute multiplier charges a variant (DESIGN 14)
    for v, n in n_params.items():
        name, _, arm = v.partition("@")  # an arm: variant@per_site, variant@bf16-mixed
        spent[v] = training_flops_per_token(
            get_spec(name), shape, n, arm if arm in ROUTING_PATHS else "two_phase"
        )
    mfu = None
    if peak:
        mfu = {v: model_mfu(flops[v], tps, peak) for v, tps in tokens_per_s.items()}
        mfu.update({name: model_mfu(flops[cfg.loop_variant], tps, peak) for name, tps in loop_tps.items()})
    return {
        "mfu": mfu,
        "mfu_note": None if peak else why,
        "flops_per_token": flops,
        "training_flops_per_token": spent,
        "peak_flops": peak,
    }


METHOD = {
    "cpu": {
        "step_ms": "median over interleaved rounds of one step (micro_batches x (fwd+loss+bwd), clip, AdamW) "
        "per variant, rotated order; "
        "ratios: median of the per-round ratios",
        "peak_mem_mb": "params+buffers+optimiser state + peak of torch.profiler CPU allocator events over "
        "one step (grads freed first)",
        "loop": "B*T / median seconds per loop iteration (end of step to end of next step, after warmup), "
        "alternating Lightning/bare rounds",
    },
    "cuda": {
        "step_ms": "median over interleaved rounds of one step (micro_batches x (fwd+loss+bwd), clip, fused "
        "AdamW), cuda.synchronize around each step, bf16 autocast; "
        "ratios: median of the per-round ratios",
        "peak_mem_mb": "params+buffers+optimiser state + (cuda.max_memory_allocated - allocated at step start)",
        "loop": "B*T / median seconds per loop iteration, alternating rounds (Lightning bf16-mixed, "
        "bare bf16 autocast)",
    },
}


def _device_name(device: torch.device) -> str:
    """The device's name: the GPU's, or the CPU's as the platform reports it."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return platform.processor() or platform.machine()


def write_json(result: dict, path: Path) -> Path:
    """Write ``result`` to ``path`` atomically (temporary file, then rename)."""
    return atomic_write(path, json.dumps(result, indent=2, allow_nan=False) + "\n")


__all__ = ["METHOD", "assemble", "write_json"]
