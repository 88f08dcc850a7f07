"""RD-AttnRes ablation and controls harness.

Subpackages: ``harness.models`` (decoder family and depth routing, plain PyTorch),
``harness.data`` (corpus ingestion and tokenisation), ``harness.lit`` (Lightning
wrappers), ``harness.runner`` (one run end to end), ``harness.queue`` (Optuna-backed
run queue), ``harness.cli`` (the ``harness`` command). Top-level siblings:
``controls`` (control-variant specs), ``db`` (DuckDB store), ``reports`` (statistics).
"""

__version__ = "0.1.0"
