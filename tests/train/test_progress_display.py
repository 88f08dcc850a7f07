"""Progress output of training (harness/common/console.py, harness/train/progress.py): a bar on a terminal
of one's own, complete lines on a terminal shared with another worker or off a terminal, the
$HARNESS_PROGRESS modes, and internal retries kept out of normal output.

Real `harness run` processes on a real pseudo-terminal (``pty``), real tiny training on the
FineWeb-Edu sample; another process registered on the same terminal stands for a second
worker. CPU only, about a minute on 2 shared cores:

    python -m pytest -q tests/train/test_progress_display.py
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import warm
from terminal import Terminal, read_until

from harness.cli import main as cli
from harness.common import console

SAMPLE = Path(__file__).resolve().parents[3] / "shared/data/fineweb_edu_sample"
TRAIN = ["--set", "vocab_size=512", "--set", "batch_tokens=1024", "--set", "eval_tokens=2048"]
LINE = re.compile(r"^\[rd_attnres s0\] +\d+% [\d,]+/[\d,]+ tokens, [\d,]+ tok/s, ETA ", re.MULTILINE)


@pytest.fixture(scope="module")
def env():
    """Environment of the `harness run` processes (the corpus cache is the session's: tests/conftest.py)."""
    if not SAMPLE.is_dir():
        pytest.fail(f"sample corpus {SAMPLE} absent (../shared/data/fineweb_edu_sample)")
    return {k: v for k, v in os.environ.items() if k != console.PROGRESS_ENV}


def run_cmd(results: Path, budget: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "harness",
        "run",
        "--variant",
        "rd_attnres",
        "--size",
        "tiny",
        "--seed",
        "0",
        "--budget-tokens",
        str(budget),
        "--corpus",
        str(SAMPLE),
        "--results",
        str(results),
        "--threads",
        "1",
        *TRAIN,
    ]


@pytest.fixture
def term():
    t = Terminal()
    yield t
    t.close()


def test_progress_mode_values(monkeypatch):
    monkeypatch.delenv(console.PROGRESS_ENV, raising=False)
    assert console.progress_mode() == "auto"
    for value, mode in (("lines", "lines"), (" OFF ", "off"), ("", "auto")):
        monkeypatch.setenv(console.PROGRESS_ENV, value)
        assert console.progress_mode() == mode
    monkeypatch.setenv(console.PROGRESS_ENV, "bars")
    with pytest.raises(
        ValueError, match=r"\$HARNESS_PROGRESS='bars' not understood; allowed: auto, lines, off"
    ):
        console.progress_mode()


def test_a_bad_progress_mode_is_one_line_before_anything_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(console.PROGRESS_ENV, "fancy")
    for argv in (
        [
            "run",
            "--variant",
            "rd_attnres",
            "--size",
            "tiny",
            "--seed",
            "0",
            "--budget-tokens",
            "1024",
            "--corpus",
            str(SAMPLE),
        ],
        ["work"],
    ):
        assert cli([*argv, "--results", str(tmp_path / "r")]) == 2
        err = capsys.readouterr().err
        assert (
            err.count("\n") == 1
            and "$HARNESS_PROGRESS='fancy' not understood; allowed: auto, lines, off" in err
        )
    assert not (tmp_path / "r" / "runs").exists()


def test_shared_terminal_counts_the_live_processes_on_it(tmp_path):
    code = (
        "import sys, time\nfrom pathlib import Path\nfrom harness.common.console import SharedTerminal\n"
        f"t = SharedTerminal(folder=Path({str(tmp_path)!r})).__enter__()\nprint('ready', flush=True)\n"
        "time.sleep(600)\n"
    )
    with console.SharedTerminal(folder=tmp_path) as me:
        assert me.others() == 0
        others = [
            subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
            for _ in range(2)
        ]
        try:
            assert [p.stdout.readline().strip() for p in others] == ["ready", "ready"]
            assert me.others() == 2
            others[0].kill()
            others[0].wait()
            assert me.others() == 1  # a dead process's lock is free: it no longer counts
        finally:
            for p in others:
                p.kill()
                p.wait()
        assert me.others() == 0
    assert not (tmp_path / f"{os.getpid()}.lock").exists()
    with open(os.devnull, "w") as not_a_terminal, console.SharedTerminal(not_a_terminal) as t:
        assert t.folder is None and t.others() == 0  # nothing to share: nothing registered


@pytest.mark.slow  # 7 s on 2 cores: out of the developer's loop (`pytest -m "not slow"`)
def test_alone_on_a_terminal_a_bar(tmp_path, env, term):
    p = term.start(run_cmd(tmp_path, 6 * 1024), env)
    out = read_until(term.master, p, lambda text: False)
    assert p.wait(timeout=300) == 0, out[-3000:]
    assert "\r" in out and re.search(r"rd_attnres s0: +\d+%", out), out[-2000:]  # tqdm redraws its line
    assert not LINE.search(out)


@pytest.mark.slow  # 6 s on 2 cores: out of the developer's loop (`pytest -m "not slow"`)
def test_a_terminal_shared_with_another_worker_gets_complete_lines(tmp_path, env, term):
    term.other_worker(env)
    p = term.start(run_cmd(tmp_path, 6 * 1024), env)
    out = read_until(term.master, p, lambda text: False)
    assert p.wait(timeout=300) == 0, out[-3000:]
    lines = LINE.findall(out)
    assert len(lines) >= 5, out[-3000:]  # one per step here (a step is more than 10 % of the budget)
    assert "\r" not in out.replace("\r\n", "\n")  # no carriage-return redraws: every write is a whole line


@pytest.mark.slow  # 9 s on 2 cores: out of the developer's loop (`pytest -m "not slow"`)
def test_a_bar_gives_way_to_lines_when_a_second_worker_starts(tmp_path, env, term):
    p = term.start(run_cmd(tmp_path, 400 * 1024), env)  # long enough to be stopped midway
    before = read_until(term.master, p, lambda text: re.search(r"rd_attnres s0: +\d+%", text) is not None)
    assert "\r" in before, before[-3000:]
    term.other_worker(env)
    after = read_until(term.master, p, lambda text: len(LINE.findall(text)) >= 2)
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=120)
    assert len(LINE.findall(after)) >= 2, after[-3000:]
    tail = after[after.index("[rd_attnres s0]") :]
    assert "\r" not in tail.replace("\r\n", "\n")  # once switched, lines only


@pytest.mark.slow  # 10 s on 2 cores: out of the developer's loop (`pytest -m "not slow"`)
def test_off_a_terminal_lines_and_off_means_none(tmp_path, env):
    proc = warm.run(run_cmd(tmp_path, 6 * 1024), capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(LINE.findall(proc.stderr)) >= 5 and "\r" not in proc.stderr
    proc = warm.run(
        [*run_cmd(tmp_path, 6 * 1024), "--force"],
        capture_output=True,
        text=True,
        env={**env, console.PROGRESS_ENV: "off"},
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not LINE.findall(proc.stderr) and "done: val_nll" in proc.stderr


@pytest.mark.slow  # 11 s on 2 cores: out of the developer's loop (`pytest -m "not slow"`)
def test_a_deferred_ingest_is_said_only_with_verbose(tmp_path, env):
    """Another process holds the results database: the run's result file is written and its ingest
    deferred; that is no news without --verbose."""
    import duckdb

    from harness.store.store import Store

    Store(tmp_path).query("select 1")  # make the database
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import duckdb, sys, time\n"
                f"con = duckdb.connect({str(tmp_path / 'harness.duckdb')!r})\nprint('ready', flush=True)\ntime.sleep(600)\n"
            ),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "ready"
        quiet = warm.run(run_cmd(tmp_path, 6 * 1024), capture_output=True, text=True, env=env, timeout=300)
        loud = warm.run(
            [*run_cmd(tmp_path, 6 * 1024), "--force", "--verbose"],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
    finally:
        holder.kill()
        holder.wait()
    assert quiet.returncode == 0 == loud.returncode, quiet.stderr[-2000:] + loud.stderr[-2000:]
    assert "deferred" not in quiet.stderr and "Error" not in quiet.stderr and "done: val_nll" in quiet.stderr
    assert "[rd_attnres s0] result saved; DuckDB ingest deferred to the next reader" in loud.stderr
    assert (tmp_path / "runs").is_dir() and len(list((tmp_path / "runs").glob("*.json"))) == 1
    con = duckdb.connect(str(tmp_path / "harness.duckdb"), read_only=True)
    assert con.execute("select count(*) from runs").fetchone() == (
        0,
    )  # not ingested yet: the next reader does
    con.close()
    assert Store(tmp_path).query("select count(*) as n from final")["n"].to_list() == [1]


def test_the_eta_counts_optimiser_steps_only():
    """Issue 66 row 3: tokens/s and the ETA count the optimiser steps alone (live.StepRate): the set-up
    before the first step is left out, and the first step's warm-up only counts until a second is timed."""
    from harness.common.live import StepRate

    rate = StepRate()
    assert rate.tokens_per_s() is None and rate.eta_s(4096) is None  # no step yet: no rate, no ETA
    rate.add(1024, 4.0)  # the first step, with its warm-up: the only measure there is
    assert rate.tokens_per_s() == 256.0 and rate.eta_s(4096) == 16.0
    rate.add(1024, 0.5)
    rate.add(1024, 0.25)  # from the second step on: the later steps' tokens over their seconds
    assert rate.tokens_per_s() == 2048 / 0.75
    assert rate.eta_s(6144) == 6144 * 0.75 / 2048 and rate.eta_s(-5) == 0.0


class _Clock:
    """A clock the test moves by hand (seconds), standing for time.perf_counter in harness.train.progress."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_first_progress_line_leaves_the_set_up_out(monkeypatch, capsys):
    """The issue's case: 30 s of set-up (loading, the corpus, Lightning's start) before a run's first step;
    the steps then take 1 s per 1,024 tokens. The first line and the published progress say 1,024 tok/s
    and 7 s left for 7 more steps, not 1,024 / 31 s = 33 tok/s and 217 s (the old rate over wall time)."""
    from types import SimpleNamespace

    from harness.common import live
    from harness.train import progress as progress_mod
    from harness.train.progress import RunCallback
    from harness.train.schedule import StepPlan
    from harness.train.timing import RunTimes

    clock = _Clock()
    monkeypatch.setattr(progress_mod.time, "perf_counter", clock)
    monkeypatch.setenv(console.PROGRESS_ENV, "lines")
    plan = StepPlan(batch_size=1, batch_tokens=1024, total_steps=8, eval_every=0, ckpt_every=0, log_every=1)
    cb = RunCallback(
        plan, label="rd_attnres s0", budget_tokens=8192, progress=True, save_checkpoint=None, run_id="r"
    )
    module = SimpleNamespace(
        tokens_seen=0,
        times=RunTimes(),
        diverged=False,
        last_eval=None,
        record_train_step=lambda: None,
        poll_divergence=lambda: False,
    )
    trainer = SimpleNamespace(global_step=0, world_size=1, is_global_zero=True)
    cb.on_train_start(trainer, module)
    clock.now = 30.0  # the set-up: Lightning's start, the data loader's first batch
    for _ in range(2):
        cb.on_train_batch_start(trainer, module, None, 0)
        clock.now += 1.0
        module.tokens_seen += 1024
        trainer.global_step += 1
        cb.on_train_batch_end(trainer, module, None, None, 0)
    cb._close()
    first = capsys.readouterr().err.splitlines()[0]
    assert first == "[rd_attnres s0]  12% 1,024/8,192 tokens, 1,024 tok/s, ETA 7 s", first
    published = live.current("r")
    assert published.tokens == 2048 and published.tokens_per_s == 1024.0
    assert published.eta_s(published.at) == 6.0
    live.publish(None)
