"""Faults of the machine under one run on several ranks (issue 44, rows 4 and 9), on the CPU with gloo.

A stop request reaches every rank within seconds, not at the next log step: rank 0's decisions are read
at steps its clock picks (:mod:`harness.train.decisions`), shown with a fake clock and by a real 2-rank
run whose log interval is 1,000 steps, stopped at its first steps.

A child rank SIGKILLed during the run's final evaluation (its last collective) never leaves a result
recorded as done: the run is released as the machine's fault (no retry spent) and the worker stops with
one line. The kill comes at a deterministic point: a ``sitecustomize`` on the test's ``PYTHONPATH``
wraps, in the child rank only, the evaluation's all-reduce (:func:`harness.train.ranks.sum_over_ranks`,
as :mod:`harness.train.lit` calls it) or :func:`harness.train.runner.fit`, so that it SIGKILLs itself
right after the final evaluation's all-reduce or its fit returned, while rank 0 goes on to record.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import warm
from test_ranks import rank_children  # tests/ is on sys.path under pytest (no package)

from harness.design.config import RunConfig
from harness.scheduling.queue.run_queue import RunQueue
from harness.train.checkpoint import checkpoint_dir, resume_step
from harness.train.decisions import DecisionSchedule

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT.parent / "shared/data/fineweb_edu_sample"
TRAIN = {"vocab_size": 512, "batch_tokens": 1024, "eval_tokens": 2048, "lr": 3e-3}
STEPS = 3

# in rank 1 only: SIGKILL itself at $KILL_AT: "eval", once the all-reduce of the final evaluation (step
# STEPS) is done; "end", once its fit returned (every collective of the fit done, before the run's end)
KILL = f"""
import os, signal
if os.environ.get("RANK") == "1":
    import harness.train.lit as lit
    import harness.train.runner as runner

    _sum, _evaluate, _fit = lit.sum_over_ranks, lit.LitLM._evaluate, runner.fit

    def sum_over_ranks(tensors, count):
        out = _sum(tensors, count)
        if os.environ["KILL_AT"] == "eval" and lit.LitLM.eval_step == {STEPS}:
            os.kill(os.getpid(), signal.SIGKILL)
        return out

    def evaluate_at(self, batches):
        lit.LitLM.eval_step = int(self.global_step)
        return _evaluate(self, batches)

    def fit(run):
        out = _fit(run)
        if os.environ["KILL_AT"] == "end":
            os.kill(os.getpid(), signal.SIGKILL)
        return out

    lit.sum_over_ranks, lit.LitLM._evaluate, runner.fit = sum_over_ranks, evaluate_at, fit
"""


@pytest.fixture(scope="module", autouse=True)
def _sample_corpus():
    """The sample text is there (its prepared corpus is the session's cache, inherited by the subprocesses:
    tests/conftest.py)."""
    if not SAMPLE.is_dir():
        pytest.fail(f"sample corpus {SAMPLE} absent")


def _work(results: Path, *extra: str, env: dict) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "harness", "work", "--results", str(results), "--accelerator", "cpu"]
    return warm.run(
        [*command, "--threads", "1", *extra], env=env, capture_output=True, text=True, timeout=600
    )


@pytest.mark.slow  # a 2-rank run of 3 tiny steps, about 30 s on 2 shared cores
@pytest.mark.parametrize("kill_at", ["eval", "end"])
def test_a_child_rank_killed_in_the_final_evaluation_releases_the_run_and_records_nothing(tmp_path, kill_at):
    """``eval``: killed inside the final evaluation, after its all-reduce; ``end``: after its fit returned,
    every collective of the fit done, so rank 0 records unless it makes sure every rank got through."""
    results = tmp_path / "results"
    q = RunQueue.open(None, results)
    config = RunConfig.adhoc("rd_attnres", "tiny", 0, STEPS * 1024, str(SAMPLE), grid="g", train=TRAIN)
    q.enqueue([config])
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(KILL)
    env = {
        **os.environ,
        "PYTHONPATH": f"{tmp_path / 'site'}:{ROOT}",
        "HARNESS_PROGRESS": "off",
        "KILL_AT": kill_at,
    }
    out = _work(results, "--devices", "2", env=env)
    assert out.returncode == 1, out.stdout + out.stderr
    (line,) = [x for x in out.stderr.splitlines() if x.startswith("harness work: error:")]
    assert line.startswith(
        "harness work: error: rank 1 died (killed by SIGKILL, exit status -9) while the run trained; "
        f"{config.run_id} released and queued again (no retry spent); the worker stops"
    ), line
    assert "Traceback" not in out.stderr
    state = q.runs()[config.run_id]
    assert (state.state, state.attempt) == ("queued", 2)
    assert all(t.user_attrs.get("failures", 0) == 0 for t in state.trials)  # no retry spent
    assert not list((results / "runs").glob("*.json"))  # no result recorded, done or failed


def _decision_steps(step_s: list[float], log_every: int) -> tuple[list[int], list[float]]:
    """The decision steps of a run whose step ``i`` (1-based) takes ``step_s[i - 1]`` seconds by a fake
    clock (rank 0's schedule; the gap it names is what every rank agrees to), and the seconds between."""
    now = [0.0]
    schedule = DecisionSchedule(log_every, clock=lambda: now[0])
    steps, waits, last = [], [], 0.0
    for step, seconds in enumerate(step_s, start=1):
        now[0] += seconds
        if schedule.due(step):
            schedule.agree(step, schedule.gap(step))
            steps.append(step)
            waits.append(now[0] - last)
            last = now[0]
    return steps, waits


@pytest.mark.parametrize("step_s", [0.001, 0.4, 3.0, 40.0])
def test_rank_0s_decisions_are_read_every_few_seconds_whatever_a_step_costs(step_s):
    steps, waits = _decision_steps([step_s] * 3000, log_every=1000)
    # after the first two steps (no rate yet), at most DECISION_EVERY_S (5 s) apart, or every step
    assert max(waits[2:]) <= max(5.0, step_s) + 1e-9, (step_s, max(waits[2:]))
    if step_s == 0.001:  # fast steps: only the log steps (and the two that measure the rate)
        assert steps == [1, 2, 1000, 2000, 3000]
    if step_s == 0.4:  # 12 steps of 0.4 s: 4.8 s
        assert steps[:4] == [1, 2, 14, 26] and waits[3] == pytest.approx(4.8)
    if step_s >= 3.0:
        assert steps == list(range(1, 3001))


def test_a_slower_step_rate_shortens_the_gap_from_the_next_reading_on():
    steps, waits = _decision_steps([0.1] * 200 + [1.0] * 100, log_every=1000)
    assert all(w <= 5.0 + 1e-9 for w in waits[2:] if w < 6.0)  # at the fast rate: 50 steps, 5 s
    # one gap straddles the change (50 steps chosen at 0.1 s, some taken at 1 s), then 5 steps of 1 s
    after = [w for s, w in zip(steps, waits, strict=True) if s > 260]
    assert after and all(w == pytest.approx(5.0) for w in after), after


@pytest.mark.slow  # a 2-rank worker stopped at its first steps, about 30 s on 2 shared cores
def test_a_stop_under_two_ranks_takes_effect_before_the_first_log_step_and_releases_the_run(tmp_path):
    """100,000 steps: the log interval is 1,000 steps, where the stop was read before; SIGTERM once the
    child rank runs: the run stops within its first steps with a checkpoint and is released."""
    results = tmp_path / "results"
    q = RunQueue.open(None, results)
    config = RunConfig.adhoc("rd_attnres", "tiny", 5, 100_000 * 1024, str(SAMPLE), grid="g", train=TRAIN)
    q.enqueue([config])
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HARNESS_PROGRESS": "off"}
    command = [sys.executable, "-m", "harness", "work", "--results", str(results), "--accelerator", "cpu"]
    p = warm.popen(
        [*command, "--threads", "1", "--devices", "2"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 600  # a hang guard, not a timing goal
    while not list(checkpoint_dir(results, config.run_id).glob("e*/config.json")) or not rank_children(
        results
    ):
        assert p.poll() is None and time.monotonic() < deadline, p.communicate()
        time.sleep(0.2)
    p.send_signal(signal.SIGTERM)
    stdout, stderr = p.communicate(timeout=600)
    assert p.returncode == 130, stdout + stderr
    state = q.runs()[config.run_id]
    assert (state.state, state.attempt) == ("queued", 2), stdout
    assert all(t.user_attrs.get("failures", 0) == 0 for t in state.trials)
    (ckpt,) = checkpoint_dir(results, config.run_id).glob("e*/last.ckpt")
    step = resume_step(ckpt.parent)
    assert step is not None and 1 <= step < 1000, step  # before: read first at step 1,000
    assert not rank_children(results)
