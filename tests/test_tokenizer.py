"""The byte-level BPE (residshift.train.tokenizer): training, caching, round trips, errors.

Training runs on tiny-shakespeare (1 MB, about a second) in a per-test cache folder."""
import json

import pytest

from residshift.core.data import corpus_text
from residshift.train import tokenizer as T


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RESIDSHIFT_CACHE", str(tmp_path))
    return tmp_path / "tokenizers"


def test_trains_caches_and_reloads_without_retraining(cache, monkeypatch):
    tok = T.train_bpe("tiny-shakespeare", 400)
    assert len(tok) == 400
    assert tok.bos_token == tok.eos_token == tok.pad_token == T.EOT
    folders = [p for p in cache.iterdir()]
    assert len(folders) == 1 and folders[0].name.startswith("tiny-shakespeare-train-v400-")
    meta = json.loads((folders[0] / "residshift.json").read_text())
    assert meta["vocab"] == 400 and meta["prepends_bos"] is True
    assert not [p for p in cache.iterdir() if p.name.startswith(".")]  # no temp folder left

    def boom(*a, **k):
        raise AssertionError("retrained instead of loading the cache")

    monkeypatch.setattr(T, "_train", boom)
    again = T.get_tokenizer("bpe:tiny-shakespeare:400")
    assert again.get_vocab() == tok.get_vocab()
    text = "ROMEO: But soft, what light through yonder window breaks?"
    assert again(text).input_ids == tok(text).input_ids


def test_different_settings_give_different_keys(cache):
    text = corpus_text("tiny-shakespeare", "train")
    h = T._text_hash(text)
    a = T.cache_key(T.BPEConfig("tiny-shakespeare", "train", 400), h)
    assert a != T.cache_key(T.BPEConfig("tiny-shakespeare", "train", 401), h)
    assert a != T.cache_key(T.BPEConfig("tiny-shakespeare", "train", 400, min_frequency=3), h)
    assert a != T.cache_key(T.BPEConfig("tiny-shakespeare", "train", 400), T._text_hash(text + "x"))
    assert a == T.cache_key(T.BPEConfig("tiny-shakespeare", "train", 400), h)
    T.train_bpe("tiny-shakespeare", 300)
    T.train_bpe("tiny-shakespeare", 320)
    assert len(list(cache.iterdir())) == 2


def test_round_trip_and_bos(cache):
    tok = T.train_bpe("tiny-shakespeare", 300)
    for text in ["To be, or not to be: that is the question.\n",
                 "  two spaces, a tab\tand <unk> @-@ Ünïcödé ✓ 漢字\n\nend"]:
        body = tok(text, add_special_tokens=False).input_ids
        assert tok.decode(body) == text
        assert tok(text).input_ids == [tok.bos_token_id] + body  # BOS first: our choice
        assert len(body) < len(text.encode())  # merges were learned
    assert T.prepends_bos(tok)
    assert tok("<|endoftext|>", add_special_tokens=False).input_ids == [tok.eos_token_id]


def test_saved_with_a_model_folder(cache, tmp_path):
    """A trained tokenizer saved beside a checkpoint comes back through load_model with BOS."""
    import torch

    from residshift.core.models import load_model
    from residshift.core.models.gpt import GPT, GPTConfig

    tok = T.train_bpe("tiny-shakespeare", 300)
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=2, n_head=2, n_embd=16, block_size=16, vocab_size=len(tok),
                          bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id))
    folder = tmp_path / "ckpt"
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    lm, tok2, info = load_model(str(folder))
    assert info.prepend_bos and info.bos_token_id == tok.bos_token_id
    assert tok2.get_vocab() == tok.get_vocab()
    assert T.get_tokenizer(str(folder)).get_vocab() == tok.get_vocab()


def test_pretrained_tokenizer_by_name():
    tiny = T.get_tokenizer("tiny-llama")
    assert len(tiny) == 259


@pytest.mark.slow
def test_smollm2_tokenizer_by_name():
    tok = T.get_tokenizer("smollm2-135m")
    assert len(tok) == 49152
    assert not T.prepends_bos(tok)
    text = "The capital of France is Paris."
    assert tok.decode(tok(text, add_special_tokens=False).input_ids) == text


@pytest.mark.parametrize("spec, match", [
    ("bpe:nowhere:1024", "unknown corpus"),
    ("bpe:wikitext-2:100", "too small"),
    ("bpe:wikitext-2:lots", "not an integer"),
    ("bpe:a:b:c", "cannot read"),
    ("nonsense", "unknown tokenizer"),
    ("", "a tokenizer spec is"),
    (T.BPEConfig(split="validation-ish"), "has no split"),
    (T.BPEConfig(min_frequency=0), "min_frequency"),
])
def test_bad_specs_name_the_fix(spec, match, cache):
    with pytest.raises(T.TokenizerSpecError, match=match):
        T.get_tokenizer(spec)
    assert not cache.exists()


def test_corpus_too_small_or_not_text(cache):
    with pytest.raises(T.TokenizerSpecError, match="yields only"):
        T.train_bpe("tiny-shakespeare", 200_000)
    with pytest.raises(T.TokenizerSpecError, match="multiple-choice"):
        T.train_bpe("piqa", 1000, split="validation")
    assert not cache.exists() or not list(cache.iterdir())


def test_folder_without_tokenizer_files(tmp_path):
    with pytest.raises(T.TokenizerSpecError, match="no tokenizer files"):
        T.get_tokenizer(str(tmp_path))
