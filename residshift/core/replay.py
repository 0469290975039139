"""Prefix replay: run a model once, then re-run only its tail from an edited residual stream.

The residual stream entering block ``l`` does not depend on any edit made at block ``l`` or later.
One unmodified forward of the bare torch module records, through forward pre-hooks, every block's
input ``h_l`` and call arguments (attention mask, rotary tables, ...), and the last block's output
``h_L``. An edit at residual ``l`` then needs only blocks ``l..L-1``, the final norm and the head:
:func:`replay_from`. :func:`replay` applies THE attenuation edit
(:func:`residshift.core.residual.attenuated`) to block ``l`` first. The layer x alpha sweep
(``residshift.attenuate.sweep``) and the causal profiles (``residshift.measure.causal``) both run
on it; their tests check it against the nnsight edits, which run the whole forward.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .residual import attenuated
from .models import ModelInfo
from .unembed import Unembed


@dataclass
class Captured:
    """Inputs and call arguments of every block for one batch, from one unmodified forward."""

    ids: torch.Tensor
    inputs: list[torch.Tensor]  # inputs[l] = h_l, the residual stream entering block l
    calls: list[tuple[tuple, dict]] = field(repr=False)  # (other positional args, kwargs) per block
    logits: torch.Tensor | None = None  # the unmodified logits
    final: torch.Tensor | None = None  # h_L, the output of the last block (before the final norm)

    def residual(self, index: int) -> torch.Tensor:
        """``h_index`` for ``index = 0..L`` (``h_L`` = the last block's output)."""
        return self.final if index == len(self.inputs) else self.inputs[index]


def _first(out):
    return out[0] if isinstance(out, tuple) else out


def capture(module: torch.nn.Module, info: ModelInfo, ids: torch.Tensor,
            keep_logits: bool = True) -> Captured:
    """One unmodified forward of the bare module, recording each block's input and arguments.

    Replaying from these records is exact when a block's arguments do not depend on earlier
    blocks' outputs. A trained GPT in ``backout`` mode passes ``h_k`` to its last block, so a
    replay from a block before ``k`` would reuse a stale ``h_k``: refused (use the nnsight path,
    :func:`naive_sweep` or ``interventions.attenuate``, which run the whole forward).
    """
    if getattr(getattr(module, "config", None), "residual", None) == "backout":
        raise ValueError(
            "prefix replay is not exact for a backout model (its last block reads h_k of a middle "
            "layer): use sweep.naive_sweep / interventions.attenuate, which run the whole forward")
    inputs: list = [None] * info.n_layers
    calls: list = [None] * info.n_layers
    handles = []

    def make_hook(i):
        def hook(_mod, args, kwargs):
            if args:
                inputs[i], rest = args[0].detach(), tuple(args[1:])
            else:
                kwargs = dict(kwargs)
                inputs[i], rest = kwargs.pop("hidden_states").detach(), ()
            calls[i] = (rest, dict(kwargs))
        return hook

    final: list = [None]

    def last_hook(_mod, _args, output):
        final[0] = _first(output).detach()

    for i, layer in enumerate(info.layers):
        handles.append(layer.register_forward_pre_hook(make_hook(i), with_kwargs=True))
    handles.append(info.layers[-1].register_forward_hook(last_hook))
    try:
        with torch.no_grad():
            logits = module(ids.to(info.embedding.device), use_cache=False).logits
    finally:
        for h in handles:
            h.remove()
    return Captured(ids, inputs, calls, logits.detach() if keep_logits else None, final[0])


def replay_from(module: torch.nn.Module, info: ModelInfo, cap: Captured, start: int,
                h: torch.Tensor) -> torch.Tensor:
    """Logits when the residual stream entering block ``start`` is ``h``: blocks ``start..L-1``
    run on it with their captured arguments, then the head (``start = L``: the head alone)."""
    if not 0 <= start <= info.n_layers:
        raise IndexError(f"start must lie in 0..{info.n_layers}, got {start}")
    with torch.no_grad():
        for j in range(start, info.n_layers):
            rest, kwargs = cap.calls[j]
            h = _first(info.layers[j](h, *rest, **kwargs))
        return Unembed(info)(h)


def replay(module: torch.nn.Module, info: ModelInfo, cap: Captured, layer: int, alpha) -> torch.Tensor:
    """Logits with block ``layer`` attenuated by ``alpha``, running only blocks ``layer..L-1``."""
    info.check_layer(layer)
    with torch.no_grad():
        x = cap.inputs[layer]
        rest, kwargs = cap.calls[layer]
        h = attenuated(_first(info.layers[layer](x, *rest, **kwargs)), x, alpha)
        return replay_from(module, info, cap, layer + 1, h)
