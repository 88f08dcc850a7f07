"""Command-line options shared by several commands, declared once (``--results`` and
``--verbose`` are added to every command by :func:`harness.cli.build_parser`)."""

from __future__ import annotations

import argparse

STORAGE_HELP = (
    "queue storage: postgresql://..., journal:PATH or PATH.journal (default: RESULTS/queue.journal)"
)


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


__all__ = ["STORAGE_HELP", "add_storage"]
