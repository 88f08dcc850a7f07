"""Ctrl-C ends `harness status --watch` wherever it lands (issue 40), and harness.interrupt's guarantee.

Each case starts a real `python -m harness` and sends SIGINT. The bound on the exit
(:data:`HANG_S`) is a hang detector, far above the half second a loaded 2-core machine
takes; it is not a timing goal. CPU only, ~40 s on 2 busy cores:

    python -m pytest -q tests/test_ctrl_c.py
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading
import time

import duckdb
import pytest

from db.store import Store
from harness.scheduling.queue import RunQueue

from queue_stubs import configs

HANG_S = 30  # an exit later than this after SIGINT is a hang (DESIGN: Ctrl-C ends a command promptly)


@pytest.fixture
def results(tmp_path):
    """A queue of 3 runs and a store of 20 results: each watch round reads both."""
    folder = tmp_path / "results"
    RunQueue.open(None, folder).enqueue(configs(seeds=(0, 1, 2)))
    store = Store(folder)
    for i in range(20):
        store.write_result(
            {
                "run": {
                    "run_id": f"r{i}",
                    "grid": "g",
                    "variant": "block_attnres",
                    "role": "parent",
                    "seed": i,
                    "size": "tiny",
                    "budget_tokens": 1000,
                    "status": "done",
                    "config": {},
                },
                "metrics": [
                    {"step": s, "tokens": 1000 * s, "split": "val", "name": "nll", "value": 3.0}
                    for s in range(1, 40)
                ],
            }
        )
    store.query("select count(*) from runs")  # ingested: the database exists
    return folder


def watch(results):
    """A `harness status --watch` that has printed its first block (its loop is running)."""
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "harness",
            "status",
            "--watch",
            "--interval",
            "0.01",
            "--results",
            str(results),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = p.stdout.readline()
    assert line.startswith("--- "), (line, p.stderr.read() if p.poll() is not None else "")
    threading.Thread(target=p.stdout.read, daemon=True).start()  # keep the pipe drained
    return p


def interrupted(p) -> tuple[int, str]:
    p.send_signal(signal.SIGINT)
    try:
        p.wait(timeout=HANG_S)
    except subprocess.TimeoutExpired:
        p.kill()
        pytest.fail(f"harness status --watch still running {HANG_S} s after SIGINT")
    return p.returncode, p.stderr.read()


@pytest.mark.parametrize("delay_ms", [0, 10, 40, 150])
def test_sigint_anywhere_in_the_watch_loop_exits_0(results, delay_ms):
    # a round (queue read, store read, print, 10 ms sleep) takes ~50-300 ms: the delays land in each part,
    # the DuckDB query among them (which turns SIGINT into RuntimeError("Query interrupted"))
    p = watch(results)
    time.sleep(delay_ms / 1000)
    rc, err = interrupted(p)
    assert rc == 0 and "Traceback" not in err and "Query interrupted" not in err, (rc, err)


def test_sigint_during_a_store_lock_wait_exits_0(results):
    # another process holds the database's write lock: every store read waits for it (up to 2 s)
    holder = duckdb.connect(str(results / "harness.duckdb"))
    try:
        p = watch(results)
        time.sleep(0.5)  # inside the next round's lock wait
        rc, err = interrupted(p)
    finally:
        holder.close()
    assert rc == 0 and "Traceback" not in err, (rc, err)


def test_a_swallowed_ctrl_c_still_ends_the_process():
    # a call that catches KeyboardInterrupt and goes on (as a retry loop may): the watchdog ends it
    code = textwrap.dedent(
        """
        import sys, time
        from harness.interrupt import prompt_exit
        with prompt_exit(7, grace_s=1.0):
            print("ready", flush=True)
            while True:
                try:
                    time.sleep(0.05)
                except KeyboardInterrupt:
                    pass
        """
    )
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline() == "ready\n"
    p.send_signal(signal.SIGINT)
    # 7: the watchdog ended it. The one SIGINT can also land between two `try`s of the loop (at the
    # `while` or in the `except`), and the KeyboardInterrupt then ends the process at once (-SIGINT)
    assert p.wait(timeout=HANG_S) in (7, -signal.SIGINT)
