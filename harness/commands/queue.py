"""Expand an ablation grid (TOML) into runs and add them to the run queue.

Idempotent: a run already queued, running or done is not added again, so queueing
the same grid twice adds nothing, and a grid with a new seed adds only the new runs.
Failed runs are left alone unless --retry-failed. A run id (grid:size:variant:s<seed>:
<budget>) names one config: changing a queued grid's [train] table is an error
(rename the grid instead), and so is changing its [analysis] plan once any of its
runs is queued: the plan is fixed before the runs. So are seeds beyond the plan: a cell
(size, budget) may hold at most its plan's max_seeds seeds (queued and new, `harness topup`'s
included); more are refused, naming the cell. New seeds past the plan's last look (after
`harness topup` said its alpha is spent) are queued with a note: they enter no test. A grid's [schedule] pair_hardware = "same"
(the default) or "any" says whether both runs of a seed must train on one hardware class
(docs/scaling-out.md); any other value is refused here, and queueing again may change it.

A grid's [tuned] table adds, for each listed variant, runs at its own tuned settings
(run ids ending in :tuned): "tune:NAME" takes the best params of that tuning study in
this storage now (see `harness tune`), a table gives them. A queue written by the previous
layout (one Optuna study "harness" for every grid) is read as it is, with a one-line note:
`harness migrate` converts it into one study per grid.

The corpus is the grid's `corpus`, overridden by $HARNESS_CORPUS, overridden by
--corpus. A relative path is resolved against the grid file's folder (the grid's own
corpus, so a grid queues the same corpus from any directory) or the current directory
($HARNESS_CORPUS, --corpus), and stored absolute in each run's config (hf:OWNER/NAME:CONFIG
specs are stored as they are). A grid's corpus is its content: the queue records its
document fingerprint and the path workers read it from. Queueing a grid again with the
same text at another path (--corpus NEWPATH) re-points it; another text is refused with
one line naming both fingerprints, and nothing is queued. An imported grid's TOML names
its corpus as corpus-sha256:<fingerprint>:<name>: the path the queue records is used, or
pass --corpus PATH.

Checked before anything is queued, so a bad grid fails here and not in every worker:
the corpus is readable, UTF-8 text (or Parquet) and holds a non-empty document (a quick
scan of the first MiB of each file, not a full read); every budget is a whole number of
global batches (batch_tokens; the two nearest whole budgets are named) and at most 10^15
tokens; batch_tokens is a multiple of each size's context; the BPE vocabulary is 257
(256 bytes + 1 special token) to 1,048,576. A hub corpus must have been prepared
(`harness prepare GRID.toml`), and a prepared corpus must hold each run's budget in its
train split and its evaluation set in its val split, unless [train] sets max_epochs (a line
gives the budget, train tokens and epochs); gpt2 needs tiktoken installed.

Storage: the default queue is RESULTS/queue.journal (an Optuna journal file).
--storage journal:/shared/fs/queue.journal (or any path ending in .journal) puts
it on a filesystem shared by several machines; --storage postgresql://USER:PASS@HOST/DB
uses a PostgreSQL server (driver psycopg 3: pip install 'rd-harness[postgres]';
postgresql+psycopg2://... for psycopg2). sqlite: is refused (it hands one run to two workers).

Repair: a journal whose line was damaged (a disk error, an edit) stops every command
with an error naming the file and line. Stop every worker, then `harness queue --repair`
writes a clean journal (the valid lines, in order; a damaged line that created a trial
becomes a failed placeholder so the trials after it keep their numbers) and keeps the
damaged file as QUEUE.journal.bak-<time>. A torn last line (a writer killed mid-append)
needs no repair: it is skipped with a warning and set aside in QUEUE.journal.torn.

example:
  harness queue ablations/rd_controls_small.toml
  harness queue --repair                 # after "queue journal ...: line N is corrupt"
  harness queue ablations/rd_paper.toml --corpus hf:HuggingFaceFW/fineweb-edu:sample-10BT \\
      --storage journal:/shared/rd/queue.journal
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

from harness.commands.options import add_storage, open_queue
from harness.scheduling.grids.grid import check_plan_unchanged, load_grid, resolve_tuned
from harness.scheduling.grids.plan_seeds import check_plan_seeds


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "grid",
        type=Path,
        metavar="GRID.toml",
        nargs="?",
        help="grid spec (see ablations/README.md); not with --repair",
    )
    parser.add_argument(
        "--corpus",
        metavar="C",
        default=None,
        help="corpus overriding the grid's (default: $HARNESS_CORPUS, else the grid's); for a grid already "
        "queued, checked against its corpus fingerprint: the same text re-points it, another is refused",
    )
    add_storage(parser)
    parser.add_argument(
        "--retry-failed",
        action="store_true",
        help="queue failed runs of this grid again (retry counters reset)",
    )
    parser.add_argument(
        "--repair",
        action="store_true",
        help="rewrite a damaged queue journal as its valid lines (backup kept); stop workers first",
    )


def main(args: argparse.Namespace) -> int:
    import optuna

    from harness.scheduling.queue.hardware_pairs import set_policy
    from harness.scheduling.queue.run_queue import RunQueue
    from harness.scheduling.queue.storage import COMMAND_RETRY_S, describe_storage, parse_storage

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if args.repair:
        if args.grid is not None:
            raise ValueError("--repair takes no GRID.toml: it repairs the queue journal, then queue the grid")
        return _repair(args)
    if args.grid is None:
        raise ValueError("give a GRID.toml to queue (or --repair to repair the queue journal)")
    grid = load_grid(args.grid)
    parse_storage(args.storage, args.results)  # a bad --storage: one line before the corpus is read or sized
    from harness.corpus import locate
    from harness.corpus.spec import parse_ref
    from harness.data.prepared import cache_dir
    from harness.scheduling import tuning

    existing = open_queue(args)  # None before the first grid is queued here
    notes = _plan_seeds(grid, existing)  # more seeds than the plan allows: refused before anything is read
    # an imported grid's TOML names its corpus by reference: the path the queue records (if any)
    corpus, source = grid.choose_corpus(args.corpus)
    if parse_ref(corpus or "") is not None:
        corpus, source = locate.here(existing, grid.name, corpus, source)
    configs = _checked_configs(grid, corpus, source)
    # the corpus by content: the same text at another path re-points the grid, another text is refused,
    # before its splits are sized (which may build its tokenizer and shards)
    bound = locate.binding(
        existing, grid.name, configs[0].corpus_key(), configs[0].corpus, cache_dir(args.results)
    )
    _sized(configs, args)
    queue = existing or RunQueue.open(
        args.storage, args.results, retry_s=COMMAND_RETRY_S, log=lambda msg: print(msg, file=sys.stderr)
    )
    if grid.tuned:

        def best(study: str) -> tuple[str, dict]:
            spec, params, _ = tuning.best_params(queue.storage, study)
            return spec.variant, params

        configs = grid.expand(corpus=corpus, tuned=resolve_tuned(grid, best))
        for config in configs:
            if config.tuned is not None:  # the others were checked above
                config.check_trainable()
    check_plan_unchanged(grid, {rid: r.config for rid, r in queue.runs(grid.name).items()})
    from harness.common.files import results_id

    queue.bind_results(grid.name, args.results.resolve(), results_id(args.results, create=True))
    set_policy(queue.storage, queue.study_of(grid.name), grid.pair_hardware)  # [schedule] pair_hardware
    result = queue.enqueue(
        configs, retry_failed=args.retry_failed, same_corpus=bound is not None and bound.checked
    )
    if bound is not None:
        queue.bind_corpus(grid.name, bound.fingerprint, bound.name, bound.path)
    _say_queued(grid, configs, result, describe_storage(args.storage, args.results), args)
    for note in notes if result.added else ():
        print(note)
    return 0


def _plan_seeds(grid, queue) -> list[str]:
    """Refuse a grid whose cells would get more seeds than its analysis plan's ``max_seeds`` (the plan its
    queued runs carry, else the grid's); the lines naming new seeds past the plan's last look
    (:func:`harness.scheduling.grids.plan_seeds.check_plan_seeds`)."""
    held = [r.config for r in queue.runs(grid.name).values()] if queue is not None else []
    held = [c for c in held if c.tuned is None]
    plan = next((c.analysis for c in held if c.analysis), None) or grid.analysis.as_config()
    return check_plan_seeds(
        grid.name,
        plan,
        [(c.size, c.budget_tokens, c.seed) for c in held],
        [(c.size, c.budget_tokens, c.seed) for c in grid.cells()],
    )


def _checked_configs(grid, corpus: str | None, source: str) -> list:
    """The grid's run configs (without its [tuned] runs, which need the storage), checked before anything
    is queued: what would fail in every worker fails here (settings, corpus there, readable, text)."""
    configs = grid.expand(corpus=corpus, tuned={})
    for config in configs:
        config.check_trainable()
    from harness.corpus.probe import probe_corpus
    from harness.corpus.spec import check_corpus

    check_corpus(configs[0].corpus, source=source)
    probe_corpus(configs[0].corpus)  # readable, text, not empty: a quick scan
    return configs


def _sized(configs: list, args: argparse.Namespace) -> None:
    """Refuse a grid its corpus cannot feed (prepared, big enough: :func:`~harness.scheduling.grids.
    corpus_need.check_corpora`), leaving no shards it built to tell (nor a results folder made for them)."""
    from harness.common.files import undone_if_refused
    from harness.data.prepared import cache_dir
    from harness.scheduling.grids.corpus_need import check_corpora

    cache = cache_dir(args.results)
    # a refused grid leaves no shards it built to size the splits (nor the results folder it made for them)
    made = undone_if_refused(args.results) if not args.results.exists() else contextlib.nullcontext()
    with made, undone_if_refused(cache):
        check_corpora(configs, cache, grid_path=str(args.grid))  # prepared, big enough


def _say_queued(grid, configs: list, result, where: str, args: argparse.Namespace) -> None:
    """What was queued (with the next command to run), what was there already, and the failed runs left."""
    n = len(configs)
    if result.added or result.retried:
        msg = f"{grid.name}: queued {len(result.added)} runs"
        if result.retried:
            msg += f" and {len(result.retried)} failed runs again"
        if result.present:
            msg += f" ({len(result.present)} already queued or done)"
        print(f"{msg} in {where}")
        print(f"corpus: {configs[0].corpus}")
        import shlex

        from harness.common.files import default_results

        hint = "next: harness work"
        if args.results != default_results():
            hint += f" --results {shlex.quote(str(args.results))}"
        if args.storage is not None:
            hint += f" --storage {shlex.quote(args.storage)}"
        print(hint)
    else:
        print(
            f"{grid.name}: nothing to add: all {len(result.present)} runs already queued or done"
            if not result.failed
            else f"{grid.name}: nothing to add: {len(result.present)} of {n} runs already queued or done"
        )
    if result.failed:
        print(
            f"{len(result.failed)} failed runs left as they are (pass --retry-failed to queue them "
            f"again): {', '.join(result.failed[:5])}{' ...' if len(result.failed) > 5 else ''}"
        )


def _repair(args: argparse.Namespace) -> int:
    """``harness queue --repair``: :func:`harness.scheduling.queue.journal.repair_journal`, refused
    while a worker holds a fresh lease (it keeps byte offsets into the journal)."""
    from harness.scheduling.queue.journal import repair_journal
    from harness.scheduling.queue.run_queue import RunQueue
    from harness.scheduling.queue.storage import parse_storage

    kind, path = parse_storage(args.storage, args.results)
    if kind != "journal":
        raise ValueError(
            f"--repair repairs a journal file; {args.storage} is a database server "
            "(its own tools check and repair it)"
        )

    def no_live_workers(storage) -> None:
        live = RunQueue(storage, create=False).live_workers()
        if live:
            raise ValueError(
                f"worker(s) {', '.join(live)} hold a fresh lease in {path}: stop every worker "
                "before --repair (a running worker keeps byte offsets into the journal)"
            )

    report = repair_journal(path, verify=no_live_workers)
    if report.backup is None:
        print(f"queue journal {path}: all {report.lines} lines are valid; nothing to repair")
        return 0
    print(
        f"queue journal {path}: kept {report.kept} of {report.lines} lines; damaged file kept as {report.backup}"
    )
    for line, what in report.placeholders:
        print(f"  line {line}: unreadable; it created a trial or study, replaced by {what} (numbering kept)")
    for line, why in report.dropped:
        print(f"  line {line}: dropped ({why})")
    if report.unidentified:
        print(
            f"  warning: line(s) {', '.join(map(str, report.unidentified))} could not be identified; had one "
            "created a trial, the trials after it would be numbered one lower: check `harness status`"
        )
    print("next: harness status; `harness queue GRID.toml` again re-adds any run whose only trial was lost")
    return 0
