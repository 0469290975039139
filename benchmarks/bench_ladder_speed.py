"""Training speed of the scale ladder's candidate rungs on this machine, before any rung is chosen
(issue 33: "measure tokens/s per rung before choosing the rungs").

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_ladder_speed.py --json benchmarks/bench-ladder-speed.json

Each candidate shape (depth x width at the ``default`` profile's context, vocabulary, batch and MLP)
is a full training step of the trainer's model, timed with ``bench_train``'s own ``Variant`` (forward,
``next_token_losses``, backward, clipping, fused AdamW), fp32 and bf16 autocast, eager. Shapes are timed
in interleaved rounds (every shape once per round, the median over rounds reported), so a shared CPU's
changing load hits all of them alike. For each shape and the faster precision it prints the hours one
run needs at each token budget of the ladder: the ``default`` profile's budget times 4^k (k = 0..5),
with the corpus that can supply it (WikiText-2's training split, else WikiText-103's), and the
parameters per token (the training half's models today see about 0.3 tokens per parameter). A time
per budget is this CPU's speed times tokens: evaluation, checkpoints and the lens at checkpoints come
on top. The CPU and its load are recorded beside the times.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as `python -m residshift train` sets it
import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench_train import Variant, default_shape  # noqa: E402

from residshift.core.machine import cpu_facts  # noqa: E402

DEPTHS = (6, 12)
WIDTHS = (128, 256, 384)
RUNGS = 6  # budgets: default x 4^k, k = 0..5
# The training splits a budget may come from, in order; their sizes in tokens are read from the token
# caches (corpus_tokens), never assumed.
CORPUS_TOKENS = {"wikitext-2": None, "wikitext-103": None}


def shapes(base: dict) -> dict[str, dict]:
    out = {}
    for depth in DEPTHS:
        for width in WIDTHS:
            out[f"{depth}x{width}"] = {**base, "n_layer": depth, "n_embd": width, "n_head": max(2, width // 32)}
    return out


def parameters(v: Variant) -> int:
    return sum(p.numel() for p in v.model.parameters())


def corpus_tokens() -> dict[str, int | None]:
    """Training-split sizes in tokens of the default tokenizer, where this checkout's token caches
    (notebook 06, the ladder) already hold them; None where they do not (not guessed)."""
    from residshift.core.paths import cache_dir

    found: dict[str, int | None] = dict(CORPUS_TOKENS)
    root = cache_dir() / "train-tokens"
    for path in root.rglob("*.npy") if root.is_dir() else []:
        name = path.name
        for corpus in found:
            if name.startswith(corpus + "-") and "-train" in name:
                import numpy as np

                found[corpus] = max(found[corpus] or 0, int(np.load(path, mmap_mode="r").shape[0]))
    return found


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=2, help="steps per shape per round")
    ap.add_argument("--warm", type=int, default=1)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    from residshift.core.profiles import get

    P = get("default")
    base_tokens = int(P["train_tokens"])
    base = default_shape()
    out: dict = {"cpu": cpu_facts(), "torch": torch.__version__, "base_shape": base,
                 "settings": {"rounds": args.rounds, "steps": args.steps, "warm": args.warm},
                 "budgets": [base_tokens * 4 ** k for k in range(RUNGS)], "shapes": {}}
    variants = {(name, prec): Variant(f"{name}-{prec}", shape, "baseline", prec == "bf16", False)
                for name, shape in shapes(base).items() for prec in ("fp32", "bf16")}
    for v in variants.values():
        v.warm(args.warm)
    for r in range(args.rounds):
        for (name, prec), v in variants.items():
            v.timed(args.steps)
            print(f"[bench_ladder_speed] round {r} {name} {prec}: {v.rates[-1]:,.0f} tok/s", flush=True)
    sizes = corpus_tokens()
    out["corpus_tokens"] = sizes
    lines = [f"{'shape':<8} {'params':>9} {'fp32 tok/s':>11} {'bf16 tok/s':>11}  hours per run at budget (faster precision)"]
    for name in shapes(base):
        fp32, bf16 = variants[(name, "fp32")], variants[(name, "bf16")]
        rate = max(fp32.tokens_per_s, bf16.tokens_per_s)
        n = parameters(fp32)
        rows = []
        for tokens in out["budgets"]:
            corpus = next((c for c, size in sizes.items() if size is not None and size >= tokens), None)
            rows.append({"tokens": tokens, "hours": round(tokens / rate / 3600, 3),
                         "tokens_per_parameter": round(tokens / n, 3), "corpus": corpus})
        out["shapes"][name] = {"n_layer": fp32.model.config.n_layer, "n_embd": fp32.model.config.n_embd,
                               "parameters": n, "fp32_tokens_per_s": round(fp32.tokens_per_s, 1),
                               "bf16_tokens_per_s": round(bf16.tokens_per_s, 1),
                               "fp32_rounds": [round(x, 1) for x in fp32.rates],
                               "bf16_rounds": [round(x, 1) for x in bf16.rates],
                               "faster": "bf16" if bf16.tokens_per_s > fp32.tokens_per_s else "fp32",
                               "budgets": rows}
        lines.append(f"{name:<8} {n:>9,} {fp32.tokens_per_s:>11,.0f} {bf16.tokens_per_s:>11,.0f}  "
                     + "  ".join(f"{r['tokens'] / 1e6:.1f}M: {r['hours']:.2f} h" for r in rows))
    out["load_1min_at_end"] = os.getloadavg()[0]
    lines.append(f"CPU {out['cpu']['cpu']} (native bf16: {', '.join(out['cpu']['native_bf16']) or 'none'}), "
                 f"{torch.get_num_threads()} threads, load {out['cpu']['load_1min']:.1f} -> {out['load_1min_at_end']:.1f}")
    print("\n".join(lines))
    if args.json:
        from residshift.core.cache import atomic_write_text

        atomic_write_text(Path(args.json), json.dumps(out, indent=2) + "\n")
    return out


if __name__ == "__main__":
    main()
