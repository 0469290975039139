"""Named corpora through ``datasets``, and fixed-length token windows cut from them.

Source order for every corpus: a local data folder first, then the Hugging Face hub.
The local folder is ``$RESIDSHIFT_DATA`` if set, else ``data/`` in this repository if it holds any
corpus, else ``../shared/data`` beside the checkout. Its layout is documented in ``data/README.md``.

>>> ds = load_corpus("wikitext-103", "validation")        # a datasets.Dataset with a "text" column
>>> text = corpus_text("wikitext-103", "validation")      # one string, detokenized
>>> w = token_windows("wikitext-103", "validation", tokenizer, length=128, n=64, seed=0)
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .cache import atomic_save_npy, note_corpus
from .paths import COMMITTED_FIGURES, REPO_ROOT, cache_dir, figures_dir, work_dir


class DataNotFoundError(FileNotFoundError):
    pass


@dataclass(frozen=True)
class Corpus:
    name: str
    description: str
    builder: str  # the datasets builder for the local files: "text" or "json"
    files: dict[str, str]  # split -> path relative to the data folder
    hub: dict[str, tuple[str, str | None, str]] = field(default_factory=dict)  # split -> (path, config, split)
    # A git revision of the hub repository. Script datasets (PIQA, tiny-shakespeare), which
    # datasets>=4 refuses to run, are read from the hub's Parquet export "refs/convert/parquet".
    hub_revision: str | None = None
    wikitext: bool = False  # tokenized WikiText: detokenize before feeding a subword tokenizer

    @property
    def splits(self) -> list[str]:
        return list(self.files)


def _wikitext(version: str, splits: dict[str, str], vocab: str) -> Corpus:
    hub_split = {"train": "train", "validation": "validation", "test": "test"}
    return Corpus(
        name=f"wikitext-{version}",
        description=f"WikiText-{version} (v1, tokenized; {vocab} word vocabulary, rare words <unk>)",
        builder="text",
        files={s: f"wikitext-{version}/{f}" for s, f in splits.items()},
        hub={s: ("Salesforce/wikitext", f"wikitext-{version}-v1", hub_split[s]) for s in splits},
        wikitext=True,
    )


PARQUET_EXPORT = "refs/convert/parquet"  # the hub's automatic Parquet conversion of a dataset repository

CORPORA: dict[str, Corpus] = {
    "wikitext-2": _wikitext(
        "2",
        {"train": "wiki.train.tokens", "validation": "wiki.valid.tokens", "test": "wiki.test.tokens"},
        "33k",
    ),
    "wikitext-103": _wikitext(
        "103", {"validation": "wiki.valid.tokens", "test": "wiki.test.tokens"}, "267k"
    ),
    "lambada": Corpus(
        name="lambada",
        description="LAMBADA test, OpenAI/GPT-2 version (target = last word of each passage)",
        builder="json",
        files={"test": "lambada/lambada_test.jsonl"},
        hub={"test": ("EleutherAI/lambada_openai", "default", "test")},
    ),
    "tiny-shakespeare": Corpus(
        name="tiny-shakespeare",
        description="tiny-shakespeare (karpathy/char-rnn input.txt)",
        builder="text",
        files={"train": "tinyshakespeare/input.txt"},
        # the hub splits input.txt 90/5/5; the three in order are the whole file
        hub={"train": ("karpathy/tiny_shakespeare", None, "train+validation+test")},
        hub_revision=PARQUET_EXPORT,
    ),
    "piqa": Corpus(
        name="piqa",
        description="PIQA validation (goal, sol1, sol2, label)",
        builder="json",
        files={"validation": "piqa/valid.jsonl"},
        hub={"validation": ("ybisk/piqa", None, "validation")},
        hub_revision=PARQUET_EXPORT,
    ),
    "arc-easy": Corpus(
        name="arc-easy",
        description="ARC-Easy test (query, choices, gold)",
        builder="json",
        files={"test": "arc/arc_easy_test.jsonl"},
        hub={"test": ("allenai/ai2_arc", "ARC-Easy", "test")},
    ),
    "arc-challenge": Corpus(
        name="arc-challenge",
        description="ARC-Challenge test (query, choices, gold)",
        builder="json",
        files={"test": "arc/arc_challenge_test.jsonl"},
        hub={"test": ("allenai/ai2_arc", "ARC-Challenge", "test")},
    ),
}

_PIQA_LABELS = "piqa/valid-labels.lst"

# sha256 of the curated copies of every file (data/README.md documents their provenance): the bytes
# the committed figures were computed from.
REFERENCE_SHA256 = {
    "wikitext-2/wiki.train.tokens": "9e9fa1ad55b1c2c95b08e37dd8e653f638fac2c6de904b79e813611eefbc985f",
    "wikitext-2/wiki.valid.tokens": "f0737ed31fc1329026e95cb8b98e19c2a182c39c240ab909dc31abf2f8af58e8",
    "wikitext-2/wiki.test.tokens": "d790b833ef8cf03a90db7bf1271b7520b83c45ce07ba3c1a9699df81e239eca0",
    "wikitext-103/wiki.valid.tokens": "9aee9f52d6e77de6c7751fc5e7c44287db3ec0eaf15477098acc6b93c1c4250b",
    "wikitext-103/wiki.test.tokens": "56db52eb157b1ab5c89646eef70510c1eca6e12a3bfdb99f0d6b05b4eacb75b9",
    "lambada/lambada_test.jsonl": "4aa8d02cd17c719165fc8a7887fddd641f43fcafa4b1c806ca8abc31fabdb226",
    "tinyshakespeare/input.txt": "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
    "piqa/valid.jsonl": "93503cc97c679e459b065c3d13e848282e44b2a25213985bed3e5d458abef72d",
    "piqa/valid-labels.lst": "b4192dc3a2a0363d9d60ccf79800cbbe2f32ebb17726efdde6970e0b8131bceb",
    "arc/arc_easy_test.jsonl": "d2d12e59543acf9a5ef6079634a72b30215e36c2fd4236fff3bc855d287b87f5",
    "arc/arc_challenge_test.jsonl": "1ae3aeedf1951d881cbd5c2e3a31e78a1993d251479afbe4cb413b6707244636",
}


class CorpusMismatchWarning(UserWarning):
    """A local corpus file is not the reference copy: results read from it are not the study's."""


class CorpusMismatchError(ValueError):
    """A run that writes the committed figures read a corpus file that is not the reference copy."""


def data_root() -> Path | None:
    """The local data folder, or None when there is none."""
    env = os.environ.get("RESIDSHIFT_DATA")
    if env:
        return Path(env).expanduser().resolve()
    for candidate in (work_dir() / "data", REPO_ROOT.parent / "shared" / "data"):
        if any((candidate / c.files[s]).is_file() for c in CORPORA.values() for s in c.files):
            return candidate
    return None


def hub_arguments(name: str, split: str | None = None) -> dict[str, Any] | None:
    """The keyword arguments ``datasets.load_dataset`` gets for a corpus split's hub copy (None when
    it has none): ``path``, ``name`` (the config), ``split`` and, where set, ``revision``."""
    corpus = get_corpus(name)
    split = _check_split(corpus, split)
    if split not in corpus.hub:
        return None
    path, config, hub_split = corpus.hub[split]
    out: dict[str, Any] = {"path": path, "name": config, "split": hub_split}
    if corpus.hub_revision:
        out["revision"] = corpus.hub_revision
    return out


def _hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False")


def get_corpus(name: str) -> Corpus:
    if name not in CORPORA:
        raise KeyError(f"unknown corpus {name!r}; known: {', '.join(CORPORA)}")
    return CORPORA[name]


def _check_split(corpus: Corpus, split: str | None) -> str:
    if split is None:
        if len(corpus.splits) == 1:
            return corpus.splits[0]
        raise ValueError(f"{corpus.name} has several splits; pass split= one of {corpus.splits}")
    if split not in corpus.files:
        raise ValueError(f"{corpus.name} has no split {split!r}; available: {corpus.splits}")
    return split


def local_file(name: str, split: str | None = None) -> Path | None:
    corpus = get_corpus(name)
    split = _check_split(corpus, split)
    root = data_root()
    if root is None:
        return None
    path = root / corpus.files[split]
    return path if path.is_file() else None


def _files(name: str, split: str) -> list[str]:
    """The files (relative to the data folder) a corpus split is read from."""
    return [get_corpus(name).files[split]] + ([_PIQA_LABELS] if name == "piqa" else [])


_DIGESTS: dict[tuple[str, int, int], str] = {}  # (path, size, mtime_ns) -> sha256: hash each file once


def file_sha256(path: Path) -> str:
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key not in _DIGESTS:
        with open(path, "rb") as f:
            _DIGESTS[key] = hashlib.file_digest(f, "sha256").hexdigest()
    return _DIGESTS[key]


def current_digest(label: str) -> str | None:
    """The sha256 of corpus ``label`` (``name/split``) as the local files hold it now (several files:
    the hash of their digests), ``hub`` for a split read from the hub, None for an unknown label."""
    name, _, split = label.partition("/")
    if name not in CORPORA or split not in CORPORA[name].files:
        return None
    root = data_root()
    paths = [root / rel for rel in _files(name, split)] if root is not None else []
    if not paths or not all(p.is_file() for p in paths):
        return "hub"
    digests = [file_sha256(p) for p in paths]
    return digests[0] if len(digests) == 1 else hashlib.sha256("".join(digests).encode()).hexdigest()


_WARNED: set[str] = set()


def check_reference(name: str, split: str) -> str:
    """The digest of a corpus split about to be read, recorded for the results computed from it
    (``cache.note_corpus``). A local file that is not the reference copy is named in a
    :class:`CorpusMismatchWarning`, and refused (:class:`CorpusMismatchError`) while the committed
    figures are being written, since they must come from the reference bytes."""
    label = f"{name}/{split}"
    digest = current_digest(label)
    root = data_root()
    for rel in _files(name, split) if digest != "hub" else []:
        have, want = file_sha256(root / rel), REFERENCE_SHA256.get(rel)
        if want is None or have == want:
            continue
        line = (f"{root / rel} is not the reference copy (sha256 {have[:12]}, the reference {want[:12]}): "
                "results read from it are not the study's; restore it with `make data DATA_ARGS=--force` or "
                "point RESIDSHIFT_DATA at a folder holding the reference files (data/README.md)")
        if figures_dir().resolve() == COMMITTED_FIGURES.resolve():
            raise CorpusMismatchError(line + "; the committed figures are written only from the reference copy")
        if str(root / rel) not in _WARNED:
            _WARNED.add(str(root / rel))
            warnings.warn(line, CorpusMismatchWarning, stacklevel=3)
    note_corpus(label, digest)
    return digest


def load_corpus(name: str, split: str | None = None):
    """Load a named corpus split as a ``datasets.Dataset`` (local folder first, then the hub).

    Text corpora have one row per line in ``text``; LAMBADA has ``text``; PIQA has ``goal``,
    ``sol1``, ``sol2``, ``label``; ARC has ``query``, ``choices``, ``gold`` (the local files' format;
    hub copies are converted to it).
    """
    import datasets  # lazy: datasets 0.5-1.2 s; only reading a corpus (not cached windows) needs it

    datasets.disable_progress_bars()  # one line per split read is noise in notebooks and logs
    corpus = get_corpus(name)
    split = _check_split(corpus, split)
    path = local_file(name, split)
    ds_cache = str(cache_dir() / "datasets")
    check_reference(name, split)
    if path is not None:
        kwargs: dict[str, Any] = {"keep_linebreaks": False} if corpus.builder == "text" else {}
        ds = datasets.load_dataset(corpus.builder, data_files={split: str(path)}, split=split,
                                   cache_dir=ds_cache, **kwargs)
        if name == "piqa":
            labels = (path.parent.parent / _PIQA_LABELS).read_text().split()
            if len(labels) != len(ds):
                raise ValueError(f"{_PIQA_LABELS} has {len(labels)} labels for {len(ds)} questions")
            ds = ds.add_column("label", [int(x) for x in labels])
        return ds
    expected = (data_root() or Path("$RESIDSHIFT_DATA")) / corpus.files[split]
    hub = hub_arguments(name, split)
    hub_path = hub["path"] if hub else None
    if _hub_offline() or hub is None:
        raise DataNotFoundError(
            f"{name} ({split}) not found locally: expected {expected}. Put the file there (layout in "
            "data/README.md), or set RESIDSHIFT_DATA to a folder that has it"
            + (f", or unset HF_HUB_OFFLINE to download {hub_path} from the hub." if hub_path else ".")
        )
    try:
        ds = datasets.load_dataset(**hub, cache_dir=ds_cache)
    except Exception as err:  # the hub raises many kinds of errors
        raise DataNotFoundError(
            f"{name} ({split}): no local file at {expected} and the hub copy {hub_path} could not be "
            f"loaded ({type(err).__name__}: {err}). Put the file at {expected} (see data/README.md)."
        ) from err
    return _normalise_hub(name, ds)


def _normalise_hub(name: str, ds):
    """Bring hub copies to the local files' schema (rows as the local files give them)."""
    corpus = get_corpus(name)
    if corpus.wikitext:  # hub rows keep their "\n" and blank lines are "": the local rows are " "
        return ds.map(lambda ex: {"text": ex["text"].rstrip("\n") or " "})
    if name == "tiny-shakespeare":  # one row per split: one row per line, as the local text file
        import datasets  # lazy, as in load_corpus

        return datasets.Dataset.from_dict({"text": "".join(ds["text"]).splitlines()})
    if name.startswith("arc-"):
        def convert(ex):
            labels = list(ex["choices"]["label"])
            return {"query": "Question: " + ex["question"], "choices": list(ex["choices"]["text"]),
                    "gold": labels.index(ex["answerKey"])}
        return ds.map(convert, remove_columns=ds.column_names)
    return ds


# --------------------------------------------------------------------------------------------
# Text
# --------------------------------------------------------------------------------------------

_WIKI_RULES = [
    (re.compile(r" @(.)@ "), r"\1"),  # 1 @,@ 000 -> 1,000 ; well @-@ known -> well-known
    (re.compile(r" ([.,;:!?%)\]}])"), r"\1"),  # no space before closing punctuation
    (re.compile(r"([(\[{$]) "), r"\1"),  # no space after opening brackets
    (re.compile(r" (n't|'s|'re|'ve|'m|'ll|'d)\b"), r"\1"),  # clitics
    (re.compile(r"\" (.*?) \""), r'"\1"'),  # "quoted"
    (re.compile(r"^ *(=+) (.*?) (=+) *$"), r"\1 \2 \3"),  # headings keep their markers
]


def detokenize_wikitext(line: str) -> str:
    """Undo WikiText's word tokenization for subword models (our rules; ``<unk>`` stays literal)."""
    out = line.strip()
    for pattern, repl in _WIKI_RULES:
        out = pattern.sub(repl, out)
    return out


def corpus_text(name: str, split: str | None = None, *, detokenize: bool = True) -> str:
    """The whole split as one string (lines joined by newlines; blank lines kept)."""
    corpus = get_corpus(name)
    ds = load_corpus(name, split)
    if "text" not in ds.column_names:
        raise ValueError(f"{name} is a multiple-choice set, not running text")
    lines = ds["text"]
    if corpus.wikitext:
        lines = [detokenize_wikitext(x) if detokenize else x.strip() for x in lines]
    return "\n".join(lines)


def corpus_stats(name: str, split: str | None = None) -> dict[str, Any]:
    """Rows, characters and whitespace words of a corpus split (what notebook 00 tabulates)."""
    corpus = get_corpus(name)
    split = _check_split(corpus, split)
    ds = load_corpus(name, split)
    out: dict[str, Any] = {"corpus": name, "split": split, "rows": len(ds)}
    if "text" in ds.column_names:
        texts = ds["text"]
        out["characters"] = sum(len(t) for t in texts)
        out["words"] = sum(len(t.split()) for t in texts)
    path = local_file(name, split)
    out["source"] = str(path) if path else "hub"
    return out


# --------------------------------------------------------------------------------------------
# Tokens and windows
# --------------------------------------------------------------------------------------------


def tokenizer_fingerprint(tokenizer) -> str:
    """A short hash that changes whenever the tokenizer's vocabulary or rules change."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    payload = backend.to_str() if backend is not None else json.dumps(tokenizer.get_vocab(), sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def tokenize_text(text: str, tokenizer, *, cache: bool = True) -> np.ndarray:
    """Token ids of ``text`` (no special tokens) as int32, cached by text and tokenizer hash.

    The text is tokenized line by line (each line keeps its trailing newline), so the
    fast tokenizer runs batched; a token never spans two lines. Literal text such as WikiText's
    ``<unk>`` is tokenized as text, never as the tokenizer's special token
    (``split_special_tokens=True``).
    """
    if not text:
        raise ValueError("cannot tokenize an empty text")
    key = hashlib.sha256(text.encode()).hexdigest()[:16] + "-" + tokenizer_fingerprint(tokenizer)
    path = cache_dir() / "tokens" / f"{key}.npy"
    if cache and path.is_file():
        return np.load(path)
    lines = [line + "\n" for line in text.split("\n")]
    lines[-1] = lines[-1][:-1]
    ids: list[int] = []
    batch = 4096
    for i in range(0, len(lines), batch):
        enc = tokenizer(lines[i : i + batch], add_special_tokens=False,
                        split_special_tokens=True)["input_ids"]
        for row in enc:
            ids.extend(row)
    array = np.asarray(ids, dtype=np.int32)
    if cache:
        atomic_save_npy(path, array)
    return array


def cut_windows(tokens: np.ndarray | torch.Tensor, *, length: int, n: int | None = None,
                seed: int = 0, bos_id: int | None = None) -> torch.Tensor:
    """Cut a token stream into non-overlapping windows of ``length`` tokens, sampled by seed.

    With ``bos_id`` each window is ``[BOS] + (length - 1)`` corpus tokens. The stream is split into
    consecutive chunks; a seeded permutation picks ``n`` of them (all when ``n`` is None), so the
    first k windows for a seed are the same whatever ``n >= k`` is asked.
    """
    tokens = np.asarray(tokens)
    if tokens.ndim != 1:
        raise ValueError(f"tokens must be a 1-D stream, got shape {tokens.shape}")
    if length < 2:
        raise ValueError(f"window length must be at least 2 (a token and its successor), got {length}")
    body = length - (1 if bos_id is not None else 0)
    available = len(tokens) // body
    if available == 0:
        raise ValueError(f"the stream has {len(tokens)} tokens, fewer than one window of {body}")
    if n is None:
        n = available
    if n < 1 or n > available:
        raise ValueError(
            f"asked for {n} windows of {length} tokens but the stream has room for {available}; "
            "ask for fewer or shorter windows, or use a larger split"
        )
    order = np.random.default_rng(seed).permutation(available)[:n]
    chunks = tokens[: available * body].reshape(available, body)[order]
    out = torch.from_numpy(chunks.astype(np.int64))
    if bos_id is not None:
        out = torch.cat([torch.full((n, 1), int(bos_id), dtype=torch.long), out], dim=1)
    return out


def token_windows(name: str, split: str | None, tokenizer, *, length: int, n: int | None,
                  seed: int = 0, prepend_bos: bool = False, detokenize: bool = True) -> torch.Tensor:
    """Windows ``[n, length]`` of a named corpus under a model's tokenizer (BOS per the model)."""
    tokens = tokenize_text(corpus_text(name, split, detokenize=detokenize), tokenizer)
    bos = tokenizer.bos_token_id if prepend_bos else None
    if prepend_bos and bos is None:
        raise ValueError("prepend_bos=True but the tokenizer has no BOS token")
    return cut_windows(tokens, length=length, n=n, seed=seed, bos_id=bos)
