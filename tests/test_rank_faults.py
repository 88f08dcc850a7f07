"""Faults of the machine under one run on several ranks (issue 44, rows 4 and 9), on the CPU with gloo.

A child rank SIGKILLed during the run's final evaluation (its last collective) never leaves a result
recorded as done: the run is released as the machine's fault (no retry spent) and the worker stops with
one line. The kill comes at a deterministic point: a ``sitecustomize`` on the test's ``PYTHONPATH``
wraps, in the child rank only, the evaluation's all-reduce (:func:`harness.train.ranks.sum_over_ranks`,
as :mod:`harness.train.lit` calls it) or :func:`harness.train.runner.fit`, so that it SIGKILLs itself
right after the final evaluation's all-reduce or its fit returned, while rank 0 goes on to record.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.config import RunConfig
from harness.scheduling.queue import RunQueue

ROOT = Path(__file__).resolve().parents[1]
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
def _one_corpus(tmp_path_factory):
    """One prepared corpus for the module's runs ($HARNESS_CACHE, inherited by the subprocesses)."""
    if not SAMPLE.is_dir():
        pytest.fail(f"sample corpus {SAMPLE} absent")
    cache = os.environ.get("HARNESS_CACHE")
    os.environ["HARNESS_CACHE"] = cache or str(tmp_path_factory.mktemp("cache"))
    yield
    if cache is None:
        os.environ.pop("HARNESS_CACHE")


def _work(results: Path, *extra: str, env: dict) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "harness", "work", "--results", str(results), "--accelerator", "cpu"]
    return subprocess.run(
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
