"""`harness bench --profile`: each step's operators land in its own window, once, and the
categories follow the operator and kernel names (harness/bench/profile.py).

No timing assertions: the checks count operator calls (exact per step) and read names.
One eager ``tiny`` benchmark of three variants and one compiled one of two, ~40 s on 2 cores.
"""

from __future__ import annotations

import json

import pytest

from harness.bench.profile import categorize, compare, kernel_name
from harness.cli import main as cli
from harness.models import build_model

pytestmark = pytest.mark.own_cache  # its commands build their corpus in RESULTS/cache (conftest)


def _bench(tmp_path, variants, *extra):
    out = tmp_path / "bench.json"
    argv = [
        "bench",
        "--size",
        "tiny",
        "--steps",
        "2",
        "--max-steps",
        "0",
        "--warmup",
        "1",
        "--loop-rounds",
        "0",
        "--threads",
        "1",
        "--profile",
        "3",
        "--results",
        str(tmp_path),
        "--json",
        str(out),
        *extra,
    ]
    for v in variants:
        argv += ["--variant", v]
    assert cli(argv) == 0
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def eager(tmp_path_factory):
    return _bench(tmp_path_factory.mktemp("eager"), ["prenorm", "block_attnres", "rd_attnres"])


@pytest.mark.slow
def test_each_step_counts_exactly_its_own_matmuls(eager):
    """prenorm: 4 linears per layer and the LM head, each 1 mm forward and 2 backward, so
    3 (4 L + 1) per step; a window that missed or shared operators would not give that.
    rd_attnres projects Q/K and V from two inputs (one more mm forward, two backward) at
    every layer whose attention routes over more than one source (all but layer 0)."""
    L = build_model("prenorm", "tiny", seed=0).cfg.n_layers
    arms = eager["profile"]["arms"]
    calls = {name: round(p["op_calls"]["aten::mm"], 6) for name, p in arms.items()}
    assert calls["prenorm"] == calls["block_attnres"] == 3 * (4 * L + 1)
    assert calls["block_attnres@bf16-mixed"] == 3 * (4 * L + 1)
    assert calls["rd_attnres"] == 3 * (4 * L + 1) + 3 * (L - 1)


@pytest.mark.slow
def test_routing_is_found_only_where_there_is_routing(eager):
    arms = eager["profile"]["arms"]
    assert "routing" not in arms["prenorm"]["categories"]
    assert arms["block_attnres"]["calls"]["routing"] > 0
    # the treatment's second route: one more mat-vec per source at each multi-source attention site
    mv = {
        v: arms[v]["op_calls"].get("aten::mv", 0) + arms[v]["op_calls"].get("aten::addmv_", 0)
        for v in ("block_attnres", "rd_attnres")
    }
    assert mv["rd_attnres"] > mv["block_attnres"] > 0
    for p in arms.values():  # every operator is in one category
        assert sum(p["categories"].values()) == pytest.approx(p["total_ms"], rel=1e-9)
        assert sum(p["ops"].values()) == pytest.approx(p["total_ms"], rel=1e-9)


@pytest.mark.slow
def test_pairs_split_each_ratio_by_category_round_by_round(eager):
    """Each ratio is the median of per-round paired ratios of the step totals, each
    category's excess the median of per-round paired differences, as recomputed here."""
    import statistics

    prof = eager["profile"]
    # every pair is a ratio of step times a/b, the precision pair too (bf16 arm first)
    assert set(prof["pairs"]) == set(eager["ratios"]) | {"block_attnres@bf16-mixed/block_attnres"}
    for p in prof["arms"].values():  # the rounds and the means are one accumulation
        assert len(p["rounds"]) == prof["rounds"] == 3
        for c, ms in p["categories"].items():
            assert statistics.mean(r.get(c, 0.0) for r in p["rounds"]) == pytest.approx(ms, rel=1e-9)
    pair = prof["pairs"]["rd_attnres/block_attnres"]
    a, b = prof["arms"]["rd_attnres"]["rounds"], prof["arms"]["block_attnres"]["rounds"]
    assert pair["ratio"] == pytest.approx(
        statistics.median(sum(x.values()) / sum(y.values()) for x, y in zip(a, b)), rel=1e-12
    )
    assert pair["excess_ms"] == pytest.approx(
        statistics.median(sum(x.values()) - sum(y.values()) for x, y in zip(a, b)), abs=1e-9
    )
    assert pair["categories"]["routing"] == pytest.approx(
        statistics.median(x["routing"] - y["routing"] for x, y in zip(a, b)), abs=1e-9
    )
    sizes = [abs(v) for v in pair["categories"].values()]
    assert sizes == sorted(sizes, reverse=True)
    assert all(ci is None for ci in pair["category_intervals"].values())  # 3 rounds: no 95 % interval


@pytest.mark.slow  # compiles the models (torch.compile): long on a CPU
def test_compiled_kernels_are_visible_to_the_profile(tmp_path):
    """Under --compile the fused kernels are profiled one by one (not as one opaque graph
    call), so the routing sites' fused kernels are found by name."""
    result = _bench(tmp_path, ["block_attnres", "rd_attnres"], "--compile", "--no-precision-ratio")
    for name in ("block_attnres", "rd_attnres"):
        p = result["profile"]["arms"][name]
        fused = [k for k in p["ops"] if k.startswith("cpp_fused")]
        # the routing sites' kernels (a softmax per site, or two-phase's online softmax over mat-vecs) are named
        # for their operators, so the profile files at least one of them under routing
        assert any(categorize(k) == "routing" for k in fused), fused
        assert p["categories"]["routing"] > 0
        # each fused kernel is its own op with its own time, not folded into the graph call's; how the
        # times compare depends on the machine's load (a timing belongs in the bench, not here)
        assert len(fused) >= 2 and all(p["ops"][k] > 0 for k in fused), {k: p["ops"][k] for k in fused}
    lines = [ln for ln in result_lines(tmp_path) if ln.startswith("  rd_attnres/block_attnres: ")]
    assert len(lines) == 1 and " ms per step: " in lines[0]
    assert (
        "Torch-Compiled Region" in result["profile"]["arms"]["rd_attnres"]["ops"]
    )  # one name in every graph


def result_lines(tmp_path):
    from harness.bench import format_report

    return format_report(json.loads((tmp_path / "bench.json").read_text())).splitlines()


@pytest.mark.parametrize(
    "name, ancestors, category",
    [
        ("aten::mm", (), "matmul"),
        ("aten::_scaled_dot_product_flash_attention_for_cpu_backward", (), "attention"),
        ("aten::_log_softmax_backward_data", (), "loss"),
        ("aten::_softmax_backward_data", (), "routing"),
        ("aten::addmv_", (), "routing"),
        ("aten::mvlgamma", (), "other"),
        ("aten::addcmul_", ("Optimizer.step#AdamW.step", "harness-bench-profile/0"), "optimizer"),
        ("Optimizer.step#AdamW.step", (), "optimizer"),
        ("autograd::engine::evaluate_function: LogSoftmaxBackward0", (), "autograd"),
        ("LogSoftmaxBackward0", (), "autograd"),
        (
            "## Call CompiledFxGraph fwbvlsupntttzesgurdebrryt5gi44gkggy4lclfres3nbca55v6 ##",
            (),
            "graph overhead",
        ),
        (
            "graph_1_cpp_fused__softmax__unsafe_view_add_addcmul_mean_mul_mv_pow_rsqrt_select_stack_unsqueeze_view_16",
            (),
            "routing",
        ),
        ("graph_0_cpp_fused__unsafe_view_mul_silu_silu_backward_split_view_2", (), "mlp"),
        ("cpp_fused_silu_backward_3", (), "mlp"),
        (
            "graph_1_cpp_fused__unsafe_view_add_cat_clone_mul_neg_select_slice_backward_transpose_view_4",
            (),
            "rope",
        ),
        ("triton_per_fused__softmax_add_mul_7", (), "routing"),
        # two-phase routing's backward (the running max's gradient: amax/eq/masked_fill; exp's neg), as
        # Inductor named it on `small`: once counted as rope for its `neg`
        (
            "cpp_fused_add_amax_div_eq_expand_lt_masked_fill_mul_neg_pow_reciprocal_select_select_backward_slice_"
            "slice_backward_squeeze_stack_sum_unsqueeze_view",
            (),
            "routing",
        ),
        (
            "cpp_fused__unsafe_view_add_addcmul_amax_div_eq_exp_expand_gt_masked_fill_maximum_mul_neg_pow_reciprocal_"
            "select_select_backward_slice_squeeze_stack_sub",
            (),
            "routing",
        ),
        # ... and, with the running max detached (no amax in the backward), by select_backward and
        # reciprocal: these two counted as rope on `small` (10.3 and 5.1 ms of block_attnres's step)
        (
            "cpp_fused_add_div_expand_mul_neg_pow_reciprocal_select_select_backward_slice_slice_backward_"
            "squeeze_stack_sum_unsqueeze_view",
            (),
            "routing",
        ),
        (
            "cpp_fused_add_div_expand_mul_neg_pow_select_select_backward_slice_backward_squeeze_stack_sum_unsqueeze_view",
            (),
            "routing",
        ),
        ("aten::select_backward", (), "routing"),
        ("aten::reciprocal", (), "other"),  # clip_grad's too: only a kernel's `_reciprocal` is routing
        ("aten::amax", (), "routing"),
        ("aten::maximum", (), "routing"),
    ],
)
def test_categories_follow_the_names(name, ancestors, category):
    assert categorize(name, ancestors) == category


def test_kernel_names_line_up_across_graphs():
    assert (
        kernel_name("graph_0_cpp_fused_clone_transpose_2")
        == kernel_name("graph_1_cpp_fused_clone_transpose_7")
        == "cpp_fused_clone_transpose"
    )
    assert kernel_name("aten::_softmax") == "aten::_softmax"
    assert kernel_name("## Call CompiledFxGraph abc ##") == "## Call CompiledFxGraph ##"


def test_compare_on_known_numbers():
    """Round 2 of b stalls (+100 ms of matmul): the means would say a is faster, the paired
    medians do not move."""
    a_rounds = [{"matmul": 8.0, "routing": 4.0}] * 8
    b_rounds = [{"matmul": 8.5, "routing": 1.5}] * 8
    b_rounds[2] = {"matmul": 108.5, "routing": 1.5}

    def arm(rounds):
        cats = {c: sum(r[c] for r in rounds) / len(rounds) for c in rounds[0]}
        return {
            "total_ms": sum(cats.values()),
            "categories": cats,
            "ops": {"x": sum(cats.values())},
            "rounds": rounds,
        }

    ((key, c),) = compare({"a": arm(a_rounds), "b": arm(b_rounds)}, {"a/b": ("a", "b")}).items()
    assert key == "a/b" and c["ratio"] == 1.2 and c["excess_ms"] == 2.0
    assert c["categories"] == {"routing": 2.5, "matmul": -0.5} and list(c["categories"]) == [
        "routing",
        "matmul",
    ]
    # 8 rounds: the 95 % interval is [min, max], so it keeps the stall in view
    assert c["category_intervals"] == {"routing": [2.5, 2.5], "matmul": [-100.5, -0.5]}


def test_bad_rounds_are_one_clear_error(tmp_path, capsys):
    assert cli(["bench", "--profile", "-1", "--results", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("harness bench: error: ") and "--profile -1 must be an integer >= 0" in err
    )  # the option, not the field
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
def test_profile_lands_in_the_bench_table(eager):
    from harness.bench import bench_rows

    rows = {r["variant"]: r for r in bench_rows(eager)}
    for v in ("prenorm", "block_attnres", "rd_attnres", "block_attnres@bf16-mixed"):
        assert rows[v]["extra"]["profile_ms"] == eager["profile"]["arms"][v]["categories"]
