"""Simulated studies and synthetic frames: the report's decision rules checked by simulation (DESIGN sections 6, 8, 12).

* :mod:`~reports.simulation.studies` -- simulated studies through :mod:`reports.stats.decisions`
  (``python -m reports.simulation.studies``); the tables it prints: :mod:`~reports.simulation.rules`
  (the decision rules' rates) and :mod:`~reports.simulation.edges` (their edge cases);
* :mod:`~reports.simulation.factorial` -- simulated 2 x 2 factorial studies
  (``python -m reports.simulation.factorial``);
* :mod:`~reports.simulation.synthetic` -- synthetic results frames for tests and demos.

Nothing here reads a results store or writes a report: it calls the report's own statistics
(:mod:`reports.stats`) and never :mod:`reports.render` or :mod:`reports.build`.
"""
