"""`harness prepare` on bad input (issue 40): one line, nothing written; a kept setting said so.

Real text: the shared FineWeb-Edu sample. CPU only; the two that prepare a corpus take
a few seconds each:

    python -m pytest -q tests/data/test_prepare_refusals.py
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.cli import main as cli
from harness.corpus.key import CorpusKey

pytestmark = pytest.mark.own_cache  # its commands build their corpus in RESULTS/cache (conftest)

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT.parent / "shared/data/fineweb_edu_sample"
GRID = """
name = "g"
corpus = "{corpus}"
sizes = ["tiny"]
seeds = [0]
budgets_tokens = [2048]
[variants]
block_attnres = "parent"
rd_attnres = "treatment"
[train]
vocab_size = {vocab}
batch_tokens = 1024
eval_tokens = 1024
"""
TOO_BIG = ("vocab_size=1000000000 is not allowed for byte-level BPE", "257", "1_048_576")


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err, err
    return err


def test_a_huge_vocabulary_is_refused_in_one_line_and_nothing_is_written(tmp_path, capsys):
    results = tmp_path / "results"
    argv = ["prepare", "--corpus", str(SAMPLE), "--vocab-size", "1000000000", "--results", str(results)]
    assert cli(argv) == 2
    err = one_error_line(capsys)
    assert all(part in err for part in TOO_BIG), err
    assert not results.exists()

    # the same refusal `harness run --set vocab_size=...` and `harness queue` give, from a grid
    grid = tmp_path / "g.toml"
    grid.write_text(GRID.format(corpus=SAMPLE, vocab=1_000_000_000))
    assert cli(["prepare", str(grid), "--results", str(results)]) == 2
    err = one_error_line(capsys)
    assert all(part in err for part in TOO_BIG) and err.startswith("harness prepare: error: run "), err
    assert cli(["queue", str(grid), "--results", str(results)]) == 2
    err = one_error_line(capsys)
    assert all(part in err for part in TOO_BIG), err
    assert not results.exists()


def test_prepare_shards_refuses_a_huge_vocabulary_before_the_trainer_runs(tmp_path):
    from harness.data.shards import prepare_shards

    with pytest.raises(ValueError, match=r"vocab_size=2000000 is not allowed.*1_048_576"):
        prepare_shards(CorpusKey(str(SAMPLE), "bpe", 2_000_000, 0.05, None), cache_dir=tmp_path / "cache")
    assert not (tmp_path / "cache").exists()


def test_a_missing_corpus_is_refused_and_leaves_no_results_folder_or_lock(tmp_path, capsys):
    results = tmp_path / "results"
    assert cli(["prepare", "--corpus", str(tmp_path / "nosuch.jsonl"), "--results", str(results)]) == 2
    assert "nosuch.jsonl" in one_error_line(capsys)
    assert not results.exists()


def test_workers_zero_says_processes(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        cli(["prepare", "--corpus", str(SAMPLE), "--workers", "0", "--results", str(tmp_path / "r")])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "'0': expected a positive number of processes" in err and "tokens" not in err.splitlines()[-1]


def test_a_changed_shard_size_for_a_prepared_corpus_is_said_to_be_ignored(tmp_path, capsys):
    base = ["prepare", "--corpus", str(SAMPLE), "--vocab-size", "300", "--max-docs", "40", "--workers", "1"]
    results = ["--results", str(tmp_path / "results")]
    assert cli([*base, "--shard-tokens", "5000", *results]) == 0
    assert "ignored" not in capsys.readouterr().out
    assert cli([*base, "--shard-tokens", "7000", *results]) == 0
    out = capsys.readouterr().out
    assert "--shard-tokens 7,000 ignored: this corpus was prepared with 5,000 tokens per shard" in out
    assert cli([*base, *results]) == 0  # no --shard-tokens given: nothing to say
    assert "ignored" not in capsys.readouterr().out


BAD_CORPORA = {  # issue 45 row 16: name -> (file name, bytes, what the one line says)
    "empty": ("empty.jsonl", b"", "holds no text"),
    "all blank": ("blank.txt", b"\n   \n\t\n", "holds no text"),
    "binary": (
        "binary.txt",
        b"the start\x00\x01\x02 of a binary file\n",
        "looks binary (a NUL byte at offset 9)",
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("with_grid", [False, True], ids=["--corpus", "grid"])
@pytest.mark.parametrize("case", list(BAD_CORPORA))
def test_a_corpus_without_text_is_refused_and_nothing_is_written(tmp_path, capsys, case, with_grid):
    """No results folder, no cache folder, no `shards-bpe-*.lock` is left by the refusal."""
    name, data, says = BAD_CORPORA[case]
    corpus = tmp_path / name
    corpus.write_bytes(data)
    results = tmp_path / "results"
    if with_grid:
        grid = tmp_path / "g.toml"
        grid.write_text(GRID.format(corpus=corpus, vocab=300))
        argv = ["prepare", str(grid), "--results", str(results)]
    else:
        argv = ["prepare", "--corpus", str(corpus), "--results", str(results)]
    assert cli(argv) == 2
    line = one_error_line(capsys)
    assert str(corpus) in line and says in line, line
    assert not results.exists(), sorted(results.rglob("*"))
