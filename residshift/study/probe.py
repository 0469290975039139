"""The vocabulary probe (notebook 11, ``python -m residshift ladder --probe``, ``make probe``): do the small
GPTs this project trains get the deep switch with a realistic vocabulary or a wider stream? (issue 52)

Every model of the training half and the ladder uses a 1,024-token BPE and width 128; with so few
tokens a guess from the current token alone is often the right top-1, so a model can predict well
right after block 0. The probe trains the ladder's recipe at a few **cells** ``[depth, width, heads,
vocabulary]`` (``probe_cells``; a vocabulary is the size of a BPE trained on WikiText-2's training
split, or a tokenizer spec such as ``"smollm2-135m"``), at one budget (the ladder's rung
``probe_rung``), one run per seed of ``probe_seeds``. Each (cell, seed) is a ladder rung
(:class:`.ladder.Rung` with its tokenizer and seed): trained, resumed, locked, read and recorded by the
ladder's own code, its record beside the ladder's (``benchmarks/ladder/<profile>/``, committed for
``default``), under a name of its own (``12x128-v16384-r1-s0``), so the probe never reads a ladder
record, even of the same settings.

The rule (:mod:`residshift.analysis.departure`, committed before the probe's first number and
registered as the claim ``C1.switch/trained``) reads each cell's finished seeds: the departure depth
with its interval over seeds, and C1.middle by unanimity.

**The cap.** Offline the corpus is WikiText-2's training split; at ``ladder_max_epochs`` passes a rung
may use at most 4 x its size in the cell's tokens (:func:`corpus_table`: 16.6M tokens at 1,024, 9.7M at
16,384). A larger budget needs ``ladder_large_corpus`` from the hub (the ladder then trains on it).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..analysis import departure
from ..core.paths import REPO_ROOT
from . import ladder
from .ladder import LadderError, Rung

NAME = "11-the-vocabulary-probe"
BPE_CORPUS = "wikitext-2"  # the corpus a cell's BPE is trained on (its training split)
PRETRAINED_C1 = "03-alignment-curves-c1.json"  # the pretrained models' next-token excess (notebook 03)


def tokenizer_spec(vocab: int | str) -> str:
    """A cell's vocabulary as a tokenizer spec: an integer is a BPE of that size on WikiText-2 train."""
    if isinstance(vocab, bool) or not isinstance(vocab, (int, str)) or vocab == "":
        raise LadderError(f"a probe cell's vocabulary is a BPE size (an integer) or a tokenizer spec, got {vocab!r}")
    return f"bpe:{BPE_CORPUS}:{vocab}" if isinstance(vocab, int) else vocab


def cells(P) -> list[tuple[int, int, int, str]]:
    """``probe_cells`` checked: ``(depth, width, heads, tokenizer spec)`` each."""
    out = []
    for c in P.probe_cells:
        if not (isinstance(c, (list, tuple)) and len(c) == 4 and all(isinstance(v, int) and v > 0 for v in c[:3])):
            raise LadderError(f"probe_cells holds {c!r}: each cell is [depth, width, heads, vocabulary]")
        if c[1] % c[2]:
            raise LadderError(f"probe cell {c}: the width must be a multiple of the heads")
        out.append((c[0], c[1], c[2], tokenizer_spec(c[3])))
    return out


def cell_name(depth: int, width: int, tokenizer: str) -> str:
    vocab = tokenizer.rsplit(":", 1)[-1] if tokenizer.startswith("bpe:") else tokenizer
    return f"{depth}x{width}, vocab {int(vocab):,}" if vocab.isdigit() else f"{depth}x{width}, {vocab}"


def rungs(P) -> list[Rung]:
    """Every (cell, seed) as a ladder rung, seed by seed (all cells' first seed, then the second, ...),
    so that a probe stopped part-way leaves every cell with the same seeds."""
    if not isinstance(P.probe_rung, int) or P.probe_rung < 0:
        raise LadderError(f"probe_rung must be an integer of at least 0, got {P.probe_rung!r}")
    seeds = P.probe_seeds
    if not (isinstance(seeds, list) and seeds and all(isinstance(s, int) for s in seeds)):
        raise LadderError(f"probe_seeds must be a non-empty list of integers, got {seeds!r}")
    k, tokens = P.probe_rung, int(P.ladder_base_tokens) * 4 ** P.probe_rung
    out = []
    for s in seeds:
        for d, w, h, spec in cells(P):
            out.append(Rung(d, w, h, k, tokens, tokenizer=spec, seed=s))
    return out


PLAN_FILE = "probe-plan.json"  # the last plan's measured speeds, beside the records (ladder.write_plan)
GPU_BENCH = REPO_ROOT / "benchmarks" / "bench-train-cuda.json"  # measured on one H200 (benchmarks/bench_train.py)


def run_probe(P, **kwargs) -> list[dict[str, Any]]:
    """Plan (each setting's tokens/s measured first, written to ``PLAN_FILE``) and train the cells' seeds
    that fit in ``probe_hours`` (:func:`.ladder.run_ladder` on :func:`rungs`; the same keywords)."""
    kwargs.setdefault("hours", P.probe_hours)
    return ladder.run_ladder(P, among=rungs(P), plan_file=PLAN_FILE, **kwargs)


def load_records(P) -> dict[str, dict[str, Any]]:
    """The probe's recorded rungs (finished or not), by rung name, in training order."""
    folder = ladder.records_dir(P)
    out = {}
    for r in rungs(P):
        rec = ladder.read_record(folder / f"{r.name}.json")
        if rec is not None:
            out[r.name] = rec
    return out


def records_for_notebook(P, *, log: Callable[[str], None] = print) -> dict[str, dict[str, Any]]:
    """The records notebook 11 reads: trained here only where the ladder is (``ladder_in_study``: smoke),
    otherwise what ``make probe`` wrote (committed for ``default``); says which seeds are missing."""
    if P.ladder_in_study:
        run_probe(P, log=lambda _line: None, progress=False)
    recs = load_records(P)
    names = [r.name for r in rungs(P)]
    missing = [n for n in names if not ladder.finished(recs.get(n))]
    src = ladder.records_dir(P)
    where = src.relative_to(REPO_ROOT) if src.is_relative_to(REPO_ROOT) else src
    log(f"{len(names) - len(missing)} of {len(names)} probe runs finished in {where}"
        + ("" if P.ladder_in_study else " (written by `make probe`; this notebook trains nothing)")
        + (f"; not there: {', '.join(missing)} (`make probe` trains them)" if missing else ""))
    return recs


def _final(rec: Mapping[str, Any]) -> Mapping[str, Any]:
    return max(rec["points"], key=lambda p: p["step"])


def cell_rows(recs: Mapping[str, Mapping[str, Any]], P) -> list[departure.CellRow]:
    """The rule on every cell from its finished seeds (a cell with none is left out)."""
    out = []
    for d, w, h, spec in cells(P):
        mine = [(r, recs[r.name]) for r in rungs(P) if (r.depth, r.width, r.heads, r.tokenizer) == (d, w, h, spec)
                and ladder.finished(recs.get(r.name))]
        if not mine:
            continue
        pts = [_final(rec) for _, rec in mine]
        stack = {k: np.asarray([p[k] for p in pts], dtype=np.float64)
                 for k in ("top1_input", "top1_next", "unigram_input", "unigram_next")}
        seeds = [int(rec["config"]["seed"]) for _, rec in mine]
        out.append(departure.probe_cell(stack["top1_input"], stack["top1_next"], stack["unigram_input"],
                                        stack["unigram_next"], cell=cell_name(d, w, spec), seeds=seeds,
                                        n_boot=int(P.train_boot), seed=int(P.seed)))
    return out


def curves(recs: Mapping[str, Mapping[str, Any]], P) -> list[dict[str, Any]]:
    """Each finished seed's next-token excess over the unigram decoder at h_0..h_L (mean over windows)."""
    out = []
    for r in rungs(P):
        rec = recs.get(r.name)
        if not ladder.finished(rec):
            continue
        p = _final(rec)
        tn, un = np.asarray(p["top1_next"]).mean(0), float(np.mean(p["unigram_next"]))
        out.append({"cell": cell_name(r.depth, r.width, r.tokenizer),
                    "seed": int(rec["config"]["seed"]), "rung": r.name, "excess": (tn - un).tolist(),
                    "top1_next": tn.tolist(), "unigram_next": un, "loss": p.get("loss"),
                    "val_loss": (rec.get("summary") or {}).get("val_loss")})
    return out


def pretrained_curves(folder: Path | None = None) -> list[dict[str, Any]]:
    """The pretrained models' next-token excess over the unigram decoder (logit lens, notebook 03's
    committed estimate and interval) and their departure depth from it (:func:`.ladder.pretrained_references`)."""
    folder = folder or ladder.REFERENCE_FIGURES
    path = folder / PRETRAINED_C1
    if not path.is_file():
        raise LadderError(f"{path} is missing: run notebook 03 at default")
    c1 = json.loads(path.read_text())
    depth = {r["model"]: r["row"]["departure_depth"] for r in ladder.pretrained_references(folder)}
    return [{"model": m, "excess": c1[m]["logit lens"]["next"]["estimate"], "departure_depth": depth.get(m)}
            for m in sorted(depth)]


def corpus_table(P):
    """Per vocabulary: WikiText-2's training split in its tokens, the cap at ``ladder_max_epochs`` passes,
    and how many passes the probe's budget takes."""
    import pandas as pd

    from ..train import trainer as T

    rows, seen = [], set()
    for r in rungs(P):
        spec = r.tokenizer
        if spec in seen:
            continue
        seen.add(spec)
        cfg = ladder.base_config(P, r)
        n = ladder.corpus_tokens(cfg, T.load_tokenizer(cfg))
        rows.append({"tokenizer": spec, "corpus": f"{cfg.corpus} {cfg.split}", "corpus_tokens": n,
                     "cap_tokens": None if n is None else n * int(P.ladder_max_epochs),
                     "probe_tokens": r.tokens, "epochs": None if not n else r.tokens / n})
    return pd.DataFrame(rows).set_index("tokenizer")


def cost_table(recs: Mapping[str, Mapping[str, Any]]):
    """What each probe run cost on the machine that trained it (:func:`.ladder.cost_table`)."""
    return ladder.cost_table(recs)


def left_to_train(P, recs: Mapping[str, Mapping[str, Any]], *, folder: Path | None = None,
                  gpu_bench: Path = GPU_BENCH):
    """What the probe has not trained and what it would cost: each cell short of ``MIN_SEEDS`` finished
    seeds at the tokens/s the last plan measured on this kind of CPU (``PLAN_FILE``), and the ``paper``
    profile's cells on one GPU at the speed measured for the paper's shape (12x768, GPT-2's 50,304 tokens,
    bf16, compiled; a smaller vocabulary is not slower), training only (the lens readings come on top)."""
    import pandas as pd

    from ..core import profiles

    folder = folder or ladder.records_dir(P)
    plan = json.loads((folder / PLAN_FILE).read_text()) if (folder / PLAN_FILE).is_file() else {}
    speed = {r["setting"]: r["tokens_per_s"] for r in plan.get("rows", []) if r.get("tokens_per_s")}
    cpu = f"{(plan.get('machine') or {}).get('cpu', '?')}, {plan.get('threads', '?')} threads"
    out = []
    for d, w, h, spec in cells(P):
        mine = [r for r in rungs(P) if (r.depth, r.width, r.tokenizer) == (d, w, spec)]
        done = sum(ladder.finished(recs.get(r.name)) for r in mine)
        if done >= departure.MIN_SEEDS:
            continue
        tps = speed.get(mine[0].setting)
        left = (len(mine) - done) * mine[0].tokens
        out.append({"cell": cell_name(d, w, spec), "profile": P.profile, "seeds left": len(mine) - done,
                    "tokens per seed": mine[0].tokens, "where": f"{cpu} (plan of {plan.get('measured', '?')[:10]})",
                    "tokens/s": tps, "hours": None if not tps else left / tps / 3600})
    paper = profiles.resolve("paper")
    if gpu_bench.is_file():
        bench = json.loads(gpu_bench.read_text())
        tps = bench["shapes"]["paper"]["precision"]["bf16-compile"]["tokens_per_s"]
        tokens = int(paper.ladder_base_tokens) * 4 ** int(paper.probe_rung)
        for d, w, h, v in paper.probe_cells:
            out.append({"cell": cell_name(d, w, tokenizer_spec(v)), "profile": "paper",
                        "seeds left": len(paper.probe_seeds), "tokens per seed": tokens,
                        "where": f"one {bench['machine']['gpu']} (12x768 at 50,304 tokens, bf16 compiled)",
                        "tokens/s": tps, "hours": len(paper.probe_seeds) * tokens / tps / 3600})
    return pd.DataFrame(out).set_index("cell") if out else pd.DataFrame()


def cell_table(rows: Sequence[departure.CellRow]):
    import pandas as pd

    return pd.DataFrame([{"cell": r.cell, "seeds": len(r.seeds), "departure (mean)": r.depth,
                          "lo": r.depth_ci[0], "hi": r.depth_ci[1],
                          "per seed": ", ".join("–" if d is None else f"{d:.2f}" for d in r.depths),
                          "excess h_1": r.excess_h1, "excess middle": r.excess_mid, "C1.middle": r.middle,
                          "reading": r.reading} for r in rows]).set_index("cell")


CELL_COLORS = ("#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e")


def probe_panel(rows: Sequence[departure.CellRow], seed_curves: Sequence[Mapping[str, Any]],
                refs: Sequence[Mapping[str, Any]]):
    """Left: the next-token excess over the unigram decoder against relative depth l/L, one thin line per
    seed, one colour per cell, the pretrained models in grey; the margin and the 0.5 line. Right: each
    cell's departure depth per seed (dots) and its mean with the interval over seeds, the pretrained
    models' departure depths as horizontal lines."""
    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10.5, 4.0), constrained_layout=True,
                                 gridspec_kw={"width_ratios": [1.4, 1]})
    names = [r.cell for r in rows]
    for i, name in enumerate(names):
        c = CELL_COLORS[i % len(CELL_COLORS)]
        for j, s in enumerate(x for x in seed_curves if x["cell"] == name):
            y = np.asarray(s["excess"])
            ax.plot(np.linspace(0, 1, y.size), y, color=c, lw=1, alpha=0.8, label=name if j == 0 else None)
    for ref, ls in zip(refs, ("--", "-.", ":")):
        y = np.asarray(ref["excess"])
        ax.plot(np.linspace(0, 1, y.size), y, color="0.4", ls=ls, lw=1, label=ref["model"])
    ax.axhline(departure.MARGIN, color="black", lw=0.7, alpha=0.6)
    ax.axvline(departure.DEEP, color="black", lw=0.7, alpha=0.4, ls=":")
    ax.set_xlabel("relative depth l/L (h_0 ... h_L)")
    ax.set_ylabel("next-token top-1 minus unigram decoder's")
    ax.set_title("Where the next token appears (logit lens)")
    ax.legend(fontsize=7, loc="upper left")
    for i, r in enumerate(rows):
        c = CELL_COLORS[i % len(CELL_COLORS)]
        ds = [d for d in r.depths if d is not None]
        bx.plot([i] * len(ds), ds, "o", color=c, alpha=0.6, mfc="white")
        lo, hi = r.depth_ci
        if r.depth is not None:
            yerr = None if lo is None else [[r.depth - lo], [hi - r.depth]]
            bx.errorbar([i + 0.15], [r.depth], yerr=yerr, fmt="s", color=c, capsize=3)
    for ref, ls in zip(refs, ("--", "-.", ":")):
        if ref["departure_depth"] is not None:
            bx.axhline(ref["departure_depth"], color="0.4", ls=ls, lw=1)
    bx.axhline(departure.DEEP, color="black", lw=0.8)
    bx.text(len(rows) - 0.5, departure.DEEP, "deep ", ha="right", va="bottom", fontsize=8)
    bx.set_xticks(range(len(rows)), [n.replace(", ", "\n") for n in names], fontsize=8)
    bx.set_xlim(-0.5, len(rows) - 0.5)
    bx.set_ylim(0, 1.02)
    bx.set_ylabel("departure depth l/L")
    bx.set_title("Departure depth per seed, mean and interval")
    return fig


def probe_numbers(rows, seed_curves, refs, costs, corpus, P, left=None) -> dict[str, Any]:
    """What figure 11 rests on (``figures/11-the-vocabulary-probe.json``): the rule's rows (read by the
    claim ``C1.switch/trained``), every seed's curve, the pretrained references, the cost, the cap and what
    is left to train (:func:`left_to_train`)."""
    def records(df):
        return [] if df is None or df.empty else json.loads(df.reset_index().to_json(orient="records"))

    return {"rows": [r.as_dict() for r in rows], "curves": list(seed_curves), "pretrained": list(refs),
            "cost": records(costs), "corpus": records(corpus), "left": records(left), "profile": P.profile,
            "design": {"cells": P.probe_cells, "seeds": P.probe_seeds, "rung": P.probe_rung,
                       "tokens": int(P.ladder_base_tokens) * 4 ** P.probe_rung,
                       "lens_windows": P.ladder_lens_windows, "margin": departure.MARGIN, "deep": departure.DEEP}}
