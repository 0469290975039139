"""C2 on frozen models: the layer x alpha attenuation sweep (a late cut, sensitivity to the layer)."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
from scipy.stats import t as _sp_t

from .. import stats
from ..stats import INCONCLUSIVE, NOT_REPRODUCED, REPRODUCED
from .row import VerdictRow
from .rules import (LATE_FRACTION, LEVEL, LOSS_MARGIN, MAX_LATE_CANDIDATES, POWER, PROBE_ALPHA,
                    SPREAD_THRESHOLD, TEST_ALPHA, _arr, _row, _rule, bonferroni_level, is_late)


# --------------------------------------------------------------------------------------------
# C2 on frozen models: the attenuation sweep
# --------------------------------------------------------------------------------------------


def _sweep_arrays(dloss, layers, alphas) -> tuple[np.ndarray, list[int], list[float]]:
    d = _arr(dloss, "dloss", 3)
    layers, alphas = [int(l) for l in layers], [float(a) for a in alphas]
    if d.shape[:2] != (len(layers), len(alphas)):
        raise ValueError(f"dloss is {d.shape}, expected [{len(layers)} layers, {len(alphas)} alphas, windows]")
    return d, layers, alphas


def _holm_family(diffs: Sequence[np.ndarray], *, alpha: float, margin: float, power: float,
                 n_boot: int, seed: int, level: float) -> tuple[str, list[dict[str, Any]], int, str]:
    """One-sided paired t-tests (H1: mean < 0) of each candidate, Holm across them.

    Returns (verdict, per-candidate numbers, index of the headline candidate, why). Reproduced if
    Holm rejects at least one candidate whose mean improvement is material (at least ``margin``);
    not reproduced if every candidate's CI lower bound is above -margin; inconclusive otherwise.
    """
    k = len(diffs)
    out = []
    for d in diffs:
        t = stats.paired_ttest(d, alternative="less")
        m, lo, hi = stats.bootstrap_mean(d, n_boot=n_boot, seed=seed, level=level)
        out.append({"mean": m, "lo": lo, "hi": hi, "t": t["t"], "p": t["p"], "sd": t["sd"], "n": t["n"],
                    "mde": stats.mde_paired_mean(t["sd"], t["n"], alpha=alpha / k, power=power, sided="one")})
    adj = stats.holm([c["p"] for c in out])
    for c, a in zip(out, adj):
        c["p_holm"] = float(a)
        c["rejected"] = bool(a <= alpha)
    rejected = [i for i, c in enumerate(out) if c["rejected"]]
    material = [i for i in rejected if out[i]["mean"] <= -margin]
    why = ""
    if material:
        verdict = REPRODUCED
        head = min(material, key=lambda i: out[i]["mean"])
    elif all(c["lo"] > -margin for c in out):
        verdict = NOT_REPRODUCED
        head = min(range(k), key=lambda i: out[i]["mean"])
    else:
        verdict = INCONCLUSIVE
        head = min(rejected or range(k), key=lambda i: out[i]["mean"])
        h = out[head]
        why = (f"significant but not material: Holm rejects, the improvement {-h['mean']:.3g} is below the "
               f"{margin:g} margin" if rejected else
               f"no candidate is significant after Holm, and an improvement of {margin:g} is not ruled out")
        if h["mde"] > margin:
            why += f"; underpowered: MDE {h['mde']:.3g} > margin {margin:g}"
    return verdict, out, head, why


C2_LATE_CUT_RULE = (
    "C2.late-cut (frozen model). Candidates: every swept (block l, alpha < 1) with l >= "
    "{late_fraction:.3g} L. Selection on one set of windows: the up to {max_candidates} cells with "
    "the lowest mean dloss among those below 0 (if none is below 0, the single lowest). "
    "Confirmation on a disjoint set of windows: per candidate a one-sided paired t-test of dloss "
    "(H1: mean < 0), Holm correction across the candidates at family level {alpha}. Reproduced if "
    "Holm rejects for at least one candidate whose mean improvement is material (at least {margin} "
    "nats); not reproduced if every candidate's two-sided {level} bootstrap CI on the confirmation windows lies above -{margin} "
    "nats (an improvement of {margin} nats or more is ruled out; the paper's only published "
    "difference, WikiText perplexity 28.46 vs 28.62, is 0.0056 nats); inconclusive otherwise. "
    "Reported: the minimum detectable effect in nats at the confirmation set's n, "
    "(t_(1-{alpha}/k) + t_{power}) SD/sqrt(n) with k candidates and n - 1 degrees of freedom.")


def late_cut_candidates(dloss, layers: Sequence[int], alphas: Sequence[float], *, n_layers: int,
                        select=None, late_fraction: float = LATE_FRACTION,
                        max_candidates: int = MAX_LATE_CANDIDATES) -> list[dict[str, Any]]:
    """The selection step of :func:`c2_late_cut`: which late cells go on to be confirmed.

    Among the swept cells (block ``l >= late_fraction * n_layers``, alpha < 1), the up to
    ``max_candidates`` with the lowest mean dloss over the ``select`` windows among those below 0
    (if none is below 0, the single lowest). ``select=None``: every window of ``dloss``. Returns
    ``[{"layer", "alpha", "selection_mean", "late_cells"}]`` (``late_cells``: how many late cells
    competed), best first: sweep these cells on the confirmation windows
    (``c2_late_cut(..., confirm_dloss=...)``).
    """
    d, layers, alphas = _sweep_arrays(dloss, layers, alphas)
    sel = np.arange(d.shape[2]) if select is None else np.asarray(select, dtype=np.int64)
    cells = [(li, ai) for li, l in enumerate(layers) if is_late(l, n_layers, late_fraction)
             for ai, a in enumerate(alphas) if a < 1]
    if not cells:
        raise ValueError(f"no swept block l >= {late_fraction:.3g} x {n_layers} with alpha < 1: sweep the "
                         "late blocks with some alpha < 1")
    sel_mean = {c: float(d[c[0], c[1], sel].mean()) for c in cells}
    ranked = sorted(cells, key=lambda c: sel_mean[c])
    chosen = [c for c in ranked if sel_mean[c] < 0][:max_candidates] or ranked[:1]
    return [{"layer": layers[li], "alpha": alphas[ai], "selection_mean": sel_mean[(li, ai)],
             "late_cells": len(cells)} for li, ai in chosen]


@_rule(C2_LATE_CUT_RULE)
def c2_late_cut(dloss, layers: Sequence[int], alphas: Sequence[float], *, n_layers: int, model: str,
                select=None, confirm=None, confirm_dloss=None, late_fraction: float = LATE_FRACTION,
                max_candidates: int = MAX_LATE_CANDIDATES, alpha: float = TEST_ALPHA, margin: float = LOSS_MARGIN, power: float = POWER,
                n_boot: int = 1000, seed: int = 0, level: float = LEVEL, source: str = "") -> list[VerdictRow]:
    """Does a late single-block cut lower the loss of a frozen model? Selection / confirmation.

    ``dloss [n_layers_swept, n_alphas, n_windows]`` (the sweep's ``result["dloss"]``), ``layers``
    and ``alphas`` its axes, ``n_layers`` the model's depth L. ``select``/``confirm``: disjoint
    window indices (default: :func:`residshift.analysis.stats.split_units` halves, seeded).

    ``confirm_dloss``: confirmation on OTHER windows than ``dloss``'s (e.g. further windows of the
    same seed, which are disjoint from the first ones): ``{(layer, alpha): [n_confirm]}`` holding at
    least every candidate :func:`late_cut_candidates` picks; then every window of ``dloss`` selects
    (leave ``select``/``confirm`` None). Cheaper than sweeping every late cell on every window:
    only the chosen cells need the confirmation windows.
    """
    d, layers, alphas = _sweep_arrays(dloss, layers, alphas)
    n = d.shape[2]
    if confirm_dloss is not None:
        if select is not None or confirm is not None:
            raise ValueError("with confirm_dloss every window of dloss selects: leave select and confirm None")
        select = np.arange(n)
        if n < 2:
            raise ValueError(f"selection needs >= 2 windows of dloss, got {n}")
    elif select is None and confirm is None:
        select, confirm = stats.split_units(n, seed=seed)
    elif select is None or confirm is None:
        raise ValueError("give both select and confirm window indices, or neither (a seeded half split)")
    select = np.asarray(select, dtype=np.int64)
    if confirm_dloss is None:
        confirm = np.asarray(confirm, dtype=np.int64)
        if set(select.tolist()) & set(confirm.tolist()):
            raise ValueError("the selection and confirmation windows overlap: they must be disjoint")
        if min(len(select), len(confirm)) < 2 or max(select.max(), confirm.max()) >= n or min(select.min(), confirm.min()) < 0:
            raise ValueError(f"select and confirm need >= 2 window indices each, within 0..{n - 1}")
    picked = late_cut_candidates(d, layers, alphas, n_layers=n_layers, select=select,
                                 late_fraction=late_fraction, max_candidates=max_candidates)
    if confirm_dloss is None:
        diffs = [d[layers.index(c["layer"]), alphas.index(c["alpha"]), confirm] for c in picked]
    else:
        given = {(int(l), float(a)): v for (l, a), v in confirm_dloss.items()}
        missing = [(c["layer"], c["alpha"]) for c in picked if (c["layer"], c["alpha"]) not in given]
        if missing:
            raise ValueError(f"confirm_dloss lacks the chosen candidate(s) {missing} (block, alpha): sweep "
                             "them on the confirmation windows (late_cut_candidates names them)")
        diffs = [_arr(given[(c["layer"], c["alpha"])], f"confirm_dloss[{c['layer']}, {c['alpha']}]", 1)
                 for c in picked]
        if len({len(x) for x in diffs}) != 1 or len(diffs[0]) < 2:
            raise ValueError("every candidate needs the same >= 2 confirmation windows")
    n_confirm = len(diffs[0])
    verdict, numbers, head, why = _holm_family(diffs, alpha=alpha, margin=margin, power=power, n_boot=n_boot,
                                               seed=seed, level=level)
    for c, num in zip(picked, numbers):
        num.update(layer=c["layer"], alpha=c["alpha"], selection_mean=c["selection_mean"])
    h = numbers[head]
    rule = C2_LATE_CUT_RULE.format(late_fraction=late_fraction, max_candidates=max_candidates, alpha=alpha,
                                   level=level, margin=margin, power=power)
    return [_row("C2.late-cut", model=model, variant=f"block {h['layer']}, alpha={h['alpha']:g}",
                 verdict=verdict, why=why, statistic="mean dloss on the confirmation windows (nats)",
                 estimate=h["mean"], lo=h["lo"], hi=h["hi"], level=level, n=n_confirm, rule=rule,
                 source=source,
                 details={"candidates": numbers, "k": len(picked), "n_selection": len(select),
                          "n_confirmation": n_confirm, "mde": h["mde"], "mde_unit": "nats",
                          "margin": margin, "late_cells": picked[0]["late_cells"]})]


N_PERMUTATIONS = 2000  # C2.layer-sensitive: random within-window permutations of the block labels

C2_LAYER_RULE = (
    "C2.layer-sensitive (frozen model). Compared blocks: the late blocks l >= {late_fraction:.3g} L "
    "only (the last two swept blocks where fewer are late), fixed in advance (cutting an early block of a trained model mostly breaks it, which says "
    "nothing about where attenuation should go). At alpha = {probe_alpha}, per window the loss change "
    "of each compared block. Test of 'the block does not matter': a permutation test (within each "
    "window the blocks' values are exchangeable under that hypothesis) of the spread max - min of the "
    "block means, {n_perm} random within-window permutations, p = (1 + #permuted spreads >= observed) "
    "/ (1 + {n_perm}); the spread itself is biased upward with no effect, so it is only the test "
    "statistic. Effect: the contrast between the most and the least harmful block, with a two-sided "
    "t-interval over windows at the Bonferroni level 1 - (1 - {level})/P for the P pairs of blocks. "
    "Reproduced if the permutation test rejects at {alpha} AND that contrast's interval excludes 0 "
    "with an estimate of at least {threshold} nats (material: a 10% perplexity difference between "
    "choices of block, about 17x the paper's published 0.0056-nat difference); not reproduced if every "
    "pair's Bonferroni interval lies within +-{threshold} nats; inconclusive otherwise, with the reason.")


def permutation_spread(x, *, n_perm: int = N_PERMUTATIONS, seed: int = 0) -> dict[str, Any]:
    """Permutation test of 'no difference between the rows of ``x [k, n]``' (k conditions measured on
    the same n units): within each unit the k values are permuted at random; statistic: the spread
    max - min of the k means. Returns ``spread``, ``p`` (with the +1 correction) and ``n_perm``."""
    x = _arr(x, "x", 2)
    k, n = x.shape
    if k < 2 or n < 1:
        raise ValueError(f"a permutation test of the spread needs >= 2 conditions and >= 1 unit, got {x.shape}")
    obs = float(np.ptp(x.mean(axis=1)))
    rng = np.random.default_rng(seed)
    xt = x.T  # [n, k]
    count, done = 0, 0
    while done < n_perm:  # in chunks: memory stays flat in n_perm
        b = min(500, n_perm - done)
        perm = rng.random((b, n, k)).argsort(axis=2)
        means = np.take_along_axis(np.broadcast_to(xt, (b, n, k)), perm, axis=2).mean(axis=1)  # [b, k]
        count += int((np.ptp(means, axis=1) >= obs - 1e-12).sum())
        done += b
    return {"spread": obs, "p": (1 + count) / (1 + n_perm), "n_perm": n_perm}


@_rule(C2_LAYER_RULE.replace("{n_perm}", str(N_PERMUTATIONS)))
def c2_layer_sensitive(dloss, layers: Sequence[int], alphas: Sequence[float], *, model: str, n_layers: int,
                       probe_alpha: float = PROBE_ALPHA, threshold: float = SPREAD_THRESHOLD,
                       late_fraction: float = LATE_FRACTION, alpha: float = TEST_ALPHA,
                       n_perm: int = N_PERMUTATIONS, seed: int = 0, level: float = LEVEL,
                       source: str = "") -> list[VerdictRow]:
    """Is the effect of a single-block cut very sensitive to the block (frozen model)?

    ``dloss [n_layers_swept, n_alphas, n_windows]`` with its ``layers`` and ``alphas`` axes;
    ``n_layers`` the model's depth L (which blocks are late).
    """
    d, layers, alphas = _sweep_arrays(dloss, layers, alphas)
    if probe_alpha not in alphas:
        raise ValueError(f"alpha {probe_alpha} was not swept (swept: {alphas}): pick one of them")
    if len(layers) < 2:
        raise ValueError("layer sensitivity needs at least 2 swept blocks")
    late = [i for i, l in enumerate(layers) if is_late(l, n_layers, late_fraction)]
    if len(late) < 2:  # a shallow model: its last two swept blocks
        late = sorted(range(len(layers)), key=lambda i: layers[i])[-2:]
    x = d[late, alphas.index(probe_alpha)]  # [k, n]
    blocks = [layers[i] for i in late]
    k, n = x.shape
    if n < 2:
        raise ValueError(f"layer sensitivity needs >= 2 windows, got {n}")
    perm = permutation_spread(x, n_perm=n_perm, seed=seed)
    means = x.mean(axis=1)
    hi_i, lo_i = int(means.argmax()), int(means.argmin())
    pairs = [(i, j) for i in range(k) for j in range(i + 1, k)]
    level_b = bonferroni_level(level, len(pairs))
    q = float(_sp_t.ppf((1 + level_b) / 2, n - 1))

    def interval(i, j):
        t = stats.paired_ttest(x[i] - x[j])
        return t["mean"], t["mean"] - q * t["se"], t["mean"] + q * t["se"]

    est, lo, hi = interval(hi_i, lo_i)
    within = all(-threshold < a and b < threshold for _, a, b in (interval(i, j) for i, j in pairs))
    if perm["p"] <= alpha and lo > 0 and est >= threshold:
        verdict, why = REPRODUCED, ""
    elif within:
        verdict, why = NOT_REPRODUCED, ""
    else:
        verdict = INCONCLUSIVE
        why = (f"the blocks differ (permutation p = {perm['p']:.3g}) but the largest contrast {est:.3g} is below "
               f"the {threshold:g} threshold" if perm["p"] <= alpha and lo > 0 else
               f"some pair's interval reaches past +-{threshold:g} but the difference is not established "
               f"(permutation p = {perm['p']:.3g})")
    rule = C2_LAYER_RULE.format(late_fraction=late_fraction, probe_alpha=probe_alpha, n_perm=n_perm, level=level,
                                alpha=alpha, threshold=threshold)
    return [_row("C2.layer-sensitive", model=model, variant=f"late blocks, alpha={probe_alpha:g}", verdict=verdict,
                 why=why, statistic=f"largest late-block contrast of the loss change at alpha={probe_alpha:g} "
                                    f"(block {blocks[hi_i]} - block {blocks[lo_i]}, nats)",
                 estimate=est, lo=lo, hi=hi, level=level_b, n=n, rule=rule, source=source,
                 details={"compared_blocks": blocks, "permutation_p": perm["p"], "spread": perm["spread"],
                          "n_perm": n_perm, "most_harmful_block": blocks[hi_i], "least_harmful_block": blocks[lo_i],
                          "block_means": dict(zip(map(str, blocks), means.tolist())),
                          "bonferroni_level": level_b, "threshold": threshold})]


def alpha0_summary(dloss, layers: Sequence[int], alphas: Sequence[float], *, n_boot: int = 1000,
                   seed: int = 0, level: float = LEVEL) -> list[dict[str, Any]]:
    """Cutting one block's skip path of a TRAINED model: a description, not a verdict.

    Per swept block, the mean loss change at alpha = 0 with a bootstrap CI over windows. This says
    how much a trained model relies on each skip path; it is not evidence for C2, whose claim is
    about training with the cut in place (the training notebooks test that:
    :func:`c2_training_alpha0`).
    """
    d, layers, alphas = _sweep_arrays(dloss, layers, alphas)
    if 0.0 not in alphas:
        raise ValueError(f"alpha = 0 was not swept (swept: {alphas})")
    a0 = alphas.index(0.0)
    out = []
    for li, layer in enumerate(layers):
        m, lo, hi = stats.bootstrap_mean(d[li, a0], n_boot=n_boot, seed=seed, level=level)
        out.append({"layer": layer, "alpha": 0.0, "dloss": m, "lo": lo, "hi": hi, "level": level,
                    "n": int(d.shape[2])})
    return out


def best_fixed_cut(dloss, layers: Sequence[int], alphas: Sequence[float], *,
                   late_fraction: float | None = None, n_layers: int | None = None) -> dict[str, Any]:
    """The fixed single-block cut with the lowest mean dloss, the unmodified model among the candidates.

    Every swept (block, alpha) is a candidate, and so is alpha = 1 (the unmodified model, dloss 0
    by definition, whether or not it was swept); ties go to the unmodified model. With
    ``late_fraction`` only blocks ``l >= late_fraction * n_layers`` compete. Choose it on other
    windows than the ones the comparison uses (the sweep's validation windows vs test windows).
    Returns ``{"layer": l or None, "alpha", "dloss", "label"}``.
    """
    d, layers, alphas = _sweep_arrays(dloss, layers, alphas)
    if late_fraction is not None and n_layers is None:
        raise ValueError("late_fraction needs n_layers (the model's depth)")
    best = {"layer": None, "alpha": 1.0, "dloss": 0.0, "label": "unmodified (alpha = 1)"}
    for li, l in enumerate(layers):
        if late_fraction is not None and not is_late(l, n_layers, late_fraction):
            continue
        for ai, a in enumerate(alphas):
            m = float(d[li, ai].mean())
            if a < 1 and m < best["dloss"]:
                best = {"layer": l, "alpha": a, "dloss": m, "label": f"block {l}, alpha={a:g}"}
    return best
