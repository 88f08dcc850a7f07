"""The paired report for people: Markdown, one self-contained HTML page, PNG figures.

Everything here reads the result objects of :mod:`reports.stats` (a
:class:`~reports.stats.results.ReportStats`) and the store's frames for the figures; nothing here
computes a statistic, and nothing in :mod:`reports.stats` imports this package.

* :mod:`~reports.render.fmt`: number formats; :mod:`~reports.render.blocks`: the Markdown / HTML writers;
* :mod:`~reports.render.sentences`: sentences about one result (headline, control, A/A check);
* :mod:`~reports.render.summary`: the top of the report (grid status, verdict banners and chips, how to read);
* :mod:`~reports.render.sections`: the report in reading order, ``render_markdown``, ``render_html`` and
  the terminal summary; :mod:`~reports.render.decision_sections` (plan, Step 1, Step 2),
  :mod:`~reports.render.evidence_sections` (A/A, divergence, descriptives, mixed model, gain vs budget),
  :mod:`~reports.render.methods_section` (Methods); :mod:`~reports.render.robustness_section`: the ``[tuned]`` robustness section;
  :mod:`~reports.render.factorial_section`: the factorial section and its interaction plot (DESIGN 12);
  :mod:`~reports.render.provenance_section`: where the runs ran, its one-line banner where hardware classes
  mix, the variant x hardware tables (DESIGN 13);
* :mod:`~reports.render.figures`, :mod:`~reports.render.routing_figures`: PNG figures;
  :mod:`~reports.render.figure_set`: every figure of a report, in order;
* :mod:`~reports.render.plan_table` (``harness plan``'s text), :mod:`~reports.render.topup_lines`
  (``harness topup``'s lines).
"""
