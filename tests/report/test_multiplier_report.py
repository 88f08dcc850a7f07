"""The compute and time multipliers through ``harness report`` on planted result files (DESIGN section 14):
every seed's treatment at budget B reaches exactly its parent's NLL at 2B, so the compute multiplier at B is
2 x F_parent / F_treatment; a seed with a non-monotone parent and one with a missing budget are left out
with their reasons; the largest budget is censored; a single-budget grid gets one line and no new file."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

import harness
from harness import cli
from harness.models import get_spec
from harness.models.flops import training_flops_per_token
from harness.models.sizes import derive
from harness.store.store import Store

GRID = "mult"
BUDGETS = (102_400, 204_800, 409_600)
N_PARAMS = {"block_attnres": 1_000_000, "rd_attnres": 1_050_000}
S_PER_TOKEN = {"block_attnres": 1e-4, "rd_attnres": 1.1e-4}  # the treatment's step is 10 % slower
HW = "cpu-test-class"


def _run(variant: str, seed: int, budget: int, nll: float, diverged: bool = False) -> dict:
    config = {
        "variant": variant,
        "seed": seed,
        "size": "mini",
        "budget_tokens": budget,
        "train": {"lr": 3e-3},
    }
    row = dict(
        run_id=f"{GRID}:mini:{variant}:s{seed}:{budget}",
        grid=GRID,
        variant=variant,
        role="parent" if variant == "block_attnres" else "treatment",
        seed=seed,
        size="mini",
        budget_tokens=budget,
        protocol_hash="p0",
        status="done",
        error=None,
        code_version="abc1234",
        config=config,
        n_params=N_PARAMS[variant],
        tokens_seen=budget,
        train_s=S_PER_TOKEN[variant] * budget,
        wall_s=2 * S_PER_TOKEN[variant] * budget,
        hardware=HW,
    )
    metrics = [dict(step=100, tokens=budget, split="val", name="nll", value=float(nll))]
    if diverged:
        row.update(status="diverged", error="loss became NaN at step 40", diverged_step=40)
        metrics = []
    return {"run": row, "metrics": metrics, "routing": []}


def parent_nll(seed: int, budget: int) -> float:
    """A decreasing, not log-linear curve with a seed offset."""
    k = BUDGETS.index(budget)
    return [4.20, 3.93, 3.74][k] + 0.02 * seed


GPU = "cuda-test-gpu/bf16-mixed/torch2/inductor"
BENCH_RATIO = 1.25  # the treatment's step on GPU over the parent's, as harness bench measured it


def bench_rows(bench_id: str, created_at: str, ratio: float) -> list[dict]:
    """harness bench's step rows (harness/bench/rows.py) of the two variants on the GPU class at mini."""
    return [
        dict(
            bench_id=bench_id,
            created_at=created_at,
            size="mini",
            variant=v,
            step_ms=ms,
            extra={
                "kind": "step",
                "hardware": GPU,
                "ratio_vs_parent": ms / 10.0,
                "ratio_interval": [1.2, 1.3],
            },
        )
        for v, ms in (("block_attnres", 10.0), ("rd_attnres", 10.0 * ratio))
    ]


def plant(results, *, seeds=range(6), budgets=BUDGETS, jitter=None, diverged=()) -> None:
    store = Store(results)
    store.add_bench_rows(bench_rows("bench-old", "2026-01-01T00:00:00", 3.0))  # an older bench: not read
    store.add_bench_rows(bench_rows("bench-new", "2026-02-01T00:00:00", BENCH_RATIO))
    for seed in seeds:
        for budget in budgets:
            p = parent_nll(seed, budget)
            if seed == 4 and budget == BUDGETS[2]:
                p = parent_nll(seed, BUDGETS[1]) + 0.01  # non-monotone: worse at the largest budget
            if not (seed == 5 and budget == BUDGETS[0]):  # the parent's smallest budget missing at seed 5
                store.write_result(
                    _run("block_attnres", seed, budget, p, ("block_attnres", seed, budget) in diverged)
                )
            k = budgets.index(budget)
            t = parent_nll(seed, budgets[k + 1]) if k + 1 < len(budgets) else p - 0.05
            t += (jitter or {}).get(seed, 0.0)
            store.write_result(_run("rd_attnres", seed, budget, t, ("rd_attnres", seed, budget) in diverged))


def report(results, out, capsys):
    rc = cli.main(["report", "--grid", GRID, "--results", str(results), "--out", str(out), "--no-figures"])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    return cap.out


def test_treatment_at_b_equal_to_the_parent_at_2b_gives_2_f_parent_over_f_treatment(tmp_path, capsys):
    plant(tmp_path / "r")
    out = report(tmp_path / "r", tmp_path / "o", capsys)
    cfg = derive("mini")
    f_p = training_flops_per_token(get_spec("block_attnres"), cfg, N_PARAMS["block_attnres"])
    f_t = training_flops_per_token(get_spec("rd_attnres"), cfg, N_PARAMS["rd_attnres"])
    assert f_t > f_p * 1.04  # routing and the extra parameters: the treatment costs more per token
    rows = pl.read_csv(tmp_path / "o" / "multipliers.csv")
    seeds = pl.read_csv(tmp_path / "o" / "multiplier_seeds.csv")
    for budget in BUDGETS[:2]:
        r = rows.filter((pl.col("budget_tokens") == budget) & (pl.col("basis") == "compute")).row(
            0, named=True
        )
        assert r["n"] == 4 and r["seeds"] == "0 1 2 3"
        assert r["estimate"] == pytest.approx(2 * f_p / f_t, rel=1e-9)
        assert (r["censored_above"], r["censored_below"]) == (0, 0)
        left = r["left_out"]
        assert (
            "4: non-monotone parent curve" in left
            and "5: the parent's run at 102_400 tokens is missing" in left
        )
        # time on the class: 2 x (parent's s/token) / (treatment's s/token) = 2 / 1.1, F out of it
        t = rows.filter((pl.col("budget_tokens") == budget) & (pl.col("basis") == f"time on {HW}")).row(
            0, named=True
        )
        assert t["estimate"] == pytest.approx(2 / 1.1, rel=1e-9)
        assert "the runs' own clocks" in t["time_source"] and "not controlled" in t["time_source"]
        # on the GPU class, where no run ran: every kept seed's tokens ratio over the latest bench's ratio
        g = rows.filter((pl.col("budget_tokens") == budget) & (pl.col("basis") == f"time on {GPU}")).row(
            0, named=True
        )
        assert g["n"] == 4 and g["estimate"] == pytest.approx(2 / BENCH_RATIO, rel=1e-9)
        assert g["time_source"] == "harness bench bench-new: step-time ratio 1.250 [1.200, 1.300]"
        per_seed = seeds.filter((pl.col("budget_tokens") == budget) & (pl.col("basis") == "compute"))
        kept = per_seed.filter(pl.col("reason").fill_null("") == "")["multiplier"].to_list()
        assert kept == pytest.approx([2 * f_p / f_t] * 4, rel=1e-9)
    top = rows.filter((pl.col("budget_tokens") == BUDGETS[2]) & (pl.col("basis") == "compute")).row(
        0, named=True
    )
    assert top["censored_above"] == 4 and top["estimate"] == pytest.approx(
        f_p / f_t, rel=1e-9
    )  # at the bound
    assert top["extrapolated"] > top["estimate"]
    assert "rd_attnres pays for its cost at equal compute: " in out
    a = harness.analyze(tmp_path / "r", GRID)  # the notebook API returns the same rows
    assert a.multipliers_frame()["estimate"].to_list() == pytest.approx(rows["estimate"].to_list(), rel=1e-12)
    assert a.multiplier_seeds_frame().height == seeds.height
    md = (tmp_path / "o" / "report.md").read_text()
    assert "## Does the gain pay for its cost?" in md and "4 seed(s) beat the parent's largest budget" in md


def test_a_single_budget_grid_says_why_in_one_line_and_writes_no_multiplier_file(tmp_path, capsys):
    plant(tmp_path / "r", seeds=range(3), budgets=BUDGETS[1:2])
    out = report(tmp_path / "r", tmp_path / "o", capsys)
    assert not (tmp_path / "o" / "multipliers.csv").exists()
    assert "No compute multiplier: each size has one budget" in out
    assert "mini at 204_800 tokens: add 102_400 and 409_600" in out
    assert "pay for its cost" not in (tmp_path / "o" / "report.md").read_text()
    assert harness.analyze(tmp_path / "r", GRID).multipliers_frame().height == 0


def test_the_verdict_s_p_and_holm_equal_scipy_and_statsmodels_on_the_per_seed_multipliers(tmp_path, capsys):
    from scipy import stats as sps
    from statsmodels.stats.multitest import multipletests

    plant(
        tmp_path / "r",
        seeds=range(8),
        jitter={0: 0.004, 1: -0.006, 2: 0.009, 3: -0.002, 6: 0.003, 7: -0.004},
        diverged={("rd_attnres", 3, BUDGETS[0]), ("block_attnres", 2, BUDGETS[2])},
    )
    out = report(tmp_path / "r", tmp_path / "o", capsys)
    rows = pl.read_csv(tmp_path / "o" / "multipliers.csv").filter(pl.col("budget_tokens") == BUDGETS[0])
    seeds = pl.read_csv(tmp_path / "o" / "multiplier_seeds.csv").filter(pl.col("budget_tokens") == BUDGETS[0])
    ps = []
    for r in rows.iter_rows(named=True):
        m = seeds.filter((pl.col("basis") == r["basis"]) & (pl.col("reason").fill_null("") == ""))[
            "multiplier"
        ]
        x = np.log(m.to_numpy())
        assert len(set(m.to_list())) == 4  # the jitter spreads them
        assert r["estimate"] == pytest.approx(sps.gmean(m.to_numpy()), rel=1e-12)
        assert r["p_one_sided"] == pytest.approx(
            sps.ttest_1samp(x, 0, alternative="greater").pvalue, rel=1e-10
        )
        ps.append(r["p_one_sided"])
    left = rows.filter(pl.col("basis") == "compute")["left_out"][0]
    assert (
        "2: the parent's run at 409_600 tokens diverged" in left and "3: the variant's run diverged" in left
    )
    assert rows.filter(pl.col("basis") == "compute")["seeds"][0] == "0 1 6 7"
    holm = multipletests(ps, method="holm")[1]
    assert rows["holm_p"].to_list() == pytest.approx(list(holm), rel=1e-12)
    assert rows["verdict"].to_list() == ["yes" if h < 0.05 else "undecided" for h in holm]
    assert "yes" in rows["verdict"].to_list()
    assert "rd_attnres pays for its cost at equal compute: yes" in out
