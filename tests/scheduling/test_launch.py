"""`harness launch` (DESIGN section 10): workers through submitit on a real one-node SLURM
cluster (tests/services.py) and as local processes; a preempted task checkpoints, releases
its run, is requeued and the run ends with the NLL of an uninterrupted run; `harness status`
shows the jobs.

Real training on the FineWeb-Edu sample (the chaos grid's tiny cells, chaos_reference), real
`harness` subprocesses, real sbatch/squeue/scontrol/scancel. About 2 minutes on 2 CPU cores.

Run: python -m pytest -q tests/scheduling/test_launch.py
"""

from __future__ import annotations

import datetime as dt
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import warm
from fstree import unchanged
from optuna.trial import TrialState

from harness.cli import main as cli
from harness.scheduling.grids.grid import load_grid
from harness.scheduling.launch import Resources, parse_sbatch_line, read_records
from harness.scheduling.queue.lease import pid_alive
from harness.scheduling.queue.run_queue import RunQueue
from harness.train.execution import ExecutionSettings
from harness.train.hardware_override import HARDWARE_CLASS_ENV

import chaos
from queue_stubs import configs

SRUN_WARNING = "The `srun` command is available on your system but is not used"


@pytest.fixture(scope="module")
def cache() -> Path:
    """The session's prepared-corpus cache ($HARNESS_CACHE, tests/conftest.py), passed on to the workers of
    environments built from scratch (SLURM's): the BPE is trained once."""
    if not chaos.SAMPLE.is_dir():
        pytest.skip(f"sample corpus absent: {chaos.SAMPLE}")
    return Path(os.environ["HARNESS_CACHE"])


def launch(results: Path, *args: str, env: dict) -> subprocess.CompletedProcess:
    proc = warm.run(
        chaos.harness("launch", "--results", str(results), *args),
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def status(results: Path, env: dict) -> str:
    proc = warm.run(
        chaos.harness("status", "--results", str(results)),
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def one_complete_trial_each(results: Path) -> dict[str, int]:
    return {
        rid: sum(t.state == TrialState.COMPLETE for t in r.trials)
        for rid, r in RunQueue.open(None, results, create=False).runs().items()
    }


def wait_for(what: str, ready, timeout_s: float = 240, every_s: float = 0.2):
    deadline = time.monotonic() + timeout_s
    while not (got := ready()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(every_s)
    return got


# ----------------------------------------------------------------------------- options


def test_sbatch_lines_and_resources_are_checked():
    assert parse_sbatch_line("--qos=high") == ("qos", "high")
    assert parse_sbatch_line("#SBATCH --account my-acct") == ("account", "my-acct")
    assert parse_sbatch_line("exclusive") == ("exclusive", True)
    assert parse_sbatch_line("--constraint=a100|h100") == ("constraint", "a100|h100")
    with pytest.raises(ValueError, match=r"--sbatch '--=x': expected an sbatch option"):
        parse_sbatch_line("--=x")
    r = Resources(
        workers=3,
        gpus_per_worker=1,
        cpus_per_worker=8,
        mem="64G",
        time_min=240,
        partition="gpu",
        sbatch={"qos": "high"},
    )
    assert r.slurm_parameters() == {
        "job_name": "harness-work",
        "time": 240,
        "signal_delay_s": 90,
        "cpus_per_task": 8,
        "mem": "64G",
        "partition": "gpu",
        "gpus_per_node": 1,
        "stderr_to_stdout": True,
        "additional_parameters": {"qos": "high"},
    }
    assert [r.local_parameters(i)["visible_gpus"] for i in range(3)] == [(0,), (1,), (2,)]
    two = Resources(workers=2, gpus_per_worker=2)  # each worker's runs on 2 ranks, one per GPU
    assert [two.local_parameters(i)["visible_gpus"] for i in range(2)] == [(0, 1), (2, 3)]
    for bad, message in [
        (dict(workers=0), r"--workers 0: must be at least 1"),
        (dict(workers=1, mem="lots"), r"--mem 'lots': expected sbatch's form"),
        (dict(workers=1, time_min=1, signal_delay_s=60), r"--signal-delay-s 60: must be shorter"),
    ]:
        with pytest.raises(ValueError, match=message):
            Resources(**bad).check()


@pytest.mark.parametrize(
    "case, args, message",
    [
        ("no queue", [], r"no queue at .*queue\.journal; queue a grid first"),
        ("nothing queued", [], r"nothing queued in .* \(1 runs, none waiting\)"),
        ("unknown grid", ["--grid", "nope"], r"no runs of grid 'nope' in .*; grids there: g"),
        ("negative gpus", ["--gpus-per-worker", "-1"], r"--gpus-per-worker -1: must be >= 0"),
        ("bad memory", ["--mem", "2 GB"], r"--mem '2 GB': expected sbatch's form"),
        ("sbatch, local", ["--sbatch=--qos=high"], r"--sbatch: only with --executor slurm"),
    ],
)
def test_launch_refuses_bad_input_in_one_line_and_submits_nothing(tmp_path, capsys, case, args, message):
    results = tmp_path / "results"
    if case != "no queue":
        queue = RunQueue.open(None, results)
        queue.enqueue(configs(seeds=(0,), variants=("block_attnres",)))
        if case == "nothing queued":
            queue.complete(queue.claim(), "done", value=3.0, wall_s=1.0)
    assert cli(["launch", "--executor", "local", "--results", str(results), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert re.fullmatch(rf"harness launch: error: {message}.*", err) and "\n" not in err, err
    assert not (results / "launches").exists() or not list((results / "launches").iterdir())


def test_launch_refuses_a_bad_hardware_class_before_starting_a_worker(tmp_path, capsys, monkeypatch):
    """Before: rc 0, "started 1 worker(s)", the worker's log ending in a traceback. Now: the line
    `harness work` says, before anything is launched or written."""
    results = tmp_path / "results"
    RunQueue.open(None, results).enqueue(configs(seeds=(0,), variants=("block_attnres",)))
    monkeypatch.setenv(HARDWARE_CLASS_ENV, "../x")
    with unchanged(tmp_path):
        assert cli(["launch", "--executor", "local", "--workers", "1", "--results", str(results)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"harness launch: error: ${HARDWARE_CLASS_ENV}='../x': expected a short key"), err
    assert "\n" not in err


# ----------------------------------------------------------------------------- local


def test_launch_local_drains_a_grid_and_status_shows_the_workers(tmp_path, chaos_reference, cache):
    """--executor local: submitit's LocalExecutor runs 2 workers as processes on this machine; --corpus
    tells them where their machine has the corpus (here a copy at another path: the same text)."""
    grid = chaos.write_grid(tmp_path / "chaos.toml", 4)
    results = tmp_path / "results"
    chaos.queue_grid(grid, results)
    moved = shutil.copytree(chaos.SAMPLE, tmp_path / "elsewhere" / "corpus")
    env = {**os.environ, "HARNESS_CACHE": str(cache)}
    out = launch(
        results, "--executor", "local", "--workers", "2", "--threads", "1", "--corpus", str(moved), env=env
    ).stdout
    pids = re.search(r"controller pid\(s\) (\d+) (\d+);", out).groups()
    assert "4 runs queued in" in out and f"harness status --results {results}" in out
    (record,) = read_records(results)
    assert (record.executor, record.job_ids, record.command) == (
        "local",
        list(pids),
        ["--results", str(results), "--threads", "1", "--corpus", str(moved)],
    )

    wait_for("both local workers to end", lambda: not any(pid_alive(int(p)) for p in pids), every_s=0.5)
    text = status(results, env)
    assert text.count("  FINISHED  (worker trained") == 2, text
    assert sum(int(n) for n in re.findall(r"worker trained (\d) runs: \1 done", text)) == 4
    assert f"folder: {record.folder}" in text
    assert set(one_complete_trial_each(results).values()) == {1}
    values = chaos.final_values(results)
    assert values == {rid: chaos_reference[rid] for rid in values} and len(values) == 4
    logs = "".join(p.read_text() for p in Path(record.folder).glob("*_0_log.out"))
    assert logs.count("nothing queued; worker stops") == 2 and SRUN_WARNING not in logs


# ----------------------------------------------------------------------------- SLURM


def test_launch_slurm_job_array_drains_a_grid_and_status_shows_the_jobs(
    slurm, tmp_path, chaos_reference, cache
):
    grid = chaos.write_grid(tmp_path / "chaos.toml", 4)
    results = tmp_path / "results"
    chaos.queue_grid(grid, results)
    env = {**slurm.env, "HARNESS_CACHE": str(cache)}
    out = launch(
        results,
        "--executor",
        "slurm",
        "--workers",
        "2",
        "--cpus-per-worker",
        "1",
        "--mem",
        "500M",
        "--time",
        "10",
        "--partition",
        "debug",
        "--sbatch=--comment=rd-harness-test",
        env=env,
    ).stdout
    job = int(
        re.search(r"submitted 2 worker\(s\) to SLURM as job (\d+) \(tasks (\d+)_0 \2_1\)", out).group(1)
    )
    assert f"squeue -j {job}" in out and "SIGUSR2 90 s before the time limit" in out
    records = slurm.wait_job(job, timeout_s=300)
    assert [(r["JobState"], r["ExitCode"]) for r in records] == [("COMPLETED", "0:0")] * 2, records
    (record,) = read_records(results)
    script = (Path(record.folder) / f"{job}_submission.sh").read_text()
    for line in (
        "--array=0-1%2",
        "--cpus-per-task=1",
        "--mem=500M",
        "--time=10",
        "--partition=debug",
        "--signal=USR2@90",
        "--comment=rd-harness-test",
    ):
        assert f"#SBATCH {line}\n" in script, script
    text = status(results, env)
    assert re.search(rf"{record.id}: 2 worker\(s\), slurm, job {job}, launched ", text), text
    trained = [int(m) for m in re.findall(rf"    {job}_[01]  COMPLETED  \(worker trained (\d) runs", text)]
    assert len(trained) == 2 and sum(trained) == 4, text
    assert (
        set(one_complete_trial_each(results).values()) == {1} and len(one_complete_trial_each(results)) == 4
    )
    values = chaos.final_values(results)
    assert values == {rid: chaos_reference[rid] for rid in values} and len(values) == 4
    logs = "".join(p.read_text() for p in Path(record.folder).glob("*_0_log.out"))
    assert SRUN_WARNING not in logs and logs.count("Job completed successfully") == 2


PREEMPT_GRID = chaos.GRID.replace('rd_attnres = "treatment"\n', "").replace(
    "checkpoint_every_tokens = 2048", "checkpoint_every_tokens = {budget}"
)  # no checkpoint but the stops'
assert "rd_attnres" not in PREEMPT_GRID and "checkpoint_every_tokens = {budget}" in PREEMPT_GRID


def test_launch_slurm_preempted_task_checkpoints_releases_requeues_same_nll(
    slurm, tmp_path, cache, monkeypatch
):
    """A task signalled by `scancel --signal=USR1` (as submitit's pre-timeout signal would) and later
    requeued by `scontrol requeue` (SIGTERM) stops its run after the step it is in, with a
    checkpoint of that step (the grid has no periodic one), gives the run back, is requeued, and
    the run resumes each time and ends with the NLL of an uninterrupted run, bit for bit."""
    budget = 96 * 1024
    grid = tmp_path / "preempt.toml"
    grid.write_text(PREEMPT_GRID.format(name="preempt", corpus=chaos.SAMPLE, seeds=[0], budget=budget))
    (config,) = load_grid(grid).expand()
    results = tmp_path / "results"
    chaos.queue_grid(grid, results)
    env = {**slurm.env, "HARNESS_CACHE": str(cache)}
    out = launch(results, "--executor", "slurm", "--workers", "1", "--time", "10", env=env).stdout
    job = re.search(r"to SLURM as job (\d+) \(tasks \1\)", out).group(1)
    (record,) = read_records(results)
    log = Path(record.folder) / f"{job}_0_log.out"

    def text() -> str:
        return log.read_text() if log.exists() else ""

    def progress_lines() -> int:  # one every 10 % of the budget while the run trains
        return len(re.findall(r"\[block_attnres s0\] +\d+% ", text()))

    def requeued_and_lifted(n: int) -> None:
        """Wait until SLURM holds the requeued job (begin time ~2 min after a requeue), then bring that
        forward to 2 s after the requeue: slurmd refuses a job whose credential was revoked in
        the same second ("Job credential revoked"), which is why SLURM waits."""

        def pending():
            got = slurm.run("squeue", "-h", "-j", job, "-o", "%T|%r", check=False).stdout.strip()
            return got.startswith("PENDING") and got

        wait_for(f"job {job} pending after requeue {n}", pending)
        (rec,) = slurm.job(int(job))
        assert rec["Restarts"] == str(n), rec
        begin = dt.datetime.fromisoformat(rec["SubmitTime"]) + dt.timedelta(
            seconds=2
        )  # SubmitTime: the requeue
        slurm.run("scontrol", "update", f"JobId={job}", f"StartTime={begin:%Y-%m-%dT%H:%M:%S}")

    # 1: the pre-timeout path, SIGUSR1 to the task (submitit requeues it)
    wait_for("the run to train", lambda: progress_lines() >= 1)
    slurm.run("scancel", "--signal=USR1", job)
    requeued_and_lifted(1)
    # 2: the preemption path, `scontrol requeue` (SIGTERM; SLURM requeues it)
    wait_for("the run to resume", lambda: "resuming from step" in text())
    seen = progress_lines()
    wait_for("the resumed run to train", lambda: progress_lines() > seen)
    slurm.run("scontrol", "requeue", job)
    requeued_and_lifted(2)
    (final,) = slurm.wait_job(int(job), timeout_s=300)
    assert (final["JobState"], final["ExitCode"], final["Restarts"]) == ("COMPLETED", "0:0", "2"), final

    log_text = text()
    assert "worker stopped (SIGUSR1)" in log_text and "requeueing this task" in log_text
    assert "Requeued job" in log_text  # submitit's requeue (scontrol requeue of itself)
    assert "worker stopped (SIGTERM)" in log_text and "the task ends" in log_text
    steps = [int(s) for s in re.findall(r"resuming from step (\d+)", log_text)]
    total = budget // 1024
    assert len(steps) == 2 and 0 < steps[0] < steps[1] < total, steps
    (state,) = RunQueue.open(None, results, create=False).runs().values()
    endings = [t.user_attrs.get("ending") for t in sorted(state.trials, key=lambda t: t.number)]
    assert (state.state, state.attempt, endings) == ("done", 3, ["released", "released", None])
    text_status = status(results, env)
    assert re.search(rf"    {job}  COMPLETED  \(requeued 2x; worker trained 1 runs: 1 done", text_status), (
        text_status
    )

    # the same cell, trained without interruption in this process (one thread, as the worker)
    import torch

    from harness.train import train_run

    monkeypatch.setenv("HARNESS_CACHE", str(cache))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert train_run(config, tmp_path / "whole", ExecutionSettings(progress=False)) == "done"
    finally:
        torch.set_num_threads(threads)
    whole = chaos.final_values(tmp_path / "whole")[config.run_id]
    resumed = chaos.final_values(results)[config.run_id]
    print(
        f"preempted twice (resumed at steps {steps[0]} and {steps[1]} of {total}): val_nll {resumed!r}; "
        f"uninterrupted: {whole!r}"
    )
    assert resumed == whole
