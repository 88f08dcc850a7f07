"""What a corpus reference is (harness/corpus/spec.py): paths made absolute against the right folder,
the one precedence of --corpus / $HARNESS_CORPUS / a grid's own, and a reference that round-trips and is
never taken for a path.

    python -m pytest -q tests/corpus/test_spec.py
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.corpus.cached import fingerprint_of
from harness.corpus.key import CorpusKey
from harness.corpus.spec import choose_corpus, corpus_name, corpus_ref, is_local, parse_ref, resolve_corpus

SAMPLE = Path(__file__).resolve().parents[3] / "shared/data/fineweb_edu_sample"
SAMPLE_FINGERPRINT = "f847df0d8258a439737bb5912dd4d8b0305e703a80306d78d6233c5f493c986f"


def test_corpus_resolution():
    assert (
        resolve_corpus("hf:HuggingFaceFW/fineweb-edu:sample-10BT")
        == "hf:HuggingFaceFW/fineweb-edu:sample-10BT"
    )
    assert resolve_corpus("../shared/data/x", cwd="/work/main") == "/work/shared/data/x"
    assert resolve_corpus("/abs/*.jsonl", cwd="/else") == "/abs/*.jsonl"
    assert resolve_corpus("d/*.jsonl", cwd="/r") == "/r/d/*.jsonl"


def test_every_command_chooses_the_corpus_by_one_precedence(tmp_path, monkeypatch):
    """choose_corpus (queue, tune, run): --corpus, else $HARNESS_CORPUS (both against the cwd), else the
    grid's own (against its file's folder), each named as the source."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HARNESS_CORPUS", raising=False)
    grid = ("../data/c.jsonl", tmp_path / "grids", "key 'corpus' of g.toml")
    own = (str(tmp_path / "data/c.jsonl"), "key 'corpus' of g.toml")
    assert choose_corpus(None, grid[0], folder=grid[1], where=grid[2]) == own
    assert choose_corpus(None) == (None, "")
    monkeypatch.setenv("HARNESS_CORPUS", "env.jsonl")
    assert choose_corpus(None, grid[0], folder=grid[1], where=grid[2]) == (
        str(tmp_path / "env.jsonl"),
        "$HARNESS_CORPUS",
    )
    assert choose_corpus("cli.jsonl", grid[0], folder=grid[1]) == (str(tmp_path / "cli.jsonl"), "--corpus")
    assert choose_corpus("hf:a/b:c") == ("hf:a/b:c", "--corpus")


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
