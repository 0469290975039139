"""Does a small trained GPT switch deep? The vocabulary probe's rule (issue 52), judged by what can move.

The scale ladder (notebook 10) judged its rungs by the early share S1 (:mod:`.scale`), which falls
when the model's own top-1 rises even if block 0 predicts as much as before. This rule reads instead
*where* the next token appears: the **departure depth**, the first relative depth ``l / L`` (``l >= 1``)
at which a seed's next-token top-1 rate (logit lens, mean over its windows) exceeds the unigram
decoder's by more than :data:`MARGIN` (C1's materiality margin, 0.02). Written and committed before
the probe's first number; the pretrained references it is set against were known (SmolLM2-135M,
Gemma-3-270M and Qwen2.5-Coder-1.5B depart at 0.57-0.71 of depth, notebook 03), and so was the ladder's
result that every 1,024-token rung departs at h_1 or h_2 (0.04-0.17).

**The unit is the seed.** Each seed of a cell (one vocabulary and width) gives one departure depth
and one C1.middle verdict (:func:`.verdicts.c1_regimes` on its windows: a quiet run of middle layers).
Across seeds: the mean departure depth with its two-sided :data:`LEVEL` t-interval
(:func:`.verdicts.seed_test`'s interval; a cell needs :data:`MIN_SEEDS` seeds), and C1.middle by
unanimity (:func:`.stats.combine_verdicts`).

**The rule** (:func:`cell_outcome`), against :data:`DEEP` = 0.5, the lower edge of C1.switch's band
around the paper's 0.65 (:data:`.verdicts.DEPTH_BAND`):

- *deep switch* (the paper's regime: ``reproduced``) if the interval's lower bound is at least 0.5
  AND C1.middle is reproduced on every seed;
- *early departure* (near-bigram: ``not reproduced``) if the interval's upper bound lies below 0.5;
- *inconclusive* otherwise (the interval straddles 0.5; deep but no quiet middle; a seed whose
  next-token curve never leaves the unigram level; fewer than :data:`MIN_SEEDS` seeds).

**Reported beside it, deciding nothing**: the excess of the next-token top-1 over the unigram decoder
at ``h_1`` (what block 0 predicts) and at the middle layer ``h_round(L/2)``, each with its t-interval
over seeds. Top-1 rates themselves are not compared across vocabularies (a larger vocabulary makes
every top-1 harder); the excess over the same vocabulary's unigram guess, and the depth, are.

**Reachable at 3 seeds** (tested): departure depths are multiples of ``1 / L``; three seeds that agree
give a zero-width interval, so 3 seeds departing at h_8 of 12 are a deep switch and 3 at h_1 an early
departure, while seeds at 0.25, 0.42 and 0.58 straddle (t_0.975,2 = 4.30).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from . import stats, verdicts

MARGIN = verdicts.C1_MARGIN  # top-1 excess over the unigram decoder that counts as "left it"
DEEP = verdicts.DEPTH_BAND[0]  # 0.5: a departure at least this deep is in the paper's regime
LEVEL = verdicts.LEVEL
MIN_SEEDS = 3  # the floor for a cell the conclusion rests on
DEEP_SWITCH, EARLY = "deep switch", "early departure"


@dataclass(frozen=True)
class CellRow:
    """One cell of the probe (a vocabulary and a width) across its seeds."""

    cell: str
    n_layers: int
    seeds: list[int]
    depths: list[float | None]  # per seed, l/L (None: never left the unigram level)
    middles: list[str]  # per seed, C1.middle
    depth: float | None  # mean over seeds
    depth_ci: tuple[float | None, float | None]
    excess_h1: float
    excess_h1_ci: tuple[float | None, float | None]
    excess_mid: float
    excess_mid_ci: tuple[float | None, float | None]
    middle: str  # C1.middle across seeds (unanimity)
    verdict: str  # reproduced (deep switch) | not reproduced (early departure) | inconclusive
    reading: str  # DEEP_SWITCH, EARLY or "inconclusive"
    why: str
    details: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}


def departure_depth(next_curve, unigram: float, *, margin: float = MARGIN) -> float | None:
    """``l / L`` of the first ``l >= 1`` where ``next_curve [L+1] - unigram > margin``; None if none."""
    x = np.asarray(next_curve, dtype=np.float64)
    L = x.size - 1
    if L < 1:
        raise ValueError(f"a next-token curve over h_0..h_L needs L >= 1, got {x.size} values")
    layer = next((l for l in range(1, L + 1) if x[l] - unigram > margin), None)
    return None if layer is None else layer / L


def _interval(x: Sequence[float], level: float) -> tuple[float | None, float | None]:
    t = verdicts.seed_test(np.asarray(x, dtype=np.float64), sign=1, margin=0.0, level=level)
    return t["lo"], t["hi"]


def cell_outcome(depths: Sequence[float | None], middles: Sequence[str], *, level: float = LEVEL,
                 deep: float = DEEP) -> tuple[str, str, str, float | None, tuple[float | None, float | None]]:
    """The rule: ``(verdict, reading, why, mean depth, interval)`` from per-seed departure depths and
    C1.middle verdicts (``why`` says what decided it, for every verdict)."""
    if len(depths) != len(middles):
        raise ValueError(f"{len(depths)} departure depths for {len(middles)} C1.middle verdicts: one of each per seed")
    n = len(depths)
    if n < MIN_SEEDS:
        return (verdicts.INCONCLUSIVE, "inconclusive", f"not assessable: {n} seed(s), the rule needs {MIN_SEEDS}",
                None, (None, None))
    if any(d is None for d in depths):
        return (verdicts.INCONCLUSIVE, "inconclusive", "a seed's next-token curve never leaves the unigram level "
                "(an undertrained model)", None, (None, None))
    mean = float(np.mean(depths))
    lo, hi = _interval(depths, level)
    middle = stats.combine_verdicts(list(middles), how="unanimous")
    if lo is not None and lo >= deep:
        if middle == verdicts.REPRODUCED:
            return (verdicts.REPRODUCED, DEEP_SWITCH, f"departure [{lo:.3g}, {hi:.3g}] at or past {deep:g} and a "
                    "quiet middle in every seed", mean, (lo, hi))
        return (verdicts.INCONCLUSIVE, "inconclusive", f"departure [{lo:.3g}, {hi:.3g}] at or past {deep:g} but "
                f"C1.middle is {middle} across seeds", mean, (lo, hi))
    if hi is not None and hi < deep:
        return verdicts.NOT_REPRODUCED, EARLY, f"departure [{lo:.3g}, {hi:.3g}] below {deep:g}", mean, (lo, hi)
    return verdicts.INCONCLUSIVE, "inconclusive", f"departure [{lo:.3g}, {hi:.3g}] straddles {deep:g}", mean, (lo, hi)


def probe_cell(top1_input, top1_next, unigram_input, unigram_next, *, cell: str, seeds: Sequence[int],
               n_boot: int = 1000, seed: int = 0, level: float = LEVEL, margin: float = MARGIN) -> CellRow:
    """The rule on one cell from each seed's windows: ``top1_* [n_seeds, n_windows, L+1]`` (the logit
    lens's per-window top-1 rates of the input and next token), ``unigram_* [n_seeds, n_windows]``."""
    tn = stats.as_numpy(top1_next).astype(np.float64)
    ti = stats.as_numpy(top1_input).astype(np.float64)
    ui, un = stats.as_numpy(unigram_input).astype(np.float64), stats.as_numpy(unigram_next).astype(np.float64)
    if tn.ndim != 3 or ti.shape != tn.shape or un.shape != tn.shape[:2] or ui.shape != un.shape:
        raise ValueError(f"shapes: top1 {ti.shape} / {tn.shape}, unigram {ui.shape} / {un.shape}; want "
                         "top1_* [n_seeds, n_windows, L+1], unigram_* [n_seeds, n_windows]")
    if len(seeds) != tn.shape[0]:
        raise ValueError(f"seeds names {len(seeds)} seeds for {tn.shape[0]} stacks of curves")
    L = tn.shape[-1] - 1
    curves, uni = tn.mean(1), un.mean(1)
    depths = [departure_depth(c, u, margin=margin) for c, u in zip(curves, uni)]
    middles = [next(r for r in verdicts.c1_regimes(ti[s], tn[s], ui[s], un[s], model=cell, decoder="logit lens",
                                                    min_run=verdicts.c1_min_run(L), n_boot=n_boot, seed=seed,
                                                    level=level) if r.claim_id == "C1.middle").verdict
               for s in range(tn.shape[0])]
    verdict, reading, why, mean, ci = cell_outcome(depths, middles, level=level)
    mid = round(L / 2)
    ex1, exm = curves[:, 1] - uni, curves[:, mid] - uni
    return CellRow(cell=cell, n_layers=L, seeds=[int(s) for s in seeds], depths=depths, middles=middles, depth=mean,
                   depth_ci=ci, excess_h1=float(ex1.mean()), excess_h1_ci=_interval(ex1, level),
                   excess_mid=float(exm.mean()), excess_mid_ci=_interval(exm, level),
                   middle=stats.combine_verdicts(middles, how="unanimous"), verdict=verdict, reading=reading, why=why,
                   details={"middle_layer": mid, "margin": margin, "deep": DEEP, "level": level,
                            "excess_h1_per_seed": ex1.tolist(), "excess_mid_per_seed": exm.tolist(),
                            "unigram_next": uni.tolist(), "top1_next_hL": curves[:, -1].tolist()})


__all__ = ["MARGIN", "DEEP", "LEVEL", "MIN_SEEDS", "DEEP_SWITCH", "EARLY", "CellRow", "departure_depth",
           "cell_outcome", "probe_cell"]
