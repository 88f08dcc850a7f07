"""Tune a variant's training settings with Optuna before freezing the protocol (DESIGN 9).

Creates the Optuna study tune:NAME in the queue's storage (TPE sampler, seeded; a
median or Hyperband pruner fed the validation NLL at every evaluation) and enqueues one
run per trial: grid tune:NAME, role tune, trial k at seed 10_000 + k (grid seeds stay
below). `harness work` workers train the trials like any run, as many in parallel as
there are workers; each trial's parameters are drawn when a worker takes it, so TPE
learns from every trial finished by then. A pruned trial ends with status `pruned`.
Trials land in DuckDB like runs (harness sql "select * from runs where grid =
'tune:NAME'").

Search space: --space NAME=LOW:HIGH (uniform), NAME=log:LOW:HIGH, NAME=int:LOW:HIGH or
NAME=choice:A,B; NAME is a TrainConfig field of the optimiser or schedule (lr, min_lr_ratio,
warmup_tokens, schedule, decay_frac, weight_decay, beta1, beta2, grad_clip, batch_tokens)
or warmup_frac (warmup as a fraction of the budget). Default: lr=log:1e-4:3e-2 and
warmup_frac=0:0.2. --grid GRID.toml takes the base settings ([train], [train.VARIANT]) and
the corpus from a grid, so the trials run that grid's protocol. Trials without
eval_every_tokens are evaluated at every quarter of the budget (for the pruner; not part
of the protocol). Running the same command again adds nothing; a larger --trials adds
trials; the same --name with another space is refused.

--show NAME prints the best value and params, the trials and the parameter importances
(Optuna's default evaluator, PED-ANOVA); --json prints them as one object; --write-grid GRID.toml writes the best
settings into the grid's [train] ([train.VARIANT] with --per-variant), keeping its comments.
A grid already queued keeps its settings (its runs are the runs it names), so --write-grid
refuses a grid whose name has runs in the queue: write a new grid instead, from the queued
one (--grid) under a new name (--grid-name), as below.

example:
  harness tune --variant block_attnres --size small --budget-tokens 98304 --trials 12 \\
      --grid ablations/rd_controls_small.toml --name parent_small
  for i in 1 2; do harness work --threads 1 & done; wait
  harness tune --show parent_small
  harness tune --show parent_small --grid ablations/rd_controls_small.toml \\
      --write-grid ablations/rd_tuned_small.toml --grid-name rd_tuned_small
  harness queue ablations/rd_tuned_small.toml
  optuna-dashboard results/queue.journal      # the studies in a browser
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from harness.commands.options import add_storage
from harness.models.sizes import SIZES

MIN_IMPORTANCE_TRIALS = 3  # finished trials below which importances are not computed
ROUGH_IMPORTANCE_TRIALS = 20  # below this many, importances are flagged as rough


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--variant", help="variant to tune (see `harness sizes`)")
    p.add_argument("--size", choices=list(SIZES), help="size preset")
    p.add_argument("--budget-tokens", type=int, help="each trial's training budget in tokens")
    p.add_argument("--trials", type=int, help="number of trials")
    p.add_argument("--corpus", default=None, help="corpus (default: $HARNESS_CORPUS, else the --grid's)")
    p.add_argument(
        "--space",
        action="append",
        default=[],
        metavar="NAME=RANGE",
        help="search-space entry, e.g. lr=log:1e-4:3e-2 (repeat; default: lr and warmup_frac)",
    )
    p.add_argument("--name", help="study name: the study is tune:NAME (default: VARIANT_SIZE_BUDGET)")
    p.add_argument(
        "--grid",
        type=Path,
        metavar="GRID.toml",
        help="take base settings ([train], [train.VARIANT]) and corpus from this grid; with "
        "--show --write-grid NEW.toml: the grid NEW.toml is written from",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="base training override under the space, e.g. --set batch_tokens=2048",
    )
    p.add_argument(
        "--pruner",
        default="median",
        choices=["median", "hyperband", "none"],
        help="pruner fed the validation NLL at every evaluation (default: median)",
    )
    p.add_argument("--seed", type=int, default=0, help="TPE sampler seed (default: 0)")
    p.add_argument(
        "--startup-trials",
        type=int,
        default=None,
        metavar="N",
        help="random trials before TPE models the finished ones (default: max(2, trials // 4))",
    )
    add_storage(p)
    p.add_argument(
        "--show", metavar="NAME", help="show study tune:NAME: best value and params, trials, importances"
    )
    p.add_argument("--json", action="store_true", help="with --show: print one JSON object")
    p.add_argument(
        "--write-grid",
        type=Path,
        metavar="GRID.toml",
        help="with --show: write the best settings into this grid's [train]",
    )
    p.add_argument(
        "--per-variant",
        action="store_true",
        help="with --write-grid: write into [train.VARIANT] (the study's variant) instead",
    )
    p.add_argument(
        "--grid-name",
        metavar="NAME",
        help="with --write-grid: the written grid's name (a grid already queued is refused)",
    )


def main(args: argparse.Namespace) -> int:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if args.show:
        return _show(args)
    if args.json or args.write_grid or args.per_variant or args.grid_name:
        raise ValueError("--json, --write-grid, --per-variant and --grid-name go with --show NAME")
    return _start(args)


def _open(args, *, create: bool):
    from harness.scheduling.queue.run_queue import RunQueue
    from harness.scheduling.queue.storage import COMMAND_RETRY_S

    return RunQueue.open(
        args.storage,
        args.results,
        retry_s=COMMAND_RETRY_S,
        create=create,
        log=lambda msg: print(msg, file=sys.stderr),
    )


def _start(args) -> int:
    from harness.corpus.spec import check_corpus, choose_corpus
    from harness.scheduling.grids.grid import load_grid
    from harness.scheduling.queue.storage import describe_storage
    from harness.scheduling.tuning import (
        TuneSpec,
        check_space,
        create_or_check,
        parse_space,
        with_eval_points,
    )

    missing = [
        f"--{k.replace('_', '-')}"
        for k in ("variant", "size", "budget_tokens", "trials")
        if getattr(args, k) is None
    ]
    if missing:
        raise ValueError(f"harness tune needs {', '.join(missing)} (or --show NAME to look at a study)")
    if args.budget_tokens <= 0:
        raise ValueError(f"--budget-tokens {args.budget_tokens} must be a positive number of tokens")
    base, grid = {}, None
    if args.grid is not None:
        grid = load_grid(args.grid)
        if args.variant not in grid.variants:
            raise ValueError(
                f"--variant {args.variant!r} is not in {args.grid}'s [variants] ({', '.join(grid.variants)})"
            )
        base = grid.train_for(args.variant)
    corpus, source = grid.choose_corpus(args.corpus) if grid is not None else choose_corpus(args.corpus)
    if corpus is None:
        raise ValueError("no corpus: pass --corpus C (or --grid GRID.toml, or set $HARNESS_CORPUS)")
    if args.set:
        from harness.commands.run import parse_overrides  # imported here: it loads torch

        base.update(parse_overrides(args.set))
    space = parse_space(args.space)
    base = with_eval_points(base, args.size, args.budget_tokens)
    check_space(space, args.size, base, args.budget_tokens)
    check_corpus(corpus, source=source)
    name = args.name or f"{args.variant}_{args.size}_{args.budget_tokens}"
    startup = args.startup_trials if args.startup_trials is not None else max(2, args.trials // 4)
    spec = TuneSpec(
        name=name,
        variant=args.variant,
        size=args.size,
        budget_tokens=args.budget_tokens,
        corpus=corpus,
        trials=args.trials,
        space={n: p.text for n, p in space.items()},
        train=base,
        seed=args.seed,
        pruner=args.pruner,
        startup_trials=startup,
    )
    configs = spec.configs()  # checks variant, size and settings before anything is written
    queue = _open(args, create=True)
    how = create_or_check(queue.storage, spec)
    held = queue.runs(spec.study_name)
    result = queue.enqueue([c for c in configs if c.run_id not in held], attrs={"tune_pending": True})
    where = describe_storage(args.storage, args.results)
    space_text = ", ".join(p.text for p in space.values())
    verb = {"created": "created", "same": "exists", "more trials": "exists (trials raised)"}[how]
    print(
        f"study {spec.study_name} {verb} in {where}: {args.variant}, {args.size}, {args.budget_tokens:_} tokens "
        f"per trial; space {space_text}; TPE seed {args.seed} ({startup} random startup trials), "
        f"{args.pruner} pruner"
    )
    if result.added:
        print(
            f"queued {len(result.added)} trial(s) (seeds {configs[len(held)].seed} .. {configs[-1].seed}); "
            f"{len(held)} already queued; next: harness work (each worker draws a trial's params when it "
            "takes it)"
        )
    else:
        print(f"nothing to add: all {len(held)} trial(s) already queued (a larger --trials adds more)")
    return 0


# ----------------------------------------------------------------------------- --show


def _trial_rows(queue, study_name: str) -> list[dict]:
    """One row per trial (run) of the study, in trial order."""
    rows = []
    for r in queue.runs(study_name).values():
        # every attempt of a run has the params its first attempt drew (a retry carries them)
        params = next((x.params for x in sorted(r.trials, key=lambda x: x.number) if x.params), {})
        rows.append(
            {
                "number": min(x.number for x in r.trials),
                "run_id": r.run_id,
                "seed": r.config.seed,
                "state": r.state,
                "value": r.value,
                "params": dict(params),
                "train": dict(r.config.train),
                "wall_s": r.wall_s,
                "attempt": r.attempt,
            }
        )
    return sorted(rows, key=lambda row: row["seed"])


def _importances(study, n_complete: int) -> tuple[dict | None, str]:
    import optuna

    if n_complete < MIN_IMPORTANCE_TRIALS:
        return None, (
            f"parameter importances: not computed: {n_complete} finished trial(s), "
            f"needs at least {MIN_IMPORTANCE_TRIALS}"
        )
    try:
        imp = optuna.importance.get_param_importances(study)  # PED-ANOVA, Optuna's default: deterministic
    except (ValueError, RuntimeError) as exc:
        return None, f"parameter importances: not computed ({exc})"
    rough = (
        f"; rough with fewer than {ROUGH_IMPORTANCE_TRIALS}" if n_complete < ROUGH_IMPORTANCE_TRIALS else ""
    )
    text = ", ".join(f"{k} {v:.2f}" for k, v in imp.items())
    return dict(imp), f"parameter importances (PED-ANOVA over {n_complete} finished trials{rough}): {text}"


def _show(args) -> int:
    import optuna

    from harness.scheduling.tuning import best_params, load_spec, study_name_of, train_overrides

    queue = _open(args, create=False) if _queue_exists(args) else None
    if queue is None:
        raise ValueError(
            f"no queue at {args.storage or args.results / 'queue.journal'}: no tuning study "
            f"{study_name_of(args.show)!r}"
        )
    spec = load_spec(queue.storage, args.show)
    study = optuna.load_study(study_name=spec.study_name, storage=queue.storage)
    rows = _trial_rows(queue, spec.study_name)
    n_complete = sum(r["state"] == "done" for r in rows)
    importances, imp_text = _importances(study, n_complete)
    best = None
    if n_complete:
        _, params, value = best_params(queue.storage, spec.study_name)
        best = {
            "value": value,
            "params": params,
            "train": train_overrides(params, spec.budget_tokens),
            "run_id": next((r["run_id"] for r in rows if r["state"] == "done" and r["value"] == value), None),
        }
    if args.write_grid is not None:
        if best is None:
            raise ValueError(f"tuning study {spec.study_name!r} has no finished trial yet: nothing to write")
        from harness.scheduling.grids.edit import write_train

        _check_unqueued(args, queue)
        changes = write_train(
            args.write_grid,
            best["train"],
            variant=spec.variant if args.per_variant else None,
            source=args.grid,
            name=args.grid_name,
        )
    if args.json:
        print(
            json.dumps(
                {
                    "study": spec.study_name,
                    "spec": spec.__dict__,
                    "best_value": best and best["value"],
                    "best_params": best and best["params"],
                    "best_train": best and best["train"],
                    "best_run_id": best and best["run_id"],
                    "trials": rows,
                    "importances": importances,
                    "importance_note": imp_text,
                },
                indent=2,
                default=str,
            )
        )
    else:
        _print_show(spec, rows, best, imp_text)
    if args.write_grid is not None:
        out = sys.stderr if args.json else sys.stdout
        print(f"wrote {args.write_grid}: " + "; ".join(changes), file=out)
    return 0


def _check_unqueued(args, queue) -> None:
    """Refuse a --write-grid whose grid (its name after the write) has runs in the queue, or
    that would replace another grid file than the one it is written from.

    Raises:
        ValueError: naming the grid and the way: a new file under a new name.
    """
    from harness.scheduling.grids.grid import load_grid

    source = args.grid if args.grid is not None else args.write_grid
    grid = load_grid(source)
    name = args.grid_name or grid.name
    way = (
        f"write a new grid under a new name: --grid {source} --write-grid NEW.toml --grid-name NEW, "
        "then harness queue NEW.toml"
    )
    if args.write_grid.exists() and args.write_grid.resolve() != Path(source).resolve():
        raise ValueError(
            f"--write-grid {args.write_grid}: the file exists and is not the grid written from "
            f"({source}); {way}"
        )
    queued = queue.runs(name)
    if queued:
        raise ValueError(
            f"grid {name!r} is already queued ({len(queued)} runs): its settings are fixed "
            f"(its runs are the runs it names); {way}"
        )


def _queue_exists(args) -> bool:
    from harness.scheduling.queue.storage import parse_storage

    kind, where = parse_storage(args.storage, args.results)
    return kind != "journal" or Path(where).exists()


def _print_show(spec, rows, best, imp_text) -> None:
    from harness.scheduling.workers.loop import fmt_duration

    counts = {
        s: sum(r["state"] == s for r in rows)
        for s in ("done", "pruned", "diverged", "failed", "running", "queued")
    }
    tally = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    print(
        f"tuning study {spec.study_name}: {spec.variant}, {spec.size}, {spec.budget_tokens:_} tokens per trial; "
        f"{len(rows)} of {spec.trials} trials queued ({tally or 'none'})"
    )
    print(f"space: {', '.join(spec.space.values())}; TPE seed {spec.seed}, {spec.pruner} pruner")
    if best is None:
        print("best: no finished trial yet")
    else:
        ps = ", ".join(
            f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in best["params"].items()
        )
        ts = ", ".join(f"{k}={v!r}" for k, v in best["train"].items())
        print(f"best: val_nll {best['value']:.4f} nats/token ({best['run_id']}): {ps} (train: {ts})")
    names = list(spec.space)
    header = ["seed", "state", "val_nll", *names, "wall"]
    table = [header]
    for r in rows:
        vals = [
            f"{r['params'][n]:.4g}" if isinstance(r["params"].get(n), float) else str(r["params"].get(n, "-"))
            for n in names
        ]
        table.append(
            [
                str(r["seed"]),
                r["state"],
                f"{r['value']:.4f}" if r["value"] is not None else "-",
                *vals,
                fmt_duration(r["wall_s"]) if r["wall_s"] is not None else "-",
            ]
        )
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    print()
    for row in table:
        print("  ".join(c.ljust(w) if i == 1 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))))
    print()
    print(imp_text)
