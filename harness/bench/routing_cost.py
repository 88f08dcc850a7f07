"""Depth routing's memory traffic and FLOPs per token, and a roofline estimate of its share of a
training step (an estimate from shapes and dtypes; on a GPU the measured profile replaces it).

Routing's arithmetic is a few tenths of a percent of a step's FLOPs; what costs is memory: each
site reads its sources (a ``[B, T, D]`` tensor each) and writes its routes. The model counts, per
token, the ``D``-element vectors a training step (forward + backward) reads and writes in routing,
times ``D * dtype_bytes`` (the sources, partial sums and routes are float32 under bf16 autocast,
DESIGN section 11, so ``dtype_bytes = 4``). Per-token tensors without a ``D`` axis (logits,
``1/rms``, maxima, denominators) are left out: they are ``1/D`` of the traffic. It assumes each
pass below is one fused kernel (as ``torch.compile`` makes them), so a source is read once per pass.

Per-site path (a site over ``n = S + p`` sources, ``S`` completed, ``p`` = 1 with the in-progress
partial, ``R`` routes), :func:`~harness.models.routing.mix_routes`:

* forward: reads ``2 n`` (a logits pass, then the mix pass after the softmax), writes ``R``;
* backward: reads ``R`` (the routes' gradients) + ``n`` (the sources) + ``n`` (their gradients,
  accumulated: read-modify-write), writes ``n``.

Two-phase path (Attention Residuals, arXiv 2603.15031, section 4), per block with ``S`` completed
sources and ``N`` = the routes of all its sites (:class:`~harness.models.routing.BlockPrefix`):

* phase 1 forward: reads ``2 S`` (logits of all ``N`` queries, then all ``N`` partial sums), writes
  ``N`` (the partial sums ``acc``); phase 1 backward: reads ``N`` (the ``acc`` gradients) + ``S`` +
  ``S`` (accumulated source gradients), writes ``S``;
* phase 2 per site (:func:`~harness.models.routing.merge_partial`), forward: reads ``R`` (its
  ``acc`` rows) + ``2 p`` (the partial: logits, mix), writes ``R``; backward: reads ``R`` (route
  gradients) + ``R`` (``acc``, for the correction's gradient) + ``2 p`` (the partial and its
  accumulated gradient), writes ``R`` (``acc`` gradients) + ``p``.

FLOPs per token: :func:`harness.models.flops.routing_flops_per_token` (the one count, shared with the
report's compute multiplier).

Roofline: routing's time per token is ``bytes / bandwidth`` (it is memory-bound: ~1 FLOP per byte
against a GPU's ~300), the rest of the step ``model FLOPs / (peak * MFU)``
(:mod:`harness.bench.flops`), and the share is ``t_routing / (t_routing + t_rest)``: at ``MFU = 1``
(the roofline, an upper bound on the share) and at the project's 45 % MFU goal.
"""

from __future__ import annotations

import statistics

import torch

from harness.bench.peaks import MEMORY_BANDWIDTH, PEAK_FLOPS
from harness.models import count_params, get_spec
from harness.models.flops import model_flops_per_token, routing_blocks, routing_flops_per_token
from harness.models.gpt import DepthRoutedLM
from harness.models.sizes import ModelConfig, derive
from harness.models.spec import VariantSpec

PARENT = "block_attnres"

#: The MFU the project aims at (DESIGN section 11): the second roofline share uses it.
MFU_GOAL = 0.45
#: Sequences per micro-batch of the estimate at 120m/343m (the paper's 1,024-token context);
#: the per-token model does not depend on it, it is recorded with the estimate.
PAPER_MICRO_BATCH = 8


def routing_traffic(spec: VariantSpec, cfg: ModelConfig, path: str, dtype_bytes: int = 4) -> dict[str, float]:
    """Routing's bytes and FLOPs per token of a training step on ``path`` (the module docstring).

    Returns:
        ``{"fwd_read", "fwd_write", "bwd_read", "bwd_write", "bytes", "flops"}``: bytes per token
        (``bytes`` = their sum) and FLOPs per token (forward + backward).

    Raises:
        ValueError: ``path`` is not ``two_phase`` or ``per_site``.
    """
    if path not in ("two_phase", "per_site"):
        raise ValueError(f"routing path {path!r}; allowed: two_phase, per_site")
    fr = fw = br = bw = 0  # in D-vectors per token
    for block in routing_blocks(spec, cfg):
        if path == "per_site":
            for s in block:
                n = s.completed + s.partial
                fr, fw = fr + 2 * n, fw + s.routes
                br, bw = br + s.routes + 2 * n, bw + n
            continue
        S, N = block[0].completed, sum(s.routes for s in block)
        fr, fw, br, bw = fr + 2 * S, fw + N, br + N + 2 * S, bw + S
        for s in block:
            p = int(s.partial)
            fr, fw = fr + s.routes + 2 * p, fw + s.routes
            br, bw = br + 2 * s.routes + 2 * p, bw + s.routes + p
    unit = cfg.d_model * dtype_bytes
    out = {"fwd_read": fr * unit, "fwd_write": fw * unit, "bwd_read": br * unit, "bwd_write": bw * unit}
    out["bytes"] = sum(out.values())
    out["flops"] = routing_flops_per_token(spec, cfg, path)
    return out


def roofline(
    spec: VariantSpec, cfg: ModelConfig, n_params: int, devices: list[str] | None = None
) -> dict[str, dict]:
    """Routing's estimated share of a training step per device and path (module docstring).

    Args:
        n_params: the model's parameter count (a tied embedding once), for ``6 N + 12 L D T``.
        devices: names in :data:`~harness.bench.peaks.MEMORY_BANDWIDTH` (default: all of them).

    Returns:
        ``{device: {path: {"routing_us_per_ktoken", "share_at_peak", "share_at_mfu_goal"}}}``:
        routing's microseconds per 1,000 tokens and its share of the step (fractions).
    """
    flops = model_flops_per_token(n_params, cfg.n_layers, cfg.d_model, cfg.context)
    out: dict[str, dict] = {}
    for name in devices or list(MEMORY_BANDWIDTH):
        bw, peak = MEMORY_BANDWIDTH[name], PEAK_FLOPS[name][0]
        per_path = {}
        for path in ("per_site", "two_phase"):
            t_r = routing_traffic(spec, cfg, path)["bytes"] / bw  # s per token
            t_peak, t_goal = flops / peak, flops / (peak * MFU_GOAL)
            per_path[path] = {
                "routing_us_per_ktoken": 1e9 * t_r,
                "share_at_peak": t_r / (t_r + t_peak),
                "share_at_mfu_goal": t_r / (t_r + t_goal),
            }
        out[name] = per_path
    return out


def routing_path_arms(cfg, variants: list[str]) -> list[str]:
    """The variants timed on the per-site routing path too (``cfg.per_site``, a
    :class:`~harness.bench.settings.BenchConfig`): every routed one."""
    return [v for v in variants if get_spec(v).residual != "prenorm"] if cfg.per_site else []


def routing_pairs(variants: list[str]) -> dict[str, tuple[str, str]]:
    """``"<variant>: two_phase/per_site"`` -> ``(variant, variant@per_site)`` (a step-time ratio)."""
    return {f"{v}: two_phase/per_site": (v, f"{v}@per_site") for v in variants}


def routing_cost_fields(size: str, variants: list[str]) -> dict:
    """The bench JSON's ``routing_cost``: routing's bytes and FLOPs per token of a training step on
    both paths at ``size`` (and at 120m and 343m), and the roofline share per device at 120m and
    343m (:mod:`harness.bench.routing_cost`), for the routed ``variants`` (the parent and the
    treatment at least). An estimate from shapes and dtypes, not a measurement."""
    routed = [
        v for v in dict.fromkeys([PARENT, "rd_attnres", *variants]) if get_spec(v).residual != "prenorm"
    ]
    per_token = {}
    for s in dict.fromkeys([size, "120m", "343m"]):
        model_cfg = derive(s)
        per_token[s] = {
            v: {path: routing_traffic(get_spec(v), model_cfg, path) for path in ("per_site", "two_phase")}
            for v in routed
        }
    roof = {}
    for s in ("120m", "343m"):
        model_cfg = derive(s)
        roof[s] = {}
        for v in routed:
            with torch.device("meta"):  # parameter count from shapes, no memory
                n = count_params(DepthRoutedLM(model_cfg, get_spec(v)))["total"]
            roof[s][v] = roofline(get_spec(v), model_cfg, n)
    return {
        "estimate": True,
        "method": "bytes and FLOPs per token of a training step (forward + backward) from shapes and "
        "dtypes (float32 sources), one read per fused pass; roofline share = t_routing / (t_routing + "
        "t_rest) with t_routing = bytes / memory bandwidth, t_rest = (6 N + 12 L D T) / (peak * MFU)",
        "dtype_bytes": 4,
        "mfu_goal": MFU_GOAL,
        "micro_batch": PAPER_MICRO_BATCH,
        "per_token": per_token,
        "roofline": roof,
    }


def routing_path_fields(samples: dict[str, list[float]], summary: dict[str, dict], routed: list[str]) -> dict:
    """``{"step_ms": {arm: median}, "ratios": {key: value}, "ratio_intervals": {key: [lo, hi]}}`` of
    the two-phase against the per-site arms (empty without ``--per-site``); ``summary``: the
    paired summary of :func:`routing_pairs` (:func:`harness.bench.ratios.paired_summary`)."""
    if not routed:
        return {}
    arms = [a for v in routed for a in (v, f"{v}@per_site")]
    return {
        "step_ms": {a: statistics.median(samples[a]) for a in arms if a in samples},
        "ratios": {k: s["value"] for k, s in summary.items()},
        "ratio_intervals": {k: list(s["interval"]) if s["interval"] else None for k, s in summary.items()},
    }


def format_routing(result: dict) -> list[str]:
    """Two-phase against per-site routing: the measured ratios (``--per-site``) and the bytes model's
    estimate at the bench's size, then the roofline share at 120m and 343m (an estimate)."""
    lines = [""]
    paths = result.get("routing_paths") or {}
    for key, value in paths.get("ratios", {}).items():
        ci = paths["ratio_intervals"].get(key)
        span = f"[{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "(too few rounds)"
        lines.append(f"measured {key:<36} {value:7.3f}  95 % {span}")
    cost = result.get("routing_cost")
    if not cost:
        return lines
    size = result["size"]
    for v, by_path in cost["per_token"][size].items():
        a, b = by_path["per_site"], by_path["two_phase"]
        lines.append(
            f"estimate {v} at {size}: routing moves {a['bytes'] / 1e3:.0f} kB/token per step per-site, "
            f"{b['bytes'] / 1e3:.0f} kB two-phase (x{b['bytes'] / a['bytes']:.2f}); "
            f"{b['flops'] / 1e6:.2f} MFLOP/token"
        )
    for s, by_variant in cost["roofline"].items():
        for v, by_device in by_variant.items():
            cells = [
                f"{name.replace('NVIDIA ', '')} {100 * d['per_site']['share_at_mfu_goal']:.1f} -> "
                f"{100 * d['two_phase']['share_at_mfu_goal']:.1f} %"
                for name, d in by_device.items()
            ]
            lines.append(
                f"estimate routing share of a {s} {v} step at {100 * cost['mfu_goal']:.0f} % MFU "
                f"(per-site -> two-phase): " + ", ".join(cells)
            )
    return lines


def estimate_vs_measured(result: dict) -> list[str]:
    """Routing's milliseconds per step, the bytes model's estimate beside the profile's measurement,
    one line per routed arm of a bench ``result`` (its JSON): the estimate is
    ``bytes/token * step_tokens / bandwidth`` on the result's device (:data:`MEMORY_BANDWIDTH`; a
    device without a listed bandwidth gets no estimate), the measurement the profile's ``routing``
    category (``--profile``; kernels with norms fused in count there, so it errs high)."""
    cost, profile = result.get("routing_cost") or {}, result.get("profile") or {}
    bw = MEMORY_BANDWIDTH.get(" ".join(str(result.get("device_name", "")).split()))
    size, tokens = result["size"], result.get("step_tokens", result.get("batch_tokens", 0))
    arms = profile.get("arms", {})
    lines = [f"routing per step at {size} on {result.get('device_name')} ({tokens} tokens a step):"]
    for name in dict.fromkeys(
        [*result.get("step_ms", {}), *result.get("routing_paths", {}).get("step_ms", {})]
    ):
        variant, _, path = name.partition("@")
        by_path = cost.get("per_token", {}).get(size, {}).get(variant)
        if by_path is None or (path and path != "per_site"):
            continue
        est = by_path[path or "two_phase"]["bytes"] * tokens / bw * 1e3 if bw else None
        measured = arms.get(name, {}).get("categories", {}).get("routing")
        total = arms.get(name, {}).get("total_ms")
        lines.append(
            f"  {name:<28} estimate {'n/a (no bandwidth known)' if est is None else f'{est:8.2f} ms'}  "
            f"measured {'n/a (no --profile)' if measured is None else f'{measured:8.2f} ms of {total:.1f} ms'}"
        )
    return lines


__all__ = [
    "MFU_GOAL",
    "PAPER_MICRO_BATCH",
    "routing_traffic",
    "roofline",
    "routing_path_arms",
    "routing_pairs",
    "routing_cost_fields",
    "routing_path_fields",
    "format_routing",
    "estimate_vs_measured",
]
