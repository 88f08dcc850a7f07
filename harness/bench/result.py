"""From raw samples to the result: medians, ratios, targets, the JSON, DuckDB rows, the table."""

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
from harness.bench.flops import model_flops_per_token
from harness.bench.profile import format_profile
from harness.bench.routing_cost import format_routing, routing_cost_fields, routing_pairs, routing_path_fields
from harness.bench.settings import (
    LOOPS,
    PARENT,
    PRECISION_RATIO,
    REFERENCE,
    TARGETS,
    TREATMENT,
    BenchConfig,
    device_peak_flops,
)
from harness.common.files import atomic_write
from harness.models import get_spec
from harness.models.sizes import get_size

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


def step_ratio_pairs(
    variants: list[str], precision_arms: dict[str, str] | None = None
) -> dict[str, tuple[str, str]]:
    """Ratio key -> ``(arm a, arm b)`` whose per-round ratio is ``t_a / t_b``: the step-time
    ratios of :func:`ratio_keys`, and ``bf16/fp32`` (``t_fp32 / t_bf16``, a throughput
    ratio) when ``precision_arms`` (``{"32-true": arm, "bf16-mixed": arm}``) is given."""
    pairs = {f"{a}/{b}": (a, b) for a, b in ratio_keys(variants)}
    if precision_arms:
        pairs[PRECISION_RATIO] = (precision_arms["32-true"], precision_arms["bf16-mixed"])
    return pairs


def paired_summary(samples: dict[str, list[float]], pairs: dict[str, tuple[str, str]]) -> dict[str, dict]:
    """Per ratio key: ``value`` (median of the per-round ratios), ``interval`` (95 %,
    :func:`~harness.bench.intervals.median_interval`, or None), ``width`` (relative) and ``n``.
    A pair with an arm that has no samples (left out after an out-of-memory) has no entry."""
    out = {}
    for key, (a, b) in pairs.items():
        if a not in samples or b not in samples:
            continue
        rs = intervals.paired_ratios(samples[a], samples[b])
        ci = intervals.median_interval(rs)
        out[key] = {
            "value": statistics.median(rs),
            "interval": ci,
            "width": intervals.relative_width(rs, ci),
            "n": len(rs),
        }
    return out


def narrow_enough(width: float, pairs: dict[str, tuple[str, str]]):
    """``enough(samples)`` for :func:`~harness.bench.steps.time_steps`: every ratio of
    ``pairs`` has a 95 % interval narrower than ``width`` (relative)."""

    def enough(samples: dict[str, list[float]]) -> bool:
        return all(s["width"] < width for s in paired_summary(samples, pairs).values())

    return enough


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
        summary["lightning/bare"] = _loop_ratio(loops)
        ratios["lightning/bare"] = summary["lightning/bare"]["value"]
    precision = _precision_fields(cfg, summary, samples, peak_mb, precision_arms, missing_arms)
    tokens_per_s = {v: step_tokens / (step_ms[v] / 1e3) for v in variants}
    mfu = _mfu(cfg, device, context, n_params, tokens_per_s, loop_tps)
    targets = _targets(ratios, mem_ratios, summary)
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


def _loop_ratio(loops: dict[str, list[float]]) -> dict:
    """The Lightning/bare tokens/s ratio (= bare s / Lightning s) as a paired summary: iteration i of a
    Lightning round against iteration i of the bare round beside it."""
    rs = intervals.paired_ratios(loops["bare"], loops["lightning"])
    ci = intervals.median_interval(rs)
    return {
        "value": statistics.median(rs),
        "interval": ci,
        "width": intervals.relative_width(rs, ci),
        "n": len(rs),
    }


def _mfu(
    cfg: BenchConfig, device: torch.device, context: int, n_params: dict, tokens_per_s: dict, loop_tps: dict
) -> dict:
    """``mfu`` (per variant and loop; ``None`` without a known bf16 peak, ``mfu_note`` says why),
    ``flops_per_token`` (``6 N + 12 L D T``, :mod:`harness.bench.flops`) and ``peak_flops`` of the device."""
    peak, why = device_peak_flops(device, cfg.peak_tflops)
    preset = get_size(cfg.size)
    flops = {
        v: model_flops_per_token(n, preset.n_layers, preset.d_model, context) for v, n in n_params.items()
    }
    mfu = None
    if peak:
        mfu = {v: model_mfu(flops[v], tps, peak) for v, tps in tokens_per_s.items()}
        mfu.update({name: model_mfu(flops[cfg.loop_variant], tps, peak) for name, tps in loop_tps.items()})
    return {"mfu": mfu, "mfu_note": None if peak else why, "flops_per_token": flops, "peak_flops": peak}


def _targets(ratios: dict, mem_ratios: dict, summary: dict) -> dict:
    """Each ratio with a goal (:func:`target_for`): a step-time ratio judged by its interval, a memory ratio
    (one measurement per variant) by its value; memory keys prefixed ``mem:``."""
    targets = {}
    for kind, table in (("time", ratios), ("mem", mem_ratios)):
        for key, value in table.items():
            target = target_for(key, kind)
            if not target:
                continue
            entry = {"value": value, "op": target[0], "bound": target[1]}
            if kind == "time":
                ci = summary[key]["interval"]
                verdict = intervals.judge(ci, *target)
                entry.update(
                    interval=list(ci) if ci else None,
                    verdict=verdict,
                    met={"met": True, "not met": False}.get(verdict),
                )
            else:  # one measurement per variant: no interval, judged by the value
                entry.update(interval=None, met=meets(value, target))
                entry["verdict"] = "met" if entry["met"] else "not met"
            targets[f"mem:{key}" if kind == "mem" else key] = entry
    return targets


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
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return platform.processor() or platform.machine()


def bench_rows(result: dict) -> list[dict]:
    """Rows for the DuckDB table ``bench`` (``db/schema.sql``): one per variant (its step
    time, peak memory, training-step tokens/s), one for the other-precision arm
    (``variant@bf16-mixed``, ``extra.kind = 'precision'``), one per per-site arm of ``--per-site``
    (``variant@per_site``, ``extra.kind = 'routing_path'`` with its ``two_phase/per_site`` ratio; no
    peak memory: it is not measured for these arms) and one per loop (``lightning``,
    ``bare``: ms per step and tokens/s of the loop, no peak memory). With ``--profile`` a
    variant's ``extra.profile_ms`` holds its ms per step by profile category."""
    common = {k: result[k] for k in ("bench_id", "created_at", "host", "size", "compile", "threads")}
    common["torch_version"] = result["torch"]
    info = {k: result[k] for k in ("device", "device_name", "batch_size", "context", "steps", "warmup")}
    step_tokens = result.get("step_tokens", result["batch_tokens"])  # tokens of one training step
    rows = []
    intervals_ = result.get("ratio_intervals", {})
    profiled = (result.get("profile") or {}).get("arms", {})
    for v, ms in result["step_ms"].items():
        ratio = result["ratios"].get(f"{v}/{PARENT}") if v != PARENT else 1.0
        extra = {
            "kind": "step",
            **info,
            "n_params": result["n_params"][v],
            "ratio_vs_parent": ratio,
            "ratio_interval": intervals_.get(f"{v}/{PARENT}"),
            "mem_ratio_vs_parent": result["peak_mem_ratios"].get(f"{v}/{PARENT}") if v != PARENT else 1.0,
            "mfu": result["mfu"][v] if result["mfu"] else None,
            "profile_ms": profiled[v]["categories"] if v in profiled else None,
        }
        rows.append(
            {
                **common,
                "variant": v,
                "step_ms": ms,
                "peak_mem_mb": result["peak_mem_mb"][v],
                "tokens_per_s": result["tokens_per_s"][v],
                "extra": extra,
            }
        )
    for precision, arm in (result.get("precision_arms") or {}).items():
        if arm in result["step_ms"]:
            continue  # the variant's own row
        ms = result["precision_step_ms"][precision]
        extra = {
            "kind": "precision",
            **info,
            "model_variant": arm.split("@")[0],
            "precision": precision,
            PRECISION_RATIO: result["precision_ratios"][PRECISION_RATIO],
            "ratio_interval": intervals_.get(PRECISION_RATIO),
            "profile_ms": profiled[arm]["categories"] if arm in profiled else None,
        }
        rows.append(
            {
                **common,
                "variant": arm,
                "step_ms": ms,
                "peak_mem_mb": result["precision_peak_mem_mb"].get(precision),
                "tokens_per_s": step_tokens / (ms / 1e3),
                "extra": extra,
            }
        )
    paths = result.get("routing_paths") or {}
    for arm, ms in paths.get("step_ms", {}).items():
        if arm in result["step_ms"]:
            continue  # the two-phase arm: the variant's own row
        model_variant = arm.split("@")[0]
        key = f"{model_variant}: two_phase/per_site"
        extra = {
            "kind": "routing_path",
            **info,
            "model_variant": model_variant,
            "routing": "per_site",
            "two_phase/per_site": paths["ratios"].get(key),
            "ratio_interval": paths["ratio_intervals"].get(key),
            "profile_ms": profiled[arm]["categories"] if arm in profiled else None,
        }
        rows.append(
            {
                **common,
                "variant": arm,
                "step_ms": ms,
                "peak_mem_mb": None,
                "tokens_per_s": step_tokens / (ms / 1e3),
                "extra": extra,
            }
        )
    for name, tps in result["loop_tokens_per_s"].items():
        extra = {
            "kind": "loop",
            **info,
            "model_variant": result["loop_variant"],
            "loop_steps": result["loop_steps"],
            "rounds": result["loop_rounds"],
            "lightning/bare": result["ratios"].get("lightning/bare"),
            "mfu": result["mfu"][name] if result["mfu"] else None,
        }
        rows.append(
            {
                **common,
                "variant": name,
                "step_ms": result["batch_tokens"] / tps * 1e3,
                "peak_mem_mb": None,
                "tokens_per_s": tps,
                "extra": extra,
            }
        )
    return rows


def write_json(result: dict, path: Path) -> Path:
    """Write ``result`` to ``path`` atomically (temporary file, then rename)."""
    return atomic_write(path, json.dumps(result, indent=2, allow_nan=False) + "\n")


def format_report(result: dict) -> str:
    """Human-readable table of medians, ratios against the parent and the issue's targets."""
    lines = [
        f"harness bench: size {result['size']}, {'compiled' if result['compile'] else 'eager'}, "
        f"{result['device']} ({result['device_name']}), {result['threads']} thread(s), torch {result['torch']}",
        f"a step of {result.get('micro_batches', 1)} micro-batch(es) of {result['batch_size']} x "
        f"{result['context']} tokens, one clip and AdamW step; {result['steps']} interleaved rounds after "
        f"{result['warmup']} warmup step(s); medians",
    ]
    if result.get("micro_batch_note"):
        lines.append(result["micro_batch_note"])
    if result.get("flops_per_token"):
        lines.append(
            "model FLOPs per token (6 N + 12 L D T): "
            + ", ".join(f"{v} {f / 1e9:.3f} G" for v, f in result["flops_per_token"].items())
        )
    if result.get("mfu_note"):
        lines.append(result["mfu_note"])
    lines.append("")
    lines += _variant_table(result)
    if result["loop_tokens_per_s"]:
        lines.append("")
        lines.append(
            f"training loop ({result['loop_variant']}, {result['loop_rounds']} rounds x "
            f"{result['loop_steps']} steps): "
            + ", ".join(f"{k} {v:,.0f} tokens/s" for k, v in result["loop_tokens_per_s"].items())
        )
    lines += [f"n/a {name}: {why}" for name, why in result.get("missing_arms", {}).items()]
    if result.get("precision_step_ms"):
        ms = result["precision_step_ms"]
        lines.append("")
        lines.append(
            f"precision ({result['precision_arms']['32-true'].split('@')[0]}, interleaved): "
            + ", ".join(f"{p} {v:.1f} ms" for p, v in ms.items())
        )
    lines.append("")
    lines += _ratio_lines(result)
    width = result["intervals"]["target_width"]
    wide = [k for k, w in result["intervals"]["widths"].items() if w is None or w >= width]
    if wide:
        lines.append(
            f"  intervals wider than {100 * width:g} %: {', '.join(wide)} (more --steps / --max-steps, "
            "or a quieter machine)"
        )
    for key, t in result["targets"].items():
        if key.startswith("mem:"):
            lines.append(
                f"  {key:<30} {t['value']:7.3f}  (one step each)  goal {t['op']} {t['bound']}: {t['verdict']}"
            )
    lines += format_routing(result)
    if result.get("profile"):
        lines.append("")
        lines += format_profile(result["profile"])
    lines.append("")
    lines.append("method: " + "; ".join(f"{k}: {v}" for k, v in result["method"].items()))
    return "\n".join(lines)


def _variant_table(result: dict) -> list[str]:
    """The per-variant table: step ms, tokens/s and peak MiB, each against the parent (and MFU if known)."""
    parent_ms = result["step_ms"].get(PARENT)
    parent_mb = result["peak_mem_mb"].get(PARENT)
    head = (
        f"{'variant':<16} {'step_ms':>9} {'vs parent':>9} {'tokens/s':>10} {'peak_MiB':>9} {'vs parent':>9}"
    )
    micro = result.get("micro_batches", 1) > 1  # the time per micro-batch beside the whole step's
    if micro:
        head += f" {'micro_ms':>9}"
    if result["mfu"]:
        head += f" {'MFU':>6}"
    lines = [head, "-" * len(head)]
    for v, ms in result["step_ms"].items():
        mb = result["peak_mem_mb"][v]
        rel = f"{ms / parent_ms:9.3f}" if parent_ms else f"{'':9}"
        rel_mb = f"{mb / parent_mb:9.3f}" if parent_mb else f"{'':9}"
        line = f"{v:<16} {ms:9.1f} {rel} {result['tokens_per_s'][v]:10.0f} {mb:9.1f} {rel_mb}"
        if micro:
            line += f" {result['micro_batch_ms'][v]:9.1f}"
        if result["mfu"]:
            line += f" {100 * result['mfu'][v]:5.1f}%"
        lines.append(line)
    return lines


def _ratio_lines(result: dict) -> list[str]:
    """The ratios with their intervals, rounds and goal verdicts."""
    ci_head = f"{int(100 * result['intervals']['level'])} % interval"
    lines = [f"ratios (median of per-round paired ratios; {ci_head}; goal judged against the interval):"]
    for key in [*result["ratios"], *result.get("precision_ratios", {})]:
        value = result["ratios"].get(key, result.get("precision_ratios", {}).get(key))
        if value is None:
            lines.append(f"  {key:<30}     n/a  (an arm ran out of memory: missing_arms)")
            continue
        ci = result["ratio_intervals"].get(key)
        span = f"[{ci[0]:.3f}, {ci[1]:.3f}]" if ci else f"{'(too few rounds)':>16}"
        line = f"  {key:<30} {value:7.3f}  {span}  n={result['ratio_rounds'][key]:<4}"
        t = result["targets"].get(key)
        if t:
            line += f" goal {t['op']} {t['bound']}: {t['verdict']}"
        elif key == PRECISION_RATIO:  # a throughput ratio among step-time ratios: say which way it reads
            line += " tokens/s: above 1, bf16 is faster"
        lines.append(line)
    return lines


__all__ = [
    "METHOD",
    "ratio_keys",
    "target_for",
    "meets",
    "step_ratio_pairs",
    "paired_summary",
    "narrow_enough",
    "assemble",
    "bench_rows",
    "write_json",
    "format_report",
]
