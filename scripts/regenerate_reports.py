"""Regenerate the committed reports in reports/ with the current code, from their committed inputs.

    python scripts/regenerate_reports.py [--out DIR] [NAME ...]      # also: make reports

A committed report can be re-derived only from its runs. Each report folder whose runs are committed as
a grid archive (``reports/NAME/*.tar.gz``, written by ``harness archive``) is rebuilt the way a
reader would (docs/sharing.md): ``harness import ARCHIVE --results TMP`` then ``harness report --grid GRID
--results TMP --out reports/NAME``; its look-1 report (``look1/``, where the folder has one) from the
same archive cut to the runs of the plan's first look (the seeds below the first look's count, with their
queue entries), imported into another folder and reported the same way. The report files are replaced
(``report.md``, ``report.html``, ``stats.csv``, ``pairs.csv``, the multipliers' CSVs of a grid with several
budgets, ``figures/``); the archive is kept.

Every committed report folder holds its archive (demo, sample and cpu_study were re-trained on
2026-12-06 to get one: runs are bit-identical on one CPU model only, so a report without its archive
could never be refreshed, only re-trained into other numbers). A folder without one is named with the
reason and left as it is; exit status 1 when a NAME asked for has no archive.

``--out DIR`` writes the regenerated folders under DIR instead of docs/reports (the staleness test,
``tests/tooling/test_committed_reports.py``, compares them with the committed ones).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout: the harness of this tree, not an installed one

from harness.cli import main as harness  # noqa: E402
from harness.store.archive import read_archive, write_archive  # noqa: E402

REPORTS = ROOT / "reports"
REPORT_FILES = (
    "report.md",
    "report.html",
    "stats.csv",
    "pairs.csv",
    "multipliers.csv",
    "multiplier_seeds.csv",
)
LOOK1 = "look1"


def archive_of(folder: Path) -> Path | None:
    """The grid archive committed in a report folder, or None."""
    found = sorted(folder.glob("*.tar.gz"))
    return found[0] if found else None


def first_look_archive(archive: Path, out: Path) -> Path:
    """``archive`` cut to the runs of its plan's first look: seeds < looks[0], result files and queue."""
    a = read_archive(archive)
    looks = a.queue[0]["config"]["analysis"]["looks"] if a.queue else []
    if not looks:
        raise ValueError(f"{archive}: its plan has no looks, so there is no look-1 report to regenerate")
    first = int(looks[0])
    results = {run_id: data for run_id, data in a.results.items() if json.loads(data)["run"]["seed"] < first}
    queue = [r for r in a.queue if int(r["config"]["seed"]) < first]
    grid_toml = a.members.get("grid.toml")
    write_archive(
        out,
        grid=a.grid,
        results=results,
        queue=queue,
        code=a.archived_by,
        grid_toml=grid_toml,
        corpus=a.corpus,
    )
    return out


def _report(archive: Path, grid: str, results: Path, out: Path) -> None:
    """`harness import` then `harness report` into ``out`` (a fresh folder)."""
    if harness(["import", str(archive), "--results", str(results)]) != 0:
        raise RuntimeError(f"harness import {archive} failed")
    if harness(["report", "--grid", grid, "--results", str(results), "--out", str(out)]) != 0:
        raise RuntimeError(f"harness report --grid {grid} failed")


def _replace(new: Path, target: Path) -> None:
    """Put the report files of ``new`` in ``target``: the report files and figures/ replaced, the rest kept."""
    target.mkdir(parents=True, exist_ok=True)
    for name in REPORT_FILES:
        (target / name).unlink(missing_ok=True)
        if (new / name).exists():
            shutil.copy2(new / name, target / name)
    shutil.rmtree(target / "figures", ignore_errors=True)
    if (new / "figures").is_dir():
        shutil.copytree(new / "figures", target / "figures")


def regenerate(name: str, out_root: Path) -> list[Path]:
    """Regenerate reports/NAME (and its look1/) into ``out_root/NAME``; the folders written.

    Raises:
        FileNotFoundError: NAME has no committed archive (the message says why it cannot be rebuilt).
    """
    folder = REPORTS / name
    archive = archive_of(folder)
    if archive is None:
        raise FileNotFoundError(
            f"reports/{name}: no archive of its runs is committed (harness archive), so it cannot be "
            "regenerated; retraining would give other numbers on another CPU (train it, then `harness archive`)"
        )
    grid = read_archive(archive).grid
    written = []
    with tempfile.TemporaryDirectory(prefix="regen-") as tmp:
        tmp = Path(tmp)
        _report(archive, grid, tmp / "results", tmp / "report")
        _replace(tmp / "report", out_root / name)
        written.append(out_root / name)
        if (folder / LOOK1).is_dir():
            cut = first_look_archive(archive, tmp / "look1.tar.gz")
            _report(cut, grid, tmp / "results_look1", tmp / "report_look1")
            _replace(tmp / "report_look1", out_root / name / LOOK1)
            written.append(out_root / name / LOOK1)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="report folders under reports/ (default: all)")
    parser.add_argument("--out", type=Path, default=REPORTS, help="write under DIR (default: reports/)")
    args = parser.parse_args(argv)
    names = args.names or sorted(p.name for p in REPORTS.iterdir() if p.is_dir())
    status = 0
    for name in names:
        try:
            for path in regenerate(name, args.out):
                print(f"regenerated {path}")
        except FileNotFoundError as exc:
            print(f"skipped: {exc}")
            status = 1 if args.names else status
    return status


if __name__ == "__main__":
    sys.exit(main())
