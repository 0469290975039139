import json

import numpy as np
import pytest
import torch

from residshift.core import data
from residshift.core.models import byte_tokenizer


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    """A small data folder in the documented layout."""
    (tmp_path / "wikitext-2").mkdir()
    lines = [" \n", " = Title = \n", " \n", " The cat 's hat , 1 @,@ 000 well @-@ known ( big ) . \n",
             " Another line with <unk> words . \n"]
    (tmp_path / "wikitext-2" / "wiki.valid.tokens").write_text("".join(lines))
    (tmp_path / "piqa").mkdir()
    rows = [{"goal": "g1", "sol1": "a", "sol2": "b"}, {"goal": "g2", "sol1": "c", "sol2": "d"}]
    (tmp_path / "piqa" / "valid.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "piqa" / "valid-labels.lst").write_text("1\n0\n")
    (tmp_path / "arc").mkdir()
    arc = {"query": "Question: why?", "choices": ["a", "b", "c"], "gold": 2}
    (tmp_path / "arc" / "arc_easy_test.jsonl").write_text(json.dumps(arc) + "\n")
    (tmp_path / "lambada").mkdir()
    (tmp_path / "lambada" / "lambada_test.jsonl").write_text(json.dumps({"text": "a b c"}) + "\n")
    monkeypatch.setenv("RESIDSHIFT_DATA", str(tmp_path))
    monkeypatch.setenv("RESIDSHIFT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return tmp_path


def test_text_corpus_through_datasets(data_dir):
    ds = data.load_corpus("wikitext-2", "validation")
    assert len(ds) == 5 and ds[3]["text"].startswith(" The cat")
    text = data.corpus_text("wikitext-2", "validation")
    assert "The cat's hat, 1,000 well-known (big)." in text
    assert "<unk>" in text
    raw = data.corpus_text("wikitext-2", "validation", detokenize=False)
    assert "@-@" in raw


def test_piqa_gets_its_labels_and_arc_its_schema(data_dir):
    piqa = data.load_corpus("piqa")
    assert piqa["label"] == [1, 0] and piqa[0]["goal"] == "g1"
    arc = data.load_corpus("arc-easy", "test")
    assert arc[0]["gold"] == 2 and arc[0]["choices"] == ["a", "b", "c"]
    assert data.load_corpus("lambada")[0]["text"] == "a b c"


def test_missing_file_offline_says_where_to_put_it(data_dir):
    with pytest.raises(data.DataNotFoundError) as err:
        data.load_corpus("wikitext-103", "validation")
    text = str(err.value)
    assert str(data_dir / "wikitext-103" / "wiki.valid.tokens") in text
    assert "data/README.md" in text and "HF_HUB_OFFLINE" in text


def test_piqa_label_count_mismatch_is_an_error(data_dir):
    (data_dir / "piqa" / "valid-labels.lst").write_text("1\n")
    with pytest.raises(ValueError, match="labels"):
        data.load_corpus("piqa")


def test_unknown_corpus_and_split():
    with pytest.raises(KeyError, match="wikitext-103"):
        data.get_corpus("wikitext-3")
    with pytest.raises(ValueError, match="train"):
        data.load_corpus("wikitext-103", "train")
    with pytest.raises(ValueError, match="several splits"):
        data.load_corpus("wikitext-2")


@pytest.mark.parametrize("raw,clean", [
    (" = Valkyria Chronicles III = ", "= Valkyria Chronicles III ="),
    (" It was 1 @.@ 5 m long , and well @-@ known . ", "It was 1.5 m long, and well-known."),
    (" He did n't go ( at all ) ; she 's here ! ", "He didn't go (at all); she's here!"),
    (' He said " hello there " . ', 'He said "hello there".'),
])
def test_detokenize_wikitext(raw, clean):
    assert data.detokenize_wikitext(raw) == clean


def test_cut_windows_shapes_bos_and_determinism():
    stream = np.arange(1000, dtype=np.int32)
    w = data.cut_windows(stream, length=10, n=5, seed=0, bos_id=999)
    assert w.shape == (5, 10) and w.dtype == torch.long
    assert (w[:, 0] == 999).all()
    body = w[:, 1:]
    assert (body[:, 1:] - body[:, :-1] == 1).all(), "windows are contiguous runs of the stream"
    assert len({int(r[0]) for r in body}) == 5 and all(int(r[0]) % 9 == 0 for r in body)
    again = data.cut_windows(stream, length=10, n=5, seed=0, bos_id=999)
    assert torch.equal(w, again)
    more = data.cut_windows(stream, length=10, n=8, seed=0, bos_id=999)
    assert torch.equal(more[:5], w), "the first k windows do not depend on n"
    other = data.cut_windows(stream, length=10, n=5, seed=1, bos_id=999)
    assert not torch.equal(w, other)
    assert data.cut_windows(stream, length=10, seed=0).shape == (100, 10)


@pytest.mark.parametrize("kwargs,match", [
    (dict(length=1, n=1), "at least 2"),
    (dict(length=10, n=101), "room for 100"),
    (dict(length=2000, n=1), "fewer than one window"),
])
def test_cut_windows_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        data.cut_windows(np.arange(1000), **kwargs)


def test_tokenize_text_is_cached(data_dir):
    tok = byte_tokenizer()
    ids = data.tokenize_text("hello\nworld", tok)
    assert tok.decode(ids.tolist()) == "hello\nworld"

    class Refuse:
        backend_tokenizer = tok.backend_tokenizer

        def __call__(self, *a, **k):
            raise AssertionError("should have been read from the cache")

    assert np.array_equal(data.tokenize_text("hello\nworld", Refuse()), ids)
    with pytest.raises(ValueError, match="empty"):
        data.tokenize_text("", tok)


def test_token_windows_follow_the_models_bos(data_dir):
    tok = byte_tokenizer()
    w = data.token_windows("wikitext-2", "validation", tok, length=16, n=3, seed=0, prepend_bos=True)
    assert w.shape == (3, 16) and (w[:, 0] == tok.bos_token_id).all()
    w2 = data.token_windows("wikitext-2", "validation", tok, length=16, n=3, seed=0)
    assert (w2 != tok.bos_token_id).all()


def test_shared_corpora_are_found_when_present():
    root = data.data_root()
    if root is None or not (root / "wikitext-103" / "wiki.valid.tokens").is_file():
        pytest.skip("the shared data folder is not beside this checkout")
    stats = data.corpus_stats("wikitext-103", "validation")
    assert stats["rows"] == 3760 and stats["words"] == 213886  # published WikiText-103 valid size


# The hub copies: datasets>=4 runs no loading scripts, so script datasets (PIQA, tiny-shakespeare)
# are read from the hub's Parquet export. These are the exact load_dataset arguments, checked
# without the network: a stand-in records what load_corpus passes.
HUB_ARGUMENTS = {
    ("wikitext-2", "train"): {"path": "Salesforce/wikitext", "name": "wikitext-2-v1", "split": "train"},
    ("wikitext-2", "validation"): {"path": "Salesforce/wikitext", "name": "wikitext-2-v1", "split": "validation"},
    ("wikitext-2", "test"): {"path": "Salesforce/wikitext", "name": "wikitext-2-v1", "split": "test"},
    ("wikitext-103", "validation"): {"path": "Salesforce/wikitext", "name": "wikitext-103-v1", "split": "validation"},
    ("wikitext-103", "test"): {"path": "Salesforce/wikitext", "name": "wikitext-103-v1", "split": "test"},
    ("lambada", "test"): {"path": "EleutherAI/lambada_openai", "name": "default", "split": "test"},
    ("tiny-shakespeare", "train"): {"path": "karpathy/tiny_shakespeare", "name": None,
                                    "split": "train+validation+test", "revision": "refs/convert/parquet"},
    ("piqa", "validation"): {"path": "ybisk/piqa", "name": None, "split": "validation",
                             "revision": "refs/convert/parquet"},
    ("arc-easy", "test"): {"path": "allenai/ai2_arc", "name": "ARC-Easy", "split": "test"},
    ("arc-challenge", "test"): {"path": "allenai/ai2_arc", "name": "ARC-Challenge", "split": "test"},
}


def _hub_copy(path):
    import datasets

    if path == "ybisk/piqa":
        return datasets.Dataset.from_dict({"goal": ["g"], "sol1": ["a"], "sol2": ["b"], "label": [1]})
    if path == "allenai/ai2_arc":
        return datasets.Dataset.from_dict({"id": ["i"], "question": ["Why?"], "answerKey": ["B"],
                                           "choices": [{"text": ["x", "y"], "label": ["A", "B"]}]})
    if path == "karpathy/tiny_shakespeare":  # train, validation, test in order: one row each
        return datasets.Dataset.from_dict({"text": ["First Citizen:\nBefore", " we proceed\n", "Speak.\n"]})
    return datasets.Dataset.from_dict({"text": ["", " = Title = \n", " a b \n"]})


def test_each_loader_passes_a_loadable_hub_source(tmp_path, monkeypatch):
    import datasets

    calls = []

    def load_dataset(*args, **kwargs):
        assert not args, "the hub arguments go by keyword"
        calls.append({k: v for k, v in kwargs.items() if k != "cache_dir"})
        return _hub_copy(kwargs["path"])

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    monkeypatch.setenv("RESIDSHIFT_DATA", str(tmp_path / "empty"))  # no local file: the hub it is
    monkeypatch.setenv("RESIDSHIFT_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    assert {(n, s) for n, c in data.CORPORA.items() for s in c.splits} == set(HUB_ARGUMENTS)
    for (name, split), expected in HUB_ARGUMENTS.items():
        calls.clear()
        ds = data.load_corpus(name, split)
        assert calls == [expected], name
        assert data.hub_arguments(name, split) == expected
        if name.startswith("wikitext"):  # normalised to the local rows: no "\n", blank lines " "
            assert ds["text"] == [" ", " = Title = ", " a b "]
    # the hub copies come in the local files' schema
    assert data.load_corpus("tiny-shakespeare")["text"] == ["First Citizen:", "Before we proceed", "Speak."]
    assert data.load_corpus("arc-easy")[0] == {"query": "Question: Why?", "choices": ["x", "y"], "gold": 1}
    assert data.load_corpus("piqa")["label"] == [1]
