"""harness retrain --report-only states the workers and threads the runs trained with, not its own options.

A tiny grid (2 variants x 2 seeds) archived and re-trained with 1 worker x 1 thread; a --report-only call with
--workers 2 --threads 2 must still say 1 and 1, read from what was recorded when the runs trained (each result
file's environment record; the workers: the retrain folder's record of the call that trained them). Where the
runs differ the output gives each value with its count of runs; where nothing recorded it, "not recorded". The
code before this said "2 workers x 2 threads" and wrote threads_per_worker=2 (this call's options).

    python -m pytest -q tests/e2e/test_retrain_report_only.py
"""

from __future__ import annotations

import csv
import json

import pytest
from test_retrain import SAMPLE, harness  # tests/ and its folders are on sys.path under pytest

from harness.train.retrain import MARKER


@pytest.mark.slow  # re-trains 4 tiny runs (their archive: conftest.aa_tiny_archive)
@pytest.mark.skipif(not SAMPLE.is_dir(), reason="sample corpus absent")
def test_report_only_states_the_workers_and_threads_the_runs_trained_with(tmp_path, aa_tiny_archive):
    archive, env = aa_tiny_archive  # trained once per test process (conftest)
    again = tmp_path / "again"
    base = ["retrain", str(archive), "--pairs", "2", "--results", str(again), "--corpus", str(SAMPLE)]
    harness(*base, "--workers", "1", "--threads", "1", "--quiet", env=env)

    csv_path, json_path = tmp_path / "ro.csv", tmp_path / "ro.json"
    report = [*base, "--report-only", "--workers", "2", "--threads", "2"]
    report += ["--csv", str(csv_path), "--json", str(json_path)]
    out = harness(*report, env=env).stdout
    assert "workers: 1 (as trained), threads per worker: 1 (as trained); training commit " in out, out
    assert "2 workers" not in out and "x 2 threads" not in out, out
    rows = list(csv.DictReader(csv_path.open()))
    assert {r["threads_per_worker"] for r in rows} == {"1"}
    machine = json.loads(json_path.read_text())["machine"]
    assert (machine["workers"], machine["threads_per_worker"], machine["settings"]) == (1, 1, "as trained")

    # one run's record says 2 threads, and the folder no longer records the workers: each is said as it is
    first = sorted((again / "runs").glob("*.json"))[0]
    result = json.loads(first.read_text())
    result["run"]["environment"]["run"]["threads"] = 2
    first.write_text(json.dumps(result))
    marker = json.loads((again / MARKER).read_text())
    (again / MARKER).write_text(json.dumps({"archive_sha256": marker["archive_sha256"]}) + "\n")
    out = harness(*report, env=env).stdout
    said = "workers: not recorded, threads per worker: 1 (3 runs), 2 (1 run) (as trained: the runs differ);"
    assert said in out, out
    rows = list(csv.DictReader(csv_path.open()))
    assert {r["threads_per_worker"] for r in rows} == {"1 (3 runs), 2 (1 run)"}
    machine = json.loads(json_path.read_text())["machine"]
    assert (machine["workers"], machine["threads_per_worker"]) == ("unknown", "1 (3 runs), 2 (1 run)")
