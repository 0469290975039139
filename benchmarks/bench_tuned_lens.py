"""Time a tuned-lens fit on residuals collected once against the fit that runs the model every step.

At a profile's ``tuned_*`` sizes (``profiles.py``, "causal" section; default profile by default),
on the same windows, in one invocation:

- per_step : ``tuned_lens.fit(..., collect="per_step")``: every step runs the frozen model (an
             nnsight trace, head included) on its batch, and every early-stopping evaluation runs
             it on the early-stopping windows;
- once     : ``tuned_lens.fit(...)`` (the default): the distinct windows of a block of steps run
             once, without the head, within ``RESIDUAL_CACHE_BYTES``; the early-stopping windows
             once.

Both fits then report the held-out KL on the validation windows (``evaluate_kl``), and the script
prints the speed-up, the largest |difference| between the two lenses' translator weights, between
their per-step training KL and early-stopping KL, and between their held-out KL. The CPU is shared:
``--rounds 2`` runs per_step, once, once, per_step and takes the median of the per-round ratios;
the 1-minute load average is recorded around every fit.

    flock /tmp/residshift-heavy.lock env HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_tuned_lens.py \\
        --json benchmarks/bench-tuned-lens.json
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch

from residshift.core import profiles
from residshift.core.models import load_model
from residshift.measure import tuned_lens as T


def load1() -> float:
    return round(os.getloadavg()[0], 2)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--profile", default="default")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--json", default=None, help="also write the numbers to this file")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    P = profiles.resolve(args.profile)
    cfg = T.TunedLensConfig.from_profile(P)
    lm, tok, info = load_model(args.model)
    wins = T.windows_for(tok, info, cfg)
    out: dict = {"model": args.model, "profile": args.profile, "config": {
        k: getattr(cfg, k) for k in ("window", "train_windows", "es_windows", "val_windows", "batch",
                                     "steps", "eval_every", "train_vocab")},
        "threads": torch.get_num_threads(), "cpu_count": os.cpu_count(),
        "residual_cache_bytes": T.RESIDUAL_CACHE_BYTES, "load_at_start": load1()}
    store = T.ResidualStore(lm, info, wins["train"], cfg)
    draws = {i for s in range(cfg.steps) for i in T.random_batch(len(wins["train"]), cfg.batch, s, cfg.seed).tolist()}
    out["windows_drawn"] = cfg.steps * cfg.batch
    out["distinct_windows"] = len(draws)
    out["mib_per_window"] = round(store.per_window / 2**20, 2)
    out["blocks"] = -(-len(draws) // store.max_windows)  # at least; repeats across blocks add

    times = {"per_step": [], "once": []}
    loads = {"per_step": [], "once": []}
    lenses, reports = {}, {}
    for r in range(args.rounds):
        for mode in (("per_step", "once") if r % 2 == 0 else ("once", "per_step")):
            before = load1()
            t0 = time.perf_counter()
            lens, rep = T.fit(lm, info, cfg, train=wins["train"], es=wins["es"], collect=mode)
            times[mode].append(round(time.perf_counter() - t0, 2))
            loads[mode].append([before, load1()])
            lenses[mode], reports[mode] = lens, rep
            print(f"[bench_tuned_lens] round {r} {mode}: {times[mode][-1]} s, load {loads[mode][-1]}", flush=True)
    ev = {m: T.evaluate_kl(lm, info, lenses[m], wins["val"], batch=cfg.batch, skip_first=cfg.skip_first)
          for m in lenses}
    a, b = lenses["per_step"].state_dict(), lenses["once"].state_dict()
    parts = [torch.tensor([h["parts"] for h in reports[m]["history"] if "parts" in h]) for m in ("per_step", "once")]
    evals = [torch.tensor([h["eval"] for h in reports[m]["history"] if "eval" in h]) for m in ("per_step", "once")]
    out.update({
        "per_step_s": times["per_step"], "once_s": times["once"],
        "speedup": round(statistics.median(x / y for x, y in zip(times["per_step"], times["once"])), 2),
        "load": loads,
        "steps": reports["once"]["steps"],
        "max_abs_diff_weights": max(float((a[k] - b[k]).abs().max()) for k in a),
        "weights_identical": all(torch.equal(a[k], b[k]) for k in a),
        "max_abs_diff_train_kl": float((parts[0] - parts[1]).abs().max()),
        "max_abs_diff_es_kl": float((evals[0] - evals[1]).abs().max()),
        "max_abs_diff_val_kl": float((ev["per_step"]["tuned"] - ev["once"]["tuned"]).abs().max()),
        "val_kl_tuned_mean": float(ev["once"]["tuned"][:, :-1].mean()),
        "val_kl_logit_mean": float(ev["once"]["logit"][:, :-1].mean()),
        "load_at_end": load1(),
    })
    print(json.dumps(out, indent=2))
    if args.json:
        from residshift.core.cache import atomic_write_text

        atomic_write_text(args.json, json.dumps(out, indent=2) + "\n")
    if out["max_abs_diff_weights"] > 1e-5 or out["max_abs_diff_val_kl"] > 1e-4:
        raise SystemExit("the two fits disagree beyond float rounding")
    return out


if __name__ == "__main__":
    main()
