"""Two-phase routing (a block's completed sources read once for all its sites) against the
per-site path it replaces: the same function to 1e-6, not bit for bit (the two normalise in a
different order: softmax-then-mix per site, against ``acc / l`` after an online-softmax merge;
docs/design.md). Identities *between variants* stay exact within either path
(tests/models/test_models.py runs them on the default, two-phase path)."""

from __future__ import annotations

import pytest
import torch
from torch.autograd.graph import saved_tensors_hooks

from harness.models import available_variants, build_model, get_spec
from harness.models.routing import BlockPrefix, merge_partial

TOL = 1e-6
ROUTED = [v for v in available_variants() if get_spec(v).residual != "prenorm"]


def perturb(model: torch.nn.Module, seed: int) -> None:
    """Random queries, offsets and key gains, at scales that keep the softmax over sources
    away from one-hot (so a 1e-6 comparison means something)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, t in list(model.named_parameters()) + list(model.named_buffers()):
            leaf = name.rsplit(".", 1)[-1]
            if leaf.startswith(("w_", "b_")) or name.endswith("norm.weight"):
                t.add_(torch.randn(t.shape, generator=g) * {"w": 0.5, "b": 0.1}.get(leaf[0], 0.3))


def paired(variant: str, block_size: int, dtype: torch.dtype):
    """The same perturbed model on both paths, in ``dtype``, and a batch."""
    kw = dict(seed=3, n_layers=5, n_heads=4, block_size=block_size)
    two = build_model(variant, "tiny", routing="two_phase", **kw)
    per = build_model(variant, "tiny", routing="per_site", **kw)
    perturb(two, 7)
    per.load_state_dict(two.state_dict())
    x = torch.randint(0, two.cfg.vocab_size, (2, 24), generator=torch.Generator().manual_seed(1))
    return two.to(dtype), per.to(dtype), x


def grad_diffs(two, per, x) -> list[tuple[str, float, float]]:
    """``(name, max |grad difference|, max |grad|)`` for every parameter with a gradient."""
    h2, h1 = two.hidden(x), per.hidden(x)
    g = torch.randn(h1.shape, generator=torch.Generator().manual_seed(2), dtype=h1.dtype)
    (h2 * g).sum().backward()
    (h1 * g).sum().backward()
    p1 = dict(per.named_parameters())
    out = []
    for name, p in two.named_parameters():
        if p.grad is None:
            assert p1[name].grad is None or p1[name].grad.abs().max() == 0, name
            continue
        out.append((name, (p.grad - p1[name].grad).abs().max().item(), p.grad.abs().max().item()))
    return out


@pytest.mark.parametrize("block_size", [4, 6])
@pytest.mark.parametrize("variant", ROUTED)
def test_two_phase_equals_per_site_forward_and_gradients(variant, block_size):
    """float32: the hidden states agree to 1e-6 absolute; every gradient to 5e-5 of its largest
    entry (backward sums many rounded terms with cancellation: measured up to 1.1e-5 relative,
    the embedding's gradient in dup_route at block 6; most parameters below 2e-6).
    float64: forward and gradients agree to 1e-12, so the two paths are one function and the
    float32 differences are rounding."""
    two, per, x = paired(variant, block_size, torch.float32)
    h2, h1 = two.hidden(x), per.hidden(x)
    assert (h2 - h1).abs().max().item() <= TOL
    fresh = build_model(
        variant, "tiny", routing="per_site", seed=3, n_layers=5, n_heads=4, block_size=block_size
    )
    assert (h1 - fresh.hidden(x)).abs().max() > 1e-3  # the perturbation matters: not a vacuous match
    diffs = grad_diffs(two, per, x)
    assert len(diffs) >= 30
    for name, diff, scale in diffs:
        assert diff <= 5e-5 * max(1.0, scale), name
    two, per, x = paired(variant, block_size, torch.float64)
    assert (two.hidden(x) - per.hidden(x)).abs().max().item() <= 1e-12
    for name, diff, scale in grad_diffs(two, per, x):
        assert diff <= 1e-12 * max(1.0, scale), name


def test_two_phase_merge_equals_softmax_over_all_sources_by_hand():
    """Phase 1 over three completed sources, phase 2 adding a partial: the route is
    ``sum_i softmax_i(r_i * s_i . u) s_i`` over all four, written out directly."""
    g = torch.Generator().manual_seed(0)
    B, T, D = 2, 3, 8
    srcs = [torch.randn(B, T, D, generator=g, dtype=torch.float64) for _ in range(4)]
    u = torch.randn(2, D, generator=g, dtype=torch.float64)  # two routes
    rstd = [torch.rsqrt(s.square().mean(-1) + 1e-6) for s in srcs]
    prefix = BlockPrefix(srcs[:3], rstd[:3], u)
    m, l, acc, e = prefix.rows(2)
    out, scale, w_p = merge_partial(m, l, acc, srcs[3], rstd[3], u)
    for j in range(2):
        logits = torch.stack([r * (s @ u[j]) for s, r in zip(srcs, rstd)])  # [4, B, T]
        a = torch.softmax(logits, 0)
        expected = sum(a[i, ..., None] * srcs[i] for i in range(4))
        assert torch.allclose(out[j], expected, atol=1e-12)
        assert torch.allclose(w_p[j], a[3], atol=1e-12)
        assert torch.allclose(e[:, j] * scale[j], a[:3], atol=1e-12)
    done, inv, none = merge_partial(m, l, acc, None, None, u)  # completed sources only
    assert none is None
    for j in range(2):
        a = torch.softmax(torch.stack([r * (s @ u[j]) for s, r in zip(srcs[:3], rstd[:3])]), 0)
        assert torch.allclose(done[j], sum(a[i, ..., None] * srcs[i] for i in range(3)), atol=1e-12)


@pytest.mark.parametrize("variant", ["block_attnres", "rd_attnres"])
def test_two_phase_saves_no_tensor_with_a_source_axis(variant):
    """Backward keeps the sources (alive anyway) and per-route tensors, never an
    ``[S, B, T, D]`` stack: every saved tensor has at most R = 2 routes' worth of ``[B, T, D]``."""
    model = build_model(variant, "tiny", seed=0, n_layers=6, block_size=6)
    perturb(model, 1)
    B, T, D = 2, 16, model.cfg.d_model
    x = torch.randint(0, model.cfg.vocab_size, (B, T), generator=torch.Generator().manual_seed(0))
    sizes = []

    def pack(t):
        sizes.append((tuple(t.shape), t.numel()))
        return t

    with saved_tensors_hooks(pack, lambda t: t):
        model.hidden(x)
    routed = [s for s, n in sizes if len(s) >= 3 and s[-1] == D]
    assert routed and max(n for s, n in sizes if len(s) >= 3 and s[-1] == D) <= 2 * B * T * D, sorted(
        routed, key=lambda s: -torch.Size(s).numel()
    )[:3]


def test_bad_routing_path_is_one_clear_error():
    with pytest.raises(ValueError, match="routing='fused'; allowed: two_phase, per_site"):
        build_model("block_attnres", "tiny", seed=0, routing="fused")
