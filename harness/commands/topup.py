"""Add seeds up to the next look where a cell can still decide something (DESIGN section 8).

Reads the grid's finished runs (as `harness report` does) and, for every cell (size,
budget) whose headline is still undecided (neither established nor absent, before the last look)
or whose gain is established with some control `inconclusive`, or (a grid with a [factorial])
whose interaction is not established before the last look, enqueues the seeds up to
the cell's next look for every variant of that cell (pairs need the same seeds); workers
then train them as usual (`harness work`). A cell whose gain is established and every
control decided, or whose last look has passed, gets nothing. New seeds are the next
integers above every seed the cell has used. Once every cell has reached the last planned look,
it says so: the plan's alpha is spent, and more seeds need a new plan (`harness followup`). Idempotent like `harness queue`: seeds
already queued or running count toward the next look, so a second call adds nothing.

Needs looks in the grid's [analysis] plan (e.g. looks = [3, 5, 10]): only then is each
reading tested at its share of alpha, so adding seeds and reading again does not inflate
the false-positive rate. Prints what it queued and why, and what it did not.

--corpus PATH re-points the grid at its corpus on this machine (after `harness import`, or when the
corpus moved): the text at PATH must have the grid's corpus fingerprint (another text is one line
naming both, nothing queued); the queue then records PATH, where workers read it. A grid none of whose
runs has finished yet has nothing to add: topup says so (re-pointing it with --corpus) and opens no
results store.

example:
  harness topup --grid rd_controls_seq --dry-run
  harness topup --grid rd_factorial_study --corpus ~/data/fineweb_edu_sample
  harness topup --grid rd_controls_seq && harness work
"""

from __future__ import annotations

import argparse

from harness.commands.options import add_storage, open_queue


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--grid", required=True, metavar="NAME", help="grid name (the `name` in its TOML)")
    parser.add_argument("--dry-run", action="store_true", help="print what would be queued; queue nothing")
    parser.add_argument(
        "--corpus",
        metavar="PATH",
        default=None,
        help="re-point the grid at its corpus here (e.g. after `harness import`): checked against the "
        "grid's corpus fingerprint (another text is refused, nothing queued); workers then read it there",
    )
    add_storage(parser)


def _held(queued: dict) -> dict:
    """Per cell, what the queue holds (harness.report.stats.topup.CellSeeds) from ``RunQueue.runs(grid)``; a cell of
    a grid with ``[axes]`` is named as the report names it (:func:`harness.report.stats.pairing.cell_size`)."""
    from harness.report.stats.pairing import cell_size
    from harness.report.stats.topup import CellSeeds

    by_cell: dict = {}
    for r in queued.values():
        c = r.config
        by_cell.setdefault((cell_size(c.size, c.axes), c.budget_tokens), []).append(
            (c.variant, c.role, c.seed, r.state)
        )
    out = {}
    for cell, rows in by_cell.items():
        variants = tuple(dict.fromkeys(v for v, _, _, _ in rows))
        state = {(v, s): st for v, _, s, st in rows}
        heads = [v for v, role, _, _ in rows if role in ("parent", "treatment")]
        on_way = ("queued", "running", "done")
        pending = {s for _, _, s, _ in rows if all(state.get((v, s)) in on_way for v in set(heads))}
        out[cell] = CellSeeds(frozenset(s for _, _, s, _ in rows), frozenset(pending), variants)
    return out


def _configs(queued: dict, grid: str, plans) -> list:
    """Run configs of the new seeds: each a copy of a queued run's config of the same cell and
    variant with the seed and run id replaced (:func:`harness.common.terms.run_id`; its axis values kept)."""
    import dataclasses

    from harness.common.terms import run_id
    from harness.report.stats.pairing import cell_size

    template = {}
    for r in queued.values():
        c = r.config
        template.setdefault((cell_size(c.size, c.axes), c.budget_tokens, c.variant), c)
    out = []
    for t in plans:
        for seed in t.new_seeds:
            for v in t.variants:
                tpl = template[(t.size, t.budget_tokens, v)]
                out.append(
                    dataclasses.replace(
                        tpl,
                        seed=seed,
                        run_id=run_id(grid, tpl.size, v, seed, t.budget_tokens, axes=tpl.axes),
                    )
                )
    return out


def _repoint(queue, args: argparse.Namespace, queued: dict):
    """The grid's corpus at ``--corpus`` (:class:`harness.corpus.locate.Binding`), checked against
    its fingerprint before anything is queued; ``None`` without ``--corpus``."""
    if args.corpus is None:
        return None
    from harness.corpus.locate import binding
    from harness.corpus.spec import resolve_corpus
    from harness.data.prepared import cache_dir

    if not queued:
        raise ValueError(f"grid {args.grid} has no runs in the queue to re-point")
    template = next(iter(queued.values())).config
    return binding(
        queue, args.grid, template.corpus_key(), resolve_corpus(args.corpus), cache_dir(args.results)
    )


def _say_bound(queue, args: argparse.Namespace, bound) -> None:
    """Record the grid's corpus at ``--corpus`` (``bound``; nothing on a dry run or without it) and say so."""
    if bound is not None and not args.dry_run:
        queue.bind_corpus(args.grid, bound.fingerprint, bound.name, bound.path)
        print(f"corpus of {args.grid}: {bound.name} (fingerprint {bound.fingerprint[:16]}) at {bound.path}")


def _none_finished(queue, args: argparse.Namespace, queued: dict, bound) -> int:
    """A grid queued and not yet trained: nothing to read, so nothing to add; ``--corpus`` re-points it
    (as ``harness queue --corpus`` does). The results store is not opened (nor created)."""
    _say_bound(queue, args, bound)
    states = [r.state for r in queued.values()]
    held = ", ".join(f"{states.count(s)} {s}" for s in ("queued", "running") if s in states)
    print(
        f"grid {args.grid}: {len(states)} runs in the queue ({held}), none finished: topup adds seeds by "
        "what finished runs show, so nothing to add yet; next: harness work"
    )
    return 0


def main(args: argparse.Namespace) -> int:
    import optuna

    from harness.common.terms import check_grid
    from harness.report.build import compute_stats, load_frames
    from harness.report.render.topup_lines import describe
    from harness.report.stats.topup import alpha_spent_text, plan_topup
    from harness.scheduling.queue.storage import describe_storage
    from harness.store.store import Store

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    queue = open_queue(args)  # before the store: a refusal creates no harness.duckdb
    if queue is None:
        raise FileNotFoundError(
            f"no queue at {describe_storage(args.storage, args.results)}: topup adds runs "
            "to the queue the grid was queued in (pass --storage URL)"
        )
    # the [tuned] runs (robustness row) are descriptive: topup adds seeds to the paired protocol only
    queued = {rid: r for rid, r in queue.runs(args.grid).items() if r.config.tuned is None}
    bound = _repoint(queue, args, queued)
    if queued and all(r.state in ("queued", "running") for r in queued.values()):
        return _none_finished(queue, args, queued, bound)
    store = Store(args.results)
    if not queued and not store.db_path.exists() and not any(store.runs_dir.glob("*.json")):
        check_grid(args.grid, sorted(queue.counts()), "the queue (and the results store holds no run)")
    stats = compute_stats(load_frames(store, args.grid), grid=args.grid)
    plans = plan_topup(stats, _held(queued))
    configs = _configs(queued, args.grid, plans)
    _say_bound(queue, args, bound)
    if configs and not args.dry_run:
        result = queue.enqueue(configs)
        if len(result.added) != len(configs):  # enqueue is idempotent: say what was there already
            print(f"{len(configs) - len(result.added)} of these runs were in the queue already")
    for t in plans:
        print(describe(t, dry_run=args.dry_run))
    if configs:
        print(
            f"{'would queue' if args.dry_run else 'queued'} {len(configs)} runs in "
            f"{describe_storage(args.storage, args.results)}"
            + ("" if args.dry_run else "; next: harness work")
        )
    else:
        print(alpha_spent_text(stats) or "nothing to add")
    return 0
