"""The residual-gate parameterisations, one small module per layer.

A gate gives the factor ``alpha`` on the skip path of one block, applied with THE edit of
``residshift.core.interventions`` (``attenuated(block(x), x, alpha) = block(x) - (1 - alpha) x``,
i.e. ``alpha x + F(x)``). The same modules serve the GPTs trained with attenuation in place
(``residshift.core.models.gpt``) and, meant for it, the gates fitted on a frozen pretrained model
(``residshift.attenuate.gates``, which today holds the same mathematics as stacked parameters:
``scalar_alpha`` and ``token_alpha`` below are those formulas, shared by both).

Every gate is called on the block's input ``x`` (the residual stream entering the block) and
returns ``alpha``, broadcastable against ``x``:

- :class:`FixedGate`: a constant ``alpha`` (a Python float; nothing to learn);
- :class:`ScalarGate`: ``alpha = sigmoid(theta)``, a 0-d tensor;
- :class:`TokenGate`: ``alpha(t) = sigmoid(w . LN(x(t)) / sqrt(d) + b)``, shape ``[..., 1]``, with
  ``LN`` a layer norm without affine parameters;
- :class:`SkipScalar`: an unconstrained learned ``lambda`` (nanochat-style residual scalar), a 0-d
  tensor. Not a gate in (0, 1): it may grow above 1.

Initialisation: ``theta = b = THETA_INIT = 6`` and ``w = 0``, so a learned gate starts at
``sigmoid(6) = 0.9975``; ``residshift.attenuate.gates`` explains why 6 and not 4.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

THETA_INIT = 6.0  # sigmoid(6) = 0.9975


def scalar_alpha(theta: torch.Tensor) -> torch.Tensor:
    """``sigmoid(theta)``."""
    return torch.sigmoid(theta)


def token_alpha(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``sigmoid(w . LN(x) / sqrt(d) + b)`` per position, shape ``[..., 1]`` in ``x``'s dtype.

    ``LN`` has no affine parameters (``w`` sees a unit-scale input whatever the residual norm) and
    runs in float32. The ``1 / sqrt(d)`` keeps one optimiser step on ``w`` (d coordinates moving
    together) about as large in the logit as a step on ``b``.
    """
    d = x.shape[-1]
    z = F.layer_norm(x.float(), (d,)) @ w / math.sqrt(d) + b
    return torch.sigmoid(z).unsqueeze(-1).to(x.dtype)


class FixedGate(nn.Module):
    """A constant ``alpha`` in [0, 1] (1 = unmodified skip path, 0 = skip path cut)."""

    def __init__(self, alpha: float):
        super().__init__()
        alpha = float(alpha)
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"a fixed alpha must lie in [0, 1] (1 = unmodified, 0 = skip path cut), got {alpha}")
        self.alpha = alpha

    def forward(self, x: torch.Tensor | None = None) -> float:
        return self.alpha

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}"


class ScalarGate(nn.Module):
    """``alpha = sigmoid(theta)``, one learned scalar; ``theta = theta_init`` at start."""

    def __init__(self, theta_init: float = THETA_INIT):
        super().__init__()
        self.theta_init = float(theta_init)
        self.theta = nn.Parameter(torch.tensor(self.theta_init))

    def forward(self, x: torch.Tensor | None = None) -> torch.Tensor:
        return scalar_alpha(self.theta)

    def value(self) -> float:
        """The current alpha (a number, for logs and plots)."""
        return float(scalar_alpha(self.theta.detach()))

    def extra_repr(self) -> str:
        return f"theta_init={self.theta_init}"


class TokenGate(nn.Module):
    """``alpha(t) = sigmoid(w . LN(x(t)) / sqrt(d) + b)``; ``w = 0`` and ``b = theta_init`` at start."""

    def __init__(self, d_model: int, theta_init: float = THETA_INIT):
        super().__init__()
        self.d_model = int(d_model)
        self.theta_init = float(theta_init)
        self.w = nn.Parameter(torch.zeros(self.d_model))
        self.b = nn.Parameter(torch.tensor(self.theta_init))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != self.d_model:
            raise ValueError(f"token gate of width {self.d_model} called on a stream of width {x.shape[-1]}")
        return token_alpha(x, self.w, self.b)

    def value(self) -> float:
        """``sigmoid(b)``: the alpha of a token whose ``LN(x)`` is orthogonal to ``w``."""
        return float(scalar_alpha(self.b.detach()))

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, theta_init={self.theta_init}"


class SkipScalar(nn.Module):
    """A learned, unconstrained skip-path scalar ``lambda`` (nanochat's ``resid_lambdas``)."""

    def __init__(self, init: float = 1.0):
        super().__init__()
        self.init = float(init)
        self.lam = nn.Parameter(torch.tensor(self.init))

    def forward(self, x: torch.Tensor | None = None) -> torch.Tensor:
        return self.lam

    def value(self) -> float:
        return float(self.lam.detach())

    def extra_repr(self) -> str:
        return f"init={self.init}"


GATE_TYPES = (FixedGate, ScalarGate, TokenGate, SkipScalar)
