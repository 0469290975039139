"""What a tuned-lens stopping rule on the layers' *mean* early-stopping KL would have cost, read from the
histories of the fits notebook 03 made (no refitting).

The fits stop when no layer's held-out KL has beaten its best by more than ``rel_tol`` (1%) for
``patience`` evaluations (``tuned_lens.CountedKL``): with 2 early-stopping windows one noisy layer keeps
the whole fit going. The alternative counts an evaluation as an improvement when the mean over layers of
the kept KLs falls by more than ``rel_tol`` of its best. The fit is deterministic (batches seeded by
step), so stopping earlier keeps exactly the per-layer states the real fit held at that step; this
script replays each history under both rules and prints, per model, the step each rule stops at and the
mean kept early-stopping KL at that step against the real fit's end (the cost, in %).

The cost is measured on the early-stopping windows themselves (the only KL the history holds at every
evaluation), not on the validation windows of the report.

    .venv/bin/python benchmarks/tuned_lens_stopping.py [--results results] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch


def kept_curve(evals: list[dict], rel_tol: float) -> list[list[float]]:
    """Per evaluation, each layer's kept early-stopping KL (the raw KL of its last counted improvement)."""
    best, kept, out = None, None, []
    for e in evals:
        raw = [float(v) for v in e["kl"]]
        if best is None:
            best, kept = [float("inf")] * len(raw), list(raw)
        for i, v in enumerate(raw):
            if v < best[i] * (1 - rel_tol):
                best[i], kept[i] = v, v
        out.append(list(kept))
    return out


def stop_index(evals: list[dict], kept: list[list[float]], rel_tol: float, patience: int, rule: str) -> int | None:
    """The evaluation at which ``rule`` ("any": the fits' own, "mean") runs out of patience (None: never)."""
    best_any = best_mean = None
    bad = 0
    for j, e in enumerate(evals):
        raw = [float(v) for v in e["kl"]]
        if rule == "any":
            if best_any is None:
                best_any, improved = list(raw), True
            else:
                improved = False
                for i, v in enumerate(raw):
                    if v < best_any[i] * (1 - rel_tol):
                        best_any[i], improved = v, True
        else:
            m = sum(kept[j]) / len(kept[j])
            improved = best_mean is None or m < best_mean * (1 - rel_tol)
            if improved:
                best_mean = m
        bad = 0 if improved else bad + 1
        if bad >= patience:
            return j
    return None


GRID = [(tol, pat) for tol in (0.01, 0.005, 0.0025) for pat in (2, 3, 4, 6)]  # the mean rule's settings tried


def replay(report: dict) -> dict:
    cfg = report["config"]
    evals = [h for h in report["history"] if isinstance(h, dict) and "kl" in h]
    rel_tol, patience = float(cfg["rel_tol"]), int(cfg["patience"])
    kept = kept_curve(evals, rel_tol)  # the layers keep their states as the fit counted them
    end = len(evals) - 1
    final = sum(kept[end]) / len(kept[end])
    row = {"model": report["model"], "steps_cap": cfg["steps"], "eval_every": cfg["eval_every"],
           "patience": patience, "rel_tol": rel_tol, "evaluations": len(evals),
           "fit_steps": report["steps"], "fit_seconds": round(report.get("fit_seconds", 0.0), 1),
           "start_mean_kl": sum(kept[0]) / len(kept[0]), "final_mean_kl": final}
    for rule in ("any", "mean"):
        j = stop_index(evals, kept, rel_tol, patience, rule)
        j = end if j is None else j
        m = sum(kept[j]) / len(kept[j])
        row[rule] = {"stop_step": evals[j]["step"], "mean_kl": m, "cost_pct": 100 * (m - final) / final,
                     "share_of_gain": (row["start_mean_kl"] - m) / (row["start_mean_kl"] - final)
                     if row["start_mean_kl"] > final else None}
    row["mean_rule_grid"] = []
    for tol, pat in GRID:  # the mean rule at other settings (the layers keep their states as above)
        j = stop_index(evals, kept, tol, pat, "mean")
        j = end if j is None else j
        m = sum(kept[j]) / len(kept[j])
        row["mean_rule_grid"].append({"rel_tol": tol, "patience": pat, "stop_step": evals[j]["step"],
                                      "cost_pct": 100 * (m - final) / final})
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", default="results", help="the results folder holding tuned-lens/*.pt")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    rows = []
    for path in sorted(Path(args.results, "tuned-lens").glob("*.pt")):
        report = torch.load(path, map_location="cpu", weights_only=False)["report"]
        if "history" not in report:
            continue
        r = replay(report)
        rows.append(r)
        print(f"{r['model']}: window {report['config']['window']}, {r['evaluations']} evaluations; the fit stopped "
              f"at step {r['fit_steps']} ({r['fit_seconds']:.0f} s); the mean rule would stop at "
              f"{r['mean']['stop_step']} with {r['mean']['share_of_gain']:.1%} of the KL gain, mean early-stopping "
              f"KL {r['mean']['mean_kl']:.4f} vs {r['final_mean_kl']:.4f} (+{r['mean']['cost_pct']:.2f}%)")
        for g in r["mean_rule_grid"]:
            print(f"  mean rule, rel_tol {g['rel_tol']}, patience {g['patience']}: stops at {g['stop_step']}, "
                  f"+{g['cost_pct']:.2f}%")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
