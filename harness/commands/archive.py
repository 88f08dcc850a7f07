"""Write one grid's results to one portable file, for a collaborator to re-derive its report and add seeds.

The file (a gzip-compressed tar, format in harness/store/archive.py) holds the grid's result files
(curves, routing and degeneracy records, failures), the queue's view of the grid (every run's
config as queued, with the analysis plan, and how it ended), the grid TOML (--toml, default
RESULTS/grids/NAME.toml when an import wrote one), each run's protocol hash and training commit
(with its -dirty flag), the archiving code's git commit and the SHA-256 of requirements.lock
(separately), the corpus's document fingerprint and file name, and a manifest with every
member's SHA-256; no checkpoints. Nothing in it names this machine: no absolute path (the
corpus becomes corpus-sha256:<fingerprint>:<name>, the results folder RESULTS, the home
folder ~), no host name or owner; the grid TOML's corpus, a path relative to the TOML's folder
or absolute, becomes that reference too. Runs are in seed order (s2 before s10). Newly finished runs
are ingested first (as `harness report`). The same results give the same file, and an
imported archive archived again is the same file byte for byte. `harness import FILE
--results DIR [--corpus PATH]` restores it elsewhere: `harness report` then gives the same
stats.csv, and `harness topup` + `harness work` continue the grid there.

example:
  harness archive --grid rd_factorial_study --out rd_factorial_study.tar.gz --toml ablations/rd_factorial_study.toml
  harness import rd_factorial_study.tar.gz --results ~/other_results
"""

from __future__ import annotations

import argparse
import errno
import hashlib
from pathlib import Path

from harness.commands.options import add_storage, open_queue, output_file
from harness.common.files import check_output_file, fmt_bytes, free_bytes


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--grid", required=True, metavar="NAME", help="grid name (the `name` in its TOML)")
    parser.add_argument(
        "--out",
        required=True,
        type=output_file,
        metavar="FILE",
        help="archive to write (.tar.gz; replaced atomically)",
    )
    parser.add_argument(
        "--toml",
        type=Path,
        default=None,
        metavar="GRID.toml",
        help="the grid's TOML, to include (default: RESULTS/grids/NAME.toml, where `harness import` puts it)",
    )
    add_storage(parser, reads_only=True)


def _queue_view(args: argparse.Namespace) -> list[dict] | None:
    """The queue's view of the grid, one JSON-able dict per run (``None``: no queue found)."""
    queue = open_queue(args)
    if queue is None:
        return None
    return [
        {
            "config": r.config.to_dict(),
            "state": r.state,
            "attempt": r.attempt,
            "val_nll": r.value,
            "wall_s": r.wall_s,
            "error": r.error,
        }
        for _, r in queue.runs(args.grid).items()
    ]


def _portability(args: argparse.Namespace, results: dict[str, bytes], queued: list[dict]):
    """``(stand_ins, corpus)`` for :func:`harness.store.archive.write_archive`: each absolute path the grid's files
    name (its corpus, however many paths it was read from; the results folder; the home folder) ->
    its stand-in, and ``{"fingerprint", "name"}`` of the corpus (the queue's record, else the document
    fingerprint its result files record)."""
    import json
    import os

    from harness.corpus.spec import corpus_name, corpus_ref, is_local, parse_ref

    record = None
    queue = open_queue(args)
    if queue is not None:
        record = queue.corpus_of(args.grid)
    configs = [r["config"] for r in queued] + [
        json.loads(d)["run"].get("config") or {} for d in results.values()
    ]
    corpus = {"fingerprint": record["fingerprint"], "name": record["name"]} if record else None
    for config in configs:
        spec = str(config.get("corpus") or "")
        fp = ((config.get("protocol") or {}).get("data") or {}).get("fingerprint")
        if corpus is None and parse_ref(spec) is not None:
            corpus = dict(zip(("fingerprint", "name"), parse_ref(spec), strict=True))
        elif corpus is None and fp and is_local(spec):
            corpus = {"fingerprint": fp, "name": corpus_name(spec)}
    stand_ins = {}
    if corpus is not None:
        ref = corpus_ref(corpus["fingerprint"], corpus["name"])
        paths = {str(c.get("corpus") or "") for c in configs} | {(record or {}).get("path") or ""}
        stand_ins = {p: ref for p in paths if is_local(p) and os.path.isabs(p)}
    stand_ins[str(Path(args.results).resolve())] = "RESULTS"
    home = os.path.expanduser("~")
    if home not in ("/", "~"):
        stand_ins.setdefault(home, "~")
    return stand_ins, corpus


def _grid_toml(path: Path, grid: str) -> bytes:
    """The bytes of the grid TOML ``path``, once it is the TOML of ``grid`` (its ``name``).

    Raises:
        FileNotFoundError: no such file.
        ValueError: not TOML, or another grid's file (naming both).
    """
    from harness.store.archive import grid_toml_name

    if not path.is_file():
        raise FileNotFoundError(f"--toml {str(path)!r} does not exist")
    data = path.read_bytes()
    try:
        name = grid_toml_name(data)
    except ValueError as exc:
        raise ValueError(f"--toml {path}: {exc}") from None
    if name != grid:
        raise ValueError(f"--toml {path} is the TOML of grid {name!r}, not of --grid {grid}")
    return data


def code_identity() -> dict:
    """``{"commit", "lock_sha256"}`` of this code: the git commit (``-dirty`` with local changes)
    and the SHA-256 of requirements.lock (``None`` outside a checkout)."""
    from harness.train.protocol import code_version  # lazy: loads torch, needed by this command only

    lock = Path(__file__).resolve().parents[2] / "requirements.lock"
    return {
        "commit": code_version(),
        "lock_sha256": hashlib.sha256(lock.read_bytes()).hexdigest() if lock.is_file() else None,
    }


def main(args: argparse.Namespace) -> int:
    import json

    from harness.common.terms import check_grid
    from harness.store.archive import write_archive
    from harness.store.store import Store

    check_output_file(args.out, "--out")  # before any work: checked, nothing created
    imported = Path(args.results) / "grids" / f"{args.grid}.toml"
    toml = args.toml if args.toml is not None else (imported if imported.is_file() else None)
    grid_toml = _grid_toml(toml, args.grid) if toml is not None else None
    store = Store(args.results)
    ids = store.query("select run_id from runs where grid = ? order by run_id", [args.grid])[
        "run_id"
    ].to_list()
    check_grid(args.grid, store.grids(), "the results store")
    gone = [r for r in ids if not store.result_path(r).is_file()]
    if gone:
        raise ValueError(
            f"{len(gone)} runs of grid {args.grid} have no result file in {store.runs_dir} (e.g. {gone[0]}); "
            "the archive holds result files, so it cannot hold them"
        )
    queue = _queue_view(args)
    if queue is None:
        print(
            f"note: no queue found: the archive holds no queue view, so `topup` cannot continue {args.grid}"
        )
    results = {r: store.result_path(r).read_bytes() for r in ids}
    stand_ins, corpus = _portability(args, results, queue or [])
    if (
        grid_toml is not None and corpus is not None
    ):  # its corpus by content, whether its path was relative or not
        from harness.corpus.spec import corpus_ref
        from harness.scheduling.grids.edit import corpus_by_content

        grid_toml = corpus_by_content(grid_toml, corpus_ref(corpus["fingerprint"], corpus["name"]))
    before = Path(args.results) / "grids" / f"{args.grid}.archive.json"
    try:
        manifest = write_archive(
            args.out,
            grid=args.grid,
            results=results,
            queue=queue or [],
            code=code_identity(),
            grid_toml=grid_toml,
            stand_ins=stand_ins,
            corpus=corpus,
            archived_before=json.loads(before.read_text()) if before.is_file() else None,
        )
    except OSError as exc:  # the archive's disk, not the results folder's, is the one to name
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        raise OSError(
            f"disk full: --out {args.out} ({exc.strerror}, {fmt_bytes(free_bytes(args.out))} free there); "
            "free space there, or pass another --out"
        ) from None
    size = args.out.stat().st_size
    commits = sorted({str(e["code_version"]) for e in manifest["runs"].values()})
    print(
        f"wrote {args.out} ({size / 1e6:.2f} MB): grid {args.grid}, {len(manifest['runs'])} result files, "
        f"{len(queue or [])} queued runs; trained by {', '.join(commits) or 'no run'}; archived by "
        f"{manifest['archived_by']['commit']}"
    )
    return 0
