"""Precision under bf16 autocast (issue 37 part 7, DESIGN section 11), on the CPU.

* Depth sums stay float32: Block AttnRes's partial sums and the residual sources every route
  mixes (Full AttnRes's sublayer outputs too) are float32 under bf16 autocast, as a pre-norm
  residual stream is; the identities of DESIGN section 3 are tests/models/test_models.py's.
* The loss on bf16 logits keeps no float32 ``[N, V]`` tensor for its backward (the float32
  log-softmax the plain formula saves), and equals the plain formula ``F.cross_entropy(logits.float())``:
  the same float32 arithmetic on the same bf16 values, so the losses agree to float32 rounding of
  the reductions (relative 1e-6) and the gradients, both float32 values rounded to bf16, differ by
  at most one bf16 unit in the last place (2^-8 relative) where the float32 values straddle a
  rounding boundary. On float32 logits the loss is ``F.cross_entropy`` itself, bit for bit.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from harness.models import build_model
from harness.models.routing import BlockPrefix, RouteSite
from harness.train import loss as loss_module
from harness.train.loss import token_cross_entropy

V = 300  # not a multiple of anything in particular; the chunks do not divide the rows


def bf16_logits(n_tokens: int = 97, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    z = (4 * torch.randn(n_tokens, V, generator=g)).to(torch.bfloat16)
    return z, torch.randint(0, V, (n_tokens,), generator=g)


def saved_shapes(fn) -> list[tuple[torch.dtype, tuple]]:
    """``(dtype, shape)`` of every tensor autograd saves for the backward while ``fn()`` runs."""
    saved = []

    def pack(t):
        saved.append((t.dtype, tuple(t.shape)))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return saved, out


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_bf16_loss_equals_the_float32_formula_without_saving_float32_logits(monkeypatch, reduction):
    monkeypatch.setattr(loss_module, "CHUNK_BYTES", 4 * V * 10)  # 10 rows a chunk: 97 rows in 10 chunks
    z, y = bf16_logits()
    a, b = z.clone().requires_grad_(), z.clone().requires_grad_()
    saved_new, new = saved_shapes(lambda: token_cross_entropy(a, y, reduction))
    saved_old, old = saved_shapes(lambda: F.cross_entropy(b.float(), y, reduction=reduction))
    assert (torch.float32, (97, V)) in saved_old  # the plain formula keeps a float32 log-softmax
    assert [s for s in saved_new if s[1] == (97, V)] == [(torch.bfloat16, (97, V))]  # only the logits
    assert new.dtype == old.dtype == torch.float32
    assert abs(float(new.detach()) - float(old.detach())) <= 1e-6 * abs(float(old.detach()))
    new.backward()
    old.backward()
    assert a.grad.dtype == torch.bfloat16
    ulp = torch.finfo(torch.bfloat16).eps  # 2^-7 between 1 and 2: one unit is 2^-8 relative at worst
    diff = (a.grad.float() - b.grad.float()).abs()
    assert bool((diff <= ulp * b.grad.float().abs()).all()), float(diff.max())


def test_float32_loss_is_f_cross_entropy_bit_for_bit():
    z, y = bf16_logits()
    z32 = z.float().reshape(1, 97, V).requires_grad_()
    ref = z32.detach().clone().requires_grad_()
    for reduction in ("mean", "sum"):
        assert torch.equal(
            token_cross_entropy(z32, y.reshape(1, 97), reduction),
            F.cross_entropy(ref[0], y, reduction=reduction),
        )
    with pytest.raises(ValueError, match=r"^reduction='none'; allowed: 'mean', 'sum'$"):
        token_cross_entropy(z32, y, "none")


def test_the_loss_of_padded_bf16_logits_under_cpu_autocast_equals_the_float32_formula():
    """The real path: a tiny model's bf16 logits under CPU autocast, the padding ids cut as LitLM.loss
    cuts them (a non-contiguous view), the loss and the gradient reaching the weights."""
    model = build_model("rd_attnres", "tiny", seed=0, vocab_size=512)
    tokens = torch.randint(0, 500, (2, 33), generator=torch.Generator().manual_seed(3))
    x, y = tokens[:, :-1], tokens[:, 1:]
    grads, losses = [], []
    for use_new in (True, False):
        model.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(x)[..., :500]
            assert logits.dtype == torch.bfloat16
            loss = (
                token_cross_entropy(logits, y)
                if use_new
                else F.cross_entropy(logits.float().flatten(0, 1), y.flatten())
            )
        loss.backward()
        losses.append(float(loss))
        grads.append(model.lm_head.weight.grad.float().clone())
    assert abs(losses[0] - losses[1]) <= 1e-6 * losses[1]
    rel = float((grads[0] - grads[1]).norm() / grads[1].norm())
    assert rel <= 2**-8, rel


@pytest.mark.parametrize("variant", ["block_attnres", "rd_attnres", "full_attnres"])
def test_depth_sums_and_residual_sources_are_float32_under_bf16_autocast(variant):
    model = build_model(variant, "tiny", seed=0, vocab_size=512)
    seen = []

    def record(site, args):
        bank, *rest = args
        seen.extend(v.dtype for v in bank.values)
        seen.extend(p.dtype for p in rest if isinstance(p, torch.Tensor))  # Block AttnRes's partial sum
        seen.extend(t.dtype for p in rest if isinstance(p, BlockPrefix) for t in (p.acc, p.l))  # phase 1

    for m in model.modules():
        if isinstance(m, RouteSite):
            m.register_forward_pre_hook(record)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(torch.randint(0, 512, (2, 16), generator=torch.Generator().manual_seed(0)))
    assert logits.dtype == torch.bfloat16  # the sublayers and the head do run in bf16
    assert len(seen) >= 2 * 2 and set(seen) == {torch.float32}, seen  # tiny: 2 layers, 2 sites each
