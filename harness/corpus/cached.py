"""Which shard folder of the cache holds a corpus key's text as that text is now (DESIGN 4 and 11): a
cache is only ever a faster read of the same text, never the file's stand-in.

A key's folder (:meth:`~harness.corpus.key.CorpusKey.folder`) is named by the key's settings, the
source's path among them, so the text at that path may have changed since the folder was built (a
corpus edited in place). :func:`text_folder` checks a finished folder against the text before anyone
reads it: the sizes and modification times of the source's files, recorded in the folder when it was
built or last checked (:data:`SOURCE_STAT`), are the fast path; when they differ the documents are read
and their fingerprint compared with the manifest's ``protocol`` fingerprint. The same text (a file
touched or copied back) keeps the folder and records the new times; another text gets a folder of its
own beside the first, named by its fingerprint (``<key folder>-<fingerprint[:16]>``), where it is built
and found again: the old folder is never read as the file. A hub spec (its revision is recorded) and a
local corpus that is not there (nothing to compare with: the callers refuse it first) keep the key's
folder.

:func:`fingerprint_of` gives a key's document fingerprint through the same check.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from harness.common.files import atomic_write
from harness.corpus.fingerprint import Fingerprint
from harness.corpus.key import CorpusKey, read_manifest, worker_key
from harness.corpus.readers import corpus_files, stream_documents
from harness.corpus.spec import HUB_PREFIX, parse_ref

#: The file in a shard folder recording the source it holds: ``{"files": [[path, bytes, mtime_ns], ...]}``.
SOURCE_STAT = "source-stat.json"


def source_stat(corpus: str) -> list[list] | None:
    """``[[absolute path, size in bytes, modification time in ns], ...]`` of a local corpus's files in
    reading order (:func:`~harness.corpus.readers.corpus_files`); ``None`` for a hub spec or a corpus
    that cannot be listed (not there, an unsupported file)."""
    if corpus.startswith(HUB_PREFIX):
        return None
    try:
        files = corpus_files(corpus)
        return [[os.path.abspath(f), (st := os.stat(f)).st_size, st.st_mtime_ns] for f in files]
    except (OSError, ValueError):
        return None


def record_source(folder: Path, stat: list[list] | None) -> None:
    """Record ``stat`` (:func:`source_stat`) as the source the finished ``folder`` holds. Best effort: in
    a read-only cache the text is fingerprinted again next time."""
    if stat is None:
        return
    try:
        atomic_write(Path(folder) / SOURCE_STAT, json.dumps({"files": stat}) + "\n")
    except OSError:
        pass


def recorded_source(folder: Path) -> list | None:
    """The source ``folder`` records (:func:`record_source`), ``None`` where it records none."""
    try:
        return json.loads((folder / SOURCE_STAT).read_text())["files"]
    except (OSError, ValueError, KeyError):
        return None


def _manifest_fingerprint(manifest: dict) -> str | None:
    return manifest["protocol"]["fingerprint"] if "protocol" in manifest else None


def read_fingerprint(key: CorpusKey) -> str:
    """The document fingerprint of ``key``'s corpus read from its text (``key.max_docs`` documents).

    Raises:
        FileNotFoundError, ValueError: a corpus that is not there or cannot be read; one that holds no
            document.
    """
    digest = Fingerprint()
    digest.update(stream_documents(key.corpus, max_docs=key.max_docs))
    if not digest.documents:
        raise ValueError(f"corpus {key.corpus!r} is empty: it holds no non-empty document")
    return digest.hexdigest()


def text_folder(key: CorpusKey, cache_dir: Path) -> tuple[Path, str | None]:
    """``(folder, fingerprint)``: the shard folder that holds (or will hold, once built) ``key``'s text
    as it is now, and that text's document fingerprint where it was read to decide (``None`` where the
    fast path or no check decided). See the module docstring.

    Raises:
        FileNotFoundError, ValueError: the text had to be read and cannot be (:func:`read_fingerprint`).
    """
    base = key.folder(cache_dir)
    stat = source_stat(key.corpus)
    manifest = read_manifest(base)
    if stat is None or manifest is None or recorded_source(base) == stat:
        if manifest is None:
            return _same_source(base, stat) or base, None
        return base, None
    same = _same_source(base, stat)
    if same is not None:  # another text built beside the key's folder before, its files unchanged since
        return same, None
    fingerprint = read_fingerprint(key)
    built = _manifest_fingerprint(manifest)
    if built is None or built == fingerprint:  # the same text (a folder from before `protocol`: unchecked)
        record_source(base, stat)
        return base, fingerprint
    other = base.with_name(f"{base.name}-{fingerprint[:16]}")
    if read_manifest(other) is not None:
        record_source(other, stat)
    return other, fingerprint


def _same_source(base: Path, stat: list[list] | None) -> Path | None:
    """A finished folder beside ``base`` built for another text of its key whose recorded source is ``stat``."""
    if stat is None or not base.parent.is_dir():
        return None
    for other in sorted(base.parent.glob(f"{base.name}-*")):
        if other.is_dir() and recorded_source(other) == stat and read_manifest(other) is not None:
            return other
    return None


def fingerprint_of(key: CorpusKey, cache_dir: Path | None = None) -> str | None:
    """The document fingerprint of the corpus ``key`` names (hex sha256), ``None`` for a hub spec the
    cache has not prepared (its spec is its identity).

    A prepared shard folder for the key (or the key a worker builds, :func:`~harness.corpus.key.worker_key`)
    whose source is unchanged (:func:`text_folder`) gives it from its manifest without reading the text;
    otherwise the documents are read (``key.max_docs`` of them), as a worker would.

    Raises:
        FileNotFoundError: a local corpus that is not there.
        ValueError: a corpus reference (it names a fingerprint, not a place to read); a corpus that
            cannot be read or holds no document.
    """
    if parse_ref(key.corpus) is not None:
        raise ValueError(f"{key.corpus} is a corpus reference, not a corpus to read: pass --corpus PATH")
    if cache_dir is not None:
        for k in dict.fromkeys([key, worker_key(key)]):
            folder, fingerprint = text_folder(k, cache_dir)
            if fingerprint is not None:
                return fingerprint
            manifest = read_manifest(folder)
            if manifest is not None and "protocol" in manifest:
                return manifest["protocol"]["fingerprint"]
    if key.corpus.startswith(HUB_PREFIX):
        return None
    return read_fingerprint(key)


__all__ = [
    "SOURCE_STAT",
    "fingerprint_of",
    "read_fingerprint",
    "record_source",
    "recorded_source",
    "source_stat",
    "text_folder",
]
