"""The committed training verdicts (notebooks 06-08) under the rules in this checkout, from the per-seed
numbers the verdict files saved: before -> after for every row a seed-test rule decides, no retraining.

    .venv/bin/python benchmarks/recompute_training_verdicts.py [--figures figures]

Each row's saved per-seed paired differences (``details["per_seed_values"]``; beats-best-cut: every
candidate's; the misalignment rows: the rank's and the loss's, ``details["loss_change"]["per_seed"]``)
are fed back through the rule functions themselves (``verdicts.c2_training_alpha0``,
``c3_training_beats_baseline``, ``c3_training_beats_every_cut``, ``training_misalignment``) as one-window
arrays whose paired per-seed means are those differences; the emergence rows through ``seed_test`` (their
rule is that test on the saved depth differences). C2-training.layer-sensitive and C2-training.late-cut
are not rerun: their rules decide on intervals and Holm-corrected t-tests, not on ``seed_test``'s verdict.
Prints one line per row: claim, variant, verdict before -> after, what the row now shows, and why.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from residshift.analysis import verdicts as V  # noqa: E402

FILES = ("06-training-with-attenuation-verdicts", "07-learned-gates-and-benchmarks-verdicts",
         "08-misalignment-after-mitigation-verdicts")


def _col(x) -> np.ndarray:
    return np.asarray(x, dtype=float)[:, None]


def recompute(row: dict) -> V.VerdictRow | None:
    """The row under the current rules, or None where this script does not rerun its rule."""
    d, cid = row["details"], row["claim_id"]
    who = dict(model=row["model"], variant=row["variant"])
    x = d.get("per_seed_values")
    if cid == "C2-training.alpha0-hurts":
        return V.c2_training_alpha0(np.zeros((len(x), 1)), _col(x), block=int(row["variant"].split()[-1]),
                                    model=row["model"])[0]
    if cid == "C3-training.beats-baseline":
        return V.c3_training_beats_baseline(_col(x), np.zeros((len(x), 1)), **who)[0]
    if cid == "C3-training.beats-best-cut":
        c = d["candidates"]  # d_s = gated - candidate: gates at 0, candidate at -d_s
        S = len(next(iter(c.values()))["per_seed_values"])
        return V.c3_training_beats_every_cut(np.zeros((S, 1)), {n: -_col(v["per_seed_values"]) for n, v in c.items()},
                                             **who)[0]
    if cid in ("C3-training.misalignment", "C2-training.cut-misalignment"):
        loss = d["loss_change"]["per_seed"]
        S, idx = len(loss), d["after_layers"]
        out = re.search(r"output h_(\d+)", d.get("why") or "")  # a row with no state after the edit names L
        L = max(idx) + 1 if idx else int(out.group(1)) if out else 2
        before = np.zeros((S, 1, L + 1))
        after = before.copy()
        if idx:
            after[:, :, idx] = np.asarray(x, dtype=float)[:, None, None]
        return V.training_misalignment(before, after, after_layers=idx, loss_before=np.zeros((S, 1)),
                                       loss_after=_col(loss), fixed_cut=cid.startswith("C2"), **who)[0]
    if cid in ("C3-training.emergence-shift", "C2-training.cut-emergence-shift") and x is not None:
        t = V.seed_test(x, sign=-1, margin=d["margin"])
        return V._seed_row(cid, t, statistic=row["statistic"], rule="(seed_test on the saved depth differences)",
                           source=row["source"], **who)
    return None


def shown(r, name_key: str) -> str:
    """The row's estimate and interval, with the candidate they belong to where it names one."""
    if r.ci[0] is None:
        return "no estimate"
    who = r.details.get(name_key)
    return (f"{who}: " if who else "") + f"{r.estimate:+.3g} [{r.ci[0]:.3g}, {r.ci[1]:.3g}]"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--figures", type=Path, default=Path(__file__).resolve().parents[1] / "figures")
    args = ap.parse_args(argv)
    changed = total = 0
    for name in FILES:
        rows = json.loads((args.figures / f"{name}.json").read_text())
        print(f"== figures/{name}.json")
        for row in rows:
            new = recompute(row)
            if new is None:
                continue
            total += 1
            old = V.VerdictRow.from_dict(row)
            mark = "" if new.verdict == old.verdict else "  ** changed"
            changed += new.verdict != old.verdict
            print(f"{row['claim_id']} | {row['variant']} | {old.verdict} -> {new.verdict}{mark}\n"
                  f"    shown before: {shown(old, 'best_candidate')}; now: {shown(new, 'deciding_candidate')}\n"
                  f"    why: {new.details['why']}")
    print(f"{changed} of {total} rows change verdict")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
