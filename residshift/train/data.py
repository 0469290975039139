"""Token streams for training: windows whose batch is a pure function of (seed, step), the unigram
baseline, and FineWeb-sized corpora prepared through ``datasets`` streaming.

- :class:`TokenWindows`: one token stream (or several shards) cut into non-overlapping windows of
  ``length`` tokens (``[BOS] + length - 1`` corpus tokens where the tokenizer puts BOS first, as
  ``residshift.core.data.cut_windows`` does). ``batch(step, micro, ...)`` is the global micro-batch
  ``g = step * accumulate + micro`` of ``fitting.epoch_batch`` over the windows (a seeded
  permutation per epoch; the tail that does not fill a whole batch is never drawn), and a DDP rank
  takes its own contiguous slice of it. So the data a step sees depends on ``(seed, step)`` only:
  not on the model variant (paired comparisons), not on an interruption (resume), and not on the
  number of processes (one process with batch B sees what W ranks of B / W see together).
- :func:`named_corpus_tokens`: a split of a named corpus (``residshift.core.data.CORPORA``, e.g.
  WikiText-2) as one stream, tokenized and cached by ``core.data.tokenize_text``.
- :func:`prepare_stream`: a corpus too large for memory (FineWeb-Edu sample-10BT for the ``paper``
  profile) read with ``datasets.load_dataset(..., streaming=True)``, tokenized document by document
  (``EOS`` after each document where the tokenizer has one) and written as memory-mapped ``.npy``
  shards under ``cache_dir()/streams/<key>/``: first a validation stream (the first
  ``val_tokens`` tokens, held out), then training shards of ``shard_tokens`` tokens. Each shard is
  written atomically and recorded in ``manifest.json`` with the number of documents read so far, so
  an interrupted preparation resumes after its last shard (``IterableDataset.skip``) and a larger
  token budget extends the same files. A shard is cut at a multiple of the window length (the
  few tokens beyond are dropped), so no window spans two shards.
- :func:`unigram_cross_entropy`: the loss of the best context-free predictor, the token
  frequencies of the training stream (add-one smoothed), on the tokens a model is scored on: the
  plateau a trained model must get clearly below.

>>> tokens = named_corpus_tokens("wikitext-2", "train", tokenizer)
>>> windows = TokenWindows([tokens], length=128, bos_id=tokenizer.bos_token_id)
>>> x = windows.batch(step, micro, batch_size=16, accumulate=1, seed=0)      # [16, 128]
"""
from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
from tqdm.auto import tqdm

from ..core import data as core_data
from ..core.cache import atomic_save_npy, atomic_write_text, code_fingerprint
from ..core.fitting import epoch_batch
from ..core.paths import cache_dir

STREAM_FORMAT = "residshift-stream/1"


class DataError(ValueError):
    """Training data that cannot be used as asked; the message names the fix."""


# --------------------------------------------------------------------------------------------
# Windows and batches
# --------------------------------------------------------------------------------------------


class TokenWindows:
    """Non-overlapping windows of ``length`` tokens over one or more 1-D token arrays (shards).

    With ``bos_id`` each window is ``[bos_id] + length - 1`` stream tokens. Arrays may be numpy
    memory maps: only the windows of a batch are read.
    """

    def __init__(self, shards: Sequence[np.ndarray], length: int, bos_id: int | None = None):
        if length < 2:
            raise DataError(f"window length must be >= 2 (a token and its successor), got {length}")
        self.length = int(length)
        self.bos_id = None if bos_id is None else int(bos_id)
        self.body = self.length - (1 if bos_id is not None else 0)
        self.shards = [s for s in shards if len(s) >= self.body]
        if any(np.asarray(s[:0]).ndim != 1 for s in self.shards):
            raise DataError("token shards must be 1-D arrays")
        counts = [len(s) // self.body for s in self.shards]
        if not self.shards or sum(counts) == 0:
            total = sum(len(s) for s in shards)
            raise DataError(f"the stream has {total} tokens, fewer than one window of {self.body}: use a "
                            "larger corpus or a shorter context")
        self.starts = np.cumsum([0] + counts)  # first window index of each shard
        self.n = int(self.starts[-1])

    @property
    def tokens(self) -> int:
        """Stream tokens covered by the windows."""
        return self.n * self.body

    def windows(self, index: torch.Tensor | Sequence[int]) -> torch.Tensor:
        """The windows ``index`` as a ``[len(index), length]`` int64 tensor."""
        idx = np.asarray(index, dtype=np.int64)
        if idx.size and (idx.min() < 0 or idx.max() >= self.n):
            raise DataError(f"window index out of range 0..{self.n - 1}")
        shard = np.searchsorted(self.starts, idx, side="right") - 1
        rows = np.empty((len(idx), self.body), dtype=np.int64)
        for j, (s, i) in enumerate(zip(shard, idx)):
            off = (int(i) - int(self.starts[s])) * self.body
            rows[j] = self.shards[s][off:off + self.body]
        out = torch.from_numpy(rows)
        if self.bos_id is not None:
            out = torch.cat([torch.full((len(idx), 1), self.bos_id, dtype=torch.long), out], dim=1)
        return out

    def batch(self, step: int, micro: int, *, batch_size: int, accumulate: int = 1, seed: int = 0,
              rank: int = 0, world: int = 1) -> torch.Tensor:
        """This rank's share ``[batch_size // world, length]`` of micro-batch ``micro`` of ``step``."""
        return self.windows(self.batch_index(step, micro, batch_size=batch_size, accumulate=accumulate,
                                             seed=seed, rank=rank, world=world))

    def batch_index(self, step: int, micro: int, *, batch_size: int, accumulate: int = 1, seed: int = 0,
                    rank: int = 0, world: int = 1) -> torch.Tensor:
        if batch_size < 1 or batch_size % world:
            raise DataError(f"batch_size {batch_size} must be a positive multiple of the number of "
                            f"processes ({world})")
        usable = (self.n // batch_size) * batch_size
        if usable == 0:
            raise DataError(f"the stream has {self.n} windows of {self.length} tokens, fewer than one batch "
                            f"of {batch_size}: use a smaller batch or a larger corpus")
        idx = epoch_batch(usable, batch_size, step * accumulate + micro, seed)
        per = batch_size // world
        return idx[rank * per:(rank + 1) * per]

    def epochs(self, windows_drawn: int) -> float:
        """How many passes over the windows ``windows_drawn`` windows make."""
        return windows_drawn / self.n


def eval_windows(tokens: np.ndarray, length: int, n: int | None, bos_id: int | None) -> torch.Tensor:
    """A fixed set of ``n`` validation windows (all when None), the same for every seed and variant."""
    body = length - (1 if bos_id is not None else 0)
    available = len(tokens) // body
    if available == 0:
        raise DataError(f"the validation stream has {len(tokens)} tokens, fewer than one window of {length}")
    if n is not None and n > available:
        raise DataError(f"asked for {n} validation windows of {length} tokens but the validation stream has "
                        f"room for {available}; lower eval_windows to at most {available}")
    return core_data.cut_windows(tokens, length=length, n=n, seed=0, bos_id=bos_id)


# --------------------------------------------------------------------------------------------
# Corpora
# --------------------------------------------------------------------------------------------


def named_corpus_tokens(name: str, split: str, tokenizer) -> np.ndarray:
    """Token ids of a named corpus split (WikiText detokenized as ``core.data.corpus_text`` does).

    Cached under ``cache_dir()/train-tokens/`` by the local file's bytes, the tokenizer and the code
    of ``core.data`` (detokenization), so a cached stream loads without reading the corpus text;
    without a local file, ``core.data.tokenize_text`` (keyed by the text) does the work.
    """
    try:
        path = core_data.local_file(name, split)
        if path is None:
            return core_data.tokenize_text(core_data.corpus_text(name, split), tokenizer)
        digest = core_data.check_reference(name, split)  # checked against the reference, recorded
        key = hashlib.sha256(json.dumps([name, split, digest, core_data.tokenizer_fingerprint(tokenizer),
                                         code_fingerprint(core_data)]).encode()).hexdigest()[:20]
        cached = cache_dir() / "train-tokens" / f"{name}-{split}-{key}.npy"
        if cached.is_file():
            return np.load(cached)
        tokens = core_data.tokenize_text(core_data.corpus_text(name, split), tokenizer, cache=False)
        cached.parent.mkdir(parents=True, exist_ok=True)
        atomic_save_npy(cached, tokens)
        return tokens
    except (KeyError, ValueError) as err:
        raise DataError(f"cannot read corpus {name!r} split {split!r}: {err}") from err


def unigram_cross_entropy(train_tokens: np.ndarray | torch.Tensor, scored: np.ndarray | torch.Tensor,
                          vocab_size: int, *, smoothing: float = 1.0) -> float:
    """Cross-entropy (nats per token) of ``scored`` under the unigram distribution of ``train_tokens``.

    ``p(v) = (count(v) + smoothing) / (N + smoothing * vocab_size)``: the loss of a model that has
    learned the token frequencies and nothing else (the first plateau of language-model training).
    """
    train = np.asarray(train_tokens).reshape(-1)
    scored = np.asarray(scored).reshape(-1)
    if train.size == 0 or scored.size == 0:
        raise DataError("unigram_cross_entropy needs non-empty training and scored tokens")
    if max(int(train.max()), int(scored.max())) >= vocab_size or min(int(train.min()), int(scored.min())) < 0:
        raise DataError(f"token ids must lie in 0..{vocab_size - 1}")
    if not smoothing > 0:
        raise DataError(f"smoothing must be > 0 (a token unseen in training would cost infinity), got {smoothing}")
    counts = np.zeros(vocab_size, dtype=np.float64)
    for i in range(0, train.size, 50_000_000):  # chunked: a memory-mapped stream is never loaded whole
        counts += np.bincount(train[i:i + 50_000_000].astype(np.int64), minlength=vocab_size)
    logp = np.log(counts + smoothing) - math.log(counts.sum() + smoothing * vocab_size)
    return float(-logp[scored.astype(np.int64)].mean())


# --------------------------------------------------------------------------------------------
# Streaming corpora (datasets streaming -> memory-mapped shards)
# --------------------------------------------------------------------------------------------


def stream_key(spec: dict[str, Any], tokenizer, *, val_tokens: int, shard_tokens: int, window: int) -> str:
    payload = json.dumps({"format": STREAM_FORMAT, "spec": spec,
                          "tokenizer": core_data.tokenizer_fingerprint(tokenizer),
                          "val_tokens": val_tokens, "shard_tokens": shard_tokens, "window": window},
                         sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:20]


def check_stream_spec(spec: Any) -> dict[str, Any]:
    """A streamed corpus: ``datasets.load_dataset`` keyword arguments plus ``text_field``."""
    if not isinstance(spec, dict) or "path" not in spec:
        raise DataError(f"a streamed corpus is a dict of datasets.load_dataset arguments with 'path', e.g. "
                        "{'path': 'HuggingFaceFW/fineweb-edu', 'name': 'sample-10BT', 'split': 'train'}; "
                        f"got {spec!r}")
    if "streaming" in spec:
        raise DataError("leave 'streaming' out of the corpus spec: it is always streamed")
    return spec


class StreamData:
    """A prepared stream folder: ``val`` (an array) and ``train_shards`` (memory maps)."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.manifest = json.loads((self.folder / "manifest.json").read_text())

    @property
    def val(self) -> np.ndarray:
        return np.load(self.folder / self.manifest["val"]["file"], mmap_mode="r")

    @property
    def train_shards(self) -> list[np.ndarray]:
        return [np.load(self.folder / s["file"], mmap_mode="r") for s in self.manifest["shards"]]

    @property
    def train_tokens(self) -> int:
        return sum(s["tokens"] for s in self.manifest["shards"])


def prepare_stream(spec: dict[str, Any], tokenizer, *, train_tokens: int, val_tokens: int, window: int,
                   shard_tokens: int = 100_000_000, batch_docs: int = 512, progress: bool = False) -> StreamData:
    """Stream ``spec`` through ``datasets`` into token shards holding at least ``train_tokens``
    training tokens (fewer only when the corpus ends first) after ``val_tokens`` held-out tokens.

    See the module docstring for the layout and how an interrupted preparation resumes.
    """
    import datasets  # lazy: datasets ~0.3 s after trainer; only preparing a token stream needs it

    spec = check_stream_spec(spec)
    if min(train_tokens, val_tokens, window, shard_tokens) < 1 or shard_tokens < window:
        raise DataError(f"need positive token counts and shard_tokens >= window; got train_tokens={train_tokens}, "
                        f"val_tokens={val_tokens}, window={window}, shard_tokens={shard_tokens}")
    folder = cache_dir() / "streams" / stream_key(spec, tokenizer, val_tokens=val_tokens,
                                                  shard_tokens=shard_tokens, window=window)
    folder.mkdir(parents=True, exist_ok=True)
    mpath = folder / "manifest.json"
    manifest = json.loads(mpath.read_text()) if mpath.is_file() else {
        "format": STREAM_FORMAT, "spec": spec, "window": window, "val": None, "shards": [],
        "docs": 0, "exhausted": False}
    have = sum(s["tokens"] for s in manifest["shards"])
    if manifest["val"] is not None and (have >= train_tokens or manifest["exhausted"]):
        return StreamData(folder)

    load_kwargs = {k: v for k, v in spec.items() if k != "text_field"}
    field = spec.get("text_field", "text")
    ds = datasets.load_dataset(**load_kwargs, streaming=True)
    if isinstance(ds, (datasets.IterableDatasetDict, dict)):
        raise DataError(f"the corpus spec {spec} names no split: add e.g. 'split': 'train'")
    if manifest["docs"]:
        ds = ds.skip(manifest["docs"])
    dtype = np.uint16 if len(tokenizer) <= 2 ** 16 else np.uint32
    eos = tokenizer.eos_token_id
    buffer: list[np.ndarray] = []
    buffered = 0
    docs = manifest["docs"]
    bar = None
    if progress:
        bar = tqdm(total=train_tokens + val_tokens, initial=have, unit="tok", unit_scale=True, desc="tokenize")

    def flush(kind: str, target: int) -> None:
        nonlocal buffer, buffered
        stream = np.concatenate(buffer)
        keep = (min(len(stream), target) // window) * window  # whole windows only; the rest is dropped
        index = len(manifest["shards"])
        name = "val.npy" if kind == "val" else f"train-{index:05d}.npy"
        atomic_save_npy(folder / name, stream[:keep].astype(dtype))
        entry = {"file": name, "tokens": int(keep), "docs_end": docs}
        if kind == "val":
            manifest["val"] = entry
        else:
            manifest["shards"].append(entry)
        manifest["docs"] = docs
        atomic_write_text(mpath, json.dumps(manifest, indent=1))
        buffer, buffered = [], 0

    def batches():
        chunk = []
        for row in ds:
            text = row[field]
            if not isinstance(text, str):
                raise DataError(f"column {field!r} of {spec} holds {type(text).__name__}, not text: set "
                                "'text_field' in the corpus spec")
            chunk.append(text)
            if len(chunk) == batch_docs:
                yield chunk
                chunk = []
        if chunk:
            yield chunk

    try:
        done = False
        for texts in batches():
            for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]:
                if eos is not None:
                    ids = ids + [eos]
                buffer.append(np.asarray(ids, dtype=np.int64))
                buffered += len(ids)
                docs += 1
                if bar is not None:
                    bar.update(len(ids))
                if manifest["val"] is None:
                    if buffered >= val_tokens:
                        flush("val", val_tokens)
                elif buffered >= shard_tokens:
                    flush("train", shard_tokens)
                    if sum(s["tokens"] for s in manifest["shards"]) >= train_tokens:
                        done = True
                        break
            if done:
                break
        else:
            manifest["exhausted"] = True
            if buffered:
                if manifest["val"] is None:
                    flush("val", val_tokens)
                elif buffered >= window:
                    flush("train", buffered)
            atomic_write_text(mpath, json.dumps(manifest, indent=1))
    finally:
        if bar is not None:
            bar.close()
    if manifest["val"] is None or not manifest["shards"]:
        raise DataError(f"the streamed corpus {spec} ran out after {docs} documents: it holds too few tokens for "
                        f"{val_tokens} validation tokens and one training shard; lower val_tokens")
    return StreamData(folder)
