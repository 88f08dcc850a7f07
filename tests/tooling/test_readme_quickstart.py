"""The README's quickstart block runs as written (issue 31): a new user's first screen, end to end.

The fenced block after the README's ``<!-- quickstart`` marker is run line by line by bash from
the repository root (where its relative paths point), with ``harness`` the command of the Python
running the tests (so the checkout under test is what runs) and ``. .venv/bin/activate`` left out
(the environment is already this one). Its results go to a temporary folder through
``$HARNESS_RESULTS`` (the block names none), so the checkout stays clean. It must end with the
ad-hoc run in the store, the report of ``quickstart_tiny`` written, and the plan's table printed:
10 tiny runs, 2 min 14 s on 2 busy cores (README).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT.parent / "shared/data/fineweb_edu_sample"
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not SAMPLE.is_dir(), reason=f"sample corpus {SAMPLE} absent"),
]


def quickstart_block() -> str:
    """The first ```bash block after the ``<!-- quickstart`` marker of README.md."""
    text = (ROOT / "README.md").read_text()
    after = text.split("<!-- quickstart", 1)[1]
    return re.search(r"```bash\n(.*?)```", after, re.S).group(1)


def test_the_quickstart_block_names_the_commands_a_new_user_runs():
    block = quickstart_block()
    for command in (
        "harness run ",
        "harness queue ablations/quickstart_tiny.toml",
        "harness work",
        "harness report --grid quickstart_tiny",
        "harness plan ablations/quickstart_tiny.toml",
    ):
        assert command in block, command
    # a tiny model trains faster on one thread than on torch's default pool, which on a busy machine waits
    # on other jobs (issue 66 row 3: 35 s against 2.7 s on a loaded 2-core machine): both training lines say so
    training = [line for line in block.splitlines() if line.startswith(("harness run ", "harness work"))]
    assert len(training) == 2 and all("--threads 1" in line for line in training), training


def test_readme_quickstart_runs_as_written(tmp_path):
    block = quickstart_block()
    script = "\n".join(line for line in block.splitlines() if not line.startswith(". .venv/bin/activate"))
    prelude = f'set -euo pipefail\nharness() {{ "{sys.executable}" -m harness "$@"; }}\n'
    env = {
        **os.environ,
        "HARNESS_RESULTS": str(tmp_path / "results"),
        "HARNESS_CACHE": str(tmp_path / "cache"),
        "HARNESS_PROGRESS": "lines",
        "PYTHONPATH": str(ROOT),
    }
    env.pop("HARNESS_SPEC_PATH", None)
    proc = subprocess.run(
        ["bash", "-c", prelude + script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    report = tmp_path / "results" / "reports" / "quickstart_tiny"
    for name in ("report.html", "report.md", "stats.csv", "pairs.csv"):
        assert (report / name).stat().st_size > 0, name
    md = (report / "report.md").read_text()
    assert "All 9 runs of the grid finished (9 done)." in md
    verdict = re.search(
        r"Size tiny, budget 32_768 tokens: (gain established|gain absent \(< 0\.001 nats/token\)"
        r"|undecided)\.",
        md,
    )
    assert verdict, md[:2000]
    assert re.search(r"^rd_attnres - block_attnres +tiny +32_768 ", proc.stdout, re.M), proc.stdout[-3000:]
    assert "seeds needed" in proc.stdout
    with duckdb.connect(str(tmp_path / "results" / "harness.duckdb"), read_only=True) as con:
        rows = con.execute("select grid, count(*) from final group by grid order by grid").fetchall()
    assert rows == [("adhoc", 1), ("quickstart_tiny", 9)]
