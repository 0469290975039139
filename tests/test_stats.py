"""Statistics on synthetic data with known answers, checked against independent computations."""
import math

import numpy as np
import pytest
import torch

from residshift.analysis import stats
from residshift.measure.lens import ORIENTATION, LensResult


def test_shift_layer_rules_and_orientation():
    a = [1.0, 0.8, 0.5, 0.2, 0.3, 0.1]
    b = [0.0, 0.1, 0.3, 0.4, 0.2, 0.9]
    assert stats.shift_layer(a, b) == 3
    assert stats.shift_layer(a, b, rule="sustained") == 5  # dips back below at layer 4
    assert stats.shift_layer(a, a) is None  # equal: never strictly above
    assert stats.shift_layer(b, a, rule="sustained") is None  # ends below
    # ranks: smaller is better, orientation -1
    assert stats.shift_layer([1, 2, 50, 900], [800, 300, 20, 3], orientation=-1) == 2
    with pytest.raises(ValueError, match="rule"):
        stats.shift_layer(a, b, rule="last")


def test_crossing_point_interpolates():
    assert stats.crossing_point([1.0, 0.0], [0.0, 1.0]) == pytest.approx(0.5)
    assert stats.crossing_point([1.0, 0.6, 0.2], [0.0, 0.2, 0.6]) == pytest.approx(1.5)
    assert stats.crossing_point([1.0, 0.9], [0.0, 0.1]) is None
    assert stats.crossing_point([0.0, 0.9], [1.0, 0.1]) == 0.0


def test_curve_ci_matches_direct_loop():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 5)) + np.arange(5)
    ci = stats.curve_ci(x, n_boot=200, seed=7)
    idx = np.random.default_rng(7).integers(0, 40, size=(200, 40))
    boots = np.array([x[i].mean(0) for i in idx])
    np.testing.assert_allclose(ci.lo, np.quantile(boots, 0.025, axis=0))
    np.testing.assert_allclose(ci.hi, np.quantile(boots, 0.975, axis=0))
    np.testing.assert_allclose(ci.estimate, x.mean(0))
    assert np.all(ci.lo < ci.estimate) and np.all(ci.estimate < ci.hi)
    # roughly ± 1.96 standard errors
    se = x.std(0, ddof=1) / np.sqrt(40)
    np.testing.assert_allclose(ci.hi - ci.lo, 2 * 1.96 * se, rtol=0.3)
    med = stats.curve_ci(torch.tensor(x), n_boot=50, seed=1, stat="median")
    np.testing.assert_allclose(med.estimate, np.median(x, 0))
    with pytest.raises(ValueError, match="at least 2"):
        stats.curve_ci(x[:1])


def _synthetic(n_seq=60, L=10, cross=6.3, noise=0.05, seed=0):
    """Input alignment falls, next rises; they cross at `cross` (in layers)."""
    rng = np.random.default_rng(seed)
    layers = np.arange(L + 1)
    a = np.clip(1 - layers / (2 * cross), 0, 1)
    b = np.clip(layers / (2 * cross), 0, 1)
    pa = a + rng.normal(0, noise, size=(n_seq, L + 1))
    pb = b + rng.normal(0, noise, size=(n_seq, L + 1))
    return pa, pb


def test_shift_estimate_recovers_known_crossing():
    pa, pb = _synthetic(cross=6.3)
    est = stats.shift_estimate(pa, pb, metric="top1", n_layers=10, orientation=1, n_boot=300, seed=0)
    assert est.layer == 7
    assert est.lo <= 6.3 <= est.hi and est.hi - est.lo < 1.0
    assert est.frac_never == 0
    assert est.relative == pytest.approx(est.crossing / 10)
    assert est.as_dict()["relative_lo"] == pytest.approx(est.lo / 10)
    never = stats.shift_estimate(pa, pa - 0.5, metric="top1", n_layers=10, orientation=1, n_boot=50)
    assert never.layer is None and never.frac_never == 1 and never.lo is None
    # ranks: smaller is more aligned; negating both curves with orientation -1 gives the same crossing
    neg = stats.shift_estimate(-pa, -pb, metric="rank", n_layers=10, orientation=-1, n_boot=300, seed=0)
    assert (neg.layer, neg.crossing, neg.lo, neg.hi) == (est.layer, est.crossing, est.lo, est.hi)
    with pytest.raises(ValueError, match="orientation"):
        stats.shift_estimate(pa, pb, metric="top1", n_layers=10, orientation=0)
    with pytest.raises(ValueError, match=r"\[n_seq, 6\]"):
        stats.shift_estimate(pa, pb, metric="top1", n_layers=5, orientation=1)


def test_grouped_curve_ci_matches_pooled_means():
    rng = np.random.default_rng(1)
    n_tok, L1 = 300, 4
    values = rng.normal(size=(L1, n_tok))
    seq = np.repeat(np.arange(30), 10)
    group = rng.integers(0, 3, size=n_tok)
    out = stats.grouped_curve_ci(values, seq, group, n_groups=3, n_boot=100, seed=0)
    for g in range(3):
        np.testing.assert_allclose(out["estimate"][g], values[:, group == g].mean(1))
        assert out["count"][g] == (group == g).sum()
    assert np.all(out["lo"] <= out["estimate"] + 1e-12) and np.all(out["estimate"] <= out["hi"] + 1e-12)
    # the bootstrap done by hand: pool the tokens of the resampled sequences
    boots = []
    for i in np.random.default_rng(0).integers(0, 30, size=(100, 30)):
        pooled = np.concatenate([np.flatnonzero((seq == s) & (group == 0)) for s in i])
        boots.append(values[:, pooled].mean(1))
    np.testing.assert_allclose(out["lo"][0], np.quantile(np.array(boots), 0.025, axis=0))


def test_shift_table_uses_medians_for_rank():
    pa, pb = _synthetic(L=6, cross=3.2)
    t = torch.tensor
    res = LensResult(model="s", n_layers=6, columns=[],
                     per_seq={"top1_input": t(pa), "top1_next": t(pb),
                              "rank_input": t(1 / (pa + 1.1)), "rank_next": t(1 / (pb + 1.1))},
                     per_seq_median={"rank_input": t(1 / (pa + 1.1)), "rank_next": t(1 / (pb + 1.1))},
                     tokens={})
    table = stats.shift_table(res, orientation=ORIENTATION, n_boot=50)
    assert [e.metric for e in table] == ["rank", "top1"]
    assert table[0].stat == "median" and table[1].stat == "mean"
    assert table[0].layer == table[1].layer == 4


def test_format_ci():
    assert stats.format_ci(0.654, 0.6, 0.71) == "0.65 [0.60, 0.71]"
    assert stats.format_ci(None, None, None) == "never"


def test_grouped_shift_finds_each_groups_crossing():
    rng = np.random.default_rng(2)
    L, n_seq, per = 8, 40, 20
    layers = np.arange(L + 1)[:, None]
    seq = np.repeat(np.arange(n_seq), per)
    group = np.tile(np.arange(per) % 2, n_seq)  # group 0 crosses near 2.5, group 1 near 5.5
    cross = np.where(group == 0, 2.5, 5.5)[None, :]
    a = (layers < cross).astype(float) * 0.8 + rng.normal(0, 0.05, size=(L + 1, seq.size))
    b = (layers > cross).astype(float) * 0.6 + rng.normal(0, 0.05, size=(L + 1, seq.size))
    est = stats.grouped_shift(a, b, seq, group, n_groups=3, metric="top1", n_layers=L, orientation=1,
                              n_boot=100)
    assert est[0].layer == 3 and est[1].layer == 6
    assert 2 <= est[0].lo <= est[0].hi <= 3 and 5 <= est[1].lo <= est[1].hi <= 6
    assert est[2].layer is None and est[2].frac_never == 1.0  # an empty group


def test_halfway_point_and_estimate():
    assert stats.halfway_point([0.0, 0.2, 0.4, 0.6, 0.8, 1.0]) == pytest.approx(2.5)
    assert stats.halfway_point([1.0, 0.1, 0.05, 0.0]) == pytest.approx(0.5 / 0.9)  # falling curve
    assert stats.halfway_point([0.0, 0.6, 0.1, 1.0]) == pytest.approx(0.5 / 0.6)  # first reach
    assert stats.halfway_point([0.3, 0.1, 0.3]) is None  # does not move from 0 to L
    with pytest.raises(ValueError, match="frac"):
        stats.halfway_point([0, 1], frac=1.5)
    rng = np.random.default_rng(0)
    layers = np.arange(11)
    x = np.clip((layers - 5) / 4, 0, 1) + rng.normal(0, 0.03, size=(50, 11))  # rises 5 -> 9, half at 7
    est = stats.halfway_estimate(x, metric="top1", n_layers=10, n_boot=200)
    assert est.lo <= 7.0 <= est.hi and est.hi - est.lo < 0.6 and est.layer in (7, 8)
    assert est.relative == pytest.approx(est.crossing / 10)


def test_transition_table_orders_fade_crossing_emergence():
    rng = np.random.default_rng(1)
    L, n = 12, 40
    layers = np.arange(L + 1)
    a = np.where(layers == 0, 0.9, 0.02) + rng.normal(0, 0.01, size=(n, L + 1))
    b = np.clip((layers - 6) / 6, 0, 1) * 0.4 + 0.03 + rng.normal(0, 0.01, size=(n, L + 1))
    t = torch.tensor
    res = LensResult(model="s", n_layers=L, columns=[], per_seq={"top1_input": t(a), "top1_next": t(b)},
                     per_seq_median={}, tokens={})
    row, = stats.transition_table(res, orientation=ORIENTATION, n_boot=100)
    assert row["metric"] == "top1"
    assert row["fade"].crossing < row["crossing"].crossing <= 1 < row["emergence"].crossing
    assert 8.5 < row["emergence"].crossing < 9.5


def test_halfway_estimate_from_a_later_start():
    # the curve dips at layer 1 before rising: measured from layer 1, half-way is later
    curve = np.array([0.4, 0.0, 0.25, 0.5, 0.75, 1.0])
    x = curve + np.random.default_rng(0).normal(0, 1e-3, size=(20, 6))
    e0 = stats.halfway_estimate(x, metric="top1", n_layers=5, n_boot=50)
    e1 = stats.halfway_estimate(x, metric="top1", n_layers=5, n_boot=50, start=1)
    assert e0.crossing == pytest.approx(stats.halfway_point(x.mean(0)))
    assert e1.crossing == pytest.approx(1 + stats.halfway_point(x.mean(0)[1:]))
    assert e1.crossing == pytest.approx(3.0, abs=0.01) and e1.rule == "halfway-0.5-from-1"
    with pytest.raises(ValueError, match="start"):
        stats.halfway_estimate(x, metric="top1", n_layers=5, start=5)


# --------------------------------------------------------------------------------------------
# Bootstrap helpers, paired differences, standard errors (moved from sweep.py / evaluate.py)
# --------------------------------------------------------------------------------------------


def test_bootstrap_mean_matches_direct_loop():
    x = np.random.default_rng(1).normal(size=33)
    m, lo, hi = stats.bootstrap_mean(torch.tensor(x), n_boot=400, seed=5, level=0.9)
    idx = np.random.default_rng(5).integers(0, 33, size=(400, 33))
    boots = np.array([x[i].mean() for i in idx])
    assert m == pytest.approx(x.mean())
    assert (lo, hi) == pytest.approx((np.quantile(boots, 0.05), np.quantile(boots, 0.95)), rel=1e-12)
    m, lo, hi = stats.bootstrap_mean(np.array([1.0, 2.0, 3.0, 4.0]), n_boot=500)
    assert m == 2.5 and lo < m < hi
    one = stats.bootstrap_mean([3.0])
    assert one[0] == 3.0 and math.isnan(one[1]) and math.isnan(one[2])


def test_ci_of_resamples_ignores_undefined():
    lo, hi, missing = stats.ci_of_resamples([None, 1.0, 2.0, None, 3.0, 4.0], level=0.5)
    assert missing == pytest.approx(2 / 6)
    assert (lo, hi) == pytest.approx((np.quantile([1, 2, 3, 4], 0.25), np.quantile([1, 2, 3, 4], 0.75)))
    assert stats.ci_of_resamples([None, None]) == (None, None, 1.0)
    with pytest.raises(ValueError, match="level"):
        stats.percentile_ci([1.0, 2.0], level=95)
    # resample keeps pairs paired: the difference of identical arrays is 0 in every resample
    a = np.arange(10.0)
    assert set(stats.resample(lambda x, y: float((x - y).sum()), a, a.copy(), n_boot=20)) == {0.0}
    with pytest.raises(ValueError, match="same number of units"):
        stats.resample(lambda x, y: 0, a, a[:5])


def test_paired_delta():
    d = stats.paired_delta(torch.arange(10.0) + 1, torch.arange(10.0))
    assert d["delta"] == pytest.approx(1.0) and d["lo"] == pytest.approx(1.0) and d["n"] == 10
    assert d["se"] == 0.0
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=50), rng.normal(size=50)
    d = stats.paired_delta(a, b, n_boot=300, seed=2)
    assert d["delta"] == pytest.approx((a - b).mean())
    assert d["se"] == pytest.approx((a - b).std(ddof=1) / math.sqrt(50))
    assert (d["lo"], d["hi"]) == pytest.approx(stats.bootstrap_mean(a - b, n_boot=300, seed=2)[1:])
    with pytest.raises(ValueError, match="same shape"):
        stats.paired_delta(torch.zeros(3), torch.zeros(4))


def test_standard_errors():
    scores = np.array([1, 0, 1, 1, 0, 1, 1, 1], dtype=float)
    p = scores.mean()
    assert stats.binomial_se(p, len(scores)) == pytest.approx(stats.mean_se(scores)[1], rel=1e-12)
    assert stats.binomial_se(p, len(scores)) == pytest.approx(math.sqrt(p * (1 - p) / 7))
    x = np.array([1.0, 2.0, 4.0])
    assert stats.mean_se(x) == pytest.approx((7 / 3, np.std(x, ddof=1) / math.sqrt(3)))
    # equal denominators: the ratio estimator reduces to the mean of num/den and its SE
    num, den = np.array([2.0, 4.0, 9.0]), np.array([2.0, 2.0, 2.0])
    assert stats.ratio_se(num, den) == pytest.approx(stats.mean_se(num / den))
    # unequal denominators, by hand: R = 15/6; residuals num - R den
    num, den = np.array([2.0, 4.0, 9.0]), np.array([1.0, 2.0, 3.0])
    r = 15 / 6
    se = math.sqrt(sum((a - r * b) ** 2 for a, b in zip(num, den)) / (3 * 2)) / 2.0
    assert stats.ratio_se(num, den) == pytest.approx((r, se))
    with pytest.raises(ValueError):
        stats.binomial_se(0.5, 0)
    with pytest.raises(ValueError):
        stats.mean_se([])


def test_alignment_gap():
    class Fake:
        per_seq = {"logprob_next": torch.tensor([[0.0, 0.0, 1.0, 2.0]]),
                   "logprob_input": torch.tensor([[5.0, 5.0, 0.0, 1.0]])}
    assert float(stats.alignment_gap(Fake())[0]) == pytest.approx(1.0)  # states 3.. (last third)
    assert float(stats.alignment_gap(Fake(), layers=[0])[0]) == pytest.approx(-5.0)


def test_spread_of_means_and_split_units():
    rng = np.random.default_rng(0)
    x = np.stack([rng.normal(m, 0.1, size=40) for m in (0.0, 0.5, 2.0)])
    s = stats.spread_of_means(x, n_boot=300)
    assert s["estimate"] == pytest.approx(x.mean(1).max() - x.mean(1).min())
    assert (s["argmax"], s["argmin"]) == (2, 0) and s["lo"] < 2.0 < s["hi"] and s["hi"] - s["lo"] < 0.2
    flat = stats.spread_of_means(np.zeros((4, 10)), n_boot=50)
    assert flat["estimate"] == flat["lo"] == flat["hi"] == 0.0
    with pytest.raises(ValueError, match="k >= 2"):
        stats.spread_of_means(x[:1])
    sel, conf = stats.split_units(11, seed=3)
    assert len(sel) == 5 and len(conf) == 6 and not set(sel) & set(conf)
    assert sorted([*sel, *conf]) == list(range(11))
    assert all(np.array_equal(a, b) for a, b in zip(stats.split_units(11, seed=3), (sel, conf)))
    with pytest.raises(ValueError, match="at least 2"):
        stats.split_units(3)


def test_paired_halfway_shift_recovers_a_known_shift():
    rng = np.random.default_rng(0)
    L = 10
    layers = np.arange(L + 1)
    before = np.clip((layers - 4) / 4, 0, 1) + rng.normal(0, 0.02, size=(40, L + 1))  # half-way at 6
    after = np.clip((layers - 2) / 4, 0, 1) + rng.normal(0, 0.02, size=(40, L + 1))   # half-way at 4
    s = stats.paired_halfway_shift(before, after, n_layers=L, n_boot=200)
    assert s["estimate"] == pytest.approx(-2.0, abs=0.1) and s["lo"] <= -2.0 + 0.1 and s["hi"] >= -2.0 - 0.1
    assert s["relative"] == pytest.approx(s["estimate"] / L) and s["frac_undefined"] == 0.0
    assert s["before"] == pytest.approx(stats.halfway_point(before.mean(0)))
    flat = stats.paired_halfway_shift(before, np.zeros_like(before), n_layers=L, n_boot=20)
    assert flat["estimate"] is None and flat["frac_undefined"] == 1.0


# --------------------------------------------------------------------------------------------
# Tests, multiple comparisons, power
# --------------------------------------------------------------------------------------------


def test_paired_ttest_matches_scipy_and_handles_ties():
    from scipy import stats as sp

    d = np.random.default_rng(0).normal(0.3, 1.0, size=25)
    for alt in ("less", "greater", "two-sided"):
        r = stats.paired_ttest(d, alternative=alt)
        assert r["p"] == pytest.approx(sp.ttest_1samp(d, 0.0, alternative=alt).pvalue, rel=1e-12)
    r = stats.paired_ttest(d)
    assert r["t"] == pytest.approx(d.mean() / (d.std(ddof=1) / 5)) and r["df"] == 24
    assert stats.paired_ttest(np.full(5, -0.1), alternative="less")["p"] == 0.0
    assert stats.paired_ttest(np.full(5, -0.1), alternative="greater")["p"] == 1.0
    assert stats.paired_ttest(np.zeros(5), alternative="two-sided")["p"] == 1.0
    with pytest.raises(ValueError, match="at least 2"):
        stats.paired_ttest([1.0])


def test_holm_by_hand():
    # sorted: 0.005*4 = 0.02, 0.01*3 = 0.03, 0.03*2 = 0.06, 0.04*1 -> max(0.06, 0.04) = 0.06
    adj = stats.holm([0.01, 0.04, 0.03, 0.005])
    np.testing.assert_allclose(adj, [0.03, 0.06, 0.06, 0.02])
    np.testing.assert_allclose(stats.holm([0.5]), [0.5])
    np.testing.assert_allclose(stats.holm([0.6, 0.9]), [1.0, 1.0])
    with pytest.raises(ValueError, match="p-values"):
        stats.holm([0.1, 1.5])


def test_mcnemar_exact_against_binomial():
    from scipy import stats as sp

    before = np.array([1] * 10 + [0] * 5 + [1] * 20 + [0] * 15)
    after = np.array([0] * 10 + [1] * 5 + [1] * 20 + [0] * 15)  # b = 10 worse, c = 5 better
    r = stats.mcnemar_exact(before, after, alternative="worse")
    assert (r["b"], r["c"], r["n"]) == (10, 5, 50) and r["delta"] == pytest.approx(-5 / 50)
    assert r["p"] == pytest.approx(sp.binomtest(10, 15, 0.5, alternative="greater").pvalue)
    assert stats.mcnemar_exact(before, after, alternative="better")["p"] == pytest.approx(
        sp.binomtest(5, 15, 0.5, alternative="greater").pvalue)
    assert stats.mcnemar_exact(before, after)["p"] == pytest.approx(sp.binomtest(10, 15, 0.5).pvalue)
    assert stats.mcnemar_exact(before, before)["p"] == 1.0
    assert stats.mcnemar_exact([1, 1, 1, 1, 1], [0, 0, 0, 0, 0], alternative="worse")["p"] == pytest.approx(1 / 32)
    pa = stats.paired_accuracy(before, after, n_boot=300, alternative="worse")
    assert pa["p"] == r["p"] and pa["lo"] < pa["delta"] < pa["hi"] and pa["level"] == 0.95
    assert (pa["lo"], pa["hi"]) == pytest.approx(stats.bootstrap_mean(after - before, n_boot=300)[1:])
    with pytest.raises(ValueError, match="0/1"):
        stats.mcnemar_exact([0.5, 1], [1, 1])
    with pytest.raises(ValueError, match="same items"):
        stats.mcnemar_exact([0, 1], [1, 1, 0])


def test_sign_test_and_combining_seeds():
    assert stats.sign_test(5, 0) == pytest.approx(1 / 32)
    assert stats.sign_test(0, 0) == 1.0
    R, N, I = stats.REPRODUCED, stats.NOT_REPRODUCED, stats.INCONCLUSIVE
    assert stats.combine_verdicts([R, R]) == R
    assert stats.combine_verdicts([N]) == N
    assert stats.combine_verdicts([R, N]) == I and stats.combine_verdicts([R, I]) == I
    assert stats.combine_verdicts([R] * 5 + [I], how="sign") == R  # 5 of 5 decided: p = 1/32
    assert stats.combine_verdicts([N] * 6, how="sign") == N
    assert stats.combine_verdicts([R] * 4 + [N], how="sign") == I  # p = 6/32
    with pytest.raises(ValueError, match="at least one"):
        stats.combine_verdicts([])
    with pytest.raises(ValueError, match="unknown verdict"):
        stats.combine_verdicts(["yes"])
    with pytest.raises(ValueError, match="how"):
        stats.combine_verdicts([R], how="majority")


def test_mde_has_the_stated_power():
    from scipy import stats as sp

    # paired mean, t version: at a true effect equal to the MDE, the one-sided t-test has ~80% power
    sd, n = 0.03, 16
    mde = stats.mde_paired_mean(sd, n, alpha=0.05, power=0.8)
    crit = sp.t(n - 1).ppf(0.95)
    power = 1 - sp.nct(n - 1, mde * math.sqrt(n) / sd).cdf(crit)
    assert 0.78 < power < 0.82
    # z version, two-sided at 5%: the textbook 2.80 SD / sqrt(n)
    assert stats.mde_paired_mean(1.0, 100, sided="two", dist="z") == pytest.approx(0.28016, abs=1e-4)
    assert stats.n_for_mde(stats.mde_paired_mean(sd, 50, dist="z"), sd) == 50
    # paired accuracy: simulate McNemar at a drop equal to the MDE; power near 80%
    n, p_d = 400, 0.2
    mde = stats.mde_paired_accuracy(p_d, n)
    assert mde == pytest.approx((sp.norm.ppf(0.95) + sp.norm.ppf(0.8)) * math.sqrt(p_d / n))
    rng = np.random.default_rng(0)
    counts = rng.multinomial(n, [(p_d + mde) / 2, (p_d - mde) / 2, 1 - p_d], size=2000)
    p = sp.binom.sf(counts[:, 0] - 1, counts[:, 0] + counts[:, 1], 0.5)
    assert 0.72 < (p < 0.05).mean() < 0.88
    # upper bound of a discordance rate: with 0 of n, 1 - (1 - level)^(1/n)
    assert stats.discordance_upper(0, 24) == pytest.approx(1 - 0.05 ** (1 / 24))
    assert stats.discordance_upper(24, 24) == 1.0
    with pytest.raises(ValueError, match="sided"):
        stats.mde_paired_mean(1.0, 10, sided="both")


def _brute_sign_flip(d, null=0.0):
    """Two-sided p of the sign-flip test by plain enumeration: every sign pattern, |mean| >= observed."""
    import itertools

    y = np.asarray(d, dtype=float) - null
    obs = abs(y.mean())
    hits = sum(abs((np.asarray(signs) * y).mean()) >= obs * (1 - 1e-12)
               for signs in itertools.product((1.0, -1.0), repeat=y.size))
    return hits / 2 ** y.size


@pytest.mark.parametrize("n", [1, 2, 3, 5, 6, 8])
def test_sign_flip_test_matches_brute_force_enumeration(n):
    rng = np.random.default_rng(n)
    for d in (rng.normal(0.3, 1.0, n), rng.normal(0.0, 1.0, n), np.abs(rng.normal(1.0, 0.2, n))):
        for null in (0.0, 0.1):
            got = stats.sign_flip_test(d, null=null)
            assert got["p"] == pytest.approx(_brute_sign_flip(d, null)), (d, null)
            assert got["patterns"] == 2 ** n and got["floor"] == 2.0 ** (1 - n)


def test_sign_flip_floor_and_units():
    # every difference on one side: p is the floor 2 / 2^n, the smallest there is
    assert stats.sign_flip_test([0.5, 1.0, 1.5, 2.0, 2.5])["p"] == pytest.approx(0.0625) == stats.sign_flip_floor(5)
    assert stats.sign_flip_test([0.5, 1.0, 1.5, 2.0, -0.1])["p"] == pytest.approx(4 / 32)  # one on the other side
    assert stats.sign_flip_test([0.0, 0.0, 0.0])["p"] == 1.0
    assert stats.sign_flip_units(0.05) == 6 and stats.sign_flip_floor(6) < 0.05 <= stats.sign_flip_floor(5)
    assert stats.sign_flip_units(0.01) == 8
    # ties: the mirror-image values make several patterns as extreme as the observed one
    assert stats.sign_flip_test([1.0, 1.0, -1.0, 1.0])["p"] == pytest.approx(_brute_sign_flip([1.0, 1.0, -1.0, 1.0]))
    with pytest.raises(ValueError, match="capped at"):
        stats.sign_flip_test(np.ones(stats.SIGN_FLIP_MAX_UNITS + 1))
    with pytest.raises(ValueError, match="NaN"):
        stats.sign_flip_test([1.0, np.nan])
