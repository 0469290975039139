"""C3 on frozen models (and the shared paired-by-item benchmark rule of C3 and C4): learned gates against
the unmodified model and the best fixed cut, where the gates concentrate, misalignment after the gates."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from .. import stats
from ..stats import INCONCLUSIVE, NOT_REPRODUCED, OUTCOMES, REPRODUCED
from .row import VerdictRow
from .rules import (BENCH_MARGIN, CONCENTRATION_RATIO, LEVEL, LOSS_MARGIN, MIN_ATTENUATION, MIN_GATE_MOVEMENT,
                    MISALIGNMENT_MARGINS, POWER, TEST_ALPHA, _arr, _broadcast_seeds, _per_seed, _row, _rule,
                    _seed_flags, _setting_prefix, improvement_outcome)
from .c1 import DEPTH_METRICS


# --------------------------------------------------------------------------------------------
# C3 (and its training counterparts): gates vs references, concentration, misalignment
# --------------------------------------------------------------------------------------------


VS_RULE = (
    "{claim_id}. Per seed, the paired difference {what} per {units}; statistic: its mean with a "
    "two-sided {level} percentile bootstrap CI over {units}. Per-seed verdict by the improvement "
    "rule: reproduced if the CI lies below 0 and the mean is an improvement of at least {margin} "
    "nats (material); not reproduced if the CI lies above -{margin} nats (an improvement of "
    "{margin} nats or more is ruled out); inconclusive otherwise, and inconclusive "
    "('did not converge') for a fit that stopped at its step cap rather than by held-out early "
    "stopping. Seeds combined by {how} (unanimous: reproduced / not reproduced only if every seed "
    "says so). The row's estimate and CI are those of the seed-averaged difference.")


def _stopped_at_cap(flag) -> bool:
    """A fit record's ``stopped_early`` is False: it ran into its step cap (None: not applicable)."""
    return flag is not None and not bool(flag)


def _paired_by_seed(x: np.ndarray, ref: np.ndarray, *, sign: int, margin: float, converged, n_boot: int,
                    seed: int, level: float) -> tuple[list[str], list[dict[str, Any]]]:
    verdicts, numbers = [], []
    for s in range(x.shape[0]):
        m, lo, hi = stats.bootstrap_mean(x[s] - ref[s], n_boot=n_boot, seed=seed, level=level)
        v, why = improvement_outcome(lo, hi, sign=sign, margin=margin, estimate=m)
        if _stopped_at_cap(converged[s]):
            v, why = INCONCLUSIVE, "did not converge: the fit stopped at its step cap"
        verdicts.append(v)
        numbers.append({"mean": m, "lo": lo, "hi": hi, "converged": converged[s], "why": why})
    return verdicts, numbers


def _seeds_why(verdict: str, per_seed: Sequence[str], numbers: Sequence[Mapping[str, Any]]) -> str:
    """Why a row combined from per-seed verdicts is inconclusive: the seeds disagree, or each seed's reason."""
    if verdict != INCONCLUSIVE:
        return ""
    if len(set(per_seed)) > 1:
        counts = ", ".join(f"{per_seed.count(v)} {v}" for v in OUTCOMES if v in per_seed)
        return f"seeds disagree ({counts})"
    reasons = sorted({c.get("why") or "" for c in numbers} - {""})
    return "; ".join(reasons) if reasons else "every seed is inconclusive"


def _gates_vs(gated, reference, *, claim_id: str, what: str, model: str, variant: str | None, converged,
              steps, margin: float, how: str, n_boot: int, seed: int, level: float, source: str,
              extra: dict | None = None) -> VerdictRow:
    g = _per_seed(gated, "gated losses")
    ref = _broadcast_seeds(_per_seed(reference, "reference losses", g.shape[1]), g.shape[0], "reference losses")
    conv = _seed_flags(converged, g.shape[0], "converged", None)
    st = _seed_flags(steps, g.shape[0], "steps", None)
    per_seed, numbers = _paired_by_seed(g, ref, sign=-1, margin=margin, converged=conv, n_boot=n_boot,
                                        seed=seed, level=level)
    for c, s in zip(numbers, st):
        c["steps"] = s
    m, lo, hi = stats.bootstrap_mean((g - ref).mean(axis=0), n_boot=n_boot, seed=seed, level=level)
    rule = VS_RULE.format(claim_id=claim_id, what=what, units="window", level=level, margin=margin, how=how)
    verdict = stats.combine_verdicts(per_seed, how=how)
    return _row(claim_id, model=model, variant=variant, verdict=verdict, why=_seeds_why(verdict, per_seed, numbers),
                statistic=f"mean loss change, {what} (nats, seed-averaged)", estimate=m, lo=lo, hi=hi,
                level=level, n=g.shape[1], rule=rule, per_seed=per_seed, source=source,
                details={"per_seed": numbers, "margin": margin, "combine": how,
                         "not_converged": [i for i, c in enumerate(conv) if _stopped_at_cap(c)],
                         **(extra or {})})


@_rule(VS_RULE.replace("{claim_id}", "C3.beats-baseline").replace("{what}", "gated - unmodified")
       .replace("{units}", "window"))
def c3_beats_baseline(gated, unmodified, *, model: str, variant: str | None, converged=None, steps=None,
                      margin: float = LOSS_MARGIN, how: str = "unanimous", setting: str = "frozen",
                      n_boot: int = 1000, seed: int = 0, level: float = LEVEL, source: str = "") -> list[VerdictRow]:
    """Gates vs the unmodified (frozen) or baseline (trained) model, paired over windows per seed.

    ``gated [n_seeds, n_windows]`` per-window mean losses with each seed's gates; ``unmodified``
    ``[n_windows]`` (frozen: one model) or ``[n_seeds, n_windows]`` (training: a baseline per seed).
    ``converged``: per seed, the fit record's ``stopped_early`` (False = stopped at the step cap: that
    seed is inconclusive); None for runs without early stopping (training to a token budget).
    ``steps``: per seed, the fit's step count (reported). ``setting="training"`` gives claim id
    ``C3-training.beats-baseline``.
    """
    cid = _setting_prefix("C3.beats-baseline", setting)
    return [_gates_vs(gated, unmodified, claim_id=cid, what="gated - unmodified", model=model, variant=variant,
                      converged=converged, steps=steps, margin=margin, how=how, n_boot=n_boot, seed=seed,
                      level=level, source=source)]


@_rule(VS_RULE.replace("{claim_id}", "C3.beats-best-cut").replace("{what}", "gated - best fixed cut")
       .replace("{units}", "window"))
def c3_beats_best_cut(gated, best_cut, *, cut: Mapping[str, Any], model: str, variant: str | None,
                      converged=None, steps=None, margin: float = LOSS_MARGIN, how: str = "unanimous",
                      setting: str = "frozen", n_boot: int = 1000, seed: int = 0, level: float = LEVEL,
                      source: str = "") -> list[VerdictRow]:
    """Gates vs the best fixed single-block cut, where alpha = 1 (the unmodified model) competes.

    ``best_cut``: per-window losses of the cut chosen by :func:`best_fixed_cut` on OTHER windows
    (the unmodified model's losses when alpha = 1 won); ``cut``: that function's result (reported).
    Shapes and ``converged``/``steps`` as in :func:`c3_beats_baseline`.
    """
    cid = _setting_prefix("C3.beats-best-cut", setting)
    return [_gates_vs(gated, best_cut, claim_id=cid, what="gated - best fixed cut", model=model,
                      variant=variant, converged=converged, steps=steps, margin=margin, how=how,
                      n_boot=n_boot, seed=seed, level=level, source=source, extra={"cut": dict(cut)})]


C3_CONCENTRATION_RULE = (
    "{claim_id}. Two rows, one per part of the claim. Attenuation of block l is 1 - alpha_l (token "
    "gates: the mean alpha over tokens). Relative part ({claim_id}): per seed, reproduced if the "
    "final block's attenuation is at least {ratio} times every other block's (and above 0); not "
    "reproduced if some other block is attenuated at least as much; inconclusive otherwise (the final "
    "block leads by less than {ratio}x). Material part ({claim_id}.material): per seed, reproduced "
    "if the final block's attenuation is at least {min_attenuation} (it removes a material share of "
    "the skip path), not reproduced if below. Either part is inconclusive ('did not converge') for a "
    "fit that stopped at its step cap. Seeds combined by {how}. No interval: one fitted value per "
    "seed; each row's estimate is averaged over seeds (the final block's attenuation, or its ratio to "
    "the largest other block's).")
C3_MOVEMENT_CLAUSE = (
    " A seed whose gates all ended within {min_movement} of their starting alpha is inconclusive "
    "('did not move'): where they ended says where they started, not what training asked for.")


@_rule(C3_CONCENTRATION_RULE.replace("{claim_id}", "C3.concentrates"))
def c3_concentration(alphas_by_seed, layers: Sequence[int], n_layers: int, *, model: str,
                     variant: str | None, converged=None, steps=None, min_attenuation: float = MIN_ATTENUATION,
                     ratio: float = CONCENTRATION_RATIO, how: str = "unanimous", setting: str = "frozen",
                     start_alphas=None, min_movement: float = MIN_GATE_MOVEMENT,
                     source: str = "") -> list[VerdictRow]:
    """Does the learned attenuation concentrate on the final block? Two rows: the relative claim
    (``C3.concentrates``: final >= ``ratio`` x every other) and the material one
    (``C3.concentrates.material``: final >= ``min_attenuation``).

    ``alphas_by_seed [n_seeds, n_gated]``: each seed's fitted alpha per gated block (``layers``);
    ``converged``/``steps`` as in :func:`c3_beats_baseline`. ``start_alphas`` (``[n_gated]`` or
    ``[n_seeds, n_gated]``): where the gates started; given, a seed whose gates all moved less than
    ``min_movement`` is inconclusive ("did not move") and the rule says so.
    """
    cid = _setting_prefix("C3.concentrates", setting)
    a = _per_seed(alphas_by_seed, "alphas_by_seed")
    layers = [int(l) for l in layers]
    if a.shape[1] != len(layers):
        raise ValueError(f"alphas_by_seed has {a.shape[1]} gates per seed but {len(layers)} layers")
    if n_layers - 1 not in layers:
        raise ValueError(f"the final block ({n_layers - 1}) was not gated: gate it to judge concentration")
    conv = _seed_flags(converged, a.shape[0], "converged", None)
    st = _seed_flags(steps, a.shape[0], "steps", None)
    last = layers.index(n_layers - 1)
    start = None if start_alphas is None else _broadcast_seeds(_per_seed(start_alphas, "start_alphas", len(layers)),
                                                                a.shape[0], "start_alphas")
    rel_seed, mat_seed, numbers = [], [], []
    for s in range(a.shape[0]):
        att = 1 - a[s]
        final = float(att[last])
        others = [(float(att[i]), layers[i]) for i in range(len(layers)) if i != last]
        top_other, runner = max(others) if others else (None, None)
        why = ""
        if top_other is not None and top_other >= final:
            rel = NOT_REPRODUCED
        elif final > 0 and (top_other is None or final >= ratio * max(top_other, 0.0)):
            rel = REPRODUCED
        elif final <= 0:
            rel = NOT_REPRODUCED
        else:
            rel, why = INCONCLUSIVE, f"the final block leads by less than {ratio:g}x"
        mat = REPRODUCED if final >= min_attenuation else NOT_REPRODUCED
        moved = None if start is None else float(np.abs(a[s] - start[s]).max())
        if _stopped_at_cap(conv[s]):
            why = "did not converge: the fit stopped at its step cap"
        elif moved is not None and moved < min_movement:
            why = f"did not move: every gate ended within {min_movement:g} of its start"
        if why and not why.startswith("the final"):
            rel, mat = INCONCLUSIVE, INCONCLUSIVE
        rel_seed.append(rel)
        mat_seed.append(mat)
        numbers.append({"final_attenuation": final, "final_alpha": float(a[s, last]),
                        "runner_up_block": runner, "runner_up_attenuation": top_other,
                        "ratio": (final / top_other) if top_other and top_other > 0 else None,
                        "most_attenuated_block": layers[int(att.argmax())], "converged": conv[s],
                        "steps": st[s], "why": why})
        if moved is not None:
            numbers[-1].update(largest_movement=moved, did_not_move=moved < min_movement)
    rule = C3_CONCENTRATION_RULE.format(claim_id=cid, min_attenuation=min_attenuation, ratio=ratio, how=how)
    if start is not None:
        rule += C3_MOVEMENT_CLAUSE.format(min_movement=min_movement)
    details = {"per_seed": numbers, "min_attenuation": min_attenuation, "ratio": ratio, "combine": how}
    ratios = [c["ratio"] for c in numbers if c["ratio"] is not None]
    v_rel, v_mat = stats.combine_verdicts(rel_seed, how=how), stats.combine_verdicts(mat_seed, how=how)
    mat_numbers = [{**c, "why": c["why"] if c["why"] and not c["why"].startswith("the final") else ""}
                   for c in numbers]
    return [_row(cid, model=model, variant=variant, verdict=v_rel, why=_seeds_why(v_rel, rel_seed, numbers),
                 statistic="final-block attenuation / largest other block's (mean over seeds)",
                 estimate=float(np.mean(ratios)) if ratios else None, lo=None, hi=None,
                 level=None, n=a.shape[0], rule=rule, per_seed=rel_seed, source=source, details=details),
            _row(cid + ".material", model=model, variant=variant, verdict=v_mat,
                 why=_seeds_why(v_mat, mat_seed, mat_numbers),
                 statistic="final-block attenuation 1 - alpha_L (mean over seeds)",
                 estimate=float(np.mean([c["final_attenuation"] for c in numbers])), lo=None, hi=None,
                 level=None, n=a.shape[0], rule=rule, per_seed=mat_seed, source=source, details=details)]


C3_MISALIGNMENT_RULE = (
    "C3.misalignment (primary). The input token's alignment measured directly: per window, the mean "
    "over the states after the edited block ({after}) of the lens log-probability of the input "
    "token x_t, with the gates minus without (same windows). Statistic: its mean, two-sided {level} "
    "percentile bootstrap CI over windows. Improvement rule (claimed sign: negative, the input token "
    "is less decodable): reproduced if the CI lies below 0 and the mean is at least "
    "{margin_logprob} nats below 0 (material); not reproduced if it lies above "
    "-{margin_logprob} nats; inconclusive otherwise. The loss change is reported beside it "
    "(details), not inside it.")
C3_MISALIGNMENT_RANK_RULE = (
    "C3.misalignment.rank (secondary). As C3.misalignment with the input token's log10 rank "
    "(claimed sign: positive, it ranks lower): reproduced if the CI lies above 0 and the mean is at "
    "least {margin_logrank} (material); not reproduced if "
    "it lies below {margin_logrank}; inconclusive otherwise.")
C3_EMERGENCE_RULE = (
    "C3.emergence-shift (secondary). The next-token emergence depth ({metric}: where the mean "
    "next-token curve has covered half its way from h_{start} to h_L), with the gates minus without, "
    "as relative depth, bootstrapped over the same windows for both (two-sided {level} percentile "
    "CI). Claimed sign negative (earlier): reproduced if the CI lies below 0 and the mean is at least "
    "{margin_depth} earlier (material); not reproduced if it "
    "lies above -{margin_depth}; inconclusive otherwise, or when either curve is flat in more than "
    "(1 - {level})/2 of the resamples. Three separate claim ids, no correction across them: the "
    "primary one carries 'the gates reduce the misalignment'.")


@_rule(C3_MISALIGNMENT_RULE.replace("{after}", "after_layers"), C3_MISALIGNMENT_RANK_RULE,
       C3_EMERGENCE_RULE.replace("{metric}", "emergence_metric"))
def c3_misalignment(before: Mapping[str, Any], after: Mapping[str, Any], *, after_layers: Sequence[int],
                    model: str, variant: str | None, loss_before=None, loss_after=None,
                    emergence_metric: str = "top1", start: int = 1, margin_logprob: float = MISALIGNMENT_MARGINS["logprob"],
                    margin_logrank: float = MISALIGNMENT_MARGINS["logrank"], margin_depth: float = MISALIGNMENT_MARGINS["depth"], n_boot: int = 1000,
                    seed: int = 0, level: float = LEVEL, source: str = "") -> list[VerdictRow]:
    """Misalignment measured directly, before vs after an edit, paired per window.

    ``before``/``after``: lens per-window curves ``[n_windows, L+1]`` of the same windows without and
    with the edit, with keys ``logprob_input``, ``logrank_input`` and ``<emergence_metric>_next``
    (``LensResult.per_seq``). ``after_layers``: the residual states after the edited block (e.g.
    ``range(b + 1, L + 1)`` for block ``b``). ``loss_before``/``loss_after``: optional per-window
    losses, reported beside the rows.
    """
    if emergence_metric not in DEPTH_METRICS:
        raise ValueError(f"emergence_metric must be one of {list(DEPTH_METRICS)}, got {emergence_metric!r}")
    need = ["logprob_input", "logrank_input", f"{emergence_metric}_next"]
    for name, dct in (("before", before), ("after", after)):
        missing = [k for k in need if k not in dct]
        if missing:
            raise ValueError(f"{name} lacks {missing}: run the lens with metrics logprob, logrank and "
                             f"{emergence_metric}")
    b = {k: _arr(before[k], f"before[{k}]", 2) for k in need}
    a = {k: _arr(after[k], f"after[{k}]", 2) for k in need}
    shape = b[need[0]].shape
    if any(x.shape != shape for x in (*b.values(), *a.values())):
        raise ValueError("before and after curves must all be [n_windows, L+1] of the same windows")
    n, L = shape[0], shape[1] - 1
    idx = [int(l) for l in after_layers]
    if not idx or min(idx) < 1 or max(idx) > L:
        raise ValueError(f"after_layers must be residual states within 1..{L} (after the edited block)")
    details: dict[str, Any] = {"after_layers": idx}
    if loss_before is not None and loss_after is not None:
        details["loss_change"] = stats.paired_delta(_arr(loss_after, "loss_after", 1),
                                                    _arr(loss_before, "loss_before", 1), n_boot=n_boot,
                                                    seed=seed, level=level)
    who = dict(model=model, variant=variant, source=source)
    p = dict(after=f"h_{idx[0]}..h_{idx[-1]}" if idx == list(range(idx[0], idx[-1] + 1)) else str(idx),
             level=level, margin_logprob=margin_logprob, margin_logrank=margin_logrank,
             margin_depth=margin_depth, metric=emergence_metric, start=start)
    rows = []
    for key, cid, sign, margin, stat_name, template in (
            ("logprob_input", "C3.misalignment", -1, margin_logprob,
             "input-token lens log-prob after the edited block, with - without (nats)", C3_MISALIGNMENT_RULE),
            ("logrank_input", "C3.misalignment.rank", 1, margin_logrank,
             "input-token log10 rank after the edited block, with - without", C3_MISALIGNMENT_RANK_RULE)):
        d = a[key][:, idx].mean(1) - b[key][:, idx].mean(1)
        m, lo, hi = stats.bootstrap_mean(d, n_boot=n_boot, seed=seed, level=level)
        v, why = improvement_outcome(lo, hi, sign=sign, margin=margin, estimate=m)
        rows.append(_row(cid, **who, verdict=v, why=why,
                         statistic=stat_name, estimate=m, lo=lo, hi=hi, level=level, n=n,
                         rule=template.format(**p),
                         details={**details, "before": float(b[key][:, idx].mean()),
                                  "after": float(a[key][:, idx].mean()), "margin": margin}))
    key = f"{emergence_metric}_next"
    sh = stats.paired_halfway_shift(b[key], a[key], n_layers=L, start=start, n_boot=n_boot, seed=seed,
                                    level=level)
    if sh["relative"] is None or sh["frac_undefined"] > (1 - level) / 2:
        v, why = INCONCLUSIVE, f"a curve is flat in {sh['frac_undefined']:.0%} of the resamples (no half-way depth)"
    else:
        v, why = improvement_outcome(sh["relative_lo"], sh["relative_hi"], sign=-1, margin=margin_depth,
                                     estimate=sh["relative"])
    rows.append(_row("C3.emergence-shift", **who, verdict=v, why=why,
                     statistic=f"next-token emergence depth l/L ({emergence_metric}), with - without",
                     estimate=sh["relative"], lo=sh["relative_lo"], hi=sh["relative_hi"], level=level, n=n,
                     rule=C3_EMERGENCE_RULE.format(**p),
                     details={**details, "shift_layers": sh["estimate"], "before_layer": sh["before"],
                              "after_layer": sh["after"], "frac_undefined": sh["frac_undefined"],
                              "margin": margin_depth}))
    return rows


# --------------------------------------------------------------------------------------------
# Benchmarks paired by item (C3 and C4)
# --------------------------------------------------------------------------------------------


BENCH_RULE = (
    "{claim_id}. Per seed and task, the same items scored before and after (0/1 correct). Test: exact "
    "one-sided McNemar test on the discordant items (H1: after is less accurate), Holm correction "
    "across the tasks at family level {alpha}. Minimum detectable drop per task: (z_(1-{alpha}/m) + "
    "z_{power}) sqrt(p_d/n), m tasks, p_d the one-sided {alpha} Clopper-Pearson upper bound of the "
    "share of items whose correctness changed (the observed share is noisy at small n). Per-seed "
    "verdict: not reproduced if Holm rejects for any task (significantly worse); reproduced if none "
    "is rejected and every task's detectable drop is at most the materiality margin {margin} "
    "accuracy (a drop that large would have been seen with {power} power); inconclusive otherwise "
    "(an underpowered 'match'). Seeds combined by {how}. Shown: the accuracy change of the worst "
    "task (seed-averaged) with a two-sided {level} paired bootstrap CI over its items.")


def _benchmarks(before: Mapping[str, Any], after: Mapping[str, Any], *, claim_id: str, model: str,
                variant: str | None, alpha: float, margin: float, power: float, how: str, n_boot: int,
                seed: int, level: float, source: str) -> VerdictRow:
    tasks = list(after)
    if not tasks or set(before) != set(after):
        raise ValueError(f"before and after must score the same tasks, got {sorted(before)} and {sorted(after)}")
    data = {}
    for t in tasks:
        y = _per_seed(after[t], f"after[{t}]")
        x = _broadcast_seeds(_per_seed(before[t], f"before[{t}]", y.shape[1]), y.shape[0], f"before[{t}]")
        data[t] = (x, y)
    n_seeds = {data[t][1].shape[0] for t in tasks}
    if len(n_seeds) != 1:
        raise ValueError(f"every task needs the same seeds, got {sorted(n_seeds)} seeds")
    S, m = n_seeds.pop(), len(tasks)
    per_seed, per_task = [], {t: [] for t in tasks}
    for s in range(S):
        tests = [stats.mcnemar_exact(data[t][0][s], data[t][1][s], alternative="worse") for t in tasks]
        adj = stats.holm([r["p"] for r in tests])
        mdes = []
        for t, r, pa in zip(tasks, tests, adj):
            pd_up = stats.discordance_upper(r["n_discordant"], r["n"], level=1 - alpha)
            mde = stats.mde_paired_accuracy(pd_up, r["n"], alpha=alpha / m, power=power, sided="one")
            mdes.append(mde)
            per_task[t].append({**r, "p_holm": float(pa), "discordance_upper": pd_up, "mde": mde})
        if any(pa <= alpha for pa in adj):
            per_seed.append(NOT_REPRODUCED)
        elif all(x <= margin for x in mdes):
            per_seed.append(REPRODUCED)
        else:
            per_seed.append(INCONCLUSIVE)
    diffs = {t: (data[t][1] - data[t][0]).mean(axis=0) for t in tasks}  # per item, seed-averaged
    worst = min(tasks, key=lambda t: diffs[t].mean())
    m_, lo, hi = stats.bootstrap_mean(diffs[worst], n_boot=n_boot, seed=seed, level=level)
    rule = BENCH_RULE.format(claim_id=claim_id, alpha=alpha, power=power, margin=margin, how=how, level=level)
    max_mde = max(c["mde"] for cs in per_task.values() for c in cs)
    verdict, why = stats.combine_verdicts(per_seed, how=how), ""
    reach = bench_reach({t: data[t][1].shape[1] for t in tasks}, alpha=alpha, power=power, margin=margin)
    if verdict == INCONCLUSIVE:
        why = (reach["why"] if not reach["reachable"] else
               "seeds disagree" if len(set(per_seed)) > 1 else
               f"underpowered: detectable drop up to {max_mde:.3f} > margin {margin:g}")
    return _row(claim_id, model=model, variant=variant, verdict=verdict,
                statistic=f"accuracy after - before, worst task ({worst}), seed-averaged",
                estimate=m_, lo=lo, hi=hi, level=level, n=len(diffs[worst]), rule=rule, per_seed=per_seed,
                source=source,
                details={"tasks": per_task, "mde": max_mde, "mde_unit": "accuracy", "margin": margin,
                         "combine": how, "worst_task": worst, "why": why, "reach": reach})


def bench_reach(items: Mapping[str, int], *, alpha: float = TEST_ALPHA, power: float = POWER,
                margin: float = BENCH_MARGIN) -> dict[str, Any]:
    """Can the benchmark rule say "reproduced" with these items per task? Only if even the best case
    -- no item changes its answer, so the changed-answer rate is at its Clopper-Pearson upper bound for
    0 of n -- gives a detectable drop within ``margin`` for every task. Returns ``reachable``, the
    best-case drop per task, the items per task that would reach the margin, and ``why``."""
    m = len(items)
    best = {t: stats.mde_paired_accuracy(stats.discordance_upper(0, n, level=1 - alpha), n, alpha=alpha / m,
                                         power=power, sided="one") for t, n in items.items()}
    n = 1
    while n < 10**7:  # smallest n whose best case reaches the margin (monotone in n)
        if stats.mde_paired_accuracy(stats.discordance_upper(0, n, level=1 - alpha), n, alpha=alpha / m,
                                     power=power, sided="one") <= margin:
            break
        n = int(n * 1.05) + 1
    ok = all(v <= margin for v in best.values())
    fewest = min(items.values())
    why = "" if ok else (f"not assessable at this profile: with {fewest} items per task even no changed answer "
                         f"leaves a detectable drop of {max(best.values()):.3f} > margin {margin:g}; at least "
                         f"~{n} items per task (more when answers change) would assess it")
    return {"reachable": ok, "best_case_drop": best, "items_needed_at_best": n, "why": why}


def benchmark_items_needed(row: VerdictRow, *, alpha: float = TEST_ALPHA, power: float = POWER) -> tuple[dict, int]:
    """For a benchmark row (:func:`c3_benchmarks` / :func:`c4_benchmarks`): the task and seed with the
    largest minimum detectable drop, and about how many items per task would bring that drop down to
    the rule's margin (McNemar at the Holm level across the row's tasks, the changed-answer rate held
    at its upper bound)."""
    tasks = row.details["tasks"]
    worst = max((c for cs in tasks.values() for c in cs), key=lambda c: c["mde"])
    need = stats.n_for_mde(row.details["margin"], float(np.sqrt(worst["discordance_upper"])),
                           alpha=alpha / len(tasks), power=power)
    return worst, need


@_rule(BENCH_RULE.replace("{claim_id}", "C3.benchmarks"))
def c3_benchmarks(before: Mapping[str, Any], after: Mapping[str, Any], *, model: str, variant: str | None,
                  alpha: float = TEST_ALPHA, margin: float = BENCH_MARGIN, power: float = POWER, how: str = "unanimous",
                  n_boot: int = 1000, seed: int = 0, level: float = LEVEL, source: str = "") -> list[VerdictRow]:
    """Gates on a frozen model: benchmarks before vs after, paired by item.

    ``before``: task -> ``[n_items]`` 0/1 correctness of the unmodified model; ``after``: task ->
    ``[n_items]`` or ``[n_seeds, n_items]`` with each seed's gates, the same items in the same order.
    """
    return [_benchmarks(before, after, claim_id="C3.benchmarks", model=model, variant=variant, alpha=alpha,
                        margin=margin, power=power, how=how, n_boot=n_boot, seed=seed, level=level,
                        source=source)]


@_rule(BENCH_RULE.replace("{claim_id}", "C4.benchmarks"))
def c4_benchmarks(before: Mapping[str, Any], after: Mapping[str, Any], *, model: str, variant: str | None,
                  alpha: float = TEST_ALPHA, margin: float = BENCH_MARGIN, power: float = POWER, how: str = "unanimous",
                  n_boot: int = 1000, seed: int = 0, level: float = LEVEL, source: str = "") -> list[VerdictRow]:
    """Trained models: the attenuated (or gated) model vs the baseline, paired per item and per seed.

    ``before``, ``after``: task -> ``[n_seeds, n_items]`` 0/1 correctness (seed s of the variant is
    paired with seed s of the baseline: same data order and initialisation), the same items.
    """
    return [_benchmarks(before, after, claim_id="C4.benchmarks", model=model, variant=variant, alpha=alpha,
                        margin=margin, power=power, how=how, n_boot=n_boot, seed=seed, level=level,
                        source=source)]
