"""Does the gain pay for its cost: the compute multiplier and the time multiplier per cell (DESIGN section 14).

For each size with two or more budgets, each budget and each variant compared with the parent (the
treatment, each control, each reference), per seed: the parent's curve is its final validation NLL at
every budget of the size at that seed (complete runs, never an intermediate evaluation); the tokens it
needs to reach the variant's final NLL at the budget are interpolated in log-tokens
(:func:`harness.report.stats.multiplier_math.tokens_to_reach`), and

* the **compute multiplier** is ``F_parent * tokens_needed / (F_variant * tokens_variant)``, ``F`` the
  training FLOPs per token of each run's own config, routing included
  (:func:`harness.models.flops.training_flops_per_token`, the count ``harness bench`` reports);
* the **time multiplier** on a hardware class is ``tokens_needed * s_parent / (tokens_variant *
  s_variant)``, ``s`` the seconds per training token. Where the store holds ``harness bench`` rows of that
  class and size with both variants (the latest such bench), ``s_variant / s_parent`` is their step-time
  ratio (rounds side by side), for every seed; else it is the two runs' own clocks at the budget
  (``runs.train_s / tokens``: the time inside optimiser steps), for seeds whose two runs ran on that class,
  and the load on the machines was not controlled. One row per class, never pooled.

A seed is left out, with the reason, where the parent's curve is non-monotone, a budget of it is missing
or diverged, or the variant's run diverged. A seed whose variant beats the parent's largest budget (or
is worse than its smallest) is censored: it enters the summary at its bound and is counted; an
extrapolated number (:data:`~harness.report.stats.multiplier_math.EXTRAPOLATION_MODEL`) is reported
separately. The verdict of each row is Holm-adjusted over the cell's multiplier rows
(:func:`~harness.report.stats.multiplier_math.multiplier_verdict`).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass, field, replace

import numpy as np
import polars as pl

from harness.common.terms import UNKNOWN
from harness.design.analysis_plan import AnalysisPlan
from harness.models import get_spec
from harness.models.flops import ROUTING_PATHS, training_flops_per_token
from harness.models.sizes import derive
from harness.models.spec import parse_spec_text
from harness.report.stats.decisions import holm
from harness.report.stats.multiplier_math import (
    EXTRAPOLATION_MODEL,
    multiplier_verdict,
    summarize_logs,
    tokens_to_reach,
)
from harness.report.stats.pairing import cell_order
from harness.report.stats.power import seeds_needed

COMPUTE = "compute"
TIME_PREFIX = "time on "


@dataclass(frozen=True, slots=True)
class SeedMultiplier:
    """One seed's multiplier of one comparison (``multiplier_seeds.csv``; NaN with ``reason`` when left out)."""

    comparison: str
    basis: str  # "compute" or "time on <hardware class>"
    size: str
    budget_tokens: int
    seed: int
    multiplier: float
    censored: str  # "", "above" (a lower bound), "below" (an upper bound)
    extrapolated: float
    tokens_needed: float
    flops_parent: float  # per token
    flops_variant: float  # per token
    nll_variant: float  # nats/token, the variant's final validation NLL
    tokens_variant: float
    reason: str = ""


@dataclass(frozen=True, slots=True)
class MultiplierRow:
    """One comparison's multiplier in one cell on one basis (``multipliers.csv``)."""

    comparison: str
    variant: str
    basis: str
    size: str
    budget_tokens: int
    n: int
    seeds: str
    censored_above: int
    censored_below: int
    estimate: float
    ci_low: float
    ci_high: float
    p_one_sided: float
    holm_p: float
    p_below_min: float
    holm_p_below: float
    verdict: str
    seeds_needed: int | None
    extrapolated: float
    left_out: str  # "seed: reason; ..."
    flops_ratio: float  # F_parent / F_variant
    sd_log: float  # sd of the log multipliers over the kept seeds
    time_source: str  # time rows: the bench and its ratio, or the runs' clocks; "" for compute


@dataclass(frozen=True)
class MultiplierStats:
    """A grid's multipliers; ``note`` says why there are none (a single budget per size)."""

    rows: tuple[MultiplierRow, ...] = ()
    seeds: tuple[SeedMultiplier, ...] = ()
    note: str = ""
    min_multiplier: float = 1.05
    extrapolation_model: str = EXTRAPOLATION_MODEL
    budgets: dict = field(default_factory=dict)  # size -> the grid's budgets at it
    curves: dict = field(default_factory=dict)  # (size, seed) -> ((tokens, nll, parent FLOPs/token), ...)

    def frame(self) -> pl.DataFrame:
        """``multipliers.csv``: one row per comparison, basis and cell."""
        return _frame(self.rows, MultiplierRow)

    def seeds_frame(self) -> pl.DataFrame:
        """``multiplier_seeds.csv``: one row per comparison, basis, cell and seed."""
        return _frame(self.seeds, SeedMultiplier)


def _frame(rows, kind) -> pl.DataFrame:
    names = list(kind.__slots__)
    return pl.DataFrame([{k: getattr(r, k) for k in names} for r in rows], schema=names, orient="row")


def single_budget_note(budgets: dict[str, list[int]]) -> str:
    """The one line a grid with one budget per size gets: why no multiplier, which budgets would give one."""
    sizes = ", ".join(
        f"{s} at {b[0]:_} tokens: add {b[0] // 2:_} and {b[0] * 2:_}" for s, b in sorted(budgets.items())
    )
    return (
        "No compute multiplier: each size has one budget, and the parent's NLL-against-compute curve needs "
        f"two or more complete runs per seed ({sizes}; `harness plan` prices them)."
    )


def flops_per_token(runs: pl.DataFrame) -> dict[str, float]:
    """``run_id -> training FLOPs per token`` from each run's stored config (its size, ``model`` overrides and
    stored spec, else the shipped one) and ``n_params``, routing on the path its numerics name, else
    two_phase; NaN where the config or ``n_params`` is missing or unreadable."""
    out = {}
    numerics = runs["numerics"].to_list() if "numerics" in runs.columns else [None] * runs.height
    n_params = runs["n_params"].to_list() if "n_params" in runs.columns else [None] * runs.height
    rows = zip(runs["run_id"], runs["variant"], runs["size"], runs["config"], n_params, numerics, strict=True)
    for rid, variant, size, cfg, n, num in rows:
        try:
            cfg = json.loads(cfg) if isinstance(cfg, str) else dict(cfg or {})
            spec = parse_spec_text(cfg["spec"], where=rid) if cfg.get("spec") else get_spec(variant)
            shape = derive(cfg.get("size", size), **(cfg.get("model") or {}))
            path = (num or "").partition("/")[0]
            path = path if path in ROUTING_PATHS else "two_phase"
            out[rid] = float(training_flops_per_token(spec, shape, int(n), path))
        except (TypeError, ValueError, KeyError, json.JSONDecodeError):
            out[rid] = math.nan
    return out


def grid_multipliers(
    final: pl.DataFrame,
    runs: pl.DataFrame,
    *,
    parent: str,
    variants: list[str],
    plan: AnalysisPlan,
    bench: pl.DataFrame | None = None,
) -> MultiplierStats:
    """The compute and time multipliers of one grid's frozen-protocol runs (module docstring).

    Args:
        final: the store's ``final`` rows of the grid (``val_nll`` per run).
        runs: its ``runs`` rows (status, config, n_params, tokens_seen, train_s, hardware).
        parent: the parent variant; ``variants``: those compared with it.
        bench: the store's ``bench`` rows (bench_id, created_at, size, variant, step_ms, extra), or None.
    """
    runs = runs.join(final.select("run_id", "val_nll"), on="run_id", how="left")
    budgets = {
        s: sorted(set(runs.filter(pl.col("size") == s)["budget_tokens"].to_list()))
        for s in sorted(set(runs["size"].to_list()))
    }
    if all(len(b) < 2 for b in budgets.values()):
        return MultiplierStats(
            note=single_budget_note(budgets), min_multiplier=plan.min_multiplier, budgets=budgets
        )
    flops = flops_per_token(runs)
    by = {(r["variant"], r["size"], r["budget_tokens"], r["seed"]): r for r in runs.iter_rows(named=True)}
    seeds, rows = [], []
    ratios = bench_ratios(bench, parent)
    for size, bs in budgets.items():
        if len(bs) < 2:
            continue
        for budget in bs:
            cell_seeds = []
            for v in variants:
                found = _comparison_seeds(by, flops, parent, v, size, bs, budget)
                benched = {c: r for (c, s_, v_), r in ratios.items() if (s_, v_) == (size, v)}
                cell_seeds += [s for s in found if s.basis.removeprefix(TIME_PREFIX) not in benched]
                cell_seeds += _bench_seeds(found, benched)
            seeds += cell_seeds
            rows += _cell_rows(cell_seeds, plan, ratios)
    return MultiplierStats(
        tuple(sorted(rows, key=lambda r: (cell_order((r.size, r.budget_tokens)), r.comparison, r.basis))),
        tuple(seeds),
        min_multiplier=plan.min_multiplier,
        budgets=budgets,
        curves=_curves(by, flops, parent, budgets),
    )


def _curves(by, flops, parent, budgets) -> dict:
    out: dict = defaultdict(list)
    for (v, size, _b, seed), r in sorted(by.items(), key=lambda kv: kv[0][1:]):
        if v == parent and len(budgets[size]) > 1 and r["status"] == "done" and _finite(r.get("val_nll")):
            out[(size, seed)].append((_tokens(r), float(r["val_nll"]), flops[r["run_id"]]))
    return {k: tuple(v) for k, v in out.items()}


def _tokens(run: dict) -> float:
    seen = run.get("tokens_seen")
    return float(seen if seen else run["budget_tokens"])


def _seconds_per_token(run: dict) -> float:
    s = run.get("train_s") or run.get("wall_s")
    return float(s) / _tokens(run) if s else math.nan


def _comparison_seeds(by, flops, parent, v, size, budgets, budget) -> list[SeedMultiplier]:
    """Each seed's compute multiplier and its time multiplier on its runs' class (left out: NaN and why)."""
    out = []
    ended = ("done", "diverged")  # a variant run still queued, running or failed has no final NLL to match
    for seed in sorted({k[3] for k, r in by.items() if k[:3] == (v, size, budget) and r["status"] in ended}):
        var = by[(v, size, budget, seed)]
        curve = [by.get((parent, size, b, seed)) for b in budgets]
        p_run = curve[budgets.index(budget)]
        f_v = flops[var["run_id"]]
        f_p = flops[p_run["run_id"]] if p_run else math.nan
        hw_v = var.get("hardware") or UNKNOWN
        hw_p = (p_run or {}).get("hardware") or UNKNOWN
        base = dict(
            comparison=f"{v} - {parent}",
            size=size,
            budget_tokens=budget,
            seed=seed,
            nll_variant=var["val_nll"] if _finite(var.get("val_nll")) else math.nan,
            tokens_variant=_tokens(var),
            flops_parent=f_p,
            flops_variant=f_v,
        )
        reason = _left_out(var, curve, budgets)
        if not reason and not (math.isfinite(f_v) and math.isfinite(f_p)):
            reason = "no FLOPs count (config or n_params missing)"
        reach = None
        if not reason:
            reach = tokens_to_reach(
                [_tokens(r) for r in curve], [r["val_nll"] for r in curve], var["val_nll"]
            )
            reason = reach.reason
        if reason:
            out += [
                SeedMultiplier(
                    **base,
                    basis=basis,
                    multiplier=math.nan,
                    censored="",
                    extrapolated=math.nan,
                    tokens_needed=math.nan,
                    reason=reason,
                )
                for basis in (COMPUTE, TIME_PREFIX + hw_v)
            ]
            continue
        t_v = _tokens(var)
        cost = f_p / (f_v * t_v)
        common = dict(base, censored=reach.censored, tokens_needed=reach.tokens)
        out.append(
            SeedMultiplier(
                **common,
                basis=COMPUTE,
                multiplier=cost * reach.tokens,
                extrapolated=cost * reach.extrapolated,
            )
        )
        ratio = _seconds_per_token(p_run) / _seconds_per_token(var)
        why = ""
        if hw_v != hw_p:
            why = f"the two runs ran on two classes ({hw_v}, {hw_p})"
        elif not math.isfinite(ratio):
            why = "no training clock"
        out.append(
            SeedMultiplier(
                **common,
                basis=TIME_PREFIX + hw_v,
                reason=why,
                multiplier=math.nan if why else reach.tokens / t_v * ratio,
                extrapolated=math.nan if why else reach.extrapolated / t_v * ratio,
            )
        )
    return out


def bench_ratios(bench: pl.DataFrame | None, parent: str) -> dict[tuple[str, str, str], tuple[float, str]]:
    """``(hardware class, size, variant) -> (step_ms variant / step_ms parent, its source)`` from the latest
    ``harness bench`` of each class and size that timed both (rows of kind ``step``; a bench written before
    it recorded its class is not used)."""
    out: dict = {}
    if bench is None or not bench.height:
        return out
    latest: dict = {}
    for row in bench.sort("created_at").iter_rows(named=True):
        extra = row["extra"]
        extra = json.loads(extra) if isinstance(extra, str) else (extra or {})
        if extra.get("kind") != "step" or not extra.get("hardware") or not _finite(row["step_ms"]):
            continue
        key = (extra["hardware"], row["size"])
        if latest.get(key, (None,))[0] != row["bench_id"]:
            latest[key] = (row["bench_id"], {})
        latest[key][1][row["variant"]] = (
            row["step_ms"],
            extra.get("ratio_interval"),
            extra.get("ratio_vs_parent"),
        )
    for (hw, size), (bench_id, steps) in latest.items():
        if parent not in steps:
            continue
        for v, (ms, interval, _) in steps.items():
            if v == parent:
                continue
            ratio = ms / steps[parent][0]
            span = (
                f" [{interval[0]:.3f}, {interval[1]:.3f}]" if interval and parent == "block_attnres" else ""
            )
            out[(hw, size, v)] = (ratio, f"harness bench {bench_id}: step-time ratio {ratio:.3f}{span}")
    return out


def _bench_seeds(found: list[SeedMultiplier], benched: dict) -> list[SeedMultiplier]:
    """The time rows of the classes with a bench: every seed the compute multiplier kept, its tokens needed
    over the variant's tokens divided by the bench's step-time ratio."""
    out = []
    for hw, (ratio, _) in sorted(benched.items()):
        for s in found:
            if s.basis != COMPUTE:
                continue
            tokens_mult = s.multiplier * s.flops_variant / s.flops_parent  # tokens_needed / tokens_variant
            ext = s.extrapolated * s.flops_variant / s.flops_parent
            out.append(
                replace(s, basis=TIME_PREFIX + hw, multiplier=tokens_mult / ratio, extrapolated=ext / ratio)
            )
    return out


def _left_out(var: dict, curve: list, budgets: list[int]) -> str:
    if var["status"] == "diverged" or not _finite(var.get("val_nll")):
        return "the variant's run diverged" if var["status"] == "diverged" else "the variant's run has no NLL"
    for b, r in zip(budgets, curve, strict=True):
        if r is None or r["status"] not in ("done", "diverged"):
            return f"the parent's run at {b:_} tokens is missing"
        if r["status"] == "diverged" or not _finite(r.get("val_nll")):
            return f"the parent's run at {b:_} tokens diverged"
    return ""


def _finite(x) -> bool:
    return x is not None and math.isfinite(x)


def _cell_rows(
    cell_seeds: list[SeedMultiplier], plan: AnalysisPlan, sources: dict | None = None
) -> list[MultiplierRow]:
    groups: dict[tuple[str, str], list[SeedMultiplier]] = defaultdict(list)
    for s in cell_seeds:
        groups[(s.comparison, s.basis)].append(s)
    draft = []
    for (comparison, basis), ss in groups.items():
        kept = [s for s in ss if not s.reason]
        logs = np.log([s.multiplier for s in kept])
        summ = summarize_logs(logs, plan.alpha, plan.min_multiplier)
        ext = float(np.exp(np.mean(np.log([s.extrapolated for s in kept])))) if kept else math.nan
        need = seeds_needed(
            math.log(plan.min_multiplier), summ.sd_log, plan.alpha, plan.power, "one-sided", plan.max_seeds
        )
        first = ss[0]
        draft.append(
            dict(
                comparison=comparison,
                variant=comparison.split(" - ")[0],
                basis=basis,
                size=first.size,
                budget_tokens=first.budget_tokens,
                n=summ.n,
                seeds=" ".join(str(s.seed) for s in kept),
                censored_above=sum(s.censored == "above" for s in kept),
                censored_below=sum(s.censored == "below" for s in kept),
                estimate=summ.estimate,
                ci_low=summ.ci_low,
                ci_high=summ.ci_high,
                p_one_sided=summ.p_exceeds,
                p_below_min=summ.p_below_min,
                seeds_needed=need.n,
                extrapolated=ext,
                left_out="; ".join(f"{s.seed}: {s.reason}" for s in ss if s.reason),
                flops_ratio=first.flops_parent / first.flops_variant,
                sd_log=summ.sd_log,
                time_source=""
                if basis == COMPUTE
                else (sources or {}).get(
                    (basis.removeprefix(TIME_PREFIX), first.size, comparison.split(" - ")[0]),
                    (None, "the runs' own clocks (train_s); the load on the machines was not controlled"),
                )[1],
            )
        )
    adj_up = holm([d["p_one_sided"] for d in draft]) if draft else []
    adj_down = holm([d["p_below_min"] for d in draft]) if draft else []
    rows = []
    for d, hu, hd in zip(draft, adj_up, adj_down, strict=True):
        verdict = multiplier_verdict(d["n"], hu, hd, d["censored_above"], d["censored_below"], plan.alpha)
        rows.append(MultiplierRow(**d, holm_p=float(hu), holm_p_below=float(hd), verdict=verdict))
    return rows


def extra_budget_lines(
    cells, n_seeds: int, parent: str, speed: dict, pilot: MultiplierStats | None, plan: AnalysisPlan
) -> list[str]:
    """``harness plan``'s lines on the multiplier (DESIGN 14): for each size of the grid with one budget, what
    adding half and twice that budget costs (the parent alone: its runs, tokens and worker-hours at ``speed``,
    :func:`harness.report.stats.seed_planning.throughput`), and, from a ``pilot`` with 2+ budgets, the seeds each
    comparison needs to detect ``min_multiplier`` (one-sided t on log multipliers at the pilot's sd).

    Args:
        cells: ``((size, budget_tokens, variants), ...)`` of the grid.
    """
    budgets: dict[str, set[int]] = defaultdict(set)
    for size, budget, _ in cells:
        budgets[size].add(budget)
    lines = []
    for size, bs in sorted(budgets.items()):
        if len(bs) > 1:
            continue
        (b,) = bs
        extra = (b // 2, 2 * b)
        tokens = n_seeds * sum(extra)
        tps = getattr(speed.get(size), "tokens_per_s", None)
        hours = (
            f"{tokens / tps / 3600:.2f} worker-hours"
            if tps
            else "worker-hours unknown (no measured throughput)"
        )
        lines.append(
            f"multiplier: size {size} has one budget ({b:_} tokens), so no compute multiplier; the parent "
            f"({parent}) at {extra[0]:_} and {extra[1]:_} tokens gives one: {2 * n_seeds} runs, {tokens:_} tokens, "
            f"{hours}"
        )
    for r in pilot.rows if pilot is not None else ():
        need = seeds_needed(
            math.log(plan.min_multiplier), r.sd_log, plan.alpha, plan.power, "one-sided", plan.max_seeds
        )
        lines.append(
            f"multiplier: {r.comparison} {r.size} {r.budget_tokens:_} ({r.basis}): seeds to detect "
            f"{plan.min_multiplier:g}x at the pilot's sd of log multipliers {r.sd_log:.3g}: "
            + (str(need.n) if need.n else f"not reachable within max_seeds {plan.max_seeds} or no spread yet")
        )
    return lines


__all__ = [
    "COMPUTE",
    "bench_ratios",
    "extra_budget_lines",
    "MultiplierRow",
    "MultiplierStats",
    "SeedMultiplier",
    "flops_per_token",
    "grid_multipliers",
    "single_budget_note",
]
