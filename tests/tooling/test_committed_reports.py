"""The committed reports in reports/ are what the current code writes from their committed inputs.

`scripts/regenerate_reports.py` (`make reports`) rebuilds every report folder whose runs are committed
as a grid archive (`harness import` + `harness report`, and its look-1 report from the archive cut to
the first look). This test rebuilds them into a temporary folder (so it is also the check that a committed
archive imported into an empty folder reproduces its report) and compares the deterministic files:
`report.md` byte for byte, except its "Generated <time> UTC" line (the wall-clock time of the build: the
one volatile line), and `stats.csv` and `pairs.csv` cell by cell: text exactly, numbers to a relative
1e-9. The CSVs print floats at full precision, and their last digits follow the CPU (numpy and BLAS pick
their vector loops by CPU model: a p of 7.5e-10 moved in its 15th digit between two CI machines), while a
code change moves a statistic far beyond 1e-9 (the report's printed digits are 3-4 significant). `report.html` and `figures/*.png` are not
compared: the page carries the same timestamp and embeds the PNGs, whose bytes depend on the FreeType
and zlib builds under matplotlib, not on this code. A stale committed report fails here; the fix is
`make reports`.

Every committed report folder holds the archive of its runs (a report without one could not be
re-derived, so it could not be kept current); a fast test checks that, and that each committed
stats.csv has the current columns (the cheap half of the staleness check).
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import polars as pl
import pytest
from tables import same_table  # tests/ is on sys.path under pytest

from harness.report.stats.stats_table import CSV_COLUMNS, EXTRA_COLUMNS

ROOT = Path(__file__).resolve().parents[2]
REPORTS = ROOT / "reports"
FOLDERS = sorted(p.name for p in REPORTS.iterdir() if p.is_dir())
ARCHIVED = [name for name in FOLDERS if any((REPORTS / name).glob("*.tar.gz"))]
NOT_ARCHIVED = [name for name in FOLDERS if name not in ARCHIVED]
COMPARED = ("stats.csv", "pairs.csv", "report.md")
#: Compared where the report writes them (a grid with several budgets per size: DESIGN 14), absent in both else.
COMPARED_IF_WRITTEN = ("multipliers.csv", "multiplier_seeds.csv")
GENERATED = re.compile(rb"^Generated \d{4}-\d\d-\d\d \d\d:\d\d UTC\. ", re.MULTILINE)


def _script():
    spec = importlib.util.spec_from_file_location(
        "regenerate_reports", ROOT / "scripts" / "regenerate_reports.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_csv_comparison_tolerates_the_cpus_last_digits_only():
    old = b"comparison,p,verdict\nrd - parent,7.525225990667063e-10,gain established\n"
    assert same_table(b"comparison,p,verdict\nrd - parent,7.525225990667037e-10,gain established\n", old)
    assert not same_table(b"comparison,p,verdict\nrd - parent,7.5252e-10,gain established\n", old)
    assert not same_table(b"comparison,p,verdict\nrd - parent,7.525225990667063e-10,undecided\n", old)
    assert not same_table(old + b"x,1,y\n", old)


def _stable(data: bytes) -> bytes:
    """The file without its build time (report.md's 'Generated ... UTC.' prefix)."""
    return GENERATED.sub(b"Generated <time> UTC. ", data)


def test_every_committed_report_holds_the_archive_it_is_regenerated_from():
    assert FOLDERS and ARCHIVED == FOLDERS, f"report folders without an archive of their runs: {NOT_ARCHIVED}"
    with pytest.raises(FileNotFoundError, match="no archive of its runs is committed"):
        _script().regenerate("no_such_report", ROOT / "unused")


@pytest.mark.slow  # imports a 96-run archive twice and writes two reports (~1 minute)
@pytest.mark.parametrize("name", ARCHIVED)
def test_a_committed_report_is_what_the_current_code_writes(name, tmp_path):
    written = _script().regenerate(name, tmp_path)
    assert written
    # the archive imported into an empty folder gives the report's pairs.csv byte for byte (issue 47; the
    # pairs are the archived NLLs, no arithmetic), its stats.csv to the CPU's last digits (below)
    assert (tmp_path / name / "pairs.csv").read_bytes() == (REPORTS / name / "pairs.csv").read_bytes()
    stale = []
    for folder in written:
        committed = REPORTS / folder.relative_to(tmp_path)
        for file in COMPARED:
            new, old = (folder / file).read_bytes(), (committed / file).read_bytes()
            same = same_table(new, old) if file.endswith(".csv") else _stable(new) == _stable(old)
            if not same:
                stale.append(str(committed.relative_to(ROOT) / file))
        for file in COMPARED_IF_WRITTEN:
            new_path, old_path = folder / file, committed / file
            if new_path.exists() != old_path.exists() or (
                new_path.exists() and not same_table(new_path.read_bytes(), old_path.read_bytes())
            ):
                stale.append(str(committed.relative_to(ROOT) / file))
        figures = sorted(p.name for p in (folder / "figures").glob("*.png"))
        if figures != sorted(p.name for p in (committed / "figures").glob("*.png")):
            stale.append(str(committed.relative_to(ROOT) / "figures"))
    assert not stale, f"stale committed report files (run `make reports`): {stale}"


@pytest.mark.parametrize("name", FOLDERS)
def test_a_committed_stats_csv_has_the_current_columns(name):
    for stats in sorted((REPORTS / name).glob("**/stats.csv")):
        assert pl.read_csv(stats, n_rows=0).columns == list(CSV_COLUMNS + EXTRA_COLUMNS), stats
