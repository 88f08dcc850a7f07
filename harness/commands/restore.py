"""Restore a grid's archive (`harness archive`) into a results folder, to report on it and add seeds.

Reads FILE and checks it before writing anything: a file that is not an archive, a truncated
one, a member whose SHA-256 differs from the manifest's, a result file whose protocol hash is
not the one the manifest records: one line each, exit 2. Then checks the results folder (new
or existing): the grid already there with other runs, a result file of the same run with other
content, or the grid queued there with other runs or configs is a clash, refused with one
line; the same runs, identical, are fine (importing twice adds nothing). A queue view whose cell holds
more seeds than its analysis plan's max_seeds is refused, as `harness queue` refuses such a grid. Only then are the
result files staged in a temporary folder inside the results folder and moved into runs/, the
runs added to the queue as they ended (done runs are not trained again; runs still queued in
the archive are queued again), and the grid's TOML, if the archive holds one, written to
RESULTS/grids/NAME.toml (its corpus named by content, corpus-sha256:<fingerprint>:<name>, where an
older archive kept a path). Then `harness report --grid NAME` gives the archive's stats.csv, and
`harness topup --grid NAME` + `harness work` add the next look's seeds.

The corpus travels by content: the archive names it by its document fingerprint and file name,
never by a path. --corpus PATH says where it is here: its text must have that fingerprint (another
text is one line naming both fingerprints, nothing imported); the queue then records PATH and
workers read it there. Without --corpus, give it later to `harness queue RESULTS/grids/NAME.toml`,
`harness work` (or `harness topup`, for a grid it adds seeds to); a worker meeting a grid whose
corpus is not here gives the run back (no retry spent) and says which commands re-point it. Each
run's training commit (with its -dirty flag) stays in its result file and the manifest; `harness
archive` of the imported grid gives back the same file byte for byte.

example:
  harness import rd_factorial_study.tar.gz --results ~/other_results --corpus ~/data/fineweb_edu_sample
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
    parser.add_argument(
        "--corpus",
        metavar="PATH",
        default=None,
        help="where the grid's corpus is on this machine: checked against the archive's corpus "
        "fingerprint (another text is refused, nothing imported); workers then read it there",
    )
    add_storage(parser)


def _clash(archive, results: Path, queue) -> str | None:
    """Why the archive cannot go into ``results`` (one line), or ``None``."""
    from harness.common.files import results_id
    from harness.common.terms import config_diff
    from harness.store.archive import same_result
    from harness.store.runfile import result_path
    from harness.store.store import Store

    grid, mine = archive.grid, set(archive.results)
    for run_id, data in archive.results.items():
        p = result_path(results, run_id)
        if p.exists() and not same_result(p.read_bytes(), data):
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
    record, mine = queue.corpus_of(grid), archive.corpus
    same_text = record is not None and mine is not None and record["fingerprint"] == mine["fingerprint"]
    for run_id, r in sorted(queue.runs(grid).items()):
        if run_id not in queued:
            return f"grid {grid} is already queued at {queue.where} with other runs (e.g. {run_id})"
        diff = config_diff(r.config.to_dict(), queued[run_id], ignore=("corpus",) if same_text else ())
        if diff:
            return f"run {run_id} is already queued at {queue.where} with another config (differs in {', '.join(diff)})"
    return None


def _move_in(archive, results: Path, wrote: list) -> int:
    """Stage the result files not yet in ``results`` in a temporary folder inside it, then move each
    into ``runs/``; returns how many were moved. ``wrote`` gets an entry before the first move (the first
    write the staging folder's removal does not undo)."""
    from harness.store.runfile import result_path

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
        wrote.append("runs")
        for run_id in new:
            os.replace(stage / result_path(results, run_id).name, result_path(results, run_id))
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return len(new)


def _plan_seeds(archive) -> None:
    """Refuse an archive whose queue gives a cell more seeds than its analysis plan's ``max_seeds``, as
    `harness queue` refuses such a grid (:func:`harness.scheduling.grids.plan_seeds.check_plan_seeds`)."""
    from harness.scheduling.grids.plan_seeds import check_plan_seeds

    configs = [r["config"] for r in archive.queue if r["config"].get("tuned") is None]
    if configs:
        runs = [(c["size"], c["budget_tokens"], c["seed"]) for c in configs]
        check_plan_seeds(archive.grid, configs[0].get("analysis") or {}, [], runs)


def _corpus_here(archive, args: argparse.Namespace) -> str | None:
    """The absolute ``--corpus`` once its text has the archive's corpus fingerprint (``None`` without it).

    Raises:
        FileNotFoundError / ValueError: nothing at the path, no queue to re-point, another text (one
            line naming both fingerprints; nothing is written yet).
    """
    if args.corpus is None:
        return None
    from harness.corpus.locate import check_repoint
    from harness.corpus.spec import resolve_corpus
    from harness.data.prepared import cache_dir
    from harness.design.config import RunConfig

    if not archive.queue:
        raise ValueError(
            f"{args.archive} holds no queue view: there is no grid to point at --corpus {args.corpus}"
        )
    corpus = archive.corpus
    expected = (corpus["fingerprint"], corpus["name"]) if corpus is not None else None
    path = resolve_corpus(args.corpus)
    config = RunConfig.from_dict(archive.queue[0]["config"])
    check_repoint(expected, config.corpus_key(), path, cache_dir(args.results), grid=archive.grid)
    return path


def main(args: argparse.Namespace) -> int:
    from harness.common.interrupt import InterruptedBeforeWrite, InterruptedIncomplete, interrupted
    from harness.corpus.locate import repoint_hint
    from harness.store.archive import GRID_TOML, read_archive

    archive = read_archive(args.archive)
    _plan_seeds(archive)
    corpus_path = _corpus_here(archive, args)
    queue = open_queue(args)
    why = _clash(archive, args.results, queue)
    if why:
        raise ValueError(why)
    made = [p for p in (args.results, args.results / "runs") if not p.exists()]
    wrote: list = []
    try:
        moved, added = _write(archive, args, queue, corpus_path, wrote)
    except BaseException as exc:  # a full disk, a Ctrl-C: no empty results folder or runs/ is left behind
        _remove_empty(made)
        if (isinstance(exc, KeyboardInterrupt) or interrupted()) and not wrote:  # only staged: undone
            raise InterruptedBeforeWrite(
                f"nothing of grid {archive.grid} was imported: {args.results} is as it was"
                + (" (not there)" if args.results in made and not args.results.exists() else "")
                + "; the same `harness import` imports it"
            ) from None
        if isinstance(exc, KeyboardInterrupt) or interrupted():  # DuckDB: Ctrl-C as "Query interrupted"
            # each step adds only what is missing, so the same import again finishes this one
            raise InterruptedIncomplete(
                f"grid {archive.grid} is partly imported into {args.results}; the same `harness import` "
                "again finishes it"
            ) from None
        raise
    corpus = archive.corpus
    print(
        f"imported grid {archive.grid} from {args.archive} (archived by {archive.archived_by.get('commit')}; "
        f"trained by {_commits(archive)}): {moved} result files added, "
        f"{len(archive.results) - moved} already there; {len(added)} runs added to the queue"
    )
    if corpus is not None:
        # the commands that re-point any grid (topup re-points only one it can add seeds to)
        hint = repoint_hint(archive.grid) if GRID_TOML in archive.members else "`harness work --corpus PATH`"
        where = f"at {corpus_path}" if corpus_path else f"not given: point the grid at it with {hint}"
        print(f"corpus: {corpus['name']} (fingerprint {corpus['fingerprint']}) {where}")
    print(f"next: harness report --grid {archive.grid} --results {args.results}")
    return 0


def _remove_empty(folders: list[Path]) -> None:
    """Remove ``folders`` (made by this import, innermost last) where still empty."""
    for folder in reversed(folders):
        with contextlib.suppress(OSError):
            folder.rmdir()  # only where still empty


def _write(
    archive, args: argparse.Namespace, queue, corpus_path: str | None, wrote: list
) -> tuple[int, list[str]]:
    """Every write of the import, each adding only what is missing (so an interrupted import is finished by
    the same import again): the result files, the queue's runs and corpus, the grid's TOML and archive
    record, the store's rows. Returns ``(result files moved in, run ids added to the queue)``; ``wrote``
    gets an entry before each lasting step begins (empty: nothing was changed)."""
    import json

    from harness.common.files import atomic_write, results_id
    from harness.store.archive import GRID_TOML
    from harness.store.store import Store

    moved = _move_in(archive, args.results, wrote)
    wrote.append("queue, grid files, store")
    added, corpus = [], archive.corpus
    if archive.queue:
        queue = queue or open_queue(args, create=True)
        queue.bind_results(archive.grid, args.results.resolve(), results_id(args.results, create=True))
        record = queue.corpus_of(archive.grid)
        same = record is not None and corpus is not None and record["fingerprint"] == corpus["fingerprint"]
        added = queue.restore(archive.queue, same_corpus=same)
        if corpus is not None and (corpus_path is not None or record is None):
            queue.bind_corpus(archive.grid, corpus["fingerprint"], corpus["name"], corpus_path)
    grids = args.results / "grids"
    if GRID_TOML in archive.members:
        atomic_write(grids / f"{archive.grid}.toml", _grid_toml(archive))
    # what `harness archive` needs to give back this very file (its archiving code, when nothing changed)
    before = {"archived_by": archive.archived_by, "members": archive.manifest["members"]}
    atomic_write(grids / f"{archive.grid}.archive.json", json.dumps(before, indent=1).encode())
    Store(args.results).ingest()
    return moved, added


def _grid_toml(archive) -> bytes:
    """The archive's grid TOML, its corpus named by content where an older archive kept a path (a relative
    one would be read from RESULTS/grids/, an absolute one names the writer's machine)."""
    from harness.corpus.spec import corpus_ref
    from harness.scheduling.grids.edit import corpus_by_content
    from harness.store.archive import GRID_TOML

    text, corpus = archive.members[GRID_TOML], archive.corpus
    return (
        text if corpus is None else corpus_by_content(text, corpus_ref(corpus["fingerprint"], corpus["name"]))
    )


def _commits(archive) -> str:
    """The training commits of the archive's runs (``-dirty`` kept), the most frequent first, at most three."""
    import json
    from collections import Counter

    counts = Counter(str(json.loads(d)["run"].get("code_version")) for d in archive.results.values())
    names = [c for c, _ in counts.most_common()]
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "") or "no run"
