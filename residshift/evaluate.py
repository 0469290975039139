"""The evaluation harness: scores any causal LM that ``load_model`` returns.

So far: mean next-token loss and perplexity over token windows (what notebook 00 uses as a
sanity check of the dequantized models). The full harness (sliding-window perplexity per token and
per word, LAMBADA, PIQA, ARC) extends this module.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import torch
import torch.nn.functional as F

from .models import ModelInfo


def window_losses(model, info: ModelInfo, windows: torch.Tensor, *, batch_size: int = 8,
                  intervene: Callable[[Any, ModelInfo], None] | None = None,
                  progress: bool = False) -> torch.Tensor:
    """Per-token next-token losses ``[n, length - 1]`` (nats) for a batch of windows.

    Position t is scored on predicting token t+1. ``intervene(model, info)``, when given, runs
    inside the nnsight trace (e.g. ``lambda m, i: attenuate(m, i, {20: 0.5})``); without it the
    bare torch model runs, which is faster.
    """
    if windows.ndim != 2 or windows.shape[1] < 2:
        raise ValueError(f"windows must be [n, length >= 2] token ids, got shape {tuple(windows.shape)}")
    out = []
    starts = range(0, len(windows), batch_size)
    if progress:
        from tqdm.auto import tqdm

        starts = tqdm(starts, desc=f"{info.name} loss", unit="batch")
    for start in starts:
        ids = windows[start : start + batch_size]
        with torch.no_grad():
            if intervene is None:
                logits = model._module(ids.to(info.embedding.device)).logits
            else:
                with model.trace(ids, remote=info.remote):
                    intervene(model, info)
                    logits = model.output.logits.save()
        logits = logits.float()
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                               ids[:, 1:].reshape(-1).to(logits.device), reduction="none")
        out.append(loss.view(ids.shape[0], -1).cpu())
    return torch.cat(out)


def perplexity(losses: torch.Tensor) -> dict[str, float]:
    """Mean loss, perplexity and their standard errors (windows as the independent units)."""
    per_window = losses.mean(dim=1).double()
    n = len(per_window)
    mean = float(per_window.mean())
    se = float(per_window.std(unbiased=True) / math.sqrt(n)) if n > 1 else float("nan")
    return {"loss": mean, "loss_se": se, "ppl": math.exp(mean), "ppl_se": math.exp(mean) * se,
            "windows": n, "tokens": int(losses.numel())}
