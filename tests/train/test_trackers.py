"""Live curves in the trackers' own files (harness/train/trackers.py), with their real clients and no network.

One tiny run on the FineWeb-Edu sample streams to TensorBoard, MLflow (the default SQLite store),
W&B (offline mode) and CSV; each tracker's own reader then finds the validation NLL that DuckDB
holds (equal to float32 precision: TensorBoard stores float32) at the same steps, and the run's
protocol hash among its hyper-parameters. A second run with the MLflow server down finishes
``done`` with one warning. Loggers never enter the protocol hash. ~40 s on 2 CPU cores:

    python -m pytest -q tests/train/test_trackers.py
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import time
import warnings
from pathlib import Path

import duckdb
import numpy as np
import pytest
import torch

from harness.design.config import RunConfig, train_keys
from harness.design.train_table import execution_overrides, parse_value
from harness.train import train_run
from harness.train.execution import ExecutionSettings
from harness.train.protocol import protocol_dict
from harness.train.trackers import routing_metrics

SAMPLE = Path(__file__).resolve().parents[3] / "shared/data/fineweb_edu_sample"
TRAIN = {"vocab_size": 512, "batch_tokens": 1024, "eval_tokens": 2048, "lr": 3e-3, "eval_every_tokens": 2048}
BUDGET = 6 * 1024


@pytest.fixture(scope="module")
def tracked(tmp_path_factory):
    """One run streamed to every tracker; ``(results folder, config, DuckDB val NLL rows, protocol hash)``."""
    assert SAMPLE.is_dir(), f"sample corpus {SAMPLE} absent"
    results = tmp_path_factory.mktemp("tracked")
    env = {"WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_DISABLE_GIT": "true"}
    saved = {k: os.environ.get(k) for k in [*env, "MLFLOW_TRACKING_URI", "WANDB_DIR"]}
    os.environ.update(env)
    for k in ("MLFLOW_TRACKING_URI", "WANDB_DIR"):
        os.environ.pop(k, None)
    torch.set_num_threads(1)
    config = RunConfig.adhoc(
        "rd_attnres",
        "tiny",
        0,
        BUDGET,
        str(SAMPLE),
        train={**TRAIN, "loggers": ["tensorboard", "mlflow", "wandb"]},
    )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", UserWarning)  # no tracker may have failed here
            warnings.filterwarnings("ignore", message="(?!logger )")  # ... other libraries' warnings aside
            assert train_run(config, results, ExecutionSettings(progress=False, loggers=("csv",))) == "done"
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
    con = duckdb.connect(str(results / "harness.duckdb"), read_only=True)
    try:
        val = con.execute(
            "select step, value from metrics where split = 'val' and name = 'nll' order by step"
        ).fetchall()
        (phash,) = con.execute("select protocol_hash from runs").fetchone()
    finally:
        con.close()
    assert len(val) == 3  # steps 2, 4, 6
    return results, config, val, phash


def _folder(run_id: str) -> str:
    """The run's folder name (its result file's name without .json: a file-safe, distinct name)."""
    from harness.store.validate import result_filename

    return result_filename(run_id)[:-5]


def _environment(results: Path, config) -> dict:
    """The environment record of the run's result file (harness/train/environment.py)."""
    from harness.store.runfile import read_result, result_path

    return read_result(result_path(results, config.run_id))["run"]["environment"]


@pytest.mark.slow
def test_tensorboard_event_files_hold_the_stored_val_nll(tracked):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    results, config, val, _ = tracked
    logdir = results / "tb" / config.grid / _folder(config.run_id)
    acc = EventAccumulator(str(logdir))
    acc.Reload()
    got = [(e.step, e.value) for e in acc.Scalars("val/nll")]
    assert got == [(step, float(np.float32(v))) for step, v in val]
    tags = acc.Tags()["scalars"]
    for tag in (
        "train/loss",
        "train/lr",
        "train/grad_norm",
        "train/tokens_per_s",
        "val/bpb",
        "routing/attn/L0/js_qk_v",
        "routing/attn/L1/qk/entropy",
    ):
        assert tag in tags, tags


@pytest.mark.slow
def test_mlflow_sqlite_store_lists_the_metric_and_the_protocol_hash(tracked):
    from mlflow.tracking import MlflowClient

    results, config, val, phash = tracked
    assert "MLFLOW_ALLOW_FILE_STORE" not in os.environ  # the harness opted nobody into the file store
    assert not (results / "mlruns").exists() and not Path("mlruns").exists()
    client = MlflowClient(tracking_uri=f"sqlite:///{results.resolve()}/mlflow.db")
    experiment = client.get_experiment_by_name(config.grid)
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.run_name == config.run_id
    got = sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, "val/nll"))
    assert got == [(step, v) for step, v in val]  # MLflow keeps float64: exact
    params = run.data.params
    assert params["protocol_hash"] == phash and params["seed"] == "0" and params["role"] == config.role
    env = _environment(results, config)  # the hardware class and commit: run tags and parameters
    assert run.data.tags["hardware"] == params["hardware"] == env["hardware"]
    assert run.data.tags["code_version"] == env["code_version"]
    assert params["environment.cpu.torch_capability"] == env["cpu"]["torch_capability"]


def _wandb_records(path: Path):
    """The protobuf records of a W&B transaction log (``run-ID.wandb``): a 7-byte header, then 32 KiB blocks
    of chunks (crc32, length, type: full/first/middle/last), the W&B client's own format."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B", data[:7]
    pos, block, pending = 7, 32768, b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a chunk header is padding
            pos += block - pos % block
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if length == 0 and kind == 0:
            break
        chunk = data[pos + 7 : pos + 7 + length]
        pending = chunk if kind in (1, 2) else pending + chunk
        pos += 7 + length
        if kind in (1, 4):
            rec = wandb_internal_pb2.Record()
            rec.ParseFromString(pending)
            yield rec


@pytest.mark.slow
def test_wandb_offline_run_history_holds_the_stored_val_nll(tracked):
    results, config, val, phash = tracked
    (log,) = list((results / "wandb").glob("offline-run-*/run-*.wandb"))
    history, cfg, tags = [], {}, None
    for rec in _wandb_records(log):
        kind = rec.WhichOneof("record_type")
        if kind == "history":
            row = {(i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in rec.history.item}
            if "val/nll" in row:
                history.append((row["trainer/global_step"], row["val/nll"]))
        elif kind == "config":
            cfg.update({i.key: json.loads(i.value_json) for i in rec.config.update})
        elif kind == "run":
            tags = list(rec.run.tags)
            assert (rec.run.run_group, rec.run.display_name, rec.run.project) == (
                config.grid,
                config.run_id,
                "rd-harness",
            )
            cfg.update({i.key: json.loads(i.value_json) for i in rec.run.config.update})
    assert history == [(step, v) for step, v in val]
    assert cfg["protocol_hash"] == phash and cfg["seed"] == 0
    env = _environment(results, config)
    assert cfg["hardware"] == env["hardware"] and tags == [env["hardware"], env["code_version"]]


@pytest.mark.slow
def test_csv_logger_writes_the_curves(tracked):
    import polars as pl

    results, config, val, _ = tracked
    metrics = pl.read_csv(results / "csv" / config.grid / _folder(config.run_id) / "metrics.csv")
    rows = metrics.filter(pl.col("val/nll").is_not_null()).select("step", "val/nll").rows()
    assert rows == [(step, v) for step, v in val]


def test_a_tracker_that_fails_never_fails_the_run(tmp_path, monkeypatch):
    """MLflow's server down: one warning naming it, the run is done and stored."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9")  # the discard port: nothing listens
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "3")
    config = RunConfig.adhoc("block_attnres", "tiny", 0, 2048, str(SAMPLE), train={**TRAIN})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert train_run(config, tmp_path, ExecutionSettings(progress=False, loggers=("mlflow",))) == "done"
    ours = [str(w.message) for w in caught if str(w.message).startswith("logger mlflow")]
    assert len(ours) == 1 and "goes on without it" in ours[0], ours
    assert (tmp_path / "runs").is_dir() and list((tmp_path / "runs").glob("*.json"))


def test_loggers_are_outside_the_protocol_hash():
    with_loggers = RunConfig.adhoc(
        "rd_attnres", "tiny", 0, BUDGET, str(SAMPLE), train={**TRAIN, "loggers": ["wandb", "csv"]}
    )
    without = RunConfig.adhoc("rd_attnres", "tiny", 0, BUDGET, str(SAMPLE), train=TRAIN)
    args = dict(
        data_meta={"corpus": "x"}, model=without.model_config(512), eval_windows=4, precision="32-true"
    )
    assert protocol_dict(with_loggers, **args) == protocol_dict(without, **args)
    changed = RunConfig.adhoc("rd_attnres", "tiny", 0, BUDGET, str(SAMPLE), train={**TRAIN, "lr": 1e-3})
    assert protocol_dict(changed, **args) != protocol_dict(without, **args)  # the comparison can fail


@pytest.mark.parametrize(
    "value, message",
    [
        (["tensorbord"], "logger 'tensorbord' is not known; allowed: tensorboard, wandb, mlflow, csv"),
        ("wandb", "must be a list of names"),
    ],
)
def test_bad_logger_names_are_one_clear_line(value, message):
    with pytest.raises(ValueError, match=message):
        execution_overrides({"loggers": value})
    assert parse_value("loggers", "wandb, csv", train_keys()) == ("wandb", "csv")


def test_routing_rows_become_per_layer_metrics():
    rows = [
        dict(tokens=2048, layer=1, site="attn", route="qk", source=s, entropy=0.5, js_qk_v=0.25)
        for s in range(3)
    ] + [dict(tokens=2048, layer=1, site="attn", route="v", source=0, entropy=0.75, js_qk_v=0.25)]
    assert routing_metrics(rows) == {
        2048: {
            "routing/attn/L1/js_qk_v": 0.25,
            "routing/attn/L1/qk/entropy": 0.5,
            "routing/attn/L1/v/entropy": 0.75,
        }
    }


@pytest.mark.slow
def test_a_grid_drained_by_harness_work_streams_every_run(tmp_path, monkeypatch):
    """A grid with ``[train] loggers = ["tensorboard", "mlflow"]`` queued and drained by ``harness work
    --logger csv``: each run's TensorBoard folder (RESULTS/tb/GRID/RUN) and CSV file hold its stored
    validation NLL, and ``mlflow.search_runs`` in a fresh process with no MLFLOW_* variable set lists every
    run of the grid from the default store (RESULTS/mlflow.db) with its final validation NLL."""
    import polars as pl
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from harness.cli import main as cli
    from harness.scheduling.grids.grid import parse_grid
    from harness.scheduling.queue.run_queue import RunQueue

    for name in [k for k in os.environ if k.startswith("MLFLOW_")]:
        monkeypatch.delenv(name)
    results = tmp_path / "results"
    grid = parse_grid(
        {
            "name": "tracked",
            "corpus": str(SAMPLE),
            "sizes": ["tiny"],
            "seeds": [0],
            "budgets_tokens": [4096],
            "variants": {"block_attnres": "parent", "rd_attnres": "treatment"},
            "train": {**TRAIN, "loggers": ["tensorboard", "mlflow"]},
        }
    )
    RunQueue.open(None, results).enqueue(grid.expand())
    assert cli(["work", "--results", str(results), "--logger", "csv", "--quiet", "--threads", "1"]) == 0
    con = duckdb.connect(str(results / "harness.duckdb"), read_only=True)
    try:
        stored = con.execute(
            "select run_id, step, value from metrics where split = 'val' and name = 'nll' "
            "order by run_id, step"
        ).fetchall()
    finally:
        con.close()
    run_ids = sorted({r for r, _, _ in stored})
    assert run_ids == sorted(c.run_id for c in grid.expand())
    for rid in run_ids:
        want = [(s, v) for r, s, v in stored if r == rid]
        folder = _folder(rid)
        acc = EventAccumulator(str(results / "tb" / "tracked" / folder))
        acc.Reload()
        assert [(e.step, e.value) for e in acc.Scalars("val/nll")] == [
            (s, float(np.float32(v))) for s, v in want
        ]
        csv = pl.read_csv(results / "csv" / "tracked" / folder / "metrics.csv")
        assert csv.filter(pl.col("val/nll").is_not_null()).select("step", "val/nll").rows() == want
    # A reader as a user starts it: a new process, its environment free of MLflow settings, the store's URI.
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    reader = (
        "import json, sys, mlflow\n"
        "runs = mlflow.search_runs(experiment_names=['tracked'], output_format='list')\n"
        "print(json.dumps({r.info.run_name: r.data.metrics['val/nll'] for r in runs}))\n"
    )
    uri = f"sqlite:///{results.resolve()}/mlflow.db"
    out = subprocess.run(
        [sys.executable, "-c", f"import mlflow; mlflow.set_tracking_uri({uri!r})\n{reader}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    listed = json.loads(out.stdout.strip().splitlines()[-1])
    assert listed == {rid: [v for r, _, v in stored if r == rid][-1] for rid in run_ids}


# A worker's first tracker start, as `harness work` makes it (Trackers opens MLflow, logs one validation NLL and
# closes), in a fresh results folder per try; each try waits at a barrier until every process is ready for it,
# so that all of them meet the fresh store at once.
_WORKER = """
import json, sys, time, types, warnings
from pathlib import Path
import mlflow  # noqa: F401 -- loaded before the barrier, as a worker has it loaded before its first run
from harness.design.config import RunConfig
from harness.train.trackers import Trackers

root, seed, sample, tries = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
config = RunConfig.adhoc("rd_attnres", "tiny", seed, 2048, sample, train={"loggers": ["mlflow"]})
said = []
for attempt in range(tries):
    trackers = Trackers(("mlflow",), config, root / f"results{attempt}", protocol_hash=f"hash{seed}")
    (root / f"ready{attempt}-{seed}").touch()
    while not (root / f"go{attempt}").exists():
        time.sleep(0.002)
    lit = types.SimpleNamespace(
        records=[{"step": 1, "split": "val", "name": "nll", "value": 5.0 + seed}], routing_rows=[], batch_tokens=1024
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trackers._open()
        trackers.finish(lit, "done")
    said.append([str(w.message) for w in caught if str(w.message).startswith("logger ")])
print(json.dumps(said))
"""


@pytest.mark.slow
def test_concurrent_workers_on_a_fresh_mlflow_store_all_reach_it(tmp_path):
    """Issue 66 row 2: workers starting their first runs at once on a fresh results folder each reach the
    default SQLite store (its first-time schema migration runs once, under the results folder's lock); no
    worker warns, and MLflow's and Lightning's own lines ('Experiment ... not found. Creating it.') stay out
    of their output. Three processes released together from a barrier, three times over, each time on a
    fresh store (the old code lost a run in the first try: 'duplicate column name: step')."""
    from mlflow.tracking import MlflowClient

    workers, tries = 3, 3
    logs = {"loggers": ["mlflow"]}
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    for attempt in range(tries):
        (tmp_path / f"results{attempt}").mkdir()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WORKER, str(tmp_path), str(seed), str(SAMPLE), str(tries)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for seed in range(workers)
    ]
    try:
        for attempt in range(tries):
            for _ in range(150_000):  # ~300 s: the processes import torch and Lightning first
                ready = len(list(tmp_path.glob(f"ready{attempt}-*")))
                if ready == workers or any(p.poll() is not None for p in procs):
                    break
                time.sleep(0.002)
            (tmp_path / f"go{attempt}").touch()
        outs = [p.communicate(timeout=300) for p in procs]
    finally:
        for p in procs:
            p.kill() if p.poll() is None else None
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-2000:]
        assert json.loads(out.strip().splitlines()[-1]) == [[]] * tries, (out, err[-2000:])
        assert "Creating it" not in out + err and "Traceback" not in err, err[-2000:]
    want = sorted(
        (RunConfig.adhoc("rd_attnres", "tiny", s, 2048, str(SAMPLE), train=logs).run_id, 5.0 + s)
        for s in range(workers)
    )
    for attempt in range(tries):
        client = MlflowClient(
            tracking_uri=f"sqlite:///{(tmp_path / f'results{attempt}').resolve()}/mlflow.db"
        )
        runs = client.search_runs([client.get_experiment_by_name("adhoc").experiment_id])
        got = sorted((r.info.run_name, r.data.metrics["val/nll"]) for r in runs)
        assert got == want, (attempt, got)
