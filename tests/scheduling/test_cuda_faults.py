"""A CUDA error that poisons the process's context is the machine's fault (issue 44, row 5).

The classifier (:func:`harness.common.faults.sticky_cuda_error`) is checked on the messages torch and NCCL
really print; a worker whose training meets such an error (raised from the real training step by a
``sitecustomize`` on the test's ``PYTHONPATH``: no GPU here) releases the run (no retry spent) and
stops with one line instead of failing every later run on a dead context.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch
import warm

from harness.common.faults import CudaContextLost, run_poisoned_cuda, sticky_cuda_error
from harness.design.config import RunConfig
from harness.scheduling.queue.run_queue import RunQueue

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT.parent / "shared/data/fineweb_edu_sample"
TRAIN = {"vocab_size": 512, "batch_tokens": 1024, "eval_tokens": 2048, "lr": 3e-3}
TAIL = (
    "\nCUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below "
    "might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1\nCompile with "
    "`TORCH_USE_CUDA_DSA` to enable device-side assertions.\n"
)
ILLEGAL = "CUDA error: an illegal memory access was encountered"
ASSERT = "CUDA error: device-side assert triggered"


@pytest.mark.parametrize(
    "error",
    [
        torch.AcceleratorError(ILLEGAL + TAIL),
        torch.AcceleratorError("CUDA error: unspecified launch failure" + TAIL),
        torch.AcceleratorError("CUDA error: uncorrectable ECC error encountered" + TAIL),
        torch.AcceleratorError("CUDA error: misaligned address" + TAIL),
        RuntimeError("CUDA error: an illegal instruction was encountered" + TAIL),  # torch before 2.8
        torch.distributed.DistBackendError(
            "NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.hpp:268, unhandled cuda error "
            "(run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5\nncclUnhandledCudaError: Call to "
            "CUDA function failed.\nLast error:\nCuda failure 'unspecified launch failure'"
        ),
    ],
    ids=["illegal-address", "launch-failure", "ecc", "misaligned", "runtime-error", "nccl"],
)
def test_a_sticky_cuda_error_is_told_by_its_first_line(error):
    assert sticky_cuda_error(error) == str(error).splitlines()[0]
    try:  # wrapped: a later error raised while handling it (Lightning's teardown) still tells it
        try:
            raise error
        except RuntimeError as inner:
            raise ValueError("teardown failed") from inner
    except ValueError as outer:
        assert sticky_cuda_error(outer) == str(error).splitlines()[0]


@pytest.mark.parametrize(
    "error",
    [
        torch.OutOfMemoryError(
            "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 139.72 GiB of "
            "which 1.06 GiB is free."
        ),
        torch.AcceleratorError("CUDA error: device-side assert triggered" + TAIL),  # the run's own bug
        ValueError("an illegal memory access was encountered"),  # not a runtime error of the device
        RuntimeError("mat1 and mat2 shapes cannot be multiplied (4x8 and 7x8)"),
    ],
    ids=["oom", "device-assert", "value-error", "shape"],
)
def test_an_ordinary_error_is_not_sticky(error):
    assert sticky_cuda_error(error) is None


def test_a_device_side_assert_is_the_runs_own_error_that_poisons_the_context():
    error = torch.AcceleratorError(ASSERT + TAIL)
    assert run_poisoned_cuda(error) == ASSERT
    try:  # wrapped by a later error (Lightning's teardown)
        try:
            raise error
        except RuntimeError as inner:
            raise ValueError("teardown failed") from inner
    except ValueError as outer:
        assert run_poisoned_cuda(outer) == ASSERT
    assert run_poisoned_cuda(torch.AcceleratorError(ILLEGAL + TAIL)) is None
    assert run_poisoned_cuda(ValueError(ASSERT)) is None  # not a runtime error of the device


def test_a_child_ranks_context_loss_is_sticky():
    lost = CudaContextLost("rank 1 of 2 met a CUDA error that poisons its context (exit status 3; ...)")
    assert sticky_cuda_error(lost) == str(lost)


# raise the error from the real training step, at step 1, in the rank $CUDA_FAULT_RANK names
RAISE_IN_TRAINING = f"""
import os
import harness.train.lit as lit
import torch

_step = lit.LitLM.training_step


def training_step(self, batch, batch_idx):
    if os.environ.get("RANK", "0") == os.environ["CUDA_FAULT_RANK"] and self.global_step == 1:
        raise torch.AcceleratorError(os.environ["CUDA_FAULT"] + {TAIL!r})
    return _step(self, batch, batch_idx)


lit.LitLM.training_step = training_step
"""


@pytest.mark.slow  # one tiny run to its second step, about 10 s (1 rank) or 30 s (2) on 2 shared cores
@pytest.mark.parametrize("rank, devices", [(0, 1), (1, 2)], ids=["rank-0-of-1", "child-rank-1-of-2"])
def test_a_sticky_cuda_error_releases_the_run_and_stops_the_worker_with_one_line(tmp_path, rank, devices):
    """On rank 0 the error itself is told; a child rank exits with status 3 and rank 0 tells that."""
    q, results, (first, second), out, line = _work_meeting(tmp_path, ILLEGAL, rank, devices)
    told = (
        ILLEGAL
        if rank == 0
        else "rank 1 of 2 met a CUDA error that poisons its context (exit status 3; its traceback is on stderr above)"
    )
    assert line == (
        f"harness work: error: CUDA context lost: {told}; {first.run_id} released and queued again "
        "(no retry spent); the worker stops (this process cannot use the GPU again): check the GPU "
        "(nvidia-smi, the kernel log for an Xid), then start the worker again"
    ), line
    if rank == 0:
        assert "Traceback" not in out.stderr
    else:  # the child rank's traceback, which the line points to
        assert ILLEGAL in out.stderr
    runs = q.runs()
    assert (runs[first.run_id].state, runs[first.run_id].attempt) == ("queued", 2)
    assert all(t.user_attrs.get("failures", 0) == 0 for t in runs[first.run_id].trials)  # no retry spent
    assert (runs[second.run_id].state, runs[second.run_id].attempt) == ("queued", 1)  # never taken
    assert not list((results / "runs").glob("*.json"))  # no failed result


@pytest.mark.slow  # one tiny run to its second step, about 10 s on 2 shared cores
def test_a_device_side_assert_fails_the_run_and_stops_the_worker_with_one_line(tmp_path):
    """The assert is the run's own error (a retry spent, its failed result written), but the context is
    dead: the worker stops instead of failing the next run on it."""
    q, results, (first, second), _, line = _work_meeting(tmp_path, ASSERT, rank=0, devices=1)
    assert line == (
        f"harness work: error: CUDA context poisoned by {first.run_id}: {ASSERT}; recorded as that run's "
        "failure (its retry, if any, runs in a fresh process); the worker stops (this process cannot use the "
        "GPU again): fix the run's cause (CUDA_LAUNCH_BLOCKING=1 shows the kernel; e.g. a token id >= "
        "vocab_size), then start the worker again"
    ), line
    runs = q.runs()
    assert (runs[first.run_id].state, runs[first.run_id].attempt) == ("queued", 2)  # its retry
    assert max(t.user_attrs.get("failures", 0) for t in runs[first.run_id].trials) == 1  # a retry spent
    assert (runs[second.run_id].state, runs[second.run_id].attempt) == ("queued", 1)  # never taken
    (failed,) = (results / "runs").glob("*.json")  # the failed result, with the assert in its error
    assert ASSERT in failed.read_text()


def _work_meeting(tmp_path: Path, fault: str, rank: int, devices: int):
    """Queue two tiny runs on real text and run `harness work` whose training raises ``fault`` (a CUDA
    error's first line) on ``rank`` at step 1; the queue, results folder, the two configs, the finished
    process and its one ``error:`` line (the worker must exit 1)."""
    if not SAMPLE.is_dir():
        pytest.fail(f"sample corpus {SAMPLE} absent")
    results = tmp_path / "results"
    q = RunQueue.open(None, results)
    configs = tuple(
        RunConfig.adhoc("rd_attnres", "tiny", seed, 4 * 1024, str(SAMPLE), grid="g", train=TRAIN)
        for seed in (0, 1)
    )
    q.enqueue(list(configs))
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(RAISE_IN_TRAINING)
    env = {
        **os.environ,
        "PYTHONPATH": f"{tmp_path / 'site'}:{ROOT}",
        "HARNESS_PROGRESS": "off",
        "CUDA_FAULT_RANK": str(rank),
        "CUDA_FAULT": fault,
    }
    work = [sys.executable, "-m", "harness", "work", "--results", str(results), "--accelerator", "cpu"]
    out = warm.run(
        [*work, "--threads", "1", "--devices", str(devices)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 1, out.stdout + out.stderr
    (line,) = [x for x in out.stderr.splitlines() if x.startswith("harness work: error:")]
    return q, results, configs, out, line
