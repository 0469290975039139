"""Sublayer attribution of the lens logit (measure/attribution.py) and notebook 09's glue
(study/attribution.py): the decomposition closes on tiny random models of every family we attribute
(Llama-style, Gemma-3-style with sandwich norms and a soft-cap, GPT-2 LayerNorm, the study's GPT with
a fixed cut at one block and at both adds, and a token gate), the rescaling term is what it says,
bad input names the fix, and the who-removes table's branches on synthetic tables."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
import torch

from residshift.core.models import byte_tokenizer, describe_model, load_model, wrap
from residshift.measure import attribution as A
from residshift.study import attribution as S
from residshift.core.models.gpt import GPT, GPTConfig

TOL = 1e-5


def _gpt(**kw):
    tok = byte_tokenizer()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = GPT(GPTConfig.for_tokenizer(tok, n_layer=3, n_head=2, n_embd=32, block_size=64, **kw)).eval()
    return wrap(model, tok, describe_model(model, tok, name="gpt", source="test"))


MODELS = {
    "tiny-llama": lambda: load_model("tiny-llama"),
    "tiny-gemma3": lambda: load_model("tiny-gemma3"),
    "tiny-gpt2": lambda: load_model("tiny-gpt2"),
    "gpt-cut-block": lambda: _gpt(residual="fixed", alpha=0.3, alpha_layers=[1]),
    "gpt-cut-sublayer": lambda: _gpt(residual="fixed", alpha=0.0, alpha_layers=[0, 2], site="sublayer"),
    "gpt-token-gate": lambda: _gpt(residual="learned-token", embedding="gemma"),
}


@pytest.fixture(scope="module", params=list(MODELS))
def model(request):
    return request.param, MODELS[request.param]()


def ids(n=3, t=12, seed=0):
    return torch.randint(0, 250, (n, t), generator=torch.Generator().manual_seed(seed))


def _lens_centred(info, h, tokens):
    """The plain lens logit (model's own final norm, full vocabulary, no soft-cap) minus its mean."""
    z = info.final_norm(h).double() @ info.embedding.detach().double().T
    return z.gather(-1, tokens[..., None])[..., 0] - z.mean(-1)


def test_terms_add_up_to_the_lens_logit_change(model):
    name, (lm, tok, info) = model
    x = ids()
    parts = A.norm_parts(info)
    stream = A.collect_sublayers(lm, info, x)
    where = torch.arange(1, x.shape[1] - 1)
    t = A.attribution_terms(info, parts, stream, x, where)
    h = stream["h"][:, :, where]
    for which, tokens in (("input", x[:, where]), ("next", x[:, where + 1])):
        # the level is the true centred (pre-softcap) lens logit at every state
        want = _lens_centred(info, h, tokens.expand(h.shape[0], -1, -1))
        assert torch.allclose(t[f"level_{which}"], want, atol=TOL, rtol=1e-6), name
        # contributions of h_l (frozen scale s_{l+1}), attention, MLP, skip edit = lens logit at h_{l+1}
        s = parts.scale(h)
        w, c = A.directions(info, parts, tokens)
        from_h = (h[:-1].double() * w).sum(-1) / s[1:] + c
        linear = from_h + sum(t[f"{k}_{which}"] for k in A.COMPONENTS)
        assert (linear - want[1:]).abs().max() < TOL, name
        # the rescaling term is the gap between that linearisation and the true change
        gap = (want[1:] - want[:-1]) - sum(t[f"{k}_{which}"] for k in A.COMPONENTS)
        assert (gap - t[f"rescale_{which}"]).abs().max() < TOL, name
        assert (from_h - want[:-1] - t[f"rescale_{which}"]).abs().max() < TOL, name
        assert t[f"closure_{which}"].abs().max() < TOL, name


def test_skip_edit_is_alpha_minus_one_times_the_stream():
    lm, tok, info = _gpt(residual="fixed", alpha=0.3, alpha_layers=[1])
    st = A.collect_sublayers(lm, info, ids())
    assert torch.allclose(st["skip"][1], -0.7 * st["h"][1], atol=1e-6)
    assert st["skip"][0].abs().max() == 0 and st["skip"][2].abs().max() == 0
    assert st["closure"] < 1e-5
    lm, tok, info = _gpt(residual="fixed", alpha=0.0, alpha_layers=[0], site="sublayer")  # both adds cut
    st = A.collect_sublayers(lm, info, ids())
    x1 = st["attn"][0]  # alpha = 0: the stream entering the MLP's add is the attention output alone
    assert torch.allclose(st["skip"][0], -st["h"][0] - x1, atol=1e-6)
    assert torch.allclose(st["h"][1], st["mlp"][0], atol=1e-6)  # alpha x1 + mlp with alpha = 0


def test_norm_parts_reproduce_the_final_norm(model):
    name, (lm, tok, info) = model
    parts = A.norm_parts(info)
    h = torch.randn(5, info.d_model) * 3
    assert torch.allclose(parts.apply(h), info.final_norm(h).double(), atol=1e-5), name
    assert parts.kind == {"tiny-llama": "rmsnorm", "tiny-gemma3": "rmsnorm (1 + weight)"}.get(name, "layernorm")


def test_corpus_pass_means_and_closure(model):
    name, (lm, tok, info) = model
    res = A.corpus_attribution(lm, info, ids(5, 10), batch=2, positions=4, seed=1)
    L = info.n_layers
    assert res.n_seq == 5 and res.n_positions == 4 and res.per_seq["attn_input"].shape == (5, L)
    assert res.per_seq["level_next"].shape == (5, L + 1)
    total = sum(res.per_seq[f"{k}_input"] for k in A.TERMS)
    assert torch.allclose(total, res.per_seq["delta_input"], atol=TOL)
    assert res.max_closure_logit < TOL and res.closure < 1e-5
    assert ("skip" in res.components) == name.startswith("gpt")
    # positions: the same subset as the lens's
    from residshift.measure.lens import LensOptions
    assert res.n_positions == LensOptions(positions=4, seed=1).position_index(10).numel()


def test_uncentred_logit_differs_only_by_the_mean_logit():
    lm, tok, info = load_model("tiny-llama")
    x = ids()
    a = A.corpus_attribution(lm, info, x, centre=True)
    b = A.corpus_attribution(lm, info, x, centre=False)
    assert not torch.allclose(a.per_seq["attn_input"], b.per_seq["attn_input"])
    assert torch.allclose(b.per_seq["delta_input"], sum(b.per_seq[f"{k}_input"] for k in A.TERMS), atol=TOL)


def test_bad_input_names_the_fix():
    lm, tok, info = load_model("tiny-llama")
    with pytest.raises(A.AttributionError, match="batch"):
        A.corpus_attribution(lm, info, ids(), batch=0)
    with pytest.raises(ValueError, match="too short"):
        A.corpus_attribution(lm, info, ids(t=2))
    with pytest.raises(A.AttributionError, match="window"):
        A.run_attribution(lm, info, tok, corpus="wikitext-2", split="test", window=2, n=2)
    with pytest.raises(A.AttributionError, match="positive int"):
        A.run_attribution(lm, info, tok, corpus="wikitext-2", split="test", window=16, n=0)
    other = describe_model(lm._module, tok, name="x", source="t")
    other.family = "opt"
    with pytest.raises(A.AttributionError, match="SUBLAYERS"):
        A.sublayer_paths(other)
    odd = describe_model(lm._module, tok, name="x", source="t")
    odd.final_norm = torch.nn.Tanh()
    with pytest.raises(A.AttributionError, match="norm_parts"):
        A.norm_parts(odd)
    lm2, tok2, info2 = _gpt(residual="backout")
    with pytest.raises(A.AttributionError, match="backout"):
        A.collect_sublayers(lm2, info2, ids())


def test_closure_check_refuses_a_wrong_layout():
    lm, tok, info = load_model("tiny-llama")
    bad = describe_model(lm._module, tok, name="x", source="t")
    A.SUBLAYERS["llama-wrong"] = ("self_attn", "post_attention_layernorm")  # the pre-MLP norm, not the MLP
    try:
        bad.family = "llama-wrong"
        with pytest.raises(A.AttributionError, match="differs from input"):
            A.collect_sublayers(lm, bad, ids())
    finally:
        del A.SUBLAYERS["llama-wrong"]


# ------------------------------------------------------------------------------------------
# Notebook glue: tables and figure (synthetic numbers)
# ------------------------------------------------------------------------------------------


def _synthetic(model="m", *, attn, mlp, rescale, skip=None, n=20, sd=0.05, seed=0):
    """An AttributionResult whose per-window input terms are the given per-block means + noise."""
    g = np.random.default_rng(seed)
    L = len(attn)
    comps = {"attn": attn, "mlp": mlp, "rescale": rescale, **({"skip": skip} if skip is not None else {})}
    per = {}
    for which in A.WHICH:
        for k, v in comps.items():
            per[f"{k}_{which}"] = torch.tensor(np.asarray(v, float)[None] + sd * g.standard_normal((n, L)))
        per[f"delta_{which}"] = sum(per[f"{k}_{which}"] for k in comps)
        per[f"closure_{which}"] = torch.zeros(n, L)
        per[f"level_{which}"] = torch.zeros(n, L + 1)
    return A.AttributionResult(model=model, n_layers=L, components=("attn", "mlp", *(("skip",) if skip else ())),
                               per_seq=per, closure=0.0, max_closure_logit=0.0, n_positions=3,
                               norm="rmsnorm", centre=True)


def test_who_table_attention_removes():
    r = _synthetic(attn=[0.1, -2.0, 0.2], mlp=[0.1, -0.3, 0.1], rescale=[-0.1, -0.2, 0.0])
    w = S.who_table(S.window_table({"m": r}, n_boot=200)).loc["m"]
    assert w["block"] == 1 and w["more negative"] == "attention" and w["largest negative"] == "attention"
    assert w["attention"] == pytest.approx(-2.0, abs=0.05) and w["change"] == pytest.approx(-2.5, abs=0.1)
    assert w["change lo"] < w["change"] < w["change hi"] < 0 and np.isnan(w["skip edit"])
    assert (w["most negative sublayer"], w["at block"]) == ("attention", 1) and w["hi"] < 0
    assert w["blocks falling"] in (1, 2) and w["attention more"] >= 1 and (w["n"], w["unit"]) == (20, "windows")


def test_who_table_mlp_and_rescaling_and_undecided():
    r = _synthetic(attn=[-0.5, 0.0], mlp=[-1.5, 0.0], rescale=[-5.0, 0.0])
    w = S.who_table(S.window_table({"m": r}, n_boot=200)).loc["m"]
    assert (w["most negative sublayer"], w["at block"]) == ("MLP", 0)
    assert w["more negative"] == "MLP" and w["largest negative"] == "norm rescaling"
    r = _synthetic(attn=[-1.0, 0.5], mlp=[-1.0, 0.5], rescale=[0.0, 0.0], sd=0.5)
    r.per_seq["mlp_input"] = r.per_seq["attn_input"].clone()  # the two sublayers equal window by window
    assert S.who_table(S.window_table({"m": r}, n_boot=200)).loc["m", "more negative"] == "undecided"
    r = _synthetic(attn=[1.0, 0.5], mlp=[1.0, 0.5], rescale=[0.0, 0.0])
    w = S.who_table(S.window_table({"m": r}, n_boot=200)).loc["m"]
    assert w["blocks falling"] == 0 and w["change"] > 0 and w["largest negative"] == "none"
    assert w["most negative sublayer"] == "none" and np.isnan(w["estimate"])


def test_who_table_skip_edit_and_seed_table():
    res = {("cut", s): _synthetic(attn=[0.1, 0.1], mlp=[0.1, 0.0], rescale=[0.0, 0.0], skip=[0.0, -3.0], seed=s)
           for s in range(3)}
    t = S.seed_table(res)
    assert set(t.unit) == {"seeds"} and set(t.n) == {3} and len(t.per_seed.iloc[0]) == 3
    w = S.who_table(t).loc["cut"]
    assert (w["most negative sublayer"], w["at block"], w["block"]) == ("skip edit (alpha - 1) x", 1, 1)
    assert w["largest negative"] == "skip edit (alpha - 1) x" and (w["n"], w["unit"]) == (3, "seeds")
    one = S.seed_table({("cut", 0): res[("cut", 0)]})  # one seed: no interval, the row still fills
    assert np.isnan(one.lo).all()
    w = S.who_table(one).loc["cut"]
    assert w["most negative sublayer"] == "none" and w["more negative"] == "undecided" and w["blocks falling"] == 0


def test_a_most_negative_estimate_whose_ci_includes_0_is_not_named_as_the_remover():
    """The table names a sublayer only where its CI lies below 0; with none below 0 it says none."""
    noisy = _synthetic(attn=[-0.3, 0.1], mlp=[0.1, -1.0], rescale=[0.0, 0.0], sd=0.05)
    noisy.per_seq["mlp_input"][:, 1] = torch.linspace(-7.0, 5.0, noisy.per_seq["mlp_input"].shape[0])  # mean -1, wide
    w = S.who_table(S.window_table({"m": noisy}, n_boot=200)).loc["m"]
    assert (w["most negative sublayer"], w["at block"]) == ("attention", 0)
    flat = _synthetic(attn=[0.5, 0.5], mlp=[0.5, 0.5], rescale=[0.0, 0.0], sd=0.01)
    flat.per_seq["attn_input"][:, 0] = torch.linspace(-5.1, 5.0, flat.per_seq["attn_input"].shape[0])  # mean -0.05
    assert S.who_table(S.window_table({"m": flat}, n_boot=200)).loc["m", "most negative sublayer"] == "none"


def test_who_table_from_a_figures_numbers_has_no_paired_difference():
    r = _synthetic(attn=[0.1, -2.0, 0.2], mlp=[0.1, -0.3, 0.1], rescale=[-0.1, -0.2, 0.0])
    t = S.window_table({"m": r}, n_boot=100)
    fig, numbers = S.block_panel(t, title="x")
    plt.close(fig)
    w = S.who_table(S.table_from_numbers(numbers)).loc["m"]
    assert w["block"] == 1 and w["more negative"] == "–" and np.isnan(w["attention more"])


def test_panel_numbers_and_bad_tables():
    r = _synthetic(attn=[0.1, -2.0, 0.2], mlp=[0.1, -0.3, 0.1], rescale=[-0.1, -0.2, 0.0])
    t = S.window_table({"m": r}, n_boot=100)
    fig, numbers = S.block_panel(t, title="x")
    assert set(numbers["m"]) == {"input", "next"} and len(numbers["m"]["input"]["attn"]["estimate"]) == 3
    assert "skip" not in numbers["m"]["input"]
    with pytest.raises(S.AttributionStudyError, match="not in the table"):
        S.block_panel(t, ["other"])
    with pytest.raises(S.AttributionStudyError, match="lacks columns"):
        S.who_table(pd.DataFrame({"model": ["m"]}))
    with pytest.raises(S.AttributionStudyError, match="no seeds"):
        S.t_interval([])
    assert S.check_table({"m": r}).loc["m", "logit closure"] == 0.0
