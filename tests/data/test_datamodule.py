"""Deterministic batches: order from (corpus, seed) only, resume, rank slices, validation set.

Run: ``python -m pytest -q tests/data/test_datamodule.py`` (CPU only, about 10 s; one test runs a
tiny Lightning fit). Uses the real FineWeb-Edu sample in ``../shared/data/fineweb_edu_sample``
(skipped where absent).
"""

from __future__ import annotations

import pickle
from pathlib import Path

import lightning as L
import numpy as np
import pytest
import torch

from harness.corpus.key import CorpusKey
from harness.data import prepare_corpus
from harness.data.datamodule import TokenDataModule, TrainBatches

SAMPLE = Path(__file__).resolve().parents[3] / "shared/data/fineweb_edu_sample"
T, B = 64, 8


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    if not SAMPLE.is_dir():
        pytest.skip(f"sample corpus {SAMPLE} absent")
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def prepared(cache):
    return prepare_corpus(CorpusKey(str(SAMPLE), "bpe", 512, 0.05, None), cache_dir=cache)


def _first_batches(dm: TokenDataModule, n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    it = iter(dm.train_dataloader())
    return [next(it) for _ in range(n)]


def _equal(a, b) -> bool:
    return all(torch.equal(x1, x2) and torch.equal(y1, y2) for (x1, y1), (x2, y2) in zip(a, b, strict=True))


def test_batches_match_independent_computation(prepared):
    dm = TokenDataModule(prepared, T, B, seed=3, eval_tokens=4096)
    tokens = np.asarray(prepared.tokens("train"), dtype=np.int64)
    n_windows = (len(tokens) - 1) // T
    assert dm.schedule.n_windows == n_windows and dm.schedule.batches_per_epoch == n_windows // B
    perm = np.random.default_rng([3, 0]).permutation(n_windows)
    for step, (x, y) in enumerate(_first_batches(dm, 3)):
        starts = perm[step * B : (step + 1) * B] * T
        expected = np.stack([tokens[s : s + T + 1] for s in starts])
        assert x.dtype == y.dtype == torch.int64 and x.shape == y.shape == (B, T)
        assert np.array_equal(x.numpy(), expected[:, :-1]) and np.array_equal(y.numpy(), expected[:, 1:])


def test_same_corpus_and_seed_give_identical_batches_whatever_the_global_rng(prepared, cache, tmp_path):
    torch.manual_seed(0)
    np.random.seed(0)
    first = _first_batches(TokenDataModule(prepared, T, B, seed=1, eval_tokens=4096), 20)
    # an independently prepared copy, after consuming the global RNGs by other amounts
    other = prepare_corpus(CorpusKey(str(SAMPLE), "bpe", 512, 0.05, None), cache_dir=tmp_path)
    assert other.dir != prepared.dir and other.meta["splits"] == prepared.meta["splits"]
    torch.manual_seed(12345)
    torch.randn(1000)
    np.random.seed(99)
    np.random.rand(777)
    second = _first_batches(TokenDataModule(other, T, B, seed=1, eval_tokens=4096), 20)
    assert _equal(first, second)
    different = _first_batches(TokenDataModule(prepared, T, B, seed=2, eval_tokens=4096), 20)
    assert sum(torch.equal(a[0], b[0]) for a, b in zip(first, different)) == 0


def test_resume_from_start_step_continues_the_uninterrupted_sequence(prepared):
    full = _first_batches(TokenDataModule(prepared, T, B, seed=0, eval_tokens=4096), 20)
    resumed = _first_batches(TokenDataModule(prepared, T, B, seed=0, eval_tokens=4096, start_step=7), 13)
    assert _equal(full[7:], resumed)


def test_epochs_wrap_with_a_fresh_permutation_and_no_window_repeats_within_an_epoch(prepared):
    big_batch = 256
    dm = TokenDataModule(prepared, T, big_batch, seed=0, eval_tokens=4096)
    per_epoch = dm.schedule.batches_per_epoch
    assert per_epoch == ((len(prepared.tokens("train")) - 1) // T) // big_batch
    epoch0 = np.concatenate([dm.schedule.window_starts(i) for i in range(per_epoch)])
    epoch1 = np.concatenate([dm.schedule.window_starts(i) for i in range(per_epoch, 2 * per_epoch)])
    assert len(np.unique(epoch0)) == len(epoch0) == per_epoch * big_batch
    assert not np.array_equal(epoch0, epoch1)
    perm1 = np.random.default_rng([0, 1]).permutation(dm.schedule.n_windows)
    assert np.array_equal(epoch1, perm1[: per_epoch * big_batch] * T)
    # resuming across the epoch boundary
    resumed = TokenDataModule(prepared, T, big_batch, seed=0, eval_tokens=4096, start_step=per_epoch - 1)
    it = iter(resumed.train_dataloader())
    for step in (per_epoch - 1, per_epoch, per_epoch + 1):
        assert torch.equal(next(it)[0], dm.train_batch(step)[0])


def test_rank_slices_rebuild_the_global_batch(prepared):
    dm = TokenDataModule(prepared, T, B, seed=5, eval_tokens=4096)
    for step in (0, 3, 11):
        x, y = dm.train_batch(step)
        parts = [dm.train_batch(step, rank=r, world_size=2) for r in (0, 1)]
        assert parts[0][0].shape == (B // 2, T)
        # rank r holds rows r, r + 2, ...: interleaving the slices gives the global batch
        assert torch.equal(torch.stack([p[0] for p in parts], dim=1).reshape(B, T), x)
        assert torch.equal(torch.stack([p[1] for p in parts], dim=1).reshape(B, T), y)
    streams = [iter(TrainBatches(dm.schedule, 4, rank=r, world_size=2)) for r in (0, 1)]
    x_r0, x_r1 = next(streams[0])[0], next(streams[1])[0]
    assert torch.equal(torch.cat([x_r0, x_r1]).sort(dim=0).values, dm.train_batch(4)[0].sort(dim=0).values)
    with pytest.raises(ValueError, match="batch_size=8 is not divisible by world_size=3"):
        dm.train_batch(0, rank=0, world_size=3)


def test_dataloader_workers_keep_the_order_and_the_dataset_pickles_small(prepared):
    single = _first_batches(TokenDataModule(prepared, T, B, seed=4, eval_tokens=4096), 6)
    multi = _first_batches(TokenDataModule(prepared, T, B, seed=4, eval_tokens=4096, num_workers=2), 6)
    assert _equal(single, multi)
    dataset = TrainBatches(TokenDataModule(prepared, T, B, seed=4, eval_tokens=4096).schedule)
    blob = pickle.dumps(dataset)
    assert len(blob) < 10_000  # the memmap is reopened, not copied
    assert torch.equal(next(iter(pickle.loads(blob)))[0], single[0][0])


def test_validation_set_is_fixed_first_windows_with_exact_target_bytes(prepared):
    eval_tokens = 5000  # -> 78 windows of 64
    dms = [TokenDataModule(prepared, T, B, seed=s, eval_tokens=eval_tokens) for s in (0, 1)]
    val = np.asarray(prepared.tokens("val"), dtype=np.int64)
    n = eval_tokens // T
    assert dms[0].n_val_windows == n and dms[0].val_target_tokens == n * T
    batches = [list(dm.val_dataloader()) for dm in dms]
    assert len(batches[0]) == -(-n // B)  # ceil
    assert _equal(batches[0], batches[1])  # same for every seed
    x = torch.cat([b[0] for b in batches[0]]).numpy()
    y = torch.cat([b[1] for b in batches[0]]).numpy()
    assert np.array_equal(x, val[: n * T].reshape(n, T))
    assert np.array_equal(y, val[1 : n * T + 1].reshape(n, T))
    token_bytes = prepared.token_bytes()
    assert dms[0].val_target_bytes() == int(token_bytes[y].sum())
    # whole split: the targets are every validation token but the first
    everything = TokenDataModule(prepared, T, B, seed=0, eval_tokens=10**9)
    assert everything.n_val_windows == (len(val) - 1) // T
    covered = everything.n_val_windows * T + 1
    assert everything.val_target_bytes() == prepared.meta["splits"]["val"]["bytes"] - int(
        token_bytes[val[0]] + token_bytes[val[covered:]].sum()
    )


def test_batches_are_contiguous_so_a_pinned_copy_needs_no_temporary(prepared):
    """x and y are cut from one [B, T + 1] window tensor: as views they would be strided (stride T + 1),
    and a pinned, non-blocking host-to-GPU copy of a strided tensor goes through an unpinned temporary."""
    dm = TokenDataModule(prepared, T, B, seed=0, eval_tokens=4096)
    batches = [*_first_batches(dm, 2), dm.train_batch(1, rank=1, world_size=2), *list(dm.val_dataloader())]
    for x, y in batches:
        assert x.is_contiguous() and y.is_contiguous() and x.stride() == y.stride() == (T, 1)
        assert x.untyped_storage().data_ptr() != y.untyped_storage().data_ptr()  # two buffers, not views
        if torch.cuda.is_available():  # on a GPU machine: pinning copies nothing more
            assert x.pin_memory().is_contiguous()


def test_each_rank_validates_its_share_and_the_shares_are_the_whole_set(prepared):
    eval_tokens = 5000  # -> 78 windows of 64: 39 per rank of 2, 26 per rank of 3 (B = 6)
    whole = TokenDataModule(prepared, T, 6, seed=0, eval_tokens=eval_tokens)
    one = [b for b in whole.val_dataloader()]
    assert not whole.val_dataloader().dataset.rank_share
    for world in (2, 3):
        shares = []
        for rank in range(world):
            dm = TokenDataModule(prepared, T, 6, seed=0, eval_tokens=eval_tokens)
            dm.rank, dm.world_size = rank, world
            loader = dm.val_dataloader()
            assert loader.dataset.rank_share and loader.dataset.n_windows == 78 // world
            shares.append(torch.cat([x for x, _ in loader]))
        assert torch.equal(torch.cat(shares), torch.cat([x for x, _ in one]))  # in order, each window once
    few = TokenDataModule(prepared, T, 4, seed=0, eval_tokens=3 * T)  # 3 windows, 4 ranks: all on each
    few.rank, few.world_size = 3, 4
    loader = few.val_dataloader()
    assert not loader.dataset.rank_share and torch.cat([x for x, _ in loader]).shape == (3, T)


def test_too_short_splits_are_clear_errors(prepared):
    with pytest.raises(ValueError, match="no validation window fits: eval_tokens=10"):
        TokenDataModule(prepared, T, B, seed=0, eval_tokens=10)
    n_val = len(prepared.tokens("val"))
    with pytest.raises(ValueError, match=f"validation split {n_val} tokens, context {n_val}"):
        TokenDataModule(prepared, n_val, 1, seed=0, eval_tokens=10**9)
    n_train = len(prepared.tokens("train"))
    windows = (n_train - 1) // 4096
    with pytest.raises(
        ValueError,
        match=(
            f"training split too short: {n_train} tokens give {windows} windows of context 4096 .* "
            f"fewer than one batch of batch_size=512"
        ),
    ):
        TokenDataModule(prepared, 4096, 512, seed=0, eval_tokens=4096)
    with pytest.raises(ValueError, match="seed=-1 must be an integer >= 0"):
        TokenDataModule(prepared, T, B, seed=-1, eval_tokens=4096)


def test_tiny_corpus_shorter_than_one_batch(tmp_path):
    corpus = tmp_path / "tiny.jsonl"
    corpus.write_text("".join(f'{{"text": "Short document number {i}."}}\n' for i in range(30)))
    small = prepare_corpus(CorpusKey(str(corpus), "bpe", 300, 0.2, None), cache_dir=tmp_path / "cache")
    with pytest.raises(ValueError, match="training split too short"):
        TokenDataModule(small, 64, 8, seed=0, eval_tokens=64)


class _Recorder(L.LightningModule):
    """Linear bigram model that records the batches it trains and validates on."""

    def __init__(self, vocab: int):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, vocab)
        self.seen: list[torch.Tensor] = []
        self.val_batches = 0

    def training_step(self, batch, _):
        x, y = batch
        self.seen.append(x.clone())
        return torch.nn.functional.cross_entropy(self.emb(x).flatten(0, 1), y.flatten())

    def validation_step(self, batch, _):
        self.val_batches += 1

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _trainer(root: Path, max_steps: int, callbacks=()) -> L.Trainer:
    return L.Trainer(
        max_steps=max_steps,
        accelerator="cpu",
        devices=1,
        use_distributed_sampler=False,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=bool(callbacks),
        callbacks=list(callbacks),
        default_root_dir=root,
        val_check_interval=3,
        check_val_every_n_epoch=None,
        num_sanity_val_steps=0,
    )


def test_lightning_checkpoint_resume_continues_the_batch_sequence(prepared, tmp_path):
    make = lambda: TokenDataModule(prepared, T, B, seed=9, eval_tokens=4 * B * T)  # noqa: E731
    whole = _Recorder(prepared.vocab_size)
    ckpt = L.pytorch.callbacks.ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=3, save_top_k=-1)
    _trainer(tmp_path, 6, [ckpt]).fit(whole, datamodule=make())
    assert len(whole.seen) == 6 and whole.val_batches == 2 * 4  # validation at steps 3 and 6
    reference = make()
    assert all(torch.equal(whole.seen[i], reference.train_batch(i)[0]) for i in range(6))

    path = next(p for p in tmp_path.glob("*.ckpt") if "step=3" in p.name)
    assert torch.load(path, weights_only=False)["TokenDataModule"]["next_step"] == 3
    resumed = _Recorder(prepared.vocab_size)
    _trainer(tmp_path / "r", 6).fit(resumed, datamodule=make(), ckpt_path=path)
    assert len(resumed.seen) == 3
    assert all(torch.equal(a, b) for a, b in zip(resumed.seen, whole.seen[3:], strict=True))


def test_checkpoint_state_for_another_seed_is_rejected(prepared):
    state = TokenDataModule(prepared, T, B, seed=1, eval_tokens=4096).state_dict()
    assert state["next_step"] == 0
    other = TokenDataModule(prepared, T, B, seed=2, eval_tokens=4096)
    with pytest.raises(ValueError, match="seed 1 != 2"):
        other.load_state_dict(state)
