"""A change that re-rounds a run needs a new numerics revision (harness/models/numerics.py, DESIGN section 13).

``tests/fixtures/numerics_golden.json`` holds, per routing path, a float64 run of a few training steps of two
tiny models and the numerics identifier it belongs to (tests/train/numerics_golden.py says how it is
computed and why at which tolerance). The slow test computes it again in a process with the kernels pinned
and fails when a run moved while its path's numerics revision stayed, saying to bump the revision and
regenerate the golden (``.venv/bin/python tests/train/numerics_golden.py --write``). The fast tests pin the
rule on the recorded numbers themselves: a routing-path switch (the code change the golden is sized for) is
caught, a new revision asks for a new golden, and the tolerance sits between the two measured sizes.

    python -m pytest -q tests/train/test_numerics_golden.py
"""

from __future__ import annotations

import copy
import json
import platform
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from numerics_golden import (
    GOLDEN,
    TOLERANCE,
    VARIANTS,
    deviation,
    pinned_env,
    problems,
    tolerance,
)

from harness.models.numerics import ROUTING_PATHS, numerics_id

SCRIPT = Path(__file__).with_name("numerics_golden.py")


def _golden() -> dict:
    return json.loads(GOLDEN.read_text())


def _avx2() -> bool:
    try:
        return "avx2" in Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return False


def test_the_golden_holds_every_path_at_this_codes_revision():
    golden = _golden()
    assert set(golden["runs"]) == {f"{v}/{r}" for v in VARIANTS for r in ROUTING_PATHS}
    assert problems(golden, golden, 0.0) == []
    for key, run in golden["runs"].items():
        assert run["numerics"] == numerics_id(key.split("/")[1]), (
            f"{key}: NUMERICS_REVISIONS says {numerics_id(key.split('/')[1])}, the golden {run['numerics']}: "
            "regenerate it: .venv/bin/python tests/train/numerics_golden.py --write"
        )


def test_a_path_switch_with_the_revision_unchanged_fails_and_says_to_bump():
    """The recorded per-site run put where the two-phase run is, under two_phase's identifier: what a change of
    the two-phase code that re-rounds like the other path would compute. It moved beyond the tolerance."""
    golden = _golden()
    for variant in VARIANTS:
        moved = copy.deepcopy(golden)
        two = f"{variant}/two_phase"
        moved["runs"][two] = {
            **golden["runs"][f"{variant}/per_site"],
            "numerics": golden["runs"][two]["numerics"],
        }
        assert deviation(golden["runs"][two], moved["runs"][two]) > 5 * TOLERANCE  # 5.3e-14 and 6.5e-14
        (line,) = problems(golden, moved, TOLERANCE)
        assert line.startswith(f"{two}: the float64 golden moved by ") and "\n" not in line
        assert f"while its numerics revision stayed {numerics_id('two_phase')}" in line
        assert "Bump NUMERICS_REVISIONS['two_phase'] in harness/models/numerics.py" in line
        assert line.endswith("regenerate the golden: .venv/bin/python tests/train/numerics_golden.py --write")
        # with a new revision the same numbers are a new golden to record, not an unannounced change
        moved["runs"][two]["numerics"] = "two_phase/99"
        (line,) = problems(golden, moved, TOLERANCE)
        assert f"this code's numerics are two_phase/99, the golden's {numerics_id('two_phase')}" in line


def test_the_tolerance_is_zero_only_on_the_recording_cpu_and_torch():
    golden = _golden()
    assert tolerance(golden, golden) == 0.0
    assert tolerance(golden, {**golden, "cpu_model": "Intel Xeon, flags sha256 0"}) == TOLERANCE
    assert tolerance(golden, {**golden, "torch": "9.9"}) == TOLERANCE
    assert 1e-15 < TOLERANCE < 5e-14  # above the pinned kernels' residual (8.9e-16), below a path switch


@pytest.mark.slow  # 4 float64 runs of 8 steps in a fresh process (~10 s on 2 CPU cores)
def test_this_code_computes_the_golden_of_its_numerics_revisions(tmp_path):
    if platform.machine() not in ("x86_64", "AMD64") or not _avx2():
        pytest.skip(
            f"the golden pins x86-64 AVX2 kernels (ATEN_CPU_CAPABILITY=avx2, MKL_CBWR=AVX2); this CPU "
            f"({platform.machine()}) cannot run them"
        )
    golden = _golden()
    if golden["torch"] != torch.__version__:
        pytest.skip(
            f"the golden was recorded with torch {golden['torch']}, this is {torch.__version__}: another torch "
            "re-rounds (the hardware class names it); regenerate the golden with the locked torch"
        )
    out = tmp_path / "now.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--json", str(out)], env=pinned_env(), capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    now = json.loads(out.read_text())
    assert now["capability"] == "AVX2"  # the pin took
    found = problems(golden, now, tolerance(golden, now))
    assert not found, "\n".join(found)
