"""`harness sizes` prints counts equal to the real models' counts."""

import subprocess
import sys

from harness.cli import main
from harness.models import build_model, count_params


def test_sizes_table_matches_built_models(capsys):
    assert main(["sizes", "--size", "tiny"]) == 0
    out = capsys.readouterr().out
    for variant in (
        "block_attnres",
        "rd_attnres",
        "param_matched",
        "dup_route",
        "query_reparam",
        "fixed_v",
        "prenorm",
    ):
        counts = count_params(build_model(variant, "tiny", seed=0))
        line = next(l for l in out.splitlines() if l.split()[:2] == ["tiny", variant])
        assert f"{counts['total']:,}" in line.split()
        assert f"{counts['trainable']:,}" in line.split()


def test_a_vocabulary_is_padded_as_in_a_run_and_checked_as_in_a_grid(capsys):
    from harness.design.config import RunConfig

    assert main(["sizes", "--size", "tiny", "--variant", "rd_attnres", "--vocab-size", "300"]) == 0
    line = next(l for l in capsys.readouterr().out.splitlines() if l.split()[:2] == ["tiny", "rd_attnres"])
    config = RunConfig.create("rd_attnres", "tiny", 0, 4096, "/c", train={"vocab_size": 300})
    run_model = build_model("rd_attnres", "tiny", seed=0, vocab_size=config.model_config(300).vocab_size)
    assert line.split()[6] == "320" and f"{count_params(run_model)['total']:,}" in line.split()
    for bad in ("0", "256", str(2**21)):
        assert main(["sizes", "--vocab-size", bad]) == 2
        err = capsys.readouterr().err
        assert f"vocab_size={bad} is not allowed" in err and "257" in err and "Traceback" not in err


def test_bad_variant_is_one_clean_error(capsys):
    assert main(["sizes", "--variant", "nope"]) == 2
    err = capsys.readouterr().err
    assert "unknown variant 'nope'" in err and "rd_attnres" in err and "Traceback" not in err


def test_python_m_harness_help():
    out = subprocess.run(
        [sys.executable, "-m", "harness", "--help"], capture_output=True, text=True, check=True
    ).stdout
    assert "sizes" in out and "harness queue" in out


def test_every_subcommand_has_help_with_an_example(capsys):
    import pytest

    from harness.cli import COMMANDS, build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert set(sub.choices) == set(COMMANDS)  # every command of DESIGN 1.1 is built
    for name in COMMANDS:
        with pytest.raises(SystemExit):
            main([name, "--help"])
        out = capsys.readouterr().out
        assert "example:" in out and f"harness {name}" in out, name
        assert "--results" in out, name


def test_read_commands_refuse_a_missing_results_folder(tmp_path, capsys):
    for args in (
        ["sql", "select 1"],
        ["report", "--grid", "g"],
        ["archive", "--grid", "g", "--out", str(tmp_path / "g.tar.gz")],
    ):
        assert main([*args, "--results", str(tmp_path / "typo")]) == 2
        assert "results folder" in capsys.readouterr().err and not (tmp_path / "typo").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # the archive refused before --out too
