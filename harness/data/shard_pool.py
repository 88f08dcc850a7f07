"""The tokenizer processes of a shard build (:mod:`harness.data.shards`): a chunk of documents in, its
train and val token arrays out; a pool of processes, or :class:`InProcess` for a one-process build."""

from __future__ import annotations

import signal
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path

import numpy as np

from harness.corpus.split import SPLITS, is_validation
from harness.data.tokenizer import load_shard_tokenizer

_TOKENIZER = None


def init_worker(folder: str, name: str) -> None:
    """A pool process's start: load the tokenizer from the corpus folder; leave Ctrl-C to the parent."""
    global _TOKENIZER
    # the parent decides on a Ctrl-C (a terminal sends it to the pool too): no traceback per process
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _TOKENIZER = load_shard_tokenizer(Path(folder), name)


class InProcess:
    """The pool of a one-process build: each chunk is encoded here when submitted. A worker's small
    corpus takes no pool start (within a few tenths of a second of the single-file builder), and a daemonic process,
    which may start no pool, can build one."""

    def __init__(self, folder: str, name: str) -> None:
        self.tok = load_shard_tokenizer(Path(folder), name)

    def __enter__(self) -> InProcess:
        return self

    def __exit__(self, *exc) -> None:
        return None

    def submit(self, fn: Callable, args: tuple) -> Future:
        """A finished future of ``fn(args)`` (its exception, if it raised), with this tokenizer."""
        global _TOKENIZER
        future: Future = Future()
        _TOKENIZER, saved = self.tok, _TOKENIZER
        try:
            future.set_result(fn(args))
        except Exception as exc:
            future.set_exception(exc)
        finally:
            _TOKENIZER = saved
        return future


def encode_chunk(args: tuple[list[str], float, str]) -> dict:
    """Tokenize one chunk into its train and val token arrays (each document then EOS)."""
    docs, val_fraction, dtype = args
    tok = _TOKENIZER
    out = {}
    for split in SPLITS:
        texts = [d for d in docs if is_validation(d, val_fraction) == (split == "val")]
        ids: list[int] = []
        for encoded in tok.encode_batch(texts) if texts else []:
            ids.extend(encoded)
            ids.append(tok.eos_id)
        out[split] = (np.asarray(ids, dtype=dtype), len(texts), sum(len(t.encode("utf-8")) for t in texts))
    return out


__all__ = ["init_worker", "InProcess", "encode_chunk"]
