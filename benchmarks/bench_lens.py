"""Time the streamed lens metrics against a straightforward reference and the bare matmuls.

On the same windows, in one invocation:

- streamed  : residshift.measure.lens (one nnsight trace per batch saves h_0..h_L; then, per layer and
              chunk of positions, one unembedding matmul and a constant number of vocab-wide passes;
              ranks by counting logits strictly greater);
- reference : hidden states from ``output_hidden_states=True``, the full logits of every position
              per layer, ``log_softmax``, ranks by ``argsort`` of the vocabulary;
- bare      : the unembedding matmuls alone (final norm + ``@ E.T`` for every layer and position,
              same chunks), i.e. the floor any lens has to pay.

All three are given the same residuals' forward pass separately timed (``forward_s``); ratios
compare the lens work after the forward. Checks that streamed and reference agree (ranks exactly up
to float ties, log-probs / entropy / KL to 1e-3), prints the ratios and the peak resident memory of
each phase above its starting point (sampled every 5 ms from /proc/self/statm), and runs the
streamed pass at two corpus sizes to show its peak memory does not grow with the corpus.

    flock /tmp/residshift-heavy.lock env HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_lens.py
    ... --model gemma3-270m --tokens 1024 --bf16
"""
from __future__ import annotations

import argparse
import json
import os
import threading
import time
from contextlib import contextmanager

import torch

from residshift.core.unembed import Unembed
from residshift.measure import lens
from residshift.core.data import token_windows
from residshift.core.models import load_model

LOGIT_METRICS = ["rank", "logprob", "top1", "entropy", "kl_final"]
PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


@contextmanager
def peak_rss(box: dict, key: str, interval: float = 0.005):
    """Record the peak RSS above the starting RSS (MiB) while the block runs."""
    start = rss_bytes()
    peak = [start]
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            peak[0] = max(peak[0], rss_bytes())
            time.sleep(interval)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    t0 = time.perf_counter()
    try:
        yield
    finally:
        box[key + "_s"] = round(time.perf_counter() - t0, 3)
        stop.set()
        th.join()
        peak[0] = max(peak[0], rss_bytes())
        box[key + "_peak_mib"] = round((peak[0] - start) / 2**20, 1)
        box[key + "_peak_rss_mib"] = round(peak[0] / 2**20, 1)
        print(f"[bench_lens] {key}: {box[key + '_s']} s, peak +{box[key + '_peak_mib']} MiB", flush=True)


def residuals(lm, info, windows, batch):
    return [(w, lens.collect_residuals(lm, info, w)) for w in windows.split(batch)]


def streamed(info, batches, metrics, dtype):
    opt = lens.LensOptions(metrics=metrics, matmul_dtype=dtype, token_table=())
    out = [lens.residual_metrics(info, hs, ids, options=opt) for ids, hs in batches]
    return {k: torch.cat([o[k] for o in out], 1) for k in out[0]}


def bare(info, batches, dtype):
    unembed = Unembed(info, dtype=dtype)
    rows = max(1, (1 << 24) // info.vocab_size)
    checksum = 0.0
    with torch.no_grad():
        for ids, hs in batches:
            h = hs[:, :, 1:-1].reshape(hs.shape[0], -1, hs.shape[-1])
            for s in range(0, h.shape[1], rows):
                for l in range(h.shape[0]):
                    checksum += float(unembed(h[l, s:s + rows])[0, 0])
    return checksum


def reference(lm, info, windows, batch):
    """The straightforward way: output_hidden_states, full logits per layer, argsort ranks."""
    E = info.embedding.detach().float()
    cols: dict[str, list] = {}
    with torch.no_grad():
        for ids in windows.split(batch):
            hidden = lm._module(ids, output_hidden_states=True).hidden_states
            cur, nxt = ids[:, 1:-1], ids[:, 2:]
            per_layer: dict[str, list] = {}
            final_lp = None
            for l in reversed(range(len(hidden))):
                # transformers returns the last hidden state after the final norm already
                z = hidden[l] if l == len(hidden) - 1 else info.final_norm(hidden[l])
                logits = z[:, 1:-1].float() @ E.T
                if info.logit_softcap:
                    logits = info.logit_softcap * torch.tanh(logits / info.logit_softcap)
                lp = torch.log_softmax(logits, -1)
                if final_lp is None:
                    final_lp = lp
                order = torch.argsort(logits, dim=-1, descending=True)
                for which, tok in (("input", cur), ("next", nxt)):
                    rank = (order == tok[..., None]).int().argmax(-1) + 1
                    per_layer.setdefault(f"rank_{which}", []).append(rank.float())
                    per_layer.setdefault(f"logprob_{which}", []).append(lp.gather(-1, tok[..., None])[..., 0])
                    per_layer.setdefault(f"top1_{which}", []).append((order[..., 0] == tok).float())
                per_layer.setdefault("entropy", []).append(-(lp.exp() * lp).sum(-1))
                per_layer.setdefault("kl_final", []).append((final_lp.exp() * (final_lp - lp)).sum(-1))
                del logits, lp, order
            for k, v in per_layer.items():
                cols.setdefault(k, []).append(torch.stack(v[::-1]))
    return {k: torch.cat(v, 1) for k, v in cols.items()}


def compare(a: dict, b: dict) -> dict:
    """Per metric: share of equal values (ranks, top-1) or the largest relative difference
    ``|a - b| / max(1, |b|)`` (fp32 sums over a 50k-262k vocabulary differ in the last digits)."""
    out = {}
    for k in b:
        x, y = a[k].reshape(-1), b[k].reshape(-1)
        if k.startswith("rank") or k.startswith("top1"):
            out[k + "_agree"] = round(float((x == y).float().mean()), 6)
        else:
            out[k + "_maxreldiff"] = float(((x - y).abs() / y.abs().clamp_min(1)).max())
    return out


def curve_differences(a: dict, b: dict) -> dict:
    """Largest difference over layers of the per-layer mean of each metric (what the curves show)."""
    return {k: float((a[k].mean((1, 2)) - b[k].mean((1, 2))).abs().max()) for k in b}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--tokens", type=int, default=2048, help="total tokens (windows x window)")
    ap.add_argument("--window", type=int, default=128)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--bf16", action="store_true", help="also time the streamed pass with a bf16 matmul")
    ap.add_argument("--no-reference", action="store_true", help="skip the (slow) argsort reference")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--json", default=None, help="also write the numbers to this file")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    n = args.tokens // args.window
    if n < 2:
        raise SystemExit(f"--tokens {args.tokens} gives fewer than 2 windows of {args.window}")
    lm, tok, info = load_model(args.model)
    windows = token_windows("wikitext-103", "validation", tok, length=args.window, n=n, seed=0,
                            prepend_bos=info.prepend_bos)
    small = windows[: max(1, n // 4)]
    out: dict = {"model": args.model, "layers": info.n_layers + 1, "vocab": info.vocab_size,
                 "tokens": int(windows.numel()), "threads": torch.get_num_threads()}

    m: dict = {}
    with peak_rss(m, "forward"):
        batches = residuals(lm, info, windows, args.batch)
    small_batches = batches[: max(1, len(small) // args.batch)]
    with peak_rss(m, "streamed_quarter"):
        streamed(info, small_batches, LOGIT_METRICS, "float32")
    with peak_rss(m, "streamed"):
        fast = streamed(info, batches, LOGIT_METRICS, "float32")
    with peak_rss(m, "bare"):
        bare(info, batches, "float32")
    if args.bf16:
        with peak_rss(m, "streamed_bf16"):
            fast16 = streamed(info, batches, LOGIT_METRICS, "bfloat16")
        with peak_rss(m, "bare_bf16"):
            bare(info, batches, "bfloat16")
        out["bf16_vs_fp32"] = compare(fast16, fast)
        out["bf16_vs_fp32_curve_maxdiff"] = curve_differences(fast16, fast)
        # does bf16 change a conclusion? the per-layer top-1 curves and the shift layer
        from residshift.analysis.stats import shift_layer

        c32 = [fast[f"top1_{w}"].mean((1, 2)) for w in ("input", "next")]
        c16 = [fast16[f"top1_{w}"].mean((1, 2)) for w in ("input", "next")]
        out["bf16_top1_curve_maxdiff"] = float(max((a - b).abs().max() for a, b in zip(c32, c16)))
        out["shift_layer_top1_fp32"] = shift_layer(*c32)
        out["shift_layer_top1_bf16"] = shift_layer(*c16)
    out.update(m)
    if not args.no_reference:
        with peak_rss(m, "reference"):
            ref = reference(lm, info, windows, args.batch)
        out.update(m)
        out["check"] = compare(fast, ref)
        out["speedup_vs_reference"] = round(m["reference_s"] / max(m["streamed_s"], 1e-9), 2)
    out["ratio_vs_bare_matmul"] = round(m["streamed_s"] / max(m["bare_s"], 1e-9), 2)
    if args.bf16:
        out["ratio_bf16_vs_bare_bf16"] = round(m["streamed_bf16_s"] / max(m["bare_bf16_s"], 1e-9), 2)
    out["memory_flat"] = {"quarter_corpus_mib": m["streamed_quarter_peak_mib"],
                          "full_corpus_mib": m["streamed_peak_mib"]}
    print(json.dumps(out, indent=2))
    if args.json:
        from residshift.core.cache import atomic_write_text

        atomic_write_text(args.json, json.dumps(out, indent=2) + "\n")
    if not args.no_reference:
        bad = [k for k, v in out["check"].items()
               if (k.endswith("_agree") and v < 0.999) or (k.endswith("_maxreldiff") and v > 1e-3)]
        if bad:
            raise SystemExit(f"streamed and reference disagree on {bad}")
    return out


if __name__ == "__main__":
    main()
