"""What every stage shares: atomic file writes, the terminal, Ctrl-C, the shared vocabulary
(roles, run ids), fault classification and a run's live progress. Imports nothing from harness."""
