"""A trained run's final model, measured on its own validation windows (cached by run and code).

Notebooks 06-08 compare variants of the grid by these per-window losses (windows are the units
inside one seed; seeds are the replicates) and read the learned gates' mean alpha per block here.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from ..core import cache
from ..core.forward import window_losses
from ..core.models import load_model
from .trainer import TrainConfig, load_data, read_summary

_VAL: dict[str, torch.Tensor] = {}


def val_windows(cfg: TrainConfig, tokenizer) -> torch.Tensor:
    """The run's validation windows, exactly as the trainer drew them (the same for every variant)."""
    key = cache.config_key({"c": cfg.context, "w": cfg.eval_windows, "v": cfg.val_corpus, "s": cfg.val_split,
                            "t": cfg.tokenizer, "corpus": cfg.corpus, "vocab": len(tokenizer)})
    if key not in _VAL:
        _VAL[key] = load_data(cfg, tokenizer).val
    return _VAL[key]


def final_eval(run: str | Path, *, device: str = "cpu", batch: int = 8) -> dict[str, Any]:
    """A finished run's final model on its own validation windows, cached by run and code:
    ``{"losses": [n_windows] mean next-token loss per window, "alphas": {block: mean alpha over the
    windows' tokens} (1.0 on a plain skip)}``."""
    run = Path(run)
    sm = read_summary(run)

    def compute():
        lm, tok, info = load_model(str(run / "model"), device=device)
        cfg = TrainConfig(**{k: v for k, v in sm["config"].items()})
        windows = val_windows(cfg, tok)
        losses = window_losses(lm, info, windows, batch_size=batch).double().mean(1)
        module = getattr(lm, "_module", lm)
        with torch.no_grad():
            a = torch.cat([module.token_alphas(windows[i:i + batch].to(device)) for i in range(0, len(windows), batch)],
                          dim=1)  # [L, n, T]
        return {"losses": losses.cpu().numpy(), "alphas": {int(l): float(a[l].mean()) for l in range(a.shape[0])}}

    return cache.cached("train-final-eval", {"run": run.name, "key": sm["key"]}, compute, code=final_eval)
