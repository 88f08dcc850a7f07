"""Paired significance reports over matched seeds (DESIGN section 6).

Two packages by job, imports pointing one way (``build`` -> ``render`` -> ``stats``):

* :mod:`reports.stats`: computing only: pairing, paired tests, decisions, looks, power, the result
  objects and ``stats.csv`` (its docstring lists the steps to add a statistic);
* :mod:`reports.render`: Markdown, HTML and figures, reading only the result objects;
* :mod:`reports.build`: the entry: read the store's frames, compute, render, write the files;
* :mod:`reports.simulate`: simulated studies through :mod:`reports.stats.decisions`
  (``python -m reports.simulate``; the tables: :mod:`reports.simulate_rules`, :mod:`reports.simulate_edges`); :mod:`reports.synthetic`: synthetic frames for tests and demos.

The checked-in sample reports are in ``docs/reports/`` (not in the package). Of ``harness`` it
imports only plain leaves: :mod:`harness.common.terms` (roles, config differences),
:mod:`harness.common.files` (atomic writes) and :mod:`harness.design.analysis_plan` (the grid's ``[analysis]``
table, which the grid parser reads too).
"""
