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
(the cost of the setting on this CPU). ``--mode learned-token`` trains the token-gated model instead
(gates at ``theta_init`` 3, as the grid's): its gate logit ``LN(x) . w`` is a matrix-vector product,
which oneMKL's strict reproducibility does not cover (it names the level-3 products such as ?gemm).

A whole grid on two machines: ``--compare-curves A B`` reads two notebook-06 curve files (validation
loss of each variant, mean over seeds, after every evaluation) and says per variant whether they are
identical, else the largest difference:

    .venv/bin/python benchmarks/cpu_repro.py --compare-curves <(git show C:figures/06-...-curves.json) \
        figures/06-training-with-attenuation-curves.json --labels "Intel Xeon" "AMD EPYC" --json F
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


def child(steps: int, mode: str = "baseline") -> dict:
    import torch

    sys.path.insert(0, str(HERE))
    torch.set_num_threads(2)
    from bench_train import MODES, Variant

    if mode in ("learned", "learned-token"):
        MODES[mode] = {"theta_init": 3.0}
    v = Variant("fp32", SHAPE, mode, False, False)
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


def _write(path: Path, data: dict) -> None:
    """Whole or not at all: a temporary file beside ``path``, then a rename."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)


def compare_curves(a: dict, b: dict, labels: tuple[str, str]) -> dict:
    """Per variant of two notebook-06 curve files: identical, or the largest |difference| in validation loss."""
    out = {"labels": list(labels), "variants": {}}
    for name in sorted(set(a) | set(b)):
        if name not in a or name not in b:
            out["variants"][name] = {"only_in": labels[0] if name in a else labels[1]}
            continue
        x, y = a[name]["val_loss"], b[name]["val_loss"]
        diff = max(abs(u - v) for u, v in zip(x, y)) if len(x) == len(y) else None
        out["variants"][name] = {"identical": x == y, "max_abs_diff": diff, "final": [x[-1], y[-1]]}
    same = [n for n, r in out["variants"].items() if r.get("identical")]
    out["identical"] = f"{len(same)} of {len(out['variants'])} variants"
    return out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--mode", default="baseline", choices=["baseline", "learned", "learned-token"])
    ap.add_argument("--json", default=None)
    ap.add_argument("--compare-curves", nargs=2, metavar=("A", "B"), default=None)
    ap.add_argument("--labels", nargs=2, default=("A", "B"))
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.steps, args.mode)))
        return {}
    if args.compare_curves:
        a, b = (json.loads(Path(f).read_text()) for f in args.compare_curves)
        out = compare_curves(a, b, tuple(args.labels))
        for name, r in out["variants"].items():
            print(f"{name:<30} {'identical' if r.get('identical') else r}")
        print(f"identical: {out['identical']}")
        if args.json:
            _write(Path(args.json), out)
        return out
    from bench_train import _cpu_bf16_flags, _cpu_name

    out = {"cpu": _cpu_name(), "cpu_flags_bf16": _cpu_bf16_flags(), "steps": args.steps, "mode": args.mode,
           "shape": SHAPE, "settings": {}}
    base = {k: v for k, v in os.environ.items() if k not in ("MKL_CBWR", "ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY")}
    for name, env in SETTINGS.items():
        proc = subprocess.run([sys.executable, __file__, "--child", "--steps", str(args.steps), "--mode", args.mode],
                              env={**base, "OMP_NUM_THREADS": "2", **env}, capture_output=True, text=True)
        if proc.returncode:
            out["settings"][name] = {"error": proc.stderr[-800:]}
        else:
            out["settings"][name] = json.loads(proc.stdout.strip().splitlines()[-1])
        r = out["settings"][name]
        print(f"{name:<42} {r.get('sha256', 'ERROR')[:16]}  final loss {r.get('losses', [float('nan')])[-1]:.6f}  "
              f"{r.get('s_per_step', float('nan')):.3f} s/step  ({r.get('cpu_capability')})", flush=True)
    if args.json:
        _write(Path(args.json), out)
    return out


if __name__ == "__main__":
    main()
