"""Command-line options shared by several commands, declared once (``--results`` and
``--verbose`` are added to every command by :func:`harness.cli.build_parser`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.design.train_table import EXECUTION_KEYS, execution_overrides, parse_value
from harness.models.numerics import DEFAULT_ROUTING, ROUTING_PATHS
from harness.train.execution import ExecutionSettings, parse_devices

STORAGE_HELP = (
    "queue storage: postgresql://..., journal:PATH or PATH.journal (default: RESULTS/queue.journal)"
)


def output_file(text: str) -> Path:
    """An ``argparse`` type for an output file's option: the path, refused when empty (``Path("")`` is the
    current folder, which would be reported as a folder named ``.``)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"{text!r}: an empty path; give a file's path")
    return Path(text)


def add_storage(parser: argparse.ArgumentParser, *, reads_only: bool = False) -> None:
    """Add ``--storage URL`` (the run queue's Optuna storage; ``None`` = ``RESULTS/queue.journal``).

    ``reads_only``: the command only reads the queue (its help says so).
    """
    help_text = (
        STORAGE_HELP.replace("queue storage:", "queue storage, read for runs still queued or running:")
        if reads_only
        else STORAGE_HELP
    )
    parser.add_argument("--storage", metavar="URL", default=None, help=help_text)


def open_queue(args: argparse.Namespace, *, create: bool = False):
    """The run queue at ``args.storage`` (default: the results folder's journal), retried for
    :data:`~harness.scheduling.queue.storage.COMMAND_RETRY_S` while unreachable; ``None`` when there is
    none (and ``create`` is false). Optuna's info logging is silenced; retries go to stderr.

    Raises:
        StorageUnavailable: unreachable for that long.
    """
    import sys

    import optuna

    from harness.scheduling.queue.run_queue import (
        RunQueue,  # lazy: Optuna and the queue load only when a command runs
    )
    from harness.scheduling.queue.storage import COMMAND_RETRY_S  # lazy: as above

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        return RunQueue.open(
            args.storage,
            args.results,
            create=create,
            retry_s=COMMAND_RETRY_S,
            log=lambda msg: print(msg, file=sys.stderr),
        )
    except FileNotFoundError:
        return None


#: ``--accelerator`` values of ``harness run`` / ``harness work`` (Lightning's, less those this
#: harness does not train on: ``tpu``, ``hpu``; a refused one spends no retry).
ACCELERATORS = ("auto", "cpu", "gpu", "cuda", "mps")


def add_accelerator_argument(p: argparse.ArgumentParser) -> None:
    """``--accelerator`` of ``harness run`` and ``harness work``."""
    p.add_argument(
        "--accelerator",
        default="auto",
        choices=ACCELERATORS,
        help="where to train (default: gpu when CUDA is available, else cpu)",
    )


def add_micro_batch_argument(p: argparse.ArgumentParser) -> None:
    """``--micro-batch-size`` of ``harness run`` and ``harness work``."""
    p.add_argument(
        "--micro-batch-size",
        default=None,
        metavar="N|auto",
        help="sequences per forward+backward on one device; a step's global batch (batch_tokens) runs "
        "as micro-batches of N, gradients accumulating (execution setting: the run id and the "
        "protocol hash stay; runs.micro_batch_size records it). auto: the largest that fits, "
        "probed on CUDA at the start; the whole per-device batch on a CPU. Default: the grid's "
        "[train] micro_batch_size, else auto",
    )


def add_routing_argument(p: argparse.ArgumentParser) -> None:
    """``--routing`` of ``harness run`` and ``harness work`` (choices: :data:`harness.models.numerics.ROUTING_PATHS`)."""
    p.add_argument(
        "--routing",
        default=None,
        choices=ROUTING_PATHS,
        help="how routing sites are computed: two_phase or per_site, the same function rounded differently "
        "(execution setting: the run id and the protocol hash stay; each path has its numerics revision, "
        "recorded per run as runs.numerics and compared by [schedule] pair_hardware = \"same\"). Default: the "
        f"grid's [train] routing, else {DEFAULT_ROUTING}",
    )


def parse_micro_batch(value: str | None) -> int | str | None:
    """``--micro-batch-size``: ``None`` (not given), ``auto`` or a positive int.

    Raises:
        ValueError: anything else (the message names the value and what is allowed).
    """
    if value is None:
        return None
    parsed = parse_value("micro_batch_size", value, EXECUTION_KEYS)
    return execution_overrides({"micro_batch_size": parsed})["micro_batch_size"]  # 'auto' or > 0


def execution_settings(args: argparse.Namespace, **chosen) -> ExecutionSettings:
    """The :class:`~harness.train.execution.ExecutionSettings` of ``harness run`` / ``harness work``'s
    options (``--accelerator``, ``--devices``, ``--strategy``, ``--num-nodes``, ``--micro-batch-size``,
    ``--logger``, ``--threads``, ``--stop-after-tokens``, ``--routing``, ``--quiet``); ``chosen`` overrides fields
    the command resolved itself (``harness work``'s ranks per run, from its GPU claim).

    Raises:
        ValueError: a bad ``--devices`` or ``--micro-batch-size`` (one line naming it).
    """
    devices = getattr(args, "devices", None)
    settings = ExecutionSettings(
        progress=not args.quiet,
        accelerator=args.accelerator,
        devices=parse_devices(devices) if devices is not None else 1,
        strategy=args.strategy,
        num_nodes=getattr(args, "num_nodes", 1),
        micro_batch_size=parse_micro_batch(args.micro_batch_size),
        loggers=tuple(args.logger),
        threads=args.threads,
        stop_after_tokens=getattr(args, "stop_after_tokens", None),
        routing=getattr(args, "routing", None),
    )
    return settings.replace(**chosen)


__all__ = [
    "STORAGE_HELP",
    "ACCELERATORS",
    "add_accelerator_argument",
    "add_storage",
    "add_micro_batch_argument",
    "add_routing_argument",
    "parse_micro_batch",
    "execution_settings",
]
