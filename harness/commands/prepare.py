"""Prepare a corpus once, before the workers: stream it into token shards sized for a grid.

`harness prepare GRID.toml` takes, per corpus and tokenizer of the grid, enough documents
for the grid's largest budget in one pass (no window seen twice) plus its evaluation set,
tokenizes them in a pool of processes (--workers, default all cores) into fixed-size token
shards (uint16, or uint32 above 65,535 ids) with a manifest (per shard sha256, tokens,
documents, bytes; the tokenizer's name, sha256 and files; source and revision; the split
rule) in the prepared-corpus cache ($HARNESS_CACHE, else RESULTS/cache), and says how
many documents and tokens it took. Workers then only memory-map the shards: they never
download (hub text, tiktoken's gpt2 files), so compute nodes need no network.

`harness prepare --corpus C --tokenizer T [--vocab-size V] [--tokens N]` prepares one
corpus without a grid: N train tokens (default: the whole source).

A hub corpus (hf:OWNER/NAME[:CONFIG]) is streamed with `datasets` at the revision resolved
when the prepare starts (recorded). The `bpe` tokenizer trains on the first 32 MiB of
train-split text (recorded). A progress line per shard, with tokens/s. A killed prepare,
run again, keeps its finished shards and ends byte-identical to an uninterrupted one; a
prepare sized for more than a corpus holds extends it. One writer per corpus (a lock on the
cache folder, which may be shared by the cluster).

example:
  harness prepare ablations/rd_paper.toml --results /shared/rd
  harness prepare --corpus data/my.jsonl --tokenizer bpe --vocab-size 8192 --tokens 50_000_000
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from harness.corpus.key import DEFAULT_BPE_VOCAB, CorpusKey, requested_vocab


def _positive(unit: str):
    """An argparse type: a positive whole number of ``unit`` (``_`` separators allowed)."""

    def parse(text: str) -> int:
        try:
            value = int(text.replace("_", ""))
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of {unit}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"{text!r}: expected a positive number of {unit}")
        return value

    return parse


_tokens, _documents = _positive("tokens"), _positive("documents")


def _processes(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of processes") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a positive number of processes")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "grid",
        type=Path,
        metavar="GRID.toml",
        nargs="?",
        help="grid whose corpus to prepare, sized for its largest budget (or give --corpus)",
    )
    parser.add_argument(
        "--corpus",
        metavar="C",
        default=None,
        help="corpus spec: file, folder, glob or hf:OWNER/NAME[:CONFIG] (with a grid: overrides its "
        "corpus, as for `harness queue`; default $HARNESS_CORPUS, else the grid's)",
    )
    parser.add_argument(
        "--tokenizer",
        choices=("bpe", "gpt2"),
        default=None,
        help="without a grid: the tokenizer (default bpe)",
    )
    parser.add_argument(
        "--vocab-size",
        type=_tokens,
        default=None,
        metavar="V",
        help=f"without a grid: BPE vocabulary size (default {DEFAULT_BPE_VOCAB})",
    )
    parser.add_argument(
        "--val-fraction",
        type=float,
        default=0.05,
        metavar="F",
        help="without a grid: fraction of documents in the val split (default 0.05)",
    )
    parser.add_argument(
        "--max-docs",
        type=_documents,
        default=None,
        metavar="N",
        help="without a grid: take at most N documents",
    )
    parser.add_argument(
        "--tokens",
        type=_tokens,
        default=None,
        metavar="N",
        help="without a grid: stop once the train split holds N tokens (default: the whole source); it "
        "ends at the end of a chunk of about 1 MiB of text (whole documents), so it may hold more, and says so",
    )
    parser.add_argument(
        "--shard-tokens",
        type=_tokens,
        default=None,
        metavar="N",
        help="tokens per shard file (default 100,000,000)",
    )
    parser.add_argument(
        "--workers",
        type=_processes,
        default=None,
        metavar="N",
        help=f"tokenizer processes (default: the CPU cores, {os.cpu_count()} here)",
    )


def main(args: argparse.Namespace) -> int:
    from harness.corpus.key import read_manifest
    from harness.corpus.probe import probe_corpus
    from harness.corpus.spec import check_corpus, resolve_corpus
    from harness.data.legacy_layout import convert_legacy
    from harness.data.prepared import cache_dir
    from harness.data.shards import DEFAULT_SHARD_TOKENS, Target, prepare_shards
    from harness.data.tokenizer import check_key_tokenizer

    cache = cache_dir(args.results)
    if args.grid is not None:
        # deferred: the grid path needs the model presets (torch); --corpus alone does not
        from harness.scheduling.grids.corpus_need import largest_needs
        from harness.scheduling.grids.grid import load_grid

        if args.tokenizer or args.vocab_size or args.tokens or args.max_docs:
            raise ValueError(
                "with a GRID.toml, the tokenizer, vocabulary, size and max_docs come from the grid; "
                "drop --tokenizer/--vocab-size/--tokens/--max-docs"
            )
        grid = load_grid(args.grid)
        corpus, _ = grid.choose_corpus(args.corpus)
        configs = grid.expand(corpus=corpus, tuned={})
        for config in configs:
            config.check_trainable()  # the checks `harness queue` makes: one line, nothing written
        check_corpus(configs[0].corpus, source=str(args.grid))
        needs = largest_needs(configs)
    else:
        if args.corpus is None:
            raise ValueError("give a GRID.toml, or --corpus C (with --tokenizer, --vocab-size, --tokens)")
        if not 0 < args.val_fraction < 1:
            raise ValueError(f"--val-fraction {args.val_fraction}: expected a number in (0, 1)")
        spec = resolve_corpus(args.corpus)
        vocab = requested_vocab(args.vocab_size or 0, DEFAULT_BPE_VOCAB)
        key = CorpusKey(spec, args.tokenizer or "bpe", vocab, args.val_fraction, args.max_docs)
        check_key_tokenizer(key)
        needs = {key: (args.tokens or 0, 0)}
    for key in needs:
        probe_corpus(
            key.corpus
        )  # empty, blank or binary: the one line `queue` says, before any lock or folder
        if key.tokenizer == "gpt2":  # offline without gpt2's files: one line, before any lock or folder
            # lazy: loads the model presets (torch), which --corpus alone does not need
            from harness.scheduling.grids.corpus_need import check_gpt2_files

            check_gpt2_files(key, cache)
    for key, (train, val) in needs.items():
        t0 = time.perf_counter()
        convert_legacy(key, cache)  # a worker's single-file corpus of this key: its shards, tokens kept
        folder = prepare_shards(
            key,
            cache_dir=cache,
            target=Target(train, val),
            shard_tokens=args.shard_tokens or DEFAULT_SHARD_TOKENS,
            workers=args.workers,
        )
        _say_prepared(args, key, read_manifest(folder), folder, (train, val), time.perf_counter() - t0)
    return 0


def _say_prepared(
    args: argparse.Namespace, key, m: dict, folder: Path, need: tuple[int, int], seconds: float
) -> None:
    """What a prepare holds (manifest ``m`` of ``folder``) against what was asked (``need``: train and
    val tokens; 0: the whole source), and why they differ."""
    from harness.common.files import fmt_bytes
    from harness.data.shards import CHUNK_BYTES  # lazy: as main's (numpy and tokenizers load when it runs)

    train, val = need
    got_train, got_val = m["splits"]["train"]["tokens"], m["splits"]["val"]["tokens"]
    print(
        f"{key.corpus} ({key.tokenizer}): {m['documents']:,} documents, {got_train:,} train tokens, "
        f"{got_val:,} val tokens ({seconds:.1f} s) in {folder}"
    )
    if train and args.grid is not None:  # a grid's need counts its windows' +1 target token
        print(
            f"  largest budget reads {train - 1:,} train tokens: {(train - 1) / got_train:.3f} epochs; "
            f"evaluation set {val - 1:,} tokens"
        )
    if args.tokens and got_train > train:  # not exactly --tokens N: say how much more, and why
        chunk = fmt_bytes(m.get("chunk_bytes") or CHUNK_BYTES)
        print(
            f"  {got_train:,} train tokens for the {train:,} asked ({got_train - train:,} more): a prepare "
            f"takes whole chunks of about {chunk} of text (documents are never cut; a chunk is the unit of "
            "work and of resumption), or the corpus was prepared for more before; a run reads only the "
            "tokens its budget needs"
        )
    if train > got_train or val > got_val:
        print(
            "  the source ends before that: `harness queue` refuses the runs it cannot feed "
            "unless [train] sets max_epochs"
        )
    if args.shard_tokens and m["shard_tokens"] != args.shard_tokens:
        print(
            f"  --shard-tokens {args.shard_tokens:,} ignored: this corpus was prepared with "
            f"{m['shard_tokens']:,} tokens per shard and keeps them (a shard's size is fixed once written)"
        )
    if m.get("revision"):
        print(f"  revision {m['revision']}")
