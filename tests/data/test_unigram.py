"""The unigram plateau (harness/data/unigram.py) and the report's plateau rows (harness/report/stats/plateau.py),
against independent computations."""

from __future__ import annotations

import math
import os
from collections import Counter

import numpy as np
import polars as pl
import pytest

from harness.data import unigram
from harness.data.unigram import count_tokens, train_counts, unigram_nll
from harness.report.stats.plateau import plateau_rows


def test_counts_match_a_counter_across_chunk_boundaries(monkeypatch):
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 37, size=10_001).astype(np.uint16)
    monkeypatch.setattr(unigram, "CHUNK_TOKENS", 1000)  # 11 chunks, the last one short
    counts = count_tokens(tokens, 40)
    expected = Counter(tokens.tolist())
    assert counts.tolist() == [expected.get(v, 0) for v in range(40)]
    with pytest.raises(ValueError, match="token id 39 outside the vocabulary"):
        count_tokens(np.array([1, 39]), 39)
    with pytest.raises(ValueError, match="token id -2 outside the vocabulary"):
        count_tokens(np.array([-2, 50]), 39)  # the id it names is one that is out


def test_unigram_nll_is_the_add_one_cross_entropy():
    train = [0, 0, 0, 1, 2, 2]  # V = 4: id 3 never seen in training
    val = [0, 3, 2, 2, 1]
    counts = count_tokens(np.array(train), 4)
    p = {v: (train.count(v) + 1) / (len(train) + 4) for v in range(4)}
    expected = -sum(math.log(p[y]) for y in val) / len(val)
    assert unigram_nll(counts, np.array(val)) == pytest.approx(expected, rel=1e-15)
    # a target unseen in training costs log(C + V), finite
    assert unigram_nll(counts, np.array([3])) == pytest.approx(math.log(10), rel=1e-15)
    with pytest.raises(ValueError, match="no validation targets"):
        unigram_nll(counts, np.array([], dtype=np.int64))


class _Prepared:
    def __init__(self, folder, tokens, vocab_size):
        self.dir, self._tokens, self.vocab_size, self.reads = folder, tokens, vocab_size, 0

    def tokens(self, split):
        assert split == "train"
        self.reads += 1
        return self._tokens


def test_train_counts_are_cached_and_a_read_only_folder_is_no_error(tmp_path):
    tokens = np.array([1, 1, 2, 4], dtype=np.uint16)
    prepared = _Prepared(tmp_path, tokens, 5)
    assert train_counts(prepared).tolist() == [0, 2, 1, 0, 1]
    assert (
        train_counts(prepared).tolist() == [0, 2, 1, 0, 1] and prepared.reads == 1
    )  # second call: the cache
    assert sorted(p.name for p in tmp_path.iterdir()) == ["unigram_counts.npy"]  # no temporary left
    # a cache of another vocabulary (the folder reused) is recounted
    assert train_counts(_Prepared(tmp_path, tokens, 6)).tolist() == [0, 2, 1, 0, 1, 0]
    ro = tmp_path / "ro"
    ro.mkdir()
    os.chmod(ro, 0o555)
    try:
        prepared = _Prepared(ro, tokens, 5)
        if os.access(ro, os.W_OK):  # root ignores the mode bits: make the write fail another way
            (ro / "unigram_counts.npy").mkdir()
        assert train_counts(prepared).tolist() == [0, 2, 1, 0, 1]
    finally:
        os.chmod(ro, 0o755)


def test_plateau_rows_take_the_worst_run_and_leave_out_non_finite_ones():
    final = pl.DataFrame(
        {
            "run_id": ["a", "b", "c", "d"],
            "size": ["tiny"] * 4,
            "budget_tokens": [100] * 4,
            "val_nll": [4.0, 4.5, float("nan"), 3.5],
        }
    )
    runs = pl.DataFrame({"run_id": ["a", "b", "c", "d"], "unigram_nll": [5.5, 5.5, 5.5, 5.5]})
    (row,) = plateau_rows(final, runs)
    assert (row.n_runs, row.final_min, row.final_max, row.final_mean) == (3, 3.5, 4.5, 4.0)
    assert row.unigram_nll == 5.5 and row.margin == 1.0 and row.spread == 0.0
    (old,) = plateau_rows(final, runs.drop("unigram_nll"))  # runs from before the column: no plateau
    assert math.isnan(old.unigram_nll) and math.isnan(old.margin)


def test_the_report_prints_the_plateau_and_flags_runs_near_it(tmp_path):
    """report.md and the terminal summary give the plateau, the final NLL range and the worst run's margin;
    a cell whose worst run ends < NEAR_PLATEAU_NATS below the plateau is flagged."""
    from harness.report.build import Frames, build_report
    from harness.report.render.plateau_section import NEAR_PLATEAU_NATS
    from harness.report.render.sections import summary_lines
    from harness.report.simulation.synthetic import synthetic_frames

    frames = synthetic_frames(grid="g", seeds=(0, 1, 2))
    nll = frames["final"]["val_nll"]
    plateau = float(nll.max()) + 1.5
    runs = frames["runs"].with_columns(unigram_nll=pl.lit(plateau))
    result = build_report(Frames(frames["final"], runs), tmp_path / "far", grid="g", figures=False)
    text = (tmp_path / "far/report.md").read_text()
    row = f"| {plateau:.3f} | {nll.min():.3f} / {nll.mean():.3f} / {nll.max():.3f} | {nll.len()} | 1.500 below |"
    assert "## Past the unigram plateau?" in text and row in text and "Near the plateau" not in text
    assert any(
        line.startswith("plateau: ") and "ends 1.500 below it" in line for line in summary_lines(result.stats)
    )
    near = frames["runs"].with_columns(unigram_nll=pl.lit(float(nll.max()) + NEAR_PLATEAU_NATS / 2))
    build_report(Frames(frames["final"], near), tmp_path / "near", grid="g", figures=False)
    assert (
        "Near the plateau (the worst run ends less than 0.5 nats/token below it)"
        in (tmp_path / "near/report.md").read_text()
    )
