"""Tables for the reader's tour (notebook 00): what each model and corpus is, measured, not typed."""
from __future__ import annotations

import time
from typing import Any

import torch

from ..core import cache

from ..core import data
from ..measure.evaluate import perplexity, window_losses
from ..core.models import LoadedModel, load_model


def timed_load(name: str, **kwargs) -> tuple[LoadedModel, float]:
    """``load_model`` and the seconds it took."""
    t0 = time.perf_counter()
    loaded = load_model(name, **kwargs)
    return loaded, time.perf_counter() - t0


def model_row(loaded: LoadedModel, load_seconds: float | None = None) -> dict[str, Any]:
    """Architecture facts plus the tie check, read off the loaded model."""
    lm, _, info = loaded
    module = lm._module
    inp, out = module.get_input_embeddings().weight, module.get_output_embeddings().weight
    row = info.describe()
    row["tied_same_tensor"] = bool(inp is out or inp.data_ptr() == out.data_ptr())
    row["dtype"] = str(info.embedding.dtype).removeprefix("torch.")
    if load_seconds is not None:
        row["load_s"] = round(load_seconds, 2)
    return row


def sample_perplexity(loaded: LoadedModel, *, corpus: str, split: str, window: int, n: int,
                      seed: int = 0, batch_size: int = 4) -> dict[str, Any]:
    """Perplexity on ``n`` seeded windows of ``window`` tokens (cached by configuration).

    Each window starts fresh (BOS where the model uses one), so early positions have little
    context: this is a sanity check of the weights, not the harness's sliding-window number.
    """
    lm, tok, info = loaded
    config = {"model": info.name, "source": info.source, "corpus": corpus, "split": split,
              "window": window, "n": n, "seed": seed, "bos": info.prepend_bos,
              "dtype": str(info.embedding.dtype)}

    def compute():
        windows = data.token_windows(corpus, split, tok, length=window, n=n, seed=seed,
                                     prepend_bos=info.prepend_bos)
        losses = window_losses(lm, info, windows, batch_size=batch_size)
        if info.prepend_bos:  # predicting the first real token from BOS alone is not language modelling
            losses = losses[:, 1:]
        return perplexity(losses)

    result = dict(cache.cached("sample-perplexity", config, compute, code=sample_perplexity))
    result["model"] = info.name
    result["uniform_ppl"] = info.vocab_size
    return result


def corpus_rows(tokenizers: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every named corpus split with its size; tokens per model for running-text corpora."""
    rows = []
    for name, corpus in data.CORPORA.items():
        for split in corpus.splits:
            row = data.corpus_stats(name, split)
            row["description"] = corpus.description
            if tokenizers and "words" in row:
                text = data.corpus_text(name, split)
                for model, tok in tokenizers.items():
                    row[f"tokens[{model}]"] = int(len(data.tokenize_text(text, tok)))
            rows.append(row)
    return rows


def tie_probe(loaded: LoadedModel) -> float:
    """Max |E_in - E_out| after a write to the input embedding (0.0 only if truly one tensor)."""
    lm, _, _ = loaded
    module = lm._module
    w = module.get_input_embeddings().weight
    with torch.no_grad():
        old = w[0, 0].item()
        w[0, 0] += 1.0
        diff = (module.get_output_embeddings().weight[0, 0] - w[0, 0]).abs().item()
        w[0, 0] = old
    return diff
