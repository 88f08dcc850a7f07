"""scripts/gpu_check.sh, the prepared GPU check (issue 18): its syntax, the commands it would
run on a GPU (each parsed by the harness's own argument parser), and its CPU fallback, which
runs tiny versions of the same three steps (bench, a grid drained by a worker, a DDP run) for
real; its GPU count on recorded ``nvidia-smi`` outputs (MIG instances are not GPUs), its offline
install from a wheelhouse keeping the machine's torch (issue 37), and scripts/wheelhouse.sh's
argument checks. The GPU mode itself has not run anywhere yet (docs/paper-scale.md)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from harness.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu_check.sh"
WHEELHOUSE = ROOT / "scripts" / "wheelhouse.sh"

# `nvidia-smi -L` and `nvidia-smi --query-gpu=uuid --format=csv,noheader` as an H200 node prints
# them: with MIG on, -L lists each MIG instance under its GPU; the uuid query lists GPUs only.
H200 = "NVIDIA H200"
UUIDS = ["GPU-5d3a1c2e-7f10-4b8e-9a61-0c2d4e6f8a10", "GPU-8b2f0e4d-1a3c-4e5f-8d7a-6b9c0d1e2f30"]
MIG_L = [
    f"GPU 0: {H200} (UUID: {UUIDS[0]})",
    "  MIG 3g.71gb     Device  0: (UUID: MIG-1f2e3d4c-5b6a-5978-8a9b-0c1d2e3f4a5b)",
    "  MIG 3g.71gb     Device  1: (UUID: MIG-2a3b4c5d-6e7f-5081-9a2b-3c4d5e6f7a8b)",
    f"GPU 1: {H200} (UUID: {UUIDS[1]})",
    "  MIG 7g.141gb    Device  0: (UUID: MIG-3c4d5e6f-7a8b-5c9d-8e0f-1a2b3c4d5e6f)",
]


HARNESS = [sys.executable, "-m", "harness"]  # how the script runs the harness: "$PY" -m harness


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if k != "HARNESS"}
    return {
        **env,
        "HARNESS_PROGRESS": "lines",
        "PYTHON": sys.executable,
        "WHEELHOUSE": "/nonexistent/wheelhouse",  # never install into the test's own environment
    }


def test_script_parses_as_bash():
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)


def test_dry_run_prints_the_gpu_commands_and_each_parses(tmp_path):
    out = subprocess.run(
        [str(SCRIPT), "--dry-run", str(tmp_path)], capture_output=True, text=True, env=_env(), check=True
    ).stdout
    lines = {line.split("] ", 1)[0][1:]: line.split("] ", 1)[1] for line in out.splitlines()}
    assert set(lines) == {"bench", "grid", "ddp"}
    parser = build_parser()
    bench = shlex.split(lines["bench"])
    assert bench[:3] == HARNESS
    args = parser.parse_args(bench[3:])
    assert (args.command, args.size, args.compile, args.device) == ("bench", "120m", True, "cuda")
    assert args.variant == ["prenorm", "block_attnres", "rd_attnres"]
    ddp = parser.parse_args(shlex.split(lines["ddp"])[3:])
    assert (ddp.command, ddp.devices, ddp.strategy, ddp.accelerator) == ("run", "1", "ddp", "gpu")
    script, *grid_args = shlex.split(lines["grid"])[2:]  # bash -c SCRIPT grid GRID RESULTS ACCEL HARNESS...
    assert grid_args[3] == "gpu" and grid_args[4:] == HARNESS and "work --results" in script
    assert not (tmp_path / "summary.txt").read_text()  # nothing ran


@pytest.mark.slow  # trains: a bench, a drained grid and a DDP run
def test_cpu_fallback_runs_every_step(tmp_path):
    proc = subprocess.run(
        [str(SCRIPT), "--cpu", str(tmp_path)], capture_output=True, text=True, env=_env(), timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = (tmp_path / "summary.txt").read_text().splitlines()
    assert [line.split(":")[0] for line in summary] == [
        "PASS preflight",
        "PASS bench",
        "PASS grid",
        "PASS ddp",
    ]
    assert all(": exit 0 in " in line for line in summary[1:]), summary
    bench = json.loads((tmp_path / "bench.json").read_text())
    assert (
        "routing per step at tiny on " in proc.stderr
    )  # the bytes model beside the profile (no bandwidth on a CPU)
    assert (
        bench["routing_cost"]["estimate"]
        and "NVIDIA H200" in bench["routing_cost"]["roofline"]["120m"]["block_attnres"]
    )
    assert bench["device"] == "cpu" and set(bench["precision_ratios"]) == {"bf16/fp32"}
    assert bench["ratio_intervals"]["rd_attnres/block_attnres"] is not None  # 6 rounds: an interval
    assert set(bench["profile"]["pairs"]) >= {"block_attnres/prenorm", "rd_attnres/block_attnres"}
    con = duckdb.connect(str(tmp_path / "results" / "harness.duckdb"), read_only=True)
    try:
        rows = con.execute(
            "SELECT grid, variant, status, config->>'strategy', train_s > 0, train_s <= wall_s "
            "FROM runs ORDER BY grid, variant, seed"
        ).fetchall()
    finally:
        con.close()
    assert [r[:3] for r in rows] == [("gpu_check", "block_attnres", "done")] * 2 + [
        ("gpu_check", "rd_attnres", "done")
    ] * 2 + [("gpu_check_ddp", "rd_attnres", "done")]
    assert rows[-1][3] == "DDPStrategy" and all(r[4] and r[5] for r in rows)


def test_paper_dry_run_prints_the_paper_commands_and_each_parses(tmp_path):
    out = subprocess.run(
        [str(SCRIPT), "--paper", "--dry-run", str(tmp_path)],
        capture_output=True,
        text=True,
        env=_env(),
        check=True,
    ).stdout
    lines = {line.split("] ", 1)[0][1:]: line.split("] ", 1)[1] for line in out.splitlines()}
    assert set(lines) == {
        "paper_corpus",
        "paper_bench",
        "paper_ddp",
        *(f"paper_{s}_{v}" for s in ("120m", "343m") for v in ("block_attnres", "rd_attnres")),
    }
    parser = build_parser()
    bench = parser.parse_args(shlex.split(lines["paper_bench"])[3:])
    assert (bench.command, bench.size, bench.compile, bench.device) == ("bench", "120m", True, "cuda")
    assert bench.variant == ["block_attnres", "rd_attnres"] and not bench.precision_ratio
    for size in ("120m", "343m"):
        run = parser.parse_args(shlex.split(lines[f"paper_{size}_rd_attnres"])[3:])
        sets = dict(item.split("=") for item in run.set)
        # the paper's global batch, >= 20 optimiser steps, a 50,304-token BPE, micro-batches auto (probed)
        assert (run.size, sets["batch_tokens"], sets["vocab_size"]) == (size, "524288", "50304")
        assert run.budget_tokens // int(sets["batch_tokens"]) >= 20 and run.micro_batch_size is None
    ddp = parser.parse_args(shlex.split(lines["paper_ddp"])[3:])
    assert (ddp.devices, ddp.strategy, ddp.accelerator) == ("2", "ddp", "gpu")
    assert not (tmp_path / "summary.txt").read_text()  # nothing ran


@pytest.mark.slow  # 17 s on 2 cores: out of the developer's loop (`pytest -m "not slow"`)
def test_paper_cpu_fallback_trains_micro_batched_runs_and_says_pass_per_check(tmp_path):
    proc = subprocess.run(
        [str(SCRIPT), "--paper", "--cpu", str(tmp_path)],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=3600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = (tmp_path / "summary.txt").read_text().splitlines()
    assert [line.split(":")[0] for line in summary[:5]] == [
        "PASS preflight",
        "PASS paper_corpus",
        "PASS paper_bench",
        "PASS paper_tiny_block_attnres",
        "PASS paper_tiny_rd_attnres",
    ]
    checks = [line for line in summary if line.startswith(("PASS run ", "FAIL run "))]
    assert len(checks) == 2 and all(line.startswith("PASS") for line in checks), summary
    assert all("20 steps of 1,024 tokens, micro-batch 4, world size 1" in line for line in checks)
    assert any(line.startswith("INFO bench tiny block_attnres") for line in summary)


def _fake_nvidia_smi(folder: Path, gpus: int) -> Path:
    """An ``nvidia-smi`` printing the recorded outputs of a node with the first ``gpus`` GPUs of
    :data:`MIG_L` (MIG instances included) for -L, the uuid query and the name query."""
    lines = MIG_L[: 3 if gpus == 1 else len(MIG_L)] if gpus else []
    (folder / "L.txt").write_text("".join(line + "\n" for line in lines))
    (folder / "uuid.txt").write_text("".join(u + "\n" for u in UUIDS[:gpus]))
    (folder / "name.txt").write_text(f"{H200}\n" * gpus)
    fake = folder / "nvidia-smi"
    fake.write_text(
        "#!/usr/bin/env bash\n"
        f'case "$*" in\n  -L) cat {folder}/L.txt ;;\n'
        f"  *--query-gpu=uuid*) cat {folder}/uuid.txt ;;\n  *--query-gpu=name*) cat {folder}/name.txt ;;\n"
        '  *) echo "fake nvidia-smi: $*" >&2; exit 1 ;;\nesac\n'
    )
    fake.chmod(0o755)
    return fake


@pytest.mark.parametrize(
    ("gpus", "visible", "ddp_devices"),
    [(1, None, None), (2, None, "2"), (2, "0", None), (2, "0,1", "2"), (0, None, None)],
)
def test_paper_check_counts_physical_gpus_not_mig_lines(tmp_path, gpus, visible, ddp_devices):
    """One H200 with 2 MIG instances is 1 GPU (no DDP run) though `nvidia-smi -L` prints 3 lines;
    2 GPUs give a 2-rank DDP run; $CUDA_VISIBLE_DEVICES caps the count."""
    fake = _fake_nvidia_smi(tmp_path, gpus)
    L = subprocess.run([str(fake), "-L"], capture_output=True, text=True, check=True).stdout
    assert len(L.splitlines()) == {0: 0, 1: 3, 2: 5}[gpus]  # what the old count (`-L | wc -l`) saw
    env = {**_env(), "NVIDIA_SMI": str(fake)}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    if visible is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible
    proc = subprocess.run(
        [str(SCRIPT), "--paper", "--dry-run", str(tmp_path / "out")], capture_output=True, text=True, env=env
    )
    assert proc.returncode == 0, proc.stderr
    lines = {line.split("] ", 1)[0][1:]: line.split("] ", 1)[1] for line in proc.stdout.splitlines()}
    if ddp_devices is None:
        assert "paper_ddp" not in lines
        count = min(gpus, len(visible.split(","))) if visible else gpus
        assert f"[paper_ddp] skipped: {count} GPU visible" in proc.stderr
    else:
        ddp = build_parser().parse_args(shlex.split(lines["paper_ddp"])[3:])
        assert (ddp.devices, ddp.strategy) == (ddp_devices, "ddp")


def _wheelhouse(tmp_path: Path) -> Path:
    """A wheelhouse as scripts/wheelhouse.sh leaves it, for this Python: the project's wheel (found
    by name; nothing here installs it) and the dependency list."""
    wheelhouse = tmp_path / "wheelhouse"
    wheelhouse.mkdir()
    (wheelhouse / "rd_harness-0.1.0-py3-none-any.whl").write_bytes(b"")
    (wheelhouse / f"requirements-cp{sys.version_info[0]}{sys.version_info[1]}.txt").write_text(
        "numpy==2.3.5\n"
    )
    return wheelhouse


def test_paper_check_installs_offline_from_a_wheelhouse_keeping_the_torch_present(tmp_path):
    """With a wheelhouse, the first phase is an offline pip install (no index, PIP_NO_INDEX=1,
    --no-deps) of the wheelhouse's list for this Python and the project's wheel: torch is never
    named or resolved, so the machine's keeps its version whatever its version string."""
    wheelhouse = _wheelhouse(tmp_path)
    out = tmp_path / "out"
    env = {**_env(), "WHEELHOUSE": str(wheelhouse), "NVIDIA_SMI": "/nonexistent/nvidia-smi"}
    proc = subprocess.run(
        [str(SCRIPT), "--paper", "--dry-run", str(out)], capture_output=True, text=True, env=env, check=True
    )
    install = shlex.split(proc.stdout.splitlines()[0].split("] ", 1)[1])
    assert proc.stdout.startswith("[paper_install] ")
    assert install[:6] == ["env", "PIP_NO_INDEX=1", sys.executable, "-m", "pip", "install"]
    assert install[install.index("--find-links") + 1] == str(wheelhouse)
    assert {"--no-index", "--no-deps"} <= set(install) and not any("torch" in a for a in install)
    reqs = wheelhouse / f"requirements-cp{sys.version_info[0]}{sys.version_info[1]}.txt"
    assert install[install.index("-r") + 1] == str(reqs)
    assert install[-1] == str(wheelhouse / "rd_harness-0.1.0-py3-none-any.whl")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--python", "3.10", "wh"],
            "--python '3.10': expected a CPython version X.Y >= 3.11 (requires-python), e.g. 3.12",
        ),
        (
            ["--python", "python3.12", "wh"],
            "--python 'python3.12': expected a CPython version X.Y >= 3.11 (requires-python), e.g. 3.12",
        ),
        (["--python"], "--python needs a version X.Y, e.g. --python 3.12"),
        (["--wheels", "wh"], "unknown option '--wheels'; allowed: --python X.Y, -h"),
        (["--python", "3.12", "a", "b"], "one DIR at most, got: a b"),
    ],
)
def test_wheelhouse_refuses_bad_arguments_in_one_line(tmp_path, args, message):
    """A bad --python, an unknown option or two folders: exit 2, one line naming the value and
    what is allowed, and nothing made (no network used: the checks come before pip)."""
    proc = subprocess.run([str(WHEELHOUSE), *args], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert (proc.returncode, proc.stderr) == (2, f"wheelhouse.sh: {message}\n")
    assert not any(tmp_path.iterdir())  # refused before DIR (relative to the cwd) was made


# -- issue 44 row 6: bounded calls, the preflight, shellcheck ------------------------------------


def _preflight(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(SCRIPT), *args, "--preflight", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        env={**_env(), **env},
        timeout=900,  # the preflight imports torch (> 60 s on a CPU shared by 20 processes)
    )


def test_the_script_passes_shellcheck():
    """shellcheck (installed by .ci/run) finds nothing: no unquoted expansion, no unbound use."""
    proc = subprocess.run(["shellcheck", str(SCRIPT)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_no_array_is_expanded_bare_where_bash_before_4_4_calls_an_empty_one_unbound():
    """Under `set -u`, bash < 4.4 calls "${A[@]}" of an empty array unbound: an array that may be
    empty (MICRO on a GPU, DDP on one GPU) is expanded as ${A[@]+"${A[@]}"}."""
    text = SCRIPT.read_text()
    for name in ("MICRO", "DDP"):
        assert f'${{{name}[@]+"${{{name}[@]}}"}}' in text
        bare = text.replace(f'${{{name}[@]+"${{{name}[@]}}"}}', "")
        assert f'"${{{name}[@]}}"' not in bare, name
    assert "timeout -k" in text and ' timeout "$limit"' not in text  # every phase: SIGKILL after SIGTERM


@pytest.mark.slow
def test_a_hanging_nvidia_smi_on_path_is_cut_by_its_timeout_and_named(tmp_path):
    fake = tmp_path / "bin" / "nvidia-smi"
    fake.parent.mkdir()
    fake.write_text("#!/usr/bin/env bash\nsleep 60\n")
    fake.chmod(0o755)
    env = {"PATH": f"{fake.parent}:{os.environ['PATH']}", "NVIDIA_SMI_TIMEOUT": "2"}
    proc = _preflight(tmp_path, "--paper", **env)
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == ["FAIL preflight: nvidia-smi did not answer within 2 s (exit 124)"]
    assert (tmp_path / "out" / "summary.txt").read_text() == proc.stderr


@pytest.mark.slow
def test_an_answering_nvidia_smi_without_cuda_in_torch_names_that(tmp_path):
    fake = _fake_nvidia_smi(tmp_path, 1)
    proc = _preflight(tmp_path, "--paper", PATH=f"{fake.parent}:{os.environ['PATH']}")
    assert proc.returncode == 1
    assert proc.stderr.startswith("FAIL preflight: torch ") and "sees no CUDA device" in proc.stderr


def test_a_python_without_pip_is_named_before_anything_runs(tmp_path):
    venv = tmp_path / "nopip"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    proc = _preflight(tmp_path, "--paper", "--cpu", PYTHON=str(py), WHEELHOUSE=str(_wheelhouse(tmp_path)))
    assert proc.returncode == 1
    assert proc.stderr.startswith(f"FAIL preflight: no pip in {py} (needed to install from ")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["summary.txt"]  # nothing else ran


@pytest.mark.parametrize(
    ("version", "warn"),
    [("2.5.0a0+872d972e41", True), ("2.11.0a0+git6c8c5ad", False), ("2.13.0+cu128", False)],
)
def test_an_ngc_torch_version_is_accepted(tmp_path, version, warn):
    """NGC containers' torch says 2.x.0a0+<commit>: the preflight accepts it (a WARN line below 2.11,
    the oldest tested) and the install never resolves torch (test above)."""
    fake = tmp_path / "site"
    (fake / "torch").mkdir(parents=True)
    (fake / "torch" / "__init__.py").write_text(f"__version__ = {version!r}\n")
    info = fake / f"torch-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n")
    proc = _preflight(
        tmp_path, "--paper", "--cpu", PYTHONPATH=str(fake), WHEELHOUSE=str(_wheelhouse(tmp_path))
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert lines[0].startswith(f"PASS preflight: {sys.executable}, torch {version}, pip (installing from ")
    expect = (
        [f"WARN preflight: torch {version} is older than 2.11, the oldest tested; going on"] if warn else []
    )
    assert lines[1:] == expect
