"""Every setting declared once (harness/design/settings.py, issue 67): TrainConfig's fields and checks, the
``[train]`` keys, ExecutionSettings' fallbacks, the protocol hash's exclusions and the flags of ``harness run`` /
``work`` / ``launch`` with their help text all come from the one declaration, so they cannot drift apart."""

from __future__ import annotations

import dataclasses

import pytest

from harness.cli import build_parser
from harness.commands.launch import _work_argv, _work_options
from harness.design.config import RunConfig, TrainConfig, train_keys
from harness.design.settings import BY_NAME, SETTINGS, TABLE_EXECUTION, TRAIN_SETTINGS
from harness.design.train_table import AUTO_FIELDS, EXECUTION_KEYS
from harness.models.numerics import DEFAULT_ROUTING
from harness.train.execution import ExecutionSettings
from harness.train.protocol import NON_PROTOCOL_TRAIN_FIELDS


def test_train_config_is_the_declared_protocol_settings_in_order():
    fields = dataclasses.fields(TrainConfig)
    assert [(f.name, f.type, f.default) for f in fields] == [
        (s.name, s.kind, s.default) for s in TRAIN_SETTINGS
    ]
    assert train_keys() == {s.name: s.kind for s in SETTINGS if s.in_table}
    assert EXECUTION_KEYS == {
        "compile": "bool",
        "micro_batch_size": "int",
        "loggers": "tuple",
        "routing": "str",
    }
    assert AUTO_FIELDS == ("compile", "micro_batch_size")
    assert set(NON_PROTOCOL_TRAIN_FIELDS) == {"checkpoint_every_tokens", "eval_every_tokens"}


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"lr": 0}, "lr=0.0 must be a positive finite number"),
        ({"lr": float("inf")}, "lr=inf must be a positive finite number"),
        ({"val_fraction": 1}, "val_fraction=1.0 must be in (0, 1)"),
        ({"beta2": 1.5}, "beta2=1.5 must be in [0, 1]"),
        ({"decay_frac": 0}, "decay_frac=0.0 must be in (0, 1]"),
        ({"grad_clip": -1}, "grad_clip=-1.0 must be a finite number >= 0"),
        ({"eval_tokens": 0}, "eval_tokens=0 must be positive"),
        ({"max_docs": -1}, "max_docs=-1 must be >= 0"),
        ({"schedule": "linear"}, "schedule='linear'; allowed: 'cosine', 'wsd'"),
        ({"precision": "fp8"}, "precision='fp8'; allowed: 'auto', 'auto-bf16', '32-true', 'bf16-mixed'"),
        ({"batch_tokens": 1.5}, "batch_tokens=1.5 is not an int"),
    ],
)
def test_train_config_refuses_by_the_declaration_in_one_line(changes, message):
    with pytest.raises(ValueError) as err:
        TrainConfig(**changes)
    assert str(err.value) == message


def test_execution_settings_fall_back_to_the_grid_then_the_declared_default():
    assert {s.name for s in SETTINGS if not s.protocol and not s.in_table} <= {
        f.name for f in dataclasses.fields(ExecutionSettings)
    }
    for f in dataclasses.fields(ExecutionSettings):
        if f.name in BY_NAME and not BY_NAME[f.name].in_table:
            assert f.default == BY_NAME[f.name].default, f.name
    config = RunConfig.create("rd_attnres", "tiny", 0, 2048, "/corpus")
    merged = ExecutionSettings().for_run(config)
    assert (merged.compile, merged.micro_batch_size, merged.routing, merged.loggers) == (
        "auto",
        "auto",
        DEFAULT_ROUTING,
        (),
    )
    grid = RunConfig.create(
        "rd_attnres", "tiny", 0, 2048, "/corpus", train={"micro_batch_size": 4, "routing": "per_site"}
    )
    merged = ExecutionSettings(micro_batch_size=2).for_run(grid)
    assert (merged.micro_batch_size, merged.routing) == (2, "per_site")  # the command line's wins
    assert {s.name for s in TABLE_EXECUTION} == set(EXECUTION_KEYS)
    with pytest.raises(
        ValueError, match="^micro_batch_size=0 must be 'auto' or a positive number of sequences$"
    ):
        RunConfig.create("rd_attnres", "tiny", 0, 2048, "/corpus", train={"micro_batch_size": 0}).execution()
    with pytest.raises(
        ValueError, match="^routing='fast' is not a routing path; allowed: two_phase, per_site$"
    ):
        RunConfig.create("rd_attnres", "tiny", 0, 2048, "/corpus", train={"routing": "fast"}).execution()


def _help(argv: list[str], flag: str) -> str:
    """The ``--help`` text of ``flag`` of the subcommand ``argv[0]``."""
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices[argv[0]]
    action = next(a for a in sub._actions if flag in a.option_strings)
    return action.help


@pytest.mark.parametrize("command", ["run", "work", "launch"])
def test_run_work_and_launch_take_the_declared_flags_with_the_declared_help(command):
    for name in ("micro_batch_size", "routing"):
        setting = BY_NAME[name]
        assert _help([command], setting.flag).replace("%%", "%") == setting.help
    assert BY_NAME["micro_batch_size"].help.startswith("sequences per forward+backward on one device")
    assert "it re-rounds a run, so it is part of the run's numerics key" in BY_NAME["routing"].help
    assert BY_NAME["routing"].help.endswith(f"Default: the grid's [train] routing, else {DEFAULT_ROUTING}")


@pytest.mark.parametrize("command", ["run", "work", "launch", "bench", "retrain"])
def test_every_flag_of_a_declared_setting_is_made_from_its_declaration(command):
    """No command declares a setting's flag by hand: each flag of a declared setting (``--threads``,
    ``--devices``, ``--strategy``, ``--accelerator``, ``--logger``...) carries its declaration's meaning, choices
    and where it stands; only the clause on what it applies to in that command and its default words differ."""
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices[command]
    flags = {s.flag: s for s in SETTINGS if s.flag}
    seen = []
    for action in sub._actions:
        for flag in set(action.option_strings) & set(flags):
            setting = flags[flag]
            text = action.help.replace("%%", "%")
            assert text.startswith(setting.meaning), (flag, text)
            where = setting.help.rsplit(" (", 1)[1].split(")")[0]
            assert f"({where}). Default: " in text, (flag, text)
            assert action.choices == (setting.choices if setting.kind in ("str", "tuple") else None)
            assert action.metavar == setting.metavar
            seen.append(setting.name)
    expected = {
        "run": {"accelerator", "devices", "strategy", "num_nodes", "micro_batch_size", "routing", "threads"}
        | {"stop_after_tokens", "loggers"},
        "work": {"accelerator", "devices", "strategy", "micro_batch_size", "routing", "threads", "loggers"},
        "launch": {"micro_batch_size", "routing", "threads"},
        "bench": {"threads"},
        "retrain": {"threads"},
    }[command]
    assert sorted(seen) == sorted(expected)


def test_a_flag_parses_and_refuses_as_before_the_declaration():
    """``--threads`` is an int, ``--devices`` text parsed by ``parse_devices`` (``auto`` allowed), ``--logger``
    repeatable with the trackers as choices, ``--accelerator`` one of Lightning's; not given, each is its
    declared default (``--devices``: 1 on ``harness run``)."""
    base = ["run", "--variant", "rd_attnres", "--size", "tiny", "--seed", "0", "--budget-tokens", "1024"]
    args = build_parser().parse_args(base)
    assert (args.threads, args.devices, args.strategy, args.accelerator, args.logger) == (
        0,
        None,
        "auto",
        "auto",
        [],
    )
    from harness.commands.options import execution_settings

    assert execution_settings(args).devices == 1
    args = build_parser().parse_args(
        [
            *base,
            "--threads",
            "2",
            "--devices",
            "auto",
            "--logger",
            "csv",
            "--logger",
            "mlflow",
            "--accelerator",
            "cpu",
        ]
    )
    assert (args.threads, args.devices, args.logger, args.accelerator) == (
        2,
        "auto",
        ["csv", "mlflow"],
        "cpu",
    )
    assert execution_settings(args).loggers == ("csv", "mlflow")
    for bad in (["--threads", "two"], ["--logger", "neptune"], ["--accelerator", "tpu"]):
        with pytest.raises(SystemExit):
            build_parser().parse_args([*base, *bad])
    with pytest.raises(ValueError, match=r"^--devices 'x': expected a positive integer or 'auto'$"):
        execution_settings(build_parser().parse_args([*base, "--devices", "x"]))


def test_launch_passes_the_micro_batch_size_and_routing_to_its_workers(tmp_path):
    """A cluster's workers share one micro-batch size (it re-rounds a run, DESIGN 13): ``harness launch
    --micro-batch-size 4 --routing per_site`` gives every worker both, in its pickled options and its recorded
    ``harness work`` line; without them, neither."""
    base = ["launch", "--results", str(tmp_path), "--executor", "local"]
    options = _work_options(
        build_parser().parse_args([*base, "--micro-batch-size", "4", "--routing", "per_site"]), None
    )
    assert (options.settings.micro_batch_size, options.settings.routing) == (4, "per_site")
    argv = _work_argv(options, None)
    assert (
        argv[argv.index("--micro-batch-size") + 1] == "4" and argv[argv.index("--routing") + 1] == "per_site"
    )
    plain = _work_options(build_parser().parse_args(base), None)
    assert (plain.settings.micro_batch_size, plain.settings.routing) == (None, None)
    assert "--micro-batch-size" not in _work_argv(plain, None)
    with pytest.raises(ValueError, match="^micro_batch_size='x' is not an int or 'auto'$"):
        _work_options(build_parser().parse_args([*base, "--micro-batch-size", "x"]), None)


def test_run_takes_its_command_line_only_settings_from_the_declaration():
    """``--num-nodes`` and ``--stop-after-tokens`` of ``harness run``: typed, defaulted and explained by their
    declarations."""
    for name in ("num_nodes", "stop_after_tokens"):
        setting = BY_NAME[name]
        assert _help(["run"], setting.flag).replace("%%", "%") == setting.help
    args = build_parser().parse_args(
        ["run", "--variant", "rd_attnres", "--size", "tiny", "--seed", "0", "--budget-tokens", "1024"]
    )
    assert (args.num_nodes, args.stop_after_tokens) == (1, None)
    assert BY_NAME["stop_after_tokens"].help.endswith(
        "(execution setting: the run id and the protocol hash stay). Default: none"
    )
