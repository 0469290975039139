"""Cross-checks of residshift.analysis.stats against the libraries that implement the same statistics.

Holm's step-down adjustment against ``statsmodels.stats.multitest.multipletests(method="holm")``, the
exact McNemar test against ``statsmodels.stats.contingency_tables.mcnemar(exact=True)`` (and its
one-sided forms against ``scipy.stats.binomtest``), and the paired percentile bootstrap against
``scipy.stats.bootstrap(paired=True, method="percentile")``. The expected numbers are computed by the
libraries, never typed in; each check runs over many seeded random cases, with the edge cases (ties,
p-values of exactly 0 and 1, no discordant pairs, one item) put in on purpose.
"""
import gc

import numpy as np
import pytest
from scipy import stats as sp
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.multitest import multipletests

from residshift.analysis import stats

ALPHAS = (0.01, 0.05, 0.1)


def _pvalue_families(seed: int, n_cases: int):
    """Families of p-values of 1 to 60 tests: uniform draws, tiny ones, exact 0 and 1, and heavy ties."""
    rng = np.random.default_rng(seed)
    for case in range(n_cases):
        m = int(rng.integers(1, 61))
        kind = case % 5
        if kind == 0:  # plain uniform p-values
            p = rng.uniform(0, 1, m)
        elif kind == 1:  # mostly small: Holm's multiplier (m - k + 1) matters and many are rejected
            p = rng.uniform(0, 0.05, m) ** rng.uniform(1, 3)
        elif kind == 2:  # ties: a few values repeated, in shuffled order
            p = rng.choice(rng.uniform(0, 0.2, int(rng.integers(1, 4))), size=m)
        elif kind == 3:  # exact 0 and 1 mixed with others
            p = rng.choice(np.r_[0.0, 1.0, rng.uniform(0, 1, 3)], size=m)
        else:  # products m * p above 1 (the cap at 1) next to a handful of small ones
            p = np.r_[rng.uniform(0.3, 1, m), rng.uniform(0, 1e-3, int(rng.integers(0, 4)))]
            rng.shuffle(p)
        yield p


def test_holm_equals_statsmodels_holm_on_random_families(monkeypatch):
    """``stats.holm`` against ``multipletests(p, method="holm")`` (statsmodels' default method is
    Holm–Šidák, a different and slightly less conservative correction, so "holm" is passed explicitly).

    Both compute ``max_{j<=k} min(1, (m - j + 1) p_(j))`` with the same float operations, so the
    adjusted p-values must be equal bit for bit, ties and exact 0/1 included; and the tests each
    rejects at a family level ``a`` (ours: adjusted <= a, documented in ``holm``) must be the ones
    statsmodels rejects (it compares ``p_(j) <= a / (m - j + 1)``: the same decision except within
    rounding of the boundary, which random draws do not hit).
    """
    # statsmodels 0.15.0 calls gc.collect() at the end of every Holm adjustment (multitest.py), which
    # takes ~0.1 s in a test process: 400 calls would spend a minute collecting garbage.
    monkeypatch.setattr(gc, "collect", lambda *args: 0)
    n_cases, worst, rejected = 0, 0.0, 0
    for case, p in enumerate(_pvalue_families(seed=35, n_cases=400)):
        a = ALPHAS[case % len(ALPHAS)]
        ours = stats.holm(p)
        reject, ref = multipletests(p, alpha=a, method="holm")[:2]
        worst = max(worst, float(np.max(np.abs(ours - ref))))
        np.testing.assert_array_equal(ours, ref, err_msg=f"p = {p.tolist()}")
        np.testing.assert_array_equal(ours <= a, reject, err_msg=f"alpha {a}, p = {p.tolist()}")
        rejected += int(reject.sum())
        n_cases += 1
    assert n_cases == 400 and worst == 0.0
    assert rejected > 100  # the families reject some tests (and keep others), so the decisions were compared


@pytest.mark.filterwarnings("ignore:divide by zero encountered in log1p:RuntimeWarning")  # Šidák of p = 1
def test_holm_is_not_holm_sidak():
    """The check above would also pass if both sides silently used one wrong method: on the same
    families statsmodels' Holm–Šidák (its default) differs from ``stats.holm`` somewhere."""
    differs = [not np.array_equal(stats.holm(p), multipletests(p)[1])
               for p in _pvalue_families(seed=35, n_cases=40)]
    assert any(differs)


def _paired_outcomes(seed: int):
    """Paired 0/1 outcomes over 1 to 5000 items with concordance from 0% to 100% (so no discordant
    pairs, all discordant, one-sided and balanced splits all occur)."""
    rng = np.random.default_rng(seed)
    sizes = [1, 2, 3, 5, 8, 13, 20, 50, 100, 400, 1000, 5000]
    for n in sizes:
        for _ in range(25):
            before = rng.random(n) < rng.uniform(0, 1)
            flip = rng.random(n) < rng.choice([0.0, 0.01, 0.1, 0.5, 1.0], p=[0.1, 0.15, 0.25, 0.25, 0.25])
            toward = rng.uniform(0, 1)  # share of the flips that make a wrong item right
            after = np.where(flip, np.where(before, rng.random(n) >= toward, rng.random(n) < toward), before)
            yield before.astype(int), after.astype(int)


def test_mcnemar_exact_equals_statsmodels_exact_mcnemar():
    """``stats.mcnemar_exact`` (two-sided) against ``statsmodels ... mcnemar(table, exact=True)``.

    statsmodels reads the discordant cells ``table[0, 1]`` and ``table[1, 0]`` of the 2x2 table
    (rows: before right/wrong, columns: after right/wrong), takes ``min(b, c)`` as the statistic and
    ``min(1, 2 Binom(b + c, 1/2).cdf(min(b, c)))`` as p: the same formula as ours, so equal bit for
    bit, including the case with no discordant pairs (p = 1 on both sides).
    """
    n_cases, no_discordant, worst = 0, 0, 0.0
    for before, after in _paired_outcomes(seed=607):
        ours = stats.mcnemar_exact(before, after)
        b1, a1 = before.astype(bool), after.astype(bool)
        table = np.array([[np.sum(b1 & a1), np.sum(b1 & ~a1)], [np.sum(~b1 & a1), np.sum(~b1 & ~a1)]])
        ref = mcnemar(table, exact=True)
        assert (ours["b"], ours["c"]) == (table[0, 1], table[1, 0])
        assert ours["n_discordant"] == table[0, 1] + table[1, 0] and ours["n"] == table.sum()
        assert float(ref.statistic) == min(ours["b"], ours["c"])
        worst = max(worst, abs(ours["p"] - float(ref.pvalue)))
        assert ours["p"] == float(ref.pvalue), (table.tolist(), ours["p"], float(ref.pvalue))
        no_discordant += ours["n_discordant"] == 0
        n_cases += 1
    assert n_cases == 300 and worst == 0.0
    assert no_discordant >= 10  # the edge case was exercised, not only drawn by luck


def test_one_sided_mcnemar_equals_scipy_binomtest():
    """The one-sided forms (statsmodels offers only the two-sided exact test) against
    ``scipy.stats.binomtest`` on the discordant pairs: ``"worse"`` is P(X >= b), ``"better"``
    P(X >= c), X ~ Binom(b + c, 1/2). binomtest sums the tail its own way, so equal to 1e-12."""
    n_cases, worst = 0, 0.0
    for before, after in _paired_outcomes(seed=608):
        worse = stats.mcnemar_exact(before, after, alternative="worse")
        better = stats.mcnemar_exact(before, after, alternative="better")
        b, c = worse["b"], worse["c"]
        if b + c == 0:
            assert worse["p"] == better["p"] == 1.0  # binomtest refuses n = 0
            continue
        ref_w = sp.binomtest(b, b + c, 0.5, alternative="greater").pvalue
        ref_b = sp.binomtest(c, b + c, 0.5, alternative="greater").pvalue
        worst = max(worst, abs(worse["p"] - ref_w), abs(better["p"] - ref_b))
        assert worse["p"] == pytest.approx(ref_w, rel=1e-12, abs=1e-300), (b, c)
        assert better["p"] == pytest.approx(ref_b, rel=1e-12, abs=1e-300), (b, c)
        n_cases += 1
    assert n_cases > 100 and worst < 1e-12


def _paired_sample(n: int = 60, seed: int = 3):
    """Strongly paired values: the per-unit difference varies much less than either value does,
    so a bootstrap that broke the pairing would give a far wider interval."""
    rng = np.random.default_rng(seed)
    before = rng.normal(0, 1, n)
    after = before + 0.3 + rng.standard_t(4, n) * 0.3  # heavy-ish tails: not a symmetric toy
    return after, before


def _mean_diff(a, b, axis):
    return np.mean(a - b, axis=axis)


def test_paired_bootstrap_equals_scipy_bootstrap_with_the_same_draws():
    """``stats.paired_delta`` is a percentile bootstrap of the mean per-unit difference, resampling
    units with ``default_rng(seed).integers(0, n, (n_boot, n))`` and reading the interval with
    ``np.quantile`` (linear). ``scipy.stats.bootstrap(paired=True, method="percentile")`` resamples the
    unit indices with one ``rng.integers(0, n, (n_resamples, n))`` call and reads its interval with
    ``scipy.stats.quantile`` (linear), so given the same generator it draws the same resamples: the
    intervals then agree to rounding, and any difference is a difference of method, not of luck."""
    after, before = _paired_sample()
    for seed, n_boot, level in ((0, 2000, 0.95), (11, 5000, 0.9), (12, 999, 0.99)):
        ours = stats.paired_delta(after, before, n_boot=n_boot, seed=seed, level=level)
        ref = sp.bootstrap((after, before), _mean_diff, paired=True, vectorized=True, method="percentile",
                           n_resamples=n_boot, confidence_level=level, rng=np.random.default_rng(seed))
        ci = ref.confidence_interval
        assert ours["delta"] == pytest.approx(np.mean(after - before), rel=1e-14)
        assert (ours["lo"], ours["hi"]) == pytest.approx((ci.low, ci.high), rel=1e-12, abs=1e-14), (seed, level)


def test_paired_bootstrap_agrees_with_scipy_bootstrap_within_monte_carlo_error():
    """With independent draws (different seeds) the two percentile intervals differ only by
    Monte-Carlo error. The q-quantile of B resamples has standard error
    ``sqrt(q (1 - q) / B) / f(x_q)`` (f: the density of the bootstrap distribution at the quantile);
    ``1 / f`` is read off scipy's own bootstrap distribution as ``dQ/dq`` by a central difference of
    its quantiles over q ± 0.01. The difference of two independent estimates has sqrt(2) times that
    SE, and the tolerance is 5 of those (a 5-sigma band: with the fixed seeds the test is
    deterministic, and the band only says the observed gap is the size Monte-Carlo error explains).
    The tolerance is then checked to be much smaller than what a wrong method gives (an unpaired
    bootstrap's endpoints), so the comparison can fail."""
    after, before = _paired_sample()
    n_boot, level = 20000, 0.95
    q = (1 - level) / 2
    ours = stats.paired_delta(after, before, n_boot=n_boot, seed=101, level=level)
    ref = sp.bootstrap((after, before), _mean_diff, paired=True, vectorized=True, method="percentile",
                       n_resamples=n_boot, confidence_level=level, rng=np.random.default_rng(202))
    dist = ref.bootstrap_distribution
    for end, got, p in (("lo", ours["lo"], q), ("hi", ours["hi"], 1 - q)):
        dq = (np.quantile(dist, p + 0.01) - np.quantile(dist, p - 0.01)) / 0.02  # 1 / f(x_p)
        se = np.sqrt(p * (1 - p) / n_boot) * dq
        tol = 5 * np.sqrt(2) * se
        want = ref.confidence_interval.low if end == "lo" else ref.confidence_interval.high
        assert abs(got - want) <= tol, (end, got, want, tol)
        assert tol < 0.05 * (ours["hi"] - ours["lo"])  # a tight check: 5% of the interval's width at most
    unpaired = sp.bootstrap((after, before), _mean_diff, paired=False, vectorized=True, method="percentile",
                            n_resamples=2000, confidence_level=level, rng=np.random.default_rng(303))
    assert abs(unpaired.confidence_interval.low - ours["lo"]) > 20 * tol
