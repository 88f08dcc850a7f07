"""Writing one split's tokens into fixed-size shard files (``SPLIT-NNNNN.bin``), for
:mod:`harness.data.shards`: each finished shard is synced and recorded (tokens, sha256, documents,
bytes); a killed build's state reopens the open shard, cut to what was recorded. The writer also
hashes the split's whole token stream (all its shards in order), which the corpus's protocol
description records (:func:`harness.data.shards.protocol_description`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import numpy as np

from harness.common.files import fsync_file


class ShardWriter:
    """Appends one split's tokens to fixed-size shard files; records finished shards.

    Args:
        folder: the corpus folder.
        split: ``train`` or ``val`` (the files are ``SPLIT-NNNNN.bin``).
        shard_tokens: tokens per shard file.
        dtype: the token dtype (:func:`harness.data.tokenizer.token_dtype`).
        state: what a killed or finished build recorded (:meth:`state`), or ``{}`` for a new split.
        token_bytes: ``[V]`` UTF-8 bytes of each token id.
        eos_id: the end-of-document token (counted as the shard's documents).
        on_shard: called with ``(split, record)`` when a shard is finished.
    """

    def __init__(
        self,
        folder: Path,
        split: str,
        shard_tokens: int,
        dtype: np.dtype,
        state: dict,
        token_bytes: np.ndarray,
        eos_id: int,
        on_shard: Callable[[str, dict], None],
    ):
        self.folder, self.split, self.shard_tokens, self.dtype = folder, split, shard_tokens, dtype
        self.eos_id = eos_id
        self.shards: list[dict] = list(state.get("shards", []))
        self.open_tokens = int(state.get("open_tokens", 0))
        self.token_bytes, self.on_shard = token_bytes, on_shard
        for stale in folder.glob(f"{split}-*.bin"):  # shards a killed prepare began after its last record
            if int(stale.stem.rsplit("-", 1)[1]) > len(self.shards):
                stale.unlink()
        path = self.path
        if path.exists() or self.open_tokens:
            with open(path, "r+b" if path.exists() else "wb") as fh:  # cut what the last chunk left
                fh.truncate(self.open_tokens * dtype.itemsize)
        # the split's stream hash goes on over what earlier (or killed) builds wrote: read it back once
        self._digest = hashlib.sha256()
        for name in [s["file"] for s in self.shards] + ([path.name] if self.open_tokens else []):
            with open(folder / name, "rb") as fh:
                for block in iter(lambda: fh.read(1 << 24), b""):
                    self._digest.update(block)

    @property
    def path(self) -> Path:
        """The open shard's file."""
        return self.folder / f"{self.split}-{len(self.shards):05d}.bin"

    def append(self, ids: np.ndarray) -> None:
        """Write ``ids`` ([n], the token dtype) after the split's tokens, closing each shard that fills."""
        self._digest.update(ids.tobytes())
        while ids.size:
            room = self.shard_tokens - self.open_tokens
            head, ids = ids[:room], ids[room:]
            with open(self.path, "ab") as fh:
                fh.write(head.tobytes())
            self.open_tokens += head.size
            if self.open_tokens == self.shard_tokens:
                self.close_shard()

    def close_shard(self) -> None:
        """Sync and record the open shard (nothing when it is empty)."""
        if not self.open_tokens:
            return
        path = self.path
        fsync_file(path)
        data = np.fromfile(path, dtype=self.dtype)
        record = {
            "file": path.name,
            "tokens": int(data.size),
            "sha256": hashlib.sha256(data.tobytes()).hexdigest(),
            "documents": int(np.count_nonzero(data == self.eos_id)),
            "bytes": int(self.token_bytes[data].sum()),
        }
        del data
        self.shards.append(record)
        self.open_tokens = 0
        self.on_shard(self.split, record)

    def reopen_last(self) -> None:
        """Make a finished short last shard the open one again (to extend the corpus)."""
        if self.shards and self.shards[-1]["tokens"] < self.shard_tokens:
            self.open_tokens = self.shards.pop()["tokens"]

    def state(self) -> dict:
        """The finished shards' records and the open shard's length (what a resumed build reopens)."""
        return {"shards": self.shards, "open_tokens": self.open_tokens}

    @property
    def tokens(self) -> int:
        """Tokens of the split written so far."""
        return sum(s["tokens"] for s in self.shards) + self.open_tokens

    @property
    def sha256(self) -> str:
        """sha256 (hex) of the split's tokens so far, all shards in order: of ``SPLIT.bin`` in the
        single-file layout this format replaced."""
        return self._digest.hexdigest()


__all__ = ["ShardWriter"]
