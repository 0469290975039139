"""C1 on any model: the logit lens's three regimes (early, middle, late), the emergence depth, and the
power of C1's tests at a profile's sizes."""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np
from scipy.stats import norm as _sp_norm

from .. import stats
from ..stats import INCONCLUSIVE, NOT_REPRODUCED, REPRODUCED
from .row import VerdictRow
from .rules import (C1_EXTENT_FRACTION, C1_EXTENT_SINCE, C1_MARGIN, C1_MIN_RUN, C1_NOISE_BETWEEN,
                    C1_NOISE_WITHIN, C1_PLAUSIBLE_EXCESS, DEPTH_BAND, DEPTH_FRAC, DEPTH_START, LEVEL, POWER,
                    TEST_ALPHA, _arr, _row, _rule, band_verdict, bonferroni_level, c1_middle_candidates,
                    threshold_verdict, threshold_why)


# --------------------------------------------------------------------------------------------
# C1: three regimes of the logit lens, and the emergence depth
# --------------------------------------------------------------------------------------------


# details["evidence_why"] of the rows C1 does not count as evidence; the text before the colon names the kind
C1_FITTED_WHY = (
    "decoder fitted to the model's output: a tuned lens is trained towards the final next-token "
    "distribution, so it reads every layer as a next-token guess; by construction an input regime cannot "
    "appear and a quiet middle only means its fit failed")
C1_LATE_WHY = (
    "sanity check: any trained LM decodes the next token in its last layers (they are trained to predict "
    "it through the same decoder), so this tests the measurement, not the paper")
C1_NOT_EVIDENCE = (
    "Not counted as evidence, either way (details: evidence = false, evidence_why), when the decoder was "
    "fitted towards the model's final next-token distribution (a tuned lens): such a decoder reads every "
    "layer as a next-token guess, so by construction an input regime cannot appear and a quiet middle "
    "only means its fit failed.")
C1_EARLY_RULE = (
    "C1.early. POST HOC: the extent requirement (k layers from h_1, not h_1 alone) was added at commit "
    + C1_EXTENT_SINCE + ", after the first numbers were seen, and it changed a verdict (Gemma-3-270M's "
    "logit lens: reproduced at h_1 alone, not reproduced with k = 2), so this verdict is exploratory. "
    "The rule declared before the numbers, computed beside it on the same draws (details: "
    "pre_registered_verdict): the threshold rule at h_1 alone (reproduced if the {level} CI of d_in(1) "
    "lies above the margin {margin}, not reproduced if below, inconclusive otherwise). "
    "Judged on h_1..h_L only (h_0 is the token's own embedding: input alignment there is "
    "true by construction), and on the regime's extent, not one layer. Per window, d_in(l) = top-1 "
    "rate of the input token under the decoder at h_l minus the unigram decoder's top-1 rate for "
    "the input token (it always predicts the reference corpus's most frequent token) on the same "
    "positions, with a two-sided {level} percentile bootstrap CI over windows per layer. The early "
    "regime's extent: the run of consecutive layers h_1, h_2, ... whose CI lies above the margin "
    "{margin} (absolute top-1 rate). Required extent k = max(1, ceil({extent_fraction} L)) layers (a "
    "tenth of the depth: 'early layers', not the first state after the embedding). Reproduced if "
    "the run covers h_1..h_k (an intersection of k tests: no correction needed); not reproduced if "
    "the first layer of h_1..h_k outside the run has its CI below the margin (the regime provably "
    "ends too early); inconclusive if that CI contains the margin, or the decoder did not converge "
    "at that layer. Statistic shown: d_in at the deciding layer (h_k when reproduced, else the "
    "first layer outside the run). " + C1_NOT_EVIDENCE)
C1_MIDDLE_RULE = (
    "C1.middle. Candidate layers h_2..h_(L-2), the m layers strictly between the first early and "
    "the last late test layers. Per window, d_in(l) and d_next(l) = the decoder's top-1 rate for "
    "the input / next token at h_l minus the unigram decoder's, bootstrapped over windows with "
    "shared draws. A layer is quiet when the upper bounds of BOTH d_in(l) and d_next(l), from "
    "two-sided normal intervals with the bootstrap standard error at level 1 - (1 - {level})/m "
    "(Bonferroni over the m candidates; percentile intervals are unstable that far in the tails), "
    "lie below the margin {margin} (upper bound below the margin, not merely a CI that overlaps 0); "
    "busy when the lower bound (level {level}) of either lies above the margin. A layer where the "
    "decoder did not converge is neither. Reproduced if at least {min_run} consecutive candidate "
    "layers are quiet; not reproduced if every candidate layer is busy; inconclusive otherwise. "
    "Statistic shown: the larger of the two excesses at the quietest layer, with its Bonferroni "
    "interval. " + C1_NOT_EVIDENCE)
C1_LATE_RULE = (
    "C1.late. A SANITY CHECK, not evidence (details: evidence = false): what it rules out is a model "
    "whose next token beats a frequency guess by less than the margin somewhere in its last k = "
    "max(1, ceil({extent_fraction} L)) layers before the output, i.e. whose next-token information "
    "appears only in its final blocks; any "
    "trained LM nearly guarantees the opposite (its last layers are trained to predict the next token "
    "through the same decoder), so 'reproduced' confirms the measurement (decoder, baseline, windows) "
    "rather than the paper, and 'not reproduced' would point at the measurement first. POST HOC: the "
    "extent (k layers, not h_(L-1) alone) was added at commit " + C1_EXTENT_SINCE + ", after the first "
    "numbers were seen; the rule declared before them, the threshold rule at h_(L-1) alone (the {level} "
    "CI of d_next(L-1) above the margin reproduces, below it does not, containing it is inconclusive), "
    "is computed beside it (details: pre_registered_verdict). "
    "The late regime's extent: the run of consecutive layers h_(L-1), h_(L-2), ... (down "
    "from the last state before the output; at h_L the next-token top-1 is the model's own "
    "accuracy, above a frequency guess for any trained model) whose two-sided {level} percentile "
    "bootstrap CI of d_next(l) = next-token top-1 rate minus the unigram decoder's lies above the "
    "margin {margin}. Required extent k = max(1, ceil({extent_fraction} L)). Reproduced if the run "
    "covers h_(L-k)..h_(L-1); not reproduced if the first layer of those outside the run has its CI "
    "below the margin; inconclusive if it contains the margin, or the decoder did not converge there.")
C1_RULE = (
    "C1. Reproduced if C1.early, C1.middle and C1.late are all reproduced (the regimes are then in "
    "order: an early run from h_1, a quiet run inside h_2..h_(L-2) after it, a late run up to "
    "h_(L-1)); an intersection of three claims, so no correction is needed for 'reproduced'. Not "
    "reproduced if any of the three is not reproduced; inconclusive otherwise. POST HOC where its "
    "parts are (the extent of C1.early and C1.late): the verdict of the same combination of the parts' "
    "pre-registered verdicts is shown beside it (details: pre_registered_verdict). Evidence only where "
    "C1.early and C1.middle are (not for a decoder fitted to the model's output: details: evidence). "
    "The emergence depth is judged separately (C1.depth), on independent bootstrap draws.")


def c1_min_extent(n_layers: int, fraction: float = None) -> int:
    """The extent C1.early and C1.late require: ``max(1, ceil(C1_EXTENT_FRACTION * n_layers))`` layers."""
    f = C1_EXTENT_FRACTION if fraction is None else fraction
    return max(1, math.ceil(f * n_layers - 1e-9))


def _pre_registered(m: np.ndarray, lo: np.ndarray, hi: np.ndarray, layer: int, margin: float,
                    unconverged: set[int]) -> dict[str, Any]:
    """The rule C1.early / C1.late had before their extent was added (commit :data:`C1_EXTENT_SINCE`):
    the threshold rule at one layer (h_1 / h_(L-1)); a layer whose decoder did not converge is not
    read (inconclusive), as in the current rule."""
    v = INCONCLUSIVE if layer in unconverged else threshold_verdict(lo[layer], hi[layer], margin)
    return {"verdict": v, "layer": layer, "estimate": float(m[layer]), "ci": [float(lo[layer]), float(hi[layer])],
            "rule": f"threshold rule at h_{layer} alone: the CI above the margin {margin:g} reproduces, below it "
                    "does not, containing it is inconclusive"}


def _joint(parts: Sequence[str]) -> str:
    """C1's combination of its parts: reproduced if all are, not reproduced if any is not."""
    if all(v == REPRODUCED for v in parts):
        return REPRODUCED
    return NOT_REPRODUCED if any(v == NOT_REPRODUCED for v in parts) else INCONCLUSIVE


def is_evidence(row: VerdictRow) -> bool:
    """Whether a row counts as evidence for or against the paper: every row does unless its rule marked
    it otherwise (``details["evidence"] is False``, with ``details["evidence_why"]``: C1.late, a sanity
    check; C1.early / C1.middle / C1 under a decoder fitted to the model's output)."""
    return row.details.get("evidence") is not False


def _not_evidence(why: str) -> dict[str, Any]:
    return {"evidence": False, "evidence_why": why}


def _extent(lo: np.ndarray, hi: np.ndarray, order: list[int], k: int, margin: float,
            unconverged: set[int]) -> tuple[str, str, list[int], int]:
    """Walk ``order`` (layers from the regime's end inwards) while the CI lies above ``margin``.
    Returns (verdict, why, the run, the deciding layer)."""
    run = []
    for l in order:
        if l in unconverged or not lo[l] > margin:
            break
        run.append(l)
    if len(run) >= k:
        return REPRODUCED, "", run, order[k - 1]
    f = order[len(run)]
    if f in unconverged:
        return INCONCLUSIVE, f"the decoder did not converge at h_{f} (a layer the required run needs)", run, f
    if hi[f] < margin:
        return NOT_REPRODUCED, "", run, f
    return INCONCLUSIVE, (f"the run stops at h_{f}, whose interval [{lo[f]:.3g}, {hi[f]:.3g}] contains the "
                          f"margin {margin:g} ({len(run)} of the {k} required layers decided)"), run, f


@_rule(C1_EARLY_RULE, C1_MIDDLE_RULE, C1_LATE_RULE, C1_RULE)
def c1_regimes(top1_input, top1_next, unigram_input, unigram_next, *, model: str, decoder: str,
               margin: float = C1_MARGIN, min_run: int = C1_MIN_RUN,
               extent_fraction: float = C1_EXTENT_FRACTION, unconverged: Sequence[int] = (),
               fitted_to_output: bool = False, n_boot: int = 1000, seed: int = 0, level: float = LEVEL,
               n_positions: int | None = None, source: str = "") -> list[VerdictRow]:
    """Claim C1's three regimes for one model and decoder (logit lens, tuned lens, ...).

    ``top1_input``, ``top1_next``: ``[n_windows, L+1]`` per-window top-1 rates at ``h_0..h_L``
    (``LensResult.per_seq["top1_input"]`` etc.); ``unigram_input``, ``unigram_next``: ``[n_windows]``
    per-window top-1 rates of the unigram decoder on the same positions
    (``residshift.measure.lens.unigram_baseline(result, counts)["top1_input"]`` etc.).
    ``unconverged``: residual indices l whose decoder did not converge (a tuned-lens translator still
    improving at its step cap): no test reads them, and a regime that needs one is inconclusive.
    ``fitted_to_output``: the decoder was fitted towards the model's final next-token distribution (a
    tuned lens): its C1.early, C1.middle and C1 rows are marked not evidence (:func:`is_evidence`).
    C1.late is always marked: a sanity check. C1.early, C1.late and C1 carry
    ``details["pre_registered_verdict"]``, the verdict of the rule declared before the first numbers
    (``details["pre_registered"]``: its layer, estimate and interval); ``details["post_hoc"]`` is true.
    ``n_positions``: the analysed positions per window; when given, each row whose sub-rule cannot reach
    every outcome at these windows (:func:`c1_reach`, :func:`c1_underpowered`) is marked
    ``details["underpowered"]`` (the reason; an inconclusive row's ``why`` says it too), the verdict
    itself unchanged.
    Returns rows ``C1.early``, ``C1.middle``, ``C1.late`` and ``C1``.
    """
    ti, tn = _arr(top1_input, "top1_input", 2), _arr(top1_next, "top1_next", 2)
    ui, un = _arr(unigram_input, "unigram_input", 1), _arr(unigram_next, "unigram_next", 1)
    if ti.shape != tn.shape or ui.shape != un.shape or ui.shape[0] != ti.shape[0]:
        raise ValueError(f"shapes differ: top1 {ti.shape} / {tn.shape}, unigram {ui.shape} / {un.shape} "
                         "(one row per window, the same windows)")
    n, L = ti.shape[0], ti.shape[1] - 1
    cand = c1_middle_candidates(L)
    if len(cand) < min_run:
        raise ValueError(f"{L} layers leave {len(cand)} middle candidates (h_2..h_(L-2)) for a run of "
                         f"{min_run}: use min_run <= {max(1, len(cand))} or a deeper model")
    skip = {int(l) for l in unconverged}
    if any(not 0 <= l <= L for l in skip):
        raise ValueError(f"unconverged layers must be residual indices within 0..{L}, got {sorted(skip)}")
    k = c1_min_extent(L, extent_fraction)
    if k > L - 1:
        raise ValueError(f"an extent of {k} layers does not fit in h_1..h_{L - 1}: lower extent_fraction")
    d_in, d_next = ti - ui[:, None], tn - un[:, None]
    idx = stats.bootstrap_indices(n, n_boot, seed)
    b_in, b_next = d_in[idx].mean(axis=1), d_next[idx].mean(axis=1)  # [n_boot, L+1]
    m_in, m_next = d_in.mean(0), d_next.mean(0)
    lo_in, hi_in = stats.percentile_ci(b_in, level)
    lo_nx, hi_nx = stats.percentile_ci(b_next, level)
    level_b = bonferroni_level(level, len(cand))
    z_b = float(_sp_norm.ppf(1 - (1 - level_b) / 2))  # Bonferroni: normal interval, bootstrap SE
    blo_in, bhi_in = m_in - z_b * b_in.std(axis=0, ddof=1), m_in + z_b * b_in.std(axis=0, ddof=1)
    blo_nx, bhi_nx = m_next - z_b * b_next.std(axis=0, ddof=1), m_next + z_b * b_next.std(axis=0, ddof=1)
    who = dict(model=model, variant=decoder, source=source)
    p = dict(level=level, margin=margin, min_run=min_run, extent_fraction=extent_fraction)
    common = {"required_extent": k, "unconverged": sorted(skip), "margin": margin}

    fitted = _not_evidence(C1_FITTED_WHY) if fitted_to_output else {}
    pre_e = _pre_registered(m_in, lo_in, hi_in, 1, margin, skip)
    pre_l = _pre_registered(m_next, lo_nx, hi_nx, L - 1, margin, skip)

    early, why_e, run_e, f_e = _extent(lo_in, hi_in, list(range(1, L)), k, margin, skip)
    r_early = _row("C1.early", **who, verdict=early, why=why_e,
                   statistic=f"input top-1 minus unigram top-1 at h_{f_e} (early run h_1..: {len(run_e)} layers)",
                   estimate=m_in[f_e], lo=lo_in[f_e], hi=hi_in[f_e], level=level, n=n,
                   rule=C1_EARLY_RULE.format(**p),
                   details={"layer": f_e, "extent": run_e, **common, "top1_input": float(ti[:, 1].mean()),
                            "unigram_input": float(ui.mean()), "excess_lo": lo_in.tolist(),
                            "excess_hi": hi_in.tolist(), "post_hoc": True,
                            "pre_registered_verdict": pre_e["verdict"], "pre_registered": pre_e, **fitted})
    late, why_l, run_l, f_l = _extent(lo_nx, hi_nx, list(range(L - 1, 0, -1)), k, margin, skip)
    r_late = _row("C1.late", **who, verdict=late, why=why_l,
                  statistic=f"next top-1 minus unigram top-1 at h_{f_l} (late run ..h_{L - 1}: {len(run_l)} layers)",
                  estimate=m_next[f_l], lo=lo_nx[f_l], hi=hi_nx[f_l], level=level, n=n,
                  rule=C1_LATE_RULE.format(**p),
                  details={"layer": f_l, "extent": sorted(run_l), **common,
                           "top1_next": float(tn[:, L - 1].mean()), "unigram_next": float(un.mean()),
                           "excess_lo": lo_nx.tolist(), "excess_hi": hi_nx.tolist(), "post_hoc": True,
                           "pre_registered_verdict": pre_l["verdict"], "pre_registered": pre_l,
                           **_not_evidence(C1_LATE_WHY)})

    quiet = [l for l in cand if l not in skip and bhi_in[l] < margin and bhi_nx[l] < margin]
    busy = [l for l in cand if l not in skip and (lo_in[l] > margin or lo_nx[l] > margin)]
    longest, run = [], []
    for l in cand:  # the longest run of consecutive quiet layers
        run = run + [l] if l in quiet else []
        longest = run if len(run) > len(longest) else longest
    why_m = ""
    if len(longest) >= min_run:
        middle = REPRODUCED
    elif len(busy) == len(cand):
        middle = NOT_REPRODUCED
    else:
        middle = INCONCLUSIVE
        open_ = [l for l in cand if l not in quiet and l not in busy and l not in skip]
        parts_m = ([f"{len(open_)} undecided (e.g. h_{open_[0]})"] if open_ else []) + (
            [f"{len(skip & set(cand))} not converged"] if skip & set(cand) else [])
        why_m = (f"no run of {min_run} quiet layer{'s' if min_run > 1 else ''} (longest {len(longest)}), and not "
                 f"every candidate is busy: " + "; ".join(parts_m))
    worst_hi = {l: max(bhi_in[l], bhi_nx[l]) for l in cand}
    lq = min(cand, key=lambda l: worst_hi[l])
    use_in = bhi_in[lq] >= bhi_nx[lq]
    r_mid = _row("C1.middle", **who, verdict=middle, why=why_m,
                 statistic=f"larger excess top-1 over unigram (input or next) at the quietest middle "
                           f"layer h_{lq} ({'input' if use_in else 'next'})",
                 estimate=(m_in if use_in else m_next)[lq],
                 lo=(blo_in if use_in else blo_nx)[lq], hi=(bhi_in if use_in else bhi_nx)[lq],
                 level=level_b, n=n, rule=C1_MIDDLE_RULE.format(**p),
                 details={"candidates": cand, "quiet_layers": quiet, "busy_layers": busy,
                          "longest_quiet_run": longest, "bonferroni_level": level_b, "margin": margin,
                          "unconverged": sorted(skip),
                          "excess_input": m_in.tolist(), "excess_next": m_next.tolist(),
                          "upper_input_bonferroni": bhi_in.tolist(), "upper_next_bonferroni": bhi_nx.tolist(),
                          **fitted})
    parts = {"early": early, "middle": middle, "late": late}
    overall = _joint(list(parts.values()))
    why_all = "" if overall != INCONCLUSIVE else "inconclusive part(s): " + ", ".join(
        f"C1.{k_}" for k_, v in parts.items() if v == INCONCLUSIVE)
    pre_all = _joint([pre_e["verdict"], middle, pre_l["verdict"]])
    r_all = _row("C1", **who, verdict=overall, why=why_all, statistic="three regimes in order (early, middle, late)",
                 estimate=None, lo=None, hi=None, level=None, n=n, rule=C1_RULE.format(**p),
                 details={**parts, "n_layers": L, "post_hoc": True, "pre_registered_verdict": pre_all, **fitted})
    rows = [r_early, r_mid, r_late, r_all]
    if n_positions is not None and n >= 2:
        weak = c1_underpowered(n, n_positions, L, margin=margin, level=level)
        for r in rows:
            _mark_underpowered(r, weak.get(r.claim_id, ""))
    return rows


UNDERPOWERED = "underpowered at this profile"  # the words a row marked by c1_underpowered starts with


def c1_underpowered(n_windows: int, n_positions: int, n_layers: int, **kw) -> dict[str, str]:
    """Per C1 claim id (``C1.early``, ``C1.middle``, ``C1.late``, ``C1``), why its rule cannot reach
    every outcome with 80% power at ``n_windows`` windows of ``n_positions`` analysed positions on a
    model of ``n_layers`` blocks (:func:`c1_reach`, ``kw`` as its): ``"underpowered at this profile:
    ..."`` naming the unreachable outcomes with their MDE, or ``""`` where every outcome is reachable.
    ``C1`` is underpowered when any of its parts is. The default profile's windows give ``""`` on both
    embedded models (its windows are :func:`c1_min_windows`'); the class profile's do not."""
    reach = c1_reach(n_windows, n_positions, n_layers, **kw)
    margin = reach["margin"]
    out = {}
    for part in ("early", "middle", "late"):
        r = reach[part]
        gone = [what for key, what in (("reproduced", REPRODUCED), ("not_reproduced", NOT_REPRODUCED)) if not r[key]]
        out[f"C1.{part}"] = "" if not gone else (
            f"{UNDERPOWERED}: {n_windows} windows x {n_positions} positions cannot reach "
            f"'{' or '.join(gone)}' with 80% power (MDE {r['mde']:.3g}, margin {margin:g}; "
            f"{c1_min_windows(n_positions, [n_layers], **kw)} windows would)")
    weak = [k for k, v in out.items() if v]
    out["C1"] = "" if not weak else f"{UNDERPOWERED}: its part{'s' if len(weak) > 1 else ''} {', '.join(weak)}"
    return out


def _mark_underpowered(row: VerdictRow, why: str) -> None:
    if not why:
        return
    row.details["underpowered"] = why
    if row.verdict == INCONCLUSIVE:
        row.details["why"] = f"{row.details['why']}; {why}" if row.details.get("why") else why


def c1_power(top1_input, top1_next, unigram_input, unigram_next, *, alpha: float = TEST_ALPHA,
             power: float = POWER) -> dict[str, float | None]:
    """What C1's tests can detect with these windows: the minimum detectable effect (two-sided
    ``alpha``, ``power``; :func:`residshift.analysis.stats.mde_paired_mean` from the per-window SD)
    of the excess top-1 rate over the unigram decoder at C1.early's layer h_1, at C1.late's h_(L-1)
    and, Bonferroni-corrected over C1.middle's candidates, at the noisiest candidate layer.
    Arguments as :func:`c1_regimes`'. Returns ``{"early", "late", "middle"}`` (``middle`` None when
    the model has no middle candidate)."""
    ti, tn = _arr(top1_input, "top1_input", 2), _arr(top1_next, "top1_next", 2)
    ui, un = _arr(unigram_input, "unigram_input", 1), _arr(unigram_next, "unigram_next", 1)
    n, L = ti.shape[0], ti.shape[1] - 1
    d_in, d_nx = ti - ui[:, None], tn - un[:, None]
    cand = c1_middle_candidates(L)

    def sd(x):
        return float(np.std(x, ddof=1))

    def mde(s, a=alpha):
        return stats.mde_paired_mean(s, n, alpha=a, power=power, sided="two")

    return {"early": mde(sd(d_in[:, 1])), "late": mde(sd(d_nx[:, L - 1])),
            "middle": (mde(max(max(sd(d_in[:, l]), sd(d_nx[:, l])) for l in cand), alpha / len(cand))
                       if cand else None)}


def c1_reach(n_windows: int, n_positions: int, n_layers: int, *, sd_between: float = C1_NOISE_BETWEEN,
             sd_within: float = C1_NOISE_WITHIN, margin: float = C1_MARGIN, level: float = LEVEL,
             power: float = POWER, plausible: float = C1_PLAUSIBLE_EXCESS) -> dict[str, Any]:
    """Can each outcome of C1.early, C1.middle and C1.late happen, with ``power``, at ``n_windows``
    windows of ``n_positions`` analysed positions on a model of ``n_layers`` blocks?

    The noise of a layer at the unigram level: a window's mean excess varies over windows by
    ``sd = sqrt(sd_between^2 + sd_within^2 / n_positions)`` (defaults: :data:`C1_NOISE_BETWEEN`,
    :data:`C1_NOISE_WITHIN`, measured on both models), so ``se = sd / sqrt(n_windows)``. Per sub-rule,
    ``half_width`` is the half-width of the interval its rule reads (C1.early / C1.late: two-sided
    ``level``; C1.middle's quiet test: Bonferroni over its ``m = L - 3`` candidates, ``bonferroni_level``)
    and ``mde`` that test's minimum detectable effect at ``power`` (``stats.mde_paired_mean``, as
    :func:`c1_power`). An outcome is reachable when a layer with a plausible true excess gives it with
    probability ``power`` (per layer and token):

    - C1.early / C1.late: *reproduced* if ``margin + mde <= plausible`` (a regime whose excess clears the
      margin by the MDE); *not reproduced* if ``mde <= margin`` (a layer exactly at the unigram level,
      excess 0, has its interval below the margin); *inconclusive* always (a layer at the margin);
    - C1.middle: *reproduced* if ``mde <= margin`` with the Bonferroni level (a layer exactly at the
      unigram level is certified quiet); *not reproduced* if ``margin + mde <= plausible`` at ``level``
      (every candidate busy); *inconclusive* always.

    Returns ``{"early", "middle", "late"}``, each ``{"half_width", "mde", "reproduced",
    "not_reproduced", "inconclusive"}`` (middle also ``"family"``, m), with ``"sd_window"``, ``"se"``,
    ``"reachable"`` (every outcome of every sub-rule) and ``"why"`` (what is missing; ``""`` if none).
    """
    if n_windows < 2 or n_positions < 1:
        raise ValueError(f"need at least 2 windows and 1 position per window, got {n_windows} x {n_positions}")
    m = len(c1_middle_candidates(n_layers))
    if m < 1:
        raise ValueError(f"{n_layers} blocks leave no middle candidate (h_2..h_(L-2)): C1 needs at least 4")
    sd = math.sqrt(sd_between ** 2 + sd_within ** 2 / n_positions)
    se = sd / math.sqrt(n_windows)
    alpha = 1 - level
    z, z_b = float(_sp_norm.ppf(1 - alpha / 2)), float(_sp_norm.ppf(1 - alpha / (2 * m)))
    mde = stats.mde_paired_mean(sd, n_windows, alpha=alpha, power=power, sided="two")
    mde_b = stats.mde_paired_mean(sd, n_windows, alpha=alpha / m, power=power, sided="two")

    def side(hw, quiet_mde, busy_mde):
        return {"half_width": hw, "mde": quiet_mde, "reproduced": margin + busy_mde <= plausible,
                "not_reproduced": quiet_mde <= margin, "inconclusive": True}

    out = {"n_windows": n_windows, "n_positions": n_positions, "n_layers": n_layers, "sd_window": sd, "se": se,
           "margin": margin, "early": side(z * se, mde, mde), "late": side(z * se, mde, mde),
           "middle": {"half_width": z_b * se, "mde": mde_b, "family": m, "reproduced": mde_b <= margin,
                      "not_reproduced": margin + mde <= plausible, "inconclusive": True}}
    missing = []
    for part in ("early", "middle", "late"):
        for outcome, what in (("reproduced", REPRODUCED), ("not_reproduced", NOT_REPRODUCED)):
            if not out[part][outcome]:
                missing.append(f"C1.{part} {what} (MDE {out[part]['mde']:.3g}, half-width "
                               f"{out[part]['half_width']:.3g}, margin {margin:g})")
    out["reachable"] = not missing
    out["why"] = "" if not missing else (f"at {n_windows} windows x {n_positions} positions ({n_layers} blocks) "
                                         "unreachable: " + "; ".join(missing))
    return out


def c1_min_windows(n_positions: int, layer_counts: Sequence[int], **kw) -> int:
    """The fewest windows of ``n_positions`` analysed positions at which :func:`c1_reach` finds every
    outcome of C1's sub-rules reachable on models of each of ``layer_counts`` blocks (``kw`` as its)."""
    if not layer_counts:
        raise ValueError("give the models' block counts, e.g. [30, 18]")
    n = 2
    while not all(c1_reach(n, n_positions, L, **kw)["reachable"] for L in layer_counts):
        n += 1
        if n > 1_000_000:
            raise ValueError(f"no window count up to 10^6 reaches every outcome at {n_positions} positions")
    return n


# Metrics whose half-way depth means something, with their orientation (+1: larger = more aligned).
DEPTH_METRICS: dict[str, int] = {"top1": 1, "prob": 1, "logrank": -1}

DEPTH_PRIMARY = "top1"  # C1.depth's declared metric; the others are sensitivity rows (C1.depth.sensitivity)

C1_DEPTH_RULE = (
    "C1.depth. POST HOC: this rule was written after the first numbers were seen, so its verdicts "
    "are exploratory; declared for every later run: the primary metric is {primary} (top-1 rate of "
    "the next token) and the others ({metrics}) are sensitivity rows (C1.depth.sensitivity). Per "
    "metric, the next-token emergence: the first (interpolated) layer where the mean next-token "
    "curve has covered {frac} of its way from h_{start} to h_L, as relative depth l/L, with a "
    "two-sided {level} percentile bootstrap CI over windows (draws independent of C1's). Compared "
    "with the band [{band_lo}, {band_hi}] around the paper's Gemma-2-2B reference (~layer 17 of 26 = "
    "0.65; 'around' and 'varies by model': +-0.15, about +-4 of 26 layers). Reproduced if the CI "
    "lies inside the band; not reproduced if it lies entirely outside; inconclusive if it straddles "
    "an edge, if the curve does not rise towards the next token (or is flat in more than {tail} of "
    "the resamples), or if a defensible preprocessing change (raw instead of detokenized text, "
    "measured on the first windows of the same draw) moves the depth by more than the half-width "
    "of its interval: a depth the study cannot pin down more finely than that choice. No "
    "correction across metrics (readings of one depth, not separate claims).")


@_rule(C1_DEPTH_RULE.replace("{metrics}", "top1, prob, logrank").replace("{band_lo}", str(DEPTH_BAND[0]))
       .replace("{band_hi}", str(DEPTH_BAND[1])).replace("{tail}", "(1 - level)/2")
       .replace("{primary}", DEPTH_PRIMARY))
def c1_depth(next_curves: Mapping[str, Any], *, model: str, decoder: str,
             band: tuple[float, float] = DEPTH_BAND, start: int = DEPTH_START, frac: float = DEPTH_FRAC,
             preprocessing: Mapping[str, Mapping[str, Any]] | None = None, primary: str = DEPTH_PRIMARY,
             n_boot: int = 1000, seed: int = 0, level: float = LEVEL, source: str = "") -> list[VerdictRow]:
    """The next-token emergence depth vs the paper's reference band, one row per metric.

    ``next_curves``: metric -> ``[n_windows, L+1]`` per-window next-token curves
    (``LensResult.per_seq["top1_next"]`` etc.), metrics among :data:`DEPTH_METRICS`. The bootstrap
    uses ``seed + 1`` so its draws differ from :func:`c1_regimes`' with the same seed. The
    ``primary`` metric's row is ``C1.depth``; the others are ``C1.depth.sensitivity``.
    ``preprocessing``: setting name (e.g. ``"raw WikiText"``) -> metric -> ``[k, L+1]`` curves of the
    FIRST k windows of ``next_curves`` under that setting; a depth that moves by more than its
    interval's half-width under any setting is inconclusive.
    """
    lo_b, hi_b = band
    if not 0 <= lo_b < hi_b <= 1:
        raise ValueError(f"band must be (lo, hi) with 0 <= lo < hi <= 1, got {band}")
    bad = [m for m in next_curves if m not in DEPTH_METRICS]
    if bad or not next_curves:
        raise ValueError(f"metrics {bad or '(none)'} have no meaningful half-way depth; use some of "
                         f"{list(DEPTH_METRICS)}")
    if primary not in DEPTH_METRICS:
        raise ValueError(f"primary must be one of {list(DEPTH_METRICS)}, got {primary!r}")
    rows = []
    for metric, curves in next_curves.items():
        x = _arr(curves, f"{metric} next-token curves", 2)
        L = x.shape[1] - 1
        est = stats.halfway_estimate(x, metric=metric, n_layers=L, frac=frac, n_boot=n_boot, seed=seed + 1,
                                     level=level, start=start)
        mean = x.mean(0)
        rises = DEPTH_METRICS[metric] * (mean[-1] - mean[start]) > 0
        rel, (rlo, rhi) = est.relative, est.relative_ci
        moves = {}
        for setting, alt in (preprocessing or {}).items():
            if metric not in alt:
                continue
            y = _arr(alt[metric], f"{setting} {metric} curves", 2)
            if y.shape[1] != L + 1 or y.shape[0] > x.shape[0]:
                raise ValueError(f"{setting}: expected [k <= {x.shape[0]}, {L + 1}] curves of the first k windows, "
                                 f"got {y.shape}")
            sh = stats.paired_halfway_shift(x[:y.shape[0]], y, n_layers=L, start=start, n_boot=n_boot,
                                            seed=seed + 2, level=level)
            moves[setting] = {"shift": sh["relative"], "lo": sh["relative_lo"], "hi": sh["relative_hi"],
                              "windows": int(y.shape[0])}
        half = None if rlo is None or rhi is None else (rhi - rlo) / 2
        moved = {k: v for k, v in moves.items() if v["shift"] is not None and half is not None
                 and abs(v["shift"]) > half}
        why = ""
        if not rises:
            v, why = INCONCLUSIVE, "the curve does not rise towards the next token"
        elif est.frac_never > (1 - level) / 2 or rlo is None:
            v, why = INCONCLUSIVE, f"the curve is flat in {est.frac_never:.0%} of the resamples"
        else:
            v = band_verdict(rlo, rhi, band)
            if v == INCONCLUSIVE:
                edge = lo_b if rlo < lo_b <= rhi else hi_b
                why = threshold_why(rlo, rhi, edge, "band edge")
            if moved:
                k_, m_ = next(iter(moved.items()))
                v, why = INCONCLUSIVE, (f"preprocessing moves it: {k_} shifts the depth by {m_['shift']:+.3g}, more "
                                        f"than the interval's half-width {half:.3g}")
        rule = C1_DEPTH_RULE.format(metrics=", ".join(DEPTH_METRICS), frac=frac, start=start, level=level,
                                    band_lo=lo_b, band_hi=hi_b, tail=f"{(1 - level) / 2:g}", primary=primary)
        cid = "C1.depth" if metric == primary else "C1.depth.sensitivity"
        rows.append(_row(cid, model=model, variant=decoder, verdict=v, why=why,
                         statistic=f"next-token emergence depth l/L ({metric})", estimate=rel, lo=rlo,
                         hi=rhi, level=level, n=x.shape[0], rule=rule, source=source,
                         details={"metric": metric, "primary": metric == primary, "post_hoc": True,
                                  "layer": est.crossing, "layer_lo": est.lo,
                                  "layer_hi": est.hi, "n_layers": L, "band": list(band),
                                  "frac_flat": est.frac_never, "curve_rises": bool(rises),
                                  "preprocessing": moves or None,
                                  "reference": "Gemma-2-2B, ~layer 17 of 26 (paper, project page)"}))
    return rows
