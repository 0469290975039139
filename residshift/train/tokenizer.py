"""Tokenizers for the trained GPTs: a byte-level BPE trained on a corpus, or a pretrained model's.

>>> tok = get_tokenizer("bpe:wikitext-2:1024")      # BPE, 1,024 tokens, trained on WikiText-2 train
>>> tok = train_bpe("wikitext-2", 4096)              # the same, as a call
>>> tok = get_tokenizer("smollm2-135m")              # SmolLM2's own tokenizer (offline)

The BPE is GPT-2's recipe with the ``tokenizers`` library: byte-level pre-tokenization (GPT-2's
split pattern, no prefix space), 256 byte symbols, one special token ``<|endoftext|>`` that serves
as BOS, EOS and padding, and merges learned on the training split only (``data.corpus_text``, so
WikiText is detokenized exactly as ``data.token_windows`` feeds it). Our choice: the tokenizer
PREPENDS ``<|endoftext|>`` as BOS when asked for special tokens (``tok(text).input_ids`` starts with
it; ``add_special_tokens=False`` and ``data.tokenize_text`` do not), so ``load_model`` on a trained
folder reports ``prepend_bos=True`` and the harness and the lens put BOS first, as training does:
every training window is ``[BOS] + corpus tokens`` (``data.token_windows(..., prepend_bos=True)``).
The BOS position gives a window cut mid-sentence a defined start and the first real token a
predictor. ``prepends_bos(tokenizer)`` tells the trainer which rule a tokenizer follows (a
pretrained model's tokenizer keeps its own: SmolLM2's adds no BOS).

Trained tokenizers are cached under ``cache_dir()/tokenizers/<corpus>-<split>-v<vocab>-<key>/``,
``<key>`` a hash of the corpus text, the settings and the ``tokenizers`` version, written to a
temporary folder and renamed into place (a crash leaves no half-written tokenizer).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

import tokenizers
from tokenizers import Tokenizer, decoders, pre_tokenizers, processors, trainers
from tokenizers.models import BPE
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from ..core import models
from ..core.cache import atomic_dir
from ..core.data import CORPORA, corpus_text
from ..core.paths import cache_dir

EOT = "<|endoftext|>"
N_BYTES = 256
MIN_VOCAB = N_BYTES + 2  # bytes, <|endoftext|>, and at least one merge


class TokenizerSpecError(ValueError):
    """A tokenizer spec or setting that cannot be honoured; the message names the fix."""


@dataclass(frozen=True)
class BPEConfig:
    """One trained BPE: corpus split, vocabulary size (special token included), min pair count."""

    corpus: str = "wikitext-2"
    split: str = "train"
    vocab_size: int = 4096
    min_frequency: int = 2

    def checked(self) -> "BPEConfig":
        if self.corpus not in CORPORA:
            raise TokenizerSpecError(f"unknown corpus {self.corpus!r}; known: {', '.join(CORPORA)}")
        splits = CORPORA[self.corpus].splits
        if self.split not in splits:
            raise TokenizerSpecError(f"{self.corpus} has no split {self.split!r}; available: {splits} "
                                     "(train the tokenizer on the training split)")
        if not isinstance(self.vocab_size, int) or isinstance(self.vocab_size, bool):
            raise TokenizerSpecError(f"vocab_size must be an int, got {self.vocab_size!r}")
        if self.vocab_size < MIN_VOCAB:
            raise TokenizerSpecError(
                f"vocab_size {self.vocab_size} is too small: a byte-level BPE needs the {N_BYTES} bytes, "
                f"{EOT} and at least one merge, so at least {MIN_VOCAB}")
        if not isinstance(self.min_frequency, int) or self.min_frequency < 1:
            raise TokenizerSpecError(f"min_frequency must be an int >= 1, got {self.min_frequency!r}")
        return self


def _text_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def cache_key(cfg: BPEConfig, text_hash: str) -> str:
    """The folder name of a trained BPE: readable settings plus a hash of text, settings, library."""
    payload = json.dumps({"text": text_hash, "settings": asdict(cfg), "tokenizers": tokenizers.__version__,
                          "recipe": "bytelevel-gpt2-eot-bos"}, sort_keys=True)
    digest = hashlib.sha256(payload.encode()).hexdigest()[:16]
    return f"{cfg.corpus}-{cfg.split}-v{cfg.vocab_size}-{digest}"


def _train(lines: list[str], cfg: BPEConfig):
    """Train the ``tokenizers`` BPE on ``lines`` (each with its newline). Returns a ``Tokenizer``."""
    tok = Tokenizer(BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=cfg.vocab_size, min_frequency=cfg.min_frequency,
                                  special_tokens=[EOT], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(lines, trainer=trainer, length=len(lines))
    eot = tok.token_to_id(EOT)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{EOT} $A", pair=f"{EOT} $A {EOT} $B:1", special_tokens=[(EOT, eot)])
    return tok


def _wrap(tok):
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=EOT, eos_token=EOT, pad_token=EOT)


def _load(folder: Path):
    return PreTrainedTokenizerFast.from_pretrained(str(folder))


def train_bpe(corpus: str = "wikitext-2", vocab_size: int = 4096, *, split: str = "train",
              min_frequency: int = 2, refresh: bool = False):
    """A byte-level BPE trained on ``corpus``'s ``split`` (cached; see the module docstring).

    Returns a ``transformers.PreTrainedTokenizerFast`` with ``len(tok) == vocab_size``. Raises
    :class:`TokenizerSpecError` for an unknown corpus or split, a vocabulary too small, or a corpus
    too small to learn ``vocab_size`` tokens.
    """
    cfg = BPEConfig(corpus, split, vocab_size, min_frequency).checked()
    try:
        text = corpus_text(cfg.corpus, cfg.split)
    except ValueError as err:  # e.g. a multiple-choice set
        raise TokenizerSpecError(f"cannot train a tokenizer on {cfg.corpus}: {err}") from err
    folder = tokenizer_dir(cfg, text)
    if (folder / "residshift.json").is_file() and not refresh:
        return _load(folder)
    lines = [line + "\n" for line in text.split("\n")]
    tok = _train(lines, cfg)
    if tok.get_vocab_size() != cfg.vocab_size:
        raise TokenizerSpecError(
            f"{cfg.corpus} {cfg.split} yields only {tok.get_vocab_size()} tokens with min_frequency="
            f"{cfg.min_frequency}; ask for vocab_size <= {tok.get_vocab_size()} or lower min_frequency")
    wrapped = _wrap(tok)
    meta = {**asdict(cfg), "text_sha256": _text_hash(text), "vocab": len(wrapped), "prepends_bos": True}
    _atomic_save(wrapped, folder, meta)
    return _load(folder)


def tokenizer_dir(cfg: BPEConfig, text: str) -> Path:
    return cache_dir() / "tokenizers" / cache_key(cfg, _text_hash(text))


def _atomic_save(tokenizer, target: Path, meta: dict) -> None:
    with atomic_dir(target) as tmp:
        tokenizer.save_pretrained(str(tmp))
        (tmp / "residshift.json").write_text(json.dumps(meta, indent=2))


def prepends_bos(tokenizer) -> bool:
    """Does ``tokenizer`` put BOS first when asked for special tokens? (the training-window rule)"""
    return models._tokenizer_adds_bos(tokenizer)


SPEC_HELP = ("a tokenizer spec is 'bpe:<vocab>' (WikiText-2 train), 'bpe:<corpus>:<vocab>', a BPEConfig, "
             "or a model name load_model knows (e.g. 'smollm2-135m', 'tiny-llama', a folder holding "
             "tokenizer files, an owner/name hub id in the local cache)")


def parse_spec(spec: str) -> BPEConfig:
    """``"bpe:<vocab>"`` or ``"bpe:<corpus>:<vocab>"`` -> :class:`BPEConfig` (checked)."""
    parts = spec.split(":")
    if parts[0] != "bpe" or len(parts) not in (2, 3):
        raise TokenizerSpecError(f"cannot read {spec!r}: {SPEC_HELP}")
    corpus = parts[1] if len(parts) == 3 else BPEConfig.corpus
    try:
        vocab = int(parts[-1])
    except ValueError:
        raise TokenizerSpecError(f"{spec!r}: the vocabulary size {parts[-1]!r} is not an integer; "
                                 "write e.g. 'bpe:wikitext-2:4096'") from None
    return BPEConfig(corpus=corpus, vocab_size=vocab).checked()


def get_tokenizer(spec):
    """One entry point: a trained BPE (``"bpe:..."`` or a :class:`BPEConfig`) or a pretrained
    model's tokenizer by the names ``residshift.core.models.load_model`` accepts (offline)."""
    if isinstance(spec, BPEConfig):
        c = spec.checked()
        return train_bpe(c.corpus, c.vocab_size, split=c.split, min_frequency=c.min_frequency)
    if not isinstance(spec, str) or not spec:
        raise TokenizerSpecError(f"got {spec!r}: {SPEC_HELP}")
    if spec.startswith("bpe:") or spec == "bpe":
        c = parse_spec(spec)
        return train_bpe(c.corpus, c.vocab_size, split=c.split, min_frequency=c.min_frequency)
    if spec in models.EMBEDDED:
        return _embedded_tokenizer(spec)
    if spec in models.TINY:
        return models.byte_tokenizer()
    folder = Path(spec).expanduser()
    if folder.is_dir():
        if not any((folder / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json")):
            raise TokenizerSpecError(f"{folder} holds no tokenizer files (tokenizer.json); point at a "
                                     "folder written by save_pretrained")
        return _auto(str(folder))
    if "/" in spec or spec in models.BARE_HUB_IDS or spec.startswith("hub:"):
        return _auto(spec.removeprefix("hub:"))
    raise TokenizerSpecError(f"unknown tokenizer {spec!r}: {SPEC_HELP}. Models: "
                             f"{', '.join(list(models.EMBEDDED) + list(models.TINY))}")


def _auto(ref: str):
    try:
        return AutoTokenizer.from_pretrained(ref)
    except OSError as err:
        raise TokenizerSpecError(f"cannot load the tokenizer of {ref!r} (offline and not in the local "
                                 f"Hugging Face cache, or not a tokenizer folder): {err}") from err


def _embedded_tokenizer(name: str):
    """An embedded model's tokenizer: from its dequantized folder when cached, else from the GGUF
    (no need to dequantize the weights for the tokenizer alone)."""
    folder = models.embedded_cache_path(name)
    if (folder / "residshift.json").is_file():
        return AutoTokenizer.from_pretrained(str(folder))
    spec = models.EMBEDDED[name]
    gguf = spec.locate(spec)
    return AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
