"""Uncertainty for the lens: bootstrap over sequences, shift-layer estimates, the C1 verdict.

Everything resamples whole sequences (windows), never tokens: tokens within a window are
correlated, windows are (nearly) independent draws from the corpus. Intervals are percentile
bootstrap intervals (seeded, ``n_boot`` resamples, 95% by default).

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
"""
from __future__ import annotations

import math
import warnings
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from ..measure.lens import ORIENTATION, PAIRED

RULES = ("first", "sustained")
STATS = ("mean", "median")


def _np(x) -> np.ndarray:
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    return np.asarray(x, dtype=np.float64)


def bootstrap_indices(n: int, n_boot: int, seed: int) -> np.ndarray:
    """``[n_boot, n]`` row indices drawn with replacement (seeded)."""
    if n < 2:
        raise ValueError(f"the bootstrap needs at least 2 sequences, got {n}: use more windows")
    if n_boot < 1:
        raise ValueError("n_boot must be at least 1")
    return np.random.default_rng(seed).integers(0, n, size=(n_boot, n))


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
    x = _np(per_seq)
    if x.ndim == 1:
        x = x[:, None]
    idx = bootstrap_indices(x.shape[0], n_boot, seed)
    boots = np.stack([_stat(x[i], stat, 0) for i in idx])
    a = (1 - level) / 2
    return CurveCI(_stat(x, stat, 0), np.quantile(boots, a, axis=0), np.quantile(boots, 1 - a, axis=0),
                   stat, level)


def shift_layer(curve_in, curve_next, *, orientation: int = 1, rule: str = "first") -> int | None:
    """First layer where next-token alignment exceeds input alignment (see the module docstring)."""
    if rule not in RULES:
        raise ValueError(f"rule must be one of {RULES}, got {rule!r}")
    d = orientation * (_np(curve_next) - _np(curve_in))  # > 0 where next is more aligned
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
    d = orientation * (_np(curve_next) - _np(curve_in))
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


def shift_estimate(per_seq_in, per_seq_next, *, metric: str, n_layers: int, n_boot: int = 1000,
                   seed: int = 0, stat: str = "mean", rule: str = "first",
                   level: float = 0.95) -> ShiftEstimate:
    """Shift layer of ``metric`` from per-sequence curves ``[n_seq, L+1]`` (paired resampling)."""
    if metric not in ORIENTATION:
        raise ValueError(f"{metric!r} has no input/next pair; paired metrics: {list(PAIRED)}")
    o = ORIENTATION[metric]
    a, b = _np(per_seq_in), _np(per_seq_next)
    if a.shape != b.shape or a.ndim != 2 or a.shape[1] != n_layers + 1:
        raise ValueError(f"expected two [n_seq, {n_layers + 1}] arrays, got {a.shape} and {b.shape}")
    ca, cb = _stat(a, stat, 0), _stat(b, stat, 0)
    layer = shift_layer(ca, cb, orientation=o, rule=rule)
    cross = crossing_point(ca, cb, orientation=o, rule=rule)
    boots = []
    for i in bootstrap_indices(a.shape[0], n_boot, seed):
        boots.append(crossing_point(_stat(a[i], stat, 0), _stat(b[i], stat, 0), orientation=o, rule=rule))
    found = np.array([x for x in boots if x is not None])
    frac_never = 1 - found.size / len(boots)
    lo = hi = None
    if found.size:
        q = (1 - level) / 2
        lo, hi = float(np.quantile(found, q)), float(np.quantile(found, 1 - q))
    return ShiftEstimate(metric, n_layers, layer, cross, lo, hi, float(frac_never), rule, stat, level)


def shift_table(result, *, metrics: Sequence[str] | None = None, n_boot: int = 1000, seed: int = 0,
                rule: str = "first") -> list[ShiftEstimate]:
    """Shift estimates for every paired metric of a :class:`residshift.measure.lens.LensResult`.

    Ranks use the per-sequence mean of ``logrank`` (``rank`` itself: the median over sequences of
    per-sequence medians); the other metrics use means.
    """
    out = []
    names = [m for m in (metrics or PAIRED) if f"{m}_input" in result.per_seq]
    for m in names:
        if m == "rank":
            a, b, stat = result.per_seq_median["rank_input"], result.per_seq_median["rank_next"], "median"
        else:
            a, b, stat = result.per_seq[f"{m}_input"], result.per_seq[f"{m}_next"], "mean"
        out.append(shift_estimate(a, b, metric=m, n_layers=result.n_layers, n_boot=n_boot, seed=seed,
                                  stat=stat, rule=rule))
    return out


def halfway_point(curve, *, frac: float = 0.5) -> float | None:
    """Where a curve has first covered ``frac`` of its way from layer 0 to layer L (interpolated).

    With ``a = curve``, the target is ``a(0) + frac · (a(L) - a(0))``; the result is the first
    (sub-)layer where ``a`` reaches it, moving in the direction from ``a(0)`` to ``a(L)``. ``None`` when
    the curve does not move (``a(L) == a(0)``). Used for the *input fade* (the input-token curve
    falls half-way) and the *next-token emergence* (the next-token curve rises half-way).
    """
    a = _np(curve)
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


def halfway_estimate(per_seq, *, metric: str, n_layers: int, frac: float = 0.5, n_boot: int = 1000,
                     seed: int = 0, stat: str = "mean", level: float = 0.95) -> ShiftEstimate:
    """:func:`halfway_point` of the across-sequence curve, with a bootstrap CI over sequences.

    Returned as a :class:`ShiftEstimate` (``layer`` = the first whole layer at or past the point,
    ``frac_never`` = share of resamples where the curve does not move).
    """
    x = _np(per_seq)
    if x.ndim != 2 or x.shape[1] != n_layers + 1:
        raise ValueError(f"expected a [n_seq, {n_layers + 1}] array, got {x.shape}")
    point = halfway_point(_stat(x, stat, 0), frac=frac)
    boots = [halfway_point(_stat(x[i], stat, 0), frac=frac) for i in bootstrap_indices(x.shape[0], n_boot, seed)]
    found = np.array([b for b in boots if b is not None])
    lo = hi = None
    if found.size:
        q = (1 - level) / 2
        lo, hi = float(np.quantile(found, q)), float(np.quantile(found, 1 - q))
    layer = None if point is None else int(math.ceil(point))
    return ShiftEstimate(metric, n_layers, layer, point, lo, hi, float(1 - found.size / len(boots)),
                         f"halfway-{frac}", stat, level)


def transition_table(result, *, metrics: Sequence[str] | None = None, n_boot: int = 1000,
                     seed: int = 0) -> list[dict[str, Any]]:
    """Per paired metric, the three depths that describe the shift (our definitions):

    ``fade`` — the input-token curve has fallen half-way from layer 0 to layer L;
    ``crossing`` — the next-token curve first exceeds the input-token curve (:func:`shift_layer`);
    ``emergence`` — the next-token curve has risen half-way from layer 0 to layer L.
    Each with a bootstrap CI over sequences (ranks: medians of per-sequence medians).
    """
    rows = []
    crossings = {e.metric: e for e in shift_table(result, metrics=metrics, n_boot=n_boot, seed=seed)}
    for m, cross in crossings.items():
        src, stat = (result.per_seq_median, "median") if m == "rank" else (result.per_seq, "mean")
        kw = dict(metric=m, n_layers=result.n_layers, n_boot=n_boot, seed=seed, stat=stat)
        rows.append({"metric": m, "fade": halfway_estimate(src[f"{m}_input"], **kw), "crossing": cross,
                     "emergence": halfway_estimate(src[f"{m}_next"], **kw)})
    return rows


def paired_difference_ci(x, y, *, n_boot: int = 1000, seed: int = 0, level: float = 0.95) -> CurveCI:
    """Mean over sequences of ``x - y`` per layer with a bootstrap CI (paired by sequence)."""
    return curve_ci(_np(x) - _np(y), n_boot=n_boot, seed=seed, level=level)


def grouped_curve_ci(values, seq, group, *, n_groups: int, n_boot: int = 1000, seed: int = 0,
                     level: float = 0.95, return_boots: bool = False) -> dict[str, np.ndarray]:
    """Per-group, per-layer token means with a bootstrap over sequences (ratio estimator).

    ``values [L+1, n_tok]``, ``seq [n_tok]`` (sequence index), ``group [n_tok]`` (0..n_groups-1).
    Each resample draws sequences with replacement and pools their tokens, so the interval reflects
    between-sequence variation. Returns ``estimate``, ``lo``, ``hi`` (``[n_groups, L+1]``) and
    ``count`` (tokens per group); with ``return_boots`` also ``boots`` (``[n_boot, n_groups, L+1]``).
    """
    v = _np(values)
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
                  n_boot: int = 1000, seed: int = 0, level: float = 0.95) -> list[ShiftEstimate]:
    """Shift estimate per token group from per-token tables ``[L+1, n_tok]`` (bootstrap over sequences).

    The input and next tables are resampled with the same sequences (same seed), so the pair stays
    paired. Groups without tokens get ``layer=None`` and ``frac_never=1``.
    """
    o = ORIENTATION[metric]
    a = grouped_curve_ci(values_in, seq, group, n_groups=n_groups, n_boot=n_boot, seed=seed,
                         level=level, return_boots=True)
    b = grouped_curve_ci(values_next, seq, group, n_groups=n_groups, n_boot=n_boot, seed=seed,
                         level=level, return_boots=True)
    out = []
    q = (1 - level) / 2
    for g in range(n_groups):
        if not a["count"][g]:
            out.append(ShiftEstimate(metric, n_layers, None, None, None, None, 1.0, "first", "mean", level))
            continue
        layer = shift_layer(a["estimate"][g], b["estimate"][g], orientation=o)
        cross = crossing_point(a["estimate"][g], b["estimate"][g], orientation=o)
        boots = [crossing_point(x, y, orientation=o) for x, y in zip(a["boots"][:, g], b["boots"][:, g])
                 if not (np.isnan(x).any() or np.isnan(y).any())]
        found = np.array([x for x in boots if x is not None])
        frac_never = 1 - found.size / max(1, len(boots))
        lo = hi = None
        if found.size:
            lo, hi = float(np.quantile(found, q)), float(np.quantile(found, 1 - q))
        out.append(ShiftEstimate(metric, n_layers, layer, cross, lo, hi, float(frac_never), "first",
                                 "mean", level))
    return out


# --------------------------------------------------------------------------------------------
# The verdict for claim C1
# --------------------------------------------------------------------------------------------

C1_RULE = """\
Claim C1 (paper): decoding hidden states through the tied embedding shows three regimes — early
layers decode to the input token, middle layers to nothing interpretable, late layers to the next
token. Our computed rule, on top-1 match rates of the logit lens with 95% bootstrap CIs over
sequences:
  early   : at layer 0, mean(top1_input - top1_next) has CI > 0;
  late    : at layer L, mean(top1_next - top1_input) has CI > 0;
  switch  : the curves cross (rule 'first') in at least 97.5% of bootstrap resamples;
  middle  : some layer 0 < l < L has the upper CI of BOTH match rates below half of the
            late-regime next-token rate top1_next(L) (neither token is decoded there).
Verdict: 'reproduced' if all four hold; 'not reproduced' if early or late has its CI on the
wrong side of 0 (the opposite significant ordering) or the curves never cross in most (> 50%)
resamples; otherwise 'inconclusive'. Depth is reported, not judged: the paper says it varies by
model (its Gemma-2-2B reference, ~layer 17 of 26 ≈ 0.65, is a reference point only)."""


@dataclass
class Verdict:
    claim: str
    verdict: str  # "reproduced" | "not reproduced" | "inconclusive"
    checks: dict[str, bool]
    numbers: dict[str, Any] = field(default_factory=dict)
    rule: str = C1_RULE

    def as_dict(self) -> dict[str, Any]:
        return {"claim": self.claim, "verdict": self.verdict, "checks": self.checks,
                "numbers": self.numbers}


def verdict_c1(result, *, n_boot: int = 1000, seed: int = 0, level: float = 0.95) -> Verdict:
    """Compute the C1 verdict for one model's :class:`~residshift.measure.lens.LensResult` (rule: C1_RULE)."""
    if "top1_input" not in result.per_seq:
        raise ValueError("the C1 verdict needs the 'top1' metric in the lens result")
    L = result.n_layers
    ti, tn = _np(result.per_seq["top1_input"]), _np(result.per_seq["top1_next"])
    diff = paired_difference_ci(ti, tn, n_boot=n_boot, seed=seed, level=level)  # input - next
    ci_in = curve_ci(ti, n_boot=n_boot, seed=seed, level=level)
    ci_next = curve_ci(tn, n_boot=n_boot, seed=seed, level=level)
    shift = shift_estimate(ti, tn, metric="top1", n_layers=L, n_boot=n_boot, seed=seed, level=level)
    tau = 0.5 * float(ci_next.estimate[L])
    middle_layers = [l for l in range(1, L) if ci_in.hi[l] < tau and ci_next.hi[l] < tau]
    checks = {
        "early": bool(diff.lo[0] > 0),
        "late": bool(diff.hi[L] < 0),
        "switch": bool(shift.frac_never <= (1 - level) / 2),
        "middle": bool(middle_layers),
    }
    opposite = bool(diff.hi[0] < 0) or bool(diff.lo[L] > 0) or shift.frac_never > 0.5
    if all(checks.values()):
        verdict = "reproduced"
    elif opposite:
        verdict = "not reproduced"
    else:
        verdict = "inconclusive"
    numbers = {
        "n_seq": int(ti.shape[0]), "n_layers": L,
        "top1_input_layer0": [float(ci_in.estimate[0]), float(ci_in.lo[0]), float(ci_in.hi[0])],
        "top1_next_layer0": [float(ci_next.estimate[0]), float(ci_next.lo[0]), float(ci_next.hi[0])],
        "top1_input_last": [float(ci_in.estimate[L]), float(ci_in.lo[L]), float(ci_in.hi[L])],
        "top1_next_last": [float(ci_next.estimate[L]), float(ci_next.lo[L]), float(ci_next.hi[L])],
        "middle_threshold": tau, "middle_layers": middle_layers,
        "shift": shift.as_dict(),
    }
    return Verdict("C1", verdict, checks, numbers)


def format_ci(est, lo, hi, digits: int = 2) -> str:
    """``"0.65 [0.60, 0.70]"``; ``"never"`` for None."""
    if est is None:
        return "never"
    f = f"{{:.{digits}f}}"
    if lo is None:
        return f.format(est)
    return f"{f.format(est)} [{f.format(lo)}, {f.format(hi)}]"
