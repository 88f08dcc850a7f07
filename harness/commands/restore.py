"""Restore a grid's archive (`harness archive`) into a results folder, to report on it and add seeds.

Reads FILE and checks it before writing anything: a file that is not an archive, a truncated
one, a member whose SHA-256 differs from the manifest's, a result file whose protocol hash is
not the one the manifest records: one line each, exit 2. Then checks the results folder (new
or existing): the grid already there with other runs, a result file of the same run with other
content, or the grid queued there with other runs or configs is a clash, refused with one
line; the same runs, identical, are fine (importing twice adds nothing). Only then are the
result files staged in a temporary folder inside the results folder and moved into runs/, the
runs added to the queue as they ended (done runs are not trained again; runs still queued in
the archive are queued again), and the grid's TOML, if the archive holds one, written to
RESULTS/grids/NAME.toml. Then `harness report --grid NAME` gives the archive's stats.csv, and
`harness topup --grid NAME` + `harness work` add the next look's seeds (on a corpus at the
path the grid names).

example:
  harness import rd_factorial_study.tar.gz --results ~/other_results
  harness report --grid rd_factorial_study --results ~/other_results
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import tempfile
from pathlib import Path

from harness.commands.options import add_storage, open_queue


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("archive", type=Path, metavar="FILE", help="archive written by `harness archive`")
    add_storage(parser)


def _clash(archive, results: Path, queue) -> str | None:
    """Why the archive cannot go into ``results`` (one line), or ``None``."""
    from db.runfile import result_path
    from db.store import Store
    from harness.common.files import results_id
    from harness.common.terms import config_diff

    grid, mine = archive.grid, set(archive.results)
    for run_id, data in archive.results.items():
        p = result_path(results, run_id)
        if p.exists() and p.read_bytes() != data:
            return f"run {run_id} is already in {results} with another result file: import into another --results folder"
    if (results / "runs").is_dir():
        have = Store(results).query("select run_id from runs where grid = ?", [grid])["run_id"].to_list()
        other = sorted(set(have) - mine)
        if other:
            return (
                f"grid {grid} is already in {results} with other runs ({len(other)} not in the archive, "
                f"e.g. {other[0]}): import into another --results folder"
            )
    if queue is None:
        return None
    bound = queue.results_of(grid)
    if bound is not None and bound["id"] != results_id(results):
        return (
            f"grid {grid} in the queue at {queue.where} belongs to another results folder ({bound['path']})"
        )
    queued = {r["config"]["run_id"]: r["config"] for r in archive.queue}
    for run_id, r in sorted(queue.runs(grid).items()):
        if run_id not in queued:
            return f"grid {grid} is already queued at {queue.where} with other runs (e.g. {run_id})"
        diff = config_diff(r.config.to_dict(), queued[run_id])
        if diff:
            return f"run {run_id} is already queued at {queue.where} with another config (differs in {', '.join(diff)})"
    return None


def _move_in(archive, results: Path) -> int:
    """Stage the result files not yet in ``results`` in a temporary folder inside it, then move each
    into ``runs/``; returns how many were moved."""
    from db.runfile import result_path

    new = {rid: d for rid, d in archive.results.items() if not result_path(results, rid).exists()}
    results.mkdir(parents=True, exist_ok=True)
    (results / "runs").mkdir(exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=".import-", dir=results))
    try:
        for run_id, data in new.items():
            tmp = stage / result_path(results, run_id).name
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        for run_id in new:
            os.replace(stage / result_path(results, run_id).name, result_path(results, run_id))
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return len(new)


def main(args: argparse.Namespace) -> int:
    from db.archive import GRID_TOML, read_archive
    from db.store import Store
    from harness.common.files import atomic_write, results_id

    archive = read_archive(args.archive)
    queue = open_queue(args)
    why = _clash(archive, args.results, queue)
    if why:
        raise ValueError(why)
    made = [p for p in (args.results, args.results / "runs") if not p.exists()]
    try:
        moved = _move_in(archive, args.results)
    except BaseException:  # a full disk, Ctrl-C: no empty results folder or runs/ is left behind
        for folder in reversed(made):
            with contextlib.suppress(OSError):
                folder.rmdir()  # only where still empty
        raise
    added = []
    if archive.queue:
        queue = queue or open_queue(args, create=True)
        queue.bind_results(archive.grid, args.results.resolve(), results_id(args.results, create=True))
        added = queue.restore(archive.queue)
    if GRID_TOML in archive.members:
        atomic_write(args.results / "grids" / f"{archive.grid}.toml", archive.members[GRID_TOML])
    Store(args.results).ingest()
    code = archive.manifest.get("code") or {}
    print(
        f"imported grid {archive.grid} from {args.archive} (code {str(code.get('commit'))[:12]}): "
        f"{moved} result files added, {len(archive.results) - moved} already there; "
        f"{len(added)} runs added to the queue"
    )
    print(f"next: harness report --grid {archive.grid} --results {args.results}")
    return 0
