"""The frozen, paired protocol (DESIGN section 4): run identity, protocol hash, code version.

A *protocol* is everything that must match for two runs to be paired: data (corpus
fingerprint, tokenizer, split), size preset and model shape, optimiser and schedule,
budget in tokens, evaluation set, numeric precision and the torch version. Variant and
seed are NOT part of it: pairs differ exactly there. ``protocol_hash`` is the sha256 of
the canonical JSON of :func:`protocol_dict`.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import subprocess
from dataclasses import asdict
from pathlib import Path

import torch

from harness.config import ModelConfig, TrainConfig

PROTOCOL_VERSION = 1
# Execution details that do not change what is computed (or only through kernel choice).
NON_PROTOCOL_TRAIN_FIELDS = ("compile", "checkpoint_every_tokens", "eval_every_tokens")


def safe_name(run_id: str) -> str:
    """A file-system-safe folder name for ``run_id`` (readable part + short hash, no collisions)."""
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", run_id)[:120]
    return f"{readable}-{hashlib.sha256(run_id.encode()).hexdigest()[:8]}"


def protocol_dict(*, data_meta: dict, size: str, model: ModelConfig, train: TrainConfig,
                  budget_tokens: int, eval_windows: int, precision: str) -> dict:
    """The protocol of a run as a JSON-able dict (see module docstring)."""
    train_fields = {k: v for k, v in train.to_dict().items() if k not in NON_PROTOCOL_TRAIN_FIELDS}
    train_fields["precision"] = precision  # resolved ('auto' -> the real one)
    return {
        "version": PROTOCOL_VERSION,
        "data": data_meta,
        "size": size,
        "model": asdict(model),
        "train": train_fields,
        "budget_tokens": int(budget_tokens),
        "eval": {"windows": int(eval_windows), "context": model.context},
        "torch": torch.__version__.split("+")[0],
    }


def protocol_hash(protocol: dict) -> str:
    """sha256 (hex) of the canonical JSON of a protocol dict."""
    blob = json.dumps(protocol, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


@functools.cache
def code_version() -> str:
    """Git commit of the harness source tree, with ``-dirty`` if tracked files changed
    (``unknown`` outside a git checkout)."""
    root = Path(__file__).resolve().parents[1]
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                                text=True, check=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, check=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return commit + ("-dirty" if dirty else "")
