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
# the same shape at a pretrained model's final rate (~0.35, as 03's): 512 positions resolve it
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
    # a near-bigram shape with a final rate of 0.16 is not resolved by 512 positions on every draw
    low = _check(S.switch_on_windows(**_windows(NEAR_BIGRAM, seed=2), model="m", n_boot=300))
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
