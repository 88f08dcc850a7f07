"""The frozen, paired protocol (DESIGN section 4): the protocol hash and the code version.

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
import subprocess
from dataclasses import asdict
from pathlib import Path

import torch

from harness.common.terms import UNKNOWN
from harness.design.config import RunConfig
from harness.design.settings import TRAIN_SETTINGS
from harness.models.sizes import ModelConfig

PROTOCOL_VERSION = 1
# TrainConfig's intervals that do not change what is computed: when a checkpoint is written and the
# validation curve is sampled (declared ``protocol=False``, harness.design.settings). The execution settings
# (compile, micro-batch size, trackers: DESIGN section 11) are not TrainConfig fields.
NON_PROTOCOL_TRAIN_FIELDS = tuple(s.name for s in TRAIN_SETTINGS if not s.protocol)


def protocol_dict(
    config: RunConfig, *, data_meta: dict, model: ModelConfig, eval_windows: int, precision: str
) -> dict:
    """The protocol of a run as a JSON-able dict (see the module docstring).

    Args:
        config: the run (its size, training settings and budget enter; its variant, seed,
            role, grid and analysis plan do not).
        data_meta: :attr:`harness.data.PreparedCorpus.protocol_meta` (what the text is).
        model: the built model's :class:`~harness.models.sizes.ModelConfig`.
        eval_windows: validation windows of ``model.context + 1`` tokens.
        precision: the concrete Lightning precision (``auto`` resolved).
    """
    train = config.train_config()
    train_fields = {k: v for k, v in train.to_dict().items() if k not in NON_PROTOCOL_TRAIN_FIELDS}
    train_fields["precision"] = precision  # resolved ('auto' -> the real one)
    if not train_fields.get("max_epochs"):  # unset: out of the hash, so hashes from before it existed hold
        train_fields.pop("max_epochs", None)
    return {
        "version": PROTOCOL_VERSION,
        "data": data_meta,
        "size": config.size,
        "model": asdict(model),
        "train": train_fields,
        "budget_tokens": int(config.budget_tokens),
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
    root = Path(__file__).resolve().parents[2]  # the repository (harness/train/protocol.py)
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return UNKNOWN
    return commit + ("-dirty" if dirty else "")
