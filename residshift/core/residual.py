"""The residual edit itself, on tensors: ``block(x) - (1 - alpha) x``, i.e. ``alpha x + F(x)``.

One formula, one home. The nnsight edit (:func:`residshift.core.interventions.attenuate_block`), the
sweep's replay of the tail blocks on the bare torch module (``residshift.core.replay``) and the
trained GPT's blocks (``residshift.train.gpt``) all call :func:`attenuated`, so the three paths
cannot drift apart. This module imports nothing of ours on purpose: the trained GPT's run key hashes
the source of every module the model imports, and the model needs the formula, not the loaders.
"""
from __future__ import annotations


def attenuated(output, skip, alpha):
    """``output - (1 - alpha) * skip`` with ``output = block(skip)``: the block's skip path scaled by
    ``alpha`` (1 = unmodified, 0 = cut). ``alpha`` is a number or a tensor broadcastable to ``skip``."""
    return output - (1 - alpha) * skip
