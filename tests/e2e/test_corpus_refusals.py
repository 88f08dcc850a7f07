"""What `harness queue` refuses about a corpus, `work`, `launch`, `topup` and `import` refuse too, before
they claim or write anything, and a corpus error never spends a retry (harness/corpus/locate.py, spec.py).

Real commands in process on real FineWeb-Edu text copied to a temporary folder; each refusal is one
line, and the folder tree is the same before and after it (tests/fstree.py).

    python -m pytest -q tests/e2e/test_corpus_refusals.py
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from fstree import unchanged
from test_archive import _archived  # tests/ is on sys.path under pytest (no package)
from test_topup import _queued_and_trained

from harness.cli import main as cli
from harness.corpus.fingerprint import corpus_fingerprint
from harness.corpus.readers import read_documents
from harness.scheduling.queue.run_queue import RunQueue

pytestmark = pytest.mark.own_cache  # its commands build their corpus in RESULTS/cache (conftest)

SAMPLE = Path(__file__).resolve().parents[3] / "shared/data/fineweb_edu_sample"


def _text(to: Path, source: str = "fineweb_edu_sample10BT_efscorer150.jsonl") -> Path:
    """A writable copy of a sample file at ``to`` (150 documents, 420 kB: a queue builds its shards to
    size its val split, as for any small corpus)."""
    to.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(SAMPLE / source, to)
    return to


def _edited(src: Path, dst: Path) -> Path:
    """A copy of ``src`` at ``dst`` with one byte of its first document changed: another text."""
    data = src.read_bytes()
    at = data.index(b'"text": "') + len(b'"text": "') + 1
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_bytes(data[:at] + (b"Q" if data[at : at + 1] != b"Q" else b"R") + data[at + 1 :])
    return dst


def _fingerprint(corpus: Path) -> str:
    return corpus_fingerprint(read_documents(str(corpus)))


def _grid(tmp_path: Path, corpus: Path, extra: str = "") -> Path:
    """A grid ``g`` of two tiny runs on ``corpus`` (a 512-token BPE, a 1024-token evaluation set)."""
    path = tmp_path / "g.toml"
    path.write_text(
        f'name = "g"\ncorpus = "{corpus}"\nsizes = ["tiny"]\nseeds = [0]\nbudgets_tokens = [1024]\n'
        '[variants]\nblock_attnres = "parent"\nrd_attnres = "treatment"\n'
        f"[train]\nvocab_size = 512\nbatch_tokens = 512\neval_tokens = 1024\n{extra}"
    )
    return path


def _queued(tmp_path: Path, monkeypatch) -> tuple[Path, Path, Path]:
    """``(text, grid, results)``: a real text at lab/text.jsonl and its grid queued in ``results``, with no
    shared corpus cache or corpus default from the environment."""
    monkeypatch.delenv("HARNESS_CACHE", raising=False)
    monkeypatch.delenv("HARNESS_CORPUS", raising=False)
    text = _text(tmp_path / "lab" / "text.jsonl")
    grid, results = _grid(tmp_path, text), tmp_path / "results"
    assert cli(["queue", str(grid), "--results", str(results)]) == 0
    return text, grid, results


def _attempts(results: Path) -> list[tuple[str, int, int]]:
    """(state, attempt, retries spent) of each run of grid ``g``."""
    runs = RunQueue.open(None, results).runs("g").values()
    return [(r.state, r.attempt, r.trials[-1].user_attrs.get("failures", 0)) for r in runs]


def _trials(results: Path) -> int:
    """How many trials the runs of grid ``g`` have: a claim adds one, even when the run is released."""
    return sum(len(r.trials) for r in RunQueue.open(None, results).runs("g").values())


def _one_line(capsys, command: str, *needles: str) -> str:
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith(f"harness {command}: error: "), err
    for needle in needles:
        assert needle in err, err
    return err


@pytest.mark.parametrize("command", ["queue", "import", "topup", "work", "launch", "run", "prepare"])
def test_an_empty_corpus_path_is_refused_by_every_command(tmp_path, capsys, monkeypatch, command):
    """``--corpus ""`` names no corpus: `import` once fingerprinted the whole working folder and `queue`
    ignored it (the grid's corpus was queued); every command now refuses it in one line, writing nothing."""
    results, archive = _archived(tmp_path)
    grid = tmp_path / "seq.toml"
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HARNESS_CORPUS", raising=False)
    argv = {
        "queue": ["queue", str(grid), "--results", str(results)],
        "import": ["import", str(archive), "--results", str(tmp_path / "elsewhere")],
        "topup": ["topup", "--grid", "seq", "--results", str(results)],
        "work": ["work", "--results", str(results)],
        "launch": ["launch", "--executor", "local", "--workers", "1", "--results", str(results)],
        "run": ["run", "--variant", "rd_attnres", "--size", "tiny", "--seed", "0", "--budget-tokens", "1024"],
        "prepare": ["prepare", str(grid), "--results", str(results)],
    }[command]
    capsys.readouterr()
    with unchanged(tmp_path):
        assert cli([*argv, "--corpus", ""]) == 2
    _one_line(capsys, command, "corpus ''", "empty path")


def test_a_queue_refused_by_fingerprint_builds_and_leaves_nothing(tmp_path, capsys, monkeypatch):
    """`harness queue G --corpus dir2/a.jsonl` of another text once sized that text first (its BPE
    trained, its shards and lock left in the cache) and only then refused it by fingerprint; the
    fingerprint is now checked before anything is built."""
    text, grid, results = _queued(tmp_path, monkeypatch)
    other = _edited(text, tmp_path / "dir2" / "a.jsonl")
    capsys.readouterr()
    with unchanged(tmp_path):
        assert cli(["queue", str(grid), "--results", str(results), "--corpus", str(other)]) == 2
    _one_line(capsys, "queue", _fingerprint(text), _fingerprint(other), "another text")


def test_a_worker_refuses_a_corpus_whose_text_changed_since_the_grid_was_queued(
    tmp_path, capsys, monkeypatch
):
    """Queued, then the prepared cache removed and one byte of the corpus changed: the worker once
    trained the run on the new text (another protocol hash than the grid's runs, no word). It now checks
    the fingerprint `queue` recorded: the run is released with no retry spent, one line names both."""
    monkeypatch.setenv("HARNESS_PROGRESS", "off")
    text, grid, results = _queued(tmp_path, monkeypatch)
    queued = _fingerprint(text)
    shutil.rmtree(results / "cache", ignore_errors=True)
    _edited(text, text)
    changed = _fingerprint(text)
    before = _attempts(results)
    assert before == [("queued", 1, 0)] * 2
    capsys.readouterr()
    assert cli(["work", "--results", str(results), "--max-runs", "1", "--threads", "1", "--quiet"]) == 2
    _one_line(capsys, "work", queued, changed, str(text), "no retry spent")
    assert _attempts(results) == before and not list(results.glob("runs/*.json"))
    # what `queue` of the grid says of that file, the worker said
    assert cli(["queue", str(grid), "--results", str(results)]) == 2
    _one_line(capsys, "queue", queued, changed)


def test_launch_and_work_refuse_another_text_by_fingerprint_before_any_claim(tmp_path, capsys, monkeypatch):
    """`harness launch --executor local --workers 1 --corpus OTHER_TEXT` once launched a worker whose log
    ended in its refusal; launch and work now check --corpus against the fingerprint of each grid with
    runs queued, as queue does, before launching or claiming anything."""
    text, grid, results = _queued(tmp_path, monkeypatch)
    other = _edited(text, tmp_path / "dir2" / "a.jsonl")
    queued, given = _fingerprint(text), _fingerprint(other)
    before = _trials(results)
    capsys.readouterr()
    argv = [
        "launch",
        "--executor",
        "local",
        "--workers",
        "1",
        "--results",
        str(results),
        "--corpus",
        str(other),
    ]
    with unchanged(tmp_path):
        assert cli(argv) == 2
    _one_line(capsys, "launch", queued, given, "another text")
    assert cli(["work", "--results", str(results), "--corpus", str(other), "--threads", "1", "--quiet"]) == 2
    _one_line(capsys, "work", queued, given, "another text")
    assert _trials(results) == before  # no run was claimed (and released)


def test_the_missing_corpus_line_names_a_command_that_re_points_that_grid(tmp_path, capsys, monkeypatch):
    """A worker that finds no corpus once advised `harness topup --grid G --corpus PATH`, which refuses
    a grid without looks or without a finished run (this one has neither); the line now names
    `harness work --corpus PATH` and `harness queue G.toml --corpus PATH`, and the latter re-points it."""
    text, grid, results = _queued(tmp_path, monkeypatch)
    moved = tmp_path / "elsewhere" / "text.jsonl"
    moved.parent.mkdir()
    shutil.move(text, moved)
    capsys.readouterr()
    assert cli(["work", "--results", str(results), "--max-runs", "1", "--threads", "1", "--quiet"]) == 1
    err = _one_line(capsys, "work", f"not found at {text}", "`harness work --corpus PATH`", "no retry spent")
    assert "topup" not in err, err
    named = re.search(r"`harness queue (\S+) --corpus PATH`", err)
    assert named is not None and named.group(1) == "g.toml", err  # the grid's file: here tmp_path/g.toml
    assert cli(["queue", str(grid), "--results", str(results), "--corpus", str(moved)]) == 0
    assert RunQueue.open(None, results).corpus_of("g")["path"] == str(moved)


def test_topup_of_a_grid_not_yet_trained_re_points_it_or_says_so_and_creates_no_store(
    tmp_path, capsys, monkeypatch
):
    """`harness topup --grid G --corpus PATH` on a grid whose runs are all queued once said "no runs of grid
    'g' in the results store; grids there: none yet" and created harness.duckdb. It now re-points the grid
    as `harness queue --corpus` does, says that nothing finished yet, and opens no results store; another
    text is refused by fingerprint with the tree unchanged."""
    text, _, results = _queued(tmp_path, monkeypatch)
    moved = _text(tmp_path / "elsewhere" / "copy.jsonl")  # the same text at another path
    capsys.readouterr()
    with unchanged(tmp_path):
        assert cli(["topup", "--grid", "g", "--results", str(results)]) == 0
    none_yet = "grid g: 2 runs in the queue (2 queued), none finished: topup adds seeds by what finished runs"
    assert capsys.readouterr().out.startswith(none_yet)
    other = _edited(text, tmp_path / "dir2" / "a.jsonl")
    with unchanged(tmp_path):
        assert cli(["topup", "--grid", "g", "--results", str(results), "--corpus", str(other)]) == 2
    _one_line(capsys, "topup", _fingerprint(text), _fingerprint(other), "another text")
    assert cli(["topup", "--grid", "g", "--results", str(results), "--corpus", str(moved)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"corpus of g: text.jsonl (fingerprint {_fingerprint(text)[:16]}) at {moved}"
    assert out[1].startswith(none_yet) and out[1].endswith("next: harness work")
    assert RunQueue.open(None, results).corpus_of("g")["path"] == str(moved)
    assert not (results / "harness.duckdb").exists()
    with unchanged(tmp_path):  # a grid that is not there: one line, no store created either
        assert cli(["topup", "--grid", "nope", "--results", str(results)]) == 2
    _one_line(capsys, "topup", "no runs of grid 'nope' in the queue", "grids there: g")


def test_an_import_without_its_corpus_names_a_command_that_re_points_the_grid(tmp_path, capsys):
    """`harness import` without --corpus once said to give it to `harness topup`, which refuses a grid it
    cannot add seeds to; it names the commands the missing-corpus line names, and the queue one works."""
    results = _queued_and_trained(tmp_path, "")  # a grid without looks: topup adds nothing to it
    archive = tmp_path / "seq.tar.gz"
    toml = ["--toml", str(tmp_path / "seq.toml")]
    assert cli(["archive", "--grid", "seq", "--results", str(results), "--out", str(archive), *toml]) == 0
    dst = tmp_path / "dst"
    capsys.readouterr()
    assert cli(["import", str(archive), "--results", str(dst)]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("corpus: "))
    assert "topup" not in line and "`harness queue seq.toml --corpus PATH`" in line, line
    assert "RESULTS/grids/seq.toml for an imported grid" in line, line
    corpus = tmp_path / "corpus.jsonl"  # the grid's text, here at its first path
    assert (
        cli(["queue", str(dst / "grids" / "seq.toml"), "--results", str(dst), "--corpus", str(corpus)]) == 0
    )
    assert RunQueue.open(None, dst).corpus_of("seq")["path"] == str(corpus)
