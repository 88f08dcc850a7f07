"""Re-train K archived pairs on this machine and say whether it repeats, perturbs, re-draws or biases the archive (the re-train check).

The re-train check (DESIGN section 13). FILE is an archive written by `harness archive`. The
command picks K seeds (pairs) at which every variant is done (the smallest, or --seeds), checks that this
code gives their archived configs the archived protocol hash (else it refuses in one line, before
anything trains), trains them here into --results (a folder of its own: the runs a call for the same archive re-trained
there before are read, not trained again; a folder holding these runs' archived results is refused), each with
the archive's numerics where this code still has them (the routing path and its numerics revision the run's
result file records, or its training commit implies: the committed factorial study trained per_site/1), so the
check compares machines; where this code cannot (numerics unknown, or a revision it no longer has) it trains
on the default path and says that the check then measures code plus machine. It prints:
per run the archived and new final val NLL (nats/token) and their shift; per contrast of the grid (its
[variants] roles and [factorial] table) and seed, the shift of the paired difference; per contrast the
mean shift with its 95 % t interval, p, Holm p and the MDE at Holm's level; the largest bias the K pairs
exclude (two one-sided t-tests at the smallest effect the study reports); how far the runs moved against a
redraw (shift variance over twice the seed variance, the archived/new correlation); all in nats and in
units of the seed sd and of the smallest effect. The answer is one of: bit-identical (every new NLL equals
the archived one exactly), too few pairs to tell (under 3 pairs, or a bias of the smallest effect not
excluded), a bias (a contrast's mean shift is not 0), perturbed (moved far less than new draws) or
redrawn. It names the training commit, numerics and hardware class the re-trained runs' result files
record, and the archive's numerics. While runs train, each shows its progress on stderr as `harness work` does
(which run, tokens, tok/s, ETA: a bar on a terminal no other worker shares, else a line per 10 % of its budget
and at least one a minute; $HARNESS_PROGRESS=lines|off; --quiet: none), from every worker process, and a line
when it ends. --report-only trains nothing and reports the chosen runs re-trained into --results so far (a
check cut short). The text, --csv and --json give the CPU model, torch, workers and threads the runs trained
with, as recorded when they trained (each run's environment record; the workers: what the call that trained it
stored in --results), never this call's options: "not recorded" (CSV/JSON: unknown) where no record says, each
value with its count of runs where they differ. --csv / --json write the same numbers (no path, no host name);
both are checked before anything trains (a folder, an unwritable place, the archive itself or one file for
both is refused in one line). Exit 0 whatever the verdict.

example:
  harness retrain reports/factorial_study/rd_factorial_study.tar.gz --pairs 4 \\
      --corpus ../shared/data/fineweb_edu_sample --workers 2 --threads 1 --results /tmp/aa \\
      --csv retrain_check.csv --json retrain_check.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

from harness.commands.options import add_setting_argument, output_file
from harness.common import console
from harness.common.files import check_output_file
from harness.corpus.spec import resolve_corpus
from harness.train.execution import check_threads


def _seeds(text: str) -> list[int]:
    try:
        seeds = [int(s) for s in text.replace(",", " ").split()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected seed numbers, e.g. '0 1 2 3' or 0,1,2,3"
        ) from None
    if len(seeds) < 2 or len(set(seeds)) != len(seeds):
        raise argparse.ArgumentTypeError(f"{text!r}: expected at least 2 distinct seeds")
    return seeds


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", type=Path, metavar="FILE", help="an archive written by `harness archive`")
    parser.add_argument(
        "--pairs",
        type=int,
        default=4,
        metavar="K",
        help="seeds (pairs) to re-train, the K smallest (default 4)",
    )
    parser.add_argument("--seeds", type=_seeds, default=None, help="these seeds instead, e.g. '0 1 2 3'")
    parser.add_argument(
        "--corpus",
        default=None,
        metavar="PATH",
        help="where the runs' corpus lives here (the archive's path is the writer's machine); the protocol "
        "hash checks it is the same text",
    )
    parser.add_argument("--workers", type=int, default=1, help="runs trained at once (processes; default 1)")
    add_setting_argument(parser, "threads", scope="per worker; use cores / workers")
    parser.add_argument(
        "--quiet",
        action="store_true",
        help="no progress within runs (else as `harness work`: $HARNESS_PROGRESS)",
    )
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="train nothing: report on the chosen runs already re-trained into --results (a check cut short)",
    )
    parser.add_argument(
        "--csv", type=output_file, default=None, metavar="FILE", help="also write the numbers as CSV"
    )
    parser.add_argument(
        "--json", type=output_file, default=None, metavar="FILE", help="also write the numbers as JSON"
    )


def _check_args(args: argparse.Namespace) -> None:
    if args.pairs < 2:
        raise ValueError(f"--pairs {args.pairs}: expected at least 2 (a mean shift needs an interval)")
    if args.workers < 1:
        raise ValueError(f"--workers {args.workers}: expected at least 1")
    check_threads(args.threads)
    if args.corpus is not None:
        resolve_corpus(args.corpus)  # an empty path names the working folder: refused as queue refuses it
        if not Path(args.corpus).exists():
            raise FileNotFoundError(f"--corpus {args.corpus!r} does not exist")
    _check_outputs(args)
    console.progress_mode()  # a bad $HARNESS_PROGRESS is one line now, not a traceback mid-run


def _check_outputs(args: argparse.Namespace) -> None:
    """Refuse an output file (--csv, --json) that could not be written, before anything trains (a check of
    hours would be lost at its end): a folder, a file where one of its folders would be, an unwritable
    folder, the archive itself, or both options naming one file. Nothing is created.

    Raises:
        ValueError / PermissionError: one line naming the option and the path.
    """
    outputs = [
        (option, path) for option, path in (("--csv", args.csv), ("--json", args.json)) if path is not None
    ]
    for option, path in outputs:
        check_output_file(path, option)
        if os.path.abspath(path) == os.path.abspath(args.file):
            raise ValueError(f"{option} {path}: is the archive FILE; give another file")
    if len(outputs) == 2 and os.path.abspath(args.csv) == os.path.abspath(args.json):
        raise ValueError(f"--csv and --json both name {args.csv}; give two files")


def main(args: argparse.Namespace) -> int:
    _check_args(args)  # before the imports: a mistyped option is refused in a tenth of a second, not seconds
    from harness.common.files import atomic_write
    from harness.store.archive import read_archive
    from harness.train import retrain as rt

    archive = read_archive(args.file)
    runs = [rt.repoint(r, args.corpus) for r in rt.archived_runs(archive)]
    if not runs:
        raise ValueError(f"{args.file}: no done run with a final val NLL to re-train")
    seeds = rt.choose_seeds(runs, args.pairs, args.seeds)
    # lazy: scipy and the renderers load in about 2 s, after the archive's own refusals above
    from harness.report.render.retrain_lines import render_csv, render_json, render_text
    from harness.report.stats.retrain_check import grid_contrasts, retrain_check

    # seed by seed: a check cut short holds whole pairs
    chosen = sorted(
        (r for r in runs if r.config.seed in seeds), key=lambda r: (r.config.seed, r.config.variant)
    )
    contrasts = grid_contrasts(
        {r.config.variant: r.config.role for r in runs}, (runs[0].config.analysis or {}).get("factorial")
    )
    new, chosen = _retrained(args, archive, chosen, seeds, rt)
    plan = runs[0].config.analysis or {}
    checks = []
    for cell, cell_runs in _by_cell(
        runs
    ).items():  # one check per cell: (variant, seed) names a run within it
        picked = [(r, n) for r, n in zip(chosen, new, strict=True) if _cell(r) == cell]
        if not picked:
            continue
        checks.append(
            (
                cell,
                retrain_check(
                    {r.key: r.val_nll for r in cell_runs},
                    {r.key: float(n.val_nll) for r, n in picked},
                    contrasts,
                    run_ids={r.key: r.config.run_id for r, _ in picked},
                    min_effect_nats=plan.get("min_effect_nats"),
                    alpha=plan.get("alpha", 0.05),
                    power=plan.get("power", 0.8),
                ),
            )
        )
    machine = {**rt.machine(new), **rt.identity(chosen, new)}  # as the runs trained, not this call's options
    name = args.file.name  # the file's name only: no path of this machine
    if len(checks) == 1:  # one cell: the check as it always was
        check = checks[0][1]
        print(render_text(check, machine, name), end="")
        if args.csv is not None:
            atomic_write(args.csv, render_csv(check, machine))
        if args.json is not None:
            atomic_write(args.json, render_json(check, machine, name))
        return 0
    # several cells (sizes, budgets or axis values): each its own check, named; csv with a cell column
    print(
        "\n".join(f"## Cell {_cell_name(c)}\n\n" + render_text(k, machine, name) for c, k in checks), end=""
    )
    if args.csv is not None:
        parts = [render_csv(k, machine).splitlines() for _, k in checks]
        lines = ["cell," + parts[0][0]] + [
            f"{_cell_text(c)},{row}" for (c, _), p in zip(checks, parts) for row in p[1:]
        ]
        atomic_write(args.csv, "\n".join(lines) + "\n")
    if args.json is not None:
        cells = [{"cell": _cell_text(c), **json.loads(render_json(k, machine, name))} for c, k in checks]
        atomic_write(args.json, json.dumps({"cells": cells}, indent=1, sort_keys=True) + "\n")
    return 0


def _cell(run) -> tuple[str, int]:
    """``(size label, budget)`` of an archived run: its cell as the report keys it
    (:func:`harness.report.stats.pairing.cell_size`: the size, then its axis values)."""
    from harness.report.stats.pairing import cell_size

    return cell_size(run.config.size, run.config.axes), run.config.budget_tokens


def _by_cell(runs: list) -> dict:
    """The archived runs by cell (:func:`_cell`), in report order."""
    from harness.report.stats.pairing import cell_order

    out: dict = {}
    for r in runs:
        out.setdefault(_cell(r), []).append(r)
    return dict(sorted(out.items(), key=lambda kv: cell_order(kv[0])))


def _cell_name(cell: tuple[str, int]) -> str:
    from harness.report.render.fmt import fmt_tokens
    from harness.report.stats.pairing import cell_name

    return cell_name(cell[0], fmt_tokens(cell[1]))


def _cell_text(cell: tuple[str, int]) -> str:
    """``tiny@lr=0.001/2048``: a cell in a CSV or JSON field (no comma)."""
    return f"{cell[0]}/{cell[1]}"


def _retrained(args: argparse.Namespace, archive, chosen: list, seeds: list[int], rt) -> tuple[list, list]:
    """``(new, runs)``: the re-trained runs (:class:`harness.train.retrain.RetrainedRun`) of ``chosen``,
    trained here or read from --results (all of them read, none trained, with --report-only), and the
    archived runs they re-train, in the same order.

    Raises:
        ValueError / FileNotFoundError: another protocol hash here, a folder holding the archived results,
            a corpus missing here, a run that did not finish (one line; before anything trains).
    """
    from harness.store.archive import sha256
    from harness.train.execution import set_threads

    digest = sha256(args.file.read_bytes())
    earlier = rt.claim_folder(args.results, digest, chosen)
    if args.report_only:
        if not earlier:
            raise ValueError(
                f"--report-only: --results {str(args.results)!r} holds no run of this archive re-trained"
            )
        chosen = [r for r in chosen if r.config.run_id in earlier]
        return [earlier[r.config.run_id] for r in chosen], chosen
    set_threads(args.threads)
    fresh = not args.results.exists()
    try:
        rt.check_protocols(chosen, args.results)
    except (ValueError, FileNotFoundError):
        if fresh:  # refused: the folder this call made (its corpus cache) goes again
            shutil.rmtree(args.results, ignore_errors=True)
        raise
    todo = [r for r in chosen if r.config.run_id not in earlier]
    rt.mark_folder(args.results, digest, args.workers, [r.config.run_id for r in todo])
    print(
        f"re-training {len(chosen) - len(earlier)} runs of grid {archive.grid} (seeds {' '.join(map(str, seeds))}; "
        f"{len(earlier)} re-trained here before) with {args.workers} workers x {args.threads or 'default'} threads; "
        + _numerics_plan(chosen, rt),
        file=sys.stderr,
        flush=True,
    )

    def say(out) -> None:
        print(
            f"  {out.run_id}: {out.status}, val_nll {out.val_nll}, {out.wall_s:.0f} s",
            file=sys.stderr,
            flush=True,
        )

    trained = {
        n.run_id: n
        for n in rt.retrain(
            todo,
            args.results,
            workers=args.workers,
            threads=args.threads,
            progress=not args.quiet,
            on_done=say,
        )
    }
    new = [earlier.get(r.config.run_id) or trained[r.config.run_id] for r in chosen]
    failed = [n for n in new if n.status != "done" or n.val_nll is None]
    if failed:
        raise ValueError(f"re-trained run {failed[0].run_id} ended {failed[0].status}: no NLL to compare")
    return new, chosen


def _numerics_plan(chosen: list, rt) -> str:
    """Which numerics the runs ``chosen`` re-train with, and what the check then measures (one clause)."""
    from harness.models.numerics import numerics_id

    plan = {(r.numerics, numerics_id(rt.routing_for(r))) for r in chosen}
    same = sorted(a for a, b in plan if a == b)
    other = sorted(f"{a} -> {b}" for a, b in plan if a != b)
    if not other:
        return f"with the archive's numerics ({', '.join(same)}): the check compares machines"
    return (
        f"archive numerics this code does not have ({'; '.join(other)}): the check measures code plus machine"
        + (f"; with the archive's numerics for {', '.join(same)}" if same else "")
    )
