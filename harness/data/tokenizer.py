"""Tokenizers: byte-level BPE trained on the training split, or GPT-2 via tiktoken (DESIGN 4).

Both are byte-level: every non-special token stands for a fixed byte string, so the UTF-8
byte length of a text equals the sum of its tokens' byte lengths. :meth:`token_bytes`
gives that length per token id (0 for special tokens), which makes bits-per-byte exact
over any subset of predicted tokens:

    bpb = sum(NLL in nats) / (ln 2 * sum(token_bytes[targets]))

``bpe``: HF ``tokenizers`` BPE with the GPT-2 byte-to-unicode pre-tokenizer (GPT-2 regex
split, no prefix space, no normaliser), the full 256-byte initial alphabet, and the special
token ``<|endoftext|>`` at id 0 (byte ids follow at 1..256, merges after). The trainer
sorts pair counts with a deterministic tie-break, so the same training documents and
vocabulary size give a byte-identical tokenizer JSON. Trained tokenizers are cached under
``cache_dir/tokenizers/`` by (fingerprint of the training documents, vocabulary size).

``gpt2``: tiktoken's ``gpt2`` encoding (50257 tokens, ``<|endoftext|>`` = 50256). tiktoken is
an optional dependency and downloads its files on first use.

Text is always encoded as ordinary text: a literal ``<|endoftext|>`` inside a document is
split into byte-level tokens, never turned into the EOS id, so document boundaries exist
only where the data pipeline puts them.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from harness.common.files import atomic_write
from harness.corpus.fingerprint import corpus_fingerprint
from harness.corpus.key import CorpusKey
from harness.corpus.readers import OptionalDependencyError

EOS_TOKEN = "<|endoftext|>"
#: Special token plus the 256 single-byte tokens: the smallest byte-level BPE vocabulary.
MIN_BPE_VOCAB = 257
#: Largest BPE vocabulary a run may train (2^20 ids): the trainer allocates per id, and far
#: larger requests abort the process (an out-of-memory in the Rust trainer) instead of raising.
MAX_BPE_VOCAB = 2**20
#: Bump when the BPE recipe below changes, so cached tokenizers are not reused across recipes.
BPE_RECIPE_VERSION = 1
TOKENIZER_NAMES = ("bpe", "gpt2")
#: Ids of tiktoken's ``gpt2`` encoding (50,000 merges + 256 bytes + ``<|endoftext|>``).
GPT2_VOCAB = 50257


class BPETokenizer:
    """Byte-level BPE (HF ``tokenizers``) with ``<|endoftext|>`` at id 0.

    Attributes:
        name: ``"bpe"``.
        vocab_size: number of token ids V (may be below the requested size when the
            training text supports fewer merges).
        eos_id: id of ``<|endoftext|>`` (0).
    """

    name = "bpe"

    def __init__(self, json_str: str):
        from tokenizers import Tokenizer  # lazy: HF tokenizers, only for a BPE

        self.json_str = json_str
        self._tok = Tokenizer.from_str(json_str)
        # Literal "<|endoftext|>" in a document is text, not a document boundary.
        self._tok.encode_special_tokens = True
        self.vocab_size = self._tok.get_vocab_size()
        eos = self._tok.token_to_id(EOS_TOKEN)
        if eos != 0:
            raise ValueError(f"BPE tokenizer has {EOS_TOKEN!r} at id {eos}, expected id 0")
        self.eos_id = 0

    @classmethod
    def from_file(cls, path: Path) -> BPETokenizer:
        """Load a tokenizer JSON written by :func:`train_bpe`."""
        return cls(Path(path).read_text(encoding="utf-8"))

    @property
    def sha256(self) -> str:
        """sha256 (hex) of the tokenizer JSON (its UTF-8 bytes as written to disk)."""
        return hashlib.sha256(self.json_str.encode("utf-8")).hexdigest()

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (ordinary text; no special tokens added)."""
        return self._tok.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids of each text (multi-threaded inside ``tokenizers``)."""
        return [e.ids for e in self._tok.encode_batch(list(texts), add_special_tokens=False)]

    def decode(self, ids: Sequence[int]) -> str:
        """Text of token ids (``<|endoftext|>`` decodes to its literal string)."""
        return self._tok.decode(list(ids), skip_special_tokens=False)

    def token_bytes(self) -> np.ndarray:
        """``[V]`` int64: UTF-8 byte length of each token, 0 for special tokens.

        Under the byte-level pre-tokenizer each character of a token string stands for
        exactly one byte, so a token's byte length is its string length.
        """
        special = {t.content for t in self._tok.get_added_tokens_decoder().values() if t.special}
        out = np.zeros(self.vocab_size, dtype=np.int64)
        for token, idx in self._tok.get_vocab().items():
            out[idx] = 0 if token in special else len(token)
        return out


class GPT2Tokenizer:
    """tiktoken's ``gpt2`` encoding (V = 50257, ``<|endoftext|>`` = 50256).

    Args:
        ranks_file: tiktoken's gpt2 merge ranks in its file format (as ``harness prepare``
            copies them beside a sharded corpus); ``None`` = tiktoken's own (downloaded once).
        encoding: a ``tiktoken.Encoding`` of the same kind (byte-level mergeable ranks,
            ``<|endoftext|>`` special) to use instead of ``gpt2``; the tests build one from
            local ranks, since the ``gpt2`` files need a network once. Default: ``gpt2``.

    Raises (on construction):
        OptionalDependencyError: tiktoken is not installed.
        ValueError: tiktoken cannot load its ``gpt2`` files (offline with an empty cache).
    """

    name = "gpt2"

    def __init__(self, ranks_file: Path | None = None, encoding=None):
        self._enc = encoding if encoding is not None else _gpt2_encoding(ranks_file)
        self.vocab_size = self._enc.n_vocab
        self.eos_id = self._enc.eot_token

    @property
    def sha256(self) -> str:
        """sha256 (hex) over the byte string of every token id in order (length-framed)."""
        h = hashlib.sha256()
        for idx, n in enumerate(self.token_bytes()):
            data = self._enc.decode_single_token_bytes(idx) if n else b""
            h.update(len(data).to_bytes(4, "little") + data)
        return h.hexdigest()

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (``encode_ordinary``: special strings are plain text)."""
        return self._enc.encode_ordinary(text)

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids of each text."""
        return self._enc.encode_ordinary_batch(list(texts))

    def decode(self, ids: Sequence[int]) -> str:
        """Text of token ids."""
        return self._enc.decode(list(ids))

    def mergeable_ranks(self) -> dict[bytes, int]:
        """Token bytes -> rank (= id) of every mergeable (non-special) token, through tiktoken's public
        ``token_byte_values`` and ``encode_single_token``: what ``load_tiktoken_bpe`` reads back."""
        return {token: self._enc.encode_single_token(token) for token in self._enc.token_byte_values()}

    def token_bytes(self) -> np.ndarray:
        """``[V]`` int64: byte length of each token, 0 for special tokens and unused ids."""
        special = set(self._enc.special_tokens_set)
        special_ids = {self._enc.encode_single_token(s) for s in special}
        out = np.zeros(self.vocab_size, dtype=np.int64)
        for idx in range(self.vocab_size):
            if idx in special_ids:
                continue
            try:
                out[idx] = len(self._enc.decode_single_token_bytes(idx))
            except KeyError:  # ids without a token (gaps in some encodings)
                out[idx] = 0
        return out


def _gpt2_encoding(ranks_file: Path | None = None):
    """tiktoken's ``gpt2`` ``Encoding``, from ``ranks_file`` when given (no network), else
    tiktoken's own files (errors: see :class:`GPT2Tokenizer`)."""
    try:
        import tiktoken  # lazy: only the gpt2 tokenizer needs it
    except ImportError:
        raise OptionalDependencyError(
            "tokenizer 'gpt2' needs the optional 'tiktoken' package, which is not installed; "
            "install it with: pip install 'rd-harness[hub]', or use tokenizer 'bpe'"
        ) from None
    if ranks_file is not None:  # the ranks copied beside a prepared corpus: no network
        from tiktoken.load import load_tiktoken_bpe  # lazy: optional, only the gpt2 tokenizer needs it
        from tiktoken_ext.openai_public import r50k_pat_str

        return tiktoken.Encoding(
            name="gpt2",
            pat_str=r50k_pat_str,
            mergeable_ranks=load_tiktoken_bpe(str(ranks_file)),
            special_tokens={EOS_TOKEN: 50256},
            explicit_n_vocab=GPT2_VOCAB,
        )
    try:
        return tiktoken.get_encoding("gpt2")
    # tiktoken fetches its BPE files over HTTP on first use; offline that fails with
    # requests/urllib/OS errors depending on the version.
    except Exception as exc:
        raise ValueError(
            f"tokenizer 'gpt2': tiktoken cannot load its gpt2 files ({type(exc).__name__}: {exc}); "
            "they are downloaded on first use, so this needs a network once "
            "(or TIKTOKEN_CACHE_DIR pointing at a filled cache); or use tokenizer 'bpe'"
        ) from exc


def _bpe_json(texts: Sequence[str], vocab_size: int) -> str:
    # lazy: HF tokenizers, only for a BPE
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS_TOKEN],  # listed first -> id 0
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # all 256 bytes, seen or not
        min_frequency=0,
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
    return tok.to_str()


def bpe_cache_path(cache_dir: Path, train_fingerprint: str, vocab_size: int) -> Path:
    """Where :func:`train_bpe` caches the tokenizer of these training documents."""
    key = hashlib.sha256(
        json.dumps(
            {"recipe": BPE_RECIPE_VERSION, "train": train_fingerprint, "vocab_size": vocab_size}
        ).encode()
    ).hexdigest()
    return Path(cache_dir) / "tokenizers" / f"bpe-{vocab_size}-{key[:32]}.json"


def check_bpe_vocab(vocab_size: int) -> None:
    """Refuse a byte-level BPE vocabulary outside ``MIN_BPE_VOCAB`` .. ``MAX_BPE_VOCAB`` ids,
    before anything is trained or written (the one line ``harness run`` and ``harness queue`` give).

    Raises:
        ValueError: naming ``vocab_size`` and the allowed range.
    """
    if (
        isinstance(vocab_size, bool)
        or not isinstance(vocab_size, int)
        or not (MIN_BPE_VOCAB <= vocab_size <= MAX_BPE_VOCAB)
    ):
        raise ValueError(
            f"vocab_size={vocab_size} is not allowed for byte-level BPE: it must be {MIN_BPE_VOCAB} "
            f"(256 bytes + 1 special token) to {MAX_BPE_VOCAB:_}"
        )


def train_bpe(texts: Sequence[str], vocab_size: int, *, cache_dir: Path | None = None) -> BPETokenizer:
    """Train (or load from cache) a byte-level BPE tokenizer on ``texts``.

    Args:
        texts: training documents (the training split only, never validation text).
        vocab_size: requested vocabulary size V >= 257 (1 special + 256 bytes); the result
            has fewer ids when the text supports fewer merges.
        cache_dir: if given, the tokenizer JSON is cached at :func:`bpe_cache_path` and
            reused by later calls with the same documents and size.

    Raises:
        ValueError: ``vocab_size`` not an integer in 257 .. 2^20 (:func:`check_bpe_vocab`); no training text.
    """
    check_bpe_vocab(vocab_size)
    if not texts:
        raise ValueError("cannot train a BPE tokenizer on zero documents")
    path = bpe_cache_path(cache_dir, corpus_fingerprint(texts), vocab_size) if cache_dir is not None else None
    if path is not None and path.is_file():
        return BPETokenizer.from_file(path)
    json_str = _bpe_json(texts, vocab_size)
    if path is not None:
        atomic_write(path, json_str)  # a concurrent reader sees either no file or the whole file
    return BPETokenizer(json_str)


def token_dtype(vocab_size: int) -> np.dtype:
    """Little-endian dtype of a corpus's token ids: ``uint16``, or ``uint32`` when V > 65535.

    (V = 65536 would still fit ``uint16``; the simpler rule costs nothing.)
    """
    return np.dtype("<u2") if vocab_size <= 65535 else np.dtype("<u4")


#: The tokenizer fields of a corpus's protocol (what decides its token ids; :func:`tokenizer_record`).
PROTOCOL_FIELDS = ("name", "vocab_size", "requested_vocab_size", "eos_id", "sha256")


def check_key_tokenizer(key: CorpusKey) -> None:
    """Refuse a key's tokenizer before anything is trained or written: a name outside
    :data:`TOKENIZER_NAMES`, or for ``bpe`` a vocabulary :func:`check_bpe_vocab` refuses.

    Raises:
        ValueError: naming the bad value and what is allowed.
    """
    if key.tokenizer not in TOKENIZER_NAMES:
        raise ValueError(f"unknown tokenizer {key.tokenizer!r}; allowed: {', '.join(TOKENIZER_NAMES)}")
    if key.tokenizer == "bpe":
        check_bpe_vocab(key.vocab_size)  # a huge one aborts the Rust trainer (out of memory), no exception


def most_ids(key: CorpusKey) -> int:
    """The most ids a tokenizer of ``key`` holds: ``gpt2``'s 50,257; a BPE's requested vocabulary
    (training may stop below it). Sizes a run's model before its corpus exists (disk space)."""
    return key.vocab_size if key.tokenizer == "bpe" else GPT2_VOCAB


def train_key_bpe(key: CorpusKey, texts: Sequence[str], *, cache_dir: Path | None = None) -> BPETokenizer:
    """The ``bpe`` tokenizer of ``key``: :func:`train_bpe` on ``texts`` with the key's vocabulary."""
    return train_bpe(texts, key.vocab_size, cache_dir=cache_dir)


def tokenizer_record(tok: BPETokenizer | GPT2Tokenizer, key: CorpusKey) -> dict:
    """The manifest's description of ``tok`` (:data:`PROTOCOL_FIELDS`): ``vocab_size`` is the
    tokenizer's V (a BPE may hold fewer ids than ``key`` asked for, recorded as
    ``requested_vocab_size``)."""
    return {
        "name": tok.name,
        "vocab_size": int(tok.vocab_size),
        "requested_vocab_size": int(key.vocab_size) if key.tokenizer == "bpe" else None,
        "eos_id": int(tok.eos_id),
        "sha256": tok.sha256,
    }


def ids_dtype(tok: BPETokenizer | GPT2Tokenizer) -> np.dtype:
    """The dtype ``tok``'s ids are stored in (:func:`token_dtype` of its V)."""
    return token_dtype(tok.vocab_size)


def load_tokenizer(name: str, path: Path | None = None) -> BPETokenizer | GPT2Tokenizer:
    """Load a tokenizer by name: ``bpe`` from its JSON file ``path``, or ``gpt2``.

    Raises:
        ValueError: unknown name, or ``bpe`` without a path.
    """
    if name == "bpe":
        if path is None:
            raise ValueError("tokenizer 'bpe' needs the path of its JSON file")
        return BPETokenizer.from_file(path)
    if name == "gpt2":
        return GPT2Tokenizer()
    raise ValueError(f"unknown tokenizer {name!r}; allowed: {', '.join(TOKENIZER_NAMES)}")


def write_gpt2_ranks(path: Path, tok: GPT2Tokenizer) -> None:
    """Write tiktoken's gpt2 merge ranks to ``path`` in tiktoken's own file format (base64 token, rank),
    what :func:`load_shard_tokenizer` reads back offline."""
    ranks = tok.mergeable_ranks()
    lines = [
        base64.b64encode(token).decode() + f" {rank}"
        for token, rank in sorted(ranks.items(), key=lambda x: x[1])
    ]
    atomic_write(path, "\n".join(lines) + "\n")


def load_shard_tokenizer(folder: Path, name: str) -> BPETokenizer | GPT2Tokenizer:
    """The tokenizer from the files beside the shards (no network).

    Raises:
        OptionalDependencyError: ``gpt2`` without tiktoken.
    """
    if name == "bpe":
        return BPETokenizer.from_file(Path(folder) / "tokenizer.json")
    return GPT2Tokenizer(ranks_file=Path(folder) / "gpt2.tiktoken")


__all__ = [
    "token_dtype",
    "ids_dtype",
    "PROTOCOL_FIELDS",
    "check_key_tokenizer",
    "most_ids",
    "GPT2_VOCAB",
    "train_key_bpe",
    "tokenizer_record",
    "write_gpt2_ranks",
    "load_shard_tokenizer",
    "EOS_TOKEN",
    "MIN_BPE_VOCAB",
    "MAX_BPE_VOCAB",
    "check_bpe_vocab",
    "TOKENIZER_NAMES",
    "BPETokenizer",
    "GPT2Tokenizer",
    "bpe_cache_path",
    "train_bpe",
    "load_tokenizer",
]
