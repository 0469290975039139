"""A measure's trend against the training budget, and where the trend line would reach a target: the
scale ladder's extrapolation (notebook 10).

The model is declared here before any ladder number was read: the measure (the early share S1 of
:mod:`.scale`) is taken to move linearly in ``log10(tokens)`` between rungs, fitted by least squares to
the *finished* rungs of one shape (each rung's own annealed model, one point per rung). The budget at
which the line reaches a target ``y*`` is ``10 ** ((y* - a) / b)``. It is an **extrapolation** beyond
the measured budgets, and says so in every field and sentence that carries it:

- fewer than :data:`MIN_POINTS` rungs: no line (``None``, with the reason);
- a slope that does not move toward the target (``b >= 0`` for a target below the last point): the
  line never reaches it (``None``, with the reason), not an infinite budget;
- a target the measured points already reach: the measured budget of the first rung that reaches it,
  marked ``measured``, not extrapolated (reaching is "at or below" for a falling measure such as S1);
- a line so flat that it would reach the target only beyond 10^:data:`MAX_DECADES` tokens: no budget.

Also reported: the fit on the last :data:`MIN_POINTS` rungs alone (the local slope; a curve that
flattens makes the full-range line optimistic) and the residuals. Pure computation: writes nothing.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Sequence

import numpy as np

__all__ = ["MIN_POINTS", "Trend", "fit_trend", "budget_to_reach", "budget_interval", "tokens_text"]

MIN_POINTS = 2
MAX_DECADES = 15  # beyond 10^15 tokens (more than any language model has been trained on): reported as never


@dataclass(frozen=True)
class Trend:
    """``y = intercept + slope * log10(tokens)`` over ``n`` points; ``residual_sd`` (None for 2 points)."""

    intercept: float | None
    slope: float | None
    n: int
    tokens: tuple[float, ...]
    values: tuple[float, ...]
    residual_sd: float | None
    why: str = ""

    def at(self, tokens: float) -> float | None:
        if self.slope is None:
            return None
        return self.intercept + self.slope * math.log10(tokens)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["tokens"], d["values"] = list(self.tokens), list(self.values)
        return d


def fit_trend(tokens: Sequence[float], values: Sequence[float]) -> Trend:
    """Least squares of ``values`` on ``log10(tokens)``; points with a missing value are left out."""
    pts = [(float(t), float(v)) for t, v in zip(tokens, values, strict=True)
           if v is not None and math.isfinite(float(v))]
    if any(t <= 0 for t, _ in pts):
        raise ValueError("tokens must be positive budgets")
    if len({t for t, _ in pts}) < MIN_POINTS:
        return Trend(None, None, len(pts), tuple(t for t, _ in pts), tuple(v for _, v in pts), None,
                     why=f"fewer than {MIN_POINTS} budgets measured")
    x = np.log10([t for t, _ in pts])
    y = np.array([v for _, v in pts])
    slope, intercept = np.polyfit(x, y, 1)
    res = y - (intercept + slope * x)
    sd = float(np.sqrt((res ** 2).sum() / (len(y) - 2))) if len(y) > 2 else None
    return Trend(float(intercept), float(slope), len(pts), tuple(t for t, _ in pts), tuple(y.tolist()), sd)


def budget_to_reach(trend: Trend, target: float, *, direction: str | None = None) -> dict[str, Any]:
    """Where ``trend`` reaches ``target``: ``{target, tokens, kind, why}`` with ``kind`` ``"measured"``
    (the first measured budget whose value has reached it), ``"extrapolated"`` (the line's budget), or
    ``None`` (no line, a line that moves away, or one so flat that the budget is beyond any number).

    ``direction``: ``"down"`` (reached when the value is at or below the target: the early share falling
    toward the pretrained models') or ``"up"``; None infers it from the first point (down when the target
    lies below it)."""
    if direction is None:
        direction = "down" if trend.values and target < trend.values[0] else "up"
    if direction not in ("down", "up"):
        raise ValueError(f"direction must be 'down', 'up' or None, got {direction!r}")
    down = direction == "down"
    for t, v in zip(trend.tokens, trend.values):
        if (v <= target) if down else (v >= target):
            return {"target": target, "tokens": t, "kind": "measured", "why": ""}
    if trend.slope is None:
        return {"target": target, "tokens": None, "kind": None, "why": trend.why}
    if trend.slope == 0 or (trend.slope > 0) == down:
        return {"target": target, "tokens": None, "kind": None,
                "why": f"the fitted line moves away from {target:g} (slope {trend.slope:+.3g} per decade of tokens)"}
    exponent = (target - trend.intercept) / trend.slope
    if not math.isfinite(exponent) or exponent > MAX_DECADES:
        return {"target": target, "tokens": None, "kind": None,
                "why": f"the fitted line is nearly flat (slope {trend.slope:+.3g} per decade of tokens): it would reach "
                       f"{target:g} beyond 10^{MAX_DECADES} tokens"}
    return {"target": target, "tokens": float(10 ** exponent), "kind": "extrapolated",
            "why": "extrapolated beyond the measured budgets: a straight line in log10(tokens)"}


def tokens_text(n: float) -> str:
    """A token count as people write it: 358k, 5.73M, 485M, 1.2B (beyond 10^12: 9.2e+13)."""
    return (f"{n:.2g}" if n >= 1e12 else f"{n / 1e9:.3g}B" if n >= 1e9 else f"{n / 1e6:.3g}M" if n >= 1e6
            else f"{n / 1e3:.3g}k")


def budget_interval(tokens: Sequence[float], early, final, target: float, *, direction: str = "down",
                    n_boot: int = 1000, seed: int = 0, level: float = 0.95) -> dict[str, Any]:
    """The window-bootstrap interval of :func:`budget_to_reach` for a ratio measure (S1 = mean early /
    mean final): per resample, each rung's windows are drawn with replacement (independently per rung),
    the ratio recomputed, the line refitted and the budget read off. ``early``/``final``: one array of
    per-window values per rung, in the order of ``tokens``. Returns ``{lo, hi, never, n_boot, level}``:
    percentiles of the budgets (log scale), ``hi`` None when more than ``(1 - level) / 2`` of the resamples
    never reach the target (the interval is open above); ``never`` is that share. It covers window noise
    only: with one seed per rung, the spread between seeds is not in it."""
    rng = np.random.default_rng(seed)
    early = [np.asarray(e, dtype=np.float64) for e in early]
    final = [np.asarray(f, dtype=np.float64) for f in final]
    out = []
    for _ in range(n_boot):
        vals = []
        for e, f in zip(early, final, strict=True):
            i = rng.integers(0, e.size, e.size)
            den = f[i].mean()
            vals.append(e[i].mean() / den if den > 0 else None)
        b = budget_to_reach(fit_trend(tokens, vals), target, direction=direction)
        out.append(math.log10(b["tokens"]) if b["tokens"] else math.inf)
    a = np.sort(np.asarray(out))
    never = float(np.mean(np.isinf(a)))
    q = (1 - level) / 2
    lo = a[int(math.floor(q * (n_boot - 1)))]
    hi = a[int(math.ceil((1 - q) * (n_boot - 1)))]
    return {"lo": None if math.isinf(lo) else float(10 ** lo), "hi": None if math.isinf(hi) else float(10 ** hi),
            "never": never, "n_boot": n_boot, "level": level}
