"""Issue 40 row 3: `harness queue` counts an unprepared local corpus's train split too, so a budget
above it is refused at queue time (as for a prepared corpus), not trained for ~4 epochs unwarned."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.own_cache  # its commands build their corpus in RESULTS/cache (conftest)

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT.parent / "shared" / "data" / "fineweb_edu_sample" / "fineweb_edu_sample10BT_fac250.jsonl"

GRID = """\
name = "small_corpus"
corpus = "{corpus}"
sizes = ["tiny"]
seeds = [0]
budgets_tokens = [{budget}]
[variants]
block_attnres = "parent"
[train]
vocab_size = 512
val_fraction = 0.2
{extra}
"""


def small_corpus(tmp_path: Path) -> Path:
    """The first 20 documents of the real FineWeb-Edu sample (~40k train tokens at a 512-token BPE)."""
    path = tmp_path / "small.jsonl"
    path.write_text("".join(SAMPLE.read_text().splitlines(keepends=True)[:20]))
    return path


def queue(tmp_path: Path, budget: int, extra: str = "") -> subprocess.CompletedProcess:
    grid = tmp_path / "g.toml"
    grid.write_text(GRID.format(corpus=small_corpus(tmp_path), budget=budget, extra=extra))
    cmd = [sys.executable, "-m", "harness", "queue", str(grid), "--results", str(tmp_path / "r")]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path)


def test_a_budget_above_an_unprepared_train_split_is_refused_at_queue_time(tmp_path):
    out = queue(tmp_path, 65_536)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    line = out.stderr.strip().splitlines()[-1]
    assert "budget 65,536 tokens exceeds the train split of" in line and "set max_epochs = " in line, line
    # the count is the workers' own tokenization, cached in the results folder for them
    train = int(line.split("(")[1].split(" tokens")[0].replace(",", ""))
    epochs = float(line.split("take ")[1].split(" epochs")[0])
    assert abs(epochs - 65_536 / train) < 0.01 and train < 65_536


def test_max_epochs_lets_it_queue_and_the_count_is_the_workers_cache(tmp_path):
    ok = queue(tmp_path, 65_536, "max_epochs = 5")
    assert ok.returncode == 0, ok.stderr
    # the queue-time count tokenized the corpus once, where the workers will find it
    assert len(list((tmp_path / "r").rglob("manifest.json"))) == 1  # one shard folder
