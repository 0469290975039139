"""The lens on tiny in-process models: every fast path checked against the package's reference
lens (``lens.reference_metrics`` / ``lens.reference_logits``, the oracle), which is checked
against the models' own logits."""
import dataclasses

import numpy as np
import pytest
import torch

from residshift.core import data, forward
from residshift.measure import lens
from residshift.core.models import load_model

TINY = ["tiny-llama", "tiny-gpt2", "tiny-gemma3"]


@pytest.fixture(scope="module", params=TINY)
def model(request):
    return load_model(request.param)


def _ids(info, b=3, t=14, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, min(info.vocab_size, 256), (b, t), generator=g)


def test_residuals_match_hidden_states(model):
    lm, tok, info = model
    ids = _ids(info)
    hs, logits = forward.collect_residuals(lm, info, ids, return_logits=True)
    assert hs.shape == (info.n_layers + 1, 3, 14, info.d_model)
    with torch.no_grad():
        ref = lm._module(ids, output_hidden_states=True)
    # transformers' last hidden state is taken after the final norm; compare the others
    for l in range(info.n_layers):
        torch.testing.assert_close(hs[l], ref.hidden_states[l].float())
    torch.testing.assert_close(logits, ref.logits.float())


def test_last_layer_lens_equals_model_logits(model):
    lm, tok, info = model
    ids = _ids(info)
    hs, logits = forward.collect_residuals(lm, info, ids, return_logits=True)
    ll = lens.lens_logits(info, hs[-1], info.n_layers)
    torch.testing.assert_close(ll, logits, rtol=1e-5, atol=1e-5)
    if info.logit_softcap:  # the soft-cap is applied: no logit beyond the cap
        assert ll.abs().max() <= info.logit_softcap
    # the oracle is the model at L, and the fast head equals the oracle at every layer
    torch.testing.assert_close(lens.reference_logits(info, hs[-1]), logits, rtol=1e-5, atol=1e-5)
    for l in range(info.n_layers + 1):
        torch.testing.assert_close(lens.lens_logits(info, hs[l], l), lens.reference_logits(info, hs[l]),
                                   rtol=1e-5, atol=1e-5, msg=f"layer {l}")


def test_softcap_is_exercised():
    lm, tok, info = load_model("tiny-gemma3")
    assert info.logit_softcap == 30.0
    ids = _ids(info)
    hs = forward.collect_residuals(lm, info, ids)
    raw = lens.reference_logits(dataclasses.replace(info, logit_softcap=None), hs[-1])
    capped = lens.lens_logits(info, hs[-1], info.n_layers)
    assert not torch.allclose(raw, capped)  # would fail if the cap were skipped
    torch.testing.assert_close(capped, lens.reference_logits(info, hs[-1]), rtol=1e-5, atol=1e-5)
    # the tiny model's logits stay far below 30, where tanh is nearly linear: a cap below their
    # range makes the fast paths' cap matter to every metric (ranks aside), checked on the oracle
    tight = dataclasses.replace(info, logit_softcap=0.25)
    assert raw.abs().max() > 2 * tight.logit_softcap
    ref = lens.reference_metrics(tight, hs, ids)
    loose = lens.reference_metrics(info, hs, ids)
    assert not torch.allclose(ref["logprob_next"], loose["logprob_next"], atol=1e-2)
    for l in range(info.n_layers + 1):
        torch.testing.assert_close(lens.lens_logits(tight, hs[l], l), lens.reference_logits(tight, hs[l]),
                                   rtol=1e-5, atol=1e-5, msg=f"layer {l}")
    got = lens.residual_metrics(tight, hs, ids)
    for k in ref:
        torch.testing.assert_close(got[k], ref[k], rtol=1e-4, atol=2e-5, msg=k)


@pytest.mark.parametrize("chunk_elems", [1 << 24, 300])  # one chunk, and many (rows=1)
def test_metrics_match_slow_reference(model, chunk_elems):
    lm, tok, info = model
    ids = _ids(info)
    hs = forward.collect_residuals(lm, info, ids)
    got = lens.residual_metrics(info, hs, ids, options=lens.LensOptions(chunk_elems=chunk_elems))
    ref = lens.reference_metrics(info, hs, ids)
    assert set(got) == set(ref) == set(lens.metric_columns(lens.METRICS))
    for k in ref:
        torch.testing.assert_close(got[k], ref[k], rtol=1e-4, atol=2e-5, msg=k)
    # identities: KL of the last layer to itself is 0; h_0 is the embedding row up to scale
    assert got["kl_final"][-1].abs().max() < 1e-5
    if info.family != "gpt2":  # GPT-2 adds position embeddings to h_0
        torch.testing.assert_close(got["cos_raw_input"][0], torch.ones_like(got["cos_raw_input"][0]))


def test_decoder_hook_is_applied_before_the_norm():
    lm, tok, info = load_model("tiny-llama")
    ids = _ids(info)
    hs = forward.collect_residuals(lm, info, ids)
    W = torch.randn(info.d_model, info.d_model, generator=torch.Generator().manual_seed(1)) * 0.3
    calls = []

    def decoder(layer, h):
        calls.append(layer)
        return h + h @ W if layer < info.n_layers else h

    got = lens.residual_metrics(info, hs, ids, decoder=decoder)
    ref = lens.reference_metrics(info, hs, ids, decoder=decoder)
    for k in ("logprob_next", "rank_input", "entropy", "cos_norm_next", "proj_input"):
        torch.testing.assert_close(got[k], ref[k], rtol=1e-4, atol=2e-5, msg=k)
    plain = lens.residual_metrics(info, hs, ids)
    assert not torch.allclose(got["logprob_next"][1], plain["logprob_next"][1])
    torch.testing.assert_close(got["cos_raw_next"], plain["cos_raw_next"])  # raw h: untouched
    assert set(calls) == set(range(info.n_layers + 1))


def test_bf16_matmul_changes_little():
    lm, tok, info = load_model("tiny-llama")
    ids = _ids(info, b=4, t=32)
    hs = forward.collect_residuals(lm, info, ids)
    a = lens.reference_metrics(info, hs, ids)
    b = lens.residual_metrics(info, hs, ids, options=lens.LensOptions(
        metrics=["logprob", "top1"], matmul_dtype="bfloat16", token_table=()))
    assert (a["logprob_next"] - b["logprob_next"]).abs().max() < 0.1
    assert (a["top1_next"] != b["top1_next"]).float().mean() < 0.05


def test_attenuation_inside_the_layer_loop(model):
    lm, tok, info = model
    from residshift.core.interventions import attenuated_logits

    ids = _ids(info)
    plain = forward.collect_residuals(lm, info, ids)
    hs, logits = forward.collect_residuals(lm, info, ids, attenuation={1: 0.25}, return_logits=True)
    torch.testing.assert_close(hs[:2], plain[:2])  # before the edited block: unchanged
    # block 1 output becomes block_1(h_1) - (1 - alpha) h_1, with block_1(h_1) the plain output
    torch.testing.assert_close(hs[2], plain[2] - 0.75 * plain[1], rtol=1e-5, atol=1e-5)
    assert not torch.allclose(hs[3], plain[3])  # and the change propagates
    ref = attenuated_logits(lm, info, ids, {1: 0.25})
    torch.testing.assert_close(logits, ref.float())
    torch.testing.assert_close(lens.lens_logits(info, hs[-1], info.n_layers), logits,
                               rtol=1e-5, atol=1e-5)
    same = forward.collect_residuals(lm, info, ids, attenuation={1: 1.0})
    torch.testing.assert_close(same, plain)


def test_corpus_metrics_aggregates_and_streams():
    lm, tok, info = load_model("tiny-llama")
    windows = _ids(info, b=5, t=12, seed=3)
    opt = lens.LensOptions()
    res = lens.corpus_metrics(lm, info, windows, batch=2, options=opt)
    assert res.n_seq == 5 and res.n_layers == info.n_layers
    # the oracle on the same batches of 2 (cos_centred is centred on the batch mean by definition)
    parts = [lens.reference_metrics(info, forward.collect_residuals(lm, info, w), w)
             for w in windows.split(2)]
    direct = {c: torch.cat([p[c] for p in parts], 1) for c in parts[0]}
    assert res.columns == lens.metric_columns(lens.METRICS)
    for c in res.columns:
        torch.testing.assert_close(res.per_seq[c], direct[c].mean(-1).T, rtol=1e-4, atol=1e-5, msg=c)
    torch.testing.assert_close(res.per_seq_median["rank_next"], direct["rank_next"].median(-1).values.T)
    n_tok = 5 * 10
    assert res.tokens["cur"].shape == (n_tok,)
    assert res.tokens["layers"]["rank_input"].shape == (info.n_layers + 1, n_tok)
    torch.testing.assert_close(res.tokens["layers"]["logprob_next"],
                               direct["logprob_next"].reshape(info.n_layers + 1, -1), rtol=1e-4, atol=1e-5)
    assert torch.equal(res.tokens["next"].long(), windows[:, 2:].reshape(-1))
    assert res.tokens["seq"].tolist() == [i for i in range(5) for _ in range(10)]


def test_errors_name_the_fix():
    lm, tok, info = load_model("tiny-llama")
    with pytest.raises(lens.LensError, match="known metrics: rank"):
        lens.check_metrics(["rank", "perplexity"])
    with pytest.raises(lens.LensError, match="empty"):
        lens.encode(tok, info, "   ")
    with pytest.raises(lens.LensError, match="too short|at least 3"):
        lens.encode(tok, info, "a")
    with pytest.raises(forward.TokenIdsError, match="too short"):  # ids are checked in core.forward
        lens.residual_metrics(info, torch.zeros(info.n_layers + 1, 1, 2, info.d_model),
                              torch.zeros(1, 2, dtype=torch.long))
    with pytest.raises(lens.LensError, match="out of range"):
        lens.lens_logits(info, torch.zeros(1, info.d_model), info.n_layers + 1)
    with pytest.raises(forward.TokenIdsError, match="0..258"):
        forward.check_ids(torch.tensor([[1, 2, 999]]), info)
    with pytest.raises(IndexError, match="out of range"):
        forward.collect_residuals(lm, info, _ids(info), attenuation={info.n_layers: 0.5})
    with pytest.raises(lens.LensError, match="decoder_id"):
        lens.run_lens(lm, info, tok, corpus="wikitext-2", split="validation", window=16, n=2,
                      decoder=lambda l, h: h)
    with pytest.raises(lens.LensError, match="token_table"):
        lens.LensOptions(metrics=["entropy"], token_table=("rank_input",))
    assert lens.LensOptions(metrics=["logprob"]).token_table == ("logprob_input", "logprob_next")


@pytest.mark.parametrize("chunk", [lens.DECODE_CHUNK, 100, 7])
def test_decode_top_first_and_last_layer(monkeypatch, chunk):
    monkeypatch.setattr(lens, "DECODE_CHUNK", chunk)  # the vocabulary (259) in 1, 3 or 37 chunks
    lm, tok, info = load_model("tiny-gemma3")
    ids = lens.encode(tok, info, "The cat sat on the mat.")
    out = lens.decode_top(lm, info, ids, k=3)
    assert out["ids"].shape == (info.n_layers + 1, 1, ids.shape[1], 3)
    # last layer: the model's own argmax
    assert torch.equal(out["ids"][-1, ..., 0], out["model_logits"].argmax(-1))
    assert torch.all(out["probs"][..., 0] >= out["probs"][..., 1])
    # every layer: the oracle's top 3 (a soft-capped model with an embedding scale)
    ref = lens.reference_logits(info, forward.collect_residuals(lm, info, ids))  # [L+1, 1, T, V]
    p, i = torch.softmax(ref, -1).topk(3, dim=-1)
    assert torch.equal(out["ids"], i)
    torch.testing.assert_close(out["probs"], p, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out["model_logits"], ref[-1], rtol=1e-5, atol=1e-5)


def test_run_lens_is_cached(tmp_path, monkeypatch):
    lm, tok, info = load_model("tiny-llama")
    kw = dict(corpus="wikitext-2", split="validation", window=16, n=3, batch=2, metrics=["top1", "rank", "logprob"])
    a = lens.run_lens(lm, info, tok, **kw)
    calls = []
    monkeypatch.setattr(lens, "corpus_metrics", lambda *a, **k: calls.append(1))
    b = lens.run_lens(lm, info, tok, **kw)
    assert not calls
    torch.testing.assert_close(a.per_seq["top1_next"], b.per_seq["top1_next"])
    assert a.config["window"] == 16 and a.per_seq["rank_input"].shape == (3, info.n_layers + 1)
    # the cached corpus pass against the oracle on the same windows
    windows = data.token_windows("wikitext-2", "validation", tok, length=16, n=3, seed=0,
                                 prepend_bos=info.prepend_bos)
    ref = lens.reference_metrics(info, forward.collect_residuals(lm, info, windows), windows)
    for c in a.columns:
        torch.testing.assert_close(a.per_seq[c], ref[c].mean(-1).T, rtol=1e-4, atol=1e-5, msg=c)
    torch.testing.assert_close(a.per_seq_median["rank_next"], ref["rank_next"].median(-1).values.T)


def test_token_kinds_and_frequency_bins():
    assert lens.token_kind(" \n") == "whitespace"
    assert lens.token_kind(" ,") == "punctuation"
    assert lens.token_kind("@-@") == "punctuation"
    assert lens.token_kind(" 1984") == "number"
    assert lens.token_kind(" Paris") == "word"
    counts = np.array([5, 50, 0, 7, 1])
    bins, labels = lens.frequency_bins(counts, np.array([1, 3, 0, 4, 2]), edges=(1, 3))
    # ranks: id1 -> 1, id3 -> 2, id0 -> 3, id4 -> 4, id2 -> 5
    assert bins.tolist() == [0, 1, 1, 2, 2]
    assert labels == ["rank 1-1", "rank 2-3", "rank >3"]
    lm, tok, info = load_model("tiny-llama")
    kinds = lens.token_kinds(tok, tok(" a, 1\n").input_ids)
    assert sorted(set(kinds.values())) == ["number", "punctuation", "whitespace", "word"]


@pytest.mark.slow
def test_real_model_last_layer_and_regimes():
    """SmolLM2: the lens at L is the model; h_0 decodes to the input, h_L beats it on the next token."""
    lm, tok, info = load_model("smollm2-135m")
    ids = lens.encode(tok, info, "The capital of France is Paris, and the capital of Italy is Rome.")
    hs, logits = forward.collect_residuals(lm, info, ids, return_logits=True)
    torch.testing.assert_close(lens.lens_logits(info, hs[-1], info.n_layers), logits, rtol=1e-4, atol=1e-4)
    m = lens.residual_metrics(info, hs, ids, options=lens.LensOptions(metrics=["top1"], token_table=()))
    # SmolLM2's final-norm gains keep layer 0 from decoding every input token (64-79% on
    # WikiText-103, notebook 03), but layer 0 is clearly input-aligned and layer L next-aligned.
    assert m["top1_input"][0].mean() > 0.5 > m["top1_next"][0].mean()
    assert m["top1_next"][-1].mean() > m["top1_input"][-1].mean()


def test_classify_decoded():
    ids = torch.tensor([5, 6, 6, 7])
    top1 = torch.tensor([[5, 6, 6, 7],    # all input
                         [6, 6, 7, 9],    # next, input (6 == 6), next, other
                         [1, 2, 3, 4]])
    got = lens.classify_decoded(top1, ids)
    assert got.tolist() == [[1, 1, 1, 1], [2, 1, 2, 0], [0, 0, 0, 0]]
    with pytest.raises(lens.LensError, match="expected"):
        lens.classify_decoded(top1, ids[:3])


def test_position_subset_matches_full_pass():
    lm, tok, info = load_model("tiny-llama")
    windows = _ids(info, b=4, t=20, seed=5)
    full = lens.LensOptions(metrics=["logprob", "rank", "cos_raw"])
    sub = lens.LensOptions(metrics=["logprob", "rank", "cos_raw"], positions=6, seed=3)
    where = sub.position_index(20)
    assert where.numel() == 6 and where.min() >= 1 and where.max() <= 18
    assert torch.equal(where, where.sort().values) and where.unique().numel() == 6
    assert not torch.equal(where, lens.LensOptions(positions=6, seed=4).position_index(20))
    hs = forward.collect_residuals(lm, info, windows)
    a = lens.residual_metrics(info, hs, windows, options=full)
    b = lens.residual_metrics(info, hs, windows, options=sub)
    ref = lens.reference_metrics(info, hs, windows)
    for k in b:
        torch.testing.assert_close(b[k], a[k][:, :, where - 1], msg=k)  # column j of `a` is t = j + 1
        torch.testing.assert_close(b[k], ref[k][:, :, where - 1], msg=k)
    res = lens.corpus_metrics(lm, info, windows, batch=3, options=sub)
    assert res.tokens["pos"].tolist() == where.tolist() * 4
    assert torch.equal(res.tokens["cur"].long(), windows[:, where].reshape(-1))
    torch.testing.assert_close(res.per_seq["logprob_next"], b["logprob_next"].mean(-1).T)


def test_bos_and_detokenization_options_change_the_windows(tmp_path, monkeypatch):
    monkeypatch.setenv("RESIDSHIFT_RESULTS", str(tmp_path))
    lm, tok, info = load_model("tiny-gemma3")
    kw = dict(corpus="wikitext-2", split="validation", window=16, n=2, metrics=["top1"])
    base = lens.run_lens(lm, info, tok, **kw)
    flipped = lens.run_lens(lm, info, tok, bos=not info.prepend_bos, **kw)
    raw = lens.run_lens(lm, info, tok, detokenize=False, **kw)
    assert base.config["bos"] is info.prepend_bos and flipped.config["bos"] is not info.prepend_bos
    assert raw.config["detokenize"] is False
    assert not torch.equal(base.tokens["cur"], flipped.tokens["cur"])
    assert not torch.equal(base.tokens["cur"], raw.tokens["cur"])
    assert len(list((tmp_path / "lens-metrics").glob("*.pt"))) == 3


def test_unigram_baseline_counts_the_most_frequent_token():
    tokens = {"cur": torch.tensor([5, 5, 2, 5, 1, 1], dtype=torch.int32),
              "next": torch.tensor([5, 2, 5, 1, 1, 5], dtype=torch.int32),
              "seq": torch.tensor([0, 0, 0, 1, 1, 1], dtype=torch.int32)}
    res = lens.LensResult("m", 2, ["top1_input"], {"top1_input": torch.zeros(2, 3)}, {}, tokens)
    counts = np.zeros(8)
    counts[[5, 2, 1]] = [10, 3, 1]
    base = lens.unigram_baseline(res, counts)
    assert base["top_token"] == 5
    torch.testing.assert_close(base["top1_input"], torch.tensor([2 / 3, 1 / 3], dtype=torch.float64))
    torch.testing.assert_close(base["top1_next"], torch.tensor([2 / 3, 1 / 3], dtype=torch.float64))
    q = (counts + 1) / (counts + 1).sum()
    assert float(base["logprob_input"][1]) == pytest.approx(float(np.log(q[[5, 1, 1]]).mean()))


def test_input_persistence_averages_the_late_input_columns():
    per_seq = {"logprob_input": torch.tensor([[0.0, -1.0, -2.0, -4.0], [0.0, -3.0, -3.0, -6.0]]),
               "logrank_input": torch.zeros(2, 4)}
    res = lens.LensResult("m", 3, list(per_seq), per_seq, {}, {})
    out = lens.input_persistence(res, 2)
    torch.testing.assert_close(out["logprob"], torch.tensor([-3.0, -4.5], dtype=torch.float64))
    with pytest.raises(lens.LensError, match="0..3"):
        lens.input_persistence(res, 4)
    with pytest.raises(lens.LensError, match="metrics including 'prob'"):
        lens.input_persistence(res, 1, metrics=["prob"])


# ------------------------------------------------------------------------------------------
# The compiled metric functions (torch.compile) and when they are used
# ------------------------------------------------------------------------------------------


def test_compiled_metrics_match_eager_and_reference(monkeypatch):
    """The fused, compiled chunk functions give the eager numbers (ranks exactly, the rest to
    float rounding), with a soft-cap, in multi-row chunks and in a one-row chunk (padded)."""
    lm, tok, info = load_model("tiny-gemma3")
    ids = _ids(info, b=3, t=9)  # 21 analysed positions
    hs = forward.collect_residuals(lm, info, ids)
    monkeypatch.setattr(lens, "COMPILE", "never")
    eager = lens.residual_metrics(info, hs, ids)
    monkeypatch.setattr(lens, "COMPILE", "always")
    ref = lens.reference_metrics(info, hs, ids)
    for chunk_elems in (10 * info.vocab_size, 1 << 24):  # chunks of 10, 10 and 1 rows; one chunk
        got = lens.residual_metrics(info, hs, ids, options=lens.LensOptions(chunk_elems=chunk_elems))
        for k in ref:
            torch.testing.assert_close(got[k], ref[k], rtol=1e-4, atol=2e-5, msg=k)
            if k.startswith(("rank", "logrank", "top1")):
                assert torch.equal(got[k], eager[k]), k
            else:
                torch.testing.assert_close(got[k], eager[k], rtol=1e-5, atol=1e-5, msg=k)
    assert not lens._compile_failed


def test_compile_failure_falls_back_to_eager(monkeypatch):
    lm, tok, info = load_model("tiny-llama")
    ids = _ids(info)
    hs = forward.collect_residuals(lm, info, ids)
    monkeypatch.setattr(lens, "COMPILE", "never")
    eager = lens.residual_metrics(info, hs, ids)

    def broken(fn, **kw):
        def run(*a, **k):
            raise RuntimeError("no C++ compiler here")
        return run

    monkeypatch.setattr(lens, "_compiled", {})
    monkeypatch.setattr(lens, "_compile_failed", [])
    monkeypatch.setattr(torch, "compile", broken)
    monkeypatch.setattr(lens, "COMPILE", "always")
    with pytest.warns(RuntimeWarning, match="eager path"):
        got = lens.residual_metrics(info, hs, ids)
    assert lens._compile_failed and "no C++ compiler" in lens._compile_failed[0]
    for k in eager:
        torch.testing.assert_close(got[k], eager[k], msg=k)


def test_compile_decision_counts_the_whole_corpus_pass(monkeypatch):
    lm, tok, info = load_model("tiny-llama")
    monkeypatch.setattr(lens, "COMPILE", "auto")
    assert lens._kernels(lens.COMPILE_MIN_WORK - 1)[0] is lens._chunk_stats_eager
    assert lens._kernels(lens.COMPILE_MIN_WORK)[0] is not lens._chunk_stats_eager  # lazy: no compile yet
    monkeypatch.setattr(lens, "COMPILE", "never")
    assert lens._kernels(10**15)[0] is lens._chunk_stats_eager
    monkeypatch.setattr(lens, "COMPILE", "sometimes")
    with pytest.raises(lens.LensError, match="auto"):
        lens._kernels(1)
    monkeypatch.setattr(lens, "COMPILE", "never")
    seen = []
    real = lens._kernels
    monkeypatch.setattr(lens, "_kernels", lambda work: seen.append(work) or real(work))
    windows = _ids(info, b=5, t=12, seed=3)
    lens.corpus_metrics(lm, info, windows, batch=2, options=lens.LensOptions(metrics=["rank"]))
    # every batch decides on the whole pass: 5 windows x 10 positions x layers x vocabulary
    assert seen == [5 * 10 * (info.n_layers + 1) * info.vocab_size] * 3
    assert lens._WORK_HINT.rows is None  # reset after the pass


def test_a_lens_pass_is_run_lens_with_its_settings(monkeypatch):
    """LensPass.run forwards exactly its fields (n as n, every other by name) and lets a call add or
    override any run_lens argument; with_ changes a copy."""
    seen = {}
    monkeypatch.setattr(lens, "run_lens", lambda lm, info, tok, **kw: seen.update(kw, lm=lm, tok=tok, info=info))
    p = lens.LensPass("wikitext-2", "test", window=16, n=3, seed=2, batch=4, metrics=("top1",), positions=5)
    p.run(("LM", "TOK", "INFO"), attenuation={1: 0.0}, metrics=("logprob",))
    assert seen == {"corpus": "wikitext-2", "split": "test", "window": 16, "n": 3, "seed": 2, "batch": 4,
                    "metrics": ("logprob",), "matmul_dtype": "float32", "positions": 5, "attenuation": {1: 0.0},
                    "lm": "LM", "tok": "TOK", "info": "INFO"}
    q = p.with_(n=7)
    assert (q.n, p.n, q.corpus) == (7, 3, "wikitext-2")


def test_the_notebooks_lens_passes_read_the_profile():
    from residshift.core import profiles
    from residshift.study import lens_setups

    P = profiles.resolve("default")
    pre, att, tr = lens_setups.pretrained(P), lens_setups.attenuated(P), lens_setups.trained(P)
    assert (pre.corpus, pre.split, pre.window, pre.n, pre.batch, pre.positions) == (
        P.lens_corpus, P.lens_split, P.lens_window, P.lens_windows, P.lens_batch, P.lens_positions)
    assert (att.corpus, att.split, att.window, att.n, att.batch) == (
        P.sweep_corpus, "test", P.atten_lens_window, P.atten_lens_windows, P.sweep_batch)
    assert att.split != "validation"  # disjoint from the sweep's windows
    assert (tr.corpus, tr.split, tr.window, tr.n) == ("wikitext-2", "test", P.train_context, P.train_lens_windows)
