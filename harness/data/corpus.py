"""Corpus ingestion: spec string -> ordered list of documents, fingerprint, split (DESIGN 1.1, 4).

A corpus spec (DESIGN section 1.1) is one of

* a JSONL (``.jsonl``/``.ndjson``) or Parquet (``.parquet``) file whose ``text`` column
  holds one document per row (read with polars);
* a ``.txt`` file, which is ONE document;
* a directory (searched recursively, hidden entries skipped) or a glob pattern of such
  files; files are taken in sorted path order so the document order is deterministic,
  and files with other extensions (e.g. a ``PROVENANCE.md`` beside the data) are skipped;
* ``hf:OWNER/NAME[:CONFIG]``: the ``train`` split of a Hugging Face hub dataset, streamed
  through the optional ``datasets`` package and cut at a document limit.

Empty and whitespace-only documents (and null ``text`` cells) are dropped. Documents are
kept exactly as stored otherwise (no stripping, no normalisation), because the byte count
used for bits-per-byte is the UTF-8 length of exactly this text.

The train/validation split is document-level and order-independent: a document is a
validation document iff the first 8 bytes of ``sha256(utf8(text))``, read as a big-endian
integer ``h``, satisfy ``h < val_fraction * 2**64``. The same text always lands in the same
split whatever else is in the corpus, and duplicates never straddle the split.
"""

from __future__ import annotations

import glob as globlib
import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

#: File extensions a corpus file may have, and how each is read.
JSONL_EXTENSIONS = (".jsonl", ".ndjson")
PARQUET_EXTENSIONS = (".parquet",)
TEXT_EXTENSIONS = (".txt",)
SUPPORTED_EXTENSIONS = JSONL_EXTENSIONS + PARQUET_EXTENSIONS + TEXT_EXTENSIONS

#: Documents streamed from the hub when the caller gives no ``max_docs``: a hub dataset
#: such as fineweb-edu sample-10BT holds ~10B tokens, far more than an early-budget run
#: needs, so a stream is always cut. 50k FineWeb-Edu documents are about 50M tokens.
HUB_DEFAULT_MAX_DOCS = 50_000

HUB_PREFIX = "hf:"
#: The splits of a corpus, in their order in files and manifests.
SPLITS = ("train", "val")
_HUB_RE = re.compile(r"^(?P<name>[\w.-]+/[\w.-]+)(?::(?P<config>[\w.-]+))?$")
_GLOB_CHARS = set("*?[")


class OptionalDependencyError(ImportError, ValueError):
    """An optional package (``datasets``, ``tiktoken``) is needed but not installed.

    Also a ``ValueError``, so the ``harness`` command reports it as one clean error line
    (the input asked for something this installation cannot provide).
    """


@dataclass(frozen=True)
class SplitDocuments:
    """A document-level train/validation split (lists keep corpus order)."""

    train: list[str]
    val: list[str]


# ---------------------------------------------------------------------------------------
# Reading


def read_documents(spec: str, *, max_docs: int | None = None) -> list[str]:
    """Read the documents of a corpus spec in deterministic order.

    Args:
        spec: a corpus spec (see the module docstring).
        max_docs: keep only the first ``max_docs`` non-empty documents (``None`` = all
            for local files, :data:`HUB_DEFAULT_MAX_DOCS` for ``hf:`` specs).

    Returns:
        The non-empty documents, in file order then row order.

    Raises:
        FileNotFoundError: a path does not exist, or a glob/directory matches no corpus file.
        ValueError: unsupported extension, invalid UTF-8, no ``text`` column, a non-string
            ``text`` column, a malformed file, a malformed ``hf:`` spec, a hub dataset that
            cannot be streamed, or no non-empty document at all (empty corpus).
        OptionalDependencyError: an ``hf:`` spec without the ``datasets`` package.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(
            f"corpus spec {spec!r} is empty; give a file, directory, glob or hf:OWNER/NAME:CONFIG"
        )
    if max_docs is not None and (
        isinstance(max_docs, bool) or not isinstance(max_docs, int) or max_docs <= 0
    ):
        raise ValueError(f"max_docs={max_docs!r} must be a positive integer or None")
    if spec.startswith(HUB_PREFIX):
        docs = _read_hub(spec, max_docs if max_docs is not None else HUB_DEFAULT_MAX_DOCS)
    else:
        docs = []
        for path in corpus_files(spec):
            for text in _read_file(path):
                if text is None or not text.strip():
                    continue
                docs.append(text)
                if max_docs is not None and len(docs) >= max_docs:
                    break
            if max_docs is not None and len(docs) >= max_docs:
                break
    if not docs:
        raise ValueError(f"corpus {spec!r} is empty: it holds no non-empty document")
    return docs


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


def _read_file(path: Path) -> list[str | None]:
    suffix = path.suffix.lower()
    if suffix in TEXT_EXTENSIONS:
        return [decode_utf8(path.read_bytes(), path)]
    if suffix in JSONL_EXTENSIONS:
        return _read_jsonl(path)
    return _read_parquet(path)


def decode_utf8(data: bytes, path: Path) -> str:
    """``data`` (the bytes of ``path``, or of one of its lines) as text.

    Raises:
        ValueError: invalid UTF-8 (the message names the file, the byte, its offset and line).
    """
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ValueError(
            f"{str(path)!r} is not valid UTF-8: byte 0x{data[exc.start]:02x} at offset {exc.start} "
            f"(line {line}); corpus text must be UTF-8"
        ) from None


def jsonl_text(line: str | bytes, path: Path, number: int) -> str | None:
    """The ``text`` field of line ``number`` of JSONL file ``path`` (``None`` when it has none).

    Raises:
        ValueError: a line that is not UTF-8, not JSON, not a JSON object, or whose ``text`` is
            not a string (naming the file and the line).
    """
    try:
        row = json.loads(line)
    except UnicodeDecodeError:
        decode_utf8(line, path)
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
    return value


def _is_blank(path: Path) -> bool:
    """Whether the file holds only whitespace (reads only up to the first other byte)."""
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 16), b""):
            if block.strip():
                return False
    return True


def _read_jsonl(path: Path) -> list[str | None]:
    if _is_blank(path):
        return []  # polars cannot infer a schema from an empty file
    import polars as pl  # lazy: only JSONL/Parquet corpora need it; a .txt corpus trains without polars

    try:
        # Infer over all rows: a `text` field that first appears late is still found.
        frame = pl.scan_ndjson(path, infer_schema_length=None)
        columns = frame.collect_schema()
        if "text" not in columns:
            raise ValueError(
                f"JSONL file {str(path)!r} has no 'text' field (fields found: {', '.join(columns) or 'none'})"
            )
        if columns["text"] not in (pl.String, pl.Null):
            raise ValueError(
                f"JSONL file {str(path)!r}: field 'text' holds {columns['text']}, expected strings"
            )
        texts = frame.select("text").collect()["text"].to_list()
    except pl.exceptions.PolarsError as exc:
        decode_utf8(path.read_bytes(), path)  # raises the clearer message when that is the cause
        raise ValueError(f"cannot read JSONL file {str(path)!r}: {exc}") from None
    return texts


def _read_parquet(path: Path) -> list[str | None]:
    import polars as pl  # lazy: only JSONL/Parquet corpora need it; a .txt corpus trains without polars

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
        return pl.read_parquet(path, columns=["text"])["text"].to_list()
    except pl.exceptions.PolarsError as exc:
        raise ValueError(f"cannot read Parquet file {str(path)!r}: {exc}") from None


#: How much of each corpus file :func:`probe_corpus` reads, at most (bytes).
PROBE_BYTES = 1 << 20
_PARQUET_MAGIC = b"PAR1"


def probe_corpus(spec: str) -> str:
    """A quick check, at queue time, that a local corpus can be read and holds text.

    Lists the corpus files (:func:`corpus_files`); opens every one and reads its first
    bytes (readable, UTF-8 text and not binary, except Parquet); then reads the first
    :data:`PROBE_BYTES` of file after file until one non-empty document turns up. Not a
    full read, and no tokenisation: a worker still reads the whole corpus. ``hf:`` specs are
    not checked (they need a network).

    Returns:
        One line for the user: files and where the first document was found.

    Raises:
        FileNotFoundError: as :func:`corpus_files`.
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


def parse_hub_spec(spec: str) -> tuple[str, str | None]:
    """Split ``hf:OWNER/NAME[:CONFIG]`` into ``(OWNER/NAME, CONFIG or None)``.

    Raises:
        ValueError: the spec does not have that form.
    """
    match = _HUB_RE.match(spec[len(HUB_PREFIX) :]) if spec.startswith(HUB_PREFIX) else None
    if not match:
        raise ValueError(
            f"hub corpus spec {spec!r} is malformed; expected hf:OWNER/NAME or hf:OWNER/NAME:CONFIG, "
            "e.g. hf:HuggingFaceFW/fineweb-edu:sample-10BT"
        )
    return match["name"], match["config"]


def _read_hub(spec: str, limit: int) -> list[str]:
    name, config = parse_hub_spec(spec)
    try:
        import datasets  # lazy: only hub corpora need it
    except ImportError:
        raise OptionalDependencyError(
            f"corpus {spec!r} needs the optional 'datasets' package, which is not installed; "
            "install it with: pip install 'rd-harness[hub]' (and a network), or use a local JSONL/Parquet/txt corpus"
        ) from None
    docs: list[str] = []
    columns: list[str] | None = None  # set when a row lacks `text`
    try:
        stream = datasets.load_dataset(name, config, split="train", streaming=True)
        for row in stream:
            if "text" not in row:
                columns = list(row)
                break
            text = row["text"]
            if text is None or not text.strip():
                continue
            docs.append(text)
            if len(docs) >= limit:
                break
    # Offline mode, DNS failures, unknown repos and unknown configs surface as many exception
    # types across datasets/huggingface_hub versions; all mean "cannot stream this spec".
    except Exception as exc:
        raise ValueError(
            f"cannot stream corpus {spec!r} from the Hugging Face hub ({type(exc).__name__}: {exc}); "
            "streaming needs network access and an existing dataset and config; "
            "offline, use a local JSONL/Parquet/txt corpus or a cache prepared earlier"
        ) from exc
    if columns is not None:
        raise ValueError(f"hub corpus {spec!r} has no 'text' column (columns: {', '.join(columns)})")
    return docs


# ---------------------------------------------------------------------------------------
# Fingerprint and split


class Fingerprint:
    """:func:`corpus_fingerprint` fed piece by piece: ``update`` with consecutive runs of documents,
    then ``hexdigest`` (a streamed corpus is never held whole)."""

    def __init__(self) -> None:
        self._h = hashlib.sha256()

    def update(self, docs: Iterable[str]) -> None:
        """Add the next documents, in order."""
        for text in docs:
            data = text.encode("utf-8")
            self._h.update(len(data).to_bytes(8, "little"))
            self._h.update(data)

    def hexdigest(self) -> str:
        """The fingerprint of every document added so far."""
        return self._h.hexdigest()


def corpus_fingerprint(docs: Iterable[str]) -> str:
    """sha256 (hex) over the documents' UTF-8 text, in order.

    Each document is framed by its byte length (8 bytes, little-endian) so that
    ``["ab", "c"]`` and ``["a", "bc"]`` differ. Any change of one character, of the order
    or of the number of documents changes the fingerprint.
    """
    h = Fingerprint()
    h.update(docs)
    return h.hexdigest()


def is_validation(text: str, val_fraction: float) -> bool:
    """Whether a document belongs to the validation split (see the module docstring)."""
    h = int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big")
    return h < val_fraction * 2.0**64


def split_documents(docs: Sequence[str], val_fraction: float) -> SplitDocuments:
    """Document-level, order-independent train/validation split.

    Args:
        docs: the corpus documents.
        val_fraction: expected fraction of documents held out, in (0, 1).

    Raises:
        ValueError: ``val_fraction`` outside (0, 1), or the split leaves no validation or
            no training document (the message gives the counts and what to change).
    """
    if isinstance(val_fraction, bool) or not 0.0 < float(val_fraction) < 1.0:
        raise ValueError(f"val_fraction={val_fraction!r} must be in (0, 1)")
    train: list[str] = []
    val: list[str] = []
    for text in docs:
        (val if is_validation(text, val_fraction) else train).append(text)
    if not val or not train:
        empty = "validation" if not val else "training"
        raise ValueError(
            f"the document-level split with val_fraction={val_fraction} puts {len(train)} of "
            f"{len(docs)} documents in training and {len(val)} in validation, leaving the {empty} "
            "split empty; use more documents (max_docs) or a different val_fraction"
        )
    return SplitDocuments(train=train, val=val)


__all__ = [
    "SPLITS",
    "SUPPORTED_EXTENSIONS",
    "HUB_DEFAULT_MAX_DOCS",
    "OptionalDependencyError",
    "SplitDocuments",
    "read_documents",
    "corpus_files",
    "probe_corpus",
    "jsonl_text",
    "decode_utf8",
    "PROBE_BYTES",
    "parse_hub_spec",
    "corpus_fingerprint",
    "Fingerprint",
    "is_validation",
    "split_documents",
]
