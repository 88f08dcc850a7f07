"""The environment's faults (issue 29): a full disk, a damaged database, a lost or mistyped
results folder, NaN options, a huge query, two `harness queue` at once, workers on different
results folders. Real commands as subprocesses, real tmpfs mounts, a real PostgreSQL server.

``python -m pytest -q tests/e2e/test_env_faults.py``.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import subprocess
import sys
from pathlib import Path

import pytest
import warm
from test_faults import _drained, grid_file, harness, one_line_error

from harness.cli import main as cli
from harness.scheduling.queue.run_queue import RunQueue

pytestmark = pytest.mark.own_cache  # its commands build their corpus in RESULTS/cache (conftest)

SPAWN = mp.get_context("spawn")


@pytest.mark.parametrize("option", ["--lease-s", "--poll-s", "--storage-retry-s"])
@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_float_options_refuse_nan_and_infinities(tmp_path, option, value):
    one_line_error(
        harness("work", "--results", str(tmp_path), f"{option}={value}"),
        f"{option} {value}: must be a finite number",
    )


def test_sql_lock_timeout_refuses_nan(tmp_path):
    one_line_error(
        harness("sql", "select 1", "--results", str(tmp_path), "--lock-timeout", "nan"),
        "--lock-timeout nan: must be a finite number",
    )


@pytest.mark.slow  # 17 s on 2 cores: out of the developer's loop (`pytest -m "not slow"`)
def test_work_refuses_a_results_folder_that_does_not_exist_unless_create(tmp_path):
    missing = tmp_path / "no" / "such" / "path"
    one_line_error(
        harness("work", "--results", str(missing)), f"results folder '{missing}' does not exist", "--create"
    )
    one_line_error(harness("work", env={"HARNESS_RESULTS": str(missing)}), "does not exist")
    assert not (tmp_path / "no").exists()
    proc = harness("work", "--results", str(missing), "--create")
    assert proc.returncode == 0 and "nothing queued" in proc.stdout, proc.stderr
    assert missing.is_dir()


# ----------------------------------------------------------------------------- a damaged database


def _damage(db: Path, how: str) -> None:
    data = db.read_bytes()
    if how == "truncated":
        db.write_bytes(data[: len(data) // 3])
    elif how == "random":
        db.write_bytes(os.urandom(len(data)))
    else:
        db.write_bytes(b"")


@pytest.mark.slow  # 16 s on 2 cores: out of the developer's loop (`pytest -m "not slow"`)
@pytest.mark.parametrize("how", ["truncated", "random", "empty"])
def test_a_damaged_database_is_set_aside_and_rebuilt_from_the_result_files(tmp_path, how):
    results = _drained(tmp_path)
    want = harness(
        "sql", "select run_id, val_nll from final order by 1", "--format", "csv", "--results", str(results)
    )
    assert want.returncode == 0 and want.stdout.count("\n") == 10, want.stderr
    db = results / "harness.duckdb"
    assert db.stat().st_size > 0
    for command in (
        ["sql", "select run_id, val_nll from final order by 1", "--format", "csv"],
        ["export", "--grid", "g", "--format", "csv", "--out", str(tmp_path / "x.csv")],
        ["report", "--grid", "g", "--no-figures", "--out", str(tmp_path / "rep")],
    ):
        _damage(db, how)
        before = {p.name for p in results.iterdir()}
        proc = harness(*command, "--results", str(results))
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
        aside = sorted({p.name for p in results.iterdir()} - before)
        assert len(aside) == 1 and aside[0].startswith("harness.duckdb.damaged-"), aside
        said = [line for line in proc.stderr.splitlines() if "cannot be opened as a database" in line]
        assert len(said) == 1 and aside[0] in said[0] and "runs" in said[0], proc.stderr
        if command[0] == "sql":
            assert proc.stdout == want.stdout
    assert (
        harness(
            "sql",
            "select run_id, val_nll from final order by 1",
            "--format",
            "csv",
            "--results",
            str(results),
        ).stdout
        == want.stdout
    )
    assert len(list(results.glob("harness.duckdb.damaged-*"))) == 3  # every damaged file kept
    assert (tmp_path / "rep" / "report.md").exists() and len(
        (tmp_path / "x.csv").read_text().splitlines()
    ) == 10


# ----------------------------------------------------------------------------- harness sql at scale

PEAK_RSS = """import resource, subprocess, sys
proc = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
sys.stderr.write(proc.stderr.decode())
print(proc.returncode, len(proc.stdout), resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)
"""


def _sql_peak(tmp_path: Path, *args: str) -> tuple[int, int, int, str]:
    """``harness sql ARGS`` in a fresh process: (exit status, stdout bytes, peak RSS in MiB, stderr)."""
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            PEAK_RSS,
            sys.executable,
            "-m",
            "harness",
            "sql",
            *args,
            "--results",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    rc, size, mib = map(int, proc.stdout.split())
    return rc, size, mib, proc.stderr


@pytest.mark.slow  # 4 s on 2 cores: out of the developer's loop (`pytest -m "not slow"`)
def test_sql_streams_millions_of_rows_in_bounded_memory(tmp_path):
    """5 M rows (the table format held 2.0 GB before): every format stays under 400 MiB peak RSS;
    the table shows --limit rows and says how many more there are; csv has every row."""
    query = "select * from range(5000000)"
    for fmt in ("table", "csv", "json"):
        rc, size, mib, err = _sql_peak(tmp_path, query, "--format", fmt)
        assert rc == 0 and mib < 400, (fmt, mib, err)
        if fmt == "table":
            assert (
                "harness sql: note: 4,990,000 more rows not shown (--limit 10,000); use --format csv" in err
            )
        if fmt == "csv":
            assert size == len("range\n") + sum(len(str(i)) + 1 for i in range(5_000_000))
    proc = harness(
        "sql", "select range as r from range(70000)", "--format", "json", "--results", str(tmp_path)
    )
    assert [row["r"] for row in __import__("json").loads(proc.stdout)] == list(range(70000))
    proc = harness("sql", "select range as r from range(5)", "--limit", "2", "--results", str(tmp_path))
    assert proc.stdout.count("│ 0") + proc.stdout.count("│ 1") == 2 and "│ 2" not in proc.stdout
    assert "3 more rows not shown (--limit 2)" in proc.stderr


# ----------------------------------------------------------------------------- two `harness queue` at once


def _queue_slowly(argv: list[str], out: str, go) -> None:
    """``harness queue ARGV`` whose read of the queue takes 1 s more (so two of them read before
    either writes, as two machines may); its stdout goes to ``out``."""
    import contextlib
    import time

    from harness.scheduling.queue.run_queue import RunQueue

    read = RunQueue.runs

    def slow_runs(self, grid=None):
        runs = read(self, grid)
        time.sleep(1.0)
        return runs

    RunQueue.runs = slow_runs
    go.wait(60)
    with open(out, "w") as f, contextlib.redirect_stdout(f):
        sys.exit(cli(argv))


@pytest.mark.slow  # 21 s on 2 cores: out of the developer's loop (`pytest -m "not slow"`)
@pytest.mark.parametrize("storage", ["journal", "postgresql"])
def test_two_concurrent_queues_of_one_grid_add_each_run_once(tmp_path, storage, request):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"text": "hello world"}\n')
    grid = grid_file(tmp_path, corpus)
    results = tmp_path / "results"
    extra = ["--storage", request.getfixturevalue("pg_url")] if storage == "postgresql" else []
    argv = ["queue", str(grid), "--results", str(results), *extra]
    RunQueue.open(extra[1] if extra else None, results)  # the storage's tables made (not what is tested)
    go = SPAWN.Event()
    procs = [
        SPAWN.Process(target=_queue_slowly, args=(argv, str(tmp_path / f"out{i}"), go)) for i in range(2)
    ]
    for p in procs:
        p.start()
    go.set()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0]
    said = sorted((tmp_path / f"out{i}").read_text().splitlines()[0] for i in range(2))
    assert said[0].startswith("g: nothing to add: all 3 runs already queued or done"), said
    assert said[1].startswith("g: queued 3 runs in "), said
    queue = RunQueue.open(extra[1] if extra else None, results)
    trials = queue.all_trials()
    assert len(trials) == 3 and len({t.user_attrs["run_id"] for t in trials}) == 3


# ----------------------------------------------------------------------------- a full disk


@pytest.fixture
def tmpfs(tmp_path):
    """``tmpfs(size)`` -> a real tmpfs mount of ``size`` (e.g. ``"1m"``), unmounted after the test."""
    mounts = []

    def make(size: str) -> Path:
        target = tmp_path / f"tmpfs-{len(mounts)}"
        target.mkdir()
        proc = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(target)],
            capture_output=True,
            text=True,
        )
        if proc.returncode:
            pytest.fail(f"cannot mount a tmpfs at {target}: {proc.stderr}", pytrace=False)
        mounts.append(target)
        return target

    yield make
    for target in reversed(mounts):
        subprocess.run(["umount", "-l", str(target)], check=False)


def _no_failure(run) -> bool:
    """No attempt of ``run`` counted as a failure (a release spends no retry)."""
    return all(t.user_attrs.get("failures", 0) == 0 for t in run.trials)


def _queued(tmp_path: Path, results: Path, storage: list[str] = ()) -> Path:
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"text": "hello world"}\n')
    grid = grid_file(tmp_path, corpus)
    assert cli(["queue", str(grid), "--results", str(results), *storage]) == 0
    return grid


@pytest.mark.slow  # 5 s on 2 cores: out of the developer's loop (`pytest -m "not slow"`)
def test_a_worker_refuses_a_run_whose_checkpoints_do_not_fit_and_leaves_it_queued(tmp_path, tmpfs):
    from harness.train.checkpoint import space_needed

    results = tmpfs("1m")
    _queued(tmp_path, results)
    queue = RunQueue.open(None, results)
    need = space_needed(next(iter(queue.runs().values())).config)
    assert need > 2**20  # tiny: 173k parameters, about 7 MiB for its checkpoints
    proc = harness("work", "--results", str(results), "--threads", "1", "--quiet")
    err = one_line_error(
        proc,
        f"disk full: {results} (not enough free space to start",
        "free)",
        f"needs about {need / 2**20:.1f} MiB for its checkpoints",
        "released and queued again",
    )
    assert proc.returncode == 1 and "Traceback" not in err
    runs = RunQueue.open(None, results).runs()
    assert sorted(r.state for r in runs.values()) == ["queued"] * 3
    assert all(_no_failure(r) for r in runs.values())
    assert not (results / "runs").exists() and not (results / "checkpoints").exists()


def _fill_and_write(config, results_dir: Path):
    """A train function whose checkpoint meets a full disk: a real ENOSPC from the file system."""
    from harness.common.files import atomic_write

    atomic_write(results_dir / "checkpoints" / "big.ckpt", b"\0" * (4 * 2**20))
    return "done"


def test_enospc_while_writing_a_checkpoint_releases_the_run_and_stops_the_worker(tmp_path, tmpfs):
    from harness.common.faults import DiskFull
    from harness.scheduling.workers.loop import work

    results = tmpfs("2m")
    _queued(tmp_path, results)
    queue = RunQueue.open(None, results)
    failures = []
    with pytest.raises(DiskFull) as caught:
        work(
            queue,
            _fill_and_write,
            results,
            on_failure=lambda *a: failures.append(a),
            log=lambda m: None,
            space_needed=lambda config: 2**19,
        )
    msg = str(caught.value)
    assert msg.startswith(f"disk full: {results} (OSError: [Errno 28] No space left on device"), msg
    assert (
        "needs about 512 KiB for its checkpoints" in msg
        and "released and queued again (no retry spent)" in msg
    )
    assert "\n" not in msg and failures == []  # no failed result written, no retry spent
    runs = RunQueue.open(None, results).runs()
    assert sorted(r.state for r in runs.values()) == ["queued"] * 3 and all(
        _no_failure(r) for r in runs.values()
    )
    assert not list((results / "checkpoints").iterdir())  # the torn temporary file was removed


def _remount_read_only_and_write(config, results_dir: Path):
    """A train function whose results folder is remounted read-only under it: a real EROFS."""
    subprocess.run(["mount", "-o", "remount,ro", str(results_dir)], check=True)
    (results_dir / "checkpoints").mkdir(parents=True, exist_ok=True)
    return "done"


def test_a_read_only_remount_releases_the_run_and_stops_the_worker_in_one_line(tmp_path, tmpfs):
    """Issue 40: an environment fault, not a run failure: no "recording the failure ... failed", no
    retry spent, one line naming the folder (the queue is elsewhere here, so the release is written)."""
    from harness.common.faults import ResultsReadOnly
    from harness.scheduling.workers.loop import work

    results = tmpfs("4m")
    journal = tmp_path / "queue.journal"
    _queued(tmp_path, results, ["--storage", str(journal)])
    queue = RunQueue.open(str(journal), results)
    failures, lines = [], []
    with pytest.raises(ResultsReadOnly) as caught:
        work(
            queue,
            _remount_read_only_and_write,
            results,
            on_failure=lambda *a: failures.append(a),
            log=lines.append,
        )
    msg = str(caught.value)
    assert msg.startswith(
        f"results folder {results} is read-only (writing {results / 'checkpoints'} failed"
    ), msg
    assert "released and queued again (no retry spent)" in msg and "\n" not in msg
    assert failures == [] and not any("recording the failure" in line for line in lines), lines
    runs = RunQueue.open(str(journal), results).runs()
    assert sorted(r.state for r in runs.values()) == ["queued"] * 3
    assert all(_no_failure(r) for r in runs.values())


def test_sql_on_a_full_disk_says_the_disk_is_full(tmp_path, tmpfs):
    results = tmpfs("8m")
    (results / "runs").mkdir()
    source = _drained(tmp_path)
    files = sorted((source / "runs").glob("*.json"))
    for f in files[:-1]:
        (results / "runs" / f.name).write_bytes(f.read_bytes())
    assert harness("sql", "select 1", "--results", str(results)).returncode == 0  # database made, 8 files in
    (results / "runs" / files[-1].name).write_bytes(files[-1].read_bytes())  # one to ingest
    fd = os.open(results / "filler", os.O_WRONLY | os.O_CREAT)  # the disk fills up
    try:
        while True:
            os.write(fd, b"\1" * 4096)
    except OSError:
        pass
    finally:
        os.close(fd)
    proc = harness("sql", "select count(*) from final", "--results", str(results))
    one_line_error(proc, f"the disk holding {results} is full (", " free)")


# ----------------------------------------------------------------------------- workers on different results folders


@pytest.mark.slow  # 11 s on 2 cores: out of the developer's loop (`pytest -m "not slow"`)
def test_a_worker_on_another_results_folder_refuses_the_grid_naming_both(tmp_path):
    from test_faults import _stub_result

    from harness.scheduling.workers.loop import work

    journal = tmp_path / "shared" / "q.journal"
    storage = ["--storage", f"journal:{journal}"]
    here, elsewhere = tmp_path / "here", tmp_path / "elsewhere"
    _queued(tmp_path, here, storage)
    rid = (here / ".harness-id").read_text().strip()
    elsewhere.mkdir()
    proc = harness("work", "--results", str(elsewhere), *storage, "--threads", "1", "--quiet")
    one_line_error(
        proc,
        f"grid g belongs to the results folder {here.resolve()} (id {rid})",
        f"this worker's --results {elsewhere} is another folder (id ",
        "released",
    )
    queue = RunQueue.open(f"journal:{journal}", here)
    assert sorted(r.state for r in queue.runs().values()) == ["queued"] * 3
    assert not (elsewhere / "runs").exists()
    # queueing the grid again from the other folder is refused the same way
    one_line_error(
        harness("queue", str(tmp_path / "g.toml"), "--results", str(elsewhere), *storage),
        f"grid g in this queue belongs to the results folder {here.resolve()}",
    )
    # the right folder takes them all
    assert work(queue, _stub_result, here, log=lambda m: None)["done"] == 3


# ----------------------------------------------------------------------------- the results folder goes away


def _train_until_lost(config, results_dir: Path):
    """Stands in for training's own loop (harness.train.runner): after every step the fence is asked
    (no I/O), every 5 steps a checkpoint is written through the fence (as save_checkpoint does)."""
    import time

    from harness.common.files import atomic_write
    from harness.train import fencing
    from harness.train.checkpoint import checkpoint_dir

    fence = fencing.current()
    for step in range(1, 2000):
        time.sleep(0.02)
        why = fence.lost()
        if why is not None:
            raise fencing.LeaseLost(config.run_id, why)
        if step % 5 == 0:
            fence.check("checkpoint")
            atomic_write(
                checkpoint_dir(results_dir, config.run_id) / "last.ckpt",
                b"x" * 1000,
                commit=lambda: fence.holding("checkpoint"),
                root=results_dir,
            )
    return "done"


@pytest.mark.parametrize("how", ["deleted", "replaced", "unmounted"])
def test_a_worker_whose_results_folder_goes_away_stops_within_a_beat(tmp_path, tmpfs, how):
    import shutil
    import threading
    import time

    from harness.common.faults import ResultsLost
    from harness.scheduling.workers.loop import work

    results = tmpfs("64m") if how == "unmounted" else tmp_path / "results"
    journal = f"journal:{tmp_path / 'q.journal'}"
    _queued(tmp_path, results, ["--storage", journal])
    queue = RunQueue.open(journal, results, lease_timeout_s=4)

    def take_away():
        while not (results / "checkpoints").exists():
            time.sleep(0.01)
        time.sleep(0.2)
        if how == "unmounted":
            subprocess.run(["umount", "-l", str(results)], check=True)
        else:
            while results.exists():  # the worker may write into a folder while rmtree empties it
                shutil.rmtree(results, ignore_errors=True)
            if how == "replaced":
                results.mkdir()
        gone_at.append(time.monotonic())

    gone_at: list[float] = []
    thread = threading.Thread(target=take_away)
    thread.start()
    with pytest.raises(ResultsLost) as caught:
        work(queue, _train_until_lost, results, log=lambda m: None, beat_s=1.0)
    stopped = time.monotonic()
    thread.join()
    msg = str(caught.value)
    # a replacement is rmtree then mkdir: a beat may fall between the two and see it deleted
    why = {
        "deleted": ("deleted",),
        "replaced": ("replaced by another folder", "deleted"),
        "unmounted": ("unmounted, or another file system mounted there",),
    }[how]
    assert any(
        msg.startswith(f"results folder {results} {w} while this worker used it; g:tiny:") for w in why
    ), msg
    assert "\n" not in msg
    assert "released; the worker stops and creates nothing there" in msg
    assert stopped - gone_at[0] < 4  # within one lease interval
    assert (not results.exists()) if how == "deleted" else not list(results.iterdir())  # nothing re-created
    runs = RunQueue.open(journal, results).runs()
    assert sorted(r.state for r in runs.values()) == ["queued"] * 3 and all(
        _no_failure(r) for r in runs.values()
    )


def test_a_worker_whose_folder_with_its_queue_is_replaced_writes_nothing_in_the_new_one(tmp_path):
    import shutil
    import threading
    import time

    from harness.common.faults import ResultsLost
    from harness.scheduling.workers.loop import work

    results = tmp_path / "results"
    _queued(tmp_path, results)  # the queue journal lives in the results folder

    def replace():
        while not (results / "checkpoints").exists():
            time.sleep(0.01)
        while results.exists():  # the worker may write into the folder while rmtree empties it
            shutil.rmtree(results, ignore_errors=True)
        results.mkdir()

    thread = threading.Thread(target=replace)
    thread.start()
    with pytest.raises(ResultsLost) as caught:
        work(
            RunQueue.open(None, results, lease_timeout_s=4),
            _train_until_lost,
            results,
            log=lambda m: None,
            beat_s=1.0,
        )
    thread.join()
    assert "not released (FileNotFoundError: the queue is unreachable; another worker reclaims it" in str(
        caught.value
    )
    assert list(results.iterdir()) == []


SAMPLE_TEXT = (
    Path(__file__).resolve().parents[3]
    / "shared/data/fineweb_edu_sample/fineweb_edu_sample10BT_efscorer150.jsonl"
)


@pytest.mark.slow  # ~15 s on 2 cores: a real run by hand, its folder taken away mid-run
@pytest.mark.parametrize("how", ["replaced", "deleted"])
def test_a_run_by_hand_whose_results_folder_goes_away_stops_and_writes_nothing_more(tmp_path, how):
    """``harness run`` watches its results folder as a worker does (harness.train.fencing.FolderFence):
    replaced mid-run, the run writes no checkpoint, result or database into the new folder; deleted,
    nothing is re-created. One line, exit 1."""
    import shutil
    import time

    results = tmp_path / "R"
    cmd = [sys.executable, "-m", "harness", "run", "--variant", "rd_attnres", "--size", "tiny", "--seed", "0"]
    cmd += ["--budget-tokens", "2097152", "--corpus", str(SAMPLE_TEXT), "--results", str(results)]
    cmd += ["--set", "vocab_size=300", "--set", "batch_tokens=1024", "--threads", "1", "--quiet"]
    env = {**os.environ, "HARNESS_CACHE": str(tmp_path / "cache")}  # the corpus outside the folder
    proc = warm.popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 240
    while not list(results.glob("checkpoints/*/local/config.json")):  # training has started
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.1)
    time.sleep(1.0)
    if how == "replaced":
        results.rename(tmp_path / "R.old")
        results.mkdir()
    else:
        while results.exists():  # the run may write into the folder while rmtree empties it
            shutil.rmtree(results, ignore_errors=True)
    gone = time.monotonic()
    out, err = proc.communicate(timeout=240)
    stopped = time.monotonic()
    err = err.strip()
    assert proc.returncode == 1 and "Traceback" not in err and len(err.splitlines()) == 1, (out, err)
    assert err.startswith(f"harness run: error: results folder {results} "), err
    assert any(w in err for w in ("replaced by another folder", "deleted")), err
    assert "stopped and wrote nothing more there" in err and ": done" not in out
    assert stopped - gone < 30  # a step or a checkpoint away, not the run's end (2M tokens)
    if how == "replaced":
        assert list(results.iterdir()) == []  # no checkpoint, result file or harness.duckdb
        assert list((tmp_path / "R.old").glob("checkpoints/*/local/config.json"))
    else:
        assert not results.exists()


def test_queueing_a_gpt2_grid_where_tiktoken_cannot_load_gpt2_is_refused_before_anything_is_queued(tmp_path):
    """Offline (no cache, no route to tiktoken's files) with its corpus not prepared, every worker would
    fail to download gpt2's files and spend its retries: the queue refuses it, naming `harness prepare`."""
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"text": "hello world"}\n')
    grid = grid_file(tmp_path, corpus, train='tokenizer = "gpt2"\n')
    offline = {  # tiktoken's real client, with nowhere to download from
        "TIKTOKEN_CACHE_DIR": str(tmp_path / "empty_cache"),
        "HTTPS_PROXY": "http://127.0.0.1:9",
        "https_proxy": "http://127.0.0.1:9",
    }
    results = tmp_path / "results"
    proc = harness("queue", str(grid), "--results", str(results), env=offline)
    one_line_error(
        proc,
        "tokenizer 'gpt2': tiktoken cannot load its gpt2 files",
        f"run `harness prepare {grid}` where it can",
    )
    assert proc.returncode == 2 and not results.exists()  # nothing queued, no folder


@pytest.mark.parametrize("watched", [True, False])
def test_a_folder_deleted_between_the_workers_look_and_its_owner_check_is_said_deleted(tmp_path, watched):
    """A results folder deleted just after a worker started (before its first run) is named as deleted,
    not as another folder with no .harness-id (which told the user to pass the folder they passed)."""
    import shutil

    from harness.common.faults import OtherResults, ResultsLost
    from harness.scheduling.workers.retry import check_results
    from harness.train.fencing import FolderWatch

    results = tmp_path / "results"
    journal = f"journal:{tmp_path / 'q.journal'}"
    _queued(tmp_path, results, ["--storage", journal])
    queue = RunQueue.open(journal, results)
    watch = FolderWatch(results)  # the worker's, at its start
    claim = queue.claim()
    shutil.rmtree(results)
    with pytest.raises(ResultsLost if watched else OtherResults) as caught:
        check_results(queue, lambda method, *a: method(*a), claim, results, watch if watched else None)
    if watched:
        assert str(caught.value).startswith(f"results folder {results} deleted while this worker used it")
    assert not results.exists()
    assert sorted(r.state for r in RunQueue.open(journal, results).runs().values()) == ["queued"] * 3
