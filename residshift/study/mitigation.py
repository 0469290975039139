"""The mitigation where the model has the deep switch (notebook 10, ``python -m residshift ladder
--mitigation``): the baseline, a late cut and the learned gates on one rung of the scale ladder, paired
by seed, with the seed count chosen from a pilot's measured spread.

**The rung** (:func:`choose_rung`, declared before the ladder's numbers were read): among the finished
rungs with the deep switch (:mod:`residshift.analysis.scale`), the largest budget (then the deepest)
whose pilot fits in ``ladder_mitigation_hours`` at the rung's measured tokens/s; where no rung has the
switch, the one with the lowest early share S1 whose pilot fits. Larger rungs left out for their cost are
listed with their hours.

**The arms**, each a run of the trainer at the rung's configuration, every arm of a seed from the same
initialisation and data order (the trainer's pairing): ``baseline``; ``late cut``: ``fixed`` with
``alpha = ladder_mitigation_alpha`` at the last block, at the training half's site (``train_cut_site``:
the authors' harness attenuates both adds of the block); ``learned``: a learned gate per block
(``train_gate_init``, ``train_gate_lr``), as notebook 07's. The ladder's own run is seed
``ladder_seed``'s baseline (reused, not retrained).

**The seed count** (:func:`seed_plan`): the pilot trains ``ladder_mitigation_pilot`` seeds of every arm;
per mitigation, d_s = final validation loss (mean over the run's held-out windows) minus the baseline's of
the same seed; sd = the larger of the two arms' pilot standard deviations. The count is the smallest
``n`` (from the pilot's up to ``ladder_mitigation_max_seeds``) whose minimum detectable effect
``(t_(1-0.05/2) + t_0.8) sd / sqrt(n)`` is at most the rules' materiality margin
(``verdicts.LOSS_MARGIN``); if none is, ``ladder_mitigation_max_seeds``, or fewer where the hours left
do not allow more; the MDE at the chosen count is written to the record before the remaining seeds
train, and never recomputed after.

**The verdicts** are the training half's own rules on these runs (``verdicts.c2_training_late_cut``,
``verdicts.c3_training_beats_baseline``), each with the scale clause of its baseline
(``scale.with_scale``: the switch measure of this rung's baselines across the seeds); :func:`seed_table`
shows each seed's baseline S1 beside its paired loss changes (the rung was chosen on one seed's S1).

Records: ``benchmarks/ladder/<profile>/mitigation-<rung>.json`` (smoke: the build folder), rewritten
atomically after every seed; a killed run resumes (the trainer resumes its runs; finished seeds are kept).
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..analysis import scale, stats, verdicts
from ..claims import seeds_needed
from ..core.cache import atomic_write_text, code_state
from ..core.machine import cpu_facts
from ..core.models import load_model
from ..core.outputs import json_ready
from ..core.paths import results_dir
from ..train import final, from_profile, trainer as T
from ..train.lock import run_lock
from . import ladder

KIND = "residshift-ladder-mitigation/1"
ARMS = ("baseline", "late cut", "learned")
MITIGATIONS = ARMS[1:]


def arm_config(P, rung: ladder.Rung, arm: str, seed: int) -> T.TrainConfig:
    """The TrainConfig of one arm and seed at ``rung`` (the ladder's configuration of the rung)."""
    cfg = ladder.config(P, rung)[0].with_(seed=int(seed))
    if arm == "baseline":
        return cfg
    if arm == "late cut":
        return cfg.with_(mode="fixed", alpha=float(P.ladder_mitigation_alpha), alpha_layers=(rung.depth - 1,),
                         **from_profile.mode_settings(P, "fixed"))
    if arm == "learned":
        return cfg.with_(mode="learned", **from_profile.mode_settings(P, "learned"))
    raise ValueError(f"unknown arm {arm!r}; the arms are {ARMS}")


def arm_folder(P, rung: ladder.Rung, arm: str, seed: int, cfg: T.TrainConfig, device) -> Path:
    """Seed ``ladder_seed``'s baseline is the ladder's own run; the other runs live beside it."""
    key = T.run_dir_for(cfg, device).name
    if arm == "baseline" and int(seed) == int(P.ladder_seed):
        return ladder.run_folder(P, rung, key)
    return results_dir() / "ladder" / P.profile / f"mitigation-{rung.name}" / key


def records_path(P, rung_name: str, out=None) -> Path:
    return ladder.records_dir(P, out) / f"mitigation-{rung_name}.json"


# --------------------------------------------------------------------------------------------
# The rung and the seed count
# --------------------------------------------------------------------------------------------


def pilot_hours(P, rung_name: str, costs) -> float | None:
    """Hours of the pilot at the rung's measured tokens/s (its baseline seed is the ladder's run)."""
    tps = costs.loc[rung_name, "tokens_per_s"] if rung_name in costs.index else None
    if not tps:
        return None
    runs = int(P.ladder_mitigation_pilot) * len(ARMS) - 1
    return runs * float(costs.loc[rung_name, "tokens"]) / float(tps) / 3600 * ladder.OVERHEAD


def choose_rung(rows: Sequence[Mapping[str, Any]], costs, P) -> dict[str, Any] | None:
    """The rung the comparison runs on (module docstring): ``{rung, has_switch, S1, hours, why,
    left_out}``, or None when no rung is finished."""
    fin = [r for r in rows if r["final"] and r["S1"] is not None]
    if not fin:
        return None
    budget = float(P.ladder_mitigation_hours)
    deep = sorted((r for r in fin if r["outcome"] == scale.DEEP_SWITCH), key=lambda r: (-r["tokens"], -r["depth"]))
    pool = deep or sorted(fin, key=lambda r: r["S1"])
    left_out = []
    for r in pool:
        h = pilot_hours(P, r["rung"], costs)
        if h is not None and h <= budget:
            why = ("the largest finished rung with the deep switch whose pilot fits in ladder_mitigation_hours"
                   if deep else "no finished rung has the deep switch: the lowest early share whose pilot fits")
            return {"rung": r["rung"], "has_switch": bool(deep), "S1": r["S1"], "hours": h, "why": why,
                    "left_out": left_out}
        left_out.append({"rung": r["rung"], "pilot_hours": h})
    return {"rung": None, "has_switch": bool(deep), "S1": None, "hours": None, "left_out": left_out,
            "why": f"no candidate's pilot fits in ladder_mitigation_hours={budget:g}"}


def seed_plan(diffs: Mapping[str, Sequence[float]], P, *, hours_per_seed: float | None,
              hours_left: float | None) -> dict[str, Any]:
    """The seed count from the pilot's paired differences (module docstring)."""
    sds = {arm: float(np.std(np.asarray(d, dtype=np.float64), ddof=1)) for arm, d in diffs.items()}
    sd = max(sds.values())
    n0 = len(next(iter(diffs.values())))
    n_max = max(int(P.ladder_mitigation_max_seeds), n0)  # a maximum below the pilot keeps the pilot's seeds
    margin = verdicts.LOSS_MARGIN
    mde = {n: stats.mde_paired_mean(sd, n, alpha=verdicts.TEST_ALPHA, power=verdicts.POWER, sided="two")
           for n in range(max(n0, 2), n_max + 1)}
    fits = [n for n, m in mde.items() if m <= margin]
    n, why = (fits[0], f"the smallest count whose MDE is at most the {margin:g}-nat margin") if fits else \
        (n_max, f"no count up to {n_max} seeds (ladder_mitigation_max_seeds={P.ladder_mitigation_max_seeds}, at "
                f"least the pilot's {n0}) reaches the {margin:g}-nat margin")
    if hours_per_seed and hours_left is not None:
        afford = n0 + int(max(hours_left, 0) // hours_per_seed)
        if afford < n:
            n, why = max(afford, n0), why + f"; the hours left ({hours_left:.2f} h) allow {max(afford, n0)}"
    return {"pilot_seeds": n0, "pilot_sd": sds, "sd": sd, "margin": margin, "mde_by_n": {str(k): v for k, v in mde.items()},
            "n_seeds": n, "mde": mde.get(n), "why": why, "declared": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "rule": "smallest n whose two-sided 5% MDE at power 0.8, (t_(1-a/2) + t_0.8) sd/sqrt(n), is at most the "
                    "margin; sd the larger pilot sd of the two mitigations' paired differences"}


# --------------------------------------------------------------------------------------------
# Training and measuring one seed
# --------------------------------------------------------------------------------------------


def run_seed(P, rung: ladder.Rung, seed: int, *, device, progress: bool = False) -> dict[str, Any]:
    """Train (or reuse) every arm of ``seed``; per arm the final per-window validation losses and alphas,
    and the baseline's lens reading (for the switch measure across seeds)."""
    out: dict[str, Any] = {}
    for arm in ARMS:
        cfg = arm_config(P, rung, arm, seed)
        run = arm_folder(P, rung, arm, seed, cfg, device)
        T.train(cfg, run, device=device, progress=progress and f"{rung.name} {arm} s{seed}")
        s = T.read_summary(run)
        ev = final.final_eval(run, device=T._device(device))
        out[arm] = {"key": s["key"], "val_loss": s["val_loss"], "losses": np.asarray(ev["losses"]).tolist(),
                    "alphas": ev["alphas"], "train_seconds": s["train_seconds"], "tokens_per_s": s["tokens_per_s"],
                    "learned": s.get("learned")}
        if arm == "baseline":
            lm, tok, info = load_model(str(run / "model"), device=T._device(device))
            out["baseline_lens"] = ladder.read_lens(lm, tok, info, P, context=cfg.context)
    return out


def _diffs(rec: Mapping[str, Any]) -> dict[str, list[float]]:
    seeds = sorted(rec["seeds"], key=int)
    return {arm: [float(np.mean(rec["seeds"][s][arm]["losses"]) - np.mean(rec["seeds"][s]["baseline"]["losses"]))
                  for s in seeds] for arm in MITIGATIONS}


def _save(path: Path, rec: Mapping[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(json_ready(dict(rec)), separators=(",", ":")) + "\n")


def run_mitigation(P, *, rung_name: str | None = None, out=None, device=None, hours: float | None = None,
                   progress: bool = False, log: Callable[[str], None] = print) -> dict[str, Any] | None:
    """Choose the rung (unless named), train the pilot, declare the seed count, train the rest."""
    recs = ladder.load_records(P, out)
    existing = load(P, out=out) if rung_name is None else None
    if existing is not None:  # a comparison already started keeps its rung (resume, or a fresh clone's record)
        rung_name, choice = existing["rung"], existing["choice"]
    elif rung_name is None:
        choice = choose_rung(ladder.reading_rows(recs, P), ladder.cost_table(recs) if recs else None, P)
        if choice is None or choice["rung"] is None:
            log("mitigation: " + ("no finished rung yet: run the ladder first" if choice is None else choice["why"]))
            return None
        rung_name = choice["rung"]
    else:
        choice = {"rung": rung_name, "why": "named on the command line"}
    rung = ladder.select(ladder.rungs(P), [rung_name])[0]
    if existing is None and not records_path(P, rung.name, out).is_file() and not ladder.finished(recs.get(rung.name)):
        raise ladder.LadderError(f"the ladder has not finished rung {rung.name}: run `python -m residshift ladder "
                                 f"--profile {P.profile} --only {rung.name}` first (its run is the comparison's seed "
                                 f"{P.ladder_seed} baseline)")
    path = records_path(P, rung.name, out)
    budget = float(P.ladder_mitigation_hours if hours is None else hours)
    with run_lock(results_dir() / "ladder-locks" / f"{P.profile}-mitigation-{rung.name}"):
        rec = read_record(path)
        for s_, per in (rec or {}).get("seeds", {}).items():  # a record of other code or settings is refused
            for arm in ARMS:
                want = T.run_dir_for(arm_config(P, rung, arm, int(s_)), device).name.rsplit("-", 1)[1]
                if per[arm]["key"] != want:
                    raise ladder.LadderError(
                        f"{path} holds seed {s_} of '{arm}' trained by other code or settings (run key "
                        f"{per[arm]['key']}, this checkout's {want}): move it away or delete it to run the comparison "
                        "again, or check out the commit that wrote it")
        rec = rec or {"kind": KIND, "rung": rung.name, "choice": choice, "arms": list(ARMS), "seeds": {},
                      "plan": None, "profile": P.profile,
                      "configs": {a: json_ready(asdict(arm_config(P, rung, a, P.ladder_seed))) for a in ARMS}}
        seed0 = int(P.ladder_seed)
        pilot = [seed0 + i for i in range(int(P.ladder_mitigation_pilot))]
        todo = list(pilot)
        while True:
            for s in todo:
                if str(s) in rec["seeds"]:
                    continue
                t0 = time.perf_counter()
                rec["seeds"][str(s)] = {**run_seed(P, rung, s, device=device, progress=progress),
                                        "seconds": time.perf_counter() - t0}
                rec.update(machine=cpu_facts(), code=code_state())
                _save(path, rec)
                log(f"mitigation {rung.name}: seed {s} done ({time.perf_counter() - t0:.0f} s)")
            if rec["plan"] is None:
                per_seed = [v["seconds"] for v in rec["seeds"].values()]
                hps = float(np.max(per_seed)) / 3600 if per_seed else None
                spent = sum(v["seconds"] for v in rec["seeds"].values()) / 3600  # recorded: the same after a resume
                rec["plan"] = seed_plan(_diffs(rec), P, hours_per_seed=hps, hours_left=budget - spent)
                _save(path, rec)
                log(f"mitigation {rung.name}: pilot sd {rec['plan']['sd']:.4f} nats -> {rec['plan']['n_seeds']} seeds, "
                    f"MDE {rec['plan']['mde']:.4f} nats ({rec['plan']['why']})")
            want = [seed0 + i for i in range(int(rec["plan"]["n_seeds"]))]
            todo = [s for s in want if str(s) not in rec["seeds"]]
            if not todo:
                break
        if rec.get("finished"):
            log(f"mitigation {rung.name}: every planned seed is recorded in {path}: nothing to train")
        rec["finished"] = True
        _save(path, rec)
    return rec


# --------------------------------------------------------------------------------------------
# Notebook 10: the verdicts with their scale, the figure
# --------------------------------------------------------------------------------------------


def read_record(path: Path) -> dict[str, Any] | None:
    """A mitigation record (None if there is none); anything else at that path is refused naming the fix."""
    if not path.is_file():
        return None
    try:
        rec = json.loads(path.read_text())
        if not isinstance(rec, dict) or rec.get("kind") != KIND or not isinstance(rec.get("rung"), str):
            raise ValueError("not a residshift mitigation record")
    except ValueError as err:
        raise ladder.LadderError(f"{path} is not a readable mitigation record ({str(err).splitlines()[0][:120]}): "
                                 "move it away or delete it, and run the comparison again") from None
    return rec


def load(P, rung_name: str | None = None, out=None) -> dict[str, Any] | None:
    """The mitigation record of the profile (the one rung it ran on), or None."""
    folder = ladder.records_dir(P, out)
    paths = sorted(folder.glob("mitigation-*.json")) if rung_name is None else [records_path(P, rung_name, out)]
    paths = [p for p in paths if p.is_file()]
    return read_record(paths[0]) if paths else None


def arrays(rec: Mapping[str, Any]) -> tuple[list[int], dict[str, np.ndarray]]:
    seeds = sorted((int(s) for s in rec["seeds"]), key=int)
    return seeds, {arm: np.stack([np.asarray(rec["seeds"][str(s)][arm]["losses"], dtype=np.float64) for s in seeds])
                   for arm in ARMS}


def switch_row(rec: Mapping[str, Any], P) -> scale.SwitchRow:
    """The deep-switch measure of the rung's baselines, seeds as the unit (``scale.switch_across_seeds``)."""
    seeds, _ = arrays(rec)
    lens_ = [rec["seeds"][str(s)]["baseline_lens"] for s in seeds]
    rows = scale.switch_across_seeds(*(np.stack([np.asarray(r[k]) for r in lens_])
                                       for k in ("top1_input", "top1_next", "unigram_input", "unigram_next")),
                                     model=f"trained GPT {rec['rung']}, baseline ({len(seeds)} seeds)",
                                     variant=f"{scale.DECODER}", seeds=seeds, n_boot=int(P.train_boot),
                                     seed=int(P.seed), source=ladder.NAME)
    return rows[-1]


def verdict_rows(rec: Mapping[str, Any], P) -> tuple[list, list[dict[str, Any]]]:
    """The training rules on the rung's arms: their ``VerdictRow`` s, and the same rows as dicts with the
    scale clause of the rung's baselines (``scale.with_scale``)."""
    seeds, x = arrays(rec)
    depth = int(rec["rung"].split("x")[0])
    model = f"trained GPT {rec['rung']}"
    rows = verdicts.c2_training_late_cut(x["baseline"], {depth - 1: x["late cut"]},
                                         alpha_value=float(P.ladder_mitigation_alpha), n_layers=depth, model=model,
                                         source=ladder.NAME)
    rows += verdicts.c3_training_beats_baseline(x["learned"], x["baseline"], model=model, variant="learned",
                                                source=ladder.NAME)
    return rows, scale.with_scale(rows, switch_row(rec, P))


def mitigation_panel(rec: Mapping[str, Any], P):
    """Per seed, each mitigation's paired change of the final validation loss (points, one per seed) with
    the mean and its 95% t-interval across seeds; the materiality margin shaded; the pilot's MDE. The
    numbers: per arm the seed test with the seeds a paired test would need to detect the paper's one
    published effect (``claims.seeds_needed``, 0.0056 nats), and each seed's baseline S1."""
    import matplotlib.pyplot as plt

    seeds, x = arrays(rec)
    fig, ax = plt.subplots(figsize=(6.0, 3.2), constrained_layout=True)
    m = verdicts.LOSS_MARGIN
    ax.axvspan(-m, m, color="0.9", label=f"immaterial (|d| < {m:g} nats)")
    ax.axvline(0, color="0.4", lw=0.8)
    numbers = {"seeds": seeds, "plan": rec.get("plan"), "arms": {}}
    for i, arm in enumerate(MITIGATIONS):
        d = (x[arm] - x["baseline"]).mean(1)
        t = verdicts.seed_test(d, sign=-1, margin=m)
        ax.plot(d, np.full(d.size, i) + np.linspace(-0.12, 0.12, d.size), "o", ms=4, color="0.45")
        if t["lo"] is not None:
            ax.errorbar(t["estimate"], i, xerr=[[t["estimate"] - t["lo"]], [t["hi"] - t["estimate"]]], fmt="s",
                        color="#d95f02", capsize=3)
        numbers["arms"][arm] = {**{k: t[k] for k in ("estimate", "lo", "hi", "sd", "mde", "per_seed", "verdict", "why")},
                                "seeds_for_paper_effect": seeds_needed(t["sd"]) if t["sd"] else None}
    numbers["baseline_S1"] = [h1 / hL if hL > 0 else None for h1, hL in (_baseline_rates(rec, s) for s in seeds)]
    ax.set_yticks(range(len(MITIGATIONS)), [f"{a}\n- baseline" for a in MITIGATIONS])
    ax.set_xlabel("final validation loss change (nats; < 0: the mitigation helps)")
    plan = rec.get("plan") or {}
    mde = f"; MDE {plan['mde']:.3g} nats planned at {plan['n_seeds']}" if plan.get("mde") is not None else ""
    ax.set_title(f"{rec['rung']}: paired by seed ({len(seeds)} seeds{mde})")
    ax.legend(fontsize=7, loc="lower right")
    return fig, numbers


def for_notebook(P, *, log: Callable[[str], None] = print) -> dict[str, Any] | None:
    """The mitigation record notebook 10 reads: at ``ladder_in_study`` (smoke) run it here (seconds);
    otherwise read the one ``make ladder`` wrote and train nothing, saying so."""
    if P.ladder_in_study:
        run_mitigation(P, log=lambda _line: None)
    rec = load(P)
    if rec is None:
        log("no mitigation record at this profile yet: `make ladder` runs it after the rungs")
    else:
        seeds = sorted(rec["seeds"], key=int)
        plan = rec.get("plan") or {}
        log(f"mitigation on {rec['rung']} ({rec['choice']['why']}): {len(seeds)} seeds"
            + (f"; pilot sd {plan['sd']:.4f} nats, seed count {plan['n_seeds']} with MDE {plan['mde']:.4f} nats "
               f"declared before the remaining seeds ran ({plan['why']})" if plan else "")
            + ("" if rec.get("finished") else "; not finished (`make ladder` resumes it)"))
    return rec


def _baseline_rates(rec: Mapping[str, Any], seed: int) -> tuple[float, float]:
    """The next token's top-1 rate at h_1 and at h_L of one seed's baseline (mean over its lens windows)."""
    t = np.asarray(rec["seeds"][str(seed)]["baseline_lens"]["top1_next"], dtype=np.float64)
    return float(t[:, 1].mean()), float(t[:, -1].mean())


def seed_table(rec: Mapping[str, Any]):
    """One row per seed of the comparison, numbers in columns: the baseline's next-token top-1 at h_1 and
    at h_L and their ratio S1 (the deep-switch measure of that seed alone: how far one seed, the ladder's,
    speaks for the rung), and each mitigation's paired change of the final validation loss (mitigation
    minus baseline, mean over the held-out windows; < 0: it helps)."""
    import pandas as pd

    seeds, x = arrays(rec)
    rows = []
    for i, s in enumerate(seeds):
        h1, hL = _baseline_rates(rec, s)
        rows.append({"seed": s, "top1 next h_1": h1, "top1 next h_L": hL, "S1": h1 / hL if hL > 0 else np.nan,
                     **{f"{arm} - baseline": float((x[arm][i] - x["baseline"][i]).mean()) for arm in MITIGATIONS}})
    return pd.DataFrame(rows).set_index("seed")
