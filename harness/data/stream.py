"""Streaming a corpus's documents in order, one at a time (local text/JSONL/Parquet files or a Hugging
Face hub dataset), and cutting the stream into chunks of work, for :mod:`harness.data.shards`.

Split from :mod:`harness.data.shards` (which re-exports :func:`stream_documents` and :func:`hub_revision`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from harness.data.corpus import (
    HUB_PREFIX,
    JSONL_EXTENSIONS,
    PARQUET_EXTENSIONS,
    OptionalDependencyError,
    corpus_files,
    decode_utf8,
    jsonl_text,
    parse_hub_spec,
)


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


def _import_datasets(spec: str):
    try:
        import datasets  # lazy: only hub corpora need it
    except ImportError:
        raise OptionalDependencyError(
            f"corpus {spec!r} needs the optional 'datasets' package, which is not installed; "
            "install it with: pip install 'rd-harness[hub]'"
        ) from None
    return datasets


def stream_documents(
    corpus: str, *, revision: str | None = None, max_docs: int | None = None
) -> Iterator[str]:
    """The corpus's non-empty documents in order, one at a time (memory: one file row group).

    The same documents, in the same order, as :func:`harness.data.corpus.read_documents`.

    Raises:
        FileNotFoundError, ValueError, OptionalDependencyError: as ``read_documents``.
    """
    n = 0
    for text in _hub_rows(corpus, revision) if corpus.startswith(HUB_PREFIX) else _local_rows(corpus):
        if text is None or not text.strip():
            continue
        yield text
        n += 1
        if max_docs and n >= max_docs:
            return


def _hub_rows(spec: str, revision: str | None) -> Iterator[str | None]:
    name, config = parse_hub_spec(spec)
    datasets = _import_datasets(spec)
    try:
        stream = datasets.load_dataset(name, config, split="train", streaming=True, revision=revision)
        rows = iter(stream)
        while True:
            try:
                row = next(rows)
            except StopIteration:
                return
            if "text" not in row:
                raise KeyError("text")
            yield row["text"]
    except KeyError:
        raise ValueError(f"hub corpus {spec!r} has no 'text' column") from None
    except Exception as exc:  # network and hub errors surface as many types
        raise ValueError(
            f"cannot stream corpus {spec!r} from the Hugging Face hub ({type(exc).__name__}: {exc})"
        ) from exc


def _local_rows(spec: str) -> Iterator[str | None]:
    for path in corpus_files(spec):
        suffix = path.suffix.lower()
        if suffix in JSONL_EXTENSIONS:
            yield from _jsonl_rows(path)
        elif suffix in PARQUET_EXTENSIONS:
            yield from _parquet_rows(path)
        else:
            yield decode_utf8(path.read_bytes(), path)


def _jsonl_rows(path: Path) -> Iterator[str | None]:
    with open(path, "rb") as fh:
        for number, raw in enumerate(fh, start=1):
            if raw.strip():
                yield jsonl_text(raw, path, number)


def _parquet_rows(path: Path) -> Iterator[str | None]:
    import polars as pl  # lazy: only Parquet corpora need it

    schema = pl.read_parquet_schema(path)
    if "text" not in schema:
        raise ValueError(f"Parquet file {str(path)!r} has no 'text' column")
    frame = pl.scan_parquet(path).select("text")
    n = frame.select(pl.len()).collect().item()
    for start in range(0, n, 65536):  # slices keep memory at one slice of text
        yield from frame.slice(start, 65536).collect()["text"].to_list()


def document_chunks(docs: Iterator[str], chunk_bytes: int) -> Iterator[list[str]]:
    """Consecutive documents, about ``chunk_bytes`` characters of text per list (deterministic: a resumed
    prepare cuts the same chunks), the units of work of :mod:`harness.data.shards`."""
    chunk, size = [], 0
    for text in docs:
        chunk.append(text)
        size += len(text)
        if size >= chunk_bytes:
            yield chunk
            chunk, size = [], 0
    if chunk:
        yield chunk


__all__ = ["hub_revision", "stream_documents", "document_chunks"]
