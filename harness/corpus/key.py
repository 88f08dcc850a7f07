"""What a run's config says about its corpus (DESIGN 4, 11): :class:`CorpusKey`, the shard folder it
names, and the one vocabulary rule.

A key is the five settings that decide which tokens a run reads: the source spec, the tokenizer, the
requested BPE vocabulary, the validation fraction and ``max_docs``. One key is one sharded corpus in
the cache (:func:`shard_dir`; finished once its ``manifest.json`` is written, :func:`read_manifest`),
so ``harness prepare``, ``harness queue``'s corpus sizing, a worker's space check, the runner and
``harness bench`` all find the same folder from the key alone. :func:`requested_vocab` is the one
rule for the vocabulary a key asks for; :func:`worker_key` the one for what a worker builds itself.

:mod:`harness.data.shards` writes the folder.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from harness.corpus.readers import HUB_DEFAULT_MAX_DOCS
from harness.corpus.spec import HUB_PREFIX

#: Bump when the shard layout or its meaning changes; old folders are then ignored.
SHARD_FORMAT = 1
#: BPE vocabulary of ``harness prepare --corpus C`` without ``--vocab-size`` (no size preset to ask).
DEFAULT_BPE_VOCAB = 8192


def requested_vocab(vocab_size: int, fallback: int) -> int:
    """The BPE vocabulary a corpus is tokenized with: ``vocab_size`` (a grid's ``[train] vocab_size``,
    ``--vocab-size``), or ``fallback`` (the size preset's, :data:`DEFAULT_BPE_VOCAB`) when it is 0."""
    return vocab_size or fallback


def source_key(corpus: str) -> str:
    """The corpus spec as it names the source: ``hf:`` specs as written, local paths absolute."""
    return corpus if corpus.startswith(HUB_PREFIX) else os.path.abspath(os.path.expanduser(corpus))


def shard_dir(
    cache_dir: Path,
    corpus: str,
    *,
    tokenizer: str,
    vocab_size: int,
    val_fraction: float,
    max_docs: int | None,
) -> Path:
    """The folder of the sharded corpus a run with these settings reads (exists or not)."""
    key = {
        "format": SHARD_FORMAT,
        "source": source_key(corpus),
        "tokenizer": tokenizer,
        "vocab_size": int(vocab_size) if tokenizer == "bpe" else None,
        "val_fraction": float(val_fraction),
        "max_docs": max_docs or None,
    }
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()
    return Path(cache_dir) / "corpora" / f"shards-{tokenizer}-{digest[:32]}"


def read_manifest(folder: Path) -> dict | None:
    """The manifest of a finished sharded corpus, or ``None`` when there is none (yet)."""
    path = Path(folder) / "manifest.json"
    return json.loads(path.read_text()) if path.is_file() else None


@dataclass(frozen=True)
class CorpusKey:
    """What a run's config says about its corpus: one sharded corpus per key.

    Attributes:
        corpus: the source spec (a path, folder, glob or ``hf:OWNER/NAME[:CONFIG]``).
        tokenizer: ``bpe`` or ``gpt2``.
        vocab_size: the requested BPE vocabulary (:func:`requested_vocab`; ignored for ``gpt2``).
        val_fraction: expected fraction of documents held out for validation, in (0, 1).
        max_docs: at most this many documents (``None``: no limit).
    """

    corpus: str
    tokenizer: str
    vocab_size: int
    val_fraction: float
    max_docs: int | None

    def folder(self, cache_dir: Path) -> Path:
        """Where ``harness prepare`` puts this corpus (:func:`shard_dir`)."""
        return shard_dir(
            cache_dir,
            self.corpus,
            tokenizer=self.tokenizer,
            vocab_size=self.vocab_size,
            val_fraction=self.val_fraction,
            max_docs=self.max_docs,
        )


def worker_key(key: CorpusKey) -> CorpusKey:
    """The key a worker builds when `harness prepare` has not: a hub spec without ``max_docs`` takes
    its first :data:`~harness.corpus.readers.HUB_DEFAULT_MAX_DOCS` documents (a worker never streams a
    whole hub dataset); any other key as it is."""
    if key.corpus.startswith(HUB_PREFIX) and key.max_docs is None:
        return dataclasses.replace(key, max_docs=HUB_DEFAULT_MAX_DOCS)
    return key


def repointed(key: CorpusKey, path: str) -> CorpusKey:
    """``key`` with its corpus at ``path`` (the other settings, hence the documents read, the same)."""
    return dataclasses.replace(key, corpus=path)


__all__ = [
    "SHARD_FORMAT",
    "DEFAULT_BPE_VOCAB",
    "requested_vocab",
    "source_key",
    "shard_dir",
    "read_manifest",
    "CorpusKey",
    "worker_key",
    "repointed",
]
