"""The bench times the step training runs (issue 37 part 5, DESIGN sections 7 and 11).

Its module is moved to the device before ``configure_optimizers`` builds the optimiser, so the
optimiser is the one a training run builds there (same class, ``fused``/``foreach`` flags and
parameter groups: checked against a real run's, with CPU defaults and with CUDA's,
``$HARNESS_CUDA_DEFAULTS=1``); a timed step is a global batch of micro-batches with one clip
and one AdamW step; tokens/s and MFU count the whole global batch, and the time per
micro-batch is reported beside it. On a CPU the fused optimiser is the CPU one: that the bench
moves its module to CUDA is seen only on a GPU (``scripts/gpu_check.sh``).
``python -m pytest -q tests/bench/test_bench_step.py``.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
import torch

from harness.bench import BenchConfig, StepArm, assemble
from harness.design.config import RunConfig
from harness.train import train_run
from harness.train.execution import ExecutionSettings
from harness.train.lit import LitLM
from harness.train.trainer import CUDA_DEFAULTS_ENV

SAMPLE = Path(__file__).resolve().parents[3] / "shared/data/fineweb_edu_sample"
CPU = torch.device("cpu")


def groups_of(opt: torch.optim.Optimizer) -> list[tuple]:
    """What an optimiser is, compared across builds: its class, flags, and per group the settings
    and the parameters' shapes (the tensors themselves belong to different models)."""
    flags = (type(opt).__name__, opt.defaults["fused"], opt.defaults["foreach"])
    groups = [
        (g["lr"], g["betas"], g["weight_decay"], [tuple(p.shape) for p in g["params"]])
        for g in opt.param_groups
    ]
    return [flags, *groups]


def arm(micro_batches: int = 1, seed: int = 0) -> StepArm:
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, 512, (4, 65), generator=g)
    cfg = BenchConfig(size="tiny", variants=("rd_attnres",), threads=1)
    return StepArm(
        "rd_attnres", cfg, CPU, (tokens[:, :-1], tokens[:, 1:]), 512, 10, micro_batches=micro_batches
    )


@pytest.mark.parametrize("cuda_defaults", ["0", "1"])
def test_the_bench_optimiser_is_the_one_training_builds(tmp_path, monkeypatch, cuda_defaults):
    """A one-step tiny run's optimiser (as Lightning's fit built it) against the bench arm's."""
    if not SAMPLE.is_dir():
        pytest.fail(f"sample corpus {SAMPLE} absent")
    monkeypatch.setenv(CUDA_DEFAULTS_ENV, cuda_defaults)
    built = []
    configure = LitLM.configure_optimizers

    def keep(self):
        out = configure(self)
        built.append(out["optimizer"])
        return out

    monkeypatch.setattr(LitLM, "configure_optimizers", keep)
    train = {
        "vocab_size": 512,
        "batch_tokens": 1024,
        "eval_tokens": 1024,
        "compile": False,
        "precision": "32-true",
    }
    config = RunConfig.adhoc("rd_attnres", "tiny", 0, 1024, str(SAMPLE), train=train)
    assert (
        train_run(config, tmp_path / "results", ExecutionSettings(progress=False, accelerator="cpu"))
        == "done"
    )
    bench = arm()
    (run_opt,) = [o for o in built if o is not bench.opt]
    assert groups_of(bench.opt) == groups_of(run_opt)
    fused = cuda_defaults == "1"
    assert groups_of(run_opt)[0] == ("AdamW", True if fused else None, None if fused else False)
    assert [g[2] for g in groups_of(run_opt)[1:]] == [0.1, 0.0]  # matrices decayed, 1-D tensors not
    assert bench.lit.device == bench.device == CPU


def test_a_step_of_micro_batches_makes_one_clip_and_one_optimiser_step():
    """Three micro-batches of the same rows, each loss weighted 1/3, accumulate the gradient of one
    micro-batch (to float32 rounding of the three-term sum): the gradients the optimiser applied
    equal the one-micro-batch step's, and AdamW and the schedule count one step, not three."""
    one, three = arm(1), arm(3)
    one.step()
    three.step()
    num = den = 0.0
    for a, b in zip(one.model.parameters(), three.model.parameters()):
        num += float((a.grad - b.grad).double().square().sum())
        den += float(a.grad.double().square().sum())
    rel = (num / den) ** 0.5
    print(f"relative gradient difference, 3 micro-batches against 1: {rel:.3g}")
    assert 0 < den and rel <= 1e-5
    assert {int(s["step"]) for s in three.opt.state.values()} == {1}
    assert three.sched.last_epoch == 1


def test_tokens_per_second_and_mfu_count_the_whole_global_batch():
    """4 micro-batches of 4 x 64 tokens in a 10 ms step: 1,024 tokens / 10 ms; 2.5 ms per micro-batch;
    the loops (one micro-batch a step) keep 256 tokens a step."""
    variants = ["prenorm", "block_attnres"]
    cfg = BenchConfig(size="tiny", variants=tuple(variants), peak_tflops=1.0)
    result = assemble(
        cfg,
        variants,
        CPU,
        4,
        64,
        {"prenorm": [10.0] * 3, "block_attnres": [20.0] * 3},
        {"prenorm": 100.0, "block_attnres": 110.0},
        {"lightning": [0.5], "bare": [0.4]},
        {"prenorm": 1000, "block_attnres": 1000},
        dt.datetime(2026, 1, 1),
        micro_batches=4,
    )
    assert result["tokens_per_s"] == {"prenorm": 1024 / 0.010, "block_attnres": 1024 / 0.020}
    assert result["micro_batch_ms"] == {"prenorm": 2.5, "block_attnres": 5.0}
    assert (result["micro_batches"], result["batch_tokens"], result["step_tokens"]) == (4, 256, 1024)
    flops = 6 * 1000 + 12 * 2 * 64 * 64  # tiny: L 2, D 64, T 64
    assert result["mfu"]["prenorm"] == pytest.approx(flops * 102400 / 1e12)
    assert result["loop_tokens_per_s"] == {"lightning": 256 / 0.5, "bare": 256 / 0.4}
    assert result["step_ms"] == {"prenorm": 10.0, "block_attnres": 20.0}  # DESIGN 7's keys keep their names
