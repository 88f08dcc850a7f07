"""A results folder that fills up while a worker trains (issue 45, row 1): nothing the harness
writes is left torn, and the worker stops with one line naming the full folder and its free space,
with the queue journal inside the results folder (the default layout) or elsewhere (--storage).
Real tmpfs mounts filled for real (the ``tmpfs`` fixture of tests/e2e/test_env_faults.py).

``python -m pytest -q tests/e2e/test_full_disk.py``.
"""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest
import test_env_faults
from test_env_faults import _no_failure, _queued

from harness.common.faults import DiskFull
from harness.scheduling.queue.journal import QueueJournal
from harness.scheduling.queue.run_queue import RunQueue
from harness.scheduling.workers.loop import work

pytestmark = pytest.mark.own_cache  # its commands build their corpus in RESULTS/cache (conftest)

PAGE = 4096
tmpfs = test_env_faults.tmpfs  # the fixture: a real tmpfs mount of a given size, unmounted after the test


def fill(folder: Path) -> Path:
    """Write ``folder/filler`` until the file system refuses a single byte more (a real ENOSPC)."""
    filler = folder / "filler"
    with open(filler, "wb", buffering=0) as f:
        for chunk in (2**20, 2**16, PAGE, 1):
            try:
                while True:
                    f.write(b"\0" * chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
    return filler


def _op(pad: int) -> dict:
    return {"op_code": 8, "worker_id": "w", "trial_id": 0, "user_attr": {"pad": "x" * pad}}


def test_an_append_that_meets_a_full_disk_leaves_the_journal_as_it_was(tmpfs):
    """The last line's page has 100 bytes of room: Optuna's buffered append wrote those 100 bytes of a
    500-byte line, then ENOSPC: a torn line later read as "a writer was killed mid-append"."""
    folder = tmpfs("1m")
    journal = QueueJournal(str(folder / "queue.journal"))
    empty = len(json.dumps(_op(0), separators=(",", ":"))) + 1
    journal.append_logs([_op(2 * PAGE - 100 - empty)])  # the file ends 100 bytes before a page boundary
    before = (folder / "queue.journal").read_bytes()
    assert len(before) % PAGE == PAGE - 100
    fill(folder)
    with pytest.raises(OSError) as caught:
        journal.append_logs([_op(500)])
    assert (folder / "queue.journal").read_bytes() == before  # nothing torn, nothing to set aside
    assert (caught.value.errno, caught.value.filename) == (errno.ENOSPC, str(folder / "queue.journal"))
    assert list(journal.read_logs(0)) == [_op(2 * PAGE - 100 - empty)]


def pad_to_page(path: Path) -> None:
    """Append one valid operation that ends the journal on a page boundary: on a full disk its next
    append then cannot write a single byte (the last page has no room left)."""
    journal = QueueJournal(str(path))
    slack = -path.stat().st_size % PAGE
    empty = len(json.dumps(_op(0), separators=(",", ":"))) + 1
    journal.append_logs([_op(slack - empty if slack >= empty else slack + PAGE - empty)])
    assert path.stat().st_size % PAGE == 0


def _fill_then_fail(config, results_dir: Path):
    """A train function whose checkpoint meets a disk another process filled meanwhile: the results
    folder's file system is left with no free byte, then the checkpoint write fails for real."""
    from harness.common.files import atomic_write

    if (results_dir / "queue.journal").exists():
        pad_to_page(results_dir / "queue.journal")
    fill(results_dir)
    atomic_write(results_dir / "checkpoints" / "c.ckpt", b"\0" * (64 * 2**10))
    return "done"


@pytest.mark.parametrize("layout", ["journal inside", "--storage elsewhere"])
def test_a_disk_filled_during_a_run_is_one_line_naming_the_folder_and_leaves_nothing_torn(
    tmp_path,
    tmpfs,
    layout,
):
    results = tmpfs("12m")
    storage = None if layout == "journal inside" else f"journal:{tmp_path / 'q.journal'}"
    _queued(tmp_path, results, [] if storage is None else ["--storage", storage])
    journal = results / "queue.journal" if storage is None else tmp_path / "q.journal"
    with pytest.raises(DiskFull) as caught:
        work(
            RunQueue.open(storage, results),
            _fill_then_fail,
            results,
            on_failure=lambda *a: pytest.fail("a full disk is not a failed run"),
            log=lambda line: None,
        )
    msg = str(caught.value)
    assert "\n" not in msg and msg.startswith("disk full: "), msg
    assert f"{results}" in msg and " free)" in msg, msg
    data = journal.read_bytes()
    assert data.endswith(b"\n") and all(json.loads(line) for line in data.splitlines())  # nothing torn
    assert not journal.with_name(journal.name + ".torn").exists()
    runs = RunQueue.open(storage, results).runs()
    assert all(_no_failure(r) for r in runs.values())  # no retry spent
    if storage is None:  # the release could not be written: said, and the lease covers the run
        assert "could not be released" in msg and "the queue journal is on the full disk" in msg, msg
        assert sorted(r.state for r in runs.values()) == ["queued", "queued", "running"]
    else:
        assert "released and queued again (no retry spent)" in msg, msg
        assert sorted(r.state for r in runs.values()) == ["queued"] * 3
    assert not [p for p in (results / "checkpoints").rglob("*") if p.is_file()]  # no torn checkpoint


@pytest.mark.slow  # a `harness work` subprocess: about 6 s on 2 cores
@pytest.mark.parametrize("layout", ["journal inside", "--storage elsewhere"])
def test_work_on_a_full_results_folder_names_it_and_its_free_space(tmp_path, tmpfs, layout):
    from test_faults import harness, one_line_error

    results = tmpfs("12m")
    storage = [] if layout == "journal inside" else ["--storage", f"journal:{tmp_path / 'q.journal'}"]
    _queued(tmp_path, results, storage)
    journal = results / "queue.journal" if not storage else tmp_path / "q.journal"
    (results / ".harness-id").exists() or (results / ".harness-id").write_text("x")
    if not storage:
        pad_to_page(journal)
    fill(results)
    before = journal.read_bytes()
    proc = harness("work", "--results", str(results), *storage, "--threads", "1", "--quiet")
    err = one_line_error(proc, "disk full: ", "0 B free", str(results))  # the journal, or the folder
    assert proc.returncode == 1, err
    assert journal.read_bytes().startswith(before) and journal.read_bytes().endswith(b"\n")
    assert all(
        _no_failure(r) for r in RunQueue.open(storage[1] if storage else None, results).runs().values()
    )
