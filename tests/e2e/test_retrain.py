"""harness retrain: a tiny real grid archived, then re-trained on the same machine, is bit-identical.

2 variants x 2 seeds at the tiny preset on real text: queue -> work -> archive -> retrain (2 workers, the
spawned-process path). The grid trains per-site (``harness work --routing per_site``, as the committed factorial
study did), so only its recorded numerics tell the re-training which path to take (DESIGN section 13). On one
machine with the archive's numerics the runs repeat bit for bit (DESIGN section 4), so the A/A answer is
``bit-identical`` and every shift is exactly 0; the outputs name the re-training commit, numerics and class. A second call into the same folder reads the runs the
first re-trained instead of training them; the folder the grid was trained in (its results are the
archived ones), a corpus with other text (another protocol hash) and an output file that could not be
written (--csv, --json) are refused in one line, exit 2, before anything trains.

    python -m pytest -q tests/e2e/test_retrain.py
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import sys
from pathlib import Path

import pytest
import warm
from fstree import unchanged
from test_progress_display import Terminal, read_until  # tests/ and its folders are on sys.path under pytest

from harness.cli import main as cli

SAMPLE = Path(__file__).resolve().parents[3] / "shared/data/fineweb_edu_sample"
GRID = """
name = "aa_tiny"
corpus = "{corpus}"
sizes = ["tiny"]
seeds = [0, 1]
budgets_tokens = [2048]
[variants]
block_attnres = "parent"
rd_attnres = "treatment"
[train]
vocab_size = 512
batch_tokens = 512
eval_tokens = 1024
eval_every_tokens = 2048
[analysis]
min_effect_nats = 0.02
"""


#: a progress line of a run (harness/train/progress.py), as `harness work` prints it off a terminal
PROGRESS_LINE = re.compile(r"^\[(\w+ s\d+)\] +\d+% [\d,]+/[\d,]+ tokens, [\d,]+ tok/s, ETA ", re.MULTILINE)


def harness(*args, env, code=0):
    proc = warm.run([sys.executable, "-m", "harness", *args], env=env, capture_output=True, text=True)
    assert proc.returncode == code, f"harness {' '.join(args)}:\n{proc.stdout}\n{proc.stderr[-3000:]}"
    return proc


def archived_tiny(tmp_path: Path, *routing: str) -> tuple[Path, dict]:
    """The tiny grid queued, trained (one thread; ``routing``: e.g. ``("--routing", "per_site")``) and
    archived: ``(archive, env)``, ``env`` with its results folder and progress off."""
    grid = tmp_path / "aa_tiny.toml"
    grid.write_text(GRID.format(corpus=SAMPLE))
    env = {**os.environ, "HARNESS_RESULTS": str(tmp_path / "results"), "HARNESS_PROGRESS": "off"}
    harness("queue", str(grid), env=env)
    harness("work", "--threads", "1", "--quiet", *routing, env=env)
    archive = tmp_path / "aa_tiny.tar.gz"
    harness("archive", "--grid", "aa_tiny", "--out", str(archive), env=env)
    return archive, env


@pytest.mark.slow  # trains 4 tiny runs twice, prepares a second corpus
@pytest.mark.skipif(not SAMPLE.is_dir(), reason="sample corpus absent")
def test_a_grid_retrained_on_its_own_machine_is_bit_identical(tmp_path):
    archive, env = archived_tiny(tmp_path, "--routing", "per_site")

    again = tmp_path / "again"
    args = [
        "retrain",
        str(archive),
        "--pairs",
        "2",
        "--workers",
        "2",
        "--threads",
        "1",
        "--results",
        str(again),
        "--corpus",  # the archive names its corpus by fingerprint, not by this machine's path
        str(SAMPLE),
    ]
    refused = harness(*args[:-2], env=env, code=2)  # no --corpus: the archive holds no path to find it by
    assert "fineweb_edu_sample (fingerprint" in refused.stderr and "pass --corpus PATH" in refused.stderr
    assert not again.exists()
    lines = {
        **env,
        "HARNESS_PROGRESS": "lines",
    }  # progress as `harness work` logs it, from both worker processes
    out = harness(*args, "--csv", str(tmp_path / "aa.csv"), "--json", str(tmp_path / "aa.json"), env=lines)
    assert "**Verdict: bit-identical" in out.stdout, out.stdout
    shown = {m.group(1) for m in PROGRESS_LINE.finditer(out.stderr)}
    assert shown == {f"{v} s{s}" for v in ("block_attnres", "rd_attnres") for s in (0, 1)}, out.stderr
    assert "re-training 4 runs" in out.stderr
    assert "with the archive's numerics (per_site/1): the check compares machines" in out.stderr, out.stderr
    rows = list(csv.DictReader((tmp_path / "aa.csv").open()))
    runs = [r for r in rows if r["level"] == "run"]
    assert len(runs) == 4 and all(r["archived"] == r["new"] and float(r["shift"]) == 0.0 for r in runs)
    assert {r["verdict"] for r in rows} == {"bit-identical"} and rows[0]["threads_per_worker"] == "1"
    data = json.loads((tmp_path / "aa.json").read_text())
    assert data["machine"]["cpu_model"] and data["machine"]["torch"] and data["archive"] == "aa_tiny.tar.gz"
    # the class the output names is the one each re-trained run's result file records
    recorded = {json.loads(p.read_text())["run"]["hardware"] for p in (again / "runs").glob("*.json")}
    assert recorded == {data["machine"]["hardware"]} and {r["hardware"] for r in rows} == recorded
    assert f"hardware class {data['machine']['hardware']}." in out.stdout and "unknown" not in recorded
    # ... and the commit and numerics: the archive's, re-trained on its path
    new = [json.loads(p.read_text())["run"] for p in (again / "runs").glob("*.json")]
    assert {r["numerics"] for r in new} == {"per_site/1"} and len({r["code_version"] for r in new}) == 1
    machine = data["machine"]
    assert (machine["numerics"], machine["archive_numerics"], machine["archive_numerics_used"]) == (
        "per_site/1",
        "per_site/1",
        True,
    )
    assert machine["commit"] == new[0]["code_version"]
    assert {(r["commit"], r["numerics"], r["archive_numerics"]) for r in rows} == {
        (machine["commit"], "per_site/1", "per_site/1")
    }
    assert f"training commit {machine['commit']}, numerics per_site/1, hardware class " in out.stdout
    assert (
        "The archive's numerics (per_site/1) re-trained every run: the check compares machines." in out.stdout
    )
    shared = (tmp_path / "aa.csv").read_text() + (tmp_path / "aa.json").read_text() + out.stdout
    assert str(tmp_path) not in shared and os.uname().nodename not in shared  # no path, no host name

    out = harness(*args, env=env)  # again: the 4 runs re-trained there are read back, not trained
    assert "re-training 0 runs" in out.stderr and "4 re-trained here before" in out.stderr
    assert "**Verdict: bit-identical" in out.stdout


STUDY = Path(__file__).resolve().parents[2] / "reports/factorial_study/rd_factorial_study.tar.gz"


@pytest.mark.slow  # 7 harness processes, prepares a second corpus (~45 s of CPU)
@pytest.mark.skipif(not SAMPLE.is_dir(), reason="sample corpus absent")
@pytest.mark.own_cache  # what a refusal leaves is looked for in its results folder (conftest)
def test_retrain_refuses_before_training_in_one_line(tmp_path):
    """The committed study's archive: it names its corpus by content (no path travels), another text gives
    another protocol hash, and the folder it was imported into holds the archived results."""
    env = {**os.environ, "HARNESS_PROGRESS": "off"}
    fresh = tmp_path / "never"
    base = ["retrain", str(STUDY), "--pairs", "2", "--results", str(fresh)]

    err = harness(*base, env=env, code=2).stderr.strip()
    assert "\n" not in err and "names by its content" in err and "pass --corpus PATH" in err, err
    assert not fresh.exists()

    other = tmp_path / "other_text"  # another corpus: this code gives the configs another protocol hash
    other.mkdir()
    shutil.copy(SAMPLE / "fineweb_edu_sample10BT_efscorer150.jsonl", other)
    err = harness(*base, "--corpus", str(other), env=env, code=2).stderr.strip()
    assert "\n" not in err and "protocol hash" in err and "the archive records" in err, err
    assert not fresh.exists()  # refused before anything trained; the folder it made is gone

    imported = tmp_path / "imported"
    harness("import", str(STUDY), "--results", str(imported), env=env)
    before = sorted(p.relative_to(imported) for p in imported.rglob("*"))
    err = harness(
        "retrain",
        str(STUDY),
        "--pairs",
        "2",
        "--corpus",
        str(SAMPLE),
        "--results",
        str(imported),
        env=env,
        code=2,
    )
    err = err.stderr.strip()
    assert "\n" not in err and "no re-training of this archive wrote" in err, err
    assert sorted(p.relative_to(imported) for p in imported.rglob("*")) == before

    err = harness("retrain", str(STUDY), "--corpus", "", "--results", str(fresh), env=env, code=2).stderr
    assert "corpus '' is an empty path" in err and err.count("\n") == 1, err  # as queue and work refuse it
    assert not fresh.exists()
    for bad, words in (
        (["--pairs", "1"], "--pairs 1: expected at least 2"),
        (["--pairs", "25"], "--pairs 25: the archive has 24 seeds done for every variant"),
        (["--seeds", "0 99"], "seed 99 is not done for every variant"),
        (["--workers", "0"], "--workers 0"),
        (["--threads", "-1"], "--threads -1: expected 0 (torch's default) to "),  # as work refuses it
    ):
        err = harness(
            "retrain", str(STUDY), *bad, "--corpus", str(SAMPLE), "--results", str(fresh), env=env, code=2
        )
        assert words in err.stderr and err.stderr.count("\n") == 1, err.stderr
        assert not fresh.exists()


@pytest.mark.slow  # re-trains 4 tiny runs (their archive: conftest.aa_tiny_archive, trained once per process)
@pytest.mark.skipif(not SAMPLE.is_dir(), reason="sample corpus absent")
def test_two_pairs_retrained_with_other_threads_are_too_few_to_tell_and_name_what_retrained_them(
    tmp_path, aa_tiny_archive
):
    """Archived at --threads 1, re-trained at --threads 2. On a CPU whose kernels split their sums by thread the
    runs move by about a millionth of a nat (measured on an Intel Xeon); this machine's tiny-model kernels do
    not split, and the runs repeat bit for bit. So the test then moves each re-trained run's final NLL by such a
    millionth in its result file and reads the folder again (--report-only): two pairs cannot price a bias (no
    test rests on fewer than 3), so the answer is 'too few pairs to tell' with how little the runs moved, never
    'a fresh draw' or 'like new draws'; the output names the commit, numerics and hardware class the re-trained
    runs' result files record."""
    archive, env = aa_tiny_archive
    again = tmp_path / "again"
    args = ["retrain", str(archive), "--pairs", "2", "--threads", "2", "--results", str(again)]
    args += ["--corpus", str(SAMPLE), "--json", str(tmp_path / "aa.json")]
    out = harness(*args, env=env)
    data = json.loads((tmp_path / "aa.json").read_text())
    assert data["verdict"] in ("bit-identical", "too few pairs to tell"), out.stdout
    if (
        data["verdict"] == "bit-identical"
    ):  # this CPU: move the re-trained runs as a thread-splitting one does
        for i, path in enumerate(sorted((again / "runs").glob("*.json"))):
            result = json.loads(path.read_text())
            last = max(
                (m for m in result["metrics"] if m["split"] == "val" and m["name"] == "nll"),
                key=lambda m: (m["tokens"], m["step"]),
            )
            last["value"] += (1, -2, 3, -1)[i] * 1e-6
            path.write_text(json.dumps(result))
        out = harness(*args, "--report-only", env=env)
        data = json.loads((tmp_path / "aa.json").read_text())
    shifts = [abs(r["new"] - r["archived"]) for r in data["runs"]]
    assert 0 < max(shifts) < 1e-3, shifts  # a nudge, not a redraw
    assert data["verdict"] == "too few pairs to tell", out.stdout
    verdict = out.stdout[out.stdout.index("**Verdict") : out.stdout.index("## Runs")]
    assert verdict.startswith("**Verdict: too few pairs to tell: 2 pairs per contrast")
    assert "fresh draw" not in out.stdout and "like new draws" not in out.stdout
    records = [json.loads(p.read_text())["run"]["environment"] for p in (again / "runs").glob("*.json")]
    commits = {r["code_version"] for r in records}
    numerics = {r.get("numerics", "unknown") for r in records}
    assert len(commits) == 1 and len(numerics) == 1 and data["machine"]["commit"] == commits.pop()
    line = f"training commit {data['machine']['commit']}, numerics {numerics.pop()}, hardware class "
    assert line in out.stdout and data["machine"]["commit"] != "unknown"


@pytest.mark.parametrize(
    "outputs, words",
    [
        (["--json", "{tmp}/a_folder"], "--json {tmp}/a_folder: is a folder"),
        (["--csv", "{tmp}/a_folder"], "--csv {tmp}/a_folder: is a folder"),
        (["--csv", "{tmp}/a_file/aa.csv"], "--csv {tmp}/a_file/aa.csv: {tmp}/a_file is a file"),
        (["--json", ""], "argument --json: '': an empty path"),
        (["--csv", "{tmp}/aa.txt", "--json", "{tmp}/aa.txt"], "--csv and --json both name {tmp}/aa.txt"),
        (["--json", "{tmp}/study.tar.gz"], "--json {tmp}/study.tar.gz: is the archive FILE"),
    ],
)
@pytest.mark.parametrize("report_only", [False, True])
@pytest.mark.own_cache  # nothing created: its tmp_path is compared before and after (conftest)
def test_retrain_refuses_an_output_it_could_not_write_before_any_work(
    tmp_path, capsys, outputs, words, report_only
):
    """Every output path (--csv, --json) is checked before anything is read, built or trained: a bad one is one
    line naming the option, exit 2, nothing created or changed (a check of hours is not lost at its end). Without
    --corpus (and with --report-only) the code before this check went on to other work and failed for another
    reason, or trained."""
    (tmp_path / "a_folder").mkdir()
    (tmp_path / "a_file").write_text("not a folder\n")
    shutil.copy(STUDY, tmp_path / "study.tar.gz")
    args = [a.format(tmp=tmp_path) for a in outputs]
    extra = ["--report-only"] if report_only else []
    argv = ["retrain", str(tmp_path / "study.tar.gz"), "--pairs", "2", "--results", str(tmp_path / "aa")]
    with unchanged(tmp_path):
        try:
            code = cli([*argv, *args, *extra])
        except SystemExit as exc:  # argparse's refusal of an option's value
            code = exc.code
    err = capsys.readouterr().err
    assert code == 2 and words.format(tmp=tmp_path) in err and err.count("\n") == 1, err
    assert "Traceback" not in err


@pytest.mark.slow  # re-trains 4 tiny runs twice (their archive: conftest.aa_tiny_archive)
@pytest.mark.skipif(not SAMPLE.is_dir(), reason="sample corpus absent")
def test_retrain_shows_each_runs_progress_as_work_does(tmp_path, aa_tiny_archive):
    """On a terminal of its own `harness retrain` draws each run's bar (tqdm, redrawn with carriage returns),
    as `harness work` does; --quiet shows none. Lines off a terminal, from 2 worker processes: the first test."""
    archive, env = aa_tiny_archive
    args = ["retrain", str(archive), "--pairs", "2", "--threads", "1", "--corpus", str(SAMPLE)]

    term = Terminal()
    try:
        auto = {k: v for k, v in env.items() if k != "HARNESS_PROGRESS"}
        proc = term.start([sys.executable, "-m", "harness", *args, "--results", str(tmp_path / "bar")], auto)
        out = read_until(term.master, proc, lambda text: False)
        assert proc.wait(timeout=600) == 0, out[-3000:]
    finally:
        term.close()
    bars = set(re.findall(r"(\w+ s\d): +\d+%", out))
    assert bars == {f"{v} s{s}" for v in ("block_attnres", "rd_attnres") for s in (0, 1)}, out[-3000:]
    assert "\r" in out.replace("\r\n", "\n") and not PROGRESS_LINE.search(out), out[-3000:]

    quiet = harness(
        *args, "--results", str(tmp_path / "quiet"), "--quiet", env={**env, "HARNESS_PROGRESS": "lines"}
    )
    assert "re-training 4 runs" in quiet.stderr and not PROGRESS_LINE.search(quiet.stderr), quiet.stderr
    assert "**Verdict: bit-identical" in quiet.stdout
