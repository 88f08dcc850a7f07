"""The document-level split (harness/corpus/split.py): a document's side is a function of its text
alone (sha256, as the rule in the manifest says), independent of order and of the rest of the corpus.

Run: ``python -m pytest -q tests/corpus/test_split.py``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from harness.corpus.split import is_validation, split_documents

SAMPLE = Path(__file__).resolve().parents[3] / "shared/data/fineweb_edu_sample"
needs_sample = pytest.mark.skipif(not SAMPLE.is_dir(), reason=f"sample corpus {SAMPLE} absent")


@pytest.fixture(scope="module")
def sample_docs() -> list[str]:
    if not SAMPLE.is_dir():
        pytest.skip(f"sample corpus {SAMPLE} absent")
    docs = []
    for path in sorted(SAMPLE.glob("*.jsonl")):  # read with the stdlib, independently of the harness
        docs += [t for t in (json.loads(line)["text"] for line in path.read_text().splitlines()) if t.strip()]
    return docs


@needs_sample
def test_split_is_document_level_deterministic_and_order_independent(sample_docs):
    split = split_documents(sample_docs, 0.05)
    expected_val = [
        d
        for d in sample_docs
        if int.from_bytes(hashlib.sha256(d.encode()).digest()[:8], "big") < 0.05 * 2**64
    ]
    assert split.val == expected_val
    assert len(split.val) == 14 and len(split.train) == 392
    assert sorted(split.train + split.val) == sorted(sample_docs)
    reordered = split_documents(sample_docs[::-1], 0.05)
    assert reordered.val == split.val[::-1] and reordered.train == split.train[::-1]
    # a document's side does not depend on the rest of the corpus
    assert all(is_validation(d, 0.05) for d in split_documents(sample_docs[:100] + expected_val, 0.05).val)


def test_split_without_validation_document_is_an_error():
    docs = [f"document number {i}" for i in range(5)]
    with pytest.raises(ValueError, match="validation split empty"):
        split_documents(docs, 1e-9)
    with pytest.raises(ValueError, match="training split empty"):
        split_documents(docs, 1 - 1e-12)
    with pytest.raises(ValueError, match="val_fraction"):
        split_documents(docs, 0.0)
