"""A Ctrl-C to `harness tune` (and any command that enqueues) queues all of its trials or none (issue 53, row 9).

Two faults a terminal user can meet, each in a real `harness tune` process on real text:
- a dependency swallows the Ctrl-C before the enqueue (a ``KeyboardInterrupt`` raised inside a
  ``__del__``, a callback or an ``except BaseException`` is lost): nothing is queued, "interrupted", 130;
- the Ctrl-C lands while the journal takes the trials one append at a time: every trial is queued (the
  write is completed first), then "interrupted (... completed first)", 130; never a part of them.
The fault is injected by wrapping one real function in the child process (the swallow itself, or a
SIGINT sent from inside the write); everything else is the command as a user runs it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from harness.scheduling.queue.run_queue import RunQueue

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT.parent / "shared/data/fineweb_edu_sample"
TRIALS = 40
TUNE = [
    "tune", "--variant", "block_attnres", "--size", "tiny", "--budget-tokens", "32768",
    "--trials", str(TRIALS), "--corpus", str(SAMPLE), "--name", "cc",
]  # fmt: skip


def _tune(results: Path, inject: str) -> subprocess.CompletedProcess:
    """`harness tune` in a child process after ``inject`` (code that wraps one function) has run."""
    code = textwrap.dedent(inject) + textwrap.dedent(
        f"""
        from harness.cli import main
        raise SystemExit(main({TUNE + ["--results", str(results)]!r}))
        """
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)


def _queued(results: Path) -> int:
    if not (results / "queue.journal").exists():
        return 0
    return len(RunQueue.open(None, results, create=False).runs("tune:cc"))


def test_a_swallowed_ctrl_c_before_the_enqueue_queues_nothing(tmp_path):
    results = tmp_path / "res"
    p = _tune(
        results,
        """
        import os, signal, time
        import harness.scheduling.tuning as tuning
        real = tuning.create_or_check

        def swallowed(*args, **kwargs):  # a Ctrl-C that a dependency eats, just before the enqueue
            try:
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(2)  # the watcher thread has read the signal by now
            except KeyboardInterrupt:
                pass
            return real(*args, **kwargs)

        tuning.create_or_check = swallowed
        """,
    )
    assert (p.returncode, p.stderr.strip().splitlines()[-1]) == (130, "interrupted"), p.stderr
    assert "Traceback" not in p.stderr
    assert _queued(results) == 0


def test_a_ctrl_c_during_the_enqueue_queues_every_trial_then_says_so(tmp_path):
    results = tmp_path / "res"
    p = _tune(
        results,
        """
        import os, signal
        from optuna.storages import JournalStorage
        real = JournalStorage.create_new_trial
        calls = []

        def interrupted_write(self, *args, **kwargs):  # the Ctrl-C lands after the 5th trial's append
            calls.append(1)
            if len(calls) == 5:
                os.kill(os.getpid(), signal.SIGINT)
            return real(self, *args, **kwargs)

        JournalStorage.create_new_trial = interrupted_write
        """,
    )
    assert p.returncode == 130, p.stderr
    assert "Traceback" not in p.stderr
    assert "completed first" in p.stderr.strip().splitlines()[-1], p.stderr
    assert _queued(results) == TRIALS
