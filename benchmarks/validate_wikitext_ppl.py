"""Our document perplexity vs lm-evaluation-harness's ``wikitext`` task, document by document.

    make .venv-lmeval/.installed     # the side environment (the `validate` extra's pins), then:
    RESIDSHIFT_DATA=... HF_HUB_OFFLINE=1 .venv-lmeval/bin/python benchmarks/validate_wikitext_ppl.py \\
        [--models smollm2-135m gemma3-270m] [--limit N] [--max-length L] [--threads 2]

Both sides score the same articles of WikiText-2 test (``evaluate.wikitext_documents``: our -v1 file
cut as ``EleutherAI/wikitext_document_level`` is; 62 articles), the first ``--limit`` of the seeded
shuffle (``evaluate.select_items``, seed 0), with the same ``max_length``:

- lm-eval: its own ``wikitext`` task (``benchmarks/lm_eval_tasks/wikitext_local.yaml`` includes it and
  overrides only where the pages come from: a staged ``{"page": ...}`` JSON-lines file), run by
  ``simple_evaluate`` with ``samples=`` on ``HFLM(pretrained=<the dequantized fp32 folder>,
  max_length=L, add_bos_token=False)``. ``add_bos_token=False``: HFLM otherwise tokenizes a page with
  the tokenizer's defaults, which for Gemma-3 put ``<bos>`` after the ``<bos>`` prefix token it
  already adds (the first scored token would be a second BOS); SmolLM2's tokenizer adds nothing
  either way.
- ours: ``evaluate.document_perplexity`` (lm-eval's detokenizer, word and byte counts, rolling
  windows and weighted perplexity, reimplemented on our scoring core).

Compared per article: the detokenized string each side scores, lm-eval's tokens vs ours, the summed
log-likelihood (|difference|), the word and byte counts; then word perplexity, byte perplexity and
bits per byte both ways (and lm-eval's own aggregate). Writes ``benchmarks/wikitext-ppl-agreement.json``
(one entry per model; a rerun for some models keeps the others').
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np


os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

HERE = Path(__file__).resolve().parent
TASK = "wikitext_local"
YAML = HERE / "lm_eval_tasks" / f"{TASK}.yaml"
DATA = "data/wikitext_2_test_pages.jsonl"
MODELS = ("smollm2-135m", "gemma3-270m")
N_PAGES = 62  # articles in WikiText-2 test (EleutherAI/wikitext_document_level has the same)


def stage(folder: Path, lm_eval_tasks: Path, pages: Sequence[str]) -> Path:
    """``folder/tasks/wikitext_local.yaml``, ``folder/lm_eval_tasks`` (a link to the installed
    tasks) and ``folder/data/...jsonl`` (one ``{"page": ...}`` per article, in file order)."""
    if not (lm_eval_tasks / "wikitext" / "wikitext.yaml").is_file():
        raise FileNotFoundError(f"{lm_eval_tasks} is not lm-eval's task folder (no wikitext/wikitext.yaml)")
    folder = Path(folder)
    (folder / "tasks").mkdir(parents=True, exist_ok=True)
    (folder / "data").mkdir(parents=True, exist_ok=True)
    link = folder / "lm_eval_tasks"
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(lm_eval_tasks.resolve(), target_is_directory=True)
    shutil.copyfile(YAML, folder / "tasks" / YAML.name)
    (folder / DATA).write_text("".join(json.dumps({"page": p}, ensure_ascii=False) + "\n" for p in pages),
                               encoding="utf-8")
    return folder


def compare_documents(ours: dict[int, dict[str, Any]], theirs: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """Per-document agreement: ``{doc: {ll, words, bytes, text?, tokens?}}`` on each side."""
    if sorted(ours) != sorted(theirs):
        raise ValueError(f"the two sides scored different documents: {sorted(ours)} vs {sorted(theirs)}")
    if not ours:
        raise ValueError("no documents to compare")
    rows = []
    for d in sorted(ours):
        o, t = ours[d], theirs[d]
        rows.append({"doc": d, "ll_ours": o["ll"], "ll_lm_eval": t["ll"], "abs_diff": abs(o["ll"] - t["ll"]),
                     "rel_diff": abs(o["ll"] - t["ll"]) / max(1e-12, abs(t["ll"])),
                     "words_ours": o["words"], "words_lm_eval": t["words"],
                     "bytes_ours": o["bytes"], "bytes_lm_eval": t["bytes"],
                     "same_text": o.get("text") == t.get("text") if "text" in t else None,
                     "same_tokens": o.get("tokens") == t.get("tokens") if "tokens" in t else None,
                     "tokens": o.get("n_tokens"), "windows": o.get("windows")})

    def agg(side: str) -> dict[str, float]:
        ll = sum(r[f"ll_{side}"] for r in rows)
        words = sum(r[f"words_{side}"] for r in rows)
        nbytes = sum(r[f"bytes_{side}"] for r in rows)
        return {"word_perplexity": math.exp(-ll / words), "byte_perplexity": math.exp(-ll / nbytes),
                "bits_per_byte": -ll / nbytes / math.log(2), "loglikelihood": ll, "words": words, "bytes": nbytes}

    worst = max(rows, key=lambda r: r["abs_diff"])
    a, b = agg("ours"), agg("lm_eval")
    return {"n": len(rows), "documents": rows, "ours": a, "lm_eval": b,
            "max_abs_diff": worst["abs_diff"], "max_rel_diff": max(r["rel_diff"] for r in rows),
            "worst_doc": worst["doc"],
            "same_words": all(r["words_ours"] == r["words_lm_eval"] for r in rows),
            "same_bytes": all(r["bytes_ours"] == r["bytes_lm_eval"] for r in rows),
            "same_text": all(r["same_text"] for r in rows if r["same_text"] is not None),
            "same_tokens": all(r["same_tokens"] for r in rows if r["same_tokens"] is not None),
            "word_ppl_rel_diff": abs(a["word_perplexity"] - b["word_perplexity"]) / b["word_perplexity"]}


def ours_side(lm, info, tok, pages, items, max_length: int, batch: int) -> dict[str, Any]:
    from residshift.measure import evaluate as ev

    t0 = time.perf_counter()
    items = [int(i) for i in items]
    res = ev.document_perplexity(lm, info, tok, [pages[i] for i in items], max_length=max_length,
                                 config=ev.EvalConfig(batch_size=batch), cache=False, progress=True)
    seconds = time.perf_counter() - t0
    d = res.details
    docs = {}
    for k, j in enumerate(d["documents"]):
        i = items[int(j)]
        text = ev.lm_eval_detokenize(pages[i])
        docs[i] = {"ll": -float(d["doc_nll"][k]), "words": int(d["doc_words"][k]),
                   "bytes": int(d["doc_bytes"][k]), "n_tokens": int(d["doc_tokens"][k]),
                   "windows": int(d["doc_windows"][k]), "text": text, "tokens": ev.encode(tok, text)}
    return {"docs": docs, "seconds": seconds,
            "metrics": {k: v[0] for k, v in res.metrics.items()}, "config": res.config}


def lm_eval_side(folder: Path, stage_dir: Path, items, max_length: int, batch: int) -> dict[str, Any]:
    import lm_eval
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    from residshift.measure.evaluate import model_fingerprint

    t0 = time.perf_counter()
    hflm = HFLM(pretrained=str(folder), dtype="float32", device="cpu", batch_size=batch,
                max_length=max_length, add_bos_token=False)
    with contextlib.chdir(stage_dir):
        manager = TaskManager(include_path=str(stage_dir / "tasks"), include_defaults=False)
        res = lm_eval.simple_evaluate(model=hflm, tasks=[TASK], task_manager=manager, num_fewshot=0,
                                      samples={TASK: sorted(int(i) for i in items)}, bootstrap_iters=0,
                                      log_samples=True, cache_requests=False)
    seconds = time.perf_counter() - t0
    docs = {}
    for x in res["samples"][TASK]:
        (text,) = x["arguments"][0]
        ll, words = x["word_perplexity"]
        ll_b, nbytes = x["byte_perplexity"]
        assert ll == ll_b
        docs[int(x["doc_id"])] = {"ll": float(ll), "words": int(words), "bytes": int(nbytes), "text": text,
                                  "tokens": list(hflm.tok_encode(text))}
    aggregate = {k.split(",")[0]: v for k, v in res["results"][TASK].items()
                 if "," in k and "stderr" not in k and isinstance(v, (int, float))}
    return {"docs": docs, "seconds": seconds, "aggregate": aggregate,
            "prefix_token_id": int(hflm.prefix_token_id), "max_length": int(hflm.max_length),
            "weights": model_fingerprint(hflm.model)}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", default=list(MODELS), choices=list(MODELS))
    pick = ap.add_mutually_exclusive_group()
    pick.add_argument("--shortest", type=int, default=4,
                      help="the n shortest articles by lm-eval's word count (default; what fits a shared 2-core CPU)")
    pick.add_argument("--limit", type=int, help="the first n articles of the seeded shuffle; 0: all 62")
    ap.add_argument("--max-length", type=int, default=256,
                    help="tokens per forward on both sides (small enough that the articles span several windows)")
    ap.add_argument("--batch-size", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", type=Path, default=HERE / "wikitext-ppl-agreement.json")
    args = ap.parse_args(argv)
    from residshift.core.cache import atomic_write_text

    previous = json.loads(args.json.read_text()) if args.json.is_file() else {}
    try:
        import lm_eval
        import lm_eval.tasks
    except ImportError as err:
        reason = (f"lm-eval is not importable here ({err}): run `make .venv-lmeval/.installed` and use "
                  ".venv-lmeval/bin/python")
        print(reason)
        atomic_write_text(args.json, json.dumps({**previous, "skipped": reason}, indent=1) + "\n")
        return 0
    import torch
    import transformers

    from residshift.core.models import embedded_cache_path, load_model
    from residshift.core.paths import build_dir
    from residshift.measure import evaluate as ev

    torch.set_num_threads(args.threads)
    pages = ev.wikitext_documents("wikitext-2", "test")
    if len(pages) != N_PAGES:
        raise SystemExit(f"WikiText-2 test cut into {len(pages)} articles, expected {N_PAGES}")
    if args.limit is not None:
        items = ev.select_items(len(pages), args.limit or None, 0)
        rule = f"the first {len(items)} of evaluate.select_items(62, n, seed 0)" if args.limit else "all 62"
    else:
        words = np.asarray([ev.page_words(p) for p in pages])
        items = np.sort(np.argsort(words, kind="stable")[: args.shortest])
        rule = (f"the {len(items)} shortest articles by lm-eval's word count (a document limit: the 2 shared "
                "CPU cores score about 50 tokens/s per side)")
    out = {"config": {"lm_eval": lm_eval.__version__, "torch": torch.__version__,
                      "transformers": transformers.__version__, "corpus": "wikitext-2 test (-v1 file)",
                      "documents_total": len(pages), "documents": sorted(int(i) for i in items),
                      "documents_rule": rule,
                      "max_length": args.max_length, "batch_size": args.batch_size, "threads": args.threads,
                      "lm_eval_model": "HFLM(dtype=float32, device=cpu, add_bos_token=False)",
                      "task": f"{TASK} (includes lm-eval's wikitext.yaml)"},
           "models": dict(previous.get("models", {}))}
    lm_eval_tasks = Path(lm_eval.tasks.__file__).parent
    build_dir().mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="wikitext-stage-", dir=build_dir()) as tmp:
        stage_dir = stage(Path(tmp), lm_eval_tasks, pages).resolve()
        for name in args.models:
            lm, tok, info = load_model(name)
            ours = ours_side(lm, info, tok, pages, items, args.max_length, args.batch_size)
            print(f"ours    {name}: {len(items)} docs in {ours['seconds']:.0f} s", flush=True)
            theirs = lm_eval_side(embedded_cache_path(name), stage_dir, items, args.max_length, args.batch_size)
            print(f"lm-eval {name}: {len(items)} docs in {theirs['seconds']:.0f} s", flush=True)
            cmp = compare_documents(ours["docs"], theirs["docs"])
            cmp.update(seconds={"ours": ours["seconds"], "lm_eval": theirs["seconds"]},
                       lm_eval_aggregate=theirs["aggregate"], ours_metrics=ours["metrics"],
                       same_weights=theirs["weights"] == ev.model_fingerprint(lm),
                       prefix_token_id={"ours": ours["config"]["prefix_token_id"],
                                        "lm_eval": theirs["prefix_token_id"]},
                       max_length={"ours": ours["config"]["max_length"], "lm_eval": theirs["max_length"]},
                       config=out["config"])
            out["models"][name] = cmp
            print(f"{name}: word ppl ours {cmp['ours']['word_perplexity']:.6f} lm-eval "
                  f"{cmp['lm_eval']['word_perplexity']:.6f} (its aggregate "
                  f"{theirs['aggregate'].get('word_perplexity')}); max |dLL| {cmp['max_abs_diff']:.3e} "
                  f"(doc {cmp['worst_doc']}); same text {cmp['same_text']}, tokens {cmp['same_tokens']}, "
                  f"words {cmp['same_words']}, bytes {cmp['same_bytes']}", flush=True)
            atomic_write_text(args.json, json.dumps(out, indent=1, default=float) + "\n")
            del lm
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
