"""The queue journal survives damage (harness.scheduling.queue.journal): a torn last line is skipped with
a warning and the next append starts on a fresh line; a corrupt line elsewhere stops every
command with one line naming the file, the line and the repair; ``harness queue --repair``
writes a clean journal and keeps a backup.

Real journal files written by the real queue; the damage is done to the file as a killed
writer or a disk error leaves it. Stub training only. ``python -m pytest -q tests/scheduling/test_journal.py``.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from optuna.storages.journal import JournalFileBackend, JournalFileOpenLock

from harness.cli import main as cli
from harness.scheduling.queue.journal import JournalCorrupt, QueueJournal, QueueJournalStorage
from harness.scheduling.queue.run_queue import RunQueue
from harness.scheduling.workers.loop import work

from queue_stubs import quiet, write_grid

RUN0 = "g:tiny:block_attnres:s0:1024"
SAMPLE = Path(__file__).resolve().parents[3] / "shared/data/fineweb_edu_sample"


def _queued(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A grid of 6 runs queued in a fresh journal: (grid file, results folder, journal)."""
    grid = write_grid(tmp_path)
    results = tmp_path / "results"
    assert cli(["queue", str(grid), "--results", str(results)]) == 0
    return grid, results, results / "queue.journal"


def _states(results: Path) -> dict[str, str]:
    return {rid: r.state for rid, r in RunQueue.open(None, results, create=False).runs().items()}


def _harness(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "harness", *args], capture_output=True, text=True, timeout=120
    )


def test_a_torn_last_line_is_skipped_with_a_warning_and_the_next_append_starts_a_fresh_line(tmp_path, capsys):
    grid, results, journal = _queued(tmp_path)
    before = journal.read_bytes()
    # a writer killed mid-append: the first 70 bytes of its line, no newline
    torn = json.dumps({"op_code": 8, "worker_id": "w", "trial_id": 0, "user_attr": {"lease": {"host": "x"}}})[
        :70
    ]
    with open(journal, "ab") as f:
        f.write(torn.encode())
    capsys.readouterr()

    assert cli(["status", "--results", str(results)]) == 0
    captured = capsys.readouterr()
    n = before.count(b"\n") + 1
    assert f"queue journal {journal}: line {n} is torn (70 bytes without a newline" in captured.err
    assert re.search(r"^g\s+6\s+0\s+0\s+0\s+0\s+6\s", captured.out, re.M), captured.out

    # the next append (queueing a third seed) sets the torn bytes aside and starts on a fresh line
    assert cli(["queue", str(write_grid(tmp_path, seeds="[0, 1, 2]")), "--results", str(results)]) == 0
    err = capsys.readouterr().err
    assert f"set aside in {journal}.torn" in err
    assert (journal.parent / "queue.journal.torn").read_bytes() == torn.encode() + b"\n"
    data = journal.read_bytes()
    assert data.startswith(before) and data.endswith(b"\n") and torn.encode() not in data
    assert all(json.loads(line) for line in data.splitlines())

    # the queue reads and drains as if nothing had happened
    seen = []
    work(RunQueue.open(None, results), lambda c, r: seen.append(c.run_id) or "done", results, log=quiet)
    assert len(seen) == 9 and set(_states(results).values()) == {"done"}


def _corrupt_line(journal: Path, number: int) -> bytes:
    """Put a control character into line ``number`` (1-based), as a disk error would; returns the line."""
    lines = journal.read_bytes().split(b"\n")
    line = bytearray(lines[number - 1])
    line[60] = 0x01
    lines[number - 1] = bytes(line)
    journal.write_bytes(b"\n".join(lines))
    return bytes(line)


@pytest.mark.slow  # 10 s on 2 cores: out of the developer's loop (`pytest -m "not slow"`)
def test_a_corrupt_middle_line_is_one_clear_error_and_repair_keeps_the_numbering(tmp_path, capsys):
    grid, results, journal = _queued(tmp_path)
    numbers = {rid: r.trials[0].number for rid, r in RunQueue.open(None, results).runs().items()}
    # the second run's trial creation (trial number 1), a middle line wherever the layout puts it
    # (the study's creation and its results-folder binding come before the trials)
    line = [
        i + 1 for i, raw in enumerate(journal.read_bytes().splitlines()) if json.loads(raw)["op_code"] == 4
    ][1]
    assert 1 < line < journal.read_bytes().count(b"\n")
    damaged = _corrupt_line(journal, line)
    original = journal.read_bytes()

    for command in (["status"], ["work", "--max-runs", "1"], ["queue", str(grid)]):
        proc = _harness(*command, "--results", str(results))
        assert proc.returncode == 2, proc.stderr
        err = proc.stderr.strip()
        assert "\n" not in err and "Traceback" not in err, err
        assert (
            f"queue journal {journal}: line {line} is corrupt (not JSON: Invalid control character at (column 61))"
            in err
        )
        assert "harness queue --repair" in err and "keeps the damaged file as a backup" in err
    assert journal.read_bytes() == original  # nothing was appended onto the damage

    assert cli(["queue", "--repair", "--results", str(results)]) == 0
    out = capsys.readouterr().out
    (backup,) = results.glob("queue.journal.bak-*")
    assert backup.read_bytes() == original and f"damaged file kept as {backup}" in out
    assert (
        f"line {line}: unreadable; it created a trial or study, replaced by a failed placeholder trial in study 0"
        in out
    )
    clean = journal.read_bytes().split(b"\n")
    assert damaged not in clean and len(clean) == len(original.split(b"\n"))
    # every other run keeps its trial number; the damaged run's trial is gone, and queueing adds it back
    runs = RunQueue.open(None, results).runs()
    lost = next(rid for rid in numbers if numbers[rid] == 1)
    assert {rid: r.trials[0].number for rid, r in runs.items()} == {
        k: v for k, v in numbers.items() if k != lost
    }
    assert cli(["queue", str(grid), "--results", str(results)]) == 0
    assert "queued 1 runs" in capsys.readouterr().out and len(_states(results)) == 6
    assert cli(["queue", "--repair", "--results", str(results)]) == 0
    assert "nothing to repair" in capsys.readouterr().out


@pytest.mark.parametrize(
    "line, why",
    [
        ('{"op_code": 99}', "unknown op_code 99 (known: 0-10)"),
        ("[1,2,3]", "a JSON list, not an object"),
        ('{"op_code": 0, "worker_id": "w", "directions": [1]}', "op_code 0 without study_name"),
        ('{"op_code": 8, "worker_id": "w", "trial_id": 0}', "op_code 8 without user_attr"),
    ],
)
def test_valid_json_that_is_not_an_operation_is_one_line_and_repair_finds_it(tmp_path, capsys, line, why):
    """Issue 45 row 7: Optuna's replay stopped on these with ``AssertionError: Should not reach.`` or
    ``KeyError: 'study_name'``, and ``--repair`` said every line was valid."""
    _, results, journal = _queued(tmp_path)
    n = journal.read_bytes().count(b"\n") + 1
    with open(journal, "ab") as f:
        f.write(line.encode() + b"\n")
    for command in (["status"], ["migrate"]):
        capsys.readouterr()
        assert cli([*command, "--results", str(results)]) == 2
        err = capsys.readouterr().err.strip()
        assert err.splitlines() == [
            f"harness {command[0]}: error: queue journal {journal}: line {n} is corrupt (not an operation "
            f"record: {why}), so the queue cannot be read past it; stop every worker, then run `harness "
            f"queue --repair --storage journal:{journal}` (it writes a clean journal of the valid lines, in "
            "order, and keeps the damaged file as a backup)"
        ], err
    assert cli(["queue", "--repair", "--results", str(results)]) == 0
    out = capsys.readouterr().out
    assert f"line {n}: " in out and "nothing to repair" not in out, out
    assert line.encode() not in journal.read_bytes()
    assert set(_states(results).values()) == {"queued"}


def test_ctrl_c_while_the_journal_lock_is_let_go_is_the_interrupt_and_leaves_no_lock(tmp_path, monkeypatch):
    """Issue 45 row 8: a SIGINT between Optuna's rename of the lock file and its removal raised
    ``FileNotFoundError: ...queue.journal.lock<uuid>.rename`` instead of the interrupt."""
    import os
    import signal

    journal = tmp_path / "queue.journal"
    lock = QueueJournal(str(journal)).lock
    rename = os.rename

    def interrupted_rename(src, dst):
        signal.raise_signal(signal.SIGINT)  # Ctrl-C lands in the middle of the release
        rename(src, dst)

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        lock.acquire()
        monkeypatch.setattr(os, "rename", interrupted_rename)
        with pytest.raises(KeyboardInterrupt):
            lock.release()
    finally:
        monkeypatch.undo()
        signal.signal(signal.SIGINT, previous)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["queue.journal"]  # no lock, no .rename left
    lock.acquire()  # free at once
    lock.release()


TUNE_INTERRUPTED = """
import os, signal, sys
from harness.cli import main
rename, seen = os.rename, [0]
def rename_then_ctrl_c(src, dst):
    if str(src).endswith(".lock"):
        seen[0] += 1
        if seen[0] == int(sys.argv[1]):
            signal.raise_signal(signal.SIGINT)  # Ctrl-C as the Nth append lets go of the journal lock
    rename(src, dst)
os.rename = rename_then_ctrl_c
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.slow  # two `harness tune` of 60 trials: about 15 s on 2 cores
def test_ctrl_c_during_tune_enqueue_exits_130_and_the_rerun_adds_nothing(tmp_path):
    """A Ctrl-C while the journal takes the trials completes the write first (all 60 or none: issue 53
    row 9), says so, exits 130; running the command again adds nothing."""
    results = tmp_path / "results"
    argv = ["tune", "--variant", "block_attnres", "--size", "tiny", "--budget-tokens", "4096"]
    argv += ["--trials", "60", "--corpus", str(SAMPLE), "--name", "t", "--results", str(results)]
    argv += ["--set", "vocab_size=512", "--set", "batch_tokens=1024"]
    cut = subprocess.run(
        [sys.executable, "-c", TUNE_INTERRUPTED, "12", *argv], capture_output=True, text=True, timeout=300
    )
    assert cut.returncode == 130, cut.stderr
    assert (
        cut.stderr.strip()
        == "interrupted (Ctrl-C arrived while it queued 60 run(s): that was completed first)"
    )
    assert not list(results.glob("queue.journal.lock*"))
    assert len(RunQueue.open(None, results).runs()) == 60
    again = _harness(*argv)
    assert again.returncode == 0, again.stderr
    assert "nothing to add: all 60 trial(s) already queued" in again.stdout, again.stdout
    assert len(RunQueue.open(None, results).runs()) == 60


def test_a_corrupt_last_whole_line_is_not_dropped_silently(tmp_path):
    _, results, journal = _queued(tmp_path)
    n = journal.read_bytes().count(b"\n")
    _corrupt_line(journal, n)  # the last trial creation: Optuna's reader skips it without a word
    with pytest.raises(JournalCorrupt, match=f"line {n} is corrupt"):
        QueueJournalStorage(str(journal))


def test_repair_is_refused_while_a_worker_holds_a_fresh_lease(tmp_path, capsys):
    _, results, journal = _queued(tmp_path)
    claim = RunQueue.open(None, results).claim()  # a live worker's lease (this process)
    creations = [i for i, line in enumerate(journal.read_text().splitlines(), 1) if '"op_code":4' in line]
    _corrupt_line(journal, creations[1])  # the second run's creation: the first is the trial the worker holds
    original = journal.read_bytes()
    assert cli(["queue", "--repair", "--results", str(results)]) == 2
    err = capsys.readouterr().err
    assert (
        f"worker(s) {claim.owner} hold a fresh lease in {journal}: stop every worker before --repair" in err
    )
    assert journal.read_bytes() == original and not list(results.glob("queue.journal.bak-*"))


def test_optunas_own_backend_reads_the_same_operations_and_appends_interleave(tmp_path):
    """The format stays Optuna's: its JournalFileBackend reads what QueueJournal wrote, line for
    line; reads resume at the offset the last read reached; an append by Optuna's backend under
    the same lock file is read back after ours."""
    _, _, journal = _queued(tmp_path)
    ours = QueueJournal(str(journal))
    theirs = JournalFileBackend(str(journal), lock_obj=JournalFileOpenLock(str(journal)))
    whole = list(ours.read_logs(0))
    assert whole == list(theirs.read_logs(0))
    assert len(whole) == journal.read_bytes().count(b"\n") > 6
    assert list(ours.read_logs(5)) == whole[5:]  # from a known offset
    assert list(QueueJournal(str(journal)).read_logs(5)) == whole[5:]  # a fresh reader counts from 0

    def op(worker: str) -> dict:  # a real operation (a trial's user attribute), by ``worker``
        return {"op_code": 8, "worker_id": worker, "trial_id": 0, "user_attr": {"by": worker}}

    ours.append_logs([op("a"), op("b")])
    theirs.append_logs([op("c")])
    tail = [log["worker_id"] for log in ours.read_logs(len(whole))]
    assert tail == ["a", "b", "c"] == [log["worker_id"] for log in theirs.read_logs(len(whole))]
    assert not Path(f"{journal}.lock").exists()  # both released the one lock
