"""Simulated studies and synthetic frames: the report's decision rules checked by simulation (DESIGN sections 6, 8, 12, 13).

* :mod:`~harness.report.simulation.studies` -- simulated studies through :mod:`harness.report.stats.decisions`
  (``python -m harness.report.simulation.studies``); the tables it prints: :mod:`~harness.report.simulation.rules`
  (the decision rules' rates), :mod:`~harness.report.simulation.edges` (their edge cases), and the
  provenance and retrain tables below;
* :mod:`~harness.report.simulation.factorial` -- simulated 2 x 2 factorial studies
  (``python -m harness.report.simulation.factorial``);
* :mod:`~harness.report.simulation.provenance` -- the Provenance section's tests simulated (DESIGN 13):
  the classes' agreement, balance, verdicts within the largest class;
* :mod:`~harness.report.simulation.retrain` -- the re-train check simulated: how often each of
  its answers is wrong (DESIGN 13);
* :mod:`~harness.report.simulation.multiplier` -- the compute multiplier simulated: its false positives under no
  effect and its interval's coverage (DESIGN 14; ``python -m harness.report.simulation.multiplier``);
* :mod:`~harness.report.simulation.synthetic` -- synthetic results frames for tests and demos.

Nothing here reads a results store or writes a report: it calls the report's own statistics
(:mod:`harness.report.stats`) and never :mod:`harness.report.render` or :mod:`harness.report.build`.
"""
