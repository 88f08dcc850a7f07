"""Writing one split's tokens into fixed-size shard files (``SPLIT-NNNNN.bin``), for
:mod:`harness.data.shards`: each finished shard is synced and recorded (tokens, sha256, documents,
bytes); a killed build's state reopens the open shard, cut to what was recorded.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import numpy as np

from harness.common.files import fsync_file


class _ShardWriter:
    """Appends one split's tokens to fixed-size shard files; records finished shards."""

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
        path = self._path()
        if path.exists() or self.open_tokens:
            with open(path, "r+b" if path.exists() else "wb") as fh:  # cut what the last chunk left
                fh.truncate(self.open_tokens * dtype.itemsize)

    def _path(self) -> Path:
        return self.folder / f"{self.split}-{len(self.shards):05d}.bin"

    def append(self, ids: np.ndarray) -> None:
        while ids.size:
            room = self.shard_tokens - self.open_tokens
            head, ids = ids[:room], ids[room:]
            with open(self._path(), "ab") as fh:
                fh.write(head.tobytes())
            self.open_tokens += head.size
            if self.open_tokens == self.shard_tokens:
                self.close_shard()

    def close_shard(self) -> None:
        if not self.open_tokens:
            return
        path = self._path()
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
        return {"shards": self.shards, "open_tokens": self.open_tokens}

    @property
    def tokens(self) -> int:
        return sum(s["tokens"] for s in self.shards) + self.open_tokens
