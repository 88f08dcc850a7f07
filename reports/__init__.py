"""Paired significance reports over matched seeds (DESIGN section 6).

Modules, in the order data flows through them:

* :mod:`reports.pairing`: pair runs by seed and protocol hash; account for left-out runs;
* :mod:`reports.stats`: paired tests, Holm, TOST, verdicts, A/A check, mixed model;
* :mod:`reports.figures`: PNG figures (validation curves, paired differences, routing);
* :mod:`reports.render`: Markdown and self-contained HTML (formats, never computes);
* :mod:`reports.build`: read the store's frames, call the above, write the files;
* :mod:`reports.synthetic`: synthetic frames for tests and demos.

Depends on ``db`` only (never on ``harness.models``).
"""
