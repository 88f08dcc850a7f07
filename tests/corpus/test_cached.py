"""A corpus edited in place is never read from its old text's cache (harness/corpus/cached.py): `harness
run --force`, a grid queued into a results folder holding the old text's shards and `harness prepare`
all read the text as it is now, and the same text (a file touched) keeps its folder.

Real text: a copy of the shared FineWeb-Edu sample's 150-document file, one character of it edited in
place (the file's size unchanged), as a researcher fixing a typo would.

    python -m pytest -q tests/corpus/test_cached.py
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from test_prepare import GRID

from harness.cli import main as cli
from harness.corpus.cached import SOURCE_STAT, fingerprint_of, text_folder
from harness.corpus.fingerprint import corpus_fingerprint
from harness.corpus.key import CorpusKey, read_manifest
from harness.corpus.readers import read_documents
from harness.data.prepared import prepare_corpus
from harness.data.shards import prepare_shards
from harness.scheduling.queue.run_queue import RunQueue
from harness.store.store import Store

pytestmark = pytest.mark.own_cache  # its commands build their corpus in RESULTS/cache (conftest)

SAMPLE = Path(__file__).resolve().parents[3] / "shared/data/fineweb_edu_sample"
FILE = SAMPLE / "fineweb_edu_sample10BT_efscorer150.jsonl"


def _grid(name: str, corpus: Path) -> str:
    """Two tiny variants of 4,096 tokens (tests/data/test_prepare.py's grid) on ``corpus``."""
    return GRID.format(corpus=corpus, budgets="4096", extra="").replace('name = "g"', f'name = "{name}"')


def _corpus(tmp_path: Path) -> Path:
    path = tmp_path / "c.jsonl"
    shutil.copyfile(FILE, path)
    return path


def _edit_one_character(path: Path) -> None:
    """Swap the case of the first letter of the first document's text, in place: the same size."""
    data = bytearray(path.read_bytes())
    at = data.index(b'"text": "') + len(b'"text": "')
    while not chr(data[at]).isalpha():
        at += 1
    data[at] = ord(chr(data[at]).swapcase())
    with open(path, "r+b") as fh:  # in place, as an editor saving over the file
        fh.write(data)
    assert path.stat().st_size == FILE.stat().st_size


def _fingerprint(path: Path) -> str:
    return corpus_fingerprint(read_documents(str(path)))


def _run(corpus: Path, results: Path, *extra: str) -> dict:
    argv = ["run", "--variant", "block_attnres", "--size", "tiny", "--seed", "0", "--budget-tokens", "4096"]
    assert (
        cli([*argv, "--corpus", str(corpus), "--results", str(results), "--threads", "1", "--quiet", *extra])
        == 0
    )
    (path,) = Store(results).runs_dir.glob("*.json")
    result = Store(results).read_result(path)
    val = [m["value"] for m in result["metrics"] if m["split"] == "val" and m["name"] == "nll"]
    return {**result["run"], "val_nll": val[-1]}


def _data(run: dict) -> dict:
    return run["config"]["protocol"]["data"]


@pytest.mark.slow  # three tiny runs and two BPE tokenizers: about 10 s on 2 shared cores
def test_a_forced_run_after_an_edit_in_place_trains_the_edited_text(tmp_path):
    corpus = _corpus(tmp_path)
    old = _run(corpus, tmp_path / "R")
    assert _data(old)["fingerprint"] == _fingerprint(corpus)
    _edit_one_character(corpus)
    again = _run(corpus, tmp_path / "R", "--force")
    fresh = _run(corpus, tmp_path / "fresh")  # the same command where no cache was ever built
    assert _data(again)["fingerprint"] == _fingerprint(corpus) != _data(old)["fingerprint"]
    assert again["protocol_hash"] == fresh["protocol_hash"] != old["protocol_hash"]
    assert again["val_nll"] == fresh["val_nll"] != old["val_nll"]
    # the old text's shards stay where they were; the edited text has a folder of its own beside them
    folders = sorted(p.name for p in (tmp_path / "R/cache/corpora").iterdir() if p.is_dir())
    assert len(folders) == 2 and folders[1] == f"{folders[0]}-{_fingerprint(corpus)[:16]}"


@pytest.mark.slow  # a BPE tokenizer per text and two tiny runs: about 10 s on 2 shared cores
def test_a_grid_queued_on_an_edited_corpus_beside_its_old_cache_records_and_trains_the_new_text(
    tmp_path, capsys
):
    corpus, results = _corpus(tmp_path), str(tmp_path / "R")
    first = tmp_path / "g1.toml"
    first.write_text(_grid("g1", corpus))
    assert cli(["prepare", str(first), "--results", results]) == 0  # the old text's shards, in R's cache
    assert cli(["queue", str(first), "--results", results]) == 0
    old = _fingerprint(corpus)
    assert RunQueue.open(None, results).corpus_of("g1")["fingerprint"] == old
    _edit_one_character(corpus)
    new = _fingerprint(corpus)
    grid = tmp_path / "g2.toml"
    grid.write_text(_grid("g2", corpus))
    assert cli(["queue", str(grid), "--results", results]) == 0
    assert RunQueue.open(None, results).corpus_of("g2")["fingerprint"] == new != old
    assert cli(["work", "--results", results, "--threads", "1", "--grid", "g2"]) == 0
    runs = [Store(results).read_result(p)["run"] for p in sorted(Store(results).runs_dir.glob("*.json"))]
    assert len(runs) == 2 and {_data(r)["fingerprint"] for r in runs} == {new}
    # the grid queued before the edit: its corpus changed since, said in one line with both fingerprints
    capsys.readouterr()
    assert cli(["work", "--results", results, "--threads", "1", "--grid", "g1"]) != 0
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"has fingerprint {new}, not the fingerprint {old} the grid was queued with" in err
    assert len(list(Store(results).runs_dir.glob("*.json"))) == 2  # nothing trained on the old shards


@pytest.mark.slow  # two BPE tokenizers: 3.5 s on 2 cores, 17 s beside 20 busy processes
def test_prepare_after_an_edit_in_place_describes_and_builds_the_edited_text(tmp_path, capsys):
    corpus, results = _corpus(tmp_path), str(tmp_path / "R")
    grid = tmp_path / "g.toml"
    grid.write_text(_grid("g", corpus))
    argv = ["prepare", str(grid), "--results", results, "--workers", "1"]
    assert cli(argv) == 0
    (old_folder,) = [p for p in (tmp_path / "R/cache/corpora").iterdir() if p.is_dir()]
    old_manifest = (old_folder / "manifest.json").read_bytes()
    capsys.readouterr()
    _edit_one_character(corpus)
    assert cli(argv) == 0
    out = capsys.readouterr().out
    folder = Path(out.split(" in ", 1)[1].split()[0])
    assert folder != old_folder and folder.parent == old_folder.parent
    assert read_manifest(folder)["protocol"]["fingerprint"] == _fingerprint(corpus)
    assert (old_folder / "manifest.json").read_bytes() == old_manifest  # the old text's shards untouched
    built = (folder / "manifest.json").stat().st_mtime_ns
    assert cli(argv) == 0  # found again, not rebuilt: its files' sizes and times are recorded beside it
    assert f" in {folder}\n" in capsys.readouterr().out
    assert (folder / "manifest.json").stat().st_mtime_ns == built


@pytest.mark.slow  # three BPE tokenizers: 3.7 s on 2 cores
def test_the_fast_path_is_the_files_sizes_and_times_and_a_touched_file_keeps_its_folder(tmp_path):
    corpus = _corpus(tmp_path)
    key, cache = CorpusKey(str(corpus), "bpe", 300, 0.1, None), tmp_path / "cache"
    built = prepare_corpus(key, cache_dir=cache)
    fp = _fingerprint(corpus)
    assert built.dir == key.folder(cache) and built.fingerprint == fp
    recorded = json.loads((built.dir / SOURCE_STAT).read_text())["files"]
    st = corpus.stat()
    assert recorded == [[str(corpus), st.st_size, st.st_mtime_ns]]

    os.utime(corpus, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # touched: the same text
    assert text_folder(key, cache) == (built.dir, fp)  # read once, found the same, its new time recorded
    assert text_folder(key, cache) == (built.dir, None)  # then the fast path: nothing read
    assert prepare_corpus(key, cache_dir=cache).dir == built.dir

    mtime = corpus.stat().st_mtime_ns
    _edit_one_character(corpus)
    os.utime(corpus, ns=(st.st_atime_ns, mtime))  # the one blind spot: the same size and time, another text
    assert fingerprint_of(key, cache) == fp
    os.utime(corpus, ns=(st.st_atime_ns, mtime + 10**9))
    assert fingerprint_of(key, cache) == _fingerprint(corpus) != fp
    edited = prepare_corpus(key, cache_dir=cache)
    assert edited.dir == built.dir.with_name(f"{built.dir.name}-{_fingerprint(corpus)[:16]}")
    assert edited.fingerprint == _fingerprint(corpus) and text_folder(key, cache) == (edited.dir, None)
    shutil.copyfile(FILE, corpus)  # the old text back: its own folder again (read once, then recorded)
    assert prepare_corpus(key, cache_dir=cache).dir == built.dir


@pytest.mark.slow  # three BPE tokenizers of the 150 documents: 7 s on 2 cores, 54 s beside 20 busy processes
def test_a_build_stopped_then_resumed_after_an_edit_is_built_again_not_mixed(tmp_path):
    """A prepare stopped after its first chunks resumed on the edited text: its first shards held the old
    text (and its tokenizer), the rest the new, under the new text's fingerprint. It now starts again."""
    corpus = _corpus(tmp_path)
    key, cache = CorpusKey(str(corpus), "bpe", 300, 0.1, None), tmp_path / "cache"
    sizes = {"chunk_bytes": 32_768, "shard_tokens": 5_000, "workers": 1}
    folder = key.folder(cache)

    def stopped(line: str) -> None:  # a build that fails once a chunk is done: its progress is kept
        if (folder / "progress.json").is_file():
            raise RuntimeError("stopped")

    with pytest.raises(RuntimeError, match="stopped"):
        prepare_shards(key, cache_dir=cache, log=stopped, **sizes)
    assert (folder / "progress.json").is_file() and read_manifest(folder) is None
    _edit_one_character(corpus)
    said: list[str] = []
    assert prepare_shards(key, cache_dir=cache, log=said.append, **sizes) == folder
    fresh = prepare_shards(key, cache_dir=tmp_path / "fresh", log=lambda line: None, **sizes)
    assert read_manifest(folder)["protocol"] == read_manifest(fresh)["protocol"]  # tokens, tokenizer, text
    assert read_manifest(folder)["protocol"]["fingerprint"] == _fingerprint(corpus)
    assert f"{folder.name}: the source changed since this build stopped: building it again" in said
