"""Learnable gates: init, training lowers loss, resumption, caching, file checks, errors."""
import pytest
import torch

from residshift.core import forward
from residshift.attenuate import gates as G
from residshift.study.attenuation import gated_lens
from residshift.core.data import token_windows
from residshift.core.models import load_model
from residshift.measure import lens


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny-llama")


@pytest.fixture(scope="module")
def windows(tiny):
    _, tok, _ = tiny
    return token_windows("tiny-shakespeare", "train", tok, length=32, n=8, seed=0)


def test_init_is_close_to_identity_and_applies_the_shared_edit(tiny, windows):
    lm, _, info = tiny
    g = G.ScalarGates(range(info.n_layers), info.d_model)
    assert torch.allclose(g.alphas(), torch.full((info.n_layers,), 0.99752738), atol=1e-6)
    t = G.TokenGates(range(info.n_layers), info.d_model)
    x = torch.randn(2, 5, info.d_model)
    assert torch.allclose(t.alpha(1)(x), torch.full((2, 5, 1), 0.99752738), atol=1e-6)
    # Scalar gates at the same alphas as a fixed plan give the same losses.
    from residshift.core.interventions import attenuate
    g2 = G.ScalarGates.from_alphas([1, 3], info.d_model, [0.3, 0.6])
    got = G.gated_window_losses(lm, info, g2, windows[:2])
    ref = forward.window_losses(lm, info, windows[:2], intervene=lambda m, i: attenuate(m, i, {1: 0.3, 3: 0.6}))
    assert torch.allclose(got, ref.mean(dim=1), atol=1e-5)


def _cfg(kind, **kw):
    base = dict(model="tiny-llama", kind=kind, steps=12, lr=0.3, eval_every=4, patience=10, batch_size=8)
    base.update(kw)
    return G.GateConfig(**base)


@pytest.mark.parametrize("kind", ["scalar", "token"])
def test_fitting_lowers_the_training_loss(tiny, windows, kind):
    lm, _, info = tiny
    r = G.fit_gates_on(lm, info, _cfg(kind), windows, windows)
    assert r["finished"] and r["steps"] == 12
    assert r["heldout_best"] < r["heldout_init"] - (1e-5 if kind == "scalar" else 1e-2)
    g = G.fitted(r, info)
    again = float(G.gated_window_losses(lm, info, g, windows).mean())
    assert again == pytest.approx(r["heldout_best"], abs=1e-5)
    assert not torch.allclose(g.alphas(), torch.full((info.n_layers,), 0.99752738), atol=1e-4)


def test_the_unmodified_heldout_loss_is_measured_once_per_model_and_windows(monkeypatch):
    lm, _, info = load_model("tiny-llama")  # a model of its own: the memo starts empty
    _, tok, _ = load_model("tiny-llama")
    w = token_windows("tiny-shakespeare", "train", tok, length=16, n=6, seed=1)
    calls = []
    real = G.gated_window_losses
    monkeypatch.setattr(G, "gated_window_losses", lambda lm_, info_, gates, *a, **k: (
        calls.append(gates is None), real(lm_, info_, gates, *a, **k))[1])
    runs = [G.fit_gates_on(lm, info, _cfg(kind, steps=2, eval_every=2), w[:4], w[4:]) for kind in ("scalar", "token")]
    assert calls.count(True) == 1, "every gate kind fits on the same held-out windows: measure them once"
    assert runs[0]["heldout_base"] == runs[1]["heldout_base"] == float(real(lm, info, None, w[4:]).mean())
    G.fit_gates_on(lm, info, _cfg("scalar", steps=2, eval_every=2), w[:3], w[3:])  # other windows: measured
    assert calls.count(True) == 2


def test_gradients_reach_every_gate(tiny, windows):
    lm, _, info = tiny
    for g in (G.ScalarGates(range(info.n_layers), info.d_model), G.TokenGates([0, 2], info.d_model)):
        G.train_step(lm, info, g, windows[:2])
        for p in g.parameters():
            assert p.grad is not None and torch.all(p.grad.abs().sum(dim=-1) > 0)


def test_interrupted_fit_resumes_to_the_same_result(tiny, windows, tmp_path):
    lm, _, info = tiny
    cfg = _cfg("scalar", steps=8, eval_every=2)
    full = G.fit_gates_on(lm, info, cfg, windows, windows[:4])
    ckpt = tmp_path / "ck.pt"
    part = G.fit_gates_on(lm, info, cfg, windows, windows[:4], checkpoint=ckpt, stop_after=4)
    assert not part["finished"] and part["steps"] == 4 and ckpt.is_file()
    rest = G.fit_gates_on(lm, info, cfg, windows, windows[:4], checkpoint=ckpt)
    assert rest["finished"] and rest["steps"] == 8
    assert torch.allclose(rest["alphas"], full["alphas"], atol=1e-6)
    assert rest["train_loss"] == pytest.approx(full["train_loss"], abs=1e-6)


def test_early_stopping(tiny, windows):
    lm, _, info = tiny
    # lr so large that the gates overshoot: held-out loss stops improving, patience 1 stops it.
    r = G.fit_gates_on(lm, info, _cfg("token", steps=60, lr=5.0, eval_every=1, patience=1), windows, windows)
    assert r["stopped_early"] and r["steps"] < 60
    assert r["heldout_best"] == min(h for _, h in r["heldout"])


def test_fit_gates_is_cached(tiny, tmp_path, monkeypatch):
    monkeypatch.setenv("RESIDSHIFT_RESULTS", str(tmp_path))
    lm, tok, info = tiny
    cfg = _cfg("scalar", corpus="tiny-shakespeare", window=16, n_train=4, n_heldout=2, steps=2,
               batch_size=2, eval_every=1)
    r1 = G.fit_gates(lm, info, tok, cfg)
    monkeypatch.setattr(G, "fit_gates_on", lambda *a, **k: pytest.fail("recomputed"))
    r2 = G.fit_gates(lm, info, tok, cfg)
    assert torch.equal(r1["alphas"], r2["alphas"])


def test_gate_file_from_another_model_is_refused(tiny, tmp_path):
    lm, _, info = tiny
    g = G.TokenGates([0, 3], info.d_model)
    path = G.save_gates(tmp_path / "g.pt", g, info)
    back = G.load_gates(path, info)
    assert torch.equal(back.w, g.w) and back.layers == [0, 3]
    _, _, other = load_model("tiny-gpt2")
    with pytest.raises(G.GateFileError, match="fit gates for this model"):
        G.load_gates(path, other)
    with pytest.raises(G.GateFileError, match="not a gate file"):
        G.gates_from_state({"model": "x"}, info)
    with pytest.raises(FileNotFoundError, match="fit one"):
        G.load_gates(tmp_path / "missing.pt", info)
    path.write_bytes(path.read_bytes()[:-40])  # damaged (sha256 mismatch): refused, naming the fix
    with pytest.raises(G.GateFileError, match=rf"gate file {path} is damaged \(sha256 mismatch.*fit the gates again"):
        G.load_gates(path, info)


def test_errors_name_the_fix(tiny):
    lm, _, info = tiny
    with pytest.raises(ValueError, match=r"strictly inside \(0, 1\)"):
        G.ScalarGates.from_alphas([0], info.d_model, [1.0])
    with pytest.raises(ValueError, match=r"strictly inside \(0, 1\)"):
        G.ScalarGates.from_alphas([0], info.d_model, [-0.2])
    with pytest.raises(IndexError, match="out of range"):
        _cfg("scalar", layers=[4]).checked(info)
    with pytest.raises(ValueError, match="unknown gate kind"):
        _cfg("vector").checked(info)
    with pytest.raises(G.GateFileError, match="loaded model"):
        _cfg("scalar", model="tiny-gpt2").checked(info)
    with pytest.raises(ValueError, match="steps must be >= 1"):
        _cfg("scalar", steps=0).checked(info)


def test_token_alpha_stats_and_gated_lens(tiny, windows, tmp_path, monkeypatch):
    monkeypatch.setenv("RESIDSHIFT_RESULTS", str(tmp_path))
    lm, tok, info = tiny
    g = G.ScalarGates.from_alphas([1, 3], info.d_model, [0.3, 0.6])
    st = G.token_alpha_stats(lm, info, g, windows[:3], batch_size=2)
    assert torch.allclose(st["mean"], torch.tensor([0.3, 0.6]), atol=1e-6) and st["layers"] == [1, 3]
    t = G.TokenGates([0, 2], info.d_model)
    with torch.no_grad():
        t.w.normal_(0, 1.0)
    st = G.token_alpha_stats(lm, info, t, windows[:3], batch_size=2)
    # Direct computation: the gated model's input to block 2 through forward pre-hooks.
    seen = {}
    def pre(mod, args, kwargs):
        x = args[0] if args else kwargs["hidden_states"]
        seen.setdefault(2, []).append(t.alpha(1)(x).reshape(-1))
    h = info.layers[2].register_forward_pre_hook(pre, with_kwargs=True)
    try:
        G.gated_window_losses(lm, info, t, windows[:3], batch_size=2)
    finally:
        h.remove()
    assert float(st["mean"][1]) == pytest.approx(float(torch.cat(seen[2]).mean()), abs=1e-5)
    assert float(st["std"][1]) > 0
    # The gated lens: last layer reproduces the gated model's own loss on the lens positions.
    cfg = _cfg("token", corpus="tiny-shakespeare", window=16, n_train=4, n_heldout=2, steps=1,
               batch_size=2, eval_every=1)
    fit = G.fit_gates(lm, info, tok, cfg)
    res = gated_lens(lm, info, tok, fit, lens.LensPass("tiny-shakespeare", "train", window=16, n=2, batch=4,
                                                       metrics=("rank", "logprob", "top1")))
    assert res.per_seq["logprob_next"].shape == (2, info.n_layers + 1)


def test_gate_bf16_autocasts_on_the_device_the_model_is_on():
    """`gate_bf16` asks for bf16 where the model runs: CPU autocast on a CPU, CUDA autocast on a GPU
    (the device check runs the CUDA one; here its context object says which)."""
    from types import SimpleNamespace

    from residshift.attenuate.gates import _autocast

    cpu = SimpleNamespace(embedding=torch.zeros(2, 2))
    with _autocast(True, cpu):
        assert torch.is_autocast_enabled("cpu")
    gpu = SimpleNamespace(embedding=SimpleNamespace(device=torch.device("cuda", 0)))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no GPU here: torch warns that CUDA autocast is unavailable
        assert _autocast(True, gpu).device == "cuda" and _autocast(False, cpu).device == "cpu"
