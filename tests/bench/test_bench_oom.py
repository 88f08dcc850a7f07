"""The bench times what training runs (issue 44 row 1): TF32 float32 matmuls on CUDA through the
one switch training uses (harness.train.trainer.enable_tf32), the other-precision arm at its own
micro-batch when the others' does not fit, and an out-of-memory in one arm is one line and that
arm's figures are missing, never a failed bench.

CPU twin of a CUDA out-of-memory: a forward pre-hook on one arm's model raises a real
``torch.OutOfMemoryError`` from the real step path (train_step -> forward) when the micro-batch
has more sequences than the arm's cap, as a memory cap would; on a CPU the other-precision arm is
``block_attnres@bf16-mixed`` (on CUDA the float32 one)."""

from __future__ import annotations

import pytest
import torch

import harness.bench.measure as measure
import harness.train.runner as runner
import harness.train.trainer as trainer
from harness.bench import BenchConfig, format_report, run_bench
from harness.bench.steps import StepArm

PRECISION_ARM = "block_attnres@bf16-mixed"


def _capped(caps: dict[str, tuple[int, int]]):
    """A StepArm whose model, for an arm named in ``caps`` as ``(rows, after)``, raises
    torch.OutOfMemoryError in its forward when the micro-batch exceeds ``rows`` sequences, from
    its ``after``-th forward on (0: from the first)."""

    class CappedArm(StepArm):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            if self.name not in caps:
                return
            rows, after = caps[self.name]
            calls = [0]

            def hook(module, args):
                calls[0] += 1
                if calls[0] > after and args[0].shape[0] > rows:
                    raise torch.OutOfMemoryError(
                        f"CUDA out of memory. Tried to allocate 2.00 GiB (test cap: {rows} sequences)\nmore"
                    )

            self.model.register_forward_pre_hook(hook)

    return CappedArm


def _bench(monkeypatch, caps):
    monkeypatch.setattr(measure, "StepArm", _capped(caps))
    calls = []
    real = measure.enable_tf32
    monkeypatch.setattr(measure, "enable_tf32", lambda accel: calls.append(accel) or real(accel))
    lines = []
    cfg = BenchConfig(
        size="tiny",
        variants=("block_attnres", "rd_attnres"),
        steps=3,
        warmup=2,
        batch_size=4,
        loop_rounds=0,
        threads=1,
    )
    result = run_bench(cfg, progress=lines.append)
    assert calls == ["cpu"]  # the bench asks the training switch for its device
    return result, lines


@pytest.mark.slow  # three tiny benches
def test_the_other_precision_arm_gets_its_own_micro_batch_when_the_shared_one_does_not_fit(monkeypatch):
    result, lines = _bench(monkeypatch, {PRECISION_ARM: (2, 0)})
    assert f"{PRECISION_ARM}: out of memory at a micro-batch of 4; trying 2" in lines
    assert f"{PRECISION_ARM}: 2 micro-batches of 2 (the others: 1)" in lines
    assert result["missing_arms"] == {}
    assert result["precision_ratios"]["bf16/fp32"] > 0  # figures of every arm
    assert (
        set(result["step_ms"]) == {"block_attnres", "rd_attnres"}
        and len(result["samples_ms"][PRECISION_ARM]) == 3
    )


@pytest.mark.slow
def test_an_arm_that_never_fits_is_one_line_and_its_figure_is_missing(monkeypatch):
    result, lines = _bench(monkeypatch, {PRECISION_ARM: (0, 0)})
    why = (
        "out of memory at 4 micro-batch(es) of 1 sequences: CUDA out of memory. Tried to allocate "
        "2.00 GiB (test cap: 0 sequences)"
    )
    assert result["missing_arms"] == {PRECISION_ARM: why}
    assert [ln for ln in lines if "n/a" in ln] == [f"{PRECISION_ARM}: n/a, left out ({why})"]
    assert result["precision_ratios"] == {"bf16/fp32": None} and "precision_step_ms" not in result
    assert set(result["step_ms"]) == {"block_attnres", "rd_attnres"}  # the other arms' figures
    assert set(result["ratios"]) == {"rd_attnres/block_attnres"} and result["peak_mem_mb"]["rd_attnres"] > 0
    report = format_report(result)
    assert f"n/a {PRECISION_ARM}: {why}" in report and "bf16/fp32" in report and "n/a  (an arm ran" in report


@pytest.mark.slow
def test_a_variant_out_of_memory_while_timed_is_left_out_and_the_rest_measured(monkeypatch):
    # rd_attnres fits its first two steps (fit + warmup), then runs out in the first timed round
    result, lines = _bench(monkeypatch, {"rd_attnres": (0, 2)})
    assert list(result["missing_arms"]) == ["rd_attnres"]
    assert result["missing_arms"]["rd_attnres"].startswith(
        "out of memory at 1 micro-batch(es) of 4 sequences"
    )
    assert sum("n/a" in ln for ln in lines) == 1
    assert set(result["step_ms"]) == {"block_attnres"} and result["ratios"] == {}
    assert result["precision_ratios"]["bf16/fp32"] > 0  # the parent's pair is whole
    assert len(result["samples_ms"]["block_attnres"]) == 3


def test_the_bench_and_training_share_one_tf32_switch():
    """One function (not a copy) decides TF32 for training and the bench; on a GPU it turns on TF32
    for matmuls and cuDNN, on a CPU it changes nothing."""
    assert measure.enable_tf32 is trainer.enable_tf32 and runner.enable_tf32 is trainer.enable_tf32
    old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
        assert trainer.enable_tf32("cpu") is False
        assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == (False, False)
        assert trainer.enable_tf32("cuda") is True  # the bench's device.type on a GPU
        assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == (True, True)
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
        runner.enable_tf32("gpu")  # training's path on a GPU (runner.build, with its numerics' accelerator)
        assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == (True, True)
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old
