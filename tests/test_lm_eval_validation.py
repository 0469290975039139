"""benchmarks/validate_lm_eval.py: the data conversion, the item alignment and the agreement
computation (no lm-eval needed), and, where lm-eval is installed (.venv-lmeval), that its own task
configs read the staged local files into exactly our prompts, choices and gold answers."""
import importlib.util
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from residshift.core.data import local_file

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("validate_lm_eval", ROOT / "benchmarks" / "validate_lm_eval.py")
V = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = V  # dataclasses look their module up there
_spec.loader.exec_module(V)

needs_data = pytest.mark.skipif(
    any(local_file(*x) is None for x in [("piqa", "validation"), ("arc-easy", "test"),
                                         ("arc-challenge", "test"), ("lambada", "test")]),
    reason="the local PIQA / ARC / LAMBADA files are not found (set RESIDSHIFT_DATA)")


def _mc(item, lls, choices=("ab", "abcd"), gold=0, context="Question: q\nAnswer:"):
    return V.ItemScore(item, [(context, " " + c) for c in choices], list(lls), [False] * len(lls), gold)


# ------------------------------------------------------------------ conversion


def test_arc_record_is_the_hub_schema_and_round_trips():
    rec = V.arc_record({"query": "Question: Why?", "choices": ["a", "b", "c"], "gold": 2}, 7)
    assert rec == {"id": "7", "question": "Why?", "choices": {"text": ["a", "b", "c"], "label": ["A", "B", "C"]},
                   "answerKey": "C"}
    # lm-eval's arc_easy.yaml: "Question: {{question}}\nAnswer:" and choices.label.index(answerKey)
    assert f"Question: {rec['question']}\nAnswer:" == "Question: Why?\nAnswer:"
    assert rec["choices"]["label"].index(rec["answerKey"]) == 2
    with pytest.raises(ValueError, match="should start with"):
        V.arc_record({"query": "Why?", "choices": ["a", "b"], "gold": 0}, 0)
    with pytest.raises(ValueError, match="out of range"):
        V.arc_record({"query": "Question: Why?", "choices": ["a", "b"], "gold": 2}, 0)


def test_piqa_record_checks_the_label():
    assert V.piqa_record({"goal": "g", "sol1": "a", "sol2": "b", "label": "1"})["label"] == 1
    with pytest.raises(ValueError, match="0 or 1"):
        V.piqa_record({"goal": "g", "sol1": "a", "sol2": "b", "label": 2})


@needs_data
def test_staged_piqa_joins_the_labels_file_line_by_line(tmp_path):
    V.stage_data(tmp_path, ["piqa", "lambada"])
    staged = [json.loads(line) for line in (tmp_path / V.SPECS["piqa"].data).read_text().splitlines()]
    source = local_file("piqa", "validation")
    questions = [json.loads(line) for line in source.read_text().splitlines()]
    labels = (source.parent / "valid-labels.lst").read_text().split()
    assert len(staged) == len(questions) == len(labels) == 1838
    for row, q, lab in zip(staged, questions, labels):
        assert row == {"goal": q["goal"], "sol1": q["sol1"], "sol2": q["sol2"], "label": int(lab)}
    lambada = tmp_path / V.SPECS["lambada"].data
    assert lambada.is_symlink() and lambada.read_bytes() == local_file("lambada", "test").read_bytes()


@needs_data
@pytest.mark.parametrize("name", ["arc-easy", "arc-challenge"])
def test_staged_arc_renders_our_prompts(tmp_path, name):
    from residshift.measure import evaluate as ev

    V.stage_data(tmp_path, [name])
    staged = [json.loads(line) for line in (tmp_path / V.SPECS[name].data).read_text().splitlines()]
    ours = ev.arc_questions(name)
    assert len(staged) == len(ours)
    for rec, q in zip(staged, ours):
        assert f"Question: {rec['question']}\nAnswer:" == q.context
        assert tuple(rec["choices"]["text"]) == q.choices
        assert rec["choices"]["label"].index(rec["answerKey"]) == q.gold


# ------------------------------------------------------------------ agreement


def test_predictions_normalise_by_characters_without_the_delimiter():
    # sums -2 (2 chars: -1/char) and -3 (4 chars: -0.75/char): acc picks 0, acc_norm picks 1
    assert V.predictions(_mc(0, [-2.0, -3.0])) == (0, 1)


def test_compare_counts_agreement_and_flags_float_ties():
    ours = [_mc(3, [-1.0, -2.0]), _mc(5, [-2.0, -2.0000001], gold=1), _mc(9, [-1.0, -3.0])]
    theirs = [_mc(9, [-1.0, -3.0]), _mc(3, [-1.0, -2.0]), _mc(5, [-2.0000002, -2.0], gold=1)]
    c = V.compare_task(ours, theirs, "mc")
    assert c["n"] == 3 and c["same_requests"] == 3 and c["same_tokens"] is None
    assert c["agree_count"]["acc"] == 2 and c["agree"]["acc"] == pytest.approx(2 / 3)
    assert c["ours"]["acc"] == pytest.approx(2 / 3) and c["lm_eval"]["acc"] == pytest.approx(1.0)
    (d,) = [x for x in c["disagreements"] if x["metric"] == "acc"]
    assert d["item"] == 5 and d["ours"] == 0 and d["lm_eval"] == 1 and d["float_tie"]
    assert c["max_abs_diff"] == pytest.approx(2e-7) and c["worst"]["item"] == 5
    assert not c["meets_target"]


def test_compare_a_real_disagreement_is_not_a_tie():
    c = V.compare_task([_mc(0, [-1.0, -2.0])], [_mc(0, [-2.0, -1.0])], "mc")
    assert c["agree"]["acc"] == 0 and c["float_ties"] == 0
    assert all(not d["float_tie"] for d in c["disagreements"])


def test_compare_lambada_greedy_and_perplexity():
    def lam(item, ll, greedy):
        return V.ItemScore(item, [("ctx", " word")], [ll], [greedy])

    c = V.compare_task([lam(0, -1.0, True), lam(1, -3.0, False)],
                       [lam(1, -3.0, True), lam(0, -1.0, True)], "lambada")
    assert c["agree"] == {"acc": 0.5} and c["ours"]["acc"] == 0.5 and c["lm_eval"]["acc"] == 1.0
    assert c["ours"]["ppl"] == pytest.approx(math.exp(2.0))
    assert c["disagreements"] == [{"item": 1, "metric": "acc", "ours": False, "lm_eval": True,
                                   "ll_ours": -3.0, "ll_lm_eval": -3.0}]


def test_compare_refuses_misaligned_items():
    with pytest.raises(ValueError, match="different items"):
        V.compare_task([_mc(0, [-1.0, -2.0])], [_mc(1, [-1.0, -2.0])], "mc")
    with pytest.raises(ValueError, match="gold"):
        V.compare_task([_mc(0, [-1.0, -2.0], gold=0)], [_mc(0, [-1.0, -2.0], gold=1)], "mc")


def test_lm_eval_items_reads_logged_samples_and_checks_its_metrics():
    sample = {"doc_id": 4, "target": 1, "arguments": [["Q", " ab"], ["Q", " abcd"]],
              "resps": [[[-2.0, False]], [[-3.0, True]]], "acc": 1.0, "acc_norm": 1.0}
    # acc: argmax(-2, -3) = 0 != gold 1, so lm-eval's acc would be 0: the check must fire
    with pytest.raises(AssertionError, match="disagree"):
        V.lm_eval_items([sample], "mc")
    (s,) = V.lm_eval_items([{**sample, "acc": 0.0}], "mc", encode=lambda c, k: ([1, 2], [3]))
    assert s.item == 4 and s.gold == 1 and s.ll == [-2.0, -3.0] and s.greedy == [False, True]
    assert s.requests == [("Q", " ab"), ("Q", " abcd")] and s.tokens == [((1, 2), (3,))] * 2


# ------------------------------------------------------------------ our side = the harness


@needs_data
def test_score_ours_reproduces_the_harness_task_functions(tiny_llama):
    from residshift.core.data import load_corpus
    from residshift.measure import evaluate as ev

    model, tok, info = tiny_llama
    config = ev.EvalConfig(batch_size=8, seed=0)
    for name, questions in [("piqa", ev.piqa_questions()), ("arc-easy", ev.arc_questions("arc-easy"))]:
        ref = ev.multiple_choice_score(model, info, tok, questions, task=name, limit=6, config=config, cache=False)
        items = ref.details["items"]
        mine = V.score_ours(model, info, tok, name, items, config=config)
        assert [s.item for s in mine] == list(items)
        preds = np.array([V.predictions(s) for s in mine])
        assert (preds[:, 0] == ref.details["pred"]).all() and (preds[:, 1] == ref.details["pred_norm"]).all()
        assert [s.gold for s in mine] == [questions[i].gold for i in items]
    texts = load_corpus("lambada", "test")["text"]
    ref = ev.lambada_score(model, info, tok, texts, limit=4, config=config, cache=False)
    mine = V.score_ours(model, info, tok, "lambada", ref.details["items"], config=config)
    assert np.allclose([s.ll[0] for s in mine], ref.details["logprob"])
    assert [s.greedy[0] for s in mine] == list(ref.details["greedy"])


# ------------------------------------------------------------------ lm-eval's configs (optional)


@needs_data
def test_lm_eval_configs_read_the_staged_files_into_our_prompts(tmp_path, monkeypatch):
    lm_eval_tasks = pytest.importorskip("lm_eval.tasks")

    names = list(V.SPECS)
    V.stage(tmp_path, Path(lm_eval_tasks.__file__).parent, names)
    monkeypatch.chdir(tmp_path)
    manager = lm_eval_tasks.TaskManager(include_path=str(tmp_path / "tasks"), include_defaults=False)
    loaded = manager.load([V.SPECS[n].lm_eval for n in names])["tasks"]
    for name in names:
        task = loaded[V.SPECS[name].lm_eval]
        docs = list(task.eval_docs)
        strings, golds = V.our_requests(name)
        assert len(docs) == len(strings)
        for i in [*range(0, len(docs), 7), len(docs) - 1]:  # the script compares every scored item
            context = task.doc_to_text(docs[i])
            if name == "lambada":
                assert [(context, task.doc_to_target(docs[i]))] == strings[i]
            else:
                assert [(context, " " + c) for c in task.doc_to_choice(docs[i])] == strings[i]
                assert int(task.doc_to_target(docs[i])) == golds[i]


# ------------------------------------------------------------------ printed report and README


def _result():
    ours = [_mc(3, [-1.0, -2.0]), _mc(5, [-2.0, -2.0000001], gold=1)]
    theirs = [_mc(3, [-1.0, -2.0]), _mc(5, [-2.0000002, -2.0], gold=1)]
    c = V.compare_task(ours, theirs, "mc")
    return {"config": {"model": "m", "versions": {"lm_eval": "0.4.13"}, "same_weights": True,
                       "items_rule": "2 items", "threads": 2, "batch_size": 16},
            "tasks": {"piqa": c}, "lm_eval_aggregate": {"piqa": {"acc": 1.0, "acc_norm": 0.5}},
            "timing": {"piqa": {"ours_s": 1.0, "lm_eval_s": 2.0}}, "meets_target": c["meets_target"]}


def test_render_prints_every_disagreement_and_the_verdict():
    text = V.render(_result())
    assert "item 5 acc: ours chose 0, lm-eval 1 (gold 1)" in text and "float tie" in text
    assert "TARGET MISSED on: piqa" in text and "lm-eval's own aggregate, piqa: acc 1.0000" in text
