"""A corpus is its content, a path only where to find it (DESIGN section 4; docs/sharing.md).

A local corpus's identity is its *document fingerprint*
(:func:`harness.data.corpus.corpus_fingerprint` of the documents a run reads, the ``fingerprint`` of
its protocol description, so the same text at another path has the same identity and the same
protocol hash). :func:`fingerprint_of` computes it for a run's :class:`CorpusKey` (from the prepared
shard folder's manifest when the cache holds one, else by reading the documents).

Where a path must not travel (an archive), it becomes a *corpus reference*: the fingerprint and the
corpus's file name, ``corpus-sha256:<fingerprint>:<name>`` (:func:`corpus_ref`). A reference is not a
path: a command meeting one asks for ``--corpus PATH``, checked against its fingerprint. A hub spec
(``hf:OWNER/NAME``) names no machine and is kept as it is.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

from harness.data.corpus import HUB_PREFIX, corpus_fingerprint, read_documents
from harness.data.corpus_key import CorpusKey
from harness.data.prepared import worker_key
from harness.data.shards import read_manifest

#: The prefix of a corpus reference (:func:`corpus_ref`).
REF_PREFIX = "corpus-sha256:"
_REF = re.compile(r"corpus-sha256:([0-9a-f]{64}):(.*)", re.DOTALL)


def corpus_ref(fingerprint: str, name: str) -> str:
    """The portable stand-in of a local corpus: ``corpus-sha256:<fingerprint>:<name>``.

    Args:
        fingerprint: the document fingerprint (64 hex digits).
        name: the corpus's file or folder name (no directory), to tell a reader what it was.

    Raises:
        ValueError: a fingerprint that is not 64 lowercase hex digits.
    """
    if not re.fullmatch(r"[0-9a-f]{64}", fingerprint or ""):
        raise ValueError(f"corpus fingerprint {fingerprint!r} is not 64 lowercase hex digits")
    return f"{REF_PREFIX}{fingerprint}:{name}"


def parse_ref(spec: str) -> tuple[str, str] | None:
    """``(fingerprint, name)`` of a corpus reference, ``None`` for anything else (a path, ``hf:``)."""
    match = _REF.fullmatch(spec or "")
    return (match.group(1), match.group(2)) if match else None


def is_local(spec: str) -> bool:
    """True for a corpus given by a path (or glob) on this machine: not a hub spec, not a reference."""
    return bool(spec) and not spec.startswith(HUB_PREFIX) and parse_ref(spec) is None


def corpus_name(spec: str) -> str:
    """The file or folder name of a corpus spec (a reference's recorded name; ``hf:`` specs whole)."""
    ref = parse_ref(spec)
    if ref is not None:
        return ref[1]
    if not is_local(spec):
        return spec
    return os.path.basename(os.path.normpath(spec)) or spec


def fingerprint_of(key: CorpusKey, cache_dir: Path | None = None) -> str | None:
    """The document fingerprint of the corpus ``key`` names (hex sha256), ``None`` for a hub spec the
    cache has not prepared (its spec is its identity).

    A prepared shard folder for the key (or the key a worker builds,
    :func:`~harness.data.prepared.worker_key`) gives it from its manifest without reading the text;
    otherwise the documents are read (``key.max_docs`` of them), as a worker would.

    Raises:
        FileNotFoundError: a local corpus that is not there.
        ValueError: a corpus reference (it names a fingerprint, not a place to read).
    """
    if parse_ref(key.corpus) is not None:
        raise ValueError(f"{key.corpus} is a corpus reference, not a corpus to read: pass --corpus PATH")
    if cache_dir is not None:
        for folder in dict.fromkeys([key.folder(cache_dir), worker_key(key).folder(cache_dir)]):
            manifest = read_manifest(folder)
            if manifest is not None and "protocol" in manifest:
                return manifest["protocol"]["fingerprint"]
    if key.corpus.startswith(HUB_PREFIX):
        return None
    return corpus_fingerprint(read_documents(key.corpus, max_docs=key.max_docs))


def repointed(key: CorpusKey, path: str) -> CorpusKey:
    """``key`` with its corpus at ``path`` (the other settings, hence the documents read, the same)."""
    return dataclasses.replace(key, corpus=path)


__all__ = [
    "REF_PREFIX",
    "corpus_ref",
    "parse_ref",
    "is_local",
    "corpus_name",
    "fingerprint_of",
    "repointed",
]
