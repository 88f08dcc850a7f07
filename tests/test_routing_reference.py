"""The model's routing equals a naive reference written straight from DESIGN section 3,
forward and gradients, for every block- and full-residual variant with random queries.

The reference stacks the sources, applies the site's key RMSNorm (with its gain), takes
softmax over the source axis of ``w . K_i`` and mixes the un-normalised sources; Block
AttnRes state follows the official pseudocode. It shares no routing code with the model,
so an optimised route (cached keys, hand-written backward) is checked against the math.
The model routes in float32 by design (logits stay float32 under autocast), so the bounds
are float32 rounding: a wrong formula shows up as O(1) relative errors, far above them.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from harness.models import available_variants, build_model, get_spec

BLOCK_VARIANTS = [v for v in available_variants() if get_spec(v).residual in ("block", "full")]


def ref_site(site, sources: list[torch.Tensor]) -> dict[str, torch.Tensor]:
    V = torch.stack(sources)  # [S, B, T, D]
    K = F.rms_norm(V, (V.shape[-1],), site.key_norm.weight, 1e-6)  # per-site RMSNorm with gain
    routes = {}
    for name, queries in site.spec.routes.items():
        w = sum(getattr(site, q) for q in queries)  # [D]
        a = torch.softmax(torch.einsum("sbtd,d->sbt", K, w), dim=0)  # softmax over sources
        routes[name] = torch.einsum("sbt,sbtd->btd", a, V)
    return {role: sum(routes[r] for r in names) / len(names) for role, names in site.spec.roles.items()}


def ref_hidden(model, tokens):
    x = model.tok_emb(tokens)
    cos, sin = model.rope_cos, model.rope_sin
    if model.spec.residual == "full":
        sources = [x]
        for layer in model.layers:
            sources.append(layer.attention(ref_site(layer.attn_route, sources), cos, sin))
            h = ref_site(layer.mlp_route, sources)["mlp"]
            sources.append(layer.mlp(layer.mlp_norm(h)))
        return ref_site(model.out_route, sources)["out"]
    blocks, partial = [], x
    every = model.cfg.block_size // 2
    for l, layer in enumerate(model.layers):
        roles = ref_site(layer.attn_route, blocks + [partial])
        if l % every == 0:
            blocks.append(partial)
            partial = None
        a = layer.attention(roles, cos, sin)
        partial = a if partial is None else partial + a
        h = ref_site(layer.mlp_route, blocks + [partial])["mlp"]
        partial = partial + layer.mlp(layer.mlp_norm(h))
    return ref_site(model.out_route, blocks + [partial])["out"]


@pytest.mark.parametrize("variant", BLOCK_VARIANTS)
def test_model_routing_equals_the_design_formula(variant):
    torch.manual_seed(0)
    model = build_model(variant, "tiny", seed=3, n_layers=4)
    with torch.no_grad():
        for name, t in list(model.named_parameters()) + list(model.named_buffers()):
            if name.rsplit(".", 1)[-1].startswith("w_") or name.endswith("key_norm.weight"):
                t.add_(torch.randn_like(t))
    x = torch.randint(0, model.cfg.vocab_size, (2, 24))
    out = model.hidden(x)
    ref = ref_hidden(model, x)
    assert (out - ref).abs().max().item() < 2e-5 * max(1.0, ref.abs().max().item())
    g = torch.randn_like(out)
    params = [p for p in model.parameters() if p.requires_grad]
    grads = torch.autograd.grad((out * g).sum(), params, allow_unused=True)
    ref_grads = torch.autograd.grad((ref * g).sum(), params, allow_unused=True)
    checked = 0
    for (name, _), a, b in zip([(n, p) for n, p in model.named_parameters() if p.requires_grad], grads, ref_grads):
        if a is None or b is None:
            assert a is None or a.abs().max() == 0, name
            assert b is None or b.abs().max() == 0, name
            continue
        assert (a - b).abs().max().item() < 1e-4 * max(1e-3, b.abs().max().item()), name
        checked += 1
    assert checked >= 20
