"""A grid file (DESIGN section 1.2): what a study asks for, before any run is queued.

* :mod:`~harness.scheduling.grids.grid` -- read a grid TOML and expand it into
  :class:`~harness.design.config.RunConfig` s in queue order;
* :mod:`~harness.scheduling.grids.checks` -- the checks of each of its tables (keys, lists, roles,
  pairing, ``[train]``, ``[tuned]``, ``[schedule]``);
* :mod:`~harness.scheduling.grids.edit` -- write tuned settings into a grid file, keeping its layout;
* :mod:`~harness.scheduling.grids.corpus_need` -- what a grid needs of its corpus, refused at queue time
  when the corpus cannot feed it;
* :mod:`~harness.scheduling.grids.plan_seeds` -- the seeds its analysis plan lets a cell have: past
  ``max_seeds`` refused, past the last look said.

Nothing here touches the queue's storage or trains a run; where a grid's corpus is, and whether it is
the grid's, is :mod:`harness.corpus.locate`'s.
"""
