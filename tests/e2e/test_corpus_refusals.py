"""What `harness queue` refuses about a corpus, `work`, `launch`, `topup` and `import` refuse too, before
they claim or write anything, and a corpus error never spends a retry (harness/corpus/locate.py, spec.py).

Real commands in process on real FineWeb-Edu text copied to a temporary folder; each refusal is one
line, and the folder tree is the same before and after it (tests/fstree.py).

    python -m pytest -q tests/e2e/test_corpus_refusals.py
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fstree import unchanged
from test_archive import _archived  # tests/ is on sys.path under pytest (no package)

from harness.cli import main as cli

SAMPLE = Path(__file__).resolve().parents[3] / "shared/data/fineweb_edu_sample"


def _one_line(capsys, command: str, *needles: str) -> str:
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith(f"harness {command}: error: "), err
    for needle in needles:
        assert needle in err, err
    return err


@pytest.mark.parametrize("command", ["queue", "import", "topup", "work", "launch", "run", "prepare"])
def test_an_empty_corpus_path_is_refused_by_every_command(tmp_path, capsys, monkeypatch, command):
    """``--corpus ""`` names no corpus: `import` once fingerprinted the whole working folder and `queue`
    ignored it (the grid's corpus was queued); every command now refuses it in one line, writing nothing."""
    results, archive = _archived(tmp_path)
    grid = tmp_path / "seq.toml"
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HARNESS_CORPUS", raising=False)
    argv = {
        "queue": ["queue", str(grid), "--results", str(results)],
        "import": ["import", str(archive), "--results", str(tmp_path / "elsewhere")],
        "topup": ["topup", "--grid", "seq", "--results", str(results)],
        "work": ["work", "--results", str(results)],
        "launch": ["launch", "--executor", "local", "--workers", "1", "--results", str(results)],
        "run": ["run", "--variant", "rd_attnres", "--size", "tiny", "--seed", "0", "--budget-tokens", "1024"],
        "prepare": ["prepare", str(grid), "--results", str(results)],
    }[command]
    capsys.readouterr()
    with unchanged(tmp_path):
        assert cli([*argv, "--corpus", ""]) == 2
    _one_line(capsys, command, "corpus ''", "empty path")
