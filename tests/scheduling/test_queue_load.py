"""The queue at scale (issue 32): the load test's small version on a real PostgreSQL server, and the
reads a claim makes counted, not timed.

``scripts/queue_load.py`` drives N worker processes through the real worker loop with a stand-in
train function; here N = 8 drain 100 runs while 2 are SIGKILLed holding a run: every run is done
exactly once, at most one new attempt per lost run, and a bounded number of reads per claim.
The reads of one claim are also counted in-process on the journal and on PostgreSQL with a long
finished history: the same count at 20 and at 2,000 stored trials.

Run: python -m pytest -q tests/scheduling/test_queue_load.py (about a minute on 2 CPU cores)
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest
from optuna.trial import TrialState

from harness.scheduling.queue.run_queue import RunQueue
from harness.scheduling.workers.loop import work
from harness.scheduling.workers.retry import MAX_RECLAIMS

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import queue_load  # noqa: E402  (scripts/ is not a package)


def test_eight_workers_two_killed_every_run_once_at_most_one_retry_per_lost_run(pg_url, tmp_path):
    res = queue_load.load(pg_url, tmp_path, workers=8, runs=100, kills=2, seed=1, log=print)
    print(queue_load.Result.HEADER)
    print(res.row())
    assert res.kills == 2 and res.finished == 100 and res.exactly_once, res.row()
    assert res.lost >= 2  # the killed workers' runs were reclaimed (a stalled live worker's may be too)
    assert res.duplicates <= res.lost, res.row()
    # per claim: one read of the live trials (left by the previous run's last line) and one of its
    # run's trials; a worker reads every trial only twice in its life (its grid's run ids once,
    # the orphan check before it stops), whatever the number of runs; plus the polls (every LEASE_S / 2)
    # of the workers that wait, with nothing queued, for the killed workers' leases to go stale
    assert res.reads["full"] <= 2 * (8 + 2), res.reads
    assert (res.reads["live"] + res.reads["run"]) / res.finished <= 3.0, res.reads


def _reads_per_claim(url, results, history: int) -> Counter:
    q = RunQueue.open(url, results)
    queue_load.store_history(q, history)
    q.enqueue(queue_load.configs(10))
    w = RunQueue.open(url, results)
    work(w, lambda c, r: "done", results, max_runs=1, log=lambda m: None)  # the grid's run ids: read once
    before = Counter(w.reads)
    assert work(w, lambda c, r: "done", results, max_runs=5, log=lambda m: None) == Counter(done=5)
    return Counter({k: v - before[k] for k, v in w.reads.items()})


@pytest.mark.slow  # 6 s on 2 cores: out of the developer's loop (`pytest -m "not slow"`)
@pytest.mark.parametrize("backend", ["journal", "postgres"])
def test_reads_per_claim_do_not_grow_with_the_history(backend, request, tmp_path):
    server = request.getfixturevalue("postgres") if backend == "postgres" else None
    urls = [server.create_database(f"reads_{backend}_{i}") if server else None for i in range(2)]
    small = _reads_per_claim(urls[0], tmp_path / "a", 20)
    large = _reads_per_claim(urls[1], tmp_path / "b", 2000)
    assert small == large == Counter(live=5, run=5, full=0), (small, large)


def test_batched_enqueue_numbers_trials_as_optuna_does(pg_url, tmp_path):
    q = RunQueue.open(pg_url, tmp_path)
    q.enqueue(queue_load.configs(30))
    q._new_trial(queue_load.configs(1, offset=99)[0], attempt=1, failures=0, reclaims=0, order=[0.0, 0])
    q.enqueue(queue_load.configs(40))  # 10 more after Optuna's own create_new_trial
    trials = q.storage.get_all_trials(q.study_of(queue_load.GRID))
    assert [t.number for t in sorted(trials, key=lambda t: t._trial_id)] == list(range(41))
    assert all(t.state == TrialState.WAITING for t in trials)
    assert {t.user_attrs["run_id"] for t in trials} == {c.run_id for c in queue_load.configs(40)} | {
        queue_load.configs(1, offset=99)[0].run_id
    }
    # the runs read back as queued, in enqueue order
    runs = list(RunQueue.open(pg_url, tmp_path).runs().values())
    assert [r.state for r in runs] == ["queued"] * 41


def test_a_run_reclaimed_while_its_worker_reported_it_is_trained_by_its_retry(tmp_path):
    """Worker A wrote its run's outcome attributes, but reclaimer B's FAIL went through first: the run
    is queued again (not read as done from A's attributes, with no COMPLETE trial and its retry
    discarded as a duplicate), and its retry completes it (found by the 64-worker load test)."""
    q = RunQueue.open(None, tmp_path)
    (config,) = queue_load.configs(1)
    q.enqueue([config])
    a = q.claim()
    assert q._set_attrs(a.trial_id, {"status": "done", "wall_s": 1.0, "val_nll": 3.0})  # A reports ...
    assert [rid for rid, _ in q.reclaim_stale(now=a.lease.beat + 10_000, max_reclaims=MAX_RECLAIMS)] == [
        config.run_id
    ]  # ... B wins
    assert q.complete(a, "done", value=3.0, wall_s=1.0) is False
    assert q.runs()[config.run_id].state == "queued"
    assert work(q, lambda c, r: "done", tmp_path, log=lambda m: None) == Counter(done=1)
    trials = q.all_trials()
    assert sorted(t.state.name for t in trials) == ["COMPLETE", "FAIL"]
    assert not any(t.user_attrs.get("ending") == "duplicate" for t in trials)


def test_live_reads_equal_optunas_own_and_read_a_waiting_trial_whole_once(pg_url, tmp_path):
    """On PostgreSQL a worker reads every RUNNING trial whole and every WAITING one by id, its
    run, grid and order once (they never change): what it sees equals Optuna's full read after
    each change another worker makes, and no waiting trial of a run is read whole twice."""
    import sqlalchemy
    from optuna.trial import create_trial

    from harness.scheduling.queue.live_trials import LIVE_STATES, _light

    q, other = RunQueue.open(pg_url, tmp_path), RunQueue.open(pg_url, tmp_path)
    asked: list[int] = []  # trial ids read whole, as waiting trials
    sqlalchemy.event.listen(
        q.storage.engine,
        "before_cursor_execute",
        lambda conn, cur, stmt, params, ctx, many: asked.extend(
            (params or {}).get("ids", []) if isinstance(params, dict) else []
        ),
    )

    def seen():
        return sorted((t.trial_id, t.state, t.run_id, t.grid, t.order, t.ending) for t in q.live())

    def reference():  # Optuna's own read of every trial of every study, made light
        return sorted(
            (t.trial_id, t.state, t.run_id, t.grid, t.order, t.ending)
            for t in (
                _light(q.storage, t, sid)
                for sid in q.studies().values()
                for t in q.storage.get_all_trials(sid, states=LIVE_STATES)
                if "run_id" in t.user_attrs
            )
        )

    other.enqueue(queue_load.configs(6))
    sid = q.study_of(queue_load.GRID)
    q.storage.create_new_trial(sid, template_trial=create_trial(state=TrialState.WAITING))  # not a run's
    assert len(seen()) == 6 and seen() == reference()
    c = other.claim()
    assert seen() == reference() and sum(s == TrialState.RUNNING for _, s, *_ in seen()) == 1
    other.enqueue(queue_load.configs(4, offset=6))
    assert len(seen()) == 10 and seen() == reference()
    other.complete(c, "done", value=3.0, wall_s=1.0)
    assert len(seen()) == 9 and seen() == reference()
    runs_trials = [t for t, s, *_ in reference()]
    assert sorted(t for t in asked if t in runs_trials) == sorted(set(runs_trials))  # each once
    assert set(q._waiting) == {t for t, s, *_ in reference() if s == TrialState.WAITING}


@pytest.mark.parametrize("backend", ["journal", "postgres"])
def test_tally_counts_a_grids_runs_without_reading_its_history(backend, request, tmp_path):
    """``[done/total]``: the total is what ``harness queue`` counted (a study attribute, one small
    read); only a grid queued before that count was kept has its history read, once."""
    url = request.getfixturevalue("pg_url") if backend == "postgres" else None
    q = RunQueue.open(url, tmp_path)
    q.enqueue(queue_load.configs(5))
    w = RunQueue.open(url, tmp_path)
    assert w.tally(queue_load.GRID) == (0, 5)
    for done in range(2):
        c = w.claim()
        assert w.tally(queue_load.GRID) == (done, 5)  # running is not finished
        w.complete(c, "done", value=3.0, wall_s=1.0)
    assert w.tally(queue_load.GRID) == (2, 5)
    q.enqueue(queue_load.configs(8))  # 3 more seeds, as `harness topup` adds them
    assert w.tally(queue_load.GRID) == (2, 8)
    assert w.reads["full"] == 0
    # a grid whose trials were written without the count (queued by an earlier version)
    for c in queue_load.configs(3, name="old"):
        q._new_trial(c, attempt=1, failures=0, reclaims=0, order=[0.0, 0])
    assert w.tally("old") == (0, 3) and w.tally("old") == (0, 3)
    assert w.reads["full"] == 1


def test_an_idle_poll_is_one_read_of_the_live_trials(tmp_path):
    """A worker with nothing to claim: reclaim_stale reads the live trials and the claim answers
    "nothing queued" from that read; a read older than FRESH_S is read again first."""
    from harness.scheduling.queue.run_queue import FRESH_S

    q = RunQueue.open(None, tmp_path)
    q.enqueue(queue_load.configs(1))
    w = RunQueue.open(None, tmp_path)
    w.complete(w.claim(), "done", value=3.0, wall_s=1.0)
    before = w.reads["live"]
    assert w.reclaim_stale(max_reclaims=MAX_RECLAIMS) == [] and w.claim() is None
    assert w.reads["live"] - before == 1
    w.reclaim_stale(max_reclaims=MAX_RECLAIMS)
    w._snapshot_at -= FRESH_S + 1  # as if the reclaim had read it long ago
    assert w.claim() is None and w.reads["live"] - before == 3


def _open_when_told(url: str, go, out) -> None:
    from harness.scheduling.queue.storage import open_storage

    go.wait()
    try:
        open_storage(url, "unused")
        out.put("ok")
    except Exception as exc:  # the test shows what failed
        out.put(f"{type(exc).__name__}: {exc}"[:300])


def test_workers_opening_a_new_database_at_once_all_open_it(postgres):
    """Four processes open an empty PostgreSQL database at the same instant (as `harness launch`
    of several workers on a new database does): Optuna's schema creation collides (a duplicate
    type, a second version row); each loser opens it again. Before, one of them died with a
    traceback on every such database."""
    import multiprocessing as mp
    import time

    ctx = mp.get_context("spawn")
    for d in range(2):
        url = postgres.create_database(f"at_once_{d}")
        go, out = ctx.Event(), ctx.Queue()
        procs = [ctx.Process(target=_open_when_told, args=(url, go, out)) for _ in range(4)]
        for p in procs:
            p.start()
        time.sleep(4)  # every process has imported Optuna and waits
        go.set()
        outcomes = [out.get(timeout=120) for _ in procs]
        for p in procs:
            p.join(timeout=60)
        assert outcomes == ["ok"] * 4, outcomes


def test_a_grids_new_trials_and_its_new_count_are_seen_together(pg_url, tmp_path, monkeypatch):
    """PostgreSQL: `harness queue` of more seeds writes the new trials and the grid's new run
    count in one transaction: a worker that can claim a new run already reads the new total."""
    from harness.scheduling.queue import run_queue

    q, w = RunQueue.open(pg_url, tmp_path), RunQueue.open(pg_url, tmp_path)
    q.enqueue(queue_load.configs(4))
    while (c := w.claim()) is not None:
        w.complete(c, "done", value=3.0, wall_s=1.0)
    seen = []
    real = run_queue.create_waiting

    def then_a_worker_claims(*args):
        ids = real(*args)
        seen.append((w.claim().run_id, w.tally(queue_load.GRID)))
        return ids

    monkeypatch.setattr(run_queue, "create_waiting", then_a_worker_claims)
    q.enqueue(queue_load.configs(8))
    assert len(seen) == 1 and seen[0][1] == (4, 8), seen
