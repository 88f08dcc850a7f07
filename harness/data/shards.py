"""Sharded corpora for paper scale: a stream of documents -> fixed-size token shards + manifest (DESIGN 11).

:func:`prepare_shards` (``harness prepare``) streams documents from a corpus spec (a local
file, folder or glob, read row by row; or ``hf:OWNER/NAME[:CONFIG]`` through ``datasets``
streaming, the revision resolved once and recorded) through the tokenizer in a pool of
processes and writes, into ``CACHE/corpora/shards-<key>/``:

* ``train-00000.bin, ...`` and ``val-00000.bin, ...``: little-endian ``uint16`` token ids
  (``uint32`` when V > 65535), ``shard_tokens`` tokens per shard (the last one of a split
  shorter). The concatenated shards of a split are exactly what :mod:`harness.data.prepare`
  writes into ``train.bin``: ``tok(d_1) EOS tok(d_2) EOS ...`` over the split's documents in
  stream order (same document-level split rule); a document may continue in the next shard.
* ``token_bytes.npy`` and the tokenizer's files (``tokenizer.json`` for ``bpe``, the
  ``gpt2.tiktoken`` ranks for ``gpt2``), so workers load everything from this folder and
  never download.
* ``manifest.json``: per shard its sha256, tokens, documents (EOS tokens in it) and UTF-8
  bytes (the sum of its tokens' byte lengths; the byte-level tokenizers make that exact);
  the tokenizer's name, sha256 and files; the source, its revision and the split rule; the
  ``bpe`` tokenizer's training sample. Written last: its presence marks a finished corpus.

The folder's name is a hash of what a run's config says about its corpus (source,
tokenizer, requested vocabulary, validation fraction, ``max_docs``), so a worker finds it
from its config alone. The stream is cut in chunks of about :data:`CHUNK_BYTES` of text at
document boundaries; a chunk is the unit of work of a pool process and of resumption:
after each chunk ``progress.json`` records the chunks done and the length of each split's
open shard, so a killed prepare truncates the open shards to that length and continues with
the next chunk, ending byte-identical to an uninterrupted one. A prepare sized for more
tokens than a finished corpus holds continues it the same way (the corpus is extended, never
rebuilt). Memory is one chunk per pool process plus a bounded queue of chunks, whatever the
corpus size. One writer at a time (a file lock beside the folder, on the shared file system).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import resource
import shutil
import signal
import sys
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from filelock import FileLock

from harness.common.files import atomic_write, fsync_dir, fsync_file
from harness.data.corpus import HUB_PREFIX, corpus_files, corpus_fingerprint, is_validation
from harness.data.corpus_key import SHARD_FORMAT, CorpusKey, shard_dir, source_key
from harness.data.shard_writer import _ShardWriter
from harness.data.stream import _chunks, hub_revision, stream_documents
from harness.data.tokenizer import TOKENIZER_NAMES, BPETokenizer, GPT2Tokenizer, check_bpe_vocab, train_bpe

#: Tokens per shard (build-nanogpt's fineweb.py uses 100M): 200 MB of uint16 per file.
DEFAULT_SHARD_TOKENS = 100_000_000
#: Text per chunk of work (bytes, cut at document boundaries): bounds each process's memory.
CHUNK_BYTES = 1 << 20
#: Training text the ``bpe`` tokenizer is trained on: the first train-split documents of the
#: stream up to this many UTF-8 bytes (recorded in the manifest).
BPE_SAMPLE_BYTES = 32 << 20
SPLIT_RULE = "validation iff int(sha256(utf8(text))[:8], big-endian) < val_fraction * 2**64"
SPLITS = ("train", "val")


# ---------------------------------------------------------------------------------------
# Where a sharded corpus lives


def read_manifest(folder: Path) -> dict | None:
    """The manifest of a finished sharded corpus, or ``None`` when there is none (yet)."""
    path = Path(folder) / "manifest.json"
    return json.loads(path.read_text()) if path.is_file() else None


# ---------------------------------------------------------------------------------------
# Tokenizer files beside the shards


def _write_gpt2_ranks(path: Path, tok: GPT2Tokenizer) -> None:
    """tiktoken's gpt2 merge ranks in tiktoken's own file format (base64 token, rank)."""
    ranks = tok.mergeable_ranks()
    lines = [
        base64.b64encode(token).decode() + f" {rank}"
        for token, rank in sorted(ranks.items(), key=lambda x: x[1])
    ]
    atomic_write(path, "\n".join(lines) + "\n")


def load_shard_tokenizer(folder: Path, name: str) -> BPETokenizer | GPT2Tokenizer:
    """The tokenizer from the files beside the shards (no network).

    Raises:
        OptionalDependencyError: ``gpt2`` without tiktoken.
    """
    if name == "bpe":
        return BPETokenizer.from_file(Path(folder) / "tokenizer.json")
    return GPT2Tokenizer(ranks_file=Path(folder) / "gpt2.tiktoken")


# ---------------------------------------------------------------------------------------
# Pool processes

_TOKENIZER = None


def _init_worker(folder: str, name: str) -> None:
    global _TOKENIZER
    # the parent decides on a Ctrl-C (a terminal sends it to the pool too): no traceback per process
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _TOKENIZER = load_shard_tokenizer(Path(folder), name)


def _encode_chunk(args: tuple[list[str], float, str]) -> dict:
    """Tokenize one chunk into its train and val token arrays (each document then EOS)."""
    docs, val_fraction, dtype = args
    tok = _TOKENIZER
    out = {}
    for split in SPLITS:
        texts = [d for d in docs if is_validation(d, val_fraction) == (split == "val")]
        ids: list[int] = []
        for encoded in tok.encode_batch(texts) if texts else []:
            ids.extend(encoded)
            ids.append(tok.eos_id)
        out[split] = (np.asarray(ids, dtype=dtype), len(texts), sum(len(t.encode("utf-8")) for t in texts))
    return out


# ---------------------------------------------------------------------------------------
# Writing shards


@dataclass(frozen=True)
class Target:
    """How much a prepare takes: stop at the first chunk after which the train split holds
    ``train_tokens`` and the val split ``val_tokens`` (0 = the whole source)."""

    train_tokens: int = 0
    val_tokens: int = 0

    def met(self, train: int, val: int) -> bool:
        return (
            bool(self.train_tokens or self.val_tokens)
            and train >= self.train_tokens
            and val >= self.val_tokens
        )


def prepare_shards(
    key: CorpusKey,
    *,
    cache_dir: Path,
    target: Target = Target(),
    shard_tokens: int = DEFAULT_SHARD_TOKENS,
    chunk_bytes: int = CHUNK_BYTES,
    workers: int | None = None,
    bpe_sample_bytes: int = BPE_SAMPLE_BYTES,
    log: Callable[[str], None] | None = None,
) -> Path:
    """Stream, tokenize and shard a corpus (see the module docstring); return its folder.

    Args:
        key: the corpus (:class:`~harness.data.corpus_key.CorpusKey`, :meth:`harness.design.config.RunConfig.corpus_key`):
            its spec (local file/folder/glob or ``hf:OWNER/NAME[:CONFIG]``); tokenizer ``bpe`` (trained
            on the first ``bpe_sample_bytes`` of train-split text) or ``gpt2`` (tiktoken; its ranks are
            copied beside the shards); requested BPE vocabulary (>= 257; ignored for ``gpt2``);
            validation fraction in (0, 1); ``max_docs`` (``None`` = no limit).
        cache_dir: cache root (the folder is ``cache_dir/corpora/shards-...``).
        target: stop once both splits hold this many tokens (default: the whole source).
        shard_tokens: tokens per shard file (recorded; a corpus keeps its first value).
        chunk_bytes: text per unit of work and of resumption (recorded, kept like ``shard_tokens``).
        workers: tokenizer processes (default: the CPU cores).
        log: where progress lines go (default: stderr).

    Returns:
        The corpus folder (``manifest.json`` in it).

    Raises:
        FileNotFoundError, ValueError, OptionalDependencyError: a bad spec, unreadable text,
            an unreachable hub, a missing optional package; a split left empty; a BPE
            ``vocab_size`` outside 257 .. 2^20 (:func:`~harness.data.tokenizer.check_bpe_vocab`).
            The argument checks run before anything is written.
    """
    corpus, tokenizer, vocab_size = key.corpus, key.tokenizer, key.vocab_size
    val_fraction, max_docs = key.val_fraction, key.max_docs
    if tokenizer not in TOKENIZER_NAMES:
        raise ValueError(f"unknown tokenizer {tokenizer!r}; allowed: {', '.join(TOKENIZER_NAMES)}")
    if isinstance(val_fraction, bool) or not 0.0 < float(val_fraction) < 1.0:
        raise ValueError(f"val_fraction={val_fraction!r} must be in (0, 1)")
    if shard_tokens <= 0 or chunk_bytes <= 0:
        raise ValueError(
            f"shard_tokens={shard_tokens}, chunk_bytes={chunk_bytes}: both must be positive integers"
        )
    if tokenizer == "bpe":
        check_bpe_vocab(vocab_size)  # a huge one aborts the Rust trainer (out of memory), no exception
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    folder = key.folder(cache_dir)
    if not corpus.startswith(HUB_PREFIX) and read_manifest(folder) is None:
        corpus_files(corpus)  # a refused prepare creates nothing: no cache folder, no lock file
    folder.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(folder.with_name(folder.name + ".lock")):
        manifest = read_manifest(folder)
        if manifest is not None:
            splits = manifest["splits"]
            if manifest["exhausted"] or target.met(splits["train"]["tokens"], splits["val"]["tokens"]):
                return folder
            log(
                f"{folder.name}: extending: holds {splits['train']['tokens']:,} train tokens, "
                f"{target.train_tokens:,} asked"
            )
        if not corpus.startswith(HUB_PREFIX):
            corpus_files(corpus)  # a missing or empty source fails before anything is written
        folder.mkdir(exist_ok=True)
        try:
            _build(
                folder,
                corpus,
                manifest,
                tokenizer=tokenizer,
                vocab_size=vocab_size,
                val_fraction=float(val_fraction),
                max_docs=max_docs,
                target=target,
                shard_tokens=shard_tokens,
                chunk_bytes=chunk_bytes,
                workers=workers or os.cpu_count() or 1,
                bpe_sample_bytes=bpe_sample_bytes,
                log=log,
            )
        except BaseException:
            if not (folder / "setup.json").exists():  # failed before its first step: leave no empty folder
                shutil.rmtree(folder, ignore_errors=True)
            raise
    return folder


def _setup(
    folder: Path,
    corpus: str,
    tokenizer: str,
    vocab_size: int,
    val_fraction: float,
    max_docs: int | None,
    shard_tokens: int,
    chunk_bytes: int,
    bpe_sample_bytes: int,
    cache_dir: Path,
) -> dict:
    """Resolve the revision and write the tokenizer files: the parts of the manifest fixed
    before the first shard (written to ``setup.json``, so a resumed prepare reuses them)."""
    path = folder / "setup.json"
    if path.is_file():
        return json.loads(path.read_text())
    revision = hub_revision(corpus) if corpus.startswith(HUB_PREFIX) else None
    if tokenizer == "bpe":
        sample, size = [], 0
        for text in stream_documents(corpus, revision=revision, max_docs=max_docs):
            if size >= bpe_sample_bytes:
                break
            if not is_validation(text, val_fraction):
                sample.append(text)
                size += len(text.encode("utf-8"))
        if not sample:
            raise ValueError(f"corpus {corpus!r} has no training document to train the BPE tokenizer on")
        tok = train_bpe(sample, vocab_size, cache_dir=cache_dir)
        atomic_write(folder / "tokenizer.json", tok.json_str)
        files = ["tokenizer.json"]
        bpe_sample = {
            "documents": len(sample),
            "bytes": size,
            "fingerprint": corpus_fingerprint(sample),
            "rule": f"the first train-split documents of the stream up to {bpe_sample_bytes} UTF-8 bytes",
        }
        del sample
    else:
        tok = GPT2Tokenizer()
        _write_gpt2_ranks(folder / "gpt2.tiktoken", tok)
        files, bpe_sample = ["gpt2.tiktoken"], None
        tok = load_shard_tokenizer(folder, "gpt2")
    np.save(folder / "token_bytes.npy", tok.token_bytes())
    setup = {
        "format": SHARD_FORMAT,
        "source": source_key(corpus),
        "revision": revision,
        "max_docs": max_docs or None,
        "val_fraction": val_fraction,
        "split_rule": SPLIT_RULE,
        "eos_placement": "after every document",
        "shard_tokens": shard_tokens,
        "chunk_bytes": chunk_bytes,
        "dtype": token_dtype(tok.vocab_size).name,
        "tokenizer": {
            "name": tok.name,
            "vocab_size": int(tok.vocab_size),
            "requested_vocab_size": int(vocab_size) if tokenizer == "bpe" else None,
            "eos_id": int(tok.eos_id),
            "sha256": tok.sha256,
            "files": files,
            "bpe_sample": bpe_sample,
        },
    }
    atomic_write(path, json.dumps(setup, indent=2, sort_keys=True) + "\n")
    return setup


def token_dtype(vocab_size: int) -> np.dtype:
    """Little-endian dtype of the token files: ``uint16``, or ``uint32`` when V > 65535.

    (V = 65536 would still fit ``uint16``; the simpler rule costs nothing.)
    """
    return np.dtype("<u2") if vocab_size <= 65535 else np.dtype("<u4")


def _build(
    folder: Path,
    corpus: str,
    manifest: dict | None,
    *,
    tokenizer: str,
    vocab_size: int,
    val_fraction: float,
    max_docs: int | None,
    target: Target,
    shard_tokens: int,
    chunk_bytes: int,
    workers: int,
    bpe_sample_bytes: int,
    log: Callable[[str], None],
) -> None:
    """Tokenize ``corpus`` into the shards of ``folder`` until ``target`` is met or the source ends, then
    write the manifest. Resumes after the last chunk a killed build finished; with ``manifest`` (a
    finished corpus being extended) its short last shards open again."""
    cpu0 = _cpu_seconds()
    setup = _setup(
        folder,
        corpus,
        tokenizer,
        vocab_size,
        val_fraction,
        max_docs,
        shard_tokens,
        chunk_bytes,
        bpe_sample_bytes,
        folder.parent.parent,
    )
    progress_path = folder / "progress.json"
    state = _start_state(folder, manifest, progress_path, log)
    dtype, token_bytes, speed = np.dtype(setup["dtype"]), np.load(folder / "token_bytes.npy"), _Speed(log)
    writers = {
        s: _ShardWriter(
            folder,
            s,
            setup["shard_tokens"],
            dtype,
            state["splits"][s],
            token_bytes,
            setup["tokenizer"]["eos_id"],
            speed.on_shard,
        )
        for s in SPLITS
    }
    speed.writers = writers
    for w in writers.values():
        if manifest is not None:
            w.reopen_last()
    done = _Done(state["chunks"], state["documents"])
    if manifest is not None:  # the reopened state first: a kill from here on resumes, never restarts
        _save_progress(progress_path, done.chunks, done.documents, writers)
        (folder / "manifest.json").unlink()
    speed.tokens0 = speed.tokens()
    docs = stream_documents(corpus, revision=setup["revision"], max_docs=max_docs)
    chunks = _chunks(docs, setup["chunk_bytes"])  # the recorded size: a resume cuts the same chunks
    stopped = _encode(
        folder, tokenizer, chunks, done, writers, target, val_fraction, dtype, workers, progress_path
    )
    for w in writers.values():
        w.close_shard()
    splits = _finish(folder, corpus, setup, writers, done, exhausted=not stopped)
    progress_path.unlink(missing_ok=True)
    fsync_dir(folder)
    _log_done(folder, splits, done.documents, speed, _cpu_seconds() - cpu0, log)


def _cpu_seconds() -> float:
    """User + system CPU seconds of this process and its finished children."""
    return sum(
        getattr(resource.getrusage(who), f)
        for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
        for f in ("ru_utime", "ru_stime")
    )


def _start_state(
    folder: Path, manifest: dict | None, progress_path: Path, log: Callable[[str], None]
) -> dict:
    """Where the build starts: a finished corpus's shards (extending it), a killed build's progress, or nothing."""
    if manifest is not None:  # extend a finished corpus: its short last shards open again
        return {
            "chunks": manifest["chunks"],
            "documents": manifest["documents"],
            "splits": {s: {"shards": manifest["splits"][s]["shards"]} for s in SPLITS},
        }
    if progress_path.is_file():
        state = json.loads(progress_path.read_text())
        log(f"{folder.name}: resuming after chunk {state['chunks']:,} ({state['documents']:,} documents)")
        return state
    return {"chunks": 0, "documents": 0, "splits": {s: {} for s in SPLITS}}


class _Speed:
    """This build's tokens per second (tokens written since :attr:`tokens0`, from when it was made)."""

    def __init__(self, log: Callable[[str], None]) -> None:
        self.log, self.t0, self.tokens0, self.writers = log, time.perf_counter(), 0, {}

    def tokens(self) -> int:
        """Tokens in both splits' shards now."""
        return self.writers["train"].tokens + self.writers["val"].tokens

    def on_shard(self, split: str, record: dict) -> None:
        """Say that a shard was closed, with the build's speed so far."""
        elapsed = time.perf_counter() - self.t0
        done = self.tokens() - self.tokens0
        self.log(
            f"{split} shard {record['file']}: {record['tokens']:,} tokens, {record['documents']:,} documents, "
            f"{record['bytes']:,} bytes ({done / max(elapsed, 1e-9) / 1e6:.2f}M tokens/s)"
        )


@dataclass
class _Done:
    """Chunks and documents written to the shards so far (resumable after a kill)."""

    chunks: int
    documents: int


def _encode(
    folder: Path,
    tokenizer: str,
    chunks,
    done: _Done,
    writers: dict,
    target: Target,
    val_fraction: float,
    dtype: np.dtype,
    workers: int,
    progress_path: Path,
) -> bool:
    """Encode the chunks after ``done.chunks`` in ``workers`` processes and write them in order, saving the
    progress after each; whether the target was met with text of the source left over."""
    stopped = False
    with ProcessPoolExecutor(workers, initializer=_init_worker, initargs=(str(folder), tokenizer)) as pool:
        pending: deque = deque()

        def write_next() -> bool:
            """Write the oldest chunk in flight; whether the target is met."""
            done.documents += _write_chunk(pending.popleft().result(), writers)
            done.chunks += 1
            _save_progress(progress_path, done.chunks, done.documents, writers)
            return target.met(writers["train"].tokens, writers["val"].tokens)

        try:
            for index, chunk in enumerate(chunks, start=1):
                if index <= done.chunks:
                    continue  # finished before the kill: its tokens are in the shards
                pending.append(pool.submit(_encode_chunk, (chunk, val_fraction, dtype.str)))
                # a bounded queue: memory does not grow with the corpus; chunks stay in flight after a stop
                if len(pending) >= 2 * workers and write_next():
                    stopped = True
                    break
            while pending and not stopped:
                stopped = write_next() and bool(pending)
        finally:  # after a stop or a Ctrl-C the pool's shutdown waits for the running chunks only
            for future in pending:
                future.cancel()
    return stopped


def _finish(folder: Path, corpus: str, setup: dict, writers: dict, done: _Done, *, exhausted: bool) -> dict:
    """Write the manifest (after syncing the shards) and return its ``splits``; an empty split is an error."""
    splits = {}
    for split, w in writers.items():
        splits[split] = {
            "tokens": w.tokens,
            "documents": sum(s["documents"] for s in w.shards),
            "bytes": sum(s["bytes"] for s in w.shards),
            "shards": w.shards,
        }
        if not w.tokens:
            raise ValueError(
                f"corpus {corpus!r}: the {split} split is empty after {done.documents:,} documents; "
                "use more documents or another val_fraction"
            )
    content = hashlib.sha256(
        json.dumps({s: [r["sha256"] for r in splits[s]["shards"]] for s in SPLITS}, sort_keys=True).encode()
    ).hexdigest()
    manifest = {
        **setup,
        "fingerprint": content,
        "documents": done.documents,
        "chunks": done.chunks,
        "exhausted": exhausted,
        "splits": splits,
        "token_bytes_sha256": hashlib.sha256((folder / "token_bytes.npy").read_bytes()).hexdigest(),
    }
    for path in folder.iterdir():
        if path.suffix == ".bin":
            fsync_file(path)
    atomic_write(folder / "manifest.json", json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return splits


def _log_done(
    folder: Path, splits: dict, documents: int, speed: _Speed, cpu: float, log: Callable[[str], None]
) -> None:
    """The build's closing line: documents, tokens and shards per split, tokens per second and per CPU-second."""
    elapsed = time.perf_counter() - speed.t0
    total = splits["train"]["tokens"] + splits["val"]["tokens"]
    log(
        f"{folder.name}: {documents:,} documents, {splits['train']['tokens']:,} train and "
        f"{splits['val']['tokens']:,} val tokens in {len(splits['train']['shards'])} + "
        f"{len(splits['val']['shards'])} shards; {(total - speed.tokens0) / max(elapsed, 1e-9) / 1e6:.2f}M tokens/s "
        f"over {elapsed:.1f} s ({(total - speed.tokens0) / max(cpu, 1e-9) / 1e6:.2f}M tokens per CPU-second, "
        f"tokenizer training included)"
    )


def _write_chunk(result: dict, writers: dict) -> int:
    for split in SPLITS:
        writers[split].append(result[split][0])
    return result["train"][1] + result["val"][1]


def _save_progress(path: Path, chunks: int, documents: int, writers: dict) -> None:
    # the open shards' bytes reach the disk before the state that counts them
    for w in writers.values():
        if w._path().exists():
            fsync_file(w._path())
    atomic_write(
        path,
        json.dumps(
            {"chunks": chunks, "documents": documents, "splits": {s: w.state() for s, w in writers.items()}}
        ),
    )


__all__ = [
    "SHARD_FORMAT",
    "CorpusKey",
    "DEFAULT_SHARD_TOKENS",
    "BPE_SAMPLE_BYTES",
    "Target",
    "prepare_shards",
    "shard_dir",
    "token_dtype",
    "read_manifest",
    "stream_documents",
    "hub_revision",
    "load_shard_tokenizer",
    "source_key",
]
