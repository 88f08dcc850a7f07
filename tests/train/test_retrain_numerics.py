"""Which numerics ``harness retrain`` re-trains an archive with (harness/train/retrain.py, DESIGN section 13),
read from the committed archives: the factorial study's runs (written before the record) trained per-site at a
commit whose numerics are known, so they re-train per-site and the check compares machines; the CPU study's
trained two-phase before d299c74 (two_phase/1, a revision this code no longer has), so they re-train on the
default path and the check measures code plus machine. Nothing trains here (the re-training itself:
tests/e2e/test_retrain.py).

    python -m pytest -q tests/train/test_retrain_numerics.py
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from harness.commands.retrain import _numerics_plan
from harness.models.numerics import DEFAULT_ROUTING, numerics_id
from harness.report.render.retrain_lines import identity_line
from harness.store.archive import read_archive
from harness.train import retrain as rt

pytestmark = pytest.mark.own_cache  # its commands build their corpus in RESULTS/cache (conftest)

REPORTS = Path(__file__).resolve().parents[2] / "reports"


def _runs(name: str) -> list[rt.ArchivedRun]:
    (archive,) = (REPORTS / name).glob("*.tar.gz")
    return rt.archived_runs(read_archive(archive))


def test_the_factorial_study_retrains_with_its_own_per_site_numerics():
    runs = _runs("factorial_study")
    assert Counter(r.numerics for r in runs) == {"per_site/1": 96}  # no record: its commit implies it
    assert {rt.routing_for(r) for r in runs} == {"per_site"}
    assert _numerics_plan(runs, rt) == "with the archive's numerics (per_site/1): the check compares machines"
    new = [
        rt.RetrainedRun(r.config.run_id, "done", 1.0, r.protocol_hash, 1.0, "c0ffee", "per_site/1", "cpu-x")
        for r in runs
    ]
    machine = rt.identity(runs, new)
    assert machine == {
        "commit": "c0ffee",
        "numerics": "per_site/1",
        "hardware": "cpu-x",
        "archive_numerics": "per_site/1",
        "archive_numerics_used": True,
    }
    assert identity_line(machine) == (
        "The archive's numerics (per_site/1) re-trained every run: the check compares machines."
    )


def test_a_revision_this_code_no_longer_has_retrains_on_the_default_path_and_says_so():
    runs = _runs("cpu_study")
    assert Counter(r.numerics for r in runs) == {"two_phase/1": 96}
    assert {rt.routing_for(r) for r in runs} == {DEFAULT_ROUTING}
    now = numerics_id(DEFAULT_ROUTING)
    assert _numerics_plan(runs, rt) == (
        f"archive numerics this code does not have (two_phase/1 -> {now}): the check measures code plus machine"
    )
    new = [
        rt.RetrainedRun(r.config.run_id, "done", 1.0, r.protocol_hash, 1.0, "c0ffee", now, "cpu-x")
        for r in runs
    ]
    machine = rt.identity(runs, new)
    assert (machine["archive_numerics"], machine["archive_numerics_used"]) == ("two_phase/1", False)
    assert identity_line(machine) == (
        "The archive's numerics are two_phase/1, and not every run re-trained with its own (unknown, or a "
        "revision this code no longer has): the check measures code plus machine."
    )
    mixed = rt.identity(
        runs[:4],
        [*new[:3], rt.RetrainedRun(runs[3].config.run_id, "done", 1.0, "p", 1.0, "beef", now, "cpu-y")],
    )
    assert mixed["commit"] == "c0ffee (3 runs), beef (1 run)"  # a check cut short, resumed by other code
    assert mixed["hardware"] == "cpu-x (3 runs), cpu-y (1 run)"


def test_a_folder_re_trained_with_other_numerics_is_refused_not_reused(tmp_path):
    """A run re-trained earlier into the folder by code that gave it other numerics is not this call's
    re-training: refused in one line (re-train into another folder), never read as if it were."""
    from test_db_store import make_result

    from harness.store.runfile import write_result

    runs = _runs("factorial_study")[:1]  # per_site/1
    rt.mark_folder(tmp_path, "sha")
    result = make_result(runs[0].config.run_id)
    result["run"] |= {"protocol_hash": runs[0].protocol_hash, "numerics": "two_phase/2", "wall_s": 1.0}
    write_result(tmp_path, result)
    with pytest.raises(ValueError) as refused:
        rt.claim_folder(tmp_path, "sha", runs)
    message = str(refused.value)
    assert "\n" not in message and "was re-trained there with numerics two_phase/2" in message
    assert "this code re-trains it with per_site/1: re-train into another folder" in message
    result["run"]["numerics"] = "per_site/1"
    write_result(tmp_path, result)
    (found,) = rt.claim_folder(tmp_path, "sha", runs).values()
    assert (found.numerics, found.code_version) == ("per_site/1", result["run"]["code_version"])


def test_runs_retrain_at_their_recorded_micro_batch_and_more_than_one_rank_is_refused(tmp_path):
    """Issue 67: the micro-batch size and world size re-round a run (DESIGN 13), so a re-training takes each
    run's recorded micro-batch size (the committed studies': 16 on 1 rank), a run that records none takes the
    grid's else auto (never a guessed number), and a run recorded on 2 ranks is refused in one line before
    anything is built or trained."""
    runs = _runs("demo")
    assert Counter((r.micro_batch_size, r.world_size) for r in runs) == {(16, 1): 18}
    assert {rt._settings(r).micro_batch_size for r in runs} == {16}
    unrecorded = replace(runs[0], micro_batch_size=None, world_size=None)
    assert rt._settings(unrecorded).micro_batch_size is None  # the grid's [train] micro_batch_size, else auto
    two = replace(runs[1], world_size=2)
    with pytest.raises(ValueError) as err:
        rt.check_protocols([runs[0], two], tmp_path / "new")
    assert str(err.value) == (
        f"run {two.config.run_id} trained on 2 ranks; harness retrain trains each run on one rank, which would "
        "re-round it (DESIGN section 13): re-train it with `harness run --devices 2`"
    )
    assert not (tmp_path / "new").exists()  # refused before anything was built
