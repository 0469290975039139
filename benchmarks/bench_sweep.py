"""Time the cheap attenuation sweep against the naive one, and check they agree.

Cheap (residshift.attenuate.sweep.sweep_windows): one unmodified forward captures every block's input, then
only blocks l..L-1 + head are replayed per (layer, alpha); alpha = 1 is not replayed.
Naive (residshift.attenuate.sweep.naive_sweep): one full nnsight forward with `attenuate` per (layer, alpha).

    flock /tmp/residshift-heavy.lock env HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_sweep.py \
        --model smollm2-135m --windows 8 --window 128

Prints both wall times, their ratio and the largest |difference| of the per-window dloss.
"""
from __future__ import annotations

import argparse
import json
import time

import torch

from residshift.core.data import token_windows
from residshift.core.models import load_model
from residshift.attenuate.sweep import SweepConfig, naive_sweep, sweep_windows


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--windows", type=int, default=8)
    ap.add_argument("--window", type=int, default=128)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--alphas", default="0,0.25,0.5,0.75,0.9,1")
    ap.add_argument("--layers", default=None, help="comma-separated layers (default: all)")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--json", default=None, help="also write the numbers to this file")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    lm, tok, info = load_model(args.model)
    windows = token_windows("wikitext-103", "validation", tok, length=args.window, n=args.windows,
                            seed=0, prepend_bos=info.prepend_bos)
    alphas = tuple(float(a) for a in args.alphas.split(","))
    layers = list(range(info.n_layers)) if args.layers is None else [int(x) for x in args.layers.split(",")]
    cfg = SweepConfig(model=args.model, window=args.window, n_windows=args.windows,
                      batch_size=args.batch, alphas=alphas, layers=layers)
    t0 = time.perf_counter()
    cheap = sweep_windows(lm, info, windows, cfg)
    t_cheap = time.perf_counter() - t0
    t0 = time.perf_counter()
    naive = naive_sweep(lm, info, windows, layers, alphas, batch_size=args.batch)
    t_naive = time.perf_counter() - t0
    diff = float((cheap["dloss"] - naive["dloss"]).abs().max())
    out = {"model": args.model, "windows": args.windows, "window": args.window, "layers": len(layers),
           "alphas": len(alphas), "cheap_s": round(t_cheap, 2), "naive_s": round(t_naive, 2),
           "speedup": round(t_naive / t_cheap, 2), "max_abs_diff_dloss": diff}
    print(" ".join(f"{k}={v}" for k, v in out.items()))
    if args.json:
        from pathlib import Path

        from residshift.core.cache import atomic_write_text

        atomic_write_text(Path(args.json), json.dumps(out, indent=2) + "\n")
    if diff > 1e-4:
        raise SystemExit(f"cheap and naive sweeps disagree by {diff:.3g} nats (> 1e-4)")
    return out


if __name__ == "__main__":
    main()
