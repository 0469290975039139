"""Do the CPU's kernels decide the training numbers? The same short training run under each
kernel-path setting, each in its own process, its final weights hashed: run it on two machines and
compare the hashes of the same setting.

    .venv/bin/python benchmarks/cpu_repro.py --json benchmarks/cpu-repro-<machine>.json

The run: the ``default`` profile's model shape (6 blocks, width 128, 4 heads, context 128,
vocabulary 1,024, GELU, the gemma embedding), fp32, 2 threads, seed 0, ``--steps`` AdamW steps on
random token ids (the same ids on every machine: a seeded CPU generator), the trainer's step
(``bench_train.Variant``: loss, backward, clipping, fused AdamW). Settings (environment variables,
read when the process starts):

- ``default``: what the study runs today;
- ``MKL_CBWR=AVX2``: oneMKL's conditional numerical reproducibility on its AVX2 code path (oneMKL
  otherwise picks its kernels by CPU vendor and instruction set);
- ``MKL_CBWR=AVX2,STRICT``: the same, with strict reproducibility;
- ``MKL_CBWR=COMPATIBLE``: oneMKL's SSE2 path;
- ``+ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2``: also oneDNN and ATen's own vectorised
  kernels capped at AVX2.

Per setting: the sha256 of the final weights, the loss after each step, and the seconds per step
(the cost of the setting on this CPU).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SETTINGS = {
    "default": {},
    "MKL_CBWR=AVX2": {"MKL_CBWR": "AVX2"},
    "MKL_CBWR=AVX2,STRICT": {"MKL_CBWR": "AVX2,STRICT"},
    "MKL_CBWR=COMPATIBLE": {"MKL_CBWR": "COMPATIBLE"},
    "MKL_CBWR=AVX2,STRICT+ONEDNN+ATEN=AVX2": {"MKL_CBWR": "AVX2,STRICT", "ONEDNN_MAX_CPU_ISA": "AVX2",
                                               "ATEN_CPU_CAPABILITY": "avx2"},
}
SHAPE = dict(n_layer=6, n_head=4, n_embd=128, block_size=128, vocab_size=1024, batch=8)


def child(steps: int) -> dict:
    import torch

    sys.path.insert(0, str(HERE))
    torch.set_num_threads(2)
    from bench_train import Variant

    v = Variant("fp32", SHAPE, "baseline", False, False)
    g = torch.Generator().manual_seed(1)
    losses, t0 = [], time.perf_counter()
    for _ in range(steps):
        v.x = torch.randint(0, SHAPE["vocab_size"], (SHAPE["batch"], SHAPE["block_size"]), generator=g)
        losses.append(v.step())
    s = (time.perf_counter() - t0) / steps
    h = hashlib.sha256()
    for name, p in sorted(v.model.state_dict().items()):
        h.update(name.encode())
        h.update(p.detach().float().contiguous().numpy().tobytes())
    return {"sha256": h.hexdigest(), "losses": losses, "s_per_step": round(s, 4),
            "torch": torch.__version__, "mkl": torch.backends.mkl.is_available(),
            "cpu_capability": torch.backends.cpu.get_cpu_capability()}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--json", default=None)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.steps)))
        return {}
    from bench_train import _cpu_bf16_flags, _cpu_name

    out = {"cpu": _cpu_name(), "cpu_flags_bf16": _cpu_bf16_flags(), "steps": args.steps, "shape": SHAPE, "settings": {}}
    base = {k: v for k, v in os.environ.items() if k not in ("MKL_CBWR", "ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY")}
    for name, env in SETTINGS.items():
        proc = subprocess.run([sys.executable, __file__, "--child", "--steps", str(args.steps)],
                              env={**base, "OMP_NUM_THREADS": "2", **env}, capture_output=True, text=True)
        if proc.returncode:
            out["settings"][name] = {"error": proc.stderr[-800:]}
        else:
            out["settings"][name] = json.loads(proc.stdout.strip().splitlines()[-1])
        r = out["settings"][name]
        print(f"{name:<42} {r.get('sha256', 'ERROR')[:16]}  final loss {r.get('losses', [float('nan')])[-1]:.6f}  "
              f"{r.get('s_per_step', float('nan')):.3f} s/step  ({r.get('cpu_capability')})", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
    return out


if __name__ == "__main__":
    main()
