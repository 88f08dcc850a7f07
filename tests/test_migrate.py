"""``harness migrate``: a queue of the previous layout (one Optuna study "harness" for every grid) is
converted into one study per grid only when asked (harness/commands/migrate.py); ``harness queue``
reads it as it is and names the command in one line. The conversion itself (values, diverged runs,
a conversion cut short) is tested in tests/test_tune_queue.py. Real journal queue, stub training; ~5 s:

    python -m pytest -q tests/test_migrate.py
"""

from __future__ import annotations

import json
import math

from optuna.trial import TrialState, create_trial

from harness.cli import main as cli
from harness.scheduling.queue import LEGACY_STUDY, RunQueue
from harness.scheduling.worker import work

from queue_stubs import configs, new_queue, quiet, write_grid


def _old_trial(config, state, **attrs):
    """A trial as the previous layout wrote it (every grid's runs in study ``"harness"``)."""
    ua = {
        "run_id": config.run_id,
        "grid": config.grid,
        "config": json.dumps(config.to_dict(), sort_keys=True),
        "attempt": 1,
        "failures": 0,
        "reclaims": 0,
        "order": [0.0, 0],
        **attrs,
    }
    return create_trial(state=state, value=math.inf if state == TrialState.COMPLETE else None, user_attrs=ua)


def test_the_previous_layout_is_converted_only_by_harness_migrate(tmp_path, capsys):
    q = new_queue(tmp_path)
    results = tmp_path / "results"
    old = configs(name="a", seeds=(0,))
    sid = q.storage.create_new_study([], study_name=LEGACY_STUDY)
    q.storage.create_new_trial(sid, _old_trial(old[0], TrialState.COMPLETE, status="done", val_nll=3.25))
    q.storage.create_new_trial(sid, _old_trial(old[1], TrialState.COMPLETE, status="diverged"))
    q.storage.create_new_trial(sid, _old_trial(old[2], TrialState.WAITING))

    # harness queue: one note naming the command, the old study untouched, the new grid in its own study.
    assert cli(["queue", str(write_grid(tmp_path, name="b")), "--results", str(results)]) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if "previous layout" in line]
    assert notes == [
        "harness queue: note: this queue has the previous layout (one Optuna study 'harness' for every "
        "grid), read as it is; `harness migrate` converts it into one study per grid"
    ]
    assert set(RunQueue.open(None, results).studies()) == {LEGACY_STUDY, "b"}

    # A run of the old study still queued: nothing converted, exit status 1, the line says why.
    assert cli(["migrate", "--results", str(results)]) == 1
    assert "1 of its runs are queued or running" in capsys.readouterr().out
    assert set(RunQueue.open(None, results).studies()) == {LEGACY_STUDY, "b"}

    work(RunQueue.open(None, results), lambda c, r: ("done", 4.0), results, grid="a", log=quiet)
    assert cli(["migrate", "--results", str(results)]) == 0
    assert "3 trial(s) of study 'harness' copied into 1 studies, one per grid (a)" in capsys.readouterr().out
    q = RunQueue.open(None, results)
    assert set(q.studies()) == {"a", "b"}
    assert {r: s.state for r, s in q.runs("a").items()} == {
        old[0].run_id: "done",
        old[1].run_id: "diverged",
        old[2].run_id: "done",
    }
    assert cli(["migrate", "--results", str(results)]) == 0  # nothing left: said so, exit 0
    assert "no study of the previous layout; nothing to convert" in capsys.readouterr().out


def test_harness_migrate_refuses_a_missing_results_folder(tmp_path, capsys):
    assert cli(["migrate", "--results", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        len(err) == 1 and err[0].startswith("harness migrate: error: results folder") and "nowhere" in err[0]
    )
    assert not (tmp_path / "nowhere").exists()
