"""The device check: what the study's GPU paths cost on a machine with a CUDA device, in one run of
a few minutes. On a machine without one it prints one line ("no CUDA device: ...") and writes nothing.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/device_check.py --out benchmarks
    bash benchmarks/device_check.sh           # the same, after installing carried wheels (see there)

Four sections, each written as soon as it ends (atomically), each skipped with its reason once the
run's ``--budget`` seconds are spent:

- **train** -> ``bench-train-cuda.json``: the trainer's step (``benchmarks/bench_train.py``'s
  ``Variant``: forward, next-token loss, backward, clipping, fused AdamW; TF32 allowed as the trainer
  allows it on CUDA) at the ``paper`` profile's shape (12 layers, 12 heads, width 768, context 1,024,
  vocabulary 50,304, GEGLU) in fp32, bf16 and bf16 compiled, and the paper ladder's deeper shape (24
  layers) compiled in bf16. The batch is the authors' per-GPU micro-batch (32 windows). The file has
  ``bench_train.py``'s ``shapes`` layout with ``machine.device = "cuda"``, so
  ``python -m residshift train-grid --dry-run --profile paper`` prices the grid in GPU-hours from it.
- **lens** -> ``bench-lens-cuda.json``: the streamed logit lens (``measure.lens.corpus_metrics``: one
  nnsight trace per batch, then every metric of every layer and position) on the two embedded models'
  architectures, fp32 and bf16, with the tokens/s the committed file held before (``before``) and the
  device-to-host copies of one batch counted by ``torch.profiler`` (the lens keeps its outputs on
  the device and copies once per batch; the earlier code copied per chunk and layer). The weights are random draws of each model's own config: the GGUF
  files (98 MB and 250 MB) do not fit what travels to a device machine here, and no timing of these
  matrix products depends on the weights' values. Windows are random token ids of the ``paper``
  profile's lens window (256).
- **ladder** -> ``bench-ladder-cuda.json``: ``python -m residshift ladder`` on CUDA for the default
  profile's smallest rung of each of two shapes (real WikiText-2, the study's own BPE tokenizer, the
  trainer and the lens readings end to end), into a scratch folder; its wall time beside the same
  rungs' CPU records in ``benchmarks/ladder/default/``.
- **paper-steps** -> ``bench-paper-steps-cuda.json``: one step each of the ``paper`` profile's GPU work
  on a random-weight Gemma-2-2B (``transformers.Gemma2Config()``'s defaults are its shapes: 26 layers,
  width 2,304, 256,000 tokens, soft-capped logits) in bf16, at the profile's own sizes: a lens batch
  (``lens_batch`` x ``lens_window``), a tuned-lens step (``tuned_batch`` x ``tuned_window``, full
  vocabulary), a token-gate step (``gate_batch`` x ``gate_window``, ``gate_bf16``) and a sweep cell (one
  layer, one alpha, ``sweep_batch`` x ``sweep_window``): seconds and peak memory each, so the
  profile's totals can be priced before a paper run starts.
- **cpu-repro** -> ``cpu-repro-learned-token-host.json``: ``benchmarks/cpu_repro.py --mode
  learned-token`` on the device machine's host CPU (about a minute): the token-gated model's weights
  after 30 steps under each oneMKL setting, to compare with ``cpu-repro-learned-token-amd-epyc.json``
  (the grid's learned-token runs came out different on an Intel Xeon and an AMD EPYC, the other 65 runs
  bit-identical: ``cpu-repro-grid-curves.json``).

Every file names the GPU, the CPU beside it, torch and CUDA versions, and the load.
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402

NO_DEVICE = "no CUDA device: benchmarks/device_check.py measured nothing (it needs torch.cuda.is_available())"

PAPER_SHAPE = dict(n_layer=12, n_head=12, n_embd=768, block_size=1024, vocab_size=50304, mlp="geglu", batch=32)
DEEP_SHAPE = {**PAPER_SHAPE, "n_layer": 24}
PRECISIONS = [("fp32-eager", False, False), ("bf16-eager", True, False), ("bf16-compile", True, True)]
LENS_MODELS = ("smollm2-135m", "gemma3-270m")
LADDER_RUNGS = ("6x128-r0", "24x128-r0")


def machine() -> dict:
    from bench_train import _cpu_name

    props = torch.cuda.get_device_properties(0)
    return {"device": "cuda", "gpu": torch.cuda.get_device_name(0), "gpu_memory_gib": round(props.total_memory / 2**30, 1),
            "multiprocessors": props.multi_processor_count, "cpu": _cpu_name(), "cpu_count": os.cpu_count(),
            "torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version(),
            "load_avg_start": os.getloadavg()[0]}


def write(path: Path, data: dict) -> None:
    from residshift.core.cache import atomic_write_text

    atomic_write_text(path, json.dumps(data, indent=2) + "\n")
    print(f"wrote {path}", flush=True)


class Budget:
    def __init__(self, seconds: float):
        self.t0, self.seconds = time.perf_counter(), seconds

    def left(self) -> float:
        return self.seconds - (time.perf_counter() - self.t0)


# --------------------------------------------------------------------------------------------


def _sync(device: str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def _peak_gib(device: str, reset: bool = True) -> float | None:
    if torch.device(device).type != "cuda":
        return None
    peak = torch.cuda.max_memory_allocated() / 2**30
    if reset:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    return round(peak, 2)


TRAIN_SHAPES = (("paper", PAPER_SHAPE, PRECISIONS), ("paper-ladder-24", DEEP_SHAPE, [PRECISIONS[-1]]))


def train_section(budget: Budget, rounds: int, steps: int, *, device: str = "cuda", shapes_=TRAIN_SHAPES) -> dict:
    """The trainer's step at the paper shapes (``bench_train.measure`` on ``device``)."""
    from bench_train import measure

    torch.backends.cuda.matmul.allow_tf32 = True  # as the trainer sets it on CUDA
    torch.backends.cudnn.allow_tf32 = True
    shapes: dict = {}
    for name, shape, precisions in shapes_:
        if budget.left() < 60:
            shapes[name] = {"shape": shape, "skipped": f"budget: {budget.left():.0f} s left"}
            continue
        t0 = time.perf_counter()
        prec = measure(shape, [(n, "baseline", b, c) for n, b, c in precisions], rounds, steps, 2, device=device)
        shapes[name] = {"shape": shape, "precision": prec, "peak_gib": _peak_gib(device),
                        "seconds": round(time.perf_counter() - t0, 1)}
        for n, r in prec.items():
            print(f"[train {name}] {n:<13} {r['tokens_per_s']:>12,.0f} tok/s  x{r['ratio_vs_fp32_eager']:.2f}"
                  + (f"  (compile {r['compile_s']:.0f} s)" if "compile_s" in r else ""), flush=True)
    return {"settings": {"rounds": rounds, "steps": steps, "warm": 2, "tf32": True}, "shapes": shapes}


def lens_section(budget: Budget, cards: Path, windows: int, window: int, batch: int, *, device: str = "cuda",
                 models=LENS_MODELS) -> dict:
    """The streamed lens on random-weight copies of the embedded models' architectures."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from residshift.core.models import describe_model, wrap
    from residshift.measure import lens

    before = previous_lens_speeds(HERE / "bench-lens-cuda.json")
    out: dict = {"weights": "random draws of each model's own config (the GGUF weights do not travel; "
                            "timings do not depend on weight values)",
                 "windows": windows, "window": window, "batch": batch, "models": {}}
    for name in models:
        folder = cards / name
        if not folder.is_dir():
            out["models"][name] = {"skipped": f"no model card at {folder} (device_check.sh copies config and tokenizer)"}
            continue
        cfg = AutoConfig.from_pretrained(folder)
        tok = AutoTokenizer.from_pretrained(folder)
        for dtype in (torch.float32, torch.bfloat16):
            key = f"{name}-{str(dtype).removeprefix('torch.')}"
            if budget.left() < 45:
                out["models"][key] = {"skipped": f"budget: {budget.left():.0f} s left"}
                continue
            torch.manual_seed(0)
            model = AutoModelForCausalLM.from_config(cfg, dtype=dtype).to(device)
            model.tie_weights()
            info = describe_model(model, tok, name=name, source="random:config")
            lm, _, info = wrap(model, tok, info)
            g = torch.Generator().manual_seed(0)
            ids = torch.randint(0, info.vocab_size, (windows, window), generator=g)
            lens.corpus_metrics(lm, info, ids[:batch], batch=batch)  # warm-up: compile, allocator
            copies = d2h_copies(functools.partial(lens.corpus_metrics, lm, info, ids[:batch], batch=batch), device)
            _sync(device)
            t0 = time.perf_counter()
            res = lens.corpus_metrics(lm, info, ids, batch=batch)
            _sync(device)
            s = time.perf_counter() - t0
            out["models"][key] = {"layers": info.n_layers, "d_model": info.d_model, "vocab": info.vocab_size,
                                  "tokens": windows * window, "seconds": round(s, 3),
                                  "tokens_per_s": round(windows * window / s, 1), "metrics": res.columns,
                                  "peak_gib": _peak_gib(device), "d2h_copies_per_batch": copies}
            prior = before.get(key)
            if prior:
                out["models"][key]["before"] = {"tokens_per_s": prior,
                                                "speedup": round(windows * window / s / prior, 2)}
            print(f"[lens {key}] {windows * window:,} tokens x {info.n_layers + 1} layers in {s:.2f} s "
                  f"({windows * window / s:,.0f} tok/s)", flush=True)
            del lm, model
    return out


def previous_lens_speeds(path: Path) -> dict[str, float]:
    """``{model-dtype: tokens/s}`` of a committed ``bench-lens-cuda.json`` (empty when there is none)."""
    try:
        return {k: float(v["tokens_per_s"]) for k, v in json.loads(path.read_text())["models"].items()
                if "tokens_per_s" in v}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def d2h_copies(fn, device: str) -> int | None:
    """Device-to-host memory copies while ``fn()`` runs, counted by ``torch.profiler`` (None on a CPU)."""
    if torch.device(device).type != "cuda":
        return None
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        _sync(device)
    return sum(e.count for e in prof.key_averages() if "DtoH" in e.key or "Device -> Host" in e.key)


def paper_steps_section(budget: Budget, cards: Path, *, device: str = "cuda", config=None,
                        dtype=torch.bfloat16, sizes: dict | None = None) -> dict:
    """The micro-batch the paper profile's trainer takes on this device, then one step each of the
    paper profile's lens, tuned lens, token gates and sweep on a random-weight Gemma-2-2B (``config``:
    ``Gemma2Config()`` unless a test passes a small one)."""
    from transformers import AutoTokenizer, Gemma2Config, Gemma2ForCausalLM

    from residshift.attenuate import gates as G, sweep
    from residshift.core import profiles
    from residshift.core.models import describe_model, wrap
    from residshift.measure import lens, tuned_lens

    P = profiles.get("paper")
    sz = {"lens": (P["lens_batch"], P["lens_window"]), "tuned": (P["tuned_batch"], P["tuned_window"]),
          "gate": (P["gate_batch"], P["gate_window"]), "sweep": (P["sweep_batch"], P["sweep_window"]),
          **(sizes or {})}
    card = next((cards / n for n in ("gemma3-270m", *LENS_MODELS) if (cards / n).is_dir()), None)
    if card is None:
        return {"skipped": f"no model card under {cards} for a tokenizer (device_check.sh copies them)"}
    cfg = config or Gemma2Config()
    torch.manual_seed(0)
    with torch.device(device):
        model = Gemma2ForCausalLM(cfg).to(dtype)
    tok = AutoTokenizer.from_pretrained(card)
    info = describe_model(model, tok, name="gemma-2-2b-random", source="random:Gemma2Config")
    lm, _, info = wrap(model, tok, info)
    g = torch.Generator().manual_seed(0)
    ids = {k: torch.randint(0, info.vocab_size, (b, w), generator=g) for k, (b, w) in sz.items()}
    mid = info.n_layers // 2

    def tuned_step():
        tl = tuned_lens.TunedLens(info).to(device)
        opt = torch.optim.Adam(tl.parameters(), lr=1e-3)
        tuned_lens.train_step(lm, info, tl, ids["tuned"], lambda loss: loss.backward(), skip_first=1, vocab=None)
        opt.step()

    def gate_step():
        gates = G.make_gates("token", list(range(info.n_layers)), info.d_model).to(device)
        G.train_step(lm, info, gates, ids["gate"], bf16=bool(P["gate_bf16"]))

    def trainer_micro_batch():
        """The paper profile's trainer on this one device: how many of its 256 windows of 1,024 tokens
        one forward and backward takes (``trainer.fit_micro_batch``; the rest is accumulation)."""
        from residshift.train import trainer as T
        from residshift.train.from_profile import profile_config

        tc = profile_config("paper").resolved(device)
        vocab = tc.vocab or 50304
        model = T.init_model(tc, vocab).to(device)
        size = T.fit_micro_batch(tc, model, tc.batch_size, vocab, device)
        out["trainer_micro_batch"] = {"share": tc.batch_size, "micro_batch": size, "bf16": tc.bf16,
                                      "context": tc.context}
        del model

    steps = {"trainer_micro_batch": trainer_micro_batch,
             "lens_batch": lambda: lens.corpus_metrics(lm, info, ids["lens"], batch=sz["lens"][0]),
             "tuned_lens_step": tuned_step, "token_gate_step": gate_step,
             "sweep_cell": lambda: sweep.sweep_windows(lm, info, ids["sweep"], sweep.SweepConfig(
                 model=info.name, layers=[mid], alphas=[0.0], n_windows=sz["sweep"][0], batch_size=sz["sweep"][0],
                 window=sz["sweep"][1]))}
    out: dict = {"model": {"layers": info.n_layers, "d_model": info.d_model, "vocab": info.vocab_size,
                           "dtype": str(dtype).removeprefix("torch."), "softcap": info.logit_softcap},
                 "sizes": {k: {"batch": b, "window": w} for k, (b, w) in sz.items()}, "steps": {}}
    for name, fn in steps.items():
        if budget.left() < 30:
            out["steps"][name] = {"skipped": f"budget: {budget.left():.0f} s left"}
            continue
        try:
            _sync(device)
            t0 = time.perf_counter()
            fn()
            _sync(device)
            out["steps"][name] = {"seconds": round(time.perf_counter() - t0, 3), "peak_gib": _peak_gib(device)}
        except torch.OutOfMemoryError as err:  # the answer this check exists for: say it, go on
            out["steps"][name] = {"out_of_memory": str(err).splitlines()[0]}
            _peak_gib(device)
        print(f"[paper-steps] {name}: {out['steps'][name]}", flush=True)
    return out


def ladder_section(budget: Budget) -> dict:
    """``python -m residshift ladder`` on CUDA for two short rungs, into a scratch records folder."""
    repo = HERE.parent
    out: dict = {"profile": "default", "rungs": {}}
    cpu = {rung: _timing(repo / "benchmarks" / "ladder" / "default" / f"{rung}.json") for rung in LADDER_RUNGS}
    with tempfile.TemporaryDirectory(prefix="device-check-ladder-") as scratch:
        env = {**os.environ, "RESIDSHIFT_RESULTS": str(Path(scratch) / "results")}
        cmd = [sys.executable, "-m", "residshift", "ladder", "--profile", "default", "--device", "cuda",
               "--no-progress", "--out", str(Path(scratch) / "records"), "--only", *LADDER_RUNGS]
        if budget.left() < 60:
            return {**out, "skipped": f"budget: {budget.left():.0f} s left"}
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True,
                              timeout=max(60, budget.left()))
        wall = time.perf_counter() - t0
        print(proc.stdout[-3000:], proc.stderr[-2000:], sep="\n", flush=True)
        out.update(command=" ".join(cmd[1:]), returncode=proc.returncode, wall_s=round(wall, 1),
                   stdout_tail=proc.stdout[-2000:], stderr_tail=proc.stderr[-1500:])
        for rung in LADDER_RUNGS:
            out["rungs"][rung] = {"cuda": _timing(Path(scratch) / "records" / f"{rung}.json"), "cpu_record": cpu[rung]}
    return out


def _timing(path: Path) -> dict | None:
    """A ladder record's cost: its summary (loss, tokens/s, training seconds), machine and lens seconds."""
    try:
        rec = json.loads(path.read_text())
        return {"machine": rec["machine"], "summary": rec["summary"], "finished": rec["finished"],
                "readings": len(rec["points"]), "lens_seconds": round(sum(p["lens_seconds"] for p in rec["points"]), 2),
                "segment_seconds": round(sum(p["segment_seconds"] for p in rec["points"]), 2)}
    except (OSError, ValueError, KeyError, TypeError):
        return None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(HERE), help="folder for the bench-*-cuda.json files")
    ap.add_argument("--budget", type=float, default=480, help="seconds the whole check may take")
    ap.add_argument("--sections", default="train,lens,paper-steps,ladder,cpu-repro")
    ap.add_argument("--cards", default=str(HERE.parent / ".devicecheck" / "cards"),
                    help="folder of <model>/ config + tokenizer files for the lens section")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--lens-windows", type=int, default=64)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print(NO_DEVICE)
        return 0
    budget, out = Budget(args.budget), Path(args.out)
    sections = args.sections.split(",")
    unknown = set(sections) - {"train", "lens", "paper-steps", "ladder", "cpu-repro"}
    if unknown:
        ap.error(f"unknown section(s) {sorted(unknown)}: use train, lens, paper-steps, ladder, cpu-repro")
    if "train" in sections:
        write(out / "bench-train-cuda.json", {"machine": machine(), **train_section(budget, args.rounds, args.steps)})
    if "lens" in sections:
        write(out / "bench-lens-cuda.json", {"machine": machine(),
                                             **lens_section(budget, Path(args.cards), args.lens_windows, 256, 16)})
    if "paper-steps" in sections:
        write(out / "bench-paper-steps-cuda.json", {"machine": machine(), **paper_steps_section(budget, Path(args.cards))})
    if "ladder" in sections:
        write(out / "bench-ladder-cuda.json", {"machine": machine(), **ladder_section(budget)})
    if "cpu-repro" in sections:
        if budget.left() < 90:
            print(f"cpu-repro: skipped, {budget.left():.0f} s of the budget left (it takes about 60)")
        else:
            import cpu_repro

            cpu_repro.main(["--mode", "learned-token", "--json", str(out / "cpu-repro-learned-token-host.json")])
    return 0


if __name__ == "__main__":
    sys.exit(main())
