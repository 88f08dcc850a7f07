"""Reading one split's shard files (:mod:`harness.data.shards` writes them) as one token array."""

from __future__ import annotations

from pathlib import Path

import numpy as np


class ShardedTokens:
    """One split's shards as one logical read-only token array ``[N]`` (a memory map per shard).

    Supports what the data module reads: ``len``, integer index arrays of any shape
    (gathered shard by shard) and contiguous slices.
    """

    def __init__(self, folder: Path, shards: list[dict], dtype: str):
        self.folder, self.files, self.dtype = Path(folder), [s["file"] for s in shards], np.dtype(dtype)
        self.sizes = np.asarray([s["tokens"] for s in shards], dtype=np.int64)
        self.ends = np.cumsum(self.sizes)
        self._maps: list[np.ndarray] | None = None

    def __getstate__(self) -> dict:  # pickled into DataLoader workers: each maps the files itself
        return {**self.__dict__, "_maps": None}

    @property
    def maps(self) -> list[np.ndarray]:
        if self._maps is None:
            # an empty file cannot be memory-mapped: an empty shard reads as an empty array
            self._maps = [
                np.memmap(self.folder / f, dtype=self.dtype.newbyteorder("<"), mode="r", shape=(int(n),))
                if n
                else np.empty(0, dtype=self.dtype)
                for f, n in zip(self.files, self.sizes)
            ]
        return self._maps

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        """The whole split as one in-memory array (``np.asarray``): for tests and small corpora."""
        out = self._span(0, len(self))
        return out if dtype is None else out.astype(dtype)

    def __len__(self) -> int:
        return int(self.ends[-1]) if self.ends.size else 0

    def _span(self, start: int, stop: int) -> np.ndarray:
        """Tokens ``[start, stop)`` as a ``[stop - start]`` array, copied shard by shard: a long
        read (a unigram count's chunk) builds no index array of its length."""
        out = np.empty(max(0, stop - start), dtype=self.dtype)
        k, pos = int(np.searchsorted(self.ends, start, side="right")), 0
        while pos < out.size:
            lo = start + pos - int(self.ends[k] - self.sizes[k])
            n = min(int(self.sizes[k]) - lo, out.size - pos)
            out[pos : pos + n] = self.maps[k][lo : lo + n]
            pos, k = pos + n, k + 1
        return out

    def __getitem__(self, index):
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step != 1:
                raise IndexError("ShardedTokens: only contiguous slices")
            return self._span(start, stop)
        index = np.asarray(index, dtype=np.int64)
        if index.size and (index.min() < 0 or index.max() >= len(self)):
            raise IndexError(f"token index out of range [0, {len(self)})")
        if len(self.maps) == 1:  # a small corpus's one shard: the memory map's own gather
            return np.asarray(self.maps[0][index])
        flat = index.ravel()
        shard = np.searchsorted(self.ends, flat, side="right")
        out = np.empty(flat.shape, dtype=self.dtype)
        starts = self.ends - self.sizes
        for k in np.unique(shard):
            sel = shard == k
            out[sel] = self.maps[k][flat[sel] - starts[k]]
        return out.reshape(index.shape)


__all__ = ["ShardedTokens"]
