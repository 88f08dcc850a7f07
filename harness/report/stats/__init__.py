"""The paired report's statistics (DESIGN sections 6 and 8): computing only, nothing here renders.

Modules, in the order data flows through them (the analysis plan itself, the grid's ``[analysis]``
table, is :mod:`harness.design.analysis_plan`, shared with the grid parser):

* :mod:`~harness.report.stats.floors`: the numerical floor: no verdict rests on differences float rounding
  can make;
* :mod:`~harness.report.stats.pairing`: pair runs by seed and protocol hash; account for left-out runs;
  :func:`~harness.report.stats.pairing.of_grid` is the one grid filter;
* :mod:`~harness.report.stats.paired_tests`: exact tests on paired differences (t, sign-flip, Wilcoxon, sign);
* :mod:`~harness.report.stats.descriptives`: n, mean, sd, interval and the tests' p of one set of differences;
* :mod:`~harness.report.stats.divergence`: a diverged seed is the worst outcome, not a missing value
  (worst-case imputation);
* :mod:`~harness.report.stats.decisions`: the verdict rules (headline gatekeeper, reproduction contrasts,
  Holm, Fieller), as array functions shared by the report and the simulations;
* :mod:`~harness.report.stats.looks`: sequential looks, the alpha spent at each, the sequential p (DESIGN 8);
  :mod:`~harness.report.stats.sequential`: one comparison's test at the look reached;
* :mod:`~harness.report.stats.power`: MDE, power and seeds needed for a planned effect (noncentral t);
* :mod:`~harness.report.stats.mixed`, :mod:`~harness.report.stats.budget`, :mod:`~harness.report.stats.degeneracy`,
  :mod:`~harness.report.stats.robustness`: the mixed-model cross-check, gain vs budget, degenerate
  controls, the ``[tuned]`` robustness row;
* :mod:`~harness.report.stats.axes`: a grid with ``[axes]``: the headline gain at every value of an axis, the
  descriptive trend and where the verdict holds (DESIGN 1.2);
* :mod:`~harness.report.stats.factorial`: a ``[factorial]`` grid's simple and main effects and interaction,
  paired over seeds, Holm over the factorial family, verdict sentences (DESIGN 12);
* :mod:`~harness.report.stats.progress`: the grid status, the queue's view of the runs next to the store's;
* :mod:`~harness.report.stats.plateau`: how far below the unigram plateau each cell's runs end (descriptive);
* :mod:`~harness.report.stats.stats_table`: ``stats.csv``, its column contract and one row per comparison;
* :mod:`~harness.report.stats.results`: the result objects (frozen dataclasses built by keyword);
  :meth:`~harness.report.stats.results.ReportStats.to_frame` is ``stats.csv``;
* :mod:`~harness.report.stats.headline_tests` (Step 1: the headline per cell, one family over the cells),
  :mod:`~harness.report.stats.control_assessment` (Step 2: the controls' reproduction contrasts),
  :mod:`~harness.report.stats.aa_checks` (the A/A check);
* :mod:`~harness.report.stats.analysis`: :func:`~harness.report.stats.analysis.analyze`, one grid's
  :class:`~harness.report.stats.results.ReportStats`, in short named steps;
* :mod:`~harness.report.stats.leave_one_out`: whether an established verdict survives dropping any one seed
  (descriptive);
* :mod:`~harness.report.stats.multiplier`: does the gain pay for its cost: the compute multiplier and the time
  multiplier per hardware class, per seed and per comparison (DESIGN 14), with its arithmetic as functions of
  arrays in :mod:`~harness.report.stats.multiplier_math`;
* :mod:`~harness.report.stats.class_tests`: the tests over hardware classes as functions of arrays: the
  classes' agreement (Welch's F, its permutation p, its MDE) and the exact balance test of straddling pairs;
* :mod:`~harness.report.stats.provenance`: where the runs ran (DESIGN 13): hardware classes and commits per
  variant, balance, straddling pairs, each class's paired differences and their agreement, every verdict
  within the largest class (its re-analysis passed in by :func:`harness.report.build.compute_stats`);
* :mod:`~harness.report.stats.retrain_check`: the re-train check, an archive's runs re-trained
  elsewhere against their archived NLL (DESIGN 13; ``harness retrain``);
* :mod:`~harness.report.stats.seed_planning` (``harness plan``'s rows) and :mod:`~harness.report.stats.topup`
  (which cells ``harness topup`` tops up), both reading a ``ReportStats``.

Imports point down this list and never to :mod:`harness.report.render` or :mod:`harness.report.build`
(``tests/tooling/test_architecture.py`` checks it).

Adding a statistic
------------------
1. **Compute** it in the module of its kind, as a function of arrays or frames with a numpy-style
   docstring (null hypothesis, sidedness, units, reference): a test on paired differences in
   :mod:`~harness.report.stats.paired_tests`, a verdict rule in :mod:`~harness.report.stats.decisions`, a
   descriptive in :mod:`~harness.report.stats.descriptives`. Call it from the step of
   :mod:`~harness.report.stats.analysis` that builds the object it belongs to (``describe``,
   :mod:`~harness.report.stats.headline_tests`' ``_headline``, :mod:`~harness.report.stats.control_assessment`'s
   ``_assessment``, :mod:`~harness.report.stats.aa_checks`' ``_aa_check``).
2. **Result field**: add a named field to that frozen dataclass in :mod:`~harness.report.stats.results`
   (:class:`~harness.report.stats.results.Descriptives`, ``Headline``, ``ControlAssessment``, ...) and
   pass it by keyword where the object is built.
3. **stats.csv column**: append its name to ``EXTRA_COLUMNS`` (``CSV_COLUMNS`` is DESIGN 6's
   contract: add, never rename), both in :mod:`~harness.report.stats.stats_table`, and fill it there
   (``comparison_row`` or the verdict's ``_*_columns``).
4. **Rendering**: word it in :mod:`harness.report.render` (a table column or sentence in
   :mod:`harness.report.render.decision_sections` / :mod:`harness.report.render.evidence_sections` /
   :mod:`harness.report.render.sentences`, a figure in
   :mod:`harness.report.render.figures`); rendering reads the field, it never recomputes.
5. **The independent test**: in ``tests/stats/test_stats.py`` (or the area's test file), assert the value
   against an independent scipy/statsmodels computation, or frozen numbers from one, and assert
   the new ``stats.csv`` column; a test must be able to fail.
"""
