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
    direction ``u(t)``: ``h'_l(t) = h_l(t) - (h_l(t) · u(t)) u(t)``. By default ``u`` is the
    direction the logit lens reads for token ``k`` (``basis="lens"``: ``gain ⊙ e_k``, centred for
    LayerNorm; :func:`unit_directions`), so the causal and the decoding views look at the same
    thing; ``"embedding"`` (``e_k``) and ``"centred"`` (``e_k - ē``) are options. Directions, per
    position ``t``:

    - ``"input"``: ``k = x_t`` (the current token);
    - ``"next"``: ``k = x_{t+1}`` (the token the loss at ``t`` asks for; nothing at the last position);
    - ``"random"``: the control, ``k`` = the token of a random other position of the same windows
      (so it follows the corpus's unigram distribution), redrawn where it equals ``x_t`` or ``x_{t+1}``.

    All positions are edited at once, in one pass per layer (edits at earlier positions reach ``t``
    through attention too: that is part of what "the model uses this direction at layer l" means).
    Where the input-direction effect stops and the next-direction effect starts
    (:func:`effect_transitions`, over ``h_1..h_{L-1}``: both ends are fixed by construction) is a
    causal analogue of the lens's input fade and next-token emergence.

Edits replay the captured block inputs of one unmodified forward (tested against nnsight
traces, which remote models use); results are cached (:func:`run_cached`) as per-sequence ×
per-layer tensors plus metadata, for the bootstrap in the notebooks.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, ClassVar, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from ..analysis import stats
from ..core import cache, profiles
from ..core.data import token_windows
from ..core.forward import refuse_remote, window_losses
from ..core.models import ModelInfo
from ..core.replay import capture, replay, replay_from
from ..core.unembed import next_token_losses

# why a remote (NDIF) model is refused (core.forward.refuse_remote)
_REPLAY = "replays blocks on the local module (core.replay), which a remote model holds on the meta device"
_DIRECTIONS = ("builds its directions from the unembedding info.embedding and replays blocks on the local module, "
               "which a remote model holds on the meta device")

VERSION = "residshift-causal/2"
DIRECTIONS = ("input", "next", "random")
BASES = ("lens", "embedding", "centred")


@dataclass(frozen=True)
class CausalConfig:
    """What determines a causal profile (the cache key is built from it and the model)."""

    PREFIX: ClassVar[str] = "causal"  # its profile keys (profiles.stage): causal_corpus, ..., causal_windows

    corpus: str = "wikitext-103"
    split: str = "validation"
    window: int = 128
    n_windows: int = field(default=16, metadata=profiles.key("windows"))
    batch: int = 8
    alphas: tuple[float, ...] = (0.0, 0.5)
    directions: tuple[str, ...] = DIRECTIONS
    skip_first: int = 1
    seed: int = 0
    basis: str = "lens"  # "lens": the direction the lens reads (gamma * e_k); "embedding": e_k; "centred"
    stride: int = 1  # profile every stride-th residual / block (plus h_L): 2 halves the cost

    def residuals(self, n_layers: int) -> list[int]:
        """The residual indices profiled: ``0, stride, 2 stride, ...`` and always ``L``."""
        return sorted(set(range(0, n_layers + 1, self.stride)) | {n_layers})

    def blocks(self, n_layers: int) -> list[int]:
        """The blocks whose skip path is scaled: ``0, stride, ...`` (all with stride 1)."""
        return list(range(0, n_layers, self.stride))

    def __post_init__(self) -> None:
        object.__setattr__(self, "alphas", tuple(float(a) for a in self.alphas))
        object.__setattr__(self, "directions", tuple(self.directions))
        if self.basis not in BASES:
            raise ValueError(f"unknown basis {self.basis!r}; choose from {BASES}")
        bad = [d for d in self.directions if d not in DIRECTIONS]
        if bad:
            raise ValueError(f"unknown direction(s) {bad}; choose from {DIRECTIONS}")
        for a in self.alphas:
            if not 0.0 <= a <= 1.0:
                raise ValueError(f"alphas must lie in [0, 1] (1 = unmodified skip path), got {a}")
        if self.n_windows < 1 or self.batch < 1:
            raise ValueError("n_windows and batch must be >= 1")
        if not isinstance(self.stride, int) or self.stride < 1:
            raise ValueError(f"stride must be a positive integer (1 = every residual), got {self.stride!r}")
        check_window(self.window, self.skip_first)


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
    ``j`` of ``delta`` is block ``layers[j]`` (whose skip path carries ``h_{layers[j]}``). Each
    batch runs the unmodified model once; each (alpha, block) then replays only blocks ``l..L-1``
    from the captured block inputs (``residshift.core.replay.replay``, the same edit as
    ``interventions.attenuate``; tested against it).
    """
    refuse_remote(info, "causal.skip_ablation_profile", _REPLAY)
    _check_windows(windows, skip_first)
    layers = list(range(info.n_layers)) if layers is None else [info.check_layer(l) for l in layers]
    module = lm._module
    clean = torch.zeros(len(windows))
    delta = torch.zeros(len(alphas), len(windows), len(layers))
    for start in range(0, len(windows), batch):
        ids = windows[start:start + batch]
        rows = slice(start, start + len(ids))
        cap = capture(module, info, ids)
        clean[rows] = sequence_losses(cap.logits, ids, skip_first)
        for i, alpha in enumerate(alphas):
            for j, layer in enumerate(layers):
                delta[i, rows, j] = sequence_losses(replay(module, info, cap, layer, alpha), ids, skip_first) - clean[rows]
    if progress is not None:
        for i, alpha in enumerate(alphas):
            progress(f"skip alpha={alpha}: mean Δloss per block {[round(float(x), 4) for x in delta[i].mean(0)]}")
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


def norm_readout(info: ModelInfo) -> tuple[torch.Tensor, bool]:
    """``(gain, centres)`` of the final norm ``N``, measured by probing it.

    For the norms of the models we study, ``N(h) = gain * (h - c * mean(h)) / scale(h) (+ bias)``
    with ``c = 1`` for LayerNorm (``centres``) and ``c = 0`` for RMSNorm (Gemma's ``1 + w`` gain
    included). On a zero-mean probe ``x`` both reduce to ``gain * x / rms(x)``, and the bias cancels
    in ``(N(x) - N(-x)) / 2``, so ``gain = (N(x) - N(-x)) / 2 * rms(x) / x``; ``centres`` is whether
    ``N`` ignores a constant shift of its input.
    """
    d = info.d_model
    g = torch.Generator().manual_seed(0)
    x = torch.randn(d, generator=g, dtype=torch.float64)
    x = x + 0.5 * torch.sign(x)  # no coordinate near zero
    x = (x - x.mean())
    dtype = info.embedding.dtype
    with torch.no_grad():
        probe = torch.stack([x, -x, x + 3.0]).to(dtype)[None]
        out = info.final_norm(probe)[0].double()
    rms = x.pow(2).mean().sqrt()
    gain = ((out[0] - out[1]) / 2 * rms / x).float()
    centres = bool(torch.allclose(out[2], out[0], rtol=1e-3, atol=1e-4))
    return gain, centres


def unit_directions(info: ModelInfo, tokens: torch.Tensor, *, basis: str = "lens") -> torch.Tensor:
    """The unit direction of each token id in ``tokens`` [B, T] -> [B, T, d]; zero where ``k = -1``.

    - ``"lens"`` (default): the direction of ``h`` that the logit lens reads for token ``k``. The
      lens logit is ``e_k · N(h)``; with ``N(h) = gain * (h - c mean(h)) / scale(h)`` it is
      ``u_k · h / scale(h)`` (plus a constant) with ``u_k = gain * e_k``, centred when ``N``
      centres (:func:`norm_readout`). Removing ``u_k`` from ``h`` therefore removes exactly what
      the lens would read as token ``k`` (the lens logit of ``k`` becomes that constant, 0 for
      RMSNorm); removing ``e_k`` itself would not, wherever the gain is far from uniform.
    - ``"embedding"``: ``e_k`` as it is (what the model adds at ``h_0``).
    - ``"centred"``: ``e_k - ē``, ``ē`` the mean embedding row (a common component shared by all
      rows otherwise makes every removal hurt, whatever the token).
    """
    if basis not in BASES:
        raise ValueError(f"unknown basis {basis!r}; choose from {BASES}")
    E = info.embedding.detach().float()
    safe = tokens.clamp(min=0)
    if basis == "lens":
        gain, centres = norm_readout(info)
        rows = E[safe] * gain
        if centres:
            rows = rows - rows.mean(-1, keepdim=True)
    elif basis == "centred":
        rows = E[safe] - E.mean(0)
    else:
        rows = E[safe]
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
                               batch: int = 8, skip_first: int = 1, seed: int = 0, basis: str = "lens",
                               progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Δ next-token loss per sequence when a token direction is removed at one residual index.

    Returns ``{"clean": [n], "delta": [len(directions), n, len(residuals)], "directions",
    "residuals", "basis"}``; column ``j`` of ``delta`` is residual index ``residuals[j]``. Each
    batch runs the unmodified model once; each (direction, residual ``r``) then edits the captured
    ``h_r`` and replays blocks ``r..L-1`` and the head (``residshift.core.replay.replay_from``;
    tested against the nnsight edit :func:`direction_ablated_logits`). Remote models are refused
    (:func:`residshift.core.forward.refuse_remote`).
    """
    refuse_remote(info, "causal.direction_ablation_profile", _DIRECTIONS)
    _check_windows(windows, skip_first)
    residuals = list(range(info.n_layers + 1)) if residuals is None else [check_residual_index(info, r) for r in residuals]
    clean = torch.zeros(len(windows))
    delta = torch.zeros(len(directions), len(windows), len(residuals))
    for start in range(0, len(windows), batch):
        ids = windows[start:start + batch]
        rows = slice(start, start + len(ids))
        if info.remote:
            clean[rows] = window_losses(lm, info, ids, batch_size=batch)[:, skip_first:].mean(1)
        else:
            cap = capture(lm._module, info, ids)
            clean[rows] = sequence_losses(cap.logits, ids, skip_first)
        for i, kind in enumerate(directions):
            units = unit_directions(info, direction_tokens(ids, kind, skip_first=skip_first, seed=seed + start),
                                    basis=basis)
            for j, r in enumerate(residuals):
                if info.remote:
                    logits = direction_ablated_logits(lm, info, ids, r, units)
                else:
                    logits = replay_from(lm._module, info, cap, r, remove_direction(cap.residual(r), units))
                delta[i, rows, j] = sequence_losses(logits, ids, skip_first) - clean[rows]
    if progress is not None:
        for i, kind in enumerate(directions):
            progress(f"direction {kind}: mean Δloss per layer {[round(float(x), 4) for x in delta[i].mean(0)]}")
    return {"clean": clean, "delta": delta, "directions": list(directions), "residuals": residuals,
            "basis": basis}


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


def _first_reaching(curve, frac: float) -> float | None:
    """Interpolated first index where ``curve`` reaches ``frac`` of its maximum (None if max <= 0)."""
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
    """Scale-free transition depths of the control-corrected effects, over residual indices ``1..L-1``.

    The profile may cover every residual (``residuals == 0..L``) or a subset that includes 0 and L
    (``CausalConfig.stride``); the interpolated position is then mapped back to a residual index
    linearly between the profiled ones.

    ``input_stops``: the (interpolated) index after which the input-direction effect stays below
    ``frac`` of its maximum; ``next_starts``: the first index where the next-direction effect
    reaches ``frac`` of its maximum (indices in the usual numbering, ``h_l`` = output of block
    ``l - 1``). Both ends are left out because there the answer is fixed by construction: at
    ``h_0`` removing the input direction deletes the token's embedding, and at ``h_L`` removing the
    next direction deletes the target's logit. Compare them with the lens's input fade and
    next-token emergence (``stats.transition_table``), not with a crossing of two near-zero
    curves. Each comes with a percentile bootstrap CI over sequences.
    """
    eff = direction_effects(result)
    n_layers = int(result.get("n_layers", eff["input"].shape[1] - 1))
    residuals = list(result["residuals"])
    if residuals[:1] != [0] or residuals[-1:] != [n_layers] or residuals != sorted(set(residuals)) or len(residuals) < 3:
        raise ValueError("effect_transitions needs the profile at increasing residual indices from 0 to L with "
                         "at least one in between (residuals=None, or CausalConfig.stride)")
    inner = np.asarray(residuals[1:-1], dtype=np.float64)
    a = eff["input"].double().numpy()[:, 1:-1]
    b = eff["next"].double().numpy()[:, 1:-1]
    out: dict[str, Any] = {"frac": frac, "n_layers": n_layers, "level": level}
    idx = stats.bootstrap_indices(a.shape[0], n_boot, seed)
    q = (1 - level) / 2
    for key, x, fn in (("input_stops", a, _last_above), ("next_starts", b, _first_reaching)):
        # column j is residual inner[j]: map the interpolated column back to a residual index
        shift = lambda v: None if v is None else float(np.interp(v, np.arange(inner.size), inner))  # noqa: E731
        point = shift(fn(x.mean(0), frac))
        boots = [shift(fn(x[i].mean(0), frac)) for i in idx]
        found = np.array([v for v in boots if v is not None])
        lo, hi = ((float(np.quantile(found, q)), float(np.quantile(found, 1 - q))) if found.size else (None, None))
        out[key] = {"index": point, "lo": lo, "hi": hi,
                    "relative": None if point is None else point / n_layers,
                    "relative_lo": None if lo is None else lo / n_layers,
                    "relative_hi": None if hi is None else hi / n_layers}
    return out


def skip_summary(result: dict[str, Any], *, n_boot: int = 1000, seed: int = 0, level: float = 0.95) -> dict[str, Any]:
    """Per alpha: mean Δloss per block with bootstrap CIs, and the most / least harmful blocks."""
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
    return {"model": info.name, "source": info.source, "version": VERSION, **asdict(cfg)}


def run_cached(lm, info: ModelInfo, cfg: CausalConfig, tokenizer=None, *, refresh: bool = False,
               progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Both profiles for ``info.name`` on ``cfg``'s windows, computed once per config.

    Returns ``{"skip": skip_ablation_profile(...), "direction": direction_ablation_profile(...),
    "model", "n_layers", "config", "seconds", "tokens"}``.
    """
    refuse_remote(info, "causal.run_cached (the skip and direction ablation profiles)", _REPLAY)
    tokenizer = tokenizer if tokenizer is not None else lm.tokenizer

    def compute() -> dict[str, Any]:
        windows = token_windows(cfg.corpus, cfg.split, tokenizer, length=cfg.window, n=cfg.n_windows,
                                seed=cfg.seed, prepend_bos=info.prepend_bos)
        out: dict[str, Any] = {"model": info.name, "n_layers": info.n_layers, "config": asdict(cfg),
                               "tokens": int(windows.numel())}
        t0 = time.perf_counter()
        out["skip"] = skip_ablation_profile(lm, info, windows, alphas=cfg.alphas, batch=cfg.batch,
                                            layers=cfg.blocks(info.n_layers), skip_first=cfg.skip_first,
                                            progress=progress)
        out["skip"]["n_layers"] = info.n_layers
        t1 = time.perf_counter()
        out["direction"] = direction_ablation_profile(lm, info, windows, directions=cfg.directions,
                                                      residuals=cfg.residuals(info.n_layers),
                                                      batch=cfg.batch, skip_first=cfg.skip_first,
                                                      seed=cfg.seed, basis=cfg.basis, progress=progress)
        out["direction"]["n_layers"] = info.n_layers
        out["seconds"] = {"skip": t1 - t0, "direction": time.perf_counter() - t1}
        return out

    return cache.cached("causal-profile", cache_config(info, cfg), compute, code=run_cached, refresh=refresh)
