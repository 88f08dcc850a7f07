"""The benchmark's rows for the DuckDB table ``bench`` (``db/schema.sql``), one per arm and loop."""

from __future__ import annotations

from harness.bench.settings import PARENT, PRECISION_RATIO


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
    info["hardware"] = result.get("hardware")  # the hardware class (DESIGN 13); None in older results
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
