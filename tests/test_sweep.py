"""Fixed attenuation: identity at alpha = 1, multi-layer edit vs direct torch, cheap sweep vs naive."""
import pytest
import torch

from residshift.core import cache
from residshift.attenuate import sweep
from residshift.core.interventions import attenuate, attenuated_logits
from residshift.core.models import load_model

TINY = ["tiny-llama", "tiny-gpt2", "tiny-gemma3"]


@pytest.fixture(scope="module", params=TINY)
def model(request):
    return load_model(request.param)


@pytest.fixture()
def ids():
    return torch.randint(0, 259, (3, 12), generator=torch.Generator().manual_seed(0))


def _plain_logits(lm, ids):
    with torch.no_grad():
        return lm._module(ids, use_cache=False).logits


def test_alpha_one_is_identity(model, ids):
    lm, _, info = model
    ref = _plain_logits(lm, ids)
    got = attenuated_logits(lm, info, ids, list(range(info.n_layers)), 1.0)
    assert torch.equal(got, ref)


def _hooked_logits(lm, info, ids, plan):
    """Direct torch: forward hooks on the bare module apply h_{l+1} = block(h_l) - (1-a) h_l."""
    handles = []
    for layer, a in plan.items():
        def hook(mod, args, kwargs, out, a=a):
            x = args[0] if args else kwargs["hidden_states"]
            if isinstance(out, tuple):
                return (out[0] - (1 - a) * x,) + out[1:]
            return out - (1 - a) * x
        handles.append(info.layers[layer].register_forward_hook(hook, with_kwargs=True))
    try:
        return _plain_logits(lm, ids)
    finally:
        for h in handles:
            h.remove()


def test_multi_layer_attenuation_matches_direct_torch(model, ids):
    lm, _, info = model
    plan = {0: 0.3, 2: 0.0, info.n_layers - 1: 0.75}
    got = attenuated_logits(lm, info, ids, plan)
    ref = _hooked_logits(lm, info, ids, plan)
    assert torch.allclose(got, ref, atol=1e-5), (got - ref).abs().max()
    assert not torch.allclose(got, _plain_logits(lm, ids), atol=1e-3)  # the edit did something


def test_replay_equals_nnsight_attenuate(model, ids):
    lm, _, info = model
    cap = sweep.capture(lm._module, info, ids)
    assert torch.allclose(cap.logits, _plain_logits(lm, ids), atol=1e-6)
    for layer in range(info.n_layers):
        for alpha in (0.0, 0.5):
            got = sweep.replay(lm._module, info, cap, layer, alpha)
            ref = attenuated_logits(lm, info, ids, {layer: alpha})
            assert torch.allclose(got, ref, atol=1e-5), (layer, alpha, (got - ref).abs().max())


def test_cheap_sweep_equals_naive(model):
    lm, _, info = model
    w = torch.randint(0, 259, (5, 10), generator=torch.Generator().manual_seed(1))
    alphas = (0.0, 0.25, 0.9, 1.0)
    cfg = sweep.SweepConfig(model=info.name, batch_size=2, alphas=alphas)
    cheap = sweep.sweep_windows(lm, info, w, cfg)
    naive = sweep.naive_sweep(lm, info, w, range(info.n_layers), alphas, batch_size=2)
    assert cheap["dloss"].shape == (info.n_layers, len(alphas), 5)
    assert torch.allclose(cheap["dloss"], naive["dloss"], atol=1e-5)
    assert torch.allclose(cheap["base"], naive["base"], atol=1e-5)
    assert torch.all(cheap["dloss"][:, -1] == 0)
    assert cheap["dloss"][:, 0].abs().max() > 1e-3


def test_sweep_resumes_from_partial_layers(tmp_path, monkeypatch):
    lm, _, info = load_model("tiny-llama")
    w = torch.randint(0, 259, (4, 10), generator=torch.Generator().manual_seed(2))
    cfg = sweep.SweepConfig(model=info.name, batch_size=4, alphas=(0.0, 1.0))
    full = sweep.sweep_windows(lm, info, w, cfg, partial_dir=tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"layer-{l:03d}.pt" for l in range(4)]
    # Tamper with a stored layer: a rerun must reuse the stored file, not recompute it.
    marker = torch.full_like(full["dloss"][1], 123.0)
    cache.atomic_torch_save(marker, tmp_path / "layer-001.pt")
    (tmp_path / "layer-002.pt").unlink()
    again = sweep.sweep_windows(lm, info, w, cfg, partial_dir=tmp_path)
    assert torch.equal(again["dloss"][1], marker)
    assert torch.equal(again["dloss"][2], full["dloss"][2])


def test_run_sweep_is_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("RESIDSHIFT_RESULTS", str(tmp_path))
    lm, tok, info = load_model("tiny-llama")
    cfg = sweep.SweepConfig(model=info.name, corpus="tiny-shakespeare", split="train", window=16,
                            n_windows=3, batch_size=3, alphas=(0.5, 1.0), layers=(0, -1))
    r1 = sweep.run_sweep(lm, info, tok, cfg)
    assert r1["layers"] == [0, 3]
    calls = []
    monkeypatch.setattr(sweep, "sweep_windows", lambda *a, **k: calls.append(1))
    r2 = sweep.run_sweep(lm, info, tok, cfg)
    assert not calls and torch.equal(r1["dloss"], r2["dloss"])


def test_bad_configs_name_the_fix():
    lm, _, info = load_model("tiny-llama")
    w = torch.randint(0, 259, (2, 8))
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        sweep.sweep_windows(lm, info, w, sweep.SweepConfig(model=info.name, alphas=(1.5,)))
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        sweep.sweep_windows(lm, info, w, sweep.SweepConfig(model=info.name, alphas=(-0.1,)))
    with pytest.raises(IndexError, match="out of range"):
        sweep.sweep_windows(lm, info, w, sweep.SweepConfig(model=info.name, layers=(7,)))
    with pytest.raises(ValueError, match="loaded model"):
        sweep.sweep_windows(lm, info, w, sweep.SweepConfig(model="tiny-gpt2"))
    with pytest.raises(ValueError, match=r"\[n, length"):
        sweep.sweep_windows(lm, info, w[0], sweep.SweepConfig(model=info.name))


def test_bootstrap_and_verdicts_follow_the_data():
    g = torch.Generator().manual_seed(0)
    n_layers, n = 6, 40
    alphas = [0.0, 0.5, 1.0]
    d = torch.zeros(n_layers, 3, n)
    d[:, 0] = 1.0 + 0.1 * torch.randn(n_layers, n, generator=g)      # alpha = 0 hurts everywhere
    d[:, 1] = 0.5 + 0.05 * torch.randn(n_layers, n, generator=g)
    d[5, 1] = -0.05 + 0.01 * torch.randn(n, generator=g)             # late layer improves
    d[0, 1] = 3.0 + 0.05 * torch.randn(n, generator=g)               # sensitive to the layer
    res = {"dloss": d, "layers": list(range(n_layers)), "alphas": alphas, "n_layers": n_layers}
    v = sweep.c2_verdicts(res, n_boot=200)
    assert v["late_layer_improves"]["verdict"] == "reproduced"
    assert v["late_layer_improves"]["best_layer"] == 5
    assert v["alpha0_hurts"]["verdict"] == "reproduced"
    assert v["layer_sensitive"]["verdict"] == "reproduced"
    d2 = d.clone()
    d2[5, 1] = 0.5 + 0.05 * torch.randn(n, generator=g)
    v2 = sweep.c2_verdicts({**res, "dloss": d2}, n_boot=200)
    assert v2["late_layer_improves"]["verdict"] == "not reproduced"
    d3 = d2.clone()
    d3[:, 0] = -d3[:, 0]
    v3 = sweep.c2_verdicts({**res, "dloss": d3}, n_boot=200)
    assert v3["alpha0_hurts"]["verdict"] == "not reproduced"
    assert v3["late_layer_improves"]["verdict"] == "reproduced"  # alpha = 0 at a late layer helps
    m, lo, hi = sweep.bootstrap_mean(torch.tensor([1.0, 2.0, 3.0, 4.0]), n_boot=500)
    assert m == 2.5 and lo < m < hi
    table = sweep.summarize(res, n_boot=50)
    best = sweep.best_alpha_per_layer(table)
    assert best.set_index("layer").loc[5, "alpha"] == 0.5
    assert best.set_index("layer").loc[0, "alpha"] == 1.0


def test_paired_helpers():
    res = {"dloss": torch.tensor([[[1.0, 1.0], [0.0, 0.0]], [[-0.2, -0.1], [0.0, 0.0]],
                                  [[0.3, 0.3], [0.0, 0.0]]]), "layers": [0, 1, 2], "alphas": [0.5, 1.0],
           "n_layers": 3}
    assert sweep.best_late_cut(res) == (2, 0.5, pytest.approx(0.3))
    assert sweep.best_late_cut(res, late_fraction=0.3)[:2] == (1, 0.5)
    with pytest.raises(ValueError, match="no late layer"):
        sweep.best_late_cut({**res, "layers": [0]}, late_fraction=0.9)
    d = sweep.paired_delta(torch.arange(10.0) + 1, torch.arange(10.0))
    assert d["delta"] == pytest.approx(1.0) and d["lo"] == pytest.approx(1.0) and d["n"] == 10
    with pytest.raises(ValueError, match="same shape"):
        sweep.paired_delta(torch.zeros(3), torch.zeros(4))
    assert sweep.verdict_from_ci(-2, -1) == "reproduced"
    assert sweep.verdict_from_ci(1, 2) == "not reproduced"
    assert sweep.verdict_from_ci(-1, 1) == "inconclusive"
    assert sweep.verdict_from_ci(1, 2, better_if="higher") == "reproduced"
    assert sweep.verdict_from_ci(1, 2, better_if="higher", n=3) == "inconclusive"

    class Fake:
        per_seq = {"logprob_next": torch.tensor([[0.0, 0.0, 1.0, 2.0]]),
                   "logprob_input": torch.tensor([[5.0, 5.0, 0.0, 1.0]])}
    assert float(sweep.alignment_gap(Fake())[0]) == pytest.approx(1.0)  # states 3.. (last third)
    assert float(sweep.alignment_gap(Fake(), layers=[0])[0]) == pytest.approx(-5.0)


def test_combine_verdicts_needs_unanimity():
    from residshift.attenuate.sweep import combine_verdicts

    assert combine_verdicts(["reproduced", "reproduced"]) == "reproduced"
    assert combine_verdicts(["not reproduced"]) == "not reproduced"
    assert combine_verdicts(["reproduced", "not reproduced"]) == "inconclusive"
    with pytest.raises(ValueError):
        combine_verdicts([])
