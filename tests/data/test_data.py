"""Tokenizer and prepared token files (harness.data: tokenizer, prepare); reading a corpus is tests/corpus's.

Run: ``python -m pytest -q tests/data/test_data.py`` (CPU only, a few seconds). Uses the real
FineWeb-Edu sample in ``../shared/data/fineweb_edu_sample`` (skipped where absent) and tiny
hand-made corpora for the error cases. Never touches the network: the hub path and the
tiktoken error paths run against fake modules, and the gpt2 code path runs on a real
``tiktoken.Encoding`` built here from the BPE trained on the sample (tiktoken's own ``gpt2``
files need a network once: that test is marked ``gpt2_files`` and runs where they load).
"""

from __future__ import annotations

import functools
import hashlib
import json
import multiprocessing
import os
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import tiktoken
from tiktoken_ext.openai_public import r50k_pat_str

from harness.corpus.fingerprint import corpus_fingerprint
from harness.corpus.key import CorpusKey
from harness.corpus.readers import OptionalDependencyError, read_documents
from harness.corpus.split import split_documents
from harness.data import prepare_corpus, token_dtype
from harness.data import shards as data_mod
from harness.data.tokenizer import EOS_TOKEN, GPT2Tokenizer, train_bpe

pytestmark = pytest.mark.own_cache  # its commands build their corpus in RESULTS/cache (conftest)

SAMPLE = Path(__file__).resolve().parents[3] / "shared/data/fineweb_edu_sample"
needs_sample = pytest.mark.skipif(not SAMPLE.is_dir(), reason=f"sample corpus {SAMPLE} absent")
VOCAB = 512


def _write_jsonl(path: Path, texts: list) -> Path:
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    if not SAMPLE.is_dir():
        pytest.skip(f"sample corpus {SAMPLE} absent")
    return prepare_corpus(
        CorpusKey(str(SAMPLE), "bpe", VOCAB, 0.05, None), cache_dir=tmp_path_factory.mktemp("cache")
    )


# ----------------------------------------------------------------------------- reading


# ----------------------------------------------------------------------------- split, fingerprint


@needs_sample
def test_prepared_fingerprint_changes_when_one_character_of_a_file_changes(tmp_path, sample_docs):
    docs = sample_docs[:60]
    a = _write_jsonl(tmp_path / "a.jsonl", docs)
    edited = list(docs)
    edited[30] = edited[30][:100] + ("X" if edited[30][100] != "X" else "Y") + edited[30][101:]
    b = _write_jsonl(tmp_path / "b.jsonl", edited)
    pa = prepare_corpus(CorpusKey(str(a), "bpe", 300, 0.2, None), cache_dir=tmp_path / "c")
    pb = prepare_corpus(CorpusKey(str(b), "bpe", 300, 0.2, None), cache_dir=tmp_path / "c")
    assert pa.fingerprint == corpus_fingerprint(docs)
    assert pb.fingerprint == corpus_fingerprint(edited) != pa.fingerprint
    assert pa.dir != pb.dir


# ----------------------------------------------------------------------------- token files


@needs_sample
def test_byte_accounting_is_exact(prepared, sample_docs):
    split = split_documents(sample_docs, 0.05)
    tb = prepared.token_bytes()
    assert tb.dtype == np.int64 and tb.shape == (prepared.vocab_size,) and tb[0] == 0
    assert (tb[1:] > 0).all()
    for name, docs in (("train", split.train), ("val", split.val)):
        tokens = prepared.tokens(name)[:]
        info = prepared.protocol_meta["splits"][name]
        utf8_bytes = sum(len(d.encode("utf-8")) for d in docs)
        assert info["bytes"] == utf8_bytes
        assert int(tb[np.asarray(tokens, dtype=np.int64)].sum()) == utf8_bytes
        assert info["documents"] == len(docs) == int((tokens == 0).sum())
        assert info["tokens"] == len(tokens)
        assert info["sha256"] == hashlib.sha256(tokens[:].tobytes()).hexdigest()  # the split's whole stream
        assert prepared.meta["splits"][name]["shards"][0]["sha256"] == info["sha256"]  # one shard
    val = prepared.tokens("val")[:]
    assert prepared.tokenizer().decode(val.tolist()) == "".join(d + EOS_TOKEN for d in split.val)
    assert val[-1] == 0  # EOS follows every document
    assert (
        prepared.meta["tokenizer"]["sha256"]
        == hashlib.sha256((prepared.dir / "tokenizer.json").read_bytes()).hexdigest()
    )
    prepared.verify()


@needs_sample
def test_prepared_metadata_and_memmap(prepared, sample_docs):
    meta = prepared.meta
    assert prepared.dtype == "uint16" and prepared.vocab_size == VOCAB == meta["tokenizer"]["vocab_size"]
    assert prepared.protocol_meta["fingerprint"] == prepared.fingerprint == corpus_fingerprint(sample_docs)
    assert meta["corpus"] == str(SAMPLE) and meta["max_docs"] is None and meta["documents"] == 406
    assert (
        "corpus" not in prepared.protocol_meta
        and prepared.protocol_meta["fingerprint"] == prepared.fingerprint
    )
    tokens = prepared.tokens("train")
    assert [m.flags.writeable for m in tokens.maps] == [False]  # one read-only memory map: one shard
    assert int(tokens[:].max()) < prepared.vocab_size
    with pytest.raises(ValueError, match="unknown split 'test'"):
        prepared.tokens("test")


@needs_sample
def test_tokenizer_is_trained_on_training_split_only(prepared, sample_docs):
    train_only = train_bpe(split_documents(sample_docs, 0.05).train, VOCAB)
    assert train_only.sha256 == prepared.meta["tokenizer"]["sha256"]
    everything = train_bpe(sample_docs, VOCAB)
    assert everything.sha256 != train_only.sha256


def test_token_dtype_rule():
    assert token_dtype(512) == np.uint16 and token_dtype(65535) == np.uint16
    assert token_dtype(65536) == np.uint32 and token_dtype(200_000) == np.uint32


# ----------------------------------------------------------------------------- tokenizer


_TRAIN_IN_CHILD = """
import hashlib, json, sys
from pathlib import Path
from harness.data.tokenizer import train_bpe
docs = json.loads(Path(sys.argv[1]).read_text())
print(train_bpe(docs, 512, cache_dir=Path(sys.argv[2])).sha256)
"""


@needs_sample
def test_bpe_training_is_deterministic_across_cache_dirs_and_threads(tmp_path, sample_docs):
    docs = split_documents(sample_docs, 0.05).train
    first = train_bpe(docs, VOCAB, cache_dir=tmp_path / "one")
    second = train_bpe(docs, VOCAB, cache_dir=tmp_path / "two")
    files = [next((tmp_path / d / "tokenizers").glob("*.json")) for d in ("one", "two")]
    digests = {hashlib.sha256(f.read_bytes()).hexdigest() for f in files}
    assert digests == {first.sha256} and second.sha256 == first.sha256
    # a fresh process on one thread (the trainer is multi-threaded) gives the same merges
    (tmp_path / "docs.json").write_text(json.dumps(docs))
    env = dict(os.environ, RAYON_NUM_THREADS="1", RAYON_RS_NUM_CPUS="1")
    out = subprocess.run(
        [sys.executable, "-c", _TRAIN_IN_CHILD, str(tmp_path / "docs.json"), str(tmp_path / "three")],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert out.stdout.strip() == first.sha256


@needs_sample
def test_bpe_special_token_and_literal_eos_text(prepared):
    tok = prepared.tokenizer()
    assert tok.eos_id == 0 and tok.vocab_size == VOCAB
    text = "Plants make sugar. <|endoftext|> is just text here: é, 日本."
    ids = tok.encode(text)
    assert 0 not in ids  # the literal string is not a document boundary
    assert tok.decode(ids) == text
    assert int(prepared.token_bytes()[ids].sum()) == len(text.encode("utf-8"))


def test_vocab_size_below_byte_alphabet_is_an_error():
    with pytest.raises(ValueError, match="vocab_size=100 is not allowed for byte-level BPE.*257"):
        train_bpe(["some text"], 100)


def test_gpt2_without_tiktoken_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "tiktoken", None)  # import raises ImportError
    with pytest.raises(OptionalDependencyError, match="'tiktoken'.*not installed"):
        GPT2Tokenizer()


def test_gpt2_offline_without_cached_files_is_a_clear_error(monkeypatch):
    def get_encoding(name):
        raise ConnectionError("Failed to resolve 'openaipublic.blob.core.windows.net'")

    monkeypatch.setitem(sys.modules, "tiktoken", types.SimpleNamespace(get_encoding=get_encoding))
    with pytest.raises(ValueError, match="cannot load its gpt2 files.*ConnectionError"):
        GPT2Tokenizer()


def _gpt2_byte_chars() -> dict[str, int]:
    """GPT-2's printable character -> byte table (its ``bytes_to_unicode``, written out here
    independently of ``tokenizers``): the printable bytes stand for themselves, the others
    are shifted to 256 + n in byte order."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("\u00a1"), ord("\u00ac") + 1),
        *range(ord("\u00ae"), ord("\u00ff") + 1),
    ]
    shifted = [b for b in range(256) if b not in printable]
    return {**{chr(b): b for b in printable}, **{chr(256 + n): b for n, b in enumerate(shifted)}}


GAP_IDS = 3  # unused ids between the last rank and <|endoftext|>, as in a vocabulary padded to a round size


@pytest.fixture(scope="module")
def local_gpt2(prepared) -> tiktoken.Encoding:
    """A ``tiktoken.Encoding`` shaped like ``gpt2`` and built offline: GPT-2's split pattern,
    byte-level mergeable ranks from the BPE trained on the sample's training split (rank =
    BPE id - 1), then ``GAP_IDS`` ids without a token, then ``<|endoftext|>``."""
    byte_of = _gpt2_byte_chars()
    vocab = json.loads(prepared.tokenizer().json_str)["model"]["vocab"]
    ranks = {bytes(byte_of[c] for c in token): idx - 1 for token, idx in vocab.items() if idx != 0}
    assert sorted(ranks.values()) == list(range(VOCAB - 1))
    return tiktoken.Encoding(
        "local_gpt2",
        pat_str=r50k_pat_str,
        mergeable_ranks=ranks,
        special_tokens={EOS_TOKEN: VOCAB - 1 + GAP_IDS},
    )


@needs_sample
def test_gpt2_code_path_on_a_local_encoding(local_gpt2, prepared, sample_docs):
    """The gpt2 tokenizer's encode, token-bytes (special and unused ids) and hash on a real
    tiktoken Encoding: it tokenizes the sample exactly as the BPE its ranks came from."""
    tok = GPT2Tokenizer(encoding=local_gpt2)
    eos = VOCAB - 1 + GAP_IDS
    assert (tok.vocab_size, tok.eos_id) == (eos + 1, eos)
    lengths = tok.token_bytes()
    assert lengths.shape == (eos + 1,) and lengths.dtype == np.int64
    bpe_lengths = prepared.token_bytes()
    assert lengths[: VOCAB - 1].tolist() == bpe_lengths[1:].tolist()  # every rank: its byte length
    assert lengths[VOCAB - 1 :].tolist() == [0] * (GAP_IDS + 1)  # unused ids and <|endoftext|>: no bytes
    assert min(lengths[: VOCAB - 1]) == 1

    bpe = prepared.tokenizer()
    encoded = tok.encode_batch(sample_docs)
    assert encoded[:20] == [tok.encode(d) for d in sample_docs[:20]]
    for doc, ids in zip(sample_docs, encoded):
        assert ids == [i - 1 for i in bpe.encode(doc)]  # the same tokens (BPE has <|endoftext|> at id 0)
        assert int(lengths[ids].sum()) == len(doc.encode("utf-8"))
    text = "Plants make sugar. <|endoftext|> is just text here: \u00e9, \u65e5\u672c."
    ids = tok.encode(text)
    assert eos not in ids and tok.decode(ids) == text
    assert int(lengths[ids].sum()) == len(text.encode("utf-8"))
    # the hash: every id's bytes, length-framed, in id order (unused and special ids empty)
    framed = b"".join(
        len(b).to_bytes(4, "little") + b
        for b in [local_gpt2.decode_single_token_bytes(i) for i in range(VOCAB - 1)] + [b""] * (GAP_IDS + 1)
    )
    assert tok.sha256 == hashlib.sha256(framed).hexdigest()


@needs_sample
def test_gpt2_ranks_file_reads_back_as_the_encodings_ranks(local_gpt2, tmp_path):
    """The ranks file `harness prepare` copies beside gpt2 shards, written through tiktoken's public
    API (GPT2Tokenizer.mergeable_ranks), is what tiktoken's loader reads back: every token's rank."""
    from tiktoken.load import load_tiktoken_bpe

    from harness.data.tokenizer import write_gpt2_ranks

    tok = GPT2Tokenizer(encoding=local_gpt2)
    write_gpt2_ranks(tmp_path / "gpt2.tiktoken", tok)
    expected = {local_gpt2.decode_single_token_bytes(r): r for r in range(VOCAB - 1)}
    assert tok.mergeable_ranks() == expected
    assert load_tiktoken_bpe(str(tmp_path / "gpt2.tiktoken")) == expected


@pytest.mark.gpt2_files
def test_gpt2_real_byte_accounting_when_available(monkeypatch):
    def offline(blobpath):  # the suite never downloads (tiktoken's requests.get has no timeout)
        raise ConnectionError(f"{blobpath} is not in tiktoken's cache and the tests do not download")

    monkeypatch.setattr(tiktoken.load, "read_file", offline)
    try:
        tiktoken.get_encoding("gpt2")
    except Exception as exc:  # without cached files
        pytest.skip(f"tiktoken's gpt2 files are not cached here (TIKTOKEN_CACHE_DIR): {exc}")
    tok = GPT2Tokenizer()
    text = "Plants make sugar. <|endoftext|> é 日本"
    ids = tok.encode(text)
    assert tok.vocab_size == 50257 and tok.eos_id == 50256 and 50256 not in ids
    assert int(tok.token_bytes()[ids].sum()) == len(text.encode()) and tok.token_bytes()[50256] == 0


# ----------------------------------------------------------------------------- caching, atomicity


@needs_sample
def test_second_prepare_reuses_files_without_retraining(tmp_path, monkeypatch):
    key = CorpusKey(str(SAMPLE), "bpe", 300, 0.05, 120)
    first = prepare_corpus(key, cache_dir=tmp_path)
    mtimes = {p.name: p.stat().st_mtime_ns for p in first.dir.iterdir()}

    def no_training(*args, **kw):
        raise AssertionError("tokenizer retrained although the prepared corpus is cached")

    monkeypatch.setattr(data_mod, "train_key_bpe", no_training)
    second = prepare_corpus(key, cache_dir=tmp_path)  # no training (above), no file rewritten (below)
    assert second == first
    assert {p.name: p.stat().st_mtime_ns for p in second.dir.iterdir()} == mtimes
    assert first.meta["documents"] == 120


def test_failed_build_leaves_nothing_half_written(tmp_path, monkeypatch):
    corpus = _write_jsonl(tmp_path / "c.jsonl", [f"document {i} " * 20 for i in range(40)])

    def broken(*args, **kwargs):
        raise OSError("disk full")

    key = CorpusKey(str(corpus), "bpe", 300, 0.3, None)
    monkeypatch.setattr(data_mod, "_write_chunk", broken)
    with pytest.raises(OSError, match="disk full"):
        prepare_corpus(key, cache_dir=tmp_path / "cache")
    assert not (key.folder(tmp_path / "cache") / "manifest.json").exists()  # no finished corpus
    monkeypatch.undo()
    again = prepare_corpus(key, cache_dir=tmp_path / "cache")  # resumes the build
    clean = prepare_corpus(key, cache_dir=tmp_path / "clean")
    assert again.protocol_meta == clean.protocol_meta
    assert not (again.dir / "progress.json").exists()


@needs_sample
def test_two_spawned_workers_preparing_at_once_agree(tmp_path):
    job = functools.partial(prepare_corpus, cache_dir=tmp_path)
    key = CorpusKey(str(SAMPLE), "bpe", 400, 0.05, 200)
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        results = pool.map(job, [key, key])
    assert results[0] == results[1]
    entries = sorted(p.name for p in (tmp_path / "corpora").iterdir())
    assert entries == [results[0].dir.name, results[0].dir.name + ".lock"]  # no .tmp-* left
    results[0].verify()
    assert results[0].meta["documents"] == 200


# ----------------------------------------------------------------------------- hub


def test_hub_stream_is_limited_and_cached_for_offline_reuse(tmp_path, monkeypatch):
    """A hub spec without max_docs that `harness prepare` has not sharded: the worker's build takes the
    first HUB_DEFAULT_MAX_DOCS documents (here lowered to 120 to see it) into the shard folder of that
    limit, and finds it again offline. (A local ``datasets`` folder of the spec's name stands in for
    the hub: the same ``load_dataset(..., streaming=True)`` calls, no network.)"""
    pytest.importorskip("datasets", reason="the test extra installs datasets")
    from harness.corpus import key as key_mod

    data = tmp_path / "local" / "hubdocs"
    data.mkdir(parents=True)
    rows = [f"hub document {i}: " + "words " * 30 + str(i) for i in range(200)]
    _write_jsonl(data / "train.jsonl", rows)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(key_mod, "HUB_DEFAULT_MAX_DOCS", 120)
    key = CorpusKey("hf:local/hubdocs", "bpe", 300, 0.2, None)
    first = prepare_corpus(key, cache_dir=tmp_path / "cache")
    assert first.meta["documents"] == 120 and first.meta["max_docs"] is None  # the caller's key
    assert first.fingerprint == corpus_fingerprint(rows[:120])
    assert first.dir == CorpusKey("hf:local/hubdocs", "bpe", 300, 0.2, 120).folder(tmp_path / "cache")
    monkeypatch.setitem(sys.modules, "datasets", None)  # offline, no datasets: found from the key alone
    assert prepare_corpus(key, cache_dir=tmp_path / "cache") == first


# ----------------------------------------------------------------------------- bad input


def test_empty_corpus_is_an_error(tmp_path):
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(ValueError, match="is empty"):
        read_documents(str(tmp_path / "empty.jsonl"))
    blank = _write_jsonl(tmp_path / "blank.jsonl", ["", "   \n", None])
    with pytest.raises(ValueError, match="is empty: it holds no non-empty document"):
        prepare_corpus(CorpusKey(str(blank), "bpe", 300, 0.05, None), cache_dir=tmp_path / "cache")


def test_bad_prepare_arguments_are_errors(tmp_path):
    corpus = _write_jsonl(tmp_path / "c.jsonl", ["a b c"])
    with pytest.raises(ValueError, match="unknown tokenizer 'wordpiece'; allowed: bpe, gpt2"):
        prepare_corpus(CorpusKey(str(corpus), "wordpiece", 300, 0.05, None), cache_dir=tmp_path)
    with pytest.raises(ValueError, match="val_fraction=1.5"):
        prepare_corpus(CorpusKey(str(corpus), "bpe", 300, 1.5, None), cache_dir=tmp_path)
    with pytest.raises(ValueError, match="max_docs=0"):
        prepare_corpus(CorpusKey(str(corpus), "bpe", 300, 0.05, 0), cache_dir=tmp_path)
