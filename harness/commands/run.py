"""Train one run (variant x size x seed x budget) on a corpus and store its results.

Writes the run's result file under RESULTS/runs/ (atomically) and ingests it into
RESULTS/harness.duckdb: tables runs, metrics, routing, route_pairs, route_params and the
view final. A run that is
stopped or killed resumes from RESULTS/checkpoints/ when the same command is run again.
A diverged run (NaN/inf loss) is recorded with status 'diverged'; the command still
exits 0. A run already done is not trained again; if it was done with other settings (the
same --grid, another config), the command refuses and names the differing fields
(--force trains it again, replacing its result). An unreadable checkpoint is set aside in
RESULTS/checkpoints/set-aside/ and the run restarts from scratch, with a warning. Training settings: the preset's defaults, then --set KEY=VALUE overrides
(any TrainConfig field: lr, batch_tokens, eval_every_tokens, vocab_size, ...).

A corpus is a JSONL/Parquet file (column `text`), a .txt file, a directory or glob of
those, or hf:OWNER/NAME:CONFIG (streamed from the hub where a network exists).

example:
  harness run --variant rd_attnres --size tiny --seed 0 --budget-tokens 49152 \\
      --corpus ../shared/data/fineweb_edu_sample --results /tmp/r
  harness sql "select variant, seed, val_nll, val_bpb from final" --results /tmp/r
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.commands.options import (
    add_setting_argument,
    execution_settings,
)
from harness.common import console
from harness.common.terms import ROLES
from harness.corpus.spec import check_corpus, choose_corpus
from harness.data.prepared import cache_dir
from harness.design.train_table import parse_value
from harness.models.sizes import SIZES
from harness.scheduling.grids.corpus_need import check_gpt2_files
from harness.scheduling.workers.devices import check_accelerator
from harness.train.fencing import FolderFence, FolderWatch, LeaseLost


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--variant", required=True, help="variant name (see `harness sizes`)")
    p.add_argument("--size", required=True, choices=list(SIZES), help="size preset")
    p.add_argument("--seed", type=int, required=True, help="seed: fixes data order and initialisation")
    p.add_argument("--budget-tokens", type=int, required=True, help="training budget in tokens")
    p.add_argument(
        "--corpus",
        default=None,
        help="corpus: file, directory, glob or hf:OWNER/NAME:CONFIG (default: $HARNESS_CORPUS)",
    )
    p.add_argument("--grid", default="adhoc", help="grid name stored with the run (default: adhoc)")
    p.add_argument(
        "--role", choices=list(ROLES), help="role stored with the run (default: the variant spec's role)"
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="training override, e.g. --set lr=1e-3 --set eval_every_tokens=25000",
    )
    add_setting_argument(
        p,
        "devices",
        scope="N > 1 trains this run on N ranks of this machine, started by this command (DDP); under "
        "torchrun/srun, the ranks per node they start",
        default=None,
        default_words="1",
    )
    for name in ("strategy", "num_nodes", "accelerator", "micro_batch_size", "routing", "threads"):
        add_setting_argument(p, name)
    add_setting_argument(p, "stop_after_tokens")
    p.add_argument("--force", action="store_true", help="train again even if this run is already done")
    add_setting_argument(p, "loggers")
    p.add_argument(
        "--quiet",
        action="store_true",
        help="no progress output ($HARNESS_PROGRESS: auto = a bar on a terminal, else lines; lines; off)",
    )


def parse_overrides(items: list[str]) -> dict:
    """``["lr=1e-3", "compile=true"]`` -> ``{"lr": 0.001, "compile": True}``, typed as a ``[train]``
    table's keys (:func:`~harness.design.train_table.parse_value`).

    Raises:
        ValueError: an item without ``=``, an unknown key, or a value of the wrong type.
    """
    from harness.design.config import train_keys

    out, keys = {}, train_keys()
    for item in items:
        if "=" not in item:
            raise ValueError(f"--set {item!r}: expected KEY=VALUE")
        key, raw = item.split("=", 1)
        out[key.strip()] = parse_value(key.strip(), raw, keys)
    return out


def main(args: argparse.Namespace) -> int:
    show = not args.quiet
    from harness.design.config import RunConfig

    console.progress_mode()  # a bad $HARNESS_PROGRESS is one line now, not a traceback mid-run
    check_accelerator(args.accelerator)  # a GPU asked for where there is none: one line
    corpus, source = choose_corpus(args.corpus)
    if corpus is None:
        raise ValueError("no corpus: pass --corpus C or set $HARNESS_CORPUS")
    if args.stop_after_tokens is not None and args.stop_after_tokens <= 0:
        raise ValueError(
            f"--stop-after-tokens {args.stop_after_tokens}: expected a positive number of tokens"
        )
    settings = execution_settings(args)
    config = RunConfig.adhoc(
        args.variant,
        args.size,
        args.seed,
        args.budget_tokens,
        corpus,
        grid=args.grid,
        role=args.role,
        train=parse_overrides(args.set),
    )
    config.check_trainable()  # a budget, batch or vocabulary it cannot train: refused before the corpus
    console.phase(f"[{args.variant} s{args.seed}] loading torch and Lightning ...", show=show)
    # lazy: torch and Lightning (seconds on a busy machine) load only once the names above are checked
    from lightning.fabric.utilities.exceptions import MisconfigurationException

    from harness.train import RunInterrupted, train_run
    from harness.train.execution import set_threads
    from harness.train.result_file import stored_result
    from harness.train.settings_check import check_run, check_settings

    set_threads(settings.threads)
    check_settings(settings)  # what Lightning would refuse at run time (strategy, accelerator, devices)
    check_run(config, settings)  # a batch the ranks cannot split
    if not args.force:
        try:
            previous, diff = stored_result(config, args.results)
        except ValueError as exc:  # an unreadable result is replaced, and said so
            print(f"warning: {exc}; training the run again replaces it", file=sys.stderr)
            previous, diff = None, []
        if previous is not None and previous.get("status") == "done":
            if diff:
                raise ValueError(
                    f"{config.run_id} is already done in {args.results} with another config ({'; '.join(diff)}); "
                    "a run id names one config: pick another --grid, or pass --force to train it again "
                    "with these settings (its result is replaced)"
                )
            print(f"{config.run_id}: already done in {args.results} (use --force to train it again)")
            return 0
    # what the run would fail on once it made its results folder: refused before, leaving nothing
    check_corpus(config.corpus, source=source)
    check_gpt2_files(config.corpus_key(), cache_dir(args.results))
    results = Path(args.results)
    results.mkdir(
        parents=True, exist_ok=True
    )  # watched from the start: a run never writes into another folder
    watch = FolderWatch(results)
    try:
        status = train_run(config, args.results, settings, fence=FolderFence(watch, config.run_id))
    except LeaseLost as exc:  # a run trained by hand is lost only with its results folder
        return _folder_lost(config.run_id, exc.reason)
    except OSError:  # e.g. its corpus cache went with the folder
        if watch.look() is None:
            raise
        return _folder_lost(config.run_id, f"results folder {results} {watch.gone}")
    except RunInterrupted as exc:
        print(f"{config.run_id}: {exc}; run the same command again to resume")
        return 0 if args.stop_after_tokens else 130
    except MisconfigurationException as exc:  # e.g. --accelerator gpu on a machine without one
        raise ValueError(str(exc)) from None
    print(f"{config.run_id}: {status}")
    return 0


def _folder_lost(run_id: str, why: str) -> int:
    """The one line (stderr) of a run whose results folder went away, and exit status 1."""
    print(
        f"harness run: error: {why}; {run_id} stopped and wrote nothing more there "
        "(check the folder or the mount, then run the same command again)",
        file=sys.stderr,
    )
    return 1
