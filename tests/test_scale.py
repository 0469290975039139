"""The deep-switch measure (residshift.analysis.scale): each outcome from constructed curves at the
profile's sample sizes, the bad inputs, and the committed numbers (structure only)."""
import json

import numpy as np
import pytest

from committed import committed_json
from residshift.analysis import scale as S
from residshift.analysis import verdicts as V
from residshift.core import profiles

P = profiles.get("default")
WINDOWS, SEEDS, SEED_WINDOWS = P["lens_windows"], len(P["train_seeds"]), P["train_lens_windows"]
POSITIONS = P["lens_positions"] or 16
UNIGRAM = 0.05

# per-layer top-1 rates of the next and the input token, h_0..h_L
NEAR_BIGRAM = {"next": [0.01, 0.12, 0.13, 0.14, 0.15, 0.155, 0.16],  # jumps at h_1 (L = 6), as 08's baselines
               "input": [0.9, 0.15, 0.06, 0.06, 0.06, 0.05, 0.05]}
# the same shape at a pretrained model's final rate (~0.35, as 03's): notebook 03's sample resolves it
NEAR_BIGRAM_LM = {"next": [0.01, 0.27, 0.29, 0.31, 0.33, 0.34, 0.36], "input": NEAR_BIGRAM["input"]}
DEEP = {"next": [0.01, 0.02] + [0.01] * 7 + [0.12, 0.2, 0.28, 0.35],  # flat below the unigram, late rise (L = 12)
        "input": [0.95, 0.4] + [0.01] * 11}
STRADDLE = {"next": [0.01, 0.15, 0.17, 0.2, 0.24, 0.27, 0.3],  # h_1 carries half the final rate
            "input": [0.9, 0.15, 0.06, 0.06, 0.06, 0.05, 0.05]}


def _windows(curves, *, n=WINDOWS, positions=POSITIONS, seed=0):
    """Per-window rates as the lens measures them: shares of ``positions`` analysed positions. Each
    position has an "easiness" u ~ U(0, 1) and is decoded right at h_l iff u < p(l), so a position
    right at h_1 is right wherever the curve is at least as high (the same tokens, as in a real lens
    run); the unigram decoder's hits are drawn independently."""
    rng = np.random.default_rng(seed)

    def rate(p):
        u = rng.uniform(size=(n, positions, 1))
        return (u < np.asarray(p)).mean(axis=1)

    return dict(top1_input=rate(curves["input"]), top1_next=rate(curves["next"]),
                unigram_input=rng.binomial(positions, UNIGRAM, n) / positions,
                unigram_next=rng.binomial(positions, UNIGRAM, n) / positions)


def _seeds(curves, *, n_seeds=SEEDS, n=SEED_WINDOWS, jitter=None, seed=0):
    ws = []
    for s in range(n_seeds):
        c = dict(curves)
        if jitter is not None:
            c = {**c, "next": np.asarray(c["next"]) * np.r_[1.0, jitter[s], np.ones(len(c["next"]) - 2)]}
        ws.append(_windows(c, n=n, seed=seed + s))
    return {k: np.stack([w[k] for w in ws]) for k in ws[0]}


def _check(row):
    assert isinstance(row, S.SwitchRow) and set(row.as_dict()) == set(S.FIELDS)
    json.dumps(row.as_dict())
    assert "{" not in row.rule and str(S.SHARE_THRESHOLD) in row.rule
    assert (row.outcome == S.SWITCH_INCONCLUSIVE) == bool(row.why)
    return row


def test_constants_are_the_declared_ones():
    assert S.SWITCH_OUTCOMES == ("deep switch", "near-bigram", "inconclusive")
    assert S.SHARE_THRESHOLD == 0.5 and S.EARLY_LAYER == 1 and S.MIN_LAYERS == 4
    assert S.DEPARTURE_MARGIN == V.C1_MARGIN and S.LEVEL == V.LEVEL
    assert S.COMMITTED_LEVEL == pytest.approx(0.9)


def test_the_rule_reaches_every_outcome_and_says_why():
    assert S.switch_outcome(0.02, 0.1, V.REPRODUCED) == (S.DEEP_SWITCH, "")
    assert S.switch_outcome(0.6, 0.8, V.NOT_REPRODUCED) == (S.NEAR_BIGRAM, "")
    assert S.switch_outcome(0.6, 0.8, V.INCONCLUSIVE) == (S.NEAR_BIGRAM, "")
    for args, why in [((0.4, 0.6, V.REPRODUCED), "straddles"), ((0.02, 0.1, V.INCONCLUSIVE), "no quiet middle"),
                      ((0.02, 0.1, V.NOT_REPRODUCED), "no quiet middle"), ((0.6, 0.8, V.REPRODUCED), "disagree"),
                      ((None, None, V.REPRODUCED), "no interval")]:
        out, text = S.switch_outcome(*args)
        assert out == S.SWITCH_INCONCLUSIVE and why in text
    with pytest.raises(ValueError, match="C1.middle verdict"):
        S.switch_outcome(0.1, 0.2, "yes")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_pretrained_windows_near_bigram_and_deep_switch(seed):
    """At notebook 03's sample (lens_windows x lens_positions), on three draws, not one lucky one."""
    near = _check(S.switch_on_windows(**_windows(NEAR_BIGRAM_LM, seed=seed), model="m", n_boot=300))
    assert near.outcome == S.NEAR_BIGRAM and near.middle == V.NOT_REPRODUCED and near.n == WINDOWS
    assert near.early_share_ci[0] > 0.5 and near.departure_layer == 1 and near.unit == "windows"
    deep = _check(S.switch_on_windows(**_windows(DEEP, seed=seed), model="m", n_boot=300))
    assert deep.outcome == S.DEEP_SWITCH and deep.middle == V.REPRODUCED and deep.early_share_ci[1] < 0.5
    assert deep.departure_layer in (9, 10) and deep.departure_depth >= 0.75


def test_pretrained_windows_straddle_and_low_final_rate_are_inconclusive():
    mid = _check(S.switch_on_windows(**_windows(STRADDLE), model="m", n_boot=300))
    assert mid.outcome == S.SWITCH_INCONCLUSIVE and "straddles" in mid.why
    assert mid.early_share_ci[0] < 0.5 < mid.early_share_ci[1]
    # a near-bigram shape with a final rate of 0.16 is not resolved by 512 positions (32 windows x 16, the
    # sample of the committed notebook-03 run, before C1's sizes were derived) on every draw
    low = _check(S.switch_on_windows(**_windows(NEAR_BIGRAM, n=32, positions=16, seed=2), model="m", n_boot=300))
    assert low.outcome == S.SWITCH_INCONCLUSIVE and low.early_share > 0.5


def test_trained_seeds_near_bigram_deep_switch_and_straddle():
    near = S.switch_across_seeds(**_seeds(NEAR_BIGRAM), model="m", variant="v", n_boot=200)
    assert [r.unit for r in near] == ["seed"] * SEEDS + ["seeds"] and [r.seed for r in near[:-1]] == list(range(SEEDS))
    assert all(r.outcome is None and r.early_share_ci == (None, None) for r in map(_check, near[:-1]))
    assert _check(near[-1]).outcome == S.NEAR_BIGRAM and near[-1].n == SEEDS
    deep = S.switch_across_seeds(**_seeds(DEEP), model="m", n_boot=200)[-1]
    assert _check(deep).outcome == S.DEEP_SWITCH and deep.middle == V.REPRODUCED
    # seeds spread around half: some put 40%, some 60% of the final rate at h_1
    wide = S.switch_from_seed_curves([np.r_[0.01, 0.15 * f, 0.2, 0.22, 0.25, 0.28, 0.3] for f in (0.8, 1.2, 0.9, 1.1, 1.0)],
                                     UNIGRAM, [V.NOT_REPRODUCED] * SEEDS, model="m")[-1]
    assert _check(wide).outcome == S.SWITCH_INCONCLUSIVE and "straddles" in wide.why
    # seeds that disagree on C1.middle: combined by unanimity, so a low share is not enough
    low = [np.r_[DEEP["next"][0], DEEP["next"][1] * (1 + 0.1 * s), DEEP["next"][2:]] + 0.001 * s for s in range(SEEDS)]
    split = S.switch_from_seed_curves(low, UNIGRAM, [V.REPRODUCED] * 4 + [V.INCONCLUSIVE], model="m")[-1]
    assert split.outcome == S.SWITCH_INCONCLUSIVE and split.middle == V.INCONCLUSIVE


def test_departure_reads_the_lower_bound():
    lo = [0.9, 0.0, 0.01, 0.019, 0.03, 0.05]
    assert S.departure(lo) == (4, pytest.approx(0.8))
    assert S.departure([0.0] * 6) == (None, None)
    assert S.departure(lo, margin=0.0) == (2, pytest.approx(0.4))
    assert S.departure([None, None, 0.0, 0.0, 0.05]) == (4, 1.0)  # no interval: not departed
    with pytest.raises(ValueError, match="one curve"):
        S.departure([lo, lo])


def test_bad_input_names_the_fix():
    w = _windows(NEAR_BIGRAM)
    with pytest.raises(ValueError, match="at least 4"):
        S.switch_on_windows(**_windows({"next": [0.0, 0.1, 0.2, 0.3], "input": [0.9, 0.1, 0.1, 0.1]}), model="m")
    with pytest.raises(ValueError, match=r"\[n_windows, L\+1\]"):
        S.switch_on_windows(**{**w, "top1_next": w["top1_next"][0]}, model="m")
    with pytest.raises(ValueError, match="same windows"):
        S.switch_on_windows(**{**w, "unigram_next": w["unigram_next"][:5]}, model="m")
    with pytest.raises(ValueError, match="NaN"):
        S.early_share(np.full((4, 7), np.nan))
    curves = [NEAR_BIGRAM["next"]] * 3
    with pytest.raises(ValueError, match="one C1.middle verdict per seed"):
        S.switch_from_seed_curves(curves, UNIGRAM, [V.NOT_REPRODUCED], model="m")
    with pytest.raises(ValueError, match="one per seed"):
        S.switch_from_seed_curves(curves, [UNIGRAM] * 2, [V.NOT_REPRODUCED] * 3, model="m")
    with pytest.raises(ValueError, match="final next-token top-1 rate is 0"):
        S.switch_from_seed_curves([[0.0] * 7] * 3, UNIGRAM, [V.NOT_REPRODUCED] * 3, model="m")
    s = _seeds(NEAR_BIGRAM, n_seeds=2, n=4)
    with pytest.raises(ValueError, match=r"\[n_seeds, n_windows, L\+1\]"):
        S.switch_across_seeds(**{**s, "top1_next": s["top1_next"][0]}, model="m")


def test_one_seed_is_inconclusive_not_an_error():
    row = S.switch_from_seed_curves([NEAR_BIGRAM["next"]], UNIGRAM, [V.NOT_REPRODUCED], model="m")[-1]
    assert row.outcome == S.SWITCH_INCONCLUSIVE and "no interval" in row.why and row.departure_layer is None


def test_committed_numbers_give_one_row_per_model_and_seed():
    regimes = committed_json("figures/08-misalignment-after-mitigation-regimes.json")
    rows = S.committed_rows(regimes, committed_json("figures/08-misalignment-after-mitigation-verdicts.json"),
                            committed_json("figures/03-alignment-curves-metrics.json"),
                            committed_json("figures/03-alignment-curves-c1.json"),
                            committed_json("figures/03-alignment-curves-verdicts.json"))
    for r in rows:
        _check(r)
    seed_rows = [r for r in rows if r.unit == "seed"]
    assert sorted((r.variant, r.seed) for r in seed_rows) == sorted(
        (f"{S.DECODER}, {emb} embedding", int(s)) for emb, per in regimes.items() for s in per)
    sets = [r for r in rows if r.unit == "seeds"]
    assert sorted(r.variant for r in sets) == sorted(f"{S.DECODER}, {emb} embedding" for emb in regimes)
    pre = [r for r in rows if r.unit == "committed intervals"]
    assert sorted(r.model for r in pre) == sorted(committed_json("figures/03-alignment-curves-metrics.json"))
    for r in sets + pre:
        assert r.outcome in S.SWITCH_OUTCOMES and r.middle in V.OUTCOMES and r.early_share is not None
        lo, hi = r.early_share_ci
        assert lo is not None and hi is not None and lo <= r.early_share <= hi
    assert all(r.level == pytest.approx(S.COMMITTED_LEVEL) for r in pre)
    assert len(rows) == len(seed_rows) + len(sets) + len(pre)


# --------------------------------------------------------------------------------------------
# The scale clause of a C2-C4 training verdict (issue 33)
# --------------------------------------------------------------------------------------------

TRAINING_VERDICTS = ("figures/06-training-with-attenuation-verdicts.json",
                     "figures/07-learned-gates-and-benchmarks-verdicts.json",
                     "figures/08-misalignment-after-mitigation-verdicts.json")
REGIMES = "figures/08-misalignment-after-mitigation-regimes.json"


def _switch(outcome, *, share=(0.74, 0.69, 0.79), middle=V.NOT_REPRODUCED, model="trained GPT 6x128, gemma embedding "
            "(5 seeds)", variant="logit lens, gemma embedding", unit="seeds", why=None):
    why = ("the early share straddles" if outcome == S.SWITCH_INCONCLUSIVE else "") if why is None else why
    return S.SwitchRow(model=model, variant=variant, unit=unit, seed=None, n=5, n_layers=6, early_share=share[0],
                       early_share_ci=share[1:], level=0.95, departure_layer=1, departure_depth=1 / 6, middle=middle,
                       outcome=outcome, why=why, rule=S.SWITCH_RULE, source=S.TRAINED_SOURCE)


def _verdict(claim_id, verdict, *, model="trained GPT 6x128", variant="learned"):
    return V.VerdictRow(model=model, variant=variant, claim_id=claim_id, claim="c", verdict=verdict, statistic="s",
                        estimate=0.1, ci=(0.0, 0.2), level=0.95, n=5, rule="r",
                        details={"why": "x"} if verdict == V.INCONCLUSIVE else {})


def test_scale_clause_of_each_switch_outcome():
    deep = S.scale_clause(_switch(S.DEEP_SWITCH, share=(0.05, 0.01, 0.11), middle=V.REPRODUCED))
    assert deep.counts_as_evidence and deep.outcome == S.DEEP_SWITCH and deep.middle == V.REPRODUCED
    assert "S1 = 0.05 [0.01, 0.11] (95% t-interval over 5 seeds), C1.middle reproduced: deep switch" in deep.reads
    assert deep.reads.endswith("counts as evidence either way") and deep.n_layers == 6
    near = S.scale_clause(_switch(S.NEAR_BIGRAM))
    assert not near.counts_as_evidence and near.early_share_ci == (0.69, 0.79)
    assert ("speaks for trained GPT 6x128, gemma embedding (5 seeds), 6 blocks: S1 = 0.74 [0.69, 0.79]" in near.reads
            and near.reads.endswith(f"not counted as evidence against the paper's claim ({S.LACKS})"))
    unsure = S.scale_clause(_switch(S.SWITCH_INCONCLUSIVE, share=(0.5, 0.4, 0.6)))
    assert not unsure.counts_as_evidence and "(the early share straddles)" in unsure.reads
    assert unsure.reads.endswith(f"({S.NOT_SHOWN})")
    for c in (deep, near, unsure):
        assert json.loads(json.dumps(c.as_dict()))["counts_as_evidence"] == c.counts_as_evidence
        assert (c.model, c.variant, c.source) == (near.model, near.variant, S.TRAINED_SOURCE)


def test_what_each_verdict_counts_as_is_the_rules_words():
    R, N, I = V.REPRODUCED, V.NOT_REPRODUCED, V.INCONCLUSIVE
    assert [S.evidence(v, S.DEEP_SWITCH) for v in (R, N, I)] == [S.EVIDENCE_FOR, S.EVIDENCE_AGAINST, S.NO_EVIDENCE]
    assert [S.evidence(v, S.NEAR_BIGRAM) for v in (R, N, I)] == [S.NOT_PAPER_REGIME, S.NOT_EVIDENCE, S.NOT_EVIDENCE]
    assert [S.evidence(v, S.SWITCH_INCONCLUSIVE) for v in (R, N, I)] == [
        S.NOT_PAPER_REGIME_UNSHOWN, S.NOT_EVIDENCE_UNSHOWN, S.NOT_EVIDENCE_UNSHOWN]
    assert S.NOT_EVIDENCE == "not evidence: the baseline lacks the deep switch the mitigation acts on"
    for words in (S.NOT_EVIDENCE, S.NOT_PAPER_REGIME, S.NOT_SHOWN, "not counted as evidence against the paper's claim",
                  "changes no verdict"):
        assert words in S.SCALE_RULE
    assert [S.is_scaled(c) for c in ("C2.late-cut", "C2-training.late-cut", "C3-training.concentrates.material",
                                     "C3.benchmarks", "C4.benchmarks", "C1", "C1.middle", "C1.depth.sensitivity")] == [
        True] * 5 + [False] * 3


def test_a_not_reproduced_c2_row_on_a_near_bigram_baseline_is_not_evidence():
    late = _verdict("C2-training.late-cut", V.NOT_REPRODUCED, variant="block 5, alpha=0")
    gates = _verdict("C3-training.misalignment", V.REPRODUCED)
    middle = _verdict("C1.middle", V.NOT_REPRODUCED, variant="logit lens")
    out = S.with_scale([late, gates, middle], _switch(S.NEAR_BIGRAM))
    assert out[0]["scale"]["evidence"] == S.NOT_EVIDENCE and out[0]["scale"]["counts_as_evidence"] is False
    assert out[0]["verdict"] == V.NOT_REPRODUCED  # the clause changes no verdict
    assert out[0]["scale"]["outcome"] == S.NEAR_BIGRAM and out[0]["scale"]["middle"] == V.NOT_REPRODUCED
    assert out[0]["scale"]["early_share_ci"] == [0.69, 0.79] and out[0]["scale"]["rule"] == S.SCALE_RULE
    assert out[1]["scale"]["evidence"] == S.NOT_PAPER_REGIME
    assert out[2] == middle.as_dict() and "scale" not in out[2]  # C1 rows untouched
    json.dumps(out)
    # the same rows as JSON dicts: scaled alike, the C1 dict returned as given
    dicts = S.with_scale([late.as_dict(), middle.as_dict()], _switch(S.DEEP_SWITCH, share=(0.05, 0.01, 0.11),
                                                                     middle=V.REPRODUCED))
    assert dicts[0]["scale"]["evidence"] == S.EVIDENCE_AGAINST and dicts[0]["scale"]["counts_as_evidence"] is True
    assert dicts[1] == middle.as_dict()
    table = S.scale_table(out)
    assert len(table) == 2 and tuple(table[0]) == S.SCALE_COLUMNS
    assert table[0] == {"claim": "C2-training.late-cut", "model": "trained GPT 6x128", "variant": "block 5, alpha=0",
                        "verdict": V.NOT_REPRODUCED, "baseline": "trained GPT 6x128, gemma embedding (5 seeds)",
                        "switch": S.NEAR_BIGRAM, "S1 [CI]": "0.74 [0.69, 0.79]", "C1.middle": V.NOT_REPRODUCED,
                        "blocks": "6", "counts as evidence": "no", "reading": S.NOT_EVIDENCE}


def test_committed_training_verdicts_each_get_their_baselines_scale():
    files = {p: committed_json(p) for p in TRAINING_VERDICTS}
    regimes, v08 = committed_json(REGIMES), files[TRAINING_VERDICTS[-1]]
    out = S.scale_training_verdicts(files, regimes, v08)
    rows = [r for p in TRAINING_VERDICTS for r in files[p]]
    assert [d["claim_id"] for d in out] == [r["claim_id"] for r in rows]
    scaled = [d for d in out if "scale" in d]
    assert len(scaled) == sum(S.is_scaled(r["claim_id"]) for r in rows) > 0
    assert all("scale" not in d for d in out if not S.is_scaled(d["claim_id"]))
    sets = {S.recipe_of(s): s for s in S.trained_rows(regimes, v08) if s.unit == "seeds"}
    assert S.DEFAULT_RECIPE == profiles.get("default")["train_embedding"] and S.DEFAULT_RECIPE in sets
    for d in scaled:  # the grid's verdicts are on the grid's recipe: its seed-set row
        s = d["scale"]
        assert s["model"] == sets[S.DEFAULT_RECIPE].model and s["unit"] == "seeds"
        assert s["outcome"] == sets[S.DEFAULT_RECIPE].outcome and s["n_layers"] == sets[S.DEFAULT_RECIPE].n_layers
        assert s["counts_as_evidence"] == (s["outcome"] == S.DEEP_SWITCH)
        assert s["evidence"] == S.evidence(d["verdict"], s["outcome"])
    assert len(S.scale_table(out)) == len(scaled)
    # a row on the contrast arm names its recipe, and gets that baseline's row
    contrast = profiles.get("default")["train_contrast_embedding"]
    arm = _verdict("C3-training.beats-baseline", V.NOT_REPRODUCED, variant=f"baseline ({contrast} embedding)")
    assert S.match_switch_row(arm, list(sets.values())) is sets[contrast]
    assert S.match_switch_row(arm.as_dict(), list(sets.values()), recipe="anything") is sets[contrast]


def test_bad_scale_input_names_the_fix():
    sets = [_switch(S.NEAR_BIGRAM), _switch(S.NEAR_BIGRAM, model="trained GPT 6x128, nanogpt embedding (5 seeds)",
                                            variant="logit lens, nanogpt embedding")]
    with pytest.raises(ValueError, match="0 seed-set switch rows .* Measure that baseline"):
        S.match_switch_row(_verdict("C2-training.late-cut", V.INCONCLUSIVE, model="trained GPT 12x256"), sets)
    with pytest.raises(ValueError, match="gemma-rope embedding .* pass recipe="):
        S.match_switch_row(_verdict("C2-training.late-cut", V.INCONCLUSIVE), sets, recipe="gemma-rope")
    with pytest.raises(ValueError, match="split it by recipe"):
        S.match_switch_row(_verdict("C4.benchmarks", V.INCONCLUSIVE, variant="gemma embedding vs nanogpt embedding"),
                           sets)
    with pytest.raises(ValueError, match="2 seed-set switch rows"):
        S.match_switch_row(_verdict("C4.benchmarks", V.INCONCLUSIVE), sets + [sets[0]])
    per_seed = S.SwitchRow(**{**sets[0].as_dict(), "unit": "seed", "seed": 3, "outcome": None, "why": "",
                              "early_share_ci": (None, None)})
    with pytest.raises(ValueError, match="per-seed row"):
        S.scale_clause(per_seed)
    with pytest.raises(ValueError, match="needs a SwitchRow"):
        S.scale_clause(sets[0].as_dict())
    with pytest.raises(ValueError, match="not one row"):
        S.with_scale(_verdict("C2-training.late-cut", V.INCONCLUSIVE), sets[0])
    with pytest.raises(ValueError, match="verdict row"):
        S.with_scale([{"claim_id": "C2.late-cut"}], sets[0])
    with pytest.raises(ValueError, match="VerdictRow or its JSON dict"):
        S.with_scale([42], sets[0])
    with pytest.raises(ValueError, match="not one of"):
        S.evidence("yes", S.NEAR_BIGRAM)
    with pytest.raises(ValueError, match="per-seed one"):
        S.evidence(V.REPRODUCED, None)
    with pytest.raises(ValueError, match="older notebook"):
        S.scale_training_verdicts({"figures/x.json": {"not": "rows"}}, committed_json(REGIMES),
                                  committed_json(TRAINING_VERDICTS[-1]))
