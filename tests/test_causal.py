"""Causal localization on tiny in-process models: plumbing checked against hook-based torch runs."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from residshift.measure import causal as C


from conftest import random_windows as _windows  # noqa: E402


def _hooked_loss(info, model, ids, residual, edit, skip_first=1):
    """Reference: the same edit through a plain torch hook on the bare module (no nnsight)."""
    layers = info.layers
    if residual == 0:
        handle = layers[0].register_forward_pre_hook(lambda m, args: (edit(args[0]),) + tuple(args[1:]))
    else:
        def post(m, args, out):
            if isinstance(out, tuple):
                return (edit(out[0]),) + tuple(out[1:])
            return edit(out)
        handle = layers[residual - 1].register_forward_hook(post)
    try:
        with torch.no_grad():
            logits = model(ids).logits
    finally:
        handle.remove()
    ce = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(), ids[:, 1:].reshape(-1),
                         reduction="none").view(ids.shape[0], -1)
    return ce[:, skip_first:].mean(1)


def test_remove_direction_is_an_orthogonal_projection():
    h = torch.randn(3, 5, 16)
    u = F.normalize(torch.randn(3, 5, 16), dim=-1)
    out = C.remove_direction(h, u)
    torch.testing.assert_close((out * u).sum(-1), torch.zeros(3, 5), atol=1e-5, rtol=0)
    torch.testing.assert_close(C.remove_direction(out, u), out, atol=1e-5, rtol=1e-5)
    assert torch.equal(C.remove_direction(h, torch.zeros_like(u)), h)


def test_direction_tokens_input_next_and_random_control():
    ids = torch.tensor([[1, 2, 3, 4, 5], [6, 7, 8, 9, 10]])
    inp = C.direction_tokens(ids, "input", skip_first=1)
    nxt = C.direction_tokens(ids, "next", skip_first=1)
    assert inp.tolist() == [[-1, 2, 3, 4, 5], [-1, 7, 8, 9, 10]]
    assert nxt.tolist() == [[-1, 3, 4, 5, -1], [-1, 8, 9, 10, -1]]
    rnd = C.direction_tokens(ids, "random", skip_first=1, seed=0)
    assert torch.all(rnd[:, 0] == -1)
    body, nb = rnd[:, 1:], torch.cat([ids[:, 2:], torch.full((2, 1), -1)], 1)
    assert torch.all(body != ids[:, 1:]) and torch.all(body != nb)
    assert set(body.reshape(-1).tolist()) <= set(ids[:, 1:].reshape(-1).tolist())
    with pytest.raises(ValueError, match="unknown direction"):
        C.direction_tokens(ids, "previous")


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gemma3", "tiny-gpt2"])
def test_alpha_one_gives_zero_delta_and_alpha_zero_matches_a_hook(tiny, name):
    lm, _, info = tiny[name]
    ids = _windows(3, 12, 1)
    res = C.skip_ablation_profile(lm, info, ids, alphas=(1.0, 0.0), batch=2)
    assert res["delta"].shape == (2, 3, info.n_layers)
    torch.testing.assert_close(res["delta"][0], torch.zeros(3, info.n_layers), atol=1e-6, rtol=0)
    assert res["delta"][1].abs().min() > 1e-4
    # alpha = 0 at block 1: h_2 = block_1(h_1) - h_1, reproduced with pre- and post-hooks
    block = info.layers[1]
    stash = {}
    pre = block.register_forward_pre_hook(lambda m, args: stash.__setitem__("x", args[0]))
    post = block.register_forward_hook(
        lambda m, a, out: (out[0] - stash["x"],) + tuple(out[1:]) if isinstance(out, tuple) else out - stash["x"])
    try:
        with torch.no_grad():
            ref = C.sequence_losses(lm._module(ids).logits, ids)
    finally:
        pre.remove()
        post.remove()
    torch.testing.assert_close(res["delta"][1, :, 1], ref - res["clean"], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gemma3", "tiny-gpt2"])
@pytest.mark.parametrize("kind", ["input", "next", "random"])
def test_direction_ablation_matches_a_torch_hook(tiny, name, kind):
    lm, _, info = tiny[name]
    ids = _windows(4, 10, 2)
    res = C.direction_ablation_profile(lm, info, ids, directions=(kind,), residuals=[0, 2, info.n_layers],
                                       batch=2, seed=5)
    assert res["delta"].shape == (1, 4, 3)
    with torch.no_grad():
        clean = C.sequence_losses(lm._module(ids).logits, ids)
    torch.testing.assert_close(res["clean"], clean, rtol=1e-5, atol=1e-6)
    for j, r in enumerate([0, 2, info.n_layers]):
        for start in (0, 2):  # the profile draws random controls per batch with seed + start
            sub = ids[start:start + 2]
            units = C.unit_directions(info, C.direction_tokens(sub, kind, skip_first=1, seed=5 + start))
            ref = _hooked_loss(info, lm._module, sub, r, lambda h, u=units: C.remove_direction(h, u))
            torch.testing.assert_close(res["delta"][0, start:start + 2, j], ref - clean[start:start + 2],
                                       rtol=1e-4, atol=1e-5)
            traced = C.sequence_losses(C.direction_ablated_logits(lm, info, sub, r, units), sub)
            torch.testing.assert_close(traced, ref, rtol=1e-4, atol=1e-5)  # the nnsight path agrees
    assert res["delta"].abs().max() > 1e-5  # the edit does something


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gemma3", "tiny-gpt2"])
def test_lens_basis_removes_exactly_what_the_lens_reads(tiny, name):
    """After removing u_k (basis "lens") the lens logit of k is what it is for h = 0 along u_k:
    0 for RMSNorm models, the bias term e_k . beta for LayerNorm (GPT-2); removing e_k does not."""
    lm, _, info = tiny[name]
    g = torch.Generator().manual_seed(3)
    norm = info.final_norm
    saved = {k: v.clone() for k, v in norm.state_dict().items()}
    with torch.no_grad():
        for p in norm.parameters():  # a far-from-uniform gain, so the bases differ
            p.add_(0.5 * torch.randn(p.shape, generator=g))
        try:
            gain, centres = C.norm_readout(info)
            assert centres == (name == "tiny-gpt2")
            h = 3 * torch.randn(5, info.d_model, generator=g)
            k = torch.tensor([[3, 7, 11, 19, 40]])
            lens = lambda x: info.final_norm(x[None])[0] @ info.embedding.detach().T  # noqa: E731
            bias = norm.bias if getattr(norm, "bias", None) is not None else torch.zeros(info.d_model)
            const = info.embedding.detach()[k[0]] @ bias
            for basis, exact in (("lens", True), ("embedding", False)):
                u = C.unit_directions(info, k, basis=basis)[0]
                got = lens(C.remove_direction(h, u)).gather(1, k.T)[:, 0]
                assert torch.allclose(got, const, atol=1e-4) == exact, basis
        finally:
            norm.load_state_dict(saved)


def test_centred_and_embedding_bases(tiny):
    lm, _, info = tiny["tiny-gemma3"]
    ids = _windows(2, 10, 6)
    tokens = C.direction_tokens(ids, "input", skip_first=1)
    units = C.unit_directions(info, tokens, basis="centred")
    mean = info.embedding.detach().mean(0)
    raw = info.embedding.detach()[ids[0, 3]]
    torch.testing.assert_close(units[0, 3], F.normalize(raw - mean, dim=0))
    torch.testing.assert_close(C.unit_directions(info, tokens, basis="embedding")[0, 3], F.normalize(raw, dim=0))
    res = C.direction_ablation_profile(lm, info, ids, directions=("input",), residuals=[2], batch=2, basis="centred")
    assert res["basis"] == "centred"
    with torch.no_grad():
        clean = C.sequence_losses(lm._module(ids).logits, ids)
    ref = _hooked_loss(info, lm._module, ids, 2, lambda h: C.remove_direction(h, units))
    torch.testing.assert_close(res["delta"][0, :, 0], ref - clean, rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="basis"):
        C.CausalConfig(basis="gamma")


def test_input_ablation_at_embedding_removes_the_token_embedding(tiny):
    """At h_0 = sqrt(d)·e_{x_t} (Gemma scale, no position embeddings) the edit leaves nothing."""
    lm, _, info = tiny["tiny-gemma3"]
    ids = _windows(1, 8, 3)
    units = C.unit_directions(info, C.direction_tokens(ids, "input", skip_first=1), basis="embedding")
    saved = []
    with torch.no_grad():
        with lm.trace(ids):
            C.edit_residual(lm, info, 0, lambda h: C.remove_direction(h, units))
            saved.append(info.layer_envoys(lm)[0].input.save())
    h0 = saved[0]
    assert h0[:, 1:].abs().max() < 1e-4
    torch.testing.assert_close(h0[0, 0], info.embedding[ids[0, 0]] * info.embed_scale, rtol=1e-5, atol=1e-5)


def test_errors_name_the_fix(tiny):
    lm, _, info = tiny["tiny-llama"]
    ids = _windows(2, 8, 4)
    with pytest.raises(IndexError, match=r"0\.\.3"):
        C.skip_ablation_profile(lm, info, ids, alphas=(0.0,), layers=[4])
    with pytest.raises(IndexError, match=r"0\.\.4"):
        C.direction_ablation_profile(lm, info, ids, residuals=[5])
    with pytest.raises(IndexError, match=r"0\.\.4"):
        C.direction_ablated_logits(lm, info, ids, -1, torch.zeros(2, 8, info.d_model))
    with pytest.raises(ValueError, match="at least 3 tokens"):
        C.skip_ablation_profile(lm, info, ids[:, :2])
    with pytest.raises(ValueError, match=r"alphas must lie in \[0, 1\]"):
        C.CausalConfig(alphas=(1.5,))
    with pytest.raises(ValueError, match="unknown direction"):
        C.CausalConfig(directions=("sideways",))


def _synthetic(delta_input, delta_next, delta_random):
    return {"directions": ["input", "next", "random"], "residuals": list(range(delta_input.shape[1])),
            "n_layers": delta_input.shape[1] - 1,
            "delta": torch.stack([delta_input, delta_next, delta_random])}


def test_effect_transitions_on_a_known_profile():
    n = 30
    inp = torch.tensor([4.0, 3.0, 1.0, 0.0, 0.0, 0.0, 5.0]).expand(n, 7).clone()
    nxt = torch.tensor([0.0, 0.0, 0.0, 1.0, 2.0, 4.0, 9.0]).expand(n, 7).clone()
    out = C.effect_transitions(_synthetic(inp, nxt, torch.zeros(n, 7)), frac=0.5, n_boot=50)
    # h_0 and h_6 are left out. input on h_1..h_5 = 3,1,0,0,0: max 3, half 1.5; last >= 1.5 at h_1,
    # then 1 at h_2 -> 1 + (3 - 1.5) / (3 - 1) = 1.75
    assert out["input_stops"]["index"] == pytest.approx(1.75)
    # next on h_1..h_5 = 0,0,1,2,4: max 4, half 2 first reached at h_4 exactly
    assert out["next_starts"]["index"] == pytest.approx(4.0)
    assert out["next_starts"]["lo"] == pytest.approx(4.0) and out["next_starts"]["relative"] == pytest.approx(4 / 6)
    with pytest.raises(ValueError, match="random"):
        C.effect_transitions({"directions": ["input", "next"], "delta": torch.zeros(2, 3, 4), "residuals": [0, 1, 2, 3]})
    assert C._first_reaching([0.0, 1.0, 3.0], 0.5) == pytest.approx(1.25)
    assert C._first_reaching([0.0, -1.0], 0.5) is None


def test_skip_summary():
    res = {"alphas": [0.0], "layers": [0, 1, 2], "delta": torch.tensor([[[0.1, 2.0, -0.01], [0.2, 3.0, 0.01]]])}
    s = C.skip_summary(res, n_boot=50)[0.0]
    assert s["most_harmful"] == 1 and s["least_harmful"] == 2 and s["n_harmless"] == 1
    assert s["ci"]["estimate"] == pytest.approx([0.15, 2.5, 0.0])


def test_run_cached_caches_per_config(tiny, tmp_path, monkeypatch):
    monkeypatch.setenv("RESIDSHIFT_RESULTS", str(tmp_path))
    lm, tok, info = tiny["tiny-llama"]
    cfg = C.CausalConfig(window=12, n_windows=2, batch=2, alphas=(0.0,), directions=("input", "next", "random"))
    out = C.run_cached(lm, info, cfg, tok)
    assert out["skip"]["delta"].shape == (1, 2, info.n_layers)
    assert out["direction"]["delta"].shape == (3, 2, info.n_layers + 1)
    assert len(list((tmp_path / "causal-profile").glob("*.pt"))) == 1
    again = C.run_cached(lm, info, cfg, tok)
    assert torch.equal(again["direction"]["delta"], out["direction"]["delta"])
    assert set(C.skip_summary(out["skip"], n_boot=20)) == {0.0}
    assert set(C.effect_transitions(out["direction"], n_boot=20)) >= {"input_stops", "next_starts"}
