"""The environment's faults (issue 29): a full disk, a damaged database, a lost or mistyped
results folder, NaN options, a huge query, two `harness queue` at once, workers on different
results folders. Real commands as subprocesses, real tmpfs mounts, a real PostgreSQL server.

``python -m pytest -q tests/test_env_faults.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from test_faults import grid_file, harness, one_line_error


@pytest.mark.parametrize("option", ["--lease-s", "--poll-s", "--storage-retry-s"])
@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_float_options_refuse_nan_and_infinities(tmp_path, option, value):
    one_line_error(harness("work", "--results", str(tmp_path), f"{option}={value}"),
                   f"{option} {value}: must be a finite number")


def test_sql_lock_timeout_refuses_nan(tmp_path):
    one_line_error(harness("sql", "select 1", "--results", str(tmp_path), "--lock-timeout", "nan"),
                   "--lock-timeout nan: must be a finite number")


def test_work_refuses_a_results_folder_that_does_not_exist_unless_create(tmp_path):
    missing = tmp_path / "no" / "such" / "path"
    one_line_error(harness("work", "--results", str(missing)), f"results folder '{missing}' does not exist",
                   "--create")
    one_line_error(harness("work", env={"HARNESS_RESULTS": str(missing)}), "does not exist")
    assert not (tmp_path / "no").exists()
    proc = harness("work", "--results", str(missing), "--create")
    assert proc.returncode == 0 and "nothing queued" in proc.stdout, proc.stderr
    assert missing.is_dir()
