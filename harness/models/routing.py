"""Depth routing: softmax attention over earlier representations (DESIGN section 3).

A *source* is a hidden state ``[B, T, D]``. A *route* with pseudo-query ``w`` (``[D]``,
zero-initialised) over sources ``s_0 .. s_{S-1}`` is (Attention Residuals, arXiv
2603.15031, section 3; RD-AttnRes, arXiv 2608.01075)::

    K_i   = RMSNorm_site(s_i)              # key: RMSNorm with a per-site gain g
    a_i   = softmax_i(w . K_i)             # per token, softmax over the SOURCE axis
    route = sum_i a_i * s_i                # mixes the UN-normalised sources

How it is computed. With ``r_i = 1 / rms(s_i)`` (``[B, T]``) and the site's effective
query ``u = g * w`` (``[D]``), ``w . K_i = r_i * (s_i . u)``: no normalised key tensor is
ever built. ``r_i`` of a completed source is computed once and shared by every later site
(:class:`SourceBank`); only the in-progress ``partial`` is normalised per site. Sources are
never stacked into an ``[S, B, T, D]`` tensor, so neither the forward nor the state saved for
backward copies them. Logits are float32 even under autocast.

Two paths compute the same routes (to ~1e-6; ``DepthRoutedLM.routing``):

* two-phase (default; Attention Residuals, section 4): the pseudo-queries are parameters, so
  at a block boundary one pass over the completed sources serves every site and route of the
  coming block (:class:`BlockPrefix`: running max ``m``, denominator ``l``, partial sum
  ``acc``), and each site adds the in-progress partial with an online-softmax correction
  (:func:`merge_partial`). Completed sources are read once per block, not once per site;
* per-site: each site reads all its sources, its routes together (:func:`mix_routes`).

Either way, route ``j``'s numbers never depend on the other routes or sites (one mat-vec per
query), so the identities between variants of DESIGN section 3 hold bit for bit on each path.
With all queries at zero every route is the uniform mean of its sources, which is why
every variant equals the parent at initialisation.

A *site* (:class:`RouteSite`) holds the pseudo-queries, offsets, routes (sums of queries,
plus an offset) and the roles (means of routes) of each head group of one
:class:`~harness.models.spec.SiteSpec`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from harness.models.spec import SiteSpec


def upcast(x: Tensor) -> Tensor:
    """``x`` in at least float32: bf16/fp16 are converted, float32 and float64 returned as they
    are (no copy; float64 stays float64, so a float64 model computes in float64 throughout)."""
    return x if x.dtype in (torch.float32, torch.float64) else x.float()


class RMSNorm(nn.Module):
    """Root-mean-square norm with a learned gain: ``x / sqrt(mean(x^2) + eps) * g``.

    Shapes: ``[..., D] -> [..., D]``. Computed in float32 for bf16 inputs.
    """

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        return F.rms_norm(upcast(x), (x.shape[-1],), upcast(self.weight), self.eps).type_as(x)


def inv_rms(x: Tensor, eps: float) -> Tensor:
    """``1 / sqrt(mean(x^2) + eps)`` over the last axis in float32: ``[..., D] -> [...]``."""
    return torch.rsqrt(upcast(x).square().mean(-1) + eps)


def mix_routes(values: list[Tensor], rstd: list[Tensor], u: Tensor) -> tuple[Tensor, Tensor]:
    """R routes over the same S sources in one pass: ``route_j = sum_i a_ij s_i`` with
    ``a_:j = softmax_i(r_i * (s_i . u_j))``.

    Args:
        values: S sources ``[B, T, D]``.
        rstd: their ``r_i = inv_rms(s_i)``, ``[B, T]`` float32 each.
        u: the routes' effective queries ``g * w_j``, ``[R, D]`` float32.

    Returns:
        The routes ``[R, B, T, D]`` (the sources' dtype; ``out[j]`` is route j) and the
        weights ``a`` ``[S, R, B, T]`` (float32; softmax over the source axis S).

    Each source is read once for the logits of every route and once for every route's mix:
    the mixes are accumulated together in one ``[R, B, T, D]`` tensor, source by source,
    each step saving only ``a_i`` (``[R, B, T, 1]``) and a source that is alive anyway, so
    backward keeps no ``[S, B, T, D]`` tensor and runs once per site, whatever R. Route j's
    numbers do not depend on the other routes: its logits are the parent's mat-vec
    ``s_i @ u_j`` (a batched ``[D, R]`` contraction would round differently for each R, by
    ~1e-6, and break the exact identities of DESIGN section 3, e.g. ``rd_attnres`` with
    ``w_v = w_qk``), the softmax and the mix are element-wise in j. Under ``torch.compile``
    the site (with the partial's ``inv_rms``) fuses into one kernel forward and one backward.
    """
    R = u.shape[0]
    with torch.autocast(u.device.type, enabled=False):  # bf16 logits would blur the softmax
        logits = torch.stack(
            [torch.stack([upcast(v) @ u[j] for j in range(R)]) * r for v, r in zip(values, rstd)]
        )  # [S, R, B, T]
    weights = torch.softmax(logits, dim=0)  # softmax over the source axis S
    a = weights.to(values[0].dtype).unsqueeze(-1)  # [S, R, B, T, 1]
    out = a[0] * values[0]  # [R, B, T, D]: each source broadcast over the routes
    for i in range(1, len(values)):
        out = torch.addcmul(out, a[i], values[i])
    return out, weights


class BlockPrefix:
    """Phase 1 of two-phase routing (Attention Residuals, arXiv 2603.15031, section 4, "two-phase
    computation"): every query of a block over the block's completed sources, in one pass.

    The pseudo-queries are parameters, not functions of the input, so at a block boundary the
    logits of every site and route of the coming block over the completed sources
    ``s_0 .. s_{S-1}`` are known at once. For the ``N`` effective queries ``u_n = g_site * w_n``
    (``[N, D]``) of those routes (:meth:`RouteSite.effective_queries`)::

        z_in  = r_i * (s_i . u_n)                      # logits, [S, N, B, T], r_i = 1 / rms(s_i)
        m_n   = max_i z_in                             # running maximum,          [N, B, T]
        e_in  = exp(z_in - m_n)
        l_n   = sum_i e_in                             # softmax denominator,      [N, B, T]
        acc_n = sum_i e_in * s_i                       # unnormalised partial sum, [N, B, T, D]

    all in float32 (float64 for a float64 model). Each source is read once for all ``N``
    logits (one ``[B T, D] x [D, N]`` matmul) and once for all ``N`` partial sums (an
    ``addcmul`` chain over the sources, which ``torch.compile`` fuses into one kernel), instead
    of once per site and route (eager runs one mat-vec per query, compiled code fuses them).
    Backward saves the sources (alive anyway), ``e`` (no ``D`` axis)
    and the queries: no ``[S, B, T, D]`` tensor. The running maximum is not differentiated: the
    routes do not depend on it in exact arithmetic (it cancels between ``acc`` and ``l``), so its
    gradient is zero and only rounding would flow through it. A site takes its rows with :meth:`rows` and
    merges the in-progress partial with :func:`merge_partial`.

    Query ``n``'s numbers do not depend on the other queries (element-wise in ``n``), so the
    identities between variants hold bit for bit within two-phase routing; against the
    per-site path the normalisation ``acc / l`` happens after the sum rather than before it
    (and the max is subtracted), so the two agree to ~1e-6, not bit for bit (``docs/design.md``).
    """

    def __init__(self, values: list[Tensor], rstd: list[Tensor], u: Tensor) -> None:
        self.offset = 0
        with torch.autocast(u.device.type, enabled=False):  # bf16 logits would blur the softmax
            # one mat-vec per query: query n's logits then do not depend on the other queries (a
            # [D, N] matmul rounds by N and would break DESIGN section 3's exact identities);
            # torch.compile fuses the N mat-vecs of a source into one read of it
            logits = torch.stack(
                [torch.stack([upcast(v) @ u[n] for n in range(u.shape[0])]) * r for v, r in zip(values, rstd)]
            )
        self.logits = logits  # [S, N, B, T]
        # the running max only shifts the exponents: every route is invariant to it (acc / l, and
        # merge_partial's c), so its exact gradient is zero and autograd need not differentiate it
        # (FlashAttention's rule): no amax backward, no logits saved for it
        self.m = logits.detach().amax(0)  # [N, B, T]
        e = torch.exp(logits - self.m)  # [S, N, B, T]
        self.e = e
        self.l = e.sum(0)  # [N, B, T]
        acc = e[0].unsqueeze(-1) * upcast(values[0])  # [N, B, T, D]: each source broadcast over N
        for i in range(1, len(values)):
            acc = torch.addcmul(acc, e[i].unsqueeze(-1), upcast(values[i]))
        self.acc = acc

    def rows(self, n: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """The next ``n`` queries' ``(m [n,B,T], l [n,B,T], acc [n,B,T,D], e [S,n,B,T])``, in the
        order the queries were given (sites take their rows in that order)."""
        a, b = self.offset, self.offset + n
        self.offset = b
        return self.m[a:b], self.l[a:b], self.acc[a:b], self.e[:, a:b]


def merge_partial(
    m: Tensor, l: Tensor, acc: Tensor, partial: Tensor | None, r_p: Tensor | None, u: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """Phase 2 of two-phase routing: add the in-progress ``partial`` to phase 1's result with an
    online-softmax (log-sum-exp) correction (Milakov and Gimelshein 2018, arXiv 1805.02867)::

        z_p   = r_p * (partial . u)                    # [R, B, T]
        m'    = max(m, z_p);   c = exp(m - m');   e_p = exp(z_p - m')
        route = (c * acc + e_p * partial) / (c * l + e_p)

    which is ``sum_i a_i s_i`` with ``a = softmax(z_0 .. z_{S-1}, z_p)`` in exact arithmetic.

    Args:
        m, l, acc: phase 1's rows of this site's ``R`` routes (:meth:`BlockPrefix.rows`).
        partial: the in-progress block ``[B, T, D]``, or ``None`` when the site routes over
            completed sources only (then ``route = acc / l``).
        r_p: ``inv_rms(partial)`` ``[B, T]`` (``None`` with ``partial``).
        u: the routes' effective queries ``[R, D]``.

    Returns:
        The routes ``[R, B, T, D]`` (float32, or float64), the completed sources' weight scale
        ``c / den`` ``[R, B, T]`` and the partial's weight ``e_p / den`` ``[R, B, T]`` (``None``
        without a partial; both for diagnostics).
    """
    if partial is None:
        inv = 1.0 / l
        return acc * inv.unsqueeze(-1), inv, None
    with torch.autocast(u.device.type, enabled=False):
        p = upcast(partial)
        # route j's logits are its own mat-vec, so they do not depend on the other routes
        # (a [D, R] matmul rounds differently for R = 1 and R = 2: rd_attnres with w_v = w_qk
        # would no longer be the parent bit for bit)
        z_p = torch.stack([p @ u[j] for j in range(u.shape[0])]) * r_p  # [R, B, T]
    m_new = torch.maximum(m, z_p).detach()  # a shift: the route is invariant to it (see BlockPrefix)
    c = torch.exp(m - m_new)
    e_p = torch.exp(z_p - m_new)
    inv = 1.0 / (c * l + e_p)
    scale, w_p = c * inv, e_p * inv  # [R, B, T]
    out = torch.addcmul(acc * scale.unsqueeze(-1), w_p.unsqueeze(-1), p)  # [R, B, T, D]
    return out, scale, w_p


class SourceBank:
    """The sources a site routes over, each with its inverse RMS cached.

    Completed sources (Block AttnRes ``blocks``, Full AttnRes sublayer outputs) are
    appended once with ``r = inv_rms(source)`` (``[B, T]``, float32); every later site
    reuses it (keys computed once, DESIGN section 3). The in-progress ``partial`` block
    is passed per call, since it changes after every sublayer; when a partial is then
    appended (a block closes), its ``r`` from that call is reused.
    """

    def __init__(self, eps: float) -> None:
        self.eps = eps
        self.values: list[Tensor] = []  # each [B, T, D]
        self.rstd: list[Tensor] = []  # each [B, T], float32
        self._last_partial: tuple[Tensor, Tensor] | None = None

    def append(self, x: Tensor) -> None:
        last = self._last_partial
        self.values.append(x)
        self.rstd.append(last[1] if last is not None and last[0] is x else inv_rms(x, self.eps))
        self._last_partial = None

    def sources(self, partial: Tensor | None = None) -> tuple[list[Tensor], list[Tensor]]:
        """Values (S tensors ``[B, T, D]``) and their ``r`` (``[B, T]``), incl. ``partial``."""
        if partial is None:
            return self.values, self.rstd
        r = inv_rms(partial, self.eps)
        self._last_partial = (partial, r)
        return self.values + [partial], self.rstd + [r]

    def __len__(self) -> int:
        return len(self.values)


class RouteSite(nn.Module):
    """One routing site (an attention, MLP or output site of one layer).

    Parameters are registered under the spec's names (``w_qk``, ``w_v``, ``w_extra``,
    ``w_dup``, ``w_mlp``, ``w_out`` pseudo-queries; ``b_qk`` offsets); frozen ones
    (``fixed_v``'s ``w_v``) are persistent buffers, so they are saved but never trained.
    ``key_norm.weight`` is the per-site RMSNorm gain of the keys.

    A site that routes over a single source (``single_source``: the first attention site,
    whose only source is the embedding) has no parameters at all: a softmax over one
    source is 1 whatever the query, so its queries, key gain and offsets would never get a
    gradient (DDP refuses such parameters, DESIGN section 11); every route is the source.

    ``forward(bank, partial=None)`` routes over the bank's sources plus ``partial`` (when
    given) and returns one ``{role: [B, T, D]}`` per head group of the spec, in head order
    (a single dict in a list unless the attention site is split across head groups).
    Each route is ``sum_i a_i s_i`` plus its offset, if it has one; a role reads the mean
    of its routes. Roles (and groups) reading the same routes get the same tensor object,
    so the attention module projects it once. When ``capture`` is set, the last per-token
    route weights are kept in ``last_weights`` (``{route: [S, B, T]}``, float32,
    detached) for diagnostics.
    """

    def __init__(self, d_model: int, spec: SiteSpec, *, single_source: bool = False) -> None:
        super().__init__()
        self.spec = spec
        self.d_model = d_model
        self.single_source = single_source
        if not single_source:
            self.key_norm = RMSNorm(d_model)
            for name, trainable in {**spec.queries, **spec.offsets}.items():
                if trainable:
                    self.register_parameter(name, nn.Parameter(torch.zeros(d_model)))
                else:
                    self.register_buffer(name, torch.zeros(d_model))
        self.route_names = list(spec.routes)
        self.capture = False
        self.last_weights: dict[str, Tensor] = {}

    def route_queries(self) -> Tensor:
        """Each route's query: the sum of its pseudo-queries, ``[R, D]`` (zeros, on the CPU, at a
        single-source site, which has none: every route is its one source)."""
        if self.single_source:
            return torch.zeros(len(self.route_names), self.d_model)
        rows = []
        for route in self.route_names:
            names = self.spec.routes[route]
            w = getattr(self, names[0])
            for extra in names[1:]:
                w = w + getattr(self, extra)
            rows.append(w)
        return torch.stack(rows)

    def effective_queries(self) -> Tensor:
        """Each route's effective query ``u = g * w`` (key-norm gain times the route's query),
        ``[R, D]`` in float32: ``w . RMSNorm_g(s) = r(s) * (s . u)``, so one ``r`` per source
        serves every site however its gain differs (module docstring)."""
        return upcast(self.route_queries()) * upcast(self.key_norm.weight)

    def route_offsets(self) -> dict[str, Tensor]:
        """Each route's offset ``[D]``, for routes that have one (none at a single-source site)."""
        if self.single_source:
            return {}
        return {route: getattr(self, name) for route, name in self.spec.route_offsets.items()}

    def forward(
        self, bank: SourceBank, partial: Tensor | None = None, prefix: BlockPrefix | None = None
    ) -> list[dict[str, Tensor]]:
        if prefix is not None and not self.single_source:
            return self._roles(self._two_phase(bank, partial, prefix))
        values, rstd = bank.sources(partial)  # S tensors [B, T, D] and [B, T]
        if self.single_source and len(values) != 1:
            raise ValueError(f"a single-source site got {len(values)} sources")
        routes: dict[str, Tensor] = {}
        if len(values) == 1:
            # softmax over a single source is exactly 1: every route is that source
            if self.capture:
                ones = values[0].new_ones((1, *values[0].shape[:2]), dtype=torch.float32)
                self.last_weights = {r: ones for r in self.route_names}
            routes = {name: values[0] for name in self.route_names}
        else:
            u = upcast(self.route_queries()) * upcast(self.key_norm.weight)  # [R, D]
            mixed, weights = mix_routes(values, rstd, u)  # [R, B, T, D] and [S, R, B, T]
            routes = {name: mixed[j] for j, name in enumerate(self.route_names)}
            if self.capture:
                self.last_weights = {name: weights[:, j].detach() for j, name in enumerate(self.route_names)}
        return self._roles(routes)

    def _two_phase(self, bank: SourceBank, partial: Tensor | None, prefix: BlockPrefix) -> dict[str, Tensor]:
        """This site's routes from phase 1's rows (:class:`BlockPrefix`) and the partial
        (:func:`merge_partial`): ``{route: [B, T, D]}`` in the sources' dtype."""
        u = self.effective_queries()  # [R, D]
        m, l, acc, e = prefix.rows(len(self.route_names))
        r_p = None
        if partial is not None:
            _, rstd = bank.sources(partial)  # caches inv_rms(partial) for the bank's next append
            r_p = rstd[-1]
        mixed, scale, w_p = merge_partial(m, l, acc, partial, r_p, u)  # [R, B, T, D]
        dtype = (partial if partial is not None else bank.values[0]).dtype
        mixed = mixed.to(dtype)
        if self.capture:
            weights = e * scale  # [S, R, B, T]
            if w_p is not None:
                weights = torch.cat([weights, w_p.unsqueeze(0)])
            self.last_weights = {name: weights[:, j].detach() for j, name in enumerate(self.route_names)}
        return {name: mixed[j] for j, name in enumerate(self.route_names)}

    def _roles(self, routes: dict[str, Tensor]) -> list[dict[str, Tensor]]:
        """Offsets added to their routes, then one ``{role: [B, T, D]}`` per head group."""
        for name, b in self.route_offsets().items():
            routes[name] = routes[name] + b.to(routes[name].dtype)  # [B, T, D] + [D]
        out: list[dict[str, Tensor]] = []
        cache: dict[tuple[str, ...], Tensor] = {}
        for group in self.spec.groups:
            roles: dict[str, Tensor] = {}
            for role, names in group.roles.items():
                if names not in cache:
                    x = routes[names[0]]
                    if any(routes[n] is not x for n in names[1:]):  # the mean of one tensor is itself
                        for extra in names[1:]:
                            x = x + routes[extra]
                        x = x / len(names)
                    cache[names] = x
                roles[role] = cache[names]
            out.append(roles)
        return out
