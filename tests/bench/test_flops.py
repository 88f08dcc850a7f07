"""Model FLOPs per token for MFU (harness.bench.flops), against a hand computation at 120m."""

from __future__ import annotations

import datetime as dt

import pytest
import torch

from harness.bench import BenchConfig
from harness.bench.result import assemble
from harness.bench.table import format_report
from harness.models import build_model, count_params
from harness.models.flops import model_flops_per_token


@pytest.mark.slow
def test_120m_flops_per_token_equal_the_hand_count():
    # 120m: L 12, D 768, T 1024, SwiGLU hidden 2048 (8/3 D), V 50304 tied, Block AttnRes routes
    L, D, T, V, F = 12, 768, 1024, 50304, 2048
    per_layer = (
        4 * D * D + 3 * D * F + 2 * D + 2 * (2 * D)
    )  # qkv+proj, gate_up+down, 2 norms, 2 sites (query + key norm)
    # layer 0's attention site routes over the embedding alone: no query, no key norm (DESIGN 3, issue 24)
    n_hand = L * per_layer - 2 * D + V * D + 2 * D + D  # + tied embedding, output site, final norm
    model = build_model("block_attnres", "120m", seed=0)
    n = count_params(model)["total"]
    assert n == n_hand == 123_624_192
    flops = model_flops_per_token(n, L, D, T)
    assert flops == 6 * 123_624_192 + 12 * 12 * 768 * 1024 == 854_991_360


def test_an_unknown_device_gets_no_mfu_and_a_note():
    samples = {"block_attnres": [10.0, 11.0, 12.0]}
    cfg = BenchConfig(size="tiny", variants=("block_attnres",), loop_rounds=0)
    result = assemble(
        cfg,
        ["block_attnres"],
        torch.device("cpu"),
        4,
        64,
        samples,
        {"block_attnres": 1.0},
        {},
        {"block_attnres": 1000},
        dt.datetime(2026, 1, 1),
    )
    assert result["mfu"] is None and "MFU omitted" in result["mfu_note"]
    assert result["flops_per_token"] == {"block_attnres": 6 * 1000 + 12 * 2 * 64 * 64}
    # routing included (DESIGN 14): tiny Block AttnRes two-phase, 4 S N + (4 p R + 3 R) per block, x 3 D
    routing = 3 * ((4 * 1 + 4 + 3) + (4 * 2 * 3 + 3 + 4 + 3 + 4 + 3)) * 64
    assert result["training_flops_per_token"] == {"block_attnres": 6 * 1000 + 12 * 2 * 64 * 64 + routing}
    assert "MFU omitted" in format_report(result) and "6 N + 12 L D T" in format_report(result)
