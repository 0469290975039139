"""What one benchmark item costs per configuration, and how much of it is the traced call.

Notebook 05 scores the same items once unmodified and once per gate fit; issue 22 asks whether
batching the configurations into one traced call, or scoring several from one forward, could make
that an order of magnitude cheaper. Both only remove work that is not the model's own forward:
the gates edit every block, so no configuration shares a block's computation with another. This
script measures that share on 05's tasks and items, in one invocation, each path timed in rotated
rounds on the same items (no results cache):

- ``bare``: the module's own forward (what the unmodified configuration runs);
- ``traced``: the same forward inside an nnsight trace that edits nothing (the cost of tracing);
- ``gates``: inside a trace with token gates on every block (what a gate configuration runs).

The ratios ``traced / bare`` and ``gates / bare`` bound what batching configurations can save: at
most the part above 1. The CPU, its bf16 flags and the load average are recorded beside the times.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_item_scoring.py --json benchmarks/bench-item-scoring.json
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from residshift.attenuate import gates as G  # noqa: E402
from residshift.core import profiles  # noqa: E402
from residshift.core.machine import cpu_facts  # noqa: E402
from residshift.core.models import load_model  # noqa: E402
from residshift.measure import evaluate as ev  # noqa: E402
from residshift.study.attenuation import BENCH_TASKS  # noqa: E402


def nothing(model, info):
    """An edit that edits nothing: the trace alone."""


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="*", default=["smollm2-135m", "gemma3-270m"])
    ap.add_argument("--items", type=int, default=None, help="items per task (default: the default profile's eval_items)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    P = profiles.resolve("default")
    items = a.items or P.eval_items
    cfg = profiles.stage(ev.EvalConfig, P)
    out = {"cpu": cpu_facts(), "items_per_task": items, "tasks": list(BENCH_TASKS), "rounds": a.rounds,
           "batch_size": cfg.batch_size, "models": {}}
    for name in a.models:
        lm, tok, info = load_model(name)
        token_gates = G.TokenGates(range(info.n_layers), info.d_model)
        paths = {"bare": None, "traced": nothing, "gates": G.gate_intervention(token_gates)}
        def score(intervene):
            for task in BENCH_TASKS:
                kw = dict(limit=items, config=cfg, intervene=intervene, cache=False)
                if task == "lambada":
                    ev.lambada_score(lm, info, tok, data[task], **kw)
                else:
                    ev.multiple_choice_score(lm, info, tok, data[task], task=task, **kw)

        data = {t: ev.task_items(t) for t in BENCH_TASKS}  # read once: the timed part is the scoring
        for p in paths.values():  # warm-up, not timed (first traces, allocator)
            score(p)
        times = {p: [] for p in paths}
        loads = []
        for r in range(a.rounds):
            order = list(paths)[r % 3:] + list(paths)[:r % 3]
            for p in order:
                loads.append(os.getloadavg()[0])
                t0 = time.perf_counter()
                score(paths[p])
                times[p].append(time.perf_counter() - t0)
                print(f"[bench_item_scoring] {name} {p} round {r}: {times[p][-1]:.1f} s", flush=True)
        n = items * len(BENCH_TASKS)
        out["models"][name] = {
            "layers": info.n_layers,
            "seconds": {p: [round(t, 2) for t in ts] for p, ts in times.items()},
            "s_per_item": {p: round(statistics.median(ts) / n, 3) for p, ts in times.items()},
            "traced_over_bare": round(statistics.median(t / b for t, b in zip(times["traced"], times["bare"])), 3),
            "gates_over_bare": round(statistics.median(g / b for g, b in zip(times["gates"], times["bare"])), 3),
            "load": [round(min(loads), 2), round(max(loads), 2)]}
        m = out["models"][name]
        print(f"{name}: {m['s_per_item']['bare']} s per item bare; traced {m['traced_over_bare']}x, "
              f"gates {m['gates_over_bare']}x the bare time (load {m['load'][0]}-{m['load'][1]})", flush=True)
    print(json.dumps(out, indent=2))
    if a.json:
        from residshift.core.cache import atomic_write_text

        atomic_write_text(a.json, json.dumps(out, indent=2) + "\n")
    return out


if __name__ == "__main__":
    main()
