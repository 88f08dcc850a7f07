"""What a grid needs of its corpus, and the queue-time refusal of what it cannot feed (DESIGN 11).

A run of ``total_steps`` global batches of ``B`` windows of ``T + 1`` tokens reads
``total_steps * B`` distinct windows in one epoch, i.e. a train split of at least
``plan.tokens + 1`` tokens (:mod:`harness.data.datamodule`: windows start every ``T``
tokens). Its evaluation set of ``eval_tokens // T`` windows needs a val split of
``(eval_tokens // T) * T + 1`` tokens. ``epochs`` = training tokens / train-split tokens.

A small local corpus need not be prepared by ``harness prepare`` (the first worker shards it, DESIGN 4),
so its split sizes are counted at queue time too: a cheap lower bound first (a token is at most
:data:`MAX_TOKEN_BYTES` bytes of its split's text), and only where that bound cannot vouch for the
run, the workers' own build (:func:`harness.data.prepare_corpus`: the shard folder of the run's key,
in the results folder's cache, so a worker later reads it instead of repeating it).
"""

from __future__ import annotations

import importlib.util
import math
from dataclasses import dataclass
from pathlib import Path

from harness.corpus.cached import text_folder
from harness.corpus.key import CorpusKey, read_manifest
from harness.corpus.readers import read_documents
from harness.corpus.spec import HUB_PREFIX
from harness.corpus.split import split_documents
from harness.data.prepared import prepare_corpus
from harness.data.tokenizer import GPT2Tokenizer
from harness.design.config import RunConfig
from harness.models.sizes import get_size
from harness.train.schedule import StepPlan

# A BPE token is a merge of byte-level symbols: gpt2's longest tokens are runs of 64+ spaces or
# dashes, a 512-token BPE's are a few bytes. A split of b bytes thus holds at least b / 128 tokens.
MAX_TOKEN_BYTES = 128


@dataclass(frozen=True)
class Need:
    """Tokens one run reads: ``train`` (its budget in whole steps, + 1) and ``val`` (its evaluation set, + 1)."""

    key: CorpusKey
    train_tokens: int
    val_tokens: int
    max_epochs: float


def need(config: RunConfig) -> Need:
    """The corpus and the tokens of each split that ``config``'s run reads."""
    train, preset = config.train_config(), get_size(config.size)
    plan = StepPlan.of(train, size=config.size, context=preset.context, budget_tokens=config.budget_tokens)
    key = config.corpus_key()
    val = (train.eval_tokens // preset.context) * preset.context + 1
    return Need(key, plan.tokens + 1, val, train.max_epochs)


def largest_needs(configs: list[RunConfig]) -> dict[CorpusKey, tuple[int, int]]:
    """Per corpus, the most train and val tokens any of ``configs`` reads."""
    out: dict[CorpusKey, tuple[int, int]] = {}
    for config in configs:
        n = need(config)
        train, val = out.get(n.key, (0, 0))
        out[n.key] = (max(train, n.train_tokens), max(val, n.val_tokens))
    return out


def _missing(module: str, why: str) -> str | None:
    if importlib.util.find_spec(module) is None:
        return (
            f"{why} needs the optional '{module}' package, which is not installed: "
            f"pip install 'rd-harness[hub]' (or pip install {module})"
        )
    return None


def check_corpora(configs: list[RunConfig], cache_dir: Path, *, grid_path: str) -> None:
    """Refuse, before anything is queued, what every worker would fail on or repeat.

    Raises:
        ValueError: (one line) a missing optional package (``tiktoken`` for ``gpt2``;
            ``datasets`` to prepare a hub corpus); a gpt2 corpus not prepared whose files tiktoken
            cannot load here (offline); a hub corpus not prepared; a run whose
            budget exceeds its prepared train split, or whose evaluation exceeds its val
            split, beyond ``max_epochs`` (the line gives budget, train tokens and epochs).
    """
    memo: dict = {}  # per corpus key: its manifest, split bytes, then (if needed) split tokens; read once per grid
    for config in configs:
        n = need(config)
        key = n.key
        if key.tokenizer == "gpt2" and (why := _missing("tiktoken", "tokenizer 'gpt2'")):
            raise ValueError(why)
        if ("manifest", key) not in memo:  # a changed text is fingerprinted once per grid, not per run
            memo["manifest", key] = read_manifest(text_folder(key, cache_dir)[0])
        manifest = memo["manifest", key]
        if manifest is None and key.tokenizer == "gpt2" and ("gpt2", None) not in memo:
            # a prepared corpus holds gpt2's files; without one each worker would download them
            check_gpt2_files(
                key,
                cache_dir,
                hint=f"or run `harness prepare {grid_path}` where it can (the prepared corpus keeps "
                "the files: workers never download)",
            )
            memo["gpt2", None] = True
        if manifest is None:
            if key.corpus.startswith(HUB_PREFIX):
                hint = f"run `harness prepare {grid_path}` first (workers never download)"
                if why := _missing("datasets", f"preparing corpus {key.corpus}"):
                    hint += f"; {why}"
                raise ValueError(f"corpus {key.corpus} is not prepared in {cache_dir}: {hint}")
            splits = _local_splits(n, cache_dir, memo)
            if splits is None:
                continue  # surely large enough, or unreadable: the worker reports what it cannot read
            train, val = splits
        else:
            train, val = manifest["splits"]["train"]["tokens"], manifest["splits"]["val"]["tokens"]
        epochs = (n.train_tokens - 1) / train
        if n.train_tokens > train and not (n.max_epochs and epochs <= n.max_epochs):
            raise ValueError(
                f"{config.run_id}: budget {config.budget_tokens:,} tokens exceeds the train split of "
                f"{key.corpus} ({train:,} tokens): it would take {epochs:.2f} epochs; prepare more "
                f"(`harness prepare {grid_path}`) or set max_epochs = {math.ceil(epochs)} in [train]"
            )
        if n.val_tokens > val and not n.max_epochs:
            raise ValueError(
                f"{config.run_id}: the evaluation set ({n.val_tokens - 1:,} tokens) exceeds the val split of "
                f"{key.corpus} ({val:,} tokens); prepare more (`harness prepare {grid_path}`), lower eval_tokens, "
                "or set max_epochs in [train] to evaluate on the shorter set"
            )


def check_gpt2_files(key: CorpusKey, cache_dir: Path, *, hint: str = "") -> None:
    """Refuse a ``gpt2`` key whose corpus is not prepared in ``cache_dir`` where tiktoken cannot load
    gpt2's files here (offline, no cache), before anything is written: a prepare or a run would
    otherwise fail after making its results folder and the corpus's lock.

    Raises:
        ValueError: tiktoken's reason, then ``hint`` (after ``; ``).
    """
    if key.tokenizer != "gpt2" or read_manifest(text_folder(key, cache_dir)[0]) is not None:
        return
    if why := _missing("tiktoken", "tokenizer 'gpt2'"):
        raise ValueError(why)
    try:
        GPT2Tokenizer()
    except ValueError as exc:
        raise ValueError(f"{exc}; {hint}" if hint else str(exc)) from None


def _local_splits(n: Need, cache_dir: Path, memo: dict) -> tuple[int, int] | None:
    """Train and val tokens of a local corpus that is not sharded, or None where the byte bound
    already vouches for both splits (or the corpus cannot be read: the worker says why).
    ``memo`` holds what was read per corpus key, so a grid reads each corpus at most once."""
    key = n.key
    if ("bytes", key) not in memo:
        try:
            split = split_documents(read_documents(key.corpus, max_docs=key.max_docs), key.val_fraction)
            memo["bytes", key] = tuple(
                sum(len(d.encode("utf-8")) for d in s) for s in (split.train, split.val)
            )
        except (OSError, ValueError):
            memo["bytes", key] = None
    if memo["bytes", key] is None:
        return None
    train_bytes, val_bytes = memo["bytes", key]
    if n.train_tokens <= train_bytes // MAX_TOKEN_BYTES and n.val_tokens <= val_bytes // MAX_TOKEN_BYTES:
        return None
    if ("tokens", key) not in memo:
        try:
            prepared = prepare_corpus(key, cache_dir=cache_dir)
            memo["tokens", key] = (len(prepared.tokens("train")), len(prepared.tokens("val")))
        except (OSError, ValueError):
            memo["tokens", key] = None
    return memo["tokens", key]


__all__ = ["MAX_TOKEN_BYTES", "Need", "need", "largest_needs", "check_corpora", "check_gpt2_files"]
