"""Fixed attenuation: identity at alpha = 1, multi-layer edit vs direct torch, cheap sweep vs naive."""
import dataclasses

import pytest
import torch

from residshift.core import cache
from residshift.attenuate import sweep
from residshift.core import replay
from residshift.core.interventions import attenuated_logits
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
    cap = replay.capture(lm._module, info, ids)
    assert torch.allclose(cap.logits, _plain_logits(lm, ids), atol=1e-6)
    for layer in range(info.n_layers):
        for alpha in (0.0, 0.5):
            got = replay.replay(lm._module, info, cap, layer, alpha)
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


def test_the_sweep_edits_the_captured_block_output_exactly_as_a_replay_of_the_block(model):
    """The sweep starts from block l's captured output instead of running block l again: bit-identical."""
    lm, _, info = model
    w = torch.randint(0, 259, (4, 10), generator=torch.Generator().manual_seed(3))
    cfg = sweep.SweepConfig(model=info.name, batch_size=4, alphas=(0.0, 0.5, 1.0))
    got = sweep.sweep_windows(lm, info, w, cfg)
    cap = replay.capture(lm._module, info, w)
    base = sweep.next_token_losses(cap.logits, w).mean(dim=1)
    for layer in range(info.n_layers):
        for ai, alpha in enumerate((0.0, 0.5)):
            full = sweep.next_token_losses(replay.replay(lm._module, info, cap, layer, alpha), w).mean(dim=1) - base
            assert torch.equal(got["dloss"][layer, ai], full), (layer, alpha)


def test_a_sweep_from_a_later_window_is_the_tail_of_the_longer_sweep(tmp_path, monkeypatch):
    """Confirmation sweeps cover only the windows after the grid's (first_window), recomputing none."""
    monkeypatch.setenv("RESIDSHIFT_RESULTS", str(tmp_path))
    lm, tok, info = load_model("tiny-llama")
    cfg = sweep.SweepConfig(model=info.name, corpus="tiny-shakespeare", split="train", window=16,
                            n_windows=6, batch_size=3, alphas=(0.0, 1.0), layers=(1,))
    full = sweep.run_sweep(lm, info, tok, cfg)
    tail = sweep.run_sweep(lm, info, tok, dataclasses.replace(cfg, first_window=3))
    assert tail["dloss"].shape == (1, 2, 3) and torch.equal(tail["dloss"], full["dloss"][..., 3:])
    assert torch.equal(tail["base"], full["base"][3:])
    for bad in (-1, 6):
        with pytest.raises(ValueError, match="first_window must lie in 0..n_windows-1 = 5"):
            sweep.run_sweep(lm, info, tok, dataclasses.replace(cfg, first_window=bad))


def test_sweep_resumes_from_partial_layers(tmp_path, monkeypatch):
    lm, _, info = load_model("tiny-llama")
    w = torch.randint(0, 259, (4, 10), generator=torch.Generator().manual_seed(2))
    cfg = sweep.SweepConfig(model=info.name, batch_size=4, alphas=(0.0, 1.0))
    full = sweep.sweep_windows(lm, info, w, cfg, partial_dir=tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"layer-{l:03d}.pt{s}" for l in range(4)
                                                                for s in ("", ".sha256"))
    # Tamper with a stored layer: a rerun must reuse the stored file, not recompute it.
    marker = torch.full_like(full["dloss"][1], 123.0)
    cache.save_verified(marker, tmp_path / "layer-001.pt")
    (tmp_path / "layer-002.pt").unlink()
    again = sweep.sweep_windows(lm, info, w, cfg, partial_dir=tmp_path)
    assert torch.equal(again["dloss"][1], marker)
    assert torch.equal(again["dloss"][2], full["dloss"][2])
    # A row whose bytes changed after it was written (one float) is recomputed, with a warning naming it.
    row = tmp_path / "layer-003.pt"
    value = full["dloss"][3][0, 0].numpy().tobytes()
    data = row.read_bytes()
    assert data.count(value) == 1
    row.write_bytes(data.replace(value, torch.tensor(9.0).numpy().tobytes()))
    with pytest.warns(cache.DamagedFileWarning, match=rf"partial sweep row {row} is damaged \(sha256 mismatch.*"
                                                      "recomputing layer 3"):
        again = sweep.sweep_windows(lm, info, w, cfg, partial_dir=tmp_path)
    assert torch.equal(again["dloss"][3], full["dloss"][3])
    assert torch.equal(cache.load_verified(row), full["dloss"][3])


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


def test_summaries_of_a_sweep():
    g = torch.Generator().manual_seed(0)
    n_layers, n = 6, 40
    d = torch.zeros(n_layers, 3, n)
    d[:, 0] = 1.0 + 0.1 * torch.randn(n_layers, n, generator=g)
    d[:, 1] = 0.5 + 0.05 * torch.randn(n_layers, n, generator=g)
    d[5, 1] = -0.05 + 0.01 * torch.randn(n, generator=g)             # late layer improves
    res = {"dloss": d, "layers": list(range(n_layers)), "alphas": [0.0, 0.5, 1.0], "n_layers": n_layers}
    table = sweep.summarize(res, n_boot=50)
    row = table[(table.layer == 5) & (table.alpha == 0.5)].iloc[0]
    x = d[5, 1].double()
    assert row.dloss == pytest.approx(float(x.mean())) and row.lo < row.dloss < row.hi
    assert row.se == pytest.approx(float(x.std() / n ** 0.5))
    assert (table[table.alpha == 1.0][["dloss", "lo", "hi"]] == 0).all().all()
    best = sweep.best_alpha_per_layer(table)
    assert best.set_index("layer").loc[5, "alpha"] == 0.5
    assert best.set_index("layer").loc[0, "alpha"] == 1.0


