"""Paired significance reports over matched seeds (DESIGN section 6).

Three packages by job, imports pointing one way (``build`` -> ``render`` -> ``stats``; ``simulation``
-> ``stats``), and at the top only the entry points:

* :mod:`harness.report.stats`: computing only: pairing, paired tests, decisions, looks, power, the result
  objects and ``stats.csv`` (its docstring lists the steps to add a statistic);
* :mod:`harness.report.render`: Markdown, HTML and figures, reading only the result objects;
* :mod:`harness.report.simulation`: simulated studies through the report's own decision functions
  (``python -m harness.report.simulation.studies``) and synthetic frames for tests and demos;
* :mod:`harness.report.build`: the entry: read the store's frames, compute, render, write the files;
* :mod:`harness.report.api`: the notebook entry (``harness.results`` / ``harness.analyze``);
* :mod:`harness.report.followup`: the follow-up factorial grid a report proposes (``harness followup``).

The checked-in sample reports are in ``reports/`` (not in the package). Of ``harness`` it
imports only plain leaves: :mod:`harness.common.terms` (roles, config differences),
:mod:`harness.common.files` (atomic writes) and :mod:`harness.design.analysis_plan` (the grid's ``[analysis]``
table, which the grid parser reads too).
"""
