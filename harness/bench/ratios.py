"""The benchmark's ratios (DESIGN section 7): which arms are compared, each ratio's paired summary over
rounds, and its goal (``TARGETS``) judged against its interval."""

from __future__ import annotations

import statistics

from harness.bench import intervals
from harness.bench.settings import PARENT, PRECISION_RATIO, REFERENCE, TARGETS, TREATMENT
from harness.models import get_spec


def ratio_keys(variants: list[str]) -> list[tuple[str, str]]:
    """``(numerator, denominator)`` step-time pairs of DESIGN section 7 among ``variants``."""
    pairs = []
    if REFERENCE in variants and PARENT in variants:
        pairs.append((PARENT, REFERENCE))
    if PARENT in variants:
        pairs += [(v, PARENT) for v in variants if v not in (PARENT, REFERENCE)]
    return pairs


def target_for(key: str, kind: str = "time") -> tuple[str, float] | None:
    """The goal (``TARGETS``) of a ratio key (``kind`` ``time`` or ``mem``), or None."""

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


def loop_ratio(loops: dict[str, list[float]]) -> dict:
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


def ratio_targets(ratios: dict, mem_ratios: dict, summary: dict) -> dict:
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
