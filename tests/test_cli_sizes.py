"""`harness sizes` prints counts equal to the real models' counts."""

import subprocess
import sys

from harness.cli import main
from harness.models import build_model, count_params


def test_sizes_table_matches_built_models(capsys):
    assert main(["sizes", "--size", "tiny"]) == 0
    out = capsys.readouterr().out
    for variant in ("block_attnres", "rd_attnres", "fixed_v", "prenorm"):
        counts = count_params(build_model(variant, "tiny", seed=0))
        line = next(l for l in out.splitlines() if l.split()[:2] == ["tiny", variant])
        assert f"{counts['total']:,}" in line.split()
        assert f"{counts['trainable']:,}" in line.split()


def test_bad_variant_is_one_clean_error(capsys):
    assert main(["sizes", "--variant", "nope"]) == 2
    err = capsys.readouterr().err
    assert "unknown variant 'nope'" in err and "rd_attnres" in err and "Traceback" not in err


def test_python_m_harness_help():
    out = subprocess.run([sys.executable, "-m", "harness", "--help"], capture_output=True, text=True, check=True).stdout
    assert "sizes" in out and "harness queue" in out
