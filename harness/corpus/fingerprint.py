"""A corpus is its content: the document fingerprint (DESIGN section 4; docs/sharing.md).

The fingerprint of a corpus is sha256 over its documents' UTF-8 text in order, each framed by its
byte length (:func:`corpus_fingerprint`). It is the ``fingerprint`` of a run's protocol description
(``protocol.data``), so the same text at another path has the same identity and the same protocol
hash, and what the queue records for a grid's corpus (:mod:`harness.corpus.locate`).
:func:`harness.corpus.cached.fingerprint_of` gives it for a run's :class:`~harness.corpus.key.CorpusKey`
(from the prepared shard folder's manifest when the text there is unchanged, else by reading it).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable


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


__all__ = ["Fingerprint", "corpus_fingerprint"]
