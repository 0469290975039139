"""Our logit lens and tuned-lens decode against the tuned-lens project's package (``tuned-lens`` 0.2.0).

Skipped where the package is absent. It declares heavy dependencies (wandb, datasets, ...) that
only its training scripts import, so install it beside this project without them:

    make validate-tuned-lens   # installs it into build/tuned-lens-site; then PYTHONPATH=build/tuned-lens-site

``benchmarks/validate_tuned_lens.py`` runs the same comparison on SmolLM2-135M and records it in
``benchmarks/tuned-lens-agreement.json``; its ``get_final_norm`` does not know Gemma-3, so no
Gemma model (tiny or real) can be compared.
"""
from __future__ import annotations

import pytest
import torch

from residshift.measure import tuned_lens as T

from conftest import random_windows as _windows  # noqa: E402

tl = pytest.importorskip(
    "tuned_lens.nn.lenses",
    reason="the tuned-lens package is not installed: `make validate-tuned-lens` puts it in "
           "build/tuned-lens-site; put that folder on PYTHONPATH")


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gpt2"])
def test_the_packages_lenses_decode_as_ours(tiny, name):
    lm, _, info = tiny[name]
    hf = lm._module
    hs = T.collect_stack(lm, info, _windows(3, 12, 41))
    logit = tl.LogitLens.from_model(hf)
    ours = T.TunedLens(info)
    sums = T.LeastSquares(info.n_layers, info.d_model)
    sums.add(hs)
    T.set_start(ours, sums.solve(1e-3))  # non-trivial translators
    ref = tl.TunedLens.from_model(hf)
    ref.layer_translators.load_state_dict(T.reference_state(ours))
    with torch.no_grad():
        for l in range(info.n_layers):
            torch.testing.assert_close(logit(hs[l], idx=l), T.decode_logits(info, hs[l]), rtol=1e-6, atol=1e-5)
            torch.testing.assert_close(ref(hs[l], idx=l), ours.decode(info, l, hs[l]), rtol=1e-6, atol=1e-5)
            assert not torch.allclose(ref(hs[l], idx=l), logit(hs[l], idx=l), atol=1e-3)  # the translators act


def test_the_package_refuses_gemma3(tiny):
    lm, _, _ = tiny["tiny-gemma3"]
    with pytest.raises(NotImplementedError, match="Unknown model type"):
        tl.LogitLens.from_model(lm._module)
