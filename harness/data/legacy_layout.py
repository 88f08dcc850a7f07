"""The single-file corpus layout the shard format replaced, and its conversion into shards (DESIGN 4).

Before the shard format was the only one, a worker tokenized a small corpus into
``CACHE/corpora/{bpe,gpt2}-<hash>/``: ``train.bin`` and ``val.bin`` (each split's whole token
stream, the dtype of :func:`~harness.data.tokenizer.token_dtype`), ``token_bytes.npy``,
``tokenizer.json`` (``bpe``) and ``meta.json``, the description a run's protocol hash recorded.
The folder's name hashed the documents' fingerprint, the validation fraction, the tokenizer and
its vocabulary (:func:`legacy_dir`); a hub sample's fingerprint was remembered in
``CACHE/hub/<hash>.json`` (:func:`hub_index_path`).

:func:`convert_legacy` makes such a folder, found for a :class:`~harness.corpus.key.CorpusKey`,
that key's shard folder: one shard per split (hard links to its token files: nothing is copied or
tokenized again), the tokenizer files beside them, and a manifest whose ``protocol`` is the old
``meta.json`` verbatim, so runs on it keep their protocol hash and read the same token ids. The old
folder is left as it is (an older harness still reads it).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from pathlib import Path

from filelock import FileLock

from harness.common.files import atomic_write, fsync_dir
from harness.corpus.cached import record_source, source_stat, text_folder
from harness.corpus.fingerprint import Fingerprint
from harness.corpus.key import SHARD_FORMAT, CorpusKey, read_manifest, source_key
from harness.corpus.readers import HUB_DEFAULT_MAX_DOCS, stream_documents
from harness.corpus.spec import HUB_PREFIX
from harness.corpus.split import SPLITS
from harness.data.shards import CHUNK_BYTES, DEFAULT_SHARD_TOKENS, shards_checksum
from harness.data.tokenizer import GPT2Tokenizer, write_gpt2_ranks

#: The single-file layout's ``FORMAT_VERSION`` (in its folder names and ``meta.json``).
LEGACY_FORMAT = 1
_LEGACY_NAME = re.compile(r"^(bpe|gpt2)-[0-9a-f]{32}$")


def legacy_dir(
    cache_dir: Path, fingerprint: str, val_fraction: float, tokenizer: str, vocab_size: int
) -> Path:
    """The single-file layout's folder for a corpus of document fingerprint ``fingerprint``."""
    key = {
        "format": LEGACY_FORMAT,
        "fingerprint": fingerprint,
        "val_fraction": float(val_fraction),
        "tokenizer": tokenizer,
        "vocab_size": vocab_size if tokenizer == "bpe" else None,
    }
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()
    return Path(cache_dir) / "corpora" / f"{tokenizer}-{digest[:32]}"


def hub_index_path(cache_dir: Path, corpus: str, max_docs: int | None) -> Path:
    """Where the single-file layout remembered which fingerprint a hub spec's first ``max_docs``
    documents (default :data:`~harness.corpus.readers.HUB_DEFAULT_MAX_DOCS`) had."""
    limit = max_docs if max_docs is not None else HUB_DEFAULT_MAX_DOCS
    digest = hashlib.sha256(json.dumps([corpus, limit]).encode()).hexdigest()
    return Path(cache_dir) / "hub" / f"{digest[:32]}.json"


def legacy_folders(cache_dir: Path) -> list[Path]:
    """The single-file layout's finished folders in the cache (``meta.json`` in them)."""
    corpora = Path(cache_dir) / "corpora"
    if not corpora.is_dir():
        return []
    return sorted(p for p in corpora.iterdir() if _LEGACY_NAME.match(p.name) and (p / "meta.json").is_file())


def find_legacy(key: CorpusKey, cache_dir: Path) -> Path | None:
    """The single-file folder holding ``key``'s corpus, or ``None``. Reads the corpus's text (to
    fingerprint it) only when the cache holds such folders at all; a hub spec is looked up in the
    hub index, never streamed. A hub key without ``max_docs`` has none (the layout never held a
    whole hub dataset); an unreadable corpus has none (its build says why)."""
    if not any(p.name.startswith(f"{key.tokenizer}-") for p in legacy_folders(cache_dir)):
        return None
    if key.corpus.startswith(HUB_PREFIX):
        index = hub_index_path(cache_dir, key.corpus, key.max_docs)
        if key.max_docs is None or not index.is_file():
            return None
        fingerprint = json.loads(index.read_text())["fingerprint"]
    else:
        digest = Fingerprint()
        try:
            digest.update(stream_documents(key.corpus, max_docs=key.max_docs))
        except (OSError, ValueError):
            return None
        fingerprint = digest.hexdigest()
    folder = legacy_dir(cache_dir, fingerprint, key.val_fraction, key.tokenizer, key.vocab_size)
    return folder if (folder / "meta.json").is_file() else None


def convert_legacy(key: CorpusKey, cache_dir: Path) -> Path | None:
    """Make the single-file folder of ``key``'s corpus (:func:`find_legacy`) its shard folder; return
    that folder, or ``None`` when there is nothing to convert. Under the shard folder's file lock,
    manifest last (atomic): a concurrent worker finds a finished corpus or none.

    Raises:
        ValueError: the old folder's token files do not match its ``meta.json`` (a damaged cache:
            the message names the folder to delete).
    """
    old = find_legacy(key, cache_dir)
    if old is None:
        return None
    stat = source_stat(key.corpus)
    folder, _ = text_folder(key, cache_dir)  # the key's folder, or its text's beside it when it changed
    with FileLock(folder.with_name(folder.name + ".lock")):
        if read_manifest(folder) is not None:
            return folder
        shutil.rmtree(folder, ignore_errors=True)  # a build killed before its manifest: replaced
        folder.mkdir(parents=True)
        meta = json.loads((old / "meta.json").read_text())
        splits = {split: _link_split(old, folder, meta, split) for split in SPLITS}
        files = _link_tokenizer(old, folder, meta["tokenizer"]["name"])
        manifest = _manifest(key, meta, splits, files, old.name)
        fsync_dir(folder)
        atomic_write(folder / "manifest.json", json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        record_source(folder, stat)
    return folder


def _link(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)  # the token files are never written again: one copy on disk serves both layouts
    except OSError:  # a file system without hard links
        shutil.copy2(src, dst)


def _link_split(old: Path, folder: Path, meta: dict, split: str) -> dict:
    """The split's token file as the split's one shard; its manifest entry."""
    info = meta["splits"][split]
    digest = hashlib.sha256()
    with open(old / info["file"], "rb") as fh:
        for block in iter(lambda: fh.read(1 << 24), b""):
            digest.update(block)
    if digest.hexdigest() != info["sha256"]:
        raise ValueError(
            f"{old / info['file']} does not match {old / 'meta.json'}: delete {old} and run again to rebuild it"
        )
    shard = {
        "file": f"{split}-00000.bin",
        "tokens": info["tokens"],
        "sha256": info["sha256"],
        "documents": info["documents"],  # one EOS per document
        "bytes": info["bytes"],  # the text's UTF-8 bytes: the tokens' byte lengths add up to them
    }
    _link(old / info["file"], folder / shard["file"])
    return {k: info[k] for k in ("tokens", "documents", "bytes")} | {"shards": [shard]}


def _link_tokenizer(old: Path, folder: Path, name: str) -> list[str]:
    """``token_bytes.npy``, the tokenizer's files (and a unigram count already made) beside the shards."""
    for extra in ("token_bytes.npy", "unigram_counts.npy", "tokenizer.json"):
        if (old / extra).is_file():
            _link(old / extra, folder / extra)
    if name == "bpe":
        return ["tokenizer.json"]
    write_gpt2_ranks(folder / "gpt2.tiktoken", GPT2Tokenizer())
    return ["gpt2.tiktoken"]


def _manifest(key: CorpusKey, meta: dict, splits: dict, files: list[str], old_name: str) -> dict:
    """The shard manifest of a converted corpus: ``protocol`` is the old ``meta.json``, unchanged."""
    train = meta["splits"]["train"]
    return {
        "format": SHARD_FORMAT,
        "source": source_key(key.corpus),
        "revision": None,
        "max_docs": key.max_docs or None,
        "val_fraction": meta["val_fraction"],
        "split_rule": meta["split_rule"],
        "eos_placement": meta["eos_placement"],
        "shard_tokens": max(DEFAULT_SHARD_TOKENS, *(s["tokens"] for s in splits.values())),
        "chunk_bytes": CHUNK_BYTES,
        "dtype": meta["dtype"],
        "tokenizer": {
            **meta["tokenizer"],
            "files": files,
            "bpe_sample": {
                "documents": train["documents"],
                "bytes": train["bytes"],
                "rule": "every train-split document (the single-file layout's rule)",
            }
            if meta["tokenizer"]["name"] == "bpe"
            else None,
        },
        "checksum": shards_checksum(splits),
        "documents": meta["documents"],
        "chunks": None,  # not cut in chunks; never extended (exhausted)
        "exhausted": True,
        "splits": splits,
        "token_bytes_sha256": meta["token_bytes_sha256"],
        "protocol": meta,
        "converted_from": old_name,
    }


__all__ = [
    "LEGACY_FORMAT",
    "legacy_dir",
    "hub_index_path",
    "legacy_folders",
    "find_legacy",
    "convert_legacy",
]
