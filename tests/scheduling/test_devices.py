"""One GPU per worker (harness.scheduling.workers.devices, DESIGN section 11), on the CPU with fake device lists.

The locks are real ``flock`` files in a temporary folder, taken by this process and by a
second, real process; no GPU is touched (``CUDA_VISIBLE_DEVICES`` names the fake devices).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli import main as cli
from harness.scheduling.workers.devices import (
    DeviceClaim,
    NoFreeDevice,
    assign,
    gpu_uuids,
    lock_key,
    parse_gpus,
    visible_devices,
)
from harness.scheduling.workers.start import worker_devices

ROOT = Path(__file__).resolve().parents[2]


def test_eight_workers_on_an_eight_gpu_node_each_take_their_own_device(tmp_path):
    node = [str(i) for i in range(8)]
    claims = [DeviceClaim(node, 1, tmp_path) for _ in range(8)]
    assert [c.devices for c in claims] == [[d] for d in node]
    with pytest.raises(
        NoFreeDevice, match=r"1 free GPU\(s\) needed, but only 0 of 0, 1, .*, 7 are free .*--gpus"
    ):
        DeviceClaim(node, 1, tmp_path)
    claims[3].release()  # a worker stops: its device is free again
    assert DeviceClaim(node, 1, tmp_path).devices == ["3"]


def test_a_worker_of_several_ranks_takes_free_devices_and_skips_taken_ones(tmp_path):
    node = ["0", "1", "2", "3"]
    with DeviceClaim(node, 1, tmp_path) as first:
        assert first.devices == ["0"]
        with DeviceClaim(node, 2, tmp_path) as second:
            assert second.devices == ["1", "2"]
            with pytest.raises(NoFreeDevice, match=r"2 free GPU\(s\) needed, but only 1 of"):
                DeviceClaim(node, 2, tmp_path)
            assert DeviceClaim(node, 1, tmp_path).devices == ["3"]  # the failed claim let go of "3"


def test_a_device_locked_by_another_process_is_skipped_until_that_process_ends(tmp_path):
    hold = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from harness.scheduling.workers.devices import DeviceClaim; "
            f"c = DeviceClaim(['GPU-a', 'GPU-b'], 1, {str(tmp_path)!r}); print(c.devices[0], flush=True); time.sleep(600)",
        ],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert hold.stdout.readline().strip() == "GPU-a"
        assert DeviceClaim(["GPU-a", "GPU-b"], 1, tmp_path).devices == ["GPU-b"]
    finally:
        hold.kill()
        hold.wait()
    assert DeviceClaim(["GPU-a", "GPU-b"], 1, tmp_path).devices == [
        "GPU-a"
    ]  # a killed worker's lock goes with it


def test_visible_devices_and_gpus_option(tmp_path):
    assert visible_devices({"CUDA_VISIBLE_DEVICES": "4, 5"}) == ["4", "5"]
    assert visible_devices({}, count=3) == ["0", "1", "2"]
    assert visible_devices({"CUDA_VISIBLE_DEVICES": ""}, count=3) == []  # none visible, as CUDA reads it
    assert parse_gpus("0,1") == ["0", "1"] and parse_gpus("GPU-8f3a-11") == ["GPU-8f3a-11"]
    for bad, message in [
        ("0,,1", r"'' is not a device index"),
        ("a", r"'a' is not a device index"),
        ("1,1", "a device is named twice"),
    ]:
        with pytest.raises(ValueError, match=message):
            parse_gpus(bad)
    chosen, claim = assign("2,3", 2, folder=tmp_path, uuids={})  # asked for: shared locks
    assert chosen == ["2", "3"] and claim.devices == chosen
    claim.release()
    with pytest.raises(ValueError, match=r"--gpus 2,3 names 2 device\(s\) but --devices is 1"):
        assign("2,3", 1)


def test_work_sets_each_worker_its_own_cuda_visible_devices(tmp_path, monkeypatch):
    """What `harness work --accelerator gpu --devices 2` does before CUDA starts, twice on one
    4-GPU view: the second worker gets the other two devices; --gpus is taken as given."""
    monkeypatch.setenv("HARNESS_DEVICE_LOCKS", str(tmp_path))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    n, first = worker_devices("2", None, "gpu")
    assert (n, first.devices, os.environ["CUDA_VISIBLE_DEVICES"]) == (2, ["0", "1"], "0,1")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")  # the next worker's view of the node
    n, second = worker_devices(None, None, "gpu")
    assert (n, second.devices, os.environ["CUDA_VISIBLE_DEVICES"]) == (1, ["2"], "2")
    with pytest.raises(NoFreeDevice, match=r"--gpus: GPU 1 is taken by a worker of this host that chose it"):
        worker_devices(None, "1,3", "auto")  # the first worker's own device
    first.release()
    n, named = worker_devices(None, "1,3", "auto")  # --gpus takes the same locks, shared
    assert n == 2 and named.devices == ["1", "3"] and os.environ["CUDA_VISIBLE_DEVICES"] == "1,3"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    assert worker_devices("3", None, "cpu") == (3, None)  # no GPU: nothing claimed
    named.release()
    second.release()


def test_work_refuses_gpus_and_devices_that_disagree_and_a_node_without_free_gpus_in_one_line(
    tmp_path, capsys, monkeypatch
):
    (tmp_path / "r").mkdir()  # an existing results folder: the device check is what refuses
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")  # a GPU node's view
    assert cli(["work", "--results", str(tmp_path / "r"), "--gpus", "0,1", "--devices", "3"]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        err == "harness work: error: --gpus 0,1 names 2 device(s) but --devices is 3: each run trains on all "
        "of the worker's devices"
    ), err
    monkeypatch.setenv("HARNESS_DEVICE_LOCKS", str(tmp_path / "locks"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    with DeviceClaim(["0"], 1, tmp_path / "locks"):  # another worker holds the only GPU
        assert cli(["work", "--results", str(tmp_path / "r"), "--accelerator", "gpu"]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        err.startswith("harness work: error: 1 free GPU(s) needed, but only 0 of 0 are free")
        and "\n" not in err
    )


# nvidia-smi --query-gpu=index,uuid --format=csv,noheader, in two SLURM jobs of one node whose device
# cgroups each show one GPU as index 0, and on the whole node
JOB_A = "0, GPU-5a1e0c2b-0000-4000-8000-00000000000a\n"
JOB_B = "0, GPU-5a1e0c2b-0000-4000-8000-00000000000b\n"
NODE = JOB_A + "1, GPU-5a1e0c2b-0000-4000-8000-00000000000b\n"


def test_locks_are_keyed_by_the_gpus_uuid_so_two_jobs_that_each_see_device_0_do_not_collide(tmp_path):
    a, b = gpu_uuids(JOB_A), gpu_uuids(JOB_B)
    assert a == {"0": "GPU-5a1e0c2b-0000-4000-8000-00000000000a"} and gpu_uuids("") == {}
    assert gpu_uuids("No devices were found\n") == {}  # nvidia-smi's words on a node without GPUs
    assert lock_key("0", a) != lock_key("0", b) and lock_key("MIG-1f/2", a) == "MIG-1f_2"
    with DeviceClaim(["0"], 1, tmp_path, uuids=a) as first:  # job A's worker
        second = DeviceClaim(["0"], 1, tmp_path, uuids=b)  # job B's worker: another GPU, also "0"
        assert first.devices == second.devices == ["0"]
        assert sorted(p.name for p in tmp_path.iterdir()) == [
            "gpu-GPU-5a1e0c2b-0000-4000-8000-00000000000a.lock",
            "gpu-GPU-5a1e0c2b-0000-4000-8000-00000000000b.lock",
        ]
        node = gpu_uuids(NODE)  # a worker that sees the whole node: index 1 is job B's GPU, taken
        with pytest.raises(NoFreeDevice, match=r"1 free GPU\(s\) needed, but only 0 of 1 are free"):
            DeviceClaim(["1"], 1, tmp_path, uuids=node)
        with pytest.raises(
            NoFreeDevice, match=r"GPU 1 \(GPU-5a1e0c2b-0000-4000-8000-00000000000b\) is taken"
        ):
            assign("1", 1, folder=tmp_path, uuids=node)  # --gpus 1 takes the same lock
        second.release()
        chosen, named = assign("1", 1, folder=tmp_path, uuids=node)  # now free: --gpus shares it
        also = assign("1", 1, folder=tmp_path, uuids=node)[1]  # another worker naming it too
        with pytest.raises(NoFreeDevice, match=r"only 0 of 1 are free"):
            DeviceClaim(["1"], 1, tmp_path, uuids=node)  # a worker choosing for itself skips it
        assert chosen == named.devices == also.devices == ["1"]
        named.release()
        also.release()


def test_lock_files_and_their_folder_are_usable_by_every_user_of_the_host_whatever_the_umask(tmp_path):
    """A second Unix user on a shared node opens (and so flocks) the same lock files: the folder is
    world-writable and sticky as /tmp (1777), each lock 0666, though the umask (022) narrows both."""
    old = os.umask(0o022)
    try:
        folder = tmp_path / "locks"
        with (
            DeviceClaim(["0", "1"], 2, folder, uuids={"0": "GPU-aaaa"}),
            DeviceClaim(["2"], 1, folder, uuids={}, named=True),
        ):
            assert oct(folder.stat().st_mode & 0o7777) == oct(0o1777)
            locks = sorted(p.name for p in folder.iterdir())
            assert locks == ["gpu-1.lock", "gpu-2.lock", "gpu-GPU-aaaa.lock"]
            assert {oct(p.stat().st_mode & 0o7777) for p in folder.iterdir()} == {oct(0o666)}
        folder.chmod(0o755)  # a folder an older version made: its owner's next worker fixes it
        (folder / "gpu-1.lock").chmod(0o644)
        with DeviceClaim(["1"], 1, folder, uuids={}):
            assert oct(folder.stat().st_mode & 0o7777) == oct(0o1777)
            assert oct((folder / "gpu-1.lock").stat().st_mode & 0o7777) == oct(0o666)
    finally:
        os.umask(old)
