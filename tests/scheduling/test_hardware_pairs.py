"""Pairs on one hardware class (harness/scheduling/queue/hardware_pairs.py, DESIGN section 13): a grid trained by
two workers of two hardware classes, through the real `harness queue`, `harness work` and `harness status`.

The two classes are faked on this one machine with ``$HARNESS_HARDWARE_CLASS`` (harness/train/environment.py),
which replaces the detected class exactly where a second machine would differ; everything else is real:
the journal queue, tiny runs on the FineWeb-Edu sample, the result files. ~40 s on 2 CPU cores:

    python -m pytest -q tests/scheduling/test_hardware_pairs.py
"""

from __future__ import annotations

import json
import shutil
from collections import defaultdict
from pathlib import Path

import pytest

from harness.cli import build_parser
from harness.cli import main as cli
from harness.commands.launch import _work_argv, _work_options  # the worker options a launch builds
from harness.commands.status import status_lines
from harness.models.numerics import DEFAULT_ROUTING, numerics_id, numerics_key
from harness.scheduling.grids.grid import parse_grid
from harness.scheduling.queue.hardware_pairs import (
    BIND_PREFIX,
    LEGACY_TRIAL_ATTR,
    POLICY_ATTR,
    TRIAL_ATTR,
    PairGate,
    pair_key,
    same_key,
    seed_key,
    set_policy,
    waiting_for_hardware,
)
from harness.scheduling.queue.run_queue import RunQueue
from harness.store.runfile import read_result, result_path
from harness.train.hardware_override import HARDWARE_CLASS_ENV

from queue_stubs import configs

SAMPLE = Path(__file__).resolve().parents[3] / "shared/data/fineweb_edu_sample"
NUMERICS = numerics_id(DEFAULT_ROUTING)  # what a worker trains with unless --routing says otherwise
ROWS = 1024 // 64  # the grid's batch_tokens over tiny's context: a rank's rows, `auto`'s micro-batch on a CPU
KEY_A, KEY_B = (pair_key(c, numerics_key(NUMERICS, ROWS, 1)) for c in ("class-a", "class-b"))
_VARIANTS = ("block_attnres", "rd_attnres")  # the grid's

GRID = """\
name = "hw"
corpus = "{corpus}"
sizes = ["tiny"]
seeds = [0, 1]
budgets_tokens = [2048]
{schedule}

[variants]
block_attnres = "parent"
rd_attnres = "treatment"

[train]
batch_tokens = 1024
vocab_size = 512
eval_tokens = 2048
"""


def _grid(tmp_path: Path, schedule: str) -> Path:
    path = tmp_path / "hw.toml"
    path.write_text(GRID.format(corpus=SAMPLE, schedule=schedule))
    return path


def _work(results: Path, hardware: str, monkeypatch, *extra: str) -> None:
    """One `harness work` on this machine, as a worker of hardware class ``hardware``."""
    monkeypatch.setenv(HARDWARE_CLASS_ENV, hardware)
    assert cli(["work", "--results", str(results), "--threads", "1", "--quiet", *extra]) == 0


def _classes_by_seed(results: Path) -> dict[int, dict[str, str]]:
    """``{seed: {variant: hardware class}}`` from the result files."""
    out: dict[int, dict[str, str]] = defaultdict(dict)
    for path in (results / "runs").glob("*.json"):
        run = read_result(path)["run"]
        out[run["seed"]][run["variant"]] = run["hardware"]
    return dict(out)


@pytest.fixture
def queued(tmp_path, monkeypatch):
    """A results folder (the corpus cache is the session's: tests/conftest.py); returns a function queueing the
    grid with ``[schedule]``."""
    assert SAMPLE.is_dir(), f"sample corpus {SAMPLE} absent"
    monkeypatch.setenv("HARNESS_PROGRESS", "off")
    results = tmp_path / "results"

    def queue(schedule: str) -> Path:
        grid = _grid(tmp_path, schedule)
        assert cli(["queue", str(grid), "--results", str(results)]) == 0
        return results

    return queue


@pytest.mark.slow
def test_same_keeps_each_pair_on_one_class_and_status_names_what_waits(queued, monkeypatch, capsys):
    results = queued('[schedule]\npair_hardware = "same"')
    _work(results, "class-a", monkeypatch, "--max-runs", "1")  # the first run: seed 0's parent
    capsys.readouterr()
    _work(results, "class-b", monkeypatch)  # seed 1 whole; seed 0's treatment is held for class-a
    out = capsys.readouterr().out
    assert (
        f"nothing queued for this worker's hardware class and numerics: 1 run(s) wait for {KEY_A}" in out
    ), out
    assert _classes_by_seed(results) == {
        0: {"block_attnres": "class-a"},
        1: {"block_attnres": "class-b", "rd_attnres": "class-b"},
    }
    queue = RunQueue.open(None, results)
    runs = queue.runs("hw")
    held = "hw:tiny:rd_attnres:s0:2048"
    assert runs[held].state == "queued" and runs[held].attempt == 1  # never claimed: no attempt spent
    lines = status_lines(queue, "hw", 60.0)
    at = lines.index(
        next(ln for ln in lines if ln.startswith(f"waiting for hardware class {KEY_A}: 1 run(s)"))
    )
    assert lines[at + 1] == f"  {held}"
    # the trials record the class their worker had; the study the seeds' bindings
    attrs = queue.storage.get_study_user_attrs(queue.study_of("hw"))
    assert attrs[POLICY_ATTR] == "same"
    assert {k: v for k, v in attrs.items() if k.startswith(BIND_PREFIX)} == {
        BIND_PREFIX + "tiny:2048:0": KEY_A,
        BIND_PREFIX + "tiny:2048:1": KEY_B,
    }
    done = {rid: r.trials[-1].user_attrs[TRIAL_ATTR] for rid, r in runs.items() if r.state == "done"}
    assert done == {
        "hw:tiny:block_attnres:s0:2048": KEY_A,
        "hw:tiny:block_attnres:s1:2048": KEY_B,
        "hw:tiny:rd_attnres:s1:2048": KEY_B,
    }
    # a worker of the seed's class takes it: no pair straddles two classes
    _work(results, "class-a", monkeypatch)
    by_seed = _classes_by_seed(results)
    assert all(len(set(classes.values())) == 1 for classes in by_seed.values()), by_seed
    assert not any(
        ln.startswith("waiting for hardware") for ln in status_lines(RunQueue.open(None, results), "hw", 60.0)
    )


def _numerics_by_seed(results: Path) -> dict[int, dict[str, str]]:
    """``{seed: {variant: numerics}}`` from the result files."""
    out: dict[int, dict[str, str]] = defaultdict(dict)
    for path in (results / "runs").glob("*.json"):
        run = read_result(path)["run"]
        out[run["seed"]][run["variant"]] = run["numerics"]
    return dict(out)


@pytest.mark.slow
def test_same_keeps_each_pair_on_one_numerics_on_one_class(queued, monkeypatch, capsys):
    """Two workers of one class, one training per-site (an older code's numerics, as a grid whose workers are
    upgraded midway has): a seed bound by one never gets a run of the other's numerics."""
    results = queued("")  # the default, same
    _work(results, "class-a", monkeypatch, "--max-runs", "1")  # seed 0's parent, two-phase
    capsys.readouterr()
    _work(results, "class-a", monkeypatch, "--routing", "per_site")  # seed 1 whole; seed 0's treatment held
    out = capsys.readouterr().out
    assert f"1 run(s) wait for {KEY_A}, where" in out, out
    per_site = numerics_id("per_site")
    assert _numerics_by_seed(results) == {
        0: {"block_attnres": NUMERICS},
        1: dict.fromkeys(_VARIANTS, per_site),
    }
    lines = status_lines(RunQueue.open(None, results), "hw", 60.0)
    assert any(ln.startswith(f"waiting for hardware class {KEY_A}: 1 run(s)") for ln in lines), lines
    _work(results, "class-a", monkeypatch)  # a two-phase worker takes it
    assert _numerics_by_seed(results)[0] == dict.fromkeys(_VARIANTS, NUMERICS)
    # the result files carry one class: the pairing held on the numerics alone
    assert {hw for seeds in _classes_by_seed(results).values() for hw in seeds.values()} == {"class-a"}


def _settings_by_seed(results: Path) -> dict[int, dict[str, tuple[int, int]]]:
    """``{seed: {variant: (micro-batch size, world size)}}`` from the result files."""
    out: dict[int, dict[str, tuple[int, int]]] = defaultdict(dict)
    for path in (results / "runs").glob("*.json"):
        run = read_result(path)["run"]
        out[run["seed"]][run["variant"]] = (run["micro_batch_size"], run["world_size"])
    return dict(out)


@pytest.mark.slow
def test_same_keeps_each_pair_at_one_micro_batch_and_a_forced_straddle_is_named_in_provenance(
    queued, monkeypatch, capsys
):
    """Issue 67: two workers of one class and one code, one at --micro-batch-size 1, the other at `auto` (a CPU's
    whole batch of 16): gradient accumulation over another split re-rounds a run (DESIGN 13), so a seed bound at
    micro-batch 1 waits for a worker resolving 1, and `harness status` says so. Forced with --any-hardware, the
    pair straddles, and the report's Provenance names it in words. Before: the second worker took the seed's
    other run at once and the report read 'Numerics: one'."""
    results = queued("")  # the default, same
    _work(results, "class-a", monkeypatch, "--max-runs", "1", "--micro-batch-size", "1")  # seed 0's parent
    capsys.readouterr()
    _work(results, "class-a", monkeypatch)  # auto: 16; seed 1 whole, seed 0's treatment held
    key_1 = pair_key("class-a", numerics_key(NUMERICS, 1, 1))
    out = capsys.readouterr().out
    assert f"1 run(s) wait for {key_1}, where" in out, out
    assert _settings_by_seed(results) == {
        0: {"block_attnres": (1, 1)},
        1: dict.fromkeys(_VARIANTS, (ROWS, 1)),
    }
    lines = status_lines(RunQueue.open(None, results), "hw", 60.0)
    assert any(ln.startswith(f"waiting for hardware class {key_1}: 1 run(s)") for ln in lines), lines
    _work(results, "class-a", monkeypatch, "--any-hardware")  # forced: the pair straddles
    assert _settings_by_seed(results)[0] == {"block_attnres": (1, 1), "rd_attnres": (ROWS, 1)}
    out_dir = results / "report-out"
    assert (
        cli(["report", "--grid", "hw", "--results", str(results), "--out", str(out_dir), "--no-figures"]) == 0
    )
    md = (out_dir / "report.md").read_text()
    section = md[md.index("## Provenance: where the runs ran") :]
    assert (
        f"1 pair(s) straddle them (seed 0: rd_attnres at micro-batch {ROWS}, block_attnres at 1)" in section
    )


@pytest.mark.slow
def test_any_hardware_worker_takes_a_held_run_and_the_pair_straddles(queued, monkeypatch):
    results = queued("")  # no [schedule]: the default, same
    _work(results, "class-a", monkeypatch, "--max-runs", "1")
    _work(results, "class-b", monkeypatch, "--any-hardware")
    by_seed = _classes_by_seed(results)
    assert by_seed[0] == {"block_attnres": "class-a", "rd_attnres": "class-b"}  # the override's straddle
    assert by_seed[1] == {"block_attnres": "class-b", "rd_attnres": "class-b"}
    # the straddle is on record in the result files' environment too
    run = read_result(result_path(results, "hw:tiny:rd_attnres:s0:2048"))["run"]
    assert (
        run["environment"]["hardware"] == "class-b" and run["environment"]["hardware_detected"] != "class-b"
    )


@pytest.mark.slow
def test_any_lets_a_pair_straddle_two_classes(queued, monkeypatch):
    results = queued('[schedule]\npair_hardware = "any"')
    _work(results, "class-a", monkeypatch, "--max-runs", "1")
    _work(results, "class-b", monkeypatch)
    assert _classes_by_seed(results)[0] == {"block_attnres": "class-a", "rd_attnres": "class-b"}
    queue = RunQueue.open(None, results)
    assert all(r.state == "done" for r in queue.runs("hw").values())
    assert not any(ln.startswith("waiting for hardware") for ln in status_lines(queue, "hw", 60.0))


@pytest.mark.parametrize(
    ("schedule", "words"),
    [
        (
            '[schedule]\npair_hardware = "sometimes"',
            "schedule.pair_hardware: 'sometimes' is not allowed; allowed:",
        ),
        ("[schedule]\npairs = 1", "schedule.pairs: unknown key; allowed: pair_hardware"),
        ('schedule = "same"', "schedule: must be a table"),
    ],
)
def test_a_bad_schedule_is_refused_at_queue_time_in_one_line(tmp_path, capsys, schedule, words):
    grid = _grid(tmp_path, schedule)
    results = tmp_path / "results"
    assert cli(["queue", str(grid), "--results", str(results)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and words in err, err
    assert not (results / "queue.journal").exists()  # nothing queued


def test_grid_option_default_and_seed_keys():
    data = {
        "name": "g",
        "corpus": "/c",
        "sizes": ["tiny"],
        "seeds": [0],
        "budgets_tokens": [1024],
        "variants": {"block_attnres": "parent", "rd_attnres": "treatment"},
    }
    assert parse_grid(data).pair_hardware == "same"
    assert parse_grid({**data, "schedule": {"pair_hardware": "any"}}).pair_hardware == "any"
    assert seed_key("g:tiny:rd_attnres:s12:1024") == "tiny:1024:12"
    assert seed_key("g:tiny:rd_attnres:s12:1024:tuned") == "tiny:1024:12"  # a tuned run pairs in its seed
    assert json.dumps(seed_key("a.b-c:small:x:s0:5")) == '"small:5:0"'


def _train(queue: RunQueue, pairs: PairGate, claim) -> bool:
    """What a worker does with a claim: bind its seed as the run starts training, then finish it; or, when
    another worker's run bound the seed first, release it (no retry spent). Whether it trained."""
    if pairs.bind(queue.storage, queue.study_of(claim.grid), claim) is not None:
        assert queue.release(claim, "seed bound elsewhere", keep_attempt=True)
        return False
    assert queue.complete(claim, "done", value=1.0, wall_s=0.1)
    return True


def _drain(queue: RunQueue, pairs: PairGate) -> list[str]:
    """Claim (through the worker's gate ``pairs``) and train runs until the queue gives none to this
    worker; the run ids trained, in order."""
    out = []
    while (claim := queue.claim("g", pairs)) is not None:
        assert _train(queue, pairs, claim)
        out.append(claim.run_id)
    return out


@pytest.mark.parametrize("backend", ["journal", "postgres"])
def test_the_gate_binds_each_seed_once_on_a_shared_queue(backend, request, tmp_path):
    """Two workers' queues on one storage (the journal; a real PostgreSQL server), each with its class: the
    first run of a seed that trains binds it, the other class's worker skips the seed's other runs (no
    attempt spent) and says which class holds them; with ``any`` it takes them."""
    url = request.getfixturevalue("pg_url") if backend == "postgres" else None
    adder = RunQueue.open(url, tmp_path)
    adder.enqueue(configs(seeds=(0, 1), variants=("block_attnres", "rd_attnres")))
    set_policy(adder.storage, adder.study_of("g"), "same")
    a, b = RunQueue.open(url, tmp_path), RunQueue.open(url, tmp_path)
    gate_a, gate_b = PairGate(lambda c: "class-a"), PairGate(lambda c: "class-b")
    first = a.claim("g", gate_a)
    assert first.run_id == "g:tiny:block_attnres:s0:1000"
    assert _train(a, gate_a, first)
    assert _drain(b, gate_b) == ["g:tiny:block_attnres:s1:1000", "g:tiny:rd_attnres:s1:1000"]
    assert gate_b.held == {"g:tiny:rd_attnres:s0:1000": "class-a"}
    assert adder.runs("g")["g:tiny:rd_attnres:s0:1000"].attempt == 1
    set_policy(adder.storage, adder.study_of("g"), "any")  # queueing the grid again may change it
    assert _drain(b, gate_b) == ["g:tiny:rd_attnres:s0:1000"]
    classes = {rid: r.trials[-1].user_attrs[TRIAL_ATTR] for rid, r in adder.runs("g").items()}
    assert classes == {
        "g:tiny:block_attnres:s0:1000": "class-a",
        "g:tiny:rd_attnres:s0:1000": "class-b",
        "g:tiny:block_attnres:s1:1000": "class-b",
        "g:tiny:rd_attnres:s1:1000": "class-b",
    }


@pytest.mark.parametrize("attr", [TRIAL_ATTR, LEGACY_TRIAL_ATTR])
def test_a_running_attempt_holds_its_workers_key_under_pair_key_or_the_older_name(tmp_path, attr):
    """A claimed trial records its worker's key as ``pair_key`` (it holds class and numerics, not the hardware
    alone); a worker of older code wrote it as ``hardware``, which ``harness status`` still reads: a seed bound
    to a key that a running attempt has is not said to wait for that key."""
    assert TRIAL_ATTR == "pair_key"
    q = RunQueue.open(None, tmp_path)
    q.enqueue(configs(seeds=(0,), variants=("block_attnres", "rd_attnres")))
    study = q.study_of("g")
    set_policy(q.storage, study, "same")
    q.storage.set_study_user_attr(study, BIND_PREFIX + "tiny:1000:0", KEY_A)
    claim = q.claim()
    assert waiting_for_hardware(q.storage, q.runs(), q.studies()) == {KEY_A: ["g:tiny:rd_attnres:s0:1000"]}
    q.storage.set_trial_user_attr(claim.trial_id, attr, KEY_A)
    assert waiting_for_hardware(q.storage, q.runs(), q.studies()) == {}


def test_a_binding_from_before_the_numerics_compares_the_class_only(tmp_path):
    """A seed bound by a worker of older code holds its class alone (which numerics its first run had, the queue
    cannot tell): a worker of that class takes the seed's other runs whatever its numerics, another class's
    worker does not; a new binding holds both."""
    assert pair_key("class-a", "per_site/1") == "class-a + numerics per_site/1"
    assert same_key("class-a", pair_key("class-a", "two_phase/2"))
    assert not same_key("class-a", pair_key("class-b", "two_phase/2"))
    assert not same_key(pair_key("class-a", "per_site/1"), pair_key("class-a", "two_phase/2"))
    # a binding of class and numerics identifier (before the micro-batch and world size): those two compared
    mine = pair_key("class-a", numerics_key("two_phase/2", 16, 1))
    assert mine == "class-a + numerics two_phase/2, micro-batch 16, world size 1"
    assert same_key(pair_key("class-a", "two_phase/2"), mine)
    assert not same_key(pair_key("class-a", "per_site/1"), mine)
    assert same_key(mine, mine) and not same_key(mine, pair_key("class-a", numerics_key("two_phase/2", 1, 1)))
    assert not same_key(mine, pair_key("class-a", numerics_key("two_phase/2", 16, 2)))
    adder = RunQueue.open(None, tmp_path)
    adder.enqueue(configs(seeds=(0,), variants=("block_attnres", "rd_attnres")))
    study = adder.study_of("g")
    set_policy(adder.storage, study, "same")
    adder.storage.set_study_user_attr(study, BIND_PREFIX + "tiny:1000:0", "class-a")  # as older code bound it
    b = RunQueue.open(None, tmp_path)
    gate_b = PairGate(lambda c: pair_key("class-b", "two_phase/2"))
    assert _drain(b, gate_b) == [] and set(gate_b.held.values()) == {"class-a"}
    a = RunQueue.open(None, tmp_path)
    gate_a = PairGate(lambda c: pair_key("class-a", "two_phase/2"))
    assert _drain(a, gate_a) == ["g:tiny:block_attnres:s0:1000", "g:tiny:rd_attnres:s0:1000"]


def test_launch_passes_any_hardware_to_its_workers(tmp_path):
    """``harness launch --any-hardware``: every launched worker's options (pickled into its task) and the
    ``harness work`` line it records carry it; without it, neither does."""
    for extra, want in (([], False), (["--any-hardware"], True)):
        args = build_parser().parse_args(
            ["launch", "--results", str(tmp_path), "--executor", "local", *extra]
        )
        options = _work_options(args, None)
        assert options.any_hardware is want
        assert ("--any-hardware" in _work_argv(options, None)) is want


@pytest.mark.parametrize("backend", ["journal", "postgres"])
def test_a_claim_released_untrained_binds_no_seed(backend, request, tmp_path):
    """Issue 61 row 4, DESIGN section 13: a worker of class A claims a run and gives it back untrained (its
    corpus not on that machine: released, no retry spent); its seed stays unbound, so a worker of class B
    trains every run of it. Before: the claim bound the seed to A and B's worker left its runs waiting for A."""
    url = request.getfixturevalue("pg_url") if backend == "postgres" else None
    adder = RunQueue.open(url, tmp_path)
    adder.enqueue(configs(seeds=(0,), variants=("block_attnres", "rd_attnres")))
    set_policy(adder.storage, adder.study_of("g"), "same")
    a, b = RunQueue.open(url, tmp_path), RunQueue.open(url, tmp_path)
    gate_a, gate_b = PairGate(lambda c: "class-a"), PairGate(lambda c: "class-b")
    claim = a.claim("g", gate_a)
    assert a.release(claim, "corpus not here; run released (no retry spent)", keep_attempt=True)
    attrs = adder.storage.get_study_user_attrs(adder.study_of("g"))
    assert not any(k.startswith(BIND_PREFIX) for k in attrs), attrs
    assert _drain(b, gate_b) == ["g:tiny:block_attnres:s0:1000", "g:tiny:rd_attnres:s0:1000"]
    assert gate_b.held == {}
    attrs = adder.storage.get_study_user_attrs(adder.study_of("g"))
    assert {k: v for k, v in attrs.items() if k.startswith(BIND_PREFIX)} == {
        BIND_PREFIX + "tiny:1000:0": "class-b"
    }
    assert [r.attempt for r in adder.runs("g").values()] == [1, 1]  # the released attempt never started


def test_of_two_workers_that_claimed_one_unbound_seed_the_first_to_train_binds_it(tmp_path):
    """Workers A and B claim the two runs of one seed before either trains: A's run starts first and binds
    the seed; B's bind finds it bound to A, so B releases its run (no retry spent, attempt kept) and a
    worker of A trains it: the pair stays on one class."""
    adder = RunQueue.open(None, tmp_path)
    adder.enqueue(configs(seeds=(0,), variants=("block_attnres", "rd_attnres")))
    set_policy(adder.storage, adder.study_of("g"), "same")
    a, b = RunQueue.open(None, tmp_path), RunQueue.open(None, tmp_path)
    gate_a, gate_b = PairGate(lambda c: "class-a"), PairGate(lambda c: "class-b")
    claim_a, claim_b = a.claim("g", gate_a), b.claim("g", gate_b)  # both taken while the seed is unbound
    assert {claim_a.run_id, claim_b.run_id} == {"g:tiny:block_attnres:s0:1000", "g:tiny:rd_attnres:s0:1000"}
    assert _train(a, gate_a, claim_a)
    assert not _train(b, gate_b, claim_b)  # bound to class-a meanwhile: released
    assert b.claim("g", gate_b) is None and gate_b.held == {claim_b.run_id: "class-a"}
    assert _drain(a, gate_a) == [claim_b.run_id]
    runs = adder.runs("g")
    assert all(r.state == "done" for r in runs.values())
    assert runs[claim_b.run_id].attempt == 1  # released before it started: no attempt, no retry spent
    classes = {rid: r.trials[-1].user_attrs[TRIAL_ATTR] for rid, r in runs.items()}
    assert set(classes.values()) == {"class-a"}


@pytest.mark.slow
def test_a_worker_without_the_corpus_binds_no_seed(tmp_path, monkeypatch, capsys):
    """Issue 61 row 4 through the real commands: the corpus moved away, a worker of class A releases the run
    it claimed (no retry spent); the corpus back, a worker of class B trains the whole grid, every pair on
    B. Before: A's untrained claim bound seed 0 to A and B left its 2 runs waiting for A."""
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HARNESS_PROGRESS", "off")
    corpus = tmp_path / "corpus"
    shutil.copytree(SAMPLE, corpus)
    grid = tmp_path / "hw.toml"
    grid.write_text(GRID.format(corpus=corpus, schedule=""))  # the default: same
    results = tmp_path / "results"
    assert cli(["queue", str(grid), "--results", str(results)]) == 0
    corpus.rename(tmp_path / "away")
    monkeypatch.setenv(HARDWARE_CLASS_ENV, "class-a")
    assert cli(["work", "--results", str(results), "--threads", "1", "--quiet"]) == 1
    assert "released and queued again (no retry spent)" in capsys.readouterr().err
    queue = RunQueue.open(None, results)
    attrs = queue.storage.get_study_user_attrs(queue.study_of("hw"))
    assert not any(k.startswith(BIND_PREFIX) for k in attrs), attrs
    (tmp_path / "away").rename(corpus)
    _work(results, "class-b", monkeypatch)
    assert "wait for" not in capsys.readouterr().out
    assert _classes_by_seed(results) == {seed: dict.fromkeys(_VARIANTS, "class-b") for seed in (0, 1)}
    runs = RunQueue.open(None, results).runs("hw")
    assert [(r.state, r.attempt) for r in runs.values()] == [("done", 1)] * 4
