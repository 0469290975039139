"""The closing findings of a notebook: sentences and the claims table, computed from verdict rows."""
import json

import pytest

from residshift.analysis.verdicts import CLAIMS, INCONCLUSIVE, NOT_REPRODUCED, REPRODUCED, VerdictError, VerdictRow
from residshift.core.paths import REPO_ROOT
from residshift.study import findings

R, N, I = REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE


def row(model, variant, claim_id, verdict, estimate=0.5, ci=(0.25, 0.75), *, per_seed=None, n=16, level=0.95,
        statistic="excess top-1 rate", **details):
    return VerdictRow(model=model, variant=variant, claim_id=claim_id, claim="the rule's words", verdict=verdict,
                      statistic=statistic, estimate=estimate, ci=ci, level=level, n=n, rule="the rule",
                      per_seed=per_seed, details=details)


def check_length(lines):
    assert 3 <= len(lines) <= 8, lines
    assert all(line.endswith(".") and line[0].isupper() for line in lines), lines


def test_all_reproduced():
    rows = [row("a", "logit lens", "C1.late", R), row("b", "logit lens", "C1.late", R),
            row("a", "logit lens", "C1.early", R)]
    lines = findings.run_shows(rows)
    check_length(lines)
    assert lines[0] == "All 3 verdicts on 2 claims of the paper reproduce it."
    # CLAIMS order: C1.early before C1.late; a claim decided alike on all its rows holds 'everywhere'
    assert lines[1] == ("Reproduced, agreeing with the paper: C1.early for a (logit lens); "
                        "C1.late everywhere it was tested (2 rows: a and b).")
    assert lines[2] == "None disagrees with the paper, and none is left open."
    one = findings.run_shows(rows[:1])
    assert one[0] == "The 1 verdict on 1 claim of the paper reproduces it." and len(one) == 3


def test_mixed_states_disagreement_as_plainly_as_agreement():
    rows = [row("gemma", "logit lens", "C1.early", R), row("gemma", "tuned lens", "C1.early", R),
            row("smol", "logit lens", "C1.early", N), row("smol", None, "C2.late-cut", N),
            row("smol", None, "C2.layer-sensitive", I, why="interval straddles the margin (0.005)")]
    lines = findings.run_shows(rows)
    check_length(lines)
    assert lines[0] == "Of the 5 verdicts on 3 claims of the paper, 2 are reproduced, 2 not reproduced and 1 inconclusive."
    assert lines[1] == "Reproduced, agreeing with the paper: C1.early for gemma (logit lens, tuned lens)."
    assert lines[2] == "Not reproduced, disagreeing with the paper: C1.early for smol (logit lens)."
    # rows about frozen models test the paper's claims in a setting it does not report: no disagreement
    assert lines[3] == ("Does not hold on the frozen models (our test in a setting the paper does not report; no "
                        "disagreement with its trained-model results): C2.late-cut for smol.")
    assert lines[4] == ("Inconclusive on the frozen models (a setting the paper does not report): C2.layer-sensitive "
                        "for smol: interval straddles the margin.")
    assert len(lines) == 5  # every outcome occurs: no 'none ...' sentence


def test_none_reproduced():
    rows = [row("m", "scalar gates", "C3.concentrates", N), row("m", "token gates", "C3.concentrates", N),
            row("m", "token gates", "C3.benchmarks", I, per_seed=[I, I])]
    lines = findings.run_shows(rows)
    check_length(lines)
    assert lines[0] == "Of the 3 verdicts on 2 claims of the paper, 2 are not reproduced and 1 inconclusive."
    assert "C3.concentrates everywhere it was tested (2 rows: m)" in lines[1]
    assert lines[-1] == "None holds on the frozen models."
    only_not = findings.run_shows(rows[:2])
    assert only_not[0] == "Not one of the 2 verdicts on 1 claim of the paper holds on the frozen models (a setting the paper does not report)."
    assert only_not[-1] == "None holds on the frozen models, and none is left open."


def test_all_inconclusive_grouped_by_reason():
    rows = [row("gpt", "alpha=0.5", "C2-training.late-cut", I,
                why="seeds disagree: 2 of 5 on the claimed side; underpowered: MDE 0.251 > margin 0.02 at 5 seeds"),
            row("gpt", "alpha=0.9", "C2-training.late-cut", I,
                why="seeds disagree: 4 of 5 on the claimed side; underpowered: MDE 0.08 > margin 0.02 at 5 seeds"),
            row("gpt", "alpha=0", "C2-training.late-cut", I,
                why="not applicable: the alpha = 0 cut forces the shift (the next-token curve is flat before it)"),
            row("m", None, "C1.middle", I)]  # a rule that recorded no reason, and nothing in the row says one
    lines = findings.run_shows(rows)
    check_length(lines)
    assert lines[0] == ("None of the 4 verdicts on 2 claims of the paper is decided: this run neither confirms "
                        "nor contradicts it.")
    assert lines[1] == ("Inconclusive, neither confirming nor contradicting the paper: C1.middle for m: no reason "
                        "recorded; C2-training.late-cut for gpt (alpha=0.5, alpha=0.9): seeds disagree, underpowered; "
                        "C2-training.late-cut for gpt (alpha=0): not applicable.")
    assert lines[2] == "None agrees with the paper, and none disagrees with the paper."


def test_per_seed_splits_are_counted():
    rows = [row("smol", "token gates", "C3.beats-baseline", I, per_seed=[I, R]),
            row("gemma", "token gates", "C3.beats-baseline", I, per_seed=[R, I]),
            row("gemma", "scalar gates", "C3.beats-baseline", N, per_seed=[N, N])]
    lines = findings.run_shows(rows)
    check_length(lines)
    assert lines[-1] == ("Seeds split inside a combined verdict: C3.beats-baseline for smol (token gates) and "
                         "gemma (token gates): 1 reproduced, 1 inconclusive (of 2).")
    assert "C3.beats-baseline for smol (token gates) and gemma (token gates): seeds disagree" in lines[2]
    assert findings.seed_counts([N, N, N]) == "3/3 not reproduced"
    assert findings.seed_counts([I, N, R, N]) == "1 reproduced, 2 not reproduced, 1 inconclusive (of 4)"


def test_rows_not_counted_as_evidence_are_reported_apart():
    from residshift.analysis.verdicts import C1_FITTED_WHY, C1_LATE_WHY
    sanity = dict(evidence=False, evidence_why=C1_LATE_WHY)
    fitted = dict(evidence=False, evidence_why=C1_FITTED_WHY)
    rows = [row("smol", "logit lens", "C1.early", N), row("smol", "logit lens", "C1.late", R, **sanity),
            row("smol", "tuned lens", "C1.early", N, **fitted), row("smol", "tuned lens", "C1.middle", R, **fitted),
            row("smol", "tuned lens", "C1.late", R, **sanity), row("gemma", "logit lens", "C1.late", R, **sanity)]
    lines = findings.run_shows(rows)
    check_length(lines)
    # the counts and the outcome sentences read only the one row that counts
    assert lines[0] == ("Not one of the 1 verdict on 1 claim of the paper reproduces it: every one disagrees with "
                        "the paper (5 more are reported but not counted as evidence).")
    assert lines[1] == "Not reproduced, disagreeing with the paper: C1.early for smol (logit lens)."
    assert lines[2] == "None agrees with the paper, and none is left open."
    assert lines[3] == ("Reported but not counted as evidence, either way: decoder fitted to the model's output — "
                        "C1.early for smol (tuned lens), C1.middle for smol (tuned lens); sanity check — C1.late for "
                        "smol (logit lens, tuned lens) and gemma (logit lens).")
    assert not any("agreeing with the paper: C1.late" in line for line in lines)
    only = findings.run_shows(rows[1:2])
    assert only[0] == "None of the 1 verdict of this run counts as evidence about the paper's claims."
    assert only[1] == "Reported but not counted as evidence, either way: sanity check — C1.late for smol (logit lens)."
    # the claims table keeps every row and says which does not count
    res = list(findings.claims_table(rows).reset_index()["our result"])
    assert sum("[not evidence: sanity check]" in x for x in res) == 3
    assert sum("[not evidence: decoder fitted to the model's output]" in x for x in res) == 2


def test_a_post_hoc_rule_shows_the_pre_registered_verdict():
    rows = [row("gemma", "logit lens", "C1.early", N, post_hoc=True, pre_registered_verdict=R),
            row("smol", "logit lens", "C1.early", N, post_hoc=True, pre_registered_verdict=N),
            row("gemma", "logit lens", "C1.middle", R)]
    lines = findings.run_shows(rows)
    check_length(lines)
    assert lines[-1] == ("Where a rule changed after the first numbers, the rule declared before them reads otherwise: "
                         "C1.early for gemma (logit lens) is not reproduced (pre-registered: reproduced).")
    res = list(findings.claims_table(rows).reset_index()["our result"])
    assert res[0].endswith("[post hoc; the pre-registered rule: reproduced]")
    assert res[1].endswith("[post hoc; the pre-registered rule: not reproduced]")
    assert res[2] == "reproduced: 0.5 [0.25, 0.75]"


def test_extra_sentences_are_appended_and_checked():
    rows = [row("m", None, "C1.late", R)]
    assert findings.run_shows(rows, extra=["The notebook's own sentence."])[-1] == "The notebook's own sentence."
    with pytest.raises(TypeError, match=r"extra=\[sentence\]"):
        findings.run_shows(rows, extra="one string")
    with pytest.raises(ValueError, match="non-empty strings"):
        findings.run_shows(rows, extra=[""])


def test_reason_reads_what_the_row_records():
    assert findings.reason(row("m", None, "C1.late", R)) == ""
    assert findings.reason(row("m", None, "C2-training.cut-misalignment", N, why="not a mitigation")) == \
        "not a mitigation"
    assert findings.reason(row("m", None, "C1", I, estimate=None, ci=(None, None), early=R, middle=I, late=R)) == \
        "its part middle is inconclusive"
    assert findings.reason(row("m", None, "C3.benchmarks", I, per_seed=[I, I], mde=0.418, margin=0.03,
                               mde_unit="accuracy")) == \
        "every seed is inconclusive; underpowered: MDE 0.418 > margin 0.03 accuracy"
    depth = row("m", "logit lens", "C1.depth", I, estimate=0.84, ci=(0.77, 0.87), band=[0.5, 0.8], curve_rises=True)
    assert findings.reason(depth) == "the interval straddles the band's edge 0.8"
    flat = row("m", "logit lens", "C1.depth", I, band=[0.5, 0.8], curve_rises=False)
    assert findings.reason(flat) == "the curve does not rise towards the next token"
    middle = row("m", None, "C1.middle", I, quiet_layers=[2], busy_layers=[5, 6], candidates=[2, 3, 4, 5, 6],
                 longest_quiet_run=[2])
    assert findings.reason(middle) == ("neither a run of quiet layers nor every layer busy (longest quiet run 1, "
                                       "2 of 5 layers busy)")
    assert findings.reason(row("m", None, "C2.layer-sensitive", I, threshold=0.5)) == \
        "the interval straddles the threshold 0.5"
    assert findings.reason(row("m", None, "C1.middle", I)) == findings.NO_REASON


def test_claims_table_sets_the_paper_beside_ours():
    rows = [row("m", "logit lens", "C1.depth", R, 0.6543, (0.61234, 0.70001), metric="top1"),
            row("m", "logit lens", "C1.depth", I, 0.7912, (0.77, 0.81234), metric="logrank", band=[0.5, 0.8],
                curve_rises=True),
            row("m", "logit lens", "C1.early", N, -0.0214844, (-0.0507812, 0.00585938), level=0.99),
            row("gpt", "learned", "C3-training.beats-baseline", I, 0.0353, (-0.1, 0.17), n=5,
                why="seeds disagree: 2 of 5 on the claimed side", unit="seed"),
            row("gpt", "b", "C1.late", R, per_seed=[R, R, I], estimate=None, ci=(None, None)),
            row("x", None, "C4.extra-check", R)]  # an id CLAIMS lacks: last, with the row's own words
    table = findings.claims_table(rows)
    assert list(table.index.names) == list(findings.INDEX)
    assert list(table.columns) == ["our result", "statistic", "seeds"]
    flat = table.reset_index()
    assert list(flat["claim"]) == ["C1.early", "C1.late", "C1.depth", "C1.depth", "C3-training.beats-baseline",
                                   "C4.extra-check"]
    assert list(flat[findings.PAPER_COLUMN])[:3] == [CLAIMS["C1.early"], CLAIMS["C1.late"], CLAIMS["C1.depth"]]
    assert flat[findings.PAPER_COLUMN].iloc[-1] == "the rule's words"
    assert list(flat["variant"])[2:4] == ["logit lens, top1", "logit lens, logrank"]
    assert list(flat["variant"])[-1] == "–"
    res = list(flat["our result"])
    assert res[0] == "not reproduced: -0.0215 [-0.0508, 0.00586] (99% CI)"
    assert res[1] == "reproduced"
    assert res[2] == "reproduced: 0.654 [0.612, 0.7]"
    assert res[3] == "inconclusive: 0.791 [0.77, 0.812] (the interval straddles the band's edge 0.8)"
    assert res[4] == "inconclusive: 0.0353 [-0.1, 0.17] (seeds disagree: 2 of 5 on the claimed side)"
    assert list(flat["seeds"]) == ["–", "2 reproduced, 1 inconclusive (of 3)", "–", "–", "5 seeds as the unit", "–"]
    text = repr(table)  # whole cells, not cut at pandas' 50 characters
    assert CLAIMS["C1.early"] in text and "seeds disagree: 2 of 5 on the claimed side" in text
    assert CLAIMS["C1.early"] in table._repr_html_()


def test_duplicates_without_a_metric_are_told_apart_by_their_statistic():
    rows = [row("m", "v", "C1.depth", N, statistic="depth (top1) (mean over seeds)"),
            row("m", "v", "C1.depth", N, statistic="depth (logrank) (mean over seeds)"),
            row("m", "v", "C1.late", N), row("m", "v", "C1.late", N)]
    assert list(findings.claims_table(rows).reset_index()["variant"]) == ["v, #1", "v, #2", "v, top1", "v, logrank"]


def test_bad_input_names_the_fix(tmp_path):
    with pytest.raises(VerdictError, match="load_verdicts"):
        findings.claims_table([])
    with pytest.raises(VerdictError, match="load_verdicts"):
        findings.run_shows([{"claim_id": "C1"}])
    with pytest.raises(VerdictError, match="run the notebook"):
        findings.print_findings(tmp_path / "missing-verdicts.json")


def test_print_findings_prints_the_list_and_returns_the_table(tmp_path, capsys):
    rows = [row("m", None, "C2.late-cut", N), row("m", None, "C2.layer-sensitive", R)]
    path = tmp_path / "04-x-verdicts.json"
    path.write_text(json.dumps([r.as_dict() for r in rows]))
    table = findings.print_findings(path, title="What notebook 04 shows", extra=["Extra."])
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "What notebook 04 shows"
    assert out[1:6] == [f"- {line}" for line in findings.run_shows(rows, extra=["Extra."])]
    assert table.equals(findings.claims_table(rows))


@pytest.mark.parametrize("path", sorted((REPO_ROOT / "figures").glob("*verdicts*.json")), ids=lambda p: p.name[:2])
def test_the_saved_verdicts_read_in_a_few_sentences(path):
    from residshift.analysis.verdicts import load_verdicts

    rows = load_verdicts(path)
    lines = findings.run_shows(rows)
    check_length(lines)
    assert "no reason recorded" not in " ".join(lines), "an inconclusive row says no reason"
    table = findings.claims_table(rows)
    assert len(table) == len(rows) and table.index.is_unique


def test_frozen_model_rows_neither_agree_nor_disagree_with_the_paper():
    from residshift.analysis.verdicts import NOT_REPRODUCED, REPRODUCED, VerdictRow
    from residshift.study import findings

    def row(cid, verdict):
        return VerdictRow(model="m", variant=None, claim_id=cid, claim="c", verdict=verdict, statistic="s",
                          estimate=None, ci=(None, None), level=None, n=1, rule="r", details={"why": "x"})

    lines = findings.run_shows([row("C2.late-cut", NOT_REPRODUCED), row("C2.layer-sensitive", NOT_REPRODUCED)])
    assert "disagreeing with the paper" not in " ".join(lines) and "frozen models" in lines[0]
    mixed = findings.run_shows([row("C2.late-cut", NOT_REPRODUCED), row("C2-training.late-cut", NOT_REPRODUCED),
                                row("C3.concentrates", REPRODUCED)])
    assert any(line.startswith("Not reproduced, disagreeing with the paper: C2-training.late-cut") for line in mixed)
    assert any(line.startswith("Does not hold on the frozen models") and "C2.late-cut" in line for line in mixed)
    assert any(line.startswith("Holds on the frozen models") and "C3.concentrates" in line for line in mixed)
