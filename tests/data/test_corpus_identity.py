"""A corpus is its content (harness/data/corpus_identity.py): its fingerprint is the one a run's protocol
holds, read from a prepared folder's manifest or from the text alike, the same for a copy at another
path, and different for another text; a corpus reference round-trips and is never taken for a path.

    python -m pytest -q tests/data/test_corpus_identity.py
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from harness.data.corpus import corpus_fingerprint, read_documents
from harness.data.corpus_identity import corpus_name, corpus_ref, fingerprint_of, is_local, parse_ref
from harness.data.corpus_key import CorpusKey
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
    (copy / files[0].name).write_text("")  # the manifest answers now, without reading the text
    assert fingerprint_of(moved, tmp_path / "cache") == SAMPLE_FINGERPRINT
    other = _copy(files[1:], tmp_path / "other")
    assert fingerprint_of(CorpusKey(str(other), "bpe", 300, 0.1, None)) != SAMPLE_FINGERPRINT
    limited = CorpusKey(str(SAMPLE), "bpe", 300, 0.1, 50)  # the documents a run reads: max_docs counts
    assert fingerprint_of(limited) == corpus_fingerprint(read_documents(str(SAMPLE), max_docs=50))
    assert fingerprint_of(CorpusKey("hf:HuggingFaceFW/fineweb-edu", "gpt2", 0, 0.1, None)) is None


def test_a_corpus_reference_round_trips_and_is_not_a_path():
    ref = corpus_ref(SAMPLE_FINGERPRINT, "fineweb_edu_sample")
    assert ref == f"corpus-sha256:{SAMPLE_FINGERPRINT}:fineweb_edu_sample"
    assert parse_ref(ref) == (SAMPLE_FINGERPRINT, "fineweb_edu_sample") and not is_local(ref)
    assert corpus_name(ref) == "fineweb_edu_sample" == corpus_name(str(SAMPLE) + "/")
    assert parse_ref(str(SAMPLE)) is None and is_local(str(SAMPLE)) and not is_local("hf:a/b")
    with pytest.raises(ValueError, match="not 64 lowercase hex digits"):
        corpus_ref("abc", "x")
    with pytest.raises(ValueError, match="is a corpus reference"):
        fingerprint_of(CorpusKey(ref, "bpe", 300, 0.1, None))
