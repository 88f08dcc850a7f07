"""`harness prepare`: corpora streamed into token shards, resumed, sized from a grid, refused at queue (DESIGN 11).

Real text throughout: the shared FineWeb-Edu sample, and corpora recombined from its
paragraphs in the test's folder (no network: the hub path streams a local ``datasets``
folder through the same ``load_dataset(..., streaming=True)`` call).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from harness.cli import main as cli
from harness.corpus.key import CorpusKey, read_manifest
from harness.corpus.readers import read_documents
from harness.corpus.split import split_documents
from harness.data.datamodule import TrainSchedule
from harness.data.prepared import prepare_corpus
from harness.data.shard_reader import ShardedTokens
from harness.data.shards import Target, prepare_shards
from harness.data.tokenizer import load_shard_tokenizer

pytestmark = pytest.mark.own_cache  # its commands build their corpus in RESULTS/cache (conftest)

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT.parent / "shared/data/fineweb_edu_sample"
MEMORY_GOAL_KB = 1_500_000  # DESIGN 11: peak RSS <= 1.5 GB at any corpus size


#: Runs argv[1:] and prints the largest RSS (KiB) among it and the processes it waited for.
PEAK_WRAPPER = (
    "import resource, subprocess, sys; r = subprocess.run(sys.argv[1:]); "
    "print('peak_rss_kb', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); "
    "sys.exit(r.returncode)"
)


def recombined_corpus(path: Path, megabytes: float, seed: int = 0) -> Path:
    """A JSONL corpus of about ``megabytes`` MB: documents of 3-12 paragraphs of the sample, drawn at random."""
    paragraphs = [p for doc in read_documents(str(SAMPLE)) for p in doc.split("\n") if p.strip()]
    rng, size = random.Random(seed), 0
    with open(path, "w") as fh:
        while size < megabytes * 2**20:
            line = (
                json.dumps({"text": "\n".join(rng.choice(paragraphs) for _ in range(rng.randint(3, 12)))})
                + "\n"
            )
            fh.write(line)
            size += len(line.encode())
    return path


def folder_files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if not p.name.endswith(".lock")}


def one_shot(folder: Path, corpus: str, val_fraction: float) -> dict[str, np.ndarray]:
    """Each split tokenized in one go from the documents read whole (read_documents), EOS after each."""
    manifest = read_manifest(folder)
    tok = load_shard_tokenizer(folder, manifest["tokenizer"]["name"])
    split = split_documents(read_documents(corpus), val_fraction)
    out = {}
    for name, docs in (("train", split.train), ("val", split.val)):
        parts = []
        for start in range(0, len(docs), 1000):  # Python int lists of 100 MB of text would not fit
            ids = [
                i for encoded in tok.encode_batch(docs[start : start + 1000]) for i in (*encoded, tok.eos_id)
            ]
            parts.append(np.asarray(ids, dtype=manifest["dtype"]))
        out[name] = np.concatenate(parts)
    return out


def corpus_folders(cache: Path) -> list[Path]:
    return [p for p in (cache / "corpora").glob("shards-*") if p.is_dir()]


def shard_tokens_of(folder: Path, split: str) -> np.ndarray:
    manifest = read_manifest(folder)
    return np.concatenate(
        [
            np.fromfile(folder / s["file"], dtype=manifest["dtype"])
            for s in manifest["splits"][split]["shards"]
        ]
    )


def test_sharded_tokens_read_as_their_concatenation(tmp_path):
    """Slices (copied shard by shard) and index arrays (gathered) of a split equal the same reads
    of its shards concatenated: across boundaries, at them, empty, whole, with an empty shard."""
    rng = np.random.default_rng(0)
    parts = [rng.integers(0, 60_000, n).astype("<u2") for n in (7, 0, 13, 1, 9)]
    shards = []
    for i, part in enumerate(parts):
        part.tofile(tmp_path / f"s{i}.bin")
        shards.append({"file": f"s{i}.bin", "tokens": len(part)})
    tokens, whole = ShardedTokens(tmp_path, shards, "uint16"), np.concatenate(parts)
    assert len(tokens) == len(whole) == 30
    for start in range(0, 31):
        for stop in range(start, 31):
            got = tokens[start:stop]
            assert got.dtype == np.uint16 and np.array_equal(got, whole[start:stop]), (start, stop)
    assert np.array_equal(tokens[:], whole) and np.array_equal(tokens[-5:], whole[-5:])
    index = rng.integers(0, 30, (4, 6))
    assert np.array_equal(tokens[index], whole[index])


@pytest.mark.slow  # 2 s on 2 cores: out of the developer's loop (`pytest -m "not slow"`)
def test_a_prepared_corpus_reads_as_the_workers_one_shard_build(tmp_path):
    """`harness prepare`'s many shards (a pool of two) and a worker's one-shard build (one process) are
    the same token arrays, the same batches in the same order (read across shard boundaries) and the
    same protocol description: shard size and process count are storage, not what the text is."""
    key = CorpusKey(str(SAMPLE), "bpe", 512, 0.05, None)
    single = prepare_corpus(key, cache_dir=tmp_path / "worker")
    folder = prepare_shards(
        key, cache_dir=tmp_path / "new", shard_tokens=100_000, workers=2, log=lambda m: None
    )
    sharded = prepare_corpus(key, cache_dir=tmp_path / "new")
    assert sharded.dir == folder and len(single.meta["splits"]["train"]["shards"]) == 1
    assert len(read_manifest(folder)["splits"]["train"]["shards"]) == 8  # 750,059 tokens in 100k shards
    for split in ("train", "val"):
        assert np.array_equal(single.tokens(split)[:], sharded.tokens(split)[:])
    assert np.array_equal(single.token_bytes(), sharded.token_bytes())
    assert sharded.protocol_meta == single.protocol_meta and sharded.fingerprint == single.fingerprint
    old, new = (TrainSchedule(p, context=64, batch_size=16, seed=3) for p in (single, sharded))
    for step in (0, 1, 700, 733, 734, 2000):  # 733 batches per epoch: the second epoch too
        for x, y in zip(old.batch(step, 1, 2), new.batch(step, 1, 2)):
            assert torch_equal(x, y)
    sharded.verify()
    manifest = read_manifest(folder)
    assert (
        sum(s["bytes"] for s in manifest["splits"]["train"]["shards"])
        == single.protocol_meta["splits"]["train"]["bytes"]
    )
    assert manifest["documents"] == single.meta["documents"] == 406


def torch_equal(a, b) -> bool:
    return a.shape == b.shape and bool((a == b).all())


@pytest.mark.slow  # 5 s on 2 cores: out of the developer's loop (`pytest -m "not slow"`)
def test_interrupted_and_extended_prepares_end_byte_identical_and_equal_one_shot(tmp_path):
    corpus = str(recombined_corpus(tmp_path / "corpus.jsonl", 1.5))
    kwargs = dict(shard_tokens=100_000, chunk_bytes=1 << 16, workers=2)
    corpus = CorpusKey(corpus, "bpe", 512, 0.05, None)
    whole = prepare_shards(corpus, cache_dir=tmp_path / "whole", log=lambda msg: None, **kwargs)

    lines = []

    def stop_after_two_shards(msg: str) -> None:
        lines.append(msg)
        if sum(" shard " in line for line in lines) == 2:
            raise KeyboardInterrupt  # a kill between two chunks

    with pytest.raises(KeyboardInterrupt):
        prepare_shards(corpus, cache_dir=tmp_path / "killed", log=stop_after_two_shards, **kwargs)
    (killed,) = corpus_folders(tmp_path / "killed")
    assert (killed / "progress.json").is_file() and read_manifest(killed) is None
    lines.clear()
    assert prepare_shards(corpus, cache_dir=tmp_path / "killed", log=lines.append, **kwargs) == killed
    assert "resuming after chunk" in lines[0] and "tokens/s" in lines[-1]
    assert folder_files(killed) == folder_files(whole)

    # sized for fewer tokens first, then extended to the whole source: the same bytes again
    small = prepare_shards(
        corpus, cache_dir=tmp_path / "grown", target=Target(300_000, 10_000), log=lambda msg: None, **kwargs
    )
    first = read_manifest(small)
    assert 300_000 <= first["splits"]["train"]["tokens"] < read_manifest(whole)["splits"]["train"]["tokens"]
    assert not first["exhausted"]
    prepare_shards(corpus, cache_dir=tmp_path / "grown", log=lambda msg: None, **kwargs)
    assert folder_files(small) == folder_files(whole) and read_manifest(whole)["exhausted"]

    expected = one_shot(whole, corpus.corpus, 0.05)
    for split in ("train", "val"):
        assert np.array_equal(shard_tokens_of(whole, split), expected[split])


def test_hub_path_streams_a_local_datasets_folder(tmp_path, monkeypatch):
    """``hf:OWNER/NAME`` goes through datasets.load_dataset(..., streaming=True); a local folder
    of that name is what datasets reads first, so the same calls run here without a network."""
    pytest.importorskip("datasets", reason="the test extra installs datasets")  # pinned in [test]
    data = tmp_path / "local" / "fineweb"
    data.mkdir(parents=True)
    recombined_corpus(data / "train.jsonl", 0.5, seed=1)
    monkeypatch.chdir(tmp_path)
    kwargs = dict(shard_tokens=50_000, workers=2, log=lambda msg: None)
    hub = prepare_shards(
        CorpusKey("hf:local/fineweb", "bpe", 400, 0.1, None), cache_dir=tmp_path / "a", **kwargs
    )
    local = prepare_shards(
        CorpusKey(str(data / "train.jsonl"), "bpe", 400, 0.1, None), cache_dir=tmp_path / "b", **kwargs
    )
    m_hub, m_local = read_manifest(hub), read_manifest(local)
    assert m_hub["source"] == "hf:local/fineweb" and m_hub["revision"] is None
    assert m_hub["checksum"] == m_local["checksum"] and m_hub["splits"] == m_local["splits"]
    # a worker finds it from its config alone, without datasets or a network
    monkeypatch.setitem(sys.modules, "datasets", None)
    prepared = prepare_corpus(CorpusKey("hf:local/fineweb", "bpe", 400, 0.1, None), cache_dir=tmp_path / "a")
    assert prepared.dir == hub and len(prepared.tokens("train")) == m_hub["splits"]["train"]["tokens"]


GRID = """
name = "g"
corpus = "{corpus}"
sizes = ["tiny"]
seeds = [0]
budgets_tokens = [{budgets}]
[variants]
block_attnres = "parent"
rd_attnres = "treatment"
[train]
vocab_size = 512
batch_tokens = 1024
eval_tokens = 2048
{extra}
"""


def test_prepare_grid_sizes_the_corpus_and_queue_refuses_what_it_cannot_feed(tmp_path, capsys):
    results = str(tmp_path / "results")
    grid = tmp_path / "g.toml"
    grid.write_text(GRID.format(corpus=SAMPLE, budgets="20_480, 40_960", extra=""))
    assert cli(["prepare", str(grid), "--results", results, "--shard-tokens", "50000", "--workers", "2"]) == 0
    out = capsys.readouterr().out
    # the grid's largest budget (40,960 tokens + 1) and its evaluation set, in whole chunks of text
    assert "largest budget reads 40,960 train tokens" in out and "evaluation set 2,048 tokens" in out
    (folder,) = corpus_folders(Path(results, "cache"))
    m = read_manifest(folder)
    assert 40_961 <= m["splits"]["train"]["tokens"] < 750_059 and m["splits"]["val"]["tokens"] >= 2_049
    assert f"{m['documents']:,} documents, {m['splits']['train']['tokens']:,} train tokens" in out
    assert cli(["queue", str(grid), "--results", results]) == 0
    capsys.readouterr()

    big = m["splits"]["train"]["tokens"] * 3
    grid.write_text(GRID.format(corpus=SAMPLE, budgets=big - big % 1024, extra="").replace('"g"', '"h"'))
    assert cli(["queue", str(grid), "--results", results]) == 2
    err = capsys.readouterr().err.strip()
    epochs = (big - big % 1024) / m["splits"]["train"]["tokens"]
    assert err.count("\n") == 0 and f"budget {big - big % 1024:,} tokens exceeds the train split" in err
    assert f"{epochs:.2f} epochs" in err and "max_epochs = 3" in err
    grid.write_text(
        GRID.format(corpus=SAMPLE, budgets=big - big % 1024, extra="max_epochs = 3").replace('"g"', '"h"')
    )
    assert cli(["queue", str(grid), "--results", results]) == 0

    hub = tmp_path / "hub.toml"
    hub.write_text(
        GRID.format(corpus="hf:HuggingFaceFW/fineweb-edu:sample-10BT", budgets="20_480", extra="").replace(
            '"g"', '"k"'
        )
    )
    assert cli(["queue", str(hub), "--results", results]) == 2
    err = capsys.readouterr().err
    assert "is not prepared" in err and f"harness prepare {hub}" in err


@pytest.mark.slow
def test_prepare_100mb_is_killed_resumed_and_stays_under_the_memory_goal(tmp_path):
    """A 100 MB corpus, SIGKILLed after its first shard and prepared again: the finished shards
    are kept, the peak RSS of every process of the resumed prepare (the pool included, which
    tokenizes the rest of the corpus) stays under 1.5 GB, and every
    document and byte is in the shards once."""
    corpus = str(recombined_corpus(tmp_path / "corpus.jsonl", 100))
    results = tmp_path / "results"
    cmd = [
        sys.executable,
        "-m",
        "harness",
        "prepare",
        "--corpus",
        corpus,
        "--tokenizer",
        "bpe",
        "--vocab-size",
        "4096",
        "--shard-tokens",
        "4000000",
        "--workers",
        "2",
        "--results",
        str(results),
    ]
    env = {**os.environ, "HARNESS_CACHE": ""}
    first = subprocess.Popen(cmd, env=env, start_new_session=True, stderr=subprocess.PIPE, text=True)
    progress = None
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and first.poll() is None:
        found = list(results.glob("cache/corpora/shards-*/progress.json"))
        if found and json.loads(found[0].read_text())["splits"]["train"].get("shards"):
            progress = found[0]
            break
        time.sleep(0.2)
    assert progress is not None, first.communicate()[1]
    os.killpg(first.pid, signal.SIGKILL)  # the main process and its pool
    first.wait()
    kept = {s["file"]: s["sha256"] for s in json.loads(progress.read_text())["splits"]["train"]["shards"]}
    # measured in a fresh wrapper process: pytest's own RUSAGE_CHILDREN also holds every earlier
    # test's subprocesses (a 120m model among them), so it cannot tell this prepare's peak
    second = subprocess.run(
        [sys.executable, "-c", PEAK_WRAPPER, *cmd], env=env, capture_output=True, text=True
    )
    assert second.returncode == 0, second.stderr
    peak_kb = int(re.search(r"^peak_rss_kb (\d+)$", second.stderr, re.M).group(1))  # its largest process
    assert peak_kb < MEMORY_GOAL_KB, peak_kb
    assert "resuming after chunk" in second.stderr and "tokens/s" in second.stderr
    folder = progress.parent
    m = read_manifest(folder)
    assert m["splits"]["train"]["tokens"] + m["splits"]["val"]["tokens"] > 20_000_000
    for split in ("train", "val"):
        for shard in m["splits"][split]["shards"]:
            assert hashlib.sha256((folder / shard["file"]).read_bytes()).hexdigest() == shard["sha256"]
    assert {f: h for f, h in kept.items()} == {
        s["file"]: s["sha256"] for s in m["splits"]["train"]["shards"] if s["file"] in kept
    }
    # every document once (the one-shot token equality is checked on the 1.5 MB corpus above, for time)
    with open(corpus) as fh:
        texts = [json.loads(line)["text"] for line in fh]
    assert m["documents"] == len(texts) == sum(m["splits"][s]["documents"] for s in ("train", "val"))
    assert m["splits"]["train"]["bytes"] + m["splits"]["val"]["bytes"] == sum(len(t.encode()) for t in texts)


def test_a_run_on_a_prepared_corpus_reads_its_shards_and_records_its_epochs(tmp_path, monkeypatch):
    import duckdb

    monkeypatch.delenv("HARNESS_CACHE", raising=False)
    results = tmp_path / "results"
    folder = prepare_shards(
        CorpusKey(str(SAMPLE), "bpe", 512, 0.05, None),
        cache_dir=results / "cache",
        shard_tokens=100_000,
        workers=2,
        log=lambda msg: None,
    )
    train_tokens = read_manifest(folder)["splits"]["train"]["tokens"]
    assert (
        cli(
            [
                "run",
                "--variant",
                "block_attnres",
                "--size",
                "tiny",
                "--seed",
                "0",
                "--budget-tokens",
                "4096",
                "--corpus",
                str(SAMPLE),
                "--results",
                str(results),
                "--quiet",
                "--threads",
                "1",
                "--set",
                "vocab_size=512",
                "--set",
                "batch_tokens=1024",
                "--set",
                "eval_tokens=1024",
            ]
        )
        == 0
    )
    (path,) = (results / "runs").glob("*.json")
    run = json.loads(path.read_text())["run"]
    assert run["epochs"] == 4096 / train_tokens
    data = run["config"]["protocol"]["data"]
    assert data == read_manifest(folder)["protocol"] and "source" not in data  # what the text is
    assert "max_epochs" not in run["config"]["protocol"]["train"]  # unset: out of the protocol hash
    con = duckdb.connect(str(results / "harness.duckdb"), read_only=True)
    assert con.execute("select epochs from runs").fetchall() == [(4096 / train_tokens,)]
    # the unigram plateau, recomputed from the shard files: add-one smoothed counts of the train
    # split, scored on the first eval_tokens validation targets (tokens 1..1024 of the split)
    m = read_manifest(folder)
    train = np.concatenate(
        [np.fromfile(folder / s["file"], dtype=m["dtype"]) for s in m["splits"]["train"]["shards"]]
    )
    val = np.concatenate(
        [np.fromfile(folder / s["file"], dtype=m["dtype"]) for s in m["splits"]["val"]["shards"]]
    )
    ids, n = np.unique(train, return_counts=True)
    count = dict(zip(ids.tolist(), n.tolist()))
    v = m["tokenizer"]["vocab_size"]
    expected = -sum(math.log((count.get(y, 0) + 1) / (len(train) + v)) for y in val[1:1025].tolist()) / 1024
    assert run["unigram_nll"] == pytest.approx(expected, rel=1e-12)
    assert con.execute("select unigram_nll from runs").fetchone()[0] == run["unigram_nll"]


def test_prepare_without_a_grid_says_what_it_holds_and_no_budget_line(tmp_path, capsys, monkeypatch):
    """`harness prepare --corpus C --tokens N` has no grid, hence no budget or evaluation set to report
    (it once printed 'largest budget reads 4,095 train tokens ... evaluation set -1 tokens')."""
    sample = Path(__file__).resolve().parents[3] / "shared/data/fineweb_edu_sample"
    monkeypatch.setenv("HARNESS_CACHE", "")
    args = ["prepare", "--corpus", str(sample / "fineweb_edu_sample10BT_efscorer150.jsonl")]
    assert cli([*args, "--vocab-size", "300", "--tokens", "4096", "--results", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert re.search(
        r"efscorer150\.jsonl \(bpe\): 150 documents, [\d,]+ train tokens, [\d,]+ val tokens", out
    ), out
    assert "largest budget" not in out and "set -1 tokens" not in out, out  # not the tmp path's "pytest-1NN"
