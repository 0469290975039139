"""What notebooks 06-10 found: three lines each, computed from the objects the notebook holds at
its end, printed under its ``## What this run found`` heading before any rule text or long table.

- 06 training-with-attenuation: :func:`grid_found` (the baseline's loss and the cut that moves it
  most; the C2-training verdicts; the scale the verdicts speak for);
- 07 learned-gates-and-benchmarks: :func:`gates_training_found` (where the gates settle; the gates
  against the baseline and every fixed cut; the benchmarks);
- 08 misalignment-after-mitigation: :func:`mitigation_found` (C1 and S1 per embedding recipe; the
  input token's persistence after each edit; the scale clause);
- 09 who-removes-the-input-token: :func:`attribution_found` (who removes the input token in the
  pretrained models; where they build the next token; the trained GPTs);
- 10 the-scale-ladder: :func:`ladder_found` (S1 per shape and budget; the deep switch, measured and
  extrapolated; the mitigation comparison and whether it counts as evidence).

Each line is the headline, at most about 300 characters on the committed runs: variants that share a
verdict are counted and their estimates given as a range, a lone one named with its interval; every
variant, interval and reason in full is in the detail the notebook prints next.

Every number is read from the inputs and every outcome (reproduced, not reproduced, inconclusive, a
variant or a model missing) has its own wording: nothing here assumes the results of one run. A
function whose inputs lack what it needs raises a :class:`ValueError` naming the fix.

This module is imported only by the notebooks and the tests: no module of the package imports it, so
that no cached computation's key (``core.cache``, a hash of the importing modules' source) depends on
these sentences.
"""
from __future__ import annotations

import re
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from ..analysis import scale, verdicts
from ..analysis.trend import tokens_text
from ..analysis.verdicts import INCONCLUSIVE, NOT_REPRODUCED, REPRODUCED, VerdictRow
from .prose import every, first_reason, join, plural

__all__ = ["grid_found", "gates_training_found", "mitigation_found", "attribution_found", "ladder_found"]

OUTCOMES = (REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE)


# --------------------------------------------------------------------------------------------
# Shared pieces
# --------------------------------------------------------------------------------------------


def _rows(rows: Iterable[Any], what: str) -> list[VerdictRow]:
    """Verdict rows as :class:`VerdictRow` (their JSON dicts, e.g. ``load_verdicts``' or
    ``scale.with_scale``'s, are converted)."""
    if rows is None or isinstance(rows, (str, Mapping, VerdictRow)):
        raise ValueError(f"{what}: pass the notebook's list of verdict rows (`rows`), not {type(rows).__name__}")
    out = []
    for r in rows:
        if isinstance(r, VerdictRow):
            out.append(r)
        elif isinstance(r, Mapping):
            out.append(VerdictRow.from_dict({k: v for k, v in r.items() if k != "scale"}))
        else:
            raise ValueError(f"{what}: a verdict row is a VerdictRow or its JSON dict, got {type(r).__name__}")
    return out






def _num(x: Any) -> float | None:
    if x is None:
        return None
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    return None if not np.isfinite(x) else x


def _ci(est: Any, lo: Any, hi: Any, fmt: str = "+.3f") -> str:
    """``+0.406 [+0.301, +0.511]``; the estimate alone where there is no interval."""
    e, a, b = _num(est), _num(lo), _num(hi)
    if e is None:
        return "–"
    return f"{e:{fmt}}" + ("" if a is None or b is None else f" [{a:{fmt}}, {b:{fmt}}]")




def _verdict_with_why(row: VerdictRow) -> str:
    """The verdict, and for an inconclusive row the first clause of its reason: ``inconclusive (seeds
    disagree)``."""
    why = first_reason(row)
    return f"{row.verdict} ({why})" if why else row.verdict


def _range(values: Sequence[Any], fmt: str = "+.3f") -> str:
    """``+0.406 to +1.059`` (one value where they format alike)."""
    v = sorted({f"{float(f'{x:{fmt}}') + 0.0:{fmt}}" for x in (_num(x) for x in values) if x is not None},
               key=float)  # -0.000 rounds to +0.000
    return "–" if not v else v[0] if len(v) == 1 else f"{v[0]} to {v[-1]}"




def _underpowered(rows: Sequence[VerdictRow]) -> str:
    """`` (underpowered: MDE 0.0684-0.193 nats > margin 0.005)`` for the rows whose MDE exceeds
    their margin, else ``""``."""
    mdes = [(r.details.get("mde"), r.details.get("margin"), r.details.get("mde_unit") or "") for r in rows]
    over = [(m, g, u) for m, g, u in mdes if _num(m) is not None and _num(g) is not None and m > g]
    if not over:
        return ""
    lo, hi = min(m for m, _, _ in over), max(m for m, _, _ in over)
    span = f"{lo:.3g}" if lo == hi else f"{lo:.3g}–{hi:.3g}"
    margins = sorted({g for _, g, _ in over})
    unit = over[0][2]
    return f" (underpowered: MDE {span}{' ' + unit if unit else ''} > margin {'/'.join(f'{g:g}' for g in margins)})"


def _seed_count(rows: Sequence[VerdictRow]) -> str:
    ns = sorted({int(r.n) for r in rows if r.n is not None})
    return "/".join(map(str, ns)) if ns else "?"


def _evidence_text(scaled: Sequence[Mapping[str, Any]], outcome: str) -> str:
    """How many of the scaled verdict dicts (``scale.with_scale``) count as what under
    ``scale.SCALE_RULE``, the shared reason left to the switch clause before it (:data:`SWITCH_SHORT`):
    ``of the 12 C2 verdicts, 5 are reported, not evidence for the paper's regime and 7 are not
    evidence``."""
    reason = {scale.NEAR_BIGRAM: scale.LACKS, scale.SWITCH_INCONCLUSIVE: scale.NOT_SHOWN}.get(outcome)
    counts: dict[str, int] = {}
    for d in scaled:
        label = d["scale"]["evidence"]
        if reason and label.endswith(f": {reason}"):
            label = label[: -len(reason) - 2]
        counts[label] = counts.get(label, 0) + 1
    claims = "/".join(dict.fromkeys(d["claim_id"].split("-")[0].split(".")[0] for d in scaled))
    parts = [f"{n} {'is' if n == 1 else 'are'} {label}" for label, n in counts.items()]
    return f"of the {plural(len(scaled), claims + ' verdict')}, {join(parts)}"


SWITCH_SHORT = {scale.NEAR_BIGRAM: "no deep switch", scale.SWITCH_INCONCLUSIVE: "deep switch not shown"}


def _switch_clause(outcome: str, why: str = "") -> str:
    """``near-bigram (no deep switch)``: the switch outcome, why where it is inconclusive, and what it
    means for the verdicts it weighs (:data:`scale.LACKS`, :data:`scale.NOT_SHOWN` in short)."""
    notes = [x for x in (why, SWITCH_SHORT.get(outcome, "")) if x]
    return f"{outcome}" + (f" ({'; '.join(notes)})" if notes else "")


def _scale_sentence(rows: Sequence[VerdictRow], switch: scale.SwitchRow, what: str) -> str:
    """The scale clause of the C2-C4 rows among ``rows`` (``scale.with_scale``): the baseline's
    switch measure, and how many of the verdicts count as what."""
    if not isinstance(switch, scale.SwitchRow) or switch.outcome is None:
        raise ValueError(f"{what}: pass the seed set's deep-switch row of the grid's baselines "
                         "(training.baseline_switch(runs, P), or scale.trained_rows' row with unit 'seeds')")
    scaled = [d for d in scale.with_scale(rows, switch) if "scale" in d]
    head = (f"Scale: the baselines ({switch.model}, {switch.n_layers} blocks) read S1 = {scale.share_text(switch)}, "
            f"C1.middle {switch.middle}: {_switch_clause(switch.outcome, switch.why)}")
    if not scaled:
        return head + "; no C2–C4 verdict here to weigh."
    return head + "; " + _evidence_text(scaled, switch.outcome) + " (scale rule)."


# --------------------------------------------------------------------------------------------
# 06: training with the cut in place
# --------------------------------------------------------------------------------------------

C2_CLAIMS = {"C2-training.alpha0-hurts": "alpha = 0 hurts", "C2-training.layer-sensitive": "layer-sensitive",
             "C2-training.late-cut": "a late cut helps"}


def _baseline_losses(finals: Mapping[tuple[str, int], Mapping[str, Any]]) -> tuple[list[int], np.ndarray]:
    seeds = sorted(s for (name, s) in finals if name == "baseline")
    if not seeds:
        raise ValueError("finals has no ('baseline', seed) entry: pass training.final_evals(runs, P) of the grid")
    per = np.array([float(np.mean(finals[("baseline", s)]["losses"])) for s in seeds])
    return seeds, per


def _c2_label(claim: str, variant: str | None) -> str:
    """A C2 row's variant as the sentence lists it: ``block 2`` for alpha = 0 at one block,
    ``alpha=0.5 at block 5`` for a late cut, the variant itself otherwise."""
    v = variant or "?"
    if claim == "C2-training.alpha0-hurts":
        return v.replace("alpha=0 at ", "")
    m = re.fullmatch(r"block (\d+), (alpha=\S+)", v)
    return f"{m.group(2)} at block {m.group(1)}" if m else v


def _c2_part(claim: str, rows: Sequence[VerdictRow]) -> str:
    """One C2 claim's verdicts grouped by outcome: a claim tested on one variant names it with its
    interval; otherwise each outcome is counted with the range of its estimates (the inconclusive ones
    marked where their MDE exceeds the margin)."""
    mine = [r for r in rows if r.claim_id == claim]
    if not mine:
        return f"{C2_CLAIMS[claim]}: not tested at this profile"
    groups = []
    for outcome in OUTCOMES:
        hit = [r for r in mine if r.verdict == outcome]
        if not hit:
            continue
        power = ", underpowered" if outcome == INCONCLUSIVE and _underpowered(hit) else ""
        if len(mine) == 1:
            text = f"{outcome} at {_c2_label(claim, hit[0].variant)} ({_ci(hit[0].estimate, *hit[0].ci)}{power})"
        else:
            text = (f"{len(hit)}{f' of {len(mine)}' if len(hit) == len(mine) else ''} {outcome} "
                    f"({_range([r.estimate for r in hit])}{power})")
        groups.append(text)
    return f"{C2_CLAIMS[claim]}: " + ", ".join(groups)


def grid_found(rows, cuts: pd.DataFrame, finals: Mapping[tuple[str, int], Mapping[str, Any]],
               switch: scale.SwitchRow) -> list[str]:
    """What notebook 06 found, in three lines:

    1. the baseline's final validation loss (mean ± SD over its seeds, from ``finals``, per-window
       losses averaged per seed) and, from ``cuts`` (``training.cut_table``), the range of the cuts'
       paired changes: the lowest and the largest in size, each with its t-interval across seeds and
       how many seeds moved up;
    2. the C2-training verdicts (``rows``: alpha = 0 hurts per block, layer sensitivity and the late
       cut per alpha), grouped by outcome: a lone variant with its interval, several counted with the
       range of their estimates (the inconclusive ones' power);
    3. the scale clause: ``switch`` (``training.baseline_switch``), the deep-switch measure of the
       grid's baselines, and what the C2 verdicts count as under ``scale.SCALE_RULE``.
    """
    rows = _rows(rows, "grid_found")
    if not isinstance(cuts, pd.DataFrame) or cuts.empty or not {"change", "lo", "hi", "per_seed"} <= set(cuts.columns):
        raise ValueError("grid_found needs training.cut_table(finals, P) (columns change, lo, hi, per_seed; one row "
                         "per trained cut): train the grid's fixed cuts")
    seeds, base = _baseline_losses(finals)
    sd = f" ± {np.std(base, ddof=1):.3f}" if base.size > 1 else " (one seed: no SD)"
    model = rows[0].model if rows else "the trained GPT"
    big = cuts["change"].abs().idxmax()
    low = cuts["change"].idxmin()

    def cut(k) -> str:
        r = cuts.loc[k]
        per = [float(v) for v in r["per_seed"]]
        return (f"{_ci(r['change'], r['lo'], r['hi'])} (alpha={k[0]:g} at block {k[1]}, {sum(v > 0 for v in per)} "
                f"of {len(per)} seeds higher)")

    first = (f"Baseline {model}: final validation loss {base.mean():.3f}{sd} nats ({plural(len(seeds), 'seed')}); "
             + (f"the one trained cut changes it by {cut(big)}" if low == big else
                f"the {len(cuts)} trained cuts change it by {cut(low)} to {cut(big)}") + " nats, paired by seed.")
    c2 = [r for r in rows if r.claim_id in C2_CLAIMS]
    if not c2:
        raise ValueError("grid_found: rows hold no C2-training verdict: pass training.c2_rows(finals, P)")
    second = (f"C2 on training ({_seed_count(c2)} seeds, nats vs the baseline) — "
              + "; ".join(_c2_part(c, c2) for c in C2_CLAIMS) + ".")
    return [first, second, _scale_sentence(c2, switch, "grid_found")]


# --------------------------------------------------------------------------------------------
# 07: learned gates and benchmarks
# --------------------------------------------------------------------------------------------

BASELINE = "baseline"
CHANCE = "chance (uniform guess)"
ABOVE = "baseline above chance? (95%)"


def _gate_part(variant: str, t: pd.DataFrame, L: int, start: bool) -> str:
    att = t["attenuation"].astype(float)
    top = int(att.idxmax())
    moved = float(t["movement"].max())
    text = (f"{variant} most at block {top} ({float(att.loc[top]):.4f}"
            + (", the last)" if top == L - 1 else f"; the last {float(att.iloc[-1]):.4f})")
            + (f" from {float(t['start'].iloc[0]):.4f}" if start else ""))
    if moved < verdicts.MIN_GATE_MOVEMENT:
        text += f", did not move (at most {moved:.4f}, below the {verdicts.MIN_GATE_MOVEMENT:g} floor)"
    return text


def _concentrates(rows: Sequence[VerdictRow], variants: Sequence[str]) -> str:
    """The C3 concentration verdicts, a verdict every variant shares said once."""
    parts = []
    for claim, label in (("C3-training.concentrates", "concentrates on the last block"),
                         ("C3-training.concentrates.material", "material")):
        hit = [(v, r) for v in variants for r in rows if r.variant == v and r.claim_id == claim]
        if not hit:
            continue
        texts = list(dict.fromkeys(_verdict_with_why(r) for _, r in hit))
        parts.append(f"{label}: " + (f"{texts[0]} for {every([v for v, _ in hit], len(variants))}" if len(texts) == 1
                                     else ", ".join(f"{v} {_verdict_with_why(r)}" for v, r in hit)))
    return "; ".join(parts)


def _compare_row(compare: pd.DataFrame, variant: str) -> pd.Series | None:
    return compare.loc[variant] if variant in compare.index else None


def _cut_candidates(row: VerdictRow) -> str:
    counts = _cut_counts(row)
    return "" if counts is None else f" (beats {counts[0]} of {counts[1]} candidates)"


def _every_cut(pairs: Sequence[tuple[str, VerdictRow]], n_variants: int) -> str:
    """The C3-training.beats-best-cut verdicts, said once where the variants agree: ``inconclusive for
    both (beats 5 and 4 of 11 candidates)``; per variant otherwise."""
    verdicts = {b.verdict for _, b in pairs}
    if len(verdicts) > 1:
        return ", ".join(f"{v} {b.verdict}{_cut_candidates(b)}" for v, b in pairs)
    counts = [_cut_counts(b) for _, b in pairs]
    head = f"{verdicts.pop()} for {every([v for v, _ in pairs], n_variants)}"
    if any(c is None for c in counts):
        return head
    if len({c for c in counts}) == 1:
        return f"{head} (beats {counts[0][0]} of {counts[0][1]} candidates)"
    if len({n for _, n in counts}) == 1:
        return f"{head} (beats {' and '.join(str(k) for k, _ in counts)} of {counts[0][1]} candidates)"
    return f"{head} (beats {' and '.join(f'{k} of {n}' for k, n in counts)} candidates)"


def _cut_counts(row: VerdictRow) -> tuple[int, int] | None:
    cands = row.details.get("candidates")
    if not isinstance(cands, Mapping) or not cands:
        return None
    v = [c.get("verdict") for c in cands.values() if isinstance(c, Mapping)]
    return v.count(REPRODUCED), len(v)


def gates_training_found(alphas: pd.DataFrame, compare: pd.DataFrame, rows, table: pd.DataFrame) -> list[str]:
    """What notebook 07 found, in three lines:

    1. where each gated variant's gates settle: the most attenuated block and its attenuation 1 - alpha
       beside the last block's (mean over seeds, ``alphas`` = ``training.alpha_table``), and the C3
       concentration verdicts;
    2. each gated variant against the baseline (``compare`` = ``training.compare_table``: paired change
       with its t-interval across seeds, seeds lower, the C3 verdict of ``rows``) and against every fixed
       cut (the verdict and how many candidates it beats, said once where the variants agree);
    3. the benchmarks (``table`` = ``training.benchmark_table``): the C4 verdicts, and on how many tasks
       the baseline clears chance, those named with their accuracy minus chance.
    """
    rows = _rows(rows, "gates_training_found")
    need = {"attenuation", "start", "movement"}
    if not isinstance(alphas, pd.DataFrame) or alphas.empty or not need <= set(alphas.columns) \
            or list(alphas.index.names) != ["variant", "block"]:
        raise ValueError("gates_training_found needs training.alpha_table(finals, P) (index variant, block; columns "
                         "start, attenuation, movement): train at least one gated variant")
    if not isinstance(compare, pd.DataFrame) or not {"vs baseline", "lo", "hi", "per seed"} <= set(compare.columns):
        raise ValueError("gates_training_found needs training.compare_table(finals, P, cut) (columns 'vs baseline', "
                         "lo, hi, 'per seed')")
    variants = list(dict.fromkeys(alphas.index.get_level_values("variant")))
    L = int(max(alphas.index.get_level_values("block"))) + 1
    c3 = [r for r in rows if r.claim_id.startswith("C3-training")]
    n = _seed_count(c3) if c3 else str(len(compare["per seed"].iloc[0])) if len(compare) else "?"
    starts = {f"{float(alphas.xs(v, level='variant')['start'].iloc[0]):.4f}" for v in variants}
    common = f", all from {starts.pop()}" if len(starts) == 1 else ""
    conc = _concentrates(c3, variants)
    first = (f"Learned gates ({n} seeds; mean attenuation 1 − alpha{common}): "
             + ", ".join(_gate_part(v, alphas.xs(v, level="variant"), L, not common) for v in variants)
             + (f"; {conc}" if conc else "") + ".")
    cut = next((str(i).removesuffix(" (lowest-loss fixed cut)") for i in compare.index
                if str(i).endswith("(lowest-loss fixed cut)")), None)
    parts, every_cut = [], []
    for v in variants:
        r = _compare_row(compare, v)
        if r is None:
            parts.append(f"{v}: not in the comparison")
            continue
        per = [float(x) for x in r["per seed"]]
        text = f"{v} {_ci(r['vs baseline'], r['lo'], r['hi'], '+.3f')} ({sum(x < 0 for x in per)}/{len(per)} lower)"
        verdict = {x.claim_id: x for x in c3 if x.variant == v}
        if "C3-training.beats-baseline" in verdict:
            text += f" {_verdict_with_why(verdict['C3-training.beats-baseline'])}"
        if "C3-training.beats-best-cut" in verdict:
            every_cut.append((v, verdict["C3-training.beats-best-cut"]))
        parts.append(text)
    if cut:
        r = compare.loc[f"{cut} (lowest-loss fixed cut)"]
        lowest = f"best {cut}: {_ci(r['vs baseline'], r['lo'], r['hi'], '+.3f')}"
    else:
        lowest = "none lowers the mean loss"
    parts.append(f"vs every fixed cut ({lowest}): {_every_cut(every_cut, len(variants))}" if every_cut
                 else f"fixed cuts: {lowest}")
    second = "Loss vs baseline (nats): " + "; ".join(parts) + "."
    return [first, second, _bench_sentence(table, rows)]


def _bench_sentence(table: pd.DataFrame, rows: Sequence[VerdictRow]) -> str:
    c4 = [r for r in rows if r.claim_id == "C4.benchmarks"]
    if not isinstance(table, pd.DataFrame) or BASELINE not in table.index:
        return "Benchmarks: none scored at this profile (no benchmark table with a baseline row)."
    acc = [c for c in table.columns if str(c).endswith("(acc)")]
    if acc and CHANCE not in table.index:
        raise ValueError("gates_training_found: the benchmark table lacks its chance row: pass "
                         "training.benchmark_table(bench, P)")
    n_items = sorted(set((table.attrs.get("items") or {}).values()))
    size = f"{'/'.join(map(str, n_items))} items per task, " if n_items else ""
    head = f"Benchmarks ({size}C4 paired by item and seed): "
    groups: dict[str, list[str]] = {}
    for r in c4:
        groups.setdefault(_verdict_with_why(r), []).append(r.variant or "?")
    verdict = ("; ".join(f"{join(v)} {k}" for k, v in groups.items()) if c4 else
               "no C4 verdict (no zero-shot task scored)")
    gaps, clear = [], []
    for c in acc:
        b, ch = _num(table.loc[BASELINE, c]), _num(table.loc[CHANCE, c])
        if b is None or ch is None:
            continue
        gaps.append(c)
        if ABOVE in table.index and str(table.loc[ABOVE, c]) == "yes":
            clear.append(f"{c.removesuffix(' (acc)')} {b - ch:+.3f}")
    tail = (f"; the baseline clears chance (one-sided 95% bound over items) on {len(clear)} of {plural(len(gaps), 'task')}"
            + (f" ({', '.join(clear)} above it)" if clear else "")) if gaps else "; no accuracy task was scored"
    return head + verdict + tail + "."


# --------------------------------------------------------------------------------------------
# 08: misalignment after mitigation
# --------------------------------------------------------------------------------------------

MISALIGN = ("C2-training.cut-misalignment", "C3-training.misalignment")


def _recipe_rows(rows: Sequence[VerdictRow], regimes: Mapping[str, Any]) -> list[scale.SwitchRow]:
    data = [r.as_dict() for r in rows]
    try:
        return [s for s in scale.trained_rows(regimes, data) if s.unit == "seeds"]
    except verdicts.VerdictError as err:
        raise ValueError(f"mitigation_found: {err}") from None


def mitigation_found(rows, regimes: Mapping[str, Any], persistence: pd.DataFrame, *,
                     recipe: str = scale.DEFAULT_RECIPE) -> list[str]:
    """What notebook 08 found, in three lines:

    1. C1 on the trained baselines of each embedding recipe (``rows``' across-seed C1 rows: early,
       middle, late, the joint C1) and each recipe's early share S1 with its deep-switch outcome
       (``scale.trained_rows`` on ``regimes`` = ``training.regimes_panel``'s numbers);
    2. the input token's persistence after each edit (``persistence`` = ``training.persistence_table``:
       the log10-rank change over the states after it and the loss change), grouped by its misalignment
       verdict (a fixed cut's or the gates'): a lone edit named with its interval, several counted with
       the range of their changes; cuts with no state after them are counted, not listed;
    3. the scale clause of the C2/C3 verdicts on the ``recipe`` baselines (``P.train_embedding``).
    """
    rows = _rows(rows, "mitigation_found")
    if not isinstance(regimes, Mapping) or not regimes:
        raise ValueError("mitigation_found needs the regimes figure's numbers (training.regimes_panel): rerun its cell")
    switch = {scale.recipe_of(s): s for s in _recipe_rows(rows, regimes)}
    parts = []
    for emb in regimes:
        c1 = {r.claim_id: r for r in rows if r.claim_id.split(".")[0] == "C1" and f", {emb} embedding" in r.model}
        if not c1:
            raise ValueError(f"mitigation_found: rows hold no C1 row for the {emb} embedding: pass training.c1_rows' "
                             "across-seed rows among `rows`")
        n = _seed_count(list(c1.values()))
        regs = ", ".join(f"{k.split('.')[1]} {c1[k].verdict}" for k in ("C1.early", "C1.middle", "C1.late") if k in c1)
        s = switch.get(emb)
        sw = "" if s is None else f", S1 {scale.share_text(s)} {s.outcome}"
        parts.append((n, f"{emb}{{}}: {regs} → C1 {c1['C1'].verdict if 'C1' in c1 else '–'}{sw}"))
    ns = {n for n, _ in parts}
    each = f"{ns.pop()} seeds each, " if len(ns) == 1 else ""
    first = (f"C1 on the trained baselines ({each}all must agree) — "
             + "; ".join(t.format("" if each else f" ({n} seeds)") for n, t in parts) + ".")
    second = _persistence_sentence(rows, persistence)
    if recipe not in switch:
        raise ValueError(f"mitigation_found: no seed-set switch row for the {recipe} embedding (have "
                         f"{sorted(k for k in switch if k)}): pass recipe=P.train_embedding")
    return [first, second, _scale_sentence([r for r in rows if scale.is_scaled(r.claim_id)], switch[recipe],
                                           "mitigation_found")]


def _persistence_sentence(rows: Sequence[VerdictRow], persistence: pd.DataFrame) -> str:
    if not isinstance(persistence, pd.DataFrame) or not {"states", "loss change"} <= set(persistence.columns):
        raise ValueError("mitigation_found needs training.persistence_table(lenses, P) (columns states, "
                         "'rank change', 'rank CI', 'loss change', 'loss CI')")
    verdict = {r.variant: r for r in rows if r.claim_id in MISALIGN}
    if persistence.empty:
        return "Input-token persistence: no edited variant was trained at this profile."
    groups: dict[str, list[tuple[str, pd.Series]]] = {o: [] for o in OUTCOMES}
    none = []
    for name, r in persistence.iterrows():
        if r["states"] == "none":
            none.append(str(name))
            continue
        v = verdict.get(name)
        if v is None:
            raise ValueError(f"mitigation_found: no misalignment verdict for {name!r}: pass "
                             "training.misalignment_rows(lenses, P) among `rows`")
        groups[v.verdict].append((str(name), r))
    seeds = _seed_count([v for v in verdict.values() if v.variant in persistence.index])
    parts = []
    for o, items in groups.items():
        if len(items) == 1:
            name, r = items[0]
            parts.append(f"{o} for {name} ({float(r['rank change']):+.3f} {r['rank CI']}, loss {float(r['loss change']):+.3f})")
        elif items:
            parts.append(f"{o} for {len(items)} ({_range([r['rank change'] for _, r in items])}, loss "
                         f"{_range([r['loss change'] for _, r in items])})")
    text = (f"Input token's log10 rank after the edit (edited − baseline, {seeds} seeds; loss in nats: a rise that "
            "costs loss is no mitigation) — " + ("; ".join(parts) if parts else "no variant has a state after its edit"))
    if none:
        text += f"; not applicable to {plural(len(none), 'cut')} at the last block (no state after it)"
    return text + "."


# --------------------------------------------------------------------------------------------
# 09: who removes the input token
# --------------------------------------------------------------------------------------------

TERMS = {"attn": "attention", "mlp": "MLP", "skip": "skip edit", "rescale": "norm rescaling"}
TABLE_COLUMNS = ("model", "which", "term", "block", "estimate", "lo", "hi", "n", "unit")


def _check_table(table: pd.DataFrame, what: str) -> pd.DataFrame:
    if not isinstance(table, pd.DataFrame) or table.empty or not set(TABLE_COLUMNS) <= set(table.columns):
        raise ValueError(f"attribution_found: {what} must be attribution.window_table(...) or seed_table(...) "
                         f"(columns {list(TABLE_COLUMNS)}), non-empty")
    return table


def _term_at(t: pd.DataFrame, term: str, block: int) -> pd.Series | None:
    r = t[(t.term == term) & (t.block == block)]
    return None if r.empty else r.iloc[0]


def _block_split(t: pd.DataFrame, which: str) -> tuple[str, str, str]:
    """For one model's rows of token ``which`` (input: the block where its logit falls most; next: where
    it rises most): the verb phrase with the block (saying so where the logit never moves that way on
    average), the change there with its interval, and its largest part in the direction of the change
    (attention, MLP, skip edit or rescaling) with its estimate."""
    t = t[t.which == which]
    delta = t[t.term == "delta"].set_index("block")
    if delta.empty:
        raise ValueError(f"attribution_found: no 'delta' rows for the {which} token: pass the full table")
    falls = which == "input"
    b = int(delta.estimate.idxmin() if falls else delta.estimate.idxmax())
    d = delta.loc[b]
    est = float(d.estimate)
    if falls:
        verb = f"falls most across block {b}" if est < 0 else f"never falls on average; it rises least across block {b}"
    else:
        verb = f"rises most across block {b}" if est > 0 else f"never rises on average; it falls least across block {b}"
    parts = {k: _term_at(t, k, b) for k in TERMS}
    parts = {k: r for k, r in parts.items() if r is not None}
    sign = -1 if float(d.estimate) < 0 else 1
    lead = max(parts, key=lambda k: sign * float(parts[k].estimate))
    return verb, _ci(d.estimate, d.lo, d.hi, "+.2f"), f"mostly {TERMS[lead]} ({float(parts[lead].estimate):+.2f})"


def _unit(t: pd.DataFrame) -> str:
    return f"{int(t.n.iloc[0])} {t.unit.iloc[0]}"


def attribution_found(table: pd.DataFrame, trained_table: pd.DataFrame) -> list[str]:
    """What notebook 09 found, in three lines (centred lens logit; mean and 95% interval):

    1. per pretrained model (``table`` = ``attribution.window_table``): the block where the input
       token's lens logit falls most, the fall, and its largest negative part (attention, MLP, norm
       rescaling);
    2. per pretrained model: the block where the next token's lens logit rises most and its largest
       positive part (where the next-token evidence is built);
    3. the trained GPT variants (``trained_table`` = ``attribution.seed_table``, seeds as the unit):
       the block where the input token falls most and the next token rises most with their largest
       parts, variants that agree said once with the range of their changes.

    Every part with its interval is in the detail the notebook prints next.
    """
    table, trained_table = _check_table(table, "table"), _check_table(trained_table, "trained_table")
    falls, rises = [], []
    for model in dict.fromkeys(table.model):
        t = table[table.model == model]
        L = int(t.block.max()) + 1
        verb, d, part = _block_split(t, "input")
        falls.append(f"{model} ({_unit(t)}, {L} blocks) {verb}, {d}, {part}")
        verb, d, part = _block_split(t, "next")
        rises.append(f"{model} {verb}, {d}, {part}")
    groups: dict[tuple, list[tuple[str, pd.DataFrame]]] = {}
    for model in dict.fromkeys(trained_table.model):
        t = trained_table[trained_table.model == model]
        (iv, _, ip), (nv, _, np_) = _block_split(t, "input"), _block_split(t, "next")
        groups.setdefault((iv, ip.split(" (")[0], nv, np_.split(" (")[0]), []).append((model, t))
    total = len(dict.fromkeys(trained_table.model))
    trained = []
    for (iv, ip, nv, np_), members in groups.items():
        def change(which, pick):
            vals = []
            for _, t in members:
                d = t[(t.which == which) & (t.term == "delta")].set_index("block").estimate
                vals.append(float(pick(d)))
            return _ci(*_block_row(members[0][1], which)) if len(members) == 1 else _range(vals, "+.2f")
        who = every([m for m, _ in members], total, "variants")
        trained.append(f"{who} ({_unit(members[0][1])}): the input token {iv}, {change('input', min)}, {ip}; "
                       f"the next token {nv}, {change('next', max)}, {np_}")
    return ["Pretrained models, input token x_t's centred lens logit (95% CI): " + "; ".join(falls) + ".",
            "Pretrained models, the next token x_t+1's lens logit: " + "; ".join(rises) + ".",
            "Trained GPTs (mean over seeds, 95% t-interval): " + "; ".join(trained) + "."]


def _block_row(t: pd.DataFrame, which: str) -> tuple[float, float, float, str]:
    """The change (estimate, lo, hi) at the block :func:`_block_split` picks for ``which``."""
    delta = t[(t.which == which) & (t.term == "delta")].set_index("block")
    b = delta.estimate.idxmin() if which == "input" else delta.estimate.idxmax()
    d = delta.loc[b]
    return d.estimate, d.lo, d.hi, "+.2f"


# --------------------------------------------------------------------------------------------
# 10: the scale ladder
# --------------------------------------------------------------------------------------------


def _f2(x: Any) -> str:
    x = _num(x)
    return "–" if x is None else f"{x:.2f}"


def _s1(r: Mapping[str, Any]) -> str:
    return _f2(r.get("S1")) + ("" if r.get("S1_lo") is None or r.get("S1_hi") is None
                               else f" [{_f2(r['S1_lo'])}, {_f2(r['S1_hi'])}]")


def _extrapolation_part(shape: str, entries: Sequence[Mapping[str, Any]], target: bool) -> str:
    """The budget at which one shape's fitted line reaches the nearest pretrained model's S1 (the largest
    pretrained target), extrapolated, with its window interval; or why it does not. ``target``: name
    the target (the shapes aim at different ones)."""
    pre = [e for e in entries if e["shape"] == shape and "threshold" not in str(e["target"])]
    if not pre:
        return f"{shape}: no pretrained target"
    e = max(pre, key=lambda e: e["S1_target"])
    to = f" (to {e['target']})" if target else ""
    if e["kind"] == "measured":
        return f"{shape}{to} {tokens_text(e['tokens'])} (measured)"
    if e["kind"] != "extrapolated" or e.get("tokens") is None:
        return f"{shape}{to} never ({e['why']})"
    iv = e.get("interval") or {}
    band = ""
    if iv:
        lo = tokens_text(iv["lo"]) if iv.get("lo") else "already"
        hi = tokens_text(iv["hi"]) if iv.get("hi") else f"never in {iv.get('never', 0):.0%}"
        band = f" [{lo}, {hi}]"
    return f"{shape}{to} ~{tokens_text(e['tokens'])}{band}"


def _nearest(entries: Sequence[Mapping[str, Any]], shape: str) -> str | None:
    pre = [e for e in entries if e["shape"] == shape and "threshold" not in str(e["target"])]
    return None if not pre else str(max(pre, key=lambda e: e["S1_target"])["target"])


def ladder_found(numbers: Mapping[str, Any], mit_rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """What notebook 10 found, in three lines:

    1. the early share S1 of each shape's finished rungs in budget order (one seed each; the last rung
       with its 95% bootstrap interval over the lens windows; ``numbers`` = ``ladder.ladder_numbers``),
       the budgets said once where every shape shares them, with the pretrained references;
    2. how many finished rungs reached the deep switch (S1's interval below 0.5 and a quiet middle),
       and, labelled extrapolated, the budget at which each shape's fitted line would reach the nearest
       pretrained model's S1;
    3. the mitigation comparison's verdicts (``mit_rows`` = ``mitigation.verdict_rows``' rows with the
       scale clause) with their estimates and intervals, the rung's switch measure and whether they
       count as evidence; or that no comparison has run.
    """
    if not isinstance(numbers, Mapping) or "readings" not in numbers or "pretrained" not in numbers:
        raise ValueError("ladder_found needs ladder.ladder_numbers(...) (readings, pretrained, extrapolation): "
                         "rerun the figure cell of notebook 10")
    fin = [r for r in numbers["readings"] if r.get("final")]
    if not fin:
        return ["No finished ladder rung at this profile: `make ladder` trains them.",
                "The deep switch cannot be judged without a finished rung.",
                _mitigation_sentence(mit_rows)]
    shapes, budgets = [], []
    windows = sorted({int(r["n"]) for r in numbers.get("rows", []) if r.get("n")})
    for shape in dict.fromkeys(r["shape"] for r in fin):
        mine = sorted((r for r in fin if r["shape"] == shape), key=lambda r: r["tokens"])
        budgets.append(" → ".join(tokens_text(r["tokens"]) for r in mine))
        shapes.append((shape, mine))
    same = len(set(budgets)) == 1
    text = [f"{shape} " + " → ".join(_f2(r.get("S1")) + ("" if same else f" at {tokens_text(r['tokens'])}")
                                     for r in mine[:-1])
            + (" → " if len(mine) > 1 else "") + _s1(mine[-1]) + ("" if same else f" at {tokens_text(mine[-1]['tokens'])}")
            for shape, mine in shapes]
    refs = ", ".join(f"{r['model']} {_f2(r['S1'])}" for r in numbers["pretrained"]) or "none"
    per = f"{'/'.join(map(str, windows))} lens windows" if windows else "lens windows"
    first = (f"S1 of the finished rungs (one seed each, {per}, 95% bootstrap for the last)"
             + (f" at {budgets[0]} tokens" if same else "") + ": " + "; ".join(text)
             + f"; pretrained: {refs}.")
    deep = [r for r in fin if r["outcome"] == scale.DEEP_SWITCH]
    below = [r for r in fin if _num(r.get("S1_hi")) is not None and r["S1_hi"] < scale.SHARE_THRESHOLD]
    quiet = [r for r in fin if r.get("middle") == REPRODUCED]
    if deep:
        second = (f"{len(deep)} of the {len(fin)} finished rungs {'has' if len(deep) == 1 else 'have'} the deep switch: "
                  + ", ".join(f"{r['rung']} (S1 {_s1(r)})" for r in deep))
    else:
        second = (f"None of the {len(fin)} finished rungs has the deep switch (S1 below 0.5 at {len(below)}, a quiet "
                  f"middle at {len(quiet)})")
    extrap = [e for e in numbers.get("extrapolation", []) if e.get("shape")]
    if extrap:
        order = list(dict.fromkeys(e["shape"] for e in extrap))
        targets = {_nearest(extrap, s) for s in order} - {None}
        one = targets.pop() if len(targets) == 1 else None
        second += (f"; tokens to reach {one}, extrapolated in log10(tokens), not measured: " if one else
                   "; tokens to reach the nearest pretrained S1, extrapolated in log10(tokens), not measured: ")
        second += ", ".join(_extrapolation_part(s, extrap, one is None) for s in order)
        if not quiet:
            second += " — S1 alone: no rung shows the quiet middle"
    return [first, second + ".", _mitigation_sentence(mit_rows)]


def _mitigation_sentence(mit_rows: Sequence[Mapping[str, Any]]) -> str:
    scaled = [d for d in (mit_rows or []) if isinstance(d, Mapping) and d.get("scale")]
    if not scaled:
        return "Mitigation comparison: none has run at this profile (`make ladder` runs it after the rungs)."
    rows = _rows(scaled, "ladder_found")
    s = scaled[0]["scale"]
    items = [f"{r.claim_id.split('.', 1)[-1]} ({r.variant}) {_ci(r.estimate, *r.ci, '+.4f')}" for r in rows]
    texts = list(dict.fromkeys(_verdict_with_why(r) if len(rows) == 1 else r.verdict for r in rows))
    parts = (", ".join(items) + f" {texts[0]}" + (f" for {every(items, len(items))}" if len(items) > 1 else "")
             if len(texts) == 1 else ", ".join(f"{x} {r.verdict}" for x, r in zip(items, rows)))
    lo, hi = s["early_share_ci"]
    share = _f2(s["early_share"]) + ("" if lo is None or hi is None else f" [{_f2(lo)}, {_f2(hi)}]")
    return (f"Mitigation on {rows[0].model} ({plural(int(rows[0].n or 0), 'seed')}, nats): " + parts
            + f"; its baselines read S1 = {share}: {_switch_clause(s['outcome'])}; " + _evidence_text(scaled, s["outcome"])
            + ".")
