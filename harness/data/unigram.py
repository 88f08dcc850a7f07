"""The unigram plateau: what a model that ignores context scores on the validation set.

A language model first learns the token frequencies; until it uses context its validation
NLL sits at the cross-entropy of the validation targets under the training split's unigram
distribution. A run whose final NLL is near that number has learned frequencies only, and a
difference between two such runs says little about depth routing (issue "A demo past the
unigram plateau"). The runner stores the plateau with every run (``runs.unigram_nll``) and
the report prints it next to the final NLL.

The distribution is add-one (Laplace) smoothed over the tokenizer's ``V`` ids, so that a
validation token never seen in training costs a finite ``log(C + V)``:

    p(v) = (c_v + 1) / (C + V),   H = -(1/N) * sum_{n=1..N} ln p(y_n)   [nats/token]

with ``c_v`` the count of id ``v`` in the training split, ``C`` its length and ``y_1..y_N``
the validation targets the runs are scored on.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np

#: Tokens counted per chunk: bounds the memory of a pass over a paper-scale split (8M x 8 bytes).
CHUNK_TOKENS = 1 << 23
_CACHE = "unigram_counts.npy"


def count_tokens(tokens, vocab_size: int) -> np.ndarray:
    """Occurrences of each token id in ``tokens``.

    Args:
        tokens: ``[N]`` token ids (a numpy array or memmap, or anything with ``len`` and
            contiguous slices, e.g. :class:`~harness.data.shard_reader.ShardedTokens`).
        vocab_size: ``V``; every id must be in ``[0, V)``.

    Returns:
        ``[V]`` int64 counts (sum ``N``).

    Raises:
        ValueError: an id outside ``[0, V)``.
    """
    counts = np.zeros(vocab_size, dtype=np.int64)
    for start in range(0, len(tokens), CHUNK_TOKENS):
        chunk = np.asarray(tokens[start : start + CHUNK_TOKENS], dtype=np.int64)
        if chunk.size and (chunk.min() < 0 or chunk.max() >= vocab_size):
            bad = int(chunk.min()) if chunk.min() < 0 else int(chunk.max())
            raise ValueError(f"token id {bad} outside the vocabulary [0, {vocab_size})")
        counts += np.bincount(chunk, minlength=vocab_size)
    return counts


def unigram_nll(counts: np.ndarray, targets: np.ndarray) -> float:
    """Cross-entropy of ``targets`` under the add-one smoothed unigram distribution of ``counts``.

    Args:
        counts: ``[V]`` training-split counts (:func:`count_tokens`).
        targets: ``[N]`` validation target ids, ``N >= 1``.

    Returns:
        ``H`` in nats/token (module docstring's formula).

    Raises:
        ValueError: no targets.
    """
    targets = np.asarray(targets, dtype=np.int64)
    if targets.size == 0:
        raise ValueError("unigram_nll: no validation targets")
    counts = np.asarray(counts, dtype=np.float64)
    log_p = np.log(counts + 1.0) - np.log(counts.sum() + counts.size)
    return float(-log_p[targets].mean())


def train_counts(prepared) -> np.ndarray:
    """``[V]`` counts of the prepared corpus's training split, cached in its folder.

    One pass over the split the first time (chunked: a 2B-token split is read in
    :data:`CHUNK_TOKENS` pieces), then read from ``unigram_counts.npy``. The cache is
    written atomically, so concurrent workers at worst count twice; a cache that cannot be
    written (read-only folder, full disk) is skipped, never an error.

    Args:
        prepared: a :class:`~harness.data.prepared.PreparedCorpus`.
    """
    path = Path(prepared.dir) / _CACHE
    try:
        counts = np.load(path)
        if counts.shape == (prepared.vocab_size,):
            return counts
    except (OSError, ValueError):
        pass
    counts = count_tokens(prepared.tokens("train"), prepared.vocab_size)
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".unigram.", suffix=".npy")
        with os.fdopen(fd, "wb") as f:
            np.save(f, counts)
        os.replace(tmp, path)
    except OSError:  # only a cache: the next run counts again
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
    return counts


__all__ = ["CHUNK_TOKENS", "count_tokens", "unigram_nll", "train_counts"]
