"""Corpus: what a corpus is and where it is, before any token exists (DESIGN sections 1.1 and 4).

Below :mod:`harness.data` (which tokenizes and shards what these modules read) and above
:mod:`harness.common`; imports no other stage.

* :mod:`harness.corpus.spec` -- what a corpus reference is (a path, folder, glob, ``hf:``,
  ``corpus-sha256:<fingerprint>:<name>``), the one precedence of ``--corpus`` / ``$HARNESS_CORPUS`` /
  the grid's ``corpus``, and the one path check;
* :mod:`harness.corpus.readers` -- one streaming reader per format (JSONL, Parquet, ``.txt``, the hub):
  a corpus's documents in order;
* :mod:`harness.corpus.probe` -- the queue-time look that a local corpus can be read and holds text;
* :mod:`harness.corpus.fingerprint` -- a corpus is its content: the document fingerprint;
* :mod:`harness.corpus.split` -- the document-level train/validation split;
* :mod:`harness.corpus.key` -- :class:`~harness.corpus.key.CorpusKey` (what a run says about its corpus),
  the shard folder it names, the one vocabulary rule;
* :mod:`harness.corpus.cached` -- which shard folder holds a key's text as it is now (a corpus edited in
  place is never read from the old text's cache), and a key's fingerprint through that check;
* :mod:`harness.corpus.locate` -- where a grid's corpus is on this machine, checked by its fingerprint
  (``harness queue`` / ``topup`` / ``import`` / ``launch`` / ``work --corpus``, and each worker's claim).
"""
