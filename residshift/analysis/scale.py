"""Has a model the deep switch? A measure written down before it was computed on this project's numbers
(issue 33, part 1); the rough reference values below were known when it was written.

Pretrained LLMs decode, through the tied embedding (logit lens), the input token early and the next
token late, with a *quiet middle* between where neither beats a frequency guess: the switch from
input-aligned to output-aligned happens deep in the stack. The small GPTs this project trains look
*near-bigram* instead: most of their final next-token top-1 is already there after block 0. This
module turns that contrast into one pre-declared classification, so that a larger trained model
(issue 33's later parts) can be said to have the deep switch, or not, by a rule fixed here.

**Layers.** As everywhere in the project (notebooks 03 and 08, :func:`.verdicts.c1_regimes`), the
residual states are ``h_0..h_L`` of an ``L``-block model: ``h_0`` is the token's embedding, ``h_l``
the stream after block ``l - 1``, ``h_L`` the stream the model's own head reads, so the logit lens
at ``h_L`` is the model's own next-token prediction. Curves are ``[..., L+1]`` arrays over ``h_0..h_L``.

**The measure** (constants below; the rule in words is :data:`SWITCH_RULE`):

1. *Early share* ``S1 = top1_next(h_1) / top1_next(h_L)``: the share of the model's final
   next-token top-1 rate (its own accuracy: ``h_L``, not ``h_(L-1)``, so that S1 reads "how much of
   what the model finally predicts is already predicted after block 0") reached at ``h_1``, a ratio
   of means over windows (a per-window ratio is undefined where a window's final top-1 is 0). Its
   interval: a percentile bootstrap over windows (pretrained models, :func:`switch_on_windows`); for
   trained models the seed is the unit of replication, and across seeds the interval is the
   t-interval of the mean per-seed S1 (:func:`.verdicts.seed_test`'s interval, the project's
   convention for seeds: a percentile bootstrap of 5 values never leaves their range and
   under-covers). Level :data:`LEVEL`.
2. *Departure depth*: the first layer ``l >= 1`` at which the next-token top-1 leaves the unigram
   decoder's level (``residshift.measure.lens.unigram_baseline``, the frequency guess C1's rows
   compare with), as relative depth ``l / L``: the first layer whose interval of the excess
   ``d_next(l) = top1_next(l) - unigram_next`` has its lower bound above :data:`DEPARTURE_MARGIN`
   (= C1's materiality margin, :data:`.verdicts.C1_MARGIN`); ``None`` if no layer does. Reported
   beside the outcome, not part of it: C1.middle already tests the next-token curve against the
   unigram decoder in the middle, with a correction over the candidate layers, so a third criterion
   would add a decision without adding information.
3. *C1.middle*, exactly as :func:`.verdicts.c1_regimes` computes it (a quiet run of
   :data:`.verdicts.C1_MIN_RUN` middle layers; across seeds combined by unanimity as in
   :func:`.verdicts.c1_across_seeds`).

**The rule** (:func:`switch_outcome`), three outcomes, :data:`SWITCH_OUTCOMES`:

- :data:`DEEP_SWITCH` if the interval of S1 lies below :data:`SHARE_THRESHOLD` AND C1.middle is
  reproduced;
- :data:`NEAR_BIGRAM` if the interval of S1 lies above :data:`SHARE_THRESHOLD` and C1.middle is
  not ``reproduced`` (not reproduced or inconclusive: a quiet middle after a next-token rate at
  ``h_1`` above half the final one would contradict "the prediction is made at block 0");
- :data:`SWITCH_INCONCLUSIVE` otherwise, with the reason (the interval straddles the threshold; no
  interval; S1 low but no quiet middle shown; S1 high but a quiet middle).

**Why 0.5.** The threshold comes from the concept, not from the numbers: a model "has the deep
switch" when *most* of its final next-token prediction is made after block 0, i.e. less than half of
its final next-token top-1 is reached at ``h_1``; a near-bigram model has made most of it at block 0.
Half is the one boundary that needs no further choice, and it is the same half-way notion as C1.depth's
emergence (:data:`.verdicts.DEPTH_FRAC`). The references people quote (Gemma-3-270M about 0.05,
SmolLM2-135M about 0.18, the trained 6x128 GPTs 0.70-0.77, quoted in the issue that asked for this
measure) were known when it was chosen, so it is not blind to them; it was not tuned between them, and
they lie far enough from it on both sides that no nearby threshold would classify them differently.

**Minimum depth.** :data:`MIN_LAYERS` = 4 blocks: C1.middle's candidates are ``h_2..h_(L-2)``
(:func:`.verdicts.c1_middle_candidates`); below 4 blocks there is no middle to be quiet, and a model
cannot have a *deep* switch. Fewer layers raise a :class:`ValueError` naming the fix.

**Committed numbers** (:func:`committed_rows`): trained baselines from notebook 08's regimes figure
(seed-mean curves, one per recipe and seed, and the per-seed C1.middle verdicts of 08's verdicts) and
the pretrained references from notebook 03 (top-1 curves with their committed 95% intervals, the
excess over the unigram decoder with its intervals, the C1.middle rows). 03's JSON holds no
per-window values, so a pretrained S1 interval there is the Bonferroni box of the two committed
intervals, ``[num_lo / den_hi, num_hi / den_lo]``: coverage at least ``1 - 2 (1 - 0.95) = 0.90``
whatever the correlation between the two (its ``level`` field says 0.90, a lower bound, and its
``unit`` says how it was made). With per-window arrays, :func:`switch_on_windows` gives the declared
bootstrap interval instead.

**The scale clause** (issue 33's second part; :data:`SCALE_RULE`, a rule in words that changes no
verdict's outcome, only says which verdicts count as evidence; the committed training verdicts and the
trained baselines' near-bigram numbers were known when it was written, as the issue quoted them). The paper's mitigations (a late residual cut, learned gates; claims C2-C4) act on a model
whose next token is predicted late, after a quiet middle: the deep switch. A C2/C3/C4 verdict on
trained models therefore speaks for the scale of the baseline it was measured on and no further:
:func:`with_scale` adds to each such row a ``scale`` entry (:class:`ScaleClause`: that baseline's S1
with its interval, C1.middle, its blocks and its switch outcome; ``counts_as_evidence``; ``reads``,
one sentence from those numbers; ``evidence``, what the verdict counts as). Only a row whose baseline
has the deep switch counts as evidence, either way (reproduced: for the paper's claim; not reproduced:
against it; inconclusive: neither). On a baseline without it no verdict is counted as evidence against
the paper: not reproduced or inconclusive reads :data:`NOT_EVIDENCE` ("not evidence: the baseline lacks
the deep switch the mitigation acts on"; a baseline whose switch outcome is inconclusive:
:data:`NOT_EVIDENCE_UNSHOWN`, "... is not shown to have ..."), and a reproduced verdict is still
reported, as :data:`NOT_PAPER_REGIME` ("reported, not evidence for the paper's regime: ..."), since a
mitigation that helps a near-bigram model says nothing either about the regime the paper describes.
The clause changes no verdict. :func:`match_switch_row` picks each training verdict's baseline (the
grid's recipe, :data:`DEFAULT_RECIPE`, unless the row names another recipe's embedding, as the
contrast arm's does), :func:`scale_training_verdicts` does it for the parsed committed files and
:func:`scale_table` gives the rows as strings for a table.

Pure computation on numbers: this module writes nothing and imports only ``residshift.analysis``
and ``residshift.core``.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, fields
from typing import Any, Mapping, Sequence

import numpy as np

from ..core.outputs import json_ready
from . import stats, verdicts

__all__ = ["DEEP_SWITCH", "NEAR_BIGRAM", "SWITCH_INCONCLUSIVE", "SWITCH_OUTCOMES", "SHARE_THRESHOLD",
           "EARLY_LAYER", "DEPARTURE_MARGIN", "MIN_LAYERS", "LEVEL", "DECODER", "SWITCH_RULE",
           "SwitchRow", "FIELDS", "switch_outcome", "early_share", "departure", "switch_on_windows",
           "switch_across_seeds", "switch_from_seed_curves", "trained_rows", "pretrained_rows",
           "committed_rows", "SCALE_RULE", "SCALED_CLAIMS", "DEFAULT_RECIPE", "ScaleClause", "is_scaled",
           "evidence", "recipe_of", "share_text", "interval_text", "scale_clause", "with_scale",
           "match_switch_row", "scale_training_verdicts", "SCALE_COLUMNS", "scale_table"]

# --------------------------------------------------------------------------------------------
# The measure's constants: fixed here, before any number is read
# --------------------------------------------------------------------------------------------

DEEP_SWITCH, NEAR_BIGRAM, SWITCH_INCONCLUSIVE = "deep switch", "near-bigram", "inconclusive"
SWITCH_OUTCOMES = (DEEP_SWITCH, NEAR_BIGRAM, SWITCH_INCONCLUSIVE)
EARLY_LAYER = 1  # h_1: the stream after block 0
SHARE_THRESHOLD = 0.5  # "most of the final prediction is made after block 0" iff S1 < 0.5 (see the docstring)
DEPARTURE_MARGIN = verdicts.C1_MARGIN  # excess top-1 over the unigram decoder that counts as "left it"
MIN_LAYERS = 4  # C1.middle needs a candidate h_2..h_(L-2): at least one, so L >= 4
LEVEL = verdicts.LEVEL
DECODER = "logit lens"  # the decoder the measure is declared on (the tied embedding)
COMMITTED_LEVEL = 1 - 2 * (1 - LEVEL)  # the Bonferroni box of two LEVEL intervals (committed 03 numbers)

SWITCH_RULE = (
    "Deep switch. S1 = top-1 rate of the next token at h_1 over that at h_L (the model's own "
    "prediction), a ratio of means over windows, with a two-sided {level} interval (percentile "
    "bootstrap over windows; across seeds, the t-interval of the mean per-seed S1). Deep switch if "
    "the interval lies below {threshold} (most of the final next-token prediction is made after "
    "block 0) AND C1.middle is reproduced (a quiet run of middle layers, verdicts.c1_regimes; across "
    "seeds by unanimity); near-bigram if the interval lies above {threshold} and C1.middle is not "
    "reproduced; inconclusive otherwise. Reported beside it, not deciding: the departure depth, the "
    "first layer l >= 1 whose interval of the next-token top-1 minus the unigram decoder's has its "
    "lower bound above {margin}, as l/L. Models need at least {min_layers} blocks.")


def _rule_text(threshold: float = SHARE_THRESHOLD, margin: float = DEPARTURE_MARGIN, level: float = LEVEL) -> str:
    return SWITCH_RULE.format(level=level, threshold=threshold, margin=margin, min_layers=MIN_LAYERS)


# --------------------------------------------------------------------------------------------
# The row
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SwitchRow:
    """One model's (or one seed's) measure.

    ``model``, ``variant`` (decoder, embedding recipe, seed set); ``unit``: what the interval is over
    (``"windows"``, ``"seeds"``, ``"committed intervals"``, or ``"seed"`` for one seed's point values:
    no interval and no outcome, the seed set's row decides); ``seed`` (per-seed rows) ; ``n`` units;
    ``n_layers`` L; ``early_share`` S1 with ``early_share_ci`` (lo, hi) at ``level``;
    ``departure_layer`` (l, or None: never leaves the unigram level) and ``departure_depth`` l/L;
    ``middle``: the C1.middle verdict; ``outcome`` (one of :data:`SWITCH_OUTCOMES`, None on a
    per-seed row) and ``why`` (non-empty exactly when inconclusive); ``rule`` in words; ``details``;
    ``source`` (the numbers file).
    """

    model: str
    variant: str | None
    unit: str
    seed: int | None
    n: int | None
    n_layers: int
    early_share: float | None
    early_share_ci: tuple[float | None, float | None]
    level: float | None
    departure_layer: int | None
    departure_depth: float | None
    middle: str | None
    outcome: str | None
    why: str
    rule: str
    details: dict[str, Any] = field(default_factory=dict)
    source: str = ""

    def __post_init__(self):
        if self.outcome is not None and self.outcome not in SWITCH_OUTCOMES:
            raise ValueError(f"outcome {self.outcome!r} is not one of {SWITCH_OUTCOMES}")
        if self.middle is not None and self.middle not in verdicts.OUTCOMES:
            raise ValueError(f"middle {self.middle!r} is not a C1.middle verdict ({verdicts.OUTCOMES})")
        if (self.outcome == SWITCH_INCONCLUSIVE) != bool(self.why):
            raise ValueError("an inconclusive row says why, and only an inconclusive one: a bug in the rule")
        lo, hi = self.early_share_ci
        object.__setattr__(self, "early_share_ci", (_num(lo), _num(hi)))
        object.__setattr__(self, "early_share", _num(self.early_share))
        object.__setattr__(self, "details", json_ready(dict(self.details), strict=True, what="details"))

    def as_dict(self) -> dict[str, Any]:
        return {f.name: (list(getattr(self, f.name)) if isinstance(getattr(self, f.name), tuple)
                         else getattr(self, f.name)) for f in fields(self)}


FIELDS = tuple(f.name for f in fields(SwitchRow))


def _num(x) -> float | None:
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


# --------------------------------------------------------------------------------------------
# The pieces
# --------------------------------------------------------------------------------------------


def switch_outcome(lo: float | None, hi: float | None, middle: str, *,
                   threshold: float = SHARE_THRESHOLD) -> tuple[str, str]:
    """The rule: ``(outcome, why)`` from the interval ``(lo, hi)`` of S1 and the C1.middle verdict
    (``why`` is empty unless the outcome is :data:`SWITCH_INCONCLUSIVE`)."""
    if middle not in verdicts.OUTCOMES:
        raise ValueError(f"middle must be a C1.middle verdict, one of {verdicts.OUTCOMES}; got {middle!r}")
    if lo is None or hi is None or not (math.isfinite(lo) and math.isfinite(hi)):
        return SWITCH_INCONCLUSIVE, "no interval of the early share (too few units, or no final next-token top-1)"
    if hi < threshold:
        if middle == verdicts.REPRODUCED:
            return DEEP_SWITCH, ""
        return SWITCH_INCONCLUSIVE, (f"the early share lies below {threshold:g} ([{lo:.3g}, {hi:.3g}]) but "
                                     f"C1.middle is {middle}: no quiet middle shown")
    if lo > threshold:
        if middle != verdicts.REPRODUCED:
            return NEAR_BIGRAM, ""
        return SWITCH_INCONCLUSIVE, (f"the early share lies above {threshold:g} ([{lo:.3g}, {hi:.3g}]) yet "
                                     "C1.middle is reproduced: the two measures disagree")
    return SWITCH_INCONCLUSIVE, verdicts.threshold_why(lo, hi, threshold, "early-share threshold")


def _check_layers(n_layers: int) -> int:
    if n_layers < MIN_LAYERS:
        raise ValueError(f"{n_layers} block(s): the deep-switch measure needs at least {MIN_LAYERS} "
                         f"(C1.middle reads h_2..h_(L-2)); measure a deeper model, curves [.., L+1] over h_0..h_L")
    return n_layers


def _curves(x, name: str, ndim: int) -> np.ndarray:
    a = stats.as_numpy(x)
    if a.ndim != ndim:
        want = {1: "[L+1] (one curve over h_0..h_L)", 2: "[n_windows, L+1] (one row per window)",
                3: "[n_seeds, n_windows, L+1] (one stack per seed, the same windows)"}[ndim]
        raise ValueError(f"{name} must be {want}, got shape {a.shape}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} holds NaN or inf: check the run that produced it")
    _check_layers(a.shape[-1] - 1)
    return a


def early_share(top1_next, *, n_boot: int = 1000, seed: int = 0, level: float = LEVEL
                ) -> tuple[float | None, float | None, float | None]:
    """S1 of per-window next-token top-1 rates ``[n_windows, L+1]``: ``(estimate, lo, hi)``, the
    ratio of the means at h_1 and h_L with a percentile bootstrap interval over windows (resamples
    whose final top-1 is 0 are left out; no interval if more than ``(1 - level) / 2`` of them are)."""
    x = _curves(top1_next, "top1_next", 2)
    num, den = x[:, EARLY_LAYER], x[:, -1]
    est = float(num.mean() / den.mean()) if den.mean() > 0 else None
    idx = stats.bootstrap_indices(x.shape[0], n_boot, seed)
    b_num, b_den = num[idx].mean(1), den[idx].mean(1)
    vals = [float(a / b) if b > 0 else None for a, b in zip(b_num, b_den)]
    lo, hi, missing = stats.ci_of_resamples(vals, level)
    if missing > (1 - level) / 2:
        return est, None, None
    return est, lo, hi


def departure(excess_lo, *, margin: float = DEPARTURE_MARGIN) -> tuple[int | None, float | None]:
    """The departure layer from the lower bounds ``excess_lo [L+1]`` of the next-token excess over the
    unigram decoder: the first ``l >= 1`` with ``excess_lo[l] > margin``, and ``l / L``; ``(None, None)``
    if no layer leaves the unigram level. ``h_0`` is never read (the embedding does not predict), and a
    layer without an interval (``None``) has not left it."""
    if np.ndim(excess_lo) != 1:
        raise ValueError(f"excess_lo must be one curve [L+1] over h_0..h_L, got shape {np.shape(excess_lo)}")
    lo = [None if v is None else float(v) for v in excess_lo]
    L = _check_layers(len(lo) - 1)
    layer = next((l for l in range(1, L + 1) if lo[l] is not None and lo[l] > margin), None)
    return layer, (None if layer is None else layer / L)


def _middle_row(rows: Sequence[verdicts.VerdictRow]) -> verdicts.VerdictRow:
    return next(r for r in rows if r.claim_id == "C1.middle")


# --------------------------------------------------------------------------------------------
# The measure on arrays
# --------------------------------------------------------------------------------------------


def switch_on_windows(top1_input, top1_next, unigram_input, unigram_next, *, model: str, decoder: str = DECODER,
                      threshold: float = SHARE_THRESHOLD, margin: float = DEPARTURE_MARGIN, n_boot: int = 1000,
                      seed: int = 0, level: float = LEVEL, source: str = "") -> SwitchRow:
    """The measure of one model with windows as the unit (a pretrained model, notebook 03's arrays).

    Arguments as :func:`.verdicts.c1_regimes`' (``[n_windows, L+1]`` top-1 rates, ``[n_windows]``
    unigram rates); C1.middle comes from that function, with the same ``n_boot``/``seed``/``level``.
    """
    tn = _curves(top1_next, "top1_next", 2)
    _curves(top1_input, "top1_input", 2)
    L = tn.shape[1] - 1
    middle = _middle_row(verdicts.c1_regimes(top1_input, top1_next, unigram_input, unigram_next, model=model,
                                             min_run=verdicts.c1_min_run(L),
                                             decoder=decoder, n_boot=n_boot, seed=seed, level=level))
    est, lo, hi = early_share(tn, n_boot=n_boot, seed=seed, level=level)
    d_next = tn - stats.as_numpy(unigram_next)[:, None]
    ex = stats.curve_ci(d_next, n_boot=n_boot, seed=seed, level=level)
    layer, depth = departure(ex.lo, margin=margin)
    outcome, why = switch_outcome(lo, hi, middle.verdict, threshold=threshold)
    return SwitchRow(model=model, variant=decoder, unit="windows", seed=None, n=tn.shape[0], n_layers=L,
                     early_share=est, early_share_ci=(lo, hi), level=level, departure_layer=layer,
                     departure_depth=depth, middle=middle.verdict, outcome=outcome, why=why,
                     rule=_rule_text(threshold, margin, level), source=source,
                     details={"top1_next_h1": float(tn[:, EARLY_LAYER].mean()), "top1_next_hL": float(tn[:, -1].mean()),
                              "excess_next_lo": ex.lo.tolist(), "threshold": threshold, "margin": margin,
                              "middle_why": middle.details.get("why", "")})


def switch_from_seed_curves(next_curves, unigram_next, middles: Sequence[str], *, model: str,
                            variant: str | None = None, seeds: Sequence[int] | None = None,
                            threshold: float = SHARE_THRESHOLD, margin: float = DEPARTURE_MARGIN,
                            level: float = LEVEL, source: str = "") -> list[SwitchRow]:
    """The measure of a trained model with the seed as the unit, from each seed's mean curve.

    ``next_curves [n_seeds, L+1]``: each seed's next-token top-1 rate at h_0..h_L (mean over its
    windows); ``unigram_next [n_seeds]`` (or a number): the unigram decoder's rate; ``middles``: each
    seed's C1.middle verdict (:func:`.verdicts.c1_regimes` on that seed's windows). Returns one
    per-seed row (``unit="seed"``: point values, no outcome) per seed, then the seed set's row
    (``unit="seeds"``: t-intervals across seeds, the outcome; C1.middle by unanimity).
    """
    x = _curves(next_curves, "next_curves", 2)
    S, L = x.shape[0], x.shape[1] - 1
    u = stats.as_numpy(unigram_next)
    if u.ndim == 0:
        u = np.full(S, float(u))
    if u.shape != (S,) or not np.all(np.isfinite(u)):
        raise ValueError(f"unigram_next must be one finite number or one per seed ({S}), got shape {u.shape}")
    middles = list(middles)
    if len(middles) != S:
        raise ValueError(f"middles needs one C1.middle verdict per seed ({S}), got {len(middles)}")
    seeds = list(range(S)) if seeds is None else [int(s) for s in seeds]
    if len(seeds) != S:
        raise ValueError(f"seeds names {len(seeds)} seeds for {S} curves")
    if np.any(x[:, -1] <= 0):
        raise ValueError("a seed's final next-token top-1 rate is 0: S1 is undefined; check the lens run")
    share = x[:, EARLY_LAYER] / x[:, -1]
    excess = x - u[:, None]
    rule = _rule_text(threshold, margin, level)
    rows = []
    for i, s in enumerate(seeds):
        layer = next((l for l in range(1, L + 1) if excess[i, l] > margin), None)
        rows.append(SwitchRow(model=model, variant=variant, unit="seed", seed=s, n=1, n_layers=L,
                              early_share=share[i], early_share_ci=(None, None), level=None, departure_layer=layer,
                              departure_depth=None if layer is None else layer / L, middle=middles[i], outcome=None,
                              why="", rule=rule, source=source,
                              details={"top1_next_h1": float(x[i, EARLY_LAYER]), "top1_next_hL": float(x[i, -1]),
                                       "unigram_next": float(u[i])}))
    t = verdicts.seed_test(share, sign=1, margin=0.0, level=level)  # its interval only: the mean S1 across seeds
    lo_ex = [None] + [verdicts.seed_test(excess[:, l], sign=1, margin=0.0, level=level)["lo"] for l in range(1, L + 1)]
    layer, depth = departure(lo_ex, margin=margin)
    middle = stats.combine_verdicts(middles, how="unanimous")
    outcome, why = switch_outcome(t["lo"], t["hi"], middle, threshold=threshold)
    rows.append(SwitchRow(model=model, variant=variant, unit="seeds", seed=None, n=S, n_layers=L,
                          early_share=float(share.mean()), early_share_ci=(t["lo"], t["hi"]), level=level,
                          departure_layer=layer, departure_depth=depth, middle=middle, outcome=outcome, why=why,
                          rule=rule, source=source,
                          details={"per_seed_early_share": share.tolist(), "per_seed_middle": middles,
                                   "seeds": seeds, "sd": t["sd"], "excess_next_lo": lo_ex,
                                   "threshold": threshold, "margin": margin}))
    return rows


def switch_across_seeds(top1_input, top1_next, unigram_input, unigram_next, *, model: str,
                        variant: str | None = None, seeds: Sequence[int] | None = None,
                        threshold: float = SHARE_THRESHOLD, margin: float = DEPARTURE_MARGIN, n_boot: int = 1000,
                        seed: int = 0, level: float = LEVEL, source: str = "") -> list[SwitchRow]:
    """The measure of a trained model from each seed's windows: ``top1_* [n_seeds, n_windows, L+1]``,
    ``unigram_* [n_seeds, n_windows]``. Each seed's C1.middle from :func:`.verdicts.c1_regimes` on its
    windows, then :func:`switch_from_seed_curves` on the seed-mean curves."""
    ti, tn = _curves(top1_input, "top1_input", 3), _curves(top1_next, "top1_next", 3)
    ui, un = stats.as_numpy(unigram_input), stats.as_numpy(unigram_next)
    if ti.shape != tn.shape or ui.shape != un.shape or ui.shape != tn.shape[:2]:
        raise ValueError(f"shapes differ: top1 {ti.shape} / {tn.shape}, unigram {ui.shape} / {un.shape}: "
                         "top1_* [n_seeds, n_windows, L+1], unigram_* [n_seeds, n_windows]")
    middles = [_middle_row(verdicts.c1_regimes(ti[s], tn[s], ui[s], un[s], model=model, decoder=variant or DECODER,
                                               min_run=verdicts.c1_min_run(tn.shape[-1] - 1),
                                               n_boot=n_boot, seed=seed, level=level)).verdict
               for s in range(tn.shape[0])]
    return switch_from_seed_curves(tn.mean(1), un.mean(1), middles, model=model, variant=variant, seeds=seeds,
                                   threshold=threshold, margin=margin, level=level, source=source)


# --------------------------------------------------------------------------------------------
# The measure on the committed numbers (already-loaded JSON)
# --------------------------------------------------------------------------------------------

TRAINED_SOURCE = "08-misalignment-after-mitigation-regimes"
PRETRAINED_SOURCE = "03-alignment-curves-metrics"


def _rows_of(data: Any, where: str) -> list[verdicts.VerdictRow]:
    return verdicts.rows_from_json(data, where)


def trained_rows(regimes: Mapping[str, Any], verdict_rows: Any, *, threshold: float = SHARE_THRESHOLD,
                 margin: float = DEPARTURE_MARGIN, level: float = LEVEL) -> list[SwitchRow]:
    """The measure of notebook 08's trained baselines: ``regimes`` = the parsed
    ``figures/08-misalignment-after-mitigation-regimes.json`` (recipe -> seed -> ``next`` curve and
    ``unigram_next``), ``verdict_rows`` = the parsed ``08-...-verdicts.json`` (its C1.middle row per
    recipe, seeds as the unit, carries each seed's verdict in seed order). Per recipe: one row per
    seed, then the seed set's row (:func:`switch_from_seed_curves`)."""
    rows = _rows_of(verdict_rows, "notebook 08's verdicts")
    out = []
    for emb, per in regimes.items():
        keys = sorted(per, key=int)
        mid = [r for r in rows if r.claim_id == "C1.middle" and f", {emb} embedding" in r.model]
        if len(mid) != 1 or mid[0].per_seed is None or len(mid[0].per_seed) != len(keys):
            raise ValueError(f"notebook 08's verdicts need one C1.middle row for the {emb} embedding with one "
                             f"verdict per seed ({len(keys)}): rerun notebook 08")
        try:
            curves = np.array([per[k]["next"] for k in keys], dtype=np.float64)
            uni = np.array([per[k]["unigram_next"] for k in keys], dtype=np.float64)
        except (KeyError, ValueError) as err:
            raise ValueError(f"the {emb} recipe's regimes lack a per-seed 'next' curve or 'unigram_next' "
                             f"({err}): rerun notebook 08") from None
        out += switch_from_seed_curves(curves, uni, list(mid[0].per_seed), model=mid[0].model,
                                       variant=f"{DECODER}, {emb} embedding", seeds=[int(k) for k in keys],
                                       threshold=threshold, margin=margin, level=level, source=TRAINED_SOURCE)
    return out


def pretrained_rows(metrics: Mapping[str, Any], c1: Mapping[str, Any], verdict_rows: Any = None, *,
                    threshold: float = SHARE_THRESHOLD, margin: float = DEPARTURE_MARGIN) -> list[SwitchRow]:
    """The measure of notebook 03's pretrained models, logit lens: ``metrics`` = the parsed
    ``03-alignment-curves-metrics.json`` (``top1_next`` estimate/lo/hi per layer), ``c1`` = the parsed
    ``03-alignment-curves-c1.json`` (the next-token excess over the unigram decoder with its
    intervals, per decoder), ``verdict_rows`` = the parsed ``03-alignment-curves-verdicts.json`` (its
    C1.middle rows; default: the ``verdicts`` list inside ``c1``). No per-window values are committed:
    S1's interval is the Bonferroni box of the committed 95% intervals at h_1 and h_L
    (``unit="committed intervals"``, ``level`` 0.90, a lower bound on its coverage)."""
    rows = _rows_of(c1.get("verdicts") if verdict_rows is None else verdict_rows, "notebook 03's verdicts")
    out = []
    for model, m in metrics.items():
        if "top1_next" not in m or model not in c1 or DECODER not in c1[model]:
            raise ValueError(f"{model}: notebook 03's numbers lack top1_next or the {DECODER} C1 curves: rerun "
                             "notebook 03")
        t = m["top1_next"]
        est, lo, hi = (np.asarray(t[k], dtype=np.float64) for k in ("estimate", "lo", "hi"))
        L = _check_layers(est.size - 1)
        mid = [r for r in rows if r.claim_id == "C1.middle" and r.model == model and r.variant == DECODER]
        if len(mid) != 1:
            raise ValueError(f"{model}: notebook 03's verdicts need one C1.middle row for the {DECODER}")
        s_lo = lo[EARLY_LAYER] / hi[-1] if hi[-1] > 0 else None
        s_hi = hi[EARLY_LAYER] / lo[-1] if lo[-1] > 0 else None
        s1 = est[EARLY_LAYER] / est[-1] if est[-1] > 0 else None
        ex = c1[model][DECODER]["next"]
        layer, depth = departure(ex["lo"], margin=margin)
        outcome, why = switch_outcome(s_lo, s_hi, mid[0].verdict, threshold=threshold)
        out.append(SwitchRow(model=model, variant=DECODER, unit="committed intervals", seed=None, n=mid[0].n,
                             n_layers=L, early_share=s1, early_share_ci=(s_lo, s_hi), level=COMMITTED_LEVEL,
                             departure_layer=layer, departure_depth=depth, middle=mid[0].verdict, outcome=outcome,
                             why=why, rule=_rule_text(threshold, margin, LEVEL), source=PRETRAINED_SOURCE,
                             details={"top1_next_h1": [est[EARLY_LAYER], lo[EARLY_LAYER], hi[EARLY_LAYER]],
                                      "top1_next_hL": [est[-1], lo[-1], hi[-1]],
                                      "interval": "Bonferroni box of the committed 95% intervals (no per-window "
                                                  "values committed)",
                                      "excess_next_lo": list(ex["lo"]), "threshold": threshold, "margin": margin}))
    return out


def committed_rows(regimes08: Mapping[str, Any], verdicts08: Any, metrics03: Mapping[str, Any],
                   c1_03: Mapping[str, Any], verdicts03: Any = None, *, threshold: float = SHARE_THRESHOLD,
                   margin: float = DEPARTURE_MARGIN) -> list[SwitchRow]:
    """:func:`trained_rows` then :func:`pretrained_rows`, from the parsed committed figure numbers."""
    kw = dict(threshold=threshold, margin=margin)
    return trained_rows(regimes08, verdicts08, **kw) + pretrained_rows(metrics03, c1_03, verdicts03, **kw)


# --------------------------------------------------------------------------------------------
# The scale clause of a C2-C4 verdict on trained models (issue 33): what a verdict can speak for,
# not what it says (a rule in words, applied the same way to every row)
# --------------------------------------------------------------------------------------------

SCALED_CLAIMS = ("C2", "C3", "C4")  # claim ids the clause applies to: C2..., C2-training..., C3..., C4...
DEFAULT_RECIPE = "gemma"  # the embedding recipe of the grid's baselines (the default profile's train_embedding)

EVIDENCE_FOR = "evidence for the claim"
EVIDENCE_AGAINST = "evidence against the claim"
NO_EVIDENCE = "no evidence either way (the verdict is inconclusive)"
LACKS = "the baseline lacks the deep switch the mitigation acts on"  # near-bigram baseline
NOT_SHOWN = "the baseline is not shown to have the deep switch the mitigation acts on"  # inconclusive switch
NOT_EVIDENCE = f"not evidence: {LACKS}"
NOT_EVIDENCE_UNSHOWN = f"not evidence: {NOT_SHOWN}"
NOT_PAPER_REGIME = f"reported, not evidence for the paper's regime: {LACKS}"
NOT_PAPER_REGIME_UNSHOWN = f"reported, not evidence for the paper's regime: {NOT_SHOWN}"

SCALE_RULE = (
    "Scale clause (issue 33). A C2/C3/C4 verdict on trained models speaks for the scale of the baseline it "
    "was measured on, and no further: its row carries that baseline's deep-switch measure (S1 with its "
    "interval, C1.middle, the number of blocks and the switch outcome, on the seed set of the baseline with "
    "the verdict's embedding recipe). Only a verdict whose baseline has the deep switch counts as evidence, "
    "either way: reproduced is evidence for the paper's claim, not reproduced evidence against it, "
    "inconclusive neither. A verdict on a baseline without the deep switch is not counted as evidence "
    "against the paper's claim: on a near-bigram baseline a not-reproduced or inconclusive verdict is "
    f"recorded as \"{NOT_EVIDENCE}\" and a reproduced one as \"{NOT_PAPER_REGIME}\"; on a baseline whose "
    f"switch outcome is inconclusive, the same with \"{NOT_SHOWN}\". The clause changes no verdict; it "
    "states what the verdict can speak for.")


def is_scaled(claim_id: str) -> bool:
    """True for the claim ids the scale clause applies to (C2, C3, C4, with or without ``-training``)."""
    return str(claim_id).split(".")[0].split("-")[0] in SCALED_CLAIMS


def evidence(verdict: str, outcome: str) -> str:
    """What a verdict counts as under :data:`SCALE_RULE`, given its baseline's switch ``outcome``."""
    if verdict not in verdicts.OUTCOMES:
        raise ValueError(f"verdict {verdict!r} is not one of {verdicts.OUTCOMES}")
    if outcome not in SWITCH_OUTCOMES:
        raise ValueError(f"switch outcome {outcome!r} is not one of {SWITCH_OUTCOMES}: pass a seed set's (or a "
                         "pretrained model's) switch row, not a per-seed one")
    if outcome == DEEP_SWITCH:
        return {verdicts.REPRODUCED: EVIDENCE_FOR, verdicts.NOT_REPRODUCED: EVIDENCE_AGAINST}.get(verdict, NO_EVIDENCE)
    near = outcome == NEAR_BIGRAM
    if verdict == verdicts.REPRODUCED:
        return NOT_PAPER_REGIME if near else NOT_PAPER_REGIME_UNSHOWN
    return NOT_EVIDENCE if near else NOT_EVIDENCE_UNSHOWN


@dataclass(frozen=True)
class ScaleClause:
    """The scale a C2/C3/C4 verdict speaks for: its baseline's switch measure (:class:`SwitchRow`'s
    ``model``, ``variant``, ``source``, ``unit``, ``n``, ``n_layers``, ``early_share`` S1 with
    ``early_share_ci`` at ``level``, ``middle`` = C1.middle, ``outcome``), ``counts_as_evidence``
    (the outcome is :data:`DEEP_SWITCH`) and ``reads``, one sentence built from those numbers, printed
    beside the verdict."""

    model: str
    variant: str | None
    source: str
    unit: str
    n: int | None
    n_layers: int
    outcome: str
    early_share: float | None
    early_share_ci: tuple[float | None, float | None]
    level: float | None
    middle: str | None
    why: str
    counts_as_evidence: bool
    reads: str

    def as_dict(self) -> dict[str, Any]:
        return {f.name: (list(getattr(self, f.name)) if isinstance(getattr(self, f.name), tuple)
                         else getattr(self, f.name)) for f in fields(self)}


def _f2(x: float | None) -> str:
    return "–" if x is None else f"{x:.2f}"


def share_text(row: SwitchRow | ScaleClause) -> str:
    """S1 with its interval, ``0.74 [0.69, 0.79]`` (no interval: the estimate alone)."""
    lo, hi = row.early_share_ci
    return _f2(row.early_share) + ("" if lo is None or hi is None else f" [{_f2(lo)}, {_f2(hi)}]")


def interval_text(row: SwitchRow | ScaleClause) -> str:
    """What S1's interval is: its level and unit, in words."""
    lvl = "?" if row.level is None else f"{100 * row.level:.0f}%"
    if row.unit == "seeds":
        return f"{lvl} t-interval over {row.n} seeds"
    if row.unit == "windows":
        return f"{lvl} bootstrap over {row.n} windows"
    if row.unit == "committed intervals":
        return f"at least {lvl}: the box of the committed 95% intervals"
    return f"{lvl}, {row.unit}"


def scale_clause(switch_row: SwitchRow) -> ScaleClause:
    """The scale clause a verdict on ``switch_row``'s model carries (:data:`SCALE_RULE`). A per-seed
    row (no outcome) is refused: the seed set's row decides."""
    if not isinstance(switch_row, SwitchRow):
        raise ValueError(f"scale_clause needs a SwitchRow (scale.trained_rows / committed_rows), got "
                         f"{type(switch_row).__name__}")
    if switch_row.outcome is None:
        raise ValueError(f"{switch_row.model} (seed {switch_row.seed}) is a per-seed row without an outcome: pass "
                         "the seed set's row (unit 'seeds'), which decides")
    deep = switch_row.outcome == DEEP_SWITCH
    reason = LACKS if switch_row.outcome == NEAR_BIGRAM else NOT_SHOWN
    tail = "counts as evidence either way" if deep else f"not counted as evidence against the paper's claim ({reason})"
    why = f" ({switch_row.why})" if switch_row.why else ""
    reads = (f"speaks for {switch_row.model}, {switch_row.n_layers} blocks: S1 = {share_text(switch_row)} "
             f"({interval_text(switch_row)}), C1.middle {switch_row.middle}: {switch_row.outcome}{why}; {tail}")
    return ScaleClause(model=switch_row.model, variant=switch_row.variant, source=switch_row.source,
                       unit=switch_row.unit, n=switch_row.n, n_layers=switch_row.n_layers, outcome=switch_row.outcome,
                       early_share=switch_row.early_share, early_share_ci=switch_row.early_share_ci,
                       level=switch_row.level, middle=switch_row.middle, why=switch_row.why,
                       counts_as_evidence=deep, reads=reads)


def _verdict_row(r: Any) -> tuple[verdicts.VerdictRow, dict[str, Any]]:
    if isinstance(r, verdicts.VerdictRow):
        return r, r.as_dict()
    if isinstance(r, Mapping):
        return verdicts.VerdictRow.from_dict(r), dict(r)  # VerdictError (a ValueError) names what is wrong
    raise ValueError(f"a verdict row is a VerdictRow or its JSON dict (layout {verdicts.SCHEMA!r}), got "
                     f"{type(r).__name__}")


def _rows_list(verdict_rows: Any) -> list:
    if isinstance(verdict_rows, (Mapping, verdicts.VerdictRow, str)):
        raise ValueError("pass a list of verdict rows (VerdictRow or their JSON dicts), not one row")
    return list(verdict_rows)


def with_scale(verdict_rows: Sequence[Any], switch_row: SwitchRow) -> list[dict[str, Any]]:
    """Each verdict row as its dict (``VerdictRow.as_dict`` or the JSON dict as given), with a ``scale``
    entry added to the C2/C3/C4 rows (:func:`is_scaled`): :func:`scale_clause`'s fields, ``evidence``
    (:func:`evidence` of the row's verdict) and ``rule`` (:data:`SCALE_RULE`). Other rows are returned
    unchanged. Every row is measured against ``switch_row``; :func:`match_switch_row` picks it per row."""
    clause = scale_clause(switch_row)
    out = []
    for r in _rows_list(verdict_rows):
        row, d = _verdict_row(r)
        if is_scaled(row.claim_id):
            d["scale"] = {**clause.as_dict(), "evidence": evidence(row.verdict, clause.outcome), "rule": SCALE_RULE}
        out.append(d)
    return out


def recipe_of(switch_row: SwitchRow) -> str | None:
    """The embedding recipe a trained baseline's switch row names (its variant ``"..., <recipe> embedding"``)."""
    m = re.search(r"(?:^|, )([\w-]+) embedding$", switch_row.variant or "")
    return m.group(1) if m else None


def _names_recipe(text: str, recipe: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(recipe)} embedding", text) is not None


def match_switch_row(row: verdicts.VerdictRow | Mapping[str, Any], switch_rows: Sequence[SwitchRow], *,
                     recipe: str = DEFAULT_RECIPE) -> SwitchRow:
    """The seed-set switch row of the baseline a training verdict was measured on.

    The training verdicts name the trained shape only (``"trained GPT 6x128"``); the switch rows name
    the shape, the recipe and the seeds (``"trained GPT 6x128, gemma embedding (5 seeds)"``, variant
    ``"logit lens, gemma embedding"``). A row whose model or variant names ``"<recipe> embedding"`` for
    one of the switch rows' recipes (the contrast arm: ``"baseline (nanogpt embedding)"``) gets that
    recipe's baseline; any other row the grid's ``recipe``. Exactly one seed-set row (``unit="seeds"``)
    of the same shape and recipe must exist, else a :class:`ValueError` names the fix.
    """
    vr = _verdict_row(row)[0]
    sets = [s for s in switch_rows if isinstance(s, SwitchRow) and s.unit == "seeds"]
    recipes = sorted({r for r in map(recipe_of, sets) if r})
    text = f"{vr.model} | {vr.variant or ''}"
    named = [r for r in recipes if _names_recipe(text, r)]
    if len(named) > 1:
        raise ValueError(f"{vr.claim_id} on {vr.model} ({vr.variant}) names the recipes {named}: one verdict row "
                         "must be on one baseline; split it by recipe")
    want = named[0] if named else recipe
    hits = [s for s in sets if s.model.startswith(f"{vr.model}, ") and recipe_of(s) == want]
    if len(hits) != 1:
        have = ", ".join(f"{s.model} ({s.variant})" for s in sets) or "none"
        raise ValueError(f"{vr.claim_id} on {vr.model} ({vr.variant}): {len(hits)} seed-set switch rows of that "
                         f"shape with the {want} embedding (have: {have}). Measure that baseline (notebook 08's "
                         "regimes figure, scale.trained_rows), or pass recipe= the grid's train_embedding")
    return hits[0]


def scale_training_verdicts(verdict_files: Mapping[str, Any], regimes08: Mapping[str, Any], verdicts08: Any, *,
                            recipe: str = DEFAULT_RECIPE) -> list[dict[str, Any]]:
    """Every row of the parsed verdict files ``{name: parsed JSON}`` (notebooks 06, 07 and 08's
    verdicts), in order, as :func:`with_scale` returns it, each C2/C3/C4 row measured against its own
    baseline's seed-set switch row (:func:`match_switch_row` among :func:`trained_rows` of the parsed
    ``regimes08`` and ``verdicts08``). Pure: the caller reads the files."""
    switch = [s for s in trained_rows(regimes08, verdicts08) if s.unit == "seeds"]
    out = []
    for name, data in verdict_files.items():
        for row in _rows_of(data, name):
            out += with_scale([row], match_switch_row(row, switch, recipe=recipe)) if is_scaled(row.claim_id) \
                else [row.as_dict()]
    return out


SCALE_COLUMNS = ("claim", "model", "variant", "verdict", "baseline", "switch", "S1 [CI]", "C1.middle", "blocks",
                 "counts as evidence", "reading")


def scale_table(scaled_rows: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    """The rows of :func:`with_scale` / :func:`scale_training_verdicts` that carry a ``scale`` entry, as
    strings ready for a table (:data:`SCALE_COLUMNS`): the verdict beside the scale it speaks for."""
    out = []
    for d in _rows_list(scaled_rows):
        s = d.get("scale") if isinstance(d, Mapping) else None
        if s is None:
            continue
        lo, hi = s["early_share_ci"]
        share = _f2(s["early_share"]) + ("" if lo is None or hi is None else f" [{_f2(lo)}, {_f2(hi)}]")
        out.append(dict(zip(SCALE_COLUMNS, (
            d["claim_id"], d["model"], d.get("variant") or "–", d["verdict"], s["model"], s["outcome"], share,
            s["middle"] or "–", str(s["n_layers"]), "yes" if s["counts_as_evidence"] else "no", s["evidence"]))))
    return out
