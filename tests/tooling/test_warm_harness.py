"""tests/warm.py: a ``harness`` command forked from the warm server says, exits and takes signals as the
same command started cold (``subprocess`` itself), and starts cold where a fork cannot stand for a fresh
interpreter."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import warm

from harness.scheduling.workers.starting import SUFFIX as STARTING

HARNESS = [sys.executable, "-m", "harness"]
pytestmark = pytest.mark.slow  # the server imports torch and Lightning first: 4 s


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["sql", "select 6 * 7 as answer", "--results", "{tmp}"],
        ["status", "--results", "{tmp}/absent"],
        ["queue", "{tmp}/absent.toml"],
        ["run", "--variant", "nosuch", "--size", "tiny", "--seed", "0", "--budget-tokens", "1024"],
    ],
    ids=["help", "sql", "status-refused", "queue-refused", "run-refused"],
)
def test_a_warm_command_says_and_exits_as_a_cold_one(tmp_path, argv):
    argv = [a.format(tmp=tmp_path) for a in argv]
    cold = subprocess.run([*HARNESS, *argv], capture_output=True, text=True, timeout=120)
    with warm.popen([*HARNESS, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as p:
        assert isinstance(p, warm._WarmPopen)
        out, err = p.communicate(timeout=120)
    assert (p.returncode, out, err) == (cold.returncode, cold.stdout, cold.stderr)
    assert (
        warm.run([*HARNESS, *argv], capture_output=True, text=True, timeout=120).returncode == cold.returncode
    )


def test_a_warm_worker_is_its_own_process_and_ctrl_c_interrupts_it_as_a_cold_one(tmp_path):
    """SIGINT to the child's pid: Python's KeyboardInterrupt in the child alone, the server untouched."""
    said = {}
    for how, start in (("cold", subprocess.Popen), ("warm", warm.popen)):
        results = tmp_path / how
        cmd = [
            *HARNESS,
            "work",
            "--results",
            str(results),
            "--create",
            "--wait",
            "--poll-s",
            "0.2",
            "--quiet",
        ]
        p = start(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 120
        # its poll loop has begun: the queue is there and the worker's "starting" marker gone (it is removed as
        # the loop begins; a fixed delay after the queue's creation let a loaded machine's cold worker be
        # interrupted before its loop, which exits by another path)
        while not (results / "queue.journal").exists() or list(results.glob(f".*{STARTING}")):
            assert p.poll() is None and time.monotonic() < deadline, p.communicate()
            time.sleep(0.05)
        if how == "warm":
            assert p.pid not in (os.getpid(), warm._server.proc.pid)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=120)
        said[how] = (p.returncode, out, err.replace(str(results), "RESULTS"))
    assert said["warm"] == said["cold"] and said["cold"][0] != 0, said
    assert warm._server.proc.poll() is None  # the server is still there for the next command


def test_an_environment_another_library_reads_at_import_starts_cold(tmp_path):
    ours = {**os.environ, "HARNESS_RESULTS": str(tmp_path)}
    theirs = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path)}
    for env, kind in ((ours, warm._WarmPopen), (theirs, subprocess.Popen)):
        with warm.popen([*HARNESS, "--help"], env=env, stdout=subprocess.DEVNULL) as p:
            assert type(p) is kind and p.wait(timeout=120) == 0
    with warm.popen([sys.executable, "-u", "-m", "harness", "--help"], stdout=subprocess.DEVNULL) as p:
        assert type(p) is subprocess.Popen and p.wait(timeout=120) == 0


def test_a_pythonpath_goes_on_sys_path_where_a_fresh_interpreter_puts_it_and_a_sitecustomize_starts_cold(
    tmp_path,
):
    """A folder on PYTHONPATH with a package named harness shadows the installed one in both processes:
    its __main__ prints the module search path the command was given."""
    shadow = tmp_path / "shadow" / "harness"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("")
    (shadow / "__main__.py").write_text(
        "import sys\nprint(__file__)\nprint(sys.argv[1:])\nprint(sys.path[:4])\n"
    )
    env = {**os.environ, "PYTHONPATH": f"{shadow.parent}{os.pathsep}{tmp_path / 'absent'}"}
    cmd = [*HARNESS, "a", "b"]
    with warm.popen(cmd, env=env, stdout=subprocess.DEVNULL, cwd=tmp_path) as p:
        assert type(p) is subprocess.Popen and p.wait(timeout=120) == 0  # an entry that is not a folder: cold
    env["PYTHONPATH"] = str(shadow.parent)
    cold = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=tmp_path, timeout=120)
    with warm.popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path
    ) as p:
        out, err = p.communicate(timeout=120)
    assert isinstance(p, warm._WarmPopen) and (p.returncode, out, err) == (0, cold.stdout, cold.stderr)
    assert out.splitlines()[:2] == [str(shadow / "__main__.py"), "['a', 'b']"], out
    for name in ("sitecustomize.py", "torch"):
        (shadow.parent / name).touch()
        with warm.popen(cmd, env=env, stdout=subprocess.DEVNULL, cwd=tmp_path) as p:
            assert type(p) is subprocess.Popen and p.wait(timeout=120) == 0
        (shadow.parent / name).unlink()


LEFT = "RD_HARNESS_TEST_LEFT_BEHIND"  # a variable no library reads, set as Lightning sets PL_GLOBAL_SEED


def test_a_server_started_after_a_test_changed_the_environment_has_the_sessions():
    """Set outside monkeypatch (as Lightning's ``seed_everything`` sets PL_GLOBAL_SEED in-process): the
    commands of this environment start cold, a new server starts with the session's environment, and
    the next test finds the variable gone (conftest's ``_environment_restored``)."""
    assert LEFT not in warm.SESSION_ENVIRONMENT
    os.environ[LEFT] = "3"
    old, warm._server = warm._server, None
    try:
        with warm.popen([*HARNESS, "--help"], stdout=subprocess.DEVNULL) as p:
            assert type(p) is subprocess.Popen and p.wait(timeout=120) == 0
        with warm.popen([*HARNESS, "--help"], env=warm.SESSION_ENVIRONMENT, stdout=subprocess.DEVNULL) as p:
            assert type(p) is warm._WarmPopen and p.wait(timeout=120) == 0
        server_env = Path(f"/proc/{warm._server.proc.pid}/environ").read_bytes().split(b"\0")
        assert f"{LEFT}=3".encode() not in server_env and b"PATH=" + os.environ["PATH"].encode() in server_env
    finally:
        if warm._server is not None:
            warm._server.close()
        warm._server = old


def test_the_next_test_finds_the_variable_an_earlier_test_left_gone():
    """Runs after the test above (pytest keeps a file's order): its variable is gone, so this test's
    commands start warm."""
    assert LEFT not in os.environ
    with warm.popen([*HARNESS, "--help"], stdout=subprocess.DEVNULL) as p:
        assert type(p) is warm._WarmPopen and p.wait(timeout=120) == 0
