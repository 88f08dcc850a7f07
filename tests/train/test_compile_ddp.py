"""Compile under DDP (issue 44 row 8): one compiled graph per run on 2 gloo ranks, not one per gradient bucket.

The compiled model runs inside DDP's forward (Lightning wraps the Lightning module). Dynamo's
default there (``optimize_ddp = "ddp_optimizer"``) splits the graph at every gradient bucket (DDP's
first bucket is 1 MB, the others 25 MB): the ``tiny`` model at a 4,096-token vocabulary (1.4 MB of float32
parameters, the fewest layers past one bucket) makes 2 pieces, 120m's ~19. The harness compiles it whole
(:data:`harness.train.compiled.DDP_MODE`, measured in docs/paper-scale.md), so a 2-rank run records exactly 1
graph.
``python -m pytest -q tests/train/test_compile_ddp.py`` (slow: 2 ranks compile).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch.distributed as dist

from harness.design.config import RunConfig
from harness.models import build_model
from harness.train import train_run
from harness.train.execution import ExecutionSettings

SAMPLE = Path(__file__).resolve().parents[3] / "shared/data/fineweb_edu_sample"
# tiny's 2 layers (compiled faster than mini's 4) at 1.4 MB of weights: past DDP's first bucket
VOCAB = 4096


@pytest.mark.slow
def test_a_compiled_run_on_two_gloo_ranks_is_one_graph(tmp_path):
    model = build_model("rd_attnres", "tiny", seed=0, vocab_size=VOCAB)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    assert weights > dist._DEFAULT_FIRST_BUCKET_BYTES  # 2 buckets: dynamo's DDP optimiser would make 2 graphs
    train = {"vocab_size": VOCAB, "batch_tokens": 256, "eval_tokens": 128, "compile": True}
    config = RunConfig.adhoc("rd_attnres", "tiny", 0, 256, str(SAMPLE), train=train)  # one step
    settings = ExecutionSettings(progress=False, accelerator="cpu", devices=2, threads=1)
    assert train_run(config, tmp_path / "r", settings) == "done"
    (result,) = (tmp_path / "r" / "runs").glob("*.json")
    run = json.loads(result.read_text())["run"]
    assert (run["world_size"], run["compiled"], run["compile_graphs"]) == (2, True, 1), run
