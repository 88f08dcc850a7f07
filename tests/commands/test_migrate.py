"""``harness migrate``: a queue of the previous layout (one Optuna study "harness" for every grid) is
converted into one study per grid only when asked (harness/commands/migrate.py); every other command
refuses it with one line naming ``harness migrate``. The conversion itself (values, diverged runs,
a conversion cut short) is tested in tests/scheduling/test_tune_queue.py. Real journal queue, stub training; ~5 s:

    python -m pytest -q tests/commands/test_migrate.py
"""

from __future__ import annotations

import json
import math
import os

from optuna.trial import TrialState, create_trial

from harness.cli import main as cli
from harness.scheduling.queue.lease import Lease
from harness.scheduling.queue.run_queue import LEGACY_STUDY, RunQueue
from harness.scheduling.workers.loop import work

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


def test_the_previous_layout_is_refused_by_every_command_but_harness_migrate(tmp_path, capsys):
    q = new_queue(tmp_path)
    results = tmp_path / "results"
    old = configs(name="a", seeds=(0,))
    sid = q.storage.create_new_study([], study_name=LEGACY_STUDY)
    q.storage.create_new_trial(sid, _old_trial(old[0], TrialState.COMPLETE, status="done", val_nll=3.25))
    q.storage.create_new_trial(sid, _old_trial(old[1], TrialState.COMPLETE, status="diverged"))
    q.storage.create_new_trial(sid, _old_trial(old[2], TrialState.WAITING))
    fresh = Lease.here()
    held = configs(name="a", seeds=(1,))[0]
    tid = q.storage.create_new_trial(sid, _old_trial(held, TrialState.RUNNING, lease=fresh.to_dict()))

    # every other command: one line naming `harness migrate`, exit status 2, nothing written
    grid_b = str(write_grid(tmp_path, name="b"))
    for argv in (["queue", grid_b], ["work"], ["status"]):
        assert cli([*argv, "--results", str(results)]) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"harness {argv[0]}: error: queue "), err
        assert err[0].endswith(
            "has the previous layout (one Optuna study 'harness' for every grid); "
            "run `harness migrate` to convert it into one study per grid"
        )
    assert set(RunQueue.open(None, results, legacy=True).studies()) == {LEGACY_STUDY}

    # A run of the old study running under a fresh lease: nothing converted, exit status 1, the line says why.
    assert cli(["migrate", "--results", str(results)]) == 1
    assert "1 of its runs are running" in capsys.readouterr().out
    assert set(RunQueue.open(None, results, legacy=True).studies()) == {LEGACY_STUDY}

    # Its worker gone (the lease stale): converted, the queued and the stale run queued again in grid a.
    stale = Lease(host=q.host, pid=os.getpid(), since=0.0, beat=0.0)
    q.storage.set_trial_user_attr(tid, "lease", stale.to_dict())
    assert cli(["migrate", "--results", str(results)]) == 0
    assert "4 trial(s) of study 'harness' copied into 1 studies, one per grid (a)" in capsys.readouterr().out
    q = RunQueue.open(None, results)
    assert set(q.studies()) == {"a"}
    assert {r: s.state for r, s in q.runs("a").items()} == {
        old[0].run_id: "done",
        old[1].run_id: "diverged",
        old[2].run_id: "queued",
        held.run_id: "queued",
    }
    work(q, lambda c, r: ("done", 4.0), results, grid="a", log=quiet)
    assert {s.state for s in RunQueue.open(None, results).runs("a").values()} == {"done", "diverged"}
    assert cli(["migrate", "--results", str(results)]) == 0  # nothing left: said so, exit 0
    assert "no study of the previous layout; nothing to convert" in capsys.readouterr().out


def test_harness_migrate_refuses_a_missing_results_folder(tmp_path, capsys):
    assert cli(["migrate", "--results", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        len(err) == 1 and err[0].startswith("harness migrate: error: results folder") and "nowhere" in err[0]
    )
    assert not (tmp_path / "nowhere").exists()
