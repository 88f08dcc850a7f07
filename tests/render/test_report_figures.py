"""The numbers behind the report's figures (harness/report/render/figures.py, harness/report/render/routing_figures.py):
seed bands of the training and validation curves, routing matrices at each evaluation.
Synthetic frames; CPU only, ~10 s:

    python -m pytest -q tests/render/test_report_figures.py
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from harness.report.render.figures import _band, _minus_parent, training_curves
from harness.report.render.routing_figures import MAX_EVALS, _evals, _matrix, routing_over_training
from harness.report.simulation.synthetic import synthetic_frames
from harness.report.stats.analysis import analyze

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def grid():
    frames = synthetic_frames(grid="f", seeds=(0, 1, 2), n_layers=3, n_evals=4)
    # Routing at each evaluation: the synthetic frames log it once, at the end; give each run
    # four evaluations whose weights differ (scaled copies, renormalised per layer).
    rows = []
    for k, tokens in enumerate((250_000, 500_000, 750_000, 1_000_000)):
        r = frames["routing"].with_columns(
            pl.lit(tokens).alias("tokens"), (pl.col("weight") * (1 + k * pl.col("source"))).alias("weight")
        )
        r = r.with_columns(pl.col("weight") / pl.col("weight").sum().over("run_id", "layer", "route"))
        rows.append(r)
    frames["routing"] = pl.concat(rows)
    return frames, analyze(frames["final"], frames["runs"], grid="f")


def test_seed_band_is_mean_min_max_over_seeds(grid):
    frames, _ = grid
    m = frames["metrics"].filter((pl.col("split") == "val") & (pl.col("name") == "nll"))
    curves = (
        m.join(frames["final"].select("run_id", "variant", "seed"), on="run_id")
        .filter(pl.col("variant") == "rd_attnres")
        .select("variant", "seed", "tokens", "value")
    )
    band = _band(curves, 1)
    for row in band.iter_rows(named=True):
        v = curves.filter(pl.col("tokens") == row["tokens"])["value"].to_numpy()
        assert (row["mean"], row["lo"], row["hi"], row["n"]) == (
            pytest.approx(v.mean(), abs=1e-12),
            v.min(),
            v.max(),
            3,
        )
    # Smoothing: a centred rolling mean per seed, before the band.
    smooth = _band(curves, 3)
    s0 = curves.filter(pl.col("seed") == 0).sort("tokens")["value"].to_numpy()
    s1 = curves.filter(pl.col("seed") == 1).sort("tokens")["value"].to_numpy()
    s2 = curves.filter(pl.col("seed") == 2).sort("tokens")["value"].to_numpy()
    want = np.mean([s[0:3].mean() for s in (s0, s1, s2)])  # the second point: its window is points 0, 1, 2
    assert smooth["mean"][1] == pytest.approx(want, abs=1e-12)
    # Minus the parent: the same seed at the same token count.
    rel = _minus_parent(
        m.join(frames["final"].select("run_id", "variant", "seed"), on="run_id").select(
            "variant", "seed", "tokens", "value"
        ),
        "block_attnres",
    )
    one = (
        rel.filter((pl.col("variant") == "rd_attnres") & (pl.col("seed") == 1))
        .sort("tokens")["value"]
        .to_numpy()
    )
    p1 = m.join(frames["final"].select("run_id", "variant", "seed"), on="run_id")
    t = (
        p1.filter((pl.col("variant") == "rd_attnres") & (pl.col("seed") == 1))
        .sort("tokens")["value"]
        .to_numpy()
    )
    p = (
        p1.filter((pl.col("variant") == "block_attnres") & (pl.col("seed") == 1))
        .sort("tokens")["value"]
        .to_numpy()
    )
    assert one == pytest.approx(t - p, abs=0)


def test_training_curves_draw_training_loss_and_validation(grid):
    frames, stats = grid
    fig = training_curves(frames["metrics"], frames["final"], stats, "small", 1_000_000)
    assert fig.png.startswith(PNG) and fig.cell == ("small", 1_000_000)
    only_train = frames["metrics"].filter(pl.col("split") == "train")
    assert training_curves(only_train, frames["final"], stats, "small", 1_000_000) is not None
    assert training_curves(frames["metrics"].head(0), frames["final"], stats, "small", 1_000_000) is None


@pytest.mark.slow
def test_routing_matrix_per_evaluation_is_the_mean_over_seeds(grid):
    frames, stats = grid
    r = frames["routing"].join(
        frames["final"].filter(pl.col("variant") == "rd_attnres").select("run_id", "seed"), on="run_id"
    )
    m = _matrix(r, "v", 500_000, (3, 4))
    for layer in range(3):
        for src in range(4):
            w = r.filter(
                (pl.col("route") == "v")
                & (pl.col("tokens") == 500_000)
                & (pl.col("layer") == layer)
                & (pl.col("source") == src)
            )["weight"].to_numpy()
            assert (np.isnan(m[layer, src]) and w.size == 0) or m[layer, src] == pytest.approx(
                w.mean(), abs=1e-12
            )
    assert np.nansum(m, axis=1) == pytest.approx(np.ones(3), abs=1e-12)  # each layer's distribution sums to 1
    assert not np.allclose(np.nan_to_num(_matrix(r, "v", 250_000, (3, 4))), np.nan_to_num(m))

    fig = routing_over_training(frames["routing"], frames["final"], stats, "rd_attnres", "small", 1_000_000)
    assert fig.png.startswith(PNG) and "at every evaluation" in fig.caption and "QK minus V" in fig.caption
    # A control with only the QK route adds nothing to the parent's figure; the parent keeps its own.
    assert (
        routing_over_training(frames["routing"], frames["final"], stats, "param_matched", "small", 1_000_000)
        is None
    )
    parent = routing_over_training(
        frames["routing"], frames["final"], stats, "block_attnres", "small", 1_000_000
    )
    assert parent is not None and "QK minus V" not in parent.caption


def test_evaluations_shown_are_capped_evenly_with_both_ends():
    tokens = list(range(1000, 21_000, 1000))  # 20 evaluations
    shown = _evals(tokens)
    assert len(shown) == MAX_EVALS and shown[0] == 1000 and shown[-1] == 20_000 and shown == sorted(shown)
    assert _evals(tokens[:5]) == tokens[:5]
