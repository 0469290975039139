"""The pilot: does a small GPT trained with each embedding recipe have the shift the study mitigates?

Run before any grid (``python -m residshift train --pilot``; notebook 06 reads its numbers): one
baseline seed per recipe of ``train_pilot_recipes`` at the profile's training budget, notebook 03's
logit lens on it (the same windows notebook 08 reads: WikiText-2 test, the training context), and
C1's rules on it (C1.early / middle / late / C1 and C1.depth per depth metric, from
``residshift.analysis.verdicts``). One trained model per recipe: its windows are the units, so a
verdict says whether THIS model has the regime; whether a recipe gives it reliably is a question
for the grid's seeds.

:func:`choose_recipe` names the recipe the profile's grid should train: the first recipe, in the
listed order, whose baseline reproduces both C1.early and C1.late (the recipes cost the same at one
shape: the same parameters to within the position table, the same tokens and steps). The pilot's
numbers are written to ``benchmarks/pilot-recipes.json`` and rendered in the README.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from ..analysis import verdicts
from ..analysis.stats import as_numpy
from ..core import profiles
from ..core.cache import atomic_write_text, code_state
from ..core.models import load_model
from ..core.outputs import json_ready
from ..core.paths import REPO_ROOT
from ..train import trainer as T
from ..core.models.gpt import RECIPES
from . import lens_setups
from .training import c1_on_model

PILOT_JSON = "pilot-recipes.json"


def pilot_config(P, recipe: str, seed: int) -> T.TrainConfig:
    """The baseline run of one recipe: the profile's ``train_*`` values with ``embedding=recipe``."""
    if recipe not in RECIPES:
        raise ValueError(f"unknown embedding recipe {recipe!r}; choose among {list(RECIPES)}")
    return profiles.stage(T.TrainConfig, P).with_(mode="baseline", seed=int(seed), embedding=recipe)


def run_pilot(P, recipes: Sequence[str] | None = None, *, seed: int | None = None, progress: bool = False,
              verbose: bool = True) -> dict[str, Any]:
    """Train (or reuse) one baseline per recipe and measure it; returns the pilot's numbers
    (``recipes``: one entry per recipe, ``chosen``: :func:`choose_recipe`'s answer)."""
    recipes = list(P.train_pilot_recipes if recipes is None else recipes)
    unknown = [r for r in recipes if r not in RECIPES]
    if unknown or not recipes:
        raise ValueError(f"pilot recipes {unknown or '(none)'} unknown; choose among {list(RECIPES)}")
    seed = int(P.train_seeds[0] if seed is None else seed)
    out: dict[str, Any] = {"profile": P.profile, "seed": seed, "machine": T.cpu_facts(), "code": code_state(),
                           "recipes": {}}
    for recipe in recipes:
        cfg = pilot_config(P, recipe, seed)
        t0 = time.perf_counter()
        run = T.train(cfg, device=P.device, progress=progress)
        sm = T.read_summary(run)
        lm, tok, info = load_model(str(run / "model"), device=P.device)
        res = lens_setups.trained(P).run((lm, tok, info))
        rows, u = c1_on_model(res, tok, info, P, model=f"pilot {recipe}, seed {seed}",
                              source=PILOT_JSON.removesuffix(".json"))
        top_in, top_nx = as_numpy(res.per_seq["top1_input"]).mean(0), as_numpy(res.per_seq["top1_next"]).mean(0)
        out["recipes"][recipe] = {
            "config": {"layers": cfg.layers, "width": cfg.width, "context": cfg.context, "embedding": recipe,
                       "bf16": bool(sm["config"].get("bf16")) if "config" in sm else None},
            "steps": sm.get("steps"), "tokens": sm.get("tokens"), "train_seconds": sm.get("train_seconds"),
            "tokens_per_s": sm.get("tokens_per_s"), "val_loss": sm["val_loss"], "unigram_ce": sm["unigram_ce"],
            "below_unigram": sm["below_unigram"],
            "top1_input": top_in.tolist(), "top1_next": top_nx.tolist(),
            "unigram_top1_input": float(as_numpy(u["top1_input"]).mean()),
            "unigram_top1_next": float(as_numpy(u["top1_next"]).mean()),
            "verdicts": [r.as_dict() for r in rows], "wall_seconds": time.perf_counter() - t0,
        }
        if verbose:
            v = {r.claim_id: r.verdict for r in rows if not r.claim_id.startswith("C1.depth")}
            print(f"{recipe}: validation loss {sm['val_loss']:.3f} ({sm['below_unigram']:.2f} nats below unigram), "
                  f"input top-1 at h_1 {top_in[1]:.3f} (unigram {out['recipes'][recipe]['unigram_top1_input']:.3f}); "
                  f"{v}")
    out["chosen"] = choose_recipe(out["recipes"])
    return out


def _verdict(entry: Mapping[str, Any], claim: str) -> str | None:
    return next((r["verdict"] for r in entry["verdicts"] if r["claim_id"] == claim), None)


def choose_recipe(entries: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The recipe the grid should train: the first, in the listed order, whose baseline reproduces
    both C1.early and C1.late (equal cost at one shape); if none does, the one whose C1.early
    estimate is largest, with ``reproduces`` False so notebooks and README say so plainly."""
    if not entries:
        raise ValueError("no pilot entries: run the pilot first")
    for name, e in entries.items():
        if _verdict(e, "C1.early") == verdicts.REPRODUCED and _verdict(e, "C1.late") == verdicts.REPRODUCED:
            return {"recipe": name, "reproduces": True,
                    "rule": "first recipe listed whose baseline reproduces C1.early and C1.late"}

    def early(e):
        r = next(r for r in e["verdicts"] if r["claim_id"] == "C1.early")
        return r["estimate"] if r["estimate"] is not None else -np.inf

    best = max(entries, key=lambda n: early(entries[n]))
    return {"recipe": best, "reproduces": False,
            "rule": "no recipe's baseline reproduces both C1.early and C1.late: the closest by C1.early"}


def save_pilot(numbers: Mapping[str, Any], path: Path | None = None) -> Path:
    """Write the pilot's numbers (atomically) to ``benchmarks/pilot-recipes.json``."""
    path = path or REPO_ROOT / "benchmarks" / PILOT_JSON
    atomic_write_text(path, json.dumps(json_ready(dict(numbers)), indent=1) + "\n")
    return path


def load_pilot(path: Path | None = None) -> dict[str, Any] | None:
    path = path or REPO_ROOT / "benchmarks" / PILOT_JSON
    return json.loads(path.read_text()) if path.is_file() else None
