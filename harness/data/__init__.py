"""Data: a corpus's documents -> tokenizer -> token shards -> deterministic batches.

The first stage of a run (DESIGN sections 1.1 and 4). Knows nothing about models or training; what a
corpus is, its reading, fingerprint, split and key are :mod:`harness.corpus`'s.

* :mod:`harness.data.tokenizer` -- byte-level BPE trained on the training split, or GPT-2;
* :mod:`harness.data.shards` -- the one corpus format: a corpus streamed (through a process pool
  for ``harness prepare``; :mod:`~harness.data.shard_pool`, :mod:`~harness.data.shard_writer`,
  :mod:`~harness.data.shard_progress` beside it) into fixed-size token shards with a manifest, resumable;
* :mod:`harness.data.shard_reader` -- a split's shards read as one token array;
* :mod:`harness.data.prepared` -- :func:`prepare_corpus`: a run's corpus found, converted or built
  as shards, and :class:`PreparedCorpus`, its reader (each split one token array);
* :mod:`harness.data.legacy_layout` -- the single-file layout the shards replaced, converted in place;
* :mod:`harness.data.unigram` -- the unigram plateau: the validation NLL of token frequencies alone;
* :mod:`harness.data.datamodule` -- the Lightning data module: training batches as a pure
  function of (corpus, context, batch size, seed, step), and the fixed validation windows.
"""

from harness.data.prepared import PreparedCorpus, cache_dir, prepare_corpus
from harness.data.tokenizer import token_dtype

__all__ = ["PreparedCorpus", "cache_dir", "prepare_corpus", "token_dtype"]
