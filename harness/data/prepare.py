"""Prepared corpora: documents -> split -> tokenizer -> token files + metadata (DESIGN 4).

:func:`prepare_corpus` turns a corpus spec into a directory holding

* ``train.bin`` / ``val.bin``: the split's token ids as raw little-endian ``uint16``
  (``uint32`` when V > 65535); each document is followed by the EOS token, so a split of
  documents ``d_1 .. d_n`` is ``tok(d_1) EOS tok(d_2) EOS ... tok(d_n) EOS``;
* ``token_bytes.npy``: ``[V]`` int64, UTF-8 byte length of each token (0 for special
  tokens), for exact bits-per-byte over any subset of predicted tokens;
* ``tokenizer.json`` (``bpe`` only) and ``meta.json``.

The directory name is a content hash of (corpus fingerprint, split fraction, tokenizer,
vocabulary size, format version), so a prepared corpus is reused whatever path named the
corpus. It is built in a temporary sibling directory and renamed into place (atomic on
POSIX), under a file lock (``filelock.FileLock``), so concurrent workers never see half-written files
and only one of them does the work.

``meta`` (what goes into a run's protocol hash) records, per split, the sha256 of the token
file, token count, UTF-8 byte count and document count; the tokenizer's name, vocabulary
size, EOS id and sha256; the corpus fingerprint; and the spec string and ``max_docs`` the
caller used. ``protocol_meta`` is the same without the two caller fields, which name where
the text came from rather than what it is.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from filelock import FileLock

from harness.common.files import atomic_write, fsync_dir, fsync_file
from harness.data.corpus import (
    HUB_DEFAULT_MAX_DOCS,
    HUB_PREFIX,
    corpus_fingerprint,
    read_documents,
    split_documents,
)
from harness.data.corpus_key import CorpusKey
from harness.data.shard_reader import ShardedTokens
from harness.data.shards import load_shard_tokenizer, read_manifest, token_dtype
from harness.data.tokenizer import TOKENIZER_NAMES, BPETokenizer, GPT2Tokenizer, load_tokenizer, train_bpe

#: Bump when the on-disk layout or its meaning changes; old cache entries are then ignored.
FORMAT_VERSION = 1
SPLITS = ("train", "val")
_ENCODE_CHUNK_DOCS = 512  # documents per encode_batch call: bounds memory on large corpora


@dataclass(frozen=True)
class PreparedCorpus:
    """A tokenized, split corpus on disk (see the module docstring for the layout).

    Attributes:
        dir: the prepared directory.
        vocab_size: number of token ids V of the tokenizer (model vocabulary must be >= V).
        dtype: numpy dtype name of the token files (``uint16`` or ``uint32``).
        fingerprint: corpus fingerprint, :func:`harness.data.corpus.corpus_fingerprint`.
        meta: metadata dict (``meta.json`` plus the caller's ``corpus`` spec and ``max_docs``).
        sharded: prepared by ``harness prepare`` (:mod:`harness.data.shards`): ``meta`` is its
            manifest and each split is a list of shard files read as one token array.
    """

    dir: Path
    vocab_size: int
    dtype: str
    fingerprint: str
    meta: dict
    sharded: bool = False

    @property
    def eos_id(self) -> int:
        """Id of the ``<|endoftext|>`` token that follows every document."""
        return int(self.meta["tokenizer"]["eos_id"])

    @property
    def protocol_meta(self) -> dict:
        """``meta`` without the caller's spec string and ``max_docs`` (content only)."""
        return {k: v for k, v in self.meta.items() if k not in ("corpus", "max_docs", "source")}

    def tokens(self, split: str) -> np.ndarray | ShardedTokens:
        """Read-only memmap ``[N]`` of the split's token ids (``split`` in ``train``, ``val``);
        for a sharded corpus a :class:`~harness.data.shard_reader.ShardedTokens` over its shards.

        Raises:
            ValueError: unknown split name.
        """
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; allowed: {', '.join(SPLITS)}")
        if self.sharded:
            return ShardedTokens(self.dir, self.meta["splits"][split]["shards"], self.dtype)
        return np.memmap(self.dir / f"{split}.bin", dtype=np.dtype(self.dtype).newbyteorder("<"), mode="r")

    def token_bytes(self) -> np.ndarray:
        """``[V]`` int64: UTF-8 byte length of each token id (0 for special tokens)."""
        return np.load(self.dir / "token_bytes.npy")

    def tokenizer(self) -> BPETokenizer | GPT2Tokenizer:
        """The tokenizer (``.encode(str) -> list[int]``, ``.decode(list[int]) -> str``)."""
        if self.sharded:
            return load_shard_tokenizer(self.dir, self.meta["tokenizer"]["name"])
        return load_tokenizer(self.meta["tokenizer"]["name"], self.dir / "tokenizer.json")

    def verify(self) -> None:
        """Recompute the token files' sha256 and compare with ``meta``.

        Raises:
            ValueError: a token file does not match its recorded sha256 or token count.
        """
        for split in SPLITS:
            info = self.meta["splits"][split]
            for shard in info.get("shards", []) if self.sharded else []:
                if _sha256_file(self.dir / shard["file"]) != shard["sha256"]:
                    raise ValueError(
                        f"prepared corpus {self.dir}: {shard['file']} does not match manifest.json"
                    )
            if self.sharded:
                continue
            digest = _sha256_file(self.dir / info["file"])
            if digest != info["sha256"] or len(self.tokens(split)) != info["tokens"]:
                raise ValueError(f"prepared corpus {self.dir}: {info['file']} does not match meta.json")


def prepare_corpus(key: CorpusKey, *, cache_dir: Path) -> PreparedCorpus:
    """Read, split, tokenize and store a corpus, or reuse the stored copy.

    Args:
        key: the corpus (:meth:`harness.design.config.RunConfig.corpus_key`): its spec (file, directory, glob
            or ``hf:...``, :mod:`harness.data.corpus`); tokenizer ``bpe`` (trained on the training split
            only) or ``gpt2`` (tiktoken); the BPE vocabulary to train (>= 257; ignored for ``gpt2``,
            V = 50257); the expected validation fraction in (0, 1); ``max_docs``, the first non-empty
            documents to use (hub default: :data:`harness.data.corpus.HUB_DEFAULT_MAX_DOCS`).
        cache_dir: root of the cache (``corpora/``, ``tokenizers/`` and ``hub/`` below it).

    A corpus that `harness prepare` sharded for this key (:meth:`CorpusKey.folder`) is read from its
    shards instead.

    Returns:
        The :class:`PreparedCorpus`.

    Raises:
        FileNotFoundError, ValueError, OptionalDependencyError: see
            :func:`harness.data.corpus.read_documents`, :func:`harness.data.corpus.split_documents`
            and :mod:`harness.data.tokenizer`; also an unknown ``tokenizer``.
    """
    corpus, tokenizer, vocab_size = key.corpus, key.tokenizer, key.vocab_size
    val_fraction, max_docs = key.val_fraction, key.max_docs
    if tokenizer not in TOKENIZER_NAMES:
        raise ValueError(f"unknown tokenizer {tokenizer!r}; allowed: {', '.join(TOKENIZER_NAMES)}")
    if isinstance(val_fraction, bool) or not 0.0 < float(val_fraction) < 1.0:
        raise ValueError(f"val_fraction={val_fraction!r} must be in (0, 1)")
    cache_dir = Path(cache_dir)
    caller = {"corpus": corpus, "max_docs": max_docs}
    found = _sharded(cache_dir, key, caller)
    if found is not None:
        return found
    # A hub stream is expensive and needs a network: remember which fingerprint a
    # (spec, limit) gave, so a prepared hub corpus is found again offline.
    hub_index = _hub_index_path(cache_dir, corpus, max_docs) if corpus.startswith(HUB_PREFIX) else None
    if hub_index is not None and hub_index.is_file():
        fingerprint = json.loads(hub_index.read_text())["fingerprint"]
        final = _prepared_dir(cache_dir, fingerprint, val_fraction, tokenizer, vocab_size)
        if (final / "meta.json").is_file():
            return _load(final, caller)
    docs = read_documents(corpus, max_docs=max_docs)
    fingerprint = corpus_fingerprint(docs)
    if hub_index is not None:
        atomic_write(hub_index, json.dumps({"corpus": corpus, "fingerprint": fingerprint}))
    final = _prepared_dir(cache_dir, fingerprint, val_fraction, tokenizer, vocab_size)
    if not (final / "meta.json").is_file():
        _build_once(final, docs, fingerprint, cache_dir, vocab_size, tokenizer, val_fraction)
    return _load(final, caller)


def _sharded(cache_dir: Path, key: CorpusKey, caller: dict) -> PreparedCorpus | None:
    """The corpus `harness prepare` sharded for ``key`` (shards + manifest), else ``None``: a sharded
    corpus is read, never streamed or tokenized again."""
    sharded = key.folder(cache_dir)
    manifest = read_manifest(sharded)
    if manifest is None:
        return None
    return PreparedCorpus(
        dir=sharded,
        vocab_size=int(manifest["tokenizer"]["vocab_size"]),
        dtype=manifest["dtype"],
        fingerprint=manifest["fingerprint"],
        meta={**manifest, **caller},
        sharded=True,
    )


def _build_once(
    final: Path,
    docs: list[str],
    fingerprint: str,
    cache_dir: Path,
    vocab_size: int,
    tokenizer: str,
    val_fraction: float,
) -> None:
    """Tokenize ``docs`` into ``final`` unless another worker did: built in a temporary folder, synced,
    then renamed into place (atomic)."""
    final.parent.mkdir(parents=True, exist_ok=True)
    # the lock only keeps concurrent workers from tokenizing one corpus twice; correctness
    # never depends on it (the rename is atomic)
    with FileLock(final.with_name(final.name + ".lock")):
        if (final / "meta.json").is_file():  # another worker finished while we waited
            return
        tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".tmp-{final.name}-"))
        try:
            _build(tmp, docs, fingerprint, cache_dir, vocab_size, tokenizer, val_fraction)
            for path in tmp.iterdir():  # the data is on disk before the folder gets its name
                fsync_file(path)
            try:
                os.rename(tmp, final)
                fsync_dir(final.parent)
            except OSError:
                # Without a working lock another worker may have renamed its copy first;
                # the content is the same, so keep theirs.
                if not (final / "meta.json").is_file():
                    raise
                shutil.rmtree(tmp, ignore_errors=True)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise


def cache_dir(results_dir: str | os.PathLike) -> Path:
    """Prepared-corpus cache: ``$HARNESS_CACHE`` or ``RESULTS/cache`` (content-addressed, shareable)."""
    return Path(os.environ.get("HARNESS_CACHE") or Path(results_dir) / "cache")


def _prepared_dir(
    cache_dir: Path, fingerprint: str, val_fraction: float, tokenizer: str, vocab_size: int
) -> Path:
    key = {
        "format": FORMAT_VERSION,
        "fingerprint": fingerprint,
        "val_fraction": float(val_fraction),
        "tokenizer": tokenizer,
        "vocab_size": vocab_size if tokenizer == "bpe" else None,
    }
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()
    return cache_dir / "corpora" / f"{tokenizer}-{digest[:32]}"


def _hub_index_path(cache_dir: Path, corpus: str, max_docs: int | None) -> Path:
    limit = max_docs if max_docs is not None else HUB_DEFAULT_MAX_DOCS
    digest = hashlib.sha256(json.dumps([corpus, limit]).encode()).hexdigest()
    return cache_dir / "hub" / f"{digest[:32]}.json"


def _load(path: Path, caller: dict) -> PreparedCorpus:
    meta = json.loads((path / "meta.json").read_text())
    meta.update(caller)
    return PreparedCorpus(
        dir=path,
        vocab_size=int(meta["tokenizer"]["vocab_size"]),
        dtype=meta["dtype"],
        fingerprint=meta["fingerprint"],
        meta=meta,
    )


def _build(
    out: Path,
    docs: list[str],
    fingerprint: str,
    cache_dir: Path,
    vocab_size: int,
    tokenizer: str,
    val_fraction: float,
) -> None:
    split = split_documents(docs, val_fraction)
    if tokenizer == "bpe":
        tok = train_bpe(split.train, vocab_size, cache_dir=cache_dir)  # training split only
        (out / "tokenizer.json").write_text(tok.json_str, encoding="utf-8")
    else:
        tok = GPT2Tokenizer()
    np.save(out / "token_bytes.npy", tok.token_bytes())
    dtype = token_dtype(tok.vocab_size)

    splits = {}
    for name, texts in (("train", split.train), ("val", split.val)):
        info = _write_tokens(out / f"{name}.bin", texts, tok, dtype)
        # Byte-level tokenizers account for every byte exactly; bits-per-byte relies on it.
        if info.pop("token_bytes_sum") != info["bytes"]:
            raise RuntimeError(f"{name}: token byte lengths do not add up to the text's UTF-8 bytes")
        splits[name] = info

    meta = {
        "format": FORMAT_VERSION,
        "fingerprint": fingerprint,
        "documents": len(docs),
        "val_fraction": float(val_fraction),
        "split_rule": "validation iff int(sha256(utf8(text))[:8], big-endian) < val_fraction * 2**64",
        "dtype": dtype.name,
        "eos_placement": "after every document",
        "tokenizer": {
            "name": tok.name,
            "vocab_size": int(tok.vocab_size),
            "requested_vocab_size": int(vocab_size) if tokenizer == "bpe" else None,
            "eos_id": int(tok.eos_id),
            "sha256": tok.sha256,
        },
        "token_bytes_sha256": _sha256_file(out / "token_bytes.npy"),
        "splits": splits,
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")


def _write_tokens(path: Path, texts: list[str], tok, dtype: np.dtype) -> dict:
    """Encode ``texts`` (each followed by EOS) into ``path``; return the split's counts."""
    digest = hashlib.sha256()
    lengths = tok.token_bytes()
    n_tokens = n_bytes = bytes_from_tokens = 0
    with open(path, "wb") as fh:
        for start in range(0, len(texts), _ENCODE_CHUNK_DOCS):
            chunk = texts[start : start + _ENCODE_CHUNK_DOCS]
            ids = []
            for encoded in tok.encode_batch(chunk):
                ids.extend(encoded)
                ids.append(tok.eos_id)
            arr = np.asarray(ids, dtype=dtype)
            data = arr.tobytes()
            fh.write(data)
            digest.update(data)
            n_tokens += arr.size
            n_bytes += sum(len(t.encode("utf-8")) for t in chunk)
            bytes_from_tokens += int(lengths[arr].sum())
    return {
        "file": path.name,
        "sha256": digest.hexdigest(),
        "tokens": n_tokens,
        "bytes": n_bytes,
        "documents": len(texts),
        "token_bytes_sum": bytes_from_tokens,
    }


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


__all__ = ["FORMAT_VERSION", "SPLITS", "PreparedCorpus", "cache_dir", "prepare_corpus", "token_dtype"]
