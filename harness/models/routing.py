"""Depth routing: softmax attention over earlier representations (DESIGN section 3).

A *source* is a hidden state ``[B, T, D]``. A *route* with pseudo-query ``w`` (``[D]``,
zero-initialised) over sources ``s_0 .. s_{S-1}`` is (Attention Residuals, arXiv
2603.15031, section 3; RD-AttnRes, arXiv 2608.01075)::

    K_i   = RMSNorm_site(s_i)              # key: RMSNorm with a per-site gain g
    a_i   = softmax_i(w . K_i)             # per token, softmax over the SOURCE axis
    route = sum_i a_i * s_i                # mixes the UN-normalised sources

Keys are computed once per site and shared by all its routes. Because
``w . (g * n_i) = (g * w) . n_i`` with ``n_i = s_i / rms(s_i)``, the weightless part
``n_i`` is computed once per source (:class:`SourceBank`) and reused by every site that
reads it; a site only forms its effective queries ``u = g * w`` (``[R, D]``). With all
queries at zero every route is the uniform mean of its sources, which is why every
variant equals the parent at initialisation.

A *site* (:class:`RouteSite`) holds the pseudo-queries, routes (sums of queries) and
roles (means of routes) of one :class:`~harness.models.spec.SiteSpec`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from harness.models.spec import SiteSpec


class RMSNorm(nn.Module):
    """Root-mean-square norm with a learned gain: ``x / sqrt(mean(x^2) + eps) * g``.

    Shapes: ``[..., D] -> [..., D]``. Computed in float32 for bf16 inputs.
    """

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        return F.rms_norm(x.float(), (x.shape[-1],), self.weight.float(), self.eps).type_as(x)


def rms_normalize(x: Tensor, eps: float) -> Tensor:
    """Weightless RMS normalisation ``x / sqrt(mean(x^2) + eps)`` in float32: ``[..., D]``."""
    return F.rms_norm(x.float(), (x.shape[-1],), None, eps)


class SourceBank:
    """The sources a site routes over, with their normalised keys cached.

    Completed sources (Block AttnRes ``blocks``, Full AttnRes sublayer outputs) are
    appended once and their weightless RMS-normalised keys kept; the in-progress
    ``partial`` block is passed per call, since it changes after every sublayer.
    """

    def __init__(self, eps: float) -> None:
        self.eps = eps
        self.values: list[Tensor] = []  # each [B, T, D]
        self.keys: list[Tensor] = []  # each [B, T, D], float32

    def append(self, x: Tensor) -> None:
        self.values.append(x)
        self.keys.append(rms_normalize(x, self.eps))

    def stacked(self, partial: Tensor | None) -> tuple[Tensor, Tensor]:
        """Values ``[S, B, T, D]`` and keys ``[S, B, T, D]`` (float32) incl. ``partial``."""
        values, keys = self.values, self.keys
        if partial is not None:
            values = values + [partial]
            keys = keys + [rms_normalize(partial, self.eps)]
        return torch.stack(values), torch.stack(keys)

    def __len__(self) -> int:
        return len(self.values)


class RouteSite(nn.Module):
    """One routing site (an attention, MLP or output site of one layer).

    Parameters are registered under the spec's names (``w_qk``, ``w_v``, ``w_extra``,
    ``w_dup``, ``w_mlp``, ``w_out``); frozen queries (``fixed_v``'s ``w_v``) are
    persistent buffers, so they are saved but never trained. ``key_norm.weight`` is the
    per-site RMSNorm gain of the keys.

    ``forward(values [S,B,T,D], keys [S,B,T,D]) -> {role: [B,T,D]}``. When ``capture`` is
    set, the last per-token route weights are kept in ``last_weights``
    (``{route: [S, B, T]}``, float32, detached) for diagnostics.
    """

    def __init__(self, d_model: int, spec: SiteSpec) -> None:
        super().__init__()
        self.spec = spec
        self.key_norm = RMSNorm(d_model)
        for name, trainable in spec.queries.items():
            if trainable:
                self.register_parameter(name, nn.Parameter(torch.zeros(d_model)))
            else:
                self.register_buffer(name, torch.zeros(d_model))
        self.route_names = list(spec.routes)
        self.capture = False
        self.last_weights: dict[str, Tensor] = {}

    def route_queries(self) -> Tensor:
        """Each route's query: the sum of its pseudo-queries, ``[R, D]``."""
        rows = []
        for route in self.route_names:
            names = self.spec.routes[route]
            w = getattr(self, names[0])
            for extra in names[1:]:
                w = w + getattr(self, extra)
            rows.append(w)
        return torch.stack(rows)

    def forward(self, values: Tensor, keys: Tensor) -> dict[str, Tensor]:
        S = values.shape[0]
        if S == 1:
            # softmax over a single source is exactly 1: every route is that source
            if self.capture:
                ones = values.new_ones(values.shape[:3], dtype=torch.float32)
                self.last_weights = {r: ones for r in self.route_names}
            return {role: values[0] for role in self.spec.roles}
        u = self.route_queries().float() * self.key_norm.weight.float()  # [R, D]
        routes: dict[str, Tensor] = {}
        captured: dict[str, Tensor] = {}
        # One route at a time, each with the same kernel shapes as the parent's single
        # route: a batched [R, ...] contraction rounds differently (~1e-6), which would
        # break the exact identities of DESIGN section 3 (e.g. rd with w_v = w_qk).
        for i, route in enumerate(self.route_names):
            logits = torch.einsum("sbtd,d->sbt", keys, u[i])  # [S, B, T]
            weights = torch.softmax(logits, dim=0)  # softmax over the source axis S
            if self.capture:
                captured[route] = weights.detach()
            routes[route] = torch.einsum("sbt,sbtd->btd", weights.to(values.dtype), values)  # [B, T, D]
        if self.capture:
            self.last_weights = captured
        out: dict[str, Tensor] = {}
        cache: dict[tuple[str, ...], Tensor] = {}
        for role, names in self.spec.roles.items():
            if names not in cache:
                x = routes[names[0]]
                for extra in names[1:]:
                    x = x + routes[extra]
                cache[names] = x / len(names) if len(names) > 1 else x
            out[role] = cache[names]
        return out
