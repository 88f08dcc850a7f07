"""Tuning the protocol (DESIGN section 9) end to end on real text, and the queue as Optuna studies.

A module fixture runs the real chain once: `harness tune` a 6-trial study of block_attnres on
`tiny` (FineWeb-Edu sample), `harness queue` a 2-run grid, two `harness work` processes drain
both. The tests then read it with Optuna's own API, DuckDB, `harness tune --show`,
`--write-grid` and optuna-dashboard in headless chromium.
"""

from __future__ import annotations

import json
import os
import re
import struct
import subprocess
import sys
import time
import tomllib
import urllib.request
from pathlib import Path

import optuna
import pytest
import warm
from optuna.storages.journal import JournalFileBackend, JournalStorage
from optuna.trial import TrialState

from harness.cli import main as cli

import browser
import services

pytestmark = pytest.mark.own_cache  # its commands build their corpus in RESULTS/cache (conftest)

SAMPLE = Path(__file__).resolve().parents[3] / "shared/data/fineweb_edu_sample"
BASE = ["--set", "vocab_size=512", "--set", "batch_tokens=1024", "--set", "eval_tokens=2048"]
GRID = """\
# a grid whose comments must survive --write-grid
name = "g2"
corpus = "{corpus}"
sizes = ["tiny"]
seeds = [0]
budgets_tokens = [4096]

[variants]
block_attnres = "parent"   # the parent
rd_attnres = "treatment"

[train]                    # tiny settings
vocab_size = 512
batch_tokens = 1024
eval_tokens = 2048
eval_every_tokens = 2048   # keep me
"""


def harness(*args, env, check=True, timeout=600):
    proc = warm.run(
        [sys.executable, "-m", "harness", *map(str, args)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check:
        assert proc.returncode == 0, (
            f"harness {' '.join(map(str, args))}:\n{proc.stdout}\n{proc.stderr[-4000:]}"
        )
    return proc


def journal(results: Path) -> JournalStorage:
    return JournalStorage(JournalFileBackend(str(results / "queue.journal")))


@pytest.fixture(scope="module")
def drained(tmp_path_factory):
    """A results folder with tuning study tune:t6 (6 trials) and grid g2 (2 runs), drained by two workers."""
    if not SAMPLE.is_dir():
        pytest.fail(f"sample corpus absent: {SAMPLE}")
    tmp = tmp_path_factory.mktemp("tune")
    results = tmp / "results"
    env = {
        **os.environ,
        "HARNESS_RESULTS": str(results),
        "HARNESS_PROGRESS": "lines",
    }
    out = harness(
        "tune",
        "--variant",
        "block_attnres",
        "--size",
        "tiny",
        "--budget-tokens",
        4096,
        "--trials",
        6,
        "--corpus",
        SAMPLE,
        "--name",
        "t6",
        *BASE,
        env=env,
    ).stdout
    assert "study tune:t6 created" in out and "queued 6 trial(s) (seeds 10000 .. 10005)" in out
    again = harness(
        "tune",
        "--variant",
        "block_attnres",
        "--size",
        "tiny",
        "--budget-tokens",
        4096,
        "--trials",
        6,
        "--corpus",
        SAMPLE,
        "--name",
        "t6",
        *BASE,
        env=env,
    ).stdout
    assert "nothing to add" in again
    grid = tmp / "g2.toml"
    grid.write_text(GRID.format(corpus=SAMPLE))
    harness("queue", grid, env=env)
    workers = [
        warm.popen(
            [sys.executable, "-m", "harness", "work", "--threads", "1", "--quiet"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outs = [w.communicate(timeout=900) for w in workers]
    assert all(w.returncode == 0 for w in workers), [o[1][-3000:] for o in outs]
    trained = [int(o[0].rsplit("worker trained ", 1)[1].split()[0]) for o in outs]
    assert sum(trained) == 8  # 6 trials + 2 grid runs, each exactly once
    return {"results": results, "env": env, "grid": grid, "tmp": tmp}


@pytest.mark.slow  # the `drained` fixture trains a six-trial study and a grid
def test_six_trial_study_best_value_is_the_smallest_val_nll_in_duckdb(drained):
    results, env = drained["results"], drained["env"]
    study = optuna.load_study(study_name="tune:t6", storage=journal(results))
    ended = [t for t in study.trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
    assert len(ended) == 6 and len(study.trials) == 6  # every trial finished once, none retried
    assert sorted(t.user_attrs["seed"] for t in ended) == list(range(10_000, 10_006))
    sql = harness(
        "sql",
        "select run_id, role, status, seed, config from runs where grid = 'tune:t6' order by seed",
        "--format",
        "json",
        env=env,
    ).stdout
    rows = json.loads(sql)
    assert [r["seed"] for r in rows] == list(range(10_000, 10_006))
    assert {r["role"] for r in rows} == {"tune"} and {r["status"] for r in rows} <= {"done", "pruned"}
    best = json.loads(
        harness(
            "sql", "select min(val_nll) as v from final where grid = 'tune:t6'", "--format", "json", env=env
        ).stdout
    )[0]["v"]
    assert study.best_value == best  # the same float: both read the run's last validation NLL
    for t in ended:
        ua = t.user_attrs
        assert {k: ua[k] for k in ("variant", "role", "size", "budget_tokens")} == {
            "variant": "block_attnres",
            "role": "tune",
            "size": "tiny",
            "budget_tokens": 4096,
        }
        cfg = json.loads(ua["config"])
        # the drawn params are the trial's params and its run's training settings
        assert cfg["train"]["lr"] == t.params["lr"]
        assert cfg["train"]["warmup_tokens"] == max(1, round(t.params["warmup_frac"] * 4096))
        assert t.intermediate_values  # the pruner was fed the validation NLL at each evaluation
        if t.state == TrialState.COMPLETE:
            assert t.value == ua["val_nll"]
    assert len({t.params["lr"] for t in ended}) == 6  # six different points


@pytest.mark.slow  # the `drained` fixture trains a six-trial study and a grid
def test_grid_study_has_values_and_status_reads_every_study(drained):
    results, env = drained["results"], drained["env"]
    storage = journal(results)
    assert {s.study_name for s in optuna.get_all_study_summaries(storage)} == {"tune:t6", "g2"}
    g2 = optuna.load_study(study_name="g2", storage=storage)
    final = json.loads(
        harness(
            "sql", "select run_id, val_nll from final where grid = 'g2'", "--format", "json", env=env
        ).stdout
    )
    assert {t.user_attrs["run_id"]: t.value for t in g2.trials} == {r["run_id"]: r["val_nll"] for r in final}
    status = harness("status", env=env).stdout
    assert "g2 " in status and "tune:t6 " in status


@pytest.mark.slow  # the `drained` fixture trains a six-trial study and a grid
def test_show_json_and_write_grid_keeps_comments(drained):
    results, env, grid = drained["results"], drained["env"], drained["grid"]
    study = optuna.load_study(study_name="tune:t6", storage=journal(results))
    shown = json.loads(harness("tune", "--show", "t6", "--json", env=env).stdout)
    assert shown["best_value"] == study.best_value and shown["best_params"] == study.best_params
    assert len(shown["trials"]) == 6 and shown["importances"] is not None
    text = harness("tune", "--show", "tune:t6", env=env).stdout
    assert f"best: val_nll {study.best_value:.4f}" in text and "parameter importances" in text

    before = grid.read_text()
    # g2 is queued: its settings are fixed, and the refusal names the way (issue 31)
    refused = harness("tune", "--show", "t6", "--write-grid", grid, env=env, check=False)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1 and grid.read_text() == before
    assert (
        f"grid 'g2' is already queued (2 runs): its settings are fixed (its runs are the runs it names); "
        f"write a new grid under a new name: --grid {grid} --write-grid NEW.toml --grid-name NEW"
    ) in refused.stderr
    new = drained["tmp"] / "tuned" / "g3.toml"
    new.parent.mkdir()
    out = harness(
        "tune", "--show", "t6", "--grid", grid, "--write-grid", new, "--grid-name", "g3", env=env
    ).stdout
    after = new.read_text()
    lr = study.best_params["lr"]
    warm = max(1, round(study.best_params["warmup_frac"] * 4096))
    assert (
        f"wrote {new}: name: 'g2' -> 'g3'; train.lr: '(unset)' -> {lr!r}; train.warmup_tokens: '(unset)' -> "
        f"{warm!r}"
    ) in out
    assert tomllib.loads(after)["train"] == {
        **tomllib.loads(before)["train"],
        "lr": lr,
        "warmup_tokens": warm,
    }
    assert tomllib.loads(after)["name"] == "g3" and grid.read_text() == before
    for comment in (
        "# a grid whose comments must survive --write-grid",
        "# the parent",
        "# tiny settings",
        "# keep me",
    ):
        assert comment in after
    again = harness(
        "tune", "--show", "t6", "--grid", grid, "--write-grid", new, "--grid-name", "g4", env=env, check=False
    )  # another grid file is never replaced
    assert again.returncode == 2 and "the file exists and is not the grid written from" in again.stderr
    harness(
        "tune", "--show", "t6", "--write-grid", new, "--per-variant", env=env
    )  # g3 is not queued: in place
    table = tomllib.loads(new.read_text())["train"]
    assert table["block_attnres"] == {"lr": lr, "warmup_tokens": warm} and "# keep me" in new.read_text()


@pytest.mark.slow  # Chromium
def test_optuna_dashboard_shows_the_grid_study_with_values(drained):
    results = drained["results"]
    port = services.free_port()
    log = drained["tmp"] / "dashboard.log"
    exe = Path(sys.executable).with_name("optuna-dashboard")
    with open(log, "w") as f:
        proc = subprocess.Popen(
            [str(exe), str(results / "queue.journal"), "--host", "127.0.0.1", "--port", str(port)],
            stdout=f,
            stderr=subprocess.STDOUT,
        )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.time() + 60
        while True:
            try:
                summaries = json.loads(urllib.request.urlopen(f"{base}/api/studies", timeout=5).read())
                break
            except OSError:
                assert proc.poll() is None and time.time() < deadline, (
                    f"optuna-dashboard did not start:\n{log.read_text()}"
                )
                time.sleep(0.5)
        ids = {s["study_name"]: s["study_id"] for s in summaries["study_summaries"]}
        study = optuna.load_study(study_name="g2", storage=journal(results))
        for t in study.trials:  # every trial's value, as the dashboard's trial list shows it
            text = browser.visible_text(
                browser.dump_dom(f"{base}/dashboard/studies/{ids['g2']}/trials?numbers={t.number}")
            )
            assert text.startswith("Optuna Dashboard g2 (id=")
            shown = rf"Trial {t.number} \(trial_id=\d+\) Complete (Best Trial )?Note Value {re.escape(repr(t.value))} "
            assert re.search(shown, text), text[:2000]
            assert f"run_id {t.user_attrs['run_id']}" in text
        page = browser.visible_text(browser.dump_dom(f"{base}/dashboard/studies/{ids['g2']}"))
        assert f"Best Trial (number={study.best_trial.number}) {study.best_value!r}" in page
        png = browser.screenshot_url(
            f"{base}/dashboard/studies/{ids['tune:t6']}", drained["tmp"] / "dash.png"
        )
        head = png.read_bytes()[:24]
        assert head[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", head[16:24]) == (1400, 1000)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "entry, message",
    [
        ("lr", "--space 'lr': malformed"),
        ("nope=0:1", "'nope' is not a training setting"),
        ("eval_tokens=1:2", "'eval_tokens' is not tunable"),
        ("lr=0.01:0.01", "empty range 0.01:0.01"),
        ("lr=log:0:0.1", "a log range needs LOW > 0"),
        ("beta2=0.9:1.5", "at beta2=1.5: beta2=1.5 must be in [0, 1]"),
        ("lr=a:b", "the range ends must be numbers"),
    ],
)
def test_bad_space_is_refused_with_its_name(tmp_path, capsys, entry, message):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"text": "hello"}\n')
    code = cli(
        [
            "tune",
            "--results",
            str(tmp_path / "r"),
            "--variant",
            "block_attnres",
            "--size",
            "tiny",
            "--budget-tokens",
            "4096",
            "--trials",
            "2",
            "--corpus",
            str(corpus),
            "--space",
            entry,
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "r" / "queue.journal").exists()  # nothing half-written


def test_same_name_with_another_space_is_refused(tmp_path, capsys):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"text": "hello"}\n')
    args = [
        "tune",
        "--results",
        str(tmp_path / "r"),
        "--variant",
        "block_attnres",
        "--size",
        "tiny",
        "--budget-tokens",
        "4096",
        "--trials",
        "2",
        "--corpus",
        str(corpus),
        "--name",
        "x",
    ]
    assert cli(args) == 0
    assert (
        cli([*args, "--trials", "3"]) == 0
        and "queued 1 trial(s) (seeds 10002 .. 10002)" in capsys.readouterr().out
    )
    assert cli([*args, "--space", "lr=log:1e-3:1e-2"]) == 2
    err = capsys.readouterr().err
    assert "tuning study 'tune:x' exists with another space: space:" in err and "lr=log:0.001:0.01" in err
    assert cli(["tune", "--results", str(tmp_path / "r"), "--show", "nope"]) == 2
    assert "no tuning study 'tune:nope' in this storage; tuning studies: tune:x" in capsys.readouterr().err
