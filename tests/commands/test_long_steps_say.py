"""Long steps say what they are doing (issue 66 row 3: no long silence in a first hour).

`harness report` on a committed study (reports/demo, 18 runs; the silences were measured on the 96-run
reports/cpu_study: issue 66) and `harness run` before its bar, on a
terminal (a pseudo-terminal here), print a line per phase, in order, on stderr (the report's paths and
headline stay alone on stdout), and none with --quiet, $HARNESS_PROGRESS=off or off a terminal;
`harness status` shows workers starting; `make venv` says each step.
Real archive, real corpus (FineWeb-Edu sample), real queue; the ETA's step-only rate is pinned in
tests/train/test_progress_display.py. ~2 min on 2 busy cores:

    python -m pytest -q tests/commands/test_long_steps_say.py
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import warm
from terminal import Terminal, read_until

from harness.cli import main as cli
from harness.common import console
from harness.scheduling.queue.lease import hostname

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT.parent / "shared/data/fineweb_edu_sample"
# the smallest committed study: what is asserted is the phases, not their length
STUDY = ROOT / "reports/demo/rd_controls_mini.tar.gz"


def _harness(*argv: str, env: dict, **kw) -> subprocess.CompletedProcess:
    return warm.run(
        [sys.executable, "-m", "harness", *argv], capture_output=True, text=True, env=env, timeout=900, **kw
    )


def _on_terminal(*argv: str, env: dict) -> subprocess.CompletedProcess:
    """``harness ARGV`` with stderr on a pseudo-terminal (a person waiting on it) and stdout on a pipe;
    ``stderr``: what the terminal showed (``\r\n`` as ``\n``)."""
    term = Terminal()
    try:
        proc = term.start([sys.executable, "-m", "harness", *argv], env, stdout=subprocess.PIPE, text=True)
        shown = read_until(term.master, proc, lambda text: False, timeout_s=900)
        out = proc.stdout.read()
        proc.wait(timeout=60)
    finally:
        term.close()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, shown.replace("\r\n", "\n"))


def _in_order(text: str, patterns: list[str]) -> list[str]:
    """The lines of ``text`` matching each pattern, the first match of each after the previous one's;
    fails naming the first pattern missing in that order."""
    lines, at, got = text.splitlines(), 0, []
    for pattern in patterns:
        for i in range(at, len(lines)):
            if re.search(pattern, lines[i]):
                got.append(lines[i])
                at = i + 1
                break
        else:
            raise AssertionError(f"no line matching {pattern!r} after {got[-1:]!r} in:\n{text[-3000:]}")
    return got


@pytest.fixture
def env():
    return {k: v for k, v in os.environ.items() if k != console.PROGRESS_ENV}


@pytest.mark.slow
def test_report_of_the_committed_study_says_each_phase(tmp_path, env):
    results = tmp_path / "results"
    imported = _harness("import", str(STUDY), "--results", str(results), env=env)
    assert imported.returncode == 0, imported.stderr[-2000:]
    out = tmp_path / "report"
    proc = _on_terminal(
        "report", "--grid", "rd_controls_mini", "--results", str(results), "--out", str(out), env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    _in_order(
        proc.stderr,
        [
            r"^loading the statistics and plotting libraries",
            r"^reading grid rd_controls_mini from the results store in ",
            r"^computing the statistics: 18 finished runs, 1 size x budget cell\(s\)",
            r"^drawing the figures \.\.\.$",
            rf"^writing the report to {re.escape(str(out))} \.\.\.$",
        ],
    )
    assert proc.stdout.splitlines()[0].startswith(str(out))  # stdout: the paths written, then the headline
    again = ["report", "--grid", "rd_controls_mini", "--results", str(results), "--no-figures"]
    quiet = _on_terminal(*again, "--out", str(tmp_path / "off"), env={**env, console.PROGRESS_ENV: "off"})
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr[-2000:]
    piped = _harness(*again, "--out", str(tmp_path / "piped"), env=env)  # a log or a pipe: the results alone
    assert piped.returncode == 0 and piped.stderr == "", piped.stderr[-2000:]


@pytest.mark.slow
def test_run_says_each_step_before_its_first_progress_line(tmp_path, env):
    env = {**env, "HARNESS_CACHE": str(tmp_path / "cache")}
    argv = ["run", "--variant", "rd_attnres", "--size", "tiny", "--seed", "0", "--budget-tokens", "4096"]
    argv += ["--corpus", str(SAMPLE), "--results", str(tmp_path / "r"), "--threads", "1"]
    argv += ["--set", "vocab_size=512", "--set", "batch_tokens=1024", "--set", "eval_tokens=2048"]
    proc = _on_terminal(*argv, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    _in_order(
        proc.stderr,
        [
            r"^\[rd_attnres s0\] loading torch and Lightning \.\.\.$",
            rf"^\[rd_attnres s0\] preparing the corpus \({re.escape(str(SAMPLE))}\) \.\.\.$",
            r"^\[rd_attnres s0\] building the tiny rd_attnres model and its data loaders \.\.\.$",
            r"^\[rd_attnres s0\] starting training \(Lightning's set-up, then the first step\) \.\.\.$",
            r"rd_attnres s0: +\d+%\|",  # then the bar
        ],
    )
    quiet = _on_terminal(*argv, "--force", "--quiet", env=env)
    assert quiet.returncode == 0, quiet.stderr[-3000:]
    assert " ...\n" not in quiet.stderr and "rd_attnres s0: " not in quiet.stderr, quiet.stderr


def _queued(results: Path) -> None:
    """One queued run of a grid in ``results``'s journal queue."""
    from harness.scheduling.grids.grid import parse_grid
    from harness.scheduling.queue.run_queue import RunQueue

    grid = parse_grid(
        {
            "name": "starting",
            "corpus": str(SAMPLE),
            "sizes": ["tiny"],
            "seeds": [0],
            "budgets_tokens": [2048],
            "variants": {"block_attnres": "parent"},
            "train": {"vocab_size": 512, "batch_tokens": 1024, "eval_tokens": 2048},
        }
    )
    RunQueue.open(None, results).enqueue(grid.expand())


def test_status_shows_a_worker_starting_apart_from_none(tmp_path, capsys):
    """A worker that has started but not yet claimed (its marker, :mod:`harness.scheduling.workers.starting`,
    held here by this process) is 'starting', not absent: 'live workers: 0' alone said no worker at all."""
    from harness.scheduling.workers.starting import starting

    results = tmp_path / "results"
    _queued(results)
    argv = ["status", "--results", str(results)]
    with starting(results):
        assert cli(argv) == 0
        during = capsys.readouterr().out
    assert "live workers: 0" in during
    assert re.search(
        rf"^starting workers: 1 \({re.escape(hostname())}:{os.getpid()}, \d+ s ago\): loading torch",
        during,
        re.M,
    ), during
    assert cli(argv) == 0
    after = capsys.readouterr().out
    assert "live workers: 0" in after and "starting workers" not in after, after
    assert sorted(p.name for p in results.iterdir() if p.name.startswith(".")) == []  # the marker is gone


def test_a_worker_is_starting_until_its_loop_claims(tmp_path, monkeypatch):
    """`harness work`'s start (run_worker): the marker exists while the queue opens and the checks run, and is
    gone once the loop claims (the run's lease then says the worker is live); nothing is left behind."""
    from harness.scheduling.queue.run_queue import RunQueue
    from harness.scheduling.workers.options import WorkOptions
    from harness.scheduling.workers.start import run_worker
    from harness.scheduling.workers.starting import starting_workers

    results = tmp_path / "results"
    _queued(results)
    me = f"{hostname()}:{os.getpid()}"
    seen = {}
    real_open = RunQueue.open.__func__

    def opening(cls, *args, **kwargs):
        seen["opening"] = [w for w, _ in starting_workers(results)]
        return real_open(cls, *args, **kwargs)

    monkeypatch.setattr(RunQueue, "open", classmethod(opening))

    def train(config, results_dir):
        seen["training"] = [w for w, _ in starting_workers(results)]
        return {"status": "done", "val_nll": 5.0}

    outcomes = run_worker(
        WorkOptions(results=str(results), max_runs=1), train_fn=train, on_failure=lambda *a: None
    )
    assert sum(outcomes.values()) == 1, outcomes
    assert seen == {"opening": [me], "training": []}
    assert not list(results.glob(".*.starting"))


def test_make_venv_says_each_step_before_it(tmp_path):
    """`make venv` (pip -q: minutes without a word): a line before each step, and one when it is ready
    (the recipe as make would run it, `make -n`, into a venv path that does not exist)."""
    if shutil.which("make") is None:
        pytest.fail("make not installed")
    venv = tmp_path / "v"
    proc = subprocess.run(
        ["make", "-n", "venv", f"VENV={venv}"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    got = _in_order(
        proc.stdout,
        [
            r"^echo .*make venv: the virtual environment",
            rf"-m venv {re.escape(str(venv))}$",
            r"^echo .*upgrading pip",
            r"pip install -q --upgrade pip$",
            r"^echo .*installing rd-harness\[test\] .*the long step",
            r"pip install -q -c requirements.lock -e '.\[test\]'$",
            r"^echo .*ready: ",
        ],
    )
    assert len(got) == 7
