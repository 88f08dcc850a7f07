"""Reading a corpus (harness/corpus/readers.py, probe.py): one streaming reader per format (JSONL,
Parquet, .txt, the hub), the same documents in the same order however a corpus is laid out, and one
clear line for each kind of bad input, named alike by the queue-time probe and the read.

Run: ``python -m pytest -q tests/corpus/test_readers.py`` (CPU only, seconds). Uses the real
FineWeb-Edu sample in ``../shared/data/fineweb_edu_sample`` (skipped where absent) and tiny hand-made
corpora for the error cases; the hub paths run against a fake ``datasets`` module (no network).
"""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import polars as pl
import pytest

from harness.corpus.probe import probe_corpus
from harness.corpus.readers import (
    HUB_DEFAULT_MAX_DOCS,
    OptionalDependencyError,
    corpus_files,
    read_documents,
    stream_documents,
)

SAMPLE = Path(__file__).resolve().parents[3] / "shared/data/fineweb_edu_sample"
needs_sample = pytest.mark.skipif(not SAMPLE.is_dir(), reason=f"sample corpus {SAMPLE} absent")


# ----------------------------------------------------------------------------- reading


@needs_sample
def test_directory_reads_all_jsonl_documents_in_sorted_order(sample_docs):
    docs = read_documents(str(SAMPLE))
    assert len(docs) == 406  # 6 + 150 + 250 (PROVENANCE.md); PROVENANCE.md is skipped
    assert docs == sample_docs
    assert [p.name for p in corpus_files(str(SAMPLE))] == [
        "fineweb_edu_misc6.jsonl",
        "fineweb_edu_sample10BT_efscorer150.jsonl",
        "fineweb_edu_sample10BT_fac250.jsonl",
    ]
    assert read_documents(str(SAMPLE / "*.jsonl")) == sample_docs  # glob form
    assert read_documents(str(SAMPLE), max_docs=10) == sample_docs[:10]


def test_txt_files_are_one_document_each_and_parquet_reads_text(tmp_path):
    (tmp_path / "b.txt").write_text("second doc\nwith two lines", encoding="utf-8")
    (tmp_path / "a.txt").write_text("first doc", encoding="utf-8")
    (tmp_path / "notes.md").write_text("not corpus text", encoding="utf-8")
    (tmp_path / "empty.txt").write_text("  \n", encoding="utf-8")
    assert read_documents(str(tmp_path)) == ["first doc", "second doc\nwith two lines"]
    parquet = tmp_path / "p" / "d.parquet"
    parquet.parent.mkdir()
    pl.DataFrame({"id": [1, 2, 3], "text": ["x y", None, "z"]}).write_parquet(parquet)
    assert read_documents(str(parquet)) == ["x y", "z"]


def test_streamed_documents_equal_the_whole_read_for_every_file_kind(tmp_path):
    """JSONL rows, Parquet rows (read in slices) and .txt files, in a folder: the stream gives
    the documents read_documents gives, in the same order (empty ones dropped alike)."""
    docs = read_documents(str(SAMPLE))
    folder = tmp_path / "mixed"
    folder.mkdir()
    pl.DataFrame({"text": docs[:150] + ["  ", None]}).write_parquet(folder / "a.parquet")
    (folder / "b.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in ["", *docs[150:300]]))
    (folder / "c.txt").write_text(docs[300])
    assert list(stream_documents(str(folder))) == read_documents(str(folder)) == docs[:301]
    assert list(stream_documents(str(folder), max_docs=160)) == docs[:160]


# ----------------------------------------------------------------------------- the hub


def _fake_datasets(rows=None, error=None):
    calls = []

    def load_dataset(name, config=None, *, split, streaming, revision=None):
        calls.append((name, config, split, streaming, revision))
        if error is not None:
            raise error
        return iter(rows)

    return types.SimpleNamespace(load_dataset=load_dataset), calls


def test_unknown_hub_dataset_offline_is_a_clear_error(monkeypatch):
    fake, calls = _fake_datasets(error=FileNotFoundError("Dataset 'nobody/nothing' doesn't exist on the Hub"))
    monkeypatch.setitem(sys.modules, "datasets", fake)
    with pytest.raises(ValueError, match=r"cannot stream corpus 'hf:nobody/nothing'.*network"):
        read_documents("hf:nobody/nothing")
    assert calls == [("nobody/nothing", None, "train", True, None)]
    assert HUB_DEFAULT_MAX_DOCS > 0


def test_hub_dataset_without_text_column_is_a_clear_error(monkeypatch):
    fake, _ = _fake_datasets(rows=[{"content": "a", "id": 1}])
    monkeypatch.setitem(sys.modules, "datasets", fake)
    with pytest.raises(ValueError, match=r"'hf:org/code' has no 'text' column \(columns: content, id\)"):
        read_documents("hf:org/code")


def test_hub_without_datasets_package_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(OptionalDependencyError, match="optional 'datasets' package") as info:
        read_documents("hf:HuggingFaceFW/fineweb-edu:sample-10BT")
    assert isinstance(info.value, ValueError)  # printed as one clean line by the CLI


def test_malformed_hub_spec_is_an_error():
    with pytest.raises(ValueError, match="expected hf:OWNER/NAME"):
        read_documents("hf:fineweb-edu")


# ----------------------------------------------------------------------------- bad input


def test_missing_file_is_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.jsonl.*does not exist"):
        read_documents(str(tmp_path / "nope.jsonl"))
    with pytest.raises(FileNotFoundError, match="no corpus file"):
        read_documents(str(tmp_path / "*.jsonl"))


def test_invalid_utf8_is_an_error_naming_file_and_offset(tmp_path):
    txt = tmp_path / "bad.txt"
    txt.write_bytes(b"fine text\nthen \xff bad")
    with pytest.raises(ValueError, match=r"bad.txt' is not valid UTF-8: byte 0xff at offset 15 \(line 2\)"):
        read_documents(str(txt))
    jsonl = tmp_path / "bad.jsonl"
    jsonl.write_bytes(b'{"text": "ok"}\n{"text": "caf\xe9"}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl' is not valid UTF-8: byte 0xe9 at offset 28 \(line 2\)"):
        read_documents(str(jsonl))


def test_jsonl_without_text_column_is_an_error(tmp_path):
    path = tmp_path / "no_text.jsonl"
    path.write_text('{"content": "a", "id": 1}\n{"content": "b", "id": 2}\n')
    with pytest.raises(ValueError, match=r"no 'text' field \(fields found: content, id\)"):
        read_documents(str(path))
    numbers = tmp_path / "numbers.jsonl"
    numbers.write_text('{"text": 1}\n')
    with pytest.raises(ValueError, match="numbers.jsonl': line 1: field 'text' holds int, expected a string"):
        read_documents(str(numbers))
    parquet = tmp_path / "no_text.parquet"
    pl.DataFrame({"body": ["a"]}).write_parquet(parquet)
    with pytest.raises(ValueError, match=r"no 'text' column \(columns found: body\)"):
        read_documents(str(parquet))
    ints = tmp_path / "ints.parquet"
    pl.DataFrame({"text": [1, 2]}).write_parquet(ints)
    with pytest.raises(ValueError, match="ints.parquet': column 'text' holds Int64, expected strings"):
        list(stream_documents(str(ints)))  # the stream of a prepare says it too


def test_malformed_jsonl_is_an_error(tmp_path):
    path = tmp_path / "broken.jsonl"
    path.write_text('{"text": "a"}\n{"text": \n')
    with pytest.raises(ValueError, match=r"JSONL file '.*broken.jsonl': line 2 is not JSON"):
        read_documents(str(path))


def test_unsupported_extension_is_an_error(tmp_path):
    path = tmp_path / "corpus.csv"
    path.write_text("text\nhello\n")
    with pytest.raises(
        ValueError, match=r"unsupported extension '.csv'; allowed: .jsonl, .ndjson, .parquet, .txt"
    ):
        read_documents(str(path))


@pytest.mark.parametrize(
    "line, message",
    [
        (b'{"text": "ok"', "line 2 is not JSON"),
        (b'["text"]', "line 2 is not a JSON object with a 'text' field"),
        (b'{"text": 3}', "line 2: field 'text' holds int, expected a string"),
        (b'{"text": "caf\xe9"}', "is not valid UTF-8: byte 0xe9"),
    ],
)
def test_a_bad_jsonl_line_is_named_alike_by_the_probe_and_the_stream(tmp_path, line, message):
    """The queue-time probe and the streaming read of a prepare check a JSONL line with one
    function: the same error, naming the file and the line."""
    path = tmp_path / "c.jsonl"
    path.write_bytes(b'{"text": ""}\n' + line + b'\n{"text": "later"}\n')
    with pytest.raises(ValueError, match=message) as probed:
        probe_corpus(str(path))
    with pytest.raises(ValueError, match=message) as streamed:
        list(stream_documents(str(path)))
    assert str(path) in str(probed.value) and str(path) in str(streamed.value)
