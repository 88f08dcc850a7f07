"""The committed re-train check (reports/factorial_study/retrain_check.{md,csv,json}) says what its data say.

Its 32 re-trained runs' new NLLs are in retrain_check.json, their archived NLLs (and every other seed's, for the
seed sd) in the study's archive; the check is recomputed from those and rendered by
harness/report/render/retrain_lines.py, and the committed text, CSV and JSON must be exactly that (the
re-trained results folder is not committed, so this is how they are rebuilt: :func:`rerender`; numbers to a
relative 1e-9, as tests/tables.py compares a report's CSVs). Their words
follow the numbers: the runs were perturbed (the redraw ratio's intervals below 1), not redrawn. CPU only,
about two seconds.

    python -m pytest -q tests/render/test_retrain_lines.py
"""

from __future__ import annotations

import json
from pathlib import Path

from tables import same_json, same_table

from harness.report.render.retrain_lines import render_csv, render_json, render_text
from harness.report.stats.retrain_check import PERTURBED, grid_contrasts, retrain_check
from harness.store.archive import read_archive
from harness.train.retrain import archived_runs

STUDY = Path(__file__).resolve().parents[2] / "reports/factorial_study"


def rerender(folder: Path = STUDY) -> tuple[str, str, str]:
    """``(md, csv, json)`` of the committed check, recomputed from retrain_check.json's re-trained NLLs and the
    study's archive, as ``harness retrain`` computes them (harness/commands/retrain.py)."""
    data = json.loads((folder / "retrain_check.json").read_text())
    runs = archived_runs(read_archive(folder / "rd_factorial_study.tar.gz"))
    plan = runs[0].config.analysis or {}
    check = retrain_check(
        {r.key: r.val_nll for r in runs},
        {(r["variant"], r["seed"]): r["new"] for r in data["runs"]},
        grid_contrasts({r.config.variant: r.config.role for r in runs}, plan.get("factorial")),
        run_ids={(r["variant"], r["seed"]): r["run_id"] for r in data["runs"]},
        min_effect_nats=plan.get("min_effect_nats"),
        alpha=plan.get("alpha", 0.05),
        power=plan.get("power", 0.8),
    )
    # the re-trained results folder is not committed: what re-trained them is what the JSON recorded
    machine = {"commit": "unknown", "numerics": "unknown"} | data["machine"]
    name = data["archive"]
    return render_text(check, machine, name), render_csv(check, machine), render_json(check, machine, name)


def test_the_committed_aa_check_is_its_data_rendered_by_this_code():
    md, csv_text, json_text = rerender()
    assert (STUDY / "retrain_check.md").read_text() == md
    # numbers to a relative 1e-9 (tests/tables.py): their last digits follow the CPU and the root finder
    assert same_table(csv_text.encode(), (STUDY / "retrain_check.csv").read_bytes())
    assert same_json(json.loads(json_text), json.loads((STUDY / "retrain_check.json").read_text()))
    data = json.loads(json_text)
    assert data["verdict"] == PERTURBED and len(data["runs"]) == 32
    assert all(c["var_ratio_high"] < 1 and c["tost_p"] < 0.05 for c in data["contrasts"])
    assert "moved like new draws" not in md and "a fresh draw" not in md


if __name__ == "__main__":  # rewrite the committed files from their data (after a change of the renderer)
    for suffix, text in zip(("md", "csv", "json"), rerender(), strict=True):
        (STUDY / f"retrain_check.{suffix}").write_text(text)
