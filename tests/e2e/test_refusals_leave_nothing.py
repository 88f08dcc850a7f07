"""A refused command leaves the file system as it found it, and says why in one line.

Each test walks the folder tree before and after the command (tests/fstree.py): a refused
`import`, `report`, `run`, `queue`, `prepare` or `archive` adds, removes or changes nothing (no
empty results folder, no `.harness-id`, no corpus lock, no tokenizer, no file outside the results
folder). Real commands, in process or as subprocesses, on real text; the full disks are real tmpfs
mounts. ``python -m pytest -q tests/e2e/test_refusals_leave_nothing.py``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from fstree import tree, unchanged
from test_archive import _archived  # tests/ is on sys.path under pytest (no package)
from test_config_errors import _queue, _untouched
from test_env_faults import tmpfs  # noqa: F401 -- the fixture: a real tmpfs mount
from test_faults import SAMPLE, grid_file, harness, one_line_error
from test_full_disk import fill

from harness.cli import main as cli
from harness.store.archive import read_archive, write_archive
from harness.store.validate import result_filename

pytestmark = pytest.mark.own_cache  # its commands build their corpus in RESULTS/cache (conftest)

ESCAPED = "../../escaped"
OFFLINE = {  # tiktoken's real client with nowhere to download gpt2's files from (and no cache)
    "HTTPS_PROXY": "http://127.0.0.1:9",
    "https_proxy": "http://127.0.0.1:9",
}


def _one_line(capsys, command: str, *needles: str) -> str:
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith(f"harness {command}: error: "), err
    for needle in needles:
        assert needle in err, err
    return err


def _renamed(src: Path, dst: Path, grid: str) -> dict[str, bytes]:
    """Archive ``src`` (grid ``seq``) rewritten consistently as grid ``grid``: the manifest, every result
    file, the queue's configs and the grid's TOML name it, and every SHA-256 matches, so only a check of
    the name itself can refuse it. Returns its result files (run id -> bytes)."""
    a = read_archive(src)

    def swap(data: bytes) -> bytes:
        return data.replace(b'"seq"', json.dumps(grid).encode()).replace(b'"seq:', f'"{grid}:'.encode())

    results = {json.loads(swap(d))["run"]["run_id"]: swap(d) for d in a.results.values()}
    queue = json.loads(swap(json.dumps(a.queue).encode()))
    toml = f"name = {json.dumps(grid)}\n".encode()
    write_archive(dst, grid=grid, results=results, queue=queue, code=a.archived_by, grid_toml=toml)
    return results


def test_an_archive_whose_grid_name_is_a_path_is_refused_and_nothing_is_written(tmp_path, capsys):
    """An imported grid name obeys the rules `harness queue` applies to a grid file's name: one with
    '/' would write RESULTS/grids/../../escaped.toml outside the results folder."""
    _, archive = _archived(tmp_path)
    crafted = tmp_path / "crafted.tar.gz"
    _renamed(archive, crafted, ESCAPED)
    dest = tmp_path / "a" / "dest"
    capsys.readouterr()
    with unchanged(tmp_path):
        assert cli(["import", str(crafted), "--results", str(dest)]) == 2
    _one_line(capsys, "import", f"grid name {ESCAPED!r}", "letters, digits", "harness queue")
    assert not (tmp_path / "escaped.toml").exists() and not dest.exists()


def test_a_report_of_a_grid_name_that_is_a_path_is_refused(tmp_path, capsys):
    """`harness report --grid ../../escaped2` would write RESULTS/reports/../../escaped2/: refused in
    one line even where result files of such a grid were copied into runs/ by hand."""
    _, archive = _archived(tmp_path)
    crafted = tmp_path / "crafted.tar.gz"
    results = tmp_path / "a" / "res"
    (results / "runs").mkdir(parents=True)
    for run_id, data in _renamed(archive, crafted, "../../escaped2").items():
        (results / "runs" / result_filename(run_id)).write_bytes(data)
    capsys.readouterr()
    with unchanged(tmp_path):
        assert cli(["report", "--grid", "../../escaped2", "--results", str(results), "--no-figures"]) == 2
    _one_line(capsys, "report", "--grid", "'../../escaped2'", "letters, digits")


def test_run_with_a_missing_corpus_creates_no_results_folder(tmp_path):
    new = tmp_path / "NEW"
    with unchanged(tmp_path):
        proc = harness(
            "run", "--corpus", "/nonexistent/c.jsonl", "--results", str(new), "--variant", "rd_attnres",
            "--size", "tiny", "--seed", "0", "--budget-tokens", "4096",
        )  # fmt: skip
    one_line_error(proc, "corpus /nonexistent/c.jsonl not found")
    assert proc.returncode == 2


def test_queue_checks_its_storage_before_it_reads_or_sizes_the_corpus(tmp_path):
    """The grid's small real corpus would be sized by building its tokenizer and shards in
    NEW/cache before the queue was opened; a bad --storage is now refused first."""
    grid = grid_file(tmp_path, SAMPLE / "fineweb_edu_sample10BT_efscorer150.jsonl", budget=65_536)
    new = tmp_path / "NEW"
    with unchanged(tmp_path):
        proc = harness("queue", str(grid), "--storage", "nosuch://x", "--results", str(new))
    one_line_error(proc, "--storage 'nosuch://x' not understood")


@pytest.mark.parametrize("command", ["prepare-grid", "prepare-corpus", "run"])
def test_an_offline_gpt2_prepare_or_run_leaves_nothing(tmp_path, command):
    """Where tiktoken cannot load gpt2's files, the line says so before any folder or lock is made
    (no NEW/cache/corpora/shards-gpt2-*.lock, no .harness-id)."""
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"text": "hello world"}\n' * 20)
    grid = grid_file(tmp_path, corpus, train='tokenizer = "gpt2"\n')
    new = tmp_path / "NEW"
    args = {
        "prepare-grid": ["prepare", str(grid)],
        "prepare-corpus": ["prepare", "--corpus", str(corpus), "--tokenizer", "gpt2"],
        "run": ["run", "--corpus", str(corpus), "--set", "tokenizer=gpt2", "--variant", "block_attnres",
                "--size", "tiny", "--seed", "0", "--budget-tokens", "4096"],
    }[command]  # fmt: skip
    env = {**OFFLINE, "TIKTOKEN_CACHE_DIR": str(tmp_path / "tiktoken-cache")}
    with unchanged(tmp_path):
        proc = harness(*args, "--results", str(new), env=env)
    one_line_error(proc, "tokenizer 'gpt2': tiktoken cannot load its gpt2 files")


def test_prepare_max_docs_counts_documents(tmp_path, capsys):
    with pytest.raises(SystemExit), unchanged(tmp_path):
        cli(["prepare", "--corpus", str(SAMPLE), "--max-docs", "0", "--results", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert "--max-docs: '0': expected a positive number of documents" in err and "tokens" not in err


def test_queue_of_a_folder_says_it_is_a_folder(tmp_path, capsys):
    folder = tmp_path / "FOLDER"
    folder.mkdir()
    with unchanged(tmp_path):
        assert cli(["queue", str(folder), "--results", str(tmp_path / "r")]) == 2
    _one_line(capsys, "queue", f"{folder} is a folder, not a grid file")


def test_archive_onto_a_full_disk_names_the_out_location_and_its_free_space(tmp_path, tmpfs, capsys):  # noqa: F811
    results, _ = _archived(tmp_path)
    full = tmpfs("64k")
    fill(full)  # for real: the archive meets ENOSPC
    out = full / "seq.tar.gz"
    capsys.readouterr()
    before = tree(results)
    with unchanged(full):
        assert cli(["archive", "--grid", "seq", "--results", str(results), "--out", str(out)]) == 1
    assert tree(results) == before
    err = _one_line(capsys, "archive", f"disk full: --out {out}", "free there", "pass another --out")
    assert str(results) not in err


def test_import_onto_a_full_disk_leaves_no_empty_results_folder(tmp_path, tmpfs, capsys):  # noqa: F811
    """Its result files meet ENOSPC: one line naming the disk, and no empty res/ or res/runs/."""
    _, archive = _archived(tmp_path)
    full = tmpfs("64k")
    fill(full)
    capsys.readouterr()
    with unchanged(full):
        assert cli(["import", str(archive), "--results", str(full / "res")]) == 1
    _one_line(capsys, "import", "disk full: ", "No space left on device")


@pytest.mark.parametrize("strategy", ["ddp_spawn", "ddp_fork"])
def test_a_spawning_strategy_is_refused_before_a_claim(tmp_path, capsys, strategy):
    """`--strategy ddp_spawn` pickled the run's callbacks (a local closure) and failed the run, spending
    a retry; now refused like any bad strategy: the queue journal is not touched, every run stays at
    its first attempt."""
    results = _queue(tmp_path)
    capsys.readouterr()
    with unchanged(tmp_path):
        assert cli(["work", "--results", str(results), "--quiet", "--strategy", strategy]) == 2
    _one_line(capsys, "work", f"--strategy {strategy}: Lightning would start the ranks by", "use ddp")
    _untouched(results)


def test_several_nodes_without_a_launcher_are_refused_at_once(tmp_path, capsys):
    """`harness run --num-nodes 2` in a plain process waited silently for a node no one starts; now
    one line naming torchrun/srun, before a folder is made."""
    capsys.readouterr()
    with unchanged(tmp_path):
        status = cli(
            ["run", "--corpus", str(SAMPLE), "--results", str(tmp_path / "NEW"), "--variant", "rd_attnres",
             "--size", "tiny", "--seed", "0", "--budget-tokens", "4096", "--num-nodes", "2"]
        )  # fmt: skip
    assert status == 2
    _one_line(capsys, "run", "--num-nodes 2: this process was not started by torchrun or srun")


@pytest.mark.slow  # starts `harness launch` (a second each) and the real sbatch
@pytest.mark.parametrize("conf", ["unusable", "no controller"])
def test_sbatch_refusing_the_job_is_one_line_with_its_reason(tmp_path, conf):
    """The real `sbatch` (Debian's slurm-client) where SLURM is not configured (a slurm.conf it cannot
    process), or where its controller does not run: its own reason in one line, no traceback, no launch
    folder. No slurm.conf at all gives the same reason after sbatch's own minute of retries ("retrying in
    1sec up to 60sec"), so the case gives it a file without the ClusterName sbatch needs, refused at once;
    MessageTimeout=1 makes the missing controller a second's wait, not sbatch's default of 10 s."""
    if shutil.which("sbatch") is None or shutil.which("srun") is None:
        pytest.fail("sbatch/srun not on PATH: apt-get install slurm-client (.ci/run does)", pytrace=False)
    results = _queue(tmp_path)
    slurm_conf = tmp_path / "slurm.conf"
    if conf == "unusable":  # no ClusterName: sbatch cannot process it, as it cannot process a missing file
        slurm_conf.write_text("SlurmctldHost=localhost\n")
    else:  # a valid configuration naming a slurmctld that is not running
        slurm_conf.write_text(
            "ClusterName=none\nSlurmctldHost=localhost\nSlurmctldPort=9\nMessageTimeout=1\n"
            "NodeName=localhost CPUs=1 State=UNKNOWN\nPartitionName=p Nodes=localhost Default=YES\n"
        )
    reason = {
        "unusable": "sbatch: fatal: Unable to process configuration file",
        "no controller": "Unable to contact slurm controller",
    }[conf]
    with unchanged(results):
        proc = harness(
            "launch", "--executor", "slurm", "--results", str(results), env={"SLURM_CONF": str(slurm_conf)}
        )
    one_line_error(proc, "sbatch refused the job: ", reason)
    assert proc.returncode == 2


def test_prepare_tokens_says_how_many_more_it_took_and_why(tmp_path, capsys):
    """`--tokens 5000` of a 0.25M-token corpus takes its first (and only) 1 MiB chunk of text: the
    count is the manifest's, and the line says why it is not 5,000."""
    results = tmp_path / "r"
    corpus = SAMPLE / "fineweb_edu_sample10BT_fac250.jsonl"
    assert (
        cli(
            [
                "prepare",
                "--corpus",
                str(corpus),
                "--tokens",
                "5000",
                "--workers",
                "1",
                "--results",
                str(results),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    (manifest,) = (results / "cache" / "corpora").glob("shards-bpe-*/manifest.json")
    got = json.loads(manifest.read_text())["splits"]["train"]["tokens"]
    assert got > 5000
    assert (
        f"  {got:,} train tokens for the 5,000 asked ({got - 5000:,} more): a prepare takes whole chunks"
        in out
    )
    assert set(tree(results)) >= {"cache", "cache/corpora"}  # it wrote only its corpus cache
    assert all(p.startswith("cache") for p in tree(results))


# `harness tune ...` as its console script runs it, with a Ctrl-C raised as module argv[1] is first
# imported: a moment of its first half second chosen by name, not by a timer
TUNE_CTRL_C_AT_IMPORT = """
import signal, sys
TARGET = sys.argv[1]
class CtrlCAt:  # first on the import path: sees every import (import statements, importlib)
    def find_spec(self, name, path=None, target=None):
        if name == TARGET:
            signal.raise_signal(signal.SIGINT)
            print("ctrl-c sent", file=sys.stderr)  # not reached: the process ends in the handler
        return None
sys.meta_path.insert(0, CtrlCAt())
sys.argv = ["/usr/local/bin/harness", *sys.argv[2:]]
from harness.cli import main
sys.exit(main())
"""


@pytest.mark.parametrize(
    "module",
    ["harness.common.files", "harness.commands.tune", "optuna", "harness.scheduling.tuning", "numpy"],
)
def test_ctrl_c_to_tune_while_it_loads_is_interrupted_and_queues_nothing(tmp_path, module):
    """Ctrl-C while `harness tune` imports its modules (cli's own, the command's while the parser is
    built, Optuna, numpy): `interrupted`, exit 130, no traceback, no results folder, no trial queued."""
    import subprocess
    import sys

    argv = [
        "tune",
        "--variant",
        "block_attnres",
        "--size",
        "tiny",
        "--budget-tokens",
        "4096",
        "--trials",
        "2000",
    ]
    argv += ["--corpus", str(SAMPLE), "--name", "t", "--results", str(tmp_path / "results")]
    with unchanged(tmp_path):
        proc = subprocess.run(
            [sys.executable, "-c", TUNE_CTRL_C_AT_IMPORT, module, *argv],
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert (proc.returncode, proc.stderr.strip()) == (130, "interrupted"), proc.stderr


def test_queue_refused_for_a_too_small_val_split_leaves_no_shards(tmp_path):
    """Sizing the splits builds the tokenizer and shards in RESULTS/cache (a worker reuses them); when the
    grid is then refused (its evaluation set exceeds the val split), what this command built is removed."""
    corpus = tmp_path / "c.jsonl"
    lines = (SAMPLE / "fineweb_edu_sample10BT_efscorer150.jsonl").read_text().splitlines()[:60]
    corpus.write_text("\n".join(lines) + "\n")
    grid = grid_file(tmp_path, corpus, train="eval_tokens = 4_000_000\n")
    (tmp_path / "res").mkdir()
    for results in (tmp_path / "res", tmp_path / "NEW"):  # an existing results folder, and a new one
        with unchanged(tmp_path):
            proc = harness("queue", str(grid), "--results", str(results))
        one_line_error(proc, "exceeds the val split")
