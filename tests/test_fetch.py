"""``make data`` (residshift.tools.fetch) with a stand-in for the hub: the files it writes, their
checksums, what it keeps, and the one-line errors offline and on a hub failure. No network."""
import hashlib
import json

import datasets
import pytest

from residshift.core import data as D
from residshift.tools import fetch as F

# Raw hub rows, shaped as the hub's copies are (WikiText lines keep "\n", blank lines are "").
HUB = {
    "Salesforce/wikitext": {"text": ["", " = Title = \n", "", " A line with <unk> . \n"]},
    "EleutherAI/lambada_openai": {"text": ["a b c", "d “e” f"]},
    "karpathy/tiny_shakespeare": {"text": ["First Citizen:\nBefore we", " proceed", " any further.\n"]},
}
PIQA = [{"goal": "g1", "sol1": "a ", "sol2": "b", "label": 1}, {"goal": "g2", "sol1": "c", "sol2": "d", "label": 0}]
ARC = [{"id": "x", "question": "Why 15°C?", "choices": {"text": ["p", "q", "r"], "label": ["A", "B", "C"]},
        "answerKey": "C"}]


@pytest.fixture
def hub(monkeypatch):
    """A fake ``datasets.load_dataset`` for the hub: records its keyword arguments."""
    calls = []

    def load(**kw):
        calls.append(kw)
        if kw["path"] == "ybisk/piqa":
            return datasets.Dataset.from_list(PIQA)
        if kw["path"] == "allenai/ai2_arc":
            return datasets.Dataset.from_list(ARC)
        return datasets.Dataset.from_dict(HUB[kw["path"]])

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    return load, calls


def _sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_fetch_writes_every_file_in_the_loaders_layout_and_prints_its_sha256(hub, tmp_path, monkeypatch):
    load, calls = hub
    lines = []
    got = F.fetch_corpora(tmp_path, load=load, log=lines.append)
    expected = sorted(set(F.REFERENCE_SHA256))
    assert sorted(got) == expected  # the 11 files of data/README.md's layout
    for rel, digest in got.items():
        assert _sha(tmp_path / rel) == digest
        assert any(line.startswith(digest) and str(tmp_path / rel) in line for line in lines), rel
    # the hub arguments are the loaders' own
    assert [c for c in calls if c["path"] == "ybisk/piqa"] == [D.hub_arguments("piqa", "validation")]
    assert calls == [D.hub_arguments(n, s) for n, c in D.CORPORA.items() for s in c.splits]
    # the formats the loaders read
    assert (tmp_path / "wikitext-2/wiki.valid.tokens").read_text() == " \n = Title = \n \n A line with <unk> . \n"
    assert (tmp_path / "tinyshakespeare/input.txt").read_text() == "First Citizen:\nBefore we proceed any further.\n"
    assert (tmp_path / "lambada/lambada_test.jsonl").read_text().splitlines()[1] == json.dumps({"text": "d “e” f"})
    assert (tmp_path / "piqa/valid-labels.lst").read_text() == "1\n0\n"
    assert json.loads((tmp_path / "piqa/valid.jsonl").read_text().splitlines()[0]) == \
        {"goal": "g1", "sol1": "a ", "sol2": "b"}
    assert (tmp_path / "arc/arc_easy_test.jsonl").read_text() == \
        '{"choices": ["p", "q", "r"], "query": "Question: Why 15°C?", "gold": 2}\n'
    assert not list(tmp_path.rglob(".*.tmp")), "no temporary file is left behind"
    # and the loaders read them
    monkeypatch.setenv("RESIDSHIFT_DATA", str(tmp_path))
    monkeypatch.setenv("RESIDSHIFT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert D.load_corpus("piqa")["label"] == [1, 0]
    assert D.load_corpus("arc-challenge")[0]["gold"] == 2
    assert D.load_corpus("tiny-shakespeare")["text"] == ["First Citizen:", "Before we proceed any further."]


def test_a_file_equal_to_the_reference_says_so(hub, tmp_path, monkeypatch):
    load, _ = hub
    blob = F.render_files("lambada", "test", load(**D.hub_arguments("lambada", "test")))["lambada/lambada_test.jsonl"]
    monkeypatch.setitem(F.REFERENCE_SHA256, "lambada/lambada_test.jsonl", hashlib.sha256(blob).hexdigest())
    lines = []
    F.fetch_corpora(tmp_path, ["lambada", "piqa"], load=load, log=lines.append)
    assert "matches the reference copy" in lines[0]
    assert all("differs from the reference copy" in line for line in lines[1:]) and len(lines) == 3


def test_existing_files_are_kept_unless_forced(hub, tmp_path):
    load, calls = hub
    F.fetch_corpora(tmp_path, ["lambada"], load=load, log=lambda *a: None)
    target = tmp_path / "lambada/lambada_test.jsonl"
    target.write_text('{"text": "mine"}\n')
    lines = []
    got = F.fetch_corpora(tmp_path, ["lambada"], load=load, log=lines.append)
    assert len(calls) == 1 and "kept" in lines[0] and got["lambada/lambada_test.jsonl"] == _sha(target)
    F.fetch_corpora(tmp_path, ["lambada"], force=True, load=load, log=lambda *a: None)
    assert len(calls) == 2 and "mine" not in target.read_text()


def test_offline_is_one_clear_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(F.FetchError, match="HF_HUB_OFFLINE"):
        F.fetch_corpora(tmp_path, load=lambda **kw: pytest.fail("must not reach the hub"))
    assert F.main_data(["--dest", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "unset HF_HUB_OFFLINE" in err and "data/README.md" in err
    assert not any(tmp_path.iterdir())


def test_no_network_is_one_clear_line(tmp_path, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)

    def unreachable(**kw):
        raise ConnectionError("Couldn't reach 'Salesforce/wikitext' on the Hub (ConnectError)\nmore detail")

    with pytest.raises(F.FetchError) as err:
        F.fetch_corpora(tmp_path, ["wikitext-103"], load=unreachable)
    assert "\n" not in str(err.value) and "connect to the network" in str(err.value)


def test_a_hub_failure_names_the_source(tmp_path, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)

    def script(**kw):
        raise RuntimeError("Dataset scripts are no longer supported, but found piqa.py")

    with pytest.raises(F.FetchError, match=r"piqa \(validation\).*ybisk/piqa.*scripts are no longer"):
        F.fetch_corpora(tmp_path, ["piqa"], load=script)


def test_unknown_corpus_is_a_usage_error(capsys):
    assert F.main_data(["--only", "wikitext-3"]) == 2
    assert "wikitext-103" in capsys.readouterr().err
