"""harness archive / harness import (issue 47): a grid's results as one file, restored elsewhere.

From an imported archive `harness report` gives the same stats.csv (byte for byte on one machine), and `topup` +
`work` add the next look's seeds; a bad archive (not one, truncated, a tampered member, a protocol
mismatch) and a clash with the results folder are refused with one line, exit 2, nothing written.
The fast tests use tests/stats/test_topup.py's grid (real journal queue and store, training replaced by a
stub writing designed NLLs); the slow one trains a tiny grid on real text.

    python -m pytest -q tests/store/test_archive.py
"""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import sys
import tarfile
from pathlib import Path

import pytest
import warm
from fstree import unchanged
from tables import same_table
from test_corpus_by_content import machine_marks
from test_topup import _drain, _queued_and_trained  # tests/ is on sys.path under pytest (no package)

from harness.cli import main as cli
from harness.scheduling.grids.edit import BY_CONTENT_COMMENT, corpus_by_content
from harness.scheduling.queue.run_queue import RunQueue
from harness.store.archive import MANIFEST, natural_key, read_archive, sha256, write_archive

from queue_stubs import write_grid

SAMPLE = Path(__file__).resolve().parents[3] / "shared/data/fineweb_edu_sample"


def _report(results: Path, out: Path, grid: str = "seq") -> bytes:
    assert cli(["report", "--grid", grid, "--results", str(results), "--out", str(out), "--no-figures"]) == 0
    return (out / "stats.csv").read_bytes()


def _archived(tmp_path: Path) -> tuple[Path, Path]:
    """The topup test's grid (looks 3 and 5, 3 seeds trained) and its archive."""
    results = _queued_and_trained(tmp_path, "looks = [3, 5]")
    archive = tmp_path / "seq.tar.gz"
    assert cli(["archive", "--grid", "seq", "--results", str(results), "--out", str(archive)]) == 0
    return results, archive


def _rewrite(src: Path, dst: Path, edit) -> None:
    """Copy archive ``src`` to ``dst`` with ``edit(name, bytes) -> bytes`` applied to each member."""
    with tarfile.open(src, "r:gz") as tar:
        members = [(m.name, tar.extractfile(m).read()) for m in tar]
    with tarfile.open(dst, "w:gz") as tar:
        for name, data in members:
            data = edit(name, data)
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def _refused(capsys, archive: Path, results: Path, *words: str) -> None:
    before = sorted(p.relative_to(results) for p in results.rglob("*")) if results.exists() else None
    capsys.readouterr()
    assert cli(["import", str(archive), "--results", str(results)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("harness import: error: "), err
    for w in words:
        assert w in err, err
    after = sorted(p.relative_to(results) for p in results.rglob("*")) if results.exists() else None
    assert after == before  # nothing half-imported


@pytest.mark.slow
def test_import_gives_the_same_stats_and_topup_continues_it(tmp_path, capsys):
    results, archive = _archived(tmp_path)
    want = _report(results, tmp_path / "r0")
    a = read_archive(archive)
    assert a.grid == "seq" and len(a.results) == 12 and len(a.queue) == 12
    assert set(a.manifest["members"]) == {"queue.json", *(e["file"] for e in a.manifest["runs"].values())}
    assert all(e["protocol_hash"] == "p0" and e["status"] == "done" for e in a.manifest["runs"].values())
    again = tmp_path / "again.tar.gz"  # the same results give the same file
    assert cli(["archive", "--grid", "seq", "--results", str(results), "--out", str(again)]) == 0
    assert again.read_bytes() == archive.read_bytes()

    fresh = tmp_path / "elsewhere"
    assert cli(["import", str(archive), "--results", str(fresh)]) == 0
    assert "12 result files added, 0 already there; 12 runs added to the queue" in capsys.readouterr().out
    assert _report(fresh, tmp_path / "r1") == want
    assert {r.state for r in RunQueue.open(None, fresh).runs("seq").values()} == {"done"}
    assert cli(["import", str(archive), "--results", str(fresh)]) == 0  # idempotent
    assert "0 result files added, 12 already there; 0 runs added" in capsys.readouterr().out

    assert cli(["topup", "--grid", "seq", "--results", str(fresh)]) == 0
    assert "queued seed(s) 3 4 for 4 variants (8 runs)" in capsys.readouterr().out
    _drain(fresh)  # the workers train only the new seeds: the imported runs are done
    runs = RunQueue.open(None, fresh).runs("seq")
    assert len(runs) == 20 and {r.state for r in runs.values()} == {"done"}
    assert all(r.attempt == 1 for r in runs.values())


def test_a_bad_archive_is_refused_with_one_line(tmp_path, capsys):
    _, archive = _archived(tmp_path)
    dest = tmp_path / "dest"

    garbage = tmp_path / "garbage.tar.gz"
    garbage.write_bytes(b"not an archive at all\n" * 10)
    _refused(capsys, garbage, dest, "is not a harness archive")

    truncated = tmp_path / "truncated.tar.gz"
    truncated.write_bytes(archive.read_bytes()[: archive.stat().st_size // 2])
    _refused(capsys, truncated, dest, "truncated or damaged")

    foreign = tmp_path / "foreign.tar.gz"  # a real gzip tar, not ours
    with tarfile.open(foreign, "w:gz") as tar:
        info = tarfile.TarInfo("notes.txt")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"hi"))
    _refused(capsys, foreign, dest, "member 'notes.txt' is not part of a harness archive")

    run_file = next(n for n in read_archive(archive).members if n.startswith("runs/"))
    tampered = tmp_path / "tampered.tar.gz"
    _rewrite(
        archive, tampered, lambda n, d: d.replace(b'"value":3.5', b'"value":3.4') if n == run_file else d
    )
    _refused(capsys, tampered, dest, f"member {run_file} does not match its SHA-256", "tampered")

    def other_protocol(name: str, data: bytes) -> bytes:
        if name != MANIFEST:
            return data
        m = json.loads(data)
        next(iter(m["runs"].values()))["protocol_hash"] = "p1"
        return json.dumps(m).encode()

    mismatch = tmp_path / "mismatch.tar.gz"
    _rewrite(archive, mismatch, other_protocol)
    _refused(capsys, mismatch, dest, "protocol mismatch", "protocol hash p0, the manifest records p1")

    _refused(capsys, tmp_path / "nosuch.tar.gz", dest, "does not exist")
    assert not dest.exists()


def test_a_clash_with_the_results_folder_is_refused(tmp_path, capsys):
    results, archive = _archived(tmp_path)
    # the source folder itself: the same runs, identical: nothing to add
    assert cli(["import", str(archive), "--results", str(results)]) == 0
    assert "0 result files added, 12 already there; 0 runs added" in capsys.readouterr().out
    # after topup the grid has other runs there: a clash
    assert cli(["topup", "--grid", "seq", "--results", str(results)]) == 0
    _drain(results)
    _refused(capsys, archive, results, "grid seq is already in", "with other runs (8 not in the archive")
    # a run whose result file differs
    other = tmp_path / "other"
    assert cli(["import", str(archive), "--results", str(other)]) == 0
    victim = next((other / "runs").iterdir())
    victim.write_bytes(victim.read_bytes().replace(b'"wall_s":2.0', b'"wall_s":3.0'))
    _refused(capsys, archive, other, "is already in", "with another result file")


@pytest.mark.slow  # trains 6 tiny runs, then 4 more after the import
def test_a_trained_grid_archived_imported_reported_and_continued(tmp_path):
    grid = tmp_path / "arch_tiny.toml"
    grid.write_text(
        f'name = "arch_tiny"\ncorpus = "{SAMPLE}"\nsizes = ["tiny"]\nseeds = [0, 1, 2]\n'
        "budgets_tokens = [1024]\n[variants]\nblock_attnres = \"parent\"\nrd_attnres = \"treatment\"\n"
        "[train]\nvocab_size = 512\nbatch_tokens = 512\neval_tokens = 1024\n"
        "[analysis]\nmin_effect_nats = 0.5\nlooks = [3, 5]\n"
    )
    env = {**os.environ, "HARNESS_PROGRESS": "lines"}

    def harness(*args: str, results: Path) -> str:
        proc = warm.run(
            [sys.executable, "-m", "harness", *args, "--results", str(results)],
            env=env,
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 0, f"harness {' '.join(args)}:\n{proc.stdout}\n{proc.stderr[-3000:]}"
        return proc.stdout

    src, dst, archive = tmp_path / "src", tmp_path / "dst", tmp_path / "arch_tiny.tar.gz"
    harness("queue", str(grid), results=src)
    harness("work", "--threads", "1", "--quiet", results=src)
    harness("report", "--grid", "arch_tiny", "--out", str(tmp_path / "r0"), "--no-figures", results=src)
    harness("archive", "--grid", "arch_tiny", "--out", str(archive), "--toml", str(grid), results=src)
    with gzip.open(archive) as f:  # no checkpoints: result files, the queue view, the TOML, the manifest
        names = tarfile.open(fileobj=io.BytesIO(f.read())).getnames()
    assert sorted(names) == sorted(
        ["manifest.json", "queue.json", "grid.toml"] + [n for n in names if n.startswith("runs/")]
    )
    assert len(names) == 9
    m = read_archive(archive).manifest
    assert m["archived_by"]["lock_sha256"] == sha256(
        (Path(__file__).resolve().parents[2] / "requirements.lock").read_bytes()
    )
    assert {e["status"] for e in m["runs"].values()} == {"done"}

    harness("import", str(archive), "--corpus", str(SAMPLE), results=dst)
    # the TOML names no machine path: its corpus is the corpus's fingerprint and name
    ref = f"corpus-sha256:{m['corpus']['fingerprint']}:fineweb_edu_sample"
    assert (dst / "grids" / "arch_tiny.toml").read_text() == grid.read_text().replace(str(SAMPLE), ref)
    harness("report", "--grid", "arch_tiny", "--out", str(tmp_path / "r1"), "--no-figures", results=dst)
    assert (tmp_path / "r1" / "stats.csv").read_bytes() == (tmp_path / "r0" / "stats.csv").read_bytes()
    more = tmp_path / "more.toml"  # the imported TOML with the next look's seeds, queued as usual
    more.write_text((dst / "grids" / "arch_tiny.toml").read_text().replace("[0, 1, 2]", "[0, 1, 2, 3, 4]"))
    assert "queued 4 runs (6 already queued or done)" in harness("queue", str(more), results=dst)
    harness("work", "--threads", "1", "--quiet", results=dst)
    final = harness(
        "sql", "select count(*) as n from final where grid = 'arch_tiny'", "--format", "csv", results=dst
    )
    assert final.split() == ["n", "10"]


ROOT = Path(__file__).resolve().parents[2]
COMMITTED = sorted((ROOT / "reports").glob("*/*.tar.gz"))


# A committed archive imported into an empty folder gives its report's pairs.csv byte for byte and its stats.csv
# to the CPU's last digits: tests/tooling/test_committed_reports.py, which imports and reports each one already.


def test_the_docs_claim_byte_for_byte_only_what_holds_on_another_cpu():
    """README and docs/sharing.md once said an import gives "the same stats.csv, byte for byte" (README: "every
    number byte for byte"); on an AVX2 CPU the committed factorial study's stats.csv differed in one cell by
    one ulp. A sentence that says byte for byte of stats.csv (or every number) says where it holds."""
    for path in (ROOT / "README.md", ROOT / "docs" / "sharing.md"):
        text = " ".join(path.read_text().split())
        for sentence in re.split(r"(?<=[.;)])\s", text):
            if "byte for byte" in sentence and ("stats.csv" in sentence or "every number" in sentence):
                assert "last digit" in sentence or "machine that wrote it" in sentence, (path.name, sentence)


@pytest.mark.slow  # imports a study's archive (96 runs) twice and writes its report
@pytest.mark.parametrize("archive", COMMITTED, ids=[p.parent.name for p in COMMITTED])
def test_a_committed_archive_archived_again_names_no_machine_and_comes_back_byte_for_byte(
    archive, tmp_path, capsys
):
    """Re-archiving a checked-in study (as the lead does with `harness import` + `harness archive`)
    gives an archive with no absolute path, host or owner, runs in seed order and each run's training
    commit; imported again it gives the report's stats.csv, and archived again the same file."""
    grid = read_archive(archive).grid
    first, second = tmp_path / "first", tmp_path / "second"
    assert cli(["import", str(archive), "--results", str(first)]) == 0
    # the imported queue lists the parent's runs first, seeds in numeric order (s2 before s10), a seed's
    # budgets together (a grid of several budgets: the cost study)
    order = [r.config for r in RunQueue.open(None, first).runs(grid).values()]
    parent = [c.seed for c in order if c.role == "parent"]
    assert order[0].role == "parent" and parent == sorted(parent)
    assert sorted(set(parent)) == list(range(len(set(parent))))
    new = tmp_path / "new.tar.gz"
    assert cli(["archive", "--grid", grid, "--results", str(first), "--out", str(new)]) == 0
    with tarfile.open(new, "r:gz") as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar}
    assert machine_marks(members, tmp_path) == []
    runs = [n for n in members if n.startswith("runs/")]
    assert runs == sorted(runs, key=natural_key) and list(members)[:3] == [
        MANIFEST,
        "grid.toml",
        "queue.json",
    ]
    queued = [r["config"]["run_id"] for r in json.loads(members["queue.json"])]
    assert queued == [c.run_id for c in order]  # the archive's queue view in that order too
    manifest = read_archive(new).manifest
    trained = {
        rid: json.loads(members[e["file"]])["run"]["code_version"] for rid, e in manifest["runs"].items()
    }
    assert {rid: e["code_version"] for rid, e in manifest["runs"].items()} == trained
    assert None not in trained.values() and "archived_by" in manifest and "code" not in manifest
    assert cli(["import", str(new), "--results", str(second)]) == 0
    assert same_table(_report(second, tmp_path / "r", grid), (archive.parent / "stats.csv").read_bytes())
    again = tmp_path / "again.tar.gz"
    assert cli(["archive", "--grid", grid, "--results", str(second), "--out", str(again)]) == 0
    assert again.read_bytes() == new.read_bytes()


def _edit_manifest(edit):
    """An ``_rewrite`` edit applying ``edit(manifest dict)`` to the manifest member only."""

    def apply(name: str, data: bytes) -> bytes:
        if name != MANIFEST:
            return data
        m = json.loads(data)
        edit(m)
        return json.dumps(m).encode()

    return apply


def _with_member(src: Path, dst: Path, name: str, data: bytes) -> Path:
    """Archive ``src`` repacked as ``dst`` with member ``name`` added and listed, with its hash, among the
    manifest's members (what a re-packer, not a bit flip, would write)."""
    with tarfile.open(src, "r:gz") as tar:
        members = [(m.name, tar.extractfile(m).read()) for m in tar]
    manifest = json.loads(dict(members)[MANIFEST])
    manifest["members"][name] = {"bytes": len(data), "sha256": sha256(data)}
    rest = [(n, d) for n, d in members if n != MANIFEST]
    with tarfile.open(dst, "w:gz") as tar:
        for member, blob in [(MANIFEST, json.dumps(manifest).encode()), *rest, (name, data)]:
            info = tarfile.TarInfo(member)
            info.size = len(blob)
            tar.addfile(info, io.BytesIO(blob))
    return dst


def test_a_manifest_that_disagrees_with_its_members_is_refused(tmp_path, capsys):
    """No hash covers the manifest itself: each of its claims is checked against the members (issue 61,
    row 5), one line, nothing written."""
    _, archive = _archived(tmp_path)
    dest = tmp_path / "dest"
    first = lambda m: next(iter(m["runs"].values()))  # noqa: E731
    cases = {
        "commit": (lambda m: first(m).update(code_version="0" * 40), "records code_version"),
        "status": (lambda m: first(m).update(status="failed"), "records status done, the manifest failed"),
        "grid": (
            lambda m: m.update(grid="seq_renamed"),
            "the manifest names grid 'seq_renamed', its run seq:",
        ),
    }
    for name, (edit, words) in cases.items():
        bad = tmp_path / f"{name}.tar.gz"
        _rewrite(archive, bad, _edit_manifest(edit))
        _refused(capsys, bad, dest, "manifest mismatch", words)

    # a result member the manifest lists among its members but not among its runs
    unlisted = _with_member(archive, tmp_path / "unlisted.tar.gz", "runs/extra.json", b'{"format_version":1}')
    _refused(capsys, unlisted, dest, "runs/extra.json is not a run of its manifest")
    # a grid TOML of another grid, its hash updated in the manifest (a re-packed archive)
    renamed = _with_member(archive, tmp_path / "renamed.tar.gz", "grid.toml", b'name = "base"\n')
    _refused(capsys, renamed, dest, "its grid.toml is grid 'base', the manifest's grid is 'seq'")
    assert not dest.exists()


@pytest.mark.slow  # reads the committed study's archive (96 runs) twice
def test_a_manifest_corpus_fingerprint_unlike_its_runs_is_refused(tmp_path, capsys):
    """The issue's case: the committed study's manifest with a corpus fingerprint of 64 zeros imported
    without a word, after which the real corpus was "another text" forever."""
    study = Path(__file__).resolve().parents[2] / "reports/factorial_study/rd_factorial_study.tar.gz"
    real = read_archive(study).corpus["fingerprint"]
    zeros = tmp_path / "zeros.tar.gz"
    _rewrite(study, zeros, _edit_manifest(lambda m: m["corpus"].update(fingerprint="0" * 64)))
    _refused(
        capsys,
        zeros,
        tmp_path / "dest",
        "manifest mismatch",
        f"corpus fingerprint is {'0' * 64}",
        f"on {real}",
    )


def test_archive_refuses_another_grids_toml_and_an_unwritable_out_before_any_work(tmp_path, capsys):
    """Issue 61 rows 6 and 12: `--toml` of another grid, `--out` a folder, empty or under a file: one line
    naming the option, exit 2, nothing created."""
    results, _ = _archived(tmp_path)
    other = tmp_path / "other.toml"
    other.write_text('name = "base"\nseeds = [0]\n')
    folder = tmp_path / "outdir"
    folder.mkdir()
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    cases = [
        (
            ["--toml", str(other), "--out", str(tmp_path / "a.tar.gz")],
            f"--toml {other} is the TOML of grid 'base', not of --grid seq",
        ),
        (["--out", str(folder)], f"--out {folder}: is a folder"),
        (["--out", str(blocker / "x.tar.gz")], f"{blocker} is a file, not a folder"),
    ]
    for extra, words in cases:
        capsys.readouterr()
        with unchanged(tmp_path):
            assert cli(["archive", "--grid", "seq", "--results", str(results), *extra]) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and words in err and ".tmp" not in err, err
    with unchanged(tmp_path):
        empty = warm.run(
            [
                sys.executable,
                "-m",
                "harness",
                "archive",
                "--grid",
                "seq",
                "--results",
                str(results),
                "--out",
                "",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert empty.returncode == 2 and "argument --out: '': an empty path; give a file's path" in empty.stderr
    assert "PosixPath" not in empty.stderr


def test_an_archives_grid_toml_names_its_corpus_by_content_though_its_path_was_relative(tmp_path, capsys):
    """Issue 61 row 15: a grid file naming its corpus relative to its folder (as the committed studies' do)
    is archived with the corpus as `corpus-sha256:<fingerprint>:<name>`, every other line as it was, so no
    path travels; imported elsewhere, `harness queue RESULTS/grids/NAME.toml` without --corpus is one line
    asking for it (nothing written; before, the path was read from under the results folder), and with
    --corpus PATH re-points the grid; the import archived again is the same file. An older archive whose TOML
    kept the path is imported with the TOML naming the reference."""
    lab = tmp_path / "lab"
    (lab / "grids").mkdir(parents=True)
    (lab / "data").mkdir()
    corpus = lab / "data" / "corpus.jsonl"
    corpus.write_text('{"text": "hello"}\n')
    grid = write_grid(lab / "grids", seeds="[0, 1, 2]", name="seq", extra="[analysis]\nlooks = [3, 5]\n")
    relative = 'corpus = "../data/corpus.jsonl"   # relative: to this file\'s folder'
    text = grid.read_text().replace(f'corpus = "{lab / "grids" / "corpus.jsonl"}"', relative)
    assert relative in text
    grid.write_text(text)
    (lab / "grids" / "corpus.jsonl").unlink()  # write_grid's own corpus: the grid reads ../data's
    results, archive = tmp_path / "results", tmp_path / "seq.tar.gz"
    assert cli(["queue", str(grid), "--results", str(results)]) == 0
    _drain(results)
    assert (
        cli(
            [
                "archive",
                "--grid",
                "seq",
                "--results",
                str(results),
                "--out",
                str(archive),
                "--toml",
                str(grid),
            ]
        )
        == 0
    )

    a = read_archive(archive)
    ref = f"corpus-sha256:{a.corpus['fingerprint']}:corpus.jsonl"
    shared = a.members["grid.toml"].decode()
    assert shared == text.replace(relative, f'corpus = "{ref}"   # {BY_CONTENT_COMMENT}')
    assert machine_marks(a.members, tmp_path) == [] and "../data" not in shared

    dst = tmp_path / "laptop" / "results"
    assert cli(["import", str(archive), "--results", str(dst)]) == 0
    capsys.readouterr()
    imported = dst / "grids" / "seq.toml"
    assert imported.read_text() == shared
    with unchanged(tmp_path):
        assert cli(["queue", str(imported), "--results", str(dst)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"corpus corpus.jsonl (fingerprint {a.corpus['fingerprint']})" in err, err
    assert "pass --corpus PATH" in err and "../data" not in err, err

    assert cli(["queue", str(imported), "--results", str(dst), "--corpus", str(corpus)]) == 0
    assert "nothing to add" in capsys.readouterr().out
    assert RunQueue.open(None, dst).corpus_of("seq")["path"] == str(corpus)
    again = tmp_path / "again.tar.gz"
    assert cli(["archive", "--grid", "seq", "--results", str(dst), "--out", str(again)]) == 0
    assert again.read_bytes() == archive.read_bytes()

    # an archive written before this (its TOML kept the relative path): imported, the TOML names the reference
    older = tmp_path / "older.tar.gz"
    write_archive(
        older,
        grid="seq",
        results=a.results,
        queue=a.queue,
        code=a.archived_by,
        grid_toml=text.encode(),
        corpus=a.corpus,
    )
    assert read_archive(older).members["grid.toml"].decode() == text
    assert cli(["import", str(older), "--results", str(tmp_path / "older")]) == 0
    assert (tmp_path / "older" / "grids" / "seq.toml").read_text() == shared


def test_corpus_by_content_replaces_a_path_only():
    """A grid file's corpus path (relative or absolute) becomes the reference, its comment too; a hub spec,
    a reference and a file without a corpus are returned as they were."""
    ref = "corpus-sha256:" + "ab" * 32 + ":sample"
    rest = '\nseeds = [0, 1]  # two\n[train]\ncorpus_note = "x"\n'
    for path in ("../../data/sample", "/data/sample"):
        text = f'name = "g"\ncorpus = "{path}"{rest}'.encode()
        assert corpus_by_content(text, ref) == f'name = "g"\ncorpus = "{ref}"{rest}'.encode()
    commented = b"name = 'g'\ncorpus = '../sample'  # relative to this file\n"
    assert (
        corpus_by_content(commented, ref)
        == f"name = 'g'\ncorpus = \"{ref}\"  # {BY_CONTENT_COMMENT}\n".encode()
    )
    for same in (
        b'name = "g"\ncorpus = "hf:owner/name:config"\n',
        f'corpus = "{ref}"\n'.encode(),
        b'name = "g"\n',
    ):
        assert corpus_by_content(same, ref) == same
    with pytest.raises(ValueError, match="not a corpus reference"):
        corpus_by_content(b'corpus = "x"\n', "/data/sample")
