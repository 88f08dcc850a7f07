"""Paired significance reports over matched seeds (DESIGN section 6).

Modules, in the order data flows through them:

* :mod:`reports.plan`: the grid's ``[analysis]`` plan (checked at queue time, stored with the runs);
* :mod:`reports.pairing`: pair runs by seed and protocol hash; account for left-out runs;
* :mod:`reports.paired`: exact tests on paired differences (t, sign-flip, Wilcoxon, sign);
* :mod:`reports.decisions`: the verdict rules (headline gatekeeper, reproduction contrasts,
  Holm, Fieller), as array functions shared by the report and the simulations;
* :mod:`reports.looks`: sequential looks, the alpha spent at each, the sequential p (DESIGN 8);
* :mod:`reports.power`: MDE, power and seeds needed for a planned effect (noncentral t), also at looks;
* :mod:`reports.mixed`: the mixed-model cross-check;
* :mod:`reports.progress`: the grid status, the queue's view of the runs next to the store's;
* :mod:`reports.budget`: gain vs budget, the slope of d on log2(budget) (DESIGN 8);
* :mod:`reports.stats`: one grid's results as frozen dataclasses; ``stats.csv``;
* :mod:`reports.figures`: PNG figures (training and validation curves, paired differences, gain
  fractions) and :mod:`reports.routing_figures` (routing heatmaps over training);
* :mod:`reports.fmt` (number formats), :mod:`reports.summary` (grid status, verdict banners and
  chips, how to read), :mod:`reports.render` (the sections) and :mod:`reports.blocks` (Markdown /
  HTML writers);
* :mod:`reports.build`: read the store's frames, call the above, write the files;
* :mod:`reports.planning`: ``harness plan``'s rows (pilot sds, MDE, seeds needed, cost);
* :mod:`reports.topup`: which cells are open and which seeds ``harness topup`` adds;
* :mod:`reports.simulate`: simulated studies through :mod:`reports.decisions` (``python -m reports.simulate``);
* :mod:`reports.synthetic`: synthetic frames for tests and demos.

Depends on ``db`` and, of ``harness``, only on its two plain leaves: :mod:`harness.terms` (roles,
config differences) and :mod:`harness.files` (atomic writes); ``harness.scheduling.grid`` imports
:mod:`reports.plan`.
"""
