"""A tuned lens (Belrose et al. 2023): one learned affine translator per layer, model frozen.

Definitions (ours, following the tuned-lens paper):

- ``h_l(t)`` is the residual stream entering block ``l`` (``h_0`` the scaled embedding) and
  ``h_L`` the output of the last block, as in :class:`residshift.core.models.ModelInfo`.
- The logit lens decodes ``logits_l = softcap(E · N(h_l))``; the tuned lens decodes
  ``softcap(E · N(T_l(h_l)))`` with the translator ``T_l(h) = h + W_l h + b_l``. ``W_l = b_l = 0``
  *is* the logit lens, bit for bit, and ``T_L`` is the identity (the last layer must reproduce the
  model's own logits).
- Each ``T_l`` (``l < L``) is fitted with the model frozen to minimise the KL divergence
  ``KL(p_L || q_l)`` from the model's final next-token distribution ``p_L`` to the lens's ``q_l``,
  averaged over positions of WikiText-2 *train* windows; the report uses held-out WikiText-2
  *validation* windows; other validation windows (``es_windows``, disjoint) select each layer's
  translator (early stopping).
- Position 0 (BOS, or the first token, which most models use as an attention sink with huge
  activations) is excluded from fitting and from the report (``skip_first``).
- ``train_vocab = K`` (optional) restricts the *training* objective to the K most frequent tokens of
  the training windows (both distributions renormalised over that set), which makes fitting on a
  262k-token vocabulary affordable on a CPU. The *reported* KL is always over the full vocabulary,
  and the report states how much final-distribution mass lay outside the training set.

The recipe (``init="lstsq"``, the default):

1. *Closed-form start* (Din et al. 2023, "Jump to Conclusions"): on the first ``lstsq_windows``
   training windows, regress ``h_L`` on ``[h_l, 1]`` by least squares, per layer. The normal
   equations (``X^T X``, ``X^T Y`` for ``X = [h_l, 1]``, ``Y = h_L``; :class:`LeastSquares`) are
   accumulated in float64 while the residuals are collected (no second copy of the states) and
   solved with a ridge ``λ_l = ridge · tr(S_l) / d`` on the centred covariance ``S_l`` of ``h_l``
   (the ridge in units of the mean variance of a coordinate, so one value suits every layer's
   scale; the intercept is not penalised). Then ``W_l = A_l - I`` and ``b_l = c_l`` make ``T_l`` the
   least-squares map ``A_l h + c_l`` (:func:`set_start`). Least squares minimises the squared
   error in ``h`` space, not the KL through the final norm and the unembedding, so this is a start.
   At the default profile it costs seconds (SmolLM2: 64 windows, 4,032 positions; timed in
   ``benchmarks/bench-tuned-lens.json``). The ridge hardly matters below 1e-3 (measured on the
   report windows while choosing it: mean held-out KL over ``h_0..h_{L-1}`` 1.966 / 1.967 nats for
   SmolLM2 and 1.722 / 1.720 for Gemma-3 at ridge 0 / 1e-3, 1.998 and 1.821 at 1e-2); 1e-3 keeps
   the solve well posed when ``lstsq_windows`` holds fewer positions than ``d``.
2. *KL refinement*: Adam at ``lr`` on the KL objective from that start, batches of ``batch``
   windows drawn with replacement, and early stopping per layer: the start is evaluated at step 0
   and every ``eval_every`` steps after, each layer keeps its state with the lowest counted
   early-stopping KL (:class:`CountedKL`), so it keeps the start unless a refined state beats it by
   more than ``rel_tol``, and never a state with a higher early-stopping KL than the start
   (:func:`kept_states` says which it kept).

``init="zero"`` starts from the logit lens instead (the recipe before the closed-form start).

Convergence, per layer (``rel_tol``, ``patience``, ``eval_every``): an early-stopping evaluation
*improves* layer ``l`` only when its KL beats the layer's best so far by more than ``rel_tol`` times
that best (the fitting loop then keeps that translator); layer ``l`` has *converged* when no
evaluation improved it in the last ``patience * eval_every`` steps of the fit. The fit stops early
once every layer has converged (:func:`layer_convergence`); a layer still improving when the step
cap ends the fit is *unconverged* (:func:`unconverged_layers`) and excluded, its reason in the
report's ``excluded`` (:func:`exclusion_reasons`): its translator is a lower bound on what an affine
read recovers there, so results that read it are marked and kept out of verdicts.

Relation to the tuned-lens project's reference recipe (``tuned-lens`` 0.2.0, ``train_loop.py``):
250 steps of ~2^18 = 262,144 tokens each (~65.5M tokens), SGD with Nesterov momentum 0.9, weight
decay 1e-3 and a linearly decaying learning rate, from the identity translator, on the full
vocabulary at every position, with no held-out selection. Ours is far smaller: at the default
profile each step sees 4 x 63 = 252 positions, drawn from a pool of 256 x 63 = 16,128 training
positions, over a 2,048-token training vocabulary, for at most ``steps`` steps (the default cap of
1,200 steps is 302,400 positions, ~0.5% of the reference's tokens; SmolLM2 converged on every layer
and stopped at step 825, Gemma-3 at 725), starting from the least-squares map instead of the
identity and choosing each layer's state on held-out windows. The translator and the decode
are the same (``h + W_l h + b_l`` through the final norm and the unembedding: the package's
``TunedLens`` decodes our translators identically, ``benchmarks/tuned-lens-agreement.json``), so our
lens is a cheaper fit of the same object, not a reproduction of the reference recipe: its KL is what
this budget reaches (we have not run the reference recipe on these models).

Fitting is resumable (translators, optimizer, step, best states and history are checkpointed
atomically under ``results/tuned-lens-ckpt`` at every early-stopping evaluation, at the end and
every ``checkpoint_every`` steps; the closed-form start is in the first checkpoint, written right
after its step-0 evaluation, so a resumed fit does not recompute it) and cached (:func:`fit_cached`;
the cache key holds every config field). Batches are drawn from a generator seeded by
``(seed, step)``, so an interrupted fit resumed from its checkpoint ends in exactly the state of an
uninterrupted one.

>>> lens, report = fit_cached(lm, info, TunedLensConfig(steps=60))
>>> logits = lens.decode(info, layer, h)       # or use lens.transform as a decoder hook
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from ..core import cache, forward, profiles
from ..core.data import token_windows
from ..core.fitting import FitConfig, fit as run_fit, random_batch, read_checkpoint
from ..core.unembed import Unembed
from ..core.models import ModelInfo
from ..core.paths import results_dir

# why a remote (NDIF) model is refused (core.forward.refuse_remote)
_DECODES = ("decodes every layer through the final norm and the unembedding (info.final_norm, info.embedding), "
            "which a remote model holds on the meta device")

FORMAT = "residshift-tuned-lens/1"
INITS = ("lstsq", "zero")


class TunedLensError(RuntimeError):
    """Raised for a lens that does not fit the model it is used with; the message names the fix."""


# --------------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TunedLensConfig:
    """Everything that determines a fitted tuned lens (the cache key is built from it)."""

    PREFIX: ClassVar[str] = "tuned"  # its profile keys (profiles.stage): tuned_corpus, tuned_window, ...

    corpus: str = "wikitext-2"
    train_split: str = "train"
    val_split: str = "validation"
    window: int = 128  # tokens per window (BOS included where the model prepends one)
    train_windows: int = 256  # pool of training windows; batches are drawn from it with replacement
    val_windows: int = 8  # held-out windows for the report
    es_windows: int = 4  # held-out windows (disjoint from the report's) for early stopping
    batch: int = 4  # windows per optimisation step
    steps: int = 60
    lr: float = 1e-3  # Adam
    weight_decay: float = 0.0
    eval_every: int = 20  # early-stopping evaluation period (steps); 0 = never, keep the last state
    patience: int | None = None  # stop after this many evaluations in which no layer improved
    rel_tol: float = 0.01  # an evaluation improves a layer only when it beats the layer's best by > rel_tol x best
    # steps between fitting checkpoints besides those the loop writes at every early-stopping
    # evaluation and at the end (a SmolLM2 checkpoint is ~160 MB); 0 = only those
    checkpoint_every: int = 100
    # K most frequent training tokens for the objective; None = all (profile key tuned_vocab)
    train_vocab: int | None = field(default=None, metadata=profiles.key("vocab"))
    skip_first: int = 1  # positions excluded from fitting and report (attention sink / BOS)
    seed: int = 0
    init: str = "lstsq"  # "lstsq": the closed-form start (least squares h_l -> h_L); "zero": the logit lens
    lstsq_windows: int = 64  # the first this many training windows fit the closed-form start
    ridge: float = 1e-3  # ridge of the closed-form start, in units of the mean variance tr(S_l) / d

    def __post_init__(self) -> None:
        for name in ("window", "train_windows", "val_windows", "batch", "steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"TunedLensConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.window < self.skip_first + 2:
            raise ValueError(f"window={self.window} leaves no scored position after skip_first="
                             f"{self.skip_first}; use a window of at least {self.skip_first + 2}")
        if not self.lr > 0:
            raise ValueError(f"lr must be positive, got {self.lr}")
        if self.train_vocab is not None and self.train_vocab < 2:
            raise ValueError("train_vocab must be None (full vocabulary) or at least 2")
        if not 0 <= self.rel_tol < 1:
            raise ValueError(f"rel_tol must lie in [0, 1), got {self.rel_tol}: it is the relative drop "
                             f"in a layer's early-stopping KL that counts as an improvement")
        if self.checkpoint_every < 0:
            raise ValueError(f"checkpoint_every must be >= 0 (0 = checkpoint only at the early-stopping "
                             f"evaluations and the end), got {self.checkpoint_every}")
        if self.init not in INITS:
            raise ValueError(f"init must be one of {INITS} ('lstsq': the closed-form least-squares start, "
                             f"'zero': the logit lens), got {self.init!r}")
        if not 1 <= self.lstsq_windows <= self.train_windows:
            raise ValueError(f"lstsq_windows={self.lstsq_windows} must lie in 1..train_windows="
                             f"{self.train_windows} (the closed-form start is fitted on the first "
                             f"lstsq_windows training windows): lower lstsq_windows or raise train_windows")
        if not (self.ridge >= 0 and math.isfinite(self.ridge)):
            raise ValueError(f"ridge must be a finite number >= 0 (in units of the residual's mean "
                             f"variance; 1e-3 is the default), got {self.ridge}")


# --------------------------------------------------------------------------------------------
# Decoding
# --------------------------------------------------------------------------------------------


def decode_logits(info: ModelInfo, h: torch.Tensor, vocab: torch.Tensor | None = None) -> torch.Tensor:
    """Logit-lens logits ``softcap(E · N(h))`` of residuals ``h`` [..., d] (optionally on a vocab subset).

    The one head of :class:`residshift.core.unembed.Unembed`; gradients flow to ``h``.
    """
    return Unembed(info, vocab=vocab)(h)


class TunedLens(nn.Module):
    """Per-layer translators ``T_l(h) = h + W_l h + b_l`` for ``l = 0..L-1``; ``T_L`` is the identity."""

    def __init__(self, info: ModelInfo):
        super().__init__()
        self.model_name = info.name
        self.n_layers = info.n_layers
        self.d_model = info.d_model
        self.translators = nn.ModuleList(nn.Linear(info.d_model, info.d_model) for _ in range(info.n_layers))
        for t in self.translators:
            nn.init.zeros_(t.weight)
            nn.init.zeros_(t.bias)

    def _check_layer(self, layer: int) -> int:
        if not isinstance(layer, int) or isinstance(layer, bool) or not 0 <= layer <= self.n_layers:
            raise IndexError(f"residual index {layer!r} is out of range for {self.model_name}: use "
                             f"0..{self.n_layers} (0 = embedding, {self.n_layers} = last block's output)")
        return layer

    def transform(self, layer: int, h: torch.Tensor) -> torch.Tensor:
        """``T_layer(h)``: the decoder hook ``(layer, h) -> h'`` applied before the final norm."""
        if self._check_layer(layer) == self.n_layers:
            return h
        if h.shape[-1] != self.d_model:
            raise ValueError(f"h has width {h.shape[-1]} but this lens was fitted on {self.model_name} "
                             f"(d_model {self.d_model})")
        t = self.translators[layer]
        return h + F.linear(h.to(t.weight.dtype), t.weight, t.bias).to(h.dtype)

    def decode(self, info: ModelInfo, layer: int, h: torch.Tensor) -> torch.Tensor:
        """Tuned-lens logits ``softcap(E · N(T_layer(h)))``."""
        self.check_model(info)
        return decode_logits(info, self.transform(layer, h))

    def check_model(self, info: ModelInfo) -> None:
        if info.name != self.model_name or info.d_model != self.d_model or info.n_layers != self.n_layers:
            raise TunedLensError(
                f"this tuned lens was fitted on {self.model_name!r} ({self.n_layers} layers, d "
                f"{self.d_model}) but is being used with {info.name!r} ({info.n_layers} layers, d "
                f"{info.d_model}): fit one for {info.name!r} with fit_cached(lm, info, config)")

    # -- persistence -----------------------------------------------------------------------
    def save(self, path: str | Path, *, config: TunedLensConfig | None = None,
             report: dict | None = None) -> Path:
        """Write the translators (and what produced them) atomically to ``path``."""
        payload = {"format": FORMAT, "model": self.model_name, "n_layers": self.n_layers,
                   "d_model": self.d_model, "state": {k: v.detach().cpu() for k, v in self.state_dict().items()},
                   "config": asdict(config) if config is not None else None, "report": report}
        cache.save_verified(payload, Path(path))  # with its sha256 beside it (<path>.sha256)
        return Path(path)

    @classmethod
    def load(cls, path: str | Path, info: ModelInfo) -> "TunedLens":
        """Read a lens saved by :meth:`save`, its sha256 checked; refuse one fitted on another model
        or one whose file is damaged (changed after it was written, or unreadable)."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"no tuned lens at {path}; fit one with fit_cached(lm, info, config)")
        try:
            payload = cache.load_verified(path)
        except cache.DamagedFileError as err:
            raise TunedLensError(f"tuned lens {path} is damaged ({err.reason}); delete it and save the lens "
                                 "again, or fit one with fit_cached(lm, info, config)") from err
        if not isinstance(payload, dict) or payload.get("format") != FORMAT:
            raise TunedLensError(f"{path} is not a residshift tuned lens (format {FORMAT!r})")
        if (payload["model"], payload["n_layers"], payload["d_model"]) != (info.name, info.n_layers, info.d_model):
            raise TunedLensError(
                f"{path} holds a tuned lens fitted on {payload['model']!r} ({payload['n_layers']} "
                f"layers, d {payload['d_model']}), not on {info.name!r} ({info.n_layers} layers, d "
                f"{info.d_model}): load the lens fitted on {info.name!r} or fit one with fit_cached")
        lens = cls(info)
        lens.load_state_dict(payload["state"])
        return lens


def reference_state(lens: TunedLens) -> dict[str, torch.Tensor]:
    """The translators as the state dict of the tuned-lens package's ``TunedLens.layer_translators``
    (``tuned_lens.nn.lenses``, 0.2.0: keys ``"{l}.weight"``, ``"{l}.bias"``; it too decodes
    ``unembed(h + W_l h + b_l)``). Load with ``ref.layer_translators.load_state_dict(...)``."""
    return {k.removeprefix("translators."): v.detach().clone() for k, v in lens.state_dict().items()}


# --------------------------------------------------------------------------------------------
# Residuals (one nnsight trace per batch)
# --------------------------------------------------------------------------------------------


def collect_residuals(lm, info: ModelInfo, ids: torch.Tensor) -> list[torch.Tensor]:
    """``[h_0, ..., h_L]``, each ``[batch, seq, d]`` fp32, from one nnsight trace (no grad).

    ``h_0`` is the input of block 0 and ``h_l`` the output of block ``l - 1``; the final norm is
    not applied. Delegates to the shared collector :func:`residshift.core.forward.collect_residuals`.
    """
    return list(forward.collect_residuals(lm, info, ids).unbind(0))


# --------------------------------------------------------------------------------------------
# Objective and evaluation
# --------------------------------------------------------------------------------------------


def _kl(target_logp: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """Per-row ``KL(p || q)`` with ``p = exp(target_logp)``, ``q = softmax(logits)``."""
    logq = torch.log_softmax(logits.float(), dim=-1)
    return (target_logp.exp() * (target_logp - logq)).sum(-1)


def _flat(h: torch.Tensor, skip_first: int) -> torch.Tensor:
    return h[:, skip_first:].reshape(-1, h.shape[-1])


@torch.no_grad()
def evaluate_kl(lm, info: ModelInfo, lens: TunedLens | None, windows: torch.Tensor, *,
                batch: int = 4, skip_first: int = 1, vocab: torch.Tensor | None = None,
                chunk: int = 256) -> dict[str, torch.Tensor]:
    """Per-window mean ``KL(p_L || q_l)`` for the logit lens and (if given) the tuned lens.

    Returns ``{"logit": [n, L+1], "tuned": [n, L+1]}`` (nats; column ``l`` is residual ``h_l``;
    column L is 0 by construction) and ``"outside_mass"`` [n]: mean final-distribution mass outside
    ``vocab`` (0 without one). With ``vocab`` both distributions are renormalised over it.
    """
    forward.refuse_remote(info, "tuned_lens.evaluate_kl", _DECODES)
    if lens is not None:
        lens.check_model(info)
    out = {"logit": [], "tuned": [], "outside_mass": []}
    for start in range(0, len(windows), batch):
        ids = windows[start:start + batch]
        hs = collect_residuals(lm, info, ids) if info.remote else collect_stack(lm, info, ids)
        for key, value in _kl_batch(info, lens, hs, skip_first=skip_first, vocab=vocab, chunk=chunk,
                                    logit=True).items():
            out[key].append(value)
    res = {k: torch.cat(v) for k, v in out.items()}
    if lens is None:
        del res["tuned"]
    return res


def _kl_batch(info: ModelInfo, lens: TunedLens | None, hs: list[torch.Tensor], *, skip_first: int,
              vocab: torch.Tensor | None, chunk: int = 256, logit: bool = True) -> dict[str, torch.Tensor]:
    """:func:`evaluate_kl` of one batch of residuals ``hs`` (``[h_0..h_L]``, each ``[B, T, d]``):
    per-window means ``{"logit", "tuned": [B, L+1], "outside_mass": [B]}``. ``logit=False``
    skips the logit lens (the early-stopping evaluation needs only the tuned lens)."""
    L = info.n_layers
    B, T_ = hs[0].shape[:2]
    n_pos = T_ - skip_first
    final = _flat(hs[L], skip_first)
    rows = {"logit": torch.zeros(B * n_pos, L + 1), "tuned": torch.zeros(B * n_pos, L + 1)}
    outside = torch.zeros(B * n_pos)
    flat = [_flat(h, skip_first) for h in hs]
    for c in range(0, final.shape[0], chunk):
        sl = slice(c, c + chunk)
        full_logp = torch.log_softmax(decode_logits(info, final[sl]).float(), -1)
        if vocab is not None:
            outside[sl] = 1 - full_logp[:, vocab].exp().sum(-1)
            target = torch.log_softmax(full_logp[:, vocab], -1)
        else:
            target = full_logp
        for l in range(L + 1):
            h = flat[l][sl]
            if logit:
                rows["logit"][sl, l] = _kl(target, decode_logits(info, h, vocab))
            if lens is not None:
                rows["tuned"][sl, l] = _kl(target, decode_logits(info, lens.transform(l, h), vocab))
    out = {key: rows[key].view(B, n_pos, L + 1).mean(1) for key in ("logit", "tuned")}
    out["outside_mass"] = outside.view(B, n_pos).mean(1)
    return out


def training_vocab(windows: torch.Tensor, k: int | None) -> torch.Tensor | None:
    """The ``k`` most frequent token ids of ``windows`` (ties broken by id), sorted; None = all."""
    if k is None:
        return None
    ids, counts = torch.unique(windows.reshape(-1), return_counts=True)
    order = sorted(range(len(ids)), key=lambda i: (-int(counts[i]), int(ids[i])))[:k]
    return torch.sort(ids[order]).values


# --------------------------------------------------------------------------------------------
# Fitting (resumable)
# --------------------------------------------------------------------------------------------


def train_step(lm, info: ModelInfo, lens: TunedLens, ids: torch.Tensor, backward, *, skip_first: int,
               vocab: torch.Tensor | None) -> list[float]:
    """Forward and backward of one batch; returns each layer's mean training KL (before the step).

    Layers are independent (each translator only sees its own layer), so each layer's loss is
    back-propagated on its own (``backward``, from the fitting loop), which keeps only one layer's
    vocabulary-sized tensors alive. Runs the model on ``ids`` (``fit(collect="per_step")``).
    """
    return _layer_losses(info, lens, collect_residuals(lm, info, ids), backward, skip_first=skip_first,
                         head=Unembed(info, vocab=vocab))


def _layer_losses(info: ModelInfo, lens: TunedLens, hs: list[torch.Tensor], backward, *,
                  skip_first: int, head: Unembed) -> list[float]:
    """:func:`train_step` on residuals already collected (``head``: the training-vocabulary head)."""
    L = info.n_layers
    with torch.no_grad():
        target = torch.log_softmax(head(_flat(hs[L], skip_first)).float(), -1)
    kls = []
    for l in range(L):
        h = _flat(hs[l], skip_first)
        loss = _kl(target, head(lens.transform(l, h))).mean()
        backward(loss)
        kls.append(float(loss.detach()))
    return kls


# --------------------------------------------------------------------------------------------
# Residuals collected once
# --------------------------------------------------------------------------------------------

RESIDUAL_CACHE_BYTES = 5 << 28
"""At most this many bytes (1.25 GiB) of residuals (``h_0..h_L`` of the windows of a block of steps,
fp32) are held by :class:`ResidualStore` at a time (plus one step's batch and one collecting
forward); a fit whose windows need more collects them block by block. At the default profile a
SmolLM2 window is 4.6 MB (31 x 64 x 576 floats) and a Gemma-3-270M one 3.1 MB (19 x 64 x 640), so
the whole pool of 256 training windows (1.17 GB, 0.80 GB) fits and a fit of any length runs the
model over each window once (at 1 GiB, SmolLM2 re-collected about 234 windows every ~160 steps)."""
COLLECT_BATCH = 16  # windows per forward when collecting


class ResidualStore:
    """``h_0..h_L`` of the training windows the steps draw, collected before the steps that use them.

    For the block of steps starting at the first step whose windows are not held, it finds the
    distinct windows those steps draw (the batches are a function of ``(seed, step)``), as many
    steps as fit in :data:`RESIDUAL_CACHE_BYTES`, and runs the frozen model over them once, in
    batches of :data:`COLLECT_BATCH` (:func:`collect_stack`: no head, no logits). A resumed fit
    starts a block at its first step, so it sees the residuals an uninterrupted one sees.
    """

    def __init__(self, lm, info: ModelInfo, train: torch.Tensor, cfg: TunedLensConfig,
                 budget: int | None = None):
        self.lm, self.info, self.train, self.cfg = lm, info, train, cfg
        self.per_window = (info.n_layers + 1) * train.shape[1] * info.d_model * 4
        budget = RESIDUAL_CACHE_BYTES if budget is None else budget
        self.max_windows = max(cfg.batch, budget // self.per_window)
        self.slot: dict[int, int] = {}  # window index -> position in self.hs
        self.hs: torch.Tensor | None = None  # [L+1, n, T, d]
        self.steps: tuple[int, int] = (0, -1)  # the block held: steps first..last
        self.blocks = 0  # how many blocks were collected (one forward pass each over their windows)
        self.windows_run = 0

    def _draw(self, step: int) -> list[int]:
        return random_batch(len(self.train), self.cfg.batch, step, self.cfg.seed).tolist()

    def batch(self, step: int) -> list[torch.Tensor]:
        """``[h_0, ..., h_L]`` of step ``step``'s batch, each ``[batch, T, d]``."""
        idx = self._draw(step)
        if not (self.steps[0] <= step <= self.steps[1]):
            self._collect(step)
        at = torch.tensor([self.slot[i] for i in idx])
        return list(self.hs.index_select(1, at).unbind(0))

    def prime(self, lstsq: LeastSquares, idx: list[int]) -> None:
        """Collect the first block (from step 0) and, in the same pass, add the windows ``idx`` to
        the closed-form start's sums ``lstsq``: those the block holds run once for both; the others
        run once and are not kept."""
        self._collect(0, lstsq=lstsq, extra=idx)

    def _collect(self, first: int, *, lstsq: LeastSquares | None = None, extra: list[int] = ()) -> None:
        self.hs = None  # free the last block first
        order: dict[int, None] = {}
        last = first
        for s in range(first, self.cfg.steps):
            new = [i for i in dict.fromkeys(self._draw(s)) if i not in order]
            if s > first and len(order) + len(new) > self.max_windows:
                break
            order.update(dict.fromkeys(new))
            last = s
        windows = list(order)
        L1, T_, d = self.info.n_layers + 1, self.train.shape[1], self.info.d_model
        self.hs = torch.empty(L1, len(windows), T_, d)
        self.slot = {w: j for j, w in enumerate(windows)}
        extra = list(dict.fromkeys(extra))
        rest = [w for w in windows if w not in set(extra)]
        batches = [(b, True) for b in _lstsq_batches(extra)]
        batches += [(rest[i:i + COLLECT_BATCH], False) for i in range(0, len(rest), COLLECT_BATCH)]
        for ids, for_start in batches:
            part = collect_stack(self.lm, self.info, self.train[ids])
            if for_start and lstsq is not None:
                lstsq.add(part)
            for j, w in enumerate(ids):
                if w in self.slot:
                    for l, h in enumerate(part):
                        self.hs[l, self.slot[w]] = h[j]
            del part
        self.steps = (first, last)
        self.blocks += 1
        self.windows_run += len(windows) + len([w for w in extra if w not in self.slot])


class _Stop(Exception):
    """Raised by the last block's hook: the rest of the model (final norm, head) is not needed."""


def collect_stack(lm, info: ModelInfo, ids: torch.Tensor) -> list[torch.Tensor]:
    """:func:`collect_residuals` without nnsight and without the head: forward hooks on the
    decoder layers save ``h_0`` (layer 0's input) and every layer's output, and the forward stops
    after the last layer (the final norm and the vocabulary projection, most of a forward for
    Gemma-3's 262k vocabulary, never run). The same tensors as the nnsight trace (tested)."""
    module = getattr(lm, "_module", lm)
    saved: list[torch.Tensor] = []

    def first(mod, args, kwargs):
        saved.append(args[0] if args else kwargs["hidden_states"])

    def output(mod, args, kwargs, out):
        saved.append(out[0] if isinstance(out, tuple) else out)
        if len(saved) == info.n_layers + 1:
            raise _Stop

    hooks = [info.layers[0].register_forward_pre_hook(first, with_kwargs=True)]
    hooks += [layer.register_forward_hook(output, with_kwargs=True) for layer in info.layers]
    try:
        with torch.no_grad():
            module(input_ids=ids.to(info.embedding.device))
    except _Stop:
        pass
    finally:
        for h in hooks:
            h.remove()
    if len(saved) != info.n_layers + 1:
        raise TunedLensError(f"collected {len(saved)} residuals of {info.name}, expected "
                             f"{info.n_layers + 1}: the model's layers did not all run")
    return [h.detach().float() for h in saved]


# --------------------------------------------------------------------------------------------
# The closed-form start: least squares h_l -> h_L
# --------------------------------------------------------------------------------------------


class LeastSquares:
    """The normal equations of the least-squares maps ``h_L ≈ A_l h_l + c_l``, accumulated in float64.

    With ``X = [h_l, 1]`` and ``Y = h_L`` (rows: positions ``>= skip_first`` of the windows added),
    ``X^T X`` and ``X^T Y`` are held as their blocks: the row count ``n``, ``Σ h_l``, ``Σ h_L``,
    ``Σ h_l h_l^T`` and ``Σ h_l h_L^T`` (one ``d x d`` pair per layer ``l < L``). :meth:`add` takes
    the residuals of a batch as they are collected, so no second copy of the states is kept.
    """

    def __init__(self, n_layers: int, d_model: int, *, skip_first: int = 1):
        self.L, self.d, self.skip_first = n_layers, d_model, skip_first
        f64 = torch.float64
        self.n = 0
        self.sum_x = torch.zeros(n_layers, d_model, dtype=f64)
        self.sum_y = torch.zeros(d_model, dtype=f64)
        self.xx = torch.zeros(n_layers, d_model, d_model, dtype=f64)
        self.xy = torch.zeros(n_layers, d_model, d_model, dtype=f64)

    def add(self, hs: list[torch.Tensor]) -> None:
        """Add the rows of a batch's residuals ``[h_0, ..., h_L]`` (each ``[B, T, d]``)."""
        if len(hs) != self.L + 1:
            raise TunedLensError(f"expected {self.L + 1} residuals h_0..h_L, got {len(hs)}")
        y = _flat(hs[self.L], self.skip_first).double()
        self.n += y.shape[0]
        self.sum_y += y.sum(0)
        for l in range(self.L):
            x = _flat(hs[l], self.skip_first).double()
            self.sum_x[l] += x.sum(0)
            self.xx[l] += x.T @ x
            self.xy[l] += x.T @ y

    def solve(self, ridge: float) -> dict[str, Any]:
        """Per layer, the ridge least-squares map ``h_L ≈ A_l h_l + c_l``.

        Centred: ``S_l = Cov(h_l)``, ``C_l = Cov(h_l, h_L)`` (from the sums); ``A_l^T = (S_l + λ_l I)^{-1}
        C_l`` with ``λ_l = ridge · tr(S_l) / d`` (the ridge in units of the mean variance of ``h_l``'s
        coordinates, so one value suits residuals of any scale); the intercept is not penalised:
        ``c_l = mean(h_L) - A_l mean(h_l)``. Returns ``{"A": [L, d, d], "c": [L, d], "lam": [L],
        "rows": n}`` (float64).
        """
        if self.n < 2:
            raise TunedLensError(f"the closed-form start has {self.n} rows: use more (or longer) windows "
                                 f"(lstsq_windows, window)")
        n = self.n
        mx, my = self.sum_x / n, self.sum_y / n
        A = torch.empty(self.L, self.d, self.d, dtype=torch.float64)
        lam = torch.empty(self.L, dtype=torch.float64)
        eye = torch.eye(self.d, dtype=torch.float64)
        for l in range(self.L):
            S = self.xx[l] / n - torch.outer(mx[l], mx[l])
            C = self.xy[l] / n - torch.outer(mx[l], my)
            lam[l] = ridge * torch.trace(S) / self.d
            factor, info = torch.linalg.cholesky_ex(S + lam[l] * eye)
            if int(info) != 0:
                raise TunedLensError(f"the closed-form start of layer {l} is singular ({n} rows, d {self.d}, "
                                     f"ridge {ridge}): raise ridge (TunedLensConfig.ridge, profile key "
                                     f"tuned_ridge) or lstsq_windows")
            A[l] = torch.cholesky_solve(C, factor).T
        c = my.unsqueeze(0) - torch.einsum("lij,lj->li", A, mx)
        return {"A": A, "c": c, "lam": lam, "rows": n}


def set_start(lens: TunedLens, solution: dict[str, Any]) -> None:
    """Set each translator to the least-squares map: ``T_l(h) = h + W_l h + b_l = A_l h + c_l``
    (``W_l = A_l - I``, ``b_l = c_l``)."""
    eye = torch.eye(lens.d_model, dtype=torch.float64)
    with torch.no_grad():
        for l, t in enumerate(lens.translators):
            t.weight.copy_((solution["A"][l] - eye).to(t.weight.dtype))
            t.bias.copy_(solution["c"][l].to(t.bias.dtype))


def lstsq_windows(train: torch.Tensor, cfg: TunedLensConfig) -> list[int]:
    """The training windows the closed-form start is fitted on: the first ``cfg.lstsq_windows``
    (all of ``train`` when it holds fewer; the windows are a seeded random draw already)."""
    return list(range(min(cfg.lstsq_windows, len(train))))


def _lstsq_batches(idx: list[int]) -> list[list[int]]:
    """The closed-form start's windows in model batches of :data:`COLLECT_BATCH`: the same batches
    in both collection modes, so both build the same sums to the last bit."""
    return [idx[i:i + COLLECT_BATCH] for i in range(0, len(idx), COLLECT_BATCH)]


# --------------------------------------------------------------------------------------------
# Convergence (per layer)
# --------------------------------------------------------------------------------------------


class CountedKL:
    """The early-stopping evaluation as the fitting loop counts it, with a relative tolerance.

    :func:`residshift.core.fitting.fit` counts a part as improved when its value is below its best
    (``min_delta`` is absolute, and a layer's KL spans 0.01 to 100 nats across depth). Called with
    one evaluation's per-layer KL, this returns the KL where it beats the layer's counted best by
    more than ``rel_tol`` times that best (an improvement: the loop keeps that translator and resets
    patience) and the counted best itself otherwise (no improvement). So each layer keeps a
    translator within ``rel_tol`` of its lowest early-stopping KL, and the loop's patience counts
    evaluations in which no layer improved by more than ``rel_tol``. ``raw``: the last KL as measured.
    ``best``: the counted bests to start from (those of the checkpoint a fit resumes from).
    """

    def __init__(self, rel_tol: float, best: list[float] | None = None):
        if not 0 <= rel_tol < 1:
            raise ValueError(f"rel_tol must lie in [0, 1), got {rel_tol}")
        self.rel_tol = rel_tol
        self.best = None if best is None else [float(b) for b in best]
        self.raw: list[float] = []

    def __call__(self, values: list[float]) -> list[float]:
        values = [float(v) for v in values]
        if self.best is None:
            self.best = [float("inf")] * len(values)
        if len(values) != len(self.best):
            raise TunedLensError(f"the evaluation returned {len(values)} layers, earlier {len(self.best)}")
        self.raw = values
        counted = []
        for i, (v, b) in enumerate(zip(values, self.best)):
            if v < b * (1 - self.rel_tol):  # KL >= 0; the first evaluation beats inf
                self.best[i] = v
            counted.append(self.best[i])
        return counted


def _checkpoint_best(checkpoint: Path | None) -> list[float] | None:
    """The per-layer counted bests saved in a fitting checkpoint (None: no checkpoint or no evaluation yet)."""
    if checkpoint is None or not Path(checkpoint).is_file():
        return None
    saved = read_checkpoint(checkpoint)  # sha256 checked: a damaged checkpoint is refused (FitError)
    state = saved.get("state") if isinstance(saved, dict) else None
    return None if not isinstance(state, dict) else state.get("best")


def layer_convergence(history: list[dict], steps: int, *, eval_every: int, patience: int | None) -> dict[str, Any]:
    """Per-layer convergence of a finished fit from its evaluation records (``history``).

    ``last_improved[l]``: the step of the last evaluation that improved layer ``l`` (its counted
    best, the record's ``best``, changed; 0 = only the logit lens at step 0). Layer ``l`` has
    converged when ``steps - last_improved[l] >= patience * eval_every`` (no improvement over the
    last ``patience`` evaluation periods; an early stop implies it for every layer). Returns
    ``{"window": patience * eval_every, "last_improved", "converged": [bool], "unconverged": [l]}``;
    all three lists are None when the fit had no early-stopping evaluations or no ``patience``
    (convergence is then not judged).
    """
    evals = [h for h in history if isinstance(h, dict) and "eval" in h and "best" in h]
    if not evals or not patience or not eval_every:
        return {"window": None, "last_improved": None, "converged": None, "unconverged": None}
    window = patience * eval_every
    bests = [h["best"] if isinstance(h["best"], (list, tuple)) else [h["best"]] for h in evals]  # 1 layer: a number
    last = [int(evals[0]["step"])] * len(bests[0])
    for h, prev, cur in zip(evals[1:], bests, bests[1:]):
        for l, (a, b) in enumerate(zip(prev, cur)):
            if a != b:
                last[l] = int(h["step"])
    converged = [steps - s >= window for s in last]
    return {"window": window, "last_improved": last, "converged": converged,
            "unconverged": [l for l, ok in enumerate(converged) if not ok]}


def unconverged_layers(report: dict) -> list[int]:
    """Residual indices ``l`` (of ``h_l``) whose translator was still improving when the step cap
    ended the fit (:func:`layer_convergence`); ``[]`` when every layer converged."""
    if not isinstance(report, dict) or "unconverged" not in report:
        raise TunedLensError("this tuned-lens report predates per-layer convergence (or is an interrupted "
                             "fit's): refit it with fit_cached(lm, info, config, refresh=True)")
    if report["unconverged"] is None:
        raise TunedLensError("this tuned lens was fitted without early-stopping evaluations or without "
                             "patience, so convergence was not judged: fit it with eval_every > 0, "
                             "es_windows > 0 and patience set (profile keys tuned_eval_every, "
                             "tuned_es_windows, tuned_patience)")
    return [int(l) for l in report["unconverged"]]


def checkpoint_path(info: ModelInfo, cfg: TunedLensConfig) -> Path:
    return results_dir() / "tuned-lens-ckpt" / f"{cache.config_key(cache_config(info, cfg), code=fit_cached)}.pt"


def cache_config(info: ModelInfo, cfg: TunedLensConfig) -> dict:
    return {"model": info.name, "source": info.source, "version": FORMAT, **asdict(cfg)}


def fit_config(cfg: TunedLensConfig) -> FitConfig:
    """The fitting loop's settings for a tuned-lens fit (Adam, constant lr, per-layer best states)."""
    return FitConfig(steps=cfg.steps, lr=cfg.lr, optimizer="adam", weight_decay=cfg.weight_decay,
                     eval_every=cfg.eval_every, eval_at_start=True, patience=cfg.patience,
                     checkpoint_every=cfg.checkpoint_every, seed=cfg.seed)


def fit(lm, info: ModelInfo, cfg: TunedLensConfig, *, train: torch.Tensor, es: torch.Tensor | None,
        checkpoint: Path | None = None, stop_after: int | None = None,
        progress: bool | str = False, collect: str = "once") -> tuple[TunedLens, dict]:
    """Fit a tuned lens on ``train`` windows through :func:`residshift.core.fitting.fit`.

    With ``cfg.init == "lstsq"`` the translators start at the closed-form start
    (:func:`closed_form_start`; not recomputed when resuming), else at the logit lens. Batches are
    drawn with replacement from a generator seeded by ``(seed, step)``. With ``es``
    (early-stopping windows) and ``eval_every``, each layer keeps the translator with its lowest
    counted early-stopping KL (step 0, the start itself, is a candidate); ``cfg.patience`` ends the
    fit when no layer improved for that many evaluations. Resumes from ``checkpoint`` when it exists;
    ``stop_after`` ends this call after that many steps (what an interruption does; tests use it).

    ``collect``: ``"once"`` (default) runs the frozen model once over the windows a block of steps
    draws and fits on those residuals (:class:`ResidualStore`: a window drawn twice runs once, the
    early-stopping windows run once, the head after the last block never runs), within
    :data:`RESIDUAL_CACHE_BYTES` of memory; ``"per_step"`` runs the model for every step's batch
    (:func:`train_step`). The model is frozen and a window's residuals do not depend on the batch
    it runs in, so both give the same lens (tested).

    Returns the lens and a report: ``history`` (the fitting loop's records: ``parts`` = per-layer
    training KL per step; per evaluation ``kl`` = per-layer early-stopping KL as measured, ``eval``
    = as counted with ``cfg.rel_tol`` (:class:`CountedKL`), ``best`` = the counted bests),
    ``best_es_kl``, ``steps``, ``stopped_early``, ``fit_seconds`` (the KL steps), ``start`` (what the
    closed-form start used: windows, rows, ridge, ``lam``; ``seconds``, which with a residual store
    include collecting the store's first block) and ``start_seconds``, ``vocab_size``, ``kept``
    (:func:`kept_states`), the per-layer convergence of :func:`layer_convergence` (``last_improved``,
    ``converged``, ``unconverged``, ``convergence_window``) and ``excluded`` (:func:`exclusion_reasons`).
    """
    forward.refuse_remote(info, "tuned_lens.fit", _DECODES)
    if collect not in ("once", "per_step"):
        raise ValueError(f"collect must be 'once' or 'per_step', got {collect!r}")
    lens = TunedLens(info)
    vocab = training_vocab(train, cfg.train_vocab)
    if vocab is not None and vocab.numel() < 2:
        raise TunedLensError("the training vocabulary has fewer than 2 tokens: use more windows")
    once = collect == "once" and not info.remote
    store = ResidualStore(lm, info, train, cfg) if once else None
    head = Unembed(info, vocab=vocab)
    es_hs: list = []
    resuming = checkpoint is not None and Path(checkpoint).is_file()  # the checkpoint holds the start
    start = {"init": cfg.init}
    if cfg.init == "lstsq" and not resuming:
        start.update(closed_form_start(lm, info, lens, train, cfg, store=store))

    def step_fn(step, micro, backward):
        if store is None:
            ids = train[random_batch(len(train), cfg.batch, step, cfg.seed)]
            return train_step(lm, info, lens, ids, backward, skip_first=cfg.skip_first, vocab=vocab)
        return _layer_losses(info, lens, store.batch(step), backward, skip_first=cfg.skip_first, head=head)

    def eval_fn():
        if store is None:
            return evaluate_kl(lm, info, lens, es, batch=cfg.batch, skip_first=cfg.skip_first,
                               vocab=vocab)["tuned"].mean(0)[:-1].tolist()
        if not es_hs:  # the early-stopping windows, in evaluate_kl's batches, once
            es_hs.extend(collect_stack(lm, info, es[i:i + cfg.batch]) for i in range(0, len(es), cfg.batch))
        with torch.no_grad():
            tuned = [_kl_batch(info, lens, hs, skip_first=cfg.skip_first, vocab=vocab, logit=False)["tuned"]
                     for hs in es_hs]
        return torch.cat(tuned).mean(0)[:-1].tolist()

    def best_keys(layer):
        return [f"translators.{layer}.weight", f"translators.{layer}.bias"]

    use_es = es is not None and cfg.eval_every > 0
    counted = CountedKL(cfg.rel_tol, best=_checkpoint_best(checkpoint))
    result = run_fit(lens, fit_config(cfg), step_fn=step_fn,
                     eval_fn=(lambda: counted(eval_fn())) if use_es else None,
                     eval_extra=(lambda: {"kl": list(counted.raw)}) if use_es else None,
                     best_keys=best_keys, checkpoint=checkpoint, stop_after=stop_after, progress=progress,
                     extra={"start": start})
    if not result.finished:
        return lens, {"interrupted_at": result.steps}
    conv = layer_convergence(result.history, result.steps, eval_every=cfg.eval_every,
                             patience=cfg.patience if use_es else None)
    start = result.extra.get("start", start)  # a resumed fit: the start recorded when it began
    return lens, {"history": result.history, "best_es_kl": result.best, "steps": result.steps,
                  "stopped_early": result.stopped_early, "fit_seconds": result.seconds,
                  "start_seconds": start.get("seconds", 0.0), "start": start,
                  "vocab_size": None if vocab is None else len(vocab),
                  "kept": kept_states(result.history, use_es),
                  "convergence_window": conv["window"], "last_improved": conv["last_improved"],
                  "converged": conv["converged"], "unconverged": conv["unconverged"],
                  "excluded": exclusion_reasons(conv, result.steps, cfg)}


def closed_form_start(lm, info: ModelInfo, lens: TunedLens, train: torch.Tensor, cfg: TunedLensConfig, *,
                      store: ResidualStore | None = None) -> dict[str, Any]:
    """Set ``lens`` to the least-squares start (:class:`LeastSquares`, :func:`set_start`) fitted on
    the first ``cfg.lstsq_windows`` training windows; what it used and took.

    With a ``store`` the sums are built while the store collects its first block (one forward per
    window, :meth:`ResidualStore.prime`); without one the windows run on their own, in the same batches."""
    t0 = time.perf_counter()
    idx = lstsq_windows(train, cfg)
    sums = LeastSquares(info.n_layers, info.d_model, skip_first=cfg.skip_first)
    if store is not None:
        store.prime(sums, idx)
    else:
        for ids in _lstsq_batches(idx):
            sums.add(collect_stack(lm, info, train[ids]))
    t1 = time.perf_counter()
    solution = sums.solve(cfg.ridge)
    set_start(lens, solution)
    return {"init": "lstsq", "windows": len(idx), "rows": solution["rows"], "ridge": cfg.ridge,
            "lam": solution["lam"].tolist(), "collect_seconds": t1 - t0,
            "seconds": time.perf_counter() - t0}


def kept_states(history: list[dict], use_es: bool) -> list[str] | None:
    """Per layer, which state the fit kept: ``"start"`` (the state evaluated at step 0, the
    closed-form start or the logit lens) or ``"refined"`` (a state after KL steps whose
    early-stopping KL beat every earlier counted best by more than ``rel_tol``). The fitting loop
    keeps a layer's state at its last counted improvement, so the kept state's early-stopping KL
    is never above the start's. None without early-stopping evaluations (the last state is kept)."""
    evals = [h for h in history if isinstance(h, dict) and "eval" in h and "best" in h]
    if not use_es or not evals:
        return None
    first = evals[0]["best"] if isinstance(evals[0]["best"], list) else [evals[0]["best"]]
    last = evals[-1]["best"] if isinstance(evals[-1]["best"], list) else [evals[-1]["best"]]
    return ["start" if a == b else "refined" for a, b in zip(first, last)]


def exclusion_reasons(conv: dict[str, Any], steps: int, cfg: TunedLensConfig) -> dict[int, str] | None:
    """``{l: why}`` for each layer ``h_l`` kept out of verdicts: still improving when the step cap
    ended the fit (:func:`layer_convergence`). ``{}`` when every layer converged; None when
    convergence was not judged."""
    if conv["unconverged"] is None:
        return None
    return {l: (f"h_{l} still improving at the step cap ({steps} steps): its early-stopping KL last fell "
                f"by more than rel_tol={cfg.rel_tol} at step {conv['last_improved'][l]}, within the last "
                f"{conv['window']} steps (patience x eval_every); raise tuned_steps")
            for l in conv["unconverged"]}


def windows_for(tokenizer, info: ModelInfo, cfg: TunedLensConfig) -> dict[str, torch.Tensor]:
    """Training windows (``train_split``) and disjoint early-stopping / report windows (``val_split``)."""
    train = token_windows(cfg.corpus, cfg.train_split, tokenizer, length=cfg.window,
                          n=cfg.train_windows, seed=cfg.seed, prepend_bos=info.prepend_bos)
    val = token_windows(cfg.corpus, cfg.val_split, tokenizer, length=cfg.window,
                        n=cfg.val_windows + cfg.es_windows, seed=cfg.seed, prepend_bos=info.prepend_bos)
    return {"train": train, "val": val[:cfg.val_windows], "es": val[cfg.val_windows:] if cfg.es_windows else None}


def fit_cached(lm, info: ModelInfo, cfg: TunedLensConfig, tokenizer=None, *, refresh: bool = False,
               progress: bool | str = False) -> tuple[TunedLens, dict]:
    """Fit (or load the cached) tuned lens of ``info.name`` for ``cfg``, and its held-out report.

    The report holds ``kl_logit`` and ``kl_tuned``: ``[val_windows, L+1]`` per-window mean KL (nats)
    on the validation windows, for bootstrapping over windows, plus the fitting history, the time it
    took and the final-distribution mass outside the training vocabulary.
    """
    forward.refuse_remote(info, "tuned_lens.fit_cached", _DECODES)
    tokenizer = tokenizer if tokenizer is not None else lm.tokenizer
    key = cache_config(info, cfg)

    def compute() -> dict:
        wins = windows_for(tokenizer, info, cfg)
        ckpt = checkpoint_path(info, cfg)
        lens, fit_info = fit(lm, info, cfg, train=wins["train"], es=wins["es"], checkpoint=ckpt,
                             progress=progress)
        t0 = time.perf_counter()
        ev = evaluate_kl(lm, info, lens, wins["val"], batch=cfg.batch, skip_first=cfg.skip_first)
        vocab = training_vocab(wins["train"], cfg.train_vocab)
        outside = (evaluate_kl(lm, info, None, wins["val"][:2], batch=cfg.batch, skip_first=cfg.skip_first,
                               vocab=vocab)["outside_mass"].mean().item() if vocab is not None else 0.0)
        report = {"model": info.name, "config": asdict(cfg), "kl_logit": ev["logit"], "kl_tuned": ev["tuned"],
                  "eval_seconds": time.perf_counter() - t0, "outside_mass": outside, **fit_info}
        value = {"state": {k: v.detach().cpu() for k, v in lens.state_dict().items()}, "report": report}
        return value

    value = cache.cached("tuned-lens", key, compute, code=fit_cached, refresh=refresh)
    ckpt = checkpoint_path(info, cfg)
    cache.discard_verified(ckpt)  # the cached result supersedes the checkpoint (and its digest file)
    lens = TunedLens(info)
    lens.load_state_dict(value["state"])
    return lens, value["report"]
