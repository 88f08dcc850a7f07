"""Data: corpus text -> document-level split -> tokenizer -> token files -> deterministic batches.

The first stage of a run (DESIGN sections 1.1 and 4). Knows nothing about models or training.

* :mod:`harness.data.corpus` -- a corpus spec (file, folder, glob, ``hf:``) -> ordered
  documents, their fingerprint and the order-independent train/validation split;
* :mod:`harness.data.tokenizer` -- byte-level BPE trained on the training split, or GPT-2;
* :mod:`harness.data.corpus_key` -- :class:`CorpusKey`, what a run says about its corpus (the one
  vocabulary rule, the shard folder it names);
* :mod:`harness.data.shards` -- the one corpus format: a corpus streamed (through a process pool
  for ``harness prepare``) into fixed-size token shards with a manifest, resumable;
* :mod:`harness.data.prepared` -- :func:`prepare_corpus`: a run's corpus found, converted or built
  as shards, and :class:`PreparedCorpus`, its reader (each split one token array);
* :mod:`harness.data.legacy_corpus` -- the single-file layout the shards replaced, converted in place;
* :mod:`harness.data.datamodule` -- the Lightning data module: training batches as a pure
  function of (corpus, context, batch size, seed, step), and the fixed validation windows.
"""

from harness.data.prepared import PreparedCorpus, cache_dir, prepare_corpus
from harness.data.tokenizer import token_dtype

__all__ = ["PreparedCorpus", "cache_dir", "prepare_corpus", "token_dtype"]
