"""Notebooks 06-08: glue and figures for GPTs trained with the residual attenuation in place (C1-C4).

The notebooks orchestrate; what they compute or draw is a call into this module.

- **The grid** (:func:`grid`, :func:`train_grid`): ``baseline``; ``fixed`` with alpha in
  ``train_cut_alphas`` at each block of ``train_cut_layers`` (None = every block); the variants of
  ``train_variants`` (``learned``, ``learned-token``, ``backout``, ``scalars``); each for every seed
  of ``train_seeds``. Every run goes through ``residshift.train.trainer`` (``profiles.stage(TrainConfig, P)``
  + ``with_`` + ``train``): one run directory per configuration, reused when finished, so 07 and 08
  reuse what 06 trained and a rerun trains nothing twice. Variants of one seed are paired (same
  initialisation, same data order, same token budget).
- **06** — :func:`curves`, :func:`curves_panel` (validation loss vs tokens, seed bands),
  :func:`final_evals` (per-window final validation losses, cached), :func:`cut_table`,
  :func:`cut_panel` (final loss vs the cut's block against the baseline band), :func:`c2_rows`.
- **07** — :func:`alpha_history`, :func:`alpha_panel` (learned alpha per block over training),
  :func:`final_alphas`, :func:`best_cut`, :func:`compare_table`, :func:`compare_panel`, :func:`c3_rows`,
  :func:`benchmarks` (the harness on every final model, cached by the harness per model weights),
  :func:`benchmark_table` (Table II's shape, chance beside the zero-shot tasks), :func:`c4_rows`.
- **08** — :func:`lens_runs` (the logit lens on each final model, cached by ``lens.run_lens``),
  :func:`c1_rows` (three regimes and emergence depth of each baseline seed), :func:`regimes_panel`,
  :func:`persistence_table` (``lens.input_persistence`` after each cut, paired per window, loss
  beside it), :func:`misalignment_rows`, :func:`persistence_panel`.
- **throughput** (issue 37) — :func:`record_host` (``host.json`` beside a fresh run's summary: the 1-min
  load at its start and end, wall-clock times, threads, who trained it and how many at once),
  :func:`throughput_runs` (per run: tokens/s, training vs wall seconds, load), :func:`throughput_numbers`
  (per variant; the grid mean as a share of the best run; the gap split into between and within
  variants; the correlation with load), :func:`throughput_table` (per variant, a table).
- **perplexity** (issue 35) — :func:`perplexity_runs` (both WikiText definitions of every trained model,
  ``evaluate.run_perplexities``), :func:`perplexity_table` (per variant, mean and SD over seeds),
  :func:`perplexity_numbers`.
- **all** — :func:`summary_table`, :func:`grid_cost`, :func:`mde_table` (each seed test's MDE and the seeds
  the paper's 0.0056-nat effect would need), :func:`baseline_switch` and :func:`switch_table` (the deep-switch
  measure the training verdicts speak for, notebook 10's rule).

Verdicts use the rules of :mod:`residshift.analysis.verdicts` only (training setting). Every function
that takes ``P`` (the resolved profile) reads only ``train_*`` keys plus ``device``/``seed``.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from matplotlib.ticker import FuncFormatter

from ..analysis import verdicts
from ..analysis.stats import as_numpy
from ..core.cache import atomic_write_text
from ..core.gating import THETA_INIT
from ..core.models import load_model
from ..measure import evaluate, lens
from ..train import final, from_profile, trainer as T
from ..core.models.gpt import MODES
from . import lens_setups
from .alignment import depth_curves
from .lens_setups import TRAINED_CORPUS as LENS_CORPUS, TRAINED_SPLIT as LENS_SPLIT  # the names 06-10 use
from .plotting import PALETTE

NAME06 = "06-training-with-attenuation"
NAME07 = "07-learned-gates-and-benchmarks"
NAME08 = "08-misalignment-after-mitigation"
EXTRA_MODES = ("learned", "learned-token", "backout", "scalars")  # train_variants may name these
GATED = ("learned", "learned-token", "scalars")  # a skip gate per block (alpha/<l> in the log)
C3_GATES = ("learned", "learned-token")  # the paper's gates: the C3-training rules judge these
# Colours of edited variants beside the black baseline: none is plotting.PALETTE's input green or next orange.
VARIANT_COLORS = ("#0173b2", "#cc78bc", "#5e3c99", "#56b4e9", "#e7298a", "#666666", "#000080", "#8c564b")


# ============================================================================================
# The grid
# ============================================================================================


@dataclass(frozen=True)
class Variant:
    """One residual variant of the grid: ``name`` (the label used everywhere), the trainer ``mode``,
    and for ``fixed`` the ``alpha`` and the ``layer`` (block) it attenuates."""

    name: str
    mode: str
    alpha: float | None = None
    layer: int | None = None
    embedding: str | None = None  # None: the profile's train_embedding

    def overrides(self) -> dict[str, Any]:
        """The TrainConfig fields that make this variant (on top of the profile's)."""
        out: dict[str, Any] = {"mode": self.mode}
        if self.mode == "fixed":
            out.update(alpha=float(self.alpha), alpha_layers=(int(self.layer),))
        if self.embedding is not None:
            out["embedding"] = self.embedding
        return out


def fixed_name(alpha: float, layer: int) -> str:
    return f"alpha={alpha:g} @ block {layer}"


def cut_layers(P) -> list[int]:
    """The blocks the fixed cuts are trained at (``train_cut_layers``; None = every block)."""
    L = int(P.train_layers)
    layers = list(range(L)) if P.train_cut_layers is None else [int(l) for l in P.train_cut_layers]
    bad = [l for l in layers if not 0 <= l < L]
    if bad or len(set(layers)) != len(layers):
        raise ValueError(f"train_cut_layers must be distinct blocks in 0..{L - 1} (None = every block), got "
                         f"{P.train_cut_layers}")
    return sorted(layers)


AUTHORS_CUT = (0.0, 0)  # the authors' own cut: alpha = 0 at block 0 (at both adds with site "sublayer")


def contrast_name(P) -> str | None:
    """The baseline trained with ``train_contrast_embedding`` (None: no contrast arm)."""
    emb = P.train_contrast_embedding
    return None if emb in (None, P.train_embedding) else f"baseline ({emb} embedding)"


def cut_cells(P) -> list[tuple[float, int]]:
    """The fixed cuts of the grid as (alpha, block): alpha = 0 at every block of ``train_cut_layers``
    (does the block matter?), every other alpha of ``train_cut_alphas`` at the late blocks among them
    only (does a late cut help, and at which strength?)."""
    L = int(P.train_layers)
    alphas = [float(a) for a in P.train_cut_alphas]
    if any(not 0 <= a < 1 for a in alphas):
        raise ValueError(f"train_cut_alphas must lie in [0, 1) (alpha = 1 is the baseline), got {alphas}")
    return [(a, l) for a in alphas for l in cut_layers(P) if a == 0.0 or verdicts.is_late(l, L)]


def grid(P) -> list[Variant]:
    """The variants of the grid, in order: baseline, the fixed cuts (:func:`cut_cells`, alpha then
    block), the others, the contrast arm's baseline."""
    alphas = [float(a) for a in P.train_cut_alphas]
    if any(not 0 <= a < 1 for a in alphas):
        raise ValueError(f"train_cut_alphas must lie in [0, 1) (alpha = 1 is the baseline), got {alphas}")
    unknown = [v for v in P.train_variants if v not in EXTRA_MODES]
    if unknown:
        raise ValueError(f"train_variants {unknown} unknown; choose among {list(EXTRA_MODES)} (baseline and "
                         "fixed are always in the grid)")
    assert set(EXTRA_MODES) <= set(MODES)
    out = [Variant("baseline", "baseline")]
    out += [Variant(fixed_name(a, l), "fixed", a, l) for a, l in cut_cells(P)]
    out += [Variant(v, v) for v in P.train_variants]
    if contrast_name(P):
        out.append(Variant(contrast_name(P), "baseline", embedding=P.train_contrast_embedding))
    return out


def seeds(P) -> list[int]:
    s = [int(x) for x in P.train_seeds]
    if not s or len(set(s)) != len(s):
        raise ValueError(f"train_seeds must be distinct integers (at least one), got {P.train_seeds}")
    return s


GATED_MODES = from_profile.GATED_MODES


def config(P, variant: Variant, seed: int) -> T.TrainConfig:
    """The TrainConfig of one run: the profile's ``train_*`` values, the variant, the seed, and the
    keys that apply to the variant's mode only (``from_profile.mode_settings``: ``train_gate_init`` as the
    learned gates' starting logit, ``train_cut_site`` where a fixed cut acts)."""
    return from_profile.profile_config(P, seed=int(seed), **variant.overrides())


def _select(variants: list[Variant], only) -> list[Variant]:
    if only is None:
        return variants
    if callable(only):
        return [v for v in variants if only(v)]
    names = [only] if isinstance(only, str) else list(only)
    known = {v.name for v in variants}
    missing = [n for n in names if n not in known]
    if missing:
        raise ValueError(f"only= names {missing} are not in the grid; known: {sorted(known)}")
    return [v for v in variants if v.name in names]


def train_grid(P, only: str | Iterable[str] | Callable[[Variant], bool] | None = None, *,
               progress: bool = False, verbose: bool = True) -> dict[tuple[str, int], Path]:
    """Train (or reuse) every run of the grid: ``{(variant name, seed): run directory}``.

    ``only``: a variant name, names, or a predicate on :class:`Variant` (default: the whole grid).
    A finished run is returned as it is; an interrupted one resumes from its checkpoint.
    """
    runs: dict[tuple[str, int], Path] = {}
    todo = [(v, s) for v in _select(grid(P), only) for s in seeds(P)]
    t0, trained, noted = time.perf_counter(), 0, False
    for i, (v, s) in enumerate(todo):
        cfg = config(P, v, s)
        before = T.run_dir_for(cfg, P.device)
        fresh = not (before / "summary.json").is_file()
        if fresh and verbose and not noted and str(P.device).startswith("cpu"):
            noted = True
            from ..core.machine import kernels_note

            if kernels_note():
                print(kernels_note())
        start = host_snapshot()
        runs[(v.name, s)] = run = T.train(cfg, device=P.device, progress=progress)
        if fresh:
            record_host(run, start, trained_by="notebook", order=trained)
            trained += 1
            if verbose:
                sm = T.read_summary(run)
                print(f"[{i + 1}/{len(todo)}] {v.name}, seed {s}: validation loss {sm['val_loss']:.3f} "
                      f"in {sm['train_seconds']:.0f} s")
    if verbose:
        print(f"{len(todo)} runs ({len(todo) - trained} reused, {trained} trained in "
              f"{time.perf_counter() - t0:.0f} s)")
    return runs


def summary_table(runs: Mapping[tuple[str, int], Path]) -> pd.DataFrame:
    """One row per run: final and best validation loss, nats below the unigram level, tokens, seconds."""
    rows = []
    for (name, s), run in runs.items():
        sm = T.read_summary(run)
        rows.append({"variant": name, "seed": s, "val_loss": sm["val_loss"], "best_val_loss": sm["best_val_loss"],
                     "below_unigram": sm["below_unigram"], "tokens": sm["tokens"],
                     "train_seconds": sm["train_seconds"]})
    return pd.DataFrame(rows).set_index(["variant", "seed"])


def grid_numbers(runs: Mapping[tuple[str, int], Path], P) -> dict[str, Any]:
    """What the grid cost, with the CPU beside it: runs, variants, seeds, tokens per run, summed training
    seconds, tokens/s (mean, min, max over runs) and the machine (``trainer.cpu_facts``: the one this
    notebook runs on, which trained the runs unless they were reused from elsewhere); ``per_run``
    (:func:`throughput_runs`) and ``throughput`` (:func:`throughput_numbers`): where the speed went."""
    sums = [T.read_summary(r) for r in runs.values()]
    tps = [s["tokens_per_s"] for s in sums]
    per_run = throughput_runs(runs)
    return {"per_run": _json_rows(per_run), "throughput": throughput_numbers(per_run), "runs": len(sums), "variants": len({k[0] for k in runs}), "seeds": len({k[1] for k in runs}),
            "tokens_per_run": int(sums[0]["tokens"]), "precision": "bf16 autocast" if P.train_bf16 else "fp32",
            "train_seconds": float(sum(s["train_seconds"] for s in sums)),
            "seconds_per_run": float(np.mean([s["train_seconds"] for s in sums])),
            "tokens_per_s": {"mean": float(np.mean(tps)), "min": float(min(tps)), "max": float(max(tps))},
            "machine": T.cpu_facts()}


# ============================================================================================
# Throughput (issue 37): per run tokens/s against the variant and the machine's load
# ============================================================================================

HOST_FILE = "host.json"  # beside a run's summary.json, written by whoever trained it (not the trainer)
# Not in the trainer's summary on purpose: the run key hashes trainer.py's source
# (trainer.training_code_fingerprint), so a new summary field would retrain every run of every grid.


def _load_1min() -> float | None:
    return round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None


def host_snapshot() -> dict[str, Any]:
    """The wall-clock time and the 1-min load average now (the start of a run, for :func:`record_host`)."""
    return {"time": time.time(), "load_1min": _load_1min()}


def record_host(run: Path, start: Mapping[str, Any], *, trained_by: str, parallel_runs: int = 1,
                order: int | None = None) -> dict[str, Any]:
    """Write ``run/host.json`` once a fresh run finished: the 1-min load average at its start
    (``start``, :func:`host_snapshot`) and end, its start and end time and wall seconds, the CPU, its
    cores, torch's threads and ``OMP_NUM_THREADS`` of this process, who trained it (``"notebook"``,
    ``"train-grid"``), how many runs trained at once and its place in that session's order."""
    end, facts = host_snapshot(), T.cpu_facts()
    out = {"load_1min_start": start.get("load_1min"), "load_1min_end": end["load_1min"],
           "started": start.get("time"), "ended": end["time"],
           "wall_seconds": None if start.get("time") is None else end["time"] - start["time"],
           "cpu": facts["cpu"], "cpus": os.cpu_count(), "threads": facts["threads"],
           "omp_num_threads": os.environ.get("OMP_NUM_THREADS"), "trained_by": trained_by,
           "parallel_runs": int(parallel_runs), "order": order}
    if (Path(run) / "summary.json").is_file():
        atomic_write_text(Path(run) / HOST_FILE, json.dumps(out, indent=2))
    return out


def read_host(run: Path) -> dict[str, Any]:
    """A run's ``host.json`` ({} for a run trained before it existed, or an unreadable one)."""
    try:
        out = json.loads((Path(run) / HOST_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return out if isinstance(out, dict) else {}


THROUGHPUT_COLUMNS = ("variant", "seed", "tokens_per_s", "train_seconds", "run_seconds", "wall_seconds",
                      "overhead_share", "load_1min_start", "load_1min_end", "load_1min", "threads", "cpus",
                      "parallel_runs", "order", "trained_by", "device")


def throughput_runs(runs: Mapping[tuple[str, int], Path]) -> pd.DataFrame:
    """One row per run: tokens/s (optimiser steps only: evaluations and checkpoints are not in
    ``train_seconds``), training seconds, the seconds of the run's last call from building the model
    to its summary (``run_seconds``: steps, evaluations, checkpoints; ``wall_seconds`` adds the data
    and tokenizer), the share of ``run_seconds`` outside the steps (``overhead_share``; None when the run
    resumed, whose training seconds span several calls), and from ``host.json`` where present the
    1-min load at start and end (``load_1min``: their mean), threads, cores, runs trained at once and
    order. Old summaries and runs without ``host.json`` give None, never an error."""
    rows = []
    for (name, s), run in runs.items():
        sm, host = T.read_summary(run), read_host(run)
        train_s, run_s = float(sm["train_seconds"]), sm.get("run_seconds_last_call")
        over = None if run_s is None or run_s < train_s or run_s <= 0 else 1 - train_s / run_s
        loads = [host.get(k) for k in ("load_1min_start", "load_1min_end") if host.get(k) is not None]
        rows.append({"variant": name, "seed": s, "tokens_per_s": float(sm["tokens_per_s"]), "train_seconds": train_s,
                     "run_seconds": run_s, "wall_seconds": sm.get("wall_seconds_last_call"), "overhead_share": over,
                     "load_1min_start": host.get("load_1min_start"), "load_1min_end": host.get("load_1min_end"),
                     "load_1min": float(np.mean(loads)) if loads else None,
                     "threads": host.get("threads"), "cpus": host.get("cpus"), "parallel_runs": host.get("parallel_runs"),
                     "order": host.get("order"), "trained_by": host.get("trained_by"), "device": sm.get("device")})
    return pd.DataFrame(rows, columns=list(THROUGHPUT_COLUMNS))


def _json_value(v: Any) -> Any:
    if v is None or isinstance(v, (str, bool)):
        return v
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        return float(v) if np.isfinite(v) else None
    return v


def _json_rows(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """A frame's rows as JSON-ready dicts (missing and non-finite values: null)."""
    return [{k: (None if not isinstance(v, str) and pd.isna(v) else _json_value(v)) for k, v in r.items()}
            for r in frame.to_dict(orient="records")]


def _pearson(x: np.ndarray, y: np.ndarray) -> float | None:
    """Pearson's r, None with fewer than 3 pairs or a constant side."""
    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return None
    return float(np.corrcoef(x, y)[0, 1])


def throughput_numbers(frame: pd.DataFrame) -> dict[str, Any]:
    """Where the grid's speed went, from :func:`throughput_runs`:

    - ``per_variant``: tokens/s mean, min, max over seeds and the runs (``variants``: the grid's order);
    - ``mean``, ``best`` (the fastest run, ``best_run``) and ``share_of_best`` = mean / best;
    - ``gap`` = best - mean, split exactly into ``between`` = the mean over runs of best minus the
      fastest run of the run's variant (the variant itself: even its fastest seed is that much slower)
      and ``within`` = the mean over runs of its variant's fastest minus its own (load, order, luck),
      with their ``*_share`` of the gap;
    - ``variance_between_share``: the share of the runs' variance of tokens/s between variants (eta
      squared; None with one variant or no variance);
    - ``load``: runs with a recorded load, its range, and Pearson's r of tokens/s with the load
      across runs and within variants (each minus its variant's mean; None with under 3 runs);
    - ``overhead_share``: mean share of a run's seconds outside the optimiser steps (evaluations,
      checkpoints; not in tokens/s)."""
    tps = frame["tokens_per_s"].to_numpy(dtype=float)
    by = frame.groupby("variant", sort=False)["tokens_per_s"]
    per = {str(v): {"mean": float(g.mean()), "min": float(g.min()), "max": float(g.max()), "runs": int(len(g))}
           for v, g in by}
    best_i = int(np.argmax(tps))
    best, mean = float(tps[best_i]), float(tps.mean())
    vmax = by.transform("max").to_numpy(dtype=float)
    vmean = by.transform("mean").to_numpy(dtype=float)
    between, within = float(np.mean(best - vmax)), float(np.mean(vmax - tps))
    gap = best - mean
    ss = float(((tps - mean) ** 2).sum())
    eta2 = float(((vmean - mean) ** 2).sum() / ss) if ss > 0 and len(per) > 1 else None
    has = frame["load_1min"].notna().to_numpy()
    load: dict[str, Any] = {"runs": int(has.sum())}
    if has.any():
        x = frame.loc[has, "load_1min"].to_numpy(dtype=float)
        xs = x - frame.loc[has].groupby("variant", sort=False)["load_1min"].transform("mean").to_numpy(dtype=float)
        ys = tps[has] - frame.loc[has].groupby("variant", sort=False)["tokens_per_s"].transform("mean").to_numpy(dtype=float)
        load.update(min=float(x.min()), max=float(x.max()), r=_pearson(x, tps[has]), r_within_variant=_pearson(xs, ys))
    over = frame["overhead_share"].dropna()
    return {"runs": int(len(frame)), "per_variant": per, "variants": list(per), "mean": mean, "best": best,
            "best_run": {"variant": str(frame["variant"].iloc[best_i]), "seed": int(frame["seed"].iloc[best_i])},
            "share_of_best": mean / best if best > 0 else None, "gap": gap, "between": between, "within": within,
            "between_share": between / gap if gap > 0 else None, "within_share": within / gap if gap > 0 else None,
            "variance_between_share": eta2, "load": load,
            "overhead_share": float(over.mean()) if len(over) else None}


def throughput_table(t: Mapping[str, Any]) -> pd.DataFrame:
    """:func:`throughput_numbers` as a table: per variant the mean, min and max tokens/s over its runs and
    its mean as a share of the grid's best run; a last row for every run together (its max is the best run)."""
    best = t["best"]
    rows = {v: {"runs": p["runs"], "tokens/s mean": p["mean"], "min": p["min"], "max": p["max"],
                "mean / best run": p["mean"] / best if best else np.nan} for v, p in t["per_variant"].items()}
    rows["all runs"] = {"runs": t["runs"], "tokens/s mean": t["mean"],
                        "min": min(p["min"] for p in t["per_variant"].values()), "max": best,
                        "mean / best run": t["share_of_best"] if t["share_of_best"] is not None else np.nan}
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("variant")


def grid_cost(runs: Mapping[tuple[str, int], Path]) -> dict[str, float]:
    """What the grid cost to train (summed training seconds; a reused run counts its original time)."""
    secs = [T.read_summary(r)["train_seconds"] for r in runs.values()]
    return {"runs": len(secs), "train_seconds": float(sum(secs)), "seconds_per_run": float(np.mean(secs))}


# ============================================================================================
# 06: curves, final per-window losses, the cut panel, C2
# ============================================================================================


def curves(runs: Mapping[tuple[str, int], Path]) -> pd.DataFrame:
    """Every held-out evaluation of every run: variant, seed, step, tokens, val_loss (+ alpha/<l>)."""
    rows = []
    for (name, s), run in runs.items():
        tps = T.read_summary(run)["tokens_per_step"]
        for rec in T.read_log(run):
            if "eval" in rec:
                extra = {k: v for k, v in rec.items() if k.startswith("alpha/") or k == "backout_lambda"}
                rows.append({"variant": name, "seed": s, "step": rec["step"], "tokens": rec["step"] * tps,
                             "val_loss": rec["eval"], **extra})
    return pd.DataFrame(rows)


def _band(ax, frame: pd.DataFrame, x: str, y: str, *, color, label, ls="-", marker=None):
    """Mean over seeds with a min-max band (the seeds' spread)."""
    g = frame.groupby(x)[y]
    m, lo, hi = g.mean(), g.min(), g.max()
    ax.plot(m.index, m.values, color=color, ls=ls, marker=marker, ms=3, label=label)
    ax.fill_between(m.index, lo.values, hi.values, color=color, alpha=0.18, lw=0)
    return m


def curves_panel(frame: pd.DataFrame, P):
    """Validation loss vs training tokens per variant (mean over seeds, band = min-max over seeds):
    one panel for the learned variants and relatives, one per cut alpha."""
    alphas = [float(a) for a in P.train_cut_alphas]
    nrows, ncols = slide_grid(1 + len(alphas))
    fig, grid = plt.subplots(nrows, ncols, figsize=(12.6, 0.6 + 3.3 * nrows), sharey=True, squeeze=False)
    for ax in grid.flat[1 + len(alphas):]:
        ax.axis("off")
    axes = grid.flat[:1 + len(alphas)]
    cmap = plt.get_cmap("cividis")  # blue to yellow: no green or orange, the input/next colours
    base = frame[frame.variant == "baseline"]
    numbers: dict[str, Any] = {}
    for ax in axes:
        m = _band(ax, base, "tokens", "val_loss", color="k", label="baseline")
        numbers["baseline"] = {"tokens": m.index.tolist(), "val_loss": m.values.tolist()}
    others = [v for v in frame.variant.unique() if v in EXTRA_MODES]
    colors = dict(zip(EXTRA_MODES, ("#0173b2", "#cc78bc", "#5e3c99", "#666666")))  # not the input/next colours
    for v in others:
        m = _band(axes[0], frame[frame.variant == v], "tokens", "val_loss", color=colors[v], label=v, ls="--")
        numbers[v] = {"tokens": m.index.tolist(), "val_loss": m.values.tolist()}
    axes[0].set_title("learned gates" + (" and relatives" if set(others) - set(C3_GATES) else ""))
    layers = cut_layers(P)
    cells = cut_cells(P)
    for ax, a in zip(axes[1:], alphas):
        for i, l in enumerate(layers):
            if (a, l) not in cells:
                continue
            name = fixed_name(a, l)
            m = _band(ax, frame[frame.variant == name], "tokens", "val_loss",
                      color=cmap(i / max(1, len(layers) - 1) * 0.9), label=f"block {l}", ls="--")
            numbers[name] = {"tokens": m.index.tolist(), "val_loss": m.values.tolist()}
        ax.set_title(rf"fixed cut, $\alpha = {a:g}$")
    for k, ax in enumerate(axes):
        ax.set_xlabel("training tokens")
        tokens_axis(ax)
        ax.legend(fontsize=8, ncol=2)
        if k % ncols == 0:
            ax.set_ylabel("validation loss (nats)")
    lo = float(frame.groupby(["variant", "tokens"]).val_loss.mean().min())
    first = float(frame[frame.step == frame.step.min()].val_loss.max())
    axes[0].set_ylim(lo - 0.1, first + 0.1)
    fig.suptitle(f"{model_name(P)}: validation loss during training ({len(seeds(P))} seeds; band: min-max)")
    fig.tight_layout()
    return fig, numbers


def slide_grid(n: int, *, max_cols: int = 3) -> tuple[int, int]:
    """(rows, columns) for ``n`` panels of curves: at most ``max_cols`` a row, so that a figure of
    12.6 inches (1890 px at ``savefig.dpi`` 150) stays within a 16:9 slide at a readable font."""
    if n < 1:
        raise ValueError(f"a figure needs at least one panel, got {n}")
    cols = min(n, max_cols)
    return -(-n // cols), cols


def model_name(P) -> str:
    return f"trained GPT {P.train_layers}x{P.train_width}"


def final_evals(runs: Mapping[tuple[str, int], Path], P) -> dict[tuple[str, int], dict[str, Any]]:
    return {k: final.final_eval(r, device=P.device) for k, r in runs.items()}


def losses(finals: Mapping[tuple[str, int], dict], name: str, seed_list: Sequence[int]) -> np.ndarray:
    """``[n_seeds, n_windows]`` final per-window validation losses of one variant (seeds in order)."""
    missing = [s for s in seed_list if (name, s) not in finals]
    if missing:
        raise KeyError(f"variant {name!r} has no final evaluation for seeds {missing}: train_grid first")
    return np.stack([np.asarray(finals[(name, s)]["losses"], dtype=np.float64) for s in seed_list])


def cut_table(finals: Mapping[tuple[str, int], dict], P) -> pd.DataFrame:
    """Per trained cut (alpha, block): mean final validation loss, the paired change vs the baseline
    with seeds as the unit (mean over seeds of each seed's change, two-sided t-interval across seeds,
    ``verdicts.seed_test``'s numbers) and each seed's change."""
    S = seeds(P)
    base = losses(finals, "baseline", S)
    rows = []
    for a, l in cut_cells(P):
        x = losses(finals, fixed_name(a, l), S)
        t = verdicts.seed_test((x - base).mean(1), sign=1, margin=verdicts.LOSS_MARGIN)
        rows.append({"alpha": a, "block": l, "val_loss": float(x.mean()), "change": t["estimate"],
                     "lo": t["lo"], "hi": t["hi"], "mde": t["mde"], "per_seed": [round(v, 4) for v in t["per_seed"]]})
    return pd.DataFrame(rows).set_index(["alpha", "block"])


def cut_panel(finals: Mapping[tuple[str, int], dict], P):
    """Final validation loss against the block of a fixed cut, one panel per alpha, with each seed's
    value (dots), the seed mean (line) and the baseline's seeds (band: min-max, line: mean)."""
    S, layers = seeds(P), cut_layers(P)
    alphas = [float(a) for a in P.train_cut_alphas]
    base = losses(finals, "baseline", S).mean(1)  # [S]
    fig, axes = plt.subplots(1, len(alphas), figsize=(4.8 * len(alphas), 3.7), squeeze=False)
    numbers: dict[str, Any] = {"baseline": base.tolist(), "blocks": layers}
    cells = cut_cells(P)
    for ax, a in zip(axes[0], alphas):
        at = [l for l in layers if (a, l) in cells]
        per = np.stack([losses(finals, fixed_name(a, l), S).mean(1) for l in at])  # [k, S]
        ax.axhspan(base.min(), base.max(), color="k", alpha=0.12, lw=0)
        ax.axhline(base.mean(), color="k", lw=1, label=f"baseline ({len(S)} seeds)")
        for j in range(len(S)):
            ax.plot(at, per[:, j], "o", color="#0173b2", alpha=0.45, ms=4,
                    label="one seed" if j == 0 else None)
        ax.plot(at, per.mean(1), "-", color="#0173b2", lw=1.8, label="mean over seeds")
        ax.axvline(verdicts.first_late_block(int(P.train_layers)) - 0.5, color="grey", ls=":", lw=1)
        ax.set_xticks(layers)
        ax.set_xlim(min(layers) - 0.5, max(layers) + 0.5)
        ax.set_xlabel("block with the cut (late: right of the dotted line)")
        ax.set_title(rf"fixed $\alpha = {a:g}$ at one block")
        ax.legend(fontsize=8)
        numbers[f"alpha={a:g}"] = {"blocks": at, "per_seed": per.tolist()}
    axes[0][0].set_ylabel("final validation loss (nats)")
    fig.suptitle(f"{model_name(P)}: final validation loss against the block of the cut "
                 f"(cut at {'both adds' if P.train_cut_site == 'sublayer' else 'the block'})")
    fig.tight_layout()
    return fig, numbers


def c2_rows(finals: Mapping[tuple[str, int], dict], P) -> list:
    """C2 as the paper states it, training with the cut in place (``verdicts.c2_training_*``, seeds as
    the unit): alpha = 0 at each trained block; layer sensitivity where an alpha was trained at 2 or
    more blocks; the late cut for each alpha."""
    S, L = seeds(P), int(P.train_layers)
    base = losses(finals, "baseline", S)
    who = dict(model=model_name(P), source=f"{NAME06}-cut")
    rows = []
    cells = cut_cells(P)
    for a in dict.fromkeys(a for a, _ in cells):
        cuts = {l: losses(finals, fixed_name(a, l), S) for b, l in cells if b == a}
        if a == 0.0:
            for l in cuts:
                rows += verdicts.c2_training_alpha0(base, cuts[l], block=l, **who)
        if len(cuts) >= 2:
            rows += verdicts.c2_training_layer_sensitive(base, cuts, alpha_value=a, **who)
        if any(verdicts.is_late(l, L) for l in cuts):
            rows += verdicts.c2_training_late_cut(base, cuts, alpha_value=a, n_layers=L, **who)
    return rows


# ============================================================================================
# 06: both WikiText perplexities of every trained model (issue 35)
# ============================================================================================

PPL_METRICS = {"sliding_ppl": "sliding, per token", "sliding_word_ppl": "sliding, per word",
               "doc_word_ppl": "lm-eval, per word", "doc_bits_per_byte": "lm-eval, bits per byte"}


def perplexity_runs(runs: Mapping[tuple[str, int], Path], P) -> pd.DataFrame:
    """Both WikiText perplexities of every run's final model (``evaluate.run_perplexities``, cached by
    the harness per model): ours, a sliding window of ``train_context`` tokens (stride half of it,
    ``ppl_windows`` windows of ``ppl_corpus`` / ``ppl_split``), and lm-eval's, each article in disjoint
    windows of ``train_context`` tokens (``ppl_doc_limit`` articles). One row per run: variant, seed,
    the :data:`PPL_METRICS` and what each was computed on."""
    ctx = int(P.train_context)
    cfg = evaluate.EvalConfig(context=ctx, stride=max(1, ctx // 2), seed=P.seed)
    rows = []
    for (name, s), run in runs.items():
        r = evaluate.run_perplexities(run, corpus=P.ppl_corpus, split=P.ppl_split, window_limit=P.ppl_windows,
                                      doc_limit=P.ppl_doc_limit, max_length=ctx, config=cfg, device=P.device)
        rows.append({"variant": name, "seed": s, **{k: float(r[k]) for k in PPL_METRICS},
                     **{k: r[k] for k in ("corpus", "sliding_context", "sliding_stride", "sliding_windows",
                                          "sliding_windows_total", "doc_max_length", "documents", "documents_total")}})
    return pd.DataFrame(rows)


def perplexity_table(frame: pd.DataFrame) -> pd.DataFrame:
    """:func:`perplexity_runs` per variant (in the grid's order), the seed as the unit: the mean and the
    SD (n - 1; NaN with one seed) over seeds of each of :data:`PPL_METRICS`, and the seeds."""
    g = frame.groupby("variant", sort=False)
    out = pd.concat({PPL_METRICS[k]: g[k].agg(["mean", "std"]).rename(columns={"std": "sd"}) for k in PPL_METRICS},
                    axis=1)
    out[("seeds", "n")] = g.size()
    return out


def perplexity_numbers(frame: pd.DataFrame, table: pd.DataFrame) -> dict[str, Any]:
    """What 06 saves of the trained models' perplexities: per variant the mean and SD over seeds of
    each metric (null SD with one seed), every run's values, and the two definitions' settings."""
    first = frame.iloc[0]
    per = {str(v): {k: {"mean": _json_value(float(table.loc[v, (PPL_METRICS[k], "mean")])),
                        "sd": _json_value(float(table.loc[v, (PPL_METRICS[k], "sd")]))} for k in PPL_METRICS}
           | {"seeds": int(table.loc[v, ("seeds", "n")])} for v in table.index}
    return {"corpus": str(first["corpus"]), "metrics": dict(PPL_METRICS), "per_variant": per,
            "variants": list(per), "metric_order": list(PPL_METRICS),  # the saved JSON's keys are sorted
            "sliding": {"context": int(first["sliding_context"]), "stride": int(first["sliding_stride"]),
                        "windows": int(first["sliding_windows"]), "windows_total": int(first["sliding_windows_total"])},
            "lm_eval": {"max_length": int(first["doc_max_length"]), "documents": int(first["documents"]),
                        "documents_total": int(first["documents_total"])},
            "per_run": _json_rows(frame[["variant", "seed", *PPL_METRICS]])}


# ============================================================================================
# 07: learned alphas, the comparison, benchmarks
# ============================================================================================


def alpha_history(frame: pd.DataFrame) -> pd.DataFrame:
    """Long table of the gated variants' alpha per block over training (from the logs' evaluations):
    variant, seed, tokens, block, alpha. Token gates log sigmoid(b_l) (the gate at LN(x) ⟂ w_l)."""
    cols = [c for c in frame.columns if c.startswith("alpha/")]
    g = frame[frame.variant.isin(GATED)]
    if g.empty or not cols:
        return pd.DataFrame(columns=["variant", "seed", "tokens", "block", "alpha"])
    long = g.melt(id_vars=["variant", "seed", "tokens"], value_vars=cols, var_name="block", value_name="alpha")
    long["block"] = long.block.str.split("/").str[1].astype(int)
    return long.dropna(subset=["alpha"]).reset_index(drop=True)


def alpha_panel(history: pd.DataFrame, P):
    """Alpha per block over training, one panel per gated variant (mean over seeds, band min-max)."""
    variants = [v for v in GATED if v in set(history.variant)]
    if not variants:
        raise ValueError("no gated variant in the grid (train_variants lacks learned / learned-token / scalars)")
    fig, axes = plt.subplots(1, len(variants), figsize=(4.8 * len(variants), 3.7), squeeze=False)
    cmap = plt.get_cmap("viridis")
    L = int(P.train_layers)
    numbers: dict[str, Any] = {}
    for ax, v in zip(axes[0], variants):
        h = history[history.variant == v]
        numbers[v] = {}
        for l in range(L):
            m = _band(ax, h[h.block == l], "tokens", "alpha", color=cmap(l / max(1, L - 1) * 0.9),
                      label=f"block {l}" + (" (last)" if l == L - 1 else ""))
            numbers[v][str(l)] = m.values.tolist()
        title = {"learned": r"learned $\alpha_l = \sigma(\theta_l)$",
                 "learned-token": r"token gates: $\sigma(b_l)$ (bias part)",
                 "scalars": r"residual scalars $\lambda_l$"}[v]
        ax.set_title(title)
        ax.set_xlabel("training tokens")
        tokens_axis(ax)
        ax.legend(fontsize=7, ncol=2)
    axes[0][0].set_ylabel(r"$\alpha$ (1 = plain skip)")
    fig.suptitle(f"{model_name(P)}: the gates during training ({len(seeds(P))} seeds)")
    fig.tight_layout()
    return fig, numbers


def start_alpha(P) -> float:
    """Where the paper's gates start: ``sigmoid(theta_init)`` (token gates: ``w = 0``, so every token's
    alpha is ``sigmoid(b) = sigmoid(theta_init)``), ``theta_init`` = ``train_gate_init`` or the
    model's default."""
    theta = THETA_INIT if P.train_gate_init is None else float(P.train_gate_init)
    return float(torch.sigmoid(torch.tensor(theta, dtype=torch.float64)))


def tokens_axis(ax) -> None:
    """Training tokens on an x axis as 50k, 1.2M (not 50000)."""
    def fmt(x, _pos):
        return f"{x / 1e6:g}M" if abs(x) >= 1e6 else f"{x / 1e3:g}k" if abs(x) >= 1e3 else f"{x:g}"
    ax.xaxis.set_major_formatter(FuncFormatter(fmt))


def final_alphas(finals: Mapping[tuple[str, int], dict], name: str, P) -> np.ndarray:
    """``[n_seeds, L]`` final alpha per block (token gates: the mean over the validation tokens)."""
    return np.stack([[finals[(name, s)]["alphas"][l] for l in range(int(P.train_layers))] for s in seeds(P)])


def alpha_table(finals: Mapping[tuple[str, int], dict], P) -> pd.DataFrame:
    """Final attenuation 1 - alpha per block and gated variant (mean over seeds; min-max), where it
    started, and the largest movement of any seed from that start."""
    rows = []
    for v in GATED:
        if (v, seeds(P)[0]) not in finals:
            continue
        a = 1 - final_alphas(finals, v, P)
        start = 1 - start_alpha(P) if v in C3_GATES else 0.0  # residual scalars start at lambda = 1
        for l in range(a.shape[1]):
            rows.append({"variant": v, "block": l, "start": start, "attenuation": a[:, l].mean(),
                         "min": a[:, l].min(), "max": a[:, l].max(),
                         "movement": float(np.abs(a[:, l] - start).max())})
    return pd.DataFrame(rows).set_index(["variant", "block"]).round(4)


def cut_candidates(P) -> list[str]:
    """What the gates are compared against in C3-training.beats-best-cut: the baseline (alpha = 1)
    and every trained fixed cut."""
    return ["baseline", *[fixed_name(a, l) for a, l in cut_cells(P)]]


def best_cut(finals: Mapping[tuple[str, int], dict], P, candidates: Sequence[str] | None = None) -> dict[str, Any]:
    """The candidate (default :func:`cut_candidates`, the baseline included) with the lowest final
    validation loss, mean over seeds and windows. Descriptive only: the rule compares the gates with
    EVERY candidate, so no selection is made and nothing needs confirming on other seeds."""
    S = seeds(P)
    means = {n: float(losses(finals, n, S).mean()) for n in (cut_candidates(P) if candidates is None else candidates)}
    name = min(means, key=means.get)
    cell = next(((a, l) for a, l in cut_cells(P) if fixed_name(a, l) == name), (None, None))
    return {"variant": name, "alpha": cell[0], "layer": cell[1], "val_loss": means[name],
            "label": "baseline (alpha = 1)" if cell[1] is None else name}


def compare_table(finals: Mapping[tuple[str, int], dict], P, cut: Mapping[str, Any]) -> pd.DataFrame:
    """Final validation loss of the baseline, the lowest-loss fixed cut, each learned variant and
    relative, and each one's change vs the baseline with seeds as the unit (mean over seeds,
    t-interval across seeds, each seed's change, seeds better)."""
    S = seeds(P)
    base = losses(finals, "baseline", S)
    names = ["baseline", cut["variant"]] + [v for v in P.train_variants]
    rows = []
    for name in dict.fromkeys(names):
        x = losses(finals, name, S)
        t = verdicts.seed_test((x - base).mean(1), sign=-1, margin=verdicts.LOSS_MARGIN)
        label = name if name != cut["variant"] or name == "baseline" else f"{name} (lowest-loss fixed cut)"
        rows.append({"variant": label, "val_loss": float(x.mean()), "vs baseline": t["estimate"], "lo": t["lo"],
                     "hi": t["hi"], "per seed": [round(v, 4) for v in t["per_seed"]],
                     "seeds better": int(sum(v < 0 for v in t["per_seed"]))})
    return pd.DataFrame(rows).set_index("variant")


def compare_panel(table: pd.DataFrame, P):
    """Each variant's final validation loss minus the baseline's (confirmation windows), with its CI."""
    t = table.drop(index="baseline", errors="ignore")
    fig, ax = plt.subplots(figsize=(7.4, 0.55 * len(t) + 2.2))
    y = np.arange(len(t))
    ax.errorbar(t["vs baseline"], y, xerr=[t["vs baseline"] - t["lo"], t["hi"] - t["vs baseline"]], fmt="o",
                color="#0173b2", capsize=3, label="mean over seeds, 95% t-interval")
    for i, per in enumerate(t["per seed"]):
        ax.plot(per, [i] * len(per), "|", color="k", ms=9, alpha=0.6, label="one seed" if i == 0 else None)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.28), ncol=2, frameon=False)
    ax.axvline(0, color="k", lw=1)
    ax.set_yticks(y)
    ax.set_yticklabels(t.index)
    ax.invert_yaxis()
    ax.set_xlabel("final validation loss − baseline (nats; seeds as the unit)")
    ax.set_title(f"{model_name(P)}: each variant's final loss minus the baseline's")
    fig.tight_layout()
    return fig, t.reset_index().to_dict(orient="list")


def c3_rows(finals: Mapping[tuple[str, int], dict], P) -> list:
    """The C3 training rules for the paper's gates (learned, learned-token), seeds as the unit:
    concentration on the final block (``verdicts.c3_concentration``, per seed, unanimous), beats the
    baseline and beats every fixed cut (``verdicts.c3_training_*``)."""
    S, L = seeds(P), int(P.train_layers)
    base = losses(finals, "baseline", S)
    cands = {n: losses(finals, n, S) for n in cut_candidates(P)}
    who = dict(model=model_name(P), source=f"{NAME07}-compare")
    rows = []
    for v in C3_GATES:
        if v not in P.train_variants:
            continue
        rows += verdicts.c3_concentration(final_alphas(finals, v, P), list(range(L)), L, variant=v, setting="training",
                                          start_alphas=[start_alpha(P)] * L, model=model_name(P),
                                          source=f"{NAME07}-alphas")
        g = losses(finals, v, S)
        rows += verdicts.c3_training_beats_baseline(g, base, variant=v, **who)
        rows += verdicts.c3_training_beats_every_cut(g, cands, variant=v, **who)
    return rows


def eval_config(P):
    """The harness settings for the trained models: their context, half-overlapping windows."""
    ctx = int(P.train_context)
    return evaluate.EvalConfig(context=ctx, stride=max(1, ctx // 2), batch_size=16, seed=P.seed)


def bench_variants(P, cut: Mapping[str, Any]) -> list[str]:
    """The variants 07 scores with the harness: the baseline, the best fixed cut and the paper's gates
    (learned, learned-token) in the grid. The relatives (backout, scalars) are compared by validation
    loss only: the harness costs about as much per model as training one at ``default``."""
    return list(dict.fromkeys(["baseline", cut["variant"], *[v for v in C3_GATES if v in P.train_variants]]))


def benchmarks(runs: Mapping[tuple[str, int], Path], P, names: Sequence[str], *,
               verbose: bool = True) -> dict[str, dict[str, Any]]:
    """The harness (``evaluate.run_task``, cached per model weights) on each final model:
    ``{variant: {"metrics": {task: [n_seeds] main metric}, "correct": {task: [n_seeds, n_items]},
    "chance": {task: chance accuracy of the scored items}, "kept": {task: (questions whose answers fit
    the context, questions)}}}``. Main metric: perplexity for the
    WikiText tasks, accuracy otherwise."""
    cfg = eval_config(P)
    tasks = list(P.train_bench_tasks)
    unknown = [t for t in tasks if t not in evaluate.TASKS]
    if unknown:
        raise ValueError(f"train_bench_tasks {unknown} unknown; known: {list(evaluate.TASKS)}")
    out: dict[str, dict[str, Any]] = {}
    t0 = time.perf_counter()
    for name in names:
        metrics = {t: [] for t in tasks}
        correct = {t: [] for t in tasks if t in evaluate.ZERO_SHOT}
        chance: dict[str, float] = {}
        kept: dict[str, tuple[int, int]] = {}
        for s in seeds(P):
            lm, tok, info = load_model(str(runs[(name, s)] / "model"), device=P.device)
            for t in tasks:
                limit = P.train_bench_limits.get(t)
                if t in evaluate.MC_TASKS:  # only the questions whose answers fit the model's context
                    qs = evaluate.fitting_questions(t, tok, info, cfg.context)
                    res = evaluate.multiple_choice_score(lm, info, tok, qs, task=f"{t}-fit{cfg.context}", limit=limit,
                                                         config=cfg)
                else:
                    res = evaluate.run_task(lm, info, t, tokenizer=tok, limit=limit, config=cfg)
                metrics[t].append(res.metrics["ppl" if t in evaluate.PPL_TASKS else "acc"][0])
                if t in evaluate.MC_TASKS:
                    kept[t] = evaluate.kept_share(t, tok, info, cfg.context)
                if t in correct:
                    correct[t].append(evaluate.item_correct(res))
                    chance[t] = evaluate.chance_accuracy(t, np.asarray(res.details["items"]), tok, info, cfg.context)
        out[name] = {"metrics": {t: np.asarray(v) for t, v in metrics.items()},
                     "correct": {t: np.stack(v) for t, v in correct.items()}, "chance": chance, "kept": kept}
    if verbose:
        print(f"{len(names)} variants x {len(seeds(P))} seeds x {len(tasks)} tasks scored in "
              f"{time.perf_counter() - t0:.0f} s (cached: the harness stores each model's item scores)")
    return out


def benchmark_table(bench: Mapping[str, Mapping[str, Any]], P) -> pd.DataFrame:
    """Table II's shape: one row per variant (mean over seeds), one column per task (perplexity for
    WikiText, accuracy otherwise), and a chance row for the zero-shot tasks."""
    rows = []
    for name, b in bench.items():
        rows.append({"variant": name, **{t: float(np.mean(v)) for t, v in b["metrics"].items()}})
    first = next(iter(bench.values()))
    rows.append({"variant": "chance (uniform guess)", **{t: first["chance"].get(t, np.nan)
                                                        for t in first["metrics"]}})
    frame = pd.DataFrame(rows).set_index("variant").round(3).astype(object)
    base = bench.get("baseline", first)
    frame.loc["baseline above chance? (95%)"] = [above_chance(base, t) for t in first["metrics"]]
    frame.columns = [f"{t} ({'ppl' if t in evaluate.PPL_TASKS else 'acc'})" for t in frame.columns]
    n = {t: first["correct"][t].shape[1] for t in first["correct"]}
    frame.attrs["items"] = n
    return frame


def above_chance(b: Mapping[str, Any], task: str) -> str:
    """Does the baseline's accuracy on ``task`` clear chance? One-sided 95% bound over items (each
    item's correctness averaged over seeds, normal interval): "yes", or "no: says nothing at this
    scale" when the bound does not clear the chance row; "–" for perplexity tasks."""
    if task not in b["correct"]:
        return "–"
    x = np.asarray(b["correct"][task], dtype=float).mean(axis=0)  # per item, mean over seeds
    lo = x.mean() - 1.645 * x.std(ddof=1) / np.sqrt(x.size) if x.size > 1 else -np.inf
    return "yes" if lo > b["chance"][task] else "no: says nothing at this scale"


def benchmark_numbers(table: pd.DataFrame) -> dict[str, Any]:
    """:func:`benchmark_table` as JSON-ready columns (missing values, e.g. no chance for perplexity: null)."""
    out: dict[str, Any] = {"variant": [str(v) for v in table.index]}
    for c in table.columns:
        out[c] = [v if isinstance(v, str) else None if pd.isna(v) else float(v) for v in table[c]]
    out["items"] = {t: int(n) for t, n in table.attrs.get("items", {}).items()}
    return out


def c4_rows(bench: Mapping[str, Mapping[str, Any]], P) -> list:
    """``verdicts.c4_benchmarks`` for every scored variant vs the baseline (McNemar per task and seed,
    Holm across tasks, paired by item and seed)."""
    base = bench["baseline"]["correct"]
    if not base:
        return []
    rows = []
    for name, b in bench.items():
        if name == "baseline":
            continue
        rows += verdicts.c4_benchmarks(base, b["correct"], model=model_name(P), variant=name, n_boot=P.train_boot,
                                       seed=P.seed, source=f"{NAME07}-benchmarks")
    return rows


# ============================================================================================
# 08: the lens on the trained models
# ============================================================================================


def lens_variants(P) -> list[str]:
    """What 08 looks at: every variant of the grid (the baseline, every fixed cut, the gates and
    relatives, the contrast arm's baseline)."""
    return [v.name for v in grid(P)]


def lens_runs(runs: Mapping[tuple[str, int], Path], P, names: Sequence[str] | None = None,
              *, verbose: bool = True) -> dict[tuple[str, int], Any]:
    """The logit lens (``lens.run_lens``, cached) on each final model: WikiText-2 test windows of the
    training context, ``train_lens_windows`` of them (the same windows for every model)."""
    names = lens_variants(P) if names is None else list(names)
    out = {}
    t0 = time.perf_counter()
    for name in names:
        for s in seeds(P):
            lm, tok, info = load_model(str(runs[(name, s)] / "model"), device=P.device)
            out[(name, s)] = lens_setups.trained(P).run((lm, tok, info))
    if verbose:
        r = next(iter(out.values()))
        print(f"lens: {len(out)} models x {r.n_seq} windows x {P.train_context} tokens "
              f"({LENS_CORPUS} {LENS_SPLIT}), h_0..h_{r.n_layers}; {time.perf_counter() - t0:.0f} s")
    return out



def unigram_rates(res, tok, info) -> dict:
    """The unigram decoder's per-window rates on one lens result's positions, counted on the lens
    split under the model's tokenizer (``lens.unigram_baseline``)."""
    return lens.unigram_baseline(res, lens.corpus_token_counts(tok, info, LENS_CORPUS, LENS_SPLIT))


def c1_on_model(res, tok, info, P, *, model: str, source: str, unigram: dict | None = None) -> tuple[list, dict]:
    """C1's rows (``verdicts.c1_regimes`` and ``verdicts.c1_depth``) on one trained model's lens
    result, against the unigram decoder (:func:`unigram_rates`; pass ``unigram`` when already
    counted); and that decoder's per-window rates."""
    u = unigram_rates(res, tok, info) if unigram is None else unigram
    who = dict(model=model, decoder="logit lens", n_boot=P.train_boot, seed=P.seed, source=source)
    rows = verdicts.c1_regimes(as_numpy(res.per_seq["top1_input"]), as_numpy(res.per_seq["top1_next"]),
                               as_numpy(u["top1_input"]), as_numpy(u["top1_next"]),
                               min_run=verdicts.c1_min_run(res.n_layers), **who)
    return rows + verdicts.c1_depth(depth_curves(res), **who), u


def arms(P) -> dict[str, str]:
    """The baselines whose C1 rows 08 shows: ``{variant name: embedding recipe}`` (the profile's recipe,
    then the contrast arm's)."""
    out = {"baseline": P.train_embedding}
    if contrast_name(P):
        out[contrast_name(P)] = P.train_contrast_embedding
    return out


def arm_unigrams(lenses: Mapping[tuple[str, int], Any], runs: Mapping[tuple[str, int], Path], P,
                 names: Sequence[str] | None = None) -> dict[tuple[str, int], dict]:
    """The unigram decoder's rates for each baseline of each arm (:func:`arms`; or the variants ``names``),
    every seed: one tokenizer load and one count per model, shared by :func:`c1_rows`,
    :func:`regimes_panel` and :func:`baseline_switch`."""
    out = {}
    for name in (arms(P) if names is None else names):
        for s in seeds(P):
            _, tok, info = load_model(str(runs[(name, s)] / "model"), device=P.device)
            out[(name, s)] = unigram_rates(lenses[(name, s)], tok, info)
    return out


def c1_rows(lenses: Mapping[tuple[str, int], Any], unigrams: Mapping[tuple[str, int], dict], P
            ) -> tuple[list, list]:
    """C1 on each baseline seed of each arm (:func:`c1_on_model`, unigram rates from
    :func:`arm_unigrams`), and per arm the rows with seeds as the unit (``verdicts.c1_across_seeds``):
    ``(across-seed rows, per-seed rows)``."""
    summary, per_seed = [], []
    for name, emb in arms(P).items():
        by_seed = []
        for s in seeds(P):
            rows = c1_on_model(lenses[(name, s)], None, None, P, unigram=unigrams[(name, s)],
                               model=f"{model_name(P)}, {emb} embedding, seed {s}", source=f"{NAME08}-regimes")[0]
            by_seed.append(rows)
            per_seed += rows
        summary += verdicts.c1_across_seeds(by_seed, model=f"{model_name(P)}, {emb} embedding ({len(seeds(P))} seeds)",
                                            source=f"{NAME08}-regimes")
    return summary, per_seed


def c1_seed_table(per_seed: Sequence) -> pd.DataFrame:
    """Each seed's C1 verdicts and estimates, one row per model (arm and seed), one column per claim."""
    rows: dict[str, dict[str, str]] = {}
    for r in per_seed:
        est = "" if r.estimate is None else f" ({r.estimate:+.3f})"
        col = r.claim_id + (f" ({r.details['metric']})" if "metric" in r.details else "")
        rows.setdefault(r.model, {})[col] = r.verdict + est
    return pd.DataFrame.from_dict(rows, orient="index")


def recipe_table(numbers: Mapping[str, Any], P, runs: Mapping[tuple[str, int], Path] | None = None) -> pd.DataFrame:
    """Per embedding recipe (``numbers`` = :func:`regimes_panel`'s), what gives a small model its early
    input regime, one number per column: the input token's top-1 rate at h_1 (mean, min and max over
    seeds) beside the unigram decoder's, the next token's top-1 rate at h_1 and at h_L and their ratio
    S1 (mean over seeds of each seed's ratio); with ``runs``, the final validation loss (mean and sd over
    seeds)."""
    by_emb = {emb: name for name, emb in arms(P).items()}
    rows = {}
    for emb, per in numbers.items():
        h1 = np.array([v["input"][1] for v in per.values()])
        n1 = np.array([v["next"][1] for v in per.values()])
        nL = np.array([v["next"][-1] for v in per.values()])
        row = {"seeds": len(per), "input top-1 at h_1": h1.mean(), "min over seeds": h1.min(),
               "max over seeds": h1.max(), "unigram (input)": float(np.mean([v["unigram_input"] for v in per.values()])),
               "next top-1 at h_1": n1.mean(), "next top-1 at h_L": nL.mean(),
               "S1": float(np.mean(np.divide(n1, nL, out=np.full_like(n1, np.nan), where=nL > 0)))}
        if runs is not None and emb in by_emb:
            loss = np.array([T.read_summary(runs[(by_emb[emb], int(s))])["val_loss"] for s in per])
            row.update({"val loss": loss.mean(), "val loss sd": float(np.std(loss, ddof=1)) if loss.size > 1 else np.nan})
        rows[emb] = row
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("embedding")


def regimes_panel(lenses: Mapping[tuple[str, int], Any], unigrams: Mapping[tuple[str, int], dict], P):
    """Each baseline seed's top-1 rate of the input and the next token per residual state (logit lens),
    with the unigram decoder's rates (dotted), one panel per arm (embedding recipe): where do the
    regimes change, and does the embedding recipe decide it?"""
    A = arms(P)
    fig, axes = plt.subplots(1, len(A), figsize=(6.0 * len(A), 3.9), sharey=True, squeeze=False)
    numbers: dict[str, Any] = {}
    for ax, (name, emb) in zip(axes[0], A.items()):
        numbers[emb] = {}
        for j, s in enumerate(seeds(P)):
            res, u = lenses[(name, s)], unigrams[(name, s)]
            numbers[emb][str(s)] = {}
            for which, ls in (("input", "-"), ("next", "--")):
                est = as_numpy(res.per_seq[f"top1_{which}"]).mean(0)
                x = np.arange(len(est))
                ax.plot(x, est, color=PALETTE[which], ls=ls, marker="o", ms=3, alpha=0.7,
                        label=f"{which} token (one line per seed)" if j == 0 else None)
                if j == 0:
                    ax.axhline(float(as_numpy(u[f"top1_{which}"]).mean()), color=PALETTE[which], ls=":", lw=1,
                               label=f"unigram decoder ({which})")
                numbers[emb][str(s)][which] = est.tolist()
                numbers[emb][str(s)][f"unigram_{which}"] = float(as_numpy(u[f"top1_{which}"]).mean())
        ax.set_xticks(range(int(P.train_layers) + 1))
        ax.set_xlabel(r"residual state $h_l$ ($h_0$: the embedding)")
        ax.set_title(f"{emb} embedding ({len(seeds(P))} seeds)")
    axes[0][0].set_ylabel("top-1 rate (logit lens)")
    axes[0][-1].legend(fontsize=8, loc="best")
    fig.suptitle(f"{model_name(P)} baselines: input early, next late?")
    fig.tight_layout()
    return fig, numbers


def _stack(lenses, name: str, key: str, S: Sequence[int]) -> np.ndarray:
    """``[n_seeds, n_windows, L+1]`` lens curves of one variant (the same windows for every seed)."""
    return np.stack([as_numpy(lenses[(name, s)].per_seq[key]) for s in S])


def _cell_of(name: str, P) -> tuple[float, int] | None:
    return next(((a, l) for a, l in cut_cells(P) if fixed_name(a, l) == name), None)


def after_layers(name: str, P) -> list[int]:
    """The residual states between the edit and the output: h_(b+1)..h_(L-1) for a fixed cut at block b,
    h_1..h_(L-1) for gates at every block (empty for a cut at the last block)."""
    L = int(P.train_layers)
    cell = _cell_of(name, P)
    return list(range((cell[1] + 1) if cell else 1, L))


def _edited(lenses, P) -> list[str]:
    """The variants 08 compares with the baseline: every lensed variant of the profile's recipe."""
    skip = {"baseline", contrast_name(P)}
    return [n for n in dict.fromkeys(n for n, _ in lenses) if n not in skip]


def persistence_table(lenses: Mapping[tuple[str, int], Any], P) -> pd.DataFrame:
    """Per variant, the input token's log10 rank between the edit and the output (``after_layers``),
    edited minus baseline with seeds as the unit (mean, t-interval, each seed's change), and the
    loss change on the same lens windows beside it."""
    S = seeds(P)
    rb = _stack(lenses, "baseline", "logrank_input", S)
    lb = -_stack(lenses, "baseline", "logprob_next", S)[:, :, -1]
    rows = []
    for name in _edited(lenses, P):
        idx = after_layers(name, P)
        la = -_stack(lenses, name, "logprob_next", S)[:, :, -1]
        lt = verdicts.seed_test((la - lb).mean(1), sign=1, margin=verdicts.LOSS_MARGIN)
        row = {"variant": name, "states": f"h_{idx[0]}..h_{idx[-1]}" if idx else "none"}
        if idx:
            ra = _stack(lenses, name, "logrank_input", S)
            t = verdicts.seed_test(ra[:, :, idx].mean((1, 2)) - rb[:, :, idx].mean((1, 2)), sign=1,
                                   margin=verdicts.MISALIGNMENT_MARGINS["logrank"])
            row.update({"rank baseline": float(rb[:, :, idx].mean()), "rank change": t["estimate"],
                        "rank CI": f"[{t['lo']:.3f}, {t['hi']:.3f}]",
                        "rank per seed": [round(v, 3) for v in t["per_seed"]]})
        row.update({"loss change": lt["estimate"], "loss CI": f"[{lt['lo']:.3f}, {lt['hi']:.3f}]"})
        rows.append(row)
    return pd.DataFrame(rows).set_index("variant").round(4)


def misalignment_rows(lenses: Mapping[tuple[str, int], Any], P) -> list:
    """Per variant vs the baseline, seeds as the unit: ``verdicts.training_misalignment`` (gates:
    C3-training.misalignment; a fixed cut: C2-training.cut-misalignment; both ask that the loss on the
    lens windows is not materially worse) and ``verdicts.training_emergence_shift`` (not applicable for
    an alpha = 0 cut, which forces it)."""
    S = seeds(P)
    rb, nb = _stack(lenses, "baseline", "logrank_input", S), _stack(lenses, "baseline", "top1_next", S)
    lb = -_stack(lenses, "baseline", "logprob_next", S)[:, :, -1]
    rows = []
    for name in _edited(lenses, P):
        cell = _cell_of(name, P)
        who = dict(model=model_name(P), variant=name, source=f"{NAME08}-persistence")
        rows += verdicts.training_misalignment(rb, _stack(lenses, name, "logrank_input", S),
                                               after_layers=after_layers(name, P), loss_before=lb,
                                               loss_after=-_stack(lenses, name, "logprob_next", S)[:, :, -1],
                                               fixed_cut=cell is not None, **who)
        rows += verdicts.training_emergence_shift(nb, _stack(lenses, name, "top1_next", S),
                                                  forced=cell is not None and cell[0] == 0.0,
                                                  fixed_cut=cell is not None, **who)
    return rows


def persistence_panel(lenses: Mapping[tuple[str, int], Any], P):
    """The input token's log10 rank (left) and the next token's top-1 rate (right) per residual state,
    mean over seeds, for the baseline and each variant with a state between its edit and the output."""
    S = seeds(P)
    names = ["baseline"] + [n for n in _edited(lenses, P) if after_layers(n, P)]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    numbers: dict[str, Any] = {}
    for i, name in enumerate(names):
        numbers[name] = {}
        for ax, key in zip(axes, ("logrank_input", "top1_next")):
            per = _stack(lenses, name, key, S).mean(1)  # [S, L+1]
            x = np.arange(per.shape[1])
            color = "k" if name == "baseline" else VARIANT_COLORS[(i - 1) % len(VARIANT_COLORS)]
            ax.plot(x, per.mean(0), color=color, ls="-" if name == "baseline" else "--", marker="o", ms=3,
                    label=name)
            ax.fill_between(x, per.min(0), per.max(0), color=color, alpha=0.12, lw=0)
            numbers[name][key] = per.tolist()
    for ax, title in zip(axes, ("input token: log10 rank under the lens (lower: less decodable)",
                                "next token: top-1 rate under the lens")):
        ax.set_xlabel(r"residual state $h_l$")
        ax.set_xticks(range(int(P.train_layers) + 1))
        ax.set_title(title, fontsize=10)
    axes[0].set_ylabel("log10 rank (0 = top)")
    axes[0].invert_yaxis()  # rank 1 on top, as in notebooks 01 and 03
    axes[1].set_ylabel("top-1 rate")
    axes[1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.suptitle(f"{model_name(P)}: the input token after the edit (mean over seeds; band: min-max over seeds)")
    fig.tight_layout()
    return fig, numbers


def baseline_switch(runs: Mapping[tuple[str, int], Path], P):
    """The deep-switch measure of the grid's baselines (the profile's recipe), seeds as the unit
    (``scale.switch_across_seeds`` on the logit lens of each baseline seed, the windows notebook 08 reads;
    cached): the scale every C2-C4 training verdict of the grid speaks for."""
    from ..analysis import scale

    lenses = lens_runs(runs, P, names=["baseline"], verbose=False)
    unigrams = arm_unigrams(lenses, runs, P, names=["baseline"])
    S = seeds(P)
    stack = [np.stack([as_numpy(lenses[("baseline", s)].per_seq[k]) for s in S]) for k in ("top1_input", "top1_next")]
    stack += [np.stack([as_numpy(unigrams[("baseline", s)][k]) for s in S]) for k in ("top1_input", "top1_next")]
    return scale.switch_across_seeds(*stack, model=f"{model_name(P)}, {P.train_embedding} embedding ({len(S)} seeds)",
                                     variant=scale.DECODER, seeds=S, n_boot=int(P.train_boot), seed=int(P.seed),
                                     source=f"{NAME08}-regimes")[-1]


def mde_table(rows: Sequence) -> pd.DataFrame:
    """The power of every verdict row tested across seeds (``details`` with ``sd`` and ``mde``): the seeds,
    the seed-to-seed sd of the paired difference, the minimum detectable effect (two-sided 5%, power 0.8)
    beside the rule's margin, and the seeds a paired test would need to detect the paper's one published
    effect, WikiText perplexity 28.46 -> 28.62 = ln(28.62/28.46) nats (``claims.seeds_needed``)."""
    from ..claims import PAPER_EFFECT, seeds_needed

    out = []
    for r in rows:
        sd, mde = r.details.get("sd"), r.details.get("mde")
        if sd is None or mde is None or r.details.get("unit") != "seed":
            continue
        out.append({"claim": r.claim_id, "model": r.model, "variant": r.variant, "seeds": r.n, "sd": sd, "MDE": mde,
                    "margin": r.details.get("margin"),
                    f"seeds for {PAPER_EFFECT:.4f} nats": seeds_needed(sd) if sd > 0 else np.nan})
    return pd.DataFrame(out).set_index(["claim", "model", "variant"]) if out else pd.DataFrame()


def switch_table(rows: Sequence) -> pd.DataFrame:
    """Deep-switch measures (``scale.SwitchRow`` s, e.g. :func:`baseline_switch`) with their numbers in
    columns: S1 and its interval, C1.middle, the rule's outcome and the departure depth."""
    return pd.DataFrame([{"model": r.model, "unit": r.unit, "n": r.n, "blocks": r.n_layers, "S1": r.early_share,
                          "S1 lo": r.early_share_ci[0], "S1 hi": r.early_share_ci[1], "C1.middle": r.middle,
                          "outcome": r.outcome, "departure depth": r.departure_depth} for r in rows]).set_index("model")


def _first_reason(why: str) -> str:
    """The first clause of a verdict's reason: the text before its first top-level ';', without the
    parenthesised or bracketed numbers (those are the table's columns)."""
    out, depth = [], 0
    for ch in why or "":
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth = max(0, depth - 1)
        elif depth == 0:
            if ch == ";":
                break
            out.append(ch)
    return " ".join("".join(out).split())


def verdict_frame(rows: Sequence) -> pd.DataFrame:
    """Verdict rows, short: per (claim, model, variant) the verdict, its first reason, the estimate and its
    interval, the units, the MDE in their own columns, and the rule's marks (post hoc, not evidence; the
    column is left out where no row has one, the model or the variant where every row has the same); the
    rules themselves are in docs/claims.md and ``residshift.analysis.verdicts``."""
    from .tables import marks

    out = [{"claim": r.claim_id, "model": r.model, "variant": r.variant or "–", "verdict": r.verdict,
            "reason": _first_reason(str(r.details.get("why") or "")), "estimate": r.estimate, "lo": r.ci[0],
            "hi": r.ci[1], "n": r.n, "MDE": r.details.get("mde"), "marks": marks(r).strip()} for r in rows]
    frame = pd.DataFrame(out)
    if frame.empty:
        return frame
    if (frame["marks"] == "").all():
        frame = frame.drop(columns="marks")
    key = ["claim"] + [k for k in ("model", "variant") if frame[k].nunique() > 1]
    return frame.drop(columns=[k for k in ("model", "variant") if k not in key]).set_index(key)
