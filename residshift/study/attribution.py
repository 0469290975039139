"""Notebook 09: which sublayer removes the input token (glue, tables, figure).

The measurement is :mod:`residshift.measure.attribution` (read its docstring for the
decomposition ``delta_l = attn_l + mlp_l (+ skip_l) + rescale_l`` of the change of the centred,
pre-softcap lens logit across block ``l``). Here:

- :func:`pretrained`: the attribution on each model of ``P.models`` (``attr_*`` windows, cached);
- :func:`chosen_cut`, :func:`trained_variants`, :func:`trained`: the same on
  the GPTs of notebooks 06-08 (the baseline, the lowest-loss fixed cut, the learned gates; every
  seed), on WikiText-2 test windows of the training context;
- :func:`window_table` (pretrained: mean over windows, percentile bootstrap CI over windows) and
  :func:`seed_table` (trained: per-seed means over windows, mean and t-interval across seeds: the
  seed is the unit of replication), one long table format for both;
- :func:`block_panel` (the figure; :func:`table_from_numbers` rebuilds its table from the numbers it
  saved), :func:`check_table` (the decomposition's closure, measured) and :func:`who_table` (per
  model, where the input token falls most and which part removes it there, from a table only).

The figure's axes are linear, so the stacked bars of a block add up to its change (the dot): where one
block's bars dwarf the rest (:data:`OWN_SCALE` times the median block), that block moves to a narrow
panel on the left of its row with its own linear axis, instead of a log scale that would break the sum.
Colours name sublayers (:data:`COLORS`), never a token: attention blue, MLP purple, the skip edit
pink, norm rescaling dark grey (hatched). None is a colour of ``plotting.PALETTE``, whose green and
orange mean the input and the next token in every figure of the study.

Table format: one row per ``(model, which, term, block)`` with ``estimate``, ``lo``, ``hi``, ``n``,
``unit``; ``term`` in :data:`TABLE_TERMS` (``attn_minus_mlp`` is the paired difference, for the
comparison "attention or MLP?"), ``which`` in ``("input", "next")``.
"""
from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.ticker import MaxNLocator
from scipy import stats as _sp

from ..analysis import stats
from ..analysis.stats import as_numpy
from ..core.models import load_model
from ..measure import attribution as A
from . import training
from .plotting import integer_axis

NAME = "09-who-removes-the-input-token"
TABLE_TERMS = ("attn", "mlp", "skip", "rescale", "delta", "attn_minus_mlp")
STACKED = ("attn", "mlp", "skip", "rescale")  # the bars; delta is the dot they add up to
LABELS = {"attn": "attention", "mlp": "MLP", "skip": "skip edit (alpha - 1) x", "rescale": "norm rescaling",
          "delta": "change of the lens logit", "attn_minus_mlp": "attention - MLP"}
# Sublayer colours: none is a PALETTE role colour (green input, orange next, light grey other).
COLORS = {"attn": "#1f78b4", "mlp": "#7570b3", "skip": "#e7298a", "rescale": "#737373"}
OWN_SCALE = 10.0  # a block whose bars reach this many times the median block gets its own panel
COLUMNS = ["model", "which", "term", "block", "estimate", "lo", "hi", "n", "unit"]


class AttributionStudyError(ValueError):
    """Bad input to the notebook glue; the message names the fix."""


# ============================================================================================
# Running the measurement
# ============================================================================================


def pretrained(P, names: Sequence[str] | None = None, *, verbose: bool = True) -> dict[str, A.AttributionResult]:
    """``{model: result}``: :func:`attribution.run_attribution` on each of ``P.models`` (cached),
    ``attr_windows`` windows of ``attr_window`` tokens of ``attr_corpus`` / ``attr_split``."""
    out = {}
    for name in (P.models if names is None else names):
        lm, tok, info = load_model(name, device=P.device)
        t0 = time.perf_counter()
        out[name] = A.run_attribution(lm, info, tok, corpus=P.attr_corpus, split=P.attr_split,
                                      window=int(P.attr_window), n=int(P.attr_windows), seed=P.seed,
                                      batch=int(P.attr_batch), positions=P.attr_positions)
        if verbose:
            r = out[name]
            print(f"{name}: {r.n_seq} windows x {r.n_positions} positions, {r.n_layers} blocks, "
                  f"{r.norm} final norm, soft-cap {info.logit_softcap}; {time.perf_counter() - t0:.0f} s "
                  f"here ({r.seconds:.0f} s when computed)")
    return out


def fixed_cuts(P) -> list[str]:
    """The names of the grid's fixed cuts (what :func:`chosen_cut` chooses from)."""
    return [training.fixed_name(a, l) for a, l in training.cut_cells(P)]


def chosen_cut(P) -> dict[str, Any]:
    """The lowest-loss fixed cut, chosen by notebook 07's rule (:func:`training.best_cut` on the same
    cached per-window final evaluations), among the fixed cuts only: this notebook needs a cut whose
    skip edit it can attribute, even where the baseline's loss is lower. The cuts' runs come from
    :func:`training.train_grid` (finished runs reused, missing ones trained)."""
    cuts = fixed_cuts(P)
    if not cuts:
        raise AttributionStudyError("the grid has no fixed cut (train_cut_alphas / train_cut_layers)")
    runs = training.train_grid(P, only=cuts, verbose=False)
    return training.best_cut(training.final_evals(runs, P), P, candidates=cuts)


def trained_variants(P, cut: Mapping[str, Any]) -> list[str]:
    """The trained models compared: the baseline, the chosen cut and the learned gates of the grid."""
    return list(dict.fromkeys(["baseline", cut["variant"], *[v for v in P.train_variants if v in training.GATED_MODES]]))


def trained(runs: Mapping[tuple[str, int], Path], P, names: Sequence[str], *,
            verbose: bool = True) -> dict[tuple[str, int], A.AttributionResult]:
    """The attribution on each final model of ``names`` x seeds: ``attr_train_windows`` WikiText-2
    test windows of the training context (notebook 08's lens windows), every position analysed."""
    out = {}
    t0 = time.perf_counter()
    for name in names:
        for s in training.seeds(P):
            lm, tok, info = load_model(str(runs[(name, s)] / "model"), device=P.device)
            out[(name, s)] = A.run_attribution(lm, info, tok, corpus=training.LENS_CORPUS, split=training.LENS_SPLIT,
                                               window=int(P.train_context), n=int(P.attr_train_windows),
                                               seed=P.seed, batch=8)
    if verbose:
        r = next(iter(out.values()))
        print(f"{len(out)} trained models x {r.n_seq} windows x {r.n_positions} positions "
              f"({training.LENS_CORPUS} {training.LENS_SPLIT}); {time.perf_counter() - t0:.0f} s")
    return out


# ============================================================================================
# Tables
# ============================================================================================


def _terms(res: A.AttributionResult, which: str) -> dict[str, np.ndarray]:
    """``{term: [n_seq, L]}`` for one result (skip only where the model has gates)."""
    ps = {k: as_numpy(v) for k, v in res.per_seq.items()}
    out = {t: ps[f"{t}_{which}"] for t in (*res.components, "rescale", "delta")}
    out["attn_minus_mlp"] = ps[f"attn_{which}"] - ps[f"mlp_{which}"]
    return out


def _nan(x: float) -> float | None:
    return None if x is None or not math.isfinite(float(x)) else float(x)


def window_table(results: Mapping[str, A.AttributionResult], *, n_boot: int = 1000, seed: int = 0) -> pd.DataFrame:
    """Per model, token, term and block: the mean over windows and its percentile bootstrap CI
    (``stats.curve_ci``, windows as the unit, the same resamples for every term of a model)."""
    rows = []
    for model, res in results.items():
        for which in A.WHICH:
            for term, x in _terms(res, which).items():
                ci = stats.curve_ci(x, n_boot=n_boot, seed=seed)
                rows += [[model, which, term, b, float(ci.estimate[b]), float(ci.lo[b]), float(ci.hi[b]),
                          x.shape[0], "windows"] for b in range(x.shape[1])]
    return pd.DataFrame(rows, columns=COLUMNS)


def t_interval(x: Sequence[float], level: float = 0.95) -> tuple[float, float, float]:
    """Mean of ``x`` (one value per seed) and its two-sided t-interval (NaN with fewer than 2)."""
    x = np.asarray(x, dtype=np.float64)
    if x.size == 0:
        raise AttributionStudyError("no seeds to average")
    if x.size < 2:
        return float(x.mean()), float("nan"), float("nan")
    m, se = stats.mean_se(x)
    q = float(_sp.t.ppf((1 + level) / 2, x.size - 1))
    return m, m - q * se, m + q * se


def seed_table(results: Mapping[tuple[str, int], A.AttributionResult], *, level: float = 0.95) -> pd.DataFrame:
    """Per variant, token, term and block: each seed's mean over its windows, then the mean over
    seeds and its t-interval across seeds (the seed is the unit); ``per_seed`` holds the seeds' means."""
    by_name: dict[str, list] = {}
    for (name, s), res in results.items():
        by_name.setdefault(name, []).append((s, res))
    rows = []
    for name, items in by_name.items():
        items.sort(key=lambda p: p[0])
        for which in A.WHICH:
            per = [_terms(res, which) for _, res in items]
            for term in per[0]:
                means = np.stack([p[term].mean(0) for p in per])  # [S, L]
                for b in range(means.shape[1]):
                    m, lo, hi = t_interval(means[:, b], level)
                    rows.append([name, which, term, b, m, lo, hi, len(items), "seeds",
                                 [round(float(v), 4) for v in means[:, b]]])
    return pd.DataFrame(rows, columns=[*COLUMNS, "per_seed"])


def check_table(results: Mapping[Any, A.AttributionResult]) -> pd.DataFrame:
    """How well the decomposition closes, measured per model: the final norm read, whether the logit
    is centred, the largest relative gap ``|h_{l+1} - (h_l + attn + mlp + skip)| / max |h_{l+1}|``
    and the largest ``|delta - (attn + mlp + skip + rescale)|`` of any position (logit units)."""
    rows = []
    for key, r in results.items():
        rows.append({"model": key if isinstance(key, str) else f"{key[0]}, seed {key[1]}", "norm": r.norm,
                     "centred": r.centre, "windows": r.n_seq, "positions": r.n_positions,
                     "stream closure (rel.)": r.closure, "logit closure": r.max_closure_logit})
    return pd.DataFrame(rows).set_index("model")


def _check(table: pd.DataFrame) -> pd.DataFrame:
    miss = [c for c in COLUMNS if c not in table.columns]
    if miss:
        raise AttributionStudyError(f"the table lacks columns {miss}: pass window_table(...) or seed_table(...)")
    return table


# ============================================================================================
# The figure
# ============================================================================================


def block_panel(table: pd.DataFrame, models: Sequence[str] | None = None, *, title: str = ""):
    """One row per model, one column per token (input, next): per block, the terms of the change of
    the token's lens logit as diverging stacked bars (positive parts up, negative down, so a block's
    bars add up to the change), and the change itself (dot, with its CI), on linear axes. A block that
    dwarfs the others (:func:`own_scale_blocks`) is drawn in a narrow panel of its own on the left.
    Returns ``(fig, numbers)``."""
    table = _check(table)
    models = list(dict.fromkeys(table.model)) if models is None else list(models)
    unknown = [m for m in models if m not in set(table.model)]
    if unknown:
        raise AttributionStudyError(f"{unknown} not in the table; it holds {sorted(set(table.model))}")
    fig = plt.figure(figsize=(11, 0.9 + 2.9 * len(models)))
    grid = fig.add_gridspec(len(models), 2, wspace=0.18, hspace=0.55)
    numbers: dict[str, Any] = {}
    for i, model in enumerate(models):
        for j, which in enumerate(A.WHICH):
            t = table[(table.model == model) & (table.which == which)]
            own = own_scale_blocks(t)
            rest = [b for b in sorted(set(t.block)) if b not in own]
            if own:
                wide = max(0.4 + 0.8 * len(own), 0.14 * len(rest))  # readable beside 30 blocks too
                sub = grid[i, j].subgridspec(1, 2, width_ratios=[wide, len(rest)], wspace=0.3)
                big, ax = fig.add_subplot(sub[0, 0]), fig.add_subplot(sub[0, 1])
                _draw(big, t[t.block.isin(own)], categorical=True)
                big.set_title("own scale", fontsize=8, color="0.3")
                _frame(big, ylabel=j == 0, xlabel=False)
            else:
                ax, big = fig.add_subplot(grid[i, j]), None
            numbers.setdefault(model, {})[which] = _numbers_of(t)
            _draw(ax, t[t.block.isin(rest)])
            integer_axis(ax, "x")
            ax.set_xlim(-0.6, max(t.block) + 0.6)
            _frame(ax, ylabel=j == 0 and big is None, xlabel=i == len(models) - 1)
            ax.set_title(f"{model}: {which} token", fontsize=10)
    handles, labels = [], []
    for ax in fig.axes:  # a term that only some models have (the skip edit)
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    order = [LABELS[t] for t in (*STACKED, "delta") if LABELS[t] in labels]
    handles = [handles[labels.index(lab)] for lab in order]
    fig.legend(handles, order, loc="upper center", ncol=len(order), fontsize=8, frameon=False,
               bbox_to_anchor=(0.5, 1.0 - 0.15 / fig.get_figheight()))
    if title:
        fig.suptitle(title, y=1.0 + 0.2 / fig.get_figheight(), fontsize=11)
    fig.subplots_adjust(left=0.08, right=0.99, bottom=0.55 / fig.get_figheight() + 0.02,
                        top=1.0 - 0.75 / fig.get_figheight())
    return fig, numbers


def own_scale_blocks(t: pd.DataFrame) -> list[int]:
    """The blocks of one (model, token) table whose bars (or change) reach :data:`OWN_SCALE` times the
    median block's, when they are fewer than half the blocks; else none (one linear axis suffices)."""
    tall = _heights(t)
    if not tall:
        return []
    typical = float(np.median(list(tall.values())))
    own = [b for b, h in tall.items() if typical > 0 and h > OWN_SCALE * typical]
    return own if len(own) < len(tall) / 2 else []


def _heights(t: pd.DataFrame) -> dict[int, float]:
    """Per block: the taller of the positive stack, the negative stack and the change's CI reach."""
    out: dict[int, float] = {}
    for b, r in t.groupby("block"):
        y = r[r.term.isin(STACKED)].estimate.to_numpy(dtype=float)
        d = r[r.term == "delta"][["estimate", "lo", "hi"]].to_numpy(dtype=float).ravel()
        out[int(b)] = float(np.nanmax(np.abs(np.concatenate([[y.clip(0).sum(), -y.clip(None, 0).sum()], d]))))
    return out


def _frame(ax, *, ylabel: bool, xlabel: bool) -> None:
    ax.axhline(0, color="black", lw=0.6)
    ax.yaxis.set_major_locator(MaxNLocator(nbins=5, steps=[1, 2, 2.5, 5, 10], min_n_ticks=3))
    ax.tick_params(labelsize=9)
    if ylabel:
        ax.set_ylabel("lens logit (centred)")
    if xlabel:
        ax.set_xlabel("block l (h_l -> h_l+1)")


def _numbers_of(t: pd.DataFrame) -> dict[str, Any]:
    out = {term: _row_numbers(t[t.term == term].sort_values("block")) for term in STACKED
           if not t[t.term == term].empty}
    out["delta"] = _row_numbers(t[t.term == "delta"].sort_values("block"))
    return out


def _draw(ax, t: pd.DataFrame, *, categorical: bool = False) -> None:
    """The stacked bars and the change of the blocks of ``t``; ``categorical``: at 0, 1, ... labelled
    with their block numbers (the own-scale panel), else at their block number."""
    blocks = sorted(set(t.block))
    where = {b: (k if categorical else b) for k, b in enumerate(blocks)}
    pos = np.zeros(len(blocks))
    neg = np.zeros(len(blocks))
    for term in STACKED:
        r = t[t.term == term].sort_values("block")
        if r.empty:
            continue
        x = np.array([where[b] for b in r.block])
        y = r.estimate.to_numpy(dtype=float)
        base = np.where(y >= 0, pos, neg)
        ax.bar(x, y, bottom=base, color=COLORS[term], width=0.8, label=LABELS[term],
               hatch="//" if term == "rescale" else None, edgecolor="white", lw=0.3)
        pos, neg = pos + np.clip(y, 0, None), neg + np.clip(y, None, 0)
    d = t[t.term == "delta"].sort_values("block")
    lo, hi = d.lo.to_numpy(dtype=float), d.hi.to_numpy(dtype=float)
    est = d.estimate.to_numpy(dtype=float)
    err = None if np.isnan(lo).all() else np.abs(np.stack([est - lo, hi - est]))
    ax.errorbar([where[b] for b in d.block], est, yerr=err, fmt="o", color="black", ms=3.5, lw=1,
                label=LABELS["delta"])
    if categorical:
        ax.set_xticks(range(len(blocks)), [str(b) for b in blocks])
        ax.set_xlim(-0.6, len(blocks) - 0.4)


def table_from_numbers(numbers: Mapping[str, Any], *, unit: str = "windows") -> pd.DataFrame:
    """The table :func:`block_panel` draws, rebuilt from the numbers it returned (or saved beside its
    figure): ``{model: {which: {term: {"estimate", "lo", "hi"}}}}``; ``n`` is unknown there (0)."""
    rows = []
    for model, by_which in numbers.items():
        for which, terms in by_which.items():
            for term, v in terms.items():
                rows += [[model, which, term, b, *(np.nan if v[k][b] is None else v[k][b]
                                                   for k in ("estimate", "lo", "hi")), 0, unit]
                         for b in range(len(v["estimate"]))]
    return pd.DataFrame(rows, columns=COLUMNS)


def _row_numbers(r: pd.DataFrame) -> dict[str, list]:
    return {k: [_nan(v) for v in r[k]] for k in ("estimate", "lo", "hi")}


# ============================================================================================
# Who removes the input token: one row per model
# ============================================================================================


def _compare(diff) -> str:
    """attention - MLP at one block -> which removes more (a CI that excludes 0) or undecided."""
    lo, hi = _nan(diff.lo), _nan(diff.hi)
    if lo is None or hi is None:
        return "undecided"
    return "attention" if hi < 0 else "MLP" if lo > 0 else "undecided"


def who_table(table: pd.DataFrame, *, models: Sequence[str] | None = None) -> pd.DataFrame:
    """Per model, from the table alone (input token), numbers in their own columns:

    - ``block``: the block where the input token's lens logit falls most (the most negative ``delta``), with
      ``change``, ``change lo``, ``change hi``; there the parts ``attention``, ``MLP``, ``skip edit`` (NaN
      without gates) and ``rescaling``, ``largest negative`` (the most negative of those parts, or ``none``)
      and ``more negative`` (``attention`` / ``MLP`` where the CI of their paired difference excludes 0,
      else ``undecided``);
    - ``most negative sublayer``: the sublayer contribution (attention, MLP or skip edit, any block) with the
      most negative estimate whose CI lies below 0 (``none`` if no CI does), its ``at block``, ``estimate``,
      ``lo``, ``hi``;
    - ``blocks falling``: at how many blocks ``delta``'s CI lies below 0, and among those where the attention
      (``attention more``) or the MLP (``MLP more``) removes more, or neither can be told apart
      (``undecided``); where the table has no ``attn_minus_mlp`` rows (one rebuilt by
      :func:`table_from_numbers`), ``more negative`` is ``–`` and the three counts NaN;
    - ``n``, ``unit``: the windows or seeds behind the intervals.
    """
    table = _check(table)
    models = list(dict.fromkeys(table.model)) if models is None else list(models)
    out = []
    for model in models:
        t = table[(table.model == model) & (table.which == "input")]
        if t.empty:
            raise AttributionStudyError(f"no input-token rows for {model!r} in the table")
        terms = {k: t[t.term == k].set_index("block") for k in ("delta", "attn", "mlp", "skip", "rescale", "attn_minus_mlp")}
        delta = terms["delta"]
        b = int(delta.estimate.idxmin())
        at_b = {k: float(terms[k].loc[b].estimate) for k in STACKED if not terms[k].empty}
        lowest = min(at_b, key=at_b.get)
        subl = t[t.term.isin(("attn", "mlp", "skip"))]
        below = subl[subl.hi.map(lambda h: _nan(h) is not None and h < 0)]  # CI below 0
        sure = below.loc[below.estimate.idxmin()] if not below.empty else None
        drops = [int(k) for k, r in delta.iterrows() if _nan(r.hi) is not None and r.hi < 0]
        paired = not terms["attn_minus_mlp"].empty  # a table rebuilt from a figure's numbers lacks the difference
        votes = [_compare(terms["attn_minus_mlp"].loc[k]) for k in drops] if paired else []
        out.append({
            "model": model, "block": b, "change": float(delta.loc[b].estimate), "change lo": _nan(delta.loc[b].lo),
            "change hi": _nan(delta.loc[b].hi), "attention": at_b["attn"], "MLP": at_b["mlp"],
            "skip edit": at_b.get("skip", np.nan), "rescaling": at_b["rescale"],
            "largest negative": LABELS[lowest] if at_b[lowest] < 0 else "none",
            "more negative": _compare(terms["attn_minus_mlp"].loc[b]) if paired else "–",
            "most negative sublayer": "none" if sure is None else LABELS[sure.term],
            "at block": np.nan if sure is None else int(sure.block),
            "estimate": np.nan if sure is None else float(sure.estimate),
            "lo": np.nan if sure is None else _nan(sure.lo), "hi": np.nan if sure is None else _nan(sure.hi),
            "blocks falling": len(drops), **{k: votes.count(v) if paired else np.nan for k, v in (
                ("attention more", "attention"), ("MLP more", "MLP"), ("undecided", "undecided"))},
            "n": int(t.n.iloc[0]), "unit": t.unit.iloc[0]})
    return pd.DataFrame(out).set_index("model")
