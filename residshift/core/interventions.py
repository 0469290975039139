"""Edits of a pretrained model's residual stream, through nnsight.

The one edit every experiment shares: attenuating the skip path of block ``l``.
A pre-norm block computes ``h_{l+1} = h_l + F_l(h_l)``; with ``F_l(x) = block_l(x) - x`` the
attenuated block is ``h_{l+1} = alpha * h_l + F_l(h_l) = block_l(h_l) - (1 - alpha) * h_l``.
``alpha = 1`` is the unmodified model; ``alpha = 0`` cuts the skip path.

Call :func:`attenuate` inside a trace:

>>> with lm.trace(ids):
...     attenuate(lm, info, {20: 0.5})          # or attenuate(lm, info, 20, 0.5)
...     logits = lm.output.logits.save()
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Iterable, Mapping

import torch

from .residual import attenuated  # the formula (one home, shared with the replay)

if TYPE_CHECKING:  # a type only
    from .models import ModelInfo


def _alpha_ok(alpha, allow_amplify: bool) -> None:
    """Check one alpha: finite always, and in [0, 1] unless amplifying on purpose or learned."""
    if callable(alpha):  # a token-dependent gate alpha(x) (residshift.attenuate.gates) keeps its own range
        return
    if isinstance(alpha, torch.Tensor):
        values = alpha.detach()
        if values.numel() == 0:
            raise ValueError("alpha is an empty tensor; give one value (or one per position/feature)")
        if not bool(torch.isfinite(values).all()):
            raise ValueError(
                f"alpha must be finite; the tensor holds {int((~torch.isfinite(values)).sum())} NaN/inf "
                "value(s). A NaN alpha turns every later logit into NaN: check how the alphas were made "
                "(a diverged gate fit, a division by zero)."
            )
        if alpha.requires_grad:  # learned gates keep their own range (sigmoid)
            return
        lo, hi = float(values.min()), float(values.max())
    else:
        try:
            lo = hi = float(alpha)
        except (TypeError, ValueError):
            raise TypeError(
                f"alpha must be a number in [0, 1], a tensor or a callable gate alpha(x); got "
                f"{type(alpha).__name__} {alpha!r}"
            ) from None
        if not math.isfinite(lo):
            raise ValueError(
                f"alpha must be finite, got {alpha!r}: a NaN or infinite alpha turns every later logit "
                "into NaN. Use a number in [0, 1] (1 = unmodified, 0 = skip path cut)."
            )
    if lo < 0 or (hi > 1 and not allow_amplify):
        raise ValueError(
            f"alpha must lie in [0, 1] (1 = unmodified skip path, 0 = skip path cut); got "
            f"{lo if lo < 0 else hi}. Pass allow_amplify=True to scale the skip path up on purpose."
        )


def attenuation_plan(info: ModelInfo, layers, alpha=None, *,
                     allow_amplify: bool = False) -> dict[int, float | torch.Tensor]:
    """Normalise ``layers``/``alpha`` into ``{layer: alpha}``, validated, in execution order.

    Accepts ``{layer: alpha}``, or a layer (or layers) and one alpha for all of them. Negative
    layer indices count from the end.
    """
    if isinstance(layers, Mapping):
        if alpha is not None:
            raise ValueError("give alphas either in the {layer: alpha} mapping or as alpha=, not both")
        plan = dict(layers)
    else:
        if alpha is None:
            raise ValueError("alpha is required when layers is not a {layer: alpha} mapping")
        seq = [layers] if isinstance(layers, int) else list(layers)
        plan = {layer: alpha for layer in seq}
    out = {}
    for layer, a in plan.items():
        if isinstance(layer, int) and -info.n_layers <= layer < 0:
            layer = layer % info.n_layers
        info.check_layer(layer)
        _alpha_ok(a, allow_amplify)
        out[layer] = a
    return dict(sorted(out.items()))


def attenuate_block(block, alpha) -> None:
    """Inside a trace, on one block envoy: ``block(x) -> block(x) - (1 - alpha) x``.

    This is THE edit; everything that attenuates (the sweep, the gates, the lens under
    attenuation) calls it. Code that also reads other layers in the same trace must call it in its
    own loop over layers, at the right layer, to keep nnsight's execution order. ``alpha`` may be a
    number, a tensor broadcastable to the block's output, or a callable ``alpha(x)`` of the block's
    input (a token-dependent gate, ``residshift.attenuate.gates``).
    """
    skip = block.input  # read the input before the output: nnsight runs in execution order
    if callable(alpha):
        alpha = alpha(skip)
    block.output = attenuated(block.output, skip, alpha)


def attenuate(model, info: ModelInfo, layers, alpha=None, *, allow_amplify: bool = False) -> None:
    """Inside an nnsight trace: replace ``block_l(x)`` by ``block_l(x) - (1 - alpha) x``."""
    layer_envoys = info.layer_envoys(model)
    for layer, a in attenuation_plan(info, layers, alpha, allow_amplify=allow_amplify).items():
        attenuate_block(layer_envoys[layer], a)


def attenuated_logits(model, info: ModelInfo, input_ids: torch.Tensor, layers, alpha=None,
                      **kwargs) -> torch.Tensor:
    """Logits of ``input_ids`` with the skip path of ``layers`` attenuated (no grad)."""
    with torch.no_grad():
        with model.trace(input_ids, remote=info.remote):
            attenuate(model, info, layers, alpha, **kwargs)
            logits = model.output.logits.save()
    return logits


def iter_layers(info: ModelInfo, layers: Iterable[int] | None) -> list[int]:
    return [info.check_layer(l) for l in (range(info.n_layers) if layers is None else layers)]
