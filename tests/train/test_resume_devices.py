"""A checkpoint resumes on the loading rank's own device, whatever device wrote it (issue 44, row 3).

A GPU run's checkpoint carries the ``cuda:0`` location tag on every storage; a plain ``torch.load`` of it
on a machine without CUDA raises. Here a real checkpoint of a stopped tiny run is rewritten with that
tag (the tensors' bytes unchanged), and the run resumes from it on the CPU through the real resume path
(``train_run`` -> ``trainer.fit(ckpt_path=...)``) to the numbers of an uninterrupted run, bit for bit.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest
import torch
from test_runner import final_rows  # tests/ is on sys.path under pytest (no package)

from harness.design.config import RunConfig
from harness.train import RunInterrupted, train_run
from harness.train.checkpoint import checkpoint_dir, owner_dir
from harness.train.execution import ExecutionSettings

SAMPLE = Path(__file__).resolve().parents[3] / "shared/data/fineweb_edu_sample"
TRAIN = {"vocab_size": 512, "batch_tokens": 1024, "eval_tokens": 2048, "lr": 3e-3}


@pytest.fixture(autouse=True)
def _one_thread():
    if not SAMPLE.is_dir():
        pytest.fail(f"sample corpus {SAMPLE} absent")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the same reduction order in both runs
    yield
    torch.set_num_threads(threads)


def _tag_cuda0(path: Path, monkeypatch) -> None:
    """Rewrite the checkpoint at ``path`` as a GPU run writes it: every storage tagged ``cuda:0``
    (torch.save asks ``torch.serialization.location_tag`` for each storage's tag)."""
    state = torch.load(path, map_location="cpu", weights_only=False)
    with monkeypatch.context() as m:
        m.setattr(torch.serialization, "location_tag", lambda storage: "cuda:0")
        torch.save(state, path)


@pytest.mark.slow  # two tiny runs, about 10 s on 2 shared cores
def test_a_checkpoint_written_on_cuda0_resumes_on_the_cpu_bit_identically(tmp_path, monkeypatch):
    assert not torch.cuda.is_available()  # the point: a machine without the device that wrote it
    config = RunConfig.adhoc(
        "rd_attnres", "tiny", 0, 6 * 1024, str(SAMPLE), train={**TRAIN, "checkpoint_every_tokens": 1024}
    )
    settings = ExecutionSettings(progress=False, accelerator="cpu")
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    assert train_run(config, whole, settings) == "done"
    with pytest.raises(RunInterrupted):
        train_run(config, parts, settings.replace(stop_after_tokens=3 * 1024))
    ckpt = owner_dir(checkpoint_dir(parts, config.run_id), None) / "last.ckpt"
    _tag_cuda0(ckpt, monkeypatch)
    with pytest.raises(RuntimeError, match="CUDA"):  # what a CPU-only worker met before the fix
        torch.load(ckpt, weights_only=False)
    assert train_run(config, parts, settings) == "done"
    assert final_rows(parts) == final_rows(whole)  # bit-identical on CPU
    con = duckdb.connect(str(parts / "harness.duckdb"), read_only=True)
    try:
        (resumed,) = con.execute("select json_extract(config, '$.resumed_from_step') from runs").fetchone()
    finally:
        con.close()
    assert int(resumed) == 3  # it resumed from the cuda:0 checkpoint, not from scratch
    assert not ckpt.exists()
