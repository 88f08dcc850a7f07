"""Run queue on Optuna storage (harness.scheduling: storage, queue, lease, worker loop).

Stub train functions only (no model, no GPU). Worker processes use the 'spawn' start
method; the file takes under a minute on 2 shared CPU cores. The work/status commands and
storage outages are in tests/commands/test_work_command.py.

Run: python -m pytest -q tests/scheduling/test_queue.py
"""

from __future__ import annotations

import dataclasses
import functools
import multiprocessing as mp
import os
import sys
import time
from collections import Counter

import pytest
from optuna.trial import TrialState

from harness.cli import main as cli
from harness.scheduling.queue.lease import Lease, pid_alive, stale_reason
from harness.scheduling.queue.run_queue import RunQueue
from harness.scheduling.queue.storage import SQLITE_REFUSED, describe_storage, open_storage, parse_storage
from harness.scheduling.workers.loop import work
from harness.scheduling.workers.retry import MAX_RECLAIMS, MAX_RETRIES

from queue_stubs import configs, new_queue, quiet, stub_append, stub_block_first, worker_process, write_grid

# ----------------------------------------------------------------------------- storage URLs


def test_sqlite_is_refused_with_the_reason(tmp_path):
    for url in ("sqlite:///q.db", "sqlite:////abs/q.db"):
        with pytest.raises(ValueError) as info:
            parse_storage(url, tmp_path)
        assert "sqlite" in str(info.value) and "same enqueued trial to two workers" in str(info.value)
    rc = cli(["queue", "--results", str(tmp_path), "--storage", "sqlite:///x.db", "missing.toml"])
    assert rc == 2


def test_sqlite_refused_on_the_command_line(tmp_path, capsys):
    assert cli(["work", "--results", str(tmp_path), "--storage", "sqlite:///x.db"]) == 2
    err = capsys.readouterr().err
    assert "harness work: error:" in err and "two workers" in err
    assert SQLITE_REFUSED in err


def test_storage_forms(tmp_path):
    assert parse_storage(None, tmp_path) == ("journal", str(tmp_path / "queue.journal"))
    assert parse_storage("journal:/shared/q.journal", tmp_path) == ("journal", "/shared/q.journal")
    assert parse_storage("journal:/shared/q.log", tmp_path) == ("journal", "/shared/q.log")
    assert parse_storage("/shared/q.journal", tmp_path) == ("journal", "/shared/q.journal")
    assert parse_storage("postgresql://u:pw@db/h", tmp_path) == ("rdb", "postgresql://u:pw@db/h")
    assert describe_storage("postgresql://u:pw@db/h", tmp_path) == "postgresql://db/h"
    for bad in ("mysql://x/y", "queue.db", "redis://x", "journal:"):
        with pytest.raises(ValueError, match="storage"):
            parse_storage(bad, tmp_path)


def test_postgres_without_driver_is_a_clear_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "psycopg", None)  # as if not installed
    with pytest.raises(
        ValueError,
        match=r"driver 'psycopg' is not installed; install it with: "
        r"pip install 'rd-harness\[postgres\]'",
    ):
        open_storage("postgresql://u:pw@localhost/harness", tmp_path)
    monkeypatch.setitem(sys.modules, "psycopg2", None)
    with pytest.raises(
        ValueError, match=r"driver 'psycopg2' is not installed; .*pip install psycopg2-binary"
    ):
        open_storage("postgresql+psycopg2://u:pw@localhost/harness", tmp_path)
    assert cli(["work", "--results", str(tmp_path), "--storage", "postgresql://u@localhost/h"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        "harness work: error: --storage postgresql://...: the PostgreSQL"
    )


def test_default_storage_is_a_journal_with_open_lock(tmp_path):
    from optuna.storages.journal import JournalFileOpenLock, JournalStorage

    storage = open_storage(None, tmp_path / "r")
    assert isinstance(storage, JournalStorage)
    assert isinstance(storage.journal.lock, JournalFileOpenLock)  # Optuna's O_EXCL lock (MendingLock)
    assert (tmp_path / "r" / "queue.journal").exists()
    with pytest.raises(FileNotFoundError):
        open_storage(None, tmp_path / "elsewhere", create=False)


# ----------------------------------------------------------------------------- enqueue


def test_enqueue_is_idempotent_and_adds_only_new_cells(tmp_path):
    q = new_queue(tmp_path)
    first = q.enqueue(configs(seeds=(0, 1)))
    assert len(first.added) == 6 and first.present == []
    again = q.enqueue(configs(seeds=(0, 1)))
    assert again.added == [] and len(again.present) == 6
    more = q.enqueue(configs(seeds=(0, 1, 2)))
    assert more.added == [
        "g:tiny:block_attnres:s2:1000",
        "g:tiny:rd_attnres:s2:1000",
        "g:tiny:fixed_v:s2:1000",
    ]
    assert len(more.present) == 6
    assert Counter(r.state for r in q.runs().values()) == {"queued": 9}
    # a second process sees the same queue
    assert len(new_queue(tmp_path).runs()) == 9


def test_enqueue_refuses_a_changed_config_under_the_same_run_id(tmp_path):
    q = new_queue(tmp_path)
    q.enqueue(configs())
    changed = configs()
    changed[1] = dataclasses.replace(changed[1], train={"lr": 1e-3})
    with pytest.raises(ValueError, match=r"g:tiny:rd_attnres:s0:1000 \(differs in train.lr\)"):
        q.enqueue(changed)
    assert len(q.runs()) == 6  # nothing half-added


def test_queue_command_messages(tmp_path, capsys):
    results = str(tmp_path / "results")
    grid = write_grid(tmp_path)
    assert cli(["queue", str(grid), "--results", results]) == 0
    out = capsys.readouterr().out
    assert "g: queued 6 runs in " in out and "queue.journal" in out
    assert cli(["queue", str(grid), "--results", results]) == 0
    assert "g: nothing to add: all 6 runs already queued or done" in capsys.readouterr().out
    grid = write_grid(tmp_path, seeds="[0, 1, 2]")
    assert cli(["queue", str(grid), "--results", results]) == 0
    assert "g: queued 3 runs (6 already queued or done)" in capsys.readouterr().out


def test_queue_command_corpus_precedence(tmp_path, monkeypatch, capsys):
    results = tmp_path / "results"
    grid = write_grid(tmp_path, corpus="does/not/exist.jsonl")
    monkeypatch.chdir(tmp_path)
    assert cli(["queue", str(grid), "--results", str(results)]) == 2  # missing corpus
    monkeypatch.setenv("HARNESS_CORPUS", "hf:HuggingFaceFW/fineweb-edu:sample-10BT")
    # the environment's hub corpus is the one taken: refused until `harness prepare` has sharded it
    assert cli(["queue", str(grid), "--results", str(results)]) == 2
    assert "corpus hf:HuggingFaceFW/fineweb-edu:sample-10BT is not prepared" in capsys.readouterr().err
    (tmp_path / "mine.txt").write_text("text")
    assert (
        cli(
            [
                "queue",
                str(write_grid(tmp_path, name="h", corpus="x")),
                "--corpus",
                "mine.txt",
                "--results",
                str(results),
            ]
        )
        == 0
    )
    corpora = {r.grid: r.config.corpus for r in RunQueue.open(None, results).runs().values()}
    assert corpora == {"h": str(tmp_path / "mine.txt")}


# ----------------------------------------------------------------------------- one worker


def test_worker_trains_every_run_once_in_queue_order(tmp_path):
    q = new_queue(tmp_path)
    cfgs = configs()
    q.enqueue(cfgs)
    seen, lines = [], []
    outcomes = work(q, lambda c, r: seen.append(c.run_id) or "done", tmp_path, log=lines.append)
    assert seen == [c.run_id for c in cfgs]
    assert outcomes == Counter(done=6)
    assert lines[0] == f"[0/6] start g:tiny:block_attnres:s0:1000 (on {Lease.here().worker}, epoch 0)"
    assert lines[1].startswith("[1/6] done g:tiny:block_attnres:s0:1000 (")
    assert lines[-2].startswith("[6/6] done g:tiny:fixed_v:s1:1000 (")
    assert lines[-1] == "nothing queued; worker stops"
    assert Counter(r.state for r in q.runs().values()) == {"done": 6}
    # the config handed to the train fn is the one queued
    assert q.runs()["g:tiny:rd_attnres:s1:1000"].config == cfgs[4]


def test_status_value_and_max_runs(tmp_path):
    q = new_queue(tmp_path)
    q.enqueue(configs())
    results = iter(["diverged", {"status": "done", "val_nll": 3.25}, ("done", 2.5)])
    out = work(q, lambda c, r: next(results), tmp_path, max_runs=3, log=quiet)
    assert out == Counter(done=2, diverged=1)
    runs = list(q.runs().values())
    assert [r.state for r in runs] == ["diverged", "done", "done", "queued", "queued", "queued"]
    assert [r.value for r in runs[:3]] == [None, 3.25, 2.5]
    # done: COMPLETE with the final NLL as its value; diverged: FAIL with the reason (never a ranked inf)
    ended = {
        t.user_attrs["run_id"]: (t.state, t.value) for t in q.all_trials() if t.state != TrialState.WAITING
    }
    assert ended == {
        "g:tiny:block_attnres:s0:1000": (TrialState.FAIL, None),
        "g:tiny:rd_attnres:s0:1000": (TrialState.COMPLETE, 3.25),
        "g:tiny:fixed_v:s0:1000": (TrialState.COMPLETE, 2.5),
    }
    (div,) = [t for t in q.all_trials() if t.state == TrialState.FAIL]
    assert (div.user_attrs["status"], div.user_attrs["error"], div.user_attrs["requeue"]) == (
        "diverged",
        "diverged",
        False,
    )


def test_grid_filter(tmp_path):
    q = new_queue(tmp_path)
    q.enqueue(configs(name="a", seeds=(0,)))
    q.enqueue(configs(name="b", seeds=(0,)))
    seen = []
    work(q, lambda c, r: seen.append(c.grid) or "done", tmp_path, grid="b", log=quiet)
    assert seen == ["b", "b", "b"]
    assert {g: dict(c) for g, c in q.counts().items()} == {
        "a": {"queued": 3, "running": 0, "done": 0, "diverged": 0, "failed": 0, "pruned": 0},
        "b": {"queued": 0, "running": 0, "done": 3, "diverged": 0, "failed": 0, "pruned": 0},
    }
    assert set(q.studies()) == {"a", "b"}  # one Optuna study per grid, named after it


def test_failed_run_is_retried_then_stays_failed(tmp_path):
    q = new_queue(tmp_path)
    q.enqueue(configs(seeds=(0,), variants=("block_attnres", "rd_attnres")))
    calls, recorded, lines = [], [], []

    def train(config, results_dir):
        calls.append(config.run_id)
        if config.variant == "rd_attnres":
            raise RuntimeError("loss exploded into a stack trace")
        return "done"

    out = work(
        q, train, tmp_path, on_failure=lambda c, r, e: recorded.append((c.run_id, e)), log=lines.append
    )
    bad = "g:tiny:rd_attnres:s0:1000"
    assert calls.count(bad) == 1 + MAX_RETRIES == 3
    assert out == Counter(done=1, failed=3)
    assert [rid for rid, _ in recorded] == [bad] * 3
    assert all("RuntimeError: loss exploded" in e and "Traceback" in e for _, e in recorded)
    state = q.runs()[bad]
    assert (state.state, state.attempt) == ("failed", 3)
    assert "loss exploded" in state.error
    assert sum("retry queued" in ln for ln in lines) == 2
    assert sum("no retries left" in ln for ln in lines) == 1
    # --retry-failed queues it once more; a plain re-queue leaves it alone
    assert q.enqueue(configs(seeds=(0,), variants=("block_attnres", "rd_attnres"))).failed == [bad]
    assert q.enqueue(
        configs(seeds=(0,), variants=("block_attnres", "rd_attnres")), retry_failed=True
    ).retried == [bad]
    assert q.runs()[bad].state == "queued" and q.runs()[bad].attempt == 4


def test_no_retries_and_returned_failed(tmp_path):
    q = new_queue(tmp_path)
    q.enqueue(configs(seeds=(0,)))
    recorded, calls = [], Counter()

    def train(config, results_dir):
        calls[config.variant] += 1
        return "failed" if config.variant == "fixed_v" else "done"

    work(q, train, tmp_path, on_failure=lambda *a: recorded.append(a), max_retries=0, log=quiet)
    assert calls == {"block_attnres": 1, "rd_attnres": 1, "fixed_v": 1}
    assert recorded == []  # a returned 'failed' was recorded by the train fn itself
    assert q.runs()["g:tiny:fixed_v:s0:1000"].state == "failed"


def test_interrupt_releases_the_run(tmp_path):
    q = new_queue(tmp_path)
    q.enqueue(configs(seeds=(0,)))
    calls = []

    def interrupted(config, results_dir):
        calls.append(config.run_id)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        work(q, interrupted, tmp_path, log=quiet)
    first = "g:tiny:block_attnres:s0:1000"
    state = q.runs()[first]
    assert (state.state, state.attempt, state.pending) == ("queued", 2, False)
    # not counted as a failure; it goes back to its original place in the queue
    seen = []
    work(q, lambda c, r: seen.append(c.run_id) or "done", tmp_path, max_retries=0, log=quiet)
    assert seen[0] == first and len(seen) == 3
    assert q.runs()[first].state == "done"


def test_duplicate_trials_of_one_run_train_once(tmp_path):
    q = new_queue(tmp_path)
    cfgs = configs(seeds=(0,))
    q.enqueue(cfgs)
    q._new_trial(cfgs[0], attempt=1, failures=0, reclaims=0, order=[0.0, 0])  # e.g. two `queue`s racing
    seen = []
    work(q, lambda c, r: seen.append(c.run_id) or "done", tmp_path, log=quiet)
    assert sorted(seen) == sorted(c.run_id for c in cfgs)
    endings = Counter(t.user_attrs.get("ending") for t in q.all_trials())
    assert endings[None] == 3 and endings["duplicate"] == 1


def test_orphaned_requeue_is_repaired(tmp_path):
    """A worker that died between failing a trial and creating its retry loses nothing."""
    q = new_queue(tmp_path)
    q.enqueue(configs(seeds=(0,)))
    claim = q.claim()
    q._set_attrs(claim.trial_id, {"requeue": True, "ending": "released"})
    q._finish(claim.trial_id, TrialState.FAIL)  # ... and the process died here
    state = q.runs()[claim.run_id]
    assert (state.state, state.pending) == ("queued", True)
    assert q.claim().run_id != claim.run_id  # not WAITING yet
    assert q.requeue_orphans() == [claim.run_id]
    assert q.requeue_orphans() == []
    assert q.runs()[claim.run_id].pending is False


# ----------------------------------------------------------------------------- leases


def test_stale_lease_rules():
    t = 1_000_000.0
    lease = Lease(host="elsewhere", pid=1, since=t, beat=t)
    assert stale_reason(lease, now=t + 50, timeout_s=50, host="here") is None
    assert (
        stale_reason(lease, now=t + 50.5, timeout_s=50, host="here")
        == "worker elsewhere:1 last beat 50 s ago (lease timeout 50 s)"
    )
    # same host: a gone pid is stale at once
    p = mp.get_context("spawn").Process(target=time.sleep, args=(0,))
    p.start()
    p.join()
    mine = Lease(host="here", pid=p.pid, since=t, beat=t)
    assert not pid_alive(p.pid)
    assert stale_reason(mine, now=t, timeout_s=50, host="here") == f"worker here:{p.pid} is no longer running"
    assert stale_reason(Lease("here", os.getpid(), t, t), now=t, timeout_s=50, host="here") is None


def test_stale_lease_is_reclaimed_after_the_timeout(tmp_path):
    q = new_queue(tmp_path, lease_timeout_s=50)
    q.enqueue(configs(seeds=(0,)))
    claim = q.claim()
    t = 2_000_000.0
    q.storage.set_trial_user_attr(claim.trial_id, "lease", Lease("elsewhere", 4242, t, t).to_dict())
    assert q.reclaim_stale(now=t + 49, max_reclaims=MAX_RECLAIMS) == []
    assert q.runs()[claim.run_id].state == "running"
    other = new_queue(tmp_path, lease_timeout_s=50)
    assert other.reclaim_stale(now=t + 51, max_reclaims=MAX_RECLAIMS) == [
        (claim.run_id, "worker elsewhere:4242 last beat 51 s ago (lease timeout 50 s)")
    ]
    assert q.reclaim_stale(now=t + 51, max_reclaims=MAX_RECLAIMS) == []  # only one reclaimer wins
    state = q.runs()[claim.run_id]
    assert (state.state, state.attempt) == ("queued", 2)
    # the first worker's late beat and result cannot resurrect the reclaimed trial
    assert q.beat(claim) is False
    assert q.complete(claim, "done", value=1.0, wall_s=1.0) is False
    assert q.runs()[claim.run_id].state == "queued"


def test_heartbeat_refreshes_the_lease(tmp_path):
    q = new_queue(tmp_path)
    q.enqueue(configs(seeds=(0,)))
    beats = []

    def train(config, results_dir):
        time.sleep(0.35)
        beats.append(q.runs()[config.run_id].lease.beat)
        return "done"

    work(q, train, tmp_path, max_runs=1, beat_s=0.1, log=quiet)
    (claim_lease,) = [t.user_attrs["lease"] for t in q.all_trials() if t.state == TrialState.COMPLETE]
    assert beats[0] > claim_lease["since"] + 0.15  # refreshed at least twice in 0.35 s


# ----------------------------------------------------------------------------- many workers


@pytest.mark.slow  # 7 s on 2 cores: out of the developer's loop (`pytest -m "not slow"`)
def test_two_workers_finish_every_run_exactly_once(tmp_path):
    results = tmp_path / "results"
    q = RunQueue.open(None, results)
    cfgs = configs(seeds=(0, 1, 2, 3))
    q.enqueue(cfgs)
    log = tmp_path / "trained.txt"
    ctx = mp.get_context("spawn")
    train = functools.partial(stub_append, str(log))
    procs = [ctx.Process(target=worker_process, args=(str(results), train, 30.0)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0
    lines = log.read_text().splitlines()
    assert sorted(lines) == sorted(c.run_id for c in cfgs)  # one line per cell: no duplicate, none missing
    assert len(lines) == 12
    assert Counter(r.state for r in q.runs().values()) == {"done": 12}
    # one COMPLETE trial per run, no discarded duplicates
    trials = q.all_trials()
    assert Counter(t.state for t in trials) == {TrialState.COMPLETE: 12}


@pytest.mark.slow  # 4 s on 2 cores: out of the developer's loop (`pytest -m "not slow"`)
def test_killed_worker_run_is_reclaimed_and_resumed(tmp_path):
    results = tmp_path / "results"
    q = RunQueue.open(None, results, lease_timeout_s=1.0)
    cfgs = configs(seeds=(0,))
    q.enqueue(cfgs)
    target = cfgs[0].run_id
    attempts = tmp_path / "attempts.txt"
    train = functools.partial(stub_block_first, str(attempts), target)
    p = mp.get_context("spawn").Process(target=worker_process, args=(str(results), train, 1.0))
    p.start()
    deadline = time.time() + 60
    while not (attempts.exists() and target in attempts.read_text()):
        assert time.time() < deadline and p.is_alive(), "worker never started the run"
        time.sleep(0.05)
    assert q.runs()[target].state == "running"
    p.kill()  # SIGKILL mid-run
    p.join()
    lines = []
    out = work(q, train, results, beat_s=0.25, log=lines.append)
    assert lines[0] == f"reclaimed {target}: worker {q.host}:{p.pid} is no longer running; queued again"
    assert out == Counter(done=3)
    recs = [ln.split() for ln in attempts.read_text().splitlines()]
    assert [(r[0], r[1]) for r in recs] == [
        (target, "attempt=1"),
        (target, "attempt=2"),
        (cfgs[1].run_id, "attempt=1"),
        (cfgs[2].run_id, "attempt=1"),
    ]
    assert recs[0][2] == f"pid={p.pid}" and recs[1][2] == f"pid={os.getpid()}"
    state = q.runs()[target]
    assert (state.state, state.attempt) == ("done", 2)


def test_queueing_and_reading_one_grid_read_no_other_grids_history(tmp_path):
    """enqueue and runs(grid) read the grid's own study only (issue 32: the cost of `harness queue`
    does not grow with other grids' finished history); the queue's answers are unchanged."""
    queue = new_queue(tmp_path)
    queue.enqueue(configs("old", seeds=range(5)))
    old_study = queue.study_of("old")
    read = []
    real = queue.storage.get_all_trials

    def spy(study_id, *args, **kwargs):
        read.append(study_id)
        return real(study_id, *args, **kwargs)

    queue.storage.get_all_trials = spy
    result = queue.enqueue(configs("new", seeds=(0, 1)))
    assert len(result.added) == 6 and old_study not in read
    read.clear()
    assert len(queue.runs("new")) == 6 and len(queue.runs("old")) == 15 and len(queue.runs()) == 21
    assert queue.enqueue(configs("new", seeds=(0, 1))).present == result.added  # idempotent, as before
