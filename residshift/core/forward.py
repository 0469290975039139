"""Running a model on token ids: the two building blocks every stage uses.

- :func:`collect_residuals`: the residual stream ``h_0..h_L`` of a batch from one nnsight trace
  (the lens, the tuned lens, the gates and the trained-model analyses all read it);
- :func:`window_losses`: per-token next-token losses over fixed windows, with an optional edit
  inside the trace (perplexity, the sweep, the gates, the causal profile, trained models).

``h_0`` is the input of decoder layer 0 (the scaled token embedding, plus position embeddings
where the model adds them) and ``h_l`` the output of layer ``l - 1``.

Remote models (``load_model(name, remote=True)``: nnsight traces run on NDIF, the local module
holds its weights on the meta device). What runs through ``lm.trace(..., remote=True)`` works;
what calls the local module, reads its weights or back-propagates into local parameters is
refused up front with :class:`RemoteNotSupportedError` (:func:`refuse_remote`):

============================================================  ======  =====================================
measurement                                                   remote  why not
============================================================  ======  =====================================
``forward.collect_residuals`` (the residual stream)           yes
``forward.window_losses``, ``corpus_window_losses`` (+ edit)  yes
``interventions.attenuated_logits``                           yes
``causal.direction_ablated_logits``                           yes
``sweep.naive_sweep`` (one traced forward per cut)            yes
``lens.corpus_metrics``, ``run_lens``, ``decode_top``          yes     (decoded inside the trace)
``sweep.sweep_windows``, ``run_sweep``                        no      replays blocks on the local module
``causal.skip_ablation_profile``                              no      replays blocks on the local module
``causal.direction_ablation_profile``, ``run_cached``         no      directions from the local E
``gates.fit_gates``, ``fit_gates_on``, ``train_step``         no      backward() into local gates
``gates.gated_window_losses``, ``token_alpha_stats``          no      local gate modules in the trace
``tuned_lens.fit``, ``fit_cached``, ``evaluate_kl``           no      decodes through the local E, norm
``evaluate`` (the harness: tasks, ``score_requests``)         no      the local module; weights hashed
============================================================  ======  =====================================

The logit lens (``measure.lens``) decodes saved residuals through ``info.final_norm`` /
``info.embedding``, which a remote model holds on the meta device; for a remote model it decodes
inside the trace instead (``measure.remote_lens``: the distribution metrics, not the cosines), so
only per-layer metrics come back. ``remote="local"`` anywhere here is nnsight's dry run of the remote
path: the request serialized and run in this process with our own modules hidden.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch

from . import cache
from .data import token_windows
from .interventions import attenuate_block, attenuation_plan
from .models import ModelError, ModelInfo
from .progress import progress as progress_bar
from .unembed import next_token_losses

Intervene = Callable[[Any, ModelInfo], None]


class TokenIdsError(ValueError):
    """Token ids of the wrong shape, type, length or range (the message names the fix)."""


class RemoteNotSupportedError(ModelError):
    """A measurement asked of a remote (NDIF) model that cannot run through nnsight's remote
    execution (the module docstring's table); the message names what does and the fix."""


REMOTE_WORKS = ("forward.collect_residuals, forward.window_losses (with or without an edit), "
                "sweep.naive_sweep and the logit lens (lens.run_lens, decoded inside the trace) run remotely")


def refuse_remote(info: ModelInfo, what: str, why: str) -> None:
    """Raise :class:`RemoteNotSupportedError` when ``info`` is a remote model: ``what`` cannot run
    through NDIF because ``why``."""
    if getattr(info, "remote", False):
        raise RemoteNotSupportedError(
            f"{what} does not run on a remote (NDIF) model: it {why}. {REMOTE_WORKS}; for this one load "
            f"{info.name} locally (load_model({info.name!r}) without remote=True)")


def check_ids(ids: Any, info: ModelInfo, *, min_len: int = 3) -> torch.Tensor:
    """Return ``ids`` as a ``[batch, T]`` long tensor, or raise naming the fix."""
    if isinstance(ids, (list, tuple)) and ids and isinstance(ids[0], int):
        ids = [ids]
    ids = torch.as_tensor(ids) if not isinstance(ids, torch.Tensor) else ids
    if ids.ndim == 1:
        ids = ids[None]
    if ids.ndim != 2:
        raise TokenIdsError(f"token ids must be [batch, T] or [T], got shape {tuple(ids.shape)}")
    if ids.shape[1] < min_len:
        raise TokenIdsError(
            f"a sequence of {ids.shape[1]} token(s) is too short: the lens needs at least {min_len} "
            "(position 0 is dropped, and every analysed position needs a next token); pass a "
            "longer text"
        )
    if ids.dtype not in (torch.int64, torch.int32):
        raise TokenIdsError(f"token ids must be integers, got {ids.dtype}")
    if int(ids.min()) < 0 or int(ids.max()) >= info.vocab_size:
        raise TokenIdsError(f"token ids must lie in 0..{info.vocab_size - 1} for {info.name}")
    return ids.long()


def collect_residuals(lm, info: ModelInfo, ids, *, attenuation: Mapping[int, Any] | None = None,
                      remote: bool = False, return_logits: bool = False):
    """Residual stream ``[L+1, B, T, d]`` (``h_0`` = input of layer 0, ``h_l`` = output of layer l-1).

    One nnsight trace, stopped after the last block unless the logits are asked for (the final norm
    and the unembedding of every position would cost as much as the blocks of a large-vocabulary
    model). ``attenuation = {layer: alpha}`` applies
    :func:`residshift.core.interventions.attenuate_block` at those layers inside the layer loop (in
    execution order), so ``h_{l+1}`` is the attenuated block's output. ``remote`` is passed to
    ``lm.trace`` (``info.remote or remote``): the same code path runs on NDIF. With
    ``return_logits`` also returns the model's logits ``[B, T, vocab]``.
    """
    ids = check_ids(ids, info, min_len=1)
    plan = attenuation_plan(info, dict(attenuation)) if attenuation else {}
    layers = info.layer_envoys(lm)
    saved: list = []
    logits_box: list = []
    remote = info.remote or remote  # True (NDIF) or "local" (nnsight's dry run of the remote path)
    with torch.no_grad():
        with lm.trace(ids, remote=remote) as tracer:
            for l, layer in enumerate(layers):
                if l == 0:
                    h0 = layer.input
                    saved.append(h0.save())
                if l in plan:
                    attenuate_block(layer, plan[l])
                out = layer.output
                saved.append(out.save())
            if return_logits:
                logits_box.append(lm.output.logits.save())
            elif not remote:
                tracer.stop()
    hs = torch.stack([output_value(h) for h in saved]).float()
    if return_logits:
        return hs, output_value(logits_box[0]).float()
    return hs


def output_value(x):
    """nnsight 0.8 returns plain tensors after the trace; older versions wrap them in .value."""
    x = getattr(x, "value", x)
    if isinstance(x, tuple):  # some transformers versions return (hidden, ...) from a layer
        x = x[0]
    return x


def window_losses(model, info: ModelInfo, windows: torch.Tensor, *, batch_size: int = 8,
                  intervene: Intervene | None = None, progress: bool = False) -> torch.Tensor:
    """Per-token next-token losses ``[n, length - 1]`` (nats) for a batch of windows.

    Position t is scored on predicting token t+1. ``intervene(model, info)``, when given, runs
    inside the nnsight trace (e.g. ``lambda m, i: attenuate(m, i, {20: 0.5})``); without it the
    bare torch model runs, which is faster (a remote model: a plain trace on NDIF).
    """
    if windows.ndim != 2 or windows.shape[1] < 2:
        raise ValueError(f"windows must be [n, length >= 2] token ids, got shape {tuple(windows.shape)}")
    out = []
    starts = range(0, len(windows), batch_size)
    if progress:
        starts = progress_bar(starts, desc=f"{info.name} loss", unit="batch")
    for start in starts:
        ids = windows[start : start + batch_size]
        with torch.no_grad():
            if intervene is None and not info.remote:
                logits = model._module(ids.to(info.embedding.device)).logits
            else:  # an edit, or a remote model (whose local module holds no weights): one trace
                intervene = intervene or (lambda m, i: None)
                with model.trace(ids, remote=info.remote):
                    intervene(model, info)
                    logits = model.output.logits.save()
        out.append(next_token_losses(logits, ids).cpu())
    return torch.cat(out)


def corpus_window_losses(lm, info: ModelInfo, tokenizer, *, corpus: str, split: str, window: int, n: int,
                         seed: int, batch_size: int, variant: Mapping[str, Any],
                         intervene: Intervene | None = None, code: Sequence[Callable] = ()) -> np.ndarray:
    """Per-window mean next-token loss ``[n]`` over ``n`` seeded windows of a corpus split, with an
    edit ``intervene(model, info)`` identified by ``variant`` (a JSON-able description: the cut, or
    a fit's config), cached under ``attenuation-window-losses`` by both and by ``code`` (the
    functions that make the edit)."""
    key = {"model": info.name, "corpus": corpus, "split": split, "window": window, "n": n, "seed": seed,
           "variant": dict(variant)}

    def compute():
        w = token_windows(corpus, split, tokenizer, length=window, n=n, seed=seed, prepend_bos=info.prepend_bos)
        return window_losses(lm, info, w, batch_size=batch_size, intervene=intervene).mean(dim=1).double().numpy()

    return cache.cached("attenuation-window-losses", key, compute, code=[window_losses, *code])
