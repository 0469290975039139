"""The one head and the one next-token loss every measurement uses.

Head (the logit lens's decoder and the model's own output layer, for the tied models we study):

    logits(h) = softcap(E · N(h)),     softcap(z) = c · tanh(z / c) where the model has a cap c

with ``N`` the model's final norm and ``E`` the tied embedding matrix ``[vocab, d]``
(:class:`residshift.core.models.ModelInfo`). Applied to the last residual state ``h_L`` it
reproduces the model's own logits (tested). The lens, the tuned lens, the sweep's replay, the
gates and the causal profile all decode through :class:`Unembed`.

Loss: ``next_token_losses(logits, ids)[b, t]`` is the cross-entropy (nats) of the prediction at
position ``t`` for token ``t + 1``; the harness, the sweep, the causal profile, the gates and the
trainer all score with it.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

MATMUL_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


class UnembedError(ValueError):
    """Bad input to the head; the message names the fix."""


def matmul_dtype(name: str) -> torch.dtype:
    if name not in MATMUL_DTYPES:
        raise UnembedError(f"matmul_dtype must be one of {list(MATMUL_DTYPES)}, got {name!r}")
    return MATMUL_DTYPES[name]


def softcap(logits: torch.Tensor, cap: float | None) -> torch.Tensor:
    """``cap · tanh(logits / cap)`` where the model soft-caps its final logits, else unchanged."""
    return logits if not cap else cap * torch.tanh(logits / cap)


class Unembed:
    """``h -> softcap(E · N(h))``, with the matmul in ``dtype`` and an optional vocabulary subset.

    - ``norm(h)``: the final norm ``N`` (fp32 result);
    - ``logits(z)``: ``softcap(z · E_V^T)`` of already-normed ``z`` (fp32 result), ``E_V`` the rows of
      ``vocab`` (all rows when ``vocab`` is None);
    - ``unembed(h)`` is ``logits(norm(h))``.

    Gradients flow to ``h`` (the tuned lens trains its translators through it); ``E`` and ``N``
    belong to the frozen model.
    """

    def __init__(self, info, *, dtype: str = "float32", vocab: torch.Tensor | None = None):
        self.info = info
        self.dtype = matmul_dtype(dtype)
        E = info.embedding.detach()
        if vocab is not None:
            vocab = torch.as_tensor(vocab, dtype=torch.long)
            if vocab.ndim != 1 or vocab.numel() < 1:
                raise UnembedError("vocab must be a 1-D tensor of token ids")
            if int(vocab.min()) < 0 or int(vocab.max()) >= E.shape[0]:
                raise UnembedError(f"vocab ids must lie in 0..{E.shape[0] - 1}")
            E = E[vocab]
        self.vocab = vocab
        self.weight = E if E.dtype == self.dtype else E.to(self.dtype)
        self.cap = info.logit_softcap

    def norm(self, h: torch.Tensor) -> torch.Tensor:
        return self.info.final_norm(h).float()

    def logits(self, z: torch.Tensor) -> torch.Tensor:
        out = F.linear(z.to(self.dtype), self.weight).float()
        return softcap(out, self.cap)

    def __call__(self, h: torch.Tensor) -> torch.Tensor:
        return self.logits(self.norm(h))


def next_token_losses(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Per-token next-token cross-entropy ``[B, T-1]`` (nats, fp32): position ``t`` predicts ``ids[:, t+1]``.

    Keeps the autograd graph (take ``.mean()`` for a training loss); call ``.detach().cpu()`` for
    records. ``logits`` is ``[B, T, V]`` for ``ids`` ``[B, T]``.
    """
    if logits.ndim != 3 or ids.ndim != 2 or logits.shape[:2] != ids.shape:
        raise UnembedError(f"expected logits [B, T, V] for ids [B, T], got {tuple(logits.shape)} "
                           f"and {tuple(ids.shape)}")
    if ids.shape[1] < 2:
        raise UnembedError("a window needs at least 2 tokens (a token and its successor)")
    logits = logits.float()
    ce = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                         ids[:, 1:].reshape(-1).to(logits.device), reduction="none")
    return ce.view(ids.shape[0], -1)


def next_token_loss(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy over all positions (a scalar that keeps the graph)."""
    return next_token_losses(logits, ids).mean()
