"""Run the evaluation harness on the real models, time it, and compare with published numbers.

    flock /tmp/residshift-heavy.lock env HF_HUB_OFFLINE=1 \\
        .venv/bin/python benchmarks/bench_evaluate.py --profile default [--models smollm2-135m]
        [--limit piqa=1838] [--json build/harness-default.json]

Sizes come from the ``harness`` section of the profiles (``--limit task=n`` overrides, ``all``
for the full set). Results are cached by configuration (``results/eval-*``), so a rerun only
computes what is missing; the timing column then says "cached".

The published numbers below are REFERENCES, typed from the pages cited next to them; they were
obtained with other software, prompts and weights (bf16 hub weights, not the Q4 GGUF we
dequantize), so agreement within a few points is what to expect, not equality.
"""
from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import torch

from residshift.measure import evaluate as ev
from residshift.core import profiles
from residshift.core.models import load_model

# (model, task, metric) -> (value, what it is, source URL)
REFERENCES = {
    ("smollm2-135m", "piqa", "acc_norm"): (
        0.6692, "SmolLM2-135M-Instruct, lm-eval 0-shot (third-party baseline row)",
        "https://hface.pages.dev/lldois/SmolLM2-135M-Reasoning-SLERP-Champion"),
    ("smollm2-135m", "arc-easy", "acc"): (
        0.5412, "SmolLM2-135M-Instruct, lm-eval 0-shot (third-party baseline row)",
        "https://hface.pages.dev/lldois/SmolLM2-135M-Reasoning-SLERP-Champion"),
    ("smollm2-135m", "arc-challenge", "acc_norm"): (
        0.2773, "SmolLM2-135M-Instruct, lm-eval 0-shot (third-party baseline row)",
        "https://hface.pages.dev/lldois/SmolLM2-135M-Reasoning-SLERP-Champion"),
    ("gemma3-270m", "piqa", "acc_norm"): (
        0.677, "Gemma-3-270M PT model card, PIQA 0-shot (metric variant not stated)",
        "https://gr.tbb.rip/models/google/gemma-3-270m (quoting the google/gemma-3-270m card)"),
    ("gemma3-270m", "arc-easy", "acc_norm"): (
        0.577, "Gemma-3-270M PT model card, ARC-e 0-shot (metric variant not stated)",
        "https://gr.tbb.rip/models/google/gemma-3-270m (quoting the google/gemma-3-270m card)"),
}


def parse_limits(items: list[str], base: dict) -> dict:
    limits = dict(base)
    for item in items:
        task, _, n = item.partition("=")
        if task not in ev.TASKS:
            raise SystemExit(f"--limit {item}: unknown task {task!r}; known: {', '.join(ev.TASKS)}")
        limits[task] = None if n == "all" else int(n)
    return limits


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="default")
    ap.add_argument("--models", nargs="*")
    ap.add_argument("--tasks", nargs="*")
    ap.add_argument("--limit", action="append", default=[], help="task=n or task=all")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--bf16", action="store_true", help="bfloat16 autocast (cached separately)")
    ap.add_argument("--no-cache", action="store_true", help="recompute (honest timings)")
    ap.add_argument("--json", type=Path, help="write the rows (with timings) here")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    P = profiles.resolve(args.profile)
    models = args.models or P.models
    tasks = args.tasks or P.harness_tasks
    limits = parse_limits(args.limit, P.harness_limits)
    cfg = ev.EvalConfig(context=P.harness_context, stride=P.harness_stride,
                        batch_size=P.harness_batch, seed=P.seed, bf16=args.bf16)
    rows = []
    for name in models:
        t0 = time.perf_counter()
        lm, tok, info = load_model(name)
        print(f"\n## {name}  (loaded in {time.perf_counter() - t0:.1f} s; context {cfg.context}, "
              f"stride {cfg.stride}, BOS {info.prepend_bos})", flush=True)
        for task in tasks:
            t0 = time.perf_counter()
            r = ev.run_task(lm, info, task, tokenizer=tok, limit=limits.get(task), config=cfg,
                            cache=not args.no_cache, progress=False)
            secs = time.perf_counter() - t0
            for metric, (value, se) in r.metrics.items():
                ref = REFERENCES.get((name, task, metric))
                row = {"model": name, "task": task, "metric": metric, "value": value, "se": se,
                       "n": r.n, "seconds": round(secs, 1), "bf16": args.bf16}
                if ref:
                    row.update(reference=ref[0], reference_what=ref[1], reference_url=ref[2],
                               diff=value - ref[0], diff_in_se=(value - ref[0]) / se if se > 0 else math.nan)
                rows.append(row)
                extra = (f"   ref {ref[0]:.3f} ({ref[1]}); diff {value - ref[0]:+.3f} = "
                         f"{(value - ref[0]) / se:+.1f} SE" if ref else "")
                print(f"{task:<24} {metric:<14} {value:9.4f} ± {se:.4f}  n={r.n:<5} {secs:7.1f} s{extra}",
                      flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rows, indent=2, default=float))
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
