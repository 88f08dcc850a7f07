"""The wheel installs one top-level package, ``harness``, and works from a fresh virtualenv (issue 62).

A lab installs the harness into its own environment, where a top-level ``db``, ``reports`` or
``controls`` of another package would collide with ours (pip overwrites silently). So the wheel
built from this tree must list only ``harness`` at its top level, carry the control specs and the
store's schema (in a checkout links to the root folders ``controls/`` and ``db/``), and run from a
virtualenv that holds the wheel and nothing of the checkout: ``harness --help``, a tiny run on real
text and a report, from a folder outside the repository.

The dependencies come from the test environment's site-packages through a path file (its
``.pth`` files, among them the editable install of this checkout, are not processed from there), so
nothing is downloaded. About 40 s on 2 CPU cores.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT.parent / "shared/data/fineweb_edu_sample"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # built from a copy: setuptools writes build/ and *.egg-info/ beside the sources it builds
    skip = (".git", ".venv", "build", "*.egg-info", "results", "__pycache__", "wheelhouse", ".pytest_cache")
    src = shutil.copytree(ROOT, out / "src", symlinks=True, ignore=shutil.ignore_patterns(*skip))
    build = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(out),
            str(src),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    (path,) = out.glob("rd_harness-*.whl")
    return path


@pytest.mark.slow  # builds the wheel (~10 s)
def test_the_wheel_holds_one_top_level_package_with_its_data(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith((".dist-info", ".data"))}
    assert top == {"harness"}
    controls = {Path(n).name for n in names if n.startswith("harness/models/specs/controls/")}
    assert controls == {p.name for p in (ROOT / "controls").glob("*.toml")} and len(controls) >= 5
    schema = zipfile.ZipFile(wheel).read("harness/store/schema.sql")
    assert schema == (ROOT / "db" / "schema.sql").read_bytes()  # the file, not the link


@pytest.mark.slow  # a fresh virtualenv, two tiny runs and a report (~30 s)
def test_the_wheel_runs_a_tiny_run_and_a_report_from_a_fresh_virtualenv(wheel, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    # the dependencies: this environment's site-packages as a plain path (its .pth files are not read)
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    install = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(py),
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            str(wheel),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "HARNESS_SPEC_PATH")}
    env |= {
        "HARNESS_RESULTS": str(work / "results"),
        "HARNESS_CACHE": str(work / "cache"),
        "HARNESS_PROGRESS": "lines",
    }

    def harness(*args: str) -> subprocess.CompletedProcess:
        proc = subprocess.run(
            [str(venv / "bin" / "harness"), *args],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert proc.returncode == 0, (
            f"harness {' '.join(args)}:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
        )
        return proc

    probe = (
        "import harness, importlib.util as u\n"
        "from harness.models.catalog import load_specs\n"
        "print(harness.__file__)\n"
        "print([m for m in ('db', 'reports', 'controls') if u.find_spec(m)])\n"
        "print(sorted(load_specs()))"
    )
    where = subprocess.run(
        [str(py), "-c", probe], cwd=work, env=env, capture_output=True, text=True, check=True
    ).stdout.split("\n")
    assert where[0].startswith(str(site)), where  # the wheel's copy, not this checkout
    assert where[1] == "[]", where  # no top-level package of ours but harness
    shipped = sorted(
        [
            *(p.stem for p in (ROOT / "controls").glob("*.toml")),
            *(p.stem for p in (ROOT / "harness/models/specs").glob("*.toml")),
        ]
    )
    assert where[2] == str(shipped), where  # the controls came with the wheel
    assert "queue" in harness("--help").stdout
    for variant in ("rd_attnres", "block_attnres"):
        harness(
            "run",
            "--variant",
            variant,
            "--size",
            "tiny",
            "--seed",
            "0",
            "--budget-tokens",
            "8192",
            "--corpus",
            str(SAMPLE),
        )
    rows = harness("sql", "select variant, status from runs order by variant", "--format", "csv").stdout
    assert rows.split() == ["variant,status", "block_attnres,done", "rd_attnres,done"]
    harness("report", "--grid", "adhoc")
    assert (work / "results" / "reports" / "adhoc" / "report.md").is_file()


@pytest.mark.parametrize(
    ("installed", "root"),
    [("harness/store/schema.sql", "db/schema.sql"), ("harness/models/specs/controls", "controls")],
)
def test_the_packages_data_are_links_to_the_root_folders(installed, root):
    """In a checkout the package's copy of the schema and of the control specs is a link to the root folder's
    (where a user reads the schema and adds a control): an editor that replaced a link with a file would give
    two copies that drift, the package's being the one the code reads."""
    path = ROOT / installed
    assert path.is_symlink(), f"{installed} must be a link to {root} (ln -s), not a copy"
    assert path.resolve() == (ROOT / root).resolve()
