"""A grid's corpus in the queue (harness/corpus/locate.py): recorded by fingerprint, re-pointed
only to the same text, and looked for by each worker; a corpus that is not there gives the run back
without a retry or an attempt spent. Fast: stand-in training, a real journal queue, real text.

    python -m pytest -q tests/corpus/test_locate.py
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from harness.common.faults import CorpusMissing
from harness.corpus.fingerprint import corpus_fingerprint
from harness.corpus.locate import CorpusLocator
from harness.corpus.readers import read_documents
from harness.scheduling.queue.run_queue import RunQueue
from harness.scheduling.workers.loop import work

from queue_stubs import configs

SAMPLE = Path(__file__).resolve().parents[3] / "shared/data/fineweb_edu_sample"
MISC = SAMPLE / "fineweb_edu_misc6.jsonl"  # the smallest file of the sample: a text of its own


def _state(queue: RunQueue) -> list[tuple[str, int, int]]:
    return [
        (r.state, r.attempt, r.trials[-1].user_attrs.get("failures", 0)) for r in queue.runs("g").values()
    ]


def test_a_missing_corpus_gives_the_run_back_with_its_attempt_and_no_retry(tmp_path):
    corpus = tmp_path / "here" / "misc.jsonl"
    corpus.parent.mkdir()
    shutil.copyfile(MISC, corpus)
    queue = RunQueue.open(None, tmp_path / "results")
    queue.enqueue(configs(seeds=(0,), variants=("block_attnres", "rd_attnres"), corpus=str(corpus)))
    fp = corpus_fingerprint(read_documents(str(corpus)))
    queue.bind_corpus("g", fp, "misc.jsonl", None)
    corpus.unlink()  # the corpus went away (another machine, a moved folder)
    trained = []
    with pytest.raises(CorpusMissing) as err:
        work(
            queue,
            lambda c, r: trained.append(c) or "done",
            tmp_path / "results",
            log=lambda line: None,
            corpus=CorpusLocator(None, None),
        )
    line = str(err.value)
    assert "\n" not in line and f"fingerprint {fp}" in line and f"not found at {corpus}" in line
    assert "harness work --corpus PATH" in line and "no retry spent" in line
    assert trained == [] and _state(queue) == [("queued", 1, 0)] * 2

    # the same text at another path, given to the worker: both runs train there
    moved = tmp_path / "there" / "renamed.jsonl"
    moved.parent.mkdir()
    shutil.copyfile(MISC, moved)
    work(
        queue,
        lambda c, r: trained.append(c.corpus) or "done",
        tmp_path / "results",
        log=lambda line: None,
        corpus=CorpusLocator(str(moved), None),
    )
    assert trained == [str(moved)] * 2 and [s for s, _, _ in _state(queue)] == ["done"] * 2


def test_another_text_is_refused_by_fingerprint_and_the_same_text_re_points(tmp_path):
    queue = RunQueue.open(None, tmp_path / "results")
    queue.enqueue(configs(seeds=(0,), corpus=str(SAMPLE)))
    fp = corpus_fingerprint(read_documents(str(SAMPLE)))
    queue.bind_corpus("g", fp, "fineweb_edu_sample", str(SAMPLE))
    with pytest.raises(ValueError, match=f"fingerprint {fp[:16]}; this corpus has fingerprint "):
        queue.bind_corpus("g", "0" * 64, "other", "/elsewhere")
    assert queue.corpus_of("g") == {"fingerprint": fp, "name": "fineweb_edu_sample", "path": str(SAMPLE)}
    moved = configs(seeds=(0,), corpus="/mnt/copy/fineweb_edu_sample")  # the same runs, another path
    with pytest.raises(ValueError, match="differs in corpus"):
        queue.enqueue(moved)  # by path: a clash
    assert queue.enqueue(moved, same_corpus=True).present == [
        c.run_id for c in moved
    ]  # by fingerprint: the same
