"""Tiny random-initialised models built in-process (the tests, the ``smoke`` profile)."""

from __future__ import annotations


import torch
from tokenizers import Tokenizer, decoders
from tokenizers.models import BPE
from tokenizers.pre_tokenizers import ByteLevel



from .interface import UnknownModelError


# --------------------------------------------------------------------------------------------
# Tiny random-initialised models (tests, smoke profile)
# --------------------------------------------------------------------------------------------


def byte_tokenizer():
    """A byte-level tokenizer built in-process (256 byte symbols + <bos>, <eos>, <pad>)."""
    from transformers import PreTrainedTokenizerFast  # lazy: transformers ~1 s; most importers load no model

    vocab = {c: i for i, c in enumerate(sorted(ByteLevel.alphabet()))}
    for special in ("<bos>", "<eos>", "<pad>"):
        vocab[special] = len(vocab)
    tok = Tokenizer(BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>"
    )


def _tiny_config(kind: str, vocab: int, bos: int, eos: int, pad: int, **overrides):
    from transformers import Gemma3TextConfig, GPT2Config, LlamaConfig  # lazy: transformers ~1 s; most importers load no model

    common = dict(vocab_size=vocab, bos_token_id=bos, eos_token_id=eos, pad_token_id=pad,
                  tie_word_embeddings=True)
    if kind == "tiny-llama":
        cfg = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)
        return LlamaConfig(**{**common, **cfg, **overrides})
    if kind == "tiny-gpt2":
        cfg = dict(n_embd=64, n_layer=4, n_head=4, n_positions=512, resid_pdrop=0.0,
                   embd_pdrop=0.0, attn_pdrop=0.0)
        return GPT2Config(**{**common, **cfg, **overrides})
    if kind == "tiny-gemma3":
        cfg = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                   num_attention_heads=4, num_key_value_heads=1, head_dim=16,
                   max_position_embeddings=512, sliding_window=16,
                   final_logit_softcapping=30.0, layer_types=["sliding_attention",
                   "full_attention", "sliding_attention", "full_attention"])
        return Gemma3TextConfig(**{**common, **cfg, **overrides})
    raise UnknownModelError(f"unknown tiny model {kind!r}")


TINY = {
    "tiny-llama": "Llama-style (RMSNorm, RoPE, SwiGLU), 4 layers, d 64, byte vocabulary",
    "tiny-gpt2": "GPT-2-style (LayerNorm, learned positions, GELU MLP), 4 layers, d 64",
    "tiny-gemma3": "Gemma-3-style (sqrt(d) embedding scale, sandwich norms) with a logit soft-cap of 30",
}


def build_tiny(name: str, *, seed: int = 0, **config_overrides):
    """Build a tiny random-initialised tied model and its byte tokenizer (no downloads)."""
    from transformers import AutoModelForCausalLM  # lazy: transformers ~1 s; most importers load no model

    if name not in TINY:
        raise UnknownModelError(f"unknown tiny model {name!r}; known: {sorted(TINY)}")
    tokenizer = byte_tokenizer()
    cfg = _tiny_config(name, len(tokenizer), tokenizer.bos_token_id, tokenizer.eos_token_id,
                       tokenizer.pad_token_id, **config_overrides)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    model.tie_weights()
    return model, tokenizer
