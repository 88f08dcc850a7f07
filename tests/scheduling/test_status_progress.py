"""Live progress in the queue and `harness status` (--watch): each worker writes its run's tokens and
tokens/s into its lease with every heartbeat (harness/common/live.py, harness/scheduling/queue/lease.py), and
status shows them per running run, with ETAs. Real journal queues, stub train functions;
CPU only, ~20 s:

    python -m pytest -q tests/scheduling/test_status_progress.py
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections import Counter

import pytest
from test_progress_display import Terminal, read_until

from harness.cli import main as cli
from harness.commands.status import CLEAR, status_lines
from harness.common import live
from harness.scheduling.queue.lease import Lease
from harness.scheduling.queue.run_queue import RunQueue
from harness.scheduling.workers.loop import work

from queue_stubs import configs, quiet


def wait_for(fn, what: str, timeout_s: float = 60):
    deadline = time.monotonic() + timeout_s
    while True:
        value = fn()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_the_heartbeat_writes_the_runs_live_progress_into_its_lease(tmp_path):
    results = tmp_path / "results"
    q = RunQueue.open(None, results)
    q.enqueue(configs(seeds=(0,), variants=("block_attnres", "rd_attnres")))
    live.publish(live.LiveProgress("some:other:run", 1, 2, 3.0, time.time()))  # not this worker's run
    seen = {}

    def train(config, results_dir):
        lease = lambda: q.runs()[config.run_id].lease  # noqa: E731
        first = lease().beat
        after = wait_for(lambda: (lv := lease()).beat > first and lv, "a beat")
        seen.setdefault(config.run_id, []).append(after.progress)  # nothing published for this run yet
        for tokens in (512, 1536):
            mine = live.LiveProgress(config.run_id, tokens, 2048, 256.0, time.time())
            live.publish(mine)
            seen[config.run_id].append(
                wait_for(lambda mine=mine: lease().progress == mine and lease().progress, "progress")
            )
        return "done"

    assert work(q, train, results, beat_s=0.05, log=quiet) == Counter(done=2)
    for rid, got in seen.items():
        assert got[0] is None  # the other run's progress, or the previous run's, is never sent
        assert [(p.run_id, p.tokens, p.total_tokens, p.tokens_per_s) for p in got[1:]] == [
            (rid, 512, 2048, 256.0),
            (rid, 1536, 2048, 256.0),
        ]
    # the stored lease is plain JSON and reads back as what was written
    (t, *_) = [t for t in q.storage.get_all_trials(q.study_of("g")) if t.user_attrs["run_id"] == rid]
    assert Lease.from_dict(t.user_attrs["lease"]).progress == got[-1]


def test_status_shows_tokens_rate_and_eta_per_running_run(tmp_path, capsys):
    results = tmp_path / "results"
    q = RunQueue.open(None, results)
    q.enqueue(configs(seeds=(0,)))  # g: block_attnres, rd_attnres, fixed_v
    q.complete(q.claim(), "done", value=3.0, wall_s=90.0)
    running = q.claim()
    now = time.time()
    q.beat(running, live.LiveProgress(running.run_id, 40_960, 81_920, 512.0, now - 2))
    q.enqueue(configs(name="h", seeds=(0,), variants=("block_attnres", "rd_attnres")))
    fresh = q.claim("h")
    q.beat(fresh, live.LiveProgress(fresh.run_id, 8_192, 81_920, 512.0, now))
    lines = status_lines(q, None, 120.0, now=now)
    me = Lease.here().worker
    assert lines[1].split() == [
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
    # g: 78 s left of the running run (40_960 tokens to go at 512 tok/s, less 2 s since measured)
    # plus 1 queued x 90 s (the mean finished run), over 1 live worker: 168 s
    assert lines[2].split() == ["g", "1", "1", "1", "0", "0", "3", "90", "s", "~3", "min"]
    # h: nothing finished: a whole run is 81_920 / 512 = 160 s; 144 s left + 1 queued x 160 s = 304 s
    assert lines[3].split() == ["h", "1", "1", "0", "0", "0", "2", "-", "~5", "min"]
    assert lines[4] == f"live workers: 1 ({me})"
    assert lines[5] == "running:"
    assert lines[6].split() == ["run", "worker", "tokens", "tok/s", "ETA", "last", "beat"]
    assert lines[7].split() == [
        running.run_id,
        me,
        "40,960/81,920",
        "(50%)",
        "512",
        "78",
        "s",
        "0",
        "s",
        "ago",
    ]
    assert lines[8].split() == [fresh.run_id, me, "8,192/81,920", "(10%)", "512", "2", "min", "0", "s", "ago"]
    assert len(lines) == 9
    assert cli(["status", "--results", str(results), "--grid", "h"]) == 0
    out = capsys.readouterr().out
    assert fresh.run_id in out and running.run_id not in out


def test_status_option_errors_are_one_line(tmp_path, capsys):
    for argv, message in (
        (["--interval", "2"], "--interval S goes with --watch"),
        (["--watch", "--interval", "0"], "--interval 0: must be a positive number of seconds"),
    ):
        assert cli(["status", "--results", str(tmp_path), *argv]) == 2
        assert capsys.readouterr().err == f"harness status: error: {message}\n"


def test_work_on_a_grid_that_names_nothing_is_an_error_naming_the_grids(tmp_path, capsys):
    results = tmp_path / "results"
    RunQueue.open(None, results).enqueue(configs(seeds=(0,)))
    assert cli(["work", "--results", str(results), "--grid", "nope"]) == 2
    assert capsys.readouterr().err == (
        f"harness work: error: no runs of grid 'nope' in {results / 'queue.journal'}; grids there: g\n"
    )
    assert {r.state for r in RunQueue.open(None, results).runs().values()} == {"queued"}


@pytest.fixture
def one_running(tmp_path):
    """A queue with one run running under this process's lease (live: this process is alive)."""
    results = tmp_path / "results"
    q = RunQueue.open(None, results)
    q.enqueue(configs(seeds=(0,)))
    claim = q.claim()
    q.beat(claim, live.LiveProgress(claim.run_id, 4_096, 8_192, 1024.0, time.time()))
    return results, claim


def watch_cmd(results):
    return [
        sys.executable,
        "-m",
        "harness",
        "status",
        "--watch",
        "--interval",
        "0.2",
        "--results",
        str(results),
    ]


def test_watch_prints_blocks_until_ctrl_c_and_exits_0(one_running):
    results, claim = one_running
    p = subprocess.Popen(watch_cmd(results), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        blocks = []
        while len(blocks) < 3:
            line = p.stdout.readline()
            assert line, p.stderr.read()
            if line.startswith("--- "):
                blocks.append([line])
            elif blocks:
                blocks[-1].append(line)
        p.send_signal(signal.SIGINT)
        rest, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0 and "Traceback" not in err, err
    for block in blocks[:2]:  # each block whole: header, the grid, the running run, a blank line
        assert (
            block[0].endswith("every 0.2 s, Ctrl-C to stop\n")
            and block[1] == f"queue: {results / 'queue.journal'}\n"
        )
        row = next(ln for ln in block if ln.startswith(f"  {claim.run_id}"))
        assert row.split()[2:5] == ["4,096/8,192", "(50%)", "1,024"] and block[-1] == "\n"
    assert "\x1b" not in "".join(sum(blocks, [])) + rest  # not a terminal: no screen control


def test_watch_on_a_terminal_redraws_the_screen(one_running):
    results, claim = one_running
    term = Terminal()
    try:
        p = term.start(watch_cmd(results), None)
        out = read_until(
            term.master, p, lambda text: text.count(CLEAR) >= 2 and text.rstrip().endswith("ago")
        )
        p.send_signal(signal.SIGINT)
        assert p.wait(timeout=60) == 0
    finally:
        term.close()
    screens = out.split(CLEAR)[1:]
    assert len(screens) >= 2 and all(claim.run_id in s for s in screens[:2]), out[-2000:]
