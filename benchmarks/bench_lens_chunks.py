"""Unembedding chunk width: the streamed lens at ``chunk_elems`` 2^24 (64-341 rows of positions per
matmul for these vocabularies) against 2^26 (4x wider), on the same saved residuals, timed in pairs
that alternate which goes first, with a check that every metric is bit-identical.

Under ``MKL_CBWR=AVX2,STRICT`` (what the runner sets) a row's logits do not depend on how many rows
share its matmul, and every metric is a per-row reduction, so the two must agree exactly; the width only
changes how well the GEMM uses the CPU. Prints the CPU, the ratio per model and writes ``--json``.

    MKL_CBWR=AVX2,STRICT HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_lens_chunks.py \\
        --json benchmarks/bench-lens-chunks.json
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch

from residshift.core.data import token_windows
from residshift.core.forward import collect_residuals
from residshift.core.machine import cpu_facts
from residshift.core.models import load_model
from residshift.measure import lens

WIDTHS = (1 << 24, 1 << 26)


def timed(info, hs, ids, chunk_elems):
    t0 = time.perf_counter()
    out = lens.residual_metrics(info, hs, ids, options=lens.LensOptions(chunk_elems=chunk_elems))
    return time.perf_counter() - t0, out


def bench(name: str, windows: int, window: int, rounds: int) -> dict:
    lm, tok, info = load_model(name)
    ids = token_windows("wikitext-2", "test", tok, length=window, n=windows, seed=0, prepend_bos=info.prepend_bos)
    hs = collect_residuals(lm, info, ids)
    timed(info, hs[:, :1], ids[:1], WIDTHS[0])  # compile / warm once
    secs = {w: [] for w in WIDTHS}
    outs = {}
    for r in range(rounds):
        for w in (WIDTHS if r % 2 == 0 else WIDTHS[::-1]):
            s, outs[w] = timed(info, hs, ids, w)
            secs[w].append(s)
    narrow, wide = (statistics.median(secs[w]) for w in WIDTHS)
    same = all(torch.equal(outs[WIDTHS[0]][c], outs[WIDTHS[1]][c]) for c in outs[WIDTHS[0]])
    row = {"model": name, "vocab": info.vocab_size, "positions": int(ids.numel() - 2 * windows),
           "rows_per_chunk": [max(1, w // info.vocab_size) for w in WIDTHS],
           "seconds": {str(w): [round(x, 2) for x in secs[w]] for w in WIDTHS},
           "wide_over_narrow": round(wide / narrow, 3), "bit_identical": same}
    print(f"{name}: chunk rows {row['rows_per_chunk'][0]} -> {row['rows_per_chunk'][1]}: "
          f"{narrow:.1f} s -> {wide:.1f} s (ratio {wide / narrow:.3f}), bit-identical: {same}", flush=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["smollm2-135m", "gemma3-270m"])
    ap.add_argument("--windows", type=int, default=8)
    ap.add_argument("--window", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    facts = cpu_facts()
    print(f"CPU: {facts}; MKL_CBWR={os.environ.get('MKL_CBWR')}; torch threads {torch.get_num_threads()}")
    rows = [bench(m, args.windows, args.window, args.rounds) for m in args.models]
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": facts, "mkl_cbwr": os.environ.get("MKL_CBWR"), "widths": list(WIDTHS),
                       "windows": args.windows, "window": args.window, "rows": rows}, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
