"""Trained models (notebooks 06-08): the seed is the unit; C2-, C3-training and C4 rows, the seed test
and the reach of each outcome at a profile's seed count."""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np
from scipy.stats import t as _sp_t

from .. import stats
from ..stats import INCONCLUSIVE, NOT_REPRODUCED, OUTCOMES, REPRODUCED
from .row import VerdictRow
from .rules import (LATE_FRACTION, LEVEL, LOSS_MARGIN, MISALIGNMENT_MARGINS, POWER, SPREAD_THRESHOLD,
                    TEST_ALPHA, _arr, _derived, _per_seed, _row, _rule, bonferroni_level, is_late)
from .c1 import (_not_evidence, is_evidence)


# --------------------------------------------------------------------------------------------
# Trained models (notebooks 06-08): the seed is the unit
# --------------------------------------------------------------------------------------------
# Each seed trains every variant from the same initialisation and data order, so one seed gives one
# paired difference d_s (variant - baseline, averaged over the evaluation windows); the windows
# within a seed only measure d_s more precisely. What a reader compares a mitigation against is the
# variation from training itself, which only the seeds carry: every training rule below is a test
# across seeds (Student t on S - 1 degrees of freedom), never a bootstrap over windows.

MIN_SEEDS = 2  # a test across seeds needs at least two; one seed is "not assessable at this profile"
# seed_reach's bound on a plausible effect, in paired seed-to-seed sds (an effect of k sds: a
# standardized paired effect |mean d_s| / sd(d_s) of k). Measured, not chosen: the largest standardized
# paired effect on the final validation loss of any edit in the committed default grid that keeps the
# skip path (every alpha > 0 cut and both gates, each vs the baseline of its seed). The alpha = 0 cuts
# (2.5-7.2 sds) are left out: they remove the path. Units-free, so it reads the rank and depth rows as it
# reads the loss rows. The smaller of the grids it was measured on, so that it stays conservative (a
# smaller plausible effect reaches fewer outcomes), rounded down; tests/test_training_verdicts.py
# checks both:
# - the grid as it stood before issue 34 (benchmarks/verdicts-before-issue-34/): 1.75, alpha = 0.5 at
#   block 4 (+0.150 nats, sd 0.085); the next were 1.19 (the learned gates) and 1.16 (alpha = 0.5 at
#   block 5). It was declared 1.75 from this grid;
# - the grid committed now (trained under oneMKL's reproducible kernels and the GPT block of issue 38):
#   1.34, the same edit. Revised to it after these numbers (post hoc): at 5 seeds (t_4/sqrt(5) = 1.24)
#   and at 3 (2.48) every reachability is what it was under 1.75; 4 seeds (1.59) no longer reach both.
PLAUSIBLE_EFFECT_SDS = 1.33

SEED_TEST = (
    "Unit: the seed (every variant of a seed starts from the same initialisation and sees the same "
    "data order). Per seed s, d_s = {what}, averaged over the evaluation {units}; statistic: the "
    "mean of d_s over the S seeds with a two-sided {level} Student-t interval on S - 1 degrees of "
    "freedom (the paired t-test across seeds); beside it the exact paired sign-flip (randomisation) "
    "test: the mean recomputed under all 2^S sign patterns of the d_s, two-sided p (no normality "
    "assumed; its p cannot fall below 2^(1-S), 0.0625 at 5 seeds). ")
MATERIAL_RULE = (
    "Claimed sign {claimed}. The t rule: reproduced if the interval excludes 0 on the claimed side AND "
    "the estimate is material (at least {margin} {unit} on that side); not reproduced if the interval "
    "excludes every effect of {margin} {unit} or more on the claimed side. A decided verdict needs the "
    "sign-flip test too: reproduced its p for the d_s against 0, not reproduced its p for the d_s "
    "against the margin (d_s - {margin} on the claimed side), below {sf_alpha:g} -- or, with fewer "
    "than {sf_seeds} seeds, where no p below {sf_alpha:g} exists, at its floor 2^(1-S) (every seed's "
    "difference on the decided side): such a verdict rests on the t-interval, is not confirmed at "
    "{sf_alpha:g} by the sign-flip test, and its row says so. Inconclusive otherwise, with the reason "
    "(seeds disagree in sign / interval straddles the margin / the sign-flip test does not confirm the "
    "t rule / underpowered: the minimum detectable effect (t_(1-{alpha}/2) + t_{power}) sd(d)/sqrt(S) "
    "exceeds the margin). Fewer than {min_seeds} seeds: not assessable at this profile.")


def _signflip_ok(p: float, floor: float, sf_alpha: float) -> bool:
    """The sign-flip part of a decided verdict: p < ``sf_alpha`` where the seeds allow it, else p at its floor."""
    return p < sf_alpha if floor < sf_alpha else p <= floor * (1 + 1e-9)


def seed_test(d, *, sign: int, margin: float, level: float = LEVEL, alpha: float = TEST_ALPHA,
              power: float = POWER) -> dict[str, Any]:
    """The paired test across seeds behind every training rule: the t rule and the sign-flip test.

    ``d [n_seeds]``: one paired difference per seed; ``sign``: the claimed sign (+1: the claim says
    ``d > 0``). The t rule (:data:`MATERIAL_RULE`) proposes a verdict (``t_verdict``); a decided one
    stands only if the exact sign-flip test agrees: p of ``sign * d`` against 0 (``p_signflip``) for
    reproduced, of ``sign * d - margin`` (``p_signflip_margin``) for not reproduced, below ``1 - level``
    or, at fewer seeds than that needs (``signflip_seeds``: 6 at 0.95), at its floor ``2^(1-S)``
    (``signflip_floor``: every seed on the decided side; ``signflip_confirms`` is then False: the
    verdict rests on the t-interval). Returns ``verdict``, ``why`` (what decided it, for every
    verdict), ``estimate``, ``lo``, ``hi`` (``level`` t-interval), ``sd``, ``t``, ``p`` (t, two-sided),
    ``df``, ``mde`` (two-sided at ``alpha`` with ``power``), the sign-flip fields, ``per_seed`` (the d_s)
    and ``n``.
    """
    if sign not in (1, -1):
        raise ValueError(f"sign must be +1 or -1, got {sign}")
    x = _arr(d, "per-seed differences", 1)
    S = x.size
    sf_alpha = 1 - level
    out: dict[str, Any] = {"per_seed": x.tolist(), "n": S, "estimate": float(x.mean()) if S else None,
                           "lo": None, "hi": None, "sd": None, "t": None, "p": None, "df": S - 1, "mde": None,
                           "margin": margin, "t_verdict": None, "p_signflip": None, "p_signflip_margin": None,
                           "signflip_floor": None, "signflip_alpha": sf_alpha,
                           "signflip_seeds": stats.sign_flip_units(sf_alpha), "signflip_confirms": None,
                           "signflip_note": ""}
    if S < MIN_SEEDS:
        return {**out, "verdict": INCONCLUSIVE,
                "why": f"not assessable at this profile: {S} seed (a test across seeds needs >= {MIN_SEEDS})"}
    t = stats.paired_ttest(x)
    q = float(_sp_t.ppf((1 + level) / 2, S - 1))
    lo, hi = t["mean"] - q * t["se"], t["mean"] + q * t["se"]
    mde = stats.mde_paired_mean(t["sd"], S, alpha=alpha, power=power, sided="two")
    p0 = stats.sign_flip_test(sign * x)["p"]
    pm = stats.sign_flip_test(sign * x, null=margin)["p"]
    floor = stats.sign_flip_floor(S)
    out.update(lo=lo, hi=hi, sd=t["sd"], t=t["t"], p=t["p"], mde=mde, p_signflip=p0, p_signflip_margin=pm,
               signflip_floor=floor)
    e, elo = sign * t["mean"], min(sign * lo, sign * hi)  # on the claimed side
    ehi = max(sign * lo, sign * hi)
    on_side = int((sign * x > 0).sum())
    t_verdict = REPRODUCED if elo > 0 and e >= margin else NOT_REPRODUCED if ehi < margin else INCONCLUSIVE
    out["t_verdict"] = t_verdict
    iv = f"[{lo:.3g}, {hi:.3g}]"
    if t_verdict != INCONCLUSIVE:
        p_sf, against = (p0, "0") if t_verdict == REPRODUCED else (pm, f"the margin {margin:g}")
        if _signflip_ok(p_sf, floor, sf_alpha):
            confirms = floor < sf_alpha
            out["signflip_confirms"] = confirms
            said = ("excludes 0 on the claimed side, estimate material" if t_verdict == REPRODUCED
                    else f"excludes every effect of {margin:g} or more on the claimed side")
            note = (f"sign-flip p {p_sf:.3g} < {sf_alpha:g} against {against} confirms it" if confirms else
                    f"rests on the t-interval: sign-flip p {p_sf:.3g} against {against} is the floor at {S} "
                    f"seeds (every seed on the decided side), which cannot fall below {sf_alpha:g}: "
                    f"{out['signflip_seeds']} seeds can")
            return {**out, "verdict": t_verdict, "why": f"t-interval {iv} {said}; {note}", "signflip_note": note}
        out["signflip_confirms"] = False
        need = (f"< {sf_alpha:g}" if floor < sf_alpha else
                f"at its floor {floor:.3g} at {S} seeds, every seed on the decided side")
        why = (f"the sign-flip test does not confirm the t rule's '{t_verdict}' (interval {iv}; sign-flip p "
               f"{p_sf:.3g} against {against}, needs {need})")
        if 0 < on_side < S:
            why += f"; seeds disagree: {on_side} of {S} on the claimed side"
        return {**out, "verdict": INCONCLUSIVE, "why": why}
    if 0 < on_side < S:
        why = f"seeds disagree: {on_side} of {S} on the claimed side"
    elif elo > 0:
        why = f"significant but not material: interval excludes 0, estimate below the {margin:g} margin"
    else:
        why = f"interval straddles the margin ({margin:g})"
    if mde > margin:
        why += f"; underpowered: MDE {mde:.3g} > margin {margin:g} at {S} seeds"
    return {**out, "verdict": INCONCLUSIVE, "why": why}


def _reach_at(n_seeds: int, sd: float, margin: float, level: float, plausible_sds: float) -> dict[str, Any]:
    half = float(_sp_t.ppf((1 + level) / 2, n_seeds - 1)) * sd / math.sqrt(n_seeds)
    plausible = max(plausible_sds * sd, margin)
    rep, notrep = max(margin, half), margin - half
    return {"half_width": half, "plausible": plausible, "reproduced_from": rep, "not_reproduced_below": notrep,
            "ok_rep": rep <= plausible, "ok_not": notrep >= -plausible}


MAX_REACH_SEEDS = 1000  # seed_reach searches this far for the seed count that reaches both outcomes


def seed_reach(n_seeds: int, sd: float, *, margin: float, level: float = LEVEL,
               plausible_sds: float = PLAUSIBLE_EFFECT_SDS) -> dict[str, Any]:
    """Can :func:`seed_test` give each outcome at ``n_seeds`` seeds with paired seed-to-seed spread ``sd``?

    On the claimed side, for an observed mean equal to the effect: the smallest effect that is
    reproduced, ``max(margin, h)``, and the largest that is not reproduced, ``margin - h``, with
    ``h = t_(S-1) sd/sqrt(S)`` the interval's half-width. An outcome is reachable if its boundary lies
    within the plausible effect ``max(plausible_sds * sd, margin)`` of 0: ``plausible_sds``
    (:data:`PLAUSIBLE_EFFECT_SDS`) is the largest standardized effect the committed grid measured for an
    edit that keeps the skip path; an effect the size of the margin is always plausible (it is the
    claim's own scale). So at the committed spreads (sd >> margin) reachability is a matter of seeds:
    ``t_(S-1)/sqrt(S) <= plausible_sds`` (1.24 at 5 seeds, 2.48 at 3). The sign-flip part of the rule
    does not move these boundaries: a mean of ``h`` or more leaves room for every seed on one side.
    Returns ``reproduced_from``, ``not_reproduced_below``, ``half_width``, ``plausible``, ``reachable``,
    ``seeds_needed`` (the fewest seeds that reach both at this spread, ``None`` beyond
    :data:`MAX_REACH_SEEDS`), ``signflip_seeds`` (the fewest whose sign-flip test can confirm at
    ``1 - level``) and ``why`` (what is missing when not reachable).
    """
    if sd is None or not math.isfinite(sd) or sd < 0:
        raise ValueError(f"sd must be a finite spread >= 0, got {sd}: measure it over 2 or more seeds")
    sf_seeds = stats.sign_flip_units(1 - level)
    need = next((s for s in range(MIN_SEEDS, MAX_REACH_SEEDS + 1)
                 if all(_reach_at(s, sd, margin, level, plausible_sds)[k] for k in ("ok_rep", "ok_not"))), None)
    if n_seeds < MIN_SEEDS:
        return {"reproduced_from": None, "not_reproduced_below": None, "half_width": None, "plausible": None,
                "reachable": False, "seeds_needed": need, "signflip_seeds": sf_seeds,
                "why": f"{n_seeds} seed: needs >= {MIN_SEEDS}"}
    r = _reach_at(n_seeds, sd, margin, level, plausible_sds)
    ok_rep, ok_not = r.pop("ok_rep"), r.pop("ok_not")
    half, plausible = r["half_width"], r["plausible"]
    why = ""
    if not (ok_rep and ok_not):
        missing = [w for w, ok in (("'reproduced' needs an effect of " + f"{r['reproduced_from']:.3g}", ok_rep),
                                   ("'not reproduced' the opposite effect of " + f"{-r['not_reproduced_below']:.3g}",
                                    ok_not)) if not ok]
        why = (f"with sd {sd:.3g} over {n_seeds} seeds the interval's half-width is {half:.3g} ({half / sd:.2f} sd): "
               + " and ".join(missing) + f", beyond the plausible {plausible:.3g} ({plausible_sds:g} paired sds, the "
               "largest standardized effect the committed grid measured for an edit that keeps the skip path); "
               + (f"{need} seeds reach both" if need else f"no seed count up to {MAX_REACH_SEEDS} reaches both"))
    return {**r, "reachable": ok_rep and ok_not, "seeds_needed": need, "signflip_seeds": sf_seeds, "why": why}


def no_test(n_seeds: int, margin: float, why: str) -> dict[str, Any]:
    """What a rule reports when it does not apply (not applicable / no such state): no estimate,
    no interval, no per-seed values; the row is inconclusive with ``why``."""
    return {"per_seed": None, "n": n_seeds, "estimate": None, "lo": None, "hi": None, "sd": None, "t": None,
            "p": None, "df": n_seeds - 1, "mde": None, "margin": margin, "t_verdict": None, "p_signflip": None,
            "p_signflip_margin": None, "signflip_floor": None, "signflip_alpha": None, "signflip_seeds": None,
            "signflip_confirms": None, "signflip_note": "", "verdict": INCONCLUSIVE, "why": why}


def per_seed_mean(x, name: str, n_units: int | None = None) -> np.ndarray:
    """``[n_seeds]``: each seed's mean over its windows of ``x [n_seeds, n_windows]``."""
    return _per_seed(x, name, n_units).mean(axis=1)


def _paired_seeds(x, base, name: str) -> np.ndarray:
    """Per-seed mean of ``x - base`` (both ``[n_seeds, n_windows]``, seed s paired with seed s)."""
    b = _per_seed(base, "baseline losses")
    a = _per_seed(x, name, b.shape[1])
    if a.shape[0] != b.shape[0]:
        raise ValueError(f"{name} has {a.shape[0]} seeds, the baseline {b.shape[0]}: pair them by seed")
    return (a - b).mean(axis=1)


def _seed_row(claim_id: str, test: Mapping[str, Any], *, model: str, variant: str | None, statistic: str,
              rule: str, source: str, n_windows: int | None = None, details: dict | None = None,
              verdict: str | None = None, why: str | None = None, unit: str = "nats",
              level: float = LEVEL) -> VerdictRow:
    """One training row from a :func:`seed_test` (``verdict``/``why`` override the test's); every row,
    decided or not, says in ``details["why"]`` what decided it."""
    v = test["verdict"] if verdict is None else verdict
    w = test["why"] if why is None else why
    return _row(claim_id, model=model, variant=variant, verdict=v, statistic=statistic,
                estimate=test["estimate"], lo=test["lo"], hi=test["hi"], level=level if test["lo"] is not None else None,
                n=test["n"], rule=rule, source=source,
                details={"unit": "seed", "per_seed_values": test["per_seed"], "sd": test["sd"], "t": test["t"],
                         "p": test["p"], "df": test["df"], "mde": test["mde"], "mde_unit": unit,
                         "margin": test["margin"], "t_verdict": test["t_verdict"], "p_signflip": test["p_signflip"],
                         "p_signflip_margin": test["p_signflip_margin"], "signflip_floor": test["signflip_floor"],
                         "signflip_seeds": test["signflip_seeds"], "signflip_confirms": test["signflip_confirms"],
                         "why": w, "windows_per_seed": n_windows, **(details or {})})


def _fmt_rule(head: str, *, what: str, claimed: str, margin: float, unit: str = "nats", units: str = "windows",
              level: float = LEVEL, alpha: float = TEST_ALPHA, power: float = POWER) -> str:
    return (head + " " + SEED_TEST.format(what=what, units=units, level=level)
            + MATERIAL_RULE.format(claimed=claimed, margin=margin, unit=unit, alpha=alpha, power=power,
                                   min_seeds=MIN_SEEDS, **_derived({"level": level})))


C2_ALPHA0_RULE = (
    "C2-training.alpha0-hurts (block {block}). d_s = final validation loss of the model trained with "
    "the block's skip path cut (alpha = 0) minus the baseline of the same seed.")


@_rule(C2_ALPHA0_RULE.replace("{block}", "b") + " " + SEED_TEST + MATERIAL_RULE)
def c2_training_alpha0(baseline, cut, *, block: int, model: str, margin: float = LOSS_MARGIN,
                       level: float = LEVEL, source: str = "", what: str = "cut - baseline",
                       units: str = "windows", claimed: str = "positive (the cut hurts)",
                       unit: str = "nats", alpha: float = TEST_ALPHA, power: float = POWER,
                       min_seeds: int = MIN_SEEDS) -> list[VerdictRow]:
    """Training with alpha = 0 at ``block`` vs the baseline (``[n_seeds, n_windows]`` validation
    losses, seed s paired with seed s)."""
    d = _paired_seeds(cut, baseline, "cut losses")
    test = seed_test(d, sign=1, margin=margin, level=level, alpha=alpha, power=power)
    rule = _fmt_rule(C2_ALPHA0_RULE.format(block=block), what=what, claimed=claimed, margin=margin, level=level)
    return [_seed_row("C2-training.alpha0-hurts", test, model=model, variant=f"alpha=0 at block {block}",
                      statistic="final validation loss, cut - baseline (nats, mean over seeds)", rule=rule,
                      source=source, n_windows=_per_seed(baseline, "baseline losses").shape[1])]


def _cut_stack(baseline, cuts: Mapping[int, Any]) -> tuple[np.ndarray, list[int]]:
    """``[k, n_seeds]`` per-seed mean change (cut - baseline) of each cut, blocks in order."""
    if len(cuts) < 1:
        raise ValueError("no trained cut given")
    layers = sorted(int(l) for l in cuts)
    return np.stack([_paired_seeds(cuts[l], baseline, f"cut at block {l}") for l in layers]), layers


C2_TRAINING_LAYER_RULE = (
    "C2-training.layer-sensitive. At one alpha, per seed the change d_(s,l) = cut at block l - "
    "baseline (mean over windows), for each of the k trained blocks. Statistic: the largest "
    "between-block contrast, the mean over seeds of d_(s,i) - d_(s,j) for the pair (i, j) of blocks "
    "whose means lie furthest apart. Test: for every one of the k(k-1)/2 pairs a two-sided paired "
    "t-interval across seeds at the Bonferroni level 1 - (1 - {level})/(k(k-1)/2) (the pair is "
    "picked after looking, so every pair is tested). Reproduced if the furthest pair's interval "
    "excludes 0 and its estimate is at least {threshold} nats (a 10% perplexity difference between "
    "choices of block); not reproduced if every pair's interval lies inside (-{threshold}, "
    "{threshold}) nats; inconclusive otherwise. Fewer than {min_seeds} seeds: not assessable.")


@_rule(C2_TRAINING_LAYER_RULE)
def c2_training_layer_sensitive(baseline, cuts: Mapping[int, Any], *, alpha_value: float, model: str,
                                threshold: float = SPREAD_THRESHOLD, level: float = LEVEL,
                                min_seeds: int = MIN_SEEDS, source: str = "") -> list[VerdictRow]:
    """Training with one block attenuated by ``alpha_value``, for several blocks: does the block matter?

    ``baseline [n_seeds, n_windows]``; ``cuts``: block -> ``[n_seeds, n_windows]`` final validation
    losses (seed s paired with the baseline's seed s).
    """
    x, layers = _cut_stack(baseline, cuts)
    k, S = x.shape
    if k < 2:
        raise ValueError("layer sensitivity needs cuts at 2 or more blocks")
    n_w = _per_seed(baseline, "baseline losses").shape[1]
    rule = C2_TRAINING_LAYER_RULE.format(level=level, threshold=threshold, min_seeds=min_seeds)
    means = x.mean(axis=1)
    hi_i, lo_i = int(means.argmax()), int(means.argmin())
    pairs = [(i, j) for i in range(k) for j in range(i + 1, k)]
    level_b = bonferroni_level(level, len(pairs))
    head = x[hi_i] - x[lo_i]
    test = seed_test(head, sign=1, margin=threshold, level=level_b)
    details = {"block_means": dict(zip(map(str, layers), means.tolist())), "most_harmful_block": layers[hi_i],
               "least_harmful_block": layers[lo_i], "bonferroni_level": level_b, "threshold": threshold}
    if S < min_seeds:
        verdict, why = INCONCLUSIVE, test["why"]
    else:
        ivs = [seed_test(x[i] - x[j], sign=1, margin=threshold, level=level_b) for i, j in pairs]
        inside = all(-threshold < iv["lo"] and iv["hi"] < threshold for iv in ivs)
        if test["lo"] > 0 and test["estimate"] >= threshold:
            verdict, why = REPRODUCED, ""
        elif inside:
            verdict, why = NOT_REPRODUCED, ""
        else:
            verdict = INCONCLUSIVE
            why = ("a block contrast is significant but below the threshold" if test["lo"] > 0 else
                   "the furthest pair's interval straddles the threshold")
    return [_seed_row("C2-training.layer-sensitive", test, model=model, variant=f"alpha={alpha_value:g}",
                      statistic=f"largest block contrast of the loss change at alpha={alpha_value:g} "
                                f"(block {layers[hi_i]} - block {layers[lo_i]}, nats, mean over seeds)",
                      rule=rule, source=source, n_windows=n_w, details=details, verdict=verdict, why=why,
                      level=level_b)]


C2_TRAINING_LATE_RULE = (
    "C2-training.late-cut. Candidates fixed in advance, no selection step: every trained cut at "
    "this alpha at a block l >= {late_fraction:.3g} L. Per candidate, d_s = cut - baseline of the "
    "same seed (mean over windows); a one-sided paired t-test across seeds (H1: mean < 0), Holm "
    "correction across the candidates at family level {alpha}. Reproduced if Holm rejects for at "
    "least one candidate whose mean improvement is material (at least {margin} nats); not "
    "reproduced if every candidate's two-sided {level} t-interval across seeds lies above -{margin} "
    "nats (an improvement of {margin} nats or more is ruled out for each); inconclusive otherwise. "
    "Shown: the candidate with the lowest mean, its interval, and its minimum detectable effect "
    "(t_(1-{alpha}/k) + t_{power}) sd(d)/sqrt(S) in seed units. Fewer than {min_seeds} seeds: not "
    "assessable.")


@_rule(C2_TRAINING_LATE_RULE)
def c2_training_late_cut(baseline, cuts: Mapping[int, Any], *, alpha_value: float, n_layers: int, model: str,
                         late_fraction: float = LATE_FRACTION, alpha: float = TEST_ALPHA, margin: float = LOSS_MARGIN,
                         power: float = POWER, level: float = LEVEL, min_seeds: int = MIN_SEEDS,
                         source: str = "") -> list[VerdictRow]:
    """Training with one late block attenuated by ``alpha_value``: does validation loss improve?

    Shapes as in :func:`c2_training_layer_sensitive`; blocks below ``late_fraction * n_layers`` are
    ignored.
    """
    x, layers = _cut_stack(baseline, cuts)
    keep = [i for i, l in enumerate(layers) if is_late(l, n_layers, late_fraction)]
    if not keep:
        raise ValueError(f"no trained cut at a block >= {late_fraction:.3g} x {n_layers}: train late cuts")
    x, layers = x[keep], [layers[i] for i in keep]
    k, S = x.shape
    n_w = _per_seed(baseline, "baseline losses").shape[1]
    rule = C2_TRAINING_LATE_RULE.format(late_fraction=late_fraction, alpha=alpha, level=level, margin=margin,
                                        power=power, min_seeds=min_seeds)
    tests = [seed_test(x[i], sign=-1, margin=margin, level=level, alpha=alpha / k, power=power) for i in range(k)]
    h = int(x.mean(axis=1).argmin())
    cands = [{"block": l, "mean": t["estimate"], "lo": t["lo"], "hi": t["hi"], "mde": t["mde"],
              "per_seed_values": t["per_seed"]} for l, t in zip(layers, tests)]
    if S < min_seeds:
        verdict, why = INCONCLUSIVE, tests[h]["why"]
    else:
        p = [stats.paired_ttest(x[i], alternative="less")["p"] for i in range(k)]
        adj = stats.holm(p)
        for c, pi, a in zip(cands, p, adj):
            c.update(p=float(pi), p_holm=float(a), rejected=bool(a <= alpha))
        if any(c["rejected"] and c["mean"] <= -margin for c in cands):
            verdict, why = REPRODUCED, ""
        elif all(c["lo"] > -margin for c in cands):
            verdict, why = NOT_REPRODUCED, ""
        else:
            verdict = INCONCLUSIVE
            why = ("Holm rejects only for an improvement below the margin" if any(c["rejected"] for c in cands)
                   else "no candidate is rejected and some interval reaches below -margin")
            if tests[h]["mde"] > margin:
                why += f"; underpowered: MDE {tests[h]['mde']:.3g} > margin {margin:g} at {S} seeds"
    return [_seed_row("C2-training.late-cut", tests[h], model=model, variant=f"block {layers[h]}, alpha={alpha_value:g}",
                      statistic="final validation loss, cut - baseline (nats, mean over seeds)", rule=rule,
                      source=source, n_windows=n_w, details={"candidates": cands, "blocks": layers},
                      verdict=verdict, why=why)]


C3_TRAINING_BASELINE_RULE = (
    "C3-training.beats-baseline. d_s = final validation loss of the model trained with the gates "
    "minus the baseline of the same seed.")


@_rule(C3_TRAINING_BASELINE_RULE + " " + SEED_TEST + MATERIAL_RULE)
def c3_training_beats_baseline(gated, baseline, *, model: str, variant: str | None, margin: float = LOSS_MARGIN,
                               level: float = LEVEL, source: str = "", what: str = "gated - baseline",
                               units: str = "windows", claimed: str = "negative (the gates lower the loss)",
                               unit: str = "nats", alpha: float = TEST_ALPHA, power: float = POWER,
                               min_seeds: int = MIN_SEEDS) -> list[VerdictRow]:
    """Gates trained with the model vs the baseline (``[n_seeds, n_windows]`` each, paired by seed)."""
    d = _paired_seeds(gated, baseline, "gated losses")
    test = seed_test(d, sign=-1, margin=margin, level=level, alpha=alpha, power=power)
    rule = _fmt_rule(C3_TRAINING_BASELINE_RULE, what=what, claimed=claimed, margin=margin, level=level)
    return [_seed_row("C3-training.beats-baseline", test, model=model, variant=variant,
                      statistic="final validation loss, gated - baseline (nats, mean over seeds)", rule=rule,
                      source=source, n_windows=_per_seed(baseline, "baseline losses").shape[1])]


C3_TRAINING_CUTS_RULE = (
    "C3-training.beats-best-cut. No selection step: the gates must beat EVERY trained fixed cut and "
    "the baseline (alpha = 1), so they beat the best of them whichever it is (an intersection-union "
    "test: no correction is needed). Per candidate c, d_s = gated - c of the same seed (mean over "
    "windows) and the paired seed test of C3-training.beats-baseline (claimed sign negative, margin "
    "{margin} nats): a two-sided {level} t-interval across seeds and the exact sign-flip test, a "
    "decided verdict needing both (p < {sf_alpha:g}, or at its floor 2^(1-S), every seed on the decided "
    "side, with fewer than {sf_seeds} seeds). Reproduced if every candidate's test is reproduced "
    "(its interval below 0, the gates at least {margin} nats lower); not reproduced if some "
    "candidate's test is not reproduced (its interval above -{margin} nats: an improvement of "
    "{margin} nats or more over it is ruled out); inconclusive otherwise. Shown, named in the "
    "statistic: the candidate that decides -- for not reproduced the one whose interval lies "
    "furthest above -{margin}; for reproduced the one beaten by the least (highest upper end); "
    "for inconclusive the open one whose interval reaches highest; every candidate's numbers are in "
    "the details. Fewer than {min_seeds} seeds: not assessable.")


@_rule(C3_TRAINING_CUTS_RULE)
def c3_training_beats_every_cut(gated, candidates: Mapping[str, Any], *, model: str, variant: str | None,
                                margin: float = LOSS_MARGIN, level: float = LEVEL, min_seeds: int = MIN_SEEDS,
                                source: str = "") -> list[VerdictRow]:
    """Gates vs every fixed cut and the baseline: ``candidates`` name -> ``[n_seeds, n_windows]``
    final validation losses (include ``"baseline"``), ``gated`` the same shape, paired by seed.

    The row's estimate and interval are those of the candidate that decides the verdict
    (``details["deciding_candidate"]``, named in the statistic), and ``details["why"]`` says how it
    decided; ``details["best_candidate"]`` is the candidate with the lowest mean loss."""
    if not candidates:
        raise ValueError("no candidate given: pass the baseline and the fixed cuts")
    names = list(candidates)
    tests = {n: seed_test(_paired_seeds(gated, candidates[n], f"gated vs {n}"), sign=-1, margin=margin, level=level)
             for n in names}
    best = min(names, key=lambda n: per_seed_mean(candidates[n], n).mean())
    S = tests[best]["n"]
    k = len(names)

    def shown(n):
        t = tests[n]
        return f"{n}: {t['estimate']:+.3g} nats [{t['lo']:.3g}, {t['hi']:.3g}]"

    if S < min_seeds:
        decider, verdict = best, INCONCLUSIVE
        why = tests[best]["why"]
        role = "the lowest-mean candidate"
    else:
        ruled_out = [n for n in names if tests[n]["verdict"] == NOT_REPRODUCED]
        open_ = [n for n in names if tests[n]["verdict"] == INCONCLUSIVE]
        if ruled_out:
            decider, verdict = max(ruled_out, key=lambda n: tests[n]["lo"]), NOT_REPRODUCED
            role = "the candidate the gates do not beat"
            why = (f"not beaten: {shown(decider)} lies above -{margin:g} "
                   + (f"({len(ruled_out)} of {k} candidates do)" if len(ruled_out) > 1 else "(the only candidate that does)")
                   + f"; {tests[decider]['signflip_note']}")
        elif not open_:
            decider, verdict = max(names, key=lambda n: tests[n]["hi"]), REPRODUCED
            role = "the candidate beaten by the least"
            why = (f"every one of the {k} candidates beaten (interval below 0, at least {margin:g} lower); by the "
                   f"least {shown(decider)}; {tests[decider]['signflip_note']}")
        else:
            decider, verdict = max(open_, key=lambda n: tests[n]["hi"]), INCONCLUSIVE
            role = "the open candidate reaching highest"
            why = (f"candidates neither beaten nor ruled out ({len(open_)} of {k}); the one reaching highest, "
                   f"{shown(decider)}: {tests[decider]['why']}")
    rule = C3_TRAINING_CUTS_RULE.format(level=level, margin=margin, min_seeds=min_seeds, **_derived({"level": level}))
    per = {n: {"mean": t["estimate"], "lo": t["lo"], "hi": t["hi"], "per_seed_values": t["per_seed"],
               "verdict": t["verdict"], "p_signflip": t["p_signflip"], "p_signflip_margin": t["p_signflip_margin"],
               "why": t["why"]} for n, t in tests.items()}
    return [_seed_row("C3-training.beats-best-cut", tests[decider], model=model, variant=variant,
                      statistic=f"final validation loss, gated - {decider} ({role}) (nats, mean over seeds)",
                      rule=rule, source=source, n_windows=_per_seed(gated, "gated losses").shape[1],
                      details={"deciding_candidate": decider, "best_candidate": best, "candidates": per},
                      verdict=verdict, why=why)]


MISALIGNMENT_TRAINING_RULE = (
    "{claim_id}. The input token's persistence measured so that a flatter output distribution does "
    "not move it: the lens's log10 rank of the input token x_t (rank does not change when every "
    "logit is scaled or shifted), averaged over the states after the edit and before the output, "
    "{after}. d_s = that average with the edit minus without it, same seed, mean over the lens "
    "windows.")
MITIGATION_LOSS_CLAUSE = (
    " An edit counts as a mitigation only if it does not make the model materially worse, one "
    "condition for gates and fixed cuts alike: the paired seed test above (t-interval and sign-flip "
    "test) on the loss of the same windows, d_s = loss with the edit - without it, claimed sign "
    "positive, margin {loss_margin} nats. When it says reproduced (the loss is materially worse), the "
    "row is not reproduced ('not a mitigation'); when the rank test says reproduced and the loss "
    "test is inconclusive, the row is inconclusive; otherwise the rank test decides.")


def _rank_after(curves, layers: Sequence[int]) -> np.ndarray:
    """Per seed, the mean over windows and ``layers`` of ``logrank_input`` (``[n_seeds, n_windows, L+1]``)."""
    a = _arr(curves, "logrank_input", 3)
    return a[:, :, list(layers)].mean(axis=(1, 2))


@_rule(MISALIGNMENT_TRAINING_RULE.replace("{claim_id}", "C3-training.misalignment / C2-training.cut-misalignment")
       .replace("{after}", "h_(b+1)..h_(L-1)") + " " + SEED_TEST + MATERIAL_RULE + MITIGATION_LOSS_CLAUSE)
def training_misalignment(before_rank, after_rank, *, after_layers: Sequence[int], model: str, variant: str,
                          loss_before, loss_after, fixed_cut: bool = False,
                          margin: float = MISALIGNMENT_MARGINS["logrank"], loss_margin: float = LOSS_MARGIN,
                          level: float = LEVEL, source: str = "", what: str = "edited - baseline",
                          units: str = "windows", claimed: str = "positive (the input token ranks lower)",
                          unit: str = "log10 rank", alpha: float = TEST_ALPHA, power: float = POWER,
                          min_seeds: int = MIN_SEEDS) -> list[VerdictRow]:
    """Does the edit make the input token less decodable on the layers it leaves before the output,
    without making the model materially worse?

    ``before_rank``, ``after_rank``: ``[n_seeds, n_windows, L+1]`` lens ``logrank_input`` curves of
    the baseline and the edited model, seed s paired with seed s, the same windows. ``after_layers``:
    the residual states between the edit and the output (``h_(b+1)..h_(L-1)`` for a cut at block b;
    ``h_1..h_(L-1)`` for gates at every block); empty: not applicable (reported, inconclusive).
    ``loss_before``/``loss_after``: ``[n_seeds, n_windows]`` losses on the same windows; they decide
    whether the edit counts as a mitigation, for gates and fixed cuts alike.
    Claim id ``C3-training.misalignment`` (gates) or ``C2-training.cut-misalignment`` (a fixed cut).
    """
    cid = "C2-training.cut-misalignment" if fixed_cut else "C3-training.misalignment"
    if loss_before is None or loss_after is None:
        raise ValueError(f"{cid} needs loss_before and loss_after (the losses on the lens windows): an edit "
                         "counts as a mitigation only if its loss is not materially worse")
    b, a = _arr(before_rank, "before_rank", 3), _arr(after_rank, "after_rank", 3)
    if a.shape != b.shape:
        raise ValueError(f"before and after curves differ in shape: {b.shape} vs {a.shape} (same seeds, windows)")
    L = b.shape[2] - 1
    idx = [int(l) for l in after_layers]
    if any(not 1 <= l <= L - 1 for l in idx):
        raise ValueError(f"after_layers must lie within 1..{L - 1} (after the edit, before the output h_{L})")
    after = f"h_{idx[0]}..h_{idx[-1]}" if idx else "none"
    rule = (_fmt_rule(MISALIGNMENT_TRAINING_RULE.format(claim_id=cid, after=after), what=what, claimed=claimed,
                      margin=margin, unit=unit, level=level)
            + MITIGATION_LOSS_CLAUSE.format(loss_margin=loss_margin))
    details: dict[str, Any] = {"after_layers": idx}
    loss_test = seed_test(_paired_seeds(loss_after, loss_before, "loss_after"), sign=1, margin=loss_margin,
                          level=level)
    details["loss_change"] = {k: loss_test[k] for k in ("estimate", "lo", "hi", "per_seed", "verdict", "why",
                                                        "p_signflip", "p_signflip_margin")}
    if not idx:
        test = no_test(b.shape[0], margin, f"not applicable: no residual state lies between the edit and the "
                                           f"output h_{L}")
        return [_seed_row(cid, test, model=model, variant=variant,
                          statistic="input-token log10 rank between the edit and the output, edited - baseline",
                          rule=rule, source=source, n_windows=b.shape[1], details=details, unit="log10 rank")]
    test = seed_test(_rank_after(a, idx) - _rank_after(b, idx), sign=1, margin=margin, level=level, alpha=alpha,
                     power=power)
    verdict, why = test["verdict"], test["why"]
    details.update(before=float(_rank_after(b, idx).mean()), after=float(_rank_after(a, idx).mean()))
    loss = (f"{loss_test['estimate']:+.3g} nats [{loss_test['lo']:.3g}, {loss_test['hi']:.3g}]"
            if loss_test["lo"] is not None else "no interval")
    details["loss_materially_worse"] = loss_test["verdict"] == REPRODUCED
    if loss_test["verdict"] == REPRODUCED:
        verdict = NOT_REPRODUCED
        why = f"not a mitigation: the loss is materially worse ({loss}; {loss_test['why']})"
    elif verdict == REPRODUCED and loss_test["verdict"] == INCONCLUSIVE:
        verdict, why = INCONCLUSIVE, f"the rank rises, but whether the loss is materially worse is open ({loss}: {loss_test['why']})"
    else:
        why += ("; the loss is not materially worse (" if loss_test["verdict"] == NOT_REPRODUCED else
                "; whether the loss is materially worse is open (") + f"{loss})"
    return [_seed_row(cid, test, model=model, variant=variant,
                      statistic=f"input-token log10 rank over {after}, edited - baseline (mean over seeds)",
                      rule=rule, source=source, n_windows=b.shape[1], details=details, verdict=verdict, why=why,
                      unit="log10 rank")]


EMERGENCE_TRAINING_RULE = (
    "C3-training.emergence-shift / C2-training.cut-emergence-shift. Per seed, the next-token emergence depth of the seed's mean "
    "{metric} curve (where it has covered half its way from h_{start} to h_L), as a share of the "
    "depth; d_s = with the edit minus without it.")


@_rule(EMERGENCE_TRAINING_RULE + " " + SEED_TEST + MATERIAL_RULE)
def training_emergence_shift(before_next, after_next, *, model: str, variant: str, forced: bool = False,
                             fixed_cut: bool = False,
                             metric: str = "top1", start: int = 1, margin: float = MISALIGNMENT_MARGINS["depth"],
                             level: float = LEVEL, source: str = "", what: str = "edited - baseline",
                             units: str = "windows", claimed: str = "negative (the next token emerges earlier)",
                             unit: str = "of the depth", alpha: float = TEST_ALPHA, power: float = POWER,
                             min_seeds: int = MIN_SEEDS) -> list[VerdictRow]:
    """``before_next``, ``after_next``: ``[n_seeds, n_windows, L+1]`` next-token curves. ``forced``: the
    edit itself forces the answer (an alpha = 0 cut makes the curve flat before the cut, so the
    half-way point must fall at it): the row is reported as not applicable. Claim id
    ``C3-training.emergence-shift`` (gates) or ``C2-training.cut-emergence-shift`` (``fixed_cut``)."""
    cid = "C2-training.cut-emergence-shift" if fixed_cut else "C3-training.emergence-shift"
    b, a = _arr(before_next, "before_next", 3), _arr(after_next, "after_next", 3)
    L = b.shape[2] - 1
    rule = _fmt_rule(EMERGENCE_TRAINING_RULE.format(metric=metric, start=start), what=what, claimed=claimed,
                     margin=margin, unit=unit, level=level)

    def depth(x):
        out = []
        for s in range(x.shape[0]):
            h = stats.halfway_point(x[s].mean(axis=0)[start:])
            out.append(np.nan if h is None else (h + start) / L)
        return np.asarray(out)

    db, da = depth(b), depth(a)
    details = {"before": db.tolist(), "after": da.tolist(), "forced": forced}
    if forced or not (np.isfinite(db).all() and np.isfinite(da).all()):
        why = ("not applicable: the alpha = 0 cut forces the shift (the next-token curve is flat before it)"
               if forced else "a seed's next-token curve is flat (no half-way point)")
        return [_seed_row(cid, no_test(b.shape[0], margin, why), model=model, variant=variant,
                          statistic="next-token emergence depth l/L, edited - baseline", rule=rule, source=source,
                          n_windows=b.shape[1], details=details, unit="of the depth")]
    test = seed_test(da - db, sign=-1, margin=margin, level=level, alpha=alpha, power=power)
    return [_seed_row(cid, test, model=model, variant=variant,
                      statistic=f"next-token emergence depth l/L ({metric}), edited - baseline (mean over seeds)",
                      rule=rule, source=source, n_windows=b.shape[1], details=details, unit="of the depth")]


C1_SEEDS_RULE = (
    "{claim_id} across seeds. Each seed's trained baseline is judged by the rule of {claim_id} on its "
    "own lens windows; seeds are the unit: reproduced if every seed is, not reproduced if every seed "
    "is not, inconclusive otherwise ('seeds disagree'). Shown: the mean over seeds of the per-seed "
    "estimates. What the per-seed rule marks carries over: post hoc (with the pre-registered rule's "
    "verdicts combined the same way) and not evidence.")


def c1_across_seeds(rows_by_seed: Sequence[Sequence[VerdictRow]], *, model: str, source: str = "") -> list[VerdictRow]:
    """One row per C1 claim id from each seed's rows (``c1_regimes`` + ``c1_depth`` of each seed)."""
    if not rows_by_seed:
        raise ValueError("no seed's rows given")
    out = []
    n = len(rows_by_seed[0])
    if any(len(rows) != n or [r.claim_id for r in rows] != [r.claim_id for r in rows_by_seed[0]]
           for rows in rows_by_seed):
        raise ValueError("every seed's rows must come from the same rules, in the same order")
    for i in range(n):
        per = [rows[i] for rows in rows_by_seed]
        cid = per[0].claim_id
        verdicts_ = [r.verdict for r in per]
        v = stats.combine_verdicts(verdicts_, how="unanimous")
        est = [r.estimate for r in per]
        mean = float(np.mean(est)) if all(e is not None for e in est) else None
        marks = {}  # what each seed's rule marked, carried over: post hoc, pre-registered, not evidence
        if all(r.details.get("post_hoc") for r in per):
            marks["post_hoc"] = True
        pre = [r.details.get("pre_registered_verdict") for r in per]
        if all(p_ in OUTCOMES for p_ in pre):
            marks.update(pre_registered_verdict=stats.combine_verdicts(pre, how="unanimous"),
                         pre_registered_per_seed=pre)
        if not any(is_evidence(r) for r in per):
            marks.update(_not_evidence(per[0].details.get("evidence_why") or "its rule marks it not evidence"))
        out.append(_row(cid, model=model, variant=f"{per[0].variant}, seeds as the unit", verdict=v,
                        statistic=per[0].statistic + " (mean over seeds)", estimate=mean, lo=None, hi=None,
                        level=None, n=len(per), rule=C1_SEEDS_RULE.format(claim_id=cid), per_seed=verdicts_,
                        source=source,
                        details={"unit": "seed", "per_seed_values": est, **marks,
                                 "why": "" if v != INCONCLUSIVE else (
                                     "seeds disagree" if len(set(verdicts_)) > 1 else "every seed is inconclusive")}))
    return out
