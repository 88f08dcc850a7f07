"""The results folder's id (``RESULTS/.harness-id``) is published whole: workers starting together on one
new folder agree on it (CI once saw the second of two workers read the first one's id file while it was
still empty, and later stop with "results folder replaced by another folder")."""

from __future__ import annotations

import multiprocessing as mp

from harness.common.files import RESULTS_ID_NAME, results_id


def _create(folder: str, barrier, out) -> None:
    barrier.wait()
    out.put(results_id(folder, create=True))


def test_processes_creating_one_folders_id_at_once_all_get_the_same_id(tmp_path):
    ctx = mp.get_context("fork")
    for attempt in range(20):  # the window is microseconds wide: race many fresh folders
        folder = tmp_path / f"results{attempt}"
        barrier, out = ctx.Barrier(6), ctx.Queue()
        procs = [ctx.Process(target=_create, args=(str(folder), barrier, out)) for _ in range(6)]
        for p in procs:
            p.start()
        ids = [out.get(timeout=60) for _ in procs]
        for p in procs:
            p.join(timeout=60)
            assert p.exitcode == 0
        on_disk = (folder / RESULTS_ID_NAME).read_text().strip()
        assert len(on_disk) == 32 and set(ids) == {on_disk}, (attempt, ids, on_disk)
        assert sorted(q.name for q in folder.iterdir()) == [RESULTS_ID_NAME]  # no temporary left


def test_an_id_file_is_never_visible_empty_while_it_is_written(tmp_path, monkeypatch):
    """The id file appears with its content: a reader polling for it never reads "" (the link is atomic)."""
    seen = []
    real_link = __import__("os").link

    def link_and_look(src, dst, *a, **k):
        seen.append(open(src).read())  # what the link publishes is already whole
        real_link(src, dst, *a, **k)
        seen.append(open(dst).read())

    monkeypatch.setattr("os.link", link_and_look)
    rid = results_id(tmp_path / "r", create=True)
    assert seen == [rid + "\n", rid + "\n"] and results_id(tmp_path / "r") == rid


def test_without_hard_links_the_id_is_created_exclusively(tmp_path, monkeypatch):
    import errno
    import os

    def no_links(*a, **k):
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    first = results_id(tmp_path / "r", create=True)
    assert first and results_id(tmp_path / "r", create=True) == first
    assert sorted(q.name for q in (tmp_path / "r").iterdir()) == [RESULTS_ID_NAME]
