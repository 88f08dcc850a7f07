"""What a first try hits (issue 31), through the real command line on the real sample text.

* a grid's relative corpus is relative to the grid file, so `harness queue path/to/grid.toml`
  queues the same corpus from any directory (`--corpus` stays relative to the cwd);
* a budget that is not a whole number of global batches is refused by `harness queue` and
  `harness run` with the two nearest budgets that are, before anything is written;
* a user's control spec ($HARNESS_SPEC_PATH at queue time) travels in its runs' configs, so a
  worker started without the variable trains it; `harness status --watch --until-done` stops
  when the grid is finished;
* `harness tune --help`'s example writes the tuned settings into a new grid under a new name.

Two tiny runs train (about 20 s on 2 CPU cores); the rest only queues.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import warm

from harness.scheduling.grids.grid import load_grid

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT.parent / "shared/data/fineweb_edu_sample"
USER_SPEC = Path(__file__).parents[1] / "specs" / "dup_route_avg.toml"
GRID = """\
name = "{name}"
corpus = "{corpus}"
sizes = ["tiny"]
seeds = [0]
budgets_tokens = [{budget}]

[variants]
block_attnres = "parent"
{extra}
[train]
vocab_size = 512
batch_tokens = 1024
eval_tokens = 2048
"""
pytestmark = [
    pytest.mark.skipif(not SAMPLE.is_dir(), reason=f"sample corpus {SAMPLE} absent"),
    pytest.mark.own_cache,  # its commands build their corpus in RESULTS/cache (conftest)
]


def harness(*args, env, cwd=None, check=True, timeout=600) -> subprocess.CompletedProcess:
    proc = warm.run(
        [sys.executable, "-m", "harness", *map(str, args)],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check:
        assert proc.returncode == 0, (
            f"harness {' '.join(map(str, args))}:\n{proc.stdout}\n{proc.stderr[-4000:]}"
        )
    return proc


def environment(tmp_path: Path, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("HARNESS_SPEC_PATH", "HARNESS_CORPUS")}
    return {
        **env,
        "HARNESS_RESULTS": str(tmp_path / "results"),
        "HARNESS_CACHE": str(tmp_path / "cache"),
        "HARNESS_PROGRESS": "lines",
        **extra,
    }


@pytest.mark.slow  # 20 s on 2 cores: out of the developer's loop (`pytest -m "not slow"`)
def test_a_grid_queues_the_same_corpus_from_any_directory(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    shutil.copy(SAMPLE / "fineweb_edu_misc6.jsonl", corpus)
    (tmp_path / "grids").mkdir()
    (tmp_path / "elsewhere").mkdir()
    grid = tmp_path / "grids" / "g.toml"
    grid.write_text(GRID.format(name="g", corpus="../corpus", budget=2048, extra=""))
    env = environment(tmp_path)
    for i, (cwd, path, more) in enumerate(
        [
            (tmp_path / "elsewhere", "../grids/g.toml", []),
            ("/", grid, []),
            (tmp_path / "grids", "g.toml", []),
            (tmp_path, grid, ["--corpus", "corpus"]),
        ]
    ):  # --corpus: the cwd's
        out = harness("queue", path, *more, "--results", tmp_path / f"results{i}", env=env, cwd=cwd).stdout
        assert f"corpus: {corpus}\n" in out and "g: queued 1 runs" in out, (cwd, out)
    wrong = harness(
        "queue",
        grid,
        "--corpus",
        "corpus",
        "--results",
        tmp_path / "r",
        env=env,
        cwd=tmp_path / "grids",
        check=False,
    )  # there is no grids/corpus
    assert (
        wrong.returncode == 2
        and f"corpus {tmp_path / 'grids/corpus'} not found (from --corpus)" in wrong.stderr
    )
    # the shipped grids name the sample wherever they are queued from
    assert load_grid(ROOT / "ablations/rd_controls_small.toml").expand()[0].corpus == str(SAMPLE)


@pytest.mark.slow  # 9 s on 2 cores: out of the developer's loop (`pytest -m "not slow"`)
def test_a_budget_between_whole_global_batches_is_refused_before_anything_is_written(tmp_path):
    grid = tmp_path / "g.toml"
    grid.write_text(
        GRID.format(name="g", corpus=SAMPLE, budget=10_000, extra="").replace(
            "batch_tokens = 1024", "batch_tokens = 2048"
        )
    )
    env = environment(tmp_path)
    want = (
        "budget_tokens=10_000 is not a whole number of global batches (batch_tokens=2_048); "
        "the nearest budgets that are: 8_192 (4 steps) or 10_240 (5 steps)"
    )
    queued = harness("queue", grid, env=env, check=False)
    assert queued.returncode == 2 and queued.stderr.count("\n") == 1 and want in queued.stderr, queued.stderr
    assert queued.stderr.startswith("harness queue: error: run g:tiny:block_attnres:s0:10000: ")
    run = harness(
        "run",
        "--variant",
        "block_attnres",
        "--size",
        "tiny",
        "--seed",
        "0",
        "--budget-tokens",
        "10000",
        "--corpus",
        SAMPLE,
        "--set",
        "batch_tokens=2048",
        env=env,
        check=False,
    )
    assert run.returncode == 2 and run.stderr.count("\n") == 1 and want in run.stderr, run.stderr
    assert not (tmp_path / "results").exists() and not (tmp_path / "cache").exists()  # no queue, no corpus
    grid.write_text(grid.read_text().replace("[10000]", "[10240]"))
    assert "g: queued 1 runs" in harness("queue", grid, env=env).stdout


@pytest.mark.slow  # 12 s on 2 cores: out of the developer's loop (`pytest -m "not slow"`)
def test_a_user_spec_travels_with_its_runs_and_status_waits_until_done(tmp_path):
    specs = tmp_path / "specs"
    specs.mkdir()
    shutil.copy(USER_SPEC, specs)
    grid = tmp_path / "g.toml"
    grid.write_text(
        GRID.format(
            name="spec_travels",
            corpus=SAMPLE,
            budget=2048,
            extra='dup_route_avg = "control"   # the user\'s spec\n',
        )
    )
    env = environment(tmp_path)
    refused = harness("queue", grid, env=env, check=False)  # without the folder the variant is unknown
    assert refused.returncode == 2 and "unknown variant 'dup_route_avg'" in refused.stderr
    assert "queued 2 runs" in harness("queue", grid, env={**env, "HARNESS_SPEC_PATH": str(specs)}).stdout
    watch = warm.popen(
        [
            sys.executable,
            "-m",
            "harness",
            "status",
            "--watch",
            "--until-done",
            "--interval",
            "0.5",
            "--grid",
            "spec_travels",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out = harness("work", "--threads", "1", "--quiet", env=env).stdout  # no $HARNESS_SPEC_PATH here
        assert "worker trained 2 runs: 2 done, 0 diverged, 0 failed" in out, out
        shown, err = watch.communicate(timeout=120)
    finally:
        watch.kill()
    assert watch.returncode == 0, err
    blocks = shown.split("--- ")
    done_row = re.compile(r"^spec_travels .*  finished$", re.M)  # the grid's row, ETA column
    assert (
        len(blocks) >= 3 and done_row.search(blocks[-1]) and not done_row.search(blocks[1])
    )  # watched it run
    assert shown.endswith("grid spec_travels: nothing queued or running; stopping (--until-done)\n")
    rows = json.loads(
        harness(
            "sql", "select variant, status, config from runs order by variant", "--format", "json", env=env
        ).stdout
    )
    assert [(r["variant"], r["status"]) for r in rows] == [
        ("block_attnres", "done"),
        ("dup_route_avg", "done"),
    ]
    assert json.loads(rows[1]["config"])["spec"] == USER_SPEC.read_text()  # the file's text, in its order
    assert "spec" not in json.loads(rows[0]["config"])  # a shipped variant stays a name
    again = harness("status", "--watch", "--until-done", env=env, timeout=60)  # already finished: one block
    assert again.stdout.count("--- ") == 1 and "stopping (--until-done)" in again.stdout
    plain = harness("status", "--until-done", env=env, check=False)
    assert plain.returncode == 2 and "--until-done goes with --watch" in plain.stderr


def test_the_tune_help_example_writes_a_new_grid_under_a_new_name():
    env = {k: v for k, v in os.environ.items() if k != "HARNESS_SPEC_PATH"}
    text = " ".join(harness("tune", "--help", env=env).stdout.replace("\\\n", " ").split())
    ((source, target, name),) = re.findall(r"--grid (\S+) --write-grid (\S+) --grid-name (\S+)", text)
    assert load_grid(ROOT / source).name != name == Path(target).stem and not (ROOT / target).exists()
    assert f"harness queue {target}" in text
