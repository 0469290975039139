"""Training throughput of residshift.train: tokens/s per precision and per residual mode, as ratios
against eager fp32 of the same configuration, measured in ONE invocation.

    flock /tmp/residshift-heavy.lock env HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_train.py \\
        --json benchmarks/bench-train.json --txt benchmarks/bench-train.txt

Each variant is a full training step of the trainer (``residshift.train.trainer``): forward under
bf16 autocast or not, ``core.unembed.next_token_losses``, backward, clipping at 1.0, fused AdamW
with the model's decay / no-decay groups. Batches are random token ids (throughput does not depend
on the text). Variants are timed in interleaved rounds (every variant once per round, the median
over rounds reported), so a shared CPU's changing load hits all of them alike; ``compile_s`` is
the first compiled step (the one-off cost a run pays).

Two shapes: ``issue`` (issue 9's target: 6 layers, width 384, context 256, vocabulary 8,192,
batch 8) and ``default`` (the ``default`` profile's training size). Targets checked: the best
bf16 variant >= 2.5x eager fp32 on ``issue``; the learned-gate modes cost <= 10 % over baseline.

``--calibrate`` also trains the ``default`` profile's baseline (seed 0) on WikiText-2 with the
trainer (a finished run is reused: its recorded seconds are reported) and records its validation
loss against the unigram cross-entropy, its cost, and the cost of issue 10's grid
(``(1 + 2 L + 4) x seeds`` runs: baseline, fixed alpha = 0 and 0.5 at each layer, learned,
learned-token, backout, scalars).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as `python -m residshift train` sets it
import torch  # noqa: E402

from residshift.core import profiles  # noqa: E402
from residshift.core.unembed import next_token_losses  # noqa: E402
from residshift.core.models.gpt import GPT, GPTConfig  # noqa: E402

SHAPES = {
    "issue": dict(n_layer=6, n_head=6, n_embd=384, block_size=256, vocab_size=8192, batch=8),
}
MODES = {
    "baseline": {},
    "fixed": {"alpha": 0.5, "alpha_layers": [3]},
    "learned": {},
    "learned-token": {},
    "backout": {},
    "scalars": {},
}


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _cpu_bf16_flags() -> list[str]:
    try:
        flags = Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return []
    return sorted({f for f in flags if "bf16" in f})


def default_shape() -> dict:
    from residshift.core.profiles import get

    P = get("default")
    vocab = P["train_vocab"] or int(P["train_tokenizer"].rsplit(":", 1)[-1])
    return dict(n_layer=P["train_layers"], n_head=P["train_heads"], n_embd=P["train_width"],
                block_size=P["train_context"], vocab_size=vocab, batch=P["train_batch"], mlp=P["train_mlp"])


class Variant:
    def __init__(self, name: str, shape: dict, mode: str, bf16: bool, compiled: bool, device: str = "cpu"):
        self.name, self.bf16, self.compiled, self.device = name, bf16, compiled, device
        kw = {k: v for k, v in shape.items() if k != "batch"}
        extra = MODES[mode]
        if mode == "fixed":
            extra = {"alpha": 0.5, "alpha_layers": [shape["n_layer"] // 2]}
        torch.manual_seed(0)
        self.model = GPT(GPTConfig(**kw, residual=mode, **extra)).to(device).train()
        self.fwd = torch.compile(self.model) if compiled else self.model
        self.opt = torch.optim.AdamW(self.model.param_groups(0.1), lr=1e-4, betas=(0.9, 0.95), fused=True)
        g = torch.Generator().manual_seed(1)
        self.x = torch.randint(0, shape["vocab_size"], (shape["batch"], shape["block_size"]), generator=g).to(device)
        self.tokens = self.x.numel()
        self.rates: list[float] = []
        self.compile_s = None

    def step(self) -> float:
        kind = torch.device(self.device).type
        ctx = torch.autocast(kind, dtype=torch.bfloat16) if self.bf16 else contextlib.nullcontext()
        with ctx:
            logits = self.fwd(self.x).logits
        loss = next_token_losses(logits, self.x).mean()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return float(loss.detach())

    def sync(self) -> None:
        """Wait for the device (a CUDA step returns before its kernels end)."""
        if torch.device(self.device).type == "cuda":
            torch.cuda.synchronize()

    def warm(self, steps: int) -> None:
        t0 = time.perf_counter()
        self.step()
        self.sync()
        if self.compiled:
            self.compile_s = time.perf_counter() - t0
        for _ in range(steps - 1):
            self.step()
        self.sync()

    def timed(self, steps: int) -> None:
        self.sync()
        t0 = time.perf_counter()
        for _ in range(steps):
            self.step()
        self.sync()
        self.rates.append(steps * self.tokens / (time.perf_counter() - t0))

    @property
    def tokens_per_s(self) -> float:
        return statistics.median(self.rates)


def measure(shape: dict, variants: list[tuple[str, str, bool, bool]], rounds: int, steps: int, warm: int,
            device: str = "cpu") -> dict:
    """Every variant ``(name, mode, bf16, compiled)`` of ``shape`` on ``device``, timed in interleaved
    rounds; ratios against the first variant."""
    vs = [Variant(name, shape, mode, bf16, comp, device) for name, mode, bf16, comp in variants]
    for v in vs:
        v.warm(warm)
    for _ in range(rounds):
        for v in vs:
            v.timed(steps)
    ref = vs[0].tokens_per_s
    return {v.name: {"tokens_per_s": round(v.tokens_per_s, 1), "ratio_vs_fp32_eager": round(v.tokens_per_s / ref, 3),
                     "rounds": [round(r, 1) for r in v.rates],
                     **({"compile_s": round(v.compile_s, 1)} if v.compile_s is not None else {})} for v in vs}


def calibrate(seeds: int) -> dict:
    """Train (or reuse) the default profile's baseline and its hardest variant seen in calibration
    (fixed alpha = 0 at the last layer), and estimate issue 10's grid from their cost."""
    from residshift.train.trainer import TrainConfig, read_summary, train

    base = profiles.stage(TrainConfig, "default")
    out = {"seeds": seeds}
    for name, cfg in (("baseline", base),
                      ("fixed_a0_last", base.with_(mode="fixed", alpha=0.0, alpha_layers=(base.layers - 1,)))):
        run = train(cfg, progress=False)
        s = read_summary(run)
        evals = [(r["step"], r["eval"]) for r in map(json.loads, (run / "log.jsonl").read_text().splitlines())
                 if "eval" in r]
        # per-run cost: steps, evaluations, checkpoints and saving (not the process start and the
        # one-off tokenizer / token-cache work the runs of a grid share)
        out[name] = {"run": run.name, "label": s["label"], "val_loss": s["val_loss"], "unigram_ce": s["unigram_ce"],
                     "below_unigram": s["below_unigram"], "tokens": s["tokens"], "steps": s["steps"],
                     "tokens_per_s": s["tokens_per_s"], "train_seconds": s["train_seconds"],
                     "run_seconds": s["run_seconds_last_call"], "parameters": s["model"]["parameters"],
                     "curve": [{"step": st, "tokens": st * s["tokens_per_step"], "val_loss": v} for st, v in evals]}
    per_run = (out["baseline"]["run_seconds"] + out["fixed_a0_last"]["run_seconds"]) / 2
    full = (1 + 2 * base.layers + 4) * seeds
    thin = (1 + 2 * len(range(1, base.layers, 2)) + 4) * seeds
    out.update({"config": {k: v for k, v in vars(base).items()}, "run_seconds_mean": per_run,
                "grid_runs": full, "grid_minutes": full * per_run / 60,
                "thinned_layers": list(range(1, base.layers, 2)), "thinned_grid_runs": thin,
                "thinned_grid_minutes": thin * per_run / 60})
    return out


def choose(prec: dict) -> str:
    """The fastest variant; a compiled one only when it beats the fastest eager one by 10 % or more
    (compiling costs minutes once per run, see compile_s)."""
    eager = max((n for n in prec if n.endswith("eager")), key=lambda n: prec[n]["tokens_per_s"])
    fastest = max(prec, key=lambda n: prec[n]["tokens_per_s"])
    if fastest.endswith("compile") and prec[fastest]["tokens_per_s"] < 1.1 * prec[eager]["tokens_per_s"]:
        return eager
    return fastest


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=3, help="steps per variant per round")
    ap.add_argument("--warm", type=int, default=2)
    ap.add_argument("--shapes", default="issue,default")
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile variants")
    ap.add_argument("--calibrate", action="store_true", help="also train the default profile's baseline")
    ap.add_argument("--seeds", type=int, default=3, help="seeds per variant in the grid estimate")
    ap.add_argument("--json", default=None)
    ap.add_argument("--txt", default=None)
    args = ap.parse_args(argv)
    shapes = {"issue": SHAPES["issue"], "default": default_shape()}
    precisions = [("fp32-eager", False, False), ("bf16-eager", True, False)]
    if not args.no_compile:
        precisions += [("fp32-compile", False, True), ("bf16-compile", True, True)]
    out: dict = {"machine": {"cpu": _cpu_name(), "cpu_bf16": _cpu_bf16_flags(), "threads": torch.get_num_threads(),
                             "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
                             "torch": torch.__version__, "load_avg_start": os.getloadavg()[0]},
                 "settings": {"rounds": args.rounds, "steps": args.steps, "warm": args.warm}, "shapes": {}}
    lines = []
    for sname in args.shapes.split(","):
        shape = shapes[sname]
        t0 = time.perf_counter()
        prec = measure(shape, [(n, "baseline", b, c) for n, b, c in precisions], args.rounds, args.steps, args.warm)
        best = max((n for n in prec if n.startswith("bf16")), key=lambda n: prec[n]["tokens_per_s"])
        chosen = choose(prec)
        bf16, comp = chosen.startswith("bf16"), chosen.endswith("compile")
        # the residual modes under the variant a run would use, baseline first (the mode costs' reference)
        modes = measure(shape, [(m, m, bf16, comp) for m in MODES], args.rounds, args.steps, args.warm)
        base = modes["baseline"]["tokens_per_s"]
        for m in modes.values():
            m["cost_vs_baseline"] = round(base / m["tokens_per_s"] - 1, 3)
        out["shapes"][sname] = {"shape": shape, "precision": prec, "best_bf16": best, "chosen": chosen,
                                "modes": modes, "seconds": round(time.perf_counter() - t0, 1)}
        lines.append(f"[{sname}] {shape}")
        for n, r in prec.items():
            lines.append(f"  {n:<14} {r['tokens_per_s']:>9,.0f} tok/s  x{r['ratio_vs_fp32_eager']:.2f} vs fp32-eager"
                         + (f"  (compile {r['compile_s']:.0f} s)" if "compile_s" in r else ""))
        lines.append(f"  chosen (fastest; compile only when >= 10% faster than eager): {chosen}; modes under it:")
        for n, r in modes.items():
            lines.append(f"  {n:<14} {r['tokens_per_s']:>9,.0f} tok/s  cost vs baseline {r['cost_vs_baseline']:+.1%}")
    issue = out["shapes"].get("issue")
    if issue:
        speed = issue["precision"][issue["best_bf16"]]["ratio_vs_fp32_eager"]
        worst = max(issue["modes"][m]["cost_vs_baseline"] for m in ("learned", "learned-token"))
        out["targets"] = {"bf16_speedup": speed, "bf16_speedup_target": 2.5, "bf16_speedup_met": speed >= 2.5,
                          "learned_cost": worst, "learned_cost_target": 0.10, "learned_cost_met": worst <= 0.10}
        lines.append(f"targets: best bf16 x{speed:.2f} vs fp32-eager (target >= 2.5: "
                     f"{'met' if speed >= 2.5 else 'NOT met'}); learned-gate cost {worst:+.1%} "
                     f"(target <= 10%: {'met' if worst <= 0.10 else 'NOT met'})")
    if args.calibrate:
        out["calibration"] = c = calibrate(args.seeds)
        for name in ("baseline", "fixed_a0_last"):
            r = c[name]
            lines.append(f"[calibration] default {r['label']}: validation loss {r['val_loss']:.3f} vs unigram "
                         f"{r['unigram_ce']:.3f} ({r['below_unigram']:.2f} nats below) after {r['tokens']:,} tokens; "
                         f"{r['tokens_per_s']:,.0f} tok/s, {r['train_seconds']:.0f} s training, "
                         f"{r['run_seconds']:.0f} s per run")
        lines.append(f"[calibration] issue 10's grid at {args.seeds} seeds: {c['grid_runs']} runs ~ "
                     f"{c['grid_minutes']:.0f} min; fixed cuts at layers {c['thinned_layers']} only: "
                     f"{c['thinned_grid_runs']} runs ~ {c['thinned_grid_minutes']:.0f} min")
    out["machine"]["load_avg_end"] = os.getloadavg()[0]
    lines.append(f"load average {out['machine']['load_avg_start']:.1f} -> {out['machine']['load_avg_end']:.1f} "
                 f"on {out['machine']['threads']} threads")
    text = "\n".join(lines)
    print(text)
    from residshift.core.cache import atomic_write_text

    if args.json:
        atomic_write_text(Path(args.json), json.dumps(out, indent=2) + "\n")
    if args.txt:
        atomic_write_text(Path(args.txt), text + "\n")
    return out


if __name__ == "__main__":
    main()
