"""Trackers meeting a read-only store or a full disk (issue 45, rows 12 and 13): one line each.

Real `harness run` processes on the FineWeb-Edu sample with the trackers' real clients (MLflow's
SQLite store, TensorBoard's event writer); a read-only bind mount and a real 4 KiB tmpfs. CPU only:

    python -m pytest -q tests/train/test_trackers_faults.py
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from test_env_faults import tmpfs  # noqa: F401 -- the fixture: a real tmpfs mount
from test_faults import harness

SAMPLE = Path(__file__).resolve().parents[3] / "shared/data/fineweb_edu_sample"


def _run(results: Path, logger: str) -> subprocess.CompletedProcess:
    """One tiny run (4 steps of 1,024 tokens, an evaluation after each) streamed to ``logger``."""
    sets = ["vocab_size=512", "batch_tokens=1024", "eval_tokens=1024", "eval_every_tokens=1024"]
    return harness(
        "run", "--variant", "block_attnres", "--size", "tiny", "--seed", "0", "--budget-tokens", "4096",
        "--corpus", str(SAMPLE), "--results", str(results), "--threads", "1", "--quiet", "--logger", logger,
        *[a for s in sets for a in ("--set", s)],
        env={"MLFLOW_TRACKING_URI": ""},
    )  # fmt: skip


@pytest.fixture
def read_only_file():
    """``read_only_file(path)``: ``path`` made read-only by a bind mount (root too cannot write it)."""
    mounted = []

    def make(path: Path) -> None:
        for cmd in (["mount", "--bind", str(path), str(path)], ["mount", "-o", "remount,ro,bind", str(path)]):
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode:
                pytest.fail(f"cannot make {path} read-only: {proc.stderr}", pytrace=False)
            if cmd[1] == "--bind":
                mounted.append(path)

    yield make
    for path in mounted:
        subprocess.run(["umount", "-l", str(path)], check=False)


@pytest.mark.slow
def test_a_read_only_mlflow_store_is_one_warning_line_and_the_run_is_done(tmp_path, read_only_file):
    """Row 12: not MLflow's logged traceback and SQL (97 lines): one line naming the root cause."""
    import mlflow

    results = tmp_path / "results"
    results.mkdir()
    store = results / "mlflow.db"
    mlflow.MlflowClient(tracking_uri=f"sqlite:///{store}").create_experiment("adhoc")  # tables, experiment
    read_only_file(store)
    proc = _run(results, "mlflow")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == (
        "warning: logger mlflow could not start (OperationalError: attempt to write a readonly database); "
        "the run goes on without it\n"
    )
    assert proc.stdout.strip().endswith(": done")


@pytest.mark.slow
def test_a_full_disk_under_tensorboard_is_the_disk_full_line_only(tmp_path, tmpfs):  # noqa: F811
    """Row 13: TensorBoard's event files on a full 4 KiB tmpfs (its writer thread meets ENOSPC when it
    flushes, here as the run ends): no writer-thread traceback, no `logger tensorboard failed
    (ValueError: you tried to log ...)`: one disk-full line naming the folder; the run is done."""
    results = tmp_path / "results"
    results.mkdir()
    (results / "tb").symlink_to(tmpfs("4k"))
    proc = _run(results, "tensorboard")
    assert proc.returncode == 0, proc.stderr
    folder = f"{results.resolve()}/tb/adhoc/adhoc%3Atiny%3Ablock_attnres%3As0%3A4096%3A"
    assert proc.stderr.startswith(f"warning: logger tensorboard: disk full: {folder}"), proc.stderr
    assert proc.stderr.endswith(
        " (0 B free); its files end early (the run is done; its results are in DuckDB)\n"
    ), proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stdout.strip().endswith(": done")
