"""Perplexity per document in lm-eval's definition (evaluate.document_perplexity): the article split,
the rolling windows, the word count, a brute-force check on a tiny model, a trained-GPT run folder,
bad input, and, where lm-eval is installed (.venv-lmeval), its own functions on the same input."""
import math
import re

import numpy as np
import pytest
import torch

from residshift.core.data import local_file
from residshift.core.models import byte_tokenizer, load_model
from residshift.measure import evaluate as ev

needs_wikitext = pytest.mark.skipif(
    local_file("wikitext-2", "test") is None or local_file("wikitext-2", "validation") is None,
    reason="the local WikiText-2 files are not found (set RESIDSHIFT_DATA)")


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny-llama")


def _pages(n=3, words=40, seed=0):
    rng = np.random.default_rng(seed)
    vocab = ["the", "cat", "sat", "on", "a", "mat", "@-@", ",", ".", "<unk>", "(", ")", "well"]
    return [f" = Title {k} = \n \n " + " ".join(rng.choice(vocab, words + 7 * k)) + " \n " for k in range(n)]


def _lm_eval_windows(tokens, prefix, max_seq_len):
    """lm-eval 0.4.13's get_rolling_token_windows(context_len=1) + make_disjoint_window, restated
    from its source (lm_eval/utils.py) as the reference the windows are checked against."""
    pred_len = max_seq_len
    first = min(max_seq_len, len(tokens))
    out = [([prefix] + tokens[: first - 1], tokens[:first])]
    done = first
    while done < len(tokens):
        take = min(len(tokens) - done, pred_len)
        end = done + take
        out.append((tokens[end - max_seq_len - 1 : end - 1], tokens[end - take : end]))
        done += take
    return [(a[: len(a) - (len(b) - 1)], b) for a, b in out]


# ------------------------------------------------------------------------------------------
# Articles, words, detokenization
# ------------------------------------------------------------------------------------------


def test_pages_start_at_top_level_headings_only():
    lines = [" ", " = A = ", " ", " text a ", " = = Sub = = ", " more ", " = = = Deeper = = = ", " = B = ",
             " text b ", ""]
    pages = ev.wikitext_pages(lines)
    assert pages == [" = A = \n \n text a \n = = Sub = = \n more \n = = = Deeper = = = ",
                     " = B = \n text b \n"]
    assert ev.wikitext_pages([" x ", " = A = ", " y", ""])[0] == " x "  # text before the first heading kept
    with pytest.raises(TypeError):
        ev.wikitext_pages("one string")


@needs_wikitext
def test_wikitext_2_has_62_test_and_60_validation_articles():
    """The counts of EleutherAI/wikitext_document_level (wikitext-2-raw-v1): test 62, validation 60."""
    test = ev.wikitext_documents("wikitext-2", "test")
    assert len(test) == 62 and len(ev.wikitext_documents("wikitext-2", "validation")) == 60
    assert test[0].startswith(" = Robert <unk> = \n")
    # the pages are the file, cut: joined back (after its blank first line) they give it byte for byte
    assert " \n" + "\n".join(test) == local_file("wikitext-2", "test").read_text(encoding="utf-8")
    # lm-eval's word count over the pages: the file's whitespace words plus one "" per page edge
    assert sum(ev.page_words(p) for p in test) == 241335


def test_page_words_is_lm_eval_regex_count():
    page = " = A = \n \n The cat @-@ sat . \n"
    assert ev.page_words(page) == len(re.split(r"\s+", page)) == 10  # '' ... '' at both edges
    assert ev.page_words("a b") == 2


def test_lm_eval_detokenizer_rules():
    assert ev.lm_eval_detokenize(" = A = \n the cat @-@ like ( big ) , 1 @,@ 000 's \n") == \
        " = A =\nthe cat-like (big), 1,000's\n"  # the leading space stays, as in lm-eval


# ------------------------------------------------------------------------------------------
# Windows
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n,max_length", [(1, 2), (5, 2), (7, 3), (10, 10), (11, 10), (25, 10), (40, 7)])
def test_document_windows_are_lm_eval_windows(n, max_length):
    tokens = list(range(100, 100 + n))
    reqs = ev.document_requests(tokens, max_length, prefix_id=7)
    want = _lm_eval_windows(tokens, 7, max_length)
    assert [(list(r.tokens[: r.n_ctx]), list(r.tokens[r.n_ctx:])) for r in reqs] == want
    scored = [t for r in reqs for t in r.tokens[r.n_ctx:]]
    assert scored == tokens  # every token exactly once, in order
    for k, r in enumerate(reqs):
        assert len(r.tokens) - 1 <= max_length  # one forward of at most max_length inputs
        if k == 0:
            assert r.tokens[0] == 7 and r.n_ctx == 1  # the first token given the prefix only
        else:  # the token before the window (and more for a short last window)
            assert r.n_ctx == max_length + 1 - (len(r.tokens) - r.n_ctx) and 7 not in r.tokens


def test_lm_eval_rolling_windows_when_installed():
    utils = pytest.importorskip("lm_eval.utils")
    for n, L in [(1, 2), (25, 10), (40, 7), (64, 16)]:
        tokens = list(range(n))
        theirs = [utils.make_disjoint_window(w) for w in
                  utils.get_rolling_token_windows(token_list=tokens, prefix_token=-1, max_seq_len=L, context_len=1)]
        ours = [(list(r.tokens[: r.n_ctx]), list(r.tokens[r.n_ctx:])) for r in ev.document_requests(tokens, L, -1)]
        assert ours == [(list(a), list(b)) for a, b in theirs]


# ------------------------------------------------------------------------------------------
# Scores
# ------------------------------------------------------------------------------------------


def _brute_force(module, tok, page, max_length, prefix):
    """Sum log p over a page: each lm-eval window run alone through the bare module."""
    tokens = ev.encode(tok, ev.lm_eval_detokenize(page))
    total = 0.0
    for ctx, cont in _lm_eval_windows(tokens, prefix, max_length):
        seq = ctx + cont
        with torch.no_grad():
            logits = module(torch.tensor([seq[:-1]])).logits[0].float()
        lp = torch.log_softmax(logits, -1)[torch.arange(len(ctx) - 1, len(seq) - 1), torch.tensor(cont)]
        total += float(lp.sum())
    return total, len(tokens)


@pytest.mark.parametrize("max_length", [8, 33])
def test_document_perplexity_equals_brute_force(tiny, max_length):
    lm, tok, info = tiny
    pages = _pages()
    r = ev.document_perplexity(lm, info, tok, pages, max_length=max_length,
                               config=ev.EvalConfig(batch_size=3, max_batch_tokens=64), cache=False)
    prefix = tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id
    assert r.config["max_length"] == max_length and r.config["prefix_token_id"] == prefix
    ll_sum = words = nbytes = tokens = 0
    for k, i in enumerate(r.details["documents"]):
        ll, n = _brute_force(lm._module, tok, pages[i], max_length, prefix)
        assert -r.details["doc_nll"][k] == pytest.approx(ll, abs=1e-4)
        assert r.details["doc_tokens"][k] == n
        assert r.details["doc_words"][k] == len(re.split(r"\s+", pages[i]))
        assert r.details["doc_bytes"][k] == len(pages[i].encode("utf-8"))
        ll_sum, words, nbytes, tokens = ll_sum + ll, words + r.details["doc_words"][k], \
            nbytes + r.details["doc_bytes"][k], tokens + n
    assert r.details["doc_windows"].sum() > len(pages)  # the pages span several windows
    m = r.metrics
    assert m["word_perplexity"][0] == pytest.approx(math.exp(-ll_sum / words), rel=1e-5)
    assert m["byte_perplexity"][0] == pytest.approx(math.exp(-ll_sum / nbytes), rel=1e-5)
    assert m["bits_per_byte"][0] == pytest.approx(-ll_sum / nbytes / math.log(2), rel=1e-5)
    assert m["ppl"][0] == pytest.approx(math.exp(-ll_sum / tokens), rel=1e-5)


def test_max_length_moves_the_word_perplexity_and_limit_subsamples(tiny):
    lm, tok, info = tiny
    pages = _pages(4)
    cfg = ev.EvalConfig(batch_size=4)
    short = ev.document_perplexity(lm, info, tok, pages, max_length=4, config=cfg, cache=False)
    long = ev.document_perplexity(lm, info, tok, pages, max_length=64, config=cfg, cache=False)
    assert short.metrics["word_perplexity"][0] != pytest.approx(long.metrics["word_perplexity"][0], rel=1e-3)
    assert long.config["max_length"] == 64 and short.config["max_length"] == 4
    part = ev.document_perplexity(lm, info, tok, pages, max_length=64, limit=2, config=cfg, cache=False)
    assert part.n == 2 and list(part.details["documents"]) == list(ev.select_items(4, 2, 0))
    d = dict(zip(long.details["documents"], long.details["doc_nll"]))
    for i, nll in zip(part.details["documents"], part.details["doc_nll"]):
        assert nll == pytest.approx(d[i], abs=1e-5)  # a document's score does not depend on the others


def test_cached_document_scores_are_reused(tiny, tmp_path, monkeypatch):
    lm, tok, info = tiny
    monkeypatch.setenv("RESIDSHIFT_CACHE", str(tmp_path))
    pages = _pages(2)
    a = ev.document_perplexity(lm, info, tok, pages, max_length=16)
    b = ev.document_perplexity(lm, info, tok, pages, max_length=16)
    np.testing.assert_array_equal(a.details["doc_nll"], b.details["doc_nll"])
    c = ev.document_perplexity(lm, info, tok, pages, max_length=12)
    assert not np.allclose(a.details["doc_nll"], c.details["doc_nll"])


def test_bad_input_names_the_problem(tiny):
    lm, tok, info = tiny
    for bad in (1, 0, -3, 2.5, True):
        with pytest.raises(ValueError, match="max_length"):
            ev.document_perplexity(lm, info, tok, _pages(1), max_length=bad, cache=False)
    with pytest.raises(ValueError, match="exceeds the model's"):
        ev.document_perplexity(lm, info, tok, _pages(1), max_length=10**6, cache=False)
    with pytest.raises(ValueError, match="document 1 is empty"):
        ev.document_perplexity(lm, info, tok, [_pages(1)[0], " \n "], max_length=8, cache=False)
    with pytest.raises(ValueError, match="no documents"):
        ev.document_perplexity(lm, info, tok, [], max_length=8, cache=False)
    with pytest.raises(ValueError, match="no tokens"):
        ev.document_windows(0, 8)


# ------------------------------------------------------------------------------------------
# Both definitions, on a trained GPT's run folder
# ------------------------------------------------------------------------------------------


@needs_wikitext
def test_run_perplexities_reads_a_gpt_run_folder(tmp_path, monkeypatch):
    from residshift.core.models.gpt import GPT, GPTConfig

    monkeypatch.setenv("RESIDSHIFT_CACHE", str(tmp_path / "cache"))
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=2, n_head=2, n_embd=16, block_size=32, vocab_size=259)).eval()
    (tmp_path / "run" / "model").mkdir(parents=True)
    model.save_pretrained(tmp_path / "run" / "model")
    byte_tokenizer().save_pretrained(tmp_path / "run" / "model")
    out = ev.run_perplexities(tmp_path / "run", split="validation", window_limit=2, doc_limit=1)
    assert out["run"] == "run" and out["doc_max_length"] == 32 and out["sliding_context"] == 32
    assert out["documents"] == 1 and out["documents_total"] == 60 and out["sliding_windows"] == 2
    for key in ("sliding_ppl", "sliding_word_ppl", "doc_ppl", "doc_word_ppl", "doc_byte_ppl"):
        assert math.isfinite(out[key]) and out[key] > 1  # a random byte model: near-uniform
    assert out["doc_ppl"] == pytest.approx(259, rel=0.5)


# ------------------------------------------------------------------------------------------
# lm-eval itself (in .venv-lmeval): its detokenizer and its HFLM on one small document
# ------------------------------------------------------------------------------------------


@needs_wikitext
def test_detokenizer_is_lm_eval_on_every_test_article():
    pre = pytest.importorskip("lm_eval.tasks.wikitext.preprocess_wikitext")
    for page in ev.wikitext_documents("wikitext-2", "test"):
        assert ev.lm_eval_detokenize(page) == pre.wikitext_detokenizer({"page": page})
        mine = ev.page_words(page), len(page.encode("utf-8"))
        theirs = pre.process_results({"page": page}, [-1.0])
        assert (theirs["word_perplexity"][1], theirs["byte_perplexity"][1]) == mine


def test_one_document_item_by_item_against_lm_eval(tmp_path, tiny):
    pytest.importorskip("lm_eval")
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM

    lm, tok, info = tiny
    lm._module.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    page = _pages(1, words=60)[0]
    text = ev.lm_eval_detokenize(page)
    hflm = HFLM(pretrained=str(tmp_path), dtype="float32", device="cpu", batch_size=2, max_length=16,
                add_bos_token=False)
    assert hflm.tok_encode(text) == ev.encode(tok, text)
    (theirs,) = hflm.loglikelihood_rolling(
        [Instance(request_type="loglikelihood_rolling", doc={}, arguments=(text,), idx=0)], disable_tqdm=True)
    ours = ev.document_perplexity(lm, info, tok, [page], max_length=16, cache=False)
    assert ours.details["doc_windows"][0] > 3
    assert -ours.details["doc_nll"][0] == pytest.approx(theirs, abs=1e-4)


def test_unk_handling_tells_a_special_unk_from_text():
    """Gemma-style tokenizers map the literal '<unk>' to one special id under default tokenization (what
    lm-eval's task does); a byte-level tokenizer without such a token reads it as text."""
    from transformers import PreTrainedTokenizerFast

    from residshift.core.models import byte_tokenizer

    pages = ["a <unk> b <unk>", "c <unk>"]
    assert ev.unk_handling(byte_tokenizer(), pages) == {"doc_unk": 3, "doc_unk_special": False}
    tok = byte_tokenizer()
    with_unk = PreTrainedTokenizerFast(tokenizer_object=tok.backend_tokenizer, unk_token="<unk>",
                                       bos_token="<bos>", eos_token="<eos>", pad_token="<pad>")
    with_unk.add_special_tokens({"additional_special_tokens": ["<unk>"]})
    assert ev.unk_handling(with_unk, pages) == {"doc_unk": 3, "doc_unk_special": True}
    assert ev.unk_handling(with_unk, ["no placeholder"]) == {"doc_unk": 0, "doc_unk_special": True}
