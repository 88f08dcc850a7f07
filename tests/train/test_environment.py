"""The environment record and the hardware class (harness/train/environment.py, DESIGN section 13).

Two tiny runs on the FineWeb-Edu sample, in one process: each result file and ``runs`` row carries the
record and the class, ``harness sql "... group by all"`` answers where a grid ran, and the machine's part is
read once per process (counted, not timed). Old result files and old databases read as ``unknown``.
~25 s on 2 CPU cores:

    python -m pytest -q tests/train/test_environment.py
"""

from __future__ import annotations

import json
import os
import platform
import socket
from pathlib import Path

import duckdb
import lightning
import numpy as np
import pytest
import torch
from test_db_store import make_result

from harness.cli import main as cli_main
from harness.design.config import RunConfig
from harness.models.numerics import DEFAULT_ROUTING, numerics_id
from harness.store.runfile import read_result, result_path
from harness.store.store import Store
from harness.train import environment, train_run
from harness.train.execution import ExecutionSettings
from harness.train.hardware_override import HARDWARE_CLASS_ENV

SAMPLE = Path(__file__).resolve().parents[3] / "shared/data/fineweb_edu_sample"
TRAIN = {"vocab_size": 512, "batch_tokens": 1024, "eval_tokens": 2048, "lr": 3e-3, "eval_every_tokens": 4096}
BUDGET = 4 * 1024


def _proc_flags() -> set[str]:
    """The first CPU's flags, read here independently of the module under test."""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Two runs (two variants, seed 0) trained in this process with the machine record's reads counted:
    ``(results folder, configs, reads of /proc/cpuinfo by the record)``."""
    assert SAMPLE.is_dir(), f"sample corpus {SAMPLE} absent"
    results = tmp_path_factory.mktemp("env")
    os.environ.pop(HARDWARE_CLASS_ENV, None)
    torch.set_num_threads(1)
    reads = []
    real = environment._cpuinfo
    mp = pytest.MonkeyPatch()
    mp.setattr(environment, "_cpuinfo", lambda: reads.append(1) or real())
    environment.machine_record.cache_clear()  # this process's first run reads the machine again
    configs = [
        RunConfig.adhoc(variant, "tiny", 0, BUDGET, str(SAMPLE), train=TRAIN)
        for variant in ("block_attnres", "rd_attnres")
    ]
    try:
        for config in configs:
            assert train_run(config, results, ExecutionSettings(progress=False)) == "done"
    finally:
        mp.undo()
    return results, configs, len(reads)


@pytest.mark.slow
def test_result_file_and_runs_row_carry_the_record_read_once_per_process(trained, capsys):
    results, configs, reads = trained
    assert reads == 1  # two runs, one read of the machine: a run's start pays attribute reads only
    flags = _proc_flags()
    want_class = f"cpu-{environment._slug(environment._cpuinfo()[0])}-{torch.backends.cpu.get_cpu_capability().lower()}"
    for config in configs:
        run = read_result(result_path(results, config.run_id))["run"]
        env = run["environment"]
        assert run["hardware"] == env["hardware"]
        assert run["hardware"].startswith(want_class)
        assert run["hardware"].endswith(f"/fp32/torch{torch.__version__.split('+')[0]}/eager")
        assert env["cpu"]["isa"] == [f for f in environment.FLOAT_ISA_FLAGS if f in flags]
        assert env["cpu"]["torch_capability"] == torch.backends.cpu.get_cpu_capability()
        assert env["gpu"] is None  # no CUDA here
        assert env["software"] == {
            "torch": torch.__version__,
            "lightning": lightning.__version__,
            "numpy": np.__version__,
            "python": platform.python_version(),
            "os": f"{platform.system()} {platform.release()}",
        }
        assert env["code_version"] == run["code_version"]
        assert env["run"] == {
            "device_type": "cpu",
            "precision": "32-true",
            "threads": 1,
            "tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
            "tf32_cudnn": torch.backends.cudnn.allow_tf32,
            "deterministic": torch.are_deterministic_algorithms_enabled(),
            "float32_matmul_precision": torch.get_float32_matmul_precision(),
            "compile": None,
            "routing": DEFAULT_ROUTING,
        }
        assert run["numerics"] == env["numerics"] == numerics_id(DEFAULT_ROUTING)  # two_phase/N
        text = json.dumps(env)
        host = socket.gethostname()
        assert f'"{host}"' not in text and str(Path.home()) not in text and str(results) not in text
        assert not any(isinstance(v, str) and v.startswith("/") for v in _leaves(env))
    # the column answers where a grid ran
    assert (
        cli_main(
            [
                "sql",
                "--results",
                str(results),
                "select variant, hardware, count(*) from runs group by all order by 1",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    for config in configs:
        assert config.variant in out
    con = duckdb.connect(str(results / "harness.duckdb"), read_only=True)
    try:
        rows = con.execute("select variant, hardware, count(*) from runs group by all order by 1").fetchall()
        numerics = con.execute("select distinct numerics from runs").fetchall()
        stored = con.execute("select environment from runs limit 1").fetchone()[0]
    finally:
        con.close()
    classes = {read_result(result_path(results, c.run_id))["run"]["hardware"] for c in configs}
    assert len(classes) == 1 and rows == [(c.variant, *classes, 1) for c in configs]
    assert json.loads(stored)["hardware"] in classes
    assert numerics == [(numerics_id(DEFAULT_ROUTING),)]


def _leaves(value):
    if isinstance(value, dict):
        for v in value.values():
            yield from _leaves(v)
    elif isinstance(value, list):
        for v in value:
            yield from _leaves(v)
    else:
        yield value


def test_hardware_class_names_device_precision_torch_and_compile(monkeypatch):
    monkeypatch.delenv(HARDWARE_CLASS_ENV, raising=False)
    torch_key = "torch" + torch.__version__.split("+")[0]
    device = environment.device_key("cpu")
    assert environment.hardware_class("cpu", "32-true", False) == f"{device}/fp32/{torch_key}/eager"
    assert (
        environment.hardware_class("cpu", "bf16-mixed", True) == f"{device}/bf16-mixed/{torch_key}/inductor"
    )
    assert environment._slug("Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz") == "intel-xeon-platinum-8481c"
    assert environment._slug("AMD EPYC 7B13 64-Core Processor") == "amd-epyc-7b13"
    assert environment._slug("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"


def test_the_class_is_outside_the_protocol_hash(monkeypatch, tmp_path):
    """Another class (the override) gives the same protocol: a protocol is what a study fixes."""
    from harness.train.runner import build

    config = RunConfig.adhoc("rd_attnres", "tiny", 0, BUDGET, str(SAMPLE), train=TRAIN)
    monkeypatch.delenv(HARDWARE_CLASS_ENV, raising=False)
    first = build(config, tmp_path, ExecutionSettings(progress=False))
    monkeypatch.setenv(HARDWARE_CLASS_ENV, "lab-a100")
    second = build(config, tmp_path, ExecutionSettings(progress=False))
    assert first.protocol == second.protocol
    assert second.environment["hardware"] == "lab-a100"
    assert second.environment["hardware_detected"] == first.environment["hardware"]


@pytest.mark.parametrize("value", ["unknown", "a b", "/abs/path", "x" * 201])
def test_a_bad_class_override_is_one_clear_line(monkeypatch, value):
    monkeypatch.setenv(HARDWARE_CLASS_ENV, value)
    with pytest.raises(ValueError, match=r"^\$HARNESS_HARDWARE_CLASS=.*expected a short key"):
        environment.hardware_class("cpu", "32-true", False)


def test_old_result_files_and_old_databases_read_hardware_unknown(tmp_path):
    store = Store(tmp_path)
    old = make_result("old-0")
    assert "hardware" not in old["run"]
    path = store.write_result(old)
    raw = json.loads(path.read_text())
    raw["run"].pop("hardware")  # as a file written before the column existed
    raw["run"].pop("environment")
    path.write_text(json.dumps(raw))
    assert read_result(path)["run"]["hardware"] == "unknown"
    assert store.query("select hardware, environment from runs")["hardware"].to_list() == ["unknown"]
    # numerics not recorded: NULL, which the report reads as the commit implies (harness.models.numerics)
    assert store.query("select numerics from runs")["numerics"].to_list() == [None]
    # a database made before the columns: its rows read 'unknown' once the schema adds them
    con = duckdb.connect(str(store.db_path))
    try:
        con.execute("alter table runs drop column environment")
        con.execute("alter table runs drop column hardware")
        con.execute("update meta set value = 'old' where key = 'schema_sha256'")
    finally:
        con.close()
    frame = store.query("select run_id, hardware from runs")  # its ingest applies the schema
    assert frame.rows() == [("old-0", "unknown")]


def test_gpu_parts_of_the_record_from_their_sources_text():
    """The CUDA-only parts, on a CPU: the driver from ``/proc/driver/nvidia/version``'s two formats, and a
    GPU record's device key (a CPU machine's record with an H100 in it)."""
    proprietary = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.183.01  Sun May 12 19:39:15 UTC 2024\n"
    open_module = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.15  Release Build  (dvs-builder@U16)\n"
    assert environment.driver_version(proprietary) == "535.183.01"
    assert environment.driver_version(open_module) == "550.54.15"
    assert environment.driver_version("GCC version:  gcc version 12.2.0") is None
    record = {**environment.machine_record(), "gpu": {"name": "NVIDIA H100 80GB HBM3", "count": 8}}
    assert environment.device_key("cuda", record) == "cuda-nvidia-h100-80gb-hbm3"
    assert environment.device_key("cpu", record) == environment.device_key("cpu")  # the CPU key ignores it
