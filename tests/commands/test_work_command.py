"""The work and status commands over the run queue, and storage outages (harness.scheduling).

Stub train functions only (a fake ``harness.train.runner`` module stands in for training);
under a minute on 2 shared CPU cores. Run: python -m pytest -q tests/commands/test_work_command.py
"""

from __future__ import annotations

import json
import logging
import multiprocessing as mp
import re
import subprocess
import sys
import time
import types
from collections import Counter
from pathlib import Path

import pytest
from optuna.trial import TrialState

import harness.train
from harness.cli import main as cli
from harness.scheduling.queue.lease import Lease
from harness.scheduling.queue.run_queue import RunQueue
from harness.scheduling.workers.loop import work
from harness.scheduling.workers.retry import MAX_RECLAIMS, MAX_RETRIES
from harness.train.execution import ExecutionSettings

from queue_stubs import blocking_cli_worker, configs, new_queue, quiet

pytestmark = pytest.mark.own_cache  # its commands build their corpus in RESULTS/cache (conftest)

# ----------------------------------------------------------------------------- commands


def test_work_command_uses_the_runner_lazily(tmp_path, monkeypatch, capsys):
    results = tmp_path / "results"
    RunQueue.open(None, results).enqueue(configs(seeds=(0,)))
    calls = []
    fake = types.ModuleType("harness.train.runner")

    def train_run(config, results_dir, settings, *, stop_requested=None, on_eval=None):
        calls.append(("train", config.run_id, Path(results_dir)))
        assert settings == ExecutionSettings()  # the defaults, built once from the command line, whole
        if config.variant == "fixed_v":
            raise ValueError("bad corpus")
        return "done"

    fake.train_run = train_run
    monkeypatch.setitem(sys.modules, "harness.train.runner", fake)
    # the result file's reads and the failed attempt's record (harness.train.result_file, no Lightning)
    from harness.train import result_file

    monkeypatch.setattr(
        result_file,
        "record_failure",
        lambda config, results_dir, error, settings=None: calls.append(("fail", config.run_id, error)),
    )
    monkeypatch.setattr(result_file, "finished_status", lambda config, results_dir: None)
    monkeypatch.setattr(result_file, "finished_outcome", lambda config, results_dir: None)
    monkeypatch.setattr(harness.train, "runner", fake, raising=False)  # not imported yet when run alone
    assert cli(["work", "--results", str(results), "--retries", "0", "--max-runs", "5"]) == 0
    out = capsys.readouterr().out
    assert [c[:2] for c in calls] == [
        ("train", "g:tiny:block_attnres:s0:1000"),
        ("train", "g:tiny:rd_attnres:s0:1000"),
        ("train", "g:tiny:fixed_v:s0:1000"),
        ("fail", "g:tiny:fixed_v:s0:1000"),
    ]
    assert calls[0][2] == results and "ValueError: bad corpus" in calls[3][2]
    assert "[3/3] failed g:tiny:fixed_v:s0:1000" in out and "no retries left" in out
    assert "worker trained 3 runs: 2 done, 0 diverged, 1 failed" in out


@pytest.mark.slow  # 5 s on 2 cores: out of the developer's loop (`pytest -m "not slow"`)
def test_sigterm_releases_the_run(tmp_path):
    results = tmp_path / "results"
    q = RunQueue.open(None, results)
    q.enqueue(configs(seeds=(0,)))
    started = tmp_path / "started"
    p = mp.get_context("spawn").Process(target=blocking_cli_worker, args=(str(results), str(started)))
    p.start()
    deadline = time.time() + 60
    while not started.exists():
        assert time.time() < deadline and p.is_alive(), "worker never started the run"
        time.sleep(0.05)
    p.terminate()  # SIGTERM
    p.join(timeout=60)
    assert p.exitcode == 130  # the CLI's "interrupted"
    rid = started.read_text()
    state = q.runs()[rid]
    assert (state.state, state.attempt, state.pending) == ("queued", 2, False)
    (old,) = [t for t in q.all_trials() if t.state == TrialState.FAIL]
    assert old.user_attrs["ending"] == "released" and old.user_attrs["run_id"] == rid
    assert q.reclaim_stale(max_reclaims=MAX_RECLAIMS) == []  # nothing left running


def test_work_command_default_retries_match_the_queue():
    from harness.commands import work as work_cmd
    from harness.scheduling.queue.storage import STORAGE_RETRY_S

    assert work_cmd.MAX_RETRIES == MAX_RETRIES
    assert work_cmd.STORAGE_RETRY_S == STORAGE_RETRY_S


def test_status_command(tmp_path, capsys):
    results = tmp_path / "results"
    assert cli(["status", "--results", str(results)]) == 2  # a mistyped folder is not an empty queue
    assert capsys.readouterr().err == (
        f"harness status: error: results folder {str(results)!r} does not exist "
        "(set --results DIR or $HARNESS_RESULTS)\n"
    )
    results.mkdir()
    assert cli(["status", "--results", str(results)]) == 0
    assert "no runs queued yet" in capsys.readouterr().out
    q = RunQueue.open(None, results)
    q.enqueue(configs(seeds=(0, 1), variants=("block_attnres", "rd_attnres")))
    for wall in (10.0, 30.0):
        q.complete(q.claim(), "done", value=3.0, wall_s=wall)
    q.fail(q.claim(), "Traceback ...\nRuntimeError: boom", wall_s=1.0, requeue=False)
    q.claim()  # running, fresh lease held by this process
    q.enqueue(configs(name="other", seeds=(0,)))
    assert cli(["status", "--results", str(results)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].split() == [
        "grid",
        "queued",
        "running",
        "done",
        "diverged",
        "failed",
        "total",
        "mean",
        "run",
        "ETA",
    ]
    # g: 2 done (mean 20 s), 1 failed, 1 running; 1 remaining x 20 s / 1 live worker
    assert out[2].split() == ["g", "0", "1", "2", "0", "1", "4", "20", "s", "~20", "s"]
    assert out[3].split()[:7] == ["other", "3", "0", "0", "0", "0", "3"]
    assert out[3].endswith("? (no run finished yet)")
    assert out[4] == f"live workers: 1 ({Lease.here().worker})"
    assert out[5] == "running:" and out[6].split() == [
        "run",
        "worker",
        "tokens",
        "tok/s",
        "ETA",
        "last",
        "beat",
    ]
    # a lease without progress yet (its worker has not finished a step): "starting"
    assert out[7].split()[:5] == ["g:tiny:rd_attnres:s1:1000", Lease.here().worker, "starting", "-", "-"]
    assert out[8].startswith("failed runs: 1")
    assert out[9] == "  g:tiny:block_attnres:s1:1000 (attempt 1): RuntimeError: boom"
    assert cli(["status", "--results", str(results), "--grid", "nope"]) == 2
    assert capsys.readouterr().err == (
        f"harness status: error: no runs of grid 'nope' in {results / 'queue.journal'}; "
        "grids there: g, other\n"
    )
    empty = tmp_path / "empty"
    RunQueue.open(None, empty)
    assert cli(["status", "--results", str(empty), "--grid", "nope"]) == 2
    assert capsys.readouterr().err.endswith("; grids there: none yet\n")
    assert cli(["status", "--results", str(tmp_path / "none"), "--grid", "nope"]) == 2
    assert "results folder" in capsys.readouterr().err
    (tmp_path / "none").mkdir()
    assert cli(["status", "--results", str(tmp_path / "none"), "--grid", "nope"]) == 2
    assert "no runs of grid 'nope': no queue at" in capsys.readouterr().err


def test_run_config_is_stored_as_json(tmp_path):
    q = new_queue(tmp_path)
    cfgs = configs(seeds=(0,))
    q.enqueue(cfgs)
    (t, *_) = q.all_trials()
    assert json.loads(t.user_attrs["config"]) == cfgs[0].to_dict()
    assert t.user_attrs["run_id"] == cfgs[0].run_id and t.state == TrialState.WAITING


def test_queue_logic_is_storage_agnostic_on_rdb(tmp_path):
    """The same queue on Optuna's RDB storage (PostgreSQL in production). SQLite stands in
    here, in ONE process only: parse_storage refuses it for workers (see SQLITE_REFUSED)."""
    import optuna

    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 'q.db'}")
    q = RunQueue(storage, lease_timeout_s=50)
    q.enqueue(configs(seeds=(0,)))
    assert q.enqueue(configs(seeds=(0,))).added == []
    claim = q.claim()
    t = 3_000_000.0
    storage.set_trial_user_attr(claim.trial_id, "lease", Lease("elsewhere", 7, t, t).to_dict())
    assert [rid for rid, _ in q.reclaim_stale(now=t + 60, max_reclaims=MAX_RECLAIMS)] == [claim.run_id]
    assert q.complete(claim, "done", value=1.0, wall_s=1.0) is False  # reclaimed: finished trial
    seen = []
    work(q, lambda c, r: seen.append(c.run_id) or "done", tmp_path, log=quiet)
    assert seen[0] == claim.run_id and len(seen) == 3
    assert Counter(r.state for r in q.runs().values()) == {"done": 3}
    assert q.runs()[claim.run_id].attempt == 2


# ----------------------------------------------------------------------------- storage outages


def test_results_folder_briefly_gone_is_retried_with_backoff(tmp_path, caplog):
    """The journal's folder disappears mid-run (a shared filesystem hiccup) and comes back:
    the worker retries (0.5 s, 1 s, ...) and finishes every run once."""
    import threading

    results = tmp_path / "results"
    q = RunQueue.open(None, results)
    q.enqueue(configs(seeds=(0,)))
    away = tmp_path / "away"
    seen, lines = [], []

    def train(config, results_dir):
        seen.append(config.run_id)
        if len(seen) == 1:
            results.rename(away)  # gone while the run trains ...
            threading.Timer(1.2, away.rename, args=(results,)).start()  # ... back 1.2 s later
        return "done"

    caplog.set_level(logging.DEBUG, logger="harness")
    assert work(q, train, results, retry_s=30, log=lines.append) == Counter(done=3)
    assert len(seen) == 3 == len(set(seen))
    # retries that succeed are no news: not in the worker's output, only at debug level (--verbose)
    assert not [ln for ln in lines if "unreachable" in ln]
    retries = [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.DEBUG and " unreachable (" in r.getMessage()
    ]
    assert retries[0].startswith(
        f"queue storage {results / 'queue.journal'} unreachable (FileNotFoundError: "
    )
    assert [ln.rsplit("; ", 1)[1] for ln in retries[:2]] == ["retry 1 in 0.5 s", "retry 2 in 1 s"]
    assert Counter(r.state for r in q.runs().values()) == {"done": 3}


@pytest.mark.slow  # 4 s on 2 cores: out of the developer's loop (`pytest -m "not slow"`)
def test_a_long_outage_is_said_once_and_its_end_too(tmp_path, monkeypatch):
    """An outage as long as NOTICE_AFTER_S is news: one line while it lasts, one when it ends."""
    import threading

    from harness.scheduling.queue import storage

    monkeypatch.setattr(storage, "NOTICE_AFTER_S", 1.0)
    results = tmp_path / "results"
    q = RunQueue.open(None, results)
    q.enqueue(configs(seeds=(0,), variants=("block_attnres", "rd_attnres")))
    away, lines, seen = tmp_path / "away", [], []

    def train(config, results_dir):
        seen.append(config.run_id)
        if len(seen) == 1:  # gone for 2.5 s while the first run trains
            results.rename(away)
            threading.Timer(2.5, away.rename, args=(results,)).start()
        return "done"

    assert work(q, train, results, retry_s=30, log=lines.append) == Counter(done=2)
    where = results / "queue.journal"
    notes = [ln for ln in lines if "queue storage" in ln]
    assert len(notes) == 2, lines
    assert re.fullmatch(
        rf"queue storage {re.escape(str(where))} unreachable for \d+ s \(FileNotFoundError: .*\); "
        r"still retrying, for up to 30 s in all",
        notes[0],
    )
    assert re.fullmatch(rf"queue storage {re.escape(str(where))} reachable again after \d+ s", notes[1])


@pytest.mark.slow  # 3 s on 2 cores: out of the developer's loop (`pytest -m "not slow"`)
def test_storage_gone_for_good_is_one_line_then_a_new_worker_finishes(tmp_path, monkeypatch, capsys):
    from harness.common.faults import ResultsLost

    results = tmp_path / "results"
    q = RunQueue.open(None, results, lease_timeout_s=1.0)
    q.enqueue(configs(seeds=(0,)))
    away = tmp_path / "away"
    first = "g:tiny:block_attnres:s0:1000"

    def train(config, results_dir):
        results.rename(away)  # the folder goes away while the first run trains, for longer than retry_s
        return "done"

    with pytest.raises(ResultsLost) as info:  # the queue lives in the folder: its loss is the folder's
        work(q, train, results, retry_s=1.6, log=quiet)
    import re

    assert re.fullmatch(
        rf"results folder {re.escape(str(results))} deleted while this worker used it; {first} not released "
        r"\(FileNotFoundError: the queue is unreachable; .*\); the worker stops and creates nothing there .*",
        str(info.value),
    )
    away.rename(results)  # back: nothing lost; the run is still RUNNING under the stopped worker's lease
    assert q.runs()[first].state == "running"
    time.sleep(1.1)  # the lease (1 s) runs out
    seen = []
    assert work(q, lambda c, r: seen.append(c.run_id) or "done", results, log=quiet) == Counter(done=3)
    assert seen[0] == first and len(seen) == 3

    # `harness work`: the results folder (the queue in it) gone for good is one line on stderr and exit 1
    other = tmp_path / "other"
    RunQueue.open(None, other).enqueue(configs(seeds=(1,)))
    fake = types.ModuleType("harness.train.runner")

    def gone(config, results_dir, *args, **kw):
        other.rename(tmp_path / "other-away")
        return "done"

    fake.train_run = gone
    monkeypatch.setitem(sys.modules, "harness.train.runner", fake)
    from harness.train import result_file  # its reads and the failed attempt's record, where they are defined

    monkeypatch.setattr(result_file, "record_failure", lambda *a: None)
    monkeypatch.setattr(result_file, "finished_status", lambda config, results_dir: None)
    monkeypatch.setattr(result_file, "finished_outcome", lambda config, results_dir: None)
    monkeypatch.setattr(harness.train, "runner", fake, raising=False)  # not imported yet when run alone
    assert cli(["work", "--results", str(other), "--storage-retry-s", "1"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and re.fullmatch(
        rf"harness work: error: results folder {re.escape(str(other))} deleted while this worker used it; "
        r"\S+ not released \(FileNotFoundError: the queue is unreachable; .*\); the worker stops and creates "
        r"nothing there .*",
        err[0],
    ), err
    assert not other.exists()


def test_retry_storage_passes_other_errors_at_once():
    from harness.scheduling.queue.storage import retry_storage

    calls = []

    def bad():
        calls.append(1)
        raise ValueError("not an outage")

    with pytest.raises(ValueError, match="not an outage"):
        retry_storage(bad, where="x", retry_s=10, log=quiet)
    assert calls == [1]
    with pytest.raises(FileNotFoundError, match="no queue journal"):  # an answer, not an outage
        RunQueue.open(None, Path("/nonexistent/results"), create=False, retry_s=10)


def test_an_outage_is_told_from_an_answer_and_a_journals_error_imports_no_sqlalchemy():
    """What retry_storage retries: a lost connection of the RDB (SQLAlchemy's OperationalError or
    InterfaceError, also as another error's cause) and a passing OSError of a journal's folder; not an
    OSError waiting does not cure. A journal's error is told without importing SQLAlchemy (a fresh
    interpreter: 0.9 s of CPU that every command paid at its first missing queue)."""
    import errno

    import sqlalchemy.exc

    from harness.scheduling.queue.storage import _unreachable

    lost = sqlalchemy.exc.OperationalError("SELECT 1", {}, ConnectionRefusedError("refused"))
    wrapped = RuntimeError("storage internal error")
    wrapped.__cause__ = lost
    assert _unreachable(lost) and _unreachable(wrapped)
    assert _unreachable(sqlalchemy.exc.InterfaceError("SELECT 1", {}, OSError("closed")))
    assert not _unreachable(sqlalchemy.exc.ProgrammingError("SELECT 1", {}, ValueError("syntax")))
    assert _unreachable(OSError(errno.EIO, "input/output error"))
    assert not _unreachable(OSError(errno.EACCES, "permission denied"))
    assert not _unreachable(ValueError("not an outage"))
    code = (
        "import errno, sys\n"
        "from harness.scheduling.queue.storage import _unreachable\n"
        "print(_unreachable(OSError(errno.EIO, 'x')), _unreachable(OSError(errno.ENOSPC, 'x')),"
        " 'sqlalchemy' in sys.modules)\n"
    )
    fresh = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert fresh.stdout.split() == ["True", "False", "False"], fresh.stdout + fresh.stderr


def test_a_stop_request_ends_the_loop_and_a_run_claimed_meanwhile_goes_back_untrained(tmp_path, monkeypatch):
    """harness launch's workers (harness.train.stop): once a signal asked for a stop, the loop
    takes no further run; a run it claimed while the signal came is released, not trained."""
    from harness.train.stop import StopRequest

    q = new_queue(tmp_path)
    q.enqueue(configs(seeds=(0,)))
    stop, trained, lines = StopRequest(), [], []

    def train(config, results_dir):
        trained.append(config.run_id)
        stop.request("SIGUSR2")  # comes while this (stub) run trains; a real run would stop at its next step
        return "done"

    assert work(q, train, tmp_path, stop=stop, log=lines.append) == Counter(done=1)
    assert len(trained) == 1 and lines[-1] == "stop requested (SIGUSR2); worker stops"
    assert [r.state for r in q.runs().values()] == ["done", "queued", "queued"]

    stop, claim = StopRequest(), q.claim
    monkeypatch.setattr(
        q, "claim", lambda grid=None, pairs=None: (claim(grid, pairs), stop.request("SIGTERM"))[0]
    )
    assert work(q, train, tmp_path, stop=stop, log=lines.append) == Counter() and len(trained) == 1
    rid = "g:tiny:rd_attnres:s0:1000"
    assert lines[-1] == f"stop requested (SIGTERM); released {rid}; worker stops"
    state = q.runs()[rid]
    assert (state.state, state.attempt) == ("queued", 2)
    (old,) = [t for t in state.trials if t.state == TrialState.FAIL]
    assert old.user_attrs["ending"] == "released"
    assert work(q, train, tmp_path, stop=stop, log=lines.append) == Counter()  # asked before: takes nothing
    assert q.runs()[rid].state == "queued"


def test_a_claimed_run_gets_the_workers_settings_and_stop_request_typed_whole(tmp_path):
    """The worker passes each run its ExecutionSettings (positional, the same object), its stop request and
    no pruning hook (a grid's run), as the runner's entry names them; a stand-in train function without
    settings gets ``(config, results_dir)`` only (harness.scheduling.workers.loop.Training)."""
    from harness.scheduling.workers.loop import Training
    from harness.train.stop import StopRequest

    q = new_queue(tmp_path)
    q.enqueue(configs(seeds=(0,)))
    settings, stop, seen = ExecutionSettings(progress=False, micro_batch_size=2, threads=1), StopRequest(), []

    def train_run(config, results_dir, given, *, stop_requested, on_eval):
        seen.append((config.run_id, Path(results_dir), given, stop_requested, on_eval))
        return "done"

    assert work(q, train_run, tmp_path, settings=settings, stop=stop, log=quiet) == Counter(done=3)
    assert [s[1:] for s in seen] == [(tmp_path, settings, stop, None)] * 3
    assert all(given is settings for _, _, given, _, _ in seen)  # whole, not rebuilt from a mapping
    stand_in = Training(lambda config, results_dir: ("done", results_dir), tmp_path)
    assert stand_in(configs(seeds=(0,))[0]) == ("done", tmp_path)
