"""Statistics in one place: bootstrap over units, intervals, paired differences, tests, power.

**Units.** Everything resamples whole units, never tokens: windows (sequences) for losses and
lens curves, items for benchmarks. Tokens within a window are correlated; windows are (nearly)
independent draws from the corpus, items independent questions.

**Intervals.** Confidence intervals are percentile bootstrap intervals (seeded, ``n_boot``
resamples, two-sided at ``level``, 95% by default): :func:`bootstrap_indices` draws the resamples,
:func:`percentile_ci` reads an interval off resampled statistics, and :func:`ci_of_resamples` does
so when a statistic can be undefined in some resamples (a curve that never crosses) and reports
the share of resamples where it was.

**Tests.** Paired one-sample t-test on per-unit differences (:func:`paired_ttest`), exact McNemar
test on the discordant pairs of paired 0/1 outcomes (:func:`mcnemar_exact`; with a paired bootstrap
CI over items: :func:`paired_accuracy`), Holm's step-down
correction for a family of tests (:func:`holm`), an exact sign test (:func:`sign_test`), the exact
paired sign-flip (randomisation) test (:func:`sign_flip_test`, with the smallest p it can give at n
units, :func:`sign_flip_floor`, and the fewest units that can reach a level, :func:`sign_flip_units`).

**Power.** Minimum detectable effects at 80% power (:func:`mde_paired_mean`,
:func:`mde_paired_accuracy`) and the sample size needed for a given one (:func:`n_for_mde`).

**Orientation** of a metric (is larger more aligned, or smaller, as for ranks?) is passed in by
the caller (``residshift.measure.lens.ORIENTATION`` for the lens metrics); this module imports
nothing from the rest of the package.

Shift layer (our definition). For a paired metric with per-layer input-alignment curve
``a_in(l)`` and next-token curve ``a_next(l)`` (oriented so that larger = more aligned, i.e. ranks
are negated), the *shift layer* is the first residual layer ``l`` in ``0..L`` with
``a_next(l) > a_in(l)`` (rule ``"first"``), or the first ``l`` from which ``a_next > a_in`` holds at
every later layer (rule ``"sustained"``). It is ``None`` ("never crosses") when no layer
qualifies. The *crossing point* interpolates linearly between ``l - 1`` and ``l`` where the
difference changes sign, giving a sub-layer position; the relative depth is ``l / L``.

Measured on real models, the crossing comes early (the input token stops being decodable within the
first blocks, while the next token is still far from decodable), so we also report two half-way
depths (:func:`transition_table`): the *input fade* (the input-token curve has fallen half-way from
layer 0 to layer L) and the *next-token emergence* (the next-token curve has risen half-way). The
paper's "switch" of Gemma-2-2B (~layer 17 of 26) reads like the emergence.

The verdict rules built on these live in :mod:`residshift.analysis.verdicts`.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import asdict, dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np
from scipy import stats as _sp

RULES = ("first", "sustained")
STATS = ("mean", "median")

# The three outcomes of every verdict (the verdict schema in :mod:`.verdicts` re-exports them).
REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE = "reproduced", "not reproduced", "inconclusive"
OUTCOMES = (REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE)


def as_numpy(x) -> np.ndarray:
    """``x`` (a tensor, array, list or number) as a float64 numpy array."""
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    return np.asarray(x, dtype=np.float64)


def _check_level(level: float) -> float:
    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), e.g. 0.95; got {level}")
    return level


def _check_orientation(orientation: int) -> int:
    if orientation not in (1, -1):
        raise ValueError(f"orientation must be +1 (larger = more aligned) or -1 (smaller = more "
                         f"aligned, e.g. ranks), got {orientation!r}")
    return orientation


# --------------------------------------------------------------------------------------------
# The bootstrap over units and percentile intervals
# --------------------------------------------------------------------------------------------


def bootstrap_indices(n: int, n_boot: int, seed: int) -> np.ndarray:
    """``[n_boot, n]`` row indices drawn with replacement (seeded)."""
    if n < 2:
        raise ValueError(f"the bootstrap needs at least 2 sequences, got {n}: use more windows")
    if n_boot < 1:
        raise ValueError("n_boot must be at least 1")
    return np.random.default_rng(seed).integers(0, n, size=(n_boot, n))


def percentile_ci(boots, level: float = 0.95, axis: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Two-sided percentile interval of resampled statistics ``boots`` along ``axis``."""
    q = (1 - _check_level(level)) / 2
    b = np.asarray(boots, dtype=np.float64)
    return np.quantile(b, q, axis=axis), np.quantile(b, 1 - q, axis=axis)


def ci_of_resamples(values: Sequence[float | None], level: float = 0.95
                    ) -> tuple[float | None, float | None, float]:
    """Percentile interval of the resamples where a statistic is defined (not ``None``).

    Returns ``(lo, hi, frac_missing)``: ``lo``/``hi`` are ``None`` when no resample defines it,
    ``frac_missing`` is the share of resamples where it was ``None`` (for a crossing: "never
    crosses"). This is the one place for the block that shift, half-way and crossing estimates
    share.
    """
    found = np.array([v for v in values if v is not None], dtype=np.float64)
    frac_missing = float(1 - found.size / max(1, len(values)))
    if not found.size:
        return None, None, frac_missing
    q = (1 - _check_level(level)) / 2
    return float(np.quantile(found, q)), float(np.quantile(found, 1 - q)), frac_missing


def resample(statistic: Callable[..., Any], *arrays, n_boot: int = 1000, seed: int = 0) -> list[Any]:
    """``statistic(*(a[i] for a in arrays))`` for each bootstrap resample ``i`` of the units.

    The arrays share their first axis (the units) and are resampled with the same indices, so
    paired quantities stay paired.
    """
    xs = [np.asarray(a) if not hasattr(a, "detach") else as_numpy(a) for a in arrays]
    n = xs[0].shape[0]
    if any(x.shape[0] != n for x in xs):
        raise ValueError(f"paired arrays need the same number of units, got {[x.shape[0] for x in xs]}")
    return [statistic(*(x[i] for x in xs)) for i in bootstrap_indices(n, n_boot, seed)]


def bootstrap_mean(x, *, n_boot: int = 1000, seed: int = 0,
                   level: float = 0.95) -> tuple[float, float, float]:
    """Mean of ``x`` (over its last axis: windows or items) and a percentile bootstrap CI of that mean.

    With fewer than 2 units the interval is ``(nan, nan)``.
    """
    x = np.asarray(x, dtype=np.float64)
    n = x.shape[-1]
    if n < 2:
        return float(x.mean()), float("nan"), float("nan")
    boots = x[..., bootstrap_indices(n, n_boot, seed)].mean(axis=-1)
    lo, hi = percentile_ci(boots, level, axis=-1)
    return float(x.mean()), float(lo), float(hi)


# --------------------------------------------------------------------------------------------
# Standard errors
# --------------------------------------------------------------------------------------------


def mean_se(values: Sequence[float] | np.ndarray) -> tuple[float, float]:
    """Mean and its standard error (sample standard deviation, ddof=1, over sqrt(n))."""
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        raise ValueError("cannot average zero values")
    se = float(x.std(ddof=1) / math.sqrt(x.size)) if x.size > 1 else float("nan")
    return float(x.mean()), se


def binomial_se(p: float, n: int) -> float:
    """SE of an accuracy p over n items: sqrt(p (1 - p) / (n - 1)) (= mean_se of the 0/1 scores)."""
    if n < 1:
        raise ValueError(f"need at least one item, got n={n}")
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"an accuracy lies in [0, 1], got {p}")
    return math.sqrt(p * (1 - p) / (n - 1)) if n > 1 else float("nan")


def ratio_se(numerators: Sequence[float], denominators: Sequence[float]) -> tuple[float, float]:
    """Ratio estimator R = sum(num) / sum(den) and its SE with the (num_i, den_i) pairs as units.

    SE = sqrt(sum_i (num_i - R den_i)^2 / (n (n - 1))) / mean(den): the linearised SE of a ratio,
    used for the per-token loss of a sliding-window pass (windows score different token counts).
    """
    num = np.asarray(numerators, dtype=np.float64)
    den = np.asarray(denominators, dtype=np.float64)
    if num.shape != den.shape or num.size == 0:
        raise ValueError(f"need matching non-empty arrays, got {num.shape} and {den.shape}")
    if den.sum() <= 0:
        raise ValueError("the denominators sum to zero: nothing was scored")
    r = float(num.sum() / den.sum())
    n = num.size
    if n < 2:
        return r, float("nan")
    resid = num - r * den
    return r, float(math.sqrt((resid**2).sum() / (n * (n - 1))) / den.mean())


# --------------------------------------------------------------------------------------------
# Paired differences
# --------------------------------------------------------------------------------------------


def _paired(after, before) -> np.ndarray:
    a, b = as_numpy(after), as_numpy(before)
    if a.shape != b.shape:
        raise ValueError(f"paired values need the same shape, got {tuple(a.shape)} and {tuple(b.shape)}")
    return a - b


def paired_delta(after, before, *, n_boot: int = 1000, seed: int = 0,
                 level: float = 0.95) -> dict[str, float]:
    """Mean of ``after - before`` over paired units (windows / items) with a bootstrap CI and SE."""
    d = _paired(after, before).reshape(-1)
    m, lo, hi = bootstrap_mean(d, n_boot=n_boot, seed=seed, level=level)
    se = float(d.std(ddof=1) / math.sqrt(d.size)) if d.size > 1 else float("nan")
    return {"delta": m, "lo": lo, "hi": hi, "se": se, "n": int(d.size)}


def paired_ttest(diff, *, alternative: str = "two-sided") -> dict[str, float]:
    """One-sample t-test of per-unit differences against 0 (the paired t-test).

    ``alternative``: ``"less"`` (H1: mean < 0), ``"greater"`` or ``"two-sided"``. With zero spread
    (every difference equal) the p-value is 0 when the common value lies on the alternative's side
    and 1 otherwise. Returns ``mean``, ``sd`` (ddof=1), ``se``, ``t``, ``df``, ``p``, ``n``.
    """
    if alternative not in ("less", "greater", "two-sided"):
        raise ValueError(f"alternative must be 'less', 'greater' or 'two-sided', got {alternative!r}")
    d = as_numpy(diff).reshape(-1)
    n = d.size
    if n < 2:
        raise ValueError(f"a paired t-test needs at least 2 units, got {n}: use more windows or items")
    m, sd = float(d.mean()), float(d.std(ddof=1))
    se = sd / math.sqrt(n)
    if sd == 0:
        side = {"less": m < 0, "greater": m > 0, "two-sided": m != 0}[alternative]
        t, p = (math.copysign(math.inf, m) if m else 0.0), (0.0 if side else 1.0)
    else:
        t = m / se
        p = float(_sp.ttest_1samp(d, 0.0, alternative=alternative).pvalue)
    return {"mean": m, "sd": sd, "se": se, "t": float(t), "df": n - 1, "p": p, "n": n}


SIGN_FLIP_MAX_UNITS = 24  # exact enumeration of 2^n sign patterns: 16.8M at 24 units, in batches


def sign_flip_floor(n: int) -> float:
    """The smallest two-sided p the exact sign-flip test can give at ``n`` units: ``2 / 2^n`` (the
    observed pattern and its mirror image; reached when every difference lies on one side of the null)."""
    if n < 1:
        raise ValueError(f"a sign-flip test needs at least 1 unit, got {n}")
    return 2.0 ** (1 - n)


def sign_flip_units(alpha: float) -> int:
    """The fewest units at which the exact two-sided sign-flip test can give p < ``alpha`` (6 at 0.05)."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
    n = 1
    while sign_flip_floor(n) >= alpha:
        n += 1
    return n


def sign_flip_test(diff, *, null: float = 0.0) -> dict[str, Any]:
    """The exact paired sign-flip (randomisation) test of per-unit differences against ``null``.

    Under H0 each ``d_i - null`` is symmetric about 0, so its sign is a fair coin: the statistic, the
    mean of ``d_i - null``, is recomputed for every one of the 2^n sign patterns (exact enumeration,
    ``scipy.stats.permutation_test`` with one sample), and the two-sided p is the share of patterns
    whose |mean| is at least the observed one (ties within floating-point tolerance count). No normality
    is assumed. Returns ``p``, ``n``, ``patterns`` (2^n), ``floor`` (:func:`sign_flip_floor`) and
    ``mean`` (of ``d - null``).
    """
    d = as_numpy(diff).reshape(-1) - float(null)
    n = d.size
    if n < 1:
        raise ValueError("a sign-flip test needs at least 1 unit, got none")
    if not np.all(np.isfinite(d)):
        raise ValueError("the differences hold NaN or inf: check the run that produced them")
    if n > SIGN_FLIP_MAX_UNITS:
        raise ValueError(f"exact sign-flip enumeration is capped at {SIGN_FLIP_MAX_UNITS} units (2^n patterns), "
                         f"got {n}: the t-test alone is the tool at that size")
    if n == 1:  # both patterns have the observed |mean|
        p = 1.0
    else:
        p = float(_sp.permutation_test((d,), lambda x, axis: np.mean(x, axis=axis), permutation_type="samples",
                                       n_resamples=np.inf, alternative="two-sided", vectorized=True,
                                       batch=min(2 ** n, 1 << 16)).pvalue)
    return {"p": min(1.0, p), "n": int(n), "patterns": 2 ** n, "floor": sign_flip_floor(n), "mean": float(d.mean())}


def spread_of_means(x, *, n_boot: int = 1000, seed: int = 0, level: float = 0.95) -> dict[str, Any]:
    """Heterogeneity of ``k`` paired conditions: max − min of the means of ``x [k, n_units]``.

    Each bootstrap resample draws units (the same for every condition) and recomputes the spread
    of the condition means, so the interval accounts for which conditions are extreme being itself
    uncertain. Returns ``estimate``, ``lo``, ``hi``, ``argmax``, ``argmin`` (row indices) and
    ``means``.
    """
    x = as_numpy(x)
    if x.ndim != 2 or x.shape[0] < 2:
        raise ValueError(f"expected [k >= 2 conditions, n units], got {x.shape}")
    means = x.mean(axis=1)
    boots = x[:, bootstrap_indices(x.shape[1], n_boot, seed)].mean(axis=-1)  # [k, n_boot]
    spreads = boots.max(axis=0) - boots.min(axis=0)
    lo, hi = percentile_ci(spreads, level)
    return {"estimate": float(means.max() - means.min()), "lo": float(lo), "hi": float(hi),
            "argmax": int(means.argmax()), "argmin": int(means.argmin()), "means": means.tolist(),
            "n": int(x.shape[1]), "level": level}


def split_units(n: int, *, frac: float = 0.5, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Two disjoint, sorted index sets of ``n`` units: ``(selection, confirmation)`` (seeded).

    The selection set holds ``floor(frac * n)`` units. Used to choose candidates on one set of
    windows and confirm them on another.
    """
    k = int(math.floor(frac * n))
    if k < 2 or n - k < 2:
        raise ValueError(f"splitting {n} units at frac={frac} leaves {k} and {n - k}: each side needs "
                         "at least 2 (use more windows)")
    perm = np.random.default_rng(seed).permutation(n)
    return np.sort(perm[:k]), np.sort(perm[k:])


# --------------------------------------------------------------------------------------------
# Tests, multiple comparisons, power
# --------------------------------------------------------------------------------------------


def holm(pvalues: Sequence[float]) -> np.ndarray:
    """Holm's step-down adjusted p-values (reject test i at family level a when adjusted_i <= a).

    Sorted p-values ``p_(1) <= ... <= p_(m)``: ``adj_(k) = max_{j <= k} min(1, (m - j + 1) p_(j))``.
    Controls the family-wise error rate under any dependence between the tests.
    """
    p = np.asarray(pvalues, dtype=np.float64).reshape(-1)
    if np.any(np.isnan(p)) or np.any((p < 0) | (p > 1)):
        raise ValueError(f"p-values must lie in [0, 1], got {p.tolist()}")
    m = p.size
    adj = np.empty(m)
    running = 0.0
    for k, i in enumerate(np.argsort(p, kind="stable")):
        running = max(running, min(1.0, (m - k) * p[i]))
        adj[i] = running
    return adj


def _binary(x, name: str) -> np.ndarray:
    a = as_numpy(x)
    if not np.all((a == 0) | (a == 1)):
        raise ValueError(f"{name} must hold 0/1 (or bool) per item")
    return a.astype(bool)


def mcnemar_exact(before, after, *, alternative: str = "two-sided") -> dict[str, Any]:
    """Exact McNemar test of paired 0/1 outcomes (the same items before and after).

    ``b`` = items right before and wrong after, ``c`` = wrong before and right after. Under H0 the
    ``b + c`` discordant items split Binomial(b + c, 1/2). ``alternative``: ``"worse"`` (H1: after
    is less accurate; p = P(X >= b)), ``"better"`` (p = P(X >= c)) or ``"two-sided"``
    (p = min(1, 2 P(X <= min(b, c)))). No discordant items: p = 1.
    """
    if alternative not in ("worse", "better", "two-sided"):
        raise ValueError(f"alternative must be 'worse', 'better' or 'two-sided', got {alternative!r}")
    x, y = _binary(before, "before"), _binary(after, "after")
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"before and after must be 1-D over the same items, got {x.shape} and {y.shape}")
    b, c = int((x & ~y).sum()), int((~x & y).sum())
    nd = b + c
    if nd == 0:
        p = 1.0
    elif alternative == "worse":
        p = float(_sp.binom.sf(b - 1, nd, 0.5))
    elif alternative == "better":
        p = float(_sp.binom.sf(c - 1, nd, 0.5))
    else:
        p = min(1.0, float(2 * _sp.binom.cdf(min(b, c), nd, 0.5)))
    n = int(x.size)
    return {"n": n, "b": b, "c": c, "n_discordant": nd, "acc_before": float(x.mean()),
            "acc_after": float(y.mean()), "delta": (c - b) / n, "p": p, "alternative": alternative}


def paired_accuracy(before, after, *, n_boot: int = 1000, seed: int = 0, level: float = 0.95,
                    alternative: str = "two-sided") -> dict[str, Any]:
    """Accuracy change on the same items: exact McNemar test plus a paired bootstrap CI over items.

    ``before``, ``after``: 0/1 per item. Returns :func:`mcnemar_exact`'s numbers with ``lo``/``hi``
    (percentile bootstrap of the mean per-item difference after - before) and ``level``.
    """
    out = mcnemar_exact(before, after, alternative=alternative)
    d = _paired(_binary(after, "after"), _binary(before, "before"))
    _, lo, hi = bootstrap_mean(d, n_boot=n_boot, seed=seed, level=level)
    return {**out, "lo": lo, "hi": hi, "level": level}


def sign_test(k_plus: int, k_minus: int) -> float:
    """One-sided exact sign test: P(X >= k_plus), X ~ Binomial(k_plus + k_minus, 1/2) (1 if no signs)."""
    n = k_plus + k_minus
    return 1.0 if n == 0 else float(_sp.binom.sf(k_plus - 1, n, 0.5))


def _quantiles(alpha: float, power: float, sided: str, df: int | None) -> tuple[float, float]:
    if sided not in ("one", "two"):
        raise ValueError(f"sided must be 'one' or 'two', got {sided!r}")
    if not 0 < alpha < 1 or not 0 < power < 1:
        raise ValueError(f"alpha and power must lie in (0, 1), got {alpha} and {power}")
    a = alpha if sided == "one" else alpha / 2
    dist = _sp.norm if df is None else _sp.t(df)
    return float(dist.ppf(1 - a)), float(dist.ppf(power))


def mde_paired_mean(sd_diff: float, n: int, *, alpha: float = 0.05, power: float = 0.8,
                    sided: str = "one", dist: str = "t") -> float:
    """Minimum detectable effect of a paired mean difference.

    ``MDE = (q_{1-a'} + q_{power}) * SD_diff / sqrt(n)`` with ``a' = alpha`` (one-sided) or
    ``alpha / 2`` (two-sided), ``q`` the quantiles of Student's t with ``n - 1`` degrees of freedom
    (``dist="t"``) or of the normal (``dist="z"``, the large-``n`` limit:
    ``(z_{1-a/2} + z_{0.8}) SD/sqrt(n) = 2.80 SD/sqrt(n)`` two-sided at 5%). The smallest true
    effect that the test detects with probability ``power``.
    """
    if n < 2:
        raise ValueError(f"need at least 2 units for a minimum detectable effect, got {n}")
    if dist not in ("t", "z"):
        raise ValueError(f"dist must be 't' or 'z', got {dist!r}")
    qa, qb = _quantiles(alpha, power, sided, n - 1 if dist == "t" else None)
    return float((qa + qb) * sd_diff / math.sqrt(n))


def discordance_upper(n_discordant: int, n: int, *, level: float = 0.95) -> float:
    """One-sided Clopper–Pearson upper bound of the discordance rate (``n_discordant`` of ``n``)."""
    if not 0 <= n_discordant <= n or n < 1:
        raise ValueError(f"need 0 <= n_discordant <= n and n >= 1, got {n_discordant} of {n}")
    if n_discordant == n:
        return 1.0
    return float(_sp.beta.ppf(_check_level(level), n_discordant + 1, n - n_discordant))


def mde_paired_accuracy(p_discordant: float, n: int, *, alpha: float = 0.05, power: float = 0.8,
                        sided: str = "one") -> float:
    """Minimum detectable change of a paired accuracy (McNemar, normal approximation).

    With ``p_d`` the share of items whose correctness changes, the per-item difference has variance
    ``p_d - delta^2 <= p_d``, so ``MDE = (z_{1-a'} + z_{power}) * sqrt(p_d / n)`` (the paired-mean
    formula with ``SD_diff = sqrt(p_d)``, slightly conservative).
    """
    if not 0 <= p_discordant <= 1:
        raise ValueError(f"a discordance rate lies in [0, 1], got {p_discordant}")
    if n < 1:
        raise ValueError(f"need at least one item, got n={n}")
    qa, qb = _quantiles(alpha, power, sided, None)
    return float((qa + qb) * math.sqrt(p_discordant / n))


def n_for_mde(mde: float, sd_diff: float, *, alpha: float = 0.05, power: float = 0.8,
              sided: str = "one") -> int:
    """Units needed for a minimum detectable effect ``mde``: ``ceil(((z_a + z_power) SD / mde)^2)``.

    For paired accuracies pass ``sd_diff = sqrt(p_discordant)``.
    """
    if mde <= 0:
        raise ValueError(f"mde must be > 0, got {mde}")
    qa, qb = _quantiles(alpha, power, sided, None)
    return int(math.ceil(((qa + qb) * sd_diff / mde) ** 2 - 1e-9))  # no extra unit for rounding noise


# --------------------------------------------------------------------------------------------
# Combining per-seed verdicts
# --------------------------------------------------------------------------------------------


def combine_verdicts(per_seed: Sequence[str], *, how: str = "unanimous", alpha: float = 0.05) -> str:
    """One verdict from several seeds' verdicts.

    ``how="unanimous"`` (default): 'reproduced' if every seed is, 'not reproduced' if every seed is,
    'inconclusive' otherwise. ``how="sign"``: an exact one-sided sign test across the seeds that are
    not inconclusive: 'reproduced' if P(X >= #reproduced) < ``alpha``, 'not reproduced' if
    P(X >= #not reproduced) < ``alpha`` (X ~ Binomial(#decided, 1/2)), else 'inconclusive' (needs
    at least 5 decided seeds to come out either way at 0.05).
    """
    if not per_seed:
        raise ValueError("combine_verdicts needs at least one verdict")
    bad = [v for v in per_seed if v not in OUTCOMES]
    if bad:
        raise ValueError(f"unknown verdict(s) {bad}; a verdict is one of {OUTCOMES}")
    if how == "unanimous":
        for v in (REPRODUCED, NOT_REPRODUCED):
            if all(x == v for x in per_seed):
                return v
        return INCONCLUSIVE
    if how == "sign":
        r, nr = sum(v == REPRODUCED for v in per_seed), sum(v == NOT_REPRODUCED for v in per_seed)
        if sign_test(r, nr) < alpha:
            return REPRODUCED
        if sign_test(nr, r) < alpha:
            return NOT_REPRODUCED
        return INCONCLUSIVE
    raise ValueError(f"how must be 'unanimous' or 'sign', got {how!r}")


# --------------------------------------------------------------------------------------------
# Per-layer curves, shift layers and half-way depths
# --------------------------------------------------------------------------------------------


def _stat(x: np.ndarray, stat: str, axis: int) -> np.ndarray:
    if stat == "mean":
        return x.mean(axis=axis)
    if stat == "median":
        return np.median(x, axis=axis)
    raise ValueError(f"stat must be one of {STATS}, got {stat!r}")


@dataclass
class CurveCI:
    """A per-layer statistic over sequences with its percentile bootstrap interval."""

    estimate: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    stat: str = "mean"
    level: float = 0.95

    def as_dict(self) -> dict[str, Any]:
        return {"estimate": self.estimate.tolist(), "lo": self.lo.tolist(), "hi": self.hi.tolist(),
                "stat": self.stat, "level": self.level}


def curve_ci(per_seq, *, n_boot: int = 1000, seed: int = 0, stat: str = "mean",
             level: float = 0.95) -> CurveCI:
    """Statistic over sequences of ``per_seq [n_seq, L+1]`` per layer, with a bootstrap CI."""
    x = as_numpy(per_seq)
    if x.ndim == 1:
        x = x[:, None]
    idx = bootstrap_indices(x.shape[0], n_boot, seed)
    boots = np.stack([_stat(x[i], stat, 0) for i in idx])
    lo, hi = percentile_ci(boots, level)
    return CurveCI(_stat(x, stat, 0), lo, hi, stat, level)


def paired_difference_ci(x, y, *, n_boot: int = 1000, seed: int = 0, level: float = 0.95) -> CurveCI:
    """Mean over sequences of ``x - y`` per layer with a bootstrap CI (paired by sequence)."""
    return curve_ci(as_numpy(x) - as_numpy(y), n_boot=n_boot, seed=seed, level=level)


def shift_layer(curve_in, curve_next, *, orientation: int = 1, rule: str = "first") -> int | None:
    """First layer where next-token alignment exceeds input alignment (see the module docstring)."""
    if rule not in RULES:
        raise ValueError(f"rule must be one of {RULES}, got {rule!r}")
    d = orientation * (as_numpy(curve_next) - as_numpy(curve_in))  # > 0 where next is more aligned
    above = d > 0
    if rule == "first":
        hits = np.flatnonzero(above)
        return int(hits[0]) if hits.size else None
    if not above[-1]:
        return None
    below = np.flatnonzero(~above)
    return int(below[-1] + 1) if below.size else 0


def crossing_point(curve_in, curve_next, *, orientation: int = 1, rule: str = "first") -> float | None:
    """Sub-layer crossing: linear interpolation of the difference between ``l-1`` and the shift layer."""
    layer = shift_layer(curve_in, curve_next, orientation=orientation, rule=rule)
    if layer is None:
        return None
    if layer == 0:
        return 0.0
    d = orientation * (as_numpy(curve_next) - as_numpy(curve_in))
    d0, d1 = d[layer - 1], d[layer]  # d0 <= 0 < d1
    return float(layer - 1 + (-d0) / (d1 - d0)) if d1 != d0 else float(layer)


@dataclass
class ShiftEstimate:
    """Shift layer of one metric with its bootstrap distribution summarised."""

    metric: str
    n_layers: int
    layer: int | None  # point estimate on all sequences (None: never crosses)
    crossing: float | None  # interpolated sub-layer crossing
    lo: float | None  # percentile CI of the crossing point over resamples that cross
    hi: float | None
    frac_never: float  # share of resamples in which the curves never cross
    rule: str = "first"
    stat: str = "mean"
    level: float = 0.95

    @property
    def relative(self) -> float | None:
        return None if self.crossing is None else self.crossing / self.n_layers

    @property
    def relative_ci(self) -> tuple[float | None, float | None]:
        if self.lo is None:
            return None, None
        return self.lo / self.n_layers, self.hi / self.n_layers

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["relative"] = self.relative
        out["relative_lo"], out["relative_hi"] = self.relative_ci
        return out


def shift_estimate(per_seq_in, per_seq_next, *, metric: str, n_layers: int, orientation: int,
                   n_boot: int = 1000, seed: int = 0, stat: str = "mean", rule: str = "first",
                   level: float = 0.95) -> ShiftEstimate:
    """Shift layer of ``metric`` from per-sequence curves ``[n_seq, L+1]`` (paired resampling).

    ``orientation``: +1 when larger values mean more aligned, -1 when smaller do (ranks);
    ``residshift.measure.lens.ORIENTATION[metric]`` for the lens metrics.
    """
    o = _check_orientation(orientation)
    a, b = as_numpy(per_seq_in), as_numpy(per_seq_next)
    if a.shape != b.shape or a.ndim != 2 or a.shape[1] != n_layers + 1:
        raise ValueError(f"expected two [n_seq, {n_layers + 1}] arrays, got {a.shape} and {b.shape}")
    ca, cb = _stat(a, stat, 0), _stat(b, stat, 0)
    layer = shift_layer(ca, cb, orientation=o, rule=rule)
    cross = crossing_point(ca, cb, orientation=o, rule=rule)
    boots = resample(lambda x, y: crossing_point(_stat(x, stat, 0), _stat(y, stat, 0), orientation=o,
                                                 rule=rule), a, b, n_boot=n_boot, seed=seed)
    lo, hi, frac_never = ci_of_resamples(boots, level)
    return ShiftEstimate(metric, n_layers, layer, cross, lo, hi, frac_never, rule, stat, level)


def _orientation_of(orientation: Mapping[str, int] | int, metric: str) -> int:
    if isinstance(orientation, Mapping):
        if metric not in orientation:
            raise ValueError(f"no orientation given for {metric!r}; pass orientation="
                             "residshift.measure.lens.ORIENTATION (or a dict with this metric)")
        return orientation[metric]
    return orientation


def shift_table(result, *, orientation: Mapping[str, int], metrics: Sequence[str] | None = None,
                n_boot: int = 1000, seed: int = 0, rule: str = "first") -> list[ShiftEstimate]:
    """Shift estimates for every paired metric of a lens result (``residshift.measure.lens.LensResult``).

    ``orientation`` maps metric -> +1/-1 (pass ``lens.ORIENTATION``); the default ``metrics`` are its
    keys, in its order, that the result holds. Ranks use the per-sequence median (``rank``: the
    median over sequences of per-sequence medians); the other metrics use means.
    """
    out = []
    names = [m for m in (metrics or orientation) if f"{m}_input" in result.per_seq]
    for m in names:
        if m == "rank":
            a, b, stat = result.per_seq_median["rank_input"], result.per_seq_median["rank_next"], "median"
        else:
            a, b, stat = result.per_seq[f"{m}_input"], result.per_seq[f"{m}_next"], "mean"
        out.append(shift_estimate(a, b, metric=m, n_layers=result.n_layers,
                                  orientation=_orientation_of(orientation, m), n_boot=n_boot, seed=seed,
                                  stat=stat, rule=rule))
    return out


def halfway_point(curve, *, frac: float = 0.5) -> float | None:
    """Where a curve has first covered ``frac`` of its way from layer 0 to layer L (interpolated).

    With ``a = curve``, the target is ``a(0) + frac · (a(L) - a(0))``; the result is the first
    (sub-)layer where ``a`` reaches it, moving in the direction from ``a(0)`` to ``a(L)``. ``None`` when
    the curve does not move (``a(L) == a(0)``). Used for the *input fade* (the input-token curve
    falls half-way) and the *next-token emergence* (the next-token curve rises half-way).
    """
    a = as_numpy(curve)
    if not 0 < frac < 1:
        raise ValueError(f"frac must lie in (0, 1), got {frac}")
    sign = np.sign(a[-1] - a[0])
    if sign == 0:
        return None
    d = sign * (a - (a[0] + frac * (a[-1] - a[0])))  # >= 0 once reached
    hits = np.flatnonzero(d >= 0)
    l = int(hits[0])  # exists: d[-1] > 0
    if l == 0:
        return 0.0
    d0, d1 = d[l - 1], d[l]
    return float(l - 1 + (-d0) / (d1 - d0)) if d1 != d0 else float(l)


def _halfway_from(curve, start: int, frac: float) -> float | None:
    p = halfway_point(np.asarray(curve)[start:], frac=frac)
    return None if p is None else p + start


def halfway_estimate(per_seq, *, metric: str, n_layers: int, frac: float = 0.5, n_boot: int = 1000,
                     seed: int = 0, stat: str = "mean", level: float = 0.95,
                     start: int = 0) -> ShiftEstimate:
    """:func:`halfway_point` of the across-sequence curve, with a bootstrap CI over sequences.

    ``start`` > 0 measures the way from layer ``start`` (instead of 0) to L; the position stays an
    absolute layer. Returned as a :class:`ShiftEstimate` (``layer`` = the first whole layer at or
    past the point, ``frac_never`` = share of resamples where the curve does not move).
    """
    x = as_numpy(per_seq)
    if x.ndim != 2 or x.shape[1] != n_layers + 1:
        raise ValueError(f"expected a [n_seq, {n_layers + 1}] array, got {x.shape}")
    if not 0 <= start < n_layers:
        raise ValueError(f"start must lie in [0, {n_layers - 1}], got {start}")
    point = _halfway_from(_stat(x, stat, 0), start, frac)
    boots = resample(lambda xi: _halfway_from(_stat(xi, stat, 0), start, frac), x, n_boot=n_boot, seed=seed)
    lo, hi, frac_never = ci_of_resamples(boots, level)
    layer = None if point is None else int(math.ceil(point))
    rule = f"halfway-{frac}" if start == 0 else f"halfway-{frac}-from-{start}"
    return ShiftEstimate(metric, n_layers, layer, point, lo, hi, frac_never, rule, stat, level)


def paired_halfway_shift(before, after, *, n_layers: int, frac: float = 0.5, start: int = 0,
                         n_boot: int = 1000, seed: int = 0, level: float = 0.95) -> dict[str, Any]:
    """Shift of a curve's half-way depth between two conditions on the same sequences.

    ``before``, ``after``: ``[n_seq, L+1]`` per-sequence curves of the same sequences. The estimate
    is ``halfway(mean after) - halfway(mean before)`` in layers; each bootstrap resample draws the
    same sequences for both. Returns ``estimate``, ``lo``, ``hi`` (layers), their ``relative_*``
    counterparts (``/ L``), ``before`` and ``after`` depths and ``frac_undefined`` (resamples where
    either curve does not move).
    """
    a, b = as_numpy(before), as_numpy(after)
    if a.shape != b.shape or a.ndim != 2 or a.shape[1] != n_layers + 1:
        raise ValueError(f"expected two [n_seq, {n_layers + 1}] arrays, got {a.shape} and {b.shape}")

    def shift(x, y):
        p, q = _halfway_from(x.mean(0), start, frac), _halfway_from(y.mean(0), start, frac)
        return None if p is None or q is None else q - p

    point = shift(a, b)
    lo, hi, undefined = ci_of_resamples(resample(shift, a, b, n_boot=n_boot, seed=seed), level)
    rel = lambda v: None if v is None else v / n_layers  # noqa: E731
    return {"estimate": point, "lo": lo, "hi": hi, "relative": rel(point), "relative_lo": rel(lo),
            "relative_hi": rel(hi), "before": _halfway_from(a.mean(0), start, frac),
            "after": _halfway_from(b.mean(0), start, frac), "frac_undefined": undefined,
            "n": int(a.shape[0]), "n_layers": n_layers, "level": level}


def transition_table(result, *, orientation: Mapping[str, int], metrics: Sequence[str] | None = None,
                     n_boot: int = 1000, seed: int = 0) -> list[dict[str, Any]]:
    """Per paired metric, the three depths that describe the shift (our definitions):

    ``fade`` — the input-token curve has fallen half-way from layer 0 to layer L;
    ``crossing`` — the next-token curve first exceeds the input-token curve (:func:`shift_layer`);
    ``emergence`` — the next-token curve has risen half-way from layer 0 to layer L.
    Each with a bootstrap CI over sequences (ranks: medians of per-sequence medians).
    ``orientation``: metric -> +1/-1 (``lens.ORIENTATION``).
    """
    rows = []
    crossings = {e.metric: e for e in shift_table(result, orientation=orientation, metrics=metrics,
                                                  n_boot=n_boot, seed=seed)}
    for m, cross in crossings.items():
        src, stat = (result.per_seq_median, "median") if m == "rank" else (result.per_seq, "mean")
        kw = dict(metric=m, n_layers=result.n_layers, n_boot=n_boot, seed=seed, stat=stat)
        rows.append({"metric": m, "fade": halfway_estimate(src[f"{m}_input"], **kw), "crossing": cross,
                     "emergence": halfway_estimate(src[f"{m}_next"], **kw)})
    return rows


def grouped_curve_ci(values, seq, group, *, n_groups: int, n_boot: int = 1000, seed: int = 0,
                     level: float = 0.95, return_boots: bool = False) -> dict[str, np.ndarray]:
    """Per-group, per-layer token means with a bootstrap over sequences (ratio estimator).

    ``values [L+1, n_tok]``, ``seq [n_tok]`` (sequence index), ``group [n_tok]`` (0..n_groups-1).
    Each resample draws sequences with replacement and pools their tokens, so the interval reflects
    between-sequence variation. Returns ``estimate``, ``lo``, ``hi`` (``[n_groups, L+1]``) and
    ``count`` (tokens per group); with ``return_boots`` also ``boots`` (``[n_boot, n_groups, L+1]``).
    """
    v = as_numpy(values)
    seq = np.asarray(seq, dtype=np.int64)
    group = np.asarray(group, dtype=np.int64)
    seqs, seq_idx = np.unique(seq, return_inverse=True)
    S, L1 = len(seqs), v.shape[0]
    sums = np.zeros((S, n_groups, L1))
    counts = np.zeros((S, n_groups))
    np.add.at(sums, (seq_idx, group), v.T)
    np.add.at(counts, (seq_idx, group), 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        est = sums.sum(0) / counts.sum(0)[:, None]
        boots = []
        for i in bootstrap_indices(S, n_boot, seed):
            boots.append(sums[i].sum(0) / counts[i].sum(0)[:, None])
    boots = np.stack(boots)
    q = (1 - level) / 2
    with warnings.catch_warnings():  # an empty group is all-NaN: its interval is NaN, by design
        warnings.simplefilter("ignore", RuntimeWarning)
        lo, hi = np.nanquantile(boots, q, axis=0), np.nanquantile(boots, 1 - q, axis=0)
    out = {"estimate": est, "lo": lo, "hi": hi, "count": counts.sum(0)}
    if return_boots:
        out["boots"] = boots
    return out


def grouped_shift(values_in, values_next, seq, group, *, n_groups: int, metric: str, n_layers: int,
                  orientation: int, n_boot: int = 1000, seed: int = 0,
                  level: float = 0.95) -> list[ShiftEstimate]:
    """Shift estimate per token group from per-token tables ``[L+1, n_tok]`` (bootstrap over sequences).

    The input and next tables are resampled with the same sequences (same seed), so the pair stays
    paired. Groups without tokens get ``layer=None`` and ``frac_never=1``. ``orientation``: +1/-1
    as in :func:`shift_estimate`.
    """
    o = _check_orientation(orientation)
    a = grouped_curve_ci(values_in, seq, group, n_groups=n_groups, n_boot=n_boot, seed=seed,
                         level=level, return_boots=True)
    b = grouped_curve_ci(values_next, seq, group, n_groups=n_groups, n_boot=n_boot, seed=seed,
                         level=level, return_boots=True)
    out = []
    for g in range(n_groups):
        if not a["count"][g]:
            out.append(ShiftEstimate(metric, n_layers, None, None, None, None, 1.0, "first", "mean", level))
            continue
        layer = shift_layer(a["estimate"][g], b["estimate"][g], orientation=o)
        cross = crossing_point(a["estimate"][g], b["estimate"][g], orientation=o)
        boots = [crossing_point(x, y, orientation=o) for x, y in zip(a["boots"][:, g], b["boots"][:, g])
                 if not (np.isnan(x).any() or np.isnan(y).any())]
        lo, hi, frac_never = ci_of_resamples(boots, level)
        out.append(ShiftEstimate(metric, n_layers, layer, cross, lo, hi, frac_never, "first",
                                 "mean", level))
    return out


def alignment_gap(lens_result, *, metric: str = "logprob", layers: Sequence[int] | None = None):
    """Per sequence, mean over ``layers`` of (alignment with x_{t+1}) - (alignment with x_t).

    A summary of the lens curves (descriptive; the verdicts on misalignment use the input token's
    alignment directly, :func:`residshift.analysis.verdicts.c3_misalignment`). ``layers`` index the
    lens's ``h_0..h_L`` (default: the last third, ``h_l`` with ``l >= 2(L+1)/3``). ``metric`` is a
    paired lens metric where larger is more aligned (logprob, prob, top1, cos_*, proj).
    """
    nxt = lens_result.per_seq[f"{metric}_next"].double()
    inp = lens_result.per_seq[f"{metric}_input"].double()
    n_h = nxt.shape[1]
    idx = list(range(int(math.ceil(2 * n_h / 3)), n_h)) if layers is None else list(layers)
    return (nxt[:, idx] - inp[:, idx]).mean(dim=1)


def format_ci(est, lo, hi, digits: int = 2) -> str:
    """``"0.65 [0.60, 0.70]"``; ``"never"`` for None."""
    if est is None:
        return "never"
    f = f"{{:.{digits}f}}"
    if lo is None:
        return f.format(est)
    return f"{f.format(est)} [{f.format(lo)}, {f.format(hi)}]"
