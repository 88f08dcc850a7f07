"""Command-line options shared by several commands, declared once (``--results`` and
``--verbose`` are added to every command by :func:`harness.cli.build_parser`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.design.settings import BY_NAME
from harness.design.train_table import EXECUTION_KEYS, execution_overrides, parse_value
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


_DECLARED = object()  # add_setting_argument's default: the declaration's


def add_setting_argument(
    p: argparse.ArgumentParser,
    name: str,
    *,
    scope: str | None = None,
    default=_DECLARED,
    default_words: str | None = None,
) -> None:
    """The flag of the setting ``name`` (``--micro-batch-size``, ``--routing``, ``--threads``...), its type,
    choices and help text from its declaration (:data:`harness.design.settings.SETTINGS`).

    Not given, a setting a ``[train]`` table may set is ``None`` (the grid's value, else the declared default:
    :meth:`~harness.train.execution.ExecutionSettings.for_run`), a list setting ``[]`` (added to the grid's), any
    other its declared default. A setting that allows ``auto`` is read as text and parsed by its consumer
    (``--devices``: :func:`~harness.train.execution.parse_devices`). ``scope``: what the value applies to in
    this command, in its help; ``default`` / ``default_words``: this command's own default and its words.
    """
    setting = BY_NAME[name]
    if default is _DECLARED:
        default = [] if setting.kind == "tuple" else None if setting.in_table else setting.default
    more = {"type": int} if setting.kind == "int" and not setting.auto and not setting.in_table else {}
    if setting.kind == "tuple":
        more["action"] = "append"
    p.add_argument(
        setting.flag,
        default=default,
        choices=setting.choices if setting.kind in ("str", "tuple") else None,
        metavar=setting.metavar,
        help=setting.help_for(scope, default_words).replace("%", "%%"),  # argparse formats help with %
        **more,
    )


def set_unflagged_defaults(p: argparse.ArgumentParser, *names: str) -> None:
    """The settings ``names`` that a command takes no flag for, at their declared defaults
    (:data:`harness.design.settings.SETTINGS`), so :func:`execution_settings` reads every one from ``args``."""
    p.set_defaults(**{name: BY_NAME[name].default for name in names})


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
    settings = ExecutionSettings(
        progress=not args.quiet,
        accelerator=args.accelerator,
        devices=parse_devices(args.devices) if args.devices is not None else BY_NAME["devices"].default,
        strategy=args.strategy,
        num_nodes=args.num_nodes,
        micro_batch_size=parse_micro_batch(args.micro_batch_size),
        loggers=tuple(args.logger),
        threads=args.threads,
        stop_after_tokens=args.stop_after_tokens,
        routing=args.routing,
    )
    return settings.replace(**chosen)


__all__ = [
    "STORAGE_HELP",
    "add_storage",
    "add_setting_argument",
    "set_unflagged_defaults",
    "parse_micro_batch",
    "execution_settings",
]
