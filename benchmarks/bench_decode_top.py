"""Time ``lens.decode_top``'s unembedding (``lens.top_tokens``: every layer in one chunked pass over
the vocabulary) against the old path (one full unembedding and softmax per layer), on the profile's
example sentences, in one invocation.

Both read the same saved residuals (the forward pass is timed apart); they are timed in alternating
pairs (``--rounds``), the ratio is the median of the per-round ratios, and the two must return the
same top-k tokens. The CPU, its bf16 flag and the load average are recorded beside the times.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_decode_top.py --json benchmarks/bench-decode-top.json
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from residshift.core import profiles  # noqa: E402
from residshift.core.forward import collect_residuals  # noqa: E402
from residshift.core.models import load_model  # noqa: E402
from residshift.core.unembed import Unembed  # noqa: E402
from residshift.measure import lens  # noqa: E402
from residshift.core.machine import cpu_facts  # noqa: E402


def old_path(info, hs, k):
    """The per-layer path decode_top used before (the reference of this benchmark)."""
    unembed = Unembed(info).logits
    top_ids, top_p = [], []
    for l in range(info.n_layers + 1):
        lg = unembed(lens.normed(info, hs[l], l))
        p, i = torch.softmax(lg, -1).topk(k, dim=-1)
        top_ids.append(i)
        top_p.append(p)
    return torch.stack(top_ids), torch.stack(top_p)


def new_path(info, hs, k):
    """What decode_top runs after its forward pass (``lens.top_tokens``)."""
    return lens.top_tokens(info, hs, k=k)


def _timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="*", default=["smollm2-135m", "gemma3-270m"])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--k", type=int, default=1)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    sentences = profiles.get("default")["lens_sentences"]
    out = {"cpu": cpu_facts(), "sentences": len(sentences), "k": a.k, "chunk": lens.DECODE_CHUNK, "models": {}}
    for name in a.models:
        lm, tok, info = load_model(name)
        rows = []
        for sentence in sentences:
            ids = lens.encode(tok, info, sentence)
            fwd, hs = _timed(lambda: collect_residuals(lm, info, ids))
            pairs = []
            for r in range(a.rounds):
                order = (old_path, new_path) if r % 2 == 0 else (new_path, old_path)
                times = {}
                for fn in order:
                    times[fn.__name__], res = _timed(lambda: fn(info, hs, a.k))
                    times[fn.__name__ + "_out"] = res
                assert torch.equal(times["old_path_out"][0], times["new_path_out"][0]), "top-k tokens differ"
                torch.testing.assert_close(times["old_path_out"][1], times["new_path_out"][1], rtol=1e-4, atol=1e-6)
                pairs.append((times["old_path"], times["new_path"]))
            rows.append({"tokens": int(ids.shape[1]), "forward_s": round(fwd, 3),
                         "old_s": round(statistics.median(p[0] for p in pairs), 3),
                         "new_s": round(statistics.median(p[1] for p in pairs), 3),
                         "speedup": round(statistics.median(p[0] / p[1] for p in pairs), 2)})
        out["models"][name] = {"vocab": info.vocab_size, "layers": info.n_layers, "sentences": rows,
                               "speedup_median": statistics.median(r["speedup"] for r in rows),
                               "load_avg_1m": os.getloadavg()[0]}
        print(f"{name}: old {sum(r['old_s'] for r in rows):.2f} s, chunked {sum(r['new_s'] for r in rows):.2f} s "
              f"for {len(rows)} sentences (median speed-up {out['models'][name]['speedup_median']:.1f}x; "
              f"load {os.getloadavg()[0]:.1f})")
    print(f"CPU: {out['cpu'].get('model', out['cpu'])}")
    if a.json:
        tmp = Path(a.json).with_suffix(".tmp")
        tmp.write_text(json.dumps(out, indent=1) + "\n")
        tmp.replace(a.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
