"""Paired significance reports over matched seeds (DESIGN section 6).

Modules, in the order data flows through them:

* :mod:`harness.analysis_plan`: the grid's ``[analysis]`` plan (checked at queue time, stored with the runs);
* :mod:`reports.stats.pairing`: pair runs by seed and protocol hash; account for left-out runs;
* :mod:`reports.stats.paired_tests`: exact tests on paired differences (t, sign-flip, Wilcoxon, sign);
* :mod:`reports.stats.decisions`: the verdict rules (headline gatekeeper, reproduction contrasts,
  Holm, Fieller), as array functions shared by the report and the simulations;
* :mod:`reports.stats.looks`: sequential looks, the alpha spent at each, the sequential p (DESIGN 8);
* :mod:`reports.stats.power`: MDE, power and seeds needed for a planned effect (noncentral t), also at looks;
* :mod:`reports.stats.mixed`: the mixed-model cross-check;
* :mod:`reports.stats.progress`: the grid status, the queue's view of the runs next to the store's;
* :mod:`reports.stats.budget`: gain vs budget, the slope of d on log2(budget) (DESIGN 8);
* :mod:`reports.stats.analysis`: one grid's results as frozen dataclasses; ``stats.csv``;
* :mod:`reports.render.figures`: PNG figures (training and validation curves, paired differences, gain
  fractions) and :mod:`reports.render.routing_figures` (routing heatmaps over training);
* :mod:`reports.render.fmt` (number formats), :mod:`reports.render.summary` (grid status, verdict banners and
  chips, how to read), :mod:`reports.render.sections` (the sections) and :mod:`reports.render.blocks` (Markdown /
  HTML writers);
* :mod:`reports.build`: read the store's frames, call the above, write the files;
* :mod:`reports.stats.seed_planning`: ``harness plan``'s rows (pilot sds, MDE, seeds needed, cost);
* :mod:`reports.stats.topup`: which cells are open and which seeds ``harness topup`` adds;
* :mod:`reports.simulate`: simulated studies through :mod:`reports.stats.decisions` (``python -m reports.simulate``);
* :mod:`reports.synthetic`: synthetic frames for tests and demos.

Depends on ``db`` and, of ``harness``, only on its two plain leaves: :mod:`harness.terms` (roles,
config differences) and :mod:`harness.files` (atomic writes); ``harness.scheduling.grid`` imports
:mod:`harness.analysis_plan`.
"""
