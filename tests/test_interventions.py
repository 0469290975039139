import math

import pytest
import torch

from residshift.core.interventions import attenuate, attenuated_logits, attenuation_plan


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, float("nan"),
                                 torch.tensor(math.nan), torch.tensor([0.5, math.nan]),
                                 torch.tensor([[1.0], [math.inf]])])
def test_alpha_must_be_finite(tiny_llama, bad):
    _, _, info = tiny_llama
    with pytest.raises(ValueError, match="finite"):
        attenuation_plan(info, 1, bad)
    with pytest.raises(ValueError, match="finite"):
        attenuation_plan(info, {0: 1.0, 2: bad})
    with pytest.raises(ValueError, match="finite"):  # amplifying is allowed, infinity is not
        attenuation_plan(info, 1, bad, allow_amplify=True)


def test_learned_alpha_with_nan_is_refused_too(tiny_llama):
    _, _, info = tiny_llama
    theta = torch.tensor([0.3, math.nan], requires_grad=True)
    with pytest.raises(ValueError, match="finite"):
        attenuation_plan(info, 0, torch.sigmoid(theta))
    ok = torch.sigmoid(torch.tensor([0.3, 4.0], requires_grad=True))
    assert attenuation_plan(info, 0, ok)[0] is ok


def test_alpha_range_and_type_errors_name_the_fix(tiny_llama):
    _, _, info = tiny_llama
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        attenuation_plan(info, 0, 1.5)
    assert attenuation_plan(info, 0, 1.5, allow_amplify=True) == {0: 1.5}
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        attenuation_plan(info, 0, torch.tensor([0.2, -0.1]))
    with pytest.raises(TypeError, match="number"):
        attenuation_plan(info, 0, "half")
    with pytest.raises(ValueError, match="empty"):
        attenuation_plan(info, 0, torch.tensor([]))
    assert attenuation_plan(info, [-1, 0], 0.5) == {0: 0.5, 3: 0.5}


def test_nan_alpha_never_reaches_the_trace(tiny_llama):
    """The error comes before any edit: the same model then still traces with finite logits."""
    lm, _, info = tiny_llama
    ids = torch.tensor([[1, 2, 3, 4, 5, 6]])
    with pytest.raises(ValueError, match="finite"):
        attenuated_logits(lm, info, ids, 2, math.nan)
    logits = attenuated_logits(lm, info, ids, 2, 0.5)
    assert torch.isfinite(logits).all()
    with torch.no_grad():
        plain = lm._module(ids).logits
        with lm.trace(ids):
            attenuate(lm, info, {2: 1.0})
            same = lm.output.logits.save()
    torch.testing.assert_close(same, plain)
