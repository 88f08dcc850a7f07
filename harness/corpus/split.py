"""The document-level train/validation split (DESIGN section 4).

A document is a validation document iff the first 8 bytes of ``sha256(utf8(text))``, read as a
big-endian integer ``h``, satisfy ``h < val_fraction * 2**64`` (:data:`SPLIT_RULE`, recorded in every
prepared corpus's manifest). The split is order-independent: the same text always lands in the same
split whatever else is in the corpus, and duplicates never straddle it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

#: The splits of a corpus, in their order in files and manifests.
SPLITS = ("train", "val")
#: The rule of :func:`is_validation`, in words (a prepared corpus's manifest records it).
SPLIT_RULE = "validation iff int(sha256(utf8(text))[:8], big-endian) < val_fraction * 2**64"


@dataclass(frozen=True)
class SplitDocuments:
    """A document-level train/validation split (lists keep corpus order)."""

    train: list[str]
    val: list[str]


def is_validation(text: str, val_fraction: float) -> bool:
    """Whether a document belongs to the validation split (:data:`SPLIT_RULE`)."""
    h = int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big")
    return h < val_fraction * 2.0**64


def split_documents(docs: Sequence[str], val_fraction: float) -> SplitDocuments:
    """Document-level, order-independent train/validation split.

    Args:
        docs: the corpus documents.
        val_fraction: expected fraction of documents held out, in (0, 1).

    Raises:
        ValueError: ``val_fraction`` outside (0, 1), or the split leaves no validation or
            no training document (the message gives the counts and what to change).
    """
    if isinstance(val_fraction, bool) or not 0.0 < float(val_fraction) < 1.0:
        raise ValueError(f"val_fraction={val_fraction!r} must be in (0, 1)")
    train: list[str] = []
    val: list[str] = []
    for text in docs:
        (val if is_validation(text, val_fraction) else train).append(text)
    if not val or not train:
        empty = "validation" if not val else "training"
        raise ValueError(
            f"the document-level split with val_fraction={val_fraction} puts {len(train)} of "
            f"{len(docs)} documents in training and {len(val)} in validation, leaving the {empty} "
            "split empty; use more documents (max_docs) or a different val_fraction"
        )
    return SplitDocuments(train=train, val=val)


__all__ = ["SPLITS", "SPLIT_RULE", "SplitDocuments", "is_validation", "split_documents"]
