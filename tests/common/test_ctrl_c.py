"""Ctrl-C ends `harness status --watch` wherever it lands (issue 40), and harness.common.interrupt's guarantee.

Each case starts a real `python -m harness` and sends SIGINT. The bound on the exit
(:data:`HANG_S`) is a hang detector, far above the half second a loaded 2-core machine
takes; it is not a timing goal. CPU only, ~40 s on 2 busy cores:

    python -m pytest -q tests/common/test_ctrl_c.py
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import duckdb
import pytest
from test_ctrl_c_commands import QUERY_TICKS, cpu_ticks

from harness.cli import FINISHED_AS_IT_EXITED
from harness.scheduling.queue.run_queue import RunQueue
from harness.store.store import Store

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


@pytest.mark.slow
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
    # a library that swallows the interrupt (its own Python handler, which does nothing): the watchdog ends it,
    # saying so (issue 71: its exit 130 said nothing)
    p = _swallowing(grace_s=1.0)
    try:
        p.send_signal(signal.SIGINT)
        assert p.wait(timeout=HANG_S) == 7
        assert p.stderr.read() == "interrupted\n"
    finally:
        p.kill()


def _swallowing(grace_s: float, before: str = "") -> subprocess.Popen:
    """A process inside ``prompt_exit(7, grace_s)`` where a library swallows every Ctrl-C: it installs a
    handler of its own that does nothing (so no KeyboardInterrupt reaches the main thread, at any
    bytecode; a loop catching KeyboardInterrupt would still let one through between two ``try``s).
    ``before``: code run first, inside the block; its lines are in ``p.said``."""
    loop = """
        signal.signal(signal.SIGINT, lambda signum, frame: None)
        print("ready", flush=True)
        while True:
            time.sleep(0.05)
    """
    code = (
        "import os, signal, sys, time\nfrom harness.common.interrupt import prompt_exit\n"
        f"with prompt_exit(7, grace_s={grace_s}):\n"
        + textwrap.indent(textwrap.dedent(before) + textwrap.dedent(loop), "    ")
    )
    p = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    p.said = []  # what ``before`` printed
    while (line := p.stdout.readline()) != "ready\n":
        if not line:
            p.kill()
            pytest.fail(f"the process ended before it was ready: {p.said}")
        p.said.append(line)
    return p


def test_a_ctrl_c_during_a_blocking_native_call_ends_the_process():
    # the main thread never runs Python code again (SIGINT masked there, then a 120 s sleep: as a native
    # call such as the BPE trainer holds it): only the watcher thread can see the signal
    code = textwrap.dedent(
        """
        import signal, time
        from harness.common.interrupt import prompt_exit
        with prompt_exit(7, grace_s=1.0):
            signal.signal(signal.SIGINT, lambda signum, frame: None)  # nor between print and sleep
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
            print("ready", flush=True)
            time.sleep(120)
        """
    )
    p = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert p.stdout.readline() == "ready\n"
    p.send_signal(signal.SIGINT)
    try:
        assert p.wait(timeout=HANG_S) == 7
        assert p.stderr.read() == "interrupted\n"
    finally:
        p.kill()


def test_a_ctrl_c_stops_a_store_query_that_never_runs_pythons_handler(tmp_path):
    """A DuckDB query may run on after a Ctrl-C without looking at Python's signal handler (``harness sql``
    under load: the watchdog ended it 10 s later, issue 71): the watcher thread calls the connection's
    ``interrupt()``, so the query ends with DuckDB's ``InterruptException`` at once. Here Python's handler
    never raises (a library's own), and the watchdog would take 10 minutes: only the interrupt can end it."""
    code = textwrap.dedent(
        """
        import signal, sys
        import duckdb
        from harness.common.interrupt import prompt_exit
        from harness.store.store import Store

        with prompt_exit(7, grace_s=600.0):
            signal.signal(signal.SIGINT, lambda signum, frame: None)
            with Store(sys.argv[1]).query_batches("select count(*) from range(100000000000) a") as batches:
                print("ready", flush=True)
                try:
                    next(batches)
                except duckdb.InterruptException as exc:
                    print(f"stopped: {exc}", flush=True)
                    sys.exit(5)
        """
    )
    p = subprocess.Popen(
        [sys.executable, "-c", code, str(tmp_path / "results")], stdout=subprocess.PIPE, text=True
    )
    try:
        assert p.stdout.readline() == "ready\n"
        start = cpu_ticks(p.pid)
        while cpu_ticks(p.pid) - start < QUERY_TICKS:  # the query is running (it scans a range)
            time.sleep(0.01)
        p.send_signal(signal.SIGINT)
        assert p.wait(timeout=HANG_S) == 5
        out = p.stdout.read()  # after DuckDB's own progress bar, where it draws one (no newline after it)
        assert out.endswith("stopped: INTERRUPT Error: Interrupted!\n"), out[-500:]
    finally:
        p.kill()


def test_a_second_ctrl_c_ends_the_process_at_once():
    p = _swallowing(grace_s=600.0)  # the watchdog alone would take 10 minutes
    try:
        p.send_signal(signal.SIGINT)
        time.sleep(1.0)  # a second keypress, not the same one
        p.send_signal(signal.SIGINT)
        assert p.wait(timeout=HANG_S) == 7
        assert p.stderr.read() == "interrupted\n"
    finally:
        p.kill()


@pytest.mark.slow
def test_a_forked_childs_ctrl_c_is_not_a_second_keypress():
    # a child forked inside the block (as a tokenizer pool's workers are) gets its own SIGINT later:
    # it must not reach the parent's watcher (the parent then waits out its grace, it does not exit at once)
    p = _swallowing(
        grace_s=4.0,
        before="""
        child = os.fork()
        if child == 0:
            try:
                time.sleep(60)
            except KeyboardInterrupt:
                os._exit(0)
            os._exit(1)
        print(child, flush=True)
        """,
    )
    child = int(p.said[0])
    try:
        t0 = time.monotonic()
        p.send_signal(signal.SIGINT)
        time.sleep(1.0)
        os.kill(child, signal.SIGINT)
        assert p.wait(timeout=HANG_S) == 7
        assert time.monotonic() - t0 >= 3.5, "the child's SIGINT was taken for a second Ctrl-C of the parent"
    finally:
        p.kill()


def test_a_ctrl_c_in_the_interpreters_shutdown_says_the_command_had_finished():
    """A Ctrl-C after the command returned, as the interpreter runs its exit callbacks (torch's, DuckDB's):
    exit 130 at once, no traceback, and a line saying so (issue 71: it exited 130 saying nothing). The
    SIGINT is sent from an exit callback, so it lands there every time."""
    code = textwrap.dedent(
        """
        import atexit, os, signal, sys
        from harness.cli import main

        atexit.register(lambda: os.kill(os.getpid(), signal.SIGINT))
        sys.argv = ["harness", "--help"]
        sys.exit(main())
        """
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=HANG_S)
    assert (p.returncode, p.stderr) == (130, f"{FINISHED_AS_IT_EXITED}\n"), (p.returncode, p.stderr)
    assert "the research loop, one command each" in p.stdout  # the command's own output came first
