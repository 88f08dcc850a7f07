"""A study moves to another machine: its corpus is found by content, its archive names no machine.

The user's story on a tiny real grid (FineWeb-Edu text copied to a temporary folder): queue, train
and archive it; the archive holds no absolute path and no host name; import it elsewhere; move the
corpus to another path; `harness topup` / `work` / `queue` with `--corpus NEWPATH` continue it (the
new runs have the archived runs' protocol hash), another text is refused by fingerprint with nothing
changed, and a corpus that is missing when a worker claims a run gives the run back with no retry
spent. `harness archive` of the imported grid gives back the archive byte for byte.

    python -m pytest -q tests/e2e/test_corpus_by_content.py
"""

from __future__ import annotations

import json
import shutil
import socket
import tarfile
from pathlib import Path

import pytest

from harness.cli import main as cli
from harness.corpus.fingerprint import corpus_fingerprint
from harness.corpus.readers import read_documents
from harness.scheduling.queue.run_queue import RunQueue
from harness.store.archive import natural_key, read_archive

pytestmark = pytest.mark.own_cache  # its commands build their corpus in RESULTS/cache (conftest)

SAMPLE = Path(__file__).resolve().parents[3] / "shared/data/fineweb_edu_sample"


def _copy(files: list[Path], to: Path) -> Path:
    """A writable copy of ``files`` in the new folder ``to`` (the shared sample is read-only)."""
    to.mkdir(parents=True)
    for f in files:
        shutil.copyfile(f, to / f.name)
    return to


def _members(archive: Path) -> dict[str, bytes]:
    with tarfile.open(archive, "r:gz") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar}


def machine_marks(members: dict[str, bytes], *paths: Path) -> list[str]:
    """Where an archive's members name this machine: an absolute path under /work, /tmp, /home or one
    of ``paths``, or this host's name as a JSON value (``"vm"``) or an owner (``"vm:1234"``)."""
    host = socket.gethostname()
    marks = [b"/work/", b"/tmp/", b"/home/", *(str(p).encode() for p in paths)]
    marks += [json.dumps(host).encode(), f'"{host}:'.encode()]
    return [f"{name}: {m.decode()}" for name, data in members.items() for m in marks if m in data]


def _attempts(results: Path) -> dict[str, tuple[str, int]]:
    return {rid: (r.state, r.attempt) for rid, r in RunQueue.open(None, results).runs("moved").items()}


@pytest.mark.slow  # trains 6 tiny runs, then the 2 left after the import
def test_a_study_moves_with_its_corpus_found_by_content(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HARNESS_PROGRESS", "off")
    files = sorted(SAMPLE.glob("*.jsonl"))
    corpus = _copy(files, tmp_path / "lab" / "fineweb_edu_sample")
    other = _copy(files[:1], tmp_path / "lab" / "other_text")  # another text: one file of the three
    grid = tmp_path / "moved.toml"
    grid.write_text(
        f'name = "moved"\ncorpus = "{corpus}"\nsizes = ["tiny"]\nseeds = [0, 1, 2, 3]\n'
        "budgets_tokens = [1024]\n[variants]\nblock_attnres = \"parent\"\nrd_attnres = \"treatment\"\n"
        "[train]\nvocab_size = 512\nbatch_tokens = 512\neval_tokens = 1024\n"
        "[analysis]\nmin_effect_nats = 0.5\nlooks = [3, 4]\n"
    )
    src, dst, archive = tmp_path / "src", tmp_path / "dst", tmp_path / "moved.tar.gz"
    fp = corpus_fingerprint(read_documents(str(corpus)))
    fp_other = corpus_fingerprint(read_documents(str(other)))
    assert cli(["queue", str(grid), "--results", str(src)]) == 0
    # half done: 6 runs trained here, 2 still queued when the study moves
    assert cli(["work", "--results", str(src), "--max-runs", "6", "--threads", "1", "--quiet"]) == 0
    assert (
        cli(["archive", "--grid", "moved", "--results", str(src), "--out", str(archive), "--toml", str(grid)])
        == 0
    )

    members = _members(archive)  # nothing names the machine; the corpus is its fingerprint and name
    assert machine_marks(members, tmp_path, src, corpus) == []
    ref = f"corpus-sha256:{fp}:fineweb_edu_sample"
    assert json.dumps(ref).encode() in members["queue.json"] and ref.encode() in members["grid.toml"]
    manifest = read_archive(archive).manifest
    assert manifest["corpus"] == {"fingerprint": fp, "name": "fineweb_edu_sample"}
    trained = {e["code_version"] for e in manifest["runs"].values()}
    assert len(trained) == 1 and None not in trained  # each run's training commit, -dirty kept if so
    hashes = {e["protocol_hash"] for e in manifest["runs"].values()}
    assert len(hashes) == 1

    # another text given as the corpus: one line naming both fingerprints, nothing imported
    capsys.readouterr()
    assert cli(["import", str(archive), "--results", str(dst), "--corpus", str(other)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and fp in err and fp_other in err, err
    assert not dst.exists()

    # imported without a corpus, then the corpus moves; archiving the import gives back the same file
    assert cli(["import", str(archive), "--results", str(dst)]) == 0
    assert f"corpus: fineweb_edu_sample (fingerprint {fp}) not given" in capsys.readouterr().out
    again = tmp_path / "again.tar.gz"
    assert cli(["archive", "--grid", "moved", "--results", str(dst), "--out", str(again)]) == 0
    assert again.read_bytes() == archive.read_bytes()
    moved = tmp_path / "laptop" / "data" / "fineweb_copy"
    moved.parent.mkdir(parents=True)
    shutil.move(corpus, moved)

    before = _attempts(dst)
    assert sorted(s for s, _ in before.values()) == ["done"] * 6 + ["queued"] * 2
    # a worker where the corpus is not: the run goes back, no retry spent, one line saying what to do
    capsys.readouterr()
    assert cli(["work", "--results", str(dst), "--threads", "1", "--quiet"]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "corpus fineweb_edu_sample" in err and fp in err, err
    assert "--corpus PATH" in err and "no retry spent" in err, err
    assert _attempts(dst) == before
    # a worker given another text: refused by fingerprint, no retry spent
    assert cli(["work", "--results", str(dst), "--corpus", str(other), "--threads", "1", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and fp in err and fp_other in err, err
    assert _attempts(dst) == before
    # topup and queue re-pointed at another text: refused, nothing changed
    assert cli(["topup", "--grid", "moved", "--results", str(dst), "--corpus", str(other)]) == 2
    assert cli(["queue", str(grid), "--results", str(dst), "--corpus", str(other)]) == 2
    err = capsys.readouterr().err
    assert err.count(fp_other) == 2, err
    assert RunQueue.open(None, dst).corpus_of("moved") == {
        "fingerprint": fp,
        "name": "fineweb_edu_sample",
        "path": None,
    }

    # the same text at its new path: one worker told where, then the grid re-pointed for every worker
    assert (
        cli(
            [
                "work",
                "--results",
                str(dst),
                "--corpus",
                str(moved),
                "--max-runs",
                "1",
                "--threads",
                "1",
                "--quiet",
            ]
        )
        == 0
    )
    assert cli(["topup", "--grid", "moved", "--results", str(dst), "--corpus", str(moved)]) == 0
    assert RunQueue.open(None, dst).corpus_of("moved")["path"] == str(moved)
    assert cli(["work", "--results", str(dst), "--threads", "1", "--quiet"]) == 0
    after = _attempts(dst)
    assert sorted(after.values()) == [("done", 1)] * 8
    # the grid's own TOML, queued again with the new path: the same runs (no "differs in corpus")
    capsys.readouterr()
    assert cli(["queue", str(grid), "--results", str(dst), "--corpus", str(moved)]) == 0
    assert "nothing to add" in capsys.readouterr().out
    assert cli(["queue", str(dst / "grids" / "moved.toml"), "--results", str(dst)]) == 0  # by reference
    # the same text gives the same protocol: the new runs pair with the archived ones
    rows = [json.loads(p.read_text())["run"] for p in (dst / "runs").glob("*.json")]
    assert {r["protocol_hash"] for r in rows} == hashes and len(rows) == 8

    final = tmp_path / "final.tar.gz"  # continued there, archived: still no machine path, runs in seed order
    assert cli(["archive", "--grid", "moved", "--results", str(dst), "--out", str(final)]) == 0
    members = _members(final)
    assert machine_marks(members, tmp_path, dst, moved) == []
    names = [n for n in members if n.startswith("runs/")]
    assert names == sorted(names, key=natural_key) and len(names) == 8


def test_run_ids_sort_by_their_numbers():
    ids = ["g:tiny:a:s10:1024", "g:tiny:a:s2:1024", "g:tiny:a:s1:1024", "g:tiny:b:s0:1024", "g:tiny:a:s2:512"]
    assert sorted(ids, key=natural_key) == [
        "g:tiny:a:s1:1024",
        "g:tiny:a:s2:512",
        "g:tiny:a:s2:1024",
        "g:tiny:a:s10:1024",
        "g:tiny:b:s0:1024",
    ]
