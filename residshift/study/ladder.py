"""The scale ladder (notebook 10, ``python -m residshift ladder``, ``make ladder``): how the deep switch
moves with the training budget and the depth of the small GPTs this project trains.

A *rung* is one baseline run of the training half's recipe (``profiles.stage(TrainConfig, P)`` with
``mode="baseline"``) at one shape ``[depth, width, heads]`` of ``ladder_shapes`` and a budget of
``ladder_base_tokens x 4^k`` tokens (``k < ladder_rungs``), one seed (``ladder_seed``). Each rung is the
trainer's own run (:func:`residshift.train.trainer.train`: its run folder, key, checkpoints, lock and
exact resume); the ladder trains it in segments and, between segments, reads the logit lens on the
checkpoint: at ``ladder_base_tokens x 2^j`` tokens for every ``j >= -2`` up to the rung's budget, and on
the finished model. Each reading stores the per-window top-1 rates of the input and the next token at
``h_0..h_L`` on the held-out windows notebook 08 reads (WikiText-2 test, the training context,
``ladder_lens_windows``) and the unigram decoder's rates on the same positions, so notebook 10 computes
the deep-switch measure (:mod:`residshift.analysis.scale`) and C1.middle at every point from the
stored numbers.

**Corpus.** A rung trains on ``train_corpus`` while its budget needs at most ``ladder_max_epochs``
passes over it, else on ``ladder_large_corpus`` (WikiText-103's training split: the hub, or ``data/``);
where that cannot be read, the rung is refused with one line naming the fix.

**Records.** One JSON file per rung (``records_dir``: ``benchmarks/ladder/<profile>/`` for ``default``
and ``paper``, committed; ``build/smoke/ladder/`` for ``smoke``), rewritten atomically after every
reading: its ``key`` is the trainer's run key (configuration, tokenizer and training code), so a record
written by other code or settings is refused, not overwritten; a finished record is never retrained (a
fresh clone's ``make ladder`` finds the committed ones finished and trains nothing while the training code
is the one that wrote them). A killed ladder
resumes: the trainer resumes its run from the last checkpoint and the readings already recorded are kept.
While one process works on a rung it holds a lock (``results/ladder-locks/<rung>``) and the trainer
holds its own run lock while it trains.

**Planning.** Before training, the ladder measures each shape's tokens/s with the trainer's own steps
on the device (``ladder_speed_steps`` steps in a scratch folder), prints every rung's cost, and trains
the rungs in order of budget (all shapes of rung 0, then rung 1, ...) while the measured cost fits in
``ladder_hours``; what does not fit is listed and left for a later call.
"""
from __future__ import annotations

import json
import math
import shutil
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch

from ..analysis.stats import as_numpy
from ..core import profiles
from ..core.cache import atomic_write_text, code_state, load_verified
from ..core.machine import cpu_facts
from ..core.models import describe_model, load_model, wrap
from ..core.outputs import json_ready
from ..core.paths import REPO_ROOT, build_dir, results_dir
from ..train import data as D, trainer as T
from . import lens_setups
from ..train.lock import run_lock
from .training import unigram_rates

NAME = "10-the-scale-ladder"
RECORD_KIND = "residshift-ladder/1"
FIRST_POINT = -2  # the first reading at base x 2^-2 tokens
# What the plan adds to tokens / (tokens/s) for evaluations, checkpoints and lens readings: an allowance, not a
# measurement (the records hold what each rung took: training seconds and every segment's and reading's seconds).
OVERHEAD = 1.1


class LadderError(ValueError):
    """A ladder request that cannot be carried out as asked; the message names the fix."""


@dataclass(frozen=True)
class Rung:
    """One rung: a shape and a budget (``tokens = base x 4^k``); the vocabulary probe's cells
    (:mod:`.probe`) also set the tokenizer and the seed (None: the profile's ``train_tokenizer`` and
    ``ladder_seed``, and the name of the ladder's own rung)."""

    depth: int
    width: int
    heads: int
    k: int
    tokens: int
    tokenizer: str | None = None
    seed: int | None = None

    @property
    def shape(self) -> str:
        return f"{self.depth}x{self.width}"

    @property
    def setting(self) -> str:
        """The shape and the vocabulary: what the tokens/s depend on."""
        if self.tokenizer is None:
            return self.shape
        tag = self.tokenizer.rsplit(":", 1)[-1] if self.tokenizer.startswith("bpe:") else self.tokenizer
        return f"{self.shape}-v{tag}"

    @property
    def name(self) -> str:
        return f"{self.setting}-r{self.k}" + ("" if self.seed is None else f"-s{self.seed}")


# --------------------------------------------------------------------------------------------
# The plan
# --------------------------------------------------------------------------------------------


def _shapes(P) -> list[tuple[int, int, int]]:
    out = []
    for s in P.ladder_shapes:
        if not (isinstance(s, (list, tuple)) and len(s) == 3 and all(isinstance(v, int) and v > 0 for v in s)):
            raise LadderError(f"ladder_shapes holds {s!r}: each shape is [depth, width, heads] of positive integers")
        if s[1] % s[2]:
            raise LadderError(f"ladder shape {s}: the width must be a multiple of the heads")
        out.append(tuple(s))
    return out


def rungs(P) -> list[Rung]:
    """Every rung of the profile, in training order (budget first, then shape)."""
    if not isinstance(P.ladder_rungs, int) or P.ladder_rungs < 1:
        raise LadderError(f"ladder_rungs must be a positive integer, got {P.ladder_rungs!r}")
    base = int(P.ladder_base_tokens)
    return [Rung(d, w, h, k, base * 4 ** k) for k in range(P.ladder_rungs) for d, w, h in _shapes(P)]


def select(all_rungs: Sequence[Rung], only: Sequence[str] | None) -> list[Rung]:
    """The rungs named in ``only`` (names such as ``6x128-r2``, or a shape ``6x128`` for all its rungs)."""
    if not only:
        return list(all_rungs)
    names = {r.name for r in all_rungs} | {r.shape for r in all_rungs}
    unknown = [o for o in only if o not in names]
    if unknown:
        raise LadderError(f"unknown rung {', '.join(unknown)}; this profile's rungs: "
                          f"{', '.join(r.name for r in all_rungs)} (or a shape: "
                          f"{', '.join(sorted({r.shape for r in all_rungs}))}); more rungs: -p ladder_rungs=N")
    return [r for r in all_rungs if r.name in only or r.shape in only]


def base_config(P, rung: Rung) -> T.TrainConfig:
    """The rung's TrainConfig on the profile's own corpus (see :func:`config`)."""
    k4 = 4 ** rung.k
    cfg = profiles.stage(T.TrainConfig, P).with_(
        mode="baseline", layers=rung.depth, width=rung.width, heads=rung.heads, tokens=rung.tokens,
        seed=int(P.ladder_seed if rung.seed is None else rung.seed), eval_every=int(P.train_eval_every) * k4,
        checkpoint_every=max(int(P.train_checkpoint_every), 1) * k4)
    return cfg if rung.tokenizer is None else cfg.with_(tokenizer=rung.tokenizer)


def corpus_tokens(cfg: T.TrainConfig, tokenizer) -> int | None:
    """The training split's size in the run's tokens (None for a streamed corpus: it supplies any budget)."""
    if isinstance(cfg.corpus, dict):
        return None
    return int(len(D.named_corpus_tokens(cfg.corpus, cfg.split, tokenizer)))


def config(P, rung: Rung, tokenizer=None) -> tuple[T.TrainConfig, dict[str, Any]]:
    """The rung's TrainConfig and where its tokens come from: ``train_corpus`` while the budget needs at
    most ``ladder_max_epochs`` passes over it, else ``ladder_large_corpus``; a corpus that cannot be read
    is a :class:`LadderError` naming the fix."""
    cfg = base_config(P, rung)
    tokenizer = tokenizer or T.load_tokenizer(cfg)
    n = corpus_tokens(cfg, tokenizer)
    if n is None:
        return cfg, {"corpus": "stream", "corpus_tokens": None, "epochs": None}
    if rung.tokens <= P.ladder_max_epochs * n:
        return cfg, {"corpus": cfg.corpus, "corpus_tokens": n, "epochs": rung.tokens / n}
    large = P.ladder_large_corpus
    cfg = cfg.with_(corpus=large, split="train")
    try:
        m = corpus_tokens(cfg, tokenizer)
    except Exception as err:  # noqa: BLE001 - offline hub, missing file: one line naming the fix
        raise LadderError(
            f"rung {rung.name} needs {rung.tokens:,} tokens: {P.train_corpus} {P.train_split} holds {n:,} "
            f"(at most {P.ladder_max_epochs} epochs = {P.ladder_max_epochs * n:,}), and {large}'s training split "
            f"cannot be read here ({type(err).__name__}: {(str(err).splitlines() or [''])[0][:160]}). Fetch it with "
            f"`make data` where the hub is reachable (or put it in $RESIDSHIFT_DATA), or leave the rung out "
            f"(-p ladder_rungs={rung.k})") from None
    if rung.tokens > P.ladder_max_epochs * m:
        raise LadderError(f"rung {rung.name} needs {rung.tokens:,} tokens, more than {P.ladder_max_epochs} epochs of "
                          f"{large} train ({m:,}): leave it out (-p ladder_rungs={rung.k})")
    return cfg, {"corpus": large, "corpus_tokens": m, "epochs": rung.tokens / m}


def reading_steps(cfg: T.TrainConfig, P) -> list[int]:
    """The optimiser steps after which the lens is read: ``base x 2^j`` tokens (``j >= -2``) below the
    budget, then the last step (the finished model)."""
    tps, last = cfg.tokens_per_step(), cfg.steps()
    out, j = [], FIRST_POINT
    while True:
        s = math.ceil(P.ladder_base_tokens * 2.0 ** j / tps)
        if s >= last:
            break
        if s >= 1 and (not out or s > out[-1]):
            out.append(s)
        j += 1
    return out + [last]


def records_dir(P, out: str | Path | None = None) -> Path:
    if out is not None:
        return Path(out).expanduser()
    if P.profile == "smoke":
        return build_dir() / "smoke" / "ladder"
    return REPO_ROOT / "benchmarks" / "ladder" / P.profile


def read_record(path: Path, key: str | None = None) -> dict[str, Any] | None:
    """A rung's record (None if there is none); one of another key, or not a ladder record, is refused."""
    if not path.is_file():
        return None
    try:
        rec = json.loads(path.read_text())
        if not isinstance(rec, dict) or rec.get("kind") != RECORD_KIND:
            raise ValueError("not a residshift ladder record")
    except ValueError as err:
        raise LadderError(f"{path} is not a readable ladder record ({str(err).splitlines()[0][:120]}): move it "
                          "away or delete it, and run the ladder again") from None
    if key is not None and rec.get("key") != key:
        raise LadderError(f"{path} was trained by other code or settings (its run key {rec.get('key')}, this "
                          f"checkout's {key}; written at {rec.get('code', {}).get('commit', '?')}): move it away "
                          "or delete it to train the rung again, or check out the commit that wrote it")
    return rec


def finished(rec: Mapping[str, Any] | None) -> bool:
    return bool(rec) and bool(rec.get("finished"))


# --------------------------------------------------------------------------------------------
# Speed, measured before planning
# --------------------------------------------------------------------------------------------


def measure_speed(cfg: T.TrainConfig, *, steps: int, device: str | None) -> dict[str, Any]:
    """Tokens/s of the trainer's own step at ``cfg``'s shape on ``device``: ``steps`` steps in a scratch
    folder (the median of the steps after the first two: compile and warm-up)."""
    scratch = Path(tempfile.mkdtemp(prefix="residshift-ladder-speed-"))
    try:
        probe = cfg.with_(tokens=cfg.tokens_per_step() * (steps + 2), eval_every=10 ** 9, checkpoint_every=10 ** 9,
                          warmup=0)
        t0 = time.perf_counter()
        T.train(probe, scratch, device=device, progress=False, stop_after=steps + 2)
        rates = [r["tokens_per_s"] for r in T.read_log(scratch) if r.get("tokens_per_s")][2:]
        return {"tokens_per_s": float(statistics.median(rates)) if rates else None, "steps": len(rates),
                "seconds": time.perf_counter() - t0}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def plan(P, selected: Sequence[Rung], records: Path, *, device: str | None, hours: float | None = None,
         speeds: Mapping[str, float] | None = None, log: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """Each rung's status and measured cost, and whether it fits in ``hours`` (``ladder_hours``):
    ``[{rung, status, hours, fits, why}]`` in training order. ``speeds`` (tokens/s per shape) skips
    the measurement (tests)."""
    budget = float(P.ladder_hours if hours is None else hours)
    speeds = dict(speeds or {})
    rows, spent = [], 0.0
    for rung in selected:
        rec = read_record(records / f"{rung.name}.json")
        if finished(rec):
            rows.append({"rung": rung, "status": "finished", "hours": 0.0, "fits": False, "why": "recorded"})
            continue
        if rung.setting not in speeds:
            s = measure_speed(base_config(P, rung), steps=int(P.ladder_speed_steps), device=device)
            speeds[rung.setting] = s["tokens_per_s"]
            log(f"speed {rung.setting}: {s['tokens_per_s']:,.0f} tokens/s ({s['steps']} steps of the trainer, "
                f"{s['seconds']:.0f} s)")
        done = (rec or {}).get("points", [])
        left = rung.tokens - (done[-1]["tokens"] if done else 0)
        h = left / speeds[rung.setting] / 3600 * OVERHEAD
        fits = spent + h <= budget
        spent += h if fits else 0.0
        rows.append({"rung": rung, "status": "partial" if done else "new", "hours": h, "fits": fits,
                     "why": "" if fits else f"does not fit in ladder_hours={budget:g} ({spent:.2f} h planned)",
                     "tokens_per_s": speeds[rung.setting]})
    return rows


def write_plan(path: Path, rows: Sequence[Mapping[str, Any]], P) -> None:
    """The plan as measured, with the machine that measured it: each rung's status, hours and the trainer's
    tokens/s at its setting, so that a notebook can state what the rungs not yet trained would cost here."""
    data = {"kind": "residshift-ladder-plan/1", "profile": P.profile,
            "measured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "machine": cpu_facts(),
            "threads": torch.get_num_threads(), "overhead": OVERHEAD,
            "rows": [{"rung": r["rung"].name, "setting": r["rung"].setting, "tokens": r["rung"].tokens,
                      "status": r["status"], "hours": r["hours"], "tokens_per_s": r.get("tokens_per_s")}
                     for r in rows]}
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(json_ready(data), indent=1) + "\n")


# --------------------------------------------------------------------------------------------
# One rung
# --------------------------------------------------------------------------------------------


def _round(a, digits: int = 6) -> list:
    return np.round(as_numpy(a).astype(np.float64), digits).tolist()


def wrap_gpt(model, tokenizer, *, name: str, source: str):
    """An in-memory trained GPT as ``load_model`` returns a model: ``(nnsight model, tokenizer, ModelInfo)``."""
    return wrap(model, tokenizer, describe_model(model, tokenizer, name=name, source=source))


def read_lens(lm, tok, info, P, *, context: int) -> dict[str, Any]:
    """The logit lens on one model: per-window top-1 rates of the input and next token at h_0..h_L, the
    unigram decoder's per-window rates, and the model's own next-token loss on the windows."""
    res = lens_setups.ladder_rung(P, context).run((lm, tok, info))
    u = unigram_rates(res, tok, info)
    logprob = as_numpy(res.per_seq["logprob_next"]) if "logprob_next" in res.per_seq else None
    return {"n_windows": int(res.n_seq), "n_layers": int(res.n_layers),
            "top1_input": _round(res.per_seq["top1_input"]), "top1_next": _round(res.per_seq["top1_next"]),
            "unigram_input": _round(u["top1_input"]), "unigram_next": _round(u["top1_next"]),
            "loss": None if logprob is None else float(-logprob[:, -1].mean())}


def run_folder(P, rung: Rung, key: str) -> Path:
    """The rung's run folder: the trainer's files (checkpoint, log, model, summary) in a folder of the
    ladder's own, so that the checkpoints it reads mid-run are never a finished grid run's."""
    return results_dir() / "ladder" / P.profile / rung.name / key


def _checkpoint_state(run: Path) -> tuple[int, dict | None]:
    path = run / "checkpoint.pt"
    if not path.is_file():
        return 0, None
    saved = load_verified(path, map_location="cpu")
    return int(saved["state"]["step"]), saved


def run_rung(P, rung: Rung, records: Path, *, device: str | None = None, progress: bool = True,
             log: Callable[[str], None] = print) -> dict[str, Any]:
    """Train ``rung`` (resuming) and read the lens at each of its reading steps; returns its record."""
    cfg, source = config(P, rung)
    tokenizer = T.load_tokenizer(cfg)
    key = T.run_dir_for(cfg, device, tokenizer).name  # the trainer's run label and key
    run = run_folder(P, rung, key)
    path = records / f"{rung.name}.json"
    with run_lock(results_dir() / "ladder-locks" / f"{P.profile}-{rung.name}"):
        rec = read_record(path, key)
        if finished(rec):
            return rec
        resolved = cfg.resolved(T._device(device))
        rec = rec or {"kind": RECORD_KIND, "rung": rung.name, "shape": [rung.depth, rung.width, rung.heads],
                      "k": rung.k, "key": key, "profile": P.profile, "config": json_ready(asdict(resolved)),
                      "source": source, "points": [], "finished": False}
        vocab = T.vocab_size(cfg, tokenizer)
        for step in reading_steps(cfg, P):
            if any(p["step"] == step for p in rec["points"]):
                continue
            last = step == cfg.steps()
            t0 = time.perf_counter()
            at, saved = _checkpoint_state(run)
            if not (run / "summary.json").is_file() and at < step:
                T.train(cfg, run, device=device, progress=progress and rung.name,
                        stop_after=None if last else step - at)
                at, saved = _checkpoint_state(run)
            t_train = time.perf_counter() - t0
            where = T._device(device)  # the lens runs where the model trained (the paper ladder: the GPU)
            if last:
                loaded = load_model(str(run / "model"), device=where)
                seconds = T.read_summary(run)["train_seconds"]
            else:
                if at != step or saved is None:  # a finished run whose record lost a mid-run reading
                    raise LadderError(f"{run} is past step {step} (its checkpoint: step {at}) and {path} lacks "
                                      f"the reading there: delete {run} to train the rung again (the readings "
                                      "already recorded are kept)")
                model = T.init_model(cfg, vocab, tokenizer)
                model.load_state_dict(saved["module"])
                model.to(where)
                loaded = wrap_gpt(model, tokenizer, name=f"ladder {rung.name} step {step}", source=f"local:{run}")
                seconds = saved["state"]["seconds"]
            t1 = time.perf_counter()
            reading = read_lens(*loaded, P, context=cfg.context)
            rec["points"].append({"step": step, "tokens": step * cfg.tokens_per_step(), "train_seconds": seconds,
                                  "lens_seconds": time.perf_counter() - t1, "segment_seconds": t_train, **reading})
            rec["points"].sort(key=lambda p: p["step"])
            if last:
                s = T.read_summary(run)
                rec.update(finished=True, summary={k: s[k] for k in ("steps", "tokens", "val_loss", "unigram_ce",
                                                                      "below_unigram", "train_seconds", "tokens_per_s",
                                                                      "epochs", "model", "device", "torch")})
            rec.update(machine=cpu_facts(), threads=torch.get_num_threads(), code=code_state())
            records.mkdir(parents=True, exist_ok=True)
            atomic_write_text(path, json.dumps(json_ready(rec), indent=None, separators=(",", ":")) + "\n")
            log(f"{rung.name}: step {step:,} ({step * cfg.tokens_per_step():,} tokens) read: top-1 next at h_1 "
                f"{np.mean(np.asarray(reading['top1_next'])[:, 1]):.3f}, at h_L "
                f"{np.mean(np.asarray(reading['top1_next'])[:, -1]):.3f}")
        return rec


def run_ladder(P, *, only: Sequence[str] | None = None, hours: float | None = None, out: str | Path | None = None,
               device: str | None = None, dry_run: bool = False, progress: bool = True,
               log: Callable[[str], None] = print, among: Sequence[Rung] | None = None,
               plan_file: str | None = None) -> list[dict[str, Any]]:
    """Plan (speeds measured first), then train and read the rungs that fit; returns the plan rows.
    ``among``: the rungs to choose from (default the ladder's own; the vocabulary probe passes its cells).
    ``plan_file``: a file name in the records folder the plan is written to (:func:`write_plan`) before
    anything trains."""
    records = records_dir(P, out)
    if records.exists() and not records.is_dir():
        raise LadderError(f"{records} is a file: give --out a folder (it is created)")
    chosen = select(rungs(P) if among is None else among, only)
    for r in chosen:  # refuse foreign records and unreadable corpora before anything trains
        cfg, _ = config(P, r)
        read_record(records / f"{r.name}.json", T.run_dir_for(cfg, device).name)
    rows = plan(P, chosen, records, device=device, hours=hours, log=log)
    if plan_file:
        write_plan(records / plan_file, rows, P)
    for row in rows:
        r = row["rung"]
        log(f"  {r.name:<12} {r.tokens:>13,} tokens  {row['status']:<9} "
            + ("" if row["status"] == "finished" else f"{row['hours']:.2f} h  ")
            + ("train" if row["fits"] else row["why"]))
    if all(row["status"] == "finished" for row in rows):
        log(f"every rung is recorded in {records}: nothing to train")
    if dry_run:
        return rows
    for row in rows:
        if row["fits"]:
            run_rung(P, row["rung"], records, device=device, progress=progress, log=log)
    return rows


def load_records(P, out: str | Path | None = None) -> dict[str, dict[str, Any]]:
    """The recorded rungs of the profile (finished or not), by rung name, in training order."""
    records = records_dir(P, out)
    out_: dict[str, dict[str, Any]] = {}
    for r in rungs(P):
        rec = read_record(records / f"{r.name}.json")
        if rec is not None:
            out_[r.name] = rec
    return out_


# --------------------------------------------------------------------------------------------
# Notebook 10: the measure at every reading, the figure and the cost
# --------------------------------------------------------------------------------------------

REFERENCE_FIGURES = REPO_ROOT / "figures"  # notebook 03's committed numbers: the pretrained references
PRETRAINED = ("03-alignment-curves-metrics.json", "03-alignment-curves-c1.json")


def records_for_notebook(P, *, log: Callable[[str], None] = print) -> dict[str, dict[str, Any]]:
    """The rung records notebook 10 reads. ``ladder_in_study`` (smoke): train the tiny ladder here
    (seconds). Otherwise read the records ``make ladder`` wrote (committed for ``default``) and train
    nothing, saying which rungs are there and which are not."""
    if P.ladder_in_study:
        run_ladder(P, log=lambda _line: None, progress=False)
    recs = load_records(P)
    names = [r.name for r in rungs(P)]
    done = [n for n in names if finished(recs.get(n))]
    missing = [n for n in names if n not in done]
    src = records_dir(P)
    where = src.relative_to(REPO_ROOT) if src.is_relative_to(REPO_ROOT) else src
    log(f"{len(done)} of {len(names)} rungs finished in {where}"
        + ("" if P.ladder_in_study else " (written by `make ladder`; this notebook trains nothing)")
        + (f"; not there: {', '.join(missing)} (`make ladder` trains them)" if missing else ""))
    return recs


def reading_rows(recs: Mapping[str, Mapping[str, Any]], P) -> list[dict[str, Any]]:
    """The deep-switch measure (``scale.switch_on_windows``: windows are the unit, one seed per rung) at
    every reading of every rung, with the rung's shape, budget and whether it is the finished model."""
    from ..analysis import scale

    out = []
    for name, rec in recs.items():
        depth, width, _ = rec["shape"]
        last_step = max(p["step"] for p in rec["points"]) if rec.get("finished") else None
        for p in rec["points"]:
            row = scale.switch_on_windows(p["top1_input"], p["top1_next"], p["unigram_input"], p["unigram_next"],
                                          model=f"{name} at {p['tokens']:,} tokens", n_boot=int(P.train_boot),
                                          seed=int(P.seed), source=NAME)
            tn = np.asarray(p["top1_next"])
            out.append({"rung": name, "shape": f"{depth}x{width}", "depth": depth, "width": width, "k": rec["k"],
                        "tokens": p["tokens"], "final": p["step"] == last_step, "S1": row.early_share,
                        "S1_lo": row.early_share_ci[0], "S1_hi": row.early_share_ci[1], "middle": row.middle,
                        "outcome": row.outcome, "why": row.why, "departure_depth": row.departure_depth,
                        "top1_next_h1": float(tn[:, 1].mean()), "top1_next_hL": float(tn[:, -1].mean()),
                        "loss": p.get("loss"), "row": row.as_dict()})
    return out


def pretrained_references(folder: Path | None = None) -> list[dict[str, Any]]:
    """The deep-switch measure of the two pretrained models from notebook 03's committed numbers
    (``scale.pretrained_rows``)."""
    from ..analysis import scale

    folder = folder or REFERENCE_FIGURES
    paths = [folder / n for n in PRETRAINED]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise LadderError(f"notebook 03's numbers are missing ({', '.join(missing)}): run notebook 03 at default")
    metrics, c1 = (json.loads(p.read_text()) for p in paths)
    return [{"model": r.model, "S1": r.early_share, "S1_lo": r.early_share_ci[0], "S1_hi": r.early_share_ci[1],
             "outcome": r.outcome, "middle": r.middle, "n_layers": r.n_layers, "row": r.as_dict()}
            for r in scale.pretrained_rows(metrics, c1)]


def cost_table(recs: Mapping[str, Mapping[str, Any]]):
    """What each rung cost on the machine that trained it: tokens, epochs, seconds, tokens/s, the lens."""
    import pandas as pd

    rows = []
    for name, rec in recs.items():
        s = rec.get("summary") or {}
        pts = rec["points"]
        rows.append({"rung": name, "tokens": rec["config"]["tokens"], "corpus": rec["source"]["corpus"],
                     "epochs": rec["source"]["epochs"], "finished": bool(rec.get("finished")),
                     "train_s": s.get("train_seconds", pts[-1]["train_seconds"] if pts else None),
                     "tokens_per_s": s.get("tokens_per_s"), "lens_s": sum(p["lens_seconds"] for p in pts),
                     "readings": len(pts), "val_loss": s.get("val_loss"),
                     "cpu": (rec.get("machine") or {}).get("cpu"), "threads": rec.get("threads")})
    return pd.DataFrame(rows).set_index("rung")


SHAPE_COLORS = ("#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e")


def ladder_panel(rows: Sequence[Mapping[str, Any]], refs: Sequence[Mapping[str, Any]]):
    """Left: S1 against tokens (log axis), one colour per shape; lines join a run's readings, filled
    markers are finished rungs (annealed models) with their intervals; the pretrained models and the 0.5
    threshold as horizontal lines. Right: the model's own next-token top-1 (h_L) and at h_1 against tokens."""
    import matplotlib.pyplot as plt

    from ..analysis import scale

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10.5, 4.0), constrained_layout=True)
    shapes = list(dict.fromkeys(r["shape"] for r in rows))
    for i, shape in enumerate(shapes):
        c = SHAPE_COLORS[i % len(SHAPE_COLORS)]
        for j, rung in enumerate(dict.fromkeys(r["rung"] for r in rows if r["shape"] == shape)):
            pts = sorted((r for r in rows if r["rung"] == rung), key=lambda r: r["tokens"])
            x = [r["tokens"] for r in pts]
            ax.plot(x, [r["S1"] for r in pts], color=c, lw=0.8, alpha=0.5)
            bx.plot(x, [r["top1_next_hL"] for r in pts], color=c, lw=0.8, alpha=0.5)
            bx.plot(x, [r["top1_next_h1"] for r in pts], color=c, lw=0.8, alpha=0.5, ls=":")
            fin = [r for r in pts if r["final"]]
            for r in fin:
                lo, hi = r["S1_lo"], r["S1_hi"]
                if lo is not None and hi is not None:
                    ax.errorbar(r["tokens"], r["S1"], yerr=[[r["S1"] - lo], [hi - r["S1"]]], color=c, capsize=2,
                                lw=1)
                ax.plot(r["tokens"], r["S1"], "o", color=c, label=f"{shape} (blocks x width)" if j == 0 else None)
                bx.plot(r["tokens"], r["top1_next_hL"], "o", color=c, label=f"{shape}: h_L" if j == 0 else None)
                bx.plot(r["tokens"], r["top1_next_h1"], "o", mfc="white", color=c,
                        label=f"{shape}: h_1" if j == 0 else None)
    for ref, ls in zip(refs, ("--", "-.", ":")):
        ax.axhline(ref["S1"], color="0.35", ls=ls, lw=1, label=f"{ref['model']} ({ref['n_layers']} blocks)")
    ax.axhline(scale.SHARE_THRESHOLD, color="black", lw=0.8, alpha=0.6)
    ax.text(0.99, scale.SHARE_THRESHOLD, "deep-switch threshold ", transform=ax.get_yaxis_transform(), ha="right",
            va="bottom", fontsize=8)
    from matplotlib.ticker import LogLocator, NullFormatter

    from .training import tokens_axis

    for a in (ax, bx):
        a.set_xscale("log")
        a.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 3.0)))
        a.xaxis.set_minor_formatter(NullFormatter())
        tokens_axis(a)
        a.set_xlabel("training tokens")
    ax.set_ylabel("early share S1 = top-1(next) at h_1 / at h_L")
    ax.set_ylim(0, 1.1)  # S1 lies in [0, 1] up to noise; an interval reaching past it is clipped
    bx.set_ylabel("next-token top-1 rate (logit lens)")
    ax.set_title("How much of the prediction is made in block 0")
    bx.set_title("Next-token top-1 after block 0 (h_1) and at the output (h_L)")
    ax.legend(fontsize=7, loc="best")
    bx.legend(fontsize=7, loc="upper left", ncol=2)
    return fig


def closest_rung(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The rung the mitigation should be tested on (declared with the ladder): the largest-budget finished
    rung with the deep switch; if none has it, the finished rung with the lowest S1 (the closest to it).
    ``{rung, why}``, or None when no rung is finished."""
    from ..analysis import scale

    fin = [r for r in rows if r["final"] and r["S1"] is not None]
    if not fin:
        return None
    deep = [r for r in fin if r["outcome"] == scale.DEEP_SWITCH]
    if deep:
        r = max(deep, key=lambda r: (r["tokens"], r["depth"]))
        return {"rung": r["rung"], "has_switch": True, "S1": r["S1"],
                "why": "the largest finished rung with the deep switch"}
    r = min(fin, key=lambda r: r["S1"])
    return {"rung": r["rung"], "has_switch": False, "S1": r["S1"],
            "why": "no finished rung has the deep switch: the one with the lowest early share"}


def _mitigation_rung(rows, costs, P) -> dict[str, Any] | None:
    from .mitigation import choose_rung  # the mitigation's declared choice (it builds on this module)

    return choose_rung(rows, costs, P)


def ladder_numbers(rows, refs, costs, P) -> dict[str, Any]:
    """What figure 10 rests on (``figures/10-the-scale-ladder.json``): every reading (S1, the next-token
    top-1 at h_1 and h_L, the departure depth), the finished rungs' rows, the pretrained references, the
    cost, the closest rung and the mitigation's rung. No budget is extrapolated: S1 falls with the budget
    because the output's top-1 rises, not because the first block predicts less, so a line through S1
    says nothing about when a rung would reach a pretrained model's."""
    return {"readings": [{k: v for k, v in r.items() if k != "row"} for r in rows],
            "rows": [r["row"] for r in rows if r["final"]],
            "pretrained": refs,
            "cost": json.loads(costs.reset_index().to_json(orient="records")),
            "closest": closest_rung(rows), "mitigation_rung": _mitigation_rung(rows, costs, P), "profile": P.profile,
            "design": {"shapes": P.ladder_shapes, "base_tokens": P.ladder_base_tokens, "rungs": P.ladder_rungs,
                       "seed": P.ladder_seed, "max_epochs": P.ladder_max_epochs, "lens_windows": P.ladder_lens_windows}}


TRAINING_VERDICTS = ("06-training-with-attenuation-verdicts", "07-learned-gates-and-benchmarks-verdicts",
                     "08-misalignment-after-mitigation-verdicts")
REGIMES08 = "08-misalignment-after-mitigation-regimes"


def training_scale(folder: Path | None = None, *, log: Callable[[str], None] = print) -> list[dict[str, Any]] | None:
    """Every C2/C3/C4 training verdict of notebooks 06-08 with the scale it speaks for
    (``scale.scale_training_verdicts`` on their saved numbers in ``folder``, default this run's figures);
    None, saying so, where those notebooks have not run."""
    from ..analysis import scale
    from ..core.paths import figures_dir

    folder = folder or figures_dir()
    paths = {n: folder / f"{n}.json" for n in (*TRAINING_VERDICTS, REGIMES08)}
    missing = [n for n, p in paths.items() if not p.is_file()]
    if missing:
        log(f"notebooks 06-08 have not saved {', '.join(missing)} in {folder}: run them first to see their "
            "verdicts' scale")
        return None
    data = {n: json.loads(p.read_text()) for n, p in paths.items()}
    return scale.scale_training_verdicts({n: data[n] for n in TRAINING_VERDICTS}, data[REGIMES08],
                                         data[TRAINING_VERDICTS[2]])
