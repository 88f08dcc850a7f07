"""Models: the decoder family of DESIGN section 2 and the depth-routing variants of section 3.

Plain PyTorch; knows nothing about training. Entry points:

* :func:`build_model` -- ``build_model("rd_attnres", "small", seed=0)``;
* :func:`available_variants` -- names of all specs (built-ins and ``controls/``);
* :func:`count_params` -- total and trainable parameter counts;
* :func:`routing_diagnostics` -- per-layer depth distributions for a batch.

Modules:

* :mod:`harness.models.sizes` -- the size presets and a model's shape
  (:class:`~harness.models.sizes.ModelConfig`; the one vocabulary padding rule);
* :mod:`harness.models.flops` -- FLOPs per trained token, routing included: the one count the report's
  compute multiplier and ``harness bench`` share;
* :mod:`harness.models.spec` -- a variant spec (TOML, data not code): which route feeds which role;
* :mod:`harness.models.compose` -- composed variants: a spec that takes another and adds to it;
* :mod:`harness.models.catalog` -- the variant catalogue: spec files found on disk (``specs/``, the
  built-ins and ``controls/``), composed specs resolved;
* :mod:`harness.models.routing` -- depth routing: softmax attention over earlier representations;
* :mod:`harness.models.numerics` -- the routing paths and their numerics revisions;
* :mod:`harness.models.gpt` -- the decoder-only model with depth routing (:class:`DepthRoutedLM`);
* :mod:`harness.models.init` -- seeded, name-keyed initialisation;
* :mod:`harness.models.diagnostics` -- routing diagnostics: depth distributions, entropy, K vs V JS
  divergence.
"""

from __future__ import annotations

import functools
import importlib
from typing import TYPE_CHECKING

from harness.models.catalog import load_specs
from harness.models.numerics import DEFAULT_ROUTING
from harness.models.sizes import derive
from harness.models.spec import VariantSpec, parse_spec

if TYPE_CHECKING:
    from torch import nn

    from harness.models.diagnostics import RoutingDiagnostics, js_divergence, routing_diagnostics
    from harness.models.gpt import DepthRoutedLM

# The torch-backed names load on first use (PEP 562), so the variant specs (get_spec,
# available_variants: what grids, the queue and `harness --help` need) cost no torch import.
_LAZY = {
    "DepthRoutedLM": "harness.models.gpt",
    "RoutingDiagnostics": "harness.models.diagnostics",
    "js_divergence": "harness.models.diagnostics",
    "routing_diagnostics": "harness.models.diagnostics",
    "init_weights": "harness.models.init",
}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# Variants every study knows about, in table order; any further spec files follow.
CORE_ORDER = (
    "prenorm",
    "full_attnres",
    "block_attnres",
    "rd_attnres",
    "param_matched",
    "dup_route",
    "dup_route_tied",
    "fixed_v",
    "query_reparam",
)


@functools.cache
def _specs() -> dict[str, VariantSpec]:
    return load_specs()


def available_variants() -> list[str]:
    """Names of every variant spec: the core ones in table order, then any others sorted."""
    names = set(_specs())
    return [n for n in CORE_ORDER if n in names] + sorted(names - set(CORE_ORDER))


def get_spec(variant: str) -> VariantSpec:
    """The spec of ``variant``.

    Raises:
        ValueError: unknown variant; the message lists the valid ones.
    """
    specs = _specs()
    if variant not in specs:
        raise ValueError(f"unknown variant {variant!r}; valid variants: {', '.join(available_variants())}")
    return specs[variant]


def build_model(
    variant: str | VariantSpec, size: str, *, seed: int, routing: str = DEFAULT_ROUTING, **overrides
) -> DepthRoutedLM:
    """Build and initialise a model.

    Args:
        variant: a variant name (see :func:`available_variants`) or a :class:`VariantSpec`.
        size: a size preset (``tiny``, ``small``, ``120m``, ``343m``).
        seed: initialisation seed; parameters are drawn per name (DESIGN section 4).
        routing: ``two_phase`` (default) or ``per_site``: how routing sites are computed
            (:data:`harness.models.numerics.ROUTING_PATHS`; the same function to ~1e-6, rounded
            differently: each path has its numerics revision, :mod:`harness.models.numerics`).
        **overrides: :class:`~harness.models.sizes.ModelConfig` fields, e.g. ``vocab_size``.

    Returns:
        A :class:`DepthRoutedLM` in float32 on the CPU: tokens ``[B, T]`` int64 ->
        logits ``[B, T, V]``.

    Raises:
        ValueError: unknown variant, size, override key or routing path.
    """
    # lazy: specs and sizes (the CLI, grids) load without torch; the model only when one is built
    from harness.models.gpt import DepthRoutedLM
    from harness.models.init import init_weights

    spec = variant if isinstance(variant, VariantSpec) else get_spec(variant)
    cfg = derive(size, **overrides)
    model = DepthRoutedLM(cfg, spec, routing=routing)
    init_weights(model, seed, cfg.n_layers)
    return model


def count_params(model: nn.Module) -> dict[str, int]:
    """``{"total": ..., "trainable": ...}`` parameter counts (tied weights counted once)."""
    params = list(model.parameters())  # de-duplicated by nn.Module
    return {
        "total": sum(p.numel() for p in params),
        "trainable": sum(p.numel() for p in params if p.requires_grad),
    }


__all__ = [
    "build_model",
    "available_variants",
    "get_spec",
    "count_params",
    "routing_diagnostics",
    "RoutingDiagnostics",
    "js_divergence",
    "DepthRoutedLM",
    "VariantSpec",
    "parse_spec",
    "CORE_ORDER",
]
