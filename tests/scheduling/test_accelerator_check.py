"""A GPU asked for on a machine without one (issue 40): the harness's own one line, nothing trained.

The machine's view is made GPU-less for real: no ``CUDA_VISIBLE_DEVICES`` and a ``PATH``
without ``nvidia-smi`` (what a CPU-only node has). CPU only, ~5 s:

    python -m pytest -q tests/scheduling/test_accelerator_check.py
"""

from __future__ import annotations

import pytest

from harness.cli import main as cli
from harness.scheduling.workers.devices import check_accelerator

pytestmark = pytest.mark.own_cache  # its commands build their corpus in RESULTS/cache (conftest)

NO_GPU_ACCEL = "this machine has no GPU; use --accelerator cpu or auto"


@pytest.fixture
def cpu_only(tmp_path, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    (tmp_path / "bin").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))  # no nvidia-smi
    (tmp_path / "r").mkdir()
    return tmp_path / "r"


def test_the_check_refuses_only_a_gpu_request_without_a_gpu():
    for accelerator in ("auto", "cpu"):
        check_accelerator(accelerator, None, gpu_count=0)  # the CPU is fine
    check_accelerator("gpu", "0", gpu_count=1)
    check_accelerator("cuda", None, gpu_count=2)
    with pytest.raises(ValueError, match=rf"^--accelerator gpu: {NO_GPU_ACCEL}$"):
        check_accelerator("gpu", None, gpu_count=0)
    with pytest.raises(ValueError, match=r"^--gpus 0: this machine has no CUDA device"):
        check_accelerator("auto", "0", gpu_count=0)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["work", "--gpus", "0"], "--gpus 0: this machine has no CUDA device (nvidia-smi lists none, "),
        (["work", "--accelerator", "gpu"], f"--accelerator gpu: {NO_GPU_ACCEL}"),
        (
            ["run", "--variant", "block_attnres", "--size", "tiny", "--seed", "0", "--budget-tokens", "4096"]
            + ["--accelerator", "gpu"],
            f"--accelerator gpu: {NO_GPU_ACCEL}",
        ),
    ],
)
def test_work_and_run_refuse_a_gpu_on_a_cpu_only_machine_in_one_line(cpu_only, capsys, argv, message):
    assert cli([*argv, "--results", str(cpu_only)]) == 2
    out = capsys.readouterr()
    assert out.err.startswith(f"harness {argv[0]}: error: {message}") and out.err.count("\n") == 1, out.err
    assert "trains on GPU" not in out.out and list(cpu_only.iterdir()) == []
