"""The corpus format: a stream of documents -> fixed-size token shards + manifest (DESIGN 4, 11).

Every run reads a corpus in this format: ``harness prepare`` builds it for paper scale (any size, a
pool of processes); a worker builds a small local corpus itself (one shard per split, one process:
:func:`harness.data.prepared.prepare_corpus`). :func:`prepare_shards` streams documents from a
corpus spec (a local file, folder or glob, read row by row; or ``hf:OWNER/NAME[:CONFIG]`` through
``datasets`` streaming, the revision resolved once and recorded) through the tokenizer in a pool
of processes and writes, into ``CACHE/corpora/shards-<key>/``:

* ``train-00000.bin, ...`` and ``val-00000.bin, ...``: little-endian ``uint16`` token ids
  (``uint32`` when V > 65535), ``shard_tokens`` tokens per shard (the last one of a split
  shorter). The concatenated shards of a split are ``tok(d_1) EOS tok(d_2) EOS ...`` over the
  split's documents in stream order (the document-level split rule of
  :func:`harness.corpus.split.is_validation`); a document may continue in the next shard.
* ``token_bytes.npy`` and the tokenizer's files (``tokenizer.json`` for ``bpe``, the
  ``gpt2.tiktoken`` ranks for ``gpt2``), so workers load everything from this folder and
  never download.
* ``manifest.json``: per shard its sha256, tokens, documents (EOS tokens in it) and UTF-8
  bytes (the sum of its tokens' byte lengths; the byte-level tokenizers make that exact);
  the tokenizer's name, sha256 and files; the source, its revision and the split rule; the
  ``bpe`` tokenizer's training sample; and ``protocol``, what the text is for a run's protocol
  hash (:func:`protocol_description`). Written last: its presence marks a finished corpus.

The folder's name is a hash of what a run's config says about its corpus (source,
tokenizer, requested vocabulary, validation fraction, ``max_docs``), so a worker finds it
from its config alone; ``source-stat.json`` beside the manifest records the source files' sizes and
times, and a text changed since is built in a folder of its own
(:func:`~harness.corpus.cached.text_folder`).

The stream is cut in chunks of about :data:`CHUNK_BYTES` of text at document boundaries; a
chunk is the unit of work of a pool process and of resumption: after each chunk
``progress.json`` records the chunks done and the length of each split's open shard, so a
killed prepare truncates the open shards to that length and continues with the next chunk,
ending byte-identical to an uninterrupted one (a build whose source changed since it stopped,
by the files' sizes and times it recorded at its start, starts again: resumed, it would hold
two texts). A prepare sized for more tokens than a finished corpus holds continues it the
same way (the corpus is extended, never rebuilt). Memory is one chunk per pool process plus
a bounded queue of chunks, whatever the corpus size. One writer at a time (a file lock beside
the folder, on the shared file system).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from filelock import FileLock

from harness.common.files import atomic_write, fsync_dir, fsync_file
from harness.corpus.cached import record_source, recorded_source, source_stat, text_folder
from harness.corpus.fingerprint import Fingerprint, corpus_fingerprint
from harness.corpus.key import SHARD_FORMAT, CorpusKey, read_manifest, source_key
from harness.corpus.readers import corpus_files, hub_revision, stream_documents
from harness.corpus.spec import HUB_PREFIX
from harness.corpus.split import SPLIT_RULE, SPLITS, is_validation
from harness.data.shard_pool import InProcess, encode_chunk, init_worker
from harness.data.shard_progress import BuildSpeed, cpu_seconds, log_done
from harness.data.shard_writer import ShardWriter
from harness.data.tokenizer import (
    PROTOCOL_FIELDS,
    GPT2Tokenizer,
    check_key_tokenizer,
    ids_dtype,
    load_shard_tokenizer,
    tokenizer_record,
    train_key_bpe,
    write_gpt2_ranks,
)

#: Tokens per shard (build-nanogpt's fineweb.py uses 100M): 200 MB of uint16 per file.
DEFAULT_SHARD_TOKENS = 100_000_000
#: Text per chunk of work (bytes, cut at document boundaries): bounds each process's memory.
CHUNK_BYTES = 1 << 20
#: Training text the ``bpe`` tokenizer is trained on: the first train-split documents of the
#: stream up to this many UTF-8 bytes (recorded in the manifest).
BPE_SAMPLE_BYTES = 32 << 20
EOS_PLACEMENT = "after every document"
#: ``format`` of a corpus's protocol description (:func:`protocol_description`): 1, the single-file
#: layout's, whose description it continues.
PROTOCOL_FORMAT = 1


# ---------------------------------------------------------------------------------------
# Writing shards


@dataclass(frozen=True)
class Target:
    """How much a prepare takes: stop at the first chunk after which the train split holds
    ``train_tokens`` and the val split ``val_tokens`` (0 = the whole source)."""

    train_tokens: int = 0
    val_tokens: int = 0

    def met(self, train: int, val: int) -> bool:
        """Whether splits of ``train`` and ``val`` tokens reach the target (never, for the whole source)."""
        return (
            bool(self.train_tokens or self.val_tokens)
            and train >= self.train_tokens
            and val >= self.val_tokens
        )


@dataclass(frozen=True)
class _Plan:
    """One build's settings: the key's, and how the work is cut and reported."""

    key: CorpusKey
    target: Target
    shard_tokens: int
    chunk_bytes: int
    workers: int
    bpe_sample_bytes: int
    log: Callable[[str], None]


def check_key(key: CorpusKey) -> None:
    """Refuse a key no build can serve, before anything is written.

    Raises:
        ValueError: ``val_fraction`` outside (0, 1), ``max_docs`` neither ``None`` nor a positive
            integer, or a tokenizer :func:`~harness.data.tokenizer.check_key_tokenizer` refuses.
    """
    check_key_tokenizer(key)
    if isinstance(key.val_fraction, bool) or not 0.0 < float(key.val_fraction) < 1.0:
        raise ValueError(f"val_fraction={key.val_fraction!r} must be in (0, 1)")
    if key.max_docs is not None and (
        isinstance(key.max_docs, bool) or not isinstance(key.max_docs, int) or key.max_docs <= 0
    ):
        raise ValueError(f"max_docs={key.max_docs!r} must be a positive integer or None")


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
        key: the corpus (:class:`~harness.corpus.key.CorpusKey`, :meth:`harness.design.config.RunConfig.corpus_key`):
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
            an unreachable hub, a missing optional package; a split left empty; a key
            :func:`check_key` refuses. The argument checks run before anything is written.
    """
    check_key(key)
    if shard_tokens <= 0 or chunk_bytes <= 0:
        raise ValueError(
            f"shard_tokens={shard_tokens}, chunk_bytes={chunk_bytes}: both must be positive integers"
        )
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    plan = _Plan(
        key, target, shard_tokens, chunk_bytes, workers or os.cpu_count() or 1, bpe_sample_bytes, log
    )
    stat = source_stat(key.corpus)  # before the text is read: an edit during the build is seen next time
    if not key.corpus.startswith(HUB_PREFIX) and read_manifest(key.folder(cache_dir)) is None:
        corpus_files(key.corpus)  # a refused prepare creates nothing: no cache folder, no lock file
    folder, _ = text_folder(key, cache_dir)  # the text as it is now: an older text's folder is left alone
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
        if not key.corpus.startswith(HUB_PREFIX):
            corpus_files(key.corpus)  # a missing or empty source fails before anything is written
        folder.mkdir(exist_ok=True)
        if manifest is None:
            building = recorded_source(folder)
            if (folder / "progress.json").is_file() and building is not None and building != stat:
                # its first chunks hold the text as it was: resuming would mix two texts under one fingerprint
                log(f"{folder.name}: the source changed since this build stopped: building it again")
                shutil.rmtree(folder)
                folder.mkdir()
            record_source(folder, stat)  # what this build reads, checked if it is stopped and resumed
        try:
            _build(folder, manifest, plan)
        except BaseException:
            if not (folder / "setup.json").exists():  # failed before its first step: leave no empty folder
                shutil.rmtree(folder, ignore_errors=True)
            raise
        record_source(folder, stat)
    return folder


def _setup(folder: Path, plan: _Plan, cache_dir: Path) -> dict:
    """Resolve the revision and write the tokenizer files: the parts of the manifest fixed
    before the first shard (written to ``setup.json``, so a resumed prepare reuses them)."""
    path = folder / "setup.json"
    if path.is_file():
        return json.loads(path.read_text())
    key = plan.key
    revision = hub_revision(key.corpus) if key.corpus.startswith(HUB_PREFIX) else None
    if key.tokenizer == "bpe":
        tok, bpe_sample = _train_tokenizer(folder, plan, revision, cache_dir)
        files = ["tokenizer.json"]
    else:
        write_gpt2_ranks(folder / "gpt2.tiktoken", GPT2Tokenizer())
        files, bpe_sample = ["gpt2.tiktoken"], None
        tok = load_shard_tokenizer(folder, "gpt2")
    np.save(folder / "token_bytes.npy", tok.token_bytes())
    setup = {
        "format": SHARD_FORMAT,
        "source": source_key(key.corpus),
        "revision": revision,
        "max_docs": key.max_docs or None,
        "val_fraction": float(key.val_fraction),
        "split_rule": SPLIT_RULE,
        "eos_placement": EOS_PLACEMENT,
        "shard_tokens": plan.shard_tokens,
        "chunk_bytes": plan.chunk_bytes,
        "dtype": ids_dtype(tok).name,
        "tokenizer": {**tokenizer_record(tok, key), "files": files, "bpe_sample": bpe_sample},
    }
    atomic_write(path, json.dumps(setup, indent=2, sort_keys=True) + "\n")
    return setup


def _train_tokenizer(folder: Path, plan: _Plan, revision: str | None, cache_dir: Path) -> tuple:
    """Train the BPE on the first ``plan.bpe_sample_bytes`` of train-split text (all of it in a
    smaller corpus: then the tokenizer the single-file layout trained on the whole training split);
    write ``tokenizer.json``; return the tokenizer and the sample's record."""
    key, sample, size, seen = plan.key, [], 0, 0
    for text in stream_documents(key.corpus, revision=revision, max_docs=key.max_docs):
        if size >= plan.bpe_sample_bytes:
            break
        seen += 1
        if not is_validation(text, key.val_fraction):
            sample.append(text)
            size += len(text.encode("utf-8"))
    if not seen:
        raise ValueError(f"corpus {key.corpus!r} is empty: it holds no non-empty document")
    if not sample:
        raise ValueError(f"corpus {key.corpus!r} has no training document to train the BPE tokenizer on")
    tok = train_key_bpe(key, sample, cache_dir=cache_dir)
    atomic_write(folder / "tokenizer.json", tok.json_str)
    return tok, {
        "documents": len(sample),
        "bytes": size,
        "fingerprint": corpus_fingerprint(sample),
        "rule": f"the first train-split documents of the stream up to {plan.bpe_sample_bytes} UTF-8 bytes",
    }


def _build(folder: Path, manifest: dict | None, plan: _Plan) -> None:
    """Tokenize the corpus into the shards of ``folder`` until the target is met or the source ends, then
    write the manifest. Resumes after the last chunk a killed build finished; with ``manifest`` (a
    finished corpus being extended) its short last shards open again."""
    cpu0 = cpu_seconds()
    setup = _setup(folder, plan, folder.parent.parent)
    progress_path = folder / "progress.json"
    state = _start_state(folder, manifest, progress_path, plan.log)
    dtype, token_bytes, speed = (
        np.dtype(setup["dtype"]),
        np.load(folder / "token_bytes.npy"),
        BuildSpeed(plan.log),
    )
    writers = {
        s: ShardWriter(
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
    done = _Done(state["chunks"], state["documents"], Fingerprint())
    if manifest is not None:  # the reopened state first: a kill from here on resumes, never restarts
        _save_progress(progress_path, done.chunks, done.documents, writers)
        (folder / "manifest.json").unlink()
    speed.tokens0 = speed.tokens()
    docs = stream_documents(plan.key.corpus, revision=setup["revision"], max_docs=plan.key.max_docs)
    chunks = document_chunks(docs, setup["chunk_bytes"])  # the recorded size: a resume cuts the same chunks
    stopped = _encode(folder, chunks, done, writers, plan, dtype, progress_path)
    for w in writers.values():
        w.close_shard()
    splits = _finish(folder, plan.key.corpus, setup, writers, done, exhausted=not stopped)
    progress_path.unlink(missing_ok=True)
    fsync_dir(folder)
    log_done(folder, splits, done.documents, speed, cpu_seconds() - cpu0, plan.log)


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


@dataclass
class _Done:
    """Chunks and documents written to the shards so far (resumable after a kill), and the fingerprint
    of those documents (fed every chunk in order, the ones a resumed build skips too)."""

    chunks: int
    documents: int
    fingerprint: Fingerprint


def _encode(
    folder: Path, chunks, done: _Done, writers: dict, plan: _Plan, dtype: np.dtype, progress_path: Path
) -> bool:
    """Encode the chunks after ``done.chunks`` in ``plan.workers`` processes and write them in order, saving
    the progress after each; whether the target was met with text of the source left over."""
    stopped, target = False, plan.target
    initargs = (str(folder), plan.key.tokenizer)
    if plan.workers == 1:
        pool = InProcess(*initargs)
    else:
        pool = ProcessPoolExecutor(plan.workers, initializer=init_worker, initargs=initargs)
    with pool:
        pending: deque = deque()

        def write_next() -> bool:
            """Write the oldest chunk in flight; whether the target is met."""
            future, chunk = pending.popleft()
            done.documents += _write_chunk(future.result(), writers)
            done.fingerprint.update(chunk)
            done.chunks += 1
            _save_progress(progress_path, done.chunks, done.documents, writers)
            return target.met(writers["train"].tokens, writers["val"].tokens)

        try:
            for index, chunk in enumerate(chunks, start=1):
                if index <= done.chunks:
                    done.fingerprint.update(chunk)
                    continue  # finished before the kill: its tokens are in the shards
                work = (chunk, float(plan.key.val_fraction), dtype.str)
                pending.append((pool.submit(encode_chunk, work), chunk))
                # a bounded queue: memory does not grow with the corpus; chunks stay in flight after a stop
                if len(pending) >= 2 * plan.workers and write_next():
                    stopped = True
                    break
            while pending and not stopped:
                stopped = write_next() and bool(pending)
        finally:  # after a stop or a Ctrl-C the pool's shutdown waits for the running chunks only
            for future, _ in pending:
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
    manifest = {
        **setup,
        "checksum": shards_checksum(splits),
        "documents": done.documents,
        "chunks": done.chunks,
        "exhausted": exhausted,
        "splits": splits,
        "token_bytes_sha256": hashlib.sha256((folder / "token_bytes.npy").read_bytes()).hexdigest(),
    }
    stream_sha256 = {s: w.sha256 for s, w in writers.items()}
    manifest["protocol"] = protocol_description(manifest, done.fingerprint.hexdigest(), stream_sha256)
    for path in folder.iterdir():
        if path.suffix == ".bin":
            fsync_file(path)
    atomic_write(folder / "manifest.json", json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return splits


def shards_checksum(splits: dict) -> str:
    """The manifest's ``checksum`` of the prepared shards: sha256 over each split's shard sha256s (``splits`` as in
    the manifest). How the text is stored, not what it is: the corpus's identity is its document fingerprint
    (``manifest["protocol"]["fingerprint"]``, :func:`~harness.corpus.fingerprint.corpus_fingerprint`); manifests
    written before name this ``fingerprint`` (read by nothing)."""
    return hashlib.sha256(
        json.dumps({s: [r["sha256"] for r in splits[s]["shards"]] for s in SPLITS}, sort_keys=True).encode()
    ).hexdigest()


def protocol_description(manifest: dict, fingerprint: str, stream_sha256: dict[str, str]) -> dict:
    """What a corpus's text is, as a run's protocol hash records it (``manifest["protocol"]``,
    :attr:`harness.data.PreparedCorpus.protocol_meta`; DESIGN 4): never how it is stored.

    The document fingerprint (:func:`~harness.corpus.fingerprint.corpus_fingerprint` of every document in
    stream order), the split rule, the tokenizer (name, vocabulary, EOS id, sha256) and per split
    its tokens, UTF-8 bytes, documents and the sha256 of its whole token stream (all shards in
    order). Shard size, chunking, source path and revision stay out. The dict has exactly the keys
    of the ``meta.json`` that the single-file layout this format replaced wrote (``format`` 1,
    each split's stream named ``SPLIT.bin``), so a corpus tokenized into the same ids describes
    itself as it did there and its runs keep their protocol hash.

    Args:
        manifest: the corpus's manifest without ``protocol``.
        fingerprint: the documents' fingerprint.
        stream_sha256: per split, sha256 (hex) of its concatenated shards.
    """
    tokenizer = manifest["tokenizer"]
    return {
        "format": PROTOCOL_FORMAT,
        "fingerprint": fingerprint,
        "documents": manifest["documents"],
        "val_fraction": float(manifest["val_fraction"]),
        "split_rule": manifest["split_rule"],
        "dtype": manifest["dtype"],
        "eos_placement": manifest["eos_placement"],
        "tokenizer": {k: tokenizer[k] for k in PROTOCOL_FIELDS},
        "token_bytes_sha256": manifest["token_bytes_sha256"],
        "splits": {
            split: {
                "file": f"{split}.bin",
                "sha256": stream_sha256[split],
                **{k: manifest["splits"][split][k] for k in ("tokens", "bytes", "documents")},
            }
            for split in SPLITS
        },
    }


def _write_chunk(result: dict, writers: dict) -> int:
    for split in SPLITS:
        writers[split].append(result[split][0])
    return result["train"][1] + result["val"][1]


def _save_progress(path: Path, chunks: int, documents: int, writers: dict) -> None:
    # the open shards' bytes reach the disk before the state that counts them
    for w in writers.values():
        if w.path.exists():
            fsync_file(w.path)
    atomic_write(
        path,
        json.dumps(
            {"chunks": chunks, "documents": documents, "splits": {s: w.state() for s, w in writers.items()}}
        ),
    )


def document_chunks(docs: Iterator[str], chunk_bytes: int) -> Iterator[list[str]]:
    """Consecutive documents, about ``chunk_bytes`` characters of text per list (deterministic: a resumed
    prepare cuts the same chunks), the units of work of a build."""
    chunk, size = [], 0
    for text in docs:
        chunk.append(text)
        size += len(text)
        if size >= chunk_bytes:
            yield chunk
            chunk, size = [], 0
    if chunk:
        yield chunk


__all__ = [
    "DEFAULT_SHARD_TOKENS",
    "BPE_SAMPLE_BYTES",
    "Target",
    "check_key",
    "shards_checksum",
    "prepare_shards",
    "protocol_description",
    "PROTOCOL_FORMAT",
    "EOS_PLACEMENT",
    "CHUNK_BYTES",
    "document_chunks",
]
