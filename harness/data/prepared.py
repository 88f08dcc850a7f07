"""A run's corpus: found, converted or built in the shard format, and read (DESIGN 4, 11).

:func:`prepare_corpus` gives a run its corpus as a :class:`PreparedCorpus`, a reader over a shard
folder (:mod:`harness.data.shards`): the folder `harness prepare` made for the run's
:class:`~harness.corpus.key.CorpusKey` if there is one (for the text as it is now:
:func:`~harness.corpus.cached.text_folder`; an edited corpus is built beside its old text's folder); else one a worker made before; else a
corpus of the single-file layout this format replaced, converted into shards
(:mod:`harness.data.legacy_layout`: the same tokens, the same protocol description); else the
worker builds it now with :func:`~harness.data.shards.prepare_shards` in one process (a small corpus
is one shard per split). Measured on the 1.6 MB FineWeb-Edu sample (2 shared cores, tokenizer
cached): 1.4-1.7 s with the single-file builder, 1.7-2.2 s in one process (1.3 s of either is the
tokenizer itself), 1.3-2.4 s with a pool of two: one process, no pool to start. A hub spec without
``max_docs`` that `harness prepare` has not sharded reads its first
:data:`~harness.corpus.readers.HUB_DEFAULT_MAX_DOCS` documents (:func:`~harness.corpus.key.worker_key`), as before.

Concurrent workers: the build and the conversion run under the folder's file lock and write the
manifest last (atomically), so a worker sees a finished corpus or none, and only one builds it.

:attr:`PreparedCorpus.protocol_meta` is what enters a run's protocol hash: the manifest's
``protocol`` (:func:`~harness.data.shards.protocol_description`: what the text is, the same dict the
single-file layout wrote as ``meta.json`` for the same tokens); a folder built before the manifest
carried it is described by its manifest without the caller's fields, as it was then.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from harness.corpus.cached import text_folder
from harness.corpus.key import CorpusKey, read_manifest, worker_key
from harness.corpus.split import SPLITS
from harness.data.legacy_layout import convert_legacy
from harness.data.shard_reader import ShardedTokens
from harness.data.shards import check_key, prepare_shards
from harness.data.tokenizer import BPETokenizer, GPT2Tokenizer, load_shard_tokenizer

#: The caller's fields of ``meta`` (where the text came from, not what it is): never in the protocol.
CALLER_FIELDS = ("corpus", "max_docs", "source")


@dataclass(frozen=True)
class PreparedCorpus:
    """A tokenized, split corpus on disk: a shard folder (see :mod:`harness.data.shards`).

    Attributes:
        dir: the corpus folder.
        vocab_size: number of token ids V of the tokenizer (model vocabulary must be >= V).
        dtype: numpy dtype name of the token files (``uint16`` or ``uint32``).
        fingerprint: the corpus's identity in checkpoints: the document fingerprint of its
            protocol description (:func:`harness.corpus.fingerprint.corpus_fingerprint`).
        meta: the manifest plus the caller's ``corpus`` spec and ``max_docs``; each split's
            ``meta["splits"][split]["shards"]`` lists its shard files (``file``, ``tokens``).
    """

    dir: Path
    vocab_size: int
    dtype: str
    fingerprint: str
    meta: dict

    @classmethod
    def open(cls, folder: Path, caller: dict | None = None) -> PreparedCorpus:
        """The finished shard folder ``folder`` (its manifest) with the caller's fields added.

        Raises:
            FileNotFoundError: ``folder`` holds no finished corpus (no ``manifest.json``).
        """
        manifest = read_manifest(folder)
        if manifest is None:
            raise FileNotFoundError(f"{folder}: no finished corpus (no manifest.json)")
        meta = {**manifest, **(caller or {})}
        return cls(
            dir=Path(folder),
            vocab_size=int(manifest["tokenizer"]["vocab_size"]),
            dtype=manifest["dtype"],
            fingerprint=_protocol(meta)["fingerprint"],
            meta=meta,
        )

    @property
    def eos_id(self) -> int:
        """Id of the ``<|endoftext|>`` token that follows every document."""
        return int(self.meta["tokenizer"]["eos_id"])

    @property
    def protocol_meta(self) -> dict:
        """What the text is, for the protocol hash (see the module docstring); no caller field."""
        return _protocol(self.meta)

    def tokens(self, split: str) -> ShardedTokens:
        """The split's token ids ``[N]`` (``split`` in ``train``, ``val``): a read-only
        :class:`~harness.data.shard_reader.ShardedTokens` over its shards.

        Raises:
            ValueError: unknown split name.
        """
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; allowed: {', '.join(SPLITS)}")
        return ShardedTokens(self.dir, self.meta["splits"][split]["shards"], self.dtype)

    def token_bytes(self) -> np.ndarray:
        """``[V]`` int64: UTF-8 byte length of each token id (0 for special tokens)."""
        return np.load(self.dir / "token_bytes.npy")

    def tokenizer(self) -> BPETokenizer | GPT2Tokenizer:
        """The tokenizer (``.encode(str) -> list[int]``, ``.decode(list[int]) -> str``), from the folder."""
        return load_shard_tokenizer(self.dir, self.meta["tokenizer"]["name"])

    def verify(self) -> None:
        """Recompute each shard's sha256 and compare it with the manifest.

        Raises:
            ValueError: a shard file does not match its recorded sha256.
        """
        for split in SPLITS:
            for shard in self.meta["splits"][split]["shards"]:
                if _sha256_file(self.dir / shard["file"]) != shard["sha256"]:
                    raise ValueError(
                        f"prepared corpus {self.dir}: {shard['file']} does not match manifest.json"
                    )


def _protocol(meta: dict) -> dict:
    if "protocol" in meta:
        return meta["protocol"]
    return {k: v for k, v in meta.items() if k not in CALLER_FIELDS}  # a manifest from before `protocol`


def prepare_corpus(key: CorpusKey, *, cache_dir: Path, log=None) -> PreparedCorpus:
    """A run's corpus, found, converted or built (see the module docstring).

    Args:
        key: the corpus (:meth:`harness.design.config.RunConfig.corpus_key`): its spec (file, directory,
            glob or ``hf:...``, :mod:`harness.corpus.spec`); tokenizer ``bpe`` (trained on the
            training split's first :data:`~harness.data.shards.BPE_SAMPLE_BYTES`) or ``gpt2``
            (tiktoken, V = 50257); the BPE vocabulary (>= 257; ignored for ``gpt2``); the expected
            validation fraction in (0, 1); ``max_docs``, the first non-empty documents to use.
        cache_dir: root of the cache (``corpora/``, ``tokenizers/`` and ``hub/`` below it).
        log: where a build's progress lines go (default: nowhere; the worker's build is short).

    Returns:
        The :class:`PreparedCorpus`.

    Raises:
        FileNotFoundError, ValueError, OptionalDependencyError: see
            :func:`harness.data.shards.prepare_shards` (a key it refuses, an unreadable
            corpus, a split left empty).
    """
    check_key(key)
    cache_dir = Path(cache_dir)
    caller = {"corpus": key.corpus, "max_docs": key.max_docs}
    own = worker_key(key)
    for k in dict.fromkeys([key, own]):
        folder, _ = text_folder(k, cache_dir)  # the folder of the text as it is now, never an older text's
        if read_manifest(folder) is not None:  # a sharded corpus is read, never streamed or tokenized again
            return PreparedCorpus.open(folder, caller)
    folder = convert_legacy(own, cache_dir)
    if folder is None:
        folder = prepare_shards(own, cache_dir=cache_dir, workers=1, log=log or (lambda msg: None))
    return PreparedCorpus.open(folder, caller)


def cache_dir(results_dir: str | os.PathLike) -> Path:
    """Prepared-corpus cache: ``$HARNESS_CACHE`` or ``RESULTS/cache`` (content-addressed, shareable)."""
    return Path(os.environ.get("HARNESS_CACHE") or Path(results_dir) / "cache")


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


__all__ = ["CALLER_FIELDS", "PreparedCorpus", "prepare_corpus", "cache_dir"]
