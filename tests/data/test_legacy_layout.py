"""Protocol continuity across the corpus format change (DESIGN 4): a study made on the single-file
layout continues on shards with the same protocol hash and the same token ids.

Real text (the shared FineWeb-Edu sample) and the checked-in factorial study's archive, whose run
records were written by the single-file builder: their ``protocol.data`` is that builder's
``meta.json``. :func:`write_legacy_corpus` writes the old layout's files the way that builder did
(git history: ``harness/data/prepare.py`` before the shard format was the only one); its output is
pinned to the archive's records, so the conversion is tested on an old folder, not on our idea of one.
"""

from __future__ import annotations

import hashlib
import json
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest

from harness.cli import main as cli
from harness.corpus.fingerprint import corpus_fingerprint
from harness.corpus.key import CorpusKey, read_manifest
from harness.corpus.readers import HUB_DEFAULT_MAX_DOCS, read_documents
from harness.corpus.split import split_documents
from harness.data import prepare_corpus
from harness.data.legacy_layout import LEGACY_FORMAT, hub_index_path, legacy_dir
from harness.data.tokenizer import token_dtype, train_bpe
from harness.train.protocol import protocol_hash

pytestmark = pytest.mark.own_cache  # its commands build their corpus in RESULTS/cache (conftest)

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT.parent / "shared/data/fineweb_edu_sample"
ARCHIVE = ROOT / "reports/factorial_study/rd_factorial_study.tar.gz"
KEY = CorpusKey(str(SAMPLE), "bpe", 512, 0.05, None)  # the study's corpus: [train] vocab_size = 512


def write_legacy_corpus(key: CorpusKey, cache_dir: Path) -> Path:
    """The single-file builder's folder for ``key`` (a ``bpe`` key): its files, written its way."""
    docs = read_documents(key.corpus, max_docs=key.max_docs)
    fingerprint = corpus_fingerprint(docs)
    out = legacy_dir(cache_dir, fingerprint, key.val_fraction, key.tokenizer, key.vocab_size)
    out.mkdir(parents=True)
    split = split_documents(docs, key.val_fraction)
    tok = train_bpe(split.train, key.vocab_size)  # every training document
    (out / "tokenizer.json").write_text(tok.json_str, encoding="utf-8")
    np.save(out / "token_bytes.npy", tok.token_bytes())
    dtype, splits = token_dtype(tok.vocab_size), {}
    for name, texts in (("train", split.train), ("val", split.val)):
        ids = [i for ids in tok.encode_batch(texts) for i in [*ids, tok.eos_id]]
        data = np.asarray(ids, dtype=dtype).tobytes()
        (out / f"{name}.bin").write_bytes(data)
        splits[name] = {
            "file": f"{name}.bin",
            "sha256": hashlib.sha256(data).hexdigest(),
            "tokens": len(ids),
            "bytes": sum(len(t.encode("utf-8")) for t in texts),
            "documents": len(texts),
        }
    meta = {
        "format": LEGACY_FORMAT,
        "fingerprint": fingerprint,
        "documents": len(docs),
        "val_fraction": float(key.val_fraction),
        "split_rule": "validation iff int(sha256(utf8(text))[:8], big-endian) < val_fraction * 2**64",
        "dtype": dtype.name,
        "eos_placement": "after every document",
        "tokenizer": {
            "name": tok.name,
            "vocab_size": int(tok.vocab_size),
            "requested_vocab_size": int(key.vocab_size),
            "eos_id": int(tok.eos_id),
            "sha256": tok.sha256,
        },
        "token_bytes_sha256": hashlib.sha256((out / "token_bytes.npy").read_bytes()).hexdigest(),
        "splits": splits,
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    return out


def study_runs() -> list[dict]:
    """The checked-in study's run records (written on the single-file layout)."""
    with tarfile.open(ARCHIVE) as tar:
        return [json.load(tar.extractfile(m))["run"] for m in tar.getmembers() if m.name.startswith("runs/")]


@pytest.fixture(scope="module")
def runs() -> list[dict]:
    return study_runs()


def rehash(run: dict, data: dict) -> str:
    """The run's recorded protocol with its corpus description replaced by ``data``, hashed."""
    return protocol_hash({**run["config"]["protocol"], "data": data})


def test_the_study_ran_on_the_old_layout_and_its_hashes_are_reproducible(runs):
    assert len(runs) == 96 and {r["config"]["protocol"]["data"]["splits"]["train"]["file"] for r in runs} == {
        "train.bin"
    }
    for run in runs:
        assert protocol_hash(run["config"]["protocol"]) == run["protocol_hash"]


@pytest.mark.slow  # ~3 s: a BPE training and two tokenizations of the sample
def test_a_fresh_shard_build_continues_the_study_with_its_protocol_hash(tmp_path, runs):
    """`harness import` of the study into a fresh results folder: the worker builds the corpus as one
    shard per split; the build is the old one token for token and its description the old
    ``meta.json``, so every run's protocol hash is the recorded one."""
    old = write_legacy_corpus(KEY, tmp_path / "old")
    meta = json.loads((old / "meta.json").read_text())
    assert all(r["config"]["protocol"]["data"] == meta for r in runs)  # the generator is the old builder
    new = prepare_corpus(KEY, cache_dir=tmp_path / "new")
    assert read_manifest(new.dir)["exhausted"] and "converted_from" not in read_manifest(new.dir)
    for split in ("train", "val"):
        assert np.array_equal(new.tokens(split)[:], np.fromfile(old / f"{split}.bin", dtype="<u2"))
    assert new.protocol_meta == meta
    assert [rehash(r, new.protocol_meta) for r in runs] == [r["protocol_hash"] for r in runs]
    assert (new.dir / "tokenizer.json").read_text() == (old / "tokenizer.json").read_text()


@pytest.mark.slow  # ~3 s: the old folder's BPE training and tokenization
def test_the_worker_converts_an_old_folder_in_place(tmp_path, runs):
    """A results folder whose cache holds the old layout: the worker's corpus is that folder made a
    shard folder (hard links: nothing tokenized again), its ``meta.json`` the protocol description."""
    cache = tmp_path / "cache"
    old = write_legacy_corpus(KEY, cache)
    before = json.loads((old / "meta.json").read_text())
    prepared = prepare_corpus(KEY, cache_dir=cache)
    manifest = read_manifest(prepared.dir)
    assert prepared.dir == KEY.folder(cache) and manifest["converted_from"] == old.name
    assert prepared.protocol_meta == before and prepared.fingerprint == before["fingerprint"]
    assert [rehash(r, prepared.protocol_meta) for r in runs] == [r["protocol_hash"] for r in runs]
    for split in ("train", "val"):
        shard = prepared.dir / f"{split}-00000.bin"
        assert shard.stat().st_ino == (old / f"{split}.bin").stat().st_ino  # the same file
        assert np.array_equal(prepared.tokens(split)[:], np.fromfile(old / f"{split}.bin", dtype="<u2"))
    prepared.verify()
    assert (old / "meta.json").is_file()  # the old folder stays readable by an older harness
    assert prepare_corpus(KEY, cache_dir=cache) == prepared  # found next time, not converted again


@pytest.mark.slow  # ~3 s
def test_harness_prepare_converts_an_old_folder_instead_of_rebuilding(tmp_path, capsys):
    results = tmp_path / "results"
    old = write_legacy_corpus(KEY, results / "cache")
    argv = ["prepare", "--corpus", str(SAMPLE), "--vocab-size", "512", "--val-fraction", "0.05"]
    assert cli([*argv, "--results", str(results)]) == 0
    manifest = read_manifest(KEY.folder(results / "cache"))
    assert manifest["converted_from"] == old.name
    assert manifest["protocol"] == json.loads((old / "meta.json").read_text())


def test_an_old_hub_sample_is_converted_offline(tmp_path, monkeypatch):
    """A worker's old hub sample (its first HUB_DEFAULT_MAX_DOCS documents, found through the hub
    index): converted without datasets or a network into the shard folder of that limit."""
    pytest.importorskip("datasets", reason="the test extra installs datasets")
    data = tmp_path / "local" / "hubdocs"
    data.mkdir(parents=True)
    rows = [f"hub document {i}: " + "words " * 30 + str(i) for i in range(60)]
    (data / "train.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in rows))
    monkeypatch.chdir(tmp_path)
    cache, spec = tmp_path / "cache", "hf:local/hubdocs"
    old = write_legacy_corpus(CorpusKey(spec, "bpe", 300, 0.2, None), cache)
    index = hub_index_path(cache, spec, None)
    index.parent.mkdir(parents=True)
    index.write_text(json.dumps({"corpus": spec, "fingerprint": corpus_fingerprint(rows)}))
    monkeypatch.setitem(sys.modules, "datasets", None)  # offline: the old path found it this way too
    prepared = prepare_corpus(CorpusKey(spec, "bpe", 300, 0.2, None), cache_dir=cache)
    assert read_manifest(prepared.dir)["converted_from"] == old.name
    assert prepared.dir == CorpusKey(spec, "bpe", 300, 0.2, HUB_DEFAULT_MAX_DOCS).folder(cache)
    assert prepared.protocol_meta == json.loads((old / "meta.json").read_text())
    assert np.array_equal(prepared.tokens("val")[:], np.fromfile(old / "val.bin", dtype="<u2"))
