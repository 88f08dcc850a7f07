"""A corpus is its content (harness/corpus/fingerprint.py, harness/corpus/cached.py): its fingerprint is
the one a run's protocol holds, read from a prepared folder's manifest or from the text alike, the same
for a copy at another path, and different for another text; the framing makes every change of the text
a change of the hash.

    python -m pytest -q tests/corpus/test_fingerprint.py
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest

from harness.corpus.cached import fingerprint_of
from harness.corpus.fingerprint import corpus_fingerprint
from harness.corpus.key import CorpusKey
from harness.corpus.readers import read_documents
from harness.data.prepared import prepare_corpus

SAMPLE = Path(__file__).resolve().parents[3] / "shared/data/fineweb_edu_sample"
#: the committed factorial study's runs record this document fingerprint for the sample (protocol.data)
SAMPLE_FINGERPRINT = "f847df0d8258a439737bb5912dd4d8b0305e703a80306d78d6233c5f493c986f"


def _copy(files: list[Path], to: Path) -> Path:
    to.mkdir(parents=True)
    for f in files:
        shutil.copyfile(f, to / f.name)
    return to


@pytest.mark.slow  # prepares the sample (a BPE of 300): about 5 s on 2 cores
def test_the_fingerprint_is_the_protocols_from_the_text_or_the_manifest_at_any_path(tmp_path):
    files = sorted(SAMPLE.glob("*.jsonl"))
    copy = _copy(files, tmp_path / "elsewhere" / "renamed")
    key = CorpusKey(str(SAMPLE), "bpe", 300, 0.1, None)
    assert fingerprint_of(key) == SAMPLE_FINGERPRINT == corpus_fingerprint(read_documents(str(SAMPLE)))
    moved = CorpusKey(str(copy), "bpe", 300, 0.1, None)
    assert fingerprint_of(moved, tmp_path / "cache") == SAMPLE_FINGERPRINT  # nothing prepared: the text
    prepared = prepare_corpus(moved, cache_dir=tmp_path / "cache")
    assert prepared.protocol_meta["fingerprint"] == SAMPLE_FINGERPRINT
    # the manifest answers now, without reading the text, while the files' sizes and times are unchanged
    # (a text changed since is read: tests/corpus/test_cached.py)
    first = copy / files[0].name
    st = first.stat()
    first.write_bytes(b" " * st.st_size)  # no text at all, but the same size and time
    os.utime(first, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert fingerprint_of(moved, tmp_path / "cache") == SAMPLE_FINGERPRINT
    other = _copy(files[1:], tmp_path / "other")
    assert fingerprint_of(CorpusKey(str(other), "bpe", 300, 0.1, None)) != SAMPLE_FINGERPRINT
    limited = CorpusKey(str(SAMPLE), "bpe", 300, 0.1, 50)  # the documents a run reads: max_docs counts
    assert fingerprint_of(limited) == corpus_fingerprint(read_documents(str(SAMPLE), max_docs=50))
    assert fingerprint_of(CorpusKey("hf:HuggingFaceFW/fineweb-edu", "gpt2", 0, 0.1, None)) is None


def test_fingerprint_matches_independent_hash_and_changes_with_one_character():
    docs = ["alpha beta", "gamma"]
    h = hashlib.sha256()
    for d in docs:
        h.update(len(d.encode()).to_bytes(8, "little") + d.encode())
    assert corpus_fingerprint(docs) == h.hexdigest()
    assert corpus_fingerprint(["alpha betA", "gamma"]) != h.hexdigest()
    assert corpus_fingerprint(["alpha beta", "gamma"][::-1]) != h.hexdigest()
    assert corpus_fingerprint(["alpha betag", "amma"]) != h.hexdigest()  # framing
