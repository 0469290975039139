"""The residual edit itself, on tensors: ``block(x) - (1 - alpha) x``, i.e. ``alpha x + F(x)``.

One formula for the edits applied from outside a pretrained model: the nnsight edit
(:func:`residshift.core.interventions.attenuate_block`) and the sweep's replay of the tail blocks on the
bare torch module (``residshift.core.replay``) both call :func:`attenuated`, so the two paths cannot
drift apart. The trained GPT (``residshift.core.models.gpt``) writes the same equation inside its block,
``alpha x + F(x)``; the two agree to rounding (tests/test_gpt.py).
"""
from __future__ import annotations


def attenuated(output, skip, alpha):
    """``output - (1 - alpha) * skip`` with ``output = block(skip)``: the block's skip path scaled by
    ``alpha`` (1 = unmodified, 0 = cut). ``alpha`` is a number or a tensor broadcastable to ``skip``."""
    return output - (1 - alpha) * skip
