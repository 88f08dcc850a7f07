"""Tuning trials in the queue (DESIGN 9), with stub train functions: ask when a worker takes a
trial, tell its outcome, prune through the evaluation hook, retry with the drawn params; and a
queue journal of the previous layout (one study "harness"), read and converted."""

from __future__ import annotations

import json
import math
from collections import Counter

import optuna
import pytest
from optuna.trial import TrialState, create_trial

from harness.scheduling import tuning
from harness.scheduling.queue import legacy
from harness.scheduling.queue.run_queue import LEGACY_STUDY, RunQueue
from harness.scheduling.workers.loop import work

from queue_stubs import configs, new_queue, quiet


def study(queue: RunQueue, name="t", trials=3, pruner="median", seed=0) -> tuning.TuneSpec:
    spec = tuning.TuneSpec(
        name=name,
        variant="block_attnres",
        size="tiny",
        budget_tokens=4096,
        corpus="/c",
        trials=trials,
        space={"lr": "lr=log:0.0001:0.03", "warmup_frac": "warmup_frac=0.0:0.2"},
        train={"batch_tokens": 1024},
        seed=seed,
        pruner=pruner,
        startup_trials=2,
    )
    assert tuning.create_or_check(queue.storage, spec) == "created"
    queue.enqueue(spec.configs(), attrs={"tune_pending": True})
    return spec


def test_params_are_drawn_when_a_worker_takes_a_trial_and_kept_by_its_retry(tmp_path):
    q = new_queue(tmp_path)
    study(q)
    (waiting, *_) = [t for t in q.all_trials() if t.user_attrs["seed"] == 10_000]
    assert waiting.params == {} and waiting.user_attrs["tune_pending"] is True  # nothing drawn at enqueue
    claim = q.claim()
    drawn = claim.config.train
    assert set(drawn) == {"batch_tokens", "lr", "warmup_tokens"}
    (running,) = [t for t in q.all_trials() if t.state == TrialState.RUNNING]
    assert running.params["lr"] == drawn["lr"] and 1e-4 <= drawn["lr"] <= 3e-2
    assert drawn["warmup_tokens"] == max(1, round(running.params["warmup_frac"] * 4096))
    assert json.loads(running.user_attrs["config"])["train"] == drawn
    q.release(claim, "worker interrupted")  # the retry is a new trial of the same run...
    again = q.claim()
    assert again.run_id == claim.run_id and again.attempt == 2
    assert again.config.train == drawn  # ... with the params it drew (its checkpoint resumes with them)
    (retry,) = [t for t in q.all_trials() if t.state == TrialState.RUNNING]
    assert retry.params == running.params and retry.number != running.number


def test_trials_are_seeded_per_number_and_differ(tmp_path):
    drawn = []
    for i in range(2):
        q = new_queue(tmp_path / str(i))
        study(q, trials=2)
        a, b = q.claim(), q.claim()  # two workers asking at once, no trial finished yet
        drawn.append((a.config.train["lr"], b.config.train["lr"]))
    assert drawn[0] == drawn[1]  # the same seed draws the same points ...
    assert drawn[0][0] != drawn[0][1]  # ... and two trials drawn at once differ


def test_median_pruner_prunes_a_bad_trial_through_the_evaluation_hook(tmp_path):
    q = new_queue(tmp_path)
    study(q, trials=3)
    curves = {10_000: [3.0, 2.0, 1.0], 10_001: [3.2, 2.2, 1.2], 10_002: [9.0, 8.0, 7.0]}

    def train(config, results_dir, *, on_eval):
        for step, nll in enumerate(curves[config.seed], start=1):
            if step < 3 and on_eval(step, step * 1024, nll):
                return {"status": "pruned", "val_nll": nll}
        return {"status": "done", "val_nll": curves[config.seed][-1]}

    out = work(q, train, tmp_path, log=quiet)
    assert out == Counter(done=2, pruned=1)
    st = optuna.load_study(study_name="tune:t", storage=q.storage)
    states = {t.user_attrs["seed"]: t.state for t in st.trials}
    assert states == {10_000: TrialState.COMPLETE, 10_001: TrialState.COMPLETE, 10_002: TrialState.PRUNED}
    pruned = next(t for t in st.trials if t.state == TrialState.PRUNED)
    assert pruned.intermediate_values == {
        1: 9.0,
        2: 8.0,
    }  # pruned at half the run (step 2 of 4): 8.0 > median(2.0, 2.2)
    assert st.best_value == 1.0 and q.counts()["tune:t"]["pruned"] == 1
    assert {r.state for r in q.runs("tune:t").values()} == {"done", "pruned"}


def test_a_grid_run_gets_no_pruning_hook(tmp_path):
    q = new_queue(tmp_path)
    q.enqueue(configs(seeds=(0,)))
    seen = []
    work(q, lambda config, results_dir, **kw: seen.append(kw) or ("done", 2.0), tmp_path, log=quiet)
    assert seen == [{}, {}, {}]


# ----------------------------------------------------------------------------- previous layout


def _legacy_trial(config, state, **attrs):
    ua = {
        "run_id": config.run_id,
        "grid": config.grid,
        "config": json.dumps(config.to_dict(), sort_keys=True),
        "attempt": 1,
        "failures": 0,
        "reclaims": 0,
        "order": [0.0, 0],
        **attrs,
    }
    value = math.inf if state == TrialState.COMPLETE else None
    return create_trial(state=state, value=value, user_attrs=ua)


def test_previous_layout_is_converted_into_one_study_per_grid(tmp_path):
    q = new_queue(tmp_path)
    optuna.create_study(storage=q.storage, study_name=LEGACY_STUDY)
    a = configs(name="a", seeds=(0,))
    sid = q.storage.get_study_id_from_name(LEGACY_STUDY)
    q.storage.create_new_trial(sid, _legacy_trial(a[0], TrialState.COMPLETE, status="done", val_nll=None))
    q.storage.create_new_trial(sid, _legacy_trial(a[1], TrialState.COMPLETE, status="diverged", val_nll=None))
    q.storage.create_new_trial(sid, _legacy_trial(a[2], TrialState.WAITING))
    q = RunQueue(q.storage)
    lines = []
    assert legacy.convert(q, values={a[0].run_id: 4.5}.get, log=lines.append) == 3
    assert set(q.studies()) == {"a"}
    assert "3 trial(s) of study 'harness' copied into 1 studies" in lines[-1]
    st = optuna.load_study(study_name="a", storage=q.storage)
    by = {t.user_attrs["run_id"]: t for t in st.trials}
    assert (by[a[0].run_id].state, by[a[0].run_id].value) == (
        TrialState.COMPLETE,
        4.5,
    )  # value from the result
    assert by[a[1].run_id].state == TrialState.FAIL and by[a[1].run_id].user_attrs["status"] == "diverged"
    assert by[a[2].run_id].state == TrialState.WAITING  # still queued, now in its grid's study
    work(q, lambda c, r: ("done", 4.0), tmp_path, grid="a", log=quiet)
    assert {r: s.state for r, s in RunQueue(q.storage).runs("a").items()} == {
        a[0].run_id: "done",
        a[1].run_id: "diverged",
        a[2].run_id: "done",
    }
    assert legacy.convert(q, log=lines.append) == 0  # nothing left to convert


@pytest.mark.parametrize("cut", [1, 2])
def test_a_conversion_cut_short_is_finished_without_copying_twice(tmp_path, cut, monkeypatch):
    q = new_queue(tmp_path)
    optuna.create_study(storage=q.storage, study_name=LEGACY_STUDY)
    cfgs = configs(name="a", seeds=(0,))
    sid = q.storage.get_study_id_from_name(LEGACY_STUDY)
    for c in cfgs:
        q.storage.create_new_trial(sid, _legacy_trial(c, TrialState.COMPLETE, status="done", val_nll=3.0))
    real = q.storage.create_new_trial
    calls = []

    def dying(study_id, template_trial=None):
        if len(calls) == cut:
            raise OSError("process killed")
        calls.append(1)
        return real(study_id, template_trial=template_trial)

    monkeypatch.setattr(q.storage, "create_new_trial", dying)
    with pytest.raises(OSError):
        legacy.convert(q, log=quiet)
    monkeypatch.setattr(q.storage, "create_new_trial", real)
    fresh = RunQueue(q.storage)
    assert len(fresh.runs("a")) == cut  # the copies made before the cut
    assert legacy.convert(fresh, log=quiet) == 3 - cut
    st = optuna.load_study(study_name="a", storage=q.storage)
    assert sorted(t.user_attrs["converted_from"] for t in st.trials) == [0, 1, 2] and len(st.trials) == 3
