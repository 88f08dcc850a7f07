"""A quick look, at queue time, that a local corpus can be read and holds text (DESIGN section 11).

:func:`probe_corpus` lists the corpus files (:func:`harness.corpus.readers.corpus_files`); opens
every one and reads its first bytes (readable, UTF-8 text and not binary, except Parquet); then
reads the first :data:`PROBE_BYTES` of file after file until one non-empty document turns up. Not a
full read, and no tokenisation: a worker still reads the whole corpus, with the readers of
:mod:`harness.corpus.readers` (a bad JSONL line is named alike by both:
:func:`~harness.corpus.readers.jsonl_text`).
"""

from __future__ import annotations

from pathlib import Path

from harness.corpus.readers import (
    PARQUET_EXTENSIONS,
    TEXT_EXTENSIONS,
    corpus_files,
    decode_utf8,
    jsonl_text,
)
from harness.corpus.spec import HUB_PREFIX

#: How much of each corpus file :func:`probe_corpus` reads, at most (bytes).
PROBE_BYTES = 1 << 20
_PARQUET_MAGIC = b"PAR1"


def probe_corpus(spec: str) -> str:
    """A quick check, at queue time, that a local corpus can be read and holds text (see the module
    docstring). ``hf:`` specs are not checked (they need a network).

    Returns:
        One line for the user: files and where the first document was found.

    Raises:
        FileNotFoundError: as :func:`~harness.corpus.readers.corpus_files`.
        ValueError: a file that cannot be read, is binary or not UTF-8, a JSONL line that is
            not a JSON object, a ``text`` field that is not text, or no non-empty document in
            the part of each file read; the message names the file.
    """
    if spec.startswith(HUB_PREFIX):
        return f"{spec}: a hub dataset, not checked before the workers stream it"
    files = corpus_files(spec)
    for path in files:
        head = _probe_read(path, 4096)
        if path.suffix.lower() in PARQUET_EXTENSIONS:
            if not head.startswith(_PARQUET_MAGIC):
                raise ValueError(
                    f"corpus file {str(path)!r} is not a Parquet file (it does not start with PAR1)"
                )
            continue
        nul = head.find(b"\x00")
        if nul >= 0:
            raise ValueError(
                f"corpus file {str(path)!r} looks binary (a NUL byte at offset {nul}); "
                "corpus files are UTF-8 text (.jsonl, .txt) or Parquet"
            )
        _decode_utf8_prefix(head, path)
    for path in files:
        if _probe_has_text(path):
            return f"{len(files)} corpus file(s); the first document is in {path}"
    raise ValueError(
        f"corpus {spec!r} holds no text: none of its {len(files)} file(s) has a non-empty document in its "
        f"first {PROBE_BYTES >> 20} MiB (JSONL rows need a non-empty string 'text' field)"
    )


def _probe_read(path: Path, n: int) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read(n)
    except OSError as exc:
        raise ValueError(f"corpus file {str(path)!r} cannot be read: {exc.strerror or exc}") from None


def _decode_utf8_prefix(data: bytes, path: Path) -> str:
    """Decode the first bytes of a file; a character cut at the end of the read is not an error."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.reason == "unexpected end of data" and exc.start >= len(data) - 3:
            return data[: exc.start].decode("utf-8")
        return decode_utf8(data, path)  # raises its message


def _probe_has_text(path: Path) -> bool:
    """Whether the first :data:`PROBE_BYTES` of a corpus file hold a non-empty document."""
    suffix = path.suffix.lower()
    if suffix in PARQUET_EXTENSIONS:
        import polars as pl  # lazy: only JSONL/Parquet corpora need it; a .txt corpus trains without polars

        try:
            schema = pl.read_parquet_schema(path)
            if "text" not in schema:
                raise ValueError(
                    f"Parquet file {str(path)!r} has no 'text' column (columns found: "
                    f"{', '.join(schema) or 'none'})"
                )
            head = pl.scan_parquet(path).select("text").head(1000).collect()["text"]
        except pl.exceptions.PolarsError as exc:
            raise ValueError(f"cannot read Parquet file {str(path)!r}: {exc}") from None
        if head.dtype not in (pl.String, pl.Null):
            raise ValueError(
                f"Parquet file {str(path)!r}: column 'text' holds {head.dtype}, expected strings"
            )
        return any(t is not None and t.strip() for t in head.to_list())
    text = _decode_utf8_prefix(_probe_read(path, PROBE_BYTES), path)
    if suffix in TEXT_EXTENSIONS:
        return bool(text.strip())
    lines = text.split("\n")
    if len(lines) > 1 and len(text.encode("utf-8")) >= PROBE_BYTES:
        lines = lines[:-1]  # the last line may be cut by the read
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        value = jsonl_text(line, path, number)
        if value and value.strip():
            return True
    return False


__all__ = ["PROBE_BYTES", "probe_corpus"]
