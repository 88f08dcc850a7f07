"""`harness bench` (DESIGN section 7): JSON keys, ratios, DuckDB rows, memory method, errors.

No timing assertions: speed goals live in the benchmark's output, never in tests. One
real benchmark of the ``tiny`` preset (4 variants, 2 rounds, one loop round) and one
with a prepared corpus run in under 10 s on 2 CPU cores. ``python -m pytest -q tests/bench/test_bench.py``.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import statistics

import duckdb
import pytest
import torch

from harness.bench import BenchConfig, assemble, bench_rows, format_report, peak_step_bytes
from harness.cli import main as cli
from harness.models import build_model
from harness.models.routing import SourceBank
from harness.train.environment import hardware_class

DESIGN7_KEYS = {"size", "compile", "threads", "torch", "step_ms", "peak_mem_mb", "ratios"}
VARIANTS = ["prenorm", "block_attnres", "rd_attnres", "fixed_v"]


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    """One tiny benchmark through the CLI: (exit code, JSON, DuckDB rows, paths)."""
    tmp = tmp_path_factory.mktemp("bench")
    out, db = tmp / "out" / "bench.json", tmp / "elsewhere" / "bench.duckdb"
    argv = [
        "bench",
        "--size",
        "tiny",
        "--steps",
        "6",
        "--max-steps",
        "0",
        "--warmup",
        "1",
        "--loop-steps",
        "3",
        "--loop-rounds",
        "2",
        "--threads",
        "1",
        "--results",
        str(tmp / "results"),
        "--json",
        str(out),
        "--db",
        str(db),
    ]
    for v in VARIANTS:
        argv += ["--variant", v]
    rc = cli(argv)
    result = json.loads(out.read_text())
    con = duckdb.connect(str(db), read_only=True)
    try:
        cur = con.execute("SELECT * FROM bench WHERE bench_id = ?", [result["bench_id"]])
        names = [d[0] for d in cur.description]
        rows = [dict(zip(names, r)) for r in cur.fetchall()]
    finally:
        con.close()
    return rc, result, rows, tmp


@pytest.mark.slow
def test_json_has_the_design7_keys(bench):
    rc, result, _, _ = bench
    assert rc == 0
    assert DESIGN7_KEYS <= set(result)
    assert result["size"] == "tiny" and result["compile"] is False and result["threads"] == 1
    assert result["torch"] == torch.__version__
    assert list(result["step_ms"]) == VARIANTS and list(result["peak_mem_mb"]) == VARIANTS
    assert set(result["ratios"]) == {
        "block_attnres/prenorm",
        "rd_attnres/block_attnres",
        "fixed_v/block_attnres",
        "lightning/bare",
    }
    assert set(result["ratio_intervals"]) == set(result["ratios"]) | {"bf16/fp32"}
    assert set(result["precision_ratios"]) == {"bf16/fp32"}


@pytest.mark.slow
def test_ratios_are_medians_of_per_round_ratios_with_their_order_statistic_interval(bench):
    _, result, _, _ = bench
    samples = result["samples_ms"]
    assert set(samples) == {*VARIANTS, "block_attnres@bf16-mixed"}  # the parent in bf16, same rounds
    for v in VARIANTS:
        assert len(samples[v]) == 6 == result["steps"]
        assert result["step_ms"][v] == statistics.median(samples[v])
    for key, value in result["ratios"].items():
        a, b = key.split("/")
        if key == "lightning/bare":  # tokens/s ratio: iteration i of each loop's round r
            light, bare = result["loop_samples_ms"]["lightning"], result["loop_samples_ms"]["bare"]
            assert len(light) == len(bare) == 6
            per_round = [bl / li for li, bl in zip(light, bare)]
        else:
            per_round = [x / y for x, y in zip(samples[a], samples[b])]
            assert result["peak_mem_ratios"][key] == result["peak_mem_mb"][a] / result["peak_mem_mb"][b]
        assert value == pytest.approx(statistics.median(per_round), rel=1e-12)
        # n = 6: the interval is the range (coverage 1 - 2/64)
        assert result["ratio_intervals"][key] == pytest.approx([min(per_round), max(per_round)], rel=1e-12)
    per_round = [x / y for x, y in zip(samples["block_attnres"], samples["block_attnres@bf16-mixed"])]
    assert result["precision_ratios"]["bf16/fp32"] == pytest.approx(statistics.median(per_round), rel=1e-12)
    assert result["precision_step_ms"] == {
        "32-true": result["step_ms"]["block_attnres"],
        "bf16-mixed": statistics.median(samples["block_attnres@bf16-mixed"]),
    }


@pytest.mark.slow
def test_peak_memory_exceeds_parameters_and_adam_state(bench):
    """fp32 parameters + AdamW's two moments are 12 bytes per parameter; a step adds
    gradients and activations on top, so the peak must be strictly larger."""
    _, result, _, _ = bench
    for v in VARIANTS:
        assert result["peak_mem_mb"][v] * 2**20 > 12 * result["n_params"][v]


@pytest.mark.slow
def test_duckdb_rows_match_the_json(bench):
    _, result, rows, tmp = bench
    assert not (tmp / "results" / "harness.duckdb").exists()  # --db overrides the default
    by_variant = {r["variant"]: r for r in rows}
    assert set(by_variant) == {*VARIANTS, "block_attnres@bf16-mixed", "lightning", "bare"}
    assert len(rows) == len(VARIANTS) + 3
    precision = json.loads(by_variant["block_attnres@bf16-mixed"]["extra"])
    assert (
        precision["kind"] == "precision" and precision["bf16/fp32"] == result["precision_ratios"]["bf16/fp32"]
    )
    for r in rows:
        assert r["host"] == result["host"] and r["torch_version"] == result["torch"]
        assert r["threads"] == result["threads"] and r["compile"] is False and r["size"] == "tiny"
        assert r["created_at"] == dt.datetime.fromisoformat(result["created_at"])
    for v in VARIANTS:
        assert by_variant[v]["step_ms"] == result["step_ms"][v]
        assert by_variant[v]["peak_mem_mb"] == result["peak_mem_mb"][v]
        assert by_variant[v]["tokens_per_s"] == result["tokens_per_s"][v]
        assert json.loads(by_variant[v]["extra"])["kind"] == "step"
    for loop in ("lightning", "bare"):
        assert by_variant[loop]["tokens_per_s"] == result["loop_tokens_per_s"][loop]
        assert by_variant[loop]["peak_mem_mb"] is None
    rd_extra = json.loads(by_variant["rd_attnres"]["extra"])
    assert rd_extra["ratio_vs_parent"] == result["ratios"]["rd_attnres/block_attnres"]
    # the class a run on this CPU records (DESIGN 13), so the report's time multiplier finds it (DESIGN 14)
    assert rd_extra["hardware"] == result["hardware"] == hardware_class("cpu", "32-true", False)


@pytest.mark.slow
def test_per_site_arms_are_timed_reported_and_stored(tmp_path, capsys):
    """`--per-site`: every routed variant also on the per-site path, its ratio in the JSON, the report
    and a `bench` row of its own (once only in the JSON)."""
    out, db = tmp_path / "b.json", tmp_path / "b.duckdb"
    argv = "bench --size tiny --steps 6 --max-steps 0 --warmup 1 --loop-rounds 0 --no-precision-ratio".split()
    argv += ["--threads", "1", "--per-site", "--variant", "prenorm", "--variant", "block_attnres"]
    argv += ["--variant", "rd_attnres", "--results", str(tmp_path), "--json", str(out), "--db", str(db)]
    assert cli(argv) == 0
    report = capsys.readouterr().out
    result = json.loads(out.read_text())
    paths = result["routing_paths"]
    assert set(paths["step_ms"]) == {
        "block_attnres",
        "block_attnres@per_site",
        "rd_attnres",
        "rd_attnres@per_site",
    }
    assert set(paths["ratios"]) == {"block_attnres: two_phase/per_site", "rd_attnres: two_phase/per_site"}
    con = duckdb.connect(str(db), read_only=True)
    try:
        rows = con.execute("SELECT variant, step_ms, peak_mem_mb, tokens_per_s, extra FROM bench").fetchall()
    finally:
        con.close()
    by_variant = {r[0]: r for r in rows}
    assert set(by_variant) == {
        "prenorm",
        "block_attnres",
        "rd_attnres",
        "block_attnres@per_site",
        "rd_attnres@per_site",
    }
    for v in ("block_attnres", "rd_attnres"):
        ratio = paths["ratios"][f"{v}: two_phase/per_site"]
        assert f"measured {v}: two_phase/per_site" in report and f"{ratio:.3f}" in report
        _, ms, mem, tps, extra = by_variant[f"{v}@per_site"]
        extra = json.loads(extra)
        assert ms == paths["step_ms"][f"{v}@per_site"] and mem is None
        assert tps == pytest.approx(result["batch_size"] * result["context"] / (ms / 1e3), rel=1e-12)
        assert (
            extra["kind"] == "routing_path" and extra["model_variant"] == v and extra["routing"] == "per_site"
        )
        assert extra["two_phase/per_site"] == ratio
        assert (
            by_variant[v][1] == result["step_ms"][v] == paths["step_ms"][v]
        )  # the two-phase arm is the variant


def test_assemble_computes_known_medians_paired_ratios_intervals_verdicts_and_mfu():
    block = [11.0, 12.0, 10.5, 11.0, 100.0, 11.5, 10.8]  # one stalled round (100 ms)
    samples = {
        "prenorm": [10.0] * 7,
        "block_attnres": block,
        "rd_attnres": list(block),
        "block_attnres@bf16-mixed": [t / 2 for t in block],
    }
    loops = {
        "lightning": [0.5, 0.25, 1.0, 0.5, 0.5, 0.5],
        "bare": [0.4, 0.4, 0.1, 0.4, 0.4, 0.4],
    }  # s per iteration
    variants = ["prenorm", "block_attnres", "rd_attnres"]
    cfg = BenchConfig(size="tiny", variants=tuple(variants), peak_tflops=1.0)
    result = assemble(
        cfg,
        variants,
        torch.device("cpu"),
        4,
        64,
        samples,
        {"prenorm": 100.0, "block_attnres": 110.0, "rd_attnres": 121.0},
        loops,
        {"prenorm": 1000, "block_attnres": 1000, "rd_attnres": 1010},
        dt.datetime(2026, 1, 1),
        precision_arms={"32-true": "block_attnres", "bf16-mixed": "block_attnres@bf16-mixed"},
    )
    assert result["step_ms"] == {"prenorm": 10.0, "block_attnres": 11.0, "rd_attnres": 11.0}
    # block/prenorm per round: 1.1 1.2 1.05 1.1 10 1.15 1.08 -> median 1.1; n = 7: [x_(1), x_(7)]
    assert result["ratios"]["block_attnres/prenorm"] == pytest.approx(1.1)
    assert result["ratio_intervals"]["block_attnres/prenorm"] == pytest.approx([1.05, 10.0])
    assert result["ratios"]["rd_attnres/block_attnres"] == 1.0
    assert result["ratio_intervals"]["rd_attnres/block_attnres"] == [1.0, 1.0]
    assert result["precision_ratios"] == {"bf16/fp32": 2.0} and result["ratio_intervals"]["bf16/fp32"] == [
        2.0,
        2.0,
    ]
    # a throughput ratio printed among step-time ratios: its line says which way it reads
    (line,) = [x for x in format_report(result).splitlines() if x.strip().startswith("bf16/fp32")]
    assert line.split()[1] == "2.000" and line.endswith("tokens/s: above 1, bf16 is faster")
    assert result["loop_tokens_per_s"] == {"lightning": 256 / 0.5, "bare": 256 / 0.4}
    # lightning/bare per iteration (bare s / lightning s): 0.8 1.6 0.1 0.8 0.8 0.8 -> median 0.8, n = 6: the range
    assert result["ratios"]["lightning/bare"] == pytest.approx(0.8)
    assert result["ratio_intervals"]["lightning/bare"] == pytest.approx([0.1, 1.6])
    assert result["peak_mem_ratios"]["rd_attnres/block_attnres"] == pytest.approx(1.1)
    # MFU = (6 N + 12 L D T) tokens/s / peak: tiny L 2, D 64, T 64; (256 tokens / 0.010 s) / 1e12
    assert result["flops_per_token"]["prenorm"] == 6 * 1000 + 12 * 2 * 64 * 64
    assert result["mfu"]["prenorm"] == pytest.approx((6 * 1000 + 12 * 2 * 64 * 64) * 25600 / 1e12)
    assert result["mfu_note"] is None
    targets = result["targets"]
    assert targets["block_attnres/prenorm"]["verdict"] == "not met"  # the whole interval is above 1.03
    assert targets["block_attnres/prenorm"]["met"] is False
    assert (
        targets["rd_attnres/block_attnres"]["verdict"] == "met" and targets["rd_attnres/block_attnres"]["met"]
    )
    assert targets["lightning/bare"]["verdict"] == "undecided" and targets["lightning/bare"]["met"] is None
    assert targets["mem:rd_attnres/block_attnres"]["met"] is False
    rows = bench_rows({**result, "n_params": {"prenorm": 1000, "block_attnres": 1000, "rd_attnres": 1010}})
    assert [r["variant"] for r in rows] == [
        "prenorm",
        "block_attnres",
        "rd_attnres",
        "block_attnres@bf16-mixed",
        "lightning",
        "bare",
    ]
    assert rows[3]["step_ms"] == 5.5 and rows[4]["step_ms"] == pytest.approx(
        500.0
    )  # 256 tokens at 512 tokens/s


def test_median_interval_ranks_and_coverage_follow_the_binomial():
    """k is the largest rank with P(Bin(n, 1/2) <= k - 1) <= 0.025 (scipy's binomial), and the
    interval covers the median of a skewed distribution at least 95 % of the time."""
    from scipy.stats import binom

    from harness.bench.intervals import coverage, median_interval, median_rank

    assert median_rank(5) is None and median_interval([1, 2, 3, 4, 5]) is None
    assert median_rank(6) == 1 and coverage(6) == pytest.approx(1 - 2 / 64)
    for n in (6, 7, 10, 20, 45, 120):
        k = median_rank(n)
        assert binom.cdf(k - 1, n, 0.5) <= 0.025 < binom.cdf(k, n, 0.5)
        assert coverage(n) >= 0.95
    assert median_rank(20) == 6 and median_interval(list(range(20, 0, -1))) == (6, 15)
    g = torch.Generator().manual_seed(0)
    draws = torch.empty(4000, 20).exponential_(generator=g)  # median ln 2
    hits = sum(lo <= math.log(2) <= hi for lo, hi in (median_interval(row.tolist()) for row in draws))
    assert hits / 4000 >= coverage(20) - 3 * math.sqrt(0.05 * 0.95 / 4000)


@pytest.mark.parametrize(
    "interval, op, bound, verdict",
    [
        ((1.00, 1.02), "<=", 1.03, "met"),
        ((1.04, 1.05), "<=", 1.03, "not met"),
        ((1.02, 1.04), "<=", 1.03, "undecided"),
        ((0.99, 1.00), ">=", 0.98, "met"),
        ((0.95, 0.97), ">=", 0.98, "not met"),
        ((0.97, 0.99), ">=", 0.98, "undecided"),
        (None, "<=", 1.03, "undecided"),
    ],
)
def test_goals_are_judged_against_the_interval(interval, op, bound, verdict):
    from harness.bench.intervals import judge

    assert judge(interval, op, bound) == verdict


def test_rounds_continue_until_the_intervals_are_narrow_or_the_cap():
    """After the minimum rounds, time_steps adds rounds while `enough` says no, up to max_steps."""
    from harness.bench import time_steps

    class Arm:
        device = torch.device("cpu")
        failed = None

        def __init__(self, name):
            self.name = name

        def step(self):
            pass

    arms = [Arm("a"), Arm("b")]
    assert len(time_steps(arms, 6, 1, max_steps=50, enough=lambda t: len(t["a"]) >= 9)["a"]) == 9
    assert len(time_steps(arms, 6, 1, max_steps=8, enough=lambda t: False)["b"]) == 8
    assert len(time_steps(arms, 6, 1)["a"]) == 6
    lines = []  # a long benchmark says how far it is, every PROGRESS_EVERY (10) rounds
    assert len(time_steps(arms, 6, 1, max_steps=25, enough=lambda t: False, progress=lines.append)["a"]) == 25
    assert [ln.split(" (")[0] for ln in lines] == ["10 rounds timed", "20 rounds timed"]
    assert all(ln.endswith("; at least 6, at most 25)") for ln in lines), lines


class _FakeArm:
    """A step that allocates 4 MiB, then 2 MiB more, then frees both: peak 6 MiB."""

    variant = name = "fake"
    device = torch.device("cpu")
    failed = None

    def step(self):
        a = torch.empty(2**20, dtype=torch.float32)
        b = torch.empty(2**19, dtype=torch.float32)
        del a, b

    def free_grads(self):
        pass

    def persistent_bytes(self):
        return 123


def test_cpu_peak_memory_method_on_known_allocations():
    assert peak_step_bytes([_FakeArm(), _FakeArm()]) == {"fake": 123 + 6 * 2**20}


def test_route_equals_the_design3_formula():
    """K_i = RMSNorm_r(s_i), a = softmax_i(w . K_i), route = sum_i a_i s_i, recomputed
    from the definition with stacked sources (what the model avoids doing)."""
    model = build_model("rd_attnres", "tiny", seed=0)
    site = model.layers[1].attn_route
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        site.w_qk.copy_(torch.randn(64, generator=g))
        site.w_v.copy_(torch.randn(64, generator=g))
        site.key_norm.weight.copy_(1 + 0.1 * torch.randn(64, generator=g))
    sources = [torch.randn(2, 5, 64, generator=g) * s for s in (1.0, 3.0, 0.5)]
    bank = SourceBank(1e-6)
    for s in sources[:2]:
        bank.append(s)
    (roles,) = site(bank, sources[2])  # one head group
    S = torch.stack(sources)  # [S, B, T, D]
    K = torch.nn.functional.rms_norm(S, (64,), site.key_norm.weight, 1e-6)
    for role, w in (("k", site.w_qk), ("v", site.w_v)):
        a = torch.softmax(torch.einsum("sbtd,d->sbt", K, w), dim=0)
        expected = torch.einsum("sbt,sbtd->btd", a, S)
        assert (roles[role] - expected).abs().max().item() <= 1e-5
    assert roles["q"] is roles["k"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--size", "huge"], "unknown size 'huge'; valid sizes: tiny, mini, small, 120m, 343m"),
        (["--variant", "rd_atnres"], "unknown variant 'rd_atnres'; valid variants:"),
        (["--steps", "0"], "--steps 0 must be an integer >= 1"),
        (["--loop-variant", "nope"], "unknown variant 'nope'"),
        # the options' own names, not BenchConfig's fields (also tests/bench/test_bench_profile.py)
        (["--max-steps", "-1"], "--max-steps -1 must be an integer >= 0"),
        # once silently turned into 0 (exactly --steps rounds), the JSON then lying about the cap
        (["--steps", "4", "--max-steps", "2"], "--max-steps 2 must be 0 or at least --steps 4"),
        # once an empty ratio list after the rounds
        (
            ["--per-site", "--variant", "prenorm"],
            "per-site timing (--per-site) needs a routed variant; got only prenorm",
        ),
    ],
)
def test_bad_input_is_one_clear_error(tmp_path, capsys, argv, message):
    assert cli(["bench", *argv, "--results", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("harness bench: error: ") and message in err
    assert not list(tmp_path.iterdir())  # nothing written


@pytest.mark.parametrize("option", ["--json", "--db"])
@pytest.mark.parametrize("where", ["a folder", "under a file"])
def test_an_unwritable_output_is_refused_before_the_rounds(tmp_path, capsys, option, where):
    """Once found only after every round had run: the JSON or the rows, or both, were lost."""
    (tmp_path / "afile").write_text("x")
    (tmp_path / "afolder").mkdir()
    path = tmp_path / ("afolder" if where == "a folder" else "afile/out.x")
    others = {"--json": tmp_path / "r.json", "--db": tmp_path / "r.duckdb"}
    argv = "bench --size tiny --steps 1 --max-steps 0 --warmup 1 --loop-rounds 0 --no-precision-ratio".split()
    argv += ["--variant", "prenorm", "--results", str(tmp_path / "results")]
    for opt, default in others.items():
        argv += [opt, str(path if opt == option else default)]
    assert cli(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"harness bench: error: {option} {path}: ")
    assert ("is a folder" if where == "a folder" else "afile is a file, not a folder") in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "afolder"]  # nothing timed or written
    assert not list((tmp_path / "afolder").iterdir())


@pytest.mark.slow
def test_loops_train_on_a_prepared_corpus(tmp_path):
    """With a corpus, both loops read its prepared tokens (BPE of the preset's vocabulary)."""
    from pathlib import Path

    from harness.bench import run_bench

    sample = Path(__file__).resolve().parents[3] / "shared/data/fineweb_edu_sample"
    if not sample.is_dir():
        pytest.skip(f"sample corpus {sample} absent")
    cfg = BenchConfig(
        size="tiny",
        variants=("block_attnres",),
        steps=1,
        warmup=1,
        loop_steps=1,
        loop_rounds=1,
        corpus=str(sample),
        cache_dir=tmp_path / "cache",
        threads=1,
    )
    result = run_bench(cfg)
    assert result["corpus"] == str(sample)
    assert len(result["loop_samples_ms"]["lightning"]) == len(result["loop_samples_ms"]["bare"]) == 1
    assert list((tmp_path / "cache").rglob("train-00000.bin"))  # the corpus was prepared in the cache
    assert set(result["ratios"]) == {"lightning/bare"}  # one variant: no step-time ratio
