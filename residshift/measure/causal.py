"""Causal localization of the shift: nnsight interventions per layer, scored by next-token loss.

The decoding view (``lens``) asks what a hidden state *looks like* through the unembedding; this
module asks what the model *uses*: edit the residual stream at one layer, run the rest of the model,
and measure the change in next-token loss. Definitions (ours):

- Residual index ``l = 0..L``: ``h_0`` is the input of block 0 (the scaled embedding, plus
  position embeddings where the model adds them), ``h_l`` (``l >= 1``) the output of block ``l-1``.
- Scored positions: ``t = skip_first .. T-2`` of each window; the loss at ``t`` is the
  cross-entropy of the model's prediction of ``x_{t+1}``. A sequence's loss is the mean over its
  scored positions; ``Δloss = loss(edited) - loss(clean)`` per sequence, so confidence intervals
  bootstrap over sequences. Position 0 (BOS, or the first token) is neither edited nor scored:
  models use it as an attention sink with huge activations, so editing it measures sink
  disruption, not token identity.

(a) **Skip-path ablation** (:func:`skip_ablation_profile`): for each block ``l`` and each ``alpha``,
    the edit of :func:`residshift.core.interventions.attenuate`:
    ``h_{l+1} = block_l(h_l) - (1 - alpha) h_l`` (``alpha = 1`` is the unmodified model).
(b) **Token-direction ablation** (:func:`direction_ablation_profile`): at residual index ``l``
    only, at every edited position ``t``, remove the component of ``h_l(t)`` along a unit token
    direction ``u(t) = e_k / ||e_k||`` (``e_k`` a row of the tied matrix ``E``):
    ``h'_l(t) = h_l(t) - (h_l(t) · u(t)) u(t)``. The projection is taken on the residual as the model
    carries it; Gemma's ``sqrt(d)`` embedding scale changes the length of ``h_0 = sqrt(d) e_{x_t}``
    but not its direction, so at ``l = 0`` the edit removes the token embedding entirely (up to
    position embeddings in GPT-2). Directions, per position ``t``:

    - ``"input"``: ``k = x_t`` (the current token);
    - ``"next"``: ``k = x_{t+1}`` (the token the loss at ``t`` asks for; nothing at the last position);
    - ``"random"``: the control, ``k`` = the token of a random other position of the same windows
      (so it follows the corpus's unigram distribution), redrawn where it equals ``x_t`` or ``x_{t+1}``.

    All positions are edited at once, in one pass per layer (edits at earlier positions reach ``t``
    through attention too: that is part of what "the model uses this direction at layer l" means).
    Where the input-direction ablation stops mattering and the next-direction ablation starts to
    matter is a causal analogue of the decoding-based shift layer (:func:`causal_crossover`).

All edits run inside nnsight traces; results are cached (:func:`run_cached`) as per-sequence ×
per-layer tensors plus metadata, for the bootstrap in the notebooks.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Sequence

import torch
import torch.nn.functional as F

from ..core import cache
from .evaluate import window_losses
from ..core.interventions import attenuate
from ..core.models import ModelInfo
from ..core.unembed import next_token_losses

VERSION = "residshift-causal/1"
DIRECTIONS = ("input", "next", "random")


@dataclass(frozen=True)
class CausalConfig:
    """What determines a causal profile (the cache key is built from it and the model)."""

    corpus: str = "wikitext-103"
    split: str = "validation"
    window: int = 128
    n_windows: int = 16
    batch: int = 8
    alphas: tuple[float, ...] = (0.0, 0.5)
    directions: tuple[str, ...] = DIRECTIONS
    skip_first: int = 1
    seed: int = 0
    center: bool = False  # remove centred directions (e_k - mean_k e_k) instead of raw ones

    def __post_init__(self) -> None:
        object.__setattr__(self, "alphas", tuple(float(a) for a in self.alphas))
        object.__setattr__(self, "directions", tuple(self.directions))
        bad = [d for d in self.directions if d not in DIRECTIONS]
        if bad:
            raise ValueError(f"unknown direction(s) {bad}; choose from {DIRECTIONS}")
        for a in self.alphas:
            if not 0.0 <= a <= 1.0:
                raise ValueError(f"alphas must lie in [0, 1] (1 = unmodified skip path), got {a}")
        if self.n_windows < 1 or self.batch < 1:
            raise ValueError("n_windows and batch must be >= 1")
        check_window(self.window, self.skip_first)

    @classmethod
    def from_profile(cls, P: Any) -> "CausalConfig":
        """The config of a resolved profile (``profiles.resolve``): the ``causal_*`` keys."""
        return cls(corpus=P.causal_corpus, split=P.causal_split, window=P.causal_window,
                   n_windows=P.causal_windows, batch=P.causal_batch, alphas=tuple(P.causal_alphas),
                   directions=tuple(P.causal_directions), seed=P.seed)


def check_window(length: int, skip_first: int) -> None:
    if skip_first < 0:
        raise ValueError(f"skip_first must be >= 0, got {skip_first}")
    if length < skip_first + 2:
        raise ValueError(f"windows of {length} tokens leave no scored position after skip_first="
                         f"{skip_first}: use windows of at least {skip_first + 2} tokens")


# --------------------------------------------------------------------------------------------
# Losses
# --------------------------------------------------------------------------------------------


def sequence_losses(logits: torch.Tensor, ids: torch.Tensor, skip_first: int = 1) -> torch.Tensor:
    """Mean next-token cross-entropy (nats) over positions ``skip_first .. T-2``, per sequence [B]."""
    check_window(ids.shape[1], skip_first)
    return next_token_losses(logits, ids)[:, skip_first:].mean(1).cpu()


def _check_windows(windows: torch.Tensor, skip_first: int) -> None:
    if not isinstance(windows, torch.Tensor) or windows.ndim != 2:
        raise ValueError(f"windows must be a [n, length] tensor of token ids, got {getattr(windows, 'shape', windows)}")
    check_window(windows.shape[1], skip_first)


# --------------------------------------------------------------------------------------------
# (a) Skip-path ablation
# --------------------------------------------------------------------------------------------


def skip_ablation_profile(lm, info: ModelInfo, windows: torch.Tensor, *, alphas: Sequence[float] = (0.0, 0.5),
                          layers: Sequence[int] | None = None, batch: int = 8, skip_first: int = 1,
                          progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Δ next-token loss per sequence when block ``l``'s skip path is scaled by ``alpha``.

    Returns ``{"clean": [n], "delta": [len(alphas), n, len(layers)], "alphas", "layers"}``; column
    ``j`` of ``delta`` is block ``layers[j]`` (whose skip path carries ``h_{layers[j]}``).
    """
    _check_windows(windows, skip_first)
    layers = list(range(info.n_layers)) if layers is None else [info.check_layer(l) for l in layers]
    clean = window_losses(lm, info, windows, batch_size=batch)[:, skip_first:].mean(1)
    delta = torch.zeros(len(alphas), len(windows), len(layers))
    for i, alpha in enumerate(alphas):
        for j, layer in enumerate(layers):
            edited = window_losses(lm, info, windows, batch_size=batch,
                                   intervene=lambda m, inf, l=layer, a=alpha: attenuate(m, inf, l, a))
            delta[i, :, j] = edited[:, skip_first:].mean(1) - clean
            if progress is not None:
                progress(f"skip alpha={alpha} block {layer}: mean Δloss {delta[i, :, j].mean():+.4f}")
    return {"clean": clean, "delta": delta, "alphas": [float(a) for a in alphas], "layers": layers}


# --------------------------------------------------------------------------------------------
# (b) Token-direction ablation
# --------------------------------------------------------------------------------------------


def random_control_tokens(ids: torch.Tensor, *, skip_first: int = 1, seed: int = 0, tries: int = 20) -> torch.Tensor:
    """Per position, the token of a random other edited position of ``ids`` (≠ ``x_t``, ≠ ``x_{t+1}``).

    Positions before ``skip_first`` get -1 (not edited). Draws come from a generator seeded by ``seed``.
    """
    g = torch.Generator().manual_seed(seed)
    B, T = ids.shape
    pool = ids[:, skip_first:].reshape(-1)
    nxt = torch.cat([ids[:, 1:], torch.full((B, 1), -1, dtype=ids.dtype)], 1)
    out = torch.full_like(ids, -1)
    body = out[:, skip_first:]
    body.copy_(pool[torch.randint(0, len(pool), body.shape, generator=g)])
    for _ in range(tries):
        clash = (body == ids[:, skip_first:]) | (body == nxt[:, skip_first:])
        if not clash.any():
            break
        body[clash] = pool[torch.randint(0, len(pool), (int(clash.sum()),), generator=g)]
    return out


def direction_tokens(ids: torch.Tensor, kind: str, *, skip_first: int = 1, seed: int = 0) -> torch.Tensor:
    """Token id whose embedding direction is removed at each position (-1 = no edit) [B, T]."""
    if kind not in DIRECTIONS:
        raise ValueError(f"unknown direction {kind!r}; choose from {DIRECTIONS}")
    B = ids.shape[0]
    if kind == "input":
        tok = ids.clone()
    elif kind == "next":
        tok = torch.cat([ids[:, 1:], torch.full((B, 1), -1, dtype=ids.dtype)], 1)
    else:
        tok = random_control_tokens(ids, skip_first=skip_first, seed=seed)
    tok[:, :skip_first] = -1
    return tok


def unit_directions(info: ModelInfo, tokens: torch.Tensor, *, center: bool = False) -> torch.Tensor:
    """``e_k / ||e_k||`` for each token id in ``tokens`` [B, T] -> [B, T, d]; zero where ``k = -1``.

    With ``center`` the direction is that of ``e_k - ē`` (``ē`` the mean embedding row): embedding
    matrices often share a large common component, and removing it (what every raw direction
    partly does) hurts whatever the token is; the random-direction control measures that.
    """
    E = info.embedding.detach().float()
    safe = tokens.clamp(min=0)
    rows = E[safe] - E.mean(0) if center else E[safe]
    u = F.normalize(rows, dim=-1)
    return u * (tokens >= 0).unsqueeze(-1)


def remove_direction(h: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """``h - (h · u) u`` along the last dim, for unit (or zero) ``u`` broadcastable to ``h``."""
    u = u.to(h.dtype).to(h.device)
    return h - (h * u).sum(-1, keepdim=True) * u


def check_residual_index(info: ModelInfo, residual: int) -> int:
    if not isinstance(residual, int) or isinstance(residual, bool) or not 0 <= residual <= info.n_layers:
        raise IndexError(f"residual index {residual!r} is out of range for {info.name}: use 0..{info.n_layers} "
                         f"(0 = input of block 0, l = output of block l-1)")
    return residual


def edit_residual(lm, info: ModelInfo, residual: int, edit: Callable[[Any], Any]) -> None:
    """Inside a trace: replace ``h_residual`` by ``edit(h_residual)`` (block input or output)."""
    layers = info.layer_envoys(lm)
    if residual == 0:
        layers[0].input = edit(layers[0].input)
    else:
        layers[residual - 1].output = edit(layers[residual - 1].output)


def direction_ablated_logits(lm, info: ModelInfo, ids: torch.Tensor, residual: int,
                             units: torch.Tensor) -> torch.Tensor:
    """Logits of ``ids`` with the component along ``units`` [B, T, d] removed from ``h_residual``."""
    check_residual_index(info, residual)
    with torch.no_grad():
        with lm.trace(ids, remote=info.remote):
            edit_residual(lm, info, residual, lambda h: remove_direction(h, units))
            logits = lm.output.logits.save()
    return logits


def direction_ablation_profile(lm, info: ModelInfo, windows: torch.Tensor, *,
                               directions: Sequence[str] = DIRECTIONS, residuals: Sequence[int] | None = None,
                               batch: int = 8, skip_first: int = 1, seed: int = 0, center: bool = False,
                               progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Δ next-token loss per sequence when a token direction is removed at one residual index.

    Returns ``{"clean": [n], "delta": [len(directions), n, len(residuals)], "directions",
    "residuals"}``; column ``j`` of ``delta`` is residual index ``residuals[j]``.
    """
    _check_windows(windows, skip_first)
    residuals = list(range(info.n_layers + 1)) if residuals is None else [check_residual_index(info, r) for r in residuals]
    clean = window_losses(lm, info, windows, batch_size=batch)[:, skip_first:].mean(1)
    delta = torch.zeros(len(directions), len(windows), len(residuals))
    for i, kind in enumerate(directions):
        for start in range(0, len(windows), batch):
            ids = windows[start:start + batch]
            units = unit_directions(info, direction_tokens(ids, kind, skip_first=skip_first, seed=seed + start),
                                    center=center)
            for j, r in enumerate(residuals):
                logits = direction_ablated_logits(lm, info, ids, r, units)
                delta[i, start:start + len(ids), j] = sequence_losses(logits, ids, skip_first) - clean[start:start + len(ids)]
        if progress is not None:
            progress(f"direction {kind}: mean Δloss per layer {[round(float(x), 4) for x in delta[i].mean(0)]}")
    return {"clean": clean, "delta": delta, "directions": list(directions), "residuals": residuals,
            "center": center}


# --------------------------------------------------------------------------------------------
# Summaries with bootstrap CIs (over sequences), with the shift-layer rules of ``stats``
# --------------------------------------------------------------------------------------------


def direction_effects(result: dict[str, Any]) -> dict[str, torch.Tensor]:
    """Per-sequence effects ``[n, L+1]`` of removing the input / next direction, net of the control.

    ``effect_k(l) = Δloss(remove e_k at l) - Δloss(remove a random token's direction at l)``.
    """
    d = result["directions"]
    if not {"input", "next", "random"} <= set(d):
        raise ValueError("the causal shift needs the 'input', 'next' and 'random' directions in the result; "
                         "run with directions=('input', 'next', 'random')")
    delta = result["delta"]
    control = delta[d.index("random")]
    return {"input": delta[d.index("input")] - control, "next": delta[d.index("next")] - control,
            "control": control}


def causal_crossover(result: dict[str, Any], *, n_boot: int = 1000, seed: int = 0, level: float = 0.95,
                     rule: str = "first") -> dict[str, Any]:
    """The causal shift layer, with the same rules as the decoding-based one (:mod:`residshift.analysis.stats`).

    With ``a_in(l)``, ``a_next(l)`` the mean control-corrected effects of :func:`direction_effects`
    (how much the model *uses* each direction at residual index ``l``), the causal shift is the
    first ``l`` where ``a_next(l) > a_in(l)`` (``rule="first"``; ``"sustained"`` = from there on),
    interpolated to a sub-layer crossing, with a percentile bootstrap CI over sequences (resamples
    that never cross are counted in ``frac_never``). Also reported: ``input_last_significant``, the
    last index whose input-effect CI lies above 0, and ``next_first_significant``, the first index
    whose next-effect CI does.
    """
    import numpy as np

    from ..analysis import stats

    residuals = list(result["residuals"])
    if residuals != list(range(len(residuals))):
        raise ValueError("causal_crossover needs the profile at every residual index 0..L (residuals=None)")
    n_layers = int(result.get("n_layers", len(residuals) - 1))
    eff = direction_effects(result)
    a, b = eff["input"].double().numpy(), eff["next"].double().numpy()
    layer = stats.shift_layer(a.mean(0), b.mean(0), rule=rule)
    crossing = stats.crossing_point(a.mean(0), b.mean(0), rule=rule)
    boots = [stats.crossing_point(a[i].mean(0), b[i].mean(0), rule=rule)
             for i in stats.bootstrap_indices(a.shape[0], n_boot, seed)]
    found = np.array([x for x in boots if x is not None])
    lo = hi = None
    if found.size:
        q = (1 - level) / 2
        lo, hi = float(np.quantile(found, q)), float(np.quantile(found, 1 - q))
    ci = {k: stats.curve_ci(v, n_boot=n_boot, seed=seed, level=level) for k, v in eff.items()}
    sig_in = np.flatnonzero(ci["input"].lo > 0)
    sig_nx = np.flatnonzero(ci["next"].lo > 0)
    rel = lambda x: None if x is None else x / n_layers  # noqa: E731
    return {"layer": layer, "crossing": crossing, "lo": lo, "hi": hi, "frac_never": 1 - found.size / len(boots),
            "relative": rel(crossing), "relative_lo": rel(lo), "relative_hi": rel(hi), "n_layers": n_layers,
            "rule": rule, "level": level,
            "input_last_significant": int(sig_in[-1]) if sig_in.size else None,
            "next_first_significant": int(sig_nx[0]) if sig_nx.size else None,
            "effects": {k: v.as_dict() for k, v in ci.items()}}


def _first_reaching(curve, frac: float) -> float | None:
    """Interpolated first index where ``curve`` reaches ``frac`` of its maximum (None if max <= 0)."""
    import numpy as np

    c = np.asarray(curve, dtype=np.float64)
    top = c.max()
    if not top > 0:
        return None
    thr = frac * top
    i = int(np.flatnonzero(c >= thr)[0])
    if i == 0:
        return 0.0
    return float(i - 1 + (thr - c[i - 1]) / (c[i] - c[i - 1]))


def _last_above(curve, frac: float) -> float | None:
    """Interpolated index after which ``curve`` stays below ``frac`` of its maximum (None if max <= 0)."""
    import numpy as np

    c = np.asarray(curve, dtype=np.float64)
    top = c.max()
    if not top > 0:
        return None
    thr = frac * top
    i = int(np.flatnonzero(c >= thr)[-1])
    if i == len(c) - 1:
        return float(i)
    return float(i + (c[i] - thr) / (c[i] - c[i + 1]))


def effect_transitions(result: dict[str, Any], *, frac: float = 0.5, n_boot: int = 1000, seed: int = 0,
                       level: float = 0.95) -> dict[str, Any]:
    """Scale-free transition depths of the control-corrected effects, over residual indices ``0..L-1``.

    The first-crossing rule compares two small numbers in the middle layers, where both effects
    can be near zero; these summaries do not. ``input_stops``: the (interpolated) index after
    which the input-direction effect stays below ``frac`` of its maximum; ``next_starts``: the
    first index where the next-direction effect reaches ``frac`` of its maximum. The final residual
    ``h_L`` is left out: there the edit acts on the logits directly. Each comes with a percentile
    bootstrap CI over sequences.
    """
    import numpy as np

    from ..analysis import stats

    eff = direction_effects(result)
    n_layers = int(result.get("n_layers", eff["input"].shape[1] - 1))
    a = eff["input"].double().numpy()[:, :-1]
    b = eff["next"].double().numpy()[:, :-1]
    out: dict[str, Any] = {"frac": frac, "n_layers": n_layers, "level": level}
    idx = stats.bootstrap_indices(a.shape[0], n_boot, seed)
    q = (1 - level) / 2
    for key, x, fn in (("input_stops", a, _last_above), ("next_starts", b, _first_reaching)):
        point = fn(x.mean(0), frac)
        boots = [fn(x[i].mean(0), frac) for i in idx]
        found = np.array([v for v in boots if v is not None])
        lo, hi = ((float(np.quantile(found, q)), float(np.quantile(found, 1 - q))) if found.size else (None, None))
        out[key] = {"index": point, "lo": lo, "hi": hi,
                    "relative": None if point is None else point / n_layers,
                    "relative_lo": None if lo is None else lo / n_layers,
                    "relative_hi": None if hi is None else hi / n_layers}
    return out


def skip_summary(result: dict[str, Any], *, n_boot: int = 1000, seed: int = 0, level: float = 0.95) -> dict[str, Any]:
    """Per alpha: mean Δloss per block with bootstrap CIs, and the most / least harmful blocks."""
    from ..analysis import stats

    out = {}
    for i, alpha in enumerate(result["alphas"]):
        ci = stats.curve_ci(result["delta"][i], n_boot=n_boot, seed=seed, level=level)
        out[alpha] = {"ci": ci.as_dict(), "most_harmful": result["layers"][int(ci.estimate.argmax())],
                      "least_harmful": result["layers"][int(ci.estimate.argmin())],
                      "n_harmless": int((ci.lo <= 0).sum())}
    return out


# --------------------------------------------------------------------------------------------
# The cached entry point
# --------------------------------------------------------------------------------------------


def cache_config(info: ModelInfo, cfg: CausalConfig) -> dict:
    out = {"model": info.name, "source": info.source, "version": VERSION, **asdict(cfg)}
    if not cfg.center:
        del out["center"]  # raw directions: keep the keys of results computed before the option
    return out


def run_cached(lm, info: ModelInfo, cfg: CausalConfig, tokenizer=None, *, refresh: bool = False,
               progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Both profiles for ``info.name`` on ``cfg``'s windows, computed once per config.

    Returns ``{"skip": skip_ablation_profile(...), "direction": direction_ablation_profile(...),
    "model", "n_layers", "config", "seconds", "tokens"}``.
    """
    from ..core.data import token_windows

    tokenizer = tokenizer if tokenizer is not None else lm.tokenizer

    def compute() -> dict[str, Any]:
        windows = token_windows(cfg.corpus, cfg.split, tokenizer, length=cfg.window, n=cfg.n_windows,
                                seed=cfg.seed, prepend_bos=info.prepend_bos)
        out: dict[str, Any] = {"model": info.name, "n_layers": info.n_layers, "config": asdict(cfg),
                               "tokens": int(windows.numel())}
        t0 = time.perf_counter()
        out["skip"] = skip_ablation_profile(lm, info, windows, alphas=cfg.alphas, batch=cfg.batch,
                                            skip_first=cfg.skip_first, progress=progress)
        out["skip"]["n_layers"] = info.n_layers
        t1 = time.perf_counter()
        out["direction"] = direction_ablation_profile(lm, info, windows, directions=cfg.directions,
                                                      batch=cfg.batch, skip_first=cfg.skip_first,
                                                      seed=cfg.seed, center=cfg.center, progress=progress)
        out["direction"]["n_layers"] = info.n_layers
        out["seconds"] = {"skip": t1 - t0, "direction": time.perf_counter() - t1}
        return out

    return cache.cached("causal-profile", cache_config(info, cfg), compute, code=run_cached, refresh=refresh)
