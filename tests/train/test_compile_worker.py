"""Compile in a long-lived worker (issue 44 row 2): every run of one ``harness work`` process is compiled.

Dynamo keeps every model's compiled entry on the shared ``forward`` code; at its recompile limit (8)
the 9th (variant, size) and every later one trained eager, silently. The worker below trains 9 tiny
variants (one past the limit, the fewest that show it) compiled (inductor on the CPU, the CUDA default's
twin) in one process: no recompile-limit message, and every result file records ``compiled = true`` with
the graphs inductor compiled for it.
The unit tests show it on small stacks at a recompile limit of 1, and that a fall-back is recorded.
``python -m pytest -q tests/train/test_compile_worker.py`` (the worker test is slow: 9 compiles).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
import warm

from harness.design.config import train_config
from harness.models import available_variants, build_model
from harness.train.compiled import CompiledForward
from harness.train.lit import LitLM

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT.parent / "shared" / "data" / "fineweb_edu_sample" / "fineweb_edu_sample10BT_fac250.jsonl"
VARIANTS = available_variants()
PAST_LIMIT = torch._dynamo.config.recompile_limit + 1  # 9 models: the first one past dynamo's limit of 8
ROLE = {"block_attnres": "parent", "rd_attnres": "treatment", "prenorm": "reference"}

GRID = """\
name = "compile_past_limit"
corpus = "{corpus}"
sizes = ["tiny"]
seeds = [0]
budgets_tokens = [128]   # one step of 2 sequences
[variants]
{variants}
[train]
vocab_size = 512
val_fraction = 0.2
batch_tokens = 128
eval_tokens = 128
compile = true
"""


def stack(n: int) -> torch.nn.Sequential:
    """``n`` linear layers: every stack shares ``Sequential.forward``, as every variant shares the model's."""
    torch.manual_seed(n)
    return torch.nn.Sequential(*[torch.nn.Linear(4, 4) for _ in range(n)])


@pytest.mark.slow
def test_each_run_compiles_past_the_recompile_limit():
    """At a recompile limit of 1, a second model of the same ``forward`` code compiles too: each run's
    CompiledForward starts from reset caches (before the fix the second ran eager)."""
    x = torch.ones(2, 4)
    with torch._dynamo.config.patch(recompile_limit=1):
        for n in (1, 2, 3):
            model = stack(n)
            forward = CompiledForward(model)
            torch.testing.assert_close(forward(x), model(x))
            assert (forward.graphs, forward.eager_frames, forward.compiled) == (1, 0, True), n


@pytest.mark.slow
def test_a_fall_back_to_eager_is_recorded_not_silent(capsys):
    """A recompile past the limit (a new batch size at a limit of 1) leaves the frame eager: the run's
    record says ``compiled = false`` and one line on stderr says why."""
    model = stack(2)
    with torch._dynamo.config.patch(recompile_limit=1):
        forward = CompiledForward(model)
        forward(torch.ones(2, 4))
        assert forward.compiled
        x = torch.ones(3, 4)  # a new batch size: a recompile, past the limit
        torch.testing.assert_close(forward(x), model(x))
    assert (forward.graphs, forward.eager_frames, forward.compiled) == (1, 1, False)
    lit = LitLM(
        build_model("prenorm", "tiny", seed=0, vocab_size=512),
        train_config("tiny"),
        total_steps=1,
        batch_tokens=128,
        token_bytes=torch.ones(512, dtype=torch.long),
        compile=True,
    )
    assert lit.compile_record() == {"compiled": False, "compile_graphs": None}  # never compiled: eager
    object.__setattr__(lit, "_compiled", forward)
    assert lit.compile_record() == {"compiled": False, "compile_graphs": 1}
    err = capsys.readouterr().err.strip().splitlines()
    line = "warning: torch.compile fell back to eager in this run (1 graphs compiled, 1 frames left to eager)"
    assert err[-1].startswith(line), err


@pytest.mark.slow
def test_one_worker_trains_one_configuration_past_the_recompile_limit_compiled(tmp_path):
    assert len(VARIANTS) >= PAST_LIMIT, VARIANTS
    corpus = tmp_path / "small.jsonl"  # the first 20 documents of the real sample: a fast BPE
    corpus.write_text("".join(SAMPLE.read_text().splitlines(keepends=True)[:20]))
    variants = "\n".join(f'{v} = "{ROLE.get(v, "control")}"' for v in VARIANTS[:PAST_LIMIT])
    grid = tmp_path / "g.toml"
    grid.write_text(GRID.format(corpus=corpus, variants=variants))
    results = tmp_path / "r"
    harness = [sys.executable, "-m", "harness"]
    queued = warm.run(
        [*harness, "queue", str(grid), "--results", str(results)], capture_output=True, text=True
    )
    assert queued.returncode == 0, queued.stderr
    work = warm.run(
        [*harness, "work", "--results", str(results), "--accelerator", "cpu", "--threads", "1"],
        capture_output=True,
        text=True,
    )
    assert work.returncode == 0, work.stderr[-3000:]
    log = work.stderr[-3000:]
    assert "recompile_limit" not in work.stderr and "fell back to eager" not in work.stderr, log
    runs = [json.loads(p.read_text())["run"] for p in sorted((results / "runs").glob("*.json"))]
    assert sorted(r["variant"] for r in runs) == sorted(VARIANTS[:PAST_LIMIT])
    assert [r["status"] for r in runs] == ["done"] * PAST_LIMIT
    assert all(r["compiled"] is True and r["compile_graphs"] >= 1 for r in runs), [
        (r["variant"], r.get("compiled"), r.get("compile_graphs")) for r in runs
    ]
