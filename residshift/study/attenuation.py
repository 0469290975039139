"""Notebooks 04 and 05: glue and figures for attenuation on frozen pretrained models (claims C2, C3).

The notebooks orchestrate; what they compute or draw is a call into this module:

- **04, the fixed cut** — compute: :func:`run_sweeps` (the layer x alpha grid,
  ``attenuate.sweep`` with the ``sweep_*`` keys), :func:`confirm_sweeps` (the late-cut candidates
  on further windows); tables and rules: :func:`sweep_tables`, :func:`alpha0_table`,
  :func:`alpha0_overview`, :func:`c2_rows`, :func:`chosen_cut`, :func:`late_cut_table`; misalignment
  after the chosen cut: :func:`cut_lens`, :func:`misalignment_rows`, :func:`misalignment_table`;
  figures: :func:`heatmap_panel`, :func:`curves_panel`, :func:`alignment_panel`.
- **05, learned gates** — compute: :func:`fit_all` (``attenuate.gates`` with the ``gate_*`` keys),
  :func:`alpha_stats`, :func:`test_losses`, :func:`gate_lens`, :func:`benchmarks`; tables and rules:
  :func:`fit_table`, :func:`concentration_rows`, :func:`loss_rows`, :func:`loss_table`,
  :func:`gate_misalignment_rows`, :func:`benchmark_rows`, :func:`benchmark_table`,
  :func:`benchmark_power_table`, :func:`verdict_grid`; figures: :func:`fit_history_panel`,
  :func:`alpha_panel`, :func:`loss_panel`, :func:`alignment_panel`.
- **where the best single cut sits** (04 and 05): :func:`depth_region` (early / middle / late),
  :func:`best_cut_anywhere` (the best cell over every block and the best late cell, selected on the
  grid and measured on the confirmation windows; pure parts :func:`best_cut_selection`,
  :func:`best_cut_summary`; compute :func:`confirm_cells`), :func:`best_cut_panel`,
  :func:`best_cut_table`; for 05 :func:`gate_ranking` and :func:`gate_cut_table` (the gates'
  most attenuated blocks beside the best fixed cut).

Every function returns numbers, tables or figures; none writes sentences from results (``verbose``
progress messages aside): the notebooks' findings are written by their authors and checked against
the saved numbers.

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
from ..core import cache, profiles
from ..core.data import token_windows
from ..core.forward import corpus_window_losses
from ..core.interventions import attenuate
from ..measure import evaluate, lens
from . import lens_setups
from .plotting import PALETTE, integer_axis

NAME04 = "04-attenuation-sweep"
NAME05 = "05-learned-gates"
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
        out[name] = r = sweep.run_sweep(lm, info, tok, profiles.stage(sweep.SweepConfig, P, model=name), progress=verbose)
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
        integer_axis(ax, "x")
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


def alpha0_overview(table: pd.DataFrame) -> pd.DataFrame:
    """Per model, from :func:`alpha0_table`: block 0's cost with its 95% CI, the cheapest other block
    and the most harmful block with their costs (nats), one row per model."""
    rows = []
    for name, t in table.groupby("model", sort=False):
        b0 = t[t.block == 0].iloc[0]
        rest = t[t.block != 0]
        lo, hi = rest.loc[rest.dloss.idxmin()], t.loc[t.dloss.idxmax()]
        rows.append({"model": name, "block 0 cost": b0.dloss, "lo": b0.lo, "hi": b0.hi,
                     "cheapest other block": int(lo.block), "cheapest cost": lo.dloss,
                     "most harmful block": int(hi.block), "most harmful cost": hi.dloss})
    return pd.DataFrame(rows).set_index("model").round(4)


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
        base = profiles.stage(sweep.SweepConfig, P, model=name)
        n_sel = base.n_windows
        out[name] = {}
        for layer in sorted({c["layer"] for c in picked}):
            alphas = tuple(sorted(c["alpha"] for c in picked if c["layer"] == layer))
            cfg = dataclasses.replace(base, layers=(layer,), alphas=alphas, first_window=n_sel,
                                      n_windows=n_sel + P.sweep_confirm_windows)
            res = sweep.run_sweep(lm, info, tok, cfg)
            for ai, a in enumerate(alphas):
                out[name][(layer, a)] = as_numpy(res["dloss"][0, ai])
        if verbose:
            cands = ", ".join(f"block {c['layer']} alpha={c['alpha']:g} ({c['selection_mean']:+.4f})" for c in picked)
            print(f"{name}: candidates chosen on the {n_sel} grid windows: {cands}; confirmed on "
                  f"{P.sweep_confirm_windows} further windows")
    return out


def c2_rows(models: Mapping[str, Any], sweeps: Mapping[str, dict],
            confirmations: Mapping[str, Mapping], P) -> list:
    """C2.layer-sensitive (the grid's late blocks, alpha = 0.5) and C2.late-cut (selected on the grid, confirmed on
    further windows) per model: ``verdicts.c2_layer_sensitive`` / ``c2_late_cut``."""
    rows = []
    for name, r in sweeps.items():
        info = models[name].info
        rows += verdicts.c2_layer_sensitive(r["dloss"], r["layers"], r["alphas"], model=name, n_layers=info.n_layers,
                                            probe_alpha=verdicts.PROBE_ALPHA, seed=P.seed, source=f"{NAME04}-heatmap")
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
    return lens_setups.attenuated(P).run(loaded, attenuation=attenuation)


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
    """The misalignment rows as a table: estimate [CI], the rule's reading, loss change (each measure's
    statistic is its row's ``statistic``, described in the notebooks' text, left out to keep the table
    narrow)."""
    out = []
    for r in rows:
        loss = r.details.get("loss_change")
        out.append({"model": r.model, "variant": r.variant, "measure": r.claim_id,
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
            integer_axis(ax, "x")
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
        integer_axis(ax, "x")
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
                r = gates.fit_gates(lm, info, tok, profiles.stage(gates.GateConfig, P, model=name, kind=kind, seed=s), progress=verbose)
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
        p = lens_setups.attenuated(P)
        out[(name, kind, s)] = gates.fitted_alpha_stats(lm, info, tok, r, corpus=p.corpus, split=p.split,
                                                        window=p.window, n=p.n, seed=p.seed, batch=p.batch)
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
            integer_axis(ax, "x")
            ax.set_xlabel("gated block $l$")
            if j == 0:
                ax.set_ylabel(r"attenuation $1-\alpha_l$ (log)")
            ax.legend(fontsize=8, loc="best")
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


def gated_lens(lm, info, tokenizer, fit_result: dict[str, Any], lens_pass: lens.LensPass):
    """The logit-lens corpus pass (``lens.corpus_metrics``) over ``lens_pass``'s windows with fitted gates
    in place, cached by the fit's configuration (gates are identified by the config that produced them)."""
    corpus, split, window, n, seed, batch = (lens_pass.corpus, lens_pass.split, lens_pass.window, lens_pass.n,
                                             lens_pass.seed, lens_pass.batch)
    metrics = tuple(lens.METRICS) if lens_pass.metrics is None else tuple(lens_pass.metrics)
    positions, matmul_dtype = lens_pass.positions, lens_pass.matmul_dtype
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
                gated_lens(lm, info, tok, fits[(name, kind, s)], lens_setups.attenuated(P))
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


@dataclasses.dataclass
class Benchmarks:
    """One model's benchmark items scored unmodified and with each gate fit, the same items in the
    same order (what :func:`benchmarks` returns per model).

    ``before``: task -> ``[n]`` 0/1 correctness of the unmodified model; ``after``: ``"<kind> gates"``
    -> task -> ``[n_seeds, n]``; ``seconds``: task -> ``"unmodified"`` or ``"<kind> gates"`` -> seconds
    per item, one value per configuration scored (the unmodified model; each seed's fit;
    ``evaluate``'s per-item ``compute_s``, measured when the items were first scored, so a warm
    rerun knows them too); ``task_items``: task -> how
    many items the task has in all (``evaluate.task_size``)."""

    before: dict[str, np.ndarray]
    after: dict[str, dict[str, np.ndarray]]
    seconds: dict[str, dict[str, list[float]]]
    task_items: dict[str, int]


def benchmarks(models: Mapping[str, Any], fits: Mapping[tuple, dict], P, *,
               verbose: bool = True) -> dict[str, Benchmarks]:
    """Per model, the benchmark items scored before (unmodified) and after (each fit's gates)
    (``evaluate.run_task``, cached per item shard): ``{model: Benchmarks}``."""
    cfg = profiles.stage(evaluate.EvalConfig, P)
    out = {}
    for name, (lm, tok, info) in models.items():
        t0 = time.perf_counter()
        before, items, seconds = {}, {}, {t: {"unmodified": []} for t in BENCH_TASKS}
        for task in BENCH_TASKS:
            res = evaluate.run_task(lm, info, task, tokenizer=tok, limit=P.eval_items, config=cfg)
            before[task], items[task] = evaluate.item_correct(res), np.asarray(res.details["items"])
            seconds[task]["unmodified"].append(float(np.mean(res.details["compute_s"])))
        after = {}
        for kind in P.gate_kinds:
            per_task = {t: [] for t in BENCH_TASKS}
            for s in P.gate_seeds:
                r = fits[(name, kind, s)]
                tag = f"{kind}-gates-{cache.config_key(r['config'])}"
                for task in BENCH_TASKS:
                    res = evaluate.run_task(lm, info, task, tokenizer=tok, limit=P.eval_items, config=cfg,
                                            intervene=gates.gate_intervention(gates.fitted(r, info)), cache_tag=tag)
                    if not np.array_equal(np.asarray(res.details["items"]), items[task]):
                        raise RuntimeError(f"{task}: the items after differ from the items before")
                    per_task[task].append(evaluate.item_correct(res))
                    seconds[task].setdefault(f"{kind} gates", []).append(float(np.mean(res.details["compute_s"])))
            after[f"{kind} gates"] = {t: np.stack(v) for t, v in per_task.items()}
        out[name] = Benchmarks(before, after, seconds, {t: evaluate.task_size(t) for t in BENCH_TASKS})
        if verbose:
            print(f"{name}: {len(BENCH_TASKS)} tasks x {len(before[BENCH_TASKS[0]])} items, unmodified and "
                  f"{len(P.gate_kinds) * len(P.gate_seeds)} gate fits; {time.perf_counter() - t0:.0f} s")
    return out


def benchmark_rows(bench: Mapping[str, Benchmarks], P) -> list:
    """``verdicts.c3_benchmarks`` per model and gate kind (McNemar per task, Holm, MDE, per seed)."""
    rows = []
    for name, b in bench.items():
        for label, after in b.after.items():
            rows += verdicts.c3_benchmarks(b.before, after, model=name, variant=label, n_boot=P.atten_boot,
                                           seed=P.seed, source=f"{NAME05}-benchmarks")
    return rows


def benchmark_table(bench: Mapping[str, Benchmarks]) -> pd.DataFrame:
    """Accuracy per task before and after (seed-averaged), items, and items whose correctness changed."""
    rows = []
    for name, b in bench.items():
        for task, x in b.before.items():
            row = {"model": name, "task": task, "items": len(x), "unmodified": x.mean()}
            for label, after in b.after.items():
                row[label] = after[task].mean()
                row[f"{label}: changed items"] = float(np.mean([(a != x).sum() for a in after[task]]))
            rows.append(row)
    return pd.DataFrame(rows).set_index(["model", "task"]).round(3)




def benchmark_power_table(rows, bench: Mapping[str, Benchmarks] | None = None) -> pd.DataFrame:
    """Per benchmark row: the largest per-task minimum detectable drop at this n (the task and seed
    with the largest, its items and changed-answer upper bound), and roughly how many items per task
    would bring it to the rule's margin (``verdicts.benchmark_items_needed``, an upper-bound estimate:
    the changed-answer rate is held at its upper bound). With ``bench`` (:func:`benchmarks`): the
    tasks that do not have that many items (``"piqa (1,838)"``), and what scoring that many items
    (capped at each task's size) would cost on this machine: items times the configurations the row
    compares (unmodified + each seed's gates of the row's kind) times the measured seconds per item
    of those configurations, in minutes at their mean, cheapest and dearest."""
    out = []
    for r in rows:
        if r.claim_id != "C3.benchmarks":
            continue
        worst, need = verdicts.benchmark_items_needed(r)
        row = {"model": r.model, "gates": r.variant, "largest detectable drop": worst["mde"], "at items": worst["n"],
               "changed-answer rate <=": worst["discordance_upper"], "margin": r.details["margin"],
               "items needed per task": need}
        b = (bench or {}).get(r.model)
        if b is not None and r.variant in b.after:
            tasks = list(r.details["tasks"])
            row["tasks with fewer items"] = ", ".join(f"{t} ({b.task_items[t]:,})" for t in tasks
                                                      if b.task_items[t] < need)
            configs = 1 + int(np.atleast_2d(next(iter(b.after[r.variant].values()))).shape[0])
            items = {t: min(need, b.task_items[t]) for t in tasks}
            secs = {t: b.seconds[t]["unmodified"] + b.seconds[t][r.variant] for t in tasks}  # this row's configurations
            row["configurations"] = configs
            row["items to score"] = sum(items.values())
            for label, f in (("mean", np.mean), ("min", np.min), ("max", np.max)):
                row[f"minutes ({label})"] = sum(items[t] * configs * f(secs[t]) for t in tasks) / 60
        out.append(row)
    return pd.DataFrame(out).round(3)


def verdict_grid(rows) -> pd.DataFrame:
    """Every verdict row at a glance: one row per claim id (in the rows' order), one column per model
    and variant, the verdict in each cell ('' where a claim has no row for that column); the reasons
    and numbers are in the verdict tables of the sections that computed them."""
    t = pd.DataFrame([{"claim": r.claim_id, "model": r.model, "variant": r.variant or "", "verdict": r.verdict}
                      for r in rows])
    return t.pivot_table(index="claim", columns=["model", "variant"], values="verdict", aggfunc="first",
                         sort=False).fillna("")


# ============================================================================================
# 04 and 05: where the best single cut sits (over ALL blocks, not only the late ones)
# ============================================================================================


EARLY_FRACTION = 1 / 3  # block l (0-based) of an L-block model is "early" when l < EARLY_FRACTION * L


def depth_region(layer: int | None, n_layers: int) -> str:
    """Where block ``layer`` (0-based) of an ``n_layers``-block model sits: ``"early"``, ``"middle"``
    or ``"late"`` (``None``: ``"unmodified"``, no block is cut).

    Early: the first third of the blocks, ``l < EARLY_FRACTION * L`` (our definition, the mirror of
    the late region); late: ``verdicts.is_late`` (``l >= 2L/3``, the region where C2.late-cut reads
    the paper's "late layer"); middle: everything between. Gemma-3-270M (18 blocks): early 0-5,
    late 12-17; SmolLM2-135M (30 blocks): early 0-9, late 20-29.
    """
    if layer is None:
        return "unmodified"
    if n_layers < 1 or not 0 <= int(layer) < n_layers:
        raise ValueError(f"block {layer} is not a block of a {n_layers}-block model (0..{n_layers - 1})")
    if int(layer) < EARLY_FRACTION * n_layers:
        return "early"
    return "late" if verdicts.is_late(int(layer), n_layers) else "middle"


def _region_blocks(region: str, n_layers: int) -> str:
    """``"blocks 0-5"``: the blocks of a region, for sentences."""
    ls = [l for l in range(n_layers) if depth_region(l, n_layers) == region]
    if not ls:
        return "no blocks"
    return f"block {ls[0]}" if len(ls) == 1 else f"blocks {ls[0]}-{ls[-1]}"


def best_cut_selection(dloss, layers, alphas, *, n_layers: int) -> dict[str, Any]:
    """Which cells go on to the confirmation windows (pure: chosen on every window of ``dloss``).

    ``overall``: ``verdicts.best_fixed_cut`` over every swept block (the unmodified model, alpha = 1
    with dloss 0, competes; ``layer`` None when it wins); ``lowest``: the swept (block, alpha < 1)
    with the lowest mean over all blocks, whether or not it beats the unmodified model; ``late``:
    the lowest late cell (``verdicts.late_cut_candidates``' first candidate, so notebook 04's
    confirmation already holds it). Each ``{"layer", "alpha", "selection_mean", "region"}``.
    """
    d = as_numpy(dloss)
    layers, alphas = [int(l) for l in layers], [float(a) for a in alphas]
    best = verdicts.best_fixed_cut(d, layers, alphas)
    cells = [(li, ai) for li in range(len(layers)) for ai, a in enumerate(alphas) if a < 1]
    if not cells:
        raise ValueError(f"no swept alpha < 1 (swept: {alphas}): sweep some alpha < 1")
    li, ai = min(cells, key=lambda c: float(d[c[0], c[1]].mean()))
    late = verdicts.late_cut_candidates(d, layers, alphas, n_layers=n_layers)[0]

    def cell(layer, alpha, mean):
        return {"layer": None if layer is None else int(layer), "alpha": float(alpha),
                "selection_mean": float(mean), "region": depth_region(layer, n_layers)}

    return {"overall": cell(best["layer"], best["alpha"], best["dloss"]),
            "lowest": cell(layers[li], alphas[ai], d[li, ai].mean()),
            "late": cell(late["layer"], late["alpha"], late["selection_mean"])}


def confirm_cells(models: Mapping[str, Any], sweeps: Mapping[str, dict], cells: Mapping[str, Any], P, *,
                  known: Mapping[str, Mapping] | None = None) -> dict[str, dict[tuple[int, float], np.ndarray]]:
    """dloss of given cells on the confirmation windows :func:`confirm_sweeps` uses (the NEXT
    ``sweep_confirm_windows`` windows of the seed after the grid's): ``{model: {(block, alpha): [n]}}``.

    ``cells``: ``{model: [(block, alpha), ...]}``. A cell in ``known`` (``confirm_sweeps``' result)
    is reused; any other is swept there with ``sweep.run_sweep`` (cached per cell).
    """
    out = {}
    for name, wanted in cells.items():
        lm, tok, info = models[name]
        base = profiles.stage(sweep.SweepConfig, P, model=name)
        n_sel = base.n_windows
        if sweeps[name]["dloss"].shape[-1] != n_sel:
            raise ValueError(f"{name}: the sweep has {sweeps[name]['dloss'].shape[-1]} windows but the profile's "
                             f"sweep_windows is {n_sel}: pass the sweeps run at this profile (run_sweeps)")
        given = {(int(l), float(a)): as_numpy(v) for (l, a), v in ((known or {}).get(name) or {}).items()}
        out[name] = {}
        for layer, alpha in wanted:
            key = (int(layer), float(alpha))
            if key not in given:
                cfg = dataclasses.replace(base, layers=(key[0],), alphas=(key[1],), first_window=n_sel,
                                          n_windows=n_sel + P.sweep_confirm_windows)
                given[key] = as_numpy(sweep.run_sweep(lm, info, tok, cfg)["dloss"][0, 0])
            if len(given[key]) != P.sweep_confirm_windows:
                raise ValueError(f"{name}: cell {key} has {len(given[key])} confirmation windows, the profile "
                                 f"{P.sweep_confirm_windows}: pass confirm_sweeps' result at this profile")
            out[name][key] = given[key]
    return out


def _cell_numbers(sel: np.ndarray, conf: np.ndarray | None, cell: Mapping[str, Any], *, n_boot: int,
                  seed: int, margin: float, test_alpha: float) -> dict[str, Any]:
    m, lo, hi = stats.bootstrap_mean(sel, n_boot=n_boot, seed=seed)
    out = {**cell, "selection_mean": m, "selection_lo": lo, "selection_hi": hi, "n_selection": int(sel.size)}
    if conf is None:
        return out
    t = stats.paired_ttest(conf, alternative="less")
    cm, clo, chi = stats.bootstrap_mean(conf, n_boot=n_boot, seed=seed)
    out.update(mean=cm, lo=clo, hi=chi, p=t["p"], t=t["t"], sd=t["sd"], n=t["n"],
               mde=stats.mde_paired_mean(t["sd"], t["n"], alpha=test_alpha, power=verdicts.POWER, sided="one"),
               status=confirmation_status(t["p"], clo, margin=margin, test_alpha=test_alpha, mean=cm))
    return out


def confirmation_status(p: float, lo: float, *, margin: float = verdicts.LOSS_MARGIN,
                        test_alpha: float = verdicts.TEST_ALPHA, mean: float | None = None) -> str:
    """One cell on the confirmation windows, read as C2.late-cut reads a candidate: ``"confirmed"`` if
    the one-sided paired t-test (H1: dloss < 0) gives ``p <= test_alpha`` (one cell per question, so no
    correction) AND the ``mean`` improvement is material (at least ``margin`` nats); ``"ruled out"`` if
    the CI's lower end lies above ``-margin`` (an improvement of ``margin`` nats or more is excluded);
    ``"undecided"`` otherwise (including significant but smaller than the margin)."""
    if p <= test_alpha and (mean is None or mean <= -margin):
        return "confirmed"
    return "ruled out" if lo > -margin else "undecided"


def best_cut_summary(sweeps: Mapping[str, dict], confirm_dloss: Mapping[str, Mapping], n_layers: Mapping[str, int],
                     *, n_boot: int = 1000, seed: int = 0, margin: float = verdicts.LOSS_MARGIN,
                     test_alpha: float = verdicts.TEST_ALPHA) -> dict[str, dict]:
    """Per model, the best single cut anywhere and the best late cell, selected on the grid's
    windows and measured on the confirmation windows (pure: statistics of given arrays).

    ``confirm_dloss``: ``{model: {(block, alpha): dloss per confirmation window}}`` holding at least
    the ``overall`` (when a cut wins) and ``late`` cells of :func:`best_cut_selection`. Per cell:
    the selection mean with its bootstrap CI; the confirmation mean, 95% bootstrap CI, one-sided
    paired t-test p (H1: dloss < 0), the minimum detectable effect at ``test_alpha``/80% power and
    :func:`confirmation_status`. ``overall_minus_late``: overall minus late cell, paired per
    confirmation window (None when they are the same cell or the unmodified model won). JSON-ready.
    """
    out = {}
    for name, r in sweeps.items():
        L = int(n_layers[name])
        d = as_numpy(r["dloss"])
        layers, alphas = [int(l) for l in r["layers"]], [float(a) for a in r["alphas"]]
        sel = best_cut_selection(d, layers, alphas, n_layers=L)
        conf = {(int(l), float(a)): as_numpy(v) for (l, a), v in confirm_dloss.get(name, {}).items()}

        def numbers(cell, confirm=True):
            key = (cell["layer"], cell["alpha"])
            if confirm and key not in conf:
                raise ValueError(f"{name}: confirm_dloss lacks cell {key} (block, alpha): sweep it on the "
                                 "confirmation windows (confirm_cells)")
            x = d[layers.index(cell["layer"]), alphas.index(cell["alpha"])]
            return _cell_numbers(x, conf[key] if confirm else None, cell, n_boot=n_boot, seed=seed, margin=margin,
                                 test_alpha=test_alpha)

        won = sel["overall"]["layer"] is not None
        overall = numbers(sel["overall"]) if won else {**sel["overall"], "status": "unmodified"}
        late = numbers(sel["late"])
        same = won and (overall["layer"], overall["alpha"]) == (late["layer"], late["alpha"])
        diff = None
        if won and not same:
            a, b = conf[(overall["layer"], overall["alpha"])], conf[(late["layer"], late["alpha"])]
            if a.shape != b.shape:
                raise ValueError(f"{name}: the two cells have {a.shape} and {b.shape} confirmation windows: "
                                 "both must be the same windows")
            diff = stats.paired_delta(a, b, n_boot=n_boot, seed=seed)
            diff = {k: diff[k] for k in ("delta", "lo", "hi", "n")}
        out[name] = {"n_layers": L, "first_late_block": verdicts.first_late_block(L),
                     "early_blocks": _region_blocks("early", L), "late_blocks": _region_blocks("late", L),
                     "n_selection": int(d.shape[-1]), "n_confirmation": None if not conf else
                     int(len(next(iter(conf.values())))), "margin": margin, "test_alpha": test_alpha,
                     "overall": overall, "lowest": numbers(sel["lowest"], confirm=False), "late": late,
                     "same_cell": same, "overall_minus_late": diff}
    return out


def best_cut_anywhere(models: Mapping[str, Any], sweeps: Mapping[str, dict], confirmations: Mapping[str, Mapping],
                      P, *, verbose: bool = True) -> dict[str, dict]:
    """Per model, the best single cut over ALL blocks (the unmodified model competing, as in
    ``verdicts.best_fixed_cut``) and the best late cell, chosen on the grid's windows and measured
    on :func:`confirm_sweeps`' confirmation windows (``confirmations``, reused; a cell not among
    them is swept there, cached). Returns :func:`best_cut_summary`'s numbers; ``verbose`` prints
    which cells were swept."""
    wanted = {}
    for name, r in sweeps.items():
        sel = best_cut_selection(r["dloss"], r["layers"], r["alphas"], n_layers=models[name].info.n_layers)
        wanted[name] = [(c["layer"], c["alpha"]) for c in (sel["overall"], sel["late"]) if c["layer"] is not None]
        wanted[name] = list(dict.fromkeys(wanted[name]))
        if verbose:
            have = set(confirmations.get(name, {}))
            new = [c for c in wanted[name] if c not in have]
            print(f"{name}: cells on the confirmation windows: "
                  + ", ".join(f"block {l} alpha={a:g}" for l, a in wanted[name])
                  + (f" ({', '.join(f'block {l} alpha={a:g}' for l, a in new)} swept here)" if new else ""))
    conf = confirm_cells(models, sweeps, wanted, P, known=confirmations)
    return best_cut_summary(sweeps, conf, {n: models[n].info.n_layers for n in sweeps}, n_boot=P.atten_boot,
                            seed=P.seed)


def _per_block_best(t: pd.DataFrame) -> pd.DataFrame:
    """Per block, the alpha < 1 with the lowest mean dloss (its row of a ``sweep_tables`` table)."""
    t = t[t.alpha < 1]
    return t.loc[t.groupby("layer")["dloss"].idxmin()].sort_values("layer").reset_index(drop=True)


CELL_STYLE = {"overall": ("#d55e00", "D", "best cut over all blocks"),
              "late": ("#0173b2", "s", "best late cell")}


def best_cut_panel(tables: Mapping[str, pd.DataFrame], summary: Mapping[str, dict]):
    """Per model: for every block, the mean dloss on the selection windows of its best alpha < 1
    (95% bootstrap CI band; marker shape = that alpha), the late region (``l >= 2L/3``) shaded and
    the early region (first third) tinted; the best cell over all blocks and the best late cell
    marked at their selection means (open) and at their confirmation means with 95% CIs (filled,
    beside the block). y: symmetric log, linear within +-0.01 nats, shared by the panels; integer
    block ticks; legend below the panels. ``tables``: :func:`sweep_tables`; ``summary``:
    :func:`best_cut_anywhere`. Returns ``(fig, numbers)``."""
    from matplotlib.patches import Patch
    from matplotlib.ticker import MaxNLocator

    names = [n for n in tables if n in summary]
    if not names:
        raise ValueError("tables and summary share no model: pass sweep_tables(...) and best_cut_anywhere(...) "
                         "of the same sweeps")
    fig, axes = plt.subplots(1, len(names), figsize=(5.8 * len(names), 4.0), squeeze=False, sharey=True)
    alphas = sorted({float(a) for n in names for a in _per_block_best(tables[n]).alpha})  # the ones drawn
    shapes = dict(zip(alphas, "o^vP*Xhp<>"))
    numbers: dict[str, Any] = {}
    for ax, name in zip(axes[0], names):
        s, best = summary[name], _per_block_best(tables[name])
        L = s["n_layers"]
        ax.axvspan(s["first_late_block"] - 0.5, L - 0.5, color="#bdbdbd", alpha=0.35, lw=0)
        early_end = max([l for l in range(L) if depth_region(l, L) == "early"], default=-1)
        ax.axvspan(-0.5, early_end + 0.5, color="#029e73", alpha=0.08, lw=0)
        ax.plot(best.layer, best.dloss, color="k", lw=1.2)
        ax.fill_between(best.layer, best.lo, best.hi, color="k", alpha=0.12, lw=0)
        for a, g in best.groupby("alpha"):
            ax.plot(g.layer, g.dloss, ls="none", marker=shapes[float(a)], color="k", ms=4)
        for which, (color, marker, _) in CELL_STYLE.items():
            c = s[which]
            if c["layer"] is None or (which == "late" and s["same_cell"]):
                continue
            ax.plot([c["layer"]], [c["selection_mean"]], ls="none", marker=marker, ms=9, mfc="none", mec=color,
                    mew=1.6)
            x = c["layer"] + (0.3 if which == "overall" else -0.3)
            ax.errorbar([x], [c["mean"]], yerr=[[c["mean"] - c["lo"]], [c["hi"] - c["mean"]]], fmt=marker,
                        color=color, ms=6, capsize=3)
        if s["overall"]["layer"] is None:
            ax.annotate("no cut beats the unmodified model", xy=(0.03, 0.95), xycoords="axes fraction",
                        fontsize=8, va="top")
        ax.axhline(0, color="k", lw=0.8)
        ax.set_yscale("symlog", linthresh=0.01)
        ax.set_xlim(-0.5, L - 0.5)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("attenuated block $l$")
        ax.set_title(name, fontsize=10)
        ax.grid(False, axis="x")
        numbers[name] = {"per_block": best[["layer", "alpha", "dloss", "lo", "hi"]].to_dict(orient="records"),
                         **{k: v for k, v in s.items()}}
    axes[0][0].set_ylabel(r"$\Delta$loss (nats), symlog")
    handles = [Patch(color="k", alpha=0.25, label=r"per block, its best $\alpha$ < 1: mean on the selection "
                     "windows, 95% CI")]
    handles += [Line2D([], [], color="k", marker=shapes[a], ls="none", ms=4, label=rf"$\alpha$ = {a:g}")
                for a in alphas]
    handles += [Patch(color="#029e73", alpha=0.2, label="early: first third of the blocks"),
                Patch(color="#bdbdbd", alpha=0.6, label=r"late: $l \geq 2L/3$ (the paper's claim)")]
    for color, marker, label in CELL_STYLE.values():
        handles += [Line2D([], [], ls="none", marker=marker, mfc="none", mec=color, ms=8, label=f"{label}: selection"),
                    Line2D([], [], ls="-", marker=marker, color=color, ms=6, label=f"{label}: confirmation, 95% CI")]
    fig.tight_layout()
    fig.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=2, fontsize=8, frameon=False)
    return fig, numbers


BEST_CUT_CELLS = {"overall": "best cut over all blocks", "late": "best late cell"}


def best_cut_table(summary: Mapping[str, dict]) -> pd.DataFrame:
    """Per model, the best single cut over all blocks and the best late cell of
    :func:`best_cut_anywhere` (or the numbers of :func:`best_cut_panel`): block, alpha, region, the
    mean on the selection windows, then on the confirmation windows the mean with its 95% CI, the
    one-sided p, the MDE and :func:`confirmation_status`; one row per cell (the overall cell is
    ``unmodified`` when no cut beats alpha = 1 on the selection windows)."""
    out = []
    for name, s in summary.items():
        for which, label in BEST_CUT_CELLS.items():
            c = s[which]
            out.append({"model": name, "cell": label, "block": c["layer"], "alpha": c["alpha"], "region": c["region"],
                        "selection mean": c.get("selection_mean"), "confirmation mean": c.get("mean"),
                        "lo": c.get("lo"), "hi": c.get("hi"), "p (one-sided)": c.get("p"), "MDE": c.get("mde"),
                        "status": c["status"]})
    return pd.DataFrame(out).set_index(["model", "cell"]).round(4)


def gate_attenuation(values: Mapping) -> dict[str, dict[str, dict[str, Any]]]:
    """The learned attenuation ``1 - alpha_l`` per model, gate kind and seed:
    ``{model: {kind: {"layers": [...], "seeds": [seed labels], "attenuation": [n_seeds, n_gated]}}}``.

    ``values``: :func:`alpha_stats`' result (``{(model, kind, seed): {"layers", "mean"}}``, mean =
    alpha; token gates: the mean over tokens) or :func:`alpha_panel`'s numbers, as saved in
    ``figures/05-learned-gates-alpha.json`` (``{"model/kind/seedS": {"layers", "attenuation_mean"}}``).
    """
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for key, v in values.items():
        if isinstance(key, tuple):
            name, kind, s = key
            att = 1 - as_numpy(v["mean"]).astype(np.float64)
        else:
            parts = str(key).split("/")
            if len(parts) != 3 or "attenuation_mean" not in v:
                raise ValueError(f"{key!r}: expected alpha_stats' {{(model, kind, seed): ...}} or alpha_panel's "
                                 "{'model/kind/seedS': {'layers', 'attenuation_mean'}}")
            name, kind, s = parts
            s = s[len("seed"):] if s.startswith("seed") else s
            att = np.asarray(v["attenuation_mean"], dtype=np.float64)
        layers = [int(l) for l in v["layers"]]
        if len(layers) != len(att):
            raise ValueError(f"{key!r}: {len(att)} attenuation values for {len(layers)} layers")
        d = out.setdefault(name, {}).setdefault(kind, {"layers": layers, "seeds": [], "attenuation": []})
        if d["layers"] != layers:
            raise ValueError(f"{name} {kind}: the seeds gate different blocks ({d['layers']} vs {layers})")
        d["seeds"].append(str(s))
        d["attenuation"].append(att)
    for kinds in out.values():
        for d in kinds.values():
            d["attenuation"] = np.stack(d["attenuation"])
    return out


def gate_ranking(values: Mapping, n_layers: Mapping[str, int]) -> dict[str, dict[str, dict[str, Any]]]:
    """Blocks ranked by seed-averaged learned attenuation ``1 - alpha_l`` (pure).

    Per model and gate kind: ``order`` (gated blocks, most attenuated first), ``mean``/``min``/``max``
    per block over seeds (same order as ``layers``), ``top_per_seed`` (each seed's most attenuated
    block), ``moved`` (the largest distance of any seed's attenuation from its start
    ``1 - sigmoid(THETA_INIT)``; below ``verdicts.MIN_GATE_MOVEMENT`` the gates "did not move") and
    each block's :func:`depth_region`. ``values``: as :func:`gate_attenuation`.
    """
    init = 1 - float(torch.sigmoid(torch.tensor(gates.THETA_INIT)))
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for name, kinds in gate_attenuation(values).items():
        if name not in n_layers:
            raise ValueError(f"n_layers lacks model {name!r}: pass {{model: info.n_layers}} for every model")
        L = int(n_layers[name])
        out[name] = {}
        for kind, d in kinds.items():
            a, layers = d["attenuation"], d["layers"]
            mean = a.mean(axis=0)
            order = [layers[i] for i in np.argsort(-mean, kind="stable")]
            out[name][kind] = {"layers": layers, "seeds": d["seeds"], "n_layers": L, "order": order,
                               "mean": mean.tolist(), "min": a.min(axis=0).tolist(), "max": a.max(axis=0).tolist(),
                               "top_per_seed": [layers[int(i)] for i in a.argmax(axis=1)],
                               "moved": float(np.abs(a - init).max()),
                               "region": {l: depth_region(l, L) for l in layers}}
    return out


def gate_cut_table(values: Mapping, cuts: Mapping[str, Mapping], *, n_layers: Mapping[str, int]) -> pd.DataFrame:
    """Per model and gate kind: the most attenuated block (seed-averaged ``1 - alpha_l``, with the
    range over seeds and its region), the runner-up, the final block's attenuation, whether the seeds
    agree on the most attenuated block, the best fixed cut's block (``cuts``: ``{model:
    losses[model]["cut_info"]}``, chosen on notebook 04's validation grid; None when the unmodified
    model won) and its rank among the gates' blocks (1 = most attenuated; None when not gated), and
    the largest distance of any gate from its start (``moved``; below ``verdicts.MIN_GATE_MOVEMENT``
    the ranking says where the gates started, not where the loss wants attenuation).

    ``values``: :func:`alpha_stats`' result or ``figures/05-learned-gates-alpha.json``;
    ``n_layers``: ``{model: info.n_layers}``.
    """
    out = []
    for name, kinds in gate_ranking(values, n_layers).items():
        if name not in cuts:
            raise ValueError(f"cuts lacks model {name!r}: pass {{model: losses[model]['cut_info']}}")
        layer = cuts[name]["layer"]
        for kind, g in kinds.items():
            idx = {l: i for i, l in enumerate(g["layers"])}
            top, second = g["order"][0], (g["order"][1] if len(g["order"]) > 1 else None)
            final = int(n_layers[name]) - 1
            out.append({"model": name, "gates": kind, "seeds": len(g["seeds"]), "top block": top,
                        "region": g["region"][top], "1-α top": g["mean"][idx[top]],
                        "seed min": g["min"][idx[top]], "seed max": g["max"][idx[top]],
                        "seeds agree on top": len(set(g["top_per_seed"])) == 1, "runner-up block": second,
                        "1-α runner-up": None if second is None else g["mean"][idx[second]],
                        "1-α final block": g["mean"][idx[final]] if final in idx else None,
                        "fixed cut block": layer,
                        "cut's rank": (g["order"].index(int(layer)) + 1 if layer is not None and int(layer) in idx
                                       else None),
                        "moved": g["moved"]})
    return pd.DataFrame(out).set_index(["model", "gates"]).round(4)
