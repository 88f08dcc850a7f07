"""Routing's bytes-moved model and roofline (harness/bench/routing_cost.py) against a hand count."""

from __future__ import annotations

import pytest

from harness.bench.peaks import MEMORY_BANDWIDTH, PEAK_FLOPS
from harness.bench.routing_cost import MFU_GOAL, roofline, routing_traffic
from harness.models import get_spec
from harness.models.flops import SiteShape, routing_blocks
from harness.models.sizes import derive

TINY = derive("tiny")  # L = 2, D = 64, block_size 2: one layer per block


def test_tiny_block_attnres_sites_by_hand():
    # block 0: S = 1 (the embedding); layer 0's attention site routes over it alone (no routing),
    # its MLP site adds the partial. block 1 (the last): S = 2; attention over the blocks, the
    # MLP and the output site over blocks + partial.
    assert routing_blocks(get_spec("block_attnres"), TINY) == [
        [SiteShape(1, True, 1)],
        [SiteShape(2, False, 1), SiteShape(2, True, 1), SiteShape(2, True, 1)],
    ]
    rd = routing_blocks(get_spec("rd_attnres"), TINY)
    assert [s.routes for b in rd for s in b] == [1, 2, 1, 1]  # the attention site has QK and V routes
    assert routing_blocks(get_spec("prenorm"), TINY) == []


def test_tiny_bytes_and_flops_by_hand():
    vec = 64 * 4  # one float32 [D] vector per token
    # per-site: a site over n sources with R routes reads 2n, writes R; backward reads R + 2n, writes n.
    # sites (n, R): (2, 1), (2, 1), (3, 1), (3, 1)
    per = routing_traffic(get_spec("block_attnres"), TINY, "per_site")
    assert per["fwd_read"] == (4 + 4 + 6 + 6) * vec
    assert per["fwd_write"] == 4 * vec
    assert per["bwd_read"] == (5 + 5 + 7 + 7) * vec
    assert per["bwd_write"] == (2 + 2 + 3 + 3) * vec
    assert per["bytes"] == 58 * vec
    assert per["flops"] == 3 * 64 * (8 + 8 + 12 + 12)  # 4 D per (source, route), backward 2x
    # two-phase: block 0 (S=1, N=1) phase 1 reads 2, writes 1; bwd reads 1 + 2, writes 1; its MLP site
    # (p=1, R=1) reads 1 + 2, writes 1; bwd reads 2 + 2, writes 2. block 1 (S=2, N=3): phase 1 reads 4,
    # writes 3; bwd reads 3 + 4, writes 2; attention (p=0) reads 1, writes 1; bwd reads 2, writes 1;
    # the MLP and output sites (p=1) as block 0's MLP site.
    two = routing_traffic(get_spec("block_attnres"), TINY, "two_phase")
    assert two["fwd_read"] == (2 + 3 + 4 + 1 + 3 + 3) * vec
    assert two["fwd_write"] == (1 + 1 + 3 + 1 + 1 + 1) * vec
    assert two["bwd_read"] == (3 + 4 + 7 + 2 + 4 + 4) * vec
    assert two["bwd_write"] == (1 + 2 + 2 + 1 + 2 + 2) * vec
    assert two["flops"] == 3 * 64 * ((4 * 1 * 1 + 7) + (4 * 2 * 3 + 3 + 7 + 7))
    with pytest.raises(ValueError, match="routing path 'fused'; allowed: two_phase, per_site"):
        routing_traffic(get_spec("block_attnres"), TINY, "fused")


def test_two_phase_moves_fewer_bytes_where_blocks_have_many_sites():
    """At 120m (4 sites a block) and 343m (8) the completed sources are read once per block: the
    bytes fall by a third or more; the paper-scale sizes are what the roofline is for."""
    for size, most in (("120m", 0.65), ("343m", 0.6)):
        cfg = derive(size)
        a = routing_traffic(get_spec("block_attnres"), cfg, "per_site")["bytes"]
        b = routing_traffic(get_spec("block_attnres"), cfg, "two_phase")["bytes"]
        assert b < most * a, size


def test_roofline_share_by_hand():
    n_params = 1_000_000
    out = roofline(get_spec("block_attnres"), TINY, n_params, ["NVIDIA H200"])
    flops = 6 * n_params + 12 * 2 * 64 * 64
    t_r = 58 * 64 * 4 / 4.8e12
    t_rest = flops / (PEAK_FLOPS["NVIDIA H200"][0] * MFU_GOAL)
    got = out["NVIDIA H200"]["per_site"]
    assert got["share_at_mfu_goal"] == pytest.approx(t_r / (t_r + t_rest), rel=1e-12)
    assert got["share_at_peak"] == pytest.approx(t_r / (t_r + flops / 989.4e12), rel=1e-12)
    assert got["routing_us_per_ktoken"] == pytest.approx(1e9 * t_r, rel=1e-12)
    assert (
        MEMORY_BANDWIDTH["NVIDIA H100 80GB HBM3"] == 3.35e12
        and MEMORY_BANDWIDTH["NVIDIA H100 PCIe"] == 2.0e12
    )
    assert set(MEMORY_BANDWIDTH) <= set(PEAK_FLOPS)


def test_estimate_beside_measurement_from_a_bench_json():
    """scripts/gpu_check.sh's lines: bytes/token x step tokens / bandwidth beside the profile's routing ms."""
    from harness.bench.routing_cost import estimate_vs_measured, routing_cost_fields

    result = {
        "size": "tiny",
        "device_name": "NVIDIA H200",
        "step_tokens": 1000,
        "step_ms": {"prenorm": 5.0, "block_attnres": 6.0},
        "routing_paths": {"step_ms": {"block_attnres": 6.0, "block_attnres@per_site": 6.5}},
        "routing_cost": routing_cost_fields("tiny", ["prenorm", "block_attnres"]),
        "profile": {"arms": {"block_attnres@per_site": {"categories": {"routing": 0.25}, "total_ms": 6.5}}},
    }
    lines = estimate_vs_measured(result)
    est_two = 58 * 64 * 4 * 1000 / 4.8e12 * 1e3  # tiny's two paths move the same 58 vectors a token
    assert lines[1].split() == [
        "block_attnres",
        "estimate",
        f"{est_two:.2f}",
        "ms",
        "measured",
        "n/a",
        "(no",
        "--profile)",
    ]
    assert (
        lines[2].split()
        == ["block_attnres@per_site", "estimate", f"{est_two:.2f}", "ms"]
        + "measured 0.25 ms of 6.5 ms".split()
    )
    assert len(lines) == 3  # prenorm has no routing
    result["device_name"] = "x86_64"
    assert "n/a (no bandwidth known)" in estimate_vs_measured(result)[1]


def test_assemble_reports_two_phase_against_per_site_as_paired_ratios():
    """``--per-site``: routing_paths holds both arms' medians and the median per-round ratio
    two-phase / per-site with its order-statistic interval; routing_cost is always there."""
    import datetime as dt

    import torch

    from harness.bench import BenchConfig, assemble

    per = [10.0, 12.0, 10.0, 20.0, 10.0, 10.0, 10.0]
    two = [9.0, 10.8, 9.5, 10.0, 9.0, 9.0, 9.6]  # per-round ratios 0.9 0.9 0.95 0.5 0.9 0.9 0.96: median 0.9
    samples = {"prenorm": [8.0] * 7, "block_attnres": two, "block_attnres@per_site": per}
    variants = ["prenorm", "block_attnres"]
    cfg = BenchConfig(size="tiny", variants=tuple(variants), per_site=True)
    result = assemble(
        cfg,
        variants,
        torch.device("cpu"),
        4,
        64,
        samples,
        {"prenorm": 1.0, "block_attnres": 1.0, "block_attnres@per_site": 1.0},
        {},
        {"prenorm": 1, "block_attnres": 1},
        dt.datetime(2026, 1, 1),
        routing_arms=["block_attnres"],
    )
    paths = result["routing_paths"]
    assert paths["step_ms"] == {"block_attnres": 9.5, "block_attnres@per_site": 10.0}
    assert paths["ratios"] == {"block_attnres: two_phase/per_site": pytest.approx(0.9)}
    assert paths["ratio_intervals"]["block_attnres: two_phase/per_site"] == pytest.approx(
        [0.5, 0.96]
    )  # n = 7: [x_(1), x_(7)]
    assert result["routing_cost"]["per_token"]["tiny"]["block_attnres"]["per_site"]["bytes"] == 58 * 64 * 4
    assert "block_attnres" not in result["routing_paths"]["ratios"]  # only the paired keys
