"""FLOPs per trained token of a variant, routing included: the one formula the report's compute
multiplier and ``harness bench`` share (DESIGN sections 7, 11 and 14).

``model_flops_per_token = 6 N + 12 L D T`` (PaLM, Chowdhery et al. 2022, arXiv 2204.02311,
appendix B; the count nanoGPT's ``estimate_mfu`` uses):

* ``6 N``: every parameter takes part in one multiply-add (2 FLOPs) per token in the forward
  pass and two in the backward pass (Kaplan et al. 2020, arXiv 2001.08361, section 2.1). ``N``
  counts a tied embedding once: its FLOPs are the LM head's matmul, the lookup is free.
* ``12 L D T``: attention's score and value matmuls, ``Q K^T`` and ``A V``, each ``2 T D`` FLOPs
  per token and layer forward, times 3 for forward + backward; counted over the whole
  ``T x T`` matrix (causal masking halves the useful work; the convention counts it whole).

MFU (:mod:`harness.bench.flops`) uses this count alone, so it compares across variants and with
published numbers. What a variant *spends* adds depth routing's own arithmetic,
:func:`routing_flops_per_token`: forward ``4 D`` per (source, route) pair (a logit's dot product and
its multiply-add into the mix) and, on the two-phase path, ``3 D`` per route for the merge
(Attention Residuals, arXiv 2603.15031, section 4); backward twice the forward. It is
:func:`training_flops_per_token` = model FLOPs + routing FLOPs. Norms and activations stay out
(element-wise, the same in every variant).
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.models.sizes import ModelConfig
from harness.models.spec import VariantSpec

#: The routing paths whose FLOPs differ (:mod:`harness.models.numerics`); two_phase is the default.
ROUTING_PATHS = ("two_phase", "per_site")


def attention_flops_per_token(n_layers: int, d_model: int, context: int) -> int:
    """``12 L D T``: the attention matmuls' FLOPs per trained token (forward + backward)."""
    return 12 * n_layers * d_model * context


def model_flops_per_token(n_params: int, n_layers: int, d_model: int, context: int) -> int:
    """``6 N + 12 L D T`` FLOPs per trained token (see the module docstring)."""
    return 6 * n_params + attention_flops_per_token(n_layers, d_model, context)


@dataclass(frozen=True)
class SiteShape:
    """One routing site: ``completed`` sources, ``partial`` (routes over the in-progress block
    too), ``routes`` (R)."""

    completed: int
    partial: bool
    routes: int


def routing_blocks(spec: VariantSpec, cfg: ModelConfig) -> list[list[SiteShape]]:
    """The routing sites of a model grouped by the completed sources they share, in call order.

    Block AttnRes: one group per block (the boundary's attention site routes over the completed
    blocks alone, the others add the partial; the output site joins the last block). Full AttnRes:
    every site is a group of its own (a new source after each sublayer). Sites over a single
    source (layer 0's attention site) do no routing and are left out; ``prenorm`` has none.
    """
    if spec.residual == "prenorm":
        return []
    R = {site: len(spec.sites[site].routes) for site in ("attn", "mlp", "out")}
    L = cfg.n_layers
    if spec.residual == "full":
        groups = [[SiteShape(1 + k, False, R["attn" if k % 2 == 0 else "mlp"])] for k in range(1, 2 * L)]
        return groups + [[SiteShape(1 + 2 * L, False, R["out"])]]
    every = cfg.block_size // 2
    blocks = []
    for l0 in range(0, L, every):
        S = 1 + l0 // every  # the embedding and the blocks closed so far
        sites = [] if l0 == 0 else [SiteShape(S, False, R["attn"])]
        sites.append(SiteShape(S, True, R["mlp"]))
        for _ in range(l0 + 1, min(l0 + every, L)):
            sites += [SiteShape(S, True, R["attn"]), SiteShape(S, True, R["mlp"])]
        if l0 + every >= L:
            sites.append(SiteShape(S, True, R["out"]))
        blocks.append(sites)
    return blocks


def routing_flops_per_token(spec: VariantSpec, cfg: ModelConfig, path: str = "two_phase") -> int:
    """Depth routing's FLOPs per trained token (forward + backward) on ``path`` (module docstring).

    Raises:
        ValueError: ``path`` is not ``two_phase`` or ``per_site``.
    """
    if path not in ROUTING_PATHS:
        raise ValueError(f"routing path {path!r}; allowed: {', '.join(ROUTING_PATHS)}")
    fwd = 0  # in units of D
    for block in routing_blocks(spec, cfg):
        if path == "per_site":
            fwd += sum(4 * (s.completed + s.partial) * s.routes for s in block)
            continue
        fwd += 4 * block[0].completed * sum(s.routes for s in block)
        fwd += sum(4 * int(s.partial) * s.routes + 3 * s.routes for s in block)
    return 3 * fwd * cfg.d_model


def training_flops_per_token(
    spec: VariantSpec, cfg: ModelConfig, n_params: int, path: str = "two_phase"
) -> int:
    """What one trained token costs the variant: ``6 N + 12 L D T`` + routing (module docstring).

    Args:
        n_params: the model's parameter count, a tied embedding once (``runs.n_params``).
        path: the routing path it trained on (:data:`ROUTING_PATHS`).
    """
    model = model_flops_per_token(n_params, cfg.n_layers, cfg.d_model, cfg.context)
    return model + routing_flops_per_token(spec, cfg, path)


__all__ = [
    "ROUTING_PATHS",
    "SiteShape",
    "attention_flops_per_token",
    "model_flops_per_token",
    "routing_blocks",
    "routing_flops_per_token",
    "training_flops_per_token",
]
