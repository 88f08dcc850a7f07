"""A corpus is its content: the document fingerprint (DESIGN section 4; docs/sharing.md).

The fingerprint of a corpus is sha256 over its documents' UTF-8 text in order, each framed by its
byte length (:func:`corpus_fingerprint`). It is the ``fingerprint`` of a run's protocol description
(``protocol.data``), so the same text at another path has the same identity and the same protocol
hash, and what the queue records for a grid's corpus (:mod:`harness.corpus.locate`).
:func:`fingerprint_of` gives it for a run's :class:`~harness.corpus.key.CorpusKey`: from the prepared
shard folder's manifest when the cache holds one, else by reading the documents.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

from harness.corpus.key import CorpusKey, read_manifest, worker_key
from harness.corpus.readers import stream_documents
from harness.corpus.spec import HUB_PREFIX, parse_ref


class Fingerprint:
    """:func:`corpus_fingerprint` fed piece by piece: ``update`` with consecutive runs of documents,
    then ``hexdigest`` (a streamed corpus is never held whole). ``documents``: how many were added."""

    def __init__(self) -> None:
        self._h = hashlib.sha256()
        self.documents = 0

    def update(self, docs: Iterable[str]) -> None:
        """Add the next documents, in order."""
        for text in docs:
            data = text.encode("utf-8")
            self._h.update(len(data).to_bytes(8, "little"))
            self._h.update(data)
            self.documents += 1

    def hexdigest(self) -> str:
        """The fingerprint of every document added so far."""
        return self._h.hexdigest()


def corpus_fingerprint(docs: Iterable[str]) -> str:
    """sha256 (hex) over the documents' UTF-8 text, in order.

    Each document is framed by its byte length (8 bytes, little-endian) so that
    ``["ab", "c"]`` and ``["a", "bc"]`` differ. Any change of one character, of the order
    or of the number of documents changes the fingerprint.
    """
    h = Fingerprint()
    h.update(docs)
    return h.hexdigest()


def fingerprint_of(key: CorpusKey, cache_dir: Path | None = None) -> str | None:
    """The document fingerprint of the corpus ``key`` names (hex sha256), ``None`` for a hub spec the
    cache has not prepared (its spec is its identity).

    A prepared shard folder for the key (or the key a worker builds, :func:`~harness.corpus.key.worker_key`)
    gives it from its manifest without reading the text; otherwise the documents are read
    (``key.max_docs`` of them), as a worker would.

    Raises:
        FileNotFoundError: a local corpus that is not there.
        ValueError: a corpus reference (it names a fingerprint, not a place to read); a corpus that
            cannot be read or holds no document.
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
    digest = Fingerprint()
    digest.update(stream_documents(key.corpus, max_docs=key.max_docs))
    if not digest.documents:
        raise ValueError(f"corpus {key.corpus!r} is empty: it holds no non-empty document")
    return digest.hexdigest()


__all__ = ["Fingerprint", "corpus_fingerprint", "fingerprint_of"]
