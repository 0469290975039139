"""What the sha256 check of verified torch files costs (``cache.save_verified`` / ``load_verified``)
against the plain atomic ``torch.save`` / ``torch.load`` they replaced, in one invocation.

Two payloads:

- checkpoint : a tensor dict of about 160 MB shaped like a SmolLM2-135M tuned-lens fit checkpoint
               (30 translators of 576 x 576 + 576, their two Adam moments and a best-state copy);
- entry      : a typical small cache entry (two [64, 31] KL tables and a 200-record history).

Each is saved and loaded plain and verified in alternating pairs (``--rounds``, 8; the small entry at least 20; plain first in even
rounds) in a temporary folder on the results disk (``--dir``); every time is a median, the ratios
are the medians of the per-round ratios, and the loaded values must equal the saved ones. The
sha256 of the serialized bytes alone is timed apart (MB/s). The CPU, its bf16 flag and the load
average are recorded beside the times.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_integrity.py --json benchmarks/bench-integrity.json

``--warm-cache RESULTS --runs RUNS.json`` prices the check on a real warm run instead: every cached
torch file under ``RESULTS`` (what a run of the notebooks left; one without its digest file is
skipped, as a run would recompute it) is loaded plain and verified, in
alternating order (``--rounds``, at least 3; plain is ``torch.load(weights_only=False)``, verified is
the digest check and ``weights_only=True``), and the added seconds are set against the wall time
of the warm run ``RUNS.json`` records for ``--notebooks`` at ``--profile``. A warm run loads each entry
about once, so the sum over entries is the check's cost on it. The check of each embedded model's
dequantized folder (its ``SHA256SUMS``), which every load of the model runs, is timed beside it, and
so is the corpus identity (``data.current_digest`` of every corpus split: hashed once per process,
then one ``stat`` per cache hit). Nothing in ``RESULTS`` is changed.
"""
from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from residshift.core import cache  # noqa: E402
from residshift.core.machine import cpu_facts  # noqa: E402


def checkpoint_payload(layers: int = 30, d: int = 576) -> dict:
    g = torch.Generator().manual_seed(0)

    def translators():
        return {f"translators.{l}.{k}": torch.randn(*shape, generator=g)
                for l in range(layers) for k, shape in (("weight", (d, d)), ("bias", (d,)))}

    return {"format": "residshift-fit/1", "module": translators(),
            "opt": {"state": {"exp_avg": translators(), "exp_avg_sq": translators()}},
            "state": {"step": 120, "best_state": translators(), "history": [{"step": s} for s in range(120)]}}


def entry_payload() -> dict:
    g = torch.Generator().manual_seed(1)
    return {"kl_logit": torch.rand(64, 31, generator=g), "kl_tuned": torch.rand(64, 31, generator=g),
            "history": [{"step": s, "loss": float(s), "parts": [0.1] * 30} for s in range(200)]}


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _plain(obj, path: Path) -> tuple[float, float, object]:
    t0 = time.perf_counter()
    cache.atomic_torch_save(obj, path)
    t1 = time.perf_counter()
    back = torch.load(path, weights_only=False)
    return t1 - t0, time.perf_counter() - t1, back


def _verified(obj, path: Path) -> tuple[float, float, object]:
    t0 = time.perf_counter()
    cache.save_verified(obj, path)
    t1 = time.perf_counter()
    back = cache.load_verified(path)
    return t1 - t0, time.perf_counter() - t1, back


def bench(name: str, obj, folder: Path, rounds: int) -> dict:
    buf = io.BytesIO()
    torch.save(obj, buf)
    data = buf.getbuffer()
    mb = len(data) / 1e6
    hashes = []
    for _ in range(max(3, rounds)):
        t0 = time.perf_counter()
        hashlib.sha256(data).hexdigest()
        hashes.append(time.perf_counter() - t0)
    del data, buf
    times: dict[str, dict[str, list[float]]] = {m: {"save": [], "load": []} for m in ("plain", "verified")}
    for r in range(rounds):
        for mode in (("plain", "verified") if r % 2 == 0 else ("verified", "plain")):
            path = folder / f"{name}-{mode}.pt"
            save_s, load_s, back = (_plain if mode == "plain" else _verified)(obj, path)
            if not _same(obj, back):
                raise SystemExit(f"{name} {mode}: the loaded value differs from the saved one")
            del back
            times[mode]["save"].append(save_s)
            times[mode]["load"].append(load_s)
            cache.discard_verified(path)
            print(f"[bench_integrity] {name} round {r} {mode}: save {save_s:.3f} s, load {load_s:.3f} s", flush=True)

    def med(xs):
        return round(statistics.median(xs), 5)

    def ratio(part):
        if part == "total":
            pairs = zip((s + l for s, l in zip(times["verified"]["save"], times["verified"]["load"])),
                        (s + l for s, l in zip(times["plain"]["save"], times["plain"]["load"])))
        else:
            pairs = zip(times["verified"][part], times["plain"][part])
        return round(statistics.median(v / p for v, p in pairs), 3)

    out = {"mb": round(mb, 3), "sha256_s": round(statistics.median(hashes), 6),
           "sha256_mb_per_s": round(mb / statistics.median(hashes), 1)}
    for mode in ("plain", "verified"):
        s, lo = med(times[mode]["save"]), med(times[mode]["load"])
        out[mode] = {"save_s": s, "load_s": lo, "save_s_all": [round(x, 5) for x in times[mode]["save"]],
                     "load_s_all": [round(x, 5) for x in times[mode]["load"]],
                     "save_mb_per_s": round(mb / s, 1), "load_mb_per_s": round(mb / lo, 1)}
    out["ratio_verified_to_plain"] = {"save": ratio("save"), "load": ratio("load"), "save_and_load": ratio("total")}
    # the two hashes (one on save, one on load) as a share of a plain save + load
    out["two_hashes_over_plain_save_and_load"] = round(
        2 * statistics.median(hashes) / (out["plain"]["save_s"] + out["plain"]["load_s"]), 3)
    return out


def warm_cache(results: Path, rounds: int) -> dict:
    """Plain vs verified load of every cached torch file under ``results`` (see the module docstring)."""
    files = sorted(p for p in results.rglob("*.pt") if p.is_file() and not p.name.startswith(".")
                   and cache.digest_path(p).is_file())  # one without its digest is refused, not loaded
    if not files:
        raise SystemExit(f"--warm-cache {results}: no cached .pt files there; run the notebooks first")
    plain, verified = [], []
    for r in range(max(3, rounds)):
        tp = tv = 0.0
        for path in files:
            for mode in (("plain", "verified") if r % 2 == 0 else ("verified", "plain")):
                t0 = time.perf_counter()
                if mode == "plain":
                    torch.load(path, weights_only=False)
                else:
                    cache.load_verified(path)
                dt = time.perf_counter() - t0
                if mode == "plain":
                    tp += dt
                else:
                    tv += dt
        plain.append(tp)
        verified.append(tv)
        print(f"[bench_integrity] warm cache round {r}: plain {tp:.2f} s, verified {tv:.2f} s", flush=True)
    kinds: dict[str, int] = {}
    for path in files:
        kinds[path.parent.name] = kinds.get(path.parent.name, 0) + 1
    mb = sum(p.stat().st_size for p in files) / 1e6
    return {"results": str(results), "files": len(files), "mb": round(mb, 1), "kinds": kinds,
            "plain_load_s": round(statistics.median(plain), 3), "verified_load_s": round(statistics.median(verified), 3),
            "added_s": round(statistics.median(v - p for v, p in zip(verified, plain)), 3),
            "plain_all": [round(x, 3) for x in plain], "verified_all": [round(x, 3) for x in verified]}


def corpus_digests(rounds: int) -> dict:
    """Hashing every corpus split once (a process's first read) and checking it again (each cache hit)."""
    from residshift.core import data

    labels = [f"{name}/{split}" for name, c in data.CORPORA.items() for split in c.files]
    first, again = [], []
    for _ in range(max(3, rounds)):
        data._DIGESTS.clear()
        t0 = time.perf_counter()
        for label in labels:
            data.current_digest(label)
        t1 = time.perf_counter()
        for label in labels:
            data.current_digest(label)
        first.append(t1 - t0)
        again.append(time.perf_counter() - t1)
    return {"splits": len(labels), "first_s": round(statistics.median(first), 4),
            "per_hit_check_s": round(statistics.median(again) / len(labels), 6)}


def model_folders(rounds: int) -> dict:
    """The SHA256SUMS check of each embedded model's dequantized folder, as every load runs it
    (``core.models.embedded._prepared``): seconds per load and MB hashed; unprepared models are skipped."""
    from residshift.core import models

    out = {}
    for name in models.EMBEDDED:
        folder = models.embedded_cache_path(name)
        if not (folder / cache.MANIFEST).is_file():
            continue
        times = []
        for _ in range(max(3, rounds)):
            t0 = time.perf_counter()
            cache.verify_manifest(folder)
            times.append(time.perf_counter() - t0)
        mb = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 1e6
        out[name] = {"mb": round(mb, 1), "check_s": round(statistics.median(times), 3),
                     "all_s": [round(x, 3) for x in times]}
    return out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--dir", default=None, help="where to write (default: a temporary folder in the results dir)")
    ap.add_argument("--json", default=None, help="also write the numbers to this file")
    ap.add_argument("--warm-cache", default=None, metavar="RESULTS",
                    help="price the check on the cached results a run left in this folder instead")
    ap.add_argument("--runs", default=None, help="with --warm-cache: the RUNS.json of that warm run")
    ap.add_argument("--profile", default="default", help="with --runs: the profile of the warm run")
    ap.add_argument("--notebooks", nargs="*", default=["00", "01", "02", "03", "04", "05"],
                    help="with --runs: the notebooks of the warm run (numbers)")
    args = ap.parse_args(argv)
    if args.warm_cache:
        out = {"cpu": cpu_facts(), "torch": torch.__version__, "rounds": max(3, args.rounds),
               "warm_cache": warm_cache(Path(args.warm_cache), args.rounds),
               "model_folders": model_folders(args.rounds), "corpus_digests": corpus_digests(args.rounds)}
        if args.runs:
            runs = json.loads(Path(args.runs).read_text()).get(args.profile, {})
            picked = {k: v for k, v in runs.items() if k[:2] in args.notebooks}
            wall = sum(float(v["wall_s"]) for v in picked.values())
            out["warm_run"] = {"profile": args.profile, "notebooks": sorted(picked), "wall_s": round(wall, 1),
                               "results_written": sum(int(v.get("results_written") or 0) for v in picked.values()),
                               "finished": max(str(v.get("finished")) for v in picked.values())}
            out["added_share_of_warm_run"] = round(out["warm_cache"]["added_s"] / wall, 4)
        out["load_1min_at_end"] = os.getloadavg()[0]
        print(json.dumps(out, indent=2))
        if args.json:
            cache.atomic_write_text(Path(args.json), json.dumps(out, indent=2) + "\n")
        return out
    base = Path(args.dir) if args.dir else cache.results_dir()
    base.mkdir(parents=True, exist_ok=True)
    out: dict = {"cpu": cpu_facts(), "torch": torch.__version__, "rounds": args.rounds}
    with tempfile.TemporaryDirectory(prefix=".bench-integrity-", dir=base) as folder:
        out["checkpoint"] = bench("checkpoint", checkpoint_payload(), Path(folder), args.rounds)
        out["entry"] = bench("entry", entry_payload(), Path(folder), max(args.rounds, 20))
    out["load_1min_at_end"] = os.getloadavg()[0]
    print(json.dumps(out, indent=2))
    if args.json:
        cache.atomic_write_text(Path(args.json), json.dumps(out, indent=2) + "\n")
    return out


if __name__ == "__main__":
    main()
