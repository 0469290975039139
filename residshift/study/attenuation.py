"""Notebooks 04 and 05: glue and figures for attenuation on frozen pretrained models (claims C2, C3).

The notebooks orchestrate; what they compute or draw is a call into this module:

- **04, the fixed cut** — compute: :func:`run_sweeps` (the layer x alpha grid,
  ``attenuate.sweep`` with the ``sweep_*`` keys), :func:`confirm_sweeps` (the late-cut candidates
  on further windows); tables and rules: :func:`sweep_tables`, :func:`alpha0_table`,
  :func:`c2_rows`, :func:`chosen_cut`; misalignment after the chosen cut: :func:`cut_lens`,
  :func:`misalignment_rows`, :func:`misalignment_table`; figures: :func:`heatmap_panel`,
  :func:`curves_panel`, :func:`alignment_panel`.
- **05, learned gates** — compute: :func:`fit_all` (``attenuate.gates`` with the ``gate_*`` keys),
  :func:`alpha_stats`, :func:`test_losses`, :func:`gate_lens`, :func:`benchmarks`; tables and rules:
  :func:`fit_table`, :func:`concentration_rows`, :func:`loss_rows`, :func:`loss_table`,
  :func:`gate_misalignment_rows`, :func:`benchmark_rows`, :func:`benchmark_table`,
  :func:`benchmark_power`; figures: :func:`fit_history_panel`, :func:`alpha_panel`,
  :func:`loss_panel`, :func:`alignment_panel`.
- **both**: :func:`verdict_table`, :func:`power_lines`.

The verdict rules are :mod:`residshift.analysis.verdicts`'; statistics :mod:`residshift.analysis.stats`'.
Results are cached by the modules that compute them (sweep, gates, lens, harness); the per-window
losses of notebook 05's variants are cached here (:func:`variant_losses`). Every function that takes
``P`` (the resolved profile) reads only keys the calling notebook's ``parameters`` cell declares
(a test checks it).
"""
from __future__ import annotations

import dataclasses
import time
from typing import Any, Mapping

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from matplotlib.colors import SymLogNorm
from matplotlib.lines import Line2D

from ..analysis import stats, verdicts
from ..analysis.stats import as_numpy
from ..attenuate import gates, sweep
from ..core import cache
from ..core.data import token_windows
from ..core.forward import corpus_window_losses
from ..core.interventions import attenuate
from ..measure import evaluate, lens
from .plotting import PALETTE

NAME04 = "04-attenuation-sweep"
NAME05 = "05-learned-gates"
LENS_METRICS = ("logprob", "logrank", "top1")  # what the misalignment rule reads
LENS_SPLIT = "test"  # the lens windows: disjoint from the sweep's (validation) windows
LOSS_SPLIT = "test"  # notebook 05's loss comparison: the best fixed cut was chosen on validation
BENCH_TASKS = ("lambada", "piqa", "arc-easy", "arc-challenge")
VARIANT_STYLE = {"unmodified": ("k", "-", None), "fixed cut": ("#0173b2", "--", "o"),
                 "scalar": ("#0173b2", "--", "o"), "token": ("#cc78bc", ":", "s")}



def _variant_style(label: str) -> tuple[str, Any, str | None]:
    """(colour, line style, marker) of a variant label ("unmodified", "fixed cut", "scalar gates", ...)."""
    return next((v for k, v in VARIANT_STYLE.items() if label.startswith(k)), ("#555555", "-.", None))



# ============================================================================================
# 04: the layer x alpha sweep and the C2 rules
# ============================================================================================


def run_sweeps(models: Mapping[str, Any], P, *, verbose: bool = True) -> dict[str, dict]:
    """The cached, resumable layer x alpha grid per model (``sweep.run_sweep``, the ``sweep_*`` keys)."""
    out = {}
    for name, (lm, tok, info) in models.items():
        t0 = time.perf_counter()
        out[name] = r = sweep.run_sweep(lm, info, tok, sweep.SweepConfig.from_profile(P, name), progress=verbose)
        if verbose:
            print(f"{name}: {len(r['layers'])} blocks x {len(r['alphas'])} alphas x {r['dloss'].shape[-1]} "
                  f"windows of {P.sweep_window} tokens ({P.sweep_corpus} {P.sweep_split}); unmodified "
                  f"loss {float(r['base'].mean()):.3f} nats; {time.perf_counter() - t0:.0f} s "
                  "(a cached result loads in about a second)")
    return out


def sweep_tables(sweeps: Mapping[str, dict], P) -> dict[str, pd.DataFrame]:
    """Per model, one row per (block, alpha): mean dloss with its bootstrap CI over windows."""
    return {name: sweep.summarize(r, n_boot=P.atten_boot, seed=P.seed) for name, r in sweeps.items()}


def heatmap_panel(tables: Mapping[str, pd.DataFrame]):
    """Mean dloss per (block, alpha), one panel per model, ONE colour scale (symmetric log) for all
    panels; a dot marks cells whose 95% CI excludes 0. Returns ``(fig, numbers)``."""
    vmax = max(float(t.dloss.abs().max()) for t in tables.values()) or 1.0
    norm = SymLogNorm(linthresh=0.01, vmin=-vmax, vmax=vmax)
    fig, axes = plt.subplots(1, len(tables), figsize=(4.6 * len(tables) + 1.2, 5.6), squeeze=False)
    im = None
    for ax, (name, t) in zip(axes[0], tables.items()):
        grid = t.pivot(index="layer", columns="alpha", values="dloss")
        sig = ((t.hi < 0) | (t.lo > 0)).to_numpy().reshape(grid.shape)
        im = ax.imshow(grid.values, aspect="auto", cmap="RdBu_r", origin="lower", norm=norm)
        yy, xx = np.nonzero(sig)
        ax.scatter(xx, yy, s=7, c="k", marker="o", linewidths=0)
        ax.set_xticks(range(grid.shape[1]), [f"{a:g}" for a in grid.columns])
        step = max(1, grid.shape[0] // 10)
        ax.set_yticks(range(0, grid.shape[0], step), grid.index[::step])
        ax.set_xlabel(r"$\alpha$ (1 = unmodified)")
        ax.set_ylabel("attenuated block $l$")
        ax.set_title(name)
        ax.grid(False)
    fig.colorbar(im, ax=axes[0].tolist(), label=r"$\Delta$loss (nats), symmetric log scale")
    fig.suptitle(r"$\Delta$loss of attenuating one block's skip path (dot: 95% CI excludes 0)")
    numbers = {name: t.to_dict(orient="records") for name, t in tables.items()}
    return fig, numbers


def curves_panel(tables: Mapping[str, pd.DataFrame]):
    """Mean dloss per block, one line per alpha < 1, 95% CI bands; panels share the y axis
    (symmetric log, linear within +-0.01 nats). Returns ``(fig, numbers)``."""
    fig, axes = plt.subplots(1, len(tables), figsize=(5.6 * len(tables), 4.0), squeeze=False, sharey=True)
    numbers = {}
    for ax, (name, t) in zip(axes[0], tables.items()):
        for alpha, g in t[t.alpha < 1].groupby("alpha"):
            line, = ax.plot(g.layer, g.dloss, marker=".", label=rf"$\alpha$ = {alpha:g}")
            ax.fill_between(g.layer, g.lo, g.hi, alpha=0.2, color=line.get_color(), lw=0)
        ax.axhline(0, color="k", lw=0.8)
        ax.set_yscale("symlog", linthresh=0.01)
        ax.set_xlabel("attenuated block $l$")
        ax.set_title(name)
        numbers[name] = t[t.alpha < 1].to_dict(orient="records")
    axes[0][0].set_ylabel(r"$\Delta$loss (nats), symlog")
    axes[0][-1].legend(fontsize=8, ncol=2)
    fig.tight_layout()
    return fig, numbers


def alpha0_table(sweeps: Mapping[str, dict], P) -> pd.DataFrame:
    """Cutting one block's skip path (alpha = 0) of the trained model, per block: a DESCRIPTION of
    how much the model relies on each skip path (``verdicts.alpha0_summary``), not evidence for C2."""
    rows = []
    for name, r in sweeps.items():
        for d in verdicts.alpha0_summary(r["dloss"], r["layers"], r["alphas"], n_boot=P.atten_boot, seed=P.seed):
            rows.append({"model": name, "block": d["layer"], "dloss": d["dloss"], "lo": d["lo"], "hi": d["hi"]})
    return pd.DataFrame(rows)


def alpha0_summary_lines(table: pd.DataFrame) -> list[str]:
    """Per model: block 0's cost, the cheapest other block and the most harmful block (printed)."""
    lines = []
    for name, t in table.groupby("model", sort=False):
        b0 = t[t.block == 0].iloc[0]
        rest = t[t.block != 0]
        lo, hi = rest.loc[rest.dloss.idxmin()], t.loc[t.dloss.idxmax()]
        lines.append(f"{name}: cutting block 0's skip path costs {b0.dloss:+.4f} nats "
                     f"[{b0.lo:+.4f}, {b0.hi:+.4f}]; the cheapest other block is {int(lo.block)} "
                     f"({lo.dloss:+.3f} nats), the most harmful block {int(hi.block)} ({hi.dloss:+.3f} nats)")
    for line in lines:
        print(line)
    return lines


def confirm_sweeps(models: Mapping[str, Any], sweeps: Mapping[str, dict], P,
                   *, verbose: bool = True) -> dict[str, dict[tuple[int, float], np.ndarray]]:
    """The late-cut candidates (``verdicts.late_cut_candidates`` on the grid's windows) swept on the
    NEXT ``sweep_confirm_windows`` windows of the same seed (disjoint: windows of a seed are nested).

    Returns ``{model: {(block, alpha): dloss per confirmation window}}``.
    """
    out = {}
    for name, (lm, tok, info) in models.items():
        r = sweeps[name]
        picked = verdicts.late_cut_candidates(r["dloss"], r["layers"], r["alphas"], n_layers=info.n_layers)
        base = sweep.SweepConfig.from_profile(P, name)
        n_sel = base.n_windows
        out[name] = {}
        for layer in sorted({c["layer"] for c in picked}):
            alphas = tuple(sorted(c["alpha"] for c in picked if c["layer"] == layer))
            cfg = dataclasses.replace(base, layers=(layer,), alphas=alphas,
                                      n_windows=n_sel + P.sweep_confirm_windows)
            res = sweep.run_sweep(lm, info, tok, cfg)
            for ai, a in enumerate(alphas):
                out[name][(layer, a)] = as_numpy(res["dloss"][0, ai, n_sel:])
        if verbose:
            cands = ", ".join(f"block {c['layer']} alpha={c['alpha']:g} ({c['selection_mean']:+.4f})" for c in picked)
            print(f"{name}: candidates chosen on the {n_sel} grid windows: {cands}; confirmed on "
                  f"{P.sweep_confirm_windows} further windows")
    return out


def c2_rows(models: Mapping[str, Any], sweeps: Mapping[str, dict],
            confirmations: Mapping[str, Mapping], P) -> list:
    """C2.layer-sensitive (the grid, alpha = 0.5) and C2.late-cut (selected on the grid, confirmed on
    further windows) per model: ``verdicts.c2_layer_sensitive`` / ``c2_late_cut``."""
    rows = []
    for name, r in sweeps.items():
        info = models[name].info
        rows += verdicts.c2_layer_sensitive(r["dloss"], r["layers"], r["alphas"], model=name,
                                            probe_alpha=verdicts.PROBE_ALPHA, n_boot=P.atten_boot, seed=P.seed,
                                            source=f"{NAME04}-heatmap")
        rows += verdicts.c2_late_cut(r["dloss"], r["layers"], r["alphas"], n_layers=info.n_layers, model=name,
                                     confirm_dloss=confirmations[name], n_boot=P.atten_boot, seed=P.seed,
                                     source=f"{NAME04}-late-cut")
    return rows


def chosen_cut(rows, model: str) -> tuple[int, float]:
    """The (block, alpha) the C2.late-cut row of ``model`` reports (its headline candidate)."""
    row = next(r for r in rows if r.model == model and r.claim_id == "C2.late-cut")
    head = min(row.details["candidates"], key=lambda c: (not c["rejected"], c["mean"]))
    return int(head["layer"]), float(head["alpha"])


def late_cut_table(rows) -> pd.DataFrame:
    """Every confirmed candidate: selection mean, confirmation mean [CI], Holm-adjusted p, MDE."""
    out = []
    for r in rows:
        if r.claim_id != "C2.late-cut":
            continue
        for c in r.details["candidates"]:
            out.append({"model": r.model, "block": c["layer"], "alpha": c["alpha"],
                        "selection mean": round(c["selection_mean"], 4),
                        "confirmation mean [95% CI]": stats.format_ci(c["mean"], c["lo"], c["hi"], 4),
                        "p (Holm)": round(c["p_holm"], 4), "MDE (nats)": round(c["mde"], 4)})
    return pd.DataFrame(out)


def _lens(loaded, P, attenuation=None):
    lm, tok, info = loaded
    return lens.run_lens(lm, info, tok, corpus=P.sweep_corpus, split=LENS_SPLIT, window=P.atten_lens_window,
                         n=P.atten_lens_windows, seed=P.seed, batch=P.sweep_batch, metrics=LENS_METRICS,
                         attenuation=attenuation, positions=P.atten_lens_positions)


def cut_lens(models: Mapping[str, Any], cuts: Mapping[str, tuple[int, float]], P) -> dict[str, dict]:
    """The logit lens (``lens.run_lens``, cached) on the lens windows, unmodified and with each
    model's chosen cut: ``{model: {"unmodified": LensResult, "cut": LensResult}}``."""
    out = {}
    for name, loaded in models.items():
        layer, alpha = cuts[name]
        out[name] = {"unmodified": _lens(loaded, P), "cut": _lens(loaded, P, {layer: alpha})}
    return out


def _loss(res) -> np.ndarray:
    """Per-window next-token loss on the lens's analysed positions: -log p(next) at h_L."""
    return -as_numpy(res.per_seq["logprob_next"])[:, -1]


def misalignment_rows(runs: Mapping[str, Mapping[str, Any]], cuts: Mapping[str, tuple[int, float]], P) -> list:
    """``verdicts.c3_misalignment`` applied to each model's chosen fixed cut (states after the cut
    block), with the loss change beside it. In notebook 04 a measurement, not a verdict on C3."""
    rows = []
    for name, r in runs.items():
        layer, alpha = cuts[name]
        before, after = r["unmodified"], r["cut"]
        rows += verdicts.c3_misalignment(before.per_seq, after.per_seq,
                                         after_layers=range(layer + 1, before.n_layers + 1), model=name,
                                         variant=f"fixed cut: block {layer}, alpha={alpha:g}",
                                         loss_before=_loss(before), loss_after=_loss(after),
                                         n_boot=P.atten_boot, seed=P.seed, source=f"{NAME04}-misalignment")
    return rows


def misalignment_table(rows) -> pd.DataFrame:
    """The misalignment rows as a table: statistic, estimate [CI], the rule's reading, loss change."""
    out = []
    for r in rows:
        loss = r.details.get("loss_change")
        out.append({"model": r.model, "variant": r.variant, "measure": r.claim_id, "statistic": r.statistic,
                    "estimate [95% CI]": stats.format_ci(r.estimate, *r.ci, 4), "rule's reading": r.verdict,
                    "loss change [95% CI]": "" if not loss else stats.format_ci(loss["delta"], loss["lo"],
                                                                                  loss["hi"], 4)})
    return pd.DataFrame(out).set_index(["model", "variant", "measure"])


# ============================================================================================
# Alignment curves before / after an edit (04 and 05)
# ============================================================================================


def _shared_range(panels) -> None:
    """One y range for several panels, each given as ``(ax, curves)`` with curves = estimates at
    h_0..h_L (drawn from h_1). Where h_1 lies further below the later states than they span (Gemma's
    next token), the range follows h_2..h_L and the panel notes where h_1 lies."""
    est = {id(ax): np.asarray(c, dtype=np.float64)[:, 1:] for ax, c in panels}
    rest = np.concatenate([e[:, 1:].ravel() for e in est.values()])
    lo, hi = float(rest.min()), float(rest.max())
    span = max(hi - lo, 1e-6)
    first = np.concatenate([e[:, 0] for e in est.values()])
    if float(first.min()) < lo - span:
        bottom, top = lo - 0.12 * span, max(hi, float(first.max())) + 0.08 * span
        for ax, _ in panels:
            low1 = float(est[id(ax)][:, 0].min())
            if low1 < bottom:
                ax.annotate(f"$h_1$ off the chart: {low1:.0f} nats", xy=(0.03, 0.03), xycoords="axes fraction",
                            fontsize=8, color="#555555")
    else:
        bottom, top = min(lo, float(first.min())), max(hi, float(first.max()))
        pad = 0.06 * max(top - bottom, 1e-6)
        bottom, top = bottom - pad, top + pad
    for ax, _ in panels:
        ax.set_ylim(bottom, top)


def _stack_seeds(results) -> dict[str, np.ndarray]:
    """Per-window curves averaged over seeds (one LensResult or a list of them)."""
    res = results if isinstance(results, (list, tuple)) else [results]
    return {k: np.mean([as_numpy(x.per_seq[k]) for x in res], axis=0) for k in res[0].per_seq}


def alignment_panel(runs: Mapping[str, Mapping[str, Any]], P, *, markers: Mapping[str, int] | None = None,
                    title: str = ""):
    """Lens log-probability of the input token and of the next token per residual state, before and
    after an edit, and the paired change, per model (rows).

    ``runs``: ``{model: {"unmodified": LensResult, variant: LensResult or [one per seed]}}`` (seeds
    are averaged per window). Columns: (1) input token ``x_t``, (2) next token ``x_{t+1}``, each with
    every variant (colour and line style per variant, 95% bootstrap CI bands over windows), from
    ``h_1`` (``h_0`` is the embedding, far below every other state for the next token); (3) the
    change variant - unmodified, paired per window, with CIs (input: green, next: orange). Columns
    (1) and (2) share one y axis per model so the two tokens compare; where ``h_1`` lies far below
    every later state (Gemma's next token) the range follows ``h_2..h_L`` and the panel says where
    ``h_1`` lies. ``markers``: ``{model: block}`` draws a line where the edited residual state begins.
    Returns ``(fig, numbers)``.
    """
    n = len(runs)
    fig, axes = plt.subplots(n, 3, figsize=(15, 3.6 * n), squeeze=False)
    numbers: dict[str, Any] = {}
    for i, (name, r) in enumerate(runs.items()):
        base = _stack_seeds(r["unmodified"])
        L = base["logprob_input"].shape[1] - 1
        xs = np.arange(1, L + 1)
        numbers[name] = {}
        for j, which in enumerate(("input", "next")):
            ax = axes[i][j]
            for label, res in r.items():
                color, ls, marker = _variant_style(label)
                c = stats.curve_ci(_stack_seeds(res)[f"logprob_{which}"], n_boot=P.atten_boot, seed=P.seed)
                ax.plot(xs, c.estimate[1:], ls=ls, color=color, marker=marker, ms=3, lw=1.5, label=label)
                ax.fill_between(xs, c.lo[1:], c.hi[1:], color=color, alpha=0.15, lw=0)
                numbers[name][f"{label}/logprob_{which}"] = c.as_dict()
            ax.set_title(f"{name}: {'input token $x_t$' if which == 'input' else 'next token $x_{t+1}$'}",
                         fontsize=10)
            ax.set_xlabel(r"residual state $h_l$")
        axes[i][0].set_ylabel("lens log-prob (nats)")
        _shared_range([(axes[i][j], [v["estimate"] for k, v in numbers[name].items() if k.endswith(f"_{w}")])
                       for j, w in enumerate(("input", "next"))])
        axes[i][0].legend(fontsize=8)
        ax = axes[i][2]
        for label, res in r.items():
            if label == "unmodified":
                continue
            _, ls, marker = _variant_style(label)
            after = _stack_seeds(res)
            for which in ("input", "next"):
                col = f"logprob_{which}"
                d = stats.paired_difference_ci(after[col], base[col], n_boot=P.atten_boot, seed=P.seed)
                ax.plot(xs, d.estimate[1:], ls=ls, marker=marker, ms=3, color=PALETTE[which], lw=1.5)
                ax.fill_between(xs, d.lo[1:], d.hi[1:], color=PALETTE[which], alpha=0.15, lw=0)
                numbers[name][f"{label}/change/{col}"] = d.as_dict()
        ax.axhline(0, color="k", lw=0.8)
        ax.set_title(f"{name}: change with the edit (paired per window)", fontsize=10)
        ax.set_xlabel(r"residual state $h_l$")
        ax.set_ylabel(r"$\Delta$ lens log-prob (nats)")
        styles = [Line2D([], [], color=PALETTE["input"], label="input token"),
                  Line2D([], [], color=PALETTE["next"], label="next token")]
        styles += [Line2D([], [], color="grey", ls=_variant_style(k)[1], marker=_variant_style(k)[2], label=k)
                   for k in r if k != "unmodified"]
        ax.legend(handles=styles, fontsize=8)
        if markers and name in markers:
            for a in axes[i]:
                a.axvline(markers[name] + 1, color="grey", lw=0.8, ls=(0, (2, 2)))
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig, numbers


# ============================================================================================
# 05: learned gates
# ============================================================================================


def fit_all(models: Mapping[str, Any], P, *, verbose: bool = True) -> dict[tuple[str, str, int], dict]:
    """Every gate fit of the profile (``gates.fit_gates``, cached and resumable):
    ``{(model, kind, seed): result}``."""
    fits = {}
    for name, (lm, tok, info) in models.items():
        for kind in P.gate_kinds:
            for s in P.gate_seeds:
                t0 = time.perf_counter()
                r = gates.fit_gates(lm, info, tok, gates.GateConfig.from_profile(P, name, kind, s), progress=verbose)
                fits[(name, kind, s)] = r
                if verbose:
                    how = "stopped by patience" if r["stopped_early"] else "hit the step cap"
                    print(f"{name} {kind} seed {s}: {r['steps']} steps ({how}; best at step {r['best_step']}); "
                          f"{time.perf_counter() - t0:.0f} s")
    return fits


def fit_table(fits: Mapping[tuple, dict]) -> pd.DataFrame:
    """One row per fit: steps, how it ended, held-out loss of the unmodified model, at init, best."""
    rows = []
    for (name, kind, s), r in fits.items():
        rows.append({"model": name, "gates": kind, "seed": s, "steps": r["steps"], "best step": r["best_step"],
                     "ended by": "patience" if r["stopped_early"] else "step cap",
                     "held-out: unmodified": r["heldout_base"], "at init": r["heldout_init"],
                     "best": r["heldout_best"], "best - unmodified": r["heldout_best"] - r["heldout_base"],
                     "fit s": r["seconds"]})
    return pd.DataFrame(rows).round(4)


def fit_history_panel(fits: Mapping[tuple, dict]):
    """Held-out loss minus the unmodified model's, per evaluation, one line per fit; a marker at
    the kept (best) step. Panels per model. Returns ``(fig, numbers)``."""
    names = list(dict.fromkeys(k[0] for k in fits))
    fig, axes = plt.subplots(1, len(names), figsize=(5.6 * len(names), 3.6), squeeze=False)
    numbers: dict[str, Any] = {}
    for ax, name in zip(axes[0], names):
        for (n_, kind, s), r in fits.items():
            if n_ != name:
                continue
            steps, vals = zip(*r["heldout"])
            y = np.asarray(vals) - r["heldout_base"]
            color, ls, marker = _variant_style(kind)
            ax.plot(steps, y, ls=ls, color=color, marker=marker, ms=3, alpha=1.0 if s == min(
                k[2] for k in fits) else 0.6, label=f"{kind}, seed {s}")
            ax.plot([r["best_step"]], [r["heldout_best"] - r["heldout_base"]], marker="*", ms=11, color=color,
                    ls="none")
            numbers[f"{name}/{kind}/seed{s}"] = {"steps": list(steps), "heldout_minus_unmodified": y.tolist(),
                                                 "best_step": r["best_step"], "stopped_early": r["stopped_early"]}
        ax.axhline(0, color="k", lw=0.8)
        ax.set_xlabel("optimiser step")
        ax.set_title(f"{name} (star: kept gates)", fontsize=10)
        ax.legend(fontsize=8)
    axes[0][0].set_ylabel("held-out loss − unmodified (nats)")
    fig.tight_layout()
    return fig, numbers


def alpha_stats(models: Mapping[str, Any], fits: Mapping[tuple, dict], P) -> dict[tuple, dict]:
    """alpha per gated block over the lens windows' tokens (``gates.fitted_alpha_stats``, cached)."""
    out = {}
    for (name, kind, s), r in fits.items():
        lm, tok, info = models[name]
        out[(name, kind, s)] = gates.fitted_alpha_stats(lm, info, tok, r, corpus=P.sweep_corpus, split=LENS_SPLIT,
                                                        window=P.atten_lens_window, n=P.atten_lens_windows,
                                                        seed=P.seed, batch=P.sweep_batch)
    return out


def alpha_panel(astats: Mapping[tuple, dict], P):
    """The learned attenuation ``1 - alpha_l`` per block (log scale), one panel per model x gate
    kind, all panels on ONE y axis; lines per seed, token gates with the 10-90% band of
    ``1 - alpha_l(t)`` over tokens (inside (0, 1) by construction). Dashed: the initial value
    ``1 - sigmoid(6)``; dotted: the 0.05 floor of a material attenuation (C3.concentrates).
    Returns ``(fig, numbers)``."""
    names = list(dict.fromkeys(k[0] for k in astats))
    kinds = list(P.gate_kinds)
    fig, axes = plt.subplots(len(names), len(kinds), figsize=(5.4 * len(kinds), 3.4 * len(names)),
                             squeeze=False, sharey=True)
    floor = verdicts.MIN_ATTENUATION
    init = 1 - float(torch.sigmoid(torch.tensor(gates.THETA_INIT)))
    numbers: dict[str, Any] = {}
    for i, name in enumerate(names):
        for j, kind in enumerate(kinds):
            ax = axes[i][j]
            for s in P.gate_seeds:
                st = astats[(name, kind, s)]
                layers = np.asarray(st["layers"])
                att = 1 - as_numpy(st["mean"])
                line, = ax.plot(layers, att, marker=".", label=f"seed {s}")
                q = 1 - as_numpy(st["q"])  # quantiles of alpha -> of 1 - alpha (order flips)
                if kind == "token":
                    ax.fill_between(layers, q[-1], q[0], color=line.get_color(), alpha=0.15, lw=0)
                numbers[f"{name}/{kind}/seed{s}"] = {"layers": layers.tolist(), "attenuation_mean": att.tolist(),
                                                     "attenuation_q90_q10": [q[-1].tolist(), q[0].tolist()]}
            ax.axhline(init, ls="--", color="grey", lw=0.8)
            ax.axhline(floor, ls=":", color="k", lw=0.8)
            ax.set_yscale("log")
            ax.set_ylim(top=1.0)
            ax.set_title(f"{name}: {kind} gates", fontsize=10)
            ax.set_xlabel("gated block $l$")
            if j == 0:
                ax.set_ylabel(r"attenuation $1-\alpha_l$ (log)")
            ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    return fig, numbers


def concentration_rows(models: Mapping[str, Any], fits: Mapping[tuple, dict],
                       astats: Mapping[tuple, dict], P) -> list:
    """``verdicts.c3_concentration`` per model and gate kind (token gates: mean alpha over tokens);
    a fit that hit its step cap makes its seed inconclusive."""
    rows = []
    for name, loaded in models.items():
        for kind in P.gate_kinds:
            keys = [(name, kind, s) for s in P.gate_seeds]
            a = np.stack([as_numpy(astats[k]["mean"]) for k in keys])
            rows += verdicts.c3_concentration(a, astats[keys[0]]["layers"], loaded.info.n_layers, model=name,
                                              variant=f"{kind} gates",
                                              converged=[fits[k]["stopped_early"] for k in keys],
                                              steps=[fits[k]["steps"] for k in keys], source=f"{NAME05}-alpha")
    return rows


def _windows(loaded, P, split: str, n: int, window: int):
    _, tok, info = loaded
    return token_windows(P.sweep_corpus, split, tok, length=window, n=n, seed=P.seed, prepend_bos=info.prepend_bos)


def variant_losses(loaded, P, *, variant: Mapping[str, Any], intervene=None) -> np.ndarray:
    """Per-window mean next-token loss on ``eval_windows`` test windows of the sweep corpus, with an
    edit (``intervene(model, info)``) identified by ``variant`` (``forward.corpus_window_losses``)."""
    lm, tok, info = loaded
    return corpus_window_losses(lm, info, tok, corpus=P.sweep_corpus, split=LOSS_SPLIT, window=P.eval_window,
                                n=P.eval_windows, seed=P.seed, batch_size=P.sweep_batch, variant=variant,
                                intervene=intervene, code=[attenuate, gates.gate_intervention])


def test_losses(models: Mapping[str, Any], fits: Mapping[tuple, dict], sweeps: Mapping[str, dict],
                P) -> dict[str, dict]:
    """Per model, per-window test losses of the unmodified model, of the best fixed cut (chosen on
    the sweep's validation windows by ``verdicts.best_fixed_cut``, alpha = 1 among the candidates)
    and of every fit: ``{model: {"unmodified", "cut", "cut_info", "gates": {kind: [n_seeds, n]}}}``."""
    out = {}
    for name, loaded in models.items():
        r = sweeps[name]
        cut = verdicts.best_fixed_cut(r["dloss"], r["layers"], r["alphas"])
        base = variant_losses(loaded, P, variant={"edit": None})
        if cut["layer"] is None:
            cut_losses = base
        else:
            plan = {cut["layer"]: cut["alpha"]}
            cut_losses = variant_losses(loaded, P, variant={"edit": "cut", "plan": {str(k): v for k, v in plan.items()}},
                                        intervene=lambda m, i, p=plan: attenuate(m, i, p))
        g = {}
        for kind in P.gate_kinds:
            g[kind] = np.stack([
                variant_losses(loaded, P, variant={"edit": "gates", "fit": fits[(name, kind, s)]["config"]},
                               intervene=gates.gate_intervention(gates.fitted(fits[(name, kind, s)], loaded.info)))
                for s in P.gate_seeds])
        out[name] = {"unmodified": base, "cut": cut_losses, "cut_info": cut, "gates": g}
    return out


def loss_rows(losses: Mapping[str, dict], fits: Mapping[tuple, dict], P) -> list:
    """C3.beats-baseline and C3.beats-best-cut per model and gate kind (``verdicts``)."""
    rows = []
    for name, d in losses.items():
        for kind in P.gate_kinds:
            keys = [(name, kind, s) for s in P.gate_seeds]
            conv = [fits[k]["stopped_early"] for k in keys]
            steps = [fits[k]["steps"] for k in keys]
            common = dict(model=name, variant=f"{kind} gates", converged=conv, steps=steps, n_boot=P.atten_boot,
                          seed=P.seed, source=f"{NAME05}-loss")
            rows += verdicts.c3_beats_baseline(d["gates"][kind], d["unmodified"], **common)
            rows += verdicts.c3_beats_best_cut(d["gates"][kind], d["cut"], cut=d["cut_info"], **common)
    return rows


def loss_table(losses: Mapping[str, dict], P) -> pd.DataFrame:
    """Mean test loss per variant and its paired change vs the unmodified model [95% CI]."""
    rows = []
    for name, d in losses.items():
        variants = {"unmodified": d["unmodified"], f"best fixed cut ({d['cut_info']['label']})": d["cut"]}
        for kind, arr in d["gates"].items():
            for s, x in zip(P.gate_seeds, arr):
                variants[f"{kind} gates, seed {s}"] = x
        for label, x in variants.items():
            p = stats.paired_delta(x, d["unmodified"], n_boot=P.atten_boot, seed=P.seed)
            rows.append({"model": name, "variant": label, "loss": float(np.mean(x)), "change": p["delta"],
                         "lo": p["lo"], "hi": p["hi"], "n": p["n"]})
    return pd.DataFrame(rows)


def loss_panel(table: pd.DataFrame):
    """Loss change vs the unmodified model per variant with 95% CIs, one panel per model, ONE x axis
    (symmetric log, linear within +-0.01 nats). Returns ``(fig, numbers)``."""
    names = list(dict.fromkeys(table.model))
    t0 = table[table.variant != "unmodified"]
    k = max(len(t0[t0.model == n]) for n in names)
    fig, axes = plt.subplots(1, len(names), figsize=(6.2 * len(names), 0.9 + 0.42 * k), squeeze=False, sharex=True)
    for ax, name in zip(axes[0], names):
        t = t0[t0.model == name]
        y = np.arange(len(t))[::-1]
        colors = [_variant_style(v)[0] if "gates" in v else "#ca9161" for v in t.variant]
        for yi, (_, row), c in zip(y, t.iterrows(), colors):
            ax.errorbar(row.change, yi, xerr=[[row.change - row.lo], [row.hi - row.change]], fmt="o", color=c,
                        capsize=3)
        ax.set_yticks(y, t.variant, fontsize=9)
        ax.axvline(0, color="k", lw=0.8)
        ax.set_xscale("symlog", linthresh=0.01)
        ax.set_xlabel(r"test loss change vs unmodified (nats), 95% CI")
        ax.set_title(name, fontsize=10)
    fig.tight_layout()
    return fig, table.to_dict(orient="records")


def gated_lens(lm, info, tokenizer, fit_result: dict[str, Any], *, corpus: str, split: str,
               window: int, n: int, seed: int = 0, batch: int = 4, metrics=("rank", "logprob", "top1"),
               positions: int | None = None, matmul_dtype: str = "float32"):
    """The logit-lens corpus pass (``lens.corpus_metrics``) with fitted gates in place, cached by the
    fit's configuration (gates are identified by the config that produced them). ``positions`` and
    ``matmul_dtype`` as in ``lens.run_lens`` (analysed positions per window; the unembedding's dtype)."""
    g = gates.fitted(fit_result, info)
    key = {"fit": fit_result["config"], "corpus": corpus, "split": split, "window": int(window),
           "n": int(n), "seed": int(seed), "metrics": list(metrics)}
    if positions is not None or matmul_dtype != "float32":
        key.update(positions=positions, matmul_dtype=matmul_dtype)

    def compute():
        windows = token_windows(corpus, split, tokenizer, length=window, n=n, seed=seed,
                                prepend_bos=info.prepend_bos)
        opt = lens.LensOptions(metrics=tuple(metrics), positions=positions, matmul_dtype=matmul_dtype,
                               seed=seed)
        return lens.corpus_metrics(lm, info, windows, batch=batch, attenuation=gates.attenuation_map(g), options=opt)

    return cache.cached("gated-lens", key, compute, code=gated_lens)


def gate_lens(models: Mapping[str, Any], fits: Mapping[tuple, dict], P) -> dict[str, dict]:
    """The lens on the lens windows, unmodified (``lens.run_lens``, the same cached pass as notebook
    04's) and with every fit's gates (:func:`gated_lens`): ``{model: {"unmodified": res,
    "<kind> gates": [res per seed]}}``."""
    out = {}
    for name, loaded in models.items():
        lm, tok, info = loaded
        out[name] = {"unmodified": _lens(loaded, P)}
        for kind in P.gate_kinds:
            out[name][f"{kind} gates"] = [
                gated_lens(lm, info, tok, fits[(name, kind, s)], corpus=P.sweep_corpus, split=LENS_SPLIT,
                                 window=P.atten_lens_window, n=P.atten_lens_windows, seed=P.seed,
                                 batch=P.sweep_batch, metrics=LENS_METRICS, positions=P.atten_lens_positions)
                for s in P.gate_seeds]
    return out


def gate_misalignment_rows(runs: Mapping[str, Mapping[str, Any]], P) -> list:
    """``verdicts.c3_misalignment`` per model and gate kind: the gates edit every block, so the
    states after the first edited block are ``h_1..h_L``; per-window curves are averaged over the
    seeds' gates (the seed-averaged effect, as the loss rules report it)."""
    rows = []
    for name, r in runs.items():
        before = r["unmodified"]
        for label, res in r.items():
            if label == "unmodified":
                continue
            after = _stack_seeds(res)
            rows += verdicts.c3_misalignment(before.per_seq, after, after_layers=range(1, before.n_layers + 1),
                                             model=name, variant=label, loss_before=_loss(before),
                                             loss_after=-after["logprob_next"][:, -1], n_boot=P.atten_boot,
                                             seed=P.seed, source=f"{NAME05}-alignment")
    return rows


def benchmarks(models: Mapping[str, Any], fits: Mapping[tuple, dict], P, *, verbose: bool = True) -> dict[str, dict]:
    """Per-item correctness before (unmodified) and after (each fit's gates), on the same items
    (``evaluate.run_task``, cached per item shard): ``{model: {"before": {task: [n]},
    "<kind> gates": {task: [n_seeds, n]}}}``."""
    cfg = evaluate.EvalConfig.from_profile(P)
    out = {}
    for name, (lm, tok, info) in models.items():
        t0 = time.perf_counter()
        before, items = {}, {}
        for task in BENCH_TASKS:
            res = evaluate.run_task(lm, info, task, tokenizer=tok, limit=P.eval_items, config=cfg)
            before[task], items[task] = evaluate.item_correct(res), np.asarray(res.details["items"])
        out[name] = {"before": before}
        for kind in P.gate_kinds:
            after = {t: [] for t in BENCH_TASKS}
            for s in P.gate_seeds:
                r = fits[(name, kind, s)]
                tag = f"{kind}-gates-{cache.config_key(r['config'])}"
                for task in BENCH_TASKS:
                    res = evaluate.run_task(lm, info, task, tokenizer=tok, limit=P.eval_items, config=cfg,
                                            intervene=gates.gate_intervention(gates.fitted(r, info)), cache_tag=tag)
                    if not np.array_equal(np.asarray(res.details["items"]), items[task]):
                        raise RuntimeError(f"{task}: the items after differ from the items before")
                    after[task].append(evaluate.item_correct(res))
            out[name][f"{kind} gates"] = {t: np.stack(v) for t, v in after.items()}
        if verbose:
            print(f"{name}: {len(BENCH_TASKS)} tasks x {len(before[BENCH_TASKS[0]])} items, unmodified and "
                  f"{len(P.gate_kinds) * len(P.gate_seeds)} gate fits; {time.perf_counter() - t0:.0f} s")
    return out


def benchmark_rows(bench: Mapping[str, dict], P) -> list:
    """``verdicts.c3_benchmarks`` per model and gate kind (McNemar per task, Holm, MDE, per seed)."""
    rows = []
    for name, b in bench.items():
        for label, after in b.items():
            if label == "before":
                continue
            rows += verdicts.c3_benchmarks(b["before"], after, model=name, variant=label, n_boot=P.atten_boot,
                                           seed=P.seed, source=f"{NAME05}-benchmarks")
    return rows


def benchmark_table(bench: Mapping[str, dict]) -> pd.DataFrame:
    """Accuracy per task before and after (seed-averaged), items, and items whose correctness changed."""
    rows = []
    for name, b in bench.items():
        for task, x in b["before"].items():
            row = {"model": name, "task": task, "items": len(x), "unmodified": x.mean()}
            for label, after in b.items():
                if label != "before":
                    row[label] = after[task].mean()
                    row[f"{label}: changed items"] = float(np.mean([(a != x).sum() for a in after[task]]))
            rows.append(row)
    return pd.DataFrame(rows).set_index(["model", "task"]).round(3)


def benchmark_power(rows) -> list[str]:
    """Per benchmark row: the largest per-task minimum detectable drop at this n, and roughly how
    many items per task would bring it to the rule's margin (``verdicts.benchmark_items_needed``)."""
    lines = []
    for r in rows:
        if r.claim_id != "C3.benchmarks":
            continue
        worst, need = verdicts.benchmark_items_needed(r)
        lines.append(f"{r.model} · {r.variant}: largest detectable drop {worst['mde']:.3f} accuracy at "
                     f"{worst['n']} items (changed-answer rate <= {worst['discordance_upper']:.3f}); "
                     f"a {r.details['margin']:g} drop needs about {need} items per task")
    for line in lines:
        print(line)
    return lines
