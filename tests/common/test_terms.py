"""Grid names (harness.common.terms): what `harness queue` accepts is exactly what an import, a report
and a tuning study accept, and no name can lead a file outside the results folder."""

from __future__ import annotations

import pytest

from harness.common.terms import check_grid_name, is_tune_grid


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
