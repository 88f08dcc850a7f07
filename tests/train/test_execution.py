"""One execution-settings object (harness.train.execution, DESIGN section 11): built once from the command
line, serialised whole for a child rank. The child rank end to end: tests/train/test_ddp.py."""

from __future__ import annotations

import dataclasses

import pytest

from harness.cli import build_parser
from harness.commands.options import execution_settings
from harness.design.config import RunConfig, TrainConfig
from harness.models.sizes import derive
from harness.scheduling.grids.grid import load_grid
from harness.train.execution import ExecutionSettings
from harness.train.protocol import protocol_dict

from queue_stubs import write_grid

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
        compile=True,
        routing="per_site",
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


def _grid(tmp_path, extra: str) -> list[RunConfig]:
    """The runs of queue_stubs' grid with ``extra`` lines at the end of its ``[train]`` table."""
    path = write_grid(tmp_path, seeds="[0]", name=f"g{len(extra)}", corpus="/corpus")
    path.write_text(path.read_text() + extra + "\n")
    return load_grid(path).expand("/corpus")


def test_a_grid_sets_execution_settings_in_train_outside_train_config_and_the_protocol(tmp_path):
    """``[train] compile / micro_batch_size / loggers`` (the spelling every grid used) still load; they are
    execution settings: not TrainConfig fields, outside the protocol, merged with the command line's once
    (ExecutionSettings.for_run: the command line's micro-batch size wins, the loggers are both)."""
    plain = _grid(tmp_path, "")
    configs = _grid(tmp_path, 'compile = true\nmicro_batch_size = 4\nloggers = ["csv"]')
    assert not {"compile", "micro_batch_size", "loggers"} & {f.name for f in dataclasses.fields(TrainConfig)}
    config = configs[0]
    assert config.execution() == {"compile": True, "micro_batch_size": 4, "loggers": ("csv",)}
    assert config.train_config() == plain[0].train_config()
    args = dict(
        data_meta={"fingerprint": "f"},
        model=derive("tiny", vocab_size=512),
        eval_windows=4,
        precision="32-true",
    )
    assert [protocol_dict(c, **args) for c in configs] == [protocol_dict(c, **args) for c in plain]
    merged = ExecutionSettings(micro_batch_size=2, loggers=("mlflow", "csv")).for_run(config)
    assert (merged.compile, merged.micro_batch_size, merged.loggers) == (True, 2, ("csv", "mlflow"))
    assert merged.for_run(config) == merged  # a child rank applies it again: the same settings
    defaults = ExecutionSettings().for_run(plain[0])
    assert (defaults.compile, defaults.micro_batch_size, defaults.loggers) == ("auto", "auto", ())
    # a payload queued before the fields left TrainConfig reads back as it was
    assert RunConfig.from_dict(config.to_dict()).execution() == config.execution()


@pytest.mark.parametrize(
    "extra, message",
    [
        ('compile = "maybe"', "train.compile: 'maybe' is not a bool"),
        ("micro_batch_size = 0", "micro_batch_size=0 must be 'auto' or a positive number of sequences"),
        ('loggers = ["tensorbord"]', "logger 'tensorbord' is not known"),
    ],
)
def test_a_bad_execution_setting_in_a_grid_is_one_line_at_load(tmp_path, extra, message):
    with pytest.raises(ValueError, match=message) as caught:
        _grid(tmp_path, extra)
    assert "\n" not in str(caught.value)
