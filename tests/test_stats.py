"""Bootstrap, shift-layer and verdict logic on synthetic data with known answers."""
import numpy as np
import pytest
import torch

from residshift.analysis import stats
from residshift.measure.lens import LensResult


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
    est = stats.shift_estimate(pa, pb, metric="top1", n_layers=10, n_boot=300, seed=0)
    assert est.layer == 7
    assert est.lo <= 6.3 <= est.hi and est.hi - est.lo < 1.0
    assert est.frac_never == 0
    assert est.relative == pytest.approx(est.crossing / 10)
    assert est.as_dict()["relative_lo"] == pytest.approx(est.lo / 10)
    never = stats.shift_estimate(pa, pa - 0.5, metric="top1", n_layers=10, n_boot=50)
    assert never.layer is None and never.frac_never == 1 and never.lo is None
    with pytest.raises(ValueError, match="paired metrics"):
        stats.shift_estimate(pa, pb, metric="entropy", n_layers=10)
    with pytest.raises(ValueError, match=r"\[n_seq, 6\]"):
        stats.shift_estimate(pa, pb, metric="top1", n_layers=5)


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


def _result(top1_in, top1_next):
    L = top1_in.shape[1] - 1
    t = torch.tensor
    return LensResult(model="synthetic", n_layers=L, columns=["top1_input", "top1_next"],
                      per_seq={"top1_input": t(top1_in), "top1_next": t(top1_next)},
                      per_seq_median={}, tokens={})


def test_verdict_c1_three_outcomes():
    rng = np.random.default_rng(0)
    L, n = 12, 50
    layers = np.arange(L + 1)
    # three regimes: input high early, nothing in the middle, next high late
    a = np.where(layers < 4, 0.95 - 0.2 * layers, 0.02)
    b = np.where(layers > 8, 0.1 * (layers - 8), 0.01)
    noise = lambda: rng.normal(0, 0.02, size=(n, L + 1))
    v = stats.verdict_c1(_result(a + noise(), b + noise()), n_boot=200)
    assert v.verdict == "reproduced", v.checks
    assert all(v.checks.values())
    assert 8 < v.numbers["shift"]["crossing"] <= 9
    # the next token never overtakes the input token: not reproduced
    v2 = stats.verdict_c1(_result(a + 0.5 + noise(), b + noise()), n_boot=200)
    assert v2.verdict == "not reproduced" and not v2.checks["late"]
    # no middle regime (the input stays decodable until the next takes over): inconclusive
    a3 = np.where(layers < 8, 0.9, 0.0)
    b3 = np.where(layers >= 8, 0.4, 0.0)
    v3 = stats.verdict_c1(_result(a3 + noise(), b3 + noise()), n_boot=200)
    assert v3.verdict == "inconclusive" and not v3.checks["middle"] and v3.checks["early"]
    assert "reproduced" in stats.C1_RULE


def test_shift_table_uses_medians_for_rank():
    rng = np.random.default_rng(0)
    pa, pb = _synthetic(L=6, cross=3.2)
    t = torch.tensor
    res = LensResult(model="s", n_layers=6, columns=[],
                     per_seq={"top1_input": t(pa), "top1_next": t(pb),
                              "rank_input": t(1 / (pa + 1.1)), "rank_next": t(1 / (pb + 1.1))},
                     per_seq_median={"rank_input": t(1 / (pa + 1.1)), "rank_next": t(1 / (pb + 1.1))},
                     tokens={})
    table = stats.shift_table(res, n_boot=50)
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
    est = stats.grouped_shift(a, b, seq, group, n_groups=3, metric="top1", n_layers=L, n_boot=100)
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
    row, = stats.transition_table(res, n_boot=100)
    assert row["metric"] == "top1"
    assert row["fade"].crossing < row["crossing"].crossing <= 1 < row["emergence"].crossing
    assert 8.5 < row["emergence"].crossing < 9.5
