"""Is a grid variant itself slower to train, or was it the load while it ran? One invocation.

    nice .venv/bin/python benchmarks/bench_grid_variants.py --json benchmarks/bench-grid-variants.json

Notebook 06's grid trains its runs variant after variant (baseline's seeds, then each cut's, ...), so
in ``figures/06-training-with-attenuation-grid.json`` a variant's tokens/s and the machine's load
while it ran are confounded: the runs that came later shared the CPU with more work. Here the same
runs (the ``default`` profile's training config, the grid's own ``training.config``) are trained
whole, for real, on the real corpus, into a temporary folder (the results cache is not touched),
in INTERLEAVED order: every chosen variant once per round, one seed per round, the variant order
rotated each round. The load then falls on every variant alike, and each variant's tokens/s is
compared with the baseline's of the same rounds (the median over rounds of the per-round ratio).
Each run's own tokens/s counts optimiser steps only, as the grid's does (``train_seconds``).

Written: per run (variant, seed, round, tokens/s, 1-min load at its start and end) and per
variant (median tokens/s, median ratio to the baseline's, the range of the ratios), with the CPU
and torch version. ``--variants`` picks grid variants by name (default: the baseline, the fastest
and the slowest cut variants of the committed grid and both gate variants).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as `python -m residshift train` sets it
from residshift.core.machine import cpu_facts, use_reproducible_kernels  # noqa: E402

use_reproducible_kernels()  # as the study trains (`python -m residshift`): before any matrix product

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_VARIANTS = ("baseline", "alpha=0 @ block 0", "alpha=0 @ block 4", "alpha=0 @ block 5", "learned",
                    "learned-token")


def ratios(runs: list[dict], reference: str = "baseline") -> dict[str, dict]:
    """Per variant: median tokens/s and the median over rounds of its tokens/s / the reference's in
    the same round (pure: the runs' records)."""
    by_round: dict[int, dict[str, float]] = {}
    for r in runs:
        by_round.setdefault(r["round"], {})[r["variant"]] = r["tokens_per_s"]
    out = {}
    for v in dict.fromkeys(r["variant"] for r in runs):
        rates = [r["tokens_per_s"] for r in runs if r["variant"] == v]
        rel = [rs[v] / rs[reference] for rs in by_round.values() if v in rs and reference in rs]
        out[v] = {"tokens_per_s": statistics.median(rates), "runs": len(rates),
                  "ratio_to_baseline": statistics.median(rel) if rel else None,
                  "ratio_min": min(rel) if rel else None, "ratio_max": max(rel) if rel else None}
    return out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variants", nargs="+", default=list(DEFAULT_VARIANTS))
    ap.add_argument("--rounds", type=int, default=2, help="rounds (one seed each: seeds 0..rounds-1)")
    ap.add_argument("--profile", default="default")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)

    import torch

    from residshift.core import profiles
    from residshift.study import training as study
    from residshift.train import trainer

    P = profiles.resolve(args.profile)
    known = {v.name: v for v in study.grid(P)}
    missing = [v for v in args.variants if v not in known]
    if missing:
        raise SystemExit(f"--variants {missing} are not in the {args.profile} grid; known: {sorted(known)}")
    if "baseline" not in args.variants:
        raise SystemExit("--variants must include baseline (the reference of every ratio)")

    runs = []
    with tempfile.TemporaryDirectory(prefix="bench-grid-") as tmp:
        for k in range(args.rounds):
            order = args.variants[k % len(args.variants):] + args.variants[:k % len(args.variants)]
            for name in order:
                cfg = study.config(P, known[name], seed=k)
                load0 = os.getloadavg()[0]
                t0 = time.perf_counter()
                run = trainer.train(cfg, Path(tmp) / f"{k}-{len(runs)}", progress=False)
                wall = time.perf_counter() - t0
                sm = trainer.read_summary(run)
                runs.append({"variant": name, "seed": k, "round": k, "tokens_per_s": float(sm["tokens_per_s"]),
                             "train_seconds": float(sm["train_seconds"]), "wall_seconds": wall,
                             "val_loss": float(sm["val_loss"]), "load_1min_start": load0,
                             "load_1min_end": os.getloadavg()[0]})
                print(f"round {k} {name:24s} {sm['tokens_per_s']:8.0f} tokens/s  (load {load0:.2f})", flush=True)
    out = {"machine": {**cpu_facts(), "threads": torch.get_num_threads(), "torch": torch.__version__,
                       "MKL_CBWR": os.environ.get("MKL_CBWR")},
           "profile": args.profile, "rounds": args.rounds, "runs": runs, "variants": ratios(runs)}
    for v, r in out["variants"].items():
        print(f"{v:24s} {r['tokens_per_s']:8.0f} tokens/s  x{r['ratio_to_baseline']:.3f} of the baseline "
              f"(rounds {r['ratio_min']:.3f}..{r['ratio_max']:.3f})")
    if args.json:
        from residshift.core.cache import atomic_write_text

        atomic_write_text(Path(args.json), json.dumps(out, indent=2) + "\n")
    return out


if __name__ == "__main__":
    main()
