"""The scale ladder (study.ladder): the plan at smoke (rungs, selection, reading steps, the corpus a
budget trains on and the one-line refusal when the large corpus cannot be read), the hours budget from
given speeds, a rung trained at smoke and resumed after an interruption (the same readings as an
uninterrupted run), records (finished ones never retrained, foreign or garbled ones refused and left
alone), the command line's one-line errors and its --plan, and notebook 10's numbers and closest rung on
hand-made readings (no budget is extrapolated).

Every test writes under tmp_path (RESIDSHIFT_RESULTS / RESIDSHIFT_BUILD and the records folder); the
smoke tokenizer and token caches are the shared ones (data/cache, as tests/conftest.py keeps them)."""
import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as the CLI: a shared CPU runs sleeping threads faster

import json  # noqa: E402
import math  # noqa: E402

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from residshift.tools.cli import main  # noqa: E402
from residshift.analysis import scale, verdicts as V  # noqa: E402
from residshift.core import profiles  # noqa: E402
from residshift.study import ladder as L  # noqa: E402
from residshift.train import trainer as T  # noqa: E402

from ladder_support import no_training, rung, use_folders  # noqa: E402

SMOKE_RUNGS = ["5x32-r0", "6x32-r0", "5x32-r1", "6x32-r1"]


@pytest.fixture()
def P():
    return profiles.resolve("smoke")


@pytest.fixture()
def results(tmp_path, monkeypatch):
    """Results and build folders of this test's own."""
    return use_folders(monkeypatch, tmp_path)


_rung, _no_training = rung, no_training


def _one_line_error(cap):
    lines = [line for line in cap.err.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("residshift ladder: error: "), cap.err
    assert "Traceback" not in cap.err
    return lines[0]


def _record(**kw):
    return {"kind": L.RECORD_KIND, "rung": "5x32-r0", "shape": [5, 32, 2], "k": 0, "key": "x", "points": [],
            "finished": False, **kw}


def _key(P, rung):
    cfg, _ = L.config(P, rung)
    return T.run_dir_for(cfg, "cpu", T.load_tokenizer(cfg)).name


# ---- the plan ------------------------------------------------------------------------------------


def test_rungs_are_shape_times_budget_in_budget_order(P):
    rs = L.rungs(P)
    assert [r.name for r in rs] == SMOKE_RUNGS
    base = P.ladder_base_tokens
    assert [r.tokens for r in rs] == [base, base, 4 * base, 4 * base]
    assert [(r.depth, r.width, r.heads, r.k) for r in rs] == [(5, 32, 2, 0), (6, 32, 2, 0), (5, 32, 2, 1),
                                                               (6, 32, 2, 1)]
    assert rs[0].shape == "5x32"
    P.ladder_rungs = 3
    assert [r.tokens for r in L.rungs(P)][-2:] == [16 * base, 16 * base]
    P.ladder_rungs = 0
    with pytest.raises(L.LadderError, match="positive integer"):
        L.rungs(P)


@pytest.mark.parametrize("shapes, match", [([[5, 32]], "depth, width, heads"), ([[5, 32, 3]], "multiple of the heads"),
                                           ([[0, 32, 2]], "positive integers")])
def test_bad_shapes_are_refused(P, shapes, match):
    P.ladder_shapes = shapes
    with pytest.raises(L.LadderError, match=match):
        L.rungs(P)


def test_select_by_rung_or_shape_and_unknown_rungs_are_named(P):
    rs = L.rungs(P)
    assert L.select(rs, None) == rs and L.select(rs, []) == rs
    assert [r.name for r in L.select(rs, ["6x32-r1", "5x32-r0"])] == ["5x32-r0", "6x32-r1"]  # training order
    assert [r.name for r in L.select(rs, ["6x32"])] == ["6x32-r0", "6x32-r1"]
    assert [r.name for r in L.select(rs, ["6x32", "5x32-r1"])] == ["6x32-r0", "5x32-r1", "6x32-r1"]
    with pytest.raises(L.LadderError) as err:
        L.select(rs, ["5x32-r0", "5x32-r9", "7x32"])
    msg = str(err.value)
    assert "5x32-r9, 7x32" in msg and all(n in msg for n in SMOKE_RUNGS) and "5x32, 6x32" in msg
    assert "-p ladder_rungs=" in msg and "\n" not in msg


def test_reading_steps_double_from_a_quarter_of_the_base_to_the_last_step(P):
    base = P.ladder_base_tokens
    for rung in L.rungs(P):
        cfg = L.base_config(P, rung)
        tps = cfg.tokens_per_step()
        steps = L.reading_steps(cfg, P)
        assert steps[-1] == cfg.steps() == math.ceil(rung.tokens / tps)
        assert all(a < b for a, b in zip(steps, steps[1:]))
        assert steps[:-1] == [math.ceil(base * 2.0 ** j / tps) for j in range(-2, len(steps) - 3)]
    assert L.reading_steps(L.base_config(P, L.rungs(P)[0]), P) == [2, 3, 6]  # 384, 768 tokens; 1536 = 6 steps
    assert L.reading_steps(L.base_config(P, L.rungs(P)[2]), P) == [2, 3, 6, 12, 24]
    # readings below one step collapse onto the first step, never twice
    P.ladder_base_tokens = 256  # one step of 8 x 32 tokens
    cfg = L.base_config(P, L.rungs(P)[2])  # 1024 tokens = 4 steps
    assert L.reading_steps(cfg, P) == [1, 2, 4]


def test_base_config_is_the_training_recipes_baseline_at_the_rungs_shape(P):
    rung = _rung(P, "6x32-r1")
    cfg = L.base_config(P, rung)
    assert (cfg.mode, cfg.layers, cfg.width, cfg.heads, cfg.tokens, cfg.seed) == ("baseline", 6, 32, 2, rung.tokens,
                                                                                  P.ladder_seed)
    assert cfg.eval_every == P.train_eval_every * 4 and cfg.checkpoint_every == P.train_checkpoint_every * 4
    assert (cfg.corpus, cfg.split, cfg.context, cfg.lr) == (P.train_corpus, P.train_split, P.train_context,
                                                            P.train_lr)


def test_a_budget_within_the_epochs_trains_on_the_small_corpus(P):
    rung = _rung(P, "5x32-r1")
    cfg, source = L.config(P, rung)
    n = source["corpus_tokens"]
    assert cfg.corpus == P.train_corpus == source["corpus"] and cfg.split == P.train_split and n > rung.tokens
    assert source["epochs"] == pytest.approx(rung.tokens / n)


def _fake_corpora(monkeypatch, small, large):
    """corpus_tokens: ``small`` tokens for the profile's corpus; ``large`` for the large one (an
    exception is raised)."""
    def fake(cfg, tokenizer):
        if cfg.corpus == "wikitext-2":
            return small
        if isinstance(large, BaseException):
            raise large
        return large

    monkeypatch.setattr(L, "corpus_tokens", fake)


def test_a_budget_above_the_epochs_switches_to_the_large_corpus(P, monkeypatch):
    _fake_corpora(monkeypatch, 1000, 10 ** 6)
    at = L.Rung(5, 32, 2, 1, P.ladder_max_epochs * 1000)  # exactly the allowed passes: still the small corpus
    cfg, source = L.config(P, at)
    assert cfg.corpus == "wikitext-2" and source == {"corpus": "wikitext-2", "corpus_tokens": 1000,
                                                      "epochs": float(P.ladder_max_epochs)}
    above = L.Rung(5, 32, 2, 1, P.ladder_max_epochs * 1000 + 1)
    cfg, source = L.config(P, above)
    assert (cfg.corpus, cfg.split) == (P.ladder_large_corpus, "train")
    assert source == {"corpus": P.ladder_large_corpus, "corpus_tokens": 10 ** 6, "epochs": above.tokens / 10 ** 6}
    assert cfg.with_(corpus=P.train_corpus, split=P.train_split) == L.base_config(P, above)  # nothing else changes


def test_a_budget_beyond_the_large_corpus_too_is_refused(P, monkeypatch):
    _fake_corpora(monkeypatch, 1000, 2000)
    with pytest.raises(L.LadderError) as err:
        L.config(P, L.Rung(5, 32, 2, 3, P.ladder_max_epochs * 2000 + 1))
    assert "more than 4 epochs" in str(err.value) and "-p ladder_rungs=3" in str(err.value)


def test_an_unreadable_large_corpus_is_one_line_naming_the_fix(P, monkeypatch, tmp_path, results):
    _fake_corpora(monkeypatch, 1000, FileNotFoundError("no wiki.train.tokens in data/\nsecond line"))
    _no_training(monkeypatch)
    P.ladder_base_tokens = 8 * 32 * 20  # rung 0: 5,120 tokens, more than 4 passes over 1,000
    with pytest.raises(L.LadderError) as err:
        L.config(P, _rung(P, "6x32-r0"))
    msg = str(err.value)
    assert "\n" not in msg and "rung 6x32-r0 needs 5,120 tokens" in msg and "wikitext-103" in msg
    assert "FileNotFoundError: no wiki.train.tokens in data/" in msg and "second line" not in msg
    assert "-p ladder_rungs=0" in msg and "make data" in msg
    # the ladder refuses before anything is written or trained
    out = tmp_path / "records"
    with pytest.raises(L.LadderError, match=r"-p ladder_rungs=0"):
        L.run_ladder(P, out=out, device="cpu", log=lambda _: None)
    assert not out.exists() and not (results / "ladder").exists()


def test_an_unknown_large_corpus_is_refused_by_the_command_in_one_line(tmp_path, results, monkeypatch, capsys):
    _no_training(monkeypatch)
    out = tmp_path / "records"
    assert main(["ladder", "--profile", "smoke", "--out", str(out), "--no-progress", "-p",
                 "ladder_base_tokens=100000000", "-p", 'ladder_large_corpus="nosuch-corpus"']) == 2
    line = _one_line_error(capsys.readouterr())
    assert "rung 5x32-r0 needs 100,000,000 tokens" in line and "nosuch-corpus" in line
    assert "-p ladder_rungs=0" in line
    assert not out.exists() and not (results / "ladder").exists()


def test_an_exception_without_a_message_is_still_one_line(P, monkeypatch):
    _fake_corpora(monkeypatch, 1000, OSError())
    with pytest.raises(L.LadderError, match="-p ladder_rungs=0"):
        L.config(P, L.Rung(5, 32, 2, 0, 10 ** 6))


# ---- the hours budget ----------------------------------------------------------------------------


def test_plan_from_given_speeds_leaves_out_what_does_not_fit(P, tmp_path, monkeypatch):
    _no_training(monkeypatch)  # speeds given: nothing is measured
    records = tmp_path / "records"
    rows = L.plan(P, L.rungs(P), records, device="cpu", hours=1.0, speeds={"5x32": 1.0, "6x32": 1.0})
    assert [r["rung"].name for r in rows] == SMOKE_RUNGS and {r["status"] for r in rows} == {"new"}
    h0, h1 = 1536 / 3600 * L.OVERHEAD, 6144 / 3600 * L.OVERHEAD  # hours at 1 token/s
    assert [r["hours"] for r in rows] == pytest.approx([h0, h0, h1, h1])
    assert [r["fits"] for r in rows] == [True, True, False, False]
    assert rows[0]["why"] == rows[1]["why"] == ""
    assert rows[2]["why"] == f"does not fit in ladder_hours=1 ({2 * h0:.2f} h planned)" == rows[3]["why"]
    assert all(r["tokens_per_s"] == 1.0 for r in rows)
    # the profile's ladder_hours when no hours are given; a faster shape fits where a slower one does not
    P.ladder_hours = 2.5
    rows = L.plan(P, L.rungs(P), records, device="cpu", speeds={"5x32": 1.0, "6x32": 0.5})
    assert [r["fits"] for r in rows] == [True, True, False, False]  # 0.46 + 0.92 = 1.38; + 1.84 > 2.5
    rows = L.plan(P, L.select(L.rungs(P), ["5x32"]), records, device="cpu", speeds={"5x32": 1.0})
    assert [r["fits"] for r in rows] == [True, True]  # 0.46 + 1.84 = 2.30 <= 2.5
    assert not records.exists()


def test_plan_a_finished_record_costs_nothing_and_a_partial_one_its_remaining_tokens(P, tmp_path, monkeypatch):
    _no_training(monkeypatch)
    records = tmp_path / "records"
    records.mkdir()
    (records / "5x32-r0.json").write_text(json.dumps(_record(finished=True, points=[{"step": 6, "tokens": 1536}])))
    (records / "5x32-r1.json").write_text(json.dumps(_record(rung="5x32-r1", k=1, points=[
        {"step": 2, "tokens": 512}, {"step": 6, "tokens": 1536}])))
    rows = L.plan(P, L.rungs(P), records, device="cpu", hours=100.0, speeds={"5x32": 10.0, "6x32": 10.0})
    by = {r["rung"].name: r for r in rows}
    assert by["5x32-r0"]["status"] == "finished" and by["5x32-r0"]["hours"] == 0.0 and not by["5x32-r0"]["fits"]
    assert by["5x32-r1"]["status"] == "partial"
    assert by["5x32-r1"]["hours"] == pytest.approx((6144 - 1536) / 10 / 3600 * L.OVERHEAD)
    assert by["6x32-r1"]["status"] == "new" and by["6x32-r1"]["hours"] == pytest.approx(6144 / 10 / 3600 * L.OVERHEAD)


# ---- records -------------------------------------------------------------------------------------


def test_records_dir_is_build_for_smoke_and_benchmarks_otherwise(P, results, tmp_path):
    assert L.records_dir(P) == tmp_path / "build" / "smoke" / "ladder"
    assert L.records_dir(P, tmp_path / "x") == tmp_path / "x"
    P.profile = "default"
    assert L.records_dir(P) == L.REPO_ROOT / "benchmarks" / "ladder" / "default"


@pytest.mark.parametrize("text", ["not json {", "[1, 2]", json.dumps({"kind": "residshift-train/1"}), "",
                                  b"\xff\xfe\x00garbage"])
def test_a_garbled_record_is_refused_naming_the_fix(P, tmp_path, results, text, monkeypatch):
    path = tmp_path / "5x32-r0.json"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    before = path.read_bytes()
    with pytest.raises(L.LadderError) as err:
        L.read_record(path)
    msg = str(err.value)
    assert str(path) in msg and "move it away or delete it" in msg and "\n" not in msg
    # the ladder refuses it before measuring or training anything
    _no_training(monkeypatch)
    with pytest.raises(L.LadderError, match="move it away or delete it"):
        L.run_ladder(P, only=["5x32-r0"], out=tmp_path, device="cpu", log=lambda _: None)
    assert path.read_bytes() == before


def test_a_record_of_another_key_is_refused_and_left_alone(P, tmp_path, results, monkeypatch):
    records = tmp_path / "records"
    records.mkdir()
    path = records / "5x32-r0.json"
    path.write_text(json.dumps(_record(key="another-key", code={"commit": "abc1234"})))
    before = path.read_bytes()
    with pytest.raises(L.LadderError) as err:
        L.read_record(path, "this-key")
    msg = str(err.value)
    assert "another-key" in msg and "this-key" in msg and "abc1234" in msg and "move it away or delete it" in msg
    assert L.read_record(path)["key"] == "another-key"  # without a key: read as it is
    _no_training(monkeypatch)
    with pytest.raises(L.LadderError, match="move it away or delete it"):
        L.run_rung(P, _rung(P, "5x32-r0"), records, device="cpu", progress=False, log=lambda _: None)
    assert path.read_bytes() == before and sorted(p.name for p in records.iterdir()) == ["5x32-r0.json"]
    assert not (results / "ladder").exists()


def test_out_that_is_a_file_is_refused(P, tmp_path, monkeypatch, capsys):
    _no_training(monkeypatch)
    f = tmp_path / "records"
    f.write_text("mine")
    with pytest.raises(L.LadderError, match="is a file"):
        L.run_ladder(P, out=f, device="cpu", log=lambda _: None)
    assert main(["ladder", "--profile", "smoke", "--plan", "--out", str(f)]) == 2
    assert "is a file" in _one_line_error(capsys.readouterr())
    assert f.read_text() == "mine"


def test_a_finished_record_is_returned_without_training(P, tmp_path, results, monkeypatch):
    rung = _rung(P, "5x32-r0")
    records = tmp_path / "records"
    records.mkdir()
    path = records / "5x32-r0.json"
    path.write_text(json.dumps(_record(key=_key(P, rung), finished=True, points=[{"step": 6, "tokens": 1536}])))
    before = path.read_bytes()
    _no_training(monkeypatch)
    rec = L.run_rung(P, rung, records, device="cpu", progress=False, log=lambda _: None)
    assert rec == json.loads(before) and path.read_bytes() == before
    assert not (results / "ladder").exists()  # no run folder either
    assert L.load_records(P, records) == {"5x32-r0": rec}


def test_a_foreign_record_of_a_later_rung_is_refused_before_anything_trains(P, tmp_path, results, monkeypatch):
    records = tmp_path / "records"
    records.mkdir()
    (records / "6x32-r0.json").write_text(json.dumps(_record(rung="6x32-r0", shape=[6, 32, 2], key="another-key")))

    def trained(*a, **k):
        raise RuntimeError("trained before refusing the foreign record")

    monkeypatch.setattr(T, "train", trained)
    monkeypatch.setattr(L, "measure_speed", lambda cfg, **k: {"tokens_per_s": 1e6, "steps": 3, "seconds": 0.0})
    with pytest.raises(L.LadderError, match="move it away or delete it"):
        L.run_ladder(P, only=["5x32-r0", "6x32-r0"], out=records, device="cpu", progress=False, log=lambda _: None)


# ---- a rung at smoke: trained, interrupted, resumed ----------------------------------------------


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The smoke rung 5x32-r0 trained and read in one call (its own results folder)."""
    root = tmp_path_factory.mktemp("ladder-uninterrupted")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RESIDSHIFT_RESULTS", str(root / "results"))
        P = profiles.resolve("smoke")
        rung = _rung(P, "5x32-r0")
        lines = []
        rec = L.run_rung(P, rung, root / "records", device="cpu", progress=False, log=lines.append)
    return rec, root / "records" / "5x32-r0.json", lines


def _same_points(a, b):
    keys = ("step", "tokens", "n_windows", "n_layers", "top1_input", "top1_next", "unigram_input", "unigram_next",
            "loss")
    return [{k: p[k] for k in keys} for p in a] == [{k: p[k] for k in keys} for p in b]


def test_an_interrupted_rung_resumes_to_the_uninterrupted_readings(uninterrupted, P, tmp_path, results,
                                                                   monkeypatch):
    ref, ref_path, lines = uninterrupted
    assert ref["finished"] and [p["step"] for p in ref["points"]] == [2, 3, 6]
    assert [p["tokens"] for p in ref["points"]] == [512, 768, 1536]
    on_disk = json.loads(ref_path.read_text())
    assert on_disk["finished"] and on_disk["key"] == ref["key"] and _same_points(on_disk["points"], ref["points"])
    assert ref["key"] == _key(P, _rung(P, "5x32-r0")) and ref["source"]["corpus"] == "wikitext-2"
    assert ref["summary"]["steps"] == 6 and ref["config"]["layers"] == 5
    p = ref["points"][-1]
    assert np.asarray(p["top1_next"]).shape == (P.ladder_lens_windows, 6) == np.asarray(p["top1_input"]).shape
    assert len(p["unigram_next"]) == P.ladder_lens_windows and len(lines) == 3 and "step 6 (1,536 tokens)" in lines[-1]

    # the same rung in a fresh results folder, stopped (Ctrl-C) during its second reading
    rung = _rung(P, "5x32-r0")
    records = tmp_path / "records"
    real, calls, armed = L.read_lens, [], [True]

    def read_lens(*a, **k):
        calls.append(1)
        if armed[0] and len(calls) == 2:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(L, "read_lens", read_lens)
    with pytest.raises(KeyboardInterrupt):
        L.run_rung(P, rung, records, device="cpu", progress=False, log=lambda _: None)
    partial = json.loads((records / "5x32-r0.json").read_text())
    assert not partial["finished"] and [q["step"] for q in partial["points"]] == [2]
    assert _same_points(partial["points"], ref["points"][:1])
    assert L.plan(P, [rung], records, device="cpu", speeds={"5x32": 1.0})[0]["status"] == "partial"

    armed[0] = False
    rec = L.run_rung(P, rung, records, device="cpu", progress=False, log=lambda _: None)
    assert rec["finished"] and _same_points(rec["points"], ref["points"])
    assert json.loads((records / "5x32-r0.json").read_text())["finished"]
    assert rec["summary"]["val_loss"] == ref["summary"]["val_loss"]
    # the trainer resumed from the checkpoint: every step was trained once
    run = L.run_folder(P, rung, rec["key"])
    steps = [r["step"] for r in T.read_log(run) if "loss" in r]
    assert len(steps) == len(set(steps)) == 6

    # finished: a third call trains and reads nothing
    _no_training(monkeypatch)
    assert L.run_rung(P, rung, records, device="cpu", progress=False, log=lambda _: None) == rec

    # notebook 10's rows from the record: one per reading, the last the finished model
    rows = L.reading_rows({"5x32-r0": rec}, P)
    assert [(r["tokens"], r["final"]) for r in rows] == [(512, False), (768, False), (1536, True)]
    assert all(r["shape"] == "5x32" and r["depth"] == 5 and r["outcome"] in scale.SWITCH_OUTCOMES for r in rows)


# ---- the command line ----------------------------------------------------------------------------


@pytest.mark.parametrize("args, needle", [
    (["--only", "nosuch"], "unknown rung nosuch"),
    (["-p", "seed=1"], "not a ladder_*, probe_* or train_* key"),
    (["-p", "ladder_rungs=[oops"], "Expecting value"),
    (["-p", "ladder_rungs=0"], "ladder_rungs must be an integer of at least 1"),
])
def test_bad_requests_are_one_line_with_status_2(args, needle, tmp_path, results, monkeypatch, capsys):
    _no_training(monkeypatch)
    out = tmp_path / "records"
    assert main(["ladder", "--profile", "smoke", "--out", str(out), *args]) == 2
    line = _one_line_error(capsys.readouterr())
    assert needle in line
    if args[0] == "--only":
        assert all(n in line for n in SMOKE_RUNGS) and "-p ladder_rungs=" in line
    assert not out.exists()


def test_plan_measures_and_trains_nothing(tmp_path, results, monkeypatch, capsys):
    real, runs = T.train, []

    def train(cfg, out_dir=None, **k):
        runs.append(out_dir)
        return real(cfg, out_dir, **k)

    monkeypatch.setattr(T, "train", train)
    monkeypatch.setattr(L, "run_rung", lambda *a, **k: pytest.fail("--plan ran a rung"))
    out = tmp_path / "records"
    assert main(["ladder", "--profile", "smoke", "--plan", "--only", "5x32-r0", "--out", str(out),
                 "--no-progress"]) == 0
    cap = capsys.readouterr()
    assert cap.err == "" and "speed 5x32:" in cap.out and "tokens/s" in cap.out
    assert "5x32-r0" in cap.out and "1,536 tokens" in cap.out and "new" in cap.out and "6x32" not in cap.out
    # the speed probe ran in a scratch folder, removed; no record, no run folder
    assert len(runs) == 1 and not os.path.exists(runs[0])
    assert not out.exists() and not (results / "ladder").exists()


# ---- notebook 10 on hand-made readings -----------------------------------------------------------


def _row(rung, tokens, S1, *, final=True, outcome=scale.NEAR_BIGRAM, lo=None, hi=None, why="",
         middle=V.NOT_REPRODUCED):
    shape, k = rung.split("-r")
    depth, width = (int(v) for v in shape.split("x"))
    if outcome == scale.SWITCH_INCONCLUSIVE and not why:
        why = "the interval straddles 0.5"
    return {"rung": rung, "shape": shape, "depth": depth, "width": width, "k": int(k), "tokens": tokens,
            "final": final, "S1": S1, "S1_lo": lo, "S1_hi": hi, "middle": middle, "outcome": outcome, "why": why,
            "departure_depth": 0.5, "top1_next_h1": 0.1, "top1_next_hL": 0.2, "loss": 5.0,
            "row": {"model": rung, "early_share": S1}}


REFS = [{"model": "GPT-2", "S1": 0.3, "S1_lo": 0.25, "S1_hi": 0.35, "outcome": scale.DEEP_SWITCH,
         "middle": V.REPRODUCED, "n_layers": 12, "row": {}},
        {"model": "Pythia", "S1": 0.95, "S1_lo": 0.9, "S1_hi": 0.99, "outcome": scale.NEAR_BIGRAM,
         "middle": V.NOT_REPRODUCED, "n_layers": 6, "row": {}}]


def _readings():
    return [
        _row("5x32-r0", 250, 0.97, final=False),
        _row("5x32-r0", 1000, 0.9, lo=0.85, hi=0.95),
        _row("5x32-r1", 4000, 0.8, lo=0.75, hi=0.85),
        _row("6x32-r0", 1000, 0.7, lo=0.6, hi=0.8),
        _row("6x32-r1", 4000, 0.45, lo=0.4, hi=0.49, outcome=scale.DEEP_SWITCH, middle=V.REPRODUCED),
        _row("6x32-r2", 16000, 0.55, outcome=scale.SWITCH_INCONCLUSIVE),  # no interval
        _row("7x32-r0", 500, 0.99, final=False),  # a shape with no finished rung yet
    ]


def _costs(rows):
    """A cost table as cost_table makes it: the rung's budget and its measured tokens/s."""
    names = list(dict.fromkeys(r["rung"] for r in rows))
    budget = {n: max(r["tokens"] for r in rows if r["rung"] == n) for n in names}
    return pd.DataFrame({"rung": names, "tokens": [budget[n] for n in names],
                         "tokens_per_s": [10.0 if n.startswith("5x32") else 20.0 for n in names]}).set_index("rung")


def test_closest_rung_prefers_the_largest_deep_switch_else_the_lowest_share():
    rows = _readings()
    assert L.closest_rung(rows) == {"rung": "6x32-r1", "has_switch": True, "S1": 0.45,
                                    "why": "the largest finished rung with the deep switch"}
    # a deep switch at a smaller budget beats a lower share without it; equal budgets: the deeper shape
    more = rows + [_row("5x32-r2", 16000, 0.2, outcome=scale.SWITCH_INCONCLUSIVE),
                   _row("4x32-r1", 4000, 0.4, outcome=scale.DEEP_SWITCH)]
    assert L.closest_rung(more)["rung"] == "6x32-r1"
    assert L.closest_rung(more + [_row("7x32-r1", 4000, 0.48, outcome=scale.DEEP_SWITCH)])["rung"] == "7x32-r1"
    # without a deep switch: the finished rung with the lowest S1 (readings mid-run and missing S1 left out)
    none = [r for r in rows if r["outcome"] != scale.DEEP_SWITCH] + [_row("5x32-r0", 800, 0.1, final=False),
                                                                       _row("8x32-r0", 1000, None)]
    got = L.closest_rung(none)
    assert got["rung"] == "6x32-r2" and got["has_switch"] is False and got["S1"] == 0.55
    assert "no finished rung has the deep switch" in got["why"]
    assert L.closest_rung([r for r in rows if not r["final"]]) is None


def test_ladder_numbers_hold_the_readings_and_no_extrapolated_budget(P):
    rows = _readings()
    costs = _costs(rows)
    numbers = L.ladder_numbers(rows, REFS, costs, P)
    assert json.loads(json.dumps(numbers)) == numbers  # what figure 10's JSON holds
    assert "extrapolation" not in numbers and not hasattr(L, "extrapolation") and not hasattr(L, "ladder_lines")
    assert numbers["pretrained"] == REFS and len(numbers["rows"]) == 5  # the finished rungs' rows
    assert [r["rung"] for r in numbers["readings"]] == [r["rung"] for r in rows]
    assert all("row" not in r and {"top1_next_h1", "top1_next_hL", "departure_depth"} <= set(r)
               for r in numbers["readings"])
    assert numbers["closest"]["rung"] == "6x32-r1" and numbers["mitigation_rung"]["rung"] == "6x32-r1"
    assert [c["rung"] for c in numbers["cost"]] == list(costs.index)
    # no deep switch anywhere: the closest rung is the lowest share, said so
    plain = [r for r in rows if r["outcome"] != scale.DEEP_SWITCH]
    numbers = L.ladder_numbers(plain, REFS, _costs(plain), P)
    assert numbers["closest"]["rung"] == "6x32-r2" and numbers["closest"]["has_switch"] is False
    assert "no finished rung has the deep switch" in numbers["closest"]["why"]


def test_a_finished_rung_without_a_share_does_not_break_the_numbers(P):
    rows = _readings() + [_row("5x32-r2", 16000, None)]
    numbers = L.ladder_numbers(rows, REFS, _costs(rows), P)
    assert json.loads(json.dumps(numbers)) == numbers and numbers["closest"]["rung"] == "6x32-r1"
