"""Remote (NDIF) models: what cannot run through nnsight's remote execution is refused up front
with one line naming what does and the fix; what runs through ``lm.trace`` keeps working. No
network: a tiny model whose ``ModelInfo`` is marked ``remote=True``, and for the traced paths a
stand-in whose ``trace(..., remote=True)`` runs locally and whose bare module must not be called."""
from dataclasses import replace

import pytest
import torch

from residshift.attenuate import gates as G, sweep
from residshift.core import forward
from residshift.core.forward import RemoteNotSupportedError
from residshift.core.interventions import attenuate
from residshift.core.models import ModelError, load_model
from residshift.measure import causal, evaluate, tuned_lens


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny-llama")


@pytest.fixture(scope="module")
def remote(tiny):
    lm, tok, info = tiny
    return lm, tok, replace(info, remote=True)


@pytest.fixture(scope="module")
def windows():
    g = torch.Generator().manual_seed(0)
    return torch.randint(0, 256, (4, 16), generator=g)


def _cases(windows):
    gates = G.ScalarGates([0, 1], 64)
    fit = {"gates": None, "config": {}}
    return {
        "sweep.sweep_windows": lambda lm, tok, info: sweep.sweep_windows(lm, info, windows,
                                                                          sweep.SweepConfig(model=info.name)),
        "sweep.run_sweep": lambda lm, tok, info: sweep.run_sweep(lm, info, tok, sweep.SweepConfig(model=info.name)),
        "causal.skip_ablation_profile": lambda lm, tok, info: causal.skip_ablation_profile(lm, info, windows),
        "causal.direction_ablation_profile": lambda lm, tok, info: causal.direction_ablation_profile(lm, info, windows),
        "causal.run_cached": lambda lm, tok, info: causal.run_cached(lm, info, causal.CausalConfig(), tok),
        "gates.train_step": lambda lm, tok, info: G.train_step(lm, info, gates, windows),
        "gates.fit_gates_on": lambda lm, tok, info: G.fit_gates_on(lm, info, G.GateConfig(model=info.name),
                                                                   windows, windows),
        "gates.fit_gates": lambda lm, tok, info: G.fit_gates(lm, info, tok, G.GateConfig(model=info.name)),
        "gates.gated_window_losses": lambda lm, tok, info: G.gated_window_losses(lm, info, gates, windows),
        "gates.token_alpha_stats": lambda lm, tok, info: G.token_alpha_stats(lm, info, gates, windows),
        "gates.fitted_alpha_stats": lambda lm, tok, info: G.fitted_alpha_stats(lm, info, tok, fit, corpus="wikitext-2",
                                                                               split="test", window=16, n=2),
        "tuned_lens.evaluate_kl": lambda lm, tok, info: tuned_lens.evaluate_kl(lm, info, None, windows),
        "tuned_lens.fit": lambda lm, tok, info: tuned_lens.fit(lm, info, tuned_lens.TunedLensConfig(),
                                                               train=windows, es=None),
        "tuned_lens.fit_cached": lambda lm, tok, info: tuned_lens.fit_cached(lm, info, tuned_lens.TunedLensConfig(),
                                                                             tok),
        "evaluate.score_requests": lambda lm, tok, info: evaluate.score_requests(
            lm, info, [evaluate.Request(tokens=[1, 2, 3], n_ctx=1)]),
        "evaluate.text_perplexity": lambda lm, tok, info: evaluate.text_perplexity(lm, info, tok, "some text here"),
        "evaluate.lambada_score": lambda lm, tok, info: evaluate.lambada_score(lm, info, tok, ["a passage ends"]),
        "evaluate.multiple_choice_score": lambda lm, tok, info: evaluate.multiple_choice_score(lm, info, tok, []),
        "evaluate.run_task": lambda lm, tok, info: evaluate.run_task(lm, info, "piqa", tokenizer=tok),
        "evaluate.evaluate_all": lambda lm, tok, info: evaluate.evaluate_all(lm, info, ["piqa"], tokenizer=tok),
    }


CASES = sorted(_cases(None))


@pytest.mark.parametrize("name", CASES)
def test_what_cannot_run_remotely_is_refused_in_one_line(remote, windows, name):
    lm, tok, info = remote
    with pytest.raises(RemoteNotSupportedError) as err:
        _cases(windows)[name](lm, tok, info)
    msg = str(err.value)
    assert isinstance(err.value, ModelError) and "\n" not in msg
    assert msg.startswith(f"{name}") and "remote (NDIF)" in msg
    assert "run remotely" in msg and "naive_sweep" in msg and "without remote=True" in msg and "tiny-llama" in msg


def test_the_local_model_is_not_refused(tiny, windows):
    lm, tok, info = tiny
    out = G.gated_window_losses(lm, info, None, windows[:2])  # gates=None: the bare model, fine either way
    assert out.shape == (2,)
    assert causal.skip_ablation_profile(lm, info, windows[:2], layers=[0])["delta"].shape == (2, 2, 1)


class RemoteStandIn:
    """An nnsight model whose traces count as remote: ``trace(..., remote=True)`` is recorded and
    run locally; the bare module (which a remote model holds on the meta device) must not run."""

    def __init__(self, lm):
        self._lm = lm
        self.remote_traces = 0

    def trace(self, *args, remote=False, **kwargs):
        assert remote is True, "a remote model's trace must ask for remote execution"
        self.remote_traces += 1
        return self._lm.trace(*args, **kwargs)

    @property
    def _module(self):
        raise AssertionError("the local module of a remote model was called")

    def __getattr__(self, name):
        return getattr(self._lm, name)


def test_traced_measurements_run_remotely(tiny, remote, windows):
    lm, _, info = tiny
    _, _, rinfo = remote
    stand = RemoteStandIn(lm)
    # the plain forward goes through a (remote) trace instead of the local module
    local = forward.window_losses(lm, info, windows, batch_size=2)
    got = forward.window_losses(stand, rinfo, windows, batch_size=2)
    assert stand.remote_traces == 2 and torch.allclose(got, local, atol=1e-5)
    edit = lambda m, i: attenuate(m, i, {1: 0.5})  # noqa: E731
    assert torch.allclose(forward.window_losses(stand, rinfo, windows, batch_size=4, intervene=edit),
                          forward.window_losses(lm, info, windows, batch_size=4, intervene=edit), atol=1e-5)
    hs = forward.collect_residuals(stand, rinfo, windows[:2])
    assert torch.allclose(hs, forward.collect_residuals(lm, info, windows[:2]), atol=1e-5)
    # the sweep's remote alternative: one traced forward per cut
    naive = sweep.naive_sweep(stand, rinfo, windows, [0, 1], [0.0], batch_size=4)
    assert torch.allclose(naive["dloss"], sweep.naive_sweep(lm, info, windows, [0, 1], [0.0], batch_size=4)["dloss"],
                          atol=1e-5)


def test_the_remote_loader_builds_the_model_on_the_meta_device(tiny, tmp_path):
    """nnsight's real remote path, offline: config and tokenizer from a folder (as from the hub), the
    module built on the meta device (no weights read), described like a local model and marked remote."""
    lm, tok, info = tiny
    lm._module.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    got = load_model(str(tmp_path), remote=True)
    assert got.info.remote and got.info.source == f"ndif:{tmp_path}"
    assert (got.info.n_layers, got.info.d_model, got.info.decoder) == (info.n_layers, info.d_model, "tied")
    assert got.info.embedding.device.type == "meta" and got.model._module.config.model_type == "llama"


def test_the_remote_loader_offline_says_what_it_needs(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelError, match="remote=True needs the model's config and tokenizer from the hub"):
        load_model("nobody/none-such-model", remote=True)
