"""What a shard build says while it runs (:mod:`harness.data.shards`): a line per finished shard with the
build's speed so far, and a closing line with tokens per second and per CPU-second."""

from __future__ import annotations

import resource
import time
from collections.abc import Callable
from pathlib import Path


def cpu_seconds() -> float:
    """User + system CPU seconds of this process and its finished children."""
    return sum(
        getattr(resource.getrusage(who), f)
        for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
        for f in ("ru_utime", "ru_stime")
    )


class BuildSpeed:
    """This build's tokens per second (tokens written since :attr:`tokens0`, from when it was made).

    ``writers`` (split -> :class:`~harness.data.shard_writer.ShardWriter`) is set once they exist."""

    def __init__(self, log: Callable[[str], None]) -> None:
        self.log, self.t0, self.tokens0, self.writers = log, time.perf_counter(), 0, {}

    def tokens(self) -> int:
        """Tokens in both splits' shards now."""
        return self.writers["train"].tokens + self.writers["val"].tokens

    def on_shard(self, split: str, record: dict) -> None:
        """Say that a shard was closed, with the build's speed so far."""
        elapsed = time.perf_counter() - self.t0
        done = self.tokens() - self.tokens0
        self.log(
            f"{split} shard {record['file']}: {record['tokens']:,} tokens, {record['documents']:,} documents, "
            f"{record['bytes']:,} bytes ({done / max(elapsed, 1e-9) / 1e6:.2f}M tokens/s)"
        )


def log_done(
    folder: Path, splits: dict, documents: int, speed: BuildSpeed, cpu: float, log: Callable[[str], None]
) -> None:
    """The build's closing line: documents, tokens and shards per split, tokens per second and per CPU-second."""
    elapsed = time.perf_counter() - speed.t0
    total = splits["train"]["tokens"] + splits["val"]["tokens"]
    log(
        f"{folder.name}: {documents:,} documents, {splits['train']['tokens']:,} train and "
        f"{splits['val']['tokens']:,} val tokens in {len(splits['train']['shards'])} + "
        f"{len(splits['val']['shards'])} shards; {(total - speed.tokens0) / max(elapsed, 1e-9) / 1e6:.2f}M tokens/s "
        f"over {elapsed:.1f} s ({(total - speed.tokens0) / max(cpu, 1e-9) / 1e6:.2f}M tokens per CPU-second, "
        f"tokenizer training included)"
    )


__all__ = ["BuildSpeed", "cpu_seconds", "log_done"]
