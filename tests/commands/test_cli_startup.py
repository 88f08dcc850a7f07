"""Start-up of the `harness` command: `--help` and the read-only commands load no torch.

Each case runs ``python -X importtime -m harness ...`` in a fresh interpreter and reads the
modules it imported from the importtime log on stderr: `--help` (and every command's
`--help`) must load neither torch, Lightning, Optuna, submitit, DuckDB nor polars (`--help`
loads no command module at all); `status` and `sql`, which do real
work on a real queue and store, must load neither torch nor Lightning. No timing
assertions (the start-up times are measured in the report of the change). CPU only, ~15 s:

    python -m pytest -q tests/commands/test_cli_startup.py
"""

from __future__ import annotations

import importlib
import re
import subprocess
import sys

import pytest

from harness.cli import COMMANDS, summary
from harness.cli import main as cli_main
from harness.store.store import Store

from chaos import SAMPLE
from queue_stubs import configs

pytestmark = pytest.mark.own_cache  # its commands build their corpus in RESULTS/cache (conftest)

HEAVY = ("torch", "lightning", "optuna")


def imported(*argv: str, cwd=None) -> set[str]:
    """Top-level packages a fresh ``python -m harness ARGV`` imports (from ``-X importtime``)."""
    rc, mods, _, _ = run_logged(*argv, cwd=cwd)
    assert rc == 0, mods
    return mods


def run_logged(*argv: str, cwd=None) -> tuple[int, set[str], str, str]:
    """``(exit status, top-level packages imported, stdout, stderr less the importtime log)`` of a fresh
    ``python -X importtime -m harness ARGV``."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "harness", *argv],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
    )
    names = re.findall(r"^import time:\s+\d+ \|\s+\d+ \|\s*(\S+)$", proc.stderr, flags=re.MULTILINE)
    assert "harness.cli" in names, proc.stderr[-2000:]  # the log was read
    err = "".join(
        line for line in proc.stderr.splitlines(keepends=True) if not line.startswith("import time:")
    )
    return proc.returncode, {n.split(".")[0] for n in names}, proc.stdout, err


#: What only a command's work needs: never loaded for help text (issue 40).
WORK_ONLY = {*HEAVY, "submitit", "duckdb", "polars"}


def test_help_loads_no_torch_lightning_or_optuna():
    mods = imported("--help")
    assert not mods & (WORK_ONLY | {"numpy"}), sorted(mods & (WORK_ONLY | {"numpy"}))


def test_help_imports_no_command_module():
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "harness", "--help"], capture_output=True, text=True
    )
    assert proc.returncode == 0
    names = re.findall(r"\|\s*(harness\.commands\.\w+)$", proc.stderr, flags=re.MULTILINE)
    assert names == [], names
    for name in COMMANDS:  # each listed with its module docstring's first line, read from the source
        doc = importlib.import_module(f"harness.commands.{COMMANDS[name]}").__doc__.strip().splitlines()[0]
        assert summary(name) == doc
        assert name in proc.stdout


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_command_help_loads_nothing_only_its_work_needs(command):
    mods = imported(command, "--help")
    assert not mods & WORK_ONLY, (command, sorted(mods & WORK_ONLY))


def test_an_unknown_command_lists_the_commands(capsys):
    with pytest.raises(SystemExit) as stop:
        cli_main(["nosuch"])
    assert stop.value.code == 2
    assert "invalid choice: 'nosuch'" in capsys.readouterr().err


@pytest.mark.slow
def test_status_and_sql_load_no_torch_or_lightning(tmp_path):
    from harness.scheduling.queue.run_queue import RunQueue

    results = tmp_path / "results"
    RunQueue.open(None, results).enqueue(configs(seeds=(0,)))
    Store(results).write_result(
        {
            "run": {
                "run_id": "r0",
                "grid": "g",
                "variant": "block_attnres",
                "role": "parent",
                "seed": 0,
                "size": "tiny",
                "budget_tokens": 1000,
                "status": "done",
                "config": {},
            },
            "metrics": [{"step": 1, "tokens": 1000, "split": "val", "name": "nll", "value": 3.0}],
        }
    )
    status = imported("status", "--results", str(results))
    assert "optuna" in status and not status & {"torch", "lightning"}, sorted(status & {"torch", "lightning"})
    sql = imported("sql", "select * from final", "--results", str(results))
    assert "duckdb" in sql and not sql & {"torch", "lightning", "optuna"}, sorted(sql & set(HEAVY))


# A mistyped name or an empty queue is said before torch and Lightning load (issue 66 row 3: 17-35 s on a
# busy 2-core machine, where `harness queue` refused the same variant in 2 s).
RUN = ("run", "--size", "tiny", "--seed", "0", "--budget-tokens", "4096", "--quiet")


@pytest.mark.parametrize(
    "bad, words",
    [
        (("--variant", "rd_atnres"), "harness run: error: unknown variant 'rd_atnres'; valid variants: "),
        (("--variant", "rd_attnres", "--set", "nosuch=1"), "harness run: error: "),
    ],
    ids=["variant", "set-key"],
)
def test_run_refuses_a_bad_name_before_torch_and_lightning_load(tmp_path, bad, words):
    results = tmp_path / "results"
    rc, mods, out, err = run_logged(*RUN, *bad, "--corpus", str(SAMPLE), "--results", str(results))
    assert (rc, out) == (2, "") and err.startswith(words) and err.count("\n") == 1, (rc, out, err)
    assert "nosuch" in err or "rd_atnres" in err, err
    assert not mods & {"torch", "lightning"}, sorted(mods & {"torch", "lightning"})
    assert not results.exists()


def test_work_with_nothing_queued_says_so_before_torch_and_lightning_load(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    rc, mods, out, err = run_logged("work", "--results", str(results))
    assert (rc, err) == (0, ""), (rc, err)
    assert out == "nothing queued; worker stops\nworker trained 0 runs: 0 done, 0 diverged, 0 failed\n", out
    assert not mods & {"torch", "lightning"}, sorted(mods & {"torch", "lightning"})


def test_the_package_imports_nothing_before_its_ctrl_c_handler():
    """harness/__init__.py is the command's first code; its first act is the start-up SIGINT handler, so it
    imports nothing before it (issue 66 row 4: a Ctrl-C as it imported ``threading``, before the handler, was
    a KeyboardInterrupt traceback). In the importtime log, the imports nested under the package's own are
    the lines just before its line, indented deeper: there are none."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "harness", "--help"], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    log = re.findall(r"^import time:\s+\d+ \|\s+\d+ \|( *)(\S+)$", proc.stderr, flags=re.MULTILINE)
    at = [name for _, name in log].index("harness")
    depth = len(log[at][0])
    nested = []
    for indent, name in reversed(log[:at]):
        if len(indent) <= depth:
            break
        nested.append(name)
    assert nested == [], nested
