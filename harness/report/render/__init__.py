"""The paired report for people: Markdown, one self-contained HTML page, PNG figures.

Everything here reads the result objects of :mod:`harness.report.stats` (a
:class:`~harness.report.stats.results.ReportStats`) and the store's frames for the figures; nothing here
computes a statistic, and nothing in :mod:`harness.report.stats` imports this package.

* :mod:`~harness.report.render.fmt` -- number formats;
* :mod:`~harness.report.render.blocks` -- the Markdown / HTML writers;
* :mod:`~harness.report.render.sentences` -- sentences about one result (headline, control, A/A check);
* :mod:`~harness.report.render.summary` -- the top of the report (grid status, verdict banners and
  chips, how to read);
* :mod:`~harness.report.render.sections` -- the report in reading order, ``render_markdown``,
  ``render_html`` and the terminal summary; its sections:
* :mod:`~harness.report.render.decision_sections` -- plan, Step 1, Step 2;
* :mod:`~harness.report.render.evidence_sections` -- A/A, divergence, descriptives, mixed model, gain
  vs budget;
* :mod:`~harness.report.render.methods_section` -- Methods;
* :mod:`~harness.report.render.robustness_section` -- the ``[tuned]`` robustness section;
* :mod:`~harness.report.render.axis_section` -- a grid with ``[axes]``: the Holm family's size, the gain per axis
  value with its interval, the trend and whether the verdict holds at every value, some or none;
* :mod:`~harness.report.render.factorial_section` -- the factorial section and its interaction plot
  (DESIGN 12);
* :mod:`~harness.report.render.followup_section` -- the proposed factorial follow-up (DESIGN 12);
* :mod:`~harness.report.render.provenance_section` -- where the runs ran, its one-line banner where
  hardware classes mix, the variant x hardware tables (DESIGN 13);
* :mod:`~harness.report.render.plateau_section` -- each cell's final NLL next to its unigram plateau;
* :mod:`~harness.report.render.multiplier_section` -- does the gain pay for its cost: the compute and time
  multipliers, their verdict words and each cell's figure of the parent's curves (DESIGN 14);
* :mod:`~harness.report.render.figures`, :mod:`~harness.report.render.routing_figures` -- PNG figures;
  :mod:`~harness.report.render.figure_set` -- every figure of a report, in order;
* :mod:`~harness.report.render.plan_table` -- ``harness plan``'s text;
* :mod:`~harness.report.render.topup_lines` -- ``harness topup``'s lines;
* :mod:`~harness.report.render.retrain_lines` -- ``harness retrain``'s output: the re-train check
  as Markdown, CSV rows and JSON.
"""
