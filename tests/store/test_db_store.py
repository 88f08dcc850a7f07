"""Tests of the DuckDB results store (db/, DESIGN section 5). CPU only, about 10 s.

Run: python -m pytest -q tests/store/test_db_store.py

Processes that touch DuckDB use the multiprocessing 'spawn' context: a forked child cannot reuse
its parent's DuckDB state.
"""

from __future__ import annotations

import json
import math
import multiprocessing as mp
import os
import time
import warnings
from pathlib import Path

import duckdb
import polars as pl
import pytest

from harness.store.connection import StoreLockedError
from harness.store.store import Store
from harness.store.validate import ROW_TABLES, columns, result_filename

SPAWN = mp.get_context("spawn")
FINAL_CONTRACT = [
    "run_id",
    "grid",
    "variant",
    "role",
    "seed",
    "size",
    "budget_tokens",
    "protocol_hash",
    "val_nll",
    "val_bpb",
    "val_ppl",
]


def make_result(
    run_id: str,
    *,
    seed: int = 0,
    variant: str = "rd_attnres",
    role: str = "treatment",
    status: str = "done",
    val: dict[int, float] | None = None,
    n_layers: int = 2,
    routing_tokens: tuple[int, ...] = (1000,),
) -> dict:
    """A result with val nll/bpb/ppl at each tokens value of ``val`` (nll), train loss rows,
    routing rows for ``n_layers`` layers x 2 routes x (layer + 1) sources, and per layer one
    route_pairs row (qk vs v) and two route_params rows (w_qk, w_v)."""
    val = {500: 5.0, 1000: 4.0} if val is None else val
    metrics = []
    for step, (tokens, nll) in enumerate(sorted(val.items()), start=1):
        metrics += [
            {"step": step, "tokens": tokens, "split": "val", "name": "nll", "value": nll},
            {"step": step, "tokens": tokens, "split": "val", "name": "bpb", "value": nll / math.log(2) / 4},
            {"step": step, "tokens": tokens, "split": "val", "name": "ppl", "value": math.exp(nll)},
            {"step": step, "tokens": tokens, "split": "train", "name": "loss", "value": nll + 0.25},
        ]
    routing = []
    for tokens in routing_tokens:
        for layer in range(n_layers):
            for route in ("qk", "v"):
                n = layer + 1
                for source in range(n):
                    routing.append(
                        {
                            "tokens": tokens,
                            "layer": layer,
                            "site": "attn",
                            "route": route,
                            "source": source,
                            "weight": 1.0 / n,
                            "entropy": math.log(n),
                            "eff_depth": (n - 1) / 2,
                            "js_qk_v": 0.0 if n > 1 else None,
                        }
                    )
    pairs = [
        {
            "tokens": t,
            "layer": layer,
            "site": "attn",
            "route_a": "qk",
            "route_b": "v",
            "query_max_abs_diff": 0.01 * layer,
            "offset_max_abs_diff": 0.0,
            "js": 0.001 * layer,
        }
        for t in routing_tokens
        for layer in range(n_layers)
    ]
    params = [
        {
            "tokens": t,
            "layer": layer,
            "site": "attn",
            "name": name,
            "numel": 64,
            "max_abs_change": 0.02 * layer,
            "max_abs_value": 0.02 * layer,
        }
        for t in routing_tokens
        for layer in range(n_layers)
        for name in ("w_qk", "w_v")
    ]
    return {
        "run": {
            "run_id": run_id,
            "grid": "g",
            "variant": variant,
            "role": role,
            "seed": seed,
            "size": "tiny",
            "budget_tokens": 1000,
            "protocol_hash": f"p{seed % 2}",
            "status": status,
            "n_params": 123456,
            "wall_s": 1.5,
            "host": "h",
            "code_version": "abc123-dirty",
            "config": {"lr": 0.003, "layers": [64, 64]},
            "started_at": "2026-01-01T02:00:00+02:00",
            "finished_at": "2026-01-01T00:00:01",
            "error": None if status == "done" else "boom",
        },
        "metrics": metrics,
        "routing": routing,
        "route_pairs": pairs,
        "route_params": params,
    }


METRIC_COLS = ["run_id", "step", "tokens", "split", "name", "value"]
ROUTING_COLS = [
    "run_id",
    "tokens",
    "layer",
    "site",
    "route",
    "source",
    "weight",
    "entropy",
    "eff_depth",
    "js_qk_v",
    "js_qk_v_of_means",
]


def table(store: Store, name: str, cols: list[str] | None = None) -> list[tuple]:
    """Rows of ``name`` (all columns, or ``cols``) in a canonical order (no ingestion)."""
    cols = list(columns()[name]) if cols is None else cols
    select = ", ".join(cols)
    return store.query(f"SELECT {select} FROM {name} ORDER BY ALL", ingest=False).rows()


def snapshot(store: Store) -> dict[str, list[tuple]]:
    return {t: table(store, t) for t in ("runs", *ROW_TABLES)}


# -- write + ingest ----------------------------------------------------------------------------


def test_write_and_ingest_give_exact_rows_and_final_view(tmp_path):
    store = Store(tmp_path / "results")
    a = make_result("a", seed=0, val={500: 5.0, 1000: 4.0})
    b = make_result("b", seed=1, variant="block_attnres", role="parent", val={1000: 4.5, 500: 5.5})
    c = make_result("c", seed=2, status="failed", val={500: 6.0})
    # a later train row must not move the end-of-run evaluation
    b["metrics"].append({"step": 9, "tokens": 1200, "split": "train", "name": "loss", "value": 1.0})
    paths = [store.write_result(r) for r in (a, b, c)]
    assert paths == [store.runs_dir / "a.json", store.runs_dir / "b.json", store.runs_dir / "c.json"]
    assert not store.db_path.exists()  # writing never touches the database
    assert sorted(store.pending()) == sorted(paths)
    assert store.ingest() == 3
    assert store.pending() == []
    assert store.ingest() == 0

    final = store.query("SELECT * FROM final ORDER BY run_id")
    assert final.columns[: len(FINAL_CONTRACT)] == FINAL_CONTRACT
    assert final.select(FINAL_CONTRACT).rows() == [
        (
            "a",
            "g",
            "rd_attnres",
            "treatment",
            0,
            "tiny",
            1000,
            "p0",
            4.0,
            4.0 / math.log(2) / 4,
            math.exp(4.0),
        ),
        (
            "b",
            "g",
            "block_attnres",
            "parent",
            1,
            "tiny",
            1000,
            "p1",
            4.5,
            4.5 / math.log(2) / 4,
            math.exp(4.5),
        ),
    ]  # c failed: not in final
    assert final["val_tokens"].to_list() == [1000, 1000]

    runs = store.query("SELECT * FROM runs ORDER BY run_id")
    assert runs["run_id"].to_list() == ["a", "b", "c"]
    assert runs["status"].to_list() == ["done", "done", "failed"]
    assert runs["error"].to_list() == [None, None, "boom"]
    assert [json.loads(x) for x in runs["config"]] == [{"lr": 0.003, "layers": [64, 64]}] * 3
    # +02:00 is converted to naive UTC
    assert runs["started_at"].to_list()[0].isoformat() == "2026-01-01T00:00:00"
    assert runs["n_params"].to_list() == [123456] * 3
    assert runs["budget_tokens"].dtype == pl.Int64 and runs["seed"].dtype == pl.Int32

    want_metrics = sorted(
        (r["run"]["run_id"], m["step"], m["tokens"], m["split"], m["name"], m["value"])
        for r in (a, b, c)
        for m in r["metrics"]
    )
    assert table(store, "metrics", METRIC_COLS) == want_metrics
    want_routing = [
        (
            r["run"]["run_id"],
            x["tokens"],
            x["layer"],
            x["site"],
            x["route"],
            x["source"],
            x["weight"],
            x["entropy"],
            x["eff_depth"],
            x["js_qk_v"],
            None,
        )
        for r in (a, b, c)
        for x in r["routing"]
    ]
    assert len(want_routing) == 3 * 2 * (1 + 2)
    got = table(store, "routing", ROUTING_COLS)  # columns added later are not checked here
    assert got == sorted(want_routing, key=lambda t: tuple((v is None, v) for v in t))
    for name in ("route_pairs", "route_params"):  # the degeneracy records, exactly
        cols = list(columns()[name])
        want = sorted(
            tuple(r["run"]["run_id"] if c == "run_id" else x[c] for c in cols)
            for r in (a, b, c)
            for x in r[name]
        )
        assert len(want) >= 6 and table(store, name) == want, name


def test_final_takes_largest_step_on_a_tokens_tie_and_keeps_nan(tmp_path):
    store = Store(tmp_path)
    r = make_result("tie", val={1000: 4.0})
    r["metrics"].append({"step": 7, "tokens": 1000, "split": "val", "name": "nll", "value": 3.5})
    r["metrics"].append({"step": 7, "tokens": 1000, "split": "val", "name": "ppl", "value": float("nan")})
    store.write_result(r)
    row = store.query("SELECT val_nll, val_bpb, val_ppl FROM final").row(0)
    assert row[0] == 3.5 and row[1] == 4.0 / math.log(2) / 4 and math.isnan(row[2])


def test_ingest_twice_is_idempotent(tmp_path):
    store = Store(tmp_path)
    for i in range(3):
        store.write_result(make_result(f"r{i}", seed=i, val={1000: 4.0 + i}))
    assert store.ingest() == 3
    before = snapshot(store)
    assert [len(before[t]) for t in ("runs", "metrics", "routing")] == [3, 3 * 4, 3 * 6]
    assert store.ingest() == 0
    assert snapshot(store) == before
    # Force a full re-ingest: every file looks changed (new mtime), contents the same.
    for p in store.runs_dir.glob("*.json"):
        st = p.stat()
        os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert len(store.pending()) == 3
    assert store.ingest() == 3
    assert snapshot(store) == before


def test_deleted_database_is_rebuilt_from_the_run_files(tmp_path):
    store = Store(tmp_path)
    for i in range(3):
        store.write_result(make_result(f"r{i}", seed=i, val={1000: 4.0 + i}))
    store.ingest()
    before = snapshot(store)
    store.db_path.unlink()
    assert len(store.pending()) == 3
    assert snapshot(store) == {t: [] for t in ("runs", *ROW_TABLES)}  # no ingest: empty
    assert store.ingest() == 3
    assert snapshot(store) == before


def test_rewriting_a_run_replaces_its_rows(tmp_path):
    store = Store(tmp_path)
    store.write_result(make_result("keep", seed=5, val={1000: 3.0}))
    first = make_result("retry", status="failed", val={500: 9.0})
    store.write_result(first)
    assert store.ingest() == 2
    assert store.query("SELECT status FROM runs WHERE run_id = 'retry'").item() == "failed"
    keep_before = [row for row in table(store, "metrics", METRIC_COLS) if row[0] == "keep"]

    second = make_result("retry", status="done", val={500: 5.0, 1000: 4.25}, n_layers=1)
    second["routing"] = []
    assert table(store, "route_params", ["count(*)"]) == [(2 * 2 + 2 * 2,)]
    store.write_result(second)
    assert [p.name for p in store.pending()] == ["retry.json"]
    assert store.ingest() == 1
    runs = store.query("SELECT run_id, status, error FROM runs ORDER BY run_id").rows()
    assert runs == [("keep", "done", None), ("retry", "done", None)]
    retry_metrics = [row[1:] for row in table(store, "metrics", METRIC_COLS) if row[0] == "retry"]
    assert retry_metrics == sorted(
        (m["step"], m["tokens"], m["split"], m["name"], m["value"]) for m in second["metrics"]
    )
    assert store.query("SELECT count(*) FROM routing WHERE run_id = 'retry'").item() == 0
    # the retried run's degeneracy rows are the new file's (one layer), the other run's kept
    assert table(store, "route_pairs", ["run_id", "layer"]) == [("keep", 0), ("keep", 1), ("retry", 0)]
    assert [r[0] for r in table(store, "route_params", ["run_id"])].count("retry") == 2
    assert [row for row in table(store, "metrics", METRIC_COLS) if row[0] == "keep"] == keep_before
    assert store.query("SELECT val_nll FROM final WHERE run_id = 'retry'").item() == 4.25


def test_stray_tmp_files_are_never_ingested(tmp_path):
    store = Store(tmp_path)
    good = store.write_result(make_result("good"))
    text = json.dumps(make_result("crashed"))
    (store.runs_dir / f".{result_filename('crashed')}.4242.abcd.tmp").write_text(text[: len(text) // 2])
    (store.runs_dir / "also.json.tmp").write_text(text)  # complete but never renamed
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # not even a warning about the tmp files
        assert store.pending() == [good]
        assert store.ingest() == 1
    assert store.query("SELECT run_id FROM runs").rows() == [("good",)]
    assert store.query("SELECT count(*) FROM ingest_log").item() == 1


def test_a_crash_during_write_leaves_no_file(tmp_path, monkeypatch):
    store = Store(tmp_path)
    store.write_result(make_result("r", val={1000: 4.0}))

    def crash(src, dst):
        raise OSError("disk gone")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="disk gone"):
        store.write_result(make_result("r", val={1000: 1.0}))
    monkeypatch.undo()
    assert sorted(p.name for p in store.runs_dir.iterdir()) == ["r.json"]  # tmp removed
    assert store.query("SELECT val_nll FROM final").item() == 4.0  # old result intact


def test_invalid_file_in_runs_dir_is_skipped_with_a_warning(tmp_path):
    store = Store(tmp_path)
    store.write_result(make_result("ok"))
    (store.runs_dir / "junk.json").write_text('{"run": {"run_id": "x"}}')
    with pytest.warns(UserWarning, match=r"junk\.json.*required key 'grid'"):
        assert store.ingest() == 1
    assert store.query("SELECT run_id FROM runs").rows() == [("ok",)]
    assert store.query("SELECT file, error IS NOT NULL FROM ingest_log ORDER BY 1").rows() == [
        ("junk.json", True),
        ("ok.json", False),
    ]
    assert store.pending() == []  # not retried until the file changes


def test_odd_run_ids_get_distinct_safe_file_names(tmp_path):
    store = Store(tmp_path)
    ids = ["grid/rd_attnres/s0", "grid%2Frd_attnres%2Fs0", ".hidden", "x" * 300, "sp ace"]
    paths = [store.write_result(make_result(i)) for i in ids]
    assert len(set(paths)) == len(ids)
    assert all(p.parent == store.runs_dir and not p.name.startswith(".") for p in paths)
    assert [store.read_result(p)["run"]["run_id"] for p in paths] == ids
    assert store.ingest() == len(ids)
    assert sorted(store.query("SELECT run_id FROM runs")["run_id"]) == sorted(ids)


# -- validation --------------------------------------------------------------------------------


def _set(path, value):
    def mutate(r):
        *head, last = path
        node = r
        for key in head:
            node = node[key]
        if value is KeyError:
            del node[last]
        else:
            node[last] = value

    return mutate


@pytest.mark.parametrize(
    "mutate, match",
    [
        (_set(["run", "seed"], KeyError), r"result\['run'\]: required key 'seed' is missing"),
        (
            _set(["run", "status"], "ok"),
            r"result\['run'\]\['status'\] = 'ok' is not allowed; allowed: queued, running, done, failed, diverged",
        ),
        (
            _set(["run", "role"], "baseline"),
            r"\['role'\] = 'baseline' is not allowed; allowed: parent, treatment, control, reference",
        ),
        (_set(["run", "seed"], "0"), r"result\['run'\]\['seed'\] = '0' \(str\) must be an integer"),
        (_set(["run", "seed"], True), r"\['seed'\] = True \(bool\) must be an integer"),
        (
            _set(["run", "budget_tokens"], 1e6),
            r"\['budget_tokens'\] = 1000000.0 \(float\) must be an integer",
        ),
        (_set(["run", "seed"], 2**31), r"\['seed'\] = 2147483648 is out of range for INTEGER"),
        (_set(["run", "run_id"], ""), r"\['run_id'\] must be a non-empty string"),
        (_set(["run", "grid"], None), r"required key 'grid' is None"),
        (
            _set(["run", "colour"], "red"),
            r"result\['run'\]: unknown key 'colour'; allowed keys: run_id, grid",
        ),
        (_set(["run", "config"], {"a": {1, 2}}), r"result\['run'\]\['config'\] is not JSON-serialisable"),
        (_set(["run", "config"], {"lr": float("nan")}), r"\['config'\] is not JSON-serialisable"),
        (
            _set(["run", "started_at"], "yesterday"),
            r"\['started_at'\] = 'yesterday' is not an ISO 8601 timestamp",
        ),
        (_set(["run"], [1, 2]), r"result\['run'\] must be a dict, got list"),
        (_set(["metrics"], {"a": 1}), r"result\['metrics'\] must be a list of dicts, got dict"),
        (
            _set(["metrics", 1, "split"], "test"),
            r"result\['metrics'\]\[1\]\['split'\] = 'test' is not allowed; allowed: train, val",
        ),
        (
            _set(["metrics", 0, "value"], "4.0"),
            r"result\['metrics'\]\[0\]\['value'\] = '4.0' \(str\) must be a number",
        ),
        (_set(["metrics", 2, "foo"], 1), r"result\['metrics'\]\[2\]: unknown key 'foo'"),
        (
            _set(["metrics", 0, "run_id"], "other"),
            r"result\['metrics'\]\[0\]\['run_id'\] = 'other' differs from the run's 'r'",
        ),
        (
            _set(["routing", 3, "weight"], KeyError),
            r"result\['routing'\]\[3\]: required key 'weight' is missing",
        ),
        (
            _set(["routing", 0, "site"], "ffn"),
            r"result\['routing'\]\[0\]\['site'\] = 'ffn' is not allowed; allowed: attn, mlp, out",
        ),
        (
            _set(["route_pairs", 1, "route_b"], KeyError),
            r"result\['route_pairs'\]\[1\]: required key 'route_b' is missing",
        ),
        (
            _set(["route_pairs", 0, "query_max_abs_diff"], "0"),
            r"result\['route_pairs'\]\[0\]\['query_max_abs_diff'\] = '0' \(str\) must be a number",
        ),
        (
            _set(["route_params", 0, "site"], "ffn"),
            r"result\['route_params'\]\[0\]\['site'\] = 'ffn' is not allowed; allowed: attn, mlp, out",
        ),
        (
            _set(["route_params", 2, "name"], None),
            r"result\['route_params'\]\[2\]: required key 'name' is None",
        ),
        (_set(["extra"], 1), r"result: unknown key 'extra'; allowed keys: format_version"),
        (_set(["format_version"], 2), r"result\['format_version'\] = 2 is not supported"),
    ],
)
def test_invalid_results_raise_value_error_naming_the_field(tmp_path, mutate, match):
    store = Store(tmp_path)
    result = make_result("r")
    mutate(result)
    with pytest.raises(ValueError, match=match):
        store.write_result(result)
    assert not store.runs_dir.exists() or list(store.runs_dir.iterdir()) == []


def test_valid_optional_forms_are_accepted(tmp_path):
    store = Store(tmp_path)
    r = make_result("r")
    del r["routing"]
    del r["route_pairs"], r["route_params"]  # a result file written before these tables existed
    r["metrics"][0]["run_id"] = "r"  # repeating the run's own id is fine
    r["metrics"][0]["value"] = 4  # an int for a DOUBLE
    r["run"]["wall_s"] = 2
    store.write_result(r)
    written = store.read_result(store.result_path("r"))
    assert written["routing"] == written["route_pairs"] == written["route_params"] == []
    assert written["metrics"][0]["value"] == 4.0
    assert isinstance(written["run"]["wall_s"], float)


# -- queries -------------------------------------------------------------------------------------


def test_query_on_an_empty_results_folder(tmp_path):
    store = Store(tmp_path / "does" / "not" / "exist")
    final = store.query("SELECT * FROM final")
    assert final.height == 0 and final.columns[: len(FINAL_CONTRACT)] == FINAL_CONTRACT
    assert store.query("SELECT ? + ? AS x", [2, 3]).rows() == [(5,)]


def test_a_new_database_appears_whole(tmp_path, monkeypatch):
    """DuckDB writes a new file's header after creating it, and a process opening the file in
    between fails ("not a valid DuckDB database file"; seen once in the concurrent test below).
    The store builds the database, schema included, under a temporary name and links it into
    place, so the name never points at a half-made file; a process that loses the race keeps
    the winner's file."""
    store = Store(tmp_path)
    seen = []
    real = Store._ensure_schema

    def spy(self, con):
        seen.append(self.db_path.exists())
        real(self, con)

    monkeypatch.setattr(Store, "_ensure_schema", spy)
    store.write_result(make_result("a"))
    assert store.ingest() == 1
    assert seen[0] is False  # the schema went in while the file had no name yet
    monkeypatch.undo()
    store._create()  # a second creator that lost the race: the first file stays
    assert store.query("SELECT run_id FROM runs").rows() == [("a",)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["harness.duckdb", "runs"]  # no temporary left


def test_query_converts_awkward_results(tmp_path):
    store = Store(tmp_path)
    store.write_result(make_result("a"))
    df = store.query("SELECT * FROM runs r JOIN metrics m ON r.run_id = m.run_id LIMIT 1")
    assert "run_id_1" in df.columns
    df = store.query("SELECT INTERVAL 2 DAY AS i, 1 AS one")
    assert df.rows() == [("2 days", 1)]


def test_bad_sql_gives_duckdb_error_and_changes_nothing(tmp_path):
    store = Store(tmp_path)
    for i in range(2):
        store.write_result(make_result(f"r{i}", seed=i))
    store.ingest()
    before = snapshot(store)
    with pytest.raises(duckdb.ParserException, match='syntax error at or near "selec"'):
        store.query("selec * from runs")
    with pytest.raises(duckdb.Error, match="read-only mode"):
        store.query("DROP TABLE runs")
    with pytest.raises(duckdb.Error, match="read-only mode"):
        store.query("DELETE FROM metrics")
    with pytest.raises(duckdb.CatalogException, match="nope"):
        store.query("SELECT * FROM nope")
    target = tmp_path / "copy.csv"
    with pytest.raises(duckdb.Error, match="disabled by configuration"):
        store.query(f"COPY runs TO '{target}'")
    assert not target.exists()
    assert snapshot(store) == before


def test_add_bench_rows(tmp_path):
    store = Store(tmp_path)
    rows = [
        {
            "bench_id": "b1",
            "size": "tiny",
            "variant": v,
            "threads": 2,
            "compile": False,
            "step_ms": ms,
            "peak_mem_mb": 10.5,
            "extra": {"ratio": ms / 2.0},
        }
        for v, ms in (("prenorm", 2.0), ("block_attnres", 3.0))
    ]
    store.add_bench_rows(rows)
    got = store.query(
        "SELECT variant, step_ms, compile, threads, extra, created_at IS NOT NULL FROM bench ORDER BY step_ms"
    ).rows()
    got = [(*row[:4], json.loads(row[4]), row[5]) for row in got]
    assert got == [
        ("prenorm", 2.0, False, 2, {"ratio": 1.0}, True),
        ("block_attnres", 3.0, False, 2, {"ratio": 1.5}, True),
    ]
    with pytest.raises(ValueError, match=r"rows\[1\]\['step_ms'\] = 'fast' \(str\) must be a number"):
        store.add_bench_rows([rows[0], {**rows[1], "step_ms": "fast"}])
    with pytest.raises(ValueError, match=r"rows\[0\]: required key 'bench_id' is missing"):
        store.add_bench_rows([{"size": "tiny", "variant": "x"}])
    assert store.query("SELECT count(*) FROM bench").item() == 2


def test_schema_changes_reach_an_old_database(tmp_path):
    store = Store(tmp_path)
    store.write_result(make_result("a"))
    store.ingest()
    con = duckdb.connect(str(store.db_path))  # make it look like an older version's database
    con.execute("ALTER TABLE runs DROP COLUMN torch_version")
    con.execute("DROP VIEW final")
    con.execute("UPDATE meta SET value = 'old' WHERE key = 'schema_sha256'")
    con.close()
    store.write_result(make_result("b", seed=1))
    assert store.ingest() == 1
    assert store.query("SELECT run_id, torch_version FROM runs ORDER BY 1").rows() == [
        ("a", None),
        ("b", None),
    ]
    assert store.query("SELECT count(*) FROM final").item() == 2


# -- locks and concurrency -----------------------------------------------------------------------


def _hold_connection(db_path: str, read_only: bool, ready, release) -> None:
    con = duckdb.connect(db_path, read_only=read_only)
    ready.set()
    release.wait(30)
    con.close()


@pytest.fixture
def holder():
    """Start a spawned process holding a DuckDB connection; yields start(db_path, read_only)."""
    procs = []

    def start(db_path: Path, read_only: bool):
        ready, release = SPAWN.Event(), SPAWN.Event()
        proc = SPAWN.Process(target=_hold_connection, args=(str(db_path), read_only, ready, release))
        proc.start()
        assert ready.wait(30), "holder process did not start"
        procs.append((proc, release))
        return proc, release

    yield start
    for proc, release in procs:
        release.set()
        proc.join(30)


@pytest.mark.slow  # 2 s on 2 cores: out of the developer's loop (`pytest -m "not slow"`)
def test_write_locked_database_makes_query_retry_then_name_the_pid(tmp_path, holder):
    store = Store(tmp_path, lock_timeout_s=0.6)
    store.write_result(make_result("a"))
    store.ingest()
    proc, release = holder(store.db_path, read_only=False)
    t0 = time.monotonic()
    with pytest.raises(StoreLockedError) as info:
        store.query("SELECT count(*) FROM runs")
    assert time.monotonic() - t0 >= 0.6  # it retried for lock_timeout_s
    assert info.value.holder_pid == proc.pid
    assert f"PID {proc.pid}" in str(info.value) and str(store.db_path) in str(info.value)
    with pytest.raises(StoreLockedError, match=f"PID {proc.pid}"):
        store.ingest()
    with pytest.raises(StoreLockedError):
        store.add_bench_rows([{"bench_id": "b", "size": "tiny", "variant": "x"}])
    # writing results never needs the database
    store.write_result(make_result("b", seed=1))
    release.set()
    proc.join(30)
    assert store.query("SELECT count(*) FROM runs").item() == 2


def test_a_reader_elsewhere_makes_query_skip_ingest_not_fail(tmp_path, holder):
    store = Store(tmp_path, lock_timeout_s=2.0)
    store.write_result(make_result("a"))
    store.ingest()
    proc, release = holder(store.db_path, read_only=True)
    store.write_result(make_result("b", seed=1))
    assert store.query("SELECT run_id FROM runs").rows() == [("a",)]
    assert f"PID {proc.pid}" in store.last_ingest_skipped
    release.set()
    proc.join(30)
    assert store.query("SELECT run_id FROM runs ORDER BY 1").rows() == [("a",), ("b",)]
    assert store.last_ingest_skipped is None


def _writer(results: str, worker: int, n_runs: int, go) -> None:
    go.wait(60)
    store = Store(results)
    for i in range(n_runs):
        run_id = f"w{worker}-r{i}"
        if i % 2 == 0:  # a run that first failed, then was retried
            store.write_result(make_result(run_id, seed=i, status="failed", val={500: 9.0}))
        store.write_result(make_result(run_id, seed=i, val={500: 5.0, 1000: 4.0 + worker + i / 100}))
        time.sleep(0.05)


def _reader(results: str, ready, stop, out) -> None:
    store = Store(results, lock_timeout_s=20.0)
    errors, n, skipped = [], 0, 0
    while not stop.is_set() or n < 3:
        try:
            store.query("SELECT variant, count(*), avg(val_nll) FROM final GROUP BY 1")
            n += 1
            skipped += store.last_ingest_skipped is not None
        except Exception as exc:  # noqa: BLE001 - report every failure to the test
            errors.append(f"{type(exc).__name__}: {exc}")
        ready.set()
    out.put((n, skipped, errors))


@pytest.mark.slow  # 2 s on 2 cores: out of the developer's loop (`pytest -m "not slow"`)
def test_concurrent_writers_and_readers_lose_nothing(tmp_path):
    """Three writer processes write 6 runs each (half of them twice: failed, then retried)
    while two processes loop Store.query, contending for the database lock."""
    results = str(tmp_path)
    n_workers, n_runs = 3, 6
    go, stop, out = SPAWN.Event(), SPAWN.Event(), SPAWN.Queue()
    ready = [SPAWN.Event() for _ in range(2)]
    readers = [SPAWN.Process(target=_reader, args=(results, r, stop, out)) for r in ready]
    writers = [SPAWN.Process(target=_writer, args=(results, w, n_runs, go)) for w in range(n_workers)]
    for p in readers + writers:
        p.start()
    for r in ready:
        assert r.wait(60)
    go.set()  # writers start while both readers are looping
    for p in writers:
        p.join(60)
        assert p.exitcode == 0
    stop.set()
    reports = [out.get(timeout=60) for _ in readers]
    for p in readers:
        p.join(60)
        assert p.exitcode == 0
    assert [e for _, _, errors in reports for e in errors] == []
    assert all(n >= 3 for n, _, _ in reports), reports

    store = Store(results)
    store.ingest()
    runs = store.query("SELECT run_id, status, count(*) OVER (PARTITION BY run_id) FROM runs ORDER BY 1")
    want = sorted(f"w{w}-r{i}" for w in range(n_workers) for i in range(n_runs))
    assert runs["run_id"].to_list() == want
    assert set(runs["status"]) == {"done"} and set(runs[:, 2]) == {1}
    final = store.query("SELECT run_id, val_nll FROM final ORDER BY 1").rows()
    assert final == sorted((f"w{w}-r{i}", 4.0 + w + i / 100) for w in range(n_workers) for i in range(n_runs))
    per_run = store.query("SELECT count(*) FROM metrics GROUP BY run_id")
    assert set(per_run[:, 0]) == {8}  # the done version's rows only, each once
