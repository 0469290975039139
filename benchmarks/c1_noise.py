"""Measure the per-window noise of C1's statistic on the real models, so the default profile's lens
sizes can be chosen with ``residshift.analysis.verdicts.c1_reach`` (not guessed).

C1 reads, per window, d(l) = the lens's top-1 rate of the input / next token at h_l minus the unigram
decoder's on the same analysed positions. Its intervals are over windows, so what sets their width is
the SD of the window means, which depends on how many positions a window analyses. This script runs
the logit lens (top-1 only) over ``--windows`` windows of the default corpus draw (wikitext-103
validation, 128 tokens, seed 0, BOS as trained, detokenized: notebook 03's draw) at EVERY position
1..126, keeps each position's 0/1 hits per layer, and from them, per model, layer and token (input /
next):

- ``sd_by_positions[P]``: the SD over windows of d's window mean over the seeded subset of P positions
  the lens would analyse at ``positions=P`` (``LensOptions(positions=P, seed=0)``; all 126 at 126),
  measured directly on the same windows;
- ``sd_between`` / ``sd_within``: the one-way ANOVA split of that variance into the SD of the windows'
  true means and the SD of a single position within a window (so that sd(P)^2 ~ sd_between^2 +
  sd_within^2 / P), which ``c1_reach`` extrapolates with;
- the mean excess per layer (to see which layers sit at the unigram level).

It also times the full notebook-03 metric set (every metric, float32) on ``--time-windows`` windows at
16 and 64 positions, so the cost of a larger default can be stated: seconds per window = forward + a
per-position term.

    flock /tmp/residshift-heavy.lock env HF_HUB_OFFLINE=1 RESIDSHIFT_DATA=... \\
        .venv/bin/python benchmarks/c1_noise.py --models smollm2-135m --windows 64 --json benchmarks/c1-noise.json

Runs add to the file (one model per run keeps each under ~7 minutes on 2 cores: SmolLM2 64 windows
~2 min, Gemma-3 48 windows ~6 min at every position; ``--windows 0`` times only).
"""
from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
import torch

from residshift.analysis import verdicts
from residshift.core import profiles
from residshift.core.data import token_windows
from residshift.core.models import load_model
from residshift.core.cache import atomic_write_text
from residshift.measure import lens

POSITION_GRID = (8, 16, 32, 48, 64, 96, 126)


def position_subsets(window: int, seed: int) -> dict[int, np.ndarray]:
    """Indices (into the 126 analysed positions 1..T-2) of the subset each ``positions=P`` analyses."""
    every = lens.LensOptions(positions=None).position_index(window).numpy()
    out = {}
    for p in POSITION_GRID:
        idx = lens.LensOptions(positions=p, seed=seed).position_index(window).numpy()
        out[p] = np.searchsorted(every, idx)
    return out


def noise(d: np.ndarray, subsets: dict[int, np.ndarray]) -> dict[str, list]:
    """``d [n_windows, n_pos, L+1]`` per-position excess (hit minus unigram hit) -> per-layer noise."""
    n, p_all, _ = d.shape
    means = d.mean(axis=1)  # [n, L+1]
    within = d.var(axis=1, ddof=1).mean(axis=0)  # pooled per-position variance within a window
    between = np.maximum(means.var(axis=0, ddof=1) - within / p_all, 0.0)
    return {"mean_excess": means.mean(0).tolist(),
            "sd_within": np.sqrt(within).tolist(), "sd_between": np.sqrt(between).tolist(),
            "sd_by_positions": {str(p): d[:, idx].mean(axis=1).std(axis=0, ddof=1).tolist()
                                for p, idx in subsets.items()}}


def timed_pass(lm, info, windows, positions: int) -> float:
    """Seconds of notebook 03's main lens pass (every metric, float32) over ``windows``, warm: the
    same pass runs once untimed first, so compiling for these shapes is not counted."""
    opt = lens.LensOptions(matmul_dtype="float32", positions=positions, seed=0)
    lens.corpus_metrics(lm, info, windows, batch=8, options=opt)
    t0 = time.perf_counter()
    lens.corpus_metrics(lm, info, windows, batch=8, options=opt)
    return time.perf_counter() - t0


def noise_of(lm, tok, info, windows, P) -> dict:
    """The top-1 lens at every position of ``windows``, and :func:`noise` of its excess per token."""
    opt = lens.LensOptions(metrics=("top1",), matmul_dtype="float32", positions=None,
                           token_table=("top1_input", "top1_next"))
    t0 = time.perf_counter()
    res = lens.corpus_metrics(lm, info, windows, batch=8, options=opt)
    seconds = time.perf_counter() - t0
    counts = lens.corpus_token_counts(tok, info, P.lens_corpus, P.lens_split, detokenize=True)
    top = int(np.argmax(counts))
    n_windows, p_all, L = windows.shape[0], windows.shape[1] - 2, info.n_layers
    out = {"windows": n_windows, "positions_per_window": p_all,
           "unigram_top_token": tok.convert_ids_to_tokens([top])[0], "top1_only_seconds": round(seconds, 1)}
    subsets = position_subsets(P.lens_window, P.seed)
    for which, ids in (("input", res.tokens["cur"]), ("next", res.tokens["next"])):
        hits = res.tokens["layers"][f"top1_{which}"].numpy()  # [L+1, n_tok]
        uni = (ids.long().numpy() == top).astype(np.float64)
        d = (hits - uni[None, :]).T.reshape(n_windows, p_all, L + 1)
        out[which] = noise(d, subsets)
    return out


def measure(name: str, P, n_windows: int, time_windows: int) -> dict:
    lm, tok, info = load_model(name, device="cpu")
    windows = token_windows(P.lens_corpus, P.lens_split, tok, length=P.lens_window, n=n_windows, seed=P.seed,
                            prepend_bos=info.prepend_bos, detokenize=True) if n_windows else None
    L = info.n_layers
    out = {"model": name, "n_layers": L}
    if n_windows:
        out.update(noise_of(lm, tok, info, windows, P))
    if time_windows:
        few = token_windows(P.lens_corpus, P.lens_split, tok, length=P.lens_window, n=time_windows, seed=P.seed,
                            prepend_bos=info.prepend_bos, detokenize=True)
        t16, t64 = timed_pass(lm, info, few, 16), timed_pass(lm, info, few, 64)
        per_pos = (t64 - t16) / (48 * time_windows)
        out["timing"] = {"windows": time_windows, "seconds_16": round(t16, 2), "seconds_64": round(t64, 2),
                         "seconds_per_position": per_pos,
                         "seconds_per_window_fixed": max(t16 / time_windows - 16 * per_pos, 0.0),
                         "load_1min": round(os.getloadavg()[0], 2)}
    del lm
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--windows", type=int, default=48)
    ap.add_argument("--time-windows", type=int, default=8)
    ap.add_argument("--models", nargs="*", default=None)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    P = profiles.resolve("default")
    torch.set_num_threads(os.cpu_count() or 1)
    data = {"what": "per-window noise of C1's excess top-1 rate (benchmarks/c1_noise.py)",
            "corpus": P.lens_corpus, "split": P.lens_split, "window": P.lens_window, "seed": P.seed,
            "margin": verdicts.C1_MARGIN, "threads": torch.get_num_threads(),
            "load_1min_at_start": round(os.getloadavg()[0], 2), "models": {}}
    if args.json and os.path.exists(args.json):  # runs per model (or timing only) add to one file
        with open(args.json) as f:
            data["models"] = json.load(f).get("models", {})
    for name in args.models or P.models:
        m = measure(name, P, args.windows, args.time_windows)
        data["models"][name] = {**data["models"].get(name, {}), **m}
        L = m["n_layers"]
        cand = verdicts.c1_middle_candidates(L)
        for p in ("16", "126") if "input" in m else ():
            worst = max(max(m["input"]["sd_by_positions"][p][l], m["next"]["sd_by_positions"][p][l]) for l in cand)
            print(f"{name}: sd over windows at {p} positions: middle worst {worst:.4f}, "
                  f"h_1 input {m['input']['sd_by_positions'][p][1]:.4f}, "
                  f"h_(L-1) next {m['next']['sd_by_positions'][p][L - 1]:.4f}", flush=True)
        if "timing" in m:
            print(f"{name}: {m['timing']}", flush=True)
        if args.json:
            atomic_write_text(args.json, json.dumps(data, indent=1) + "\n")  # after each model

if __name__ == "__main__":
    main()
