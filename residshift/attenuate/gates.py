"""Learnable residual attenuation on a frozen pretrained model (claim C3).

Two gate families, both applied with THE edit of ``residshift.core.interventions.attenuate_block``
(``block_l(x) -> block_l(x) - (1 - alpha_l) x``):

- ``scalar``: one gate per layer, ``alpha_l = sigmoid(theta_l)``;
- ``token``: a token-dependent gate ``alpha_l(t) = sigmoid(w_l . LN(h_l(t)) + b_l)``, where
  ``h_l(t)`` is the residual stream entering block ``l`` and ``LN`` a layer norm without affine
  parameters (so ``w_l`` sees a unit-scale input whatever the model's residual norm).

Initialisation (our choice): ``theta_l = b_l = 6`` and ``w_l = 0``, so every gate starts at
``sigmoid(6) = 0.9975``. We first tried ``theta = 4`` (alpha = 0.982): on SmolLM2-135M, 0.982 on all
30 blocks compounds (0.982^30 = 0.58 on the embedding's share of the stream) and raised the
WikiText-2 loss by ~0.2 nats before any fitting, so the fit started far from the model it was
meant to adjust. At 0.9975 the start is within a few hundredths of a nat of the unmodified model,
and Adam, which rescales the small sigmoid gradient (``sigmoid'(6) = 0.0025``), still moves theta by
about ``lr`` per step. A sigmoid never reaches exactly 1, which is why "before" in every comparison
is the unmodified model itself, with the loss at initialisation reported beside it. The sigmoid
keeps alpha in (0, 1), the range where attenuation is meaningful.

Fitting: the model's weights stay frozen; only the gates learn, by Adam on the mean next-token loss
of WikiText-2 train windows, through nnsight traces (``loss.backward()`` on the traced logits).
A held-out part of the windows is scored every ``eval_every`` steps; the best gates on it are kept
and fitting stops after ``patience`` evaluations without improvement (early stopping).
Resumable: gate parameters, optimizer state, step and early-stopping state are checkpointed
atomically under ``results/gates-ckpt/<config key>.pt``; the final result goes through
``cache.cached`` (kind ``gates``).
"""
from __future__ import annotations

import hashlib
import weakref
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar, Sequence

import torch
from torch import nn

from ..core import cache, profiles
from ..core.data import token_windows
from ..core.forward import collect_residuals, refuse_remote, window_losses
from ..core.fitting import FitConfig, epoch_batch, fit as run_fit
from ..core.gating import THETA_INIT, scalar_alpha, token_alpha
from ..core.interventions import attenuate_block
from ..core.models import ModelInfo
from ..core.unembed import next_token_loss

# why a remote (NDIF) model is refused (core.forward.refuse_remote)
_BACKWARD = ("back-propagates (loss.backward()) into local gate parameters, and NDIF runs the trace on its "
             "servers and returns saved values only")
_LOCAL_GATES = "calls local gate modules inside the trace, which NDIF cannot run"

# THETA_INIT = 6: sigmoid(6) = 0.9975 (see the module docstring for why not 4); the gate formulas
# are core.gating's, shared with the GPTs trained with gates in place (residshift.core.models.gpt).
KINDS = ("scalar", "token")


class GateFileError(ValueError):
    """A stored gate file does not fit the model it is applied to."""


# ------------------------------------------------------------------------------------------
# Gate modules
# ------------------------------------------------------------------------------------------


class ScalarGates(nn.Module):
    """``alpha_l = sigmoid(theta_l)`` for each gated layer."""

    kind = "scalar"

    def __init__(self, layers: Sequence[int], d_model: int, theta_init: float = THETA_INIT):
        super().__init__()
        self.layers = [int(l) for l in layers]
        self.d_model = d_model
        self.theta = nn.Parameter(torch.full((len(self.layers),), float(theta_init)))

    def alpha(self, i: int):
        return scalar_alpha(self.theta[i])

    def alphas(self) -> torch.Tensor:
        """The current alpha of every gated layer (no grad)."""
        return torch.sigmoid(self.theta.detach()).clone()

    @classmethod
    def from_alphas(cls, layers: Sequence[int], d_model: int, alphas: Sequence[float]) -> "ScalarGates":
        """Gates set to given alphas; each must lie strictly inside (0, 1) (a sigmoid's range)."""
        alphas = [float(a) for a in alphas]
        if len(alphas) != len(layers):
            raise ValueError(f"{len(alphas)} alphas for {len(layers)} layers")
        for a in alphas:
            if not 0 < a < 1:
                raise ValueError(
                    f"a gate's alpha must lie strictly inside (0, 1) (alpha = sigmoid(theta)); got {a}. "
                    "For alpha = 1 leave the layer ungated; for a fixed alpha in [0, 1] use "
                    "interventions.attenuate.")
        g = cls(layers, d_model)
        with torch.no_grad():
            g.theta.copy_(torch.logit(torch.tensor(alphas)))
        return g


TOKEN_GATE_PARAMETERISATION = "w.LN(h)/sqrt(d)+b"  # part of the cache key of token-gate fits


class TokenGates(nn.Module):
    """``alpha_l(t) = sigmoid(w_l . LN(h_l(t)) / sqrt(d) + b_l)``; ``w = 0, b = theta_init`` at start.

    The ``1 / sqrt(d)`` keeps one optimiser step on ``w`` (d coordinates moving together) about as
    large in ``z`` as a step on ``b``; without it a learning rate that suits the scalar gates throws
    the token gates far from 1 on the first step (every fit then early-stopped at step 0).
    """

    kind = "token"

    def __init__(self, layers: Sequence[int], d_model: int, theta_init: float = THETA_INIT):
        super().__init__()
        self.layers = [int(l) for l in layers]
        self.d_model = d_model
        self.w = nn.Parameter(torch.zeros(len(self.layers), d_model))
        self.b = nn.Parameter(torch.full((len(self.layers),), float(theta_init)))

    def alpha(self, i: int) -> Callable[[torch.Tensor], torch.Tensor]:
        def gate(x: torch.Tensor) -> torch.Tensor:
            return token_alpha(x, self.w[i], self.b[i])
        return gate

    def alphas(self) -> torch.Tensor:
        """``sigmoid(b_l)``: each layer's alpha for a token whose LN(h) is orthogonal to w_l."""
        return torch.sigmoid(self.b.detach()).clone()


def make_gates(kind: str, layers: Sequence[int], d_model: int, theta_init: float = THETA_INIT):
    if kind == "scalar":
        return ScalarGates(layers, d_model, theta_init)
    if kind == "token":
        return TokenGates(layers, d_model, theta_init)
    raise ValueError(f"unknown gate kind {kind!r}; choose one of {KINDS}")


def apply_gates(model, info: ModelInfo, gates) -> None:
    """Inside an nnsight trace: attenuate every gated layer with its gate (in execution order)."""
    envoys = info.layer_envoys(model)
    for i, layer in enumerate(gates.layers):
        attenuate_block(envoys[layer], gates.alpha(i))


def gate_intervention(gates) -> Callable[[Any, ModelInfo], None]:
    """An ``intervene(model, info)`` callable for the evaluation harness and ``window_losses``."""
    def intervene(model, info):
        check_gates_fit(gates, info)
        apply_gates(model, info, gates)
    return intervene


def check_gates_fit(gates, info: ModelInfo, model_name: str | None = None) -> None:
    if model_name is not None and model_name != info.name:
        raise GateFileError(
            f"these gates were fitted on {model_name!r}, not on {info.name!r}: fit gates for "
            f"{info.name!r} (gates.fit_gates) instead of reusing another model's")
    if gates.d_model != info.d_model or any(not 0 <= l < info.n_layers for l in gates.layers):
        raise GateFileError(
            f"gates for d_model {gates.d_model} and layers {gates.layers} do not fit {info.name} "
            f"(d_model {info.d_model}, {info.n_layers} layers): fit gates for this model")


# ------------------------------------------------------------------------------------------
# Save / load
# ------------------------------------------------------------------------------------------


def gate_state(gates, info: ModelInfo) -> dict[str, Any]:
    return {"model": info.name, "n_layers": info.n_layers, "d_model": info.d_model,
            "kind": gates.kind, "layers": list(gates.layers),
            "state": {k: v.detach().clone() for k, v in gates.state_dict().items()}}


def gates_from_state(state: dict[str, Any], info: ModelInfo):
    """Rebuild gates from :func:`gate_state`; refuses gates fitted on another model."""
    for key in ("model", "kind", "layers", "state", "d_model", "n_layers"):
        if key not in state:
            raise GateFileError(f"not a gate file (no {key!r}); write one with gates.save_gates")
    if state["model"] != info.name or state["n_layers"] != info.n_layers or state["d_model"] != info.d_model:
        raise GateFileError(
            f"gate file is for model {state['model']!r} ({state['n_layers']} layers, d {state['d_model']}) "
            f"but the loaded model is {info.name!r} ({info.n_layers} layers, d {info.d_model}): "
            "fit gates for this model with gates.fit_gates")
    g = make_gates(state["kind"], state["layers"], state["d_model"])
    g.load_state_dict(state["state"])
    return g


def save_gates(path, gates, info: ModelInfo) -> Path:
    path = Path(path)
    cache.save_verified(gate_state(gates, info), path)  # with its sha256 beside it (<path>.sha256)
    return path


def load_gates(path, info: ModelInfo):
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no gate file at {path}; fit one with gates.fit_gates")
    try:
        state = cache.load_verified(path)
    except cache.DamagedFileError as err:
        raise GateFileError(f"gate file {path} is damaged ({err.reason}); delete it, fit the gates again with "
                            "gates.fit_gates and save them with gates.save_gates") from err
    if not isinstance(state, dict):
        raise GateFileError(f"{path} is not a gate file; write one with gates.save_gates")
    return gates_from_state(state, info)


# ------------------------------------------------------------------------------------------
# Fitting
# ------------------------------------------------------------------------------------------


@dataclass
class GateConfig:
    """One gate fit. ``layers=None`` gates every layer."""

    PREFIX: ClassVar[str] = "gate"  # its profile keys (profiles.stage): gate_window, gate_train, ...

    model: str
    kind: str = "scalar"
    corpus: str = "wikitext-2"
    split: str = "train"
    window: int = 128
    n_train: int = field(default=32, metadata=profiles.key("train"))
    n_heldout: int = field(default=8, metadata=profiles.key("heldout"))
    batch_size: int = field(default=4, metadata=profiles.key("batch"))
    steps: int = 40
    lr: float = 0.1
    eval_every: int = 5
    patience: int = 3
    theta_init: float = THETA_INIT
    layers: Sequence[int] | None = None
    seed: int = 0
    bf16: bool = False

    def checked(self, info: ModelInfo) -> "GateConfig":
        if self.kind not in KINDS:
            raise ValueError(f"unknown gate kind {self.kind!r}; choose one of {KINDS}")
        if info.name != self.model:
            raise GateFileError(f"config is for {self.model!r} but the loaded model is {info.name!r}")
        for name in ("n_train", "n_heldout", "batch_size", "steps", "eval_every", "patience"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.lr <= 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")
        layers = list(range(info.n_layers)) if self.layers is None else [
            info.check_layer(int(l)) for l in self.layers]
        if len(set(layers)) != len(layers):
            raise ValueError(f"layers has duplicates: {layers}")
        d = asdict(self)
        d["layers"] = tuple(sorted(layers))
        return GateConfig(**d)

    def key_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if self.kind == "token":
            d["parameterisation"] = TOKEN_GATE_PARAMETERISATION
        d["layers"] = None if self.layers is None else [int(l) for l in self.layers]
        return d


def _autocast(enabled: bool, info: ModelInfo):
    """bf16 autocast (``gate_bf16``) on the device the model's weights are on: a CPU or a GPU."""
    device = info.embedding.device.type
    return torch.autocast("cuda" if device == "cuda" else "cpu", dtype=torch.bfloat16, enabled=enabled)


def train_step(lm, info: ModelInfo, gates, ids: torch.Tensor, backward=None, *, bf16: bool = False) -> float:
    """One forward + backward through an nnsight trace; gradients land on the gate parameters.

    ``backward`` (from the fitting loop; default ``loss.backward()``) runs inside the trace.
    """
    refuse_remote(info, "gates.train_step", _BACKWARD)
    backward = backward or (lambda loss: loss.backward())
    with _autocast(bf16, info):
        with lm.trace(ids, remote=info.remote):
            apply_gates(lm, info, gates)
            loss = next_token_loss(lm.output.logits, ids)
            backward(loss)
            saved = loss.detach().save()
    return float(saved)


def gated_window_losses(lm, info: ModelInfo, gates, windows: torch.Tensor, *, batch_size: int = 8,
                        bf16: bool = False) -> torch.Tensor:
    """Per-window mean loss ``[n]`` with the gates applied (``gates=None``: unmodified model)."""
    if gates is not None:
        refuse_remote(info, "gates.gated_window_losses", _LOCAL_GATES)

    with _autocast(bf16, info):
        loss = window_losses(lm, info, windows, batch_size=batch_size,
                             intervene=None if gates is None else gate_intervention(gates))
    return loss.mean(dim=1)


# The unmodified model's held-out loss, per loaded model: every gate kind of a seed fits on the same
# held-out windows, so it is measured once, not once per kind. Keyed by the torch module (weakly: the
# entry goes with the model), then by the windows' bytes and the autocast setting.
_BASE_LOSS: "weakref.WeakKeyDictionary[nn.Module, dict[tuple[str, bool], float]]" = weakref.WeakKeyDictionary()


def heldout_base_loss(lm, info: ModelInfo, heldout: torch.Tensor, *, bf16: bool = False) -> float:
    """Mean held-out loss of the unmodified model on ``heldout``, measured once per model, windows
    and ``bf16`` (:func:`gated_window_losses` with no gates)."""
    key = (hashlib.sha256(heldout.cpu().numpy().tobytes()).hexdigest() + str(tuple(heldout.shape)), bool(bf16))
    memo = _BASE_LOSS.setdefault(getattr(lm, "_module", lm), {})
    if key not in memo:
        memo[key] = float(gated_window_losses(lm, info, None, heldout, bf16=bf16).mean())
    return memo[key]


def split_windows(cfg: GateConfig, tokenizer, info: ModelInfo) -> tuple[torch.Tensor, torch.Tensor]:
    """Seeded, disjoint train / held-out windows of ``cfg.corpus`` (BOS as the model expects)."""
    w = token_windows(cfg.corpus, cfg.split, tokenizer, length=cfg.window,
                      n=cfg.n_train + cfg.n_heldout, seed=cfg.seed, prepend_bos=info.prepend_bos)
    return w[:cfg.n_train], w[cfg.n_train:]


def fit_config(cfg: GateConfig) -> FitConfig:
    """The fitting loop's settings for a gate fit: Adam, constant lr, early stopping on held-out loss."""
    return FitConfig(steps=cfg.steps, lr=cfg.lr, optimizer="adam", eval_every=cfg.eval_every,
                     eval_at_start=True, patience=cfg.patience, seed=cfg.seed)


def fit_gates_on(lm, info: ModelInfo, cfg: GateConfig, train: torch.Tensor, heldout: torch.Tensor, *,
                 checkpoint: Path | None = None, stop_after: int | None = None,
                 progress: bool | str = False) -> dict[str, Any]:
    """Fit gates on ``train`` windows with early stopping on ``heldout`` (:mod:`residshift.core.fitting`).

    Batches: a seeded permutation of the training windows per epoch. The held-out loss of the
    unmodified model (once per model and held-out windows: :func:`heldout_base_loss`) and of the gates
    at initialisation are measured first; the initial gates are
    a candidate best. ``stop_after`` ends the call after that many steps (leaving the checkpoint
    to resume from): the tests use it to interrupt a fit. Returns a dict with the best gates'
    state, the history (train loss per step, held-out loss per evaluation) and the held-out loss
    before (unmodified model) and at initialisation.
    """
    refuse_remote(info, "gates.fit_gates_on", _BACKWARD)
    cfg = cfg.checked(info)
    torch.manual_seed(cfg.seed)
    gates = make_gates(cfg.kind, cfg.layers, info.d_model, cfg.theta_init)
    extra = None
    if checkpoint is None or not Path(checkpoint).is_file():
        extra = {"heldout_base": heldout_base_loss(lm, info, heldout, bf16=cfg.bf16)}

    def step_fn(step, micro, backward):
        ids = train[epoch_batch(len(train), cfg.batch_size, step, cfg.seed)]
        return train_step(lm, info, gates, ids, backward, bf16=cfg.bf16)

    def eval_fn():
        return float(gated_window_losses(lm, info, gates, heldout, bf16=cfg.bf16).mean())

    r = run_fit(gates, fit_config(cfg), step_fn=step_fn, eval_fn=eval_fn, checkpoint=checkpoint,
                stop_after=stop_after, progress=progress, extra=extra)
    evals = r.evals
    return {"model": info.name, "config": cfg.key_dict(), "finished": r.finished,
            "gates": gate_state(gates, info), "alphas": gates.alphas(), "layers": list(cfg.layers),
            "steps": r.steps, "best_step": r.best_step, "stopped_early": r.stopped_early,
            "train_loss": r.train_loss, "heldout": evals, "heldout_base": r.extra["heldout_base"],
            "heldout_init": evals[0][1], "heldout_best": r.best, "seconds": r.seconds}


def fit_gates(lm, info: ModelInfo, tokenizer, cfg: GateConfig, *, progress: bool | str = False,
              refresh: bool = False):
    """Cached, resumable :func:`fit_gates_on` on ``cfg.corpus`` windows."""
    refuse_remote(info, "gates.fit_gates", _BACKWARD)
    cfg = cfg.checked(info)
    key = cfg.key_dict()
    ckpt = cache.results_dir() / "gates-ckpt" / f"{cache.config_key(key, code=fit_gates)}.pt"

    def compute():
        train, heldout = split_windows(cfg, tokenizer, info)
        return fit_gates_on(lm, info, cfg, train, heldout, checkpoint=ckpt, progress=progress)

    return cache.cached("gates", key, compute, code=fit_gates, refresh=refresh)


def fitted(result: dict[str, Any], info: ModelInfo):
    """The best gates of a :func:`fit_gates` result, checked against ``info``."""
    return gates_from_state(result["gates"], info)


# ------------------------------------------------------------------------------------------
# Measuring fitted gates
# ------------------------------------------------------------------------------------------


def attenuation_map(gates) -> dict[int, Any]:
    """``{layer: alpha}`` for the lens (``forward.collect_residuals(attenuation=...)``): floats for
    scalar gates, callables ``alpha(x)`` for token gates."""
    if gates.kind == "scalar":
        return {l: float(a) for l, a in zip(gates.layers, gates.alphas())}
    return {l: gates.alpha(i) for i, l in enumerate(gates.layers)}


def token_alpha_stats(lm, info: ModelInfo, gates, windows: torch.Tensor, *, batch_size: int = 4,
                      quantiles: Sequence[float] = (0.1, 0.9)) -> dict[str, torch.Tensor]:
    """Mean, std and quantiles over tokens of each gated layer's alpha, with the gates applied.

    Returns ``mean``, ``std`` (``[n_gated]``), ``q`` (``[len(quantiles), n_gated]``: alpha's
    quantiles over tokens, inside the gate's range (0, 1) where mean +- std need not be),
    ``quantiles`` and ``layers``. The gated model's residual states ``h_l`` (inputs of block ``l``)
    come from one nnsight trace per batch (``forward.collect_residuals`` with every gate in place);
    ``alpha_l(t)`` is evaluated on them. For scalar gates std is 0 and every quantile is alpha.
    """
    refuse_remote(info, "gates.token_alpha_stats", _LOCAL_GATES)

    qs = [float(q) for q in quantiles]
    if any(not 0 <= q <= 1 for q in qs):
        raise ValueError(f"quantiles must lie in [0, 1], got {qs}")
    plan = attenuation_map(gates)
    vals: list[list[torch.Tensor]] = [[] for _ in gates.layers]
    with torch.no_grad():
        for s in range(0, len(windows), batch_size):
            hs = collect_residuals(lm, info, windows[s:s + batch_size], attenuation=plan)
            for i, l in enumerate(gates.layers):
                a = gates.alpha(i)
                a = a(hs[l]) if callable(a) else a.expand(hs[l].shape[:-1]).unsqueeze(-1)
                vals[i].append(a.reshape(-1).float())
    flat = [torch.cat(v) for v in vals]
    q = torch.tensor(qs, dtype=torch.float32)
    return {"mean": torch.stack([v.mean() for v in flat]), "std": torch.stack([v.std() for v in flat]),
            "q": torch.stack([torch.quantile(v, q) for v in flat], dim=1), "quantiles": qs,
            "layers": list(gates.layers)}


def fitted_alpha_stats(lm, info: ModelInfo, tokenizer, fit_result: dict[str, Any], *, corpus: str, split: str,
                       window: int, n: int, seed: int = 0, batch: int = 4,
                       quantiles: Sequence[float] = (0.1, 0.9)) -> dict[str, Any]:
    """:func:`token_alpha_stats` of a :func:`fit_gates` result's best gates on ``n`` windows of a
    corpus, cached by the fit's configuration (as ``study.attenuation.gated_lens``)."""
    refuse_remote(info, "gates.fitted_alpha_stats", _LOCAL_GATES)
    g = fitted(fit_result, info)
    key = {"fit": fit_result["config"], "corpus": corpus, "split": split, "window": int(window),
           "n": int(n), "seed": int(seed), "quantiles": [float(q) for q in quantiles]}

    def compute():
        windows = token_windows(corpus, split, tokenizer, length=window, n=n, seed=seed,
                                prepend_bos=info.prepend_bos)
        return token_alpha_stats(lm, info, g, windows, batch_size=batch, quantiles=quantiles)

    return cache.cached("gate-alpha-stats", key, compute, code=fitted_alpha_stats)
