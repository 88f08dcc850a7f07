"""The import boundary of DESIGN section 11: training and the bench load neither the results store
(duckdb, polars) nor the statistics (scipy, statsmodels) until they write into DuckDB or analyse.

A GPU node (the lent machine: Python and torch of its own, no duckdb/polars/scipy/optuna) must
train a run and write its result file, and bench, with those packages absent. Absence is made
real in a subprocess: the interpreter's path finder is replaced by one that finds neither the
modules nor the installed distributions of :data:`HIDDEN` (so ``import scipy`` raises
``ModuleNotFoundError`` and ``importlib.metadata`` says "not installed", as Lightning's and
torchmetrics' probes read it on such a machine); everything else is the real installation.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from scipy.stats import binom

from harness.bench.intervals import half_binom_cdf
from harness.store.validate import columns, schema_sql, validate_result

from chaos import SAMPLE

pytestmark = pytest.mark.own_cache  # its commands build their corpus in RESULTS/cache (conftest)

ROOT = Path(__file__).resolve().parents[2]
HIDDEN = ("duckdb", "polars", "scipy", "statsmodels")

# Prelude of every subprocess: hide HIDDEN's modules and distributions, then run the body; the
# body's last line prints the HIDDEN modules that were loaded all the same (none, if the boundary holds).
PRELUDE = f"""
import importlib.machinery, importlib.metadata, sys
HIDDEN = {HIDDEN!r}

class HidingPathFinder(importlib.machinery.PathFinder):
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        return None if name.partition(".")[0] in HIDDEN else super().find_spec(name, path, target)

    @classmethod
    def find_distributions(cls, context=importlib.metadata.DistributionFinder.Context()):
        return (d for d in super().find_distributions(context) if (d.metadata["Name"] or "").lower() not in HIDDEN)

sys.meta_path[:] = [HidingPathFinder if f is importlib.machinery.PathFinder else f for f in sys.meta_path]
sys.path_importer_cache.clear()
"""
LOADED = "\nprint('LOADED', sorted({m.partition('.')[0] for m in sys.modules} & set(HIDDEN)))\n"


def _hidden_run(body: str, timeout: float) -> tuple[subprocess.CompletedProcess, list[str]]:
    proc = subprocess.run(
        [sys.executable, "-c", PRELUDE + body + LOADED],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "HARNESS_PROGRESS": "lines"},
    )
    loaded = [line for line in proc.stdout.splitlines() if line.startswith("LOADED ")]
    return proc, json.loads(loaded[-1][7:].replace("'", '"')) if loaded else ["<no LOADED line>"]


def test_the_hiding_finder_hides_modules_and_distributions():
    """The check below can fail: under the prelude, the hidden packages are absent as on a bare node."""
    proc, loaded = _hidden_run(
        "import importlib.metadata, importlib.util\n"
        "try:\n    import scipy\nexcept ModuleNotFoundError:\n    print('NO-SCIPY')\n"
        "print('SPEC', importlib.util.find_spec('duckdb'))\n"
        "try:\n    importlib.metadata.version('polars')\nexcept importlib.metadata.PackageNotFoundError:\n"
        "    print('NO-POLARS-DIST')\n"
        "import json; print('JSON', json.dumps(1))\n",
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    assert {"NO-SCIPY", "SPEC None", "NO-POLARS-DIST", "JSON 1"} <= set(proc.stdout.splitlines())
    assert loaded == []


@pytest.mark.slow
def test_training_and_bench_modules_import_without_store_or_statistics():
    """Module load of the run and bench commands' code, and the result-file schema, need none of HIDDEN."""
    proc, loaded = _hidden_run(
        "import harness.train, harness.train.runner, harness.bench, harness.bench.measure\n"
        "import harness.commands.run, harness.commands.bench, db, harness.store.runfile\n"
        "from harness.store.validate import columns\n"
        "print('RUNS COLUMNS', len(columns()['runs']))\n",
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"RUNS COLUMNS {len(columns()['runs'])}" in proc.stdout
    assert loaded == [], f"loaded at import: {loaded}"


def test_schema_columns_read_without_duckdb_equal_duckdbs_catalog():
    """harness.store.validate.columns() reads db/schema.sql with the standard library: the same tables, columns,
    order and types as DuckDB's own catalog of the schema run on an in-memory database."""
    con = duckdb.connect(":memory:")
    try:
        con.execute(schema_sql())
        rows = con.execute(
            "SELECT c.table_name, c.column_name, c.data_type FROM duckdb_columns() c "
            "JOIN duckdb_tables() t ON t.table_oid = c.table_oid ORDER BY t.table_oid, c.column_index"
        ).fetchall()
    finally:
        con.close()
    catalog: dict[str, dict[str, str]] = {}
    for table, column, dtype in rows:
        catalog.setdefault(table, {})[column] = dtype
    ours = columns()
    assert [(t, list(c.items())) for t, c in ours.items()] == [
        (t, list(c.items())) for t, c in catalog.items()
    ]
    assert ours["runs"]["seed"] == "INTEGER" and ours["bench"]["compile"] == "BOOLEAN"


def test_half_binom_cdf_is_scipys_binomial_cdf():
    """The bench's interval (harness.bench.intervals) without scipy: P(Bin(n, 1/2) <= k) exact."""
    for n in (1, 6, 20, 61, 200):
        for k in range(-1, n + 1):
            assert math.isclose(half_binom_cdf(k, n), binom.cdf(k, n, 0.5), rel_tol=1e-12, abs_tol=1e-300)
    assert half_binom_cdf(0, 6) == 1 / 64 and half_binom_cdf(6, 6) == 1.0 and half_binom_cdf(-1, 6) == 0.0


@pytest.mark.slow  # trains a tiny run and benches two variants in a subprocess: ~50 s on 2 busy cores
def test_tiny_run_and_bench_without_store_or_statistics(tmp_path):
    """`harness run --size tiny` writes a valid result file (status done, a final val NLL) and
    `harness bench` its JSON with none of HIDDEN installed; only the DuckDB ingest/insert is left
    out, and each says so in one line."""
    corpus = tmp_path / "corpus"  # real FineWeb-Edu text, one .txt per document (JSONL needs polars)
    corpus.mkdir()
    with (SAMPLE / "fineweb_edu_sample10BT_efscorer150.jsonl").open() as f:
        for i, line in zip(range(60), f):
            (corpus / f"doc{i:03d}.txt").write_text(json.loads(line)["text"])
    results = tmp_path / "results"
    common = f"--results {results} --threads 1"
    proc, loaded = _hidden_run(
        "from harness.cli import main\n"
        f"rc_run = main('run --variant rd_attnres --size tiny --seed 0 --budget-tokens 2048 --corpus {corpus} "
        f"--set batch_tokens=1024 --set vocab_size=512 --set eval_tokens=1024 --accelerator cpu {common}'.split())\n"
        "rc_bench = main('bench --size tiny --steps 2 --max-steps 0 --warmup 1 --loop-rounds 0 --device cpu "
        f"--variant block_attnres --variant rd_attnres --json {tmp_path / 'bench.json'} {common}'.split())\n"
        "print('RC', rc_run, rc_bench)\n",
        timeout=1800,  # a hang guard: ~70 s on 2 idle cores, 10x that on a busy machine
    )
    assert proc.returncode == 0 and "RC 0 0" in proc.stdout, proc.stderr[-3000:]
    assert loaded == [], f"loaded while training or benching: {loaded}"
    (path,) = (results / "runs").glob("*.json")
    result = validate_result(json.loads(path.read_text()))
    assert result["run"]["status"] == "done" and result["run"]["steps"] == 2
    assert any(
        m["split"] == "val" and m["name"] == "nll" and math.isfinite(m["value"]) for m in result["metrics"]
    )
    assert not (results / "harness.duckdb").exists()
    assert "not ingested into DuckDB here (No module named 'duckdb')" in proc.stderr
    bench = json.loads((tmp_path / "bench.json").read_text())
    assert set(bench["step_ms"]) == {"block_attnres", "rd_attnres"} and bench["device"] == "cpu"
    assert "harness bench: rows not stored in" in proc.stderr
