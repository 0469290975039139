"""The vocabulary probe (study.probe, notebook 11): its cells as ladder rungs (names, order, the
vocabulary in the run key), one-line refusals of bad cells, and the probe at smoke trained end to end
into a folder of its own: every cell judged by the rule over its seeds, the figure and its numbers.
The rule's own outcomes are tested in tests/test_claims.py."""
import json
import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from residshift.core import profiles  # noqa: E402
from residshift.study import ladder as L, probe as Pr  # noqa: E402
from residshift.train import trainer as T  # noqa: E402

from ladder_support import use_folders  # noqa: E402


@pytest.fixture()
def P():
    return profiles.resolve("smoke")


def test_cells_are_rungs_seed_by_seed_with_names_of_their_own():
    P = profiles.resolve("default")
    names = [r.name for r in Pr.rungs(P)]
    assert names[:3] == ["12x128-v1024-r1-s0", "12x128-v16384-r1-s0", "12x256-v16384-r1-s0"]
    assert len(names) == 9 and names[-1] == "12x256-v16384-r1-s2"
    assert not set(names) & {r.name for r in L.rungs(P)}  # never a ladder record
    assert {r.tokens for r in Pr.rungs(P)} == {P.ladder_base_tokens * 4}


def test_the_vocabulary_and_the_width_are_in_the_run_key(P):
    a, b = Pr.rungs(P)[:2]  # smoke: 4x32 with a 300- and a 512-token BPE
    ca, cb = L.base_config(P, a), L.base_config(P, b)
    keys = {T.run_dir_for(c, "cpu", T.load_tokenizer(c)).name for c in (ca, cb, ca.with_(width=64))}
    assert len(keys) == 3


@pytest.mark.parametrize("cells, match", [([[12, 128, 4]], "depth, width, heads, vocabulary"),
                                          ([[12, 130, 4, 1024]], "multiple of the heads"),
                                          ([[12, 128, 4, 1.5]], "BPE size")])
def test_bad_cells_are_refused_naming_the_form(P, cells, match):
    P.probe_cells = cells
    with pytest.raises(L.LadderError, match=match):
        Pr.rungs(P)


def test_a_cell_may_name_a_pretrained_tokenizer():
    assert Pr.tokenizer_spec(16384) == "bpe:wikitext-2:16384"
    assert Pr.tokenizer_spec("smollm2-135m") == "smollm2-135m"
    assert Pr.cell_name(12, 128, "smollm2-135m") == "12x128, smollm2-135m"
    assert Pr.cell_name(12, 128, "bpe:wikitext-2:16384") == "12x128, vocab 16,384"


def test_the_probe_at_smoke_trains_reads_and_judges_every_cell(P, tmp_path, monkeypatch):
    use_folders(monkeypatch, tmp_path)
    monkeypatch.setattr(L, "records_dir", lambda P, out=None: tmp_path / "records")
    lines = []
    plan = Pr.run_probe(P, device="cpu", progress=False, log=lines.append)
    assert [row["rung"].name for row in plan] == [r.name for r in Pr.rungs(P)] and all(row["fits"] for row in plan)
    recs = Pr.load_records(P)
    assert len(recs) == 6 and all(L.finished(r) for r in recs.values())
    measured = json.loads((tmp_path / "records" / Pr.PLAN_FILE).read_text())  # written before anything trained
    assert [r["rung"] for r in measured["rows"]] == [r.name for r in Pr.rungs(P)]
    assert all(r["status"] == "new" and r["tokens_per_s"] > 0 for r in measured["rows"]) and measured["machine"]["cpu"]
    left = Pr.left_to_train(P, recs, folder=tmp_path / "records")
    assert set(left["profile"]) == {"paper"}  # every smoke cell has its three seeds
    short = {k: v for k, v in recs.items() if k != "4x32-v512-r0-s2"}
    row = Pr.left_to_train(P, short, folder=tmp_path / "records").loc["4x32, vocab 512"]
    tps = next(r["tokens_per_s"] for r in measured["rows"] if r["rung"] == "4x32-v512-r0-s2")
    assert row["seeds left"] == 1 and row["hours"] == pytest.approx(P.ladder_base_tokens / tps / 3600)
    assert {r["config"]["tokenizer"] for r in recs.values()} == {"bpe:wikitext-2:300", "bpe:wikitext-2:512"}
    rows = Pr.cell_rows(recs, P)
    assert [r.cell for r in rows] == ["4x32, vocab 300", "4x32, vocab 512"]
    for r in rows:
        assert r.seeds == [0, 1, 2] and r.n_layers == 4 and len(r.middles) == 3
        assert r.verdict in ("reproduced", "not reproduced", "inconclusive") and r.why
        if r.depth is not None:  # the mean of the per-seed depths, inside its interval
            assert r.depth == pytest.approx(np.mean(r.depths)) and r.depth_ci[0] <= r.depth <= r.depth_ci[1]
    curves = Pr.curves(recs, P)
    assert len(curves) == 6 and all(len(c["excess"]) == 5 for c in curves)
    again = Pr.run_probe(P, device="cpu", progress=False, log=lines.append)  # finished: nothing trains
    assert all(row["status"] == "finished" for row in again)
    table = Pr.cell_table(rows)
    assert list(table.index) == [r.cell for r in rows]
    refs = [{"model": "ref", "excess": [0.0, 0.0, 0.01, 0.2, 0.4], "departure_depth": 0.75}]
    fig = Pr.probe_panel(rows, curves, refs)
    numbers = Pr.probe_numbers(rows, curves, refs, Pr.cost_table(recs), Pr.corpus_table(P), P, left=left)
    assert numbers["design"]["tokens"] == P.ladder_base_tokens and len(numbers["rows"]) == 2
    assert numbers["corpus"][0]["cap_tokens"] == 4 * numbers["corpus"][0]["corpus_tokens"]
    assert {r["profile"] for r in numbers["left"]} == {"paper"} and numbers["left"][0]["tokens/s"] > 0
    fig.clf()
