"""Our harness vs lm-evaluation-harness on the same PIQA, ARC and LAMBADA items (SmolLM2-135M).

    make validate-harness        # builds .venv-lmeval (the `validate` extra's pins), then runs:
    RESIDSHIFT_DATA=... HF_HUB_OFFLINE=1 .venv-lmeval/bin/python benchmarks/validate_lm_eval.py \\
        [--limit N | --full] [--tasks piqa arc-easy ...] [--threads 2]

Both sides score the same items of the local data files (no hub): the default profile's seeded
subsample (``evaluate.select_items``, the ``harness`` section's limits) unless ``--full``.

- lm-eval: its own task configs (``piqa``, ``arc_easy``, ``arc_challenge``, ``lambada_openai``),
  included by the YAMLs in ``benchmarks/lm_eval_tasks/``, which override only where the data come
  from. They are staged in a temporary folder beside a link to the installed ``lm_eval/tasks`` and
  the local data in the schema those configs read (PIQA with its labels file joined in; ARC from
  llm-foundry's ``{query, choices, gold}`` to the hub's ``{question, choices{text,label},
  answerKey}``; LAMBADA as is), and run by ``simple_evaluate`` with ``samples=`` (the item ids,
  sorted: lm-eval 0.4.13 labels logged samples ``samples[k]`` for the k-th selected document in
  file order) on ``HFLM(pretrained=<the dequantized fp32 folder>)``.
- ours: ``evaluate.piqa_questions`` / ``arc_questions`` / ``lambada_split``, ``encode_pair`` and the
  harness's scoring call with the default profile's batch size, i.e. what
  ``multiple_choice_score`` / ``lambada_score`` compute, keeping the per-choice log-likelihoods
  (tests/test_lm_eval_validation.py checks that the predictions equal those functions').

Compared per item: the request strings, the token split of each (context, continuation) pair
(lm-eval's ``_encode_pair`` vs ours), the chosen answer by ``acc`` (argmax log-likelihood) and by
``acc_norm`` (argmax log-likelihood per character), LAMBADA's greedy correctness, and the
log-likelihoods (largest |difference|). A disagreement is a "float tie" when the largest score
difference on that item is float noise (``float_noise``) and the two leading choices are closer
than it on one side. Writes ``benchmarks/lm-eval-agreement.json`` and ``.txt`` (what it printed).
Each side's scores are cached per task under ``results/lm-eval-validation/`` (keyed by the items,
weights, batch size, versions, staged YAML and data, and the scoring code's source), so an interrupted run resumes
task by task and a rerun only recomputes the comparison; the seconds reported are those of the
run that computed the scores.
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import os
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

HERE = Path(__file__).resolve().parent
TASK_YAMLS = HERE / "lm_eval_tasks"
MODEL = "smollm2-135m"
TARGET = 0.99  # the share of items on which both harnesses must choose the same answer


@dataclass(frozen=True)
class TaskSpec:
    ours: str       # our task name (evaluate.TASKS)
    lm_eval: str    # the task name in benchmarks/lm_eval_tasks/*.yaml
    kind: str       # "mc" (multiple choice) or "lambada"
    data: str       # the staged data file the YAML reads (relative to the stage folder)


SPECS: dict[str, TaskSpec] = {
    "piqa": TaskSpec("piqa", "piqa_local", "mc", "data/piqa_validation.jsonl"),
    "arc-easy": TaskSpec("arc-easy", "arc_easy_local", "mc", "data/arc_easy_test.jsonl"),
    "arc-challenge": TaskSpec("arc-challenge", "arc_challenge_local", "mc", "data/arc_challenge_test.jsonl"),
    "lambada": TaskSpec("lambada", "lambada_openai_local", "lambada", "data/lambada_test.jsonl"),
}


# --------------------------------------------------------------------------------------------
# Local data in the schema of lm-eval's configs
# --------------------------------------------------------------------------------------------


def piqa_record(row: dict[str, Any]) -> dict[str, Any]:
    """A PIQA row (goal, sol1, sol2, label joined from valid-labels.lst) as the hub copy has it."""
    label = int(row["label"])
    if label not in (0, 1):
        raise ValueError(f"a PIQA label is 0 or 1, got {row['label']!r}")
    return {"goal": row["goal"], "sol1": row["sol1"], "sol2": row["sol2"], "label": label}


ARC_PREFIX = "Question: "


def arc_record(row: dict[str, Any], index: int) -> dict[str, Any]:
    """An llm-foundry ARC row ``{query: "Question: <stem>", choices, gold}`` in the hub schema
    ``{id, question, choices: {text, label}, answerKey}`` (labels A, B, ...)."""
    query, choices, gold = row["query"], list(row["choices"]), int(row["gold"])
    if not query.startswith(ARC_PREFIX):
        raise ValueError(f"ARC item {index}: the query should start with {ARC_PREFIX!r}, got {query[:40]!r}")
    if not 0 <= gold < len(choices) <= 26:
        raise ValueError(f"ARC item {index}: gold {gold} out of range for {len(choices)} choices")
    labels = [chr(ord("A") + k) for k in range(len(choices))]
    return {"id": str(index), "question": query[len(ARC_PREFIX):],
            "choices": {"text": choices, "label": labels}, "answerKey": labels[gold]}


def _jsonl(records: Sequence[dict[str, Any]]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)


def stage_data(folder: Path, tasks: Sequence[str]) -> None:
    """Write ``folder/data/``: the local files of ``tasks`` in the schema lm-eval's configs read."""
    from residshift.core.cache import atomic_write_text
    from residshift.core.data import load_corpus, local_file

    for name in tasks:
        target = Path(folder) / SPECS[name].data
        target.parent.mkdir(parents=True, exist_ok=True)
        if name == "piqa":
            atomic_write_text(target, _jsonl([piqa_record(r) for r in load_corpus("piqa", "validation")]))
        elif name in ("arc-easy", "arc-challenge"):
            atomic_write_text(target, _jsonl([arc_record(r, i) for i, r in enumerate(load_corpus(name, "test"))]))
        else:
            source = local_file("lambada", "test")
            if source is None:
                raise FileNotFoundError("lambada_test.jsonl not found: set RESIDSHIFT_DATA to the data folder")
            if target.is_symlink() or target.exists():
                target.unlink()
            target.symlink_to(source)


def stage(folder: Path, lm_eval_tasks: Path, tasks: Sequence[str]) -> Path:
    """Lay out ``folder``: ``tasks/`` (our YAMLs), ``lm_eval_tasks`` (a link to the installed
    ``lm_eval/tasks``) and ``data/`` (``stage_data``). Returns ``folder``."""
    if not (lm_eval_tasks / "piqa" / "piqa.yaml").is_file():
        raise FileNotFoundError(f"{lm_eval_tasks} is not lm-eval's task folder (no piqa/piqa.yaml)")
    folder = Path(folder)
    (folder / "tasks").mkdir(parents=True, exist_ok=True)
    link = folder / "lm_eval_tasks"
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(lm_eval_tasks.resolve(), target_is_directory=True)
    for name in tasks:
        yaml = f"{SPECS[name].lm_eval}.yaml"
        shutil.copyfile(TASK_YAMLS / yaml, folder / "tasks" / yaml)
    stage_data(folder, tasks)
    return folder


# --------------------------------------------------------------------------------------------
# Per-item scores and their comparison (pure)
# --------------------------------------------------------------------------------------------


@dataclass
class ItemScore:
    """One item as one harness scored it: its requests (context, continuation), their token
    split, summed log-likelihoods and greedy flags; ``gold`` for multiple choice."""

    item: int
    requests: list[tuple[str, str]]
    ll: list[float]
    greedy: list[bool]
    gold: int | None = None
    tokens: list[tuple[tuple[int, ...], tuple[int, ...]]] = field(default_factory=list)

    def choices(self) -> list[str]:
        """The choice texts (continuations without lm-eval's " " target delimiter)."""
        return [cont[1:] if cont.startswith(" ") else cont for _, cont in self.requests]


def predictions(s: ItemScore) -> tuple[int, int]:
    """(acc choice, acc_norm choice): argmax log-likelihood and argmax log-likelihood per character
    of the choice text (lm-eval's ``len(choice)``)."""
    ll = np.asarray(s.ll, dtype=np.float64)
    lengths = np.asarray([float(len(c)) for c in s.choices()])
    return int(np.argmax(ll)), int(np.argmax(ll / lengths))


def float_noise(scores: np.ndarray) -> float:
    """The largest score difference that float32 rounding explains: 1e-4 + 1e-5 x |score|
    (summed float32 log-probabilities of sequences batched differently)."""
    return 1e-4 + 1e-5 * float(np.max(np.abs(scores)))


def _tie(ours: np.ndarray, theirs: np.ndarray, a: int, b: int) -> dict[str, Any]:
    """How close choices ``a`` (ours) and ``b`` (lm-eval's) are on each side, against the largest
    difference between the two sides' scores of this item; a float tie when that difference is
    float noise and the closer margin is within it."""
    noise = float(np.max(np.abs(ours - theirs)))
    margin_ours, margin_theirs = float(ours[a] - ours[b]), float(theirs[b] - theirs[a])
    return {"margin_ours": margin_ours, "margin_theirs": margin_theirs, "max_abs_diff": noise,
            "float_tie": noise <= float_noise(ours) and min(margin_ours, margin_theirs) <= noise}


def compare_task(ours: Sequence[ItemScore], theirs: Sequence[ItemScore], kind: str) -> dict[str, Any]:
    """Per-item agreement of two harnesses on the same items (matched by ``item``)."""
    if kind not in ("mc", "lambada"):
        raise ValueError(f"kind must be 'mc' or 'lambada', got {kind!r}")
    by_item = {s.item: s for s in theirs}
    if len(by_item) != len(theirs):
        raise ValueError("lm-eval's scores name an item twice")
    missing = sorted({s.item for s in ours} ^ set(by_item))
    if missing:
        raise ValueError(f"the two harnesses scored different items (first differences: {missing[:5]})")
    n = len(ours)
    if n == 0:
        raise ValueError("no items to compare")
    same_strings = same_tokens = n_tokens_known = 0
    diffs: list[float] = []
    agree = {"acc": 0, "acc_norm": 0} if kind == "mc" else {"acc": 0}
    correct = {k: [0, 0] for k in agree}  # metric -> [ours, lm-eval]
    ll_sums = [0.0, 0.0]
    disagreements, worst = [], None
    for o in ours:
        t = by_item[o.item]
        if len(o.ll) != len(t.ll):
            raise ValueError(f"item {o.item}: {len(o.ll)} scores vs {len(t.ll)}")
        same_strings += o.requests == t.requests
        if o.tokens and t.tokens:
            n_tokens_known += 1
            same_tokens += o.tokens == t.tokens
        lo, lt = np.asarray(o.ll, dtype=np.float64), np.asarray(t.ll, dtype=np.float64)
        d = np.abs(lo - lt)
        diffs.extend(d.tolist())
        if worst is None or d.max() > worst["abs_diff"]:
            k = int(d.argmax())
            worst = {"item": o.item, "choice": k, "abs_diff": float(d[k]), "ours": float(lo[k]),
                     "lm_eval": float(lt[k])}
        if kind == "mc":
            if o.gold != t.gold:
                raise ValueError(f"item {o.item}: gold {o.gold} (ours) vs {t.gold} (lm-eval)")
            lengths = np.asarray([float(len(c)) for c in o.choices()])
            (acc_o, norm_o), (acc_t, norm_t) = predictions(o), predictions(t)
            for metric, (po, pt), (so, st) in (("acc", (acc_o, acc_t), (lo, lt)),
                                                ("acc_norm", (norm_o, norm_t), (lo / lengths, lt / lengths))):
                agree[metric] += po == pt
                correct[metric][0] += po == o.gold
                correct[metric][1] += pt == t.gold
                if po != pt:
                    disagreements.append({"item": o.item, "metric": metric, "ours": po, "lm_eval": pt,
                                          "gold": o.gold, **_tie(so, st, po, pt)})
        else:
            go, gt = bool(o.greedy[0]), bool(t.greedy[0])
            agree["acc"] += go == gt
            correct["acc"][0] += go
            correct["acc"][1] += gt
            ll_sums[0] += float(lo[0])
            ll_sums[1] += float(lt[0])
            if go != gt:
                disagreements.append({"item": o.item, "metric": "acc", "ours": go, "lm_eval": gt,
                                      "ll_ours": float(lo[0]), "ll_lm_eval": float(lt[0])})
    d = np.asarray(diffs)
    out: dict[str, Any] = {
        "n": n,
        "same_requests": same_strings,
        "same_tokens": same_tokens if n_tokens_known else None,
        "agree": {k: v / n for k, v in agree.items()},
        "agree_count": agree,
        "ours": {k: v[0] / n for k, v in correct.items()},
        "lm_eval": {k: v[1] / n for k, v in correct.items()},
        "max_abs_diff": float(d.max()),
        "mean_abs_diff": float(d.mean()),
        "median_abs_diff": float(np.median(d)),
        "worst": worst,
        "disagreements": disagreements,
        "float_ties": sum(bool(x.get("float_tie")) for x in disagreements),
        "meets_target": all(v / n >= TARGET for v in agree.values()),
    }
    if kind == "lambada":
        out["ours"]["ppl"] = math.exp(-ll_sums[0] / n)
        out["lm_eval"]["ppl"] = math.exp(-ll_sums[1] / n)
    return out


# --------------------------------------------------------------------------------------------
# The two harnesses
# --------------------------------------------------------------------------------------------


def our_requests(name: str) -> tuple[list[list[tuple[str, str]]], list[int | None]]:
    """Every item's (context, continuation) strings and gold answer, as our harness builds them."""
    from residshift.core.data import load_corpus
    from residshift.measure import evaluate as ev

    if name == "lambada":
        texts = load_corpus("lambada", "test")["text"]
        return [[ev.lambada_split(t)] for t in texts], [None] * len(texts)
    questions = ev.piqa_questions() if name == "piqa" else ev.arc_questions(name)
    return [[(q.context, " " + c) for c in q.choices] for q in questions], [q.gold for q in questions]


def score_ours(model, info, tokenizer, name: str, items: Sequence[int], *, config,
               progress: bool = False) -> list[ItemScore]:
    """Our harness's per-choice scores of ``items`` (``multiple_choice_score``'s and
    ``lambada_score``'s requests and scoring call, keeping every choice's log-likelihood)."""
    from residshift.measure import evaluate as ev

    strings, golds = our_requests(name)
    bos_id = info.bos_token_id if info.prepend_bos else None
    reqs, splits, owner = [], [], []
    for i in items:
        for ctx_s, cont_s in strings[i]:
            ctx, cont = ev.encode_pair(tokenizer, ctx_s, cont_s, bos_id=bos_id)
            reqs.append(ev.Request(tuple(ctx + cont), len(ctx)))
            splits.append((tuple(ctx), tuple(cont)))
            owner.append(i)
    s = ev._score_with(config, model, info, tokenizer, reqs, None, progress, name)
    out, start = [], 0
    for i in items:
        k = len(strings[i])
        out.append(ItemScore(int(i), list(strings[i]), [float(x) for x in s["logprob"][start:start + k]],
                             [bool(x) for x in s["greedy"][start:start + k]], golds[i],
                             splits[start:start + k]))
        start += k
    return out


def lm_eval_items(samples: Sequence[dict[str, Any]], kind: str, encode=None) -> list[ItemScore]:
    """ItemScores from lm-eval's logged samples (``results["samples"][task]``); ``encode`` (the
    model's ``_encode_pair``) adds lm-eval's token split of each request."""
    out = []
    for x in samples:
        requests = [tuple(a) for a in x["arguments"]]
        resps = [r[0] if isinstance(r[0], (list, tuple)) else r for r in x["resps"]]
        ll = [float(r[0]) for r in resps]
        greedy = [bool(r[1]) for r in resps]
        gold = int(x["target"]) if kind == "mc" else None
        tokens = [tuple(tuple(t) for t in encode(c, k)) for c, k in requests] if encode else []
        s = ItemScore(int(x["doc_id"]), [(c, k) for c, k in requests], ll, greedy, gold, tokens)
        if kind == "mc":
            pred, pred_norm = predictions(s)
            if float(x["acc"]) != float(pred == gold) or float(x["acc_norm"]) != float(pred_norm == gold):
                raise AssertionError(f"doc {s.item}: lm-eval's own acc/acc_norm disagree with its scores")
        out.append(s)
    return sorted(out, key=lambda s: s.item)


class LmEval:
    """lm-eval's side: ``HFLM(pretrained=<folder>)`` on the staged task YAMLs, built on first use
    (a rerun whose scores are all cached never loads lm-eval's model)."""

    def __init__(self, folder: Path, stage_dir: Path, batch_size: int):
        self.folder, self.stage_dir, self.batch_size = folder, stage_dir, batch_size
        self._hflm = self._manager = None

    @property
    def hflm(self):
        if self._hflm is None:
            from lm_eval.models.huggingface import HFLM

            self._hflm = HFLM(pretrained=str(self.folder), dtype="float32", device="cpu",
                              batch_size=self.batch_size)
        return self._hflm

    def score(self, name: str, items: Sequence[int]) -> dict[str, Any]:
        """ItemScores of ``items``, lm-eval's own aggregate metrics and its model's fingerprint."""
        import lm_eval
        from lm_eval.tasks import TaskManager
        from residshift.measure.evaluate import model_fingerprint

        spec = SPECS[name]
        with contextlib.chdir(self.stage_dir):  # the YAMLs' data_files are relative to the stage
            if self._manager is None:
                self._manager = TaskManager(include_path=str(self.stage_dir / "tasks"), include_defaults=False)
            res = lm_eval.simple_evaluate(
                model=self.hflm, tasks=[spec.lm_eval], task_manager=self._manager, num_fewshot=0,
                samples={spec.lm_eval: sorted(int(i) for i in items)},
                bootstrap_iters=0, log_samples=True, cache_requests=False)
        scores = lm_eval_items(res["samples"][spec.lm_eval], spec.kind, self.hflm._encode_pair)
        aggregate = {k.split(",")[0]: v for k, v in res["results"][spec.lm_eval].items()
                     if "," in k and "stderr" not in k and isinstance(v, (int, float))}
        return {"items": scores, "aggregate": aggregate, "weights": model_fingerprint(self.hflm.model)}


def _source_digest(*functions) -> str:
    """A digest of these functions' source (part of the cache key of the scores they make)."""
    import inspect

    return hashlib.sha256("".join(inspect.getsource(f) for f in functions).encode()).hexdigest()[:16]


def harness_digest() -> str:
    """A digest of the source of the harness code our side runs (``evaluate``'s request building
    and scoring; part of the cache key: a change there recomputes, edits elsewhere do not)."""
    from residshift.measure import evaluate as ev

    return _source_digest(ev.encode, ev.encode_pair, ev.Request, ev._max_positions, ev._supports_keep,
                          ev.make_batches, ev._kept_logits, ev.score_requests, ev._score_with,
                          ev._pad_id, ev.piqa_questions, ev.arc_questions, ev.lambada_split,
                          ev.select_items, ev.EvalConfig)


def cached_side(side: str, name: str, key: dict[str, Any], compute) -> dict[str, Any]:
    """``compute()`` (a dict with ``items``: ItemScores) timed and cached under
    ``results/lm-eval-validation/`` by side, task and ``key``, with this script's scoring code as
    the code fingerprint, so an interrupted run resumes task by task."""
    from residshift.core import cache

    def run():
        t0 = time.perf_counter()
        out = compute()
        return {**out, "seconds": time.perf_counter() - t0, "items": [asdict(s) for s in out["items"]]}

    value = cache.cached("lm-eval-validation", {"side": side, "task": name, **key}, run,
                         code=[score_ours, our_requests, LmEval.score, lm_eval_items])
    return {**value, "items": [ItemScore(**r) for r in value["items"]]}


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------


def render(result: dict[str, Any]) -> str:
    cfg = result["config"]
    lines = [f"# our harness vs lm-eval {cfg['versions']['lm_eval']} (HFLM), {cfg['model']} fp32, "
             f"{cfg['items_rule']}; batch {cfg['batch_size']}",
             f"# ours: {cfg.get('harness', {}).get('module', '?')}; same weights in both: "
             f"{cfg['same_weights']}; target: the same choice on >= {TARGET:.0%} of items",
             "# seconds: wall time of the runs that computed the scores (cached per task), on a shared "
             "CPU: not a speed comparison", ""]
    head = (f"{'task':14} {'n':>5} {'same req':>8} {'same tok':>8} {'metric':9} {'agree':>7} "
            f"{'ours':>7} {'lm-eval':>7} {'max|dLL|':>9} {'mean|dLL|':>9} {'ties':>4}  seconds (ours / lm-eval)")
    lines += [head, "-" * len(head)]
    for name, c in result["tasks"].items():
        t = result["timing"][name]
        for j, metric in enumerate(c["agree"]):
            first = j == 0
            lines.append(
                f"{name if first else '':14} {c['n'] if first else '':>5} "
                f"{c['same_requests'] if first else '':>8} {(str(c['same_tokens']) if first else ''):>8} "
                f"{metric:9} {c['agree'][metric]:7.2%} {c['ours'][metric]:7.4f} {c['lm_eval'][metric]:7.4f} "
                f"{(format(c['max_abs_diff'], '9.2e') if first else ''):>9} "
                f"{(format(c['mean_abs_diff'], '9.2e') if first else ''):>9} "
                f"{(c['float_ties'] if first else ''):>4}  "
                + (f"{t['ours_s']:.0f} / {t['lm_eval_s']:.0f}" if first else ""))
        if "ppl" in c["ours"]:
            lines.append(f"{'':14} {'':>5} {'':>8} {'':>8} {'ppl':9} {'':>7} {c['ours']['ppl']:7.3f} "
                         f"{c['lm_eval']['ppl']:7.3f}")
    lines.append("")
    for name, agg in result["lm_eval_aggregate"].items():
        shown = ", ".join(f"{k} {v:.4f}" for k, v in agg.items() if k != "seconds")
        lines.append(f"lm-eval's own aggregate, {name}: {shown}")
    lines.append("")
    for name, c in result["tasks"].items():
        w = c["worst"]
        lines.append(f"{name}: largest |dLL| {w['abs_diff']:.2e} at item {w['item']} choice {w['choice']} "
                     f"(ours {w['ours']:.6f}, lm-eval {w['lm_eval']:.6f})")
        for x in c["disagreements"]:
            if "margin_ours" in x:
                lines.append(f"  item {x['item']} {x['metric']}: ours chose {x['ours']}, lm-eval {x['lm_eval']} "
                             f"(gold {x['gold']}); margins {x['margin_ours']:.2e} (ours) / "
                             f"{x['margin_theirs']:.2e} (lm-eval) vs max |d| {x['max_abs_diff']:.2e}: "
                             + ("float tie" if x["float_tie"] else "NOT a tie"))
            else:
                lines.append(f"  item {x['item']} greedy: ours {x['ours']}, lm-eval {x['lm_eval']} "
                             f"(ll {x['ll_ours']:.6f} / {x['ll_lm_eval']:.6f})")
    lines.append("")
    lines.append("all tasks meet the target" if result["meets_target"] else "TARGET MISSED on: "
                 + ", ".join(k for k, c in result["tasks"].items() if not c["meets_target"]))
    return "\n".join(lines) + "\n"


def _where(module: Path) -> str:
    """Which evaluate.py our side ran: its commit when in a git checkout (and whether the work
    tree modifies it), else its path (``RESIDSHIFT_HARNESS_SOURCE`` can name the snapshot)."""
    import subprocess

    r = subprocess.run(["git", "-C", str(module.parent), "rev-parse", "--short", "HEAD"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return os.environ.get("RESIDSHIFT_HARNESS_SOURCE", str(module))
    dirty = subprocess.run(["git", "-C", str(module.parent), "status", "--porcelain", "--", module.name],
                           capture_output=True, text=True).stdout.strip()
    return f"evaluate.py at {r.stdout.strip()}" + (" + uncommitted changes" if dirty else "")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", nargs="*", default=list(SPECS), choices=list(SPECS))
    size = ap.add_mutually_exclusive_group()
    size.add_argument("--limit", action="append", default=[], metavar="[TASK=]N",
                      help="items per task, for all tasks or one (repeatable; default: the default profile's)")
    size.add_argument("--full", action="store_true", help="every item of every task")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch-size", type=int, help="rows per forward (default: the profile's)")
    ap.add_argument("--json", type=Path, default=HERE / "lm-eval-agreement.json")
    ap.add_argument("--txt", type=Path, default=HERE / "lm-eval-agreement.txt")
    ap.add_argument("--keep-stage", type=Path, help="stage the lm-eval tasks here and keep them")
    ap.add_argument("--only", choices=["ours", "lm-eval"],
                    help="compute (and cache) one side's scores and stop, e.g. the two sides in two processes")
    args = ap.parse_args(argv)
    try:
        import lm_eval  # noqa: F401
    except ImportError:
        raise SystemExit("lm-eval is not installed here: run `make validate-harness` (it builds "
                         ".venv-lmeval with the `validate` extra's pins) or use .venv-lmeval/bin/python")
    import torch
    import transformers
    import datasets
    import lm_eval.tasks

    from residshift.core import profiles
    from residshift.core.cache import atomic_write_text
    from residshift.core.data import load_corpus
    from residshift.core.models import embedded_cache_path, load_model
    from residshift.core.paths import build_dir
    from residshift.measure import evaluate as ev

    torch.set_num_threads(args.threads)
    P = profiles.resolve("default")
    batch = args.batch_size or P.harness_batch
    config = ev.EvalConfig(batch_size=batch, seed=P.seed)
    sizes = {"piqa": 1838, "arc-easy": 2376, "arc-challenge": 1172, "lambada": 5153}
    for name in args.tasks:  # the sizes above are checked against the data
        ds = load_corpus(*(("piqa", "validation") if name == "piqa" else (name, "test")))
        if len(ds) != sizes[name]:
            raise SystemExit(f"{name}: {len(ds)} items in the local file, expected {sizes[name]}")
    limits = {n: None if args.full else P.harness_limits[n] for n in args.tasks}
    for given in args.limit:
        task, _, n = given.rpartition("=")
        if task and task not in SPECS:
            raise SystemExit(f"--limit {given}: unknown task {task!r}; known: {', '.join(SPECS)}")
        if not n.isdigit() or int(n) < 1:
            raise SystemExit(f"--limit {given}: the number of items must be a positive integer")
        limits.update({t: int(n) for t in ([task] if task else args.tasks) if t in limits})
    items = {n: ev.select_items(sizes[n], limits[n], config.seed) for n in args.tasks}

    lm, tokenizer, info = load_model(MODEL)
    folder = embedded_cache_path(MODEL)
    weights = ev.model_fingerprint(lm)
    harness = harness_digest()  # our side's key only: lm-eval's scores do not depend on our code
    keys = {n: {"model": MODEL, "weights": weights, "batch": batch, "n": len(items[n]),
                "items": hashlib.sha256(np.asarray(items[n], dtype=np.int64).tobytes()).hexdigest()[:16]}
            for n in args.tasks}
    ours, theirs, timing = {}, {}, {}
    for name in args.tasks if args.only != "lm-eval" else []:
        ours[name] = cached_side("ours", name, {**keys[name], "harness": harness}, lambda: {
            "items": score_ours(lm, info, tokenizer, name, items[name], config=config, progress=True)})
        timing[name] = {"ours_s": ours[name]["seconds"]}
        print(f"ours    {name:14} {len(items[name])} items in {timing[name]['ours_s']:.0f} s", flush=True)

    if args.only == "ours":
        return 0
    lm_eval_tasks = Path(lm_eval.tasks.__file__).parent
    with contextlib.ExitStack() as stack:
        build_dir().mkdir(parents=True, exist_ok=True)  # inside the repo: lm-eval asks git for a commit
        stage_dir = args.keep_stage or Path(stack.enter_context(
            tempfile.TemporaryDirectory(prefix="lm-eval-stage-", dir=build_dir())))
        stage_dir = stage(Path(stage_dir), lm_eval_tasks, args.tasks).resolve()
        theirs_side = LmEval(folder, stage_dir, batch)
        for name in args.tasks:
            staged = {"yaml": (stage_dir / "tasks" / f"{SPECS[name].lm_eval}.yaml").read_text(),
                      "data": hashlib.sha256((stage_dir / SPECS[name].data).read_bytes()).hexdigest()[:16],
                      "lm_eval": lm_eval.__version__, "transformers": transformers.__version__,
                      "torch": torch.__version__}
            theirs[name] = cached_side("lm-eval", name, {**keys[name], **staged},
                                       lambda: theirs_side.score(name, items[name]))
            timing.setdefault(name, {})["lm_eval_s"] = theirs[name]["seconds"]
            print(f"lm-eval {name:14} {len(items[name])} items in {timing[name]['lm_eval_s']:.0f} s", flush=True)
    if args.only == "lm-eval":
        return 0
    same_weights = all(theirs[n]["weights"] == weights for n in args.tasks)

    tasks = {n: compare_task(ours[n]["items"], theirs[n]["items"], SPECS[n].kind) for n in args.tasks}
    result = {
        "config": {
            "argv": list(sys.argv[1:] if argv is None else argv),
            "harness": {"digest": harness, "module": _where(Path(ev.__file__))},
            "model": MODEL, "weights": str(folder.name), "same_weights": same_weights,
            "prepend_bos": info.prepend_bos, "threads": args.threads, "batch_size": batch,
            "seed": config.seed, "limits": limits,
            "items_rule": ("full sets" if args.full else
                           f"the first n items of the harness's seeded shuffle (evaluate.select_items, "
                           f"seed {config.seed}; the default profile's n is "
                           f"{sorted(set(P.harness_limits[n] for n in args.tasks))[0]}): "
                           + ", ".join(f"{n} {len(items[n])}" for n in args.tasks)),
            "versions": {"lm_eval": lm_eval.__version__, "torch": torch.__version__,
                         "transformers": transformers.__version__, "datasets": datasets.__version__},
            "lm_eval_tasks": {n: SPECS[n].lm_eval for n in args.tasks},
        },
        "tasks": tasks,
        "lm_eval_aggregate": {n: theirs[n]["aggregate"] for n in args.tasks},
        "timing": timing,
        "meets_target": all(c["meets_target"] for c in tasks.values()),
    }
    text = render(result)
    print(text)
    atomic_write_text(args.json, json.dumps(result, indent=1, default=float) + "\n")
    atomic_write_text(args.txt, text)
    print(f"wrote {args.json} and {args.txt}")
    return 0 if result["meets_target"] else 1


if __name__ == "__main__":
    sys.exit(main())
