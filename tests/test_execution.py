"""One execution-settings object (harness.train.execution, DESIGN section 11): built once from the command
line, serialised whole for a child rank. The child rank end to end: tests/test_ddp.py."""

from __future__ import annotations

import dataclasses

import pytest

from harness.cli import build_parser
from harness.commands.options import execution_settings
from harness.train.execution import ExecutionSettings

RUN = ["run", "--variant", "rd_attnres", "--size", "tiny", "--seed", "0", "--budget-tokens", "1024"]


def test_every_field_survives_the_json_a_child_rank_reads():
    settings = ExecutionSettings(
        progress=False,
        accelerator="gpu",
        devices=4,
        strategy="ddp",
        num_nodes=2,
        micro_batch_size=8,
        loggers=("csv", "mlflow"),
        threads=3,
        stop_after_tokens=4096,
    )
    assert all(getattr(settings, f.name) != f.default for f in dataclasses.fields(settings))  # none default
    assert ExecutionSettings.from_json(settings.to_json()) == settings  # loggers: a JSON list back to a tuple
    assert ExecutionSettings.from_json(
        ExecutionSettings(devices="auto", micro_batch_size="auto").to_json()
    ) == (ExecutionSettings(devices="auto", micro_batch_size="auto"))
    with pytest.raises(TypeError, match="unexpected keyword argument 'probe'"):
        ExecutionSettings.from_json(
            '{"probe": 1}'
        )  # a field this version does not know: refused, not dropped
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.threads = 1


def test_harness_run_options_fill_every_field_and_harness_work_the_same_object():
    args = build_parser().parse_args(
        [
            *RUN,
            "--accelerator", "cpu", "--devices", "2", "--strategy", "ddp", "--num-nodes", "1",
            "--micro-batch-size", "4", "--logger", "csv", "--threads", "1", "--stop-after-tokens", "2048",
            "--quiet",
        ]
    )  # fmt: skip
    assert execution_settings(args) == ExecutionSettings(
        progress=False,
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        num_nodes=1,
        micro_batch_size=4,
        loggers=("csv",),
        threads=1,
        stop_after_tokens=2048,
    )
    assert execution_settings(build_parser().parse_args(RUN)) == ExecutionSettings()  # the defaults agree
    work = build_parser().parse_args(
        ["work", "--micro-batch-size", "auto", "--logger", "csv", "--threads", "1"]
    )
    assert execution_settings(work, devices=3) == ExecutionSettings(
        micro_batch_size="auto", loggers=("csv",), threads=1, devices=3
    )
    for bad, message in [
        (["--micro-batch-size", "0"], "micro_batch_size=0 must be 'auto' or a positive number"),
        (["--devices", "x"], r"--devices 'x': expected a positive integer or 'auto'"),
    ]:
        with pytest.raises(ValueError, match=message):
            execution_settings(build_parser().parse_args([*RUN, *bad]))
