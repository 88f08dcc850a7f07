"""scripts/size_report.py: sizes in physical lines, printed largest first, never a failure."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "size_report.py"
_spec = importlib.util.spec_from_file_location("size_report", SCRIPT)
size_report = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(size_report)


def test_a_function_counts_from_its_first_decorator_to_its_last_line():
    body = "    x = f(\n" + "        1,\n" * 76 + "    )\n"  # 78 physical lines, one statement
    decorated = "@functools.cache\n@other\ndef g():\n" + body
    assert size_report.function_sizes(decorated) == [("g", 1, 81)]
    assert size_report.function_sizes("class C:\n    def m(self):\n        pass\n") == [("m", 2, 2)]


def test_the_report_lists_the_largest_file_and_function_first(tmp_path):
    (tmp_path / "harness").mkdir()
    (tmp_path / "harness" / "big.py").write_text("def f():\n" + "    pass\n" * 700)
    (tmp_path / "harness" / "small.py").write_text("def g():\n    pass\n")
    text = size_report.report(top=5, root=tmp_path)
    lines = text.splitlines()
    assert lines[1] == "    701* harness/big.py"
    assert lines[2] == "      2  harness/small.py"
    assert lines[4] == "    701* harness/big.py:1 f"
    assert lines[-1] == "1 of 2 files above 600 lines, 1 of 2 functions above 80"


def test_the_script_prints_the_trees_largest_file_and_exits_0():
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--top", "1"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    files = [p for d in size_report.FOLDERS for p in (ROOT / d).rglob("*.py")]
    largest = max(len(p.read_text().splitlines()) for p in files)
    assert proc.stdout.splitlines()[1].split()[0].rstrip("*") == str(largest)
