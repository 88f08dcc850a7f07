"""Every checked-in grid keeps its protocol hashes (DESIGN section 4): refactoring a run's settings
(the corpus key, where execution settings live) must not re-pair a study.

For each grid in ``ablations/``, every run's protocol is computed from its queued
:class:`~harness.design.config.RunConfig` as the runner does (training settings, the model built with the
corpus key's vocabulary, the evaluation windows, the budget), with a fixed corpus description and
torch version (they come from the prepared corpus and the machine, not from the grid). The
known values were recorded on main at 0ab9ba5, before :meth:`RunConfig.corpus_key` existed: per
grid, the number of runs and the sha256 of the lines ``<run id> <protocol hash>``.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from harness.corpus.key import CorpusKey
from harness.data.tokenizer import most_ids
from harness.scheduling.grids.grid import load_grid
from harness.train.protocol import protocol_dict, protocol_hash

ABLATIONS = Path(__file__).resolve().parents[2] / "ablations"
DATA = {"fingerprint": "f" * 64, "format": 1, "tokenizer": {"name": "bpe"}}

KNOWN = {
    "quickstart_tiny.toml": (9, "51e3ae0b64b0ab849a153319a51244b1120b874c70021e41f0d90a3f55e17be9"),
    "rd_controls_mini.toml": (18, "ddec19279b60a295322b504bd5fc1ba6577d4a13b0c8ca1a0de342266d7759be"),
    "rd_controls_seq.toml": (18, "90a14c8825d78180213b04a41ac032bff651536a00b6be79f2e8124ecc3b435d"),
    "rd_controls_small.toml": (18, "f8373e1541473949346fc449bc7a3dfa2ef394335213c5f7ca0fee22bca8ae11"),
    "rd_cost_study.toml": (108, "00c242daf2af48da5a48d57eed4ae293023c993d44d89fd5b4319f25e109c663"),
    "rd_cpu_study.toml": (48, "8def4085b51e671dd67efc9913b74055930c5190b221b2a516c6e6de61fdd508"),
    "rd_factorial_study.toml": (48, "2b43609ce00db56bc3449dd3bcc2dd8c6b9abe11c45f20d24f61263b368fc4e3"),
    "rd_paper.toml": (80, "3a2f2b78fbb6ddad65922e816799e83139720d1e714f434e868896e456c9a06a"),
    "report_sample.toml": (18, "2bb44f9c12736ffc5fcb4ab88a0fc994d129a31910c12936e45425eaa7ac1c92"),
}


def grid_hashes(path: Path) -> list[str]:
    """``<run id> <protocol hash>`` for every run of the grid at ``path``, in queue order."""
    lines = []
    for config in load_grid(path).expand("/corpus"):
        key, train = config.corpus_key(), config.train_config()
        model = config.model_config(most_ids(key))
        protocol = protocol_dict(
            config,
            data_meta=DATA,
            model=model,
            eval_windows=train.eval_tokens // model.context,
            precision="32-true",
        )
        protocol["torch"] = "pinned"  # the machine's, not the grid's
        lines.append(f"{config.run_id} {protocol_hash(protocol)}")
    return lines


def test_every_checked_in_grid_is_known():
    assert sorted(p.name for p in ABLATIONS.glob("*.toml")) == sorted(KNOWN)


@pytest.mark.parametrize("name", sorted(KNOWN))
def test_protocol_hashes_of_every_run_are_unchanged(name):
    lines = grid_hashes(ABLATIONS / name)
    digest = hashlib.sha256("\n".join(lines).encode()).hexdigest()
    assert (len(lines), digest) == KNOWN[name]


def test_a_corpus_prepared_by_main_keeps_its_folder():
    """The key names the same shard folder as ``shard_dir`` did on main at 0ab9ba5 (values recorded
    there), so a corpus `harness prepare` made before the key existed is found, not rebuilt."""
    local = CorpusKey("/corpus/a.jsonl", "bpe", 512, 0.05, None)
    hub = CorpusKey("hf:HuggingFaceFW/fineweb-edu:sample-10BT", "gpt2", 50304, 0.01, 2000)
    assert local.folder(Path("/c")) == Path("/c/corpora/shards-bpe-c6964d72fafb2e9599469641a91cbcdb")
    assert hub.folder(Path("/c")) == Path("/c/corpora/shards-gpt2-6610b0ada9c111df4a52931838761a5e")


def test_a_runs_disk_space_counts_the_vocabulary_its_tokenizer_will_have():
    """A gpt2 run of a preset whose own vocabulary is smaller (tiny: 1,024) needs room for gpt2's
    50,257 ids padded to 50,304: the tied embedding's extra rows, in every checkpoint copy."""
    from harness.design.config import RunConfig
    from harness.train.checkpoint import CHECKPOINT_BYTES_PER_PARAM, CHECKPOINT_COPIES, space_needed

    bpe = RunConfig.create("block_attnres", "tiny", 0, 4096, "/c")
    gpt2 = RunConfig.create("block_attnres", "tiny", 0, 4096, "/c", train={"tokenizer": "gpt2"})
    extra_params = (50304 - 1024) * 64  # rows x d_model of tiny
    assert (
        space_needed(gpt2) - space_needed(bpe)
        == CHECKPOINT_COPIES * CHECKPOINT_BYTES_PER_PARAM * extra_params
    )
