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

__all__ = ["MIN_POINTS", "Trend", "fit_trend", "budget_to_reach"]

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
