"""Grid names and run ids (harness.common.terms): what `harness queue` accepts is exactly what an import, a
report and a tuning study accept, and no name can lead a file outside the results folder; a run id reads back
into the parts it was written from."""

from __future__ import annotations

import pytest

from harness.common.terms import RunId, check_grid_name, is_tune_grid, parse_run_id, run_id


@pytest.mark.parametrize("name", ["rd_cpu_study", "a", "v1.2-x", "0grid", "tune:parent_small"])
def test_a_valid_grid_name_is_accepted(name):
    check_grid_name(name, "test")  # no error


@pytest.mark.parametrize(
    "name",
    [
        "ok\n",  # a `$`-anchored pattern passes a trailing newline: the name would end a file name with it
        "tune:a\n",
        "tune:a/../../b",  # an unanchored prefix match would take 'a' and pass the rest
        "../x",
        "a/b",
        "_x",
        "",
        "a:b",
        7,
    ],
)
def test_a_name_queue_refuses_is_refused_everywhere(name):
    with pytest.raises(ValueError, match="must be letters, digits"):
        check_grid_name(name, "test")


def test_a_tuning_study_name_is_whole_name_only():
    assert is_tune_grid("tune:parent_small")
    assert not is_tune_grid("tune:parent small")
    assert not is_tune_grid("tune:a/b")


@pytest.mark.parametrize(
    "parts",
    [
        RunId("g", "tiny", "rd_attnres", 0, 1000, False),
        RunId("tune:parent_small", "tiny", "block_attnres", 10_003, 2_000_000, False),  # the grid holds a ':'
        RunId("g", "small", "s1", 12, 5000, True),  # a variant named like a seed, a tuned run
    ],
)
def test_a_run_id_reads_back_into_its_parts(parts):
    rid = run_id(parts.grid, parts.size, parts.variant, parts.seed, parts.budget_tokens, tuned=parts.tuned)
    assert parse_run_id(rid) == parts
    assert parts.cell_seed() == f"{parts.size}:{parts.budget_tokens}:{parts.seed}"


@pytest.mark.parametrize("rid", ["g", "g:tiny:v:x1:100", "g:tiny:v:s1:1e3", "tiny:v:s1:100"])
def test_a_malformed_run_id_is_one_error_naming_it(rid):
    with pytest.raises(ValueError, match=rf"^run id {rid!r}: expected GRID:SIZE:VARIANT:s<SEED>"):
        parse_run_id(rid)
