"""A corpus's documents, streamed in order: one reader per format (DESIGN sections 1.1 and 4).

* a ``.txt`` file is ONE document;
* a JSONL file (``.jsonl``/``.ndjson``) holds one document per line, in its ``text`` field
  (read line by line);
* a Parquet file (``.parquet``) holds one document per row of its ``text`` column (read in slices
  of :data:`PARQUET_SLICE` rows with polars);
* a folder (searched recursively, hidden entries skipped) or a glob of such files is read file by
  file in sorted path order, so the document order is deterministic; files with other extensions
  (a ``PROVENANCE.md`` beside the data) are skipped (:func:`corpus_files`);
* ``hf:OWNER/NAME[:CONFIG]``: the ``train`` split of a Hugging Face hub dataset, streamed through
  the optional ``datasets`` package (at a recorded revision when one is given).

Empty and whitespace-only documents (and null ``text`` cells) are dropped. Documents are kept
exactly as stored otherwise (no stripping, no normalisation), because the byte count used for
bits-per-byte is the UTF-8 length of exactly this text.

:func:`stream_documents` is the one reader: the shard builder, the fingerprint and the queue's
corpus sizing all read through it; :func:`read_documents` is its documents in a list.
"""

from __future__ import annotations

import glob as globlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path

from harness.corpus.spec import HUB_PREFIX, SPEC_FORMS, parse_hub_spec

#: File extensions a corpus file may have, and how each is read.
JSONL_EXTENSIONS = (".jsonl", ".ndjson")
PARQUET_EXTENSIONS = (".parquet",)
TEXT_EXTENSIONS = (".txt",)
SUPPORTED_EXTENSIONS = JSONL_EXTENSIONS + PARQUET_EXTENSIONS + TEXT_EXTENSIONS

#: Documents read from the hub when the caller gives no ``max_docs`` (:func:`read_documents`, a
#: worker's own build): a hub dataset such as fineweb-edu sample-10BT holds ~10B tokens, far more
#: than an early-budget run needs, so such a stream is always cut. 50k FineWeb-Edu documents are
#: about 50M tokens.
HUB_DEFAULT_MAX_DOCS = 50_000
#: Rows of a Parquet file read at a time: memory is one slice of text.
PARQUET_SLICE = 65536
_GLOB_CHARS = set("*?[")


class OptionalDependencyError(ImportError, ValueError):
    """An optional package (``datasets``, ``tiktoken``) is needed but not installed.

    Also a ``ValueError``, so the ``harness`` command reports it as one clean error line
    (the input asked for something this installation cannot provide).
    """


def corpus_files(spec: str) -> list[Path]:
    """The files a local corpus spec names, in the order they are read.

    Raises:
        FileNotFoundError: the path does not exist, or a directory/glob holds no corpus file.
        ValueError: a single file with an unsupported extension.
    """
    path = Path(spec).expanduser()
    if path.is_file():
        if path.suffix.lower() not in SUPPORTED_EXTENSIONS:
            raise ValueError(
                f"corpus file {str(path)!r} has unsupported extension {path.suffix!r}; "
                f"allowed: {', '.join(SUPPORTED_EXTENSIONS)} (or a directory, a glob, hf:OWNER/NAME:CONFIG)"
            )
        return [path]
    if path.is_dir():
        candidates = [p for p in path.rglob("*") if not _hidden(p.relative_to(path))]
        where = f"directory {str(path)!r}"
    elif _GLOB_CHARS & set(spec):
        candidates = [Path(p) for p in globlib.glob(str(path), recursive=True)]
        where = f"glob {spec!r}"
    else:
        raise FileNotFoundError(f"corpus {spec!r} does not exist (not a file, directory, glob or hf: spec)")
    files = sorted(
        (p for p in candidates if p.is_file() and p.suffix.lower() in SUPPORTED_EXTENSIONS),
        key=lambda p: p.as_posix(),
    )
    if not files:
        raise FileNotFoundError(
            f"{where} holds no corpus file with extension {', '.join(SUPPORTED_EXTENSIONS)}"
        )
    return files


def _hidden(relative: Path) -> bool:
    return any(part.startswith(".") for part in relative.parts)


def decode_utf8(data: bytes, path: Path, *, offset: int = 0, line: int = 1) -> str:
    """``data`` (the bytes of ``path``, or of its part starting at byte ``offset`` on line ``line``) as text.

    Raises:
        ValueError: invalid UTF-8 (the message names the file, the byte, its offset in the file and
            its line).
    """
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        where = line + data.count(b"\n", 0, exc.start)
        raise ValueError(
            f"{str(path)!r} is not valid UTF-8: byte 0x{data[exc.start]:02x} at offset {offset + exc.start} "
            f"(line {where}); corpus text must be UTF-8"
        ) from None


def jsonl_row(line: str | bytes, path: Path, number: int, offset: int = 0) -> dict:
    """Line ``number`` of JSONL file ``path`` (starting at byte ``offset``) as a JSON object whose
    ``text``, if any, is a string or null.

    Raises:
        ValueError: a line that is not UTF-8, not JSON, not a JSON object, or whose ``text`` is not a
            string (naming the file and the line).
    """
    try:
        row = json.loads(line)
    except UnicodeDecodeError:
        decode_utf8(line, path, offset=offset, line=number)
        raise
    except ValueError as exc:
        raise ValueError(f"JSONL file {str(path)!r}: line {number} is not JSON ({exc})") from None
    if not isinstance(row, dict):
        raise ValueError(f"JSONL file {str(path)!r}: line {number} is not a JSON object with a 'text' field")
    value = row.get("text")
    if value is not None and not isinstance(value, str):
        raise ValueError(
            f"JSONL file {str(path)!r}: line {number}: field 'text' holds "
            f"{type(value).__name__}, expected a string"
        )
    return row


def jsonl_text(line: str | bytes, path: Path, number: int) -> str | None:
    """The ``text`` field of line ``number`` of JSONL file ``path`` (``None`` when it has none).

    Raises:
        ValueError: as :func:`jsonl_row`.
    """
    return jsonl_row(line, path, number).get("text")


# ---------------------------------------------------------------------------------------
# One reader per format: each yields a file's rows' text (None: a row without text)


def _text_rows(path: Path) -> Iterator[str | None]:
    yield decode_utf8(path.read_bytes(), path)


def _jsonl_rows(path: Path) -> Iterator[str | None]:
    rows, fields, has_text, offset = 0, {}, False, 0
    with open(path, "rb") as fh:
        for number, raw in enumerate(fh, start=1):
            if raw.strip():
                row = jsonl_row(raw, path, number, offset)
                rows += 1
                if "text" in row:
                    has_text = True
                    yield row["text"]
                elif not has_text:
                    fields.update(dict.fromkeys(row))
            offset += len(raw)
    if rows and not has_text:
        raise ValueError(
            f"JSONL file {str(path)!r} has no 'text' field (fields found: {', '.join(fields) or 'none'})"
        )


def _parquet_rows(path: Path) -> Iterator[str | None]:
    import polars as pl  # lazy: only Parquet corpora need it; a .txt or JSONL corpus reads without polars

    try:
        columns = pl.read_parquet_schema(path)
        if "text" not in columns:
            raise ValueError(
                f"Parquet file {str(path)!r} has no 'text' column (columns found: {', '.join(columns) or 'none'})"
            )
        if columns["text"] not in (pl.String, pl.Null):
            raise ValueError(
                f"Parquet file {str(path)!r}: column 'text' holds {columns['text']}, expected strings"
            )
        frame = pl.scan_parquet(path).select("text")
        n = frame.select(pl.len()).collect().item()
        slices = (frame.slice(start, PARQUET_SLICE) for start in range(0, n, PARQUET_SLICE))
        for part in slices:
            yield from part.collect()["text"].to_list()
    except pl.exceptions.PolarsError as exc:
        raise ValueError(f"cannot read Parquet file {str(path)!r}: {exc}") from None


_READERS: dict[str, Callable[[Path], Iterator[str | None]]] = {
    **dict.fromkeys(TEXT_EXTENSIONS, _text_rows),
    **dict.fromkeys(JSONL_EXTENSIONS, _jsonl_rows),
    **dict.fromkeys(PARQUET_EXTENSIONS, _parquet_rows),
}


def _local_rows(spec: str) -> Iterator[str | None]:
    for path in corpus_files(spec):
        yield from _READERS[path.suffix.lower()](path)


def _import_datasets(spec: str):
    try:
        import datasets  # lazy: only hub corpora need it
    except ImportError:
        raise OptionalDependencyError(
            f"corpus {spec!r} needs the optional 'datasets' package, which is not installed; "
            "install it with: pip install 'rd-harness[hub]' (and a network), or use a local JSONL/Parquet/txt corpus"
        ) from None
    return datasets


_END = object()


def _hub_rows(spec: str, revision: str | None) -> Iterator[str | None]:
    name, config = parse_hub_spec(spec)
    datasets = _import_datasets(spec)

    def hub(step):
        # Offline mode, DNS failures, unknown repos and unknown configs surface as many exception
        # types across datasets/huggingface_hub versions; all mean "cannot stream this spec".
        try:
            return step()
        except Exception as exc:
            raise ValueError(
                f"cannot stream corpus {spec!r} from the Hugging Face hub ({type(exc).__name__}: {exc}); "
                "streaming needs network access and an existing dataset and config; "
                "offline, use a local JSONL/Parquet/txt corpus or a cache prepared earlier"
            ) from exc

    rows = hub(
        lambda: iter(datasets.load_dataset(name, config, split="train", streaming=True, revision=revision))
    )
    while (row := hub(lambda: next(rows, _END))) is not _END:
        if "text" not in row:
            raise ValueError(f"hub corpus {spec!r} has no 'text' column (columns: {', '.join(row)})")
        yield row["text"]


def hub_revision(spec: str) -> str | None:
    """The commit of a hub dataset now (``None`` for a local ``datasets`` folder of that name).

    Raises:
        OptionalDependencyError: ``datasets`` is not installed.
        ValueError: the hub cannot be reached or has no such dataset.
    """
    name, _ = parse_hub_spec(spec)
    _import_datasets(spec)
    if Path(name).is_dir():  # datasets.load_dataset reads a local folder of that name first
        return None
    try:
        from huggingface_hub import HfApi  # lazy: installed with datasets

        return HfApi().dataset_info(name).sha
    except Exception as exc:  # offline / unknown dataset: many exception types across versions
        raise ValueError(
            f"cannot resolve the revision of {spec!r} on the Hugging Face hub "
            f"({type(exc).__name__}: {exc}); a hub corpus needs a network until it is prepared"
        ) from exc


def stream_documents(
    corpus: str, *, revision: str | None = None, max_docs: int | None = None
) -> Iterator[str]:
    """The corpus's non-empty documents in order, one at a time (memory: one document, one Parquet
    slice).

    Args:
        corpus: a corpus spec (see the module docstring).
        revision: the hub dataset's commit to read (``hf:`` specs; ``None``: the current one).
        max_docs: stop after this many documents (``None`` or 0: all of them).

    Raises:
        FileNotFoundError: a path does not exist, or a glob/directory matches no corpus file.
        ValueError: unsupported extension, invalid UTF-8, no ``text`` field or column, a ``text``
            that is not a string, a malformed file, a malformed ``hf:`` spec, a hub dataset that
            cannot be streamed.
        OptionalDependencyError: an ``hf:`` spec without the ``datasets`` package.
    """
    n = 0
    for text in _hub_rows(corpus, revision) if corpus.startswith(HUB_PREFIX) else _local_rows(corpus):
        if text is None or not text.strip():
            continue
        yield text
        n += 1
        if max_docs and n >= max_docs:
            return


def read_documents(spec: str, *, max_docs: int | None = None) -> list[str]:
    """The documents of a corpus spec, in order, in a list (:func:`stream_documents`).

    Args:
        spec: a corpus spec (see the module docstring).
        max_docs: keep only the first ``max_docs`` non-empty documents (``None`` = all
            for local files, :data:`HUB_DEFAULT_MAX_DOCS` for ``hf:`` specs).

    Raises:
        FileNotFoundError, ValueError, OptionalDependencyError: as :func:`stream_documents`; also
            an empty spec, a ``max_docs`` that is not a positive integer, and no non-empty document
            at all (an empty corpus).
    """
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"corpus spec {spec!r} is empty; give {SPEC_FORMS}")
    if max_docs is not None and (
        isinstance(max_docs, bool) or not isinstance(max_docs, int) or max_docs <= 0
    ):
        raise ValueError(f"max_docs={max_docs!r} must be a positive integer or None")
    if max_docs is None and spec.startswith(HUB_PREFIX):
        max_docs = HUB_DEFAULT_MAX_DOCS
    docs = list(stream_documents(spec, max_docs=max_docs))
    if not docs:
        raise ValueError(f"corpus {spec!r} is empty: it holds no non-empty document")
    return docs


__all__ = [
    "SUPPORTED_EXTENSIONS",
    "JSONL_EXTENSIONS",
    "PARQUET_EXTENSIONS",
    "TEXT_EXTENSIONS",
    "HUB_DEFAULT_MAX_DOCS",
    "OptionalDependencyError",
    "corpus_files",
    "decode_utf8",
    "jsonl_row",
    "jsonl_text",
    "hub_revision",
    "stream_documents",
    "read_documents",
]
