"""nnsight (0.8.1) against plain torch on the tiny models: traces are independent of each other, and
gradients through a traced edit are the gradients of the same edit made without nnsight.

Every experiment runs many traces on one loaded model, one after another (the sweep, the lens under
attenuation, the gate fits), so an edit that outlived its trace (a hook left registered, a cached
value reused) would silently bias every later number; nnsight issue #607 reports a case where a
trace's result depended on an earlier trace. The gate fits call ``loss.backward()`` inside a trace
(``residshift.attenuate.gates.train_step``), so its gradients must be torch's own.
The references are plain forwards of the bare module (``lm._module``), with the edit made by a torch
forward hook where there is one (``_hooked_logits`` of tests/test_sweep.py).
"""
import pytest
import torch

from residshift.core.interventions import attenuate
from residshift.core.unembed import next_token_loss
from test_sweep import _hooked_logits, _plain_logits

from conftest import random_windows

TINY = ["tiny-llama", "tiny-gpt2", "tiny-gemma3"]


@pytest.fixture(params=TINY)
def loaded(request, tiny):
    return tiny[request.param]


def _edited_trace(lm, info, ids, layer, scale):
    """A trace that scales block ``layer``'s output by ``scale`` and saves the logits and the block's
    mean last-position output (what issue #607 saved and reused)."""
    with torch.no_grad():
        with lm.trace(ids):
            for i, block in enumerate(info.layer_envoys(lm)):
                if i == layer:
                    h = block.output[:, -1].mean(dim=0).save()
                    block.output = block.output * scale
            logits = lm.output.logits.save()
    return logits, h


def _plain_trace(lm, ids):
    with torch.no_grad():
        with lm.trace(ids):
            logits = lm.output.logits.save()
    return logits


def _scaled_reference(lm, info, ids, layer, scale):
    """The same edit with a torch forward hook on the bare module."""
    handle = info.layers[layer].register_forward_hook(lambda mod, args, out: out * scale)
    try:
        return _plain_logits(lm, ids)
    finally:
        handle.remove()


def test_an_edited_trace_leaves_no_trace_behind(loaded):
    """An edit (block 1's output zeroed, then scaled by 3) affects only its own trace: a plain trace
    after it, and a plain forward without nnsight, equal the plain forward made before any trace, bit
    for bit; a value saved in the edited trace is not changed by the traces that follow."""
    lm, _, info = loaded
    ids = random_windows(3, 12, seed=607)
    plain = _plain_logits(lm, ids)
    for scale in (0.0, 3.0):
        edited, h = _edited_trace(lm, info, ids, 1, scale)
        edited_before, h_before = edited.clone(), h.clone()
        assert torch.equal(edited, _scaled_reference(lm, info, ids, 1, scale))  # the edit was made
        assert (edited - plain).abs().max() > 1e-2
        assert torch.equal(_plain_trace(lm, ids), plain)
        assert torch.equal(_plain_logits(lm, ids), plain)
        assert torch.equal(edited, edited_before) and torch.equal(h, h_before)


def test_a_plain_trace_does_not_change_the_next_edited_trace(loaded):
    """The reverse order: plain traces first, then edited ones; each edited trace equals the hooked
    torch forward bit for bit, and repeating it gives the same logits (nothing accumulates)."""
    lm, _, info = loaded
    ids = random_windows(2, 10, seed=1)
    first = _plain_trace(lm, ids)
    assert torch.equal(first, _plain_logits(lm, ids))
    ref = _scaled_reference(lm, info, ids, 2, 0.5)
    again = [_edited_trace(lm, info, ids, 2, 0.5)[0] for _ in range(2)]
    assert torch.equal(again[0], ref) and torch.equal(again[1], ref)
    assert torch.equal(first, _plain_logits(lm, ids))


def test_a_value_saved_in_one_trace_can_be_added_in_the_next(loaded):
    """Issue #607's pattern: save a block's mean last-position output on one batch, then add it to
    the same block's output on another batch in a second trace. The second trace must equal the same
    addition made by a torch hook, and the saved value must be what it was."""
    lm, _, info = loaded
    source, target = random_windows(4, 14, seed=2), random_windows(3, 9, seed=3)
    _, h = _edited_trace(lm, info, source, 2, 1.0)
    h_before = h.clone()
    with torch.no_grad():
        with lm.trace(target):
            for i, block in enumerate(info.layer_envoys(lm)):
                if i == 2:
                    block.output = block.output + h
            steered = lm.output.logits.save()
    handle = info.layers[2].register_forward_hook(lambda mod, args, out: out + h_before)
    try:
        ref = _plain_logits(lm, target)
    finally:
        handle.remove()
    assert torch.equal(h, h_before)
    assert torch.equal(steered, ref)
    assert torch.equal(_plain_trace(lm, target), _plain_logits(lm, target))


def test_a_trace_that_raises_leaves_the_model_unedited(loaded):
    """A trace whose body raises after setting an edit: the exception reaches the caller, and the next
    trace and a plain forward are the unedited model's, bit for bit."""
    lm, _, info = loaded
    ids = random_windows(2, 8, seed=4)
    plain = _plain_logits(lm, ids)
    with pytest.raises(RuntimeError, match="stop here"):
        with torch.no_grad():
            with lm.trace(ids):
                for i, block in enumerate(info.layer_envoys(lm)):
                    if i == 1:
                        block.output = block.output * 0.0
                        raise RuntimeError("stop here")
    assert torch.equal(_plain_trace(lm, ids), plain)
    assert torch.equal(_plain_logits(lm, ids), plain)


def test_gradient_through_a_traced_attenuation_equals_torch_autograd(loaded):
    """``loss.backward()`` inside a trace, through the project's attenuation
    ``h_{l+1} = alpha * h_l + F_l(h_l)`` (:func:`residshift.core.interventions.attenuate`) at two
    blocks with learnable alphas (a scalar and one per feature), gives the alphas the gradient that
    torch autograd gives through the same edit made by forward hooks on the bare module: equal bit for
    bit (the same operations in the same order), and the same loss."""
    lm, _, info = loaded
    ids = random_windows(2, 11, seed=5)

    def alphas():
        return {0: torch.tensor(0.6, requires_grad=True),
                2: torch.linspace(0.2, 0.9, info.d_model).requires_grad_(True)}

    traced = alphas()
    with lm.trace(ids):
        attenuate(lm, info, traced)
        loss = next_token_loss(lm.output.logits, ids)
        loss.backward()
        traced_loss = loss.detach().save()

    direct = alphas()
    handles = []
    for layer, a in direct.items():
        def hook(mod, args, kwargs, out, a=a):
            x = args[0] if args else kwargs["hidden_states"]
            return out - (1 - a) * x
        handles.append(info.layers[layer].register_forward_hook(hook, with_kwargs=True))
    try:
        direct_loss = next_token_loss(lm._module(ids, use_cache=False).logits, ids)
    finally:
        for h in handles:
            h.remove()
    direct_loss.backward()

    assert torch.equal(traced_loss, direct_loss.detach())
    for layer in traced:
        g, ref = traced[layer].grad, direct[layer].grad
        assert g is not None and ref is not None and bool(ref.abs().sum() > 0), layer
        assert torch.equal(g, ref), (layer, (g - ref).abs().max())
    # the edit without gradients is the one test_sweep checks against the same hooks
    fixed = {k: v.detach() for k, v in traced.items()}
    with torch.no_grad():
        with lm.trace(ids):
            attenuate(lm, info, fixed)
            logits = lm.output.logits.save()
    assert torch.equal(logits, _hooked_logits(lm, info, ids, fixed))
