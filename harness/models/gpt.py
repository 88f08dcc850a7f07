"""Decoder-only language model with depth routing (DESIGN section 2 and 3).

Choices (departures from textbook GPT-2 in the usual modern direction):

- pre-norm RMSNorm, no biases anywhere;
- rotary position embeddings (RoPE) on queries and keys;
- SwiGLU MLP with hidden width 8/3 * D rounded up to a multiple of 64;
- causal ``scaled_dot_product_attention``;
- LM head tied to the token embedding (configurable);
- the residual stream is one of three structures, chosen by the variant spec:
  ``prenorm`` (x += f(norm(x))), ``full`` (Full AttnRes) or ``block`` (Block AttnRes).

Block AttnRes state, following the official pseudocode (arXiv 2603.15031)::

    blocks = [emb]        completed block sums (sources), appended at block boundaries
    partial               running sum of sublayer outputs in the current block

    layer l:  h = route_attn(blocks + [partial])  -> roles q, k, v
              if l % (block_size/2) == 0: blocks.append(partial); partial = None
              partial (+)= Attn(norm(h_q), norm(h_k), norm(h_v))
              h = route_mlp(blocks + [partial])
              partial += MLP(norm(h))
    output:   route_out(blocks + [partial]) -> final norm -> LM head

(Starting from ``blocks = []`` and ``partial = emb``, layer 0 closes the embedding as
``blocks[0]``.) Which route feeds the Q, K and V projections, for which heads, is the
variant spec's business; the attention module only sees three inputs, ``[B, T, D]``
each, per group of heads.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from harness.models.numerics import DEFAULT_ROUTING, ROUTING_PATHS
from harness.models.routing import BlockPrefix, RMSNorm, RouteSite, SourceBank, upcast
from harness.models.sizes import ModelConfig
from harness.models.spec import VariantSpec


def rope_tables(head_dim: int, context: int, base: float) -> tuple[Tensor, Tensor]:
    """RoPE cos/sin tables ``[T, head_dim/2]`` (Su et al. 2021, RoFormer, eq. 34)."""
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    t = torch.arange(context, dtype=torch.float32)
    freqs = torch.outer(t, inv_freq)
    return freqs.cos(), freqs.sin()


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate pairs of channels: ``x [B, H, T, hs]``, ``cos/sin [T, hs/2]``."""
    x1, x2 = x[..., 0::2], x[..., 1::2]
    y1 = x1 * cos - x2 * sin
    y2 = x1 * sin + x2 * cos
    return torch.stack((y1, y2), dim=-1).flatten(-2).type_as(x)


class Attention(nn.Module):
    """Causal multi-head self-attention whose Q, K, V projections may read different inputs,
    and different inputs per group of heads.

    ``forward(groups, cos, sin)``: ``groups`` holds one ``(xq, xk, xv)`` per head group
    (``head_counts``, in head order), each ``[B, T, D]`` and already normalised ->
    ``[B, T, D]``. A group's projections use only its heads' rows of the Q/K/V weight, and
    every distinct input tensor is projected once, with the rows of all the (group, role)
    slots that read it: the parent (one input) does a single fused QKV matmul, RD-AttnRes
    (Q = K input, own V input) two, and a split into head groups never computes a full
    projection it then discards.
    """

    def __init__(self, cfg: ModelConfig, head_counts: list[int] | None = None) -> None:
        super().__init__()
        self.n_heads = cfg.n_heads
        self.head_dim = cfg.d_model // cfg.n_heads
        counts = head_counts or [cfg.n_heads]
        if sum(counts) != cfg.n_heads:
            raise ValueError(f"head groups {counts} do not add up to n_heads={cfg.n_heads}")
        starts = [sum(counts[:i]) for i in range(len(counts))]
        self.head_ranges = [(h0, h0 + n) for h0, n in zip(starts, counts)]  # [h0, h1) per group
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=False)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model, bias=False)

    def _project(self, groups: list[tuple[Tensor, Tensor, Tensor]]) -> tuple[Tensor, Tensor, Tensor]:
        """Q, K, V ``[B, T, D]`` each; rows of ``qkv.weight`` are q | k | v, heads in order."""
        D, hs, W = self.n_heads * self.head_dim, self.head_dim, self.qkv.weight  # W: [3D, D]
        reads: dict[int, tuple[Tensor, list[tuple[int, int, int, int]]]] = {}  # input -> (role, group, rows)
        for g, ((h0, h1), xs) in enumerate(zip(self.head_ranges, groups)):
            for j, x in enumerate(xs):  # j: 0 = q, 1 = k, 2 = v
                reads.setdefault(id(x), (x, []))[1].append((j, g, j * D + h0 * hs, j * D + h1 * hs))
        parts: list[list[Tensor | None]] = [[None] * len(groups) for _ in range(3)]
        for x, slots in reads.values():
            spans: list[list[int]] = []
            for _, _, lo, hi in slots:  # merge consecutive rows: the parent's fused QKV is W itself
                if spans and spans[-1][1] == lo:
                    spans[-1][1] = hi
                else:
                    spans.append([lo, hi])
            w = W[spans[0][0] : spans[0][1]] if len(spans) == 1 else torch.cat([W[lo:hi] for lo, hi in spans])
            y = F.linear(x, w)  # [B, T, rows]
            for (j, g, _lo, _hi), piece in zip(slots, y.split([hi - lo for _, _, lo, hi in slots], dim=-1)):
                parts[j][g] = piece
        return tuple(p[0] if len(p) == 1 else torch.cat(p, dim=-1) for p in parts)  # type: ignore[return-value]

    def forward(self, groups: list[tuple[Tensor, Tensor, Tensor]], cos: Tensor, sin: Tensor) -> Tensor:
        B, T, D = groups[0][0].shape
        q, k, v = self._project(groups)  # each [B, T, D]
        q, k, v = (
            t.view(B, T, self.n_heads, self.head_dim).transpose(1, 2) for t in (q, k, v)
        )  # (B, H, T, hs)
        q, k = apply_rope(q, cos[:T], sin[:T]), apply_rope(k, cos[:T], sin[:T])
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, T, hs)
        return self.proj(y.transpose(1, 2).reshape(B, T, D))


class SwiGLU(nn.Module):
    """SwiGLU MLP (Shazeer 2020): ``down(silu(gate(x)) * up(x))``, ``[B, T, D] -> [B, T, D]``."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.gate_up = nn.Linear(cfg.d_model, 2 * cfg.mlp_hidden, bias=False)
        self.down = nn.Linear(cfg.mlp_hidden, cfg.d_model, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        gate, up = self.gate_up(x).chunk(2, dim=-1)
        return self.down(F.silu(gate) * up)


class Layer(nn.Module):
    """One transformer layer: an attention sublayer and an MLP sublayer, each with its
    pre-norm and (for AttnRes variants) its routing site ``attn_route`` / ``mlp_route``.
    The ``first`` layer's attention site routes over one source and has no parameters."""

    def __init__(self, cfg: ModelConfig, spec: VariantSpec, *, first: bool = False) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        counts = None
        if spec.residual != "prenorm":
            try:
                counts = spec.sites["attn"].head_counts(cfg.n_heads)
            except ValueError as exc:
                raise ValueError(f"variant {spec.name!r}: {exc}") from None
        self.attn = Attention(cfg, counts)
        self.mlp_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.mlp = SwiGLU(cfg)
        if spec.residual != "prenorm":
            # layer 0's attention site routes over the embedding alone (Block and Full AttnRes)
            self.attn_route = RouteSite(cfg.d_model, spec.sites["attn"], single_source=first)
            self.mlp_route = RouteSite(cfg.d_model, spec.sites["mlp"])

    def attention(self, groups: list[dict[str, Tensor]], cos: Tensor, sin: Tensor) -> Tensor:
        """Attention sublayer output ``[B, T, D]`` from the role inputs q, k, v of each head
        group (``[B, T, D]`` each; one pre-attention RMSNorm per distinct input)."""
        normed: dict[int, Tensor] = {}
        xs = []
        for roles in groups:
            for role in ("q", "k", "v"):
                x = roles[role]
                if id(x) not in normed:
                    normed[id(x)] = self.attn_norm(x)
            xs.append(tuple(normed[id(roles[role])] for role in ("q", "k", "v")))
        return self.attn(xs, cos, sin)


def block_prefix(bank: SourceBank, sites: list[RouteSite]) -> BlockPrefix | None:
    """Phase 1 for ``sites`` (in the order they will route) over the bank's completed sources;
    ``None`` when none of them routes over more than one source."""
    sites = [s for s in sites if not s.single_source]
    if not sites:
        return None
    return BlockPrefix(bank.values, bank.rstd, torch.cat([s.effective_queries() for s in sites]))


class DepthRoutedLM(nn.Module):
    """Decoder LM of DESIGN section 2 with the residual structure of a :class:`VariantSpec`.

    ``routing`` (:data:`~harness.models.numerics.ROUTING_PATHS`) picks how the routing sites are computed,
    not what: ``two_phase`` (default) or ``per_site``; it is an attribute, not part of the config, so it
    never enters a protocol hash. The two round differently: each has its numerics revision
    (:data:`~harness.models.numerics.NUMERICS_REVISIONS`), which a run records.

    ``forward(tokens [B, T] int64) -> logits [B, T, V]`` (float32 on CPU; the autocast
    dtype under mixed precision). Under bf16 autocast the residual stream, Block AttnRes's
    partial sums and Full AttnRes's sources stay float32 (sublayer outputs are bf16 and are
    added to or upcast into float32), so depth sums never accumulate in bf16 (DESIGN section 11).

    Raises:
        ValueError: token ids outside ``[0, vocab_size)``, a non-integer dtype, or a
            sequence longer than the context (checked unless ``validate_tokens`` is off).
    """

    def __init__(self, cfg: ModelConfig, spec: VariantSpec, *, routing: str = DEFAULT_ROUTING) -> None:
        super().__init__()
        if routing not in ROUTING_PATHS:
            raise ValueError(f"routing={routing!r}; allowed: {', '.join(ROUTING_PATHS)}")
        self.cfg = cfg
        self.spec = spec
        self.routing = routing
        self.validate_tokens = True
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.layers = nn.ModuleList(Layer(cfg, spec, first=l == 0) for l in range(cfg.n_layers))
        if spec.residual != "prenorm":
            self.out_route = RouteSite(cfg.d_model, spec.sites["out"])
        self.final_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.tok_emb.weight
        cos, sin = rope_tables(cfg.d_model // cfg.n_heads, cfg.context, cfg.rope_base)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    # -- input checking ---------------------------------------------------------------
    def check_tokens(self, tokens: Tensor) -> None:
        """Raise ``ValueError`` for bad token tensors (see class docstring)."""
        if tokens.dtype not in (torch.int64, torch.int32):
            raise ValueError(f"tokens must be int64 (or int32), got {tokens.dtype}")
        if tokens.dim() != 2:
            raise ValueError(f"tokens must have shape [B, T], got {tuple(tokens.shape)}")
        if tokens.shape[1] > self.cfg.context:
            raise ValueError(f"sequence length {tokens.shape[1]} exceeds the context {self.cfg.context}")
        if tokens.numel():
            lo, hi = torch.aminmax(tokens)
            lo, hi = int(lo), int(hi)
            if lo < 0 or hi >= self.cfg.vocab_size:
                raise ValueError(
                    f"token ids must be in [0, {self.cfg.vocab_size}), got min {lo} and max {hi} "
                    f"(is the model's vocab_size the tokenizer's?)"
                )

    # -- forward --------------------------------------------------------------------
    def hidden(self, tokens: Tensor) -> Tensor:
        """Final hidden state before the last norm, ``[B, T, D]``."""
        if self.validate_tokens and not torch.compiler.is_compiling():
            self.check_tokens(tokens)
        x = self.tok_emb(tokens)  # [B, T, D]
        cos, sin = self.rope_cos, self.rope_sin
        residual = self.spec.residual
        if residual == "prenorm":
            for layer in self.layers:
                x = x + layer.attention([{"q": x, "k": x, "v": x}], cos, sin)
                x = x + layer.mlp(layer.mlp_norm(x))
            return x
        bank = SourceBank(self.cfg.norm_eps)
        if self.routing == "two_phase":
            return self._two_phase(bank, x, cos, sin)
        if residual == "full":
            bank.append(x)  # every sublayer output becomes its own source
            for layer in self.layers:
                a = layer.attention(layer.attn_route(bank), cos, sin)
                bank.append(upcast(a))  # sources float32 under autocast, as a pre-norm stream
                h = layer.mlp_route(bank)[0]["mlp"]
                bank.append(upcast(layer.mlp(layer.mlp_norm(h))))
            return self.out_route(bank)[0]["out"]
        # Block AttnRes
        every = self.cfg.block_size // 2  # layers per block (two sublayers per layer)
        partial: Tensor | None = x
        for l, layer in enumerate(self.layers):
            groups = layer.attn_route(bank, partial)
            if l % every == 0:
                bank.append(partial)
                partial = None
            a = layer.attention(groups, cos, sin)
            # float32 under bf16 autocast (a sublayer's output is bf16): the block's sum accumulates
            # in float32, as a pre-norm residual stream does; no copy in float32 or float64
            partial = upcast(a) if partial is None else partial + a
            h = layer.mlp_route(bank, partial)[0]["mlp"]
            partial = partial + layer.mlp(layer.mlp_norm(h))
        return self.out_route(bank, partial)[0]["out"]

    def _two_phase(self, bank: SourceBank, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        """:meth:`hidden` with two-phase routing: at every block boundary one :class:`BlockPrefix`
        over the completed sources serves every site of the coming block; each site adds the
        in-progress partial (:func:`~harness.models.routing.merge_partial`). Same pseudocode as
        the per-site path: the boundary's attention site routes over ``blocks + [partial]``,
        which is the bank right after the partial is appended. Full AttnRes closes a source
        after every sublayer, so each of its sites is a block of its own."""
        if self.spec.residual == "full":
            bank.append(x)
            for layer in self.layers:
                site = layer.attn_route
                a = layer.attention(site(bank, None, block_prefix(bank, [site])), cos, sin)
                bank.append(upcast(a))
                h = layer.mlp_route(bank, None, block_prefix(bank, [layer.mlp_route]))[0]["mlp"]
                bank.append(upcast(layer.mlp(layer.mlp_norm(h))))
            return self.out_route(bank, None, block_prefix(bank, [self.out_route]))[0]["out"]
        every = self.cfg.block_size // 2  # layers per block (two sublayers per layer)
        L = len(self.layers)
        partial: Tensor | None = x
        prefix: BlockPrefix | None = None
        for l, layer in enumerate(self.layers):
            if l % every == 0:  # block boundary: close the partial, phase 1 for the coming block
                bank.append(partial)
                partial = None
                block = self.layers[l : min(l + every, L)]
                sites = [s for lay in block for s in (lay.attn_route, lay.mlp_route)]
                prefix = block_prefix(bank, sites + ([self.out_route] if l + every >= L else []))
            groups = layer.attn_route(bank, partial, prefix)
            a = layer.attention(groups, cos, sin)
            partial = upcast(a) if partial is None else partial + a
            h = layer.mlp_route(bank, partial, prefix)[0]["mlp"]
            partial = partial + layer.mlp(layer.mlp_norm(h))
        return self.out_route(bank, partial, prefix)[0]["out"]

    def forward(self, tokens: Tensor) -> Tensor:
        return self.lm_head(self.final_norm(self.hidden(tokens)))

    # -- bookkeeping ----------------------------------------------------------------
    def route_sites(self) -> list[tuple[int, str, RouteSite]]:
        """All routing sites as ``(layer, site, module)``; the output site has layer ``L``."""
        if self.spec.residual == "prenorm":
            return []
        sites = []
        for l, layer in enumerate(self.layers):
            sites.append((l, "attn", layer.attn_route))
            sites.append((l, "mlp", layer.mlp_route))
        sites.append((self.cfg.n_layers, "out", self.out_route))
        return sites
