"""Corpus identity: the corpus bytes a result was computed from are part of what it is (issue 50).

A result computed from a damaged corpus file is not reused once the file is repaired; a file that is
not the reference copy is named (a warning), and refused while the committed figures are written;
``make data`` checks the files it keeps. Real files from the shared corpora, a tiny model."""
import shutil
import warnings

import pytest

from residshift.core import cache, data, paths
from residshift.core.models import load_model
from residshift.study import tour
from residshift.tools import fetch

VALID = "wikitext-2/wiki.valid.tokens"
SHARED = data.data_root()  # the reference corpora this checkout reads


@pytest.fixture
def corpora(tmp_path, monkeypatch):
    """A data folder holding the reference WikiText-2 validation file (copied from the shared corpora)."""
    if SHARED is None or not (SHARED / VALID).is_file():
        pytest.skip("needs the shared corpora (RESIDSHIFT_DATA)")
    root = tmp_path / "data"
    (root / "wikitext-2").mkdir(parents=True)
    shutil.copy(SHARED / VALID, root / VALID)
    monkeypatch.setenv("RESIDSHIFT_DATA", str(root))
    monkeypatch.setenv("RESIDSHIFT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("RESIDSHIFT_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return root


def _truncate(path, size=300_000):
    full = path.read_bytes()
    path.write_bytes(full[:size])
    return full


def _ppl(loaded):
    return tour.sample_perplexity(loaded, corpus="wikitext-2", split="validation", window=32, n=8)["ppl"]


def test_a_result_from_a_damaged_corpus_is_not_reused_after_the_repair(corpora):
    loaded = load_model("tiny-llama")
    good = _ppl(loaded)
    full = _truncate(corpora / VALID)
    with pytest.warns(data.CorpusMismatchWarning, match="wiki.valid.tokens is not the reference copy"):
        with pytest.warns(cache.StaleResultWarning, match="wikitext-2/validation had sha256"):
            damaged = _ppl(loaded)
    assert damaged != good  # computed again from the bytes the file holds now
    (corpora / VALID).write_bytes(full)  # repaired
    with pytest.warns(cache.StaleResultWarning):
        assert _ppl(loaded) == good
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _ppl(loaded) == good  # and now reused without a word
    entry = next((corpora.parent / "results" / "sample-perplexity").glob("*.json"))
    assert cache._corpora_read(entry) == {"wikitext-2/validation": data.REFERENCE_SHA256[VALID]}


def _nested():  # the code of the two entries below
    return None


def test_a_result_read_through_another_cached_result_carries_its_corpora(corpora):
    def inner():
        return cache.cached("inner", {"n": 1}, lambda: len(data.corpus_text("wikitext-2", "validation")), code=_nested)

    def outer():
        return cache.cached("outer", {"n": 1}, lambda: inner() + 1, code=_nested)

    n = inner()  # stored first: the outer computation gets it from the cache, without reading the corpus
    assert outer() == n + 1
    sidecar = next((corpora.parent / "results" / "outer").glob("*.json"))
    assert cache._corpora_read(sidecar.with_suffix(".pt")) == {"wikitext-2/validation": data.REFERENCE_SHA256[VALID]}
    _truncate(corpora / VALID)
    with pytest.warns(data.CorpusMismatchWarning), pytest.warns(cache.StaleResultWarning):
        assert outer() < n + 1  # both computed again from the shorter file


def test_an_entry_that_does_not_list_its_corpora_is_computed_again(tmp_path, monkeypatch):
    monkeypatch.setenv("RESIDSHIFT_RESULTS", str(tmp_path))
    calls = []
    compute = lambda: calls.append(1) or 7
    assert cache.cached("old", {"n": 1}, compute, code=test_an_entry_that_does_not_list_its_corpora_is_computed_again) == 7
    sidecar = next((tmp_path / "old").glob("*.json"))
    sidecar.write_text(sidecar.read_text().replace('"corpora"', '"not-corpora"'))  # as older versions wrote it
    with pytest.warns(cache.StaleResultWarning, match="does not list the corpora it read"):
        cache.cached("old", {"n": 1}, compute, code=test_an_entry_that_does_not_list_its_corpora_is_computed_again)
    assert len(calls) == 2


def test_the_committed_figures_are_never_written_from_another_copy(corpora, monkeypatch):
    _truncate(corpora / VALID)
    monkeypatch.setenv("RESIDSHIFT_FIGURES", str(paths.COMMITTED_FIGURES))  # as the runner's default run sets it
    with pytest.raises(data.CorpusMismatchError, match=r"not the reference copy .*make data DATA_ARGS=--force"):
        data.corpus_text("wikitext-2", "validation")


def test_make_data_checks_the_files_it_keeps(corpora, capsys):
    lambada = "lambada/lambada_test.jsonl"
    (corpora / "lambada").mkdir()
    shutil.copy(SHARED / lambada, corpora / lambada)
    assert fetch.main_data(["--dest", str(corpora), "--only", "lambada"]) == 0  # offline: nothing to download
    assert "the reference copy" in capsys.readouterr().out
    _truncate(corpora / lambada, 1000)
    assert fetch.main_data(["--dest", str(corpora), "--only", "lambada"]) == 1
    out = capsys.readouterr()
    assert "NOT the reference copy" in out.out
    assert len(out.err.strip().splitlines()) == 1 and lambada in out.err and "DATA_ARGS=--force" in out.err


def test_benchmark_items_with_other_text_are_another_result(tmp_path, monkeypatch):
    """LAMBADA passages and multiple-choice questions are scored from lists handed in: their bytes are
    in the key, so one changed passage or answer is never answered from the cache."""
    from residshift.measure import evaluate as E

    monkeypatch.setenv("RESIDSHIFT_RESULTS", str(tmp_path))
    model = load_model("tiny-llama")
    lm, tok, info = model
    texts = ["the cat sat on the mat", "a dog ran in the park"]
    E.lambada_score(lm, info, tok, texts)
    E.lambada_score(lm, info, tok, [texts[0], "a dog ran in the yard"])
    assert len(list((tmp_path / "eval-lambada").glob("*.pt"))) == 2  # before: one entry, reused
    q = [E.Question("Question: sky?\nAnswer:", ("blue", "green"), 0)]
    E.multiple_choice_score(lm, info, tok, q)
    E.multiple_choice_score(lm, info, tok, [E.Question(q[0].context, ("blue", "red"), 0)])
    assert len(list((tmp_path / "eval-multiple-choice").glob("*.pt"))) == 2


def test_a_training_run_on_other_corpus_bytes_is_another_run(corpora):
    from residshift.core.models import byte_tokenizer
    from residshift.train.trainer import TrainConfig

    cfg, tok = TrainConfig(corpus="wikitext-2", split="validation"), byte_tokenizer()
    key = cfg.key(tok)
    _truncate(corpora / VALID)
    assert cfg.key(tok) != key  # before: the same run folder, resumed or reused
