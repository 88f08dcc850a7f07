"""The model equals a naive reference written straight from DESIGN section 3 and the
Attention Residuals pseudocode (arXiv 2603.15031), forward and gradients, for every block-
and full-residual variant (and a three-group spec with an offset) with random queries,
offsets and key-norm gains, at block sizes 2, 4 and 6.

The reference shares no code with ``harness/models``: it reads the model's parameters by
name and the variant spec's data (which queries and offsets make which routes, which
routes feed which roles of which heads), nothing else. In particular it does not replay
the model's ``blocks``/``partial`` state machine: the sources each site sees come from
the block definition itself. Number the sublayers j = 0, 1, ... (attention of layer l is
j = 2l, its MLP j = 2l + 1; the output site is j = 2L). Block 0 is the token embedding;
sublayer j belongs to block 1 + j // block_size. The site before sublayer k routes over
the embedding and, for every later block that has begun before k, the sum of its
sublayer outputs j < k (the last one in progress unless k starts a new block). Its own
attention (per head, own RoPE) and SwiGLU follow DESIGN section 2.

The model routes in float32 by design (logits stay float32 under autocast), so the bounds
are float32 rounding: a wrong formula or boundary shows up as O(1) relative errors.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from harness.models import available_variants, build_model, get_spec
from harness.models.spec import parse_spec

EPS = 1e-6
ROUTED = [v for v in available_variants() if get_spec(v).residual in ("block", "full")]
# Three head groups of unequal size, a route with an offset, a role averaging two routes.
THREE_GROUPS = parse_spec(
    {
        "name": "three_groups",
        "residual": "block",
        "role": "control",
        "attn": {
            "queries": {"w_qk": {}, "w_v": {}, "w_dup": {}},
            "offsets": {"b_v": {}},
            "routes": {"qk": ["w_qk"], "v": {"queries": ["w_v", "w_qk"], "offset": "b_v"}, "dup": ["w_dup"]},
            "head_groups": [
                {"share": 1, "q": ["qk"], "k": ["qk"], "v": ["v"]},
                {"share": 2, "q": ["dup"], "k": ["qk", "dup"], "v": ["dup"]},
                {"share": 1, "q": ["v"], "k": ["v"], "v": ["qk"]},
            ],
        },
    }
)


# -- the reference -------------------------------------------------------------------------


def rms(x: torch.Tensor, weight: torch.Tensor | None = None) -> torch.Tensor:
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS)
    return y if weight is None else y * weight


def site_sources(
    emb: torch.Tensor, outputs: list[torch.Tensor], k: int, block_size: int | None
) -> list[torch.Tensor]:
    """Sources of the site before sublayer ``k``: Full AttnRes (``block_size`` None) sees
    every output; Block AttnRes sees the embedding and one sum per begun block."""
    if block_size is None:
        return [emb] + outputs[:k]
    blocks: dict[int, torch.Tensor] = {}
    for j in range(k):
        b = 1 + j // block_size
        blocks[b] = outputs[j] if b not in blocks else blocks[b] + outputs[j]
    return [emb] + [blocks[b] for b in sorted(blocks)]


def in_progress(k: int, block_size: int) -> bool:
    """Whether the last source of the site before sublayer ``k`` is an unfinished block."""
    return k > 0 and k % block_size != 0


def ref_routes(params: dict, prefix: str, spec, sources: list[torch.Tensor]) -> dict[str, torch.Tensor]:
    if len(sources) == 1:  # softmax over one source is 1: such a site has no parameters, every route is it
        assert not any(k.startswith(prefix) for k in params), prefix
        return {name: sources[0] for name in spec.routes}
    V = torch.stack(sources)  # [S, B, T, D]
    K = rms(V, params[prefix + "key_norm.weight"])  # per-site RMSNorm with gain
    out = {}
    for name, queries in spec.routes.items():
        w = sum(params[prefix + q] for q in queries)  # [D]
        a = torch.softmax(torch.einsum("sbtd,d->sbt", K, w), dim=0)  # softmax over the source axis
        out[name] = torch.einsum("sbt,sbtd->btd", a, V)  # mixes the un-normalised sources
        if name in spec.route_offsets:
            out[name] = out[name] + params[prefix + spec.route_offsets[name]]
    return out


def mean_of(routes: dict[str, torch.Tensor], names) -> torch.Tensor:
    return sum(routes[n] for n in names) / len(names)


def rope(x: torch.Tensor, base: float) -> torch.Tensor:
    """Rotate channel pairs (2i, 2i+1) of ``x [B, T, hs]`` by ``t * base^(-2i/hs)`` (complex form)."""
    T, hs = x.shape[1], x.shape[2]
    angle = torch.outer(torch.arange(T, dtype=x.dtype), base ** (-torch.arange(0, hs, 2, dtype=x.dtype) / hs))
    z = torch.view_as_complex(x.reshape(*x.shape[:2], hs // 2, 2).contiguous())
    return torch.view_as_real(z * torch.polar(torch.ones_like(angle), angle)).flatten(-2)


def ref_attention(params: dict, l: int, spec, routes: dict, cfg) -> torch.Tensor:
    p = f"layers.{l}."
    H, D = cfg.n_heads, cfg.d_model
    hs = D // H
    shares = [g.share for g in spec.groups]
    group_of = [g for g, s in enumerate(shares) for _ in range(H * s // sum(shares))]
    assert len(group_of) == H
    W = params[p + "attn.qkv.weight"]  # rows: q | k | v, head-major inside each
    heads = []
    for h in range(H):
        roles = spec.groups[group_of[h]].roles
        x = {r: rms(mean_of(routes, roles[r]), params[p + "attn_norm.weight"]) for r in "qkv"}
        q, k, v = (x[r] @ W[i * D + h * hs : i * D + (h + 1) * hs].T for i, r in enumerate("qkv"))
        q, k = rope(q, cfg.rope_base), rope(k, cfg.rope_base)
        T = q.shape[1]
        scores = q @ k.transpose(1, 2) / math.sqrt(hs)
        scores = scores.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
        heads.append(torch.softmax(scores, -1) @ v)
    return torch.cat(heads, -1) @ params[p + "attn.proj.weight"].T


def ref_mlp(params: dict, l: int, h: torch.Tensor) -> torch.Tensor:
    p = f"layers.{l}."
    gate, up = (rms(h, params[p + "mlp_norm.weight"]) @ params[p + "mlp.gate_up.weight"].T).chunk(2, -1)
    return (F.silu(gate) * up) @ params[p + "mlp.down.weight"].T


def ref_hidden(model, spec, tokens: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Final hidden state ``[B, T, D]`` and the number of attention sites that routed over
    an in-progress block."""
    cfg = model.cfg
    params = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    emb = params["tok_emb.weight"][tokens]
    block_size = None if spec.residual == "full" else cfg.block_size
    outputs: list[torch.Tensor] = []
    partial_sites = 0
    for l in range(cfg.n_layers):
        k = 2 * l
        partial_sites += block_size is not None and in_progress(k, block_size)
        routes = ref_routes(
            params, f"layers.{l}.attn_route.", spec.sites["attn"], site_sources(emb, outputs, k, block_size)
        )
        outputs.append(ref_attention(params, l, spec.sites["attn"], routes, cfg))
        mlp = spec.sites["mlp"]
        routes = ref_routes(
            params, f"layers.{l}.mlp_route.", mlp, site_sources(emb, outputs, k + 1, block_size)
        )
        outputs.append(ref_mlp(params, l, mean_of(routes, mlp.groups[0].roles["mlp"])))
    out = spec.sites["out"]
    routes = ref_routes(params, "out_route.", out, site_sources(emb, outputs, 2 * cfg.n_layers, block_size))
    return mean_of(routes, out.groups[0].roles["out"]), partial_sites


# -- the tests -------------------------------------------------------------------------------


def test_block_timing_of_the_reference_follows_the_pseudocode_by_hand():
    """block_size 4 (two layers per block), sublayer outputs o0, o1, ...: the sites of
    layer 1 see [emb, o0 + o1] and [emb, o0 + o1 + o2]; layer 2's attention site sees the
    finished block [emb, o0 + .. + o3], its MLP site [emb, o0 + .. + o3, o4]."""
    emb, *o = [torch.full((1,), float(10**i)) for i in range(7)]
    val = lambda k: [s.item() for s in site_sources(emb, o, k, 4)]
    assert val(0) == [1.0]
    assert val(1) == [1.0, 10.0]
    assert val(2) == [1.0, 110.0] and in_progress(2, 4)
    assert val(3) == [1.0, 1110.0]
    assert val(4) == [1.0, 11110.0] and not in_progress(4, 4)
    assert val(5) == [1.0, 11110.0, 100000.0]


CASES = [(v, bs) for v in ROUTED for bs in ((2, 4, 6) if get_spec(v).residual == "block" else (2,))]


@pytest.mark.parametrize(
    "variant, block_size",
    CASES + [(THREE_GROUPS, 4)],
    ids=[f"{getattr(v, 'name', v)}-block{bs}" for v, bs in CASES + [(THREE_GROUPS, 4)]],
)
def test_model_equals_the_independent_reference(variant, block_size):
    torch.manual_seed(0)
    spec = variant if not isinstance(variant, str) else get_spec(variant)
    model = build_model(spec, "tiny", seed=3, n_layers=5, n_heads=4, block_size=block_size)
    with torch.no_grad():
        for name, t in list(model.named_parameters()) + list(model.named_buffers()):
            leaf = name.rsplit(".", 1)[-1]
            # scales that keep the softmax over sources away from one-hot, so that float32
            # rounding stays near 1e-6 relative
            if leaf.startswith(("w_", "b_")) or name.endswith("norm.weight"):
                t.add_(torch.randn_like(t) * {"w": 0.5, "b": 0.1}.get(leaf[0], 0.3))
    x = torch.randint(0, model.cfg.vocab_size, (2, 24))
    out = model.hidden(x)
    ref, partial_sites = ref_hidden(model, spec, x)
    if spec.residual == "block" and block_size >= 4:
        assert partial_sites > 0  # some attention site routed over an in-progress block
    assert (out - ref).abs().max().item() < 2e-5 * max(1.0, ref.abs().max().item())
    g = torch.randn_like(out)
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    params = [p for _, p in named]
    grads = torch.autograd.grad((out * g).sum(), params, allow_unused=True)
    ref_grads = torch.autograd.grad((ref * g).sum(), params, allow_unused=True)
    checked = 0
    for (name, _), a, b in zip(named, grads, ref_grads):
        if a is None or b is None:
            assert a is None or a.abs().max() == 0, name
            assert b is None or b.abs().max() == 0, name
            continue
        assert (a - b).abs().max().item() < 1e-4 * max(1e-3, b.abs().max().item()), name
        checked += 1
    assert checked >= 40
