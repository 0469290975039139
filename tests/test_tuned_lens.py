"""Tuned lens on tiny in-process models: identity init, fitting, persistence, resumption."""
from __future__ import annotations

import pytest
import torch

from residshift.core.fitting import FitError
from residshift.measure import tuned_lens as T


from conftest import random_windows as _windows  # noqa: E402


def _direct_residuals(info, model, ids):
    """Residuals with output_hidden_states (the slow, hook-free reference).

    HF's last hidden state has the final norm applied; take the last block's raw output by hand.
    """
    out = model(ids, output_hidden_states=True)
    hs = list(out.hidden_states[:-1])
    return hs, out.logits


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gemma3", "tiny-gpt2"])
def test_collect_residuals_match_hidden_states_and_last_layer_is_the_model(tiny, name):
    lm, _, info = tiny[name]
    ids = _windows(2, 12, 1)
    hs = T.collect_residuals(lm, info, ids)
    assert len(hs) == info.n_layers + 1
    with torch.no_grad():
        ref, logits = _direct_residuals(info, lm._module, ids)
        for l in range(info.n_layers):
            torch.testing.assert_close(hs[l], ref[l], rtol=1e-5, atol=1e-5)
        # the lens at the last residual reproduces the model's own logits (soft-cap included)
        torch.testing.assert_close(T.decode_logits(info, hs[-1]), logits, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gemma3"])
def test_identity_init_is_exactly_the_logit_lens(tiny, name):
    lm, _, info = tiny[name]
    lens = T.TunedLens(info)
    ids = _windows(2, 10, 2)
    hs = T.collect_residuals(lm, info, ids)
    for l, h in enumerate(hs):
        assert torch.equal(lens.transform(l, h), h)
        assert torch.equal(lens.decode(info, l, h), T.decode_logits(info, h))
    ev = T.evaluate_kl(lm, info, lens, ids, batch=2)
    assert torch.equal(ev["logit"], ev["tuned"])
    assert torch.all(ev["logit"][:, -1].abs() < 1e-6)  # last layer: KL to itself
    assert torch.all(ev["logit"][:, :-1] > 0)


def test_kl_matches_a_direct_computation(tiny):
    lm, _, info = tiny["tiny-gemma3"]
    ids = _windows(2, 9, 3)
    ev = T.evaluate_kl(lm, info, None, ids, batch=1, skip_first=1, chunk=5)
    with torch.no_grad():
        hs, logits = _direct_residuals(info, lm._module, ids)
        p = torch.softmax(logits[:, 1:].double(), -1)
        for l in (0, 2):
            lens_logits = info.final_norm(hs[l])[:, 1:] @ info.embedding.T
            lens_logits = 30.0 * torch.tanh(lens_logits / 30.0)  # tiny-gemma3's soft-cap
            q = torch.log_softmax(lens_logits.double(), -1)
            kl = (p * (p.log() - q)).sum(-1).mean(1)
            torch.testing.assert_close(ev["logit"][:, l].double(), kl, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gemma3", "tiny-gpt2"])
def test_fitting_lowers_kl_on_the_training_windows(tiny, name):
    lm, _, info = tiny[name]
    train = _windows(8, 20, 4)
    cfg = T.TunedLensConfig(window=20, steps=12, batch=8, lr=3e-3, eval_every=0)
    lens, _ = T.fit(lm, info, cfg, train=train, es=None)
    ev = T.evaluate_kl(lm, info, lens, train)
    for l in range(info.n_layers):
        assert ev["tuned"][:, l].mean() < 0.9 * ev["logit"][:, l].mean(), l
    assert torch.equal(ev["tuned"][:, -1], ev["logit"][:, -1])  # T_L is the identity


def test_fitting_lowers_held_out_kl(tiny):
    # on random tiny models held-out gains are small; tiny-gpt2 shows them reliably
    lm, _, info = tiny["tiny-gpt2"]
    train, val = _windows(48, 20, 4), _windows(4, 20, 5)
    cfg = T.TunedLensConfig(window=20, steps=12, batch=8, lr=3e-3, eval_every=0)
    lens, _ = T.fit(lm, info, cfg, train=train, es=None)
    ev = T.evaluate_kl(lm, info, lens, val)
    assert torch.all(ev["tuned"].mean(0)[:-1] < 0.8 * ev["logit"].mean(0)[:-1])


def test_early_stopping_keeps_each_layers_best_state(tiny):
    lm, _, info = tiny["tiny-llama"]
    train, es = _windows(16, 16, 6), _windows(2, 16, 7)
    cfg = T.TunedLensConfig(window=16, steps=6, batch=2, lr=0.5, eval_every=2)  # lr large: noisy
    lens, rep = T.fit(lm, info, cfg, train=train, es=es)
    final = T.evaluate_kl(lm, info, lens, es, batch=2)["tuned"].mean(0)[:-1]
    evals = [r["eval"] for r in rep["history"] if "eval" in r]
    assert len(evals) == 4 and rep["history"][0]["step"] == 0  # step 0 = the logit lens
    best = torch.tensor(evals).min(0).values
    torch.testing.assert_close(final, best.float(), rtol=1e-5, atol=1e-7)


def test_training_vocab_restricts_and_reports(tiny):
    lm, _, info = tiny["tiny-llama"]
    w = torch.tensor([[5, 5, 5, 7, 7, 9], [9, 9, 9, 9, 1, 2]])
    torch.testing.assert_close(T.training_vocab(w, 3), torch.tensor([5, 7, 9]))
    assert T.training_vocab(w, None) is None
    ev = T.evaluate_kl(lm, info, None, _windows(1, 8, 8), vocab=torch.tensor([1, 2, 3]))
    assert 0.9 < float(ev["outside_mass"][0]) < 1.0


def test_save_load_round_trip_and_wrong_model_refusal(tiny, tmp_path):
    lm, _, info = tiny["tiny-llama"]
    lens = T.TunedLens(info)
    with torch.no_grad():
        for t in lens.translators:
            t.weight.normal_(0, 0.01)
            t.bias.normal_(0, 0.01)
    path = lens.save(tmp_path / "lens.pt", config=T.TunedLensConfig())
    back = T.TunedLens.load(path, info)
    h = torch.randn(3, info.d_model)
    for l in range(info.n_layers + 1):
        assert torch.equal(back.transform(l, h), lens.transform(l, h))
    other = tiny["tiny-gemma3"][2]
    with pytest.raises(T.TunedLensError, match="tiny-llama.*tiny-gemma3"):
        T.TunedLens.load(path, other)
    with pytest.raises(T.TunedLensError, match="fitted on 'tiny-llama'"):
        lens.decode(other, 0, torch.randn(2, other.d_model))
    with pytest.raises(FileNotFoundError, match="fit_cached"):
        T.TunedLens.load(tmp_path / "missing.pt", info)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01  # one bit flipped: refused, naming the file and the fix
    path.write_bytes(bytes(data))
    with pytest.raises(T.TunedLensError, match=rf"tuned lens {path} is damaged \(.*fit one with fit_cached"):
        T.TunedLens.load(path, info)


def test_out_of_range_layer_and_bad_config(tiny):
    _, _, info = tiny["tiny-llama"]
    lens = T.TunedLens(info)
    with pytest.raises(IndexError, match=r"0\.\.4"):
        lens.transform(5, torch.randn(2, info.d_model))
    with pytest.raises(ValueError, match="window"):
        T.TunedLensConfig(window=2)
    with pytest.raises(ValueError, match="lr"):
        T.TunedLensConfig(lr=0)


def test_resume_after_interruption_equals_uninterrupted(tiny, tmp_path):
    lm, _, info = tiny["tiny-gemma3"]
    train, es = _windows(12, 16, 9), _windows(2, 16, 10)
    cfg = T.TunedLensConfig(window=16, steps=6, batch=3, lr=1e-2, eval_every=3, checkpoint_every=2, seed=3)
    full, rep_full = T.fit(lm, info, cfg, train=train, es=es)
    ckpt = tmp_path / "ckpt.pt"
    partial, rep = T.fit(lm, info, cfg, train=train, es=es, checkpoint=ckpt, stop_after=3)
    assert rep == {"interrupted_at": 3} and ckpt.is_file()  # the checkpoint holds step 2
    resumed, rep_res = T.fit(lm, info, cfg, train=train, es=es, checkpoint=ckpt)
    for a, b in zip(full.state_dict().values(), resumed.state_dict().values()):
        assert torch.equal(a, b)
    assert [r["parts"] for r in rep_full["history"] if "parts" in r] == \
        [r["parts"] for r in rep_res["history"] if "parts" in r]
    assert [r["eval"] for r in rep_full["history"] if "eval" in r] == \
        [r["eval"] for r in rep_res["history"] if "eval" in r]
    # a checkpoint from another configuration is refused
    with pytest.raises(FitError, match="another fit"):
        T.fit(lm, info, T.TunedLensConfig(window=16, steps=7, batch=3), train=train, es=None, checkpoint=ckpt)
    # a damaged checkpoint is refused before anything is read from it (the counted bests included)
    ckpt.write_bytes(ckpt.read_bytes()[:-10])
    with pytest.raises(FitError, match=rf"checkpoint {ckpt} is damaged \(sha256 mismatch.*start the fit over"):
        T.fit(lm, info, cfg, train=train, es=es, checkpoint=ckpt)


def test_fit_cached_uses_the_corpus_and_caches(tiny, tmp_path, monkeypatch):
    monkeypatch.setenv("RESIDSHIFT_RESULTS", str(tmp_path))
    lm, tok, info = tiny["tiny-llama"]
    cfg = T.TunedLensConfig(window=16, train_windows=8, val_windows=2, es_windows=1, batch=2, steps=2,
                            eval_every=1, train_vocab=16, lstsq_windows=4)
    lens, report = T.fit_cached(lm, info, cfg, tok)
    assert report["kl_logit"].shape == (2, info.n_layers + 1)
    assert report["start"]["init"] == "lstsq" and report["start"]["windows"] == 4
    assert report["vocab_size"] == 16 and 0 <= report["outside_mass"] < 1
    ckpt = T.checkpoint_path(info, cfg)
    assert not ckpt.exists() and not ckpt.with_name(ckpt.name + ".sha256").exists()
    again, report2 = T.fit_cached(lm, info, cfg, tok)
    assert torch.equal(report2["kl_tuned"], report["kl_tuned"])
    for a, b in zip(lens.state_dict().values(), again.state_dict().values()):
        assert torch.equal(a, b)


# ------------------------------------------------------------------------------------------
# Fitting on residuals collected once (the model is frozen)
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gemma3", "tiny-gpt2"])
def test_collect_stack_equals_the_traced_residuals_in_any_batch(tiny, name):
    lm, _, info = tiny[name]
    ids = _windows(5, 12, 11)
    traced = T.collect_residuals(lm, info, ids)
    hooked = T.collect_stack(lm, info, ids)
    alone = T.collect_stack(lm, info, ids[2:4])
    assert len(hooked) == info.n_layers + 1
    for l in range(info.n_layers + 1):
        assert torch.equal(hooked[l], traced[l]), l
        # a window's residuals, whatever its batch (a batch of 2 vs 5: kernels may differ in the last bits)
        torch.testing.assert_close(alone[l], traced[l][2:4], rtol=1e-5, atol=1e-5, msg=str(l))


def _fit_both(lm, info, cfg, train, es, monkeypatch, budget=None):
    per_step, rep_a = T.fit(lm, info, cfg, train=train, es=es, collect="per_step")
    if budget is not None:
        monkeypatch.setattr(T, "RESIDUAL_CACHE_BYTES", budget)
    monkeypatch.setattr(T, "collect_residuals", lambda *a, **k: pytest.fail("the model ran per step"))
    once, rep_b = T.fit(lm, info, cfg, train=train, es=es)
    monkeypatch.undo()
    return (per_step, rep_a), (once, rep_b)


@pytest.mark.parametrize("name,budget", [("tiny-llama", None), ("tiny-gemma3", "two windows")])
def test_fit_on_residuals_collected_once_equals_the_per_step_fit(tiny, name, budget, monkeypatch):
    """Same batches, same residuals, same lens: translators, training KL per step and
    early-stopping KL per evaluation equal the fit that runs the model every step; also when the
    memory bound splits the steps into many blocks."""
    lm, _, info = tiny[name]
    train, es = _windows(6, 16, 12), _windows(3, 16, 13)  # 8 steps x 3 windows from 6: repeats
    cfg = T.TunedLensConfig(window=16, steps=8, batch=3, lr=1e-2, eval_every=3, train_vocab=40, seed=1)
    per_window = (info.n_layers + 1) * 16 * info.d_model * 4
    (a, rep_a), (b, rep_b) = _fit_both(lm, info, cfg, train, es, monkeypatch,
                                       budget=2 * per_window if budget else None)
    for (k, x), y in zip(a.state_dict().items(), b.state_dict().values()):
        torch.testing.assert_close(y, x, rtol=0, atol=1e-6, msg=k)
    parts = [[r["parts"] for r in rep["history"] if "parts" in r] for rep in (rep_a, rep_b)]
    evals = [[r["eval"] for r in rep["history"] if "eval" in r] for rep in (rep_a, rep_b)]
    torch.testing.assert_close(torch.tensor(parts[1]), torch.tensor(parts[0]), rtol=0, atol=1e-6)
    torch.testing.assert_close(torch.tensor(evals[1]), torch.tensor(evals[0]), rtol=0, atol=1e-6)
    assert len(evals[0]) == 4  # steps 0, 3, 6 and the end


def test_residual_store_blocks_and_repeats(tiny):
    lm, _, info = tiny["tiny-llama"]
    train = _windows(6, 16, 12)
    cfg = T.TunedLensConfig(window=16, steps=8, batch=3, seed=1)
    per_window = (info.n_layers + 1) * 16 * info.d_model * 4
    draws = [T.random_batch(6, 3, s, 1).tolist() for s in range(8)]
    whole = T.ResidualStore(lm, info, train, cfg)
    for s in range(8):
        hs = whole.batch(s)
        ref = T.collect_residuals(lm, info, train[draws[s]])
        for x, y in zip(hs, ref):  # the store's windows came from a larger batch: equal to rounding
            torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-5)
    assert whole.blocks == 1 and whole.windows_run == len({i for d in draws for i in d}) <= 6
    small = T.ResidualStore(lm, info, train, cfg, budget=4 * per_window)
    for s in range(8):
        small.batch(s)
        assert small.hs.shape[1] <= 4  # the memory bound holds
    assert small.blocks > 1
    # a resumed fit starts a block where it resumes
    late = T.ResidualStore(lm, info, train, cfg)
    late.batch(5)
    assert late.steps == (5, 7)
