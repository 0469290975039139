"""The evaluation harness on tiny in-process models, checked against slow direct computations."""
import math

import numpy as np
import pytest
import torch

from residshift.analysis.stats import binomial_se
from residshift.measure import evaluate as ev
from residshift.core.interventions import attenuate
from residshift.core.data import load_corpus
from residshift.core.models import load_model

CFG = ev.EvalConfig(context=16, stride=8, batch_size=3, max_batch_tokens=64, shard_size=4)


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny-llama")


@pytest.fixture(scope="module")
def tiny_bos():
    return load_model("tiny-gemma3", prepend_bos=True)


def direct_logprobs(module, ids: list[int]) -> torch.Tensor:
    """log p(ids[t+1] | ids[:t+1]) for every t, from one plain forward of the whole sequence."""
    with torch.no_grad():
        logits = module(torch.tensor([ids])).logits[0].float()
    return torch.log_softmax(logits[:-1], -1).gather(1, torch.tensor(ids[1:])[:, None])[:, 0]


# ------------------------------------------------------------------------------------------
# The multiple-choice rule (standard errors: tests/test_stats.py)
# ------------------------------------------------------------------------------------------


def test_multiple_choice_rule_by_hand():
    # raw: -5 > -6 picks choice 1; per character: -6/6 = -1 > -5/1 picks choice 0
    m = ev.multiple_choice_metrics([-6.0, -5.0], ["aaaaaa", "b"], gold=0)
    assert (m["pred"], m["pred_norm"], m["acc"], m["acc_norm"]) == (1, 0, 0.0, 1.0)
    m = ev.multiple_choice_metrics([-1.0, -9.0, -3.0], ["x", "yyy", "zz"], gold=0)
    assert (m["pred"], m["pred_norm"], m["acc"], m["acc_norm"]) == (0, 0, 1.0, 1.0)
    with pytest.raises(ValueError, match="gold"):
        ev.multiple_choice_metrics([-1.0, -2.0], ["a", "b"], gold=2)
    with pytest.raises(ValueError, match="empty"):
        ev.multiple_choice_metrics([-1.0, -2.0], ["a", ""], gold=0)


# ------------------------------------------------------------------------------------------
# The scoring core
# ------------------------------------------------------------------------------------------


def test_encode_pair_moves_trailing_space(tiny):
    _, tok, _ = tiny
    ctx, cont = ev.encode_pair(tok, "Answer: ", "yes")
    assert tok.decode(ctx) == "Answer:" and tok.decode(cont) == " yes"
    ctx, cont = ev.encode_pair(tok, "Answer:", " yes", bos_id=tok.bos_token_id)
    assert ctx[0] == tok.bos_token_id and tok.decode(cont) == " yes"
    with pytest.raises(ValueError, match="empty"):
        ev.encode_pair(tok, "Answer:", "  ")
    with pytest.raises(ValueError, match="no BOS"):
        ev.encode_pair(tok, "", "yes")


def test_score_requests_matches_direct_forward_in_any_batch(tiny):
    lm, tok, info = tiny
    seqs = [[5, 9, 33, 70, 71], [100, 101, 102, 103, 104, 105, 106, 107, 108], [40, 41, 42]]
    reqs = [ev.Request(tuple(s), n) for s, n in zip(seqs, (2, 5, 1))]
    for batch_size in (1, 2, 3):
        got = ev.score_requests(lm, info, reqs, batch_size=batch_size, pad_id=tok.pad_token_id)
        for s, r, lp, n in zip(seqs, reqs, got["logprob"], got["tokens"]):
            ref = direct_logprobs(lm._module, s)[r.n_ctx - 1 :]
            assert n == len(s) - r.n_ctx
            assert lp == pytest.approx(float(ref.sum()), abs=1e-4)


def test_greedy_flag_by_hand(tiny):
    lm, tok, info = tiny
    ids = [10, 20, 30]
    for _ in range(3):  # the model's own greedy chain
        with torch.no_grad():
            ids.append(int(lm._module(torch.tensor([ids])).logits[0, -1].argmax()))
    wrong = ids[:-1] + [(ids[-1] + 1) % info.vocab_size]
    got = ev.score_requests(lm, info, [ev.Request(tuple(ids), 3), ev.Request(tuple(wrong), 3)],
                            max_logits=info.vocab_size)  # one scored position per forward
    assert got["greedy"].tolist() == [True, False]


def test_intervened_scores_go_through_nnsight(tiny):
    lm, tok, info = tiny
    reqs = [ev.Request((5, 6, 7, 8, 9), 2), ev.Request((11, 12, 13), 1)]
    bare = ev.score_requests(lm, info, reqs)
    same = ev.score_requests(lm, info, reqs, intervene=lambda m, i: attenuate(m, i, {1: 1.0}))
    cut = ev.score_requests(lm, info, reqs, intervene=lambda m, i: attenuate(m, i, {1: 0.5}))
    np.testing.assert_allclose(same["logprob"], bare["logprob"], atol=1e-5)
    assert np.abs(cut["logprob"] - bare["logprob"]).max() > 1e-3
    # and the intervened value is what a hand-made edit of the block gives
    block = info.layers[1]
    def hook(mod, args, kwargs, out):
        hidden = args[0] if args else kwargs["hidden_states"]
        return out - 0.5 * hidden

    handle = block.register_forward_hook(hook, with_kwargs=True)
    try:
        hooked = ev.score_requests(lm, info, reqs)
    finally:
        handle.remove()
    np.testing.assert_allclose(cut["logprob"], hooked["logprob"], atol=1e-4)


def _shared_context_requests(seed=0, n_questions=5, max_ctx=40):
    """Questions with 2-4 continuations each after one context (lengths 1..max_ctx-1, beyond
    tiny-gemma3's sliding window of 16), continuations of 1-8 tokens, and one lone request."""
    g = torch.Generator().manual_seed(seed)
    reqs = []
    for _ in range(n_questions):
        n_ctx = int(torch.randint(1, max_ctx, (1,), generator=g))
        ctx = torch.randint(0, 256, (n_ctx,), generator=g).tolist()
        for _ in range(int(torch.randint(2, 5, (1,), generator=g))):
            cont = torch.randint(0, 256, (int(torch.randint(1, 9, (1,), generator=g)),), generator=g).tolist()
            reqs.append(ev.Request(tuple(ctx + cont), n_ctx))
    reqs.append(ev.Request((5, 6, 7), 1))
    return reqs


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gpt2", "tiny-gemma3"])
def test_prefix_reuse_equals_whole_sequences(name, monkeypatch):
    """Shared contexts run once (KV cache expanded across the choices) give the scores of whole
    sequences, bare and with an edit inside each trace, in any batching."""
    lm, tok, info = load_model(name)
    reqs = _shared_context_requests()
    used = []
    real = ev._score_shared
    monkeypatch.setattr(ev, "_score_shared", lambda *a, **k: used.append(real(*a, **k)) or used[-1])
    for intervene in (None, lambda m, i: attenuate(m, i, {1: 0.5})):
        whole = ev.score_requests(lm, info, reqs, prefix_reuse=False, intervene=intervene)
        assert not used
        if intervene is None:  # whole sequences are what one plain forward of each request gives
            for r, lp in zip(reqs, whole["logprob"]):
                ref = direct_logprobs(lm._module, list(r.tokens))[r.n_ctx - 1:]
                assert lp == pytest.approx(float(ref.sum()), abs=1e-4)
        # one batch of everything, and batches of 2 contexts within 64 tokens
        for batch_size, max_tokens in ((16, 8192), (2, 64))[: 2 if intervene is None else 1]:
            got = ev.score_requests(lm, info, reqs, intervene=intervene, batch_size=batch_size,
                                    max_batch_tokens=max_tokens, prefix_reuse=True)
            assert used and all(used)
            used.clear()
            np.testing.assert_allclose(got["logprob"], whole["logprob"], rtol=0, atol=1e-4)
            assert (got["tokens"] == whole["tokens"]).all() and (got["greedy"] == whole["greedy"]).all()


def test_auto_prefix_reuse_shares_a_context_only_where_it_saves_tokens(tiny_bos, monkeypatch):
    """"auto" (the default) runs a question's context once only where the context tokens saved exceed
    the choices' own tokens: a long question with short answers shares, a short goal with long
    solutions runs whole; the scores equal whole sequences either way."""
    lm, tok, info = tiny_bos
    assert ev.reuse_saves(40, [3, 4, 5, 2]) and not ev.reuse_saves(12, [30, 28]) and not ev.reuse_saves(10, [5, 5])
    long_q = [ev.Request(tuple([1] + list(range(2, 42)) + list(c)), 41) for c in ((7, 8), (9,), (10, 11, 12))]
    short_q = [ev.Request(tuple([1, 50, 51] + list(range(60, 60 + n))), 3) for n in (20, 25)]
    reqs = long_q + short_q
    shared = []
    real = ev._score_shared
    monkeypatch.setattr(ev, "_score_shared", lambda m, i, r, batch, **k: shared.extend(batch) or real(m, i, r, batch, **k))
    want = ev.score_requests(lm, info, reqs, prefix_reuse=False)
    got = ev.score_requests(lm, info, reqs)
    assert shared == [[0, 1, 2]]  # the long question only
    np.testing.assert_allclose(got["logprob"], want["logprob"], rtol=0, atol=1e-4)
    shared.clear()
    ev.score_requests(lm, info, reqs, prefix_reuse=True)
    assert sorted(shared) == [[0, 1, 2], [3, 4]]
    with pytest.raises(ValueError, match="prefix_reuse must be one of"):
        ev.score_requests(lm, info, reqs, prefix_reuse="sometimes")


def test_prefix_reuse_needs_a_cache(tiny, monkeypatch):
    """A model whose forward takes no KV cache (our GPT) is scored plainly, with the same numbers."""
    lm, tok, info = tiny
    reqs = _shared_context_requests(seed=1, n_questions=3)
    want = ev.score_requests(lm, info, reqs, prefix_reuse=False)
    assert ev._shared_groups(reqs, set())[0]  # there are shared contexts to reuse
    with monkeypatch.context() as m:
        m.setattr(ev, "_cache_arg", lambda module: None)
        got = ev.score_requests(lm, info, reqs, prefix_reuse=True)
    np.testing.assert_array_equal(got["logprob"], want["logprob"])
    with monkeypatch.context() as m:  # a cache without a way to repeat its rows: plain batches
        m.setattr(ev, "_expand_cache", lambda pkv, index: False)
        got = ev.score_requests(lm, info, reqs, batch_size=2)
    np.testing.assert_allclose(got["logprob"], want["logprob"], rtol=0, atol=1e-5)


def test_shared_groups_and_their_batches():
    reqs = [ev.Request((1, 2, 3, 4), 2), ev.Request((1, 2, 5), 2), ev.Request((9, 2, 3), 2),
            ev.Request((1, 2, 6, 7, 8), 2), ev.Request((9, 9, 9, 9, 1), 4), ev.Request((9, 9, 9, 9, 2), 4)]
    groups, plain = ev._shared_groups(reqs, truncated={5})
    assert groups == [[0, 1, 3]] and plain == [2, 4, 5]  # a truncated request is never grouped
    groups, plain = ev._shared_groups(reqs, truncated=set())
    assert groups == [[0, 1, 3], [4, 5]] and plain == [2]
    batches = ev._group_batches(reqs, groups, batch_size=8, max_tokens=1000, max_scored=100)
    assert batches == [[[4, 5], [0, 1, 3]]]  # longest context first
    assert ev._group_batches(reqs, groups, batch_size=1, max_tokens=1000, max_scored=100) == [[[4, 5]], [[0, 1, 3]]]
    # scored positions: (1 + 1) + (2 + 1 + 3) = 8 > 7 splits; a single group over a limit runs alone
    assert len(ev._group_batches(reqs, groups, batch_size=8, max_tokens=1000, max_scored=7)) == 2
    assert len(ev._group_batches(reqs, groups, batch_size=8, max_tokens=1, max_scored=1)) == 2


def test_bf16_autocast_stays_close_and_keys_the_cache(tiny):
    lm, tok, info = tiny
    reqs = [ev.Request((5, 6, 7, 8, 9, 10, 11), 2), ev.Request((11, 12, 13), 1)]
    full = ev.score_requests(lm, info, reqs)
    half = ev.score_requests(lm, info, reqs, bf16=True)
    half_traced = ev.score_requests(lm, info, reqs, bf16=True,
                                    intervene=lambda m, i: attenuate(m, i, {1: 1.0}))
    assert np.abs(half["logprob"] - full["logprob"]).max() < 0.05 * len(reqs[0].tokens)
    assert np.abs(half["logprob"] - full["logprob"]).max() > 0  # autocast really ran
    np.testing.assert_allclose(half_traced["logprob"], half["logprob"], atol=1e-4)
    assert "bf16" in ev.EvalConfig(bf16=True).key() and "bf16" not in ev.EvalConfig().key()


def test_make_batches_respects_limits():
    batches = ev.make_batches([5, 50, 7, 3, 60, 2], batch_size=2, max_tokens=100)
    assert sorted(i for b in batches for i in b) == list(range(6))
    assert all(len(b) <= 2 for b in batches)
    assert batches[0] == [4]  # 60 tokens: a second row would pad to 120 > 100
    assert all(len(b) * max([5, 50, 7, 3, 60, 2][i] for i in b) <= 100 for b in batches)
    # the logits budget: at most 10 scored positions per batch
    scored = [4, 4, 4, 12, 3, 3]
    batches = ev.make_batches([5, 50, 7, 3, 60, 2], batch_size=6, max_tokens=10**6, scored=scored,
                              max_scored=10)
    assert sorted(i for b in batches for i in b) == list(range(6))
    assert all(sum(scored[i] for i in b) <= 10 or len(b) == 1 for b in batches)


# ------------------------------------------------------------------------------------------
# Sliding-window perplexity
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("bos", [False, True])
@pytest.mark.parametrize("n,context,stride", [(50, 16, 8), (37, 10, 3), (9, 16, 15), (64, 16, 16), (64, 16, 15)])
def test_rolling_windows_score_each_token_once(n, context, stride, bos):
    if stride > context - 1:
        with pytest.raises(ValueError):
            ev.rolling_windows(n, context=context, stride=stride, bos=bos)
        return
    body = context - 1 if bos else context
    windows = ev.rolling_windows(n, context=context, stride=stride, bos=bos)
    scored = [t for w in windows for t in range(w.first, w.end)]
    assert scored == list(range(0 if bos else 1, n))  # each token once, in order
    for k, w in enumerate(windows):
        assert 0 <= w.begin and w.end - w.begin <= body and w.begin <= w.first - (0 if bos else 1)
        if k > 0:
            assert w.first - w.begin + bos >= context - stride  # the promised minimum context


def _text(n_words=40):
    rng = np.random.default_rng(0)
    words = ["the", "cat", "sat", "on", "a", "mat", "and", "then", "slept", "well"]
    return " ".join(rng.choice(words, n_words))


def test_perplexity_equals_full_context_loss_when_text_fits(tiny):
    lm, tok, info = tiny
    text = "the quick brown fox jumps over the lazy dog"
    ids = ev.encode(tok, text)
    cfg = ev.EvalConfig(context=len(ids), stride=len(ids) - 1)
    r = ev.text_perplexity(lm, info, tok, text, config=cfg, cache=False)
    full = -direct_logprobs(lm._module, ids).mean()
    assert r.n == 1 and r.details["scored_tokens"] == len(ids) - 1
    assert r.metrics["loss"][0] == pytest.approx(float(full), abs=1e-5)
    assert r.metrics["ppl"][0] == pytest.approx(math.exp(float(full)), rel=1e-5)


def test_strided_perplexity_matches_naive_windows(tiny_bos):
    lm, tok, info = tiny_bos
    text = _text(30)
    ids = ev.encode(tok, text)
    r = ev.text_perplexity(lm, info, tok, text, config=CFG, cache=False)
    # naive: each window alone, BOS + body, summing the losses of its scored tokens
    total, count = 0.0, 0
    for w in ev.rolling_windows(len(ids), context=CFG.context, stride=CFG.stride, bos=True):
        seq = [info.bos_token_id] + ids[w.begin : w.end]
        lp = direct_logprobs(lm._module, seq)  # lp[j] predicts seq[j + 1] = ids[w.begin + j]
        scored = lp[w.first - w.begin :]
        total -= float(scored.sum())
        count += len(scored)
    assert count == len(ids)  # with BOS every token is scored
    assert r.metrics["loss"][0] == pytest.approx(total / count, abs=1e-5)
    # per word: total NLL / whitespace words; per byte: bytes = tokens for a byte tokenizer
    assert r.metrics["word_loss"][0] == pytest.approx(total / len(text.split()), abs=1e-4)
    assert r.metrics["bits_per_byte"][0] == pytest.approx(total / count / math.log(2), abs=1e-5)
    assert r.metrics["word_ppl"][0] == pytest.approx(math.exp(total / len(text.split())), rel=1e-4)
    assert r.metrics["loss"][1] > 0


def test_limit_subsamples_windows_reproducibly(tiny):
    lm, tok, info = tiny
    text = _text(60)
    full = ev.text_perplexity(lm, info, tok, text, config=CFG, cache=False)
    part = ev.text_perplexity(lm, info, tok, text, config=CFG, cache=False, limit=5)
    again = ev.text_perplexity(lm, info, tok, text, config=CFG, cache=False, limit=5)
    assert part.n == 5 and full.n == full.config["windows_total"] > 5
    assert part.metrics == again.metrics
    chosen = part.details["windows"]
    np.testing.assert_allclose(part.details["window_nll"],
                               full.details["window_nll"][np.argsort(full.details["windows"])][chosen],
                               atol=1e-5)


# ------------------------------------------------------------------------------------------
# LAMBADA and multiple choice
# ------------------------------------------------------------------------------------------


def test_lambada_split_follows_lm_eval():
    assert ev.lambada_split("he said hello to Anna") == ("he said hello to", " Anna")
    assert ev.lambada_split("a\nb c\n\nword") == ("a\nb", " c\n\nword")  # split on spaces only
    with pytest.raises(ValueError):
        ev.lambada_split("single")
    with pytest.raises(ValueError):
        ev.lambada_split("ends with space ")


def test_lambada_greedy_on_a_memorised_passage():
    lm, tok, info = load_model("tiny-llama", seed=3)
    passage = "the cat sat on the mat and the dog sat on the rug"
    ids = torch.tensor([ev.encode(tok, passage)])
    module = lm._module
    module.requires_grad_(True)
    opt = torch.optim.Adam(module.parameters(), lr=3e-3)
    for _ in range(150):  # memorise the passage
        opt.zero_grad()
        module(ids, labels=ids).loss.backward()
        opt.step()
    module.requires_grad_(False)
    texts = [passage, passage[: -len("rug")] + "cup"]
    r = ev.lambada_score(lm, info, tok, texts, cache=False)
    order = np.argsort(r.details["items"])
    assert r.details["greedy"][order].tolist() == [True, False]
    assert r.metrics["acc"][0] == 0.5
    # the word perplexity is exp(mean NLL of " rug" / " cup"), computed directly
    nlls = []
    for t in texts:
        ctx, cont = ev.encode_pair(tok, *ev.lambada_split(t))
        nlls.append(-float(direct_logprobs(module, ctx + cont)[len(ctx) - 1 :].sum()))
    assert r.metrics["loss"][0] == pytest.approx(np.mean(nlls), abs=1e-4)
    assert r.metrics["ppl"][0] == pytest.approx(math.exp(np.mean(nlls)), rel=1e-4)


def test_multiple_choice_exact_case_by_hand(tiny_bos):
    lm, tok, info = tiny_bos
    q = ev.Question("Question: which is bigger?\nAnswer:", ("an elephant", "a mouse", "ok"), gold=1)
    r = ev.multiple_choice_score(lm, info, tok, [q], cache=False)
    # by hand: BOS + context bytes, then " " + choice bytes; sum their log-probabilities
    ctx = [info.bos_token_id] + list(tok(q.context, add_special_tokens=False)["input_ids"])
    lls = []
    for choice in q.choices:
        cont = list(tok(" " + choice, add_special_tokens=False)["input_ids"])
        assert len(cont) == len(choice) + 1  # one token per byte
        lls.append(float(direct_logprobs(lm._module, ctx + cont)[len(ctx) - 1 :].sum()))
    lls = np.array(lls)
    pred, pred_norm = int(np.argmax(lls)), int(np.argmax(lls / np.array([11.0, 7.0, 2.0])))
    assert r.details["pred"].tolist() == [pred] and r.details["pred_norm"].tolist() == [pred_norm]
    assert r.metrics["acc"][0] == float(pred == 1) and r.metrics["acc_norm"][0] == float(pred_norm == 1)


def test_multiple_choice_aggregates_questions(tiny):
    lm, tok, info = tiny
    qs = [ev.Question(f"Question: q{i}\nAnswer:", ("yes", "no", "maybe"), i % 3) for i in range(7)]
    r = ev.multiple_choice_score(lm, info, tok, qs, config=CFG, cache=False)
    acc = r.details["acc"].mean()
    assert r.n == 7 and r.metrics["acc"] == pytest.approx((acc, binomial_se(acc, 7)), nan_ok=True)


# ------------------------------------------------------------------------------------------
# Caching, the summary and bad input
# ------------------------------------------------------------------------------------------


def test_cache_keys_follow_the_intervention_tag(tiny, tmp_path, monkeypatch):
    monkeypatch.setenv("RESIDSHIFT_RESULTS", str(tmp_path))
    lm, tok, info = tiny
    qs = [ev.Question(f"Question: q{i}\nAnswer:", ("yes", "no"), i % 2) for i in range(5)]
    run = lambda **kw: ev.multiple_choice_score(lm, info, tok, qs, task="toy", config=CFG, **kw)
    half = lambda m, i: attenuate(m, i, {0: 0.5})
    stored = lambda: sorted(p.name for p in (tmp_path / "eval-toy").glob("*.pt")) if (tmp_path / "eval-toy").exists() else []
    run(intervene=half)  # an intervention without a tag is never cached
    assert stored() == []
    bare = run()
    n_bare = len(stored())
    assert n_bare == 2  # 5 questions in shards of 4
    a = run(intervene=half, cache_tag="alpha0.5@0")
    assert len(stored()) == 2 * n_bare
    run(intervene=lambda m, i: attenuate(m, i, {0: 0.0}), cache_tag="alpha0@0")
    assert len(stored()) == 3 * n_bare
    # the tag IS the key: a different callable under a known tag returns the stored result
    again = run(intervene=lambda m, i: attenuate(m, i, {0: 0.0}), cache_tag="alpha0.5@0")
    np.testing.assert_array_equal(again.details["pred"], a.details["pred"])
    assert ev.model_fingerprint(lm) == ev.model_fingerprint(lm._module)
    assert bare.metrics == run().metrics


def test_evaluate_all_frame(tiny):
    lm, tok, info = tiny
    frame = ev.evaluate_all(lm, info, ["lambada", "piqa", "arc-challenge", "wikitext-2-test"],
                            limits={"lambada": 3, "piqa": 3, "arc-challenge": 2, "wikitext-2-test": 2},
                            config=ev.EvalConfig(context=64, stride=32), cache=False)
    assert list(frame.columns) == ["model", "task", "metric", "value", "se", "n", "intervention"]
    got = {(t, m) for t, m in zip(frame.task, frame.metric)}
    assert {("lambada", "acc"), ("piqa", "acc_norm"), ("arc-challenge", "acc"),
            ("wikitext-2-test", "word_ppl"), ("wikitext-2-test", "bits_per_byte")} <= got
    assert frame.set_index(["task", "metric"]).loc[("arc-challenge", "acc"), "n"] == 2
    assert np.isfinite(frame.value).all() and frame.intervention.isna().all()
    cut = ev.evaluate_all(lm, info, ["piqa"], limits=2, cache=False,
                          intervene=lambda m, i: attenuate(m, i, {0: 0.5}))
    assert (cut.intervention == "intervened (untagged)").all()


def test_bad_input_names_the_fix(tiny):
    lm, tok, info = tiny
    with pytest.raises(KeyError, match="unknown task"):
        ev.run_task(lm, info, "hellaswag")
    with pytest.raises(KeyError, match="unknown task"):
        ev.evaluate_all(lm, info, ["piqa"], limits={"boolq": 3})
    with pytest.raises(ValueError, match="empty"):
        ev.text_perplexity(lm, info, tok, "   ", cache=False)
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="limit"):
            ev.select_items(10, bad, seed=0)
    with pytest.raises(ValueError, match="stride"):
        ev.EvalConfig(context=16, stride=16)
    with pytest.raises(ValueError, match="no passages"):
        ev.lambada_score(lm, info, tok, [], cache=False)
    with pytest.raises(ValueError, match="no questions"):
        ev.multiple_choice_score(lm, info, tok, [], cache=False)
    with pytest.raises(ValueError, match="corpus"):
        ev.wikitext_perplexity(lm, info, tok, "wikitext-5")
    with pytest.raises(ValueError, match="n_ctx"):
        ev.Request((1, 2), 2)


# ------------------------------------------------------------------------------------------
# Real models (slow)
# ------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("name", ["smollm2-135m", "gemma3-270m"])
def test_real_model_scores_are_sane_and_match_nnsight(name):
    lm, tok, info = load_model(name)
    qs = ev.piqa_questions()[:4]
    bare = ev.multiple_choice_score(lm, info, tok, qs, cache=False)
    traced = ev.multiple_choice_score(lm, info, tok, qs, cache=False,
                                      intervene=lambda m, i: attenuate(m, i, {3: 1.0}))
    np.testing.assert_array_equal(bare.details["pred"], traced.details["pred"])
    r = ev.lambada_score(lm, info, tok, ev_lambada_texts()[:40], cache=False)
    assert 0.15 < r.metrics["acc"][0] < 0.8  # random would be ~0; published ~0.3-0.5
    assert r.metrics["ppl"][0] < 200


@pytest.mark.slow
def test_real_model_prefix_reuse_equals_whole_sequences():
    """SmolLM2 on ARC and PIQA items: the shared-context path gives the whole-sequence
    log-likelihoods, bare and with an attenuation inside each trace."""
    lm, tok, info = load_model("smollm2-135m")
    bos_id = info.bos_token_id if info.prepend_bos else None
    reqs = []
    for qs in (ev.arc_questions("arc-challenge")[:2], ev.arc_questions("arc-easy")[:2], ev.piqa_questions()[:2]):
        for q in qs:
            for choice in q.choices:
                ctx, cont = ev.encode_pair(tok, q.context, " " + choice, bos_id=bos_id)
                reqs.append(ev.Request(tuple(ctx + cont), len(ctx)))
    for intervene in (None, lambda m, i: attenuate(m, i, {20: 0.5})):
        whole = ev.score_requests(lm, info, reqs, prefix_reuse=False, intervene=intervene)
        got = ev.score_requests(lm, info, reqs, intervene=intervene, prefix_reuse=True)
        np.testing.assert_allclose(got["logprob"], whole["logprob"], rtol=0, atol=1e-3)
        assert (got["greedy"] == whole["greedy"]).all()
    assert np.abs(got["logprob"] - ev.score_requests(lm, info, reqs)["logprob"]).max() > 1e-2  # the edit acted


def ev_lambada_texts():
    from residshift.core.data import load_corpus

    return load_corpus("lambada", "test")["text"]


def test_task_size_counts_every_item_of_the_task_and_names_the_item_tasks():
    assert ev.task_size("piqa") == len(ev.piqa_questions())
    assert ev.task_size("arc-challenge") == len(ev.arc_questions("arc-challenge")) > 0
    assert ev.task_size("lambada") == len(load_corpus("lambada", "test"))
    assert ev.task_items("piqa")[:3] == ev.piqa_questions()[:3], "the items in the order the task scores them"
    with pytest.raises(KeyError, match="scores windows.*item tasks are lambada, piqa"):
        ev.task_size("wikitext-2-test")
