"""Shared fixtures: real services (tests/services.py) and the chaos grid's reference NLLs.

``postgres`` and ``slurm`` start once per test session and stop at its end; a test that
uses one fails (with the daemons' logs) when it cannot start, it is never skipped.
"""

from __future__ import annotations

import atexit
import gc
import itertools
import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

# One thread per test process and per command it starts (torch's OpenMP, numpy's OpenBLAS, MKL) unless the
# environment says otherwise: `make test` runs 3 processes on 2 cores, where each library's default of one
# thread per core spin-waits for cores the other processes hold (docs/running.md: threads). Set before chaos
# imports warm, whose server starts with the session's environment.
for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

# One prepared-corpus cache ($HARNESS_CACHE) for the whole session, all its processes (docs/running.md: the
# corpus cache). The cache is content-addressed and built under a file lock (harness/data/shards.py), so the
# sample text's BPE and shards are built once per session, not once per results folder (81 times before).
# pytest-xdist's workers inherit it from the process that starts them; a developer's own $HARNESS_CACHE is
# not written to. A test of where the cache goes by default, or of what a refused command leaves in its
# results folder, is marked `own_cache` and runs without it (:func:`_environment_restored`).
if "PYTEST_XDIST_WORKER" not in os.environ:
    os.environ["HARNESS_CACHE"] = tempfile.mkdtemp(prefix="harness-test-cache-")
    atexit.register(shutil.rmtree, os.environ["HARNESS_CACHE"], ignore_errors=True)

import chaos  # noqa: E402
import services  # noqa: E402

CHAOS_CELLS = 12  # the reference covers every chaos grid of up to this many cells


def _start(service_cls):
    service = None
    try:
        service = service_cls()
        return service.start()
    except services.ServiceError as exc:
        if service is not None:
            service.close()
        pytest.fail(f"{service_cls.__name__} could not start:\n{exc}", pytrace=False)


@pytest.fixture(scope="session")
def postgres():
    """A PostgreSQL server (:class:`services.PostgresServer`) for the whole session."""
    server = _start(services.PostgresServer)
    yield server
    server.close()


@pytest.fixture
def thirds_spec(tmp_path, monkeypatch):
    """A user spec ``thirds`` (three equal attention head groups, which cannot split the 2
    heads of ``tiny`` but can split 12) on ``$HARNESS_SPEC_PATH`` for one test."""
    import harness.models as models

    folder = tmp_path / "user-specs"
    folder.mkdir()
    (folder / "thirds.toml").write_text(
        'name = "thirds"\nresidual = "block"\nrole = "control"\n'
        '[attn.queries]\nw_qk = {}\n[attn.routes]\nqk = ["w_qk"]\n'
        + '[[attn.head_groups]]\nq = ["qk"]\nk = ["qk"]\nv = ["qk"]\n'
        * 3
    )
    monkeypatch.setenv("HARNESS_SPEC_PATH", str(folder))
    models._specs.cache_clear()
    yield "thirds"
    monkeypatch.delenv("HARNESS_SPEC_PATH")
    models._specs.cache_clear()


_databases = itertools.count()


@pytest.fixture
def pg_url(postgres) -> str:
    """URL (``postgresql://``, psycopg 3) of a fresh, empty database on the session's server."""
    return postgres.create_database(f"harness_test_{next(_databases)}")


@pytest.fixture(scope="session")
def slurm():
    """A one-node SLURM cluster (:class:`services.SlurmCluster`) for the whole session."""
    cluster = _start(services.SlurmCluster)
    yield cluster
    cluster.close()


@pytest.fixture(scope="session")
def sample_docs() -> list[str]:
    """The sample corpus's documents (../shared/data/fineweb_edu_sample) read independently of the harness
    and of polars: stdlib json, files in sorted order, blank documents dropped."""
    if not chaos.SAMPLE.is_dir():
        pytest.skip(f"sample corpus {chaos.SAMPLE} absent")
    docs = []
    for path in sorted(Path(chaos.SAMPLE).glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            text = json.loads(line)["text"]
            if text.strip():
                docs.append(text)
    return docs


@pytest.fixture(scope="session")
def chaos_reference(tmp_path_factory) -> dict[str, float]:
    """``run_id -> val_nll`` of the chaos grid's cells, each trained by one uninterrupted
    worker on a journal queue (:func:`chaos.reference`)."""
    if not chaos.SAMPLE.is_dir():
        pytest.skip(f"sample corpus absent: {chaos.SAMPLE}")
    return chaos.reference(tmp_path_factory.mktemp("chaos-reference"), CHAOS_CELLS)


@pytest.fixture(scope="session")
def aa_tiny_archive(tmp_path_factory) -> tuple[Path, dict]:
    """``(archive, env)``: test_retrain's tiny grid (2 variants x 2 seeds, one thread, the default
    routing) queued, trained and archived once per test process (:func:`test_retrain.archived_tiny`).
    Tests that re-train it read the archive (made read-only) and re-train into folders of their own."""
    import stat

    from test_retrain import SAMPLE, archived_tiny  # lazy: the e2e helpers, only for the tests that use them

    if not SAMPLE.is_dir():
        pytest.skip(f"sample corpus absent: {SAMPLE}")
    archive, env = archived_tiny(tmp_path_factory.mktemp("aa-tiny"))
    archive.chmod(stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
    return archive, env


# `pytest -m "not slow"` is the developer's loop (README); `make test` runs everything. A test is slow
# when it starts a real service through one of these fixtures; tests that start Chromium or train
# for long carry `@pytest.mark.slow` (or a module-level `pytestmark`) in their own file.
SLOW_FIXTURES = frozenset({"postgres", "pg_url", "slurm", "chaos_reference"})

# Parameter cases over ~2 s whose smaller cases are not (measured: `pytest -m "not slow"
# --durations=0`), by file name and test id: the developer's loop keeps the small sizes.
SLOW_CASES = frozenset(
    {
        "test_models.py::test_control_with_its_added_vector_at_zero_equals_parent[query_reparam-w_extra-0.5-layers1-small]",
        "test_models.py::test_control_with_its_added_vector_at_zero_equals_parent[param_matched-b_qk-0.05-layers0-small]",
        "test_models.py::test_control_with_its_added_vector_at_zero_equals_parent[param_matched-b_qk-0.05-layers0-tiny-L5-block6]",
        "test_models.py::test_control_with_its_added_vector_at_zero_equals_parent[param_matched-b_qk-0.05-layers0-tiny]",
        "test_models.py::test_control_with_its_added_vector_at_zero_equals_parent[param_matched-b_qk-0.05-layers0-tiny-L4-block4]",
        "test_models.py::test_control_with_its_added_vector_at_zero_equals_parent[query_reparam-w_extra-0.5-layers1-tiny-L5-block6]",
        "test_models.py::test_dup_route_tied_equals_parent_with_random_queries[small]",
        "test_models.py::test_dup_route_with_equal_queries_equals_parent[small]",
        "test_models.py::test_dup_route_with_equal_queries_equals_parent[tiny-L5-block6]",
        "test_models.py::test_dup_route_with_equal_queries_equals_parent[tiny-L4-block4]",
        "test_models.py::test_every_trainable_parameter_gets_a_gradient[block_attnres-small]",
        "test_fencing.py::test_while_the_result_is_renamed_no_one_can_take_the_run_over[journal]",
        "test_queue_load.py::test_tally_counts_a_grids_runs_without_reading_its_history[postgres]",
        "test_factorial_grid.py::test_composed_parameter_counts_add_up[small]",
        "test_bench_step.py::test_the_bench_optimiser_is_the_one_training_builds[1]",
    }
)


# The files that take longest (measured: `pytest --durations=0`, per-file sums; docs/running.md has the
# table), longest first. They run first (the Makefile's --no-loadscope-reorder keeps this order; xdist's
# default sends files with the most tests first), so that `make test`'s two processes (pytest-xdist, a
# file per process at a time) do not end with one of them alone on a long file while the other is idle.
# The not-slow ones among them (test_refusals_leave_nothing, test_data, test_models, test_corpus_refusals)
# also lead `make test-quick`.
LONGEST_FIRST = (
    "test_cuda_twins.py",  # a cold inductor cache makes it the longest of all
    "test_compile_worker.py",  # 9 models compiled by one worker
    "test_compile_ddp.py",
    "test_scaleout.py",  # the chaos reference (12 cells) and SLURM
    "test_refusals_leave_nothing.py",  # the longest of the developer's loop
    "test_launch.py",
    "test_faults.py",
    "test_env_faults.py",
    "test_factorial_study.py",  # 12 tiny runs
    "test_ranks.py",
    "test_data.py",
    "test_followup.py",  # 9 tiny runs
    "test_gpu_check.py",
    "test_microbatch.py",
    "test_models.py",
    "test_new_user_commands.py",
    "test_ctrl_c_commands.py",
    "test_progress_display.py",
    "test_prepare.py",
    "test_corpus_refusals.py",
    "test_fencing.py",
    "test_queue_work_report.py",
    "test_tune.py",
    "test_readme_quickstart.py",
    "test_ddp.py",
    "test_compile_resume.py",
    "test_retrain.py",
    "test_routing_paths.py",
)


# Session fixtures that train, and the files whose tests read each: a test process trains one once, so
# `make test` (`--dist loadfile`) sends these files to one process (their scope below is the fixture's
# name, where --dist loadfile's is the file); split over two processes, the chaos reference (about 30 s)
# and the tiny archive (about 10 s) were each trained twice. Collection refuses a file that reads one and
# is not listed here. (pytest-xdist's own `--dist loadgroup` renames node ids in a way pytest 9 ignores.)
SHARED_TRAININGS = {
    "chaos_reference": ("test_scaleout.py", "test_launch.py"),
    "aa_tiny_archive": ("test_retrain.py", "test_retrain_report_only.py"),
}
_SCOPE = {file: fixture for fixture, files in SHARED_TRAININGS.items() for file in files}


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadfile`` with the files of one shared training (``SHARED_TRAININGS``) as one scope."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling  # lazy: pytest-xdist is there only where -n is given

    class SharedTrainingScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            file = super()._split_scope(nodeid)
            return _SCOPE.get(file.rsplit("/", 1)[-1], file)

    return SharedTrainingScheduling(config, log)


def pytest_collection_modifyitems(config, items):
    for item in items:
        slow_case = f"{item.path.name}::{item.name}" in SLOW_CASES
        if slow_case or SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
        for fixture in SHARED_TRAININGS.keys() & set(getattr(item, "fixturenames", ())):
            if item.path.name not in SHARED_TRAININGS[fixture]:
                raise pytest.UsageError(
                    f"{item.nodeid} reads the session fixture {fixture}: add {item.path.name} to its files "
                    "in SHARED_TRAININGS (tests/conftest.py), so that one test process trains it"
                )
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: a file's own order is kept


@pytest.fixture(autouse=True)
def _environment_restored(request):
    """Each test ends with the environment it started with (a cold subprocess of a later test sees no
    variable an earlier one left, e.g. PL_GLOBAL_SEED from Lightning's ``seed_everything`` in-process), so
    no test depends on the order, and a later test's harness commands start warm (tests/warm.py).

    A test marked ``own_cache`` runs without the session's corpus cache: its commands build theirs in their
    results folder (``RESULTS/cache``), as for a user who has not set ``$HARNESS_CACHE``. (Here, not with
    ``monkeypatch``: a test's own ``monkeypatch.undo()`` would bring the variable back mid-test.)"""
    before = dict(os.environ)
    if request.node.get_closest_marker("own_cache"):
        os.environ.pop("HARNESS_CACHE", None)
    yield
    if os.environ != before:
        os.environ.clear()
        os.environ.update(before)


@pytest.fixture
def cheap_gc():
    """statsmodels' ``multipletests`` runs ``gc.collect()`` on every call, about 0.4 s in a process
    that holds torch and the suite's objects; frozen, those objects are not traversed again, so
    a test that calls it hundreds of times takes seconds, not minutes (no value changes)."""
    gc.freeze()
    yield
    gc.unfreeze()
