"""CPU twins of CUDA's defaults (issue 37 part 2, DESIGN section 11): a CUDA-only code path is a bug
the suite can see.

``$HARNESS_CUDA_DEFAULTS=1`` (:func:`harness.train.trainer.cuda_defaults`) makes a CPU run take
the defaults a CUDA run takes: ``compile = auto`` compiles (inductor's C++ backend),
``precision = auto`` is ``bf16-mixed`` (CPU autocast), AdamW is fused (fused kernels for CPU
tensors exist in torch >= 2.4), the divergence check is kept on the device and read at the log and
evaluation intervals. One short run takes them all at once, with micro-batches and 2 ranks over
gloo. ``python -m pytest -q tests/train/test_cuda_twins.py``.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest
import torch

from harness.design.config import RunConfig, train_config
from harness.models import build_model
from harness.train import train_run
from harness.train.execution import ExecutionSettings
from harness.train.lit import LitLM
from harness.train.trainer import CUDA_DEFAULTS_ENV, cuda_defaults, resolve_precision

SAMPLE = Path(__file__).resolve().parents[3] / "shared/data/fineweb_edu_sample"
# 16 sequences of 64 tokens per global batch: 8 per rank on 2 ranks
TRAIN = {"vocab_size": 512, "batch_tokens": 1024, "eval_tokens": 2048, "lr": 3e-3}


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One thread per rank (the corpus cache is the session's: tests/conftest.py)."""
    if not SAMPLE.is_dir():
        pytest.fail(f"sample corpus {SAMPLE} absent")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the child rank gets the same (its spec carries it)
    yield
    torch.set_num_threads(threads)


def runs_row(results: Path, columns: str) -> tuple:
    con = duckdb.connect(str(results / "harness.duckdb"), read_only=True)
    try:
        return con.execute(f"select {columns} from runs").fetchone()
    finally:
        con.close()


def test_the_switch_takes_cuda_defaults_on_a_cpu_and_refuses_a_bad_value(monkeypatch):
    model = build_model("rd_attnres", "tiny", seed=0, vocab_size=512)
    lit = LitLM(model, train_config("tiny"), total_steps=4, batch_tokens=1024, token_bytes=torch.ones(512))
    monkeypatch.delenv(CUDA_DEFAULTS_ENV, raising=False)
    opt = lit.configure_optimizers()["optimizer"]
    assert (opt.defaults["fused"], opt.defaults["foreach"]) == (None, False) and lit.sync_every_step
    assert resolve_precision("auto", "cpu") == "32-true" and not cuda_defaults("cpu")
    monkeypatch.setenv(CUDA_DEFAULTS_ENV, "1")
    opt = lit.configure_optimizers()["optimizer"]
    assert opt.defaults["fused"] is True and not lit.sync_every_step
    assert (
        resolve_precision("auto", "cpu") == "bf16-mixed" and resolve_precision("32-true", "cpu") == "32-true"
    )
    monkeypatch.setenv(CUDA_DEFAULTS_ENV, "yes")
    with pytest.raises(ValueError, match=r"^\$HARNESS_CUDA_DEFAULTS='yes'; allowed: '1' .*'0' or unset$"):
        cuda_defaults("cpu")
    assert cuda_defaults("cuda")  # CUDA's own defaults whatever the variable says


@pytest.mark.slow
def test_the_deferred_divergence_check_records_the_step_the_per_step_check_records(tmp_path, monkeypatch):
    """lr 1e30 without clipping diverges within a few steps. Read every step (the CPU default),
    the run stops after the step that diverged; kept on the device (CUDA's), it is read at the
    next log interval (every 4 steps of this 400-step budget) and the run stops there, recorded
    as diverged at the same step. Eager and float32 both times: fused AdamW and the deferred check
    are all that differ."""
    train = {
        **TRAIN,
        "batch_tokens": 64,
        "lr": 1e30,
        "grad_clip": 0.0,
        "compile": False,
        "precision": "32-true",
    }
    config = RunConfig.adhoc("rd_attnres", "tiny", 0, 400 * 64, str(SAMPLE), train=train)
    rows = {}
    for twin in ("0", "1"):
        monkeypatch.setenv(CUDA_DEFAULTS_ENV, twin)
        assert (
            train_run(config, tmp_path / twin, ExecutionSettings(progress=False, accelerator="cpu"))
            == "diverged"
        )
        rows[twin] = runs_row(tmp_path / twin, "status, diverged_step, steps, error")
    (status, step, steps, error), (status1, step1, steps1, error1) = rows["0"], rows["1"]
    assert (status, status1, step1) == ("diverged", "diverged", step) and step < 4, rows
    assert steps == step + 1 and steps1 == 4, rows  # stopped after the step / at the first read
    assert error == error1 == "non-finite training loss (nan)"


@pytest.mark.slow  # 89 s on 2 cores (1116 s with a cold inductor cache, load 11): 2 ranks compile under bf16
def test_every_cuda_default_at_once_on_two_gloo_ranks(tmp_path, monkeypatch):
    """Compile (inductor), fused AdamW, bf16 autocast, the deferred divergence check, 2
    micro-batches per rank and 2 ranks over gloo in one run; its final val NLL is the eager
    float32 one-process run's within bf16's rounding.

    Not run here, CUDA only: the ``auto`` micro-batch probe (it measures CUDA memory; the run
    sets ``micro_batch_size``), pinned memory and non-blocking copies (the DataLoader pins only
    with an accelerator; a CPU-to-CPU copy is no copy), TF32 and NCCL. What a pinned copy needs
    is checked instead: the batches the training step gets are contiguous.
    """
    seen = []
    step = LitLM.training_step

    def spy(self, batch, batch_idx):  # rank 0's steps (the child rank is another process)
        x, y = batch
        out = step(self, (x, y), batch_idx)
        seen.append(
            dict(
                compiled=self._compiled is not None,
                fused=self.optimizers().optimizer.defaults["fused"],
                precision=self.trainer.precision,
                deferred=not self.sync_every_step,
                contiguous=x.is_contiguous() and y.is_contiguous(),
            )
        )
        return out

    monkeypatch.setattr(LitLM, "training_step", spy)
    config = RunConfig.adhoc(
        "rd_attnres", "tiny", 0, 4 * 1024, str(SAMPLE), train={**TRAIN, "eval_every_tokens": 2048}
    )
    monkeypatch.setenv(CUDA_DEFAULTS_ENV, "1")
    twin = train_run(
        config,
        tmp_path / "twin",
        ExecutionSettings(progress=False, accelerator="cpu", devices=2, micro_batch_size=4),
    )
    monkeypatch.setenv(CUDA_DEFAULTS_ENV, "0")
    plain = train_run(config, tmp_path / "plain", ExecutionSettings(progress=False, accelerator="cpu"))
    assert (twin, plain) == ("done", "done")
    assert len(seen) == 4 + 4
    expected = dict(compiled=True, fused=True, precision="bf16-mixed", deferred=True, contiguous=True)
    assert seen[:4] == [expected] * 4, seen[:4]
    assert seen[4]["fused"] is None and seen[4]["precision"] == "32-true"
    micro, world, precision = runs_row(
        tmp_path / "twin", "micro_batch_size, world_size, config->>'$.precision'"
    )
    assert (micro, world, precision) == (4, 2, "bf16-mixed")
    # the hardware class says what changed the numerics: bf16 autocast, compiled by inductor; the plain run eager fp32
    (twin_class,), (plain_class,) = (
        runs_row(tmp_path / "twin", "hardware"),
        runs_row(tmp_path / "plain", "hardware"),
    )
    device = twin_class.split("/")[0]
    assert twin_class.endswith("/bf16-mixed/torch" + torch.__version__.split("+")[0] + "/inductor"), (
        twin_class
    )
    assert plain_class == twin_class.replace("/bf16-mixed/", "/fp32/").replace("/inductor", "/eager")
    assert device.startswith("cpu-")
    print(twin.val_nll, plain.val_nll, twin.val_nll - plain.val_nll)
    assert abs(twin.val_nll - plain.val_nll) <= 0.02
