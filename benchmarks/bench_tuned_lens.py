"""Compare the tuned-lens recipes on the same windows: the SGD fit from the logit lens (the recipe
committed before the closed-form start) against the closed-form start refined by KL steps.

At a profile's ``tuned_*`` sizes (``profiles.py``, "causal" section; default profile by default),
on the same training, early-stopping and report windows, in one invocation:

- logit : the logit lens (no translator);
- start : the closed-form start alone (``tuned_lens.closed_form_start``: least squares
          ``h_l -> h_L`` on the first ``tuned_lstsq_windows`` training windows, ridge
          ``tuned_ridge``), timed on its own (its windows run through the model once more);
- sgd   : ``tuned_lens.fit`` with ``init="zero"``, Adam at ``--sgd-lr`` for at most
          ``--sgd-steps`` steps (the committed recipe: 600 steps at lr 1e-3), early stopping as the
          profile sets it;
- lstsq : ``tuned_lens.fit`` with the profile's config (``init="lstsq"``: the closed-form start,
          then KL refinement under the same early stopping, each layer keeping the lower of start
          and refined on the early-stopping windows).

For each it records the seconds (wall time of the call; the fits' own ``fit_seconds`` and
``start_seconds`` beside), and per layer ``h_l`` the held-out KL(final || lens) on the report
windows (full vocabulary, mean over windows), the steps taken, whether the fit stopped early,
and the layers excluded (still improving at the cap) with their reason. The CPU is shared: the CPU
name and the 1-minute load average around each fit are recorded. Each model's result is merged
into the JSON under ``models``.

    flock /tmp/residshift-heavy.lock env HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_tuned_lens.py \\
        --json benchmarks/bench-tuned-lens.json [--model gemma3-270m]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
from pathlib import Path

import torch

from residshift.core import profiles
from residshift.core.machine import cpu_facts
from residshift.core.models import load_model
from residshift.measure import tuned_lens as T


def load1() -> float:
    return round(os.getloadavg()[0], 2)


def _per_layer(ev: dict, key: str) -> list[float]:
    """Mean over the report windows per residual ``h_0..h_{L-1}`` (``h_L`` is 0 by construction)."""
    return [round(float(x), 4) for x in ev[key].mean(0)[:-1]]


def _fit_record(rep: dict, seconds: float, load: list[float]) -> dict:
    evals = [h for h in rep["history"] if "eval" in h]
    return {"seconds": round(seconds, 1), "fit_seconds": round(rep["fit_seconds"], 1),
            "start_seconds": round(rep["start_seconds"], 1), "steps": rep["steps"],
            "stopped_early": rep["stopped_early"], "load": load,
            "es_kl_start": [round(x, 4) for x in evals[0]["kl"]],
            "es_kl_kept": [round(x, 4) for x in rep["best_es_kl"]],
            "kept": rep["kept"], "last_improved": rep["last_improved"],
            "converged_by_step": (max(rep["last_improved"]) + rep["convergence_window"]
                                  if not rep["unconverged"] else None),
            "unconverged": rep["unconverged"],
            "excluded": {str(k): v for k, v in (rep["excluded"] or {}).items()}}


def run(model: str, profile: str, sgd_steps: int, sgd_lr: float) -> dict:
    P = profiles.resolve(profile)
    new = profiles.stage(T.TunedLensConfig, P)
    old = dataclasses.replace(new, init="zero", steps=sgd_steps, lr=sgd_lr)
    lm, tok, info = load_model(model)
    wins = T.windows_for(tok, info, new)  # the start fields do not change the windows
    out: dict = {"model": model, "profile": profile, "cpu": cpu_facts(), "cpu_count": os.cpu_count(),
                 "threads": torch.get_num_threads(),
                 "config": {k: getattr(new, k) for k in ("window", "train_windows", "es_windows", "val_windows",
                                                         "batch", "steps", "lr", "eval_every", "patience",
                                                         "rel_tol", "train_vocab", "init", "lstsq_windows",
                                                         "ridge")},
                 "sgd_config": {"init": old.init, "steps": old.steps, "lr": old.lr},
                 "load_at_start": load1()}

    def report_kl(lens):
        return T.evaluate_kl(lm, info, lens, wins["val"], batch=new.batch, skip_first=new.skip_first)

    ev = report_kl(None)
    val = {"logit": _per_layer(ev, "logit")}
    before, t0 = load1(), time.perf_counter()
    start = T.TunedLens(info)
    info_start = T.closed_form_start(lm, info, start, wins["train"], new)
    out["start"] = {"seconds": round(time.perf_counter() - t0, 1), "load": [before, load1()],
                    "windows": info_start["windows"], "rows": info_start["rows"],
                    "collect_seconds": round(info_start["collect_seconds"], 1)}
    val["start"] = _per_layer(report_kl(start), "tuned")
    print(f"[bench_tuned_lens] {model} start: {out['start']['seconds']} s", flush=True)
    for name, cfg in (("sgd", old), ("lstsq", new)):
        before, t0 = load1(), time.perf_counter()
        lens, rep = T.fit(lm, info, cfg, train=wins["train"], es=wins["es"])
        seconds = time.perf_counter() - t0
        out[name] = _fit_record(rep, seconds, [before, load1()])
        val[name] = _per_layer(report_kl(lens), "tuned")
        print(f"[bench_tuned_lens] {model} {name}: {seconds:.0f} s, {rep['steps']} steps, "
              f"unconverged {rep['unconverged']}", flush=True)
    out["val_kl"] = val
    out["val_kl_mean"] = {k: round(sum(v) / len(v), 4) for k, v in val.items()}
    out["lstsq_below_sgd_at"] = sum(a < b for a, b in zip(val["lstsq"], val["sgd"]))
    out["layers"] = info.n_layers
    out["load_at_end"] = load1()
    return out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--profile", default="default")
    ap.add_argument("--sgd-steps", type=int, default=600, help="the SGD recipe's step cap (committed: 600)")
    ap.add_argument("--sgd-lr", type=float, default=1e-3, help="the SGD recipe's Adam lr (committed: 1e-3)")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--json", default=None, help="merge this model's numbers into this file")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    result = run(args.model, args.profile, args.sgd_steps, args.sgd_lr)
    print(json.dumps({k: result[k] for k in ("val_kl_mean", "lstsq_below_sgd_at")}, indent=2))
    if args.json:
        from residshift.core.cache import atomic_write_text

        path = Path(args.json)
        old = json.loads(path.read_text()) if path.is_file() else {}
        models = old.get("models", {}) if isinstance(old, dict) else {}
        models[args.model] = result
        atomic_write_text(path, json.dumps({"benchmark": "tuned-lens recipes", "models": models}, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()
