"""Time multiple-choice scoring with and without prefix reuse, and check they agree.

On the same items of each task, in one invocation:

- plain  : every (context, choice) pair as one right-padded sequence (``score_requests(...,
           prefix_reuse=False)``): a question's context runs once per choice;
- prefix : ``prefix_reuse=True``: each question's context runs once with a KV cache, the cache
           is expanded across its choices and only the continuations run;
- auto   : the harness's default (``prefix_reuse="auto"``): prefix reuse for the questions where it
           saves tokens (``evaluate.reuse_saves``), whole sequences for the rest.

Items are the harness's own subsample (``evaluate.select_items``: the first ``--items`` of the
seeded shuffle), requests are built exactly as ``multiple_choice_score`` builds them, and the
batching is the default ``EvalConfig``'s. The CPU is shared, so the two run in ``--rounds``
rounds, rotating which goes first; a speed-up is the median over rounds of plain / that path
within a round, and the 1-minute load average is recorded around every run. Prints, per task, the
speed-up, the tokens each path runs through the model, the largest |log-likelihood difference|
between the two and how many chosen answers (acc and acc_norm) differ; ``--intervene`` also
scores with ``attenuate(layer 20, alpha 0.5)`` inside each trace.

    flock /tmp/residshift-heavy.lock env HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_harness.py \\
        --json benchmarks/bench-harness.json
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import numpy as np
import torch

from residshift.core.interventions import attenuate
from residshift.core.models import load_model
from residshift.measure import evaluate as ev

QUESTIONS = {"piqa": ev.piqa_questions, "arc-easy": lambda: ev.arc_questions("arc-easy"),
             "arc-challenge": lambda: ev.arc_questions("arc-challenge")}


PATHS = {"plain": False, "prefix": True, "auto": "auto"}  # path -> score_requests(prefix_reuse=...)


def tokens_run(reqs, groups, rest) -> int:
    """Tokens a path runs through the model: each shared context once, then its continuations; the
    rest whole."""
    return (sum(reqs[g[0]].n_ctx for g in groups)
            + sum(len(reqs[i].tokens) - reqs[i].n_ctx - 1 for g in groups for i in g)
            + sum(len(reqs[i].tokens) - 1 for i in rest))


def load1() -> float:
    return round(os.getloadavg()[0], 2)


def requests_for(tok, info, questions, items):
    bos_id = info.bos_token_id if info.prepend_bos else None
    reqs, spans = [], []
    for i in items:
        q = questions[i]
        start = len(reqs)
        for choice in q.choices:
            ctx, cont = ev.encode_pair(tok, q.context, " " + choice, bos_id=bos_id)
            reqs.append(ev.Request(tuple(ctx + cont), len(ctx)))
        spans.append((start, len(reqs)))
    return reqs, spans


def choices(scores, questions, items, spans):
    out = []
    for i, (a, b) in zip(items, spans):
        q = questions[i]
        m = ev.multiple_choice_metrics(scores["logprob"][a:b], q.choices, q.gold)
        out.append((m["pred"], m["pred_norm"]))
    return np.asarray(out)


def run(lm, info, tok, reqs, prefix, intervene, config):
    t0 = time.perf_counter()
    load = load1()
    s = ev.score_requests(lm, info, reqs, batch_size=config.batch_size,
                          max_batch_tokens=config.max_batch_tokens, max_logits=config.max_logits,
                          pad_id=ev._pad_id(tok), intervene=intervene, prefix_reuse=PATHS[prefix])
    return s, round(time.perf_counter() - t0, 3), [load, load1()]


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--tasks", nargs="+", default=list(QUESTIONS), choices=list(QUESTIONS))
    ap.add_argument("--items", type=int, default=100, help="questions per task")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--intervene", action="store_true", help="also time with an attenuation in each trace")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--json", default=None, help="also write the numbers to this file")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    lm, tok, info = load_model(args.model)
    config = ev.EvalConfig()
    from residshift.core.machine import cpu_facts

    out: dict = {"model": args.model, "items": args.items, "rounds": args.rounds, "cpu": cpu_facts(),
                 "threads": torch.get_num_threads(), "cpu_count": os.cpu_count(),
                 "batch_size": config.batch_size, "load_at_start": load1(), "tasks": {}}
    modes = [("bare", None)]
    if args.intervene:
        modes.append(("attenuated", lambda m, i: attenuate(m, i, {20: 0.5})))
    for task in args.tasks:
        questions = QUESTIONS[task]()
        items = ev.select_items(len(questions), args.items, config.seed)
        reqs, spans = requests_for(tok, info, questions, items)
        groups, plain_rest = ev._shared_groups(reqs, set())
        auto_groups, auto_rest = ev._shared_groups(reqs, set(), saving_only=True)
        tokens_plain = sum(len(r.tokens) - 1 for r in reqs)
        tokens_prefix = tokens_run(reqs, groups, plain_rest)
        tokens_auto = tokens_run(reqs, auto_groups, auto_rest)
        entry = {"questions": len(items), "requests": len(reqs),
                 "choices_per_question": round(len(reqs) / len(items), 2),
                 "tokens_plain": tokens_plain, "tokens_prefix": tokens_prefix, "tokens_auto": tokens_auto,
                 "token_ratio": round(tokens_plain / tokens_prefix, 2),
                 "questions_shared_by_auto": len(auto_groups)}
        for mode, intervene in modes:
            times = {w: [] for w in PATHS}
            loads = []
            res = {}
            for r in range(args.rounds):
                order = list(PATHS)[r % 3:] + list(PATHS)[:r % 3]
                for which in order:
                    s, sec, load = run(lm, info, tok, reqs, which, intervene, config)
                    times[which].append(sec)
                    loads += load
                    res[which] = s
                    print(f"[bench_harness] {task} {mode} {which} round {r}: {sec} s, load {load}", flush=True)
            diff = np.abs(res["plain"]["logprob"] - res["prefix"]["logprob"])
            picks = [choices(res[w], questions, items, spans) for w in ("plain", "prefix", "auto")]
            entry[mode] = {
                "plain_s": times["plain"], "prefix_s": times["prefix"], "auto_s": times["auto"],
                "speedup": round(statistics.median(a / b for a, b in zip(times["plain"], times["prefix"])), 2),
                "speedup_auto": round(statistics.median(a / b for a, b in zip(times["plain"], times["auto"])), 2),
                "max_abs_diff_ll_auto": float(np.abs(res["plain"]["logprob"] - res["auto"]["logprob"]).max()),
                "max_abs_diff_ll": float(diff.max()),
                "max_rel_diff_ll": float((diff / np.abs(res["plain"]["logprob"]).clip(1)).max()),
                "greedy_differ": int((res["plain"]["greedy"] != res["prefix"]["greedy"]).sum()),
                "pred_differ": int((picks[0][:, 0] != picks[1][:, 0]).sum()),
                "pred_norm_differ": int((picks[0][:, 1] != picks[1][:, 1]).sum()),
                "pred_differ_auto": int((picks[0][:, 0] != picks[2][:, 0]).sum()),
                "pred_norm_differ_auto": int((picks[0][:, 1] != picks[2][:, 1]).sum()),
                "load": [min(loads), max(loads)],
            }
        out["tasks"][task] = entry
    out["load_at_end"] = load1()
    print(json.dumps(out, indent=2))
    if args.json:
        from residshift.core.cache import atomic_write_text

        atomic_write_text(args.json, json.dumps(out, indent=2) + "\n")
    worst = max(max(e[m]["max_abs_diff_ll"], e[m]["max_abs_diff_ll_auto"]) for e in out["tasks"].values()
                for m, _ in modes)
    if worst > 1e-3:
        raise SystemExit(f"prefix reuse changes a log-likelihood by {worst:.3g} nats (> 1e-3)")
    return out


if __name__ == "__main__":
    main()
