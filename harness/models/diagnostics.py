"""Routing diagnostics (DESIGN section 3, "Routing diagnostics").

For a batch, per layer and routing site and route: the depth distribution over sources
averaged over tokens (``[layers, sources]``), its entropy (nats), the effective depth
``sum_i i * a_i``, and for variants whose K and V roles read different routes the
Jensen-Shannon divergence (nats, base e) between the K-role and V-role distributions,
averaged per token (``js_qk_v``), next to the JS divergence of the token-averaged
distributions (``js_qk_v_of_means``). A role's distribution is the mean of its routes'
distributions, which is exactly the mixing weight the role's input applies to each
source (``dup_route``'s m = (r0 + r1)/2 mixes with (a0 + a1)/2).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor


def entropy(p: Tensor, dim: int = -1) -> Tensor:
    """Shannon entropy in nats along ``dim`` (0 log 0 = 0)."""
    return -(torch.xlogy(p, p)).sum(dim)


def js_divergence(p: Tensor, q: Tensor, dim: int = -1) -> Tensor:
    """Jensen-Shannon divergence in nats (base e) along ``dim``: 0 <= JS <= ln 2."""
    m = 0.5 * (p + q)
    return entropy(m, dim) - 0.5 * (entropy(p, dim) + entropy(q, dim))


@dataclass
class SiteDiagnostics:
    """Diagnostics of one site kind (``attn``, ``mlp`` or ``out``) for one batch.

    Attributes:
        routes: route name -> mean depth distribution ``[layers, S_max]`` (NaN where a
            layer has fewer sources than ``S_max``).
        n_sources: ``[layers]`` number of sources at each layer's site.
        entropy: route -> ``[layers]`` entropy (nats) of the mean distribution.
        token_entropy: route -> ``[layers]`` mean per-token entropy (nats).
        eff_depth: route -> ``[layers]`` ``sum_i i * a_i`` of the mean distribution.
        js_qk_v: ``[layers]`` per-token JS(K role, V role) averaged over tokens (attn only).
        js_qk_v_of_means: ``[layers]`` JS between the token-averaged K and V distributions.
        layers: the layer index of each row (``[L]`` for the output site).
    """

    routes: dict[str, Tensor]
    n_sources: Tensor
    entropy: dict[str, Tensor]
    token_entropy: dict[str, Tensor]
    eff_depth: dict[str, Tensor]
    layers: list[int]
    js_qk_v: Tensor | None = None
    js_qk_v_of_means: Tensor | None = None


@dataclass
class RoutingDiagnostics:
    """Per-site diagnostics of one batch; ``rows()`` flattens them for DuckDB ``routing``."""

    sites: dict[str, SiteDiagnostics] = field(default_factory=dict)

    def rows(self, tokens: int) -> list[dict]:
        """Rows ``(tokens, layer, site, route, source, weight, entropy, token_entropy,
        eff_depth, js_qk_v, js_qk_v_of_means)`` (DESIGN section 5, table ``routing``)."""
        out = []
        for site, d in self.sites.items():
            for route, dist in d.routes.items():
                for row, layer in enumerate(d.layers):
                    n = int(d.n_sources[row])
                    js = None if d.js_qk_v is None else float(d.js_qk_v[row])
                    jsm = None if d.js_qk_v_of_means is None else float(d.js_qk_v_of_means[row])
                    for source in range(n):
                        out.append(dict(
                            tokens=int(tokens), layer=int(layer), site=site, route=route, source=source,
                            weight=float(dist[row, source]), entropy=float(d.entropy[route][row]),
                            token_entropy=float(d.token_entropy[route][row]),
                            eff_depth=float(d.eff_depth[route][row]), js_qk_v=js, js_qk_v_of_means=jsm,
                        ))
        return out


def _role_weights(weights: dict[str, Tensor], names: tuple[str, ...]) -> Tensor:
    return torch.stack([weights[n] for n in names]).mean(0)


@torch.no_grad()
def routing_diagnostics(model, tokens: Tensor) -> RoutingDiagnostics:
    """Run ``model`` on ``tokens [B, T]`` and collect its routing diagnostics.

    ``model`` is a :class:`~harness.models.gpt.DepthRoutedLM` (a ``prenorm`` model has no
    sites and yields empty diagnostics). The model's train/eval mode is preserved.
    """
    sites = model.route_sites()
    result = RoutingDiagnostics()
    if not sites:
        return result
    for _, _, site in sites:
        site.capture = True
    try:
        model(tokens)
        captured = [(l, kind, site.spec, dict(site.last_weights)) for l, kind, site in sites]
    finally:
        for _, _, site in sites:
            site.capture = False
            site.last_weights = {}
    for kind in ("attn", "mlp", "out"):
        entries = [e for e in captured if e[1] == kind]
        if not entries:
            continue
        s_max = max(next(iter(w.values())).shape[0] for *_, w in entries)
        route_names = list(entries[0][2].routes)
        L = len(entries)
        dists = {r: torch.full((L, s_max), float("nan")) for r in route_names}
        ent = {r: torch.zeros(L) for r in route_names}
        tok_ent = {r: torch.zeros(L) for r in route_names}
        depth = {r: torch.zeros(L) for r in route_names}
        n_sources = torch.zeros(L, dtype=torch.long)
        js = torch.zeros(L) if kind == "attn" else None
        js_means = torch.zeros(L) if kind == "attn" else None
        for row, (_, _, spec, weights) in enumerate(entries):
            S = next(iter(weights.values())).shape[0]
            n_sources[row] = S
            idx = torch.arange(S, dtype=torch.float32)
            for r in route_names:
                w = weights[r].float()  # [S, B, T]
                mean = w.mean(dim=(1, 2))  # [S]
                dists[r][row, :S] = mean
                ent[r][row] = entropy(mean)
                tok_ent[r][row] = entropy(w, dim=0).mean()
                depth[r][row] = (idx * mean).sum()
            if kind == "attn":
                pk = _role_weights(weights, spec.roles["k"]).float()
                pv = _role_weights(weights, spec.roles["v"]).float()
                js[row] = js_divergence(pk, pv, dim=0).mean()
                js_means[row] = js_divergence(pk.mean(dim=(1, 2)), pv.mean(dim=(1, 2)))
        result.sites[kind] = SiteDiagnostics(
            routes=dists, n_sources=n_sources, entropy=ent, token_entropy=tok_ent, eff_depth=depth,
            layers=[e[0] for e in entries], js_qk_v=js, js_qk_v_of_means=js_means,
        )
    return result
