"""A configuration error is refused before a run is claimed and never spends a retry (issue 45,
rows 2-4): every option of ``harness work`` and ``harness run`` that takes a value, enumerated from
the argument parsers themselves (a new option without a bad value here fails
:func:`test_every_option_has_a_bad_value`), is given bad values; each is refused in one line,
exit 2, and the real queue is left as it was (every run queued, attempt 1, no failure counted).

``python -m pytest -q tests/scheduling/test_config_errors.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fstree import unchanged

from harness.cli import build_parser
from harness.cli import main as cli
from harness.scheduling.queue.run_queue import RunQueue
from harness.train.execution import ExecutionSettings
from harness.train.hardware_override import HARDWARE_CLASS_ENV, SHOWN_CHARS

from queue_stubs import GRID_TOML

SAMPLE = Path(__file__).resolve().parents[3] / "shared/data/fineweb_edu_sample"

# Bad values of each option of `harness work` taking one (the grid's batch: 1024 tokens, 16
# sequences of the tiny context 64; {file}: a file where a folder should be)
WORK_BAD = {
    "--results": ["{file}"],
    "--storage": ["nosuch://x", "sqlite:///q.db"],
    "--max-runs": ["0", "x"],
    "--grid": ["nosuch"],
    "--poll-s": ["0", "-1"],
    "--retries": ["-1"],
    "--lease-s": ["0", "-5"],
    "--storage-retry-s": ["0"],
    "--threads": ["-1", "100000"],
    "--devices": ["3", "0", "x"],
    "--gpus": ["0", "x"],
    "--strategy": ["nosuch", "fsdp", "deepspeed", "ddp_spawn", "ddp_fork"],
    "--accelerator": ["tpu", "mps", "nosuch"],
    "--micro-batch-size": ["0", "x"],
    "--logger": ["nosuch"],
    "--corpus": ["/no/such/corpus"],
    "--routing": ["fused"],
}

# Bad values of each option of `harness run` taking one (its good arguments: RUN_GOOD)
RUN_BAD = {
    "--results": ["{file}"],
    "--variant": ["nosuch"],
    "--size": ["huge"],
    "--seed": ["x"],
    "--budget-tokens": ["100", "x"],
    "--corpus": ["/no/such/corpus"],
    "--grid": ["bad name"],
    "--role": ["boss"],
    "--set": ["lr=x", "nosuch=1", "precision=16-true", "batch_tokens=500"],
    "--devices": ["3", "0"],
    "--strategy": ["nosuch", "fsdp", "ddp_spawn"],
    "--num-nodes": ["0", "2"],
    "--accelerator": ["tpu", "mps"],
    "--micro-batch-size": ["0"],
    "--threads": ["-1"],
    "--stop-after-tokens": ["0"],
    "--logger": ["nosuch"],
    "--routing": ["fused"],
}


# Bad values of each option of `harness launch` taking one (--executor local: nothing may start)
LAUNCH_BAD = {
    "--results": ["{file}"],
    "--executor": ["nosuch"],
    "--workers": ["0", "x"],
    "--gpus-per-worker": ["-1", "3"],
    "--cpus-per-worker": ["0"],
    "--mem": ["lots"],
    "--time": ["0"],
    "--partition": ["gpu"],
    "--sbatch": ["--qos=high"],
    "--signal-delay-s": ["0"],
    "--job-name": ["bad name"],
    "--storage": ["nosuch://x"],
    "--grid": ["nosuch"],
    "--threads": ["-1", "100000"],
    "--max-runs": ["0"],
    "--corpus": ["/no/such/corpus"],
    "--micro-batch-size": ["0", "x"],
    "--routing": ["fused"],
}


def _value_options(command: str) -> set[str]:
    """The options of ``harness COMMAND`` that take a value, read from its argument parser."""
    sub = next(a for a in build_parser([command])._actions if a.dest == "command").choices[command]
    return {a.option_strings[-1] for a in sub._actions if a.option_strings and a.nargs != 0}


@pytest.mark.parametrize("command, table", [("work", WORK_BAD), ("run", RUN_BAD), ("launch", LAUNCH_BAD)])
def test_every_option_has_a_bad_value(command, table):
    assert _value_options(command) == set(table), "give each new option a bad value here"


def _queue(tmp: Path) -> Path:
    """``tmp/results`` with the 3-run grid queued (batch of 16 sequences), and ``tmp/a-file``."""
    results = tmp / "results"
    grid = tmp / "g.toml"
    text = GRID_TOML.format(name="g", corpus=SAMPLE, seeds="[0]", extra="")
    grid.write_text(text.replace("batch_tokens = 512", "batch_tokens = 1024"))
    assert cli(["queue", str(grid), "--results", str(results)]) == 0
    (tmp / "a-file").write_text("")
    return results


@pytest.fixture(scope="module")
def queued(tmp_path_factory):
    """One queue for the refusals (each must leave it untouched)."""
    return _queue(tmp_path_factory.mktemp("q"))


def _untouched(results: Path) -> None:
    """Every run still queued at its first attempt, no failure counted, nothing trained."""
    runs = RunQueue.open(None, results).runs()
    assert [(r.state, r.attempt) for r in runs.values()] == [("queued", 1)] * 3
    assert all(t.user_attrs.get("failures", 0) == 0 for r in runs.values() for t in r.trials)
    assert not (results / "runs").exists() and not (results / "checkpoints").exists()


def _refused(argv: list[str], capsys) -> str:
    capsys.readouterr()
    try:
        status = cli(argv)
    except SystemExit as exc:  # argparse's refusal
        status = exc.code
    err = capsys.readouterr().err.strip()
    assert status == 2, (argv, err)
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    return err


@pytest.mark.slow  # 40 refusals, each loading Lightning's checks: about 20 s on 2 cores
def test_every_bad_work_option_is_refused_before_a_claim(queued, capsys):
    file = str(queued.parent / "a-file")
    for option, values in WORK_BAD.items():
        for value in values:
            argv = ["work", "--results", str(queued), "--threads", "1", "--quiet"]
            argv += [option, value.format(file=file)]
            err = _refused(argv, capsys)
            assert value.format(file=file) in err or option == "--results", err
            _untouched(queued)


def test_devices_that_do_not_split_the_batch_name_it_and_the_allowed_counts(queued, capsys):
    err = _refused(["work", "--results", str(queued), "--devices", "3", "--quiet"], capsys)
    assert err == (
        "harness work: error: --devices 3: run g:tiny:block_attnres:s0:1024 has a global batch of 16 "
        "sequences (batch_tokens=1024, context 64), which does not split over 3 ranks; allowed "
        "--devices: 1, 2, 4, 8, 16"
    )
    _untouched(queued)


@pytest.mark.parametrize(
    "option, value, words",
    [
        ("--strategy", "nosuch", "--strategy nosuch: not a Lightning strategy; allowed: auto, "),
        ("--strategy", "ddp_spawn", "--strategy ddp_spawn: Lightning would start the ranks by spawn"),
        ("--accelerator", "tpu", "argument --accelerator: invalid choice: 'tpu'"),
    ],
)
def test_strategy_and_accelerator_are_refused_in_one_line(queued, capsys, option, value, words):
    err = _refused(["work", "--results", str(queued), option, value, "--quiet"], capsys)
    assert words in err, err
    _untouched(queued)


def test_a_run_queued_after_the_worker_started_is_released_without_a_retry(tmp_path):
    """--wait: a run the settings cannot train, claimed, goes back to the queue at once."""
    queued = _queue(tmp_path)
    from harness.scheduling.workers.loop import work
    from harness.train.settings_check import check_run

    settings = ExecutionSettings(devices=3)
    trained = []
    with pytest.raises(ValueError, match=r"^--devices 3: run g:tiny:\w+:s0:1024 has a global batch of 16 "):
        work(
            RunQueue.open(None, queued),
            lambda config, results: trained.append(config),
            queued,
            log=lambda line: None,
            check_run=lambda config: check_run(config, settings),
        )
    assert trained == []
    runs = RunQueue.open(None, queued).runs()
    assert sorted(r.state for r in runs.values()) == ["queued"] * 3
    assert all(t.user_attrs.get("failures", 0) == 0 for r in runs.values() for t in r.trials)


@pytest.mark.slow  # 30 refusals of `harness run`: about 20 s on 2 cores
def test_every_bad_run_option_is_refused_before_training(tmp_path, capsys):
    results = tmp_path / "results"
    (tmp_path / "a-file").write_text("")
    good = {
        "--variant": "rd_attnres",
        "--size": "tiny",
        "--seed": "0",
        "--budget-tokens": "1024",
        "--corpus": str(SAMPLE),
    }
    for option, values in RUN_BAD.items():
        for value in values:
            args = {**good, option: value.format(file=tmp_path / "a-file")}
            argv = ["run", "--results", str(results), "--quiet", "--set", "batch_tokens=1024"]
            argv += [w for kv in args.items() for w in kv]
            _refused(argv, capsys)
            assert not (results / "runs").exists() and not (results / "checkpoints").exists(), argv


@pytest.mark.slow  # 20 refusals of `harness launch`: about 10 s on 2 cores
def test_every_bad_launch_option_is_refused_before_a_worker_starts(queued, capsys):
    file = str(queued.parent / "a-file")
    for option, values in LAUNCH_BAD.items():
        for value in values:
            argv = [
                "launch",
                "--executor",
                "local",
                "--results",
                str(queued),
                option,
                value.format(file=file),
            ]
            _refused(argv, capsys)
            assert not (queued / "launches").exists(), argv
            _untouched(queued)


# $HARNESS_HARDWARE_CLASS values that are not a class key (issue 61, rows 1-2): a path, the word a run
# without a record reads as, a non-ASCII letter, a newline, 10 KB
BAD_CLASSES = ["../x", "unknown", "ß-gpu", "gpu\nother", "x" * 10_240]


@pytest.mark.parametrize("value", BAD_CLASSES, ids=["path", "unknown", "non-ascii", "newline", "10KB"])
def test_a_bad_hardware_class_is_refused_at_worker_start_and_nothing_is_claimed(
    queued, capsys, monkeypatch, value
):
    """Before: every run was claimed and failed in the run, 3 attempts each, the grid ended failed, and
    the 10 KB value was echoed whole in each failure. Now: one line at the worker's start, the value
    cut, nothing claimed and nothing written."""
    monkeypatch.setenv(HARDWARE_CLASS_ENV, value)
    with unchanged(queued.parent):
        err = _refused(["work", "--results", str(queued), "--threads", "1", "--quiet"], capsys)
    assert err.startswith(f"harness work: error: ${HARDWARE_CLASS_ENV}={value[:SHOWN_CHARS]!r}"), err
    assert "expected a short key of letters, digits and ._+/-" in err, err
    assert len(err) < 2 * SHOWN_CHARS + 250, err  # the value cut, not echoed whole
    _untouched(queued)


@pytest.mark.parametrize("value", ["../x", "x" * 10_240], ids=["path", "10KB"])
def test_a_bad_hardware_class_is_refused_by_run_before_anything_is_created(
    tmp_path, capsys, monkeypatch, value
):
    """Before: one line, but the new results folder held a trained BPE tokenizer. Now: nothing created."""
    monkeypatch.setenv(HARDWARE_CLASS_ENV, value)
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    argv = ["run", "--results", str(tmp_path / "new"), "--quiet", "--variant", "rd_attnres", "--size", "tiny"]
    argv += ["--seed", "0", "--budget-tokens", "1024", "--set", "batch_tokens=1024", "--corpus", str(SAMPLE)]
    with unchanged(tmp_path):
        err = _refused(argv, capsys)
    assert err.startswith(f"harness run: error: ${HARDWARE_CLASS_ENV}={value[:SHOWN_CHARS]!r}"), err
