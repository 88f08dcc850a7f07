"""Routing diagnostics (DESIGN section 3, "Routing diagnostics").

For a batch, per layer and routing site and route: the depth distribution over sources
averaged over tokens (``[layers, sources]``), its entropy (nats), the effective depth
``sum_i i * a_i``, and for variants whose K and V roles read different routes the
Jensen-Shannon divergence (nats, base e) between the K-role and V-role distributions,
averaged per token (``js_qk_v``), next to the JS divergence of the token-averaged
distributions (``js_qk_v_of_means``). A role's distribution is the mean of its routes'
distributions, which is exactly the mixing weight the role's input applies to each
source (a role reading (r0 + r1)/2 mixes with (a0 + a1)/2); at an attention site split
across head groups, both JS values are the head-weighted mean over the groups.

Degeneracy records (DESIGN section 3, "A control that cannot differ from the parent is
not a control"), table ``route_pairs``: for each pair of routes of a site, the max
|difference| of their summed queries and of their offsets, and the per-token JS
divergence of their distributions; table ``route_params``: for each trainable
pseudo-query and offset, its max |change| from its initial value
(:func:`route_param_rows`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from harness.models.init import is_zero_init


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
        pairs: ``(route_a, route_b)`` -> :class:`PairDiagnostics` for every pair of routes.
    """

    routes: dict[str, Tensor]
    n_sources: Tensor
    entropy: dict[str, Tensor]
    token_entropy: dict[str, Tensor]
    eff_depth: dict[str, Tensor]
    layers: list[int]
    js_qk_v: Tensor | None = None
    js_qk_v_of_means: Tensor | None = None
    pairs: dict[tuple[str, str], PairDiagnostics] = field(default_factory=dict)


@dataclass
class PairDiagnostics:
    """Two routes of one site kind, per layer (``[layers]`` each).

    Attributes:
        query_max_abs_diff: ``max_d |w_a - w_b|`` of the two summed pseudo-queries.
        offset_max_abs_diff: ``max_d |b_a - b_b|`` of their offsets (a missing offset is 0).
        js: per-token JS divergence (nats) of the two route distributions, token mean.
    """

    query_max_abs_diff: Tensor
    offset_max_abs_diff: Tensor
    js: Tensor


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
                        out.append(
                            dict(
                                tokens=int(tokens),
                                layer=int(layer),
                                site=site,
                                route=route,
                                source=source,
                                weight=float(dist[row, source]),
                                entropy=float(d.entropy[route][row]),
                                token_entropy=float(d.token_entropy[route][row]),
                                eff_depth=float(d.eff_depth[route][row]),
                                js_qk_v=js,
                                js_qk_v_of_means=jsm,
                            )
                        )
        return out

    def pair_rows(self, tokens: int) -> list[dict]:
        """Rows ``(tokens, layer, site, route_a, route_b, query_max_abs_diff,
        offset_max_abs_diff, js)`` for DuckDB ``route_pairs`` (one per layer and route pair)."""
        out = []
        for site, d in self.sites.items():
            for (a, b), pd in d.pairs.items():
                for row, layer in enumerate(d.layers):
                    out.append(
                        dict(
                            tokens=int(tokens),
                            layer=int(layer),
                            site=site,
                            route_a=a,
                            route_b=b,
                            query_max_abs_diff=float(pd.query_max_abs_diff[row]),
                            offset_max_abs_diff=float(pd.offset_max_abs_diff[row]),
                            js=float(pd.js[row]),
                        )
                    )
        return out


class RoutingAccumulator:
    """Token-weighted running sums of route weights over many batches.

    Usage: ``acc = RoutingAccumulator(model)``; ``with acc: model(x)`` for each batch
    (captures that forward); ``acc.result()``. Per (site, layer) it keeps the sums over
    tokens of each route's weights ``[S]`` and per-token entropy, the K and V role
    weights ``[S]`` and per-token JS; everything reported is a token mean, so sums over
    batches (and over DDP ranks, see :meth:`sum_tensors`) combine exactly.
    """

    def __init__(self, model) -> None:
        self.model = model
        self.sites = model.route_sites()
        self.tokens = 0
        self.sums: dict[tuple[int, str], dict[str, Tensor]] = {}

    def __enter__(self) -> RoutingAccumulator:
        for _, _, site in self.sites:
            site.capture = True
        return self

    def __exit__(self, *exc) -> None:
        try:
            if exc[0] is None:
                self._update()
        finally:
            for _, _, site in self.sites:
                site.capture = False
                site.last_weights = {}

    def _update(self) -> None:
        n = None
        for layer, kind, site in self.sites:
            weights = {r: w.float() for r, w in site.last_weights.items()}  # each [S, B, T]
            n = next(iter(weights.values()))[0].numel()
            acc = self.sums.setdefault((layer, kind), {})
            for r, w in weights.items():
                _add(acc, f"w:{r}", w.sum(dim=(1, 2)))
                _add(acc, f"h:{r}", entropy(w, dim=0).sum())
            for a, b in site.spec.route_pairs():
                _add(acc, f"pjs:{a}|{b}", js_divergence(weights[a], weights[b], dim=0).sum())
            if kind == "attn":
                for g, group in enumerate(site.spec.groups):
                    pk = _role_weights(weights, group.roles["k"])
                    pv = _role_weights(weights, group.roles["v"])
                    _add(acc, f"k:{g}", pk.sum(dim=(1, 2)))
                    _add(acc, f"v:{g}", pv.sum(dim=(1, 2)))
                    _add(acc, f"js:{g}", js_divergence(pk, pv, dim=0).sum())
        self.tokens += n or 0

    def sum_tensors(self) -> list[Tensor]:
        """The accumulator's sum tensors in a fixed order (all-reduce them in place under DDP)."""
        return [t for key in sorted(self.sums) for _, t in sorted(self.sums[key].items())]

    def result(self) -> RoutingDiagnostics:
        """Token-averaged diagnostics over every captured batch."""
        result = RoutingDiagnostics()
        if not self.sums or not self.tokens:
            return result
        N = float(self.tokens)
        for kind in ("attn", "mlp", "out"):
            keys = sorted(k for k in self.sums if k[1] == kind)
            if not keys:
                continue
            layers = [k[0] for k in keys]
            spec = dict((l, s) for l, k, s in self.sites if k == kind)
            route_names = list(spec[layers[0]].spec.routes)
            s_max = max(self.sums[k][f"w:{route_names[0]}"].numel() for k in keys)
            L = len(keys)
            d = SiteDiagnostics(
                routes={r: torch.full((L, s_max), float("nan")) for r in route_names},
                n_sources=torch.zeros(L, dtype=torch.long),
                entropy={r: torch.zeros(L) for r in route_names},
                token_entropy={r: torch.zeros(L) for r in route_names},
                eff_depth={r: torch.zeros(L) for r in route_names},
                layers=layers,
                js_qk_v=torch.zeros(L) if kind == "attn" else None,
                js_qk_v_of_means=torch.zeros(L) if kind == "attn" else None,
                pairs={
                    pair: PairDiagnostics(torch.zeros(L), torch.zeros(L), torch.zeros(L))
                    for pair in spec[layers[0]].spec.route_pairs()
                },
            )
            for row, key in enumerate(keys):
                acc = {name: t.cpu() for name, t in self.sums[key].items()}
                S = acc[f"w:{route_names[0]}"].numel()
                d.n_sources[row] = S
                idx = torch.arange(S, dtype=torch.float32)
                for r in route_names:
                    mean = acc[f"w:{r}"] / N
                    d.routes[r][row, :S] = mean
                    d.entropy[r][row] = entropy(mean)
                    d.token_entropy[r][row] = acc[f"h:{r}"] / N
                    d.eff_depth[r][row] = (idx * mean).sum()
                if kind == "attn":
                    groups = spec[key[0]].spec.groups
                    total = sum(g.share for g in groups)
                    d.js_qk_v[row] = sum(g.share / total * acc[f"js:{i}"] / N for i, g in enumerate(groups))
                    d.js_qk_v_of_means[row] = sum(
                        g.share / total * js_divergence(acc[f"k:{i}"] / N, acc[f"v:{i}"] / N)
                        for i, g in enumerate(groups)
                    )
                site = spec[key[0]]
                queries = dict(zip(site.route_names, site.route_queries().detach().float().cpu()))
                offsets = {r: b.detach().float().cpu() for r, b in site.route_offsets().items()}
                zero = torch.zeros(())
                for (a, b), pd in d.pairs.items():
                    pd.query_max_abs_diff[row] = (queries[a] - queries[b]).abs().max()
                    pd.offset_max_abs_diff[row] = (offsets.get(a, zero) - offsets.get(b, zero)).abs().max()
                    pd.js[row] = acc[f"pjs:{a}|{b}"] / N
            result.sites[kind] = d
        return result


def route_param_snapshot(model) -> dict[str, Tensor]:
    """Detached CPU copies of every trainable pseudo-query and offset of ``model`` (its
    routing parameters; a spec can add no others), by qualified name, ``[D]`` each."""
    return {
        name: p.detach().float().cpu().clone()
        for name, p in model.named_parameters()
        if p.requires_grad and is_zero_init(name)
    }


def route_param_rows(model, initial: dict[str, Tensor], tokens: int) -> list[dict]:
    """Rows ``(tokens, layer, site, name, numel, max_abs_change, max_abs_value)`` for DuckDB
    ``route_params``: each routing parameter's max |change| from ``initial`` (a
    :func:`route_param_snapshot` taken at initialisation) and its max |value|.

    ``layer`` is the layer of the parameter's site (``n_layers`` for the output site) and
    ``site`` its kind (``attn``, ``mlp``, ``out``); ``name`` is the leaf name (``w_dup``).
    """
    module_names = {id(m): n for n, m in model.named_modules()}
    where = {module_names[id(site)]: (layer, kind) for layer, kind, site in model.route_sites()}
    rows = []
    for full, p in model.named_parameters():
        if full not in initial:
            continue
        prefix, name = full.rsplit(".", 1)
        layer, kind = where[prefix]
        value = p.detach().float().cpu()
        rows.append(
            dict(
                tokens=int(tokens),
                layer=int(layer),
                site=kind,
                name=name,
                numel=int(value.numel()),
                max_abs_change=float((value - initial[full]).abs().max()),
                max_abs_value=float(value.abs().max()),
            )
        )
    return rows


def _add(acc: dict[str, Tensor], key: str, value: Tensor) -> None:
    acc[key] = value.detach().double() if key not in acc else acc[key] + value.detach().double()


def _role_weights(weights: dict[str, Tensor], names: tuple[str, ...]) -> Tensor:
    """A role's mixing weights: the mean of its routes' weights (``[S, B, T]``)."""
    return torch.stack([weights[n] for n in names]).mean(0)


@torch.no_grad()
def routing_diagnostics(model, tokens: Tensor | list[Tensor]) -> RoutingDiagnostics:
    """Run ``model`` on ``tokens [B, T]`` (or a list of such batches) and return the
    token-averaged routing diagnostics.

    ``model`` is a :class:`~harness.models.gpt.DepthRoutedLM`; a ``prenorm`` model has no
    sites and yields empty diagnostics.
    """
    acc = RoutingAccumulator(model)
    for batch in tokens if isinstance(tokens, list) else [tokens]:
        with acc:
            model(batch)
    return acc.result()
