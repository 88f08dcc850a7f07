"""Synthetic results frames for tests and demos (no training, no database).

Shapes follow the DuckDB contract of DESIGN section 5: ``final``, ``runs``, ``metrics``,
``routing`` and the degeneracy records ``route_pairs`` and ``route_params`` (DESIGN
section 3) as polars frames; no built-in control is degenerate in them. Final validation NLL of variant v at seed s is

    nll[v, s] = base + seed_effect[s] + effect[v] + noise[v, s]    (nats/token)

with ``dup_route_tied`` copied from the parent exactly (the A/A control), so every
paired difference is known by construction.
"""

from __future__ import annotations

import hashlib
import json
import math

import numpy as np
import polars as pl

# Effects in nats/token relative to the parent, loosely shaped like the paper's headline.
DEFAULT_EFFECTS = {
    "block_attnres": 0.0,
    "rd_attnres": -0.030,
    "param_matched": -0.004,
    "dup_route": 0.0,
    "fixed_v": -0.012,
    "dup_route_tied": 0.0,
    "prenorm": 0.050,
}
ROLE_OF = {"block_attnres": "parent", "rd_attnres": "treatment", "prenorm": "reference"}
_V_ROUTE = {"rd_attnres", "fixed_v"}  # variants whose V input has its own route
# variant -> (its second attention route, or None; its trainable routing parameter beyond w_qk)
_ROUTES = {
    "rd_attnres": ("v", "w_v"),
    "fixed_v": ("v", None),
    "dup_route": ("dup", "w_dup"),
    "dup_route_tied": ("qk_dup", None),
    "param_matched": (None, "b_qk"),
    "query_reparam": (None, "w_extra"),
}


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())
    return e / e.sum()


def _js(p: np.ndarray, q: np.ndarray) -> float:
    m = (p + q) / 2
    kl = lambda a, b: float(np.sum(np.where(a > 0, a * np.log(a / b), 0.0)))  # noqa: E731
    return 0.5 * kl(p, m) + 0.5 * kl(q, m)


def synthetic_frames(
    *,
    grid: str = "synthetic",
    sizes: tuple[str, ...] = ("small",),
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4),
    budgets: tuple[int, ...] = (1_000_000,),
    effects: dict[str, float] | None = None,
    base_nll: float = 3.6,
    seed_sd: float = 0.02,
    noise_sd: float = 0.003,
    n_layers: int = 4,
    n_evals: int = 8,
    rng_seed: int = 0,
) -> dict[str, pl.DataFrame]:
    """Frames of one finished grid: {"final", "runs", "metrics", "routing", "route_pairs",
    "route_params"}.

    Args:
        effects: variant -> true effect vs the parent (nats/token); its keys are the
            grid's variants (default :data:`DEFAULT_EFFECTS`).
        seed_sd, noise_sd: SD of the shared per-seed effect and of the per-run noise.
        n_layers: layers in the routing table (layer l has l + 2 sources).
        n_evals: validation points per run, evenly spaced up to the budget.

    Every run is ``done``; edit the returned frames to simulate failures.
    """
    effects = dict(DEFAULT_EFFECTS if effects is None else effects)
    rng = np.random.default_rng(rng_seed)
    final, runs, metrics, routing, pairs, params = [], [], [], [], [], []
    for size in sizes:
        for budget in budgets:
            seed_eff = {s: rng.normal(0, seed_sd) for s in seeds}
            for seed in seeds:
                parent_noise = rng.normal(0, noise_sd)
                for variant, eff in effects.items():
                    if variant == "dup_route_tied":  # the parent's value, bit for bit
                        eff, noise = effects.get("block_attnres", 0.0), parent_noise
                    elif variant == "block_attnres":
                        noise = parent_noise
                    else:
                        noise = rng.normal(0, noise_sd)
                    nll = base_nll + seed_eff[seed] + eff + noise
                    run_id = f"{grid}-{size}-{budget}-{variant}-s{seed}"
                    final_row, run_row = _store_rows(run_id, grid, size, budget, variant, seed, nll)
                    final.append(final_row)
                    runs.append(run_row)
                    metrics += _metric_rows(run_id, budget, nll, n_evals, noise_sd, rng)
                    routing += _routing_rows(run_id, budget, variant, n_layers, rng)
                    if variant != "prenorm":
                        _degeneracy_rows(pairs, params, run_id, budget, variant, n_layers, rng)
    return {
        "final": pl.DataFrame(final),
        "runs": pl.DataFrame(runs),
        "metrics": pl.DataFrame(metrics),
        "routing": pl.DataFrame(routing),
        "route_pairs": pl.DataFrame(pairs),
        "route_params": pl.DataFrame(params),
    }


def _store_rows(
    run_id: str, grid: str, size: str, budget: int, variant: str, seed: int, nll: float
) -> tuple[dict, dict]:
    """The ``final`` and ``runs`` rows of one finished run whose validation NLL is ``nll`` (nats/token);
    its protocol hash is that of its config without variant and seed, as the harness computes it."""
    role = ROLE_OF.get(variant, "control")
    config = {
        "variant": variant,
        "seed": seed,
        "size": size,
        "budget_tokens": budget,
        "corpus": "synthetic",
        "train": {"lr": 3e-3, "batch_tokens": 4096},
    }
    protocol = {k: v for k, v in config.items() if k not in ("variant", "seed")}
    phash = hashlib.sha256(json.dumps(protocol, sort_keys=True).encode()).hexdigest()[:16]
    common = dict(
        run_id=run_id,
        grid=grid,
        variant=variant,
        role=role,
        seed=seed,
        size=size,
        budget_tokens=budget,
        protocol_hash=phash,
    )
    final = {**common, "val_nll": nll, "val_bpb": nll / math.log(2) / 4.2, "val_ppl": math.exp(nll)}
    run = {
        **common,
        "status": "done",
        "error": None,
        "code_version": "abc1234",
        "config": json.dumps(config),
        "n_params": 1_000_000,
        "wall_s": 60.0,
    }
    return final, run


def _metric_rows(
    run_id: str, budget: int, nll: float, n_evals: int, noise_sd: float, rng: np.random.Generator
) -> list[dict]:
    """Validation NLL and training loss at ``n_evals`` evenly spaced evaluations of one run."""
    rows = []
    for k in range(1, n_evals + 1):
        tokens = budget * k // n_evals
        # Power-law-ish decay ending exactly at the final NLL.
        wiggle = rng.normal(0, noise_sd) if k < n_evals else 0.0
        value = nll + 0.8 * (math.sqrt(n_evals / k) - 1) + wiggle
        rows.append(dict(run_id=run_id, step=k * 10, tokens=tokens, split="val", name="nll", value=value))
        rows.append(
            dict(run_id=run_id, step=k * 10, tokens=tokens, split="train", name="loss", value=value + 0.05)
        )
    return rows


def _degeneracy_rows(
    pairs: list[dict],
    params: list[dict],
    run_id: str,
    tokens: int,
    variant: str,
    n_layers: int,
    rng: np.random.Generator,
) -> None:
    """Attention-site route pairs and routing parameters of one run after training: every
    query moved except at layer 0 (one source); the A/A check's two routes are one."""
    second, added = _ROUTES.get(variant, (None, None))
    for layer in range(n_layers):
        move = 0.0 if layer == 0 else float(rng.uniform(0.01, 0.05))
        if second is not None:
            diff = 0.0 if variant == "dup_route_tied" else move
            pairs.append(
                dict(
                    run_id=run_id,
                    tokens=tokens,
                    layer=layer,
                    site="attn",
                    route_a="qk",
                    route_b=second,
                    query_max_abs_diff=diff,
                    offset_max_abs_diff=0.0,
                    js=diff / 10,
                )
            )
        for name in ("w_qk", added) if added else ("w_qk",):
            params.append(
                dict(
                    run_id=run_id,
                    tokens=tokens,
                    layer=layer,
                    site="attn",
                    name=name,
                    numel=256,
                    max_abs_change=move,
                    max_abs_value=move,
                )
            )


def _routing_rows(
    run_id: str, tokens: int, variant: str, n_layers: int, rng: np.random.Generator
) -> list[dict]:
    """Attention-site depth distributions: QK leans to recent sources, V to the embedding."""
    rows = []
    for layer in range(n_layers):
        n_src = layer + 2
        idx = np.arange(n_src)
        qk = _softmax(1.2 * idx / max(n_src - 1, 1) * 3 + rng.normal(0, 0.1, n_src))
        dists = {"qk": qk}
        if variant in _V_ROUTE:
            dists["v"] = (
                np.full(n_src, 1 / n_src)
                if variant == "fixed_v"
                else _softmax(-1.5 * idx / max(n_src - 1, 1) * 3 + rng.normal(0, 0.1, n_src))
            )
        js_means = _js(dists["qk"], dists["v"]) if "v" in dists else None
        for route, a in dists.items():
            entropy = float(-np.sum(a * np.log(a)))
            eff_depth = float(np.sum(idx * a))
            for src in idx:
                rows.append(
                    dict(
                        run_id=run_id,
                        tokens=tokens,
                        layer=layer,
                        site="attn",
                        route=route,
                        source=int(src),
                        weight=float(a[src]),
                        entropy=entropy,
                        eff_depth=eff_depth,
                        js_qk_v=None if js_means is None else js_means * 1.25,
                        js_qk_v_of_means=js_means,
                    )
                )
    return rows


def frames_from_values(
    values: dict[str, list[float]],
    *,
    seeds: list[int] | None = None,
    roles: dict[str, str] | None = None,
    size: str = "small",
    budget_tokens: int = 1_000_000,
    grid: str = "fixed",
    code_version: str = "abc1234",
) -> dict[str, pl.DataFrame]:
    """``final`` and ``runs`` frames holding exactly the given final NLLs (nats/token).

    Args:
        values: variant -> final val_nll per seed (same order as ``seeds``).
        seeds: seed of each position (default 0..n-1).
        roles: variant -> role (default: block_attnres parent, rd_attnres treatment,
            prenorm reference, anything else control).

    All runs are ``done`` and share one protocol hash and config (except the variant).
    """
    roles = roles or {}
    final, runs = [], []
    for variant, vals in values.items():
        for pos, nll in enumerate(vals):
            seed = seeds[pos] if seeds is not None else pos
            run_id = f"{variant}-s{seed}"
            config = {
                "variant": variant,
                "seed": seed,
                "size": size,
                "budget_tokens": budget_tokens,
                "train": {"lr": 3e-3},
            }
            common = dict(
                run_id=run_id,
                grid=grid,
                variant=variant,
                role=roles.get(variant, ROLE_OF.get(variant, "control")),
                seed=seed,
                size=size,
                budget_tokens=budget_tokens,
                protocol_hash="p0",
            )
            final.append(
                {
                    **common,
                    "val_nll": float(nll),
                    "val_bpb": float(nll) / math.log(2),
                    "val_ppl": math.exp(nll) if math.isfinite(nll) else float("nan"),
                }
            )
            runs.append(
                {
                    **common,
                    "status": "done",
                    "error": None,
                    "code_version": code_version,
                    "config": json.dumps(config),
                }
            )
    return {"final": pl.DataFrame(final), "runs": pl.DataFrame(runs)}
