"""Tests of `harness sql` (DESIGN section 1.1) through harness.cli.main. CPU only, about 3 s.

Run: python -m pytest -q tests/commands/test_sql_command.py
"""

from __future__ import annotations

import csv
import io
import json
import math
import multiprocessing as mp

import duckdb
import pytest

from harness.cli import main
from harness.store.store import Store

N_RUNS = 12  # more than polars' default of 10 printed rows
LONG = "grid_with_a_rather_long_name_that_polars_would_normally_cut_short_" * 2


def nll(seed: int) -> float:
    return 3.0 + seed / 7


@pytest.fixture
def results(tmp_path):
    store = Store(tmp_path)
    for seed in range(N_RUNS):
        variant = "rd_attnres" if seed % 2 else "block_attnres"
        store.write_result(
            {
                "run": {
                    "run_id": f"run-{seed:02d}",
                    "grid": LONG,
                    "variant": variant,
                    "role": "treatment" if seed % 2 else "parent",
                    "seed": seed,
                    "size": "tiny",
                    "budget_tokens": 4096,
                    "status": "done",
                    "config": {"seed": seed},
                },
                "metrics": [
                    {"step": 1, "tokens": 2048, "split": "val", "name": "nll", "value": 9.0},
                    {"step": 2, "tokens": 4096, "split": "val", "name": "nll", "value": nll(seed)},
                    {
                        "step": 2,
                        "tokens": 4096,
                        "split": "val",
                        "name": "bpb",
                        "value": nll(seed) / math.log(2),
                    },
                    {"step": 2, "tokens": 4096, "split": "val", "name": "ppl", "value": math.exp(nll(seed))},
                ],
            }
        )
    return tmp_path


QUERY = "select run_id, variant, seed, budget_tokens, val_nll, val_bpb, val_ppl from final order by seed"


def expected_rows() -> list[dict]:
    return [
        {
            "run_id": f"run-{s:02d}",
            "variant": "rd_attnres" if s % 2 else "block_attnres",
            "seed": s,
            "budget_tokens": 4096,
            "val_nll": nll(s),
            "val_bpb": nll(s) / math.log(2),
            "val_ppl": math.exp(nll(s)),
        }
        for s in range(N_RUNS)
    ]


def run(capsys, *argv):
    code = main(["sql", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_csv_parses_back_to_the_values(results, capsys):
    code, out, err = run(capsys, QUERY, "--format", "csv", "--results", str(results))
    assert code == 0, err
    rows = list(csv.DictReader(io.StringIO(out)))
    parsed = [
        {
            "run_id": r["run_id"],
            "variant": r["variant"],
            "seed": int(r["seed"]),
            "budget_tokens": int(r["budget_tokens"]),
            "val_nll": float(r["val_nll"]),
            "val_bpb": float(r["val_bpb"]),
            "val_ppl": float(r["val_ppl"]),
        }
        for r in rows
    ]
    assert parsed == expected_rows()  # floats round-trip exactly (shortest repr)


def test_json_parses_back_to_the_values(results, capsys):
    code, out, err = run(capsys, QUERY, "--format", "json", "--results", str(results))
    assert code == 0, err
    assert json.loads(out) == expected_rows()


def test_csv_and_json_write_nested_values(results, capsys):
    q = "select run_id, [seed, seed + 1] as pair, {'s': seed} as st from runs where seed < 2 order by 1"
    code, out, _ = run(capsys, q, "--format", "csv", "--results", str(results))
    assert code == 0
    assert [(r["pair"], r["st"]) for r in csv.DictReader(io.StringIO(out))] == [
        ("[0, 1]", '{"s": 0}'),
        ("[1, 2]", '{"s": 1}'),
    ]
    code, out, _ = run(capsys, q, "--format", "json", "--results", str(results))
    assert json.loads(out) == [
        {"run_id": "run-00", "pair": [0, 1], "st": {"s": 0}},
        {"run_id": "run-01", "pair": [1, 2], "st": {"s": 1}},
    ]


def test_table_shows_every_row_and_full_strings(results, capsys):
    code, out, err = run(capsys, "select * from final order by seed", "--results", str(results))
    assert code == 0, err
    assert "shape:" not in out and out.startswith("┌")  # no polars frame header
    for seed in range(N_RUNS):
        assert f"run-{seed:02d}" in out
    assert LONG in out and "…" not in out


def test_table_rounds_floats_to_6_significant_digits_csv_and_json_keep_them(results, capsys):
    q = (
        "select seed, val_nll, val_ppl, val_nll / 1e6 as tiny, [val_nll, val_bpb] as pair, 'x' as s "
        "from final where seed = 5"
    )
    code, out, err = run(capsys, q, "--results", str(results))
    assert code == 0, err
    (row,) = [ln for ln in out.splitlines() if ln.startswith("│ 5")]
    cells = [c.strip() for c in row.strip("│").replace("┆", "│").split("│")]
    v = nll(5)
    six = lambda x: float(f"{x:.6g}")  # noqa: E731
    assert cells[0] == "5" and cells[5] == "x"
    assert [float(c) for c in cells[1:4]] == [six(v), six(math.exp(v)), six(v / 1e6)]
    assert (
        cells[1] == f"{v:.6g}" == "3.71429" and cells[3] == "0.00000371429"
    )  # 6 digits, never cut to 0.000004
    assert cells[4] == f"[{v:.6g}, {v / math.log(2):.6g}]"
    assert repr(v) not in out
    code, out, _ = run(capsys, q, "--format", "json", "--results", str(results))
    assert json.loads(out)[0]["val_nll"] == v and json.loads(out)[0]["pair"] == [v, v / math.log(2)]
    code, out, _ = run(capsys, q, "--format", "csv", "--results", str(results))
    assert float(next(csv.DictReader(io.StringIO(out)))["val_nll"]) == v


def test_copy_to_is_refused_with_a_hint_at_harness_export(results, capsys):
    target = results / "out.csv"
    code, out, err = run(capsys, f"copy (select * from final) to '{target}'", "--results", str(results))
    assert code == 1 and out == "" and not target.exists()
    lines = err.strip().splitlines()
    assert (
        lines[0].startswith("harness sql: error: Permission Error")
        and "disabled by configuration" in lines[0]
    )
    assert (
        lines[1].startswith("harness sql: hint: harness sql cannot write files")
        and "harness export --grid NAME" in lines[1]
    )
    code, _, err = run(capsys, "select * from read_csv('/etc/hostname')", "--results", str(results))
    assert code == 1 and "hint" not in err  # not a COPY: no export hint


def test_query_from_stdin(results, capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO("select count(*) as n from final"))
    code, out, _ = run(capsys, "-", "--format", "json", "--results", str(results))
    assert code == 0 and json.loads(out) == [{"n": N_RUNS}]


@pytest.mark.parametrize(
    "query, message",
    [
        ("selec * from runs", 'Parser Error: syntax error at or near "selec"'),
        ("drop table runs", 'Cannot execute statement of type "DROP"'),
        ("delete from metrics", 'Cannot execute statement of type "DELETE"'),
        ("select nope from runs", 'Referenced column "nope" not found'),
    ],
)
def test_bad_sql_prints_duckdb_error_exits_1_and_changes_nothing(results, capsys, query, message):
    count = "select (select count(*) from runs), (select count(*) from metrics)"
    assert run(capsys, count, "--format", "csv", "--results", str(results))[0] == 0
    code, out, err = run(capsys, query, "--results", str(results))
    assert code == 1 and out == ""
    assert err.startswith("harness sql: error: ") and message in err
    code, out, _ = run(capsys, count, "--format", "csv", "--results", str(results))
    assert out.splitlines()[1] == f"{N_RUNS},{4 * N_RUNS}"


def test_empty_query_is_a_usage_error(results, capsys):
    code, _, err = run(capsys, "  ", "--results", str(results))
    assert code == 2 and "empty query" in err


def test_empty_results_folder(tmp_path, capsys):
    (tmp_path / "new").mkdir()
    code, out, err = run(
        capsys, "select * from final", "--format", "json", "--results", str(tmp_path / "new")
    )
    assert code == 0, err
    assert json.loads(out) == []


def _hold(db_path: str, ready, release) -> None:
    con = duckdb.connect(db_path)
    ready.set()
    release.wait(30)
    con.close()


def test_locked_database_exits_1_naming_the_pid(results, capsys):
    Store(results).ingest()
    ctx = mp.get_context("spawn")
    ready, release = ctx.Event(), ctx.Event()
    proc = ctx.Process(target=_hold, args=(str(results / "harness.duckdb"), ready, release))
    proc.start()
    try:
        assert ready.wait(30)
        code, out, err = run(capsys, "select 1", "--lock-timeout", "0.3", "--results", str(results))
    finally:
        release.set()
        proc.join(30)
    assert code == 1 and out == ""
    assert "is locked by another process" in err and f"PID {proc.pid}" in err


def test_a_grid_with_axes_gives_a_column_per_axis_in_runs_and_final(results, capsys):
    code, out, _ = run(capsys, "select * from final limit 1", "--format", "csv", "--results", str(results))
    assert code == 0 and "lr" not in next(csv.reader(io.StringIO(out)))  # no axis: the columns as they were
    store = Store(results)
    for seed, (lr, schedule) in enumerate([(0.001, "wsd"), (0.004, "wsd"), (0.001, "cosine")]):
        store.write_result(
            {
                "run": {
                    "run_id": f"ax:tiny:block_attnres:s{seed}:4096:lr={lr}:schedule={schedule}",
                    "grid": "ax",
                    "variant": "block_attnres",
                    "role": "parent",
                    "seed": seed,
                    "size": "tiny",
                    "budget_tokens": 4096,
                    "status": "done",
                    "config": {"seed": seed, "axes": {"lr": lr, "schedule": schedule}},
                },
                "metrics": [{"step": 2, "tokens": 4096, "split": "val", "name": "nll", "value": 5.0 + seed}],
            }
        )
    query = "select lr, schedule, avg(val_nll) as nll, count(*) as n from final group by all order by all"
    code, out, _ = run(capsys, query, "--format", "json", "--results", str(results))
    assert code == 0
    rows = json.loads(out)
    assert rows[:3] == [
        {"lr": 0.001, "schedule": "cosine", "nll": 7.0, "n": 1},
        {"lr": 0.001, "schedule": "wsd", "nll": 5.0, "n": 1},
        {"lr": 0.004, "schedule": "wsd", "nll": 6.0, "n": 1},
    ]
    assert rows[3] == {
        "lr": None,
        "schedule": None,
        "nll": pytest.approx(sum(map(nll, range(N_RUNS))) / N_RUNS),
        "n": N_RUNS,
    }
    code, out, _ = run(
        capsys,
        "select typeof(lr), typeof(schedule), count(*) from runs group by all",
        "--format",
        "csv",
        "--results",
        str(results),
    )
    assert code == 0 and "DOUBLE,VARCHAR," in out
