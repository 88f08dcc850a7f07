"""The [tuned] robustness row, "treatment (tuned) - parent (tuned)" (DESIGN 9), and the grid's
[train.VARIANT] and [tuned] tables that make the runs it pairs."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest
from scipy import stats as sps

from harness.report.render.sections import render_markdown
from harness.report.stats.analysis import analyze
from harness.scheduling.grids.grid import parse_grid, resolve_tuned

SEEDS = (0, 1, 2, 3)
PARENT = [3.10, 3.12, 3.08, 3.11, 3.09]
TREAT = [3.08, 3.11, 3.07, 3.08, 3.085]
PARENT_T = [3.05, 3.06, 3.04, 3.07, 3.05]  # the parent at its tuned lr
TREAT_T = [3.045, 3.065, 3.03, 3.06, 3.0]


def _row(variant, role, seed, nll, *, lr=2e-3, beta2=0.95, tuned=None):
    rid = f"g:small:{variant}:s{seed}:100000" + (":tuned" if tuned else "")
    protocol = {"train": {"lr": lr, "beta2": beta2, "batch_tokens": 2048}, "size": "small"}
    cfg = {"run_id": rid, "variant": variant, "train": {"lr": lr} if tuned else {}, "protocol": protocol}
    if tuned:
        cfg["tuned"] = {"source": tuned, "params": {"lr": lr}, "fields": ["lr"]}
    phash = json.dumps(protocol, sort_keys=True)
    return dict(
        run_id=rid,
        grid="g",
        variant=variant,
        role=role,
        seed=seed,
        size="small",
        budget_tokens=100000,
        protocol_hash=phash,
        val_nll=nll,
        status="done",
        config=json.dumps(cfg),
        code_version="c1",
        error=None,
    )


def frames():
    rows = []
    for s in SEEDS:
        rows += [
            _row("block_attnres", "parent", s, PARENT[s]),
            _row("rd_attnres", "treatment", s, TREAT[s]),
            _row("block_attnres", "parent", s, PARENT_T[s], lr=3e-3, tuned="tune:p"),
            _row("rd_attnres", "treatment", s, TREAT_T[s], lr=2.5e-3, tuned="tune:t"),
        ]
    # seed 4: the tuned treatment ran with another beta2 as well: a protocol difference outside the tuned fields
    rows += [
        _row("block_attnres", "parent", 4, PARENT_T[4], lr=3e-3, tuned="tune:p"),
        _row("rd_attnres", "treatment", 4, TREAT_T[4], lr=2.5e-3, beta2=0.99, tuned="tune:t"),
    ]
    runs = pl.DataFrame(rows)
    return runs.drop("config", "status", "code_version", "error"), runs


def test_robustness_row_pairs_tuned_runs_and_names_the_tuned_fields():
    final, runs = frames()
    st = analyze(final, runs, grid="g")
    (h,) = st.headlines  # the frozen protocol: untuned runs only, 4 pairs
    d = np.array(TREAT[:4]) - np.array(PARENT[:4])
    assert h.n == 4 and h.mean == pytest.approx(d.mean(), abs=1e-15)
    (r,) = st.robustness
    dt = np.array(TREAT_T[:4]) - np.array(PARENT_T[:4])
    c = r.comparison
    assert c.comparison == "rd_attnres (tuned) - block_attnres (tuned)" and c.seeds == SEEDS
    assert c.stats.n == 4 and c.stats.mean == pytest.approx(dt.mean(), abs=1e-15)
    assert r.p_one_sided == pytest.approx(
        sps.ttest_rel(TREAT_T[:4], PARENT_T[:4], alternative="less").pvalue, rel=1e-12
    )
    assert c.stats.ci_low == pytest.approx(dt.mean() - sps.t.ppf(0.975, 3) * dt.std(ddof=1) / 2, rel=1e-12)
    assert r.fields == ("train.lr: 0.0025 (rd_attnres) vs 0.003 (block_attnres)",)
    assert r.sources == ("tune:t", "tune:p") and r.untuned_mean == pytest.approx(d.mean(), abs=1e-15)
    assert c.missing == ("seed 4 (protocols differ outside the tuned fields: train.beta2)",)
    assert any(lo.reason == "protocols differ outside the tuned fields: train.beta2" for lo in st.left_out)
    csv = st.to_frame().filter(pl.col("kind") == "tuned_treatment_vs_parent")
    assert csv.height == 1 and csv["p_one_sided"][0] == r.p_one_sided and "train.lr: 0.0025" in csv["note"][0]
    md = render_markdown(st, [])
    assert "## Robustness: treatment (tuned) - parent (tuned)" in md and "tune:t / tune:p" in md


def test_no_robustness_row_without_tuned_runs():
    final, runs = frames()
    keep = ~pl.col("run_id").str.ends_with(":tuned")
    st = analyze(final.filter(keep), runs.filter(keep), grid="g")
    assert st.robustness == () and "Robustness" not in render_markdown(st, [])


# ----------------------------------------------------------------------------- grid tables


def grid(**extra):
    data = {
        "name": "g",
        "corpus": "/c",
        "sizes": ["tiny"],
        "seeds": [0, 1],
        "budgets_tokens": [4096],
        "variants": {"block_attnres": "parent", "rd_attnres": "treatment"},
        "train": {"batch_tokens": 1024},
    }
    for k, v in extra.items():
        data[k] = {**data.get(k, {}), **v} if isinstance(v, dict) and k == "train" else v
    return parse_grid(data)


def test_train_variant_tables_and_tuned_runs_expand():
    g = grid(
        train={"rd_attnres": {"lr": 1e-3}},
        tuned={"block_attnres": {"lr": 4e-3, "warmup_frac": 0.25}, "rd_attnres": "tune:rd"},
    )
    assert g.train == {"batch_tokens": 1024} and g.train_by_variant == {"rd_attnres": {"lr": 1e-3}}
    with pytest.raises(
        ValueError, match="tuned.rd_attnres = 'tune:rd': a tuning study's best params are read"
    ):
        g.expand()
    with pytest.raises(ValueError, match="that study tuned 'block_attnres', not 'rd_attnres'"):
        resolve_tuned(g, lambda study: ("block_attnres", {"lr": 1e-2}))
    configs = g.expand(tuned=resolve_tuned(g, lambda study: ("rd_attnres", {"lr": 5e-3})))
    ids = [c.run_id for c in configs]
    assert ids == [
        "g:tiny:block_attnres:s0:4096",
        "g:tiny:rd_attnres:s0:4096",
        "g:tiny:block_attnres:s0:4096:tuned",
        "g:tiny:rd_attnres:s0:4096:tuned",
        "g:tiny:block_attnres:s1:4096",
        "g:tiny:rd_attnres:s1:4096",
        "g:tiny:block_attnres:s1:4096:tuned",
        "g:tiny:rd_attnres:s1:4096:tuned",
    ]
    by = {c.run_id: c for c in configs}
    assert by["g:tiny:rd_attnres:s0:4096"].train == {"batch_tokens": 1024, "lr": 1e-3}  # [train.rd_attnres]
    pt = by["g:tiny:block_attnres:s0:4096:tuned"]
    assert pt.train == {"batch_tokens": 1024, "lr": 4e-3, "warmup_tokens": 1024}  # 0.25 x 4096
    assert pt.tuned == {
        "source": "explicit",
        "params": {"lr": 4e-3, "warmup_frac": 0.25},
        "fields": ["lr", "warmup_tokens"],
    }
    tt = by["g:tiny:rd_attnres:s1:4096:tuned"]
    assert tt.train == {"batch_tokens": 1024, "lr": 5e-3} and tt.tuned["source"] == "tune:rd"
    assert (
        by["g:tiny:block_attnres:s0:4096"].tuned is None
        and "tuned" not in by["g:tiny:rd_attnres:s0:4096"].to_dict()
    )


@pytest.mark.parametrize(
    "extra, message",
    [
        (dict(train={"fixed_v": {"lr": 1e-3}}), "train.fixed_v: a [train.VARIANT] table must name a variant"),
        (dict(train={"rd_attnres": {"nope": 1}}), "train.rd_attnres.nope: unknown key"),
        (dict(tuned={"fixed_v": "tune:x"}), "tuned.fixed_v: 'fixed_v' is not a variant"),
        (dict(tuned={"rd_attnres": "x"}), "tuned.rd_attnres: 'x': write \"tune:NAME\""),
        (
            dict(tuned={"rd_attnres": {"eval_tokens": 5}}),
            "tuned.rd_attnres.eval_tokens: not a tunable setting",
        ),
        (
            dict(tuned={"rd_attnres": {"warmup_frac": 1.5}}),
            "tuned.rd_attnres.warmup_frac: 1.5 must be a fraction",
        ),
        (dict(seeds=[0, 10_000]), "seeds: 10000 is reserved: seeds from 10_000 on are the tuning trials'"),
    ],
)
def test_bad_grid_tables_are_refused(extra, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]").replace(".", r"\.")):
        grid(**extra)
