"""Notebook 03's glue and figures: alignment curves over a corpus, the C1 verdicts, and what moves them.

The notebook orchestrates; everything it computes or draws is a call into this module:

- **compute** (cached by the modules that own the results): :func:`lens_passes` (``lens.run_lens`` with the profile's ``lens_*`` keys), :func:`token_counts` and
  :func:`unigram_baselines` (the frequency decoder C1 is judged against), :func:`sensitivity_passes`
  (BOS on/off, raw vs detokenized WikiText), :func:`fit_tuned_lenses` / :func:`tuned_passes`,
  :func:`causal_profiles`;
- **adapters** from lens results to the arrays the C1 rules take (:func:`c1_arrays`,
  :func:`depth_curves`) and the rules applied (:func:`c1_rows`, rules in
  :mod:`residshift.analysis.verdicts`);
- **tables**: :func:`verdict_table`, :func:`extremes_table`, :func:`transition_rows`,
  :func:`shift_table_frame`, :func:`tuned_training_table`, :func:`causal_vs_lens`,
  :func:`sensitivity_table`, :func:`crossing_table`, :func:`depth_sensitivity_table`,
  :func:`causal_evidence_table`;
- **figures**, each returning ``(fig, numbers)`` for ``plotting.publish``: :func:`metrics_panel`,
  :func:`c1_panel`, :func:`shift_depth_panel`, :func:`sensitivity_panel`, :func:`token_group_panel`,
  :func:`tuned_panel`, :func:`causal_panel` (drawn by :func:`causal_figure`, which takes its numbers).

Every function that takes ``P`` (the resolved profile) reads only keys the notebook's
``parameters`` cell declares (a test checks it).
"""
from __future__ import annotations

import time
from typing import Any, Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from ..analysis import stats, verdicts
from ..analysis.stats import as_numpy
from ..core import cache, profiles
from ..measure import causal, lens, tuned_lens
from . import lens_setups
from .plotting import PALETTE, integer_axis

NAME = "03-alignment-curves"
PAPER_REF = {"model": "Gemma-2-2B (paper)", "layer": 17, "n_layers": 26, "relative": 17 / 26}
DEPTH_METRICS = tuple(verdicts.DEPTH_METRICS)  # metrics whose half-way depth means something
# Panels whose layer-0 value is far from every other layer's (the embedding itself is not normed
# like a residual, and the next token's log-prob there is hundreds of nats down): drawn from h_1.
FROM_LAYER_1 = ("logprob", "proj", "kl_final")
LABEL = {"rank": "rank (median, log scale; 1 = top)", "logrank": r"$\log_{10}$ rank (0 = top)", "logprob": "log-prob (nats)",
         "prob": "probability", "top1": "top-1 match rate", "cos_raw": r"$\cos(h, e)$ raw",
         "cos_norm": r"$\cos(N(h), e)$", "cos_centred": "cos centred",
         "proj": r"projection of $N(h)$ on $e/\|e\|$", "entropy": "entropy (nats)",
         "kl_final": r"KL(final $\|$ layer) (nats)"}
# Colours for categories (token types, frequency bins, settings): none is the input/next colour.
CATEGORY = ("#0173b2", "#cc78bc", "#ca9161", "#5e3c99", "#56b4e9", "#000000")
MODEL_STYLE = ("-", "--", ":", "-.")
DECODER_STYLE = {"logit lens": "-", "tuned lens": "--"}
SETTINGS = ("as trained", "BOS flipped", "raw WikiText")
TUNED_METRICS = ("top1", "prob", "logrank")
SENSITIVITY_METRICS = ("top1", "prob", "logrank")
MIN_GROUP_TOKENS = 20
RANK_METRICS = ("rank", "logrank")  # drawn on inverted axes (rank 1 on top) in every figure



def _style(names) -> dict[str, str]:
    return {n: MODEL_STYLE[i % len(MODEL_STYLE)] for i, n in enumerate(names)}


def _symlog(ax, values, linthresh: float) -> None:
    """A symmetric log y-scale (linear within +-linthresh) where the data span more than 20x that,
    else a linear one (a symlog axis over tiny values draws unreadable ticks)."""
    v = np.abs(np.asarray(values, dtype=np.float64))
    if v.size and np.nanmax(v) > 20 * linthresh:
        ax.set_yscale("symlog", linthresh=linthresh)



def _rel(e) -> str:
    return stats.format_ci(e.relative, *e.relative_ci, 2)


# --------------------------------------------------------------------------------------------
# Compute (cached by the modules that own the results)
# --------------------------------------------------------------------------------------------


def lens_pass(loaded, P, *, metrics=None, decoder=None, decoder_id: str | None = None,
              bos: bool | None = None, detokenize: bool = True, n: int | None = None):
    """One cached ``lens.run_lens`` pass over the profile's ``lens_*`` windows (``lens_setups.pretrained``)."""
    p = lens_setups.pretrained(P)
    return p.with_(n=p.n if n is None else n).run(loaded, metrics=metrics, decoder=decoder, decoder_id=decoder_id,
                                                   bos=bos, detokenize=detokenize)


def lens_passes(models: Mapping[str, Any], P, *, verbose: bool = True) -> dict[str, Any]:
    """The logit lens, every metric, over the profile's windows: ``{name: LensResult}``."""
    out = {}
    for name, loaded in models.items():
        t0 = time.perf_counter()
        out[name] = r = lens_pass(loaded, P)
        if verbose:
            print(f"{name}: {r.n_seq} windows x {P.lens_window} tokens, {r.tokens['cur'].numel()} analysed "
                  f"positions, {r.n_layers} layers (h_0..h_{r.n_layers}); this call "
                  f"{time.perf_counter() - t0:.0f} s (computing it took {r.seconds:.0f} s)")
    return out


def token_counts(models: Mapping[str, Any], P, *, detokenize: bool = True) -> dict[str, np.ndarray]:
    """Token-id counts of the lens corpus split under each model's tokenizer."""
    return {name: lens.corpus_token_counts(tok, info, P.lens_corpus, P.lens_split, detokenize=detokenize)
            for name, (lm, tok, info) in models.items()}


def unigram_baselines(results: Mapping[str, Any], counts: Mapping[str, np.ndarray]) -> dict[str, dict]:
    """Per model, the unigram decoder on the analysed positions (``lens.unigram_baseline``)."""
    return {name: lens.unigram_baseline(res, counts[name]) for name, res in results.items()}


def first_windows(result, k: int | None):
    """The same lens result restricted to its first ``k`` windows (``token_windows`` draws windows so
    that the first ``k`` are the same whatever ``n >= k`` was asked: a pass on ``k`` windows sees them)."""
    if k is None or k >= result.n_seq:
        return result
    if k < 2:
        raise ValueError(f"keep at least 2 windows for a bootstrap, got {k}")
    keep = result.tokens["seq"] < k
    tokens = {key: ({c: t[:, keep] for c, t in v.items()} if key == "layers" else v[keep])
              for key, v in result.tokens.items()}
    return lens.LensResult(result.model, result.n_layers, list(result.columns),
                           {c: v[:k] for c, v in result.per_seq.items()},
                           {c: v[:k] for c, v in result.per_seq_median.items()}, tokens,
                           {**result.config, "n": k}, result.seconds)


def _flip(loaded) -> bool:
    return not loaded[2].prepend_bos


def sensitivity_passes(models: Mapping[str, Any], P, results: Mapping[str, Any]) -> dict[str, dict]:
    """``{name: {setting: LensResult}}`` for :data:`SETTINGS`; "as trained" is the main pass.

    "BOS flipped" starts every window with BOS when the model was trained without one (SmolLM2) and
    drops it when it was trained with one (Gemma); "raw WikiText" feeds the word-tokenized v1 text
    (" @-@ ", " , ") instead of our detokenized text. The first ``lens_check_windows`` windows of the
    main pass's draw (same seed and analysed positions); "as trained" is the main pass restricted to them.
    """
    out = {}
    k = P.lens_check_windows
    for name, loaded in models.items():
        out[name] = {"as trained": first_windows(results[name], k),
                     "BOS flipped": lens_pass(loaded, P, metrics=SENSITIVITY_METRICS, bos=_flip(loaded), n=k),
                     "raw WikiText": lens_pass(loaded, P, metrics=SENSITIVITY_METRICS, detokenize=False, n=k)}
    return out


def fit_tuned_lenses(models: Mapping[str, Any], P, *, verbose: bool = True) -> tuple[dict, dict]:
    """Fit (or load) one tuned lens per model from the ``tuned_*`` keys: ``(lenses, reports)``.

    Each report carries the layers still improving when the step cap ended the fit
    (``tuned_lens.unconverged_layers(report)``: residual indices ``l`` of ``h_l``); results read
    through those translators are marked in :func:`tuned_panel` and kept out of the verdicts."""
    cfg = profiles.stage(tuned_lens.TunedLensConfig, P)
    lenses, reports = {}, {}
    for name, (lm, tok, info) in models.items():
        t0 = time.perf_counter()
        lenses[name], reports[name] = tuned_lens.fit_cached(lm, info, cfg, tok)
        if verbose:
            head = _convergence_note(reports[name]).split("\n")[0]  # the layers' reasons: not repeated here
            print(f"{name}: tuned lens ready ({_start_note(reports[name])}{head}; this call "
                  f"{time.perf_counter() - t0:.0f} s)")
    return lenses, reports


def _start_note(rep: Mapping[str, Any]) -> str:
    """Where the fit started and, per layer, which state it kept (``tuned_lens.kept_states``)."""
    start, kept = rep.get("start") or {}, rep.get("kept")
    if start.get("init") != "lstsq":
        return ""
    text = f"closed-form start on {start['windows']} windows in {start['seconds']:.0f} s"
    if kept:
        text += f", kept at {kept.count('start')} of {len(kept)} layers (KL refinement did not beat it)"
    return text + "; "


def _convergence_note(rep: Mapping[str, Any]) -> str:
    """How a fit ended, from its report: early stop, or the cap with the layers still improving."""
    steps = rep.get("steps")
    unconverged = tuned_lens.unconverged_layers(rep)
    if rep.get("stopped_early"):
        return f"{steps} steps: every layer converged, stopped early"
    if not unconverged:
        return f"{steps} steps, the cap: every layer converged"
    reasons = rep.get("excluded") or {}
    why = "".join(f"\n  excluded: {reasons[l]}" for l in unconverged if l in reasons)
    return (f"{steps} steps, the cap: {len(unconverged)} of {len(rep['converged'])} layers still improving "
            f"(h_l, l = {', '.join(map(str, unconverged))}), marked and kept out of verdicts{why}")


def tuned_passes(models: Mapping[str, Any], lenses: Mapping[str, Any], P) -> dict[str, Any]:
    """The lens pass of :func:`lens_passes` with each model's tuned lens as the decoder."""
    cfg = profiles.stage(tuned_lens.TunedLensConfig, P)
    out = {}
    for name, loaded in models.items():
        decoder_id = "tuned-lens:" + cache.config_key(tuned_lens.cache_config(loaded[2], cfg))
        out[name] = lens_pass(loaded, P, metrics=TUNED_METRICS, decoder=lenses[name].transform,
                              decoder_id=decoder_id)
    return out


def causal_profiles(models: Mapping[str, Any], P, *, verbose: bool = True) -> dict[str, dict]:
    """Skip-path and token-direction ablation profiles (``causal.run_cached``, ``causal_*`` keys)."""
    cfg = profiles.stage(causal.CausalConfig, P)
    out = {}
    for name, (lm, tok, info) in models.items():
        t0 = time.perf_counter()
        out[name] = causal.run_cached(lm, info, cfg, tok)
        if verbose:
            print(f"{name}: causal profiles on {cfg.n_windows} windows x {cfg.window} tokens, direction "
                  f"basis {cfg.basis!r}; this call {time.perf_counter() - t0:.0f} s")
    return out


# --------------------------------------------------------------------------------------------
# Curves and the C1 rules' inputs
# --------------------------------------------------------------------------------------------


def curve(result, column: str, P):
    """The across-window curve of one column with its percentile bootstrap CI (ranks: medians)."""
    if column.startswith("rank_"):
        return stats.curve_ci(result.per_seq_median[column], n_boot=P.n_boot, seed=P.seed, stat="median")
    return stats.curve_ci(result.per_seq[column], n_boot=P.n_boot, seed=P.seed)


def c1_arrays(result, baseline: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """What ``verdicts.c1_regimes`` takes, from a lens result and its unigram baseline.

    ``top1_input`` / ``top1_next``: ``[n_windows, L+1]`` per-window top-1 rates at ``h_0..h_L``;
    ``unigram_input`` / ``unigram_next``: ``[n_windows]`` the unigram decoder's on the same positions.
    """
    for col in ("top1_input", "top1_next"):
        if col not in result.per_seq:
            raise ValueError(f"the lens result has no {col!r}: run the lens with metrics including 'top1'")
    arrays = {"top1_input": as_numpy(result.per_seq["top1_input"]), "top1_next": as_numpy(result.per_seq["top1_next"]),
              "unigram_input": as_numpy(baseline["top1_input"]), "unigram_next": as_numpy(baseline["top1_next"])}
    if arrays["unigram_input"].shape[0] != arrays["top1_input"].shape[0]:
        raise ValueError("the unigram baseline was computed on other windows: compute it from this result "
                         "(lens.unigram_baseline(result, counts))")
    return arrays


def depth_curves(result) -> dict[str, np.ndarray]:
    """What ``verdicts.c1_depth`` takes: metric -> ``[n_windows, L+1]`` next-token curves, for the
    metrics of :data:`DEPTH_METRICS` the result holds."""
    out = {m: as_numpy(result.per_seq[f"{m}_next"]) for m in DEPTH_METRICS if f"{m}_next" in result.per_seq}
    if not out:
        raise ValueError(f"the lens result holds none of {DEPTH_METRICS}: run it with one of them")
    return out


PREPROCESSING = "raw WikiText"  # the text-preprocessing setting whose depth shift enters C1.depth
# Decoders fitted towards the model's final next-token distribution: C1.early / C1.middle / C1 under
# them are reported but not evidence (verdicts.c1_regimes(fitted_to_output=True), verdicts.C1_FITTED_WHY)
FITTED_TO_OUTPUT = frozenset({"tuned lens"})


def c1_rows(result, baseline, P, *, model: str, decoder: str, unconverged: Sequence[int] = (),
            preprocessing: Mapping[str, Any] | None = None, fitted_to_output: bool | None = None) -> list:
    """C1.early / middle / late / C1 and the C1.depth rows (the primary metric's, then the sensitivity
    metrics'), for one model and decoder. ``unconverged``: layers whose decoder did not converge (no
    test reads them); ``preprocessing``: setting -> lens result on the first windows of the same draw
    under another text preprocessing (``sensitivity_passes(...)[model]``, of which only
    :data:`PREPROCESSING` is read): a depth it moves by more than its interval is inconclusive.
    ``fitted_to_output``: whether the decoder was fitted towards the model's output (default: whether
    ``decoder`` is one of :data:`FITTED_TO_OUTPUT`, the tuned lens); its C1.early, C1.middle and C1
    rows are then marked not evidence. Rows whose sub-rule cannot reach every outcome at these windows and
    positions are marked underpowered (``verdicts.c1_underpowered``: the class profile's, not the default's)."""
    fitted = decoder in FITTED_TO_OUTPUT if fitted_to_output is None else bool(fitted_to_output)
    arrays = c1_arrays(result, baseline)
    n = arrays["top1_input"].shape[0]
    rows = verdicts.c1_regimes(**arrays, model=model, decoder=decoder,
                               min_run=verdicts.c1_min_run(result.n_layers), unconverged=unconverged,
                               fitted_to_output=fitted, n_boot=P.n_boot, seed=P.seed,
                               n_positions=result.tokens["cur"].numel() // n if n else None, source=f"{NAME}-c1")
    prep = {s: depth_curves(r) for s, r in (preprocessing or {}).items() if s == PREPROCESSING}
    rows += verdicts.c1_depth(depth_curves(result), model=model, decoder=decoder, n_boot=P.n_boot,
                              seed=P.seed, preprocessing=prep or None, source=f"{NAME}-shift-depth")
    return rows


def excess_curves(result, baseline, P) -> dict[str, Any]:
    """Per layer, top-1 rate minus the unigram decoder's, for the input and the next token (CIs)."""
    a = c1_arrays(result, baseline)
    return {which: stats.curve_ci(a[f"top1_{which}"] - a[f"unigram_{which}"][:, None], n_boot=P.n_boot,
                                  seed=P.seed) for which in lens.WHICH}


def extremes_table(results: Mapping[str, Any], P) -> pd.DataFrame:
    """Per model and paired metric: the layer where the input curve and the next-token curve are most
    aligned (orientation from ``lens.ORIENTATION``), so prose can say which curves peak where."""
    rows = []
    for name, res in results.items():
        for m, o in lens.ORIENTATION.items():
            if f"{m}_input" not in res.per_seq:
                continue
            src = res.per_seq_median if m == "rank" else res.per_seq
            stat = np.median if m == "rank" else np.mean
            peak = {w: int(np.argmax(o * stat(as_numpy(src[f"{m}_{w}"]), axis=0))) for w in lens.WHICH}
            rows.append({"model": name, "metric": m, "layers": res.n_layers,
                         "input most aligned at": f"h_{peak['input']}",
                         "next most aligned at": f"h_{peak['next']}",
                         "next peaks at h_L": peak["next"] == res.n_layers,
                         "input peaks at h_0": peak["input"] == 0})
    return pd.DataFrame(rows).set_index(["model", "metric"])


def power_table(results: Mapping[str, Any], baselines: Mapping[str, dict], rows, P) -> pd.DataFrame:
    """What the profile's windows can detect, per model (logit lens): the minimum detectable effect
    (two-sided 5%, 80% power, ``stats.mde_paired_mean`` from the per-window SD) of the excess top-1
    rate over the unigram decoder at the C1.early / C1.late test layers and, Bonferroni-corrected over
    the middle candidates, at the noisiest middle layer; and the half-width of the top-1 emergence CI."""
    out = []
    for name, res in results.items():
        a = c1_arrays(res, baselines[name])
        n = a["top1_input"].shape[0]
        mde = verdicts.c1_power(**a)
        depth = next((r for r in rows if r.model == name and r.variant == "logit lens" and r.claim_id.startswith("C1.depth")
                      and r.details.get("metric") == "top1"), None)
        half = None if depth is None or depth.ci[0] is None else (depth.ci[1] - depth.ci[0]) / 2
        out.append({"model": name, "windows": n, "positions per window": res.tokens["cur"].numel() // n,
                    "MDE early (h_1)": mde["early"], "MDE late (h_(L-1))": mde["late"],
                    "MDE middle (Bonferroni)": mde["middle"], "emergence CI half-width (l/L)": half})
    return pd.DataFrame(out).set_index("model").round(3)


# --------------------------------------------------------------------------------------------
# Where is the shift: fade, crossing, emergence
# --------------------------------------------------------------------------------------------


def transition_rows(result, P) -> list[dict[str, Any]]:
    """Per depth metric: input fade (from h_0), crossing, next-token emergence (from h_1, as C1.depth).

    The emergence uses C1.depth's exact computation (``start=1``, bootstrap seed ``seed + 1``), so the
    figure shows the interval the verdict judges.
    """
    rows = []
    L = result.n_layers
    for m in DEPTH_METRICS:
        if f"{m}_input" not in result.per_seq:
            continue
        a, b = result.per_seq[f"{m}_input"], result.per_seq[f"{m}_next"]
        kw = dict(metric=m, n_layers=L, n_boot=P.n_boot)
        rows.append({"metric": m,
                     "fade": stats.halfway_estimate(a, seed=P.seed, **kw),
                     "crossing": stats.shift_estimate(a, b, orientation=lens.ORIENTATION[m], seed=P.seed, **kw),
                     "emergence": stats.halfway_estimate(b, seed=P.seed + 1, start=1, **kw)})
    return rows


def shift_table_frame(transitions: Mapping[str, list]) -> pd.DataFrame:
    """``{label: transition_rows}`` as one table (relative depth l/L with 95% CIs)."""
    out = []
    for label, rows in transitions.items():
        for row in rows:
            c = row["crossing"]
            out.append({"model · decoder": label, "metric": row["metric"], "layers": c.n_layers,
                        "input fade": _rel(row["fade"]), "crossing": _rel(c),
                        "never-cross share": round(c.frac_never, 3), "next emergence": _rel(row["emergence"])})
    return pd.DataFrame(out).set_index(["model · decoder", "metric"])


def shift_numbers(transitions: Mapping[str, list]) -> dict[str, list]:
    """The layout ``figures/03-alignment-curves-shift-table.json`` keeps (read by the README report)."""
    return {label: [{k: (v.as_dict() if hasattr(v, "as_dict") else v) for k, v in row.items()} for row in rows]
            for label, rows in transitions.items()}


def crossing_table(results: Mapping[str, Any], P) -> pd.DataFrame:
    """The crossing (first layer where next-token alignment exceeds input alignment, interpolated;
    ``stats.shift_table``) on every paired metric of each result, cosines and projection included, as
    relative depth l/L with its 95% bootstrap CI; ``first layer past it / L`` is the integer layer."""
    rows = []
    for name, res in results.items():
        for e in stats.shift_table(res, orientation=lens.ORIENTATION, n_boot=P.n_boot, seed=P.seed):
            lo, hi = e.relative_ci
            rows.append({"model": name, "metric": e.metric, "layers": e.n_layers, "crossing l/L": e.relative,
                         "CI lo": lo, "CI hi": hi, "first layer past it": e.layer,
                         "first layer past it / L": None if e.layer is None else e.layer / e.n_layers,
                         "never-cross share": e.frac_never})
    return pd.DataFrame(rows).set_index(["model", "metric"]).round(3)


def depth_sensitivity_table(rows) -> pd.DataFrame:
    """Per model, decoder and metric, the next-token emergence of the C1.depth rows beside how far
    :data:`PREPROCESSING` (raw instead of detokenized text) moves it, estimated on the first windows of
    the same draw (``shift windows``, against ``windows (depth)``): shift and its 95% CI, in l/L. A sensitivity estimate, reported beside
    the depth."""
    out = []
    for r in rows:
        if not r.claim_id.startswith("C1.depth"):
            continue
        lo, hi = r.ci
        rec = {"model": r.model, "decoder": r.variant, "metric": r.details.get("metric"), "emergence l/L": r.estimate,
               "CI half-width": None if lo is None or hi is None else (hi - lo) / 2, "windows (depth)": r.n}
        m = (r.details.get("preprocessing") or {}).get(PREPROCESSING)
        if m:
            rec.update({f"{PREPROCESSING} shift": m["shift"], "shift CI lo": m["lo"], "shift CI hi": m["hi"],
                        "shift windows": m["windows"]})
        out.append(rec)
    frame = pd.DataFrame(out).set_index(["model", "decoder", "metric"]).round(3)
    if "shift windows" in frame:
        frame["shift windows"] = frame["shift windows"].astype("Int64")  # blank where a row has no shift
    return frame


# --------------------------------------------------------------------------------------------
# Figures
# --------------------------------------------------------------------------------------------


def _model_legend(fig, names, *, extra=(), loc="lower right", anchor=(0.99, 0.02)):
    style = _style(names)
    handles = [Line2D([], [], color=PALETTE["input"], label=r"input token $x_t$"),
               Line2D([], [], color=PALETTE["next"], label=r"next token $x_{t+1}$")]
    handles += list(extra)
    handles += [Line2D([], [], color="k", ls=style[n], label=n) for n in names]
    fig.legend(handles=handles, loc=loc, bbox_to_anchor=anchor, fontsize=9)


def metrics_panel(results: Mapping[str, Any], baselines: Mapping[str, dict], P):
    """Every metric per layer (relative depth), input vs next, CIs; unigram decoder where it applies.

    Log-prob, projection and KL panels start at ``h_1`` (:data:`FROM_LAYER_1`): their ``h_0`` values
    lie far from every other layer's and would flatten the rest. Returns ``(fig, numbers)``.
    """
    first = next(iter(results.values()))
    panels = [m for m in lens.PAIRED if f"{m}_input" in first.per_seq]
    panels += [m for m in lens.SINGLE if m in first.per_seq]
    ncols = 4
    nrows = -(-len(panels) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.3 * ncols, 3.1 * nrows), squeeze=False)
    style = _style(results)
    numbers: dict[str, dict] = {}
    for ax, metric in zip(axes.flat, panels):
        for name, res in results.items():
            start = 1 if metric in FROM_LAYER_1 else 0
            depth = np.arange(start, res.n_layers + 1) / res.n_layers
            cols = [f"{metric}_{w}" for w in lens.WHICH] if metric in lens.PAIRED else [metric]
            for col in cols:
                c = curve(res, col, P)
                numbers.setdefault(name, {})[col] = c.as_dict()
                color = PALETTE[col.rsplit("_", 1)[1]] if metric in lens.PAIRED else "#555555"
                ax.plot(depth, c.estimate[start:], style[name], color=color, lw=1.6)
                ax.fill_between(depth, c.lo[start:], c.hi[start:], color=color, alpha=0.18, lw=0)
            base = baselines.get(name, {})
            for which in lens.WHICH:
                key = f"{metric}_{which}"
                if key in base:  # the unigram decoder does not depend on the layer
                    ax.axhline(float(as_numpy(base[key]).mean()), color=PALETTE[which], ls=style[name], lw=0.8,
                               alpha=0.6, dashes=(1, 2))
        if metric == "rank":
            ax.set_yscale("log")
        if metric in RANK_METRICS:  # rank 1 on top, as in notebook 01: up is "more aligned"
            ax.invert_yaxis()
        ax.set_title(LABEL[metric] + (r" (from $h_1$)" if metric in FROM_LAYER_1 else ""), fontsize=10)
        ax.set_xlabel("relative depth l / L")
    for ax in axes.flat[len(panels):]:
        ax.axis("off")
    extra = [Line2D([], [], color="grey", lw=0.8, dashes=(1, 2), label="unigram decoder")] if baselines else []
    _model_legend(fig, list(results), extra=extra)
    fig.suptitle(f"Logit-lens alignment per layer ({P.lens_corpus} {P.lens_split}, {first.n_seq} windows x "
                 f"{P.lens_window} tokens; 95% bootstrap CIs over windows)", y=1.0)
    fig.tight_layout()
    return fig, numbers


def c1_panel(results: Mapping[str, Mapping[str, Any]], baselines: Mapping[str, dict], rows, P):
    """Top-1 rate minus the unigram decoder's, per layer ``h_1..h_L``, per model (columns) and decoder
    (line style), with the layers each C1 test reads: ``h_1`` (early), the middle candidates, ``h_{L-1}``
    (late), and the margin. ``results``: ``{decoder: {model: LensResult}}``. Returns ``(fig, numbers)``."""
    models = list(next(iter(results.values())))
    fig, axes = plt.subplots(1, len(models), figsize=(5.4 * len(models), 3.8), squeeze=False)
    margin = verdicts.C1_MARGIN
    numbers: dict[str, dict] = {}
    for ax, name in zip(axes[0], models):
        L = next(iter(results.values()))[name].n_layers
        x = np.arange(1, L + 1)
        ax.axvspan(1.5, L - 1.5, color="#eeeeee", lw=0, zorder=0)
        for decoder, by_model in results.items():
            if name not in by_model:  # a model read by the logit lens only (extra_models)
                continue
            ex = excess_curves(by_model[name], baselines[name], P)
            numbers.setdefault(name, {})[decoder] = {w: c.as_dict() for w, c in ex.items()}
            for which, c in ex.items():
                ax.plot(x, c.estimate[1:], DECODER_STYLE.get(decoder, "-"), color=PALETTE[which], lw=1.5)
                ax.fill_between(x, c.lo[1:], c.hi[1:], color=PALETTE[which], alpha=0.15, lw=0)
        ax.axhline(margin, color="k", lw=0.8, ls=":")
        ax.axhline(0, color="k", lw=0.6)
        for l, text in ((1, "early"), (L - 1, "late")):
            ax.axvline(l, color="k", lw=0.6, ls="--")
            ax.text(l, 1.0, f" {text}", transform=ax.get_xaxis_transform(), fontsize=8, va="top")
        ax.text((L) / 2, 1.0, "middle candidates", transform=ax.get_xaxis_transform(), fontsize=8, va="top",
                ha="center")
        _symlog(ax, [numbers[name][d][w]["estimate"][1:] for d in numbers[name] for w in lens.WHICH], 0.05)
        integer_axis(ax, "x")
        ax.set_xlabel(r"residual layer $l$ ($h_l$)")
        ax.set_ylabel("top-1 excess over unigram")
        v = {r.claim_id: r.verdict for r in rows if r.model == name and r.variant == "logit lens"}
        ax.set_title(f"{name}: C1 (logit lens) {v.get('C1', '?')}", fontsize=10)
    handles = [Line2D([], [], color="k", ls=DECODER_STYLE.get(d, "-"), label=d) for d in results]
    handles.append(Line2D([], [], color="k", ls=":", lw=0.8, label=f"margin {margin}"))
    _model_legend(fig, [], extra=handles, loc="upper left", anchor=(1.0, 0.95))
    fig.tight_layout()
    numbers["verdicts"] = [r.as_dict() for r in rows]
    return fig, numbers


def shift_depth_panel(transitions: Mapping[str, list], rows, P):
    """Fade (input colour), crossing (black tick) and emergence (next colour) per depth metric and
    model · decoder, as relative depth with 95% CIs; the C1.depth band shaded, the paper's reference
    dashed. Returns ``(fig, numbers)``."""
    kinds = {"fade": (PALETTE["input"], "o", -0.2), "crossing": ("k", "|", 0.0),
             "emergence": (PALETTE["next"], "s", 0.2)}
    n = sum(len(r) for r in transitions.values())
    fig, ax = plt.subplots(figsize=(8.5, 0.42 * n + 1.8))
    ax.axvspan(*verdicts.DEPTH_BAND, color=PALETTE["next"], alpha=0.08, lw=0)
    y, ticks, labels = 0.0, [], []
    verdict = {(r.model, r.variant, r.details.get("metric")): r.verdict for r in rows if r.claim_id.startswith("C1.depth")}
    for label, trs in transitions.items():
        for row in trs:
            for kind, (color, marker, dy) in kinds.items():
                e = row[kind]
                if e.relative is None:
                    continue
                lo, hi = e.relative_ci
                if lo is not None:
                    ax.plot([lo, hi], [y + dy] * 2, color=color, lw=1.4, alpha=0.85)
                ax.plot(e.relative, y + dy, marker, color=color, ms=10 if marker == "|" else 6, mew=2)
            model, _, decoder = label.partition(" · ")
            v = verdict.get((model, decoder, row["metric"]), "")
            ticks.append(y)
            labels.append(f"{row['metric']} · {label}" + (f"  [{v}]" if v else ""))
            y += 1
        y += 0.5
    ax.axvline(PAPER_REF["relative"], ls="--", color="k", lw=1)
    ax.text(PAPER_REF["relative"], -1.0, f" paper: Gemma-2-2B ≈ layer {PAPER_REF['layer']}/{PAPER_REF['n_layers']} "
            "(reference)", fontsize=8, va="bottom")
    ax.set_yticks(ticks, labels, fontsize=8)
    ax.set_ylim(y - 0.3, -1.4)
    ax.set_xlim(-0.02, 1.02)
    ax.set_xlabel("relative depth l / L (95% bootstrap CIs)")
    handles = [Line2D([], [], color=c, marker=m, ls="", label={"fade": "input fade", "crossing": "crossing",
                                                                 "emergence": "next-token emergence"}[k])
               for k, (c, m, _) in kinds.items()]
    handles.append(plt.Rectangle((0, 0), 1, 1, color=PALETTE["next"], alpha=0.15,
                                 label=f"C1.depth band [{verdicts.DEPTH_BAND[0]}, {verdicts.DEPTH_BAND[1]}]"))
    ax.legend(handles=handles, loc="lower right", fontsize=8)
    fig.tight_layout()
    return fig, shift_numbers(transitions)


def sensitivity_rows(sens: Mapping[str, Mapping[str, Any]], base_counts: Mapping[str, np.ndarray],
                     raw_counts: Mapping[str, np.ndarray], P) -> list[dict[str, Any]]:
    """Per model and setting: the C1 verdicts and the top-1 emergence depth (same rules as the main run)."""
    out = []
    for name, by_setting in sens.items():
        for setting, res in by_setting.items():
            counts = raw_counts[name] if setting == "raw WikiText" else base_counts[name]
            base = lens.unigram_baseline(res, counts)
            rows = {(r.claim_id, r.details.get("metric")): r
                    for r in c1_rows(res, base, P, model=name, decoder="logit lens")}
            d = rows[("C1.depth", "top1")]
            L = res.n_layers
            top1 = {w: as_numpy(res.per_seq[f"top1_{w}"]).mean(0) for w in lens.WHICH}
            out.append({"model": name, "setting": setting, "bos": res.config.get("bos"),
                        "detokenize": res.config.get("detokenize"),
                        "input top-1 at h_1": float(top1["input"][1]),
                        f"next top-1 at h_(L-1)": float(top1["next"][L - 1]),
                        "C1.early": rows[("C1.early", None)].verdict, "C1.middle": rows[("C1.middle", None)].verdict,
                        "C1.late": rows[("C1.late", None)].verdict, "C1": rows[("C1", None)].verdict,
                        "emergence (top-1) l/L": stats.format_ci(d.estimate, *d.ci, 2),
                        "C1.depth (top-1)": d.verdict})
    return out


def sensitivity_table(rows: list[dict[str, Any]]) -> pd.DataFrame:
    return pd.DataFrame(rows).drop(columns=["bos", "detokenize"]).set_index(["model", "setting"]).round(3)


def _top1_bands(ax, res, depth, ls: str, P, *, band: float) -> dict[str, Any]:
    """The input and next top-1 curves of one lens result with their CI bands; their numbers."""
    out = {}
    for which in lens.WHICH:
        c = curve(res, f"top1_{which}", P)
        out[which] = c.as_dict()
        ax.plot(depth, c.estimate, ls, color=PALETTE[which], lw=1.5)
        ax.fill_between(depth, c.lo, c.hi, color=PALETTE[which], alpha=band, lw=0)
    return out


def sensitivity_panel(sens: Mapping[str, Mapping[str, Any]], P):
    """Top-1 curves (input and next) per model under each setting (line style). Returns ``(fig, numbers)``."""
    styles = dict(zip(SETTINGS, ("-", "--", ":")))
    fig, axes = plt.subplots(1, len(sens), figsize=(5.4 * len(sens), 3.6), squeeze=False)
    numbers: dict[str, dict] = {}
    for ax, (name, by_setting) in zip(axes[0], sens.items()):
        for setting, res in by_setting.items():
            depth = np.arange(res.n_layers + 1) / res.n_layers
            numbers.setdefault(name, {})[setting] = _top1_bands(ax, res, depth, styles[setting], P, band=0.10)
        ax.set_title(f"{name}: top-1 match rate", fontsize=10)
        ax.set_xlabel("relative depth l / L")
    extra = [Line2D([], [], color="k", ls=styles[s], label=s) for s in SETTINGS]
    _model_legend(fig, [], extra=extra, loc="upper left", anchor=(1.0, 0.95))
    fig.tight_layout()
    return fig, numbers


def token_groups(models: Mapping[str, Any], results: Mapping[str, Any],
                 counts: Mapping[str, np.ndarray]) -> dict[str, dict[str, tuple[np.ndarray, list[str]]]]:
    """Per model, two groupings of the analysed tokens: by the input token's type and by its corpus
    frequency rank. ``{name: {"token type": (group index per token, labels), "frequency": ...}}``."""
    out = {}
    for name, res in results.items():
        tok = models[name][1]
        cur = res.tokens["cur"].numpy()
        kinds = lens.token_kinds(tok, np.unique(cur))
        kind_idx = np.array([lens.TOKEN_KINDS.index(kinds[int(i)]) for i in cur])
        freq_idx, freq_labels = lens.frequency_bins(counts[name], cur)
        out[name] = {"token type": (kind_idx, list(lens.TOKEN_KINDS)), "frequency": (freq_idx, freq_labels)}
    return out


def _top1_tokens(res) -> dict[str, np.ndarray]:
    return {w: (res.tokens["layers"][f"rank_{w}"] == 1).double().numpy() for w in lens.WHICH}


def token_group_panel(results: Mapping[str, Any], groups: Mapping[str, dict], P):
    """Input (solid) and next (dashed) top-1 rates per token group, per model (columns) and grouping
    (rows); colours are categories, not the input/next colours. Returns ``(fig, rows)``: per group the
    token count, the input top-1 at mid-depth and the top-1 crossing, each with a 95% CI."""
    names = list(results)
    fig, axes = plt.subplots(2, len(names), figsize=(5.4 * len(names), 6.6), squeeze=False)
    rows = []
    for j, name in enumerate(names):
        res = results[name]
        seq = res.tokens["seq"].numpy()
        t = _top1_tokens(res)
        L = res.n_layers
        mid = L // 2
        depth = np.arange(L + 1) / L
        for i, (gname, (gidx, glabels)) in enumerate(groups[name].items()):
            ax = axes[i, j]
            g = len(glabels)
            cin = stats.grouped_curve_ci(t["input"], seq, gidx, n_groups=g, n_boot=P.n_boot, seed=P.seed)
            cnx = stats.grouped_curve_ci(t["next"], seq, gidx, n_groups=g, n_boot=P.n_boot, seed=P.seed)
            est = stats.grouped_shift(t["input"], t["next"], seq, gidx, n_groups=g, metric="top1", n_layers=L,
                                      orientation=lens.ORIENTATION["top1"], n_boot=P.n_boot, seed=P.seed)
            handles = []
            for k, label in enumerate(glabels):
                n_tok = int(cin["count"][k])
                if n_tok < MIN_GROUP_TOKENS:
                    continue
                color = CATEGORY[k % len(CATEGORY)]
                for c, ls in ((cin, "-"), (cnx, "--")):
                    ax.plot(depth, c["estimate"][k], ls, color=color, lw=1.4)
                    ax.fill_between(depth, c["lo"][k], c["hi"][k], color=color, alpha=0.10, lw=0)
                handles.append(Line2D([], [], color=color, label=f"{label} (n={n_tok})"))
                rows.append({"model": name, "grouping": gname, "group": label, "tokens": n_tok,
                             f"input top-1 at mid-depth": stats.format_ci(cin["estimate"][k][mid], cin["lo"][k][mid],
                                                                          cin["hi"][k][mid], 3),
                             "mid-depth layer": mid,
                             "crossing l/L": _rel(est[k]),
                             "never-cross share": round(est[k].frac_never, 3)})
            handles += [Line2D([], [], color="k", ls="-", label="input top-1"),
                        Line2D([], [], color="k", ls="--", label="next top-1")]
            ax.set_title(f"{name} · by {gname}", fontsize=10)
            ax.set_xlabel("relative depth l / L")
            ax.set_ylabel("top-1 match rate")
            ax.legend(handles=handles, fontsize=7)
    fig.tight_layout()
    return fig, rows


def repeat_share(result, groups: Mapping[str, tuple[np.ndarray, list[str]]]) -> pd.DataFrame:
    """Per token type: the share of analysed positions whose next token equals the input token."""
    cur, nxt = result.tokens["cur"].numpy(), result.tokens["next"].numpy()
    idx, labels = groups["token type"]
    return pd.DataFrame([{"token type": lab, "tokens": int((idx == k).sum()),
                          "next == input": float((cur[idx == k] == nxt[idx == k]).mean()) if (idx == k).any()
                          else float("nan")} for k, lab in enumerate(labels)]).set_index("token type")


def tuned_training_table(reports: Mapping[str, dict], n_layers: Mapping[str, int]) -> pd.DataFrame:
    """How long each tuned lens trained, which layers converged and how much KL is left (held-out,
    nats; means over windows). A layer is still improving at the cap when an evaluation in the last
    ``patience x eval_every`` steps lowered its early-stopping KL by more than ``rel_tol``
    (``tuned_lens.layer_convergence``); "all converged by step" is when the last layer to converge did.
    "start" is how the translators began (``lstsq``: the least-squares map, fitted in "start (s)");
    "layers kept at start" counts the layers whose KL steps never beat that start on held-out windows."""
    rows = []
    for name, rep in reports.items():
        cfg = rep["config"]
        L = n_layers[name]
        kl_l, kl_t = as_numpy(rep["kl_logit"]).mean(0), as_numpy(rep["kl_tuned"]).mean(0)
        mid = L // 2
        evals = [h for h in rep.get("history", []) if isinstance(h, dict) and "eval" in h]
        unconverged = tuned_lens.unconverged_layers(rep)
        rows.append({"model": name, "steps": rep.get("steps"), "step cap": cfg["steps"],
                     "stopped early": rep.get("stopped_early"),
                     "windows seen": int(rep.get("steps") or 0) * cfg["batch"],
                     "tokens seen": int(rep.get("steps") or 0) * cfg["batch"] * cfg["window"],
                     "start": (rep.get("start") or {}).get("init"),
                     "start (s)": round(float(rep.get("start_seconds") or 0), 1),
                     "fit (s)": round(float(rep.get("fit_seconds") or 0), 0),
                     "layers kept at start": (None if rep.get("kept") is None
                                              else sum(k == "start" for k in rep["kept"])),
                     f"KL logit lens h_0": kl_l[0], "KL tuned h_0": kl_t[0],
                     "KL logit lens mid": kl_l[mid], "KL tuned mid": kl_t[mid],
                     "KL logit lens h_(L-1)": kl_l[L - 1], "KL tuned h_(L-1)": kl_t[L - 1],
                     "evaluations": len(evals),
                     "convergence window (steps)": rep["convergence_window"],
                     "layers still improving at the cap": len(unconverged),
                     "still improving (h_l)": ", ".join(map(str, unconverged)) or "none",
                     "all converged by step": (None if unconverged else
                                               max(rep["last_improved"]) + rep["convergence_window"]),
                     "final mass outside train vocab": rep.get("outside_mass")})
    return pd.DataFrame(rows).set_index("model").round(3)


UNCONVERGED_LABEL = "tuned lens still improving at the cap (kept out of verdicts)"


def tuned_panel(results: Mapping[str, Any], tuned: Mapping[str, Any], reports: Mapping[str, dict], P):
    """Top-1 curves under the logit lens (solid) and the tuned lens (dashed) per model, and the held-out
    KL to the final distribution per layer (log scale). Layers whose translator was still improving
    when the step cap ended its fit (``tuned_lens.unconverged_layers``) are hollow markers on the
    tuned-lens curves; ``numbers[name]["still improving at the cap"]`` holds their ``layers`` (l of
    ``h_l``) and ``depth`` (l / L). Returns ``(fig, numbers)``."""
    names = list(results)
    fig, axes = plt.subplots(1, len(names) + 1, figsize=(4.8 * (len(names) + 1), 3.7), squeeze=False)
    numbers: dict[str, Any] = {}
    marker = dict(marker="o", ms=5, mfc="none", mew=1.2, ls="none")
    unconverged = {name: tuned_lens.unconverged_layers(reports[name]) for name in names}
    for ax, name in zip(axes[0], names):
        L = results[name].n_layers
        depth = np.arange(L + 1) / L
        for decoder, res in (("logit lens", results[name]), ("tuned lens", tuned[name])):
            numbers.setdefault(name, {})[decoder] = _top1_bands(ax, res, depth, DECODER_STYLE[decoder], P, band=0.12)
        bad = unconverged[name]
        numbers[name]["still improving at the cap"] = {"layers": bad, "depth": [l / L for l in bad]}
        for which in lens.WHICH:
            if bad:
                est = np.asarray(numbers[name]["tuned lens"][which]["estimate"], dtype=float)
                ax.plot(depth[bad], est[bad], color=PALETTE[which], **marker)
        ax.set_title(f"{name}: top-1 match rate", fontsize=10)
        ax.set_xlabel("relative depth l / L")
    ax = axes[0, -1]
    for k, name in enumerate(names):
        rep = reports[name]
        L = results[name].n_layers
        depth = np.arange(L) / L  # h_L has KL 0 by construction: left out of the log scale
        for key, decoder in (("kl_logit", "logit lens"), ("kl_tuned", "tuned lens")):
            c = stats.curve_ci(rep[key], n_boot=P.n_boot, seed=P.seed)
            numbers.setdefault("kl", {})[f"{name}:{key}"] = c.as_dict()
            ax.plot(depth, c.estimate[:L], DECODER_STYLE[decoder], color=CATEGORY[k % len(CATEGORY)], lw=1.5)
            ax.fill_between(depth, c.lo[:L], c.hi[:L], color=CATEGORY[k % len(CATEGORY)], alpha=0.12, lw=0)
            if key == "kl_tuned" and unconverged[name]:
                bad = unconverged[name]
                ax.plot(depth[bad], np.asarray(c.estimate, dtype=float)[bad], color=CATEGORY[k % len(CATEGORY)],
                        **marker)
    ax.set_yscale("log")
    ax.set_title(r"held-out KL(final $\|$ lens), nats ($h_0..h_{L-1}$)", fontsize=10)
    ax.set_xlabel("relative depth l / L")
    ax.legend(handles=[Line2D([], [], color=CATEGORY[k % len(CATEGORY)], label=n) for k, n in enumerate(names)],
              fontsize=7)
    extra = [Line2D([], [], color="k", ls=DECODER_STYLE[d], label=d) for d in DECODER_STYLE]
    if any(unconverged.values()):
        extra.append(Line2D([], [], color="k", label=UNCONVERGED_LABEL, **marker))
    _model_legend(fig, [], extra=extra, loc="upper left", anchor=(1.0, 0.95))
    fig.tight_layout()
    return fig, numbers


# --------------------------------------------------------------------------------------------
# The causal view
# --------------------------------------------------------------------------------------------


def causal_panel(profiles: Mapping[str, dict], P):
    """The causal profiles' numbers and their figure (:func:`causal_figure`): per model, the net effects
    of removing the input / next direction (Δloss minus the random-direction control), the control's own
    Δloss and the skip-path ablation per block. Returns ``(fig, numbers)``."""
    numbers: dict[str, Any] = {}
    skip_layers: dict[str, list[int]] = {}
    for name, prof in profiles.items():
        L = prof["n_layers"]
        eff = causal.direction_effects(prof["direction"])
        num = numbers.setdefault(name, {"n_layers": L, "basis": prof["direction"].get("basis"),
                                        "residuals": np.asarray(prof["direction"]["residuals"]).tolist()})
        for which in lens.WHICH:
            num[f"net_{which}"] = stats.curve_ci(eff[which], n_boot=P.n_boot, seed=P.seed).as_dict()
        num["control"] = stats.curve_ci(eff["control"], n_boot=P.n_boot, seed=P.seed).as_dict()
        for alpha, summary in causal.skip_summary(prof["skip"], n_boot=P.n_boot, seed=P.seed).items():
            num[f"skip_alpha_{alpha}"] = summary["ci"]
        skip_layers[name] = list(prof["skip"]["layers"])
    return causal_figure(numbers, skip_layers), numbers


CAUSAL_PANELS = ("net_input", "net_next", "control", "skip")


def causal_figure(numbers: Mapping[str, Mapping[str, Any]], skip_layers: Mapping[str, Sequence[int]]):
    """One row per model, four panels on linear axes, each its own y range: the net effect of removing
    the input direction, of removing the next direction (over ``h_1..h_{L-1}``), the random-direction
    control's own Δloss, and the skip path of block ``l`` scaled by alpha (x: ``(l + 1) / L``, the
    residual it feeds). ``h_0`` and ``h_L`` are open markers (fixed by construction, not localization
    evidence); one far outside the interior's range sits on the panel's edge as a triangle with its
    value written beside it (:func:`_ends`), so the interior keeps a readable scale.
    ``numbers``: what :func:`causal_panel` returns; ``skip_layers``: per model the blocks of the skip
    profile (``profile["skip"]["layers"]``)."""
    names = list(numbers)
    fig, axes = plt.subplots(len(names), len(CAUSAL_PANELS), figsize=(12.6, 0.7 + 2.9 * len(names)), squeeze=False)
    for row, name in zip(axes, names):
        num = numbers[name]
        L = num["n_layers"]
        res_idx = np.asarray(num["residuals"])
        x = res_idx / L
        inner = (res_idx > 0) & (res_idx < L)
        for ax, which in zip(row[:2], lens.WHICH):
            c = num[f"net_{which}"]
            _curve(ax, x, c, inner, PALETTE[which])
            ax.axhline(0, color="k", lw=0.7)
            ax.set_title(f"remove the {which} direction, net", fontsize=10)
        row[0].set_ylabel(f"{name}\nΔ loss net of the control (nats)", fontsize=9)
        _curve(row[2], x, num["control"], inner, CATEGORY[0])
        row[2].axhline(0, color="k", lw=0.7)
        row[2].set_title("the random control's own Δloss", fontsize=10)
        for ax in row[2:]:
            ax.set_ylabel("Δ loss (nats)", fontsize=9)
        xs = (np.asarray(skip_layers[name]) + 1) / L
        alphas = [k for k in num if k.startswith("skip_alpha_")]
        for k, key in enumerate(alphas):
            ci = num[key]
            row[3].plot(xs, ci["estimate"], marker="o", ms=3, color=CATEGORY[k + 1],
                        label=rf"$\alpha$ = {key.removeprefix('skip_alpha_')}")
            row[3].fill_between(xs, ci["lo"], ci["hi"], color=CATEGORY[k + 1], alpha=0.18, lw=0)
        row[3].axhline(0, color="k", lw=0.7)
        row[3].set_title(r"skip path of block $l-1$ $\times\,\alpha$", fontsize=10)
        row[3].legend(fontsize=8, loc="best")
        for ax in row:
            ax.yaxis.set_major_locator(MaxNLocator(nbins=5, steps=[1, 2, 2.5, 5, 10], min_n_ticks=3))
            ax.set_xlim(-0.04, 1.04)
            ax.tick_params(labelsize=9)
    for ax in axes[-1]:
        ax.set_xlabel("relative depth l / L of the edited $h_l$", fontsize=9)
    handles = [Line2D([], [], color="0.3", marker=".", label=r"$h_1..h_{L-1}$ (band: 95% CI over windows)"),
               Line2D([], [], color="0.3", marker="o", mfc="none", ls="", label=r"$h_0$, $h_L$ (by construction)"),
               Line2D([], [], color="0.3", marker="^", mfc="none", ls="",
                      label=r"$h_0$ or $h_L$ off the scale: its value written beside it")]
    fig.legend(handles=handles, loc="lower center", ncol=3, fontsize=9, frameon=False)
    fig.tight_layout(rect=(0, 0.6 / fig.get_figheight(), 1, 1))
    return fig


OFF_SCALE = 3.0  # an end value further than this many interior ranges from the interior is drawn on the edge


def _curve(ax, x: np.ndarray, c: Mapping[str, Any], inner: np.ndarray, color: str) -> None:
    """The interior as a line with its CI band, the ends (:func:`_ends`) as open markers."""
    est, lo, hi = (np.asarray(c[k], dtype=float) for k in ("estimate", "lo", "hi"))
    ax.plot(x[inner], est[inner], marker=".", color=color, lw=1.5)
    ax.fill_between(x[inner], lo[inner], hi[inner], color=color, alpha=0.18, lw=0)
    _ends(ax, x[~inner], est[~inner], np.concatenate([lo[inner], hi[inner], [0.0]]), color)


def _ends(ax, x: np.ndarray, y: np.ndarray, interior: np.ndarray, color: str) -> None:
    """Open markers for the ends; one further than :data:`OFF_SCALE` interior ranges beyond the interior
    is drawn on the panel's edge (a triangle pointing where it lies) with its value written beside it."""
    low, high = float(np.nanmin(interior)), float(np.nanmax(interior))
    span = max(high - low, 1e-9)
    inside = (y >= low - OFF_SCALE * span) & (y <= high + OFF_SCALE * span)
    ax.plot(x[inside], y[inside], "o", mfc="none", color=color, ms=5)
    shown = np.concatenate([interior, y[inside]])
    bottom, top = float(shown.min()), float(shown.max())
    pad = 0.08 * max(top - bottom, 1e-9)
    bottom, top = bottom - pad, top + pad
    far = [(xi, yi) for xi, yi in zip(x[~inside], y[~inside])]
    if far:
        top += 2 * pad if any(yi > top for _, yi in far) else 0
        bottom -= 2 * pad if any(yi < bottom for _, yi in far) else 0
    ax.set_ylim(bottom, top)
    for xi, yi in far:
        edge, marker, va = (top, "^", "top") if yi > top else (bottom, "v", "bottom")
        ax.plot([xi], [edge], marker, mfc="none", color=color, ms=6, clip_on=False)
        ax.annotate(f"{yi:.2g}", (xi, edge), xytext=(-4 if xi > 0.5 else 4, -2 if va == "top" else 2),
                    textcoords="offset points", ha="right" if xi > 0.5 else "left", va=va, fontsize=8, color=color)


def causal_vs_lens(profiles: Mapping[str, dict], transitions: Mapping[str, list], P) -> tuple[pd.DataFrame, list]:
    """Where the causal effects stop / start (``causal.effect_transitions``, over ``h_1..h_{L-1}``) beside
    the lens's input fade and next-token emergence (top-1), as relative depth with 95% CIs, and whether
    each pair of intervals overlaps. ``transitions``: ``{model: transition_rows}`` of the logit lens."""
    rows = []
    for name, prof in profiles.items():
        tr = causal.effect_transitions(prof["direction"], n_boot=P.n_boot, seed=P.seed)
        lens_row = next(r for r in transitions[name] if r["metric"] == "top1")
        row = {"model": name, "layers": tr["n_layers"]}
        for ckey, lkey, what in (("input_stops", "fade", "input"), ("next_starts", "emergence", "next")):
            c, e = tr[ckey], lens_row[lkey]
            clo, chi = c["relative_lo"], c["relative_hi"]
            llo, lhi = e.relative_ci
            row[f"causal {ckey.replace('_', ' ')}"] = stats.format_ci(c["relative"], clo, chi, 2)
            row[f"lens {'input fade' if what == 'input' else 'next emergence'}"] = _rel(e)
            row[f"{what}: CIs overlap"] = (None if None in (clo, chi, llo, lhi) else bool(clo <= lhi and llo <= chi))
        row["_transitions"] = tr
        rows.append(row)
    frame = pd.DataFrame([{k: v for k, v in r.items() if not k.startswith("_")} for r in rows]).set_index("model")
    return frame, [{**{k: v for k, v in r.items() if not k.startswith("_")}, "causal": r["_transitions"]} for r in rows]


def eff_n(prof: Mapping[str, Any]) -> int:
    return int(prof["direction"]["delta"].shape[1])


def net_mde(prof: Mapping[str, Any]) -> float:
    """Minimum detectable net effect (nats; two-sided 5%, 80% power) at a typical inner residual: the
    median over ``h_1..h_{L-1}`` of the per-window SD of the next-direction effect net of the control."""
    eff = as_numpy(causal.direction_effects(prof["direction"])["next"])
    L = prof["n_layers"]
    cols = [k for k, r in enumerate(prof["direction"]["residuals"]) if 0 < r < L]
    sd = float(np.median(eff[:, cols].std(axis=0, ddof=1))) if cols else float("nan")
    return stats.mde_paired_mean(sd, eff.shape[0], sided="two")


def control_peak(profiles: Mapping[str, dict]) -> pd.DataFrame:
    """Per model: where the random-direction control's mean Δloss peaks, and how high (nats)."""
    rows = []
    for name, prof in profiles.items():
        c = as_numpy(causal.direction_effects(prof["direction"])["control"]).mean(0)
        L = prof["n_layers"]
        res_idx = list(prof["direction"]["residuals"])
        inner = c[[k for k, r in enumerate(res_idx) if 0 < r < L]]
        rows.append({"model": name, "peak layer": f"h_{res_idx[int(np.argmax(c))]}", "peak Δloss (nats)": float(c.max()),
                     "median over h_1..h_(L-1)": float(np.median(inner)) if inner.size else float("nan"),
                     "layers above 1 nat": int((c > 1).sum()), "layers profiled": len(res_idx),
                     "windows": int(eff_n(prof)),
                     "MDE of a net effect (nats)": net_mde(prof),
                     "clean loss (nats)": float(as_numpy(prof["direction"]["clean"]).mean())})
    return pd.DataFrame(rows).set_index("model").round(3)


# --------------------------------------------------------------------------------------------
# Use (causal) beside decodability (lens)
# --------------------------------------------------------------------------------------------


def causal_evidence(profiles: Mapping[str, dict], P) -> dict[str, dict[str, list[int]]]:
    """Per model and direction (input, next): the residual indices among h_1..h_(L-1) where the net
    effect of removing that token's direction (``causal.direction_effects``, net of the control) has a
    95% bootstrap CI over windows above 0 — where the causal profile is evidence of use at all.
    ``{"model": {"input": [...], "next": [...], "profiled": [...]}}``."""
    out = {}
    for name, prof in profiles.items():
        res = prof["direction"]
        L = int(max(res["residuals"]))
        eff = causal.direction_effects(res)
        inner = [j for j, r in enumerate(res["residuals"]) if 1 <= r <= L - 1]
        out[name] = {"profiled": [int(res["residuals"][j]) for j in inner]}
        for what in ("input", "next"):
            c = stats.curve_ci(eff[what], n_boot=P.n_boot, seed=P.seed)
            out[name][what] = [int(res["residuals"][j]) for j in inner if c.lo[j] > 0]
    return out


def _layers(ls: Sequence[int]) -> str:
    return ", ".join(map(str, ls)) or "none"


def causal_evidence_table(evidence: Mapping[str, Mapping[str, list[int]]], results: Mapping[str, Any],
                          baselines: Mapping[str, Mapping[str, Any]]) -> pd.DataFrame:
    """Per model, from :func:`causal_evidence`: the profiled layers (among h_1..h_(L-1)) where removing the
    input or the next token's direction costs measurably more than removing a random token's (95% CI
    above 0), the profiled layers where the logit lens's top-1 decodes the input token no more often
    than the unigram decoder (a frequency guess), and the layers in both (used although the lens is
    quiet there). Layer lists are the ``l`` of ``h_l``, comma-separated."""
    rows = []
    for name, e in evidence.items():
        rate = as_numpy(results[name].per_seq["top1_input"]).astype(np.float64).mean(0)  # [L+1]
        guess = float(as_numpy(baselines[name]["top1_input"]).mean())
        quiet = [l for l in e["profiled"] if float(rate[l]) <= guess]
        rows.append({"model": name, "layers profiled": len(e["profiled"]),
                     "input used: layers": len(e["input"]), "input used (h_l)": _layers(e["input"]),
                     "next used: layers": len(e["next"]), "next used (h_l)": _layers(e["next"]),
                     "unigram input top-1": round(guess, 3),
                     "lens input top-1 <= unigram (h_l)": _layers(quiet),
                     "input used where the lens is quiet (h_l)": _layers([l for l in e["input"] if l in quiet])})
    return pd.DataFrame(rows).set_index("model")
