"""Bad input and a bad environment (DESIGN 10 fault model): refused at queue time, one line and a
non-zero exit (never a traceback), no result lost or dropped without a word.

Real commands as subprocesses (``python -m harness``) or in process, real files, a real
read-only mount, a real process holding the database, real (tiny) training where a run is
needed. ``python -m pytest -q tests/e2e/test_faults.py``.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import warm

from harness.cli import main as cli
from harness.models.numerics import DEFAULT_ROUTING, numerics_id
from harness.scheduling.queue.run_queue import RunQueue
from harness.scheduling.workers.loop import work
from harness.store.store import Store

from queue_stubs import GRID_TOML, quiet

pytestmark = pytest.mark.own_cache  # its commands build their corpus in RESULTS/cache (conftest)

SAMPLE = Path(__file__).resolve().parents[3] / "shared/data/fineweb_edu_sample"
SPAWN = mp.get_context("spawn")


def harness(*args: str, env: dict | None = None, **kw) -> subprocess.CompletedProcess:
    return warm.run(
        [sys.executable, "-m", "harness", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
        **kw,
    )


def one_line_error(proc: subprocess.CompletedProcess, *needles: str) -> str:
    """The process failed with exactly one line on stderr that names every needle."""
    err = proc.stderr.strip()
    assert proc.returncode != 0, (proc.stdout, proc.stderr)
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    for needle in needles:
        assert needle in err, err
    return err


def grid_file(tmp_path: Path, corpus: Path | str, *, budget: int = 4096, train: str = "") -> Path:
    path = tmp_path / "g.toml"
    text = GRID_TOML.format(name="g", corpus=corpus, seeds="[0]", extra="").replace("[1024]", f"[{budget}]")
    path.write_text(text + train)
    return path


# ----------------------------------------------------------------------------- validation at queue time


def _corpus(tmp_path: Path, kind: str) -> Path:
    folder = tmp_path / kind
    folder.mkdir()
    if kind == "empty":
        (folder / "a.jsonl").write_text("")
        (folder / "b.txt").write_text("  \n")
    elif kind == "binary":
        (folder / "a.txt").write_bytes(bytes(range(256)) * 4)
    elif kind == "textless":
        (folder / "a.jsonl").write_text('{"id": 1, "body": "words"}\n{"id": 2, "text": ""}\n')
    return folder


@pytest.mark.parametrize(
    "kind, needles",
    [
        ("empty", ("holds no text: none of its 2 file(s) has a non-empty document",)),
        ("binary", ("looks binary (a NUL byte at offset 0)", "a.txt")),
        ("textless", ("holds no text", "'text' field")),
    ],
)
def test_a_corpus_without_text_is_refused_before_anything_is_queued(tmp_path, kind, needles):
    results = tmp_path / "results"
    proc = harness("queue", str(grid_file(tmp_path, _corpus(tmp_path, kind))), "--results", str(results))
    one_line_error(proc, *needles)
    assert not (results / "queue.journal").exists()


@pytest.mark.parametrize(
    "budget, train, needles",
    [
        (1000, "", ("budget_tokens=1000 is less than one batch (batch_tokens=2048)",)),
        (
            4096,
            "batch_tokens = 1000\n",
            ("batch_tokens=1000 must be a multiple of the tiny context (64 tokens)",),
        ),
        (4096, "vocab_size = 10\n", ("vocab_size=10 is not allowed for byte-level BPE", "257")),
        (4096, "vocab_size = 100_000_000\n", ("vocab_size=100000000 is not allowed", "1_048_576")),
        (
            10**20,
            "",
            ("budget_tokens=100_000_000_000_000_000_000 is more than 1_000_000_000_000_000 tokens",),
        ),
    ],
)
def test_a_run_that_would_fail_in_every_worker_is_refused_at_queue_time(tmp_path, budget, train, needles):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"text": "hello world"}\n')
    results = tmp_path / "results"
    grid = grid_file(tmp_path, corpus, budget=budget)
    grid.write_text(grid.read_text().replace("batch_tokens = 512", train.strip() or "batch_tokens = 2048"))
    err = one_line_error(harness("queue", str(grid), "--results", str(results)), *needles)
    assert err.startswith("harness queue: error: run g:tiny:block_attnres:s0:")
    assert not (results / "queue.journal").exists()


@pytest.mark.slow  # 11 s on 2 cores: out of the developer's loop (`pytest -m "not slow"`)
@pytest.mark.skipif(not SAMPLE.is_dir(), reason="sample corpus absent")
def test_a_worker_whose_every_run_failed_exits_non_zero(tmp_path):
    corpus = tmp_path / "one.jsonl"  # text, so it passes the queue-time scan, but too little to split
    corpus.write_text('{"text": "a single document cannot be split into training and validation"}\n')
    results = tmp_path / "results"
    assert harness("queue", str(grid_file(tmp_path, corpus)), "--results", str(results)).returncode == 0
    proc = harness("work", "--results", str(results), "--retries", "0", "--quiet", "--threads", "1")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "worker trained 3 runs: 0 done, 0 diverged, 3 failed" in proc.stdout
    assert "every run this worker took failed (3)" in proc.stderr
    # each failed attempt's file says where it ran, as a finished run's does (DESIGN 13)
    files = sorted((results / "runs").glob("*.json"))
    assert len(files) == 3
    for path in files:
        run = json.loads(path.read_text())["run"]
        assert run["status"] == "failed" and run["hardware"].startswith("cpu-"), run.get("hardware")
        assert (
            run["environment"]["hardware"] == run["hardware"]
            and run["environment"]["run"]["device_type"] == "cpu"
        )
        assert (
            run["numerics"] == run["environment"]["numerics"] == numerics_id(DEFAULT_ROUTING)
        )  # and which code


# ----------------------------------------------------------------------------- the environment


@pytest.mark.slow  # 17 s on 2 cores: out of the developer's loop (`pytest -m "not slow"`)
def test_environment_errors_are_one_line_and_a_closed_pipe_ends_quietly(tmp_path):
    a_file = tmp_path / "not-a-folder"
    a_file.write_text("x")
    one_line_error(harness("work", "--results", str(a_file)), f"--results '{a_file}' is a file, not a folder")
    one_line_error(harness("sql", "select 1", "--results", str(a_file)), "is a file, not a folder")
    one_line_error(harness("work", "--results", str(a_file / "sub")), f"Not a directory: {a_file / 'sub'}")
    for n in ("-1", "100000"):
        one_line_error(
            harness("work", "--threads", n, "--results", str(tmp_path)),
            f"--threads {n}: expected 0 (torch's default) to {os.cpu_count()}",
        )

    # `harness sql ... | head`: the reader goes away first; no message, SIGPIPE's status
    proc = warm.popen(
        [sys.executable, "-m", "harness", "sql", "select * from range(100000)", "--results", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(120) == 141 and err == "", err


@pytest.fixture
def read_only(tmp_path):
    """``read_only(folder)`` -> a read-only bind mount of ``folder`` (unmounted after the test)."""
    mounts = []

    def make(folder: Path) -> Path:
        target = tmp_path / f"ro-{len(mounts)}"
        target.mkdir()
        for cmd in (
            ["mount", "--bind", str(folder), str(target)],
            ["mount", "-o", "remount,bind,ro", str(target)],
        ):
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode:
                pytest.fail(f"cannot make a read-only mount ({' '.join(cmd)}): {proc.stderr}", pytrace=False)
            if cmd[1] == "--bind":
                mounts.append(target)
        return target

    yield make
    for target in reversed(mounts):
        subprocess.run(["umount", str(target)], check=False)


def _stub_result(config, results_dir: Path) -> tuple[str, float]:
    """A run's result file written by the real store instead of training (parent 3.5, others 3.49)."""
    c = config.to_dict()
    nll = 3.5 if c["variant"] == "block_attnres" else 3.49
    run = {k: c[k] for k in ("run_id", "grid", "variant", "role", "seed", "size", "budget_tokens")}
    Store(results_dir).write_result(
        {
            "run": {**run, "status": "done", "protocol_hash": "p", "config": c},
            "metrics": [{"step": 1, "tokens": 4096, "split": "val", "name": "nll", "value": nll}],
        }
    )
    return "done", nll


def _drained(tmp_path: Path) -> Path:
    """The 3-variant grid at 3 seeds queued and drained by the stub: its results folder."""
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"text": "hello world"}\n')
    grid = grid_file(tmp_path, corpus)
    grid.write_text(grid.read_text().replace("seeds = [0]", "seeds = [0, 1, 2]"))
    results = tmp_path / "results"
    assert cli(["queue", str(grid), "--results", str(results)]) == 0
    work(RunQueue.open(None, results), _stub_result, results, log=quiet)
    return results


@pytest.mark.slow  # 12 s on 2 cores: out of the developer's loop (`pytest -m "not slow"`)
def test_a_read_only_results_folder_still_answers_sql_and_report(tmp_path, read_only):
    results = _drained(tmp_path)
    assert (
        cli(["sql", "select count(*) from final", "--results", str(results)]) == 0
    )  # database made, ingested
    Store(results).write_result(
        {  # one more result file, never ingested
            "run": {
                "run_id": "g:tiny:rd_attnres:s9:4096",
                "grid": "g",
                "variant": "rd_attnres",
                "role": "treatment",
                "seed": 9,
                "size": "tiny",
                "budget_tokens": 4096,
                "status": "done",
            }
        }
    )
    ro = read_only(results)

    proc = harness("sql", "select count(*) as n from runs", "--format", "csv", "--results", str(ro))
    assert proc.returncode == 0 and proc.stdout == "n\n9\n", proc.stderr
    assert (
        f"the results folder {ro} is read-only for this process: 1 new result file(s) were not ingested"
        in proc.stderr
    )

    one_line_error(
        harness("report", "--grid", "g", "--results", str(ro), "--no-figures"),
        f"cannot write the report to {ro / 'reports' / 'g'}",
        "pass --out DIR",
    )
    proc = harness(
        "report", "--grid", "g", "--results", str(ro), "--no-figures", "--out", str(tmp_path / "rep")
    )
    assert proc.returncode == 0, proc.stderr
    assert "is read-only for this process" in proc.stdout and (tmp_path / "rep" / "report.md").exists()
    err = one_line_error(harness("work", "--results", str(ro)), "Read-only file system")
    assert "unreachable" not in err  # a permanent error is said at once, not retried as an outage

    # result files copied from elsewhere, no database, no queue, read-only: still a report, and it says so
    bare = tmp_path / "bare"
    (bare / "runs").mkdir(parents=True)
    for f in (results / "runs").glob("*.json"):
        (bare / "runs" / f.name).write_bytes(f.read_bytes())
    ro_bare = read_only(bare)
    proc = harness(
        "report", "--grid", "g", "--results", str(ro_bare), "--no-figures", "--out", str(tmp_path / "rb")
    )
    assert proc.returncode == 0, proc.stderr
    assert "has no database: the query ran on an in-memory copy of its 10 result file(s)" in proc.stdout
    assert "Queue not found (no queue at queue.journal in the results folder)" in proc.stdout  # relative
    assert sorted(p.name for p in bare.iterdir()) == ["runs"]  # nothing was written there


def _hold(db_path: str, ready, release) -> None:
    import duckdb

    con = duckdb.connect(db_path)
    ready.set()
    release.wait(120)
    con.close()


@pytest.mark.slow  # 17 s on 2 cores: out of the developer's loop (`pytest -m "not slow"`)
def test_a_report_on_a_locked_database_is_one_line_naming_the_holder(tmp_path):
    results = _drained(tmp_path)
    assert cli(["sql", "select 1", "--results", str(results)]) == 0
    ready, release = SPAWN.Event(), SPAWN.Event()
    holder = SPAWN.Process(target=_hold, args=(str(results / "harness.duckdb"), ready, release))
    holder.start()
    try:
        assert ready.wait(60)
        proc = harness("report", "--grid", "g", "--results", str(results), "--no-figures")
        one_line_error(proc, f"is locked by another process (PID {holder.pid})")
        assert proc.returncode == 1
    finally:
        release.set()
        holder.join(30)


@pytest.mark.slow  # 3 s on 2 cores: out of the developer's loop (`pytest -m "not slow"`)
def test_unreadable_result_files_are_named_by_status_sql_and_report(tmp_path):
    results = _drained(tmp_path)
    truncated = next(p for p in (results / "runs").glob("*.json") if "fixed_v%3As1" in p.name)
    truncated.write_bytes(truncated.read_bytes()[:100])  # a disk error after the worker wrote it
    drifted = next(p for p in (results / "runs").glob("*.json") if "rd_attnres%3As2" in p.name)
    data = json.loads(drifted.read_text())
    data["run"]["val_loss"] = 1.0  # a column this schema does not have
    drifted.write_text(json.dumps(data))
    (results / "harness.duckdb").unlink(missing_ok=True)  # the store rebuilt from the files

    proc = harness("status", "--results", str(results))
    assert proc.returncode == 0, proc.stderr
    assert re.search(
        r"^g\s+0\s+0\s+9\s+0\s+0\s+9\s.*trained; 2 result\(s\) unreadable$", proc.stdout, re.M
    ), proc.stdout
    assert f"warning: 2 result file(s) in {results / 'runs'} are not in the tables" in proc.stdout
    assert f"  {truncated.name}: not valid JSON" in proc.stdout and "truncated or damaged" in proc.stdout
    assert f"  {drifted.name}: result['run']: unknown key 'val_loss'" in proc.stdout

    proc = harness("sql", "select count(*) as n from final", "--format", "csv", "--results", str(results))
    assert proc.returncode == 0 and proc.stdout == "n\n7\n"
    assert "harness sql: warning: 2 result file(s)" in proc.stderr and truncated.name in proc.stderr
    assert "UserWarning" not in proc.stderr

    proc = harness(
        "report", "--grid", "g", "--results", str(results), "--no-figures", "--out", str(tmp_path / "r")
    )
    assert proc.returncode == 0, proc.stderr
    assert "runs of the grid finished" not in proc.stdout and "2 result file unreadable" in proc.stdout, (
        proc.stdout
    )
    md = (tmp_path / "r" / "report.md").read_text()
    assert "g:tiny:fixed_v:s1:4096" in md and "g:tiny:rd_attnres:s2:4096" in md


# ----------------------------------------------------------------------------- harness run --grid


@pytest.mark.slow  # trains a run on real text, then a second one
@pytest.mark.skipif(not SAMPLE.is_dir(), reason="sample corpus absent")
def test_harness_run_refuses_a_finished_cell_with_other_settings(tmp_path):
    args = [
        "run",
        "--variant",
        "fixed_v",
        "--size",
        "tiny",
        "--seed",
        "0",
        "--budget-tokens",
        "2048",
        "--corpus",
        str(SAMPLE),
        "--results",
        str(tmp_path),
        "--grid",
        "G",
        "--quiet",
        "--threads",
        "1",
        "--set",
        "vocab_size=512",
        "--set",
        "eval_tokens=2048",
    ]
    env = {"HARNESS_CACHE": str(tmp_path / "cache")}
    assert harness(*args, env=env).returncode == 0
    proc = harness(*args, env=env)
    assert proc.returncode == 0 and "G:tiny:fixed_v:s0:2048: already done" in proc.stdout
    one_line_error(
        harness(*args, "--set", "lr=0.001", "--set", "eval_tokens=4096", env=env),
        "G:tiny:fixed_v:s0:2048 is already done",
        "with another config",
        "train.eval_tokens: 2048 != 4096",
        "train.lr: '<absent>' != 0.001",
        "--force",
    )
