"""`harness bench` (DESIGN section 7): JSON keys, ratios, DuckDB rows, memory method, errors.

No timing assertions: speed goals live in the benchmark's output, never in tests. One
real benchmark of the ``tiny`` preset (4 variants, 2 rounds, one loop round) and one
with a prepared corpus run in under 10 s on 2 CPU cores. ``python -m pytest -q tests/test_bench.py``.
"""

from __future__ import annotations

import datetime as dt
import json
import statistics

import duckdb
import pytest
import torch

from harness.bench import BenchConfig, assemble, bench_rows, peak_step_bytes
from harness.cli import main as cli
from harness.models import build_model
from harness.models.routing import SourceBank

DESIGN7_KEYS = {"size", "compile", "threads", "torch", "step_ms", "peak_mem_mb", "ratios"}
VARIANTS = ["prenorm", "block_attnres", "rd_attnres", "fixed_v"]


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    """One tiny benchmark through the CLI: (exit code, JSON, DuckDB rows, paths)."""
    tmp = tmp_path_factory.mktemp("bench")
    out, db = tmp / "out" / "bench.json", tmp / "elsewhere" / "bench.duckdb"
    argv = ["bench", "--size", "tiny", "--steps", "2", "--warmup", "1", "--loop-steps", "2", "--loop-rounds", "1",
            "--threads", "1", "--results", str(tmp / "results"), "--json", str(out), "--db", str(db)]
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


def test_json_has_the_design7_keys(bench):
    rc, result, _, _ = bench
    assert rc == 0
    assert DESIGN7_KEYS <= set(result)
    assert result["size"] == "tiny" and result["compile"] is False and result["threads"] == 1
    assert result["torch"] == torch.__version__
    assert list(result["step_ms"]) == VARIANTS and list(result["peak_mem_mb"]) == VARIANTS
    assert set(result["ratios"]) == {
        "block_attnres/prenorm", "rd_attnres/block_attnres", "fixed_v/block_attnres", "lightning/bare"}


def test_medians_and_ratios_follow_from_the_raw_samples(bench):
    _, result, _, _ = bench
    for v in VARIANTS:
        assert len(result["samples_ms"][v]) == 2
        assert result["step_ms"][v] == statistics.median(result["samples_ms"][v])
    ms = result["step_ms"]
    for key, value in result["ratios"].items():
        a, b = key.split("/")
        if key == "lightning/bare":
            tps = {k: result["batch_tokens"] / (statistics.median(s) / 1e3)
                   for k, s in result["loop_samples_ms"].items()}
            assert len(result["loop_samples_ms"]["lightning"]) == len(result["loop_samples_ms"]["bare"]) == 2
            assert result["loop_tokens_per_s"] == pytest.approx(tps, rel=1e-12)
            assert value == pytest.approx(tps["lightning"] / tps["bare"], rel=1e-12)
        else:
            assert value == ms[a] / ms[b]
            assert result["peak_mem_ratios"][key] == result["peak_mem_mb"][a] / result["peak_mem_mb"][b]


def test_peak_memory_exceeds_parameters_and_adam_state(bench):
    """fp32 parameters + AdamW's two moments are 12 bytes per parameter; a step adds
    gradients and activations on top, so the peak must be strictly larger."""
    _, result, _, _ = bench
    for v in VARIANTS:
        assert result["peak_mem_mb"][v] * 2**20 > 12 * result["n_params"][v]


def test_duckdb_rows_match_the_json(bench):
    _, result, rows, tmp = bench
    assert not (tmp / "results" / "harness.duckdb").exists()  # --db overrides the default
    by_variant = {r["variant"]: r for r in rows}
    assert set(by_variant) == {*VARIANTS, "lightning", "bare"} and len(rows) == len(VARIANTS) + 2
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


def test_assemble_computes_known_medians_ratios_and_mfu():
    samples = {"prenorm": [10.0, 30.0, 20.0], "block_attnres": [100.0, 21.0, 22.0], "rd_attnres": [22.0, 22.0, 23.0]}
    loops = {"lightning": [0.5, 0.25, 1.0], "bare": [0.4, 0.4, 0.1]}  # seconds per iteration
    cfg = BenchConfig(size="tiny", variants=tuple(samples), peak_tflops=1.0)
    result = assemble(cfg, list(samples), torch.device("cpu"), 4, 64, samples,
                      {"prenorm": 100.0, "block_attnres": 110.0, "rd_attnres": 121.0}, loops,
                      {"prenorm": 1000, "block_attnres": 1000, "rd_attnres": 1010},
                      dt.datetime(2026, 1, 1))
    assert result["step_ms"] == {"prenorm": 20.0, "block_attnres": 22.0, "rd_attnres": 22.0}
    assert result["ratios"]["block_attnres/prenorm"] == pytest.approx(1.1)
    assert result["ratios"]["rd_attnres/block_attnres"] == 1.0
    assert result["loop_tokens_per_s"] == {"lightning": 256 / 0.5, "bare": 256 / 0.4}
    assert result["ratios"]["lightning/bare"] == pytest.approx(0.8)
    assert result["peak_mem_ratios"]["rd_attnres/block_attnres"] == pytest.approx(1.1)
    # MFU = 6 N tokens/s / peak: 6 * 1000 * (256 tokens / 0.020 s) / 1e12
    assert result["mfu"]["prenorm"] == pytest.approx(6 * 1000 * 12800 / 1e12)
    targets = result["targets"]
    assert targets["block_attnres/prenorm"]["met"] is False and targets["rd_attnres/block_attnres"]["met"] is True
    assert targets["lightning/bare"]["met"] is False and targets["mem:rd_attnres/block_attnres"]["met"] is False
    rows = bench_rows({**result, "n_params": {"prenorm": 1000, "block_attnres": 1000, "rd_attnres": 1010}})
    assert [r["variant"] for r in rows] == ["prenorm", "block_attnres", "rd_attnres", "lightning", "bare"]
    assert rows[3]["step_ms"] == pytest.approx(500.0)  # 256 tokens at 512 tokens/s


class _FakeArm:
    """A step that allocates 4 MiB, then 2 MiB more, then frees both: peak 6 MiB."""

    variant, device = "fake", torch.device("cpu")

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


@pytest.mark.parametrize("argv, message", [
    (["--size", "huge"], "unknown size 'huge'; valid sizes: tiny, small, 120m, 343m"),
    (["--variant", "rd_atnres"], "unknown variant 'rd_atnres'; valid variants:"),
    (["--steps", "0"], "steps=0 must be an integer >= 1"),
    (["--loop-variant", "nope"], "unknown variant 'nope'"),
])
def test_bad_input_is_one_clear_error(tmp_path, capsys, argv, message):
    assert cli(["bench", *argv, "--results", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("harness bench: error: ") and message in err
    assert not list(tmp_path.iterdir())  # nothing written


def test_loops_train_on_a_prepared_corpus(tmp_path):
    """With a corpus, both loops read its prepared tokens (BPE of the preset's vocabulary)."""
    from pathlib import Path

    from harness.bench import run_bench

    sample = Path(__file__).resolve().parents[2] / "shared/data/fineweb_edu_sample"
    if not sample.is_dir():
        pytest.skip(f"sample corpus {sample} absent")
    cfg = BenchConfig(size="tiny", variants=("block_attnres",), steps=1, warmup=1, loop_steps=1, loop_rounds=1,
                      corpus=str(sample), cache_dir=tmp_path / "cache", threads=1)
    result = run_bench(cfg)
    assert result["corpus"] == str(sample)
    assert len(result["loop_samples_ms"]["lightning"]) == len(result["loop_samples_ms"]["bare"]) == 1
    assert list((tmp_path / "cache").rglob("train.bin"))  # the corpus was prepared in the cache
    assert set(result["ratios"]) == {"lightning/bare"}  # one variant: no step-time ratio
