"""Time the streamed lens metrics against a straightforward reference and the bare matmuls.

On the same windows, in one invocation:

- streamed  : residshift.measure.lens (one nnsight trace per batch saves h_0..h_L; then, per chunk of
              positions and layer, one unembedding matmul and one fused metric function, compiled
              with torch.compile: two loops over the vocabulary that write nothing vocabulary-sized);
- eager     : the same pass with the metric function run op by op (``lens.COMPILE = "never"``: what
              runs where compiling is unavailable, or for passes too small to pay for it);
- reference : the package's reference lens, ``lens.reference_metrics`` (the oracle the tests hold
              every fast path to): the full logits of every position per layer from the model's own
              final norm and tied matrix, ``log_softmax``, ranks by counting the logits strictly
              greater; on the same saved residuals;
- bare      : the unembedding matmuls alone (final norm + ``@ E.T`` for every layer and position,
              same chunks), i.e. the floor any lens has to pay.

The residuals' forward pass is timed separately (``forward_s``; the reference reads the same
residuals); the ratios compare the lens work after it. The CPU is shared, so every comparison is
timed in pairs, batch by batch, alternating which of the two goes first: ``--rounds`` rounds of
(bare, streamed), whose per-round ratios give ``ratio_vs_bare_matmul`` (their median); one round
each of (bare, eager), (bare bf16, streamed bf16) and (streamed, reference). The 1-minute load
average is recorded around every round. ``compile_s`` is the first call of the compiled functions
in this process, with an empty inductor cache unless ``--warm-compile`` (the cost a fresh clone
pays once per process), and ``compile_pays_at_default`` weighs it against the eager time it saves
over the default profile's lens pass on this model.

Checks that streamed and reference agree (ranks exactly up to float ties, log-probs / entropy / KL
to 1e-3 relative), measures which of the two is closer to a float64 computation on a few hundred
positions, prints the peak resident memory of each pass above its starting point (sampled every
5 ms from /proc/self/statm), and runs the streamed pass at two corpus sizes to show its peak memory
does not grow with the corpus.

    flock /tmp/residshift-heavy.lock env HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_lens.py \\
        --bf16 --json benchmarks/bench-lens.json
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from contextlib import contextmanager

if __name__ == "__main__" and "--warm-compile" not in sys.argv and "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
    # a cold compile, as on a fresh clone: an empty inductor cache for this process (before torch loads)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="bench-lens-inductor-")

import torch

from residshift.core import forward
from residshift.core.unembed import Unembed
from residshift.measure import lens
from residshift.core.data import token_windows
from residshift.core.models import load_model

LOGIT_METRICS = ["rank", "logprob", "top1", "entropy", "kl_final"]
# the reference's columns, in the order of the JSON's "check" (as written before the reference lens)
REFERENCE_COLUMNS = ("rank_input", "logprob_input", "top1_input", "rank_next", "logprob_next", "top1_next",
                     "entropy", "kl_final")
PAGE = os.sysconf("SC_PAGE_SIZE")
REFERENCE_WHAT = "the package's reference lens (lens.reference_metrics: full logits, log_softmax, ranks by counting)"


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


def load1() -> float:
    return round(os.getloadavg()[0], 2)


@contextmanager
def peak_rss(box: dict, key: str, interval: float = 0.005, quiet: bool = False):
    """Record seconds, the peak RSS above the starting RSS (MiB) and the load average around the block."""
    start = rss_bytes()
    peak = [start]
    stop = threading.Event()
    load_before = load1()

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
        box[key + "_load"] = [load_before, load1()]
        if not quiet:
            print(f"[bench_lens] {key}: {box[key + '_s']} s, peak +{box[key + '_peak_mib']} MiB, "
                  f"load {box[key + '_load']}", flush=True)


def residuals(lm, info, windows, batch):
    return [(w, forward.collect_residuals(lm, info, w)) for w in windows.split(batch)]


def streamed_one(info, ids, hs, dtype, mode="always"):
    old, lens.COMPILE = lens.COMPILE, mode
    try:
        opt = lens.LensOptions(metrics=LOGIT_METRICS, matmul_dtype=dtype, token_table=())
        return lens.residual_metrics(info, hs, ids, options=opt)
    finally:
        lens.COMPILE = old


def streamed(info, batches, dtype, mode="always"):
    return cat([streamed_one(info, ids, hs, dtype, mode) for ids, hs in batches])


def cat(parts: list[dict]) -> dict:
    return {k: torch.cat([o[k] for o in parts], 1) for k in parts[0]}


def bare_one(info, ids, hs, dtype):
    """The unembedding matmuls alone: final norm + ``@ E.T`` per layer, in the lens's chunks."""
    unembed = Unembed(info, dtype=dtype)
    rows = max(1, lens.LensOptions().chunk_elems // info.vocab_size)
    checksum = 0.0
    with torch.no_grad():
        h = hs[:, :, 1:-1].reshape(hs.shape[0], -1, hs.shape[-1])
        for s in range(0, h.shape[1], rows):
            for l in range(h.shape[0]):
                checksum += float(unembed(h[l, s:s + rows])[0, 0])
    return checksum


def reference_one(info, ids, hs, dtype=torch.float32):
    """The package's reference lens (:func:`residshift.measure.lens.reference_metrics`) on the
    metrics the streamed pass computes here."""
    ref = lens.reference_metrics(info, hs, ids, dtype=dtype)
    return {c: ref[c] for c in REFERENCE_COLUMNS}


def paired(name_a, run_a, name_b, run_b, n, box, round_no=0):
    """Run ``run_a(i)`` and ``run_b(i)`` for every batch ``i``, alternating which goes first, so both
    see the same machine load; returns their outputs and adds seconds, peak memory and load to ``box``."""
    out_a, out_b = [], []
    t = {name_a: 0.0, name_b: 0.0}
    peaks = {name_a: 0.0, name_b: 0.0}
    load = [load1()]
    for i in range(n):
        order = [(name_a, run_a, out_a), (name_b, run_b, out_b)]
        if (i + round_no) % 2:
            order.reverse()
        for name, run, dest in order:
            m: dict = {}
            with peak_rss(m, name, quiet=True):
                dest.append(run(i))
            t[name] += m[name + "_s"]
            peaks[name] = max(peaks[name], m[name + "_peak_mib"])
    load.append(load1())
    for name in (name_a, name_b):
        box[name + "_s"] = round(t[name], 3)
        box[name + "_peak_mib"] = peaks[name]
        box[name + "_load"] = load
    print(f"[bench_lens] round {round_no}: {name_a} {t[name_a]:.1f} s, {name_b} {t[name_b]:.1f} s, "
          f"ratio {t[name_b] / t[name_a]:.3f}, load {load}", flush=True)
    return out_a, out_b


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


def float64_check(info, windows, hs, fast: dict, ref: dict) -> dict:
    """Largest |difference| to a float64 computation of log-prob / entropy / KL on the first
    windows (``hs``: their residuals), for the streamed pass and for the fp32 reference."""
    k_win = hs.shape[1]
    truth = reference_one(info, windows[:k_win], hs, dtype=torch.float64)
    out = {}
    for k in ("logprob_next", "entropy", "kl_final"):
        t = truth[k].double()
        out[k] = {"streamed": float((fast[k][:, :k_win].double() - t).abs().max()),
                  "reference": float((ref[k][:, :k_win].double() - t).abs().max())}
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
    ap.add_argument("--rounds", type=int, default=3, help="rounds of the interleaved streamed / bare pair")
    ap.add_argument("--bf16", action="store_true", help="also time the streamed pass with a bf16 matmul")
    ap.add_argument("--no-reference", action="store_true", help="skip the (slow) reference lens")
    ap.add_argument("--warm-compile", action="store_true",
                    help="keep inductor's on-disk cache (default: time a cold compile)")
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
    out: dict = {"model": args.model, "layers": info.n_layers + 1, "vocab": info.vocab_size,
                 "tokens": int(windows.numel()), "threads": torch.get_num_threads(),
                 "rounds": args.rounds, "cpu_count": os.cpu_count(), "load_at_start": load1(),
                 "cold_compile": not args.warm_compile,
                 "chunk_rows": max(1, lens.LensOptions().chunk_elems // info.vocab_size)}

    m: dict = {}
    with peak_rss(m, "forward"):
        batches = residuals(lm, info, windows, args.batch)
    nb = len(batches)
    # the compile (first call of each dtype's graphs), on one window; minus the eager time of that window
    warm = [(ids[:1], hs[:, :1]) for ids, hs in batches[:1]]
    with peak_rss(m, "compile"):
        streamed(info, warm, "float32")
    if args.bf16:
        with peak_rss(m, "compile_bf16"):
            streamed(info, warm, "bfloat16")
    with peak_rss(m, "eager_one_window"):
        streamed(info, warm, "float32", mode="never")
    out["compile_s"] = round(m["compile_s"] - m["eager_one_window_s"], 3)

    def run_bare(dtype):
        return lambda i: bare_one(info, *batches[i], dtype)

    def run_streamed(dtype, mode="always"):
        return lambda i: streamed_one(info, *batches[i], dtype, mode)

    rounds: list[dict] = []
    for r in range(args.rounds):
        rm: dict = {}
        _, fast = paired("bare", run_bare("float32"), "streamed", run_streamed("float32"), nb, rm, r)
        fast = cat(fast)
        rounds.append(rm)
    out["rounds_detail"] = rounds
    series = lambda key: [rd[key + "_s"] for rd in rounds]  # noqa: E731
    out["bare_s"] = round(statistics.mean(series("bare")), 3)
    out["streamed_s"] = round(statistics.mean(series("streamed")), 3)
    out["streamed_peak_mib"] = max(rd["streamed_peak_mib"] for rd in rounds)
    out["ratio_vs_bare_matmul"] = round(statistics.median(
        a / b for a, b in zip(series("streamed"), series("bare"))), 3)
    out["ratio_vs_bare_matmul_rounds"] = [round(a / b, 3) for a, b in zip(series("streamed"), series("bare"))]

    em: dict = {}
    _, slow = paired("bare", run_bare("float32"), "eager", run_streamed("float32", "never"), nb, em)
    slow = cat(slow)
    out.update(eager_s=em["eager_s"], eager_peak_mib=em["eager_peak_mib"], eager_load=em["eager_load"],
               bare_with_eager_s=em["bare_s"])
    out["ratio_eager_vs_bare_matmul"] = round(em["eager_s"] / em["bare_s"], 3)
    out["speedup_compiled_vs_eager"] = round(out["ratio_eager_vs_bare_matmul"] / out["ratio_vs_bare_matmul"], 3)
    out["agreement_compiled_vs_eager"] = compare(fast, slow)

    if args.bf16:
        bm: dict = {}
        _, fast16 = paired("bare_bf16", run_bare("bfloat16"), "streamed_bf16", run_streamed("bfloat16"), nb, bm)
        fast16 = cat(fast16)
        for k in ("bare_bf16", "streamed_bf16"):
            out.update({k + "_s": bm[k + "_s"], k + "_peak_mib": bm[k + "_peak_mib"], k + "_load": bm[k + "_load"]})
        out["ratio_bf16_vs_bare_bf16"] = round(bm["streamed_bf16_s"] / bm["bare_bf16_s"], 3)
        out["bf16_matmul_vs_fp32_matmul"] = round(bm["bare_bf16_s"] / out["bare_s"], 2)
        out["bf16_vs_fp32"] = compare(fast16, fast)
        out["bf16_vs_fp32_curve_maxdiff"] = curve_differences(fast16, fast)
        # does bf16 change a conclusion? the per-layer top-1 curves and the shift layer
        from residshift.analysis.stats import shift_layer

        c32 = [fast[f"top1_{w}"].mean((1, 2)) for w in ("input", "next")]
        c16 = [fast16[f"top1_{w}"].mean((1, 2)) for w in ("input", "next")]
        out["bf16_top1_curve_maxdiff"] = float(max((a - b).abs().max() for a, b in zip(c32, c16)))
        out["shift_layer_top1_fp32"] = shift_layer(*c32)
        out["shift_layer_top1_bf16"] = shift_layer(*c16)

    ref = None
    if not args.no_reference:
        rm = {}
        _, ref = paired("streamed", run_streamed("float32"), "reference",
                        lambda i: reference_one(info, *batches[i]), nb, rm)
        ref = cat(ref)
        out["reference"] = REFERENCE_WHAT
        out.update(reference_s=rm["reference_s"], reference_peak_mib=rm["reference_peak_mib"],
                   reference_load=rm["reference_load"], streamed_with_reference_s=rm["streamed_s"])
        out["speedup_vs_reference"] = round(rm["reference_s"] / rm["streamed_s"], 2)
        out["reference_vs_bare_matmul"] = round(rm["reference_s"] / rm["streamed_s"] * out["ratio_vs_bare_matmul"], 2)
        if args.bf16:
            out["speedup_bf16_vs_reference"] = round(
                out["speedup_vs_reference"] * out["streamed_s"] / out["streamed_bf16_s"], 2)
        out["check"] = compare(fast, ref)
        out["float64_check"] = float64_check(info, windows, forward.collect_residuals(lm, info, windows[:2]),
                                             fast, ref)

    # memory: the streamed pass on a quarter of the windows and on all of them (same batches)
    quarter, left = [], max(1, n // 4)
    for ids, hs in batches:
        if left > 0:
            quarter.append((ids[:left], hs[:, :left]))
            left -= ids.shape[0]
    with peak_rss(m, "streamed_quarter"):
        streamed(info, quarter, "float32")
    with peak_rss(m, "streamed_full"):
        streamed(info, batches, "float32")
    for key in ("forward", "compile", "eager_one_window", "streamed_quarter", "streamed_full") + (
            ("compile_bf16",) if args.bf16 else ()):
        for suffix in ("_s", "_peak_mib", "_load"):
            out[key + suffix] = m[key + suffix]
    out["memory_flat"] = {"quarter_corpus_mib": m["streamed_quarter_peak_mib"],
                          "full_corpus_mib": m["streamed_full_peak_mib"]}
    # does compiling pay at the default profile's lens pass on this model? (eager time saved per
    # unembedded logit, times the logits of that pass, against the one-off compile)
    from residshift.core import profiles

    P = profiles.resolve("default")
    pos = P.lens_positions or (P.lens_window - 2)
    logits_default = P.lens_windows * pos * (info.n_layers + 1) * info.vocab_size
    logits_here = (windows.shape[1] - 2) * windows.shape[0] * (info.n_layers + 1) * info.vocab_size
    saved = (out["eager_s"] - out["bare_with_eager_s"] * out["ratio_vs_bare_matmul"]) / logits_here * logits_default
    out["compile_pays_at_default"] = {"default_logits": logits_default, "eager_time_saved_s": round(saved, 1),
                                      "compile_s": out["compile_s"], "pays": saved > out["compile_s"]}
    out["load_at_end"] = load1()
    loads = [x for k, v in out.items() if k.endswith("_load") for x in v]
    loads += [x for rd in rounds for k, v in rd.items() if k.endswith("_load") for x in v]
    out["load_during"] = [min(loads), max(loads)]
    print(json.dumps({k: v for k, v in out.items() if k != "rounds_detail"}, indent=2))
    if args.json:
        from residshift.core.cache import atomic_write_text

        atomic_write_text(args.json, json.dumps(out, indent=2) + "\n")
    if ref is not None:
        bad = [k for k, v in out["check"].items()
               if (k.endswith("_agree") and v < 0.999) or (k.startswith("logprob") and v > 1e-3)]
        worse = [k for k, v in out["float64_check"].items() if v["streamed"] > max(1e-3, 2 * v["reference"])]
        if bad or worse:
            raise SystemExit(f"streamed and reference disagree on {bad + worse}")
    return out


if __name__ == "__main__":
    main()
