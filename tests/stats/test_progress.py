"""The grid status of a report (harness/report/stats/progress.py, harness/report/render/summary.py): the queue's view of
the runs next to the store's, and a report that never claims that every run finished when
some are queued, running, failed or unreadable. Synthetic frames, no queue server (the real
journal queue end to end: tests/report/test_report.py). CPU only, ~10 s:

    python -m pytest -q tests/stats/test_progress.py
"""

from __future__ import annotations

import polars as pl
import pytest

from harness.report.build import Frames, build_report
from harness.report.render.summary import progress_sentence
from harness.report.simulation.synthetic import synthetic_frames
from harness.report.stats.progress import (
    NOT_IN_STORE,
    UNREADABLE,
    QueuedRun,
    grid_progress,
    unreadable_run_ids,
)

VARIANTS = {"block_attnres": 0.0, "rd_attnres": -0.03, "fixed_v": -0.01}  # a 3 x 3 grid: 9 runs


def _queue(frames, states: dict[str, str]) -> dict[str, QueuedRun]:
    """Every run of the frames in the queue, 'done' unless ``states`` says otherwise."""
    return {
        r["run_id"]: QueuedRun(
            states.get(r["run_id"], "done"), r["variant"], r["role"], r["seed"], r["size"], r["budget_tokens"]
        )
        for r in frames["runs"].iter_rows(named=True)
    }


def test_grid_progress_folds_queue_and_store():
    frames = synthetic_frames(grid="g", seeds=(0, 1, 2), effects=VARIANTS)
    ids = frames["runs"]["run_id"].to_list()
    stored = frames["runs"].filter(pl.col("run_id").is_in(ids[:4]))
    stored = stored.with_columns(
        pl.when(pl.col("run_id") == ids[3]).then(pl.lit("failed")).otherwise(pl.col("status")).alias("status")
    )
    queue = _queue(
        frames, {ids[3]: "queued", ids[4]: "running", ids[5]: "queued", ids[6]: "failed", ids[7]: "done"}
    )
    p = grid_progress(stored, queue, grid="g", unreadable={ids[8]: "not valid JSON", "other:x": "bad"})
    state = {r.run_id: r.state for r in p.runs}
    # Stored done runs are done; a run stored as failed that the queue queued again is queued;
    # queue-done runs the store lacks are unreadable (its file was skipped) or not in the store yet.
    assert [state[i] for i in ids] == [
        "done",
        "done",
        "done",
        "queued",
        "running",
        "queued",
        "failed",
        NOT_IN_STORE,
        UNREADABLE,
    ]
    assert p.total == 9 and not p.complete and p.queue_found
    assert "an earlier attempt failed" in next(r.detail for r in p.runs if r.run_id == ids[3])
    assert next(r.detail for r in p.runs if r.run_id == ids[8]) == "not valid JSON"
    assert "other:x" not in state  # an unreadable file of another grid
    assert p.variants("control") == ["fixed_v"] and p.of_variant("block_attnres")["done"] == 1
    assert progress_sentence(p) == (
        "3 of 9 runs done; 1 failed, 1 running, 2 queued, 1 finished, result not in "
        "the store, 1 result file unreadable — the verdicts below use the finished runs "
        "only.",
        "warn",
    )

    full = grid_progress(frames["runs"], _queue(frames, {}), grid="g")
    assert full.complete and progress_sentence(full) == ("All 9 runs of the grid finished (9 done).", "good")
    none = grid_progress(frames["runs"], None, grid="g", queue_note="no queue at r/queue.journal")
    assert not none.complete and progress_sentence(none)[0].startswith(
        "Queue not found (no queue at r/queue.journal): this report sees only the 9 run(s) in the results store "
        "(9 done)"
    )
    with pytest.raises(ValueError, match="queue state 'lost' not understood; allowed: queued, running"):
        grid_progress(frames["runs"], {ids[0]: "lost"})


def test_unreadable_run_ids_unquote_file_names():
    from harness.store.validate import result_filename

    rid = "g:small:rd_attnres:s0:60000"
    log = pl.DataFrame({"file": [result_filename(rid)], "error": ["Expecting value: line 1 column 9"]})
    assert unreadable_run_ids(log) == {rid: "Expecting value: line 1 column 9"}
    assert unreadable_run_ids(None) == {}


def test_partial_report_says_what_is_unfinished_and_never_that_all_finished(tmp_path):
    """2 of 9 runs done (the parent and the treatment at seed 0), 2 running, 5 queued."""
    frames = synthetic_frames(grid="g", seeds=(0, 1, 2), effects=VARIANTS)
    done = ["g-small-1000000-block_attnres-s0", "g-small-1000000-rd_attnres-s0"]
    part = {k: frames[k].filter(pl.col("run_id").is_in(done)) for k in frames}
    running = ["g-small-1000000-block_attnres-s1", "g-small-1000000-fixed_v-s0"]
    queue = _queue(
        frames,
        {r: ("running" if r in running else "queued") for r in frames["runs"]["run_id"] if r not in done},
    )
    result = build_report(
        Frames(**part), tmp_path, grid="g", queue=queue, queue_note="read from q.journal", figures=False
    )
    md = (tmp_path / "report.md").read_text()
    sentence = "2 of 9 runs done; 2 running, 5 queued — the verdicts below use the finished runs only."
    assert f"> {sentence}" in md
    assert "every run of the grid finished" not in md and "All 9" not in md and "controls: none" not in md
    assert "controls: fixed_v (no run finished yet)" in md
    assert (
        "No control has a finished pair with the parent yet (fixed_v: 0 of 3 runs finished (1 running, "
        "2 queued))."
    ) in md
    assert f"None of the finished runs in the results store was left out. {sentence}" in md
    assert "7 run(s) of this cell have not finished (2 running, 5 queued): this verdict may change." in md
    assert "| **done** | 2 | block_attnres s0; rd_attnres s0 |" in md
    assert "| **running** | 2 | block_attnres s1; fixed_v s0 |" in md  # by role: parent first
    (h,) = result.stats.headlines
    assert not h.established and h.n == 1

    # The same frames without the queue: the report says the queue was not found.
    build_report(Frames(**part), tmp_path / "noq", grid="g", figures=False)
    md = (tmp_path / "noq" / "report.md").read_text()
    assert "> Queue not found (the queue was not read): this report sees only the 2 run(s)" in md
    assert "controls: none" in md  # no queue, no way to know the grid's controls

    # Only the treatment's result is in the store: no parent yet is one clear error naming what
    # the queue holds (it calls the parent's seed 0 done: its result is not in the store yet).
    only_t = {k: frames[k].filter(pl.col("run_id") == done[1]) for k in frames}
    with pytest.raises(
        ValueError,
        match=r"no finished run of the parent yet; 1 of 9 runs done; 2 running, 5 queued, "
        r"1 finished, result not in the store",
    ):
        build_report(Frames(**only_t), tmp_path / "t", grid="g", queue=queue, figures=False)


def test_complete_grid_says_so(tmp_path):
    frames = synthetic_frames(grid="g", seeds=(0, 1, 2), effects=VARIANTS)
    build_report(Frames(**frames), tmp_path, grid="g", queue=_queue(frames, {}), figures=False)
    md = (tmp_path / "report.md").read_text()
    assert "> All 9 runs of the grid finished (9 done)." not in md  # a good status is not a warning quote
    assert "All 9 runs of the grid finished (9 done)." in md
    assert "None: all 9 runs of the grid finished and entered the statistics." in md
