"""Scale-out on real engines (DESIGN section 10): the queue on a real PostgreSQL server,
workers SIGKILLed at random (the chaos script), the storage going away, a real SLURM cluster.

Real training on the FineWeb-Edu sample (tiny cells of about a second each), real
``harness`` subprocesses, real daemons from Debian's packages (tests/services.py). The
whole file takes about 2-3 minutes on 2 CPU cores.

Run: python -m pytest -q tests/scheduling/test_scaleout.py
"""

from __future__ import annotations

import multiprocessing as mp
import re
import subprocess
import sys
import time

import pytest
import warm
from conftest import CHAOS_CELLS
from optuna.trial import TrialState

from harness.scheduling.queue.lease import Lease
from harness.scheduling.queue.run_queue import RunQueue
from harness.scheduling.queue.storage import postgres_driver
from harness.store.store import Store
from harness.train.execution import ExecutionSettings

import chaos
import services


def harness_run(*args, timeout=600):
    return warm.run(chaos.harness(*args), capture_output=True, text=True, timeout=timeout)


def trials_per_run(queue: RunQueue) -> dict[str, int]:
    """run_id -> number of COMPLETE trials."""
    return {rid: sum(t.state == TrialState.COMPLETE for t in r.trials) for rid, r in queue.runs().items()}


def dead_pid() -> int:
    p = mp.get_context("spawn").Process(target=time.sleep, args=(0,))
    p.start()
    p.join()
    return p.pid


# ----------------------------------------------------------------------------- drivers


def test_postgres_url_forms_pick_the_installed_driver():
    # with the pinned SQLAlchemy 2.1 a plain postgresql:// is psycopg 3: the `postgres` extra
    assert postgres_driver("postgresql://u:pw@db/h")[0] == "psycopg"
    assert postgres_driver("postgresql+psycopg://u@db/h")[0] == "psycopg"
    assert postgres_driver("postgresql+psycopg2://u@db/h") == ("psycopg2", "psycopg2-binary")
    with pytest.raises(ValueError, match=r"driver 'asyncpg' not supported; use postgresql://"):
        postgres_driver("postgresql+asyncpg://u@db/h")
    import importlib.util

    assert importlib.util.find_spec("psycopg") is not None  # the test extra installs it


# ----------------------------------------------------------------------------- PostgreSQL


def test_postgres_queue_three_workers_one_killed_exactly_once(pg_url, postgres, chaos_reference, tmp_path):
    """`harness queue --storage postgresql://` then three `harness work` on it, one SIGKILLed
    while it trains: every cell done once, NLLs equal to the journal-queue reference."""
    summary = chaos.chaos(
        tmp_path, cells=6, workers=3, kills=1, mid_run_only=True, storage=pg_url, ref=chaos_reference
    )
    assert summary.ok, summary.line()
    assert (summary.kills, summary.kills_mid_run, summary.done) == (1, 1, 6)
    assert summary.reclaimed >= 1  # the killed worker's run came back
    assert not (tmp_path / "results" / "queue.journal").exists()  # the queue really is the server
    import psycopg

    with psycopg.connect(pg_url) as con:
        (n_complete,) = con.execute("select count(*) from trials where state = 'COMPLETE'").fetchone()
    assert n_complete == 6


def test_postgres_stopped_while_a_worker_polls(tmp_path, chaos_reference):
    """The server goes away under a worker: retries with backoff, then one line and exit 1;
    once it is back a new worker finishes the grid, nothing lost or trained twice."""
    with services.PostgresServer() as pg:  # its own server: this test stops it
        url = pg.create_database("harness")
        grid = chaos.write_grid(tmp_path / "chaos.toml", 4)
        results = tmp_path / "results"
        chaos.queue_grid(grid, results, url)
        a = warm.popen(
            chaos.harness(
                "work",
                "--results",
                str(results),
                "--storage",
                url,
                "--wait",
                "--poll-s",
                "0.2",
                "--lease-s",
                "3",
                "--storage-retry-s",
                "3",
                "--threads",
                "1",
                "--verbose",
            ),  # --verbose: every retry
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            queue = RunQueue.open(url, results)
            deadline = time.monotonic() + 120
            while not any(r.state == "running" for r in queue.runs().values()):
                assert time.monotonic() < deadline and a.poll() is None, "worker never took a run"
                time.sleep(0.05)
            queue.storage.engine.dispose()
            pg.stop()  # while worker A trains or polls
            out, _ = a.communicate(timeout=120)
        finally:
            if a.poll() is None:
                a.kill()
                a.wait()
        lines = out.strip().splitlines()
        assert a.returncode == 1, out[-3000:]
        assert "Traceback" not in out
        where = f"postgresql://127.0.0.1:{pg.port}/harness"
        assert re.fullmatch(
            rf"harness work: error: queue storage {re.escape(where)} unreachable: gave up after "
            r"\d+ tries in \d+ s \(last error: OperationalError: .*Connection refused.*\)",
            lines[-1],
        )
        waits = [
            float(m.group(1))
            for ln in lines
            if (m := re.search(r"unreachable \(.*\); retry \d+ in (\S+) s", ln))
        ]
        assert waits[:2] == [0.5, 1.0]  # backoff: doubling from 0.5 s, within --storage-retry-s 3

        pg.start()
        b = harness_run(
            "work", "--results", str(results), "--storage", url, "--lease-s", "3", "--threads", "1"
        )
        assert b.returncode == 0, b.stdout[-3000:] + b.stderr[-3000:]
        queue = RunQueue.open(url, results)
        assert {r.state for r in queue.runs().values()} == {"done"} and len(queue.runs()) == 4
        assert set(trials_per_run(queue).values()) == {1}
        values = chaos.final_values(results)
        assert values == {rid: chaos_reference[rid] for rid in values} and len(values) == 4
        # a run A finished but could not report is reported by B, not trained again
        trained = b.stderr.count("done: val_nll") + out.count("done: val_nll")
        assert trained == 4, (out[-2000:], b.stderr[-2000:])
        queue.storage.engine.dispose()


# ----------------------------------------------------------------------------- finished, not reported


def test_run_finished_but_not_reported_is_not_trained_again(tmp_path, chaos_reference):
    """A worker wrote a run's result file and died before the queue learned: the next worker
    reports the result and does not train the run a second time (found by the chaos run)."""
    import torch

    from harness.train import train_run

    grid = chaos.write_grid(tmp_path / "chaos.toml", 2)
    results = tmp_path / "results"
    chaos.queue_grid(grid, results)
    queue = RunQueue.open(None, results)
    claim = queue.claim()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert train_run(claim.config, results, ExecutionSettings(progress=False)) == "done"
    finally:
        torch.set_num_threads(threads)
    t = time.time()  # ... and the worker died here: its lease names a process that is gone
    queue.storage.set_trial_user_attr(claim.trial_id, "lease", Lease(queue.host, dead_pid(), t, t).to_dict())
    path = Store(results).result_path(claim.run_id)
    inode = path.stat().st_ino
    b = harness_run("work", "--results", str(results), "--threads", "1")
    assert b.returncode == 0, b.stderr[-3000:]
    assert f"reclaimed {claim.run_id}: worker" in b.stdout
    assert f"{claim.run_id}: already done" in b.stderr and "not trained again" in b.stderr
    assert b.stderr.count("done: val_nll") == 1  # only the other cell was trained
    assert path.stat().st_ino == inode  # the result file was not written again
    assert trials_per_run(queue) == {claim.run_id: 1, next(r for r in queue.runs() if r != claim.run_id): 1}
    values = chaos.final_values(results)
    assert values == {rid: chaos_reference[rid] for rid in values} and len(values) == 2


# ----------------------------------------------------------------------------- chaos


def test_chaos_random_kills_every_cell_done_once_same_nll(tmp_path, chaos_reference):
    summary = chaos.chaos(tmp_path, cells=CHAOS_CELLS, workers=3, kills=4, seed=0, ref=chaos_reference)
    print(summary.line())
    assert summary.ok, summary.line()
    assert summary.kills == 4 and summary.kills_mid_run >= 1 and summary.done == CHAOS_CELLS


def test_chaos_script_rejects_a_bad_cell_count(capsys):
    assert chaos.main(["--cells", "7"]) == 2
    assert "--cells 7: must be an even number >= 2" in capsys.readouterr().err


# ----------------------------------------------------------------------------- SLURM


def test_slurm_cluster_is_this_machine_and_runs_a_job(slurm, tmp_path):
    assert slurm.node_state() == "idle"
    proc = subprocess.run(["slurmd", "-C"], capture_output=True, text=True)
    assert f"CPUs={slurm.cpus} " in proc.stdout  # the cluster's CPUs are this machine's
    assert f"CPUTot={slurm.cpus} " in slurm.run("scontrol", "show", "node", slurm.node_name).stdout
    out = tmp_path / "job.out"
    job = slurm.submit(
        "--output", str(out), "--chdir", str(tmp_path), "--wrap", f"{sys.executable} -m harness --help"
    )
    (record,) = slurm.wait_job(job)
    assert (record["JobState"], record["ExitCode"]) == ("COMPLETED", "0:0"), record
    assert out.read_text().startswith("usage: harness ")


def test_slurm_job_array_of_workers_drains_a_grid(slurm, chaos_reference, tmp_path):
    """docs/scaling-out.md's line: `sbatch --array` tasks that each run `harness work` on the shared queue."""
    grid = chaos.write_grid(tmp_path / "chaos.toml", 4)
    results = tmp_path / "results"
    chaos.queue_grid(grid, results)
    job = slurm.submit(
        "--array",
        "1-2",
        "--cpus-per-task",
        "1",
        "--output",
        str(tmp_path / "work-%a.out"),
        "--wrap",
        f"{sys.executable} -m harness work --results {results} --threads 1",
    )
    records = slurm.wait_job(job, timeout_s=300)
    assert [(r["JobState"], r["ExitCode"]) for r in records] == [("COMPLETED", "0:0")] * 2, records
    logs = [(tmp_path / f"work-{i}.out").read_text() for i in (1, 2)]
    assert all("nothing queued; worker stops" in log for log in logs)
    queue = RunQueue.open(None, results)
    assert set(trials_per_run(queue).values()) == {1} and len(queue.runs()) == 4
    values = chaos.final_values(results)
    assert values == {rid: chaos_reference[rid] for rid in values} and len(values) == 4


def test_slurm_fixture_clears_a_previous_runs_leftover_daemons(tmp_path):
    """A cluster whose starter died without stopping it is stopped by the next start."""
    script = tmp_path / "orphan.py"
    script.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(chaos.REPO / 'tests')!r})\n"
        "import services\n"
        "c = services.SlurmCluster().start()\n"
        "print(c.root, *[p.pid for p in c._procs.values()], flush=True)\n"
        "import os; os._exit(0)  # no teardown: the daemons live on\n"
    )
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    root, *pids = proc.stdout.split()
    pids = [int(p) for p in pids]
    assert len(pids) == 3 and all(services._alive(p) for p in pids)
    cleared = services.clear_leftovers()
    assert root in cleared
    assert not any(services._alive(p) for p in pids)
    from pathlib import Path

    assert not Path(root).exists()
