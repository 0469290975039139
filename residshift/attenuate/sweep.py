"""Fixed residual attenuation, every layer x every alpha, on a pretrained model (claim C2).

Our definition (see ``residshift.core.interventions``): attenuating block ``l`` by ``alpha`` replaces
``block_l(x)`` by ``block_l(x) - (1 - alpha) x``, i.e. ``h_{l+1} = alpha h_l + F_l(h_l)``.
``alpha = 1`` is the unmodified model, ``alpha = 0`` cuts the skip path of that block.

What the sweep measures, per window ``w`` of a corpus: the mean next-token loss (nats) of the
attenuated model minus that of the unmodified model on the same window,
``dloss[l, a, w] = loss_w(attenuate l by alpha_a) - loss_w(unmodified)``. Windows are the unit of
resampling, so confidence intervals are paired bootstraps over windows (:func:`summarize`).

Why it is cheap: the residual stream entering block ``l`` does not depend on any alpha at ``l``.
One unmodified forward captures, for every block, its input and its call arguments (attention
mask, rotary tables, ...) through forward pre-hooks on the bare torch module, and so also each
block's unmodified output (the next block's input). For each ``(l, alpha)`` block ``l``'s captured
output is edited with :func:`residshift.core.residual.attenuated` (subtract ``(1 - alpha) h_l``, the
same formula that :func:`residshift.core.interventions.attenuate_block` applies inside nnsight
traces) and only blocks ``l+1..L-1``, the final norm and the head are replayed from it
(``residshift.core.replay.replay_from``). ``alpha = 1`` needs no replay at all (it is the unmodified
model; its dloss is exactly 0). The tests check that
this path equals the plain nnsight ``attenuate`` path; ``benchmarks/bench_sweep.py`` times both.

Resumable: the per-layer results are written atomically under
``results/sweep-partial/<config key>/layer-XX.pt`` as they complete (with their sha256,
``cache.save_verified``: a row whose bytes changed or that cannot be read is deleted and
recomputed with a DamagedFileWarning naming it), and the assembled result goes through
``cache.cached``.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar, Sequence

import pandas as pd
import torch

from ..analysis import stats
from ..core import cache, profiles
from ..core.data import token_windows
from ..core.forward import refuse_remote, window_losses
from ..core.interventions import _alpha_ok, attenuate
from ..core.replay import capture, replay_from
from ..core.residual import attenuated
from ..core.models import ModelInfo
from ..core.progress import progress as progress_bar
from ..core.unembed import next_token_losses

# why a remote (NDIF) model is refused (core.forward.refuse_remote)
_REPLAY = ("replays blocks on the local module (core.replay), which a remote model holds on the meta device; "
           "sweep.naive_sweep is the same sweep through one trace per cut")

DEFAULT_ALPHAS = (0.0, 0.25, 0.5, 0.75, 0.9, 1.0)


@dataclass
class SweepConfig:
    """What one sweep computes. ``layers=None`` means every layer."""

    PREFIX: ClassVar[str] = "sweep"  # its profile keys (profiles.stage): sweep_corpus, ..., sweep_windows

    model: str
    corpus: str = "wikitext-103"
    split: str = "validation"
    window: int = 128
    n_windows: int = field(default=16, metadata=profiles.key("windows"))
    batch_size: int = field(default=8, metadata=profiles.key("batch"))
    alphas: Sequence[float] = DEFAULT_ALPHAS
    layers: Sequence[int] | None = None
    seed: int = 0
    first_window: int = 0  # sweep windows first_window..n_windows-1 of the seed's nested windows

    def __post_init__(self) -> None:
        self.alphas = tuple(self.alphas)

    def checked(self, info: ModelInfo) -> "SweepConfig":
        alphas = [float(a) for a in self.alphas]
        if not alphas:
            raise ValueError("alphas is empty: give at least one alpha in [0, 1], e.g. (0, 0.5, 1)")
        if len(set(alphas)) != len(alphas):
            raise ValueError(f"alphas has duplicates: {alphas}")
        for a in alphas:
            _alpha_ok(a, allow_amplify=False)
        layers = list(range(info.n_layers)) if self.layers is None else [
            info.check_layer(int(l) % info.n_layers if int(l) < 0 else int(l)) for l in self.layers]
        if self.n_windows < 1 or self.batch_size < 1 or self.window < 2:
            raise ValueError("n_windows and batch_size must be >= 1 and window >= 2")
        if not 0 <= self.first_window < self.n_windows:
            raise ValueError(f"first_window must lie in 0..n_windows-1 = {self.n_windows - 1}, got {self.first_window}: "
                             "the sweep covers windows first_window..n_windows-1")
        if info.name != self.model:
            raise ValueError(f"config is for model {self.model!r} but the loaded model is {info.name!r}")
        return SweepConfig(self.model, self.corpus, self.split, self.window, self.n_windows,
                           self.batch_size, tuple(alphas), tuple(layers), self.seed, self.first_window)

    def key_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["alphas"] = [float(a) for a in self.alphas]
        d["layers"] = None if self.layers is None else [int(l) for l in self.layers]
        return d




def sweep_windows(lm, info: ModelInfo, windows: torch.Tensor, cfg: SweepConfig, *,
                  partial_dir=None, progress: bool = False) -> dict[str, Any]:
    """Run the sweep on ``windows`` ``[n, T]``; see the module docstring for what is returned.

    Returns ``{"base": [n] mean loss per window, "dloss": [n_layers_swept, n_alphas, n],
    "layers": [...], "alphas": [...], "config": ...}``. With ``partial_dir`` each finished layer is
    stored there atomically and reused on a rerun (resumption).
    """
    refuse_remote(info, "sweep.sweep_windows", _REPLAY)
    cfg = cfg.checked(info)
    if windows.ndim != 2 or windows.shape[1] < 2:
        raise ValueError(f"windows must be [n, length >= 2], got {tuple(windows.shape)}")
    module = lm._module
    batches = [windows[s:s + cfg.batch_size] for s in range(0, len(windows), cfg.batch_size)]
    caps, base_parts = [], []
    for b in batches:  # one batch's logits alive at a time (Gemma: 8 x 64 x 262k floats = 0.5 GiB each)
        c = capture(module, info, b, keep_logits=True)
        base_parts.append(next_token_losses(c.logits, c.ids).cpu())
        c.logits = None
        caps.append(c)
    base_tok = torch.cat(base_parts)
    base = base_tok.mean(dim=1)
    rows = []
    layers = list(cfg.layers)
    it = layers
    if progress:
        it = progress_bar(layers, desc=f"{info.name} sweep", unit="layer")
    for layer in it:
        path = None if partial_dir is None else partial_dir / f"layer-{layer:03d}.pt"
        done = None if path is None else cache.load_or_discard(  # a damaged row is recomputed, not reused
            path, what="partial sweep row", then=f"recomputing layer {layer}")
        if done is not None:
            rows.append(done)
            continue
        row = torch.zeros(len(cfg.alphas), len(windows))
        for ai, alpha in enumerate(cfg.alphas):
            if alpha == 1.0:
                continue  # the unmodified model: dloss is exactly zero
            # block `layer`'s unmodified output is the captured h_{layer+1}: edit it, replay the blocks after it
            per = [next_token_losses(replay_from(module, info, c, layer + 1,
                                                 attenuated(c.residual(layer + 1), c.inputs[layer], alpha)),
                                     c.ids).mean(dim=1).cpu()
                   for c in caps]
            row[ai] = torch.cat(per) - base
        if path is not None:
            cache.save_verified(row, path)
        rows.append(row)
    return {"base": base, "base_tokens": base_tok, "dloss": torch.stack(rows), "layers": layers,
            "n_layers": info.n_layers, "model": info.name,
            "alphas": list(cfg.alphas), "config": cfg.key_dict()}


def run_sweep(lm, info: ModelInfo, tokenizer, cfg: SweepConfig, *, progress: bool = False,
              refresh: bool = False) -> dict[str, Any]:
    """The cached, resumable sweep on ``cfg.corpus`` windows (BOS as the model expects): the seed's
    windows ``cfg.first_window..cfg.n_windows-1`` (windows of a seed are nested, so a confirmation
    sweep of the windows after a grid's shares none with it and recomputes none of them)."""
    refuse_remote(info, "sweep.run_sweep", _REPLAY)
    cfg = cfg.checked(info)
    key = cfg.key_dict()
    partial = cache.results_dir() / "sweep-partial" / cache.config_key(key, code=run_sweep)

    def compute():
        windows = token_windows(cfg.corpus, cfg.split, tokenizer, length=cfg.window,
                                n=cfg.n_windows, seed=cfg.seed, prepend_bos=info.prepend_bos)[cfg.first_window:]
        return sweep_windows(lm, info, windows, cfg, partial_dir=partial, progress=progress)

    return cache.cached("attenuation-sweep", key, compute, code=run_sweep, refresh=refresh)


def naive_sweep(lm, info: ModelInfo, windows: torch.Tensor, layers: Sequence[int],
                alphas: Sequence[float], *, batch_size: int = 8) -> dict[str, Any]:
    """The reference: one full nnsight forward with ``attenuate`` per (layer, alpha) (slow)."""
    base = window_losses(lm, info, windows, batch_size=batch_size).mean(dim=1)
    rows = []
    for layer in layers:
        row = torch.zeros(len(alphas), len(windows))
        for ai, alpha in enumerate(alphas):
            loss = window_losses(lm, info, windows, batch_size=batch_size,
                                 intervene=lambda m, i, l=layer, a=alpha: attenuate(m, i, {l: a}))
            row[ai] = loss.mean(dim=1) - base
        rows.append(row)
    return {"base": base, "dloss": torch.stack(rows), "layers": list(layers), "alphas": list(alphas)}


# ------------------------------------------------------------------------------------------
# Summaries (statistics: residshift.analysis.stats; verdict rules: residshift.analysis.verdicts)
# ------------------------------------------------------------------------------------------


def summarize(result: dict[str, Any], *, n_boot: int = 1000, seed: int = 0):
    """A long table: one row per (layer, alpha) with mean dloss, bootstrap CI and SE (:mod:`..analysis.stats`)."""
    rows = []
    d = result["dloss"]
    for li, layer in enumerate(result["layers"]):
        for ai, alpha in enumerate(result["alphas"]):
            x = d[li, ai]
            m, lo, hi = stats.bootstrap_mean(x, n_boot=n_boot, seed=seed)
            se = stats.mean_se(x)[1]
            rows.append({"layer": layer, "alpha": alpha, "dloss": m, "lo": lo, "hi": hi, "se": se})
    return pd.DataFrame(rows)


def best_alpha_per_layer(table) -> Any:
    """Per layer, the alpha with the lowest mean dloss (alpha = 1, dloss 0, included)."""
    idx = table.groupby("layer")["dloss"].idxmin()
    return table.loc[idx].reset_index(drop=True)
