"""What a notebook's verdicts say: a few computed sentences, and the paper's claims beside ours.

Every notebook from 03 on closes with :func:`print_findings`, which prints a short list, *what this
run shows* (:func:`run_shows`), and returns a table that sets each claim of the paper, as our rules
read it (``verdicts.CLAIMS``), beside our result (:func:`claims_table`). Both are functions of the
verdict rows (``figures/*verdicts*.json``, read with ``verdicts.load_verdicts``), never typed: the
sentences group the rows by outcome and claim, name the models and variants, say where this run
disagrees with the paper as plainly as where it agrees, and give each inconclusive row's reason
(:func:`reason`). The numbers are rendered by ``study.tables`` (3 significant digits), as in the
notebooks' full verdict tables and the README's results block (``tools.report``), which show every
field of every row; this module is the summary a reader of one notebook needs.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Iterable, Sequence

import pandas as pd

from ..analysis.verdicts import (CLAIMS, INCONCLUSIVE, NOT_REPRODUCED, REPRODUCED, VerdictError, VerdictRow,
                                 is_evidence, load_verdicts)
from . import tables
from .prose import join, plural

__all__ = ["PAPER_COLUMN", "TABLE_COLUMNS", "claims_table", "run_shows", "print_findings", "reason",
           "seed_counts"]

OUTCOME_ORDER = (REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE)
PAPER_COLUMN = "the paper claims (as our rules read it)"
TABLE_COLUMNS = ("claim", PAPER_COLUMN, "model", "variant", "our result", "statistic", "seeds")
INDEX = ("claim", PAPER_COLUMN, "model", "variant")

# How each outcome stands to the paper, in the sentences.
_LEAD = {REPRODUCED: "Reproduced, agreeing with the paper: ",
         NOT_REPRODUCED: "Not reproduced, disagreeing with the paper: ",
         INCONCLUSIVE: "Inconclusive, neither confirming nor contradicting the paper: "}
_NONE = {REPRODUCED: "none agrees with the paper", NOT_REPRODUCED: "none disagrees with the paper",
         INCONCLUSIVE: "none is left open"}
NO_REASON = "no reason recorded (see the rule)"
# Rows about frozen pretrained models (notebooks 04-05: C2.*, C3.*). The paper reports its attenuation
# results for models trained with the edit, so these rows test its claims in a setting it does not
# report: they neither agree nor disagree with it, and say so.
_LEAD_FROZEN = {REPRODUCED: "Holds on the frozen models (our test in a setting the paper does not report): ",
                NOT_REPRODUCED: "Does not hold on the frozen models (our test in a setting the paper does not report; "
                                "no disagreement with its trained-model results): ",
                INCONCLUSIVE: "Inconclusive on the frozen models (a setting the paper does not report): "}


_NONE_FROZEN = {REPRODUCED: "none holds on the frozen models", NOT_REPRODUCED: "none fails on the frozen models",
                INCONCLUSIVE: "none is left open"}


def is_frozen_model_row(row: VerdictRow) -> bool:
    """A row about attenuation on a frozen pretrained model (C2.* / C3.*, not the ``-training`` claims)."""
    return row.claim_id.split(".")[0] in ("C2", "C3")


# --------------------------------------------------------------------------------------------
# Pieces
# --------------------------------------------------------------------------------------------


def _rows(rows) -> list[VerdictRow]:
    """The rows as a list (a path is read with ``verdicts.load_verdicts``), or an error naming the fix."""
    if isinstance(rows, (str, Path)):
        rows = load_verdicts(rows)
    rows = list(rows)
    if not rows:
        raise VerdictError("no verdict rows given: pass the rows a notebook's rules returned, or read a saved "
                           "file with residshift.analysis.verdicts.load_verdicts('figures/<notebook>-verdicts.json')")
    bad = sorted({type(r).__name__ for r in rows if not isinstance(r, VerdictRow)})
    if bad:
        raise VerdictError(f"findings take VerdictRow objects, got {bad}: read a saved file with "
                           "verdicts.load_verdicts(path) (or parsed JSON with verdicts.rows_from_json(data))")
    return rows


def _ordered(rows: Sequence[VerdictRow]) -> list[VerdictRow]:
    """Rows in the order of ``CLAIMS`` (claim ids it lacks last, as first seen), stable within a claim."""
    known = {cid: i for i, cid in enumerate(CLAIMS)}
    unknown: dict[str, int] = {}
    for r in rows:
        if r.claim_id not in known:
            unknown.setdefault(r.claim_id, len(known) + len(unknown))
    return sorted(rows, key=lambda r: known.get(r.claim_id, unknown.get(r.claim_id, 0)))


def _tell_apart(group: Sequence[VerdictRow]) -> list[str]:
    """What tells rows of one claim, model and variant apart: ``details["metric"]`` (C1.depth has one
    row per metric), else the first bracketed part of the statistic that differs, else a count."""
    if all(r.details.get("metric") is not None for r in group):
        return [str(r.details["metric"]) for r in group]
    parts = [re.findall(r"\(([^()]*)\)", r.statistic) for r in group]
    for j in range(min(len(p) for p in parts)):
        values = [p[j] for p in parts]
        if len(set(values)) == len(values):
            return values
    return [f"#{i + 1}" for i in range(len(group))]


def _labels(rows: Sequence[VerdictRow]) -> list[str | None]:
    """Each row's variant, told apart (:func:`_tell_apart`) where one claim has several rows for one
    model and variant."""
    groups: dict[tuple, list[int]] = {}
    for i, r in enumerate(rows):
        groups.setdefault((r.claim_id, r.model, r.variant), []).append(i)
    out: list[str | None] = [r.variant for r in rows]
    for idx in groups.values():
        if len(idx) > 1:
            for i, extra in zip(idx, _tell_apart([rows[i] for i in idx])):
                out[i] = f"{rows[i].variant}, {extra}" if rows[i].variant else extra
    return out


def seed_counts(per_seed: Sequence[str]) -> str:
    """Per-seed verdicts counted: ``"5/5 reproduced"`` or ``"4 not reproduced, 1 inconclusive (of 5)"``."""
    per_seed = list(per_seed)
    if not per_seed:
        raise ValueError("no per-seed verdicts to count")
    counts = [(v, per_seed.count(v)) for v in OUTCOME_ORDER if v in per_seed]
    if len(counts) == 1:
        return f"{len(per_seed)}/{len(per_seed)} {counts[0][0]}"
    return ", ".join(f"{k} {v}" for v, k in counts) + f" (of {len(per_seed)})"


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def reason(row: VerdictRow) -> str:
    """Why a row came out as it did, where it says: the rule's ``details["why"]`` (every inconclusive
    row of notebooks 06-08, and the decided rows of the rules built on ``verdicts.seed_test``, which
    say what decided them, e.g. 'not a mitigation' or a verdict resting on the t-interval). For an
    inconclusive row whose rule recorded no reason (notebooks 03-05), what its own fields show:
    seeds that disagree or are all inconclusive (``per_seed``), parts of a joint claim that are
    inconclusive (C1), layers neither quiet nor busy (C1.middle), a curve that does not rise or an
    interval across the band's edge (C1.depth) or across a threshold, a minimum detectable effect
    above the margin; else :data:`NO_REASON`. Decided rows without a recorded reason: ``""``."""
    why = str(row.details.get("why") or "").strip()
    if why or row.verdict != INCONCLUSIVE:
        return why
    parts = []
    if row.per_seed:
        parts.append(f"seeds disagree: {seed_counts(row.per_seed)}" if len(set(row.per_seed)) > 1
                     else "every seed is inconclusive")
    open_parts = [k for k, v in row.details.items() if isinstance(v, str) and v == INCONCLUSIVE]
    if open_parts:
        parts.append(f"its part{'s' if len(open_parts) > 1 else ''} {', '.join(open_parts)} "
                     f"{'are' if len(open_parts) > 1 else 'is'} inconclusive")
    d, (lo, hi) = row.details, row.ci
    if all(isinstance(d.get(k), list) for k in ("quiet_layers", "busy_layers", "candidates")):
        run = d.get("longest_quiet_run")
        parts.append(f"neither a run of quiet layers nor every layer busy (longest quiet run "
                     f"{len(run) if isinstance(run, list) else '?'}, {len(d['busy_layers'])} of "
                     f"{len(d['candidates'])} layers busy)")
    band = d.get("band")
    if d.get("curve_rises") is False:
        parts.append("the curve does not rise towards the next token")
    elif isinstance(band, list) and len(band) == 2 and lo is not None and hi is not None:
        edges = [e for e in band if _number(e) and lo <= e <= hi]
        if edges:
            parts.append(f"the interval straddles the band's edge {edges[0]:g}")
    if _number(d.get("threshold")) and lo is not None and hi is not None and lo <= d["threshold"] <= hi:
        parts.append(f"the interval straddles the threshold {d['threshold']:g}")
    mde, margin = row.details.get("mde"), row.details.get("margin")
    if _number(mde) and _number(margin) and mde > margin:
        unit = row.details.get("mde_unit") or ""
        parts.append(f"underpowered: MDE {mde:.3g} > margin {margin:g} {unit}".rstrip())
    return "; ".join(parts) or NO_REASON


def _kind(text: str) -> str:
    """A reason without its numbers, to group rows by: the first clause up to its colon, asides in
    brackets dropped, and 'underpowered' where a later clause says so ("seeds disagree: 2 of 5 on the
    claimed side; underpowered: MDE ..." -> "seeds disagree, underpowered")."""
    prev = None
    while prev != text:
        prev, text = text, re.sub(r"\([^()]*\)", "", text)
    clauses = [" ".join(c.split(":", 1)[0].split()).replace(" ,", ",").strip(" ,.") for c in text.split(";")]
    head = clauses[0] or "no reason recorded"
    return head + (", underpowered" if "underpowered" in clauses[1:] else "")




def _subjects(pairs: Sequence[tuple[str, str | None]]) -> str:
    """``[(model, label)]`` as 'model (label, label) and model (label)'."""
    by: dict[str, list[str]] = {}
    for model, label in pairs:
        by.setdefault(model, [])
        if label and label not in by[model]:
            by[model].append(label)
    parts = []
    for model, labels in by.items():
        sep = " / " if any(", " in x for x in labels) else ", "
        parts.append(f"{model} ({sep.join(labels)})" if labels else model)
    return join(parts, "; " if any(", " in m for m in by) else ", ")




# --------------------------------------------------------------------------------------------
# The table and the sentences
# --------------------------------------------------------------------------------------------


def _result(row: VerdictRow) -> str:
    ev = tables.evidence(row)
    text = row.verdict + (f": {ev}" if ev != "–" else "")
    why = reason(row)
    return text + (f" ({why})" if why else "") + tables.marks(row)


def _seeds(row: VerdictRow) -> str:
    if row.per_seed:
        return seed_counts(row.per_seed)
    if row.details.get("unit") == "seed" and row.n is not None:
        return f"{row.n} seeds as the unit"
    return "–"


class ClaimsTable(pd.DataFrame):
    """A DataFrame that shows whole cells (pandas cuts text at 50 characters by default)."""

    def __repr__(self) -> str:
        with pd.option_context("display.max_colwidth", None, "display.width", None):
            return super().__repr__()

    def _repr_html_(self) -> str:
        with pd.option_context("display.max_colwidth", None):
            return super()._repr_html_()


def claims_table(rows) -> pd.DataFrame:
    """The paper's claims beside our results: one line per verdict row, in the order of ``CLAIMS``,
    indexed by (claim id, what the paper claims as our rules read it, model, variant) so each claim's
    text shows once. ``our result``: the verdict, the estimate [95% CI] in 3 significant digits and
    the reason of an inconclusive one (:func:`reason`); ``statistic``: what the estimate measures;
    ``seeds``: the per-seed verdicts counted where the rule judged each seed, or the number of seeds
    where seeds are the test's unit. ``rows``: verdict rows, or the path of a saved verdict file."""
    rows = _ordered(_rows(rows))
    records = []
    for r, label in zip(rows, _labels(rows)):
        records.append({"claim": r.claim_id, PAPER_COLUMN: CLAIMS.get(r.claim_id, r.claim), "model": r.model,
                        "variant": label or "–", "our result": _result(r), "statistic": r.statistic,
                        "seeds": _seeds(r)})
    frame = pd.DataFrame(records, columns=list(TABLE_COLUMNS)).set_index(list(INDEX))
    return ClaimsTable(frame)


def _items(rows: Sequence[VerdictRow], labels: Sequence[str | None], outcome: str) -> list[str]:
    """One phrase per claim with rows of ``outcome`` (inconclusive ones: per claim and reason kind)."""
    per_claim: dict[str, list[int]] = {}
    for i, r in enumerate(rows):
        per_claim.setdefault(r.claim_id, []).append(i)
    items = []
    for cid, idx in per_claim.items():
        hits = [i for i in idx if rows[i].verdict == outcome]
        if not hits:
            continue
        groups: dict[str, list[int]] = {}
        for i in hits:
            groups.setdefault(_kind(reason(rows[i])) if outcome == INCONCLUSIVE else "", []).append(i)
        for kind, members in groups.items():
            if len(members) == len(idx) > 1:
                models = list(dict.fromkeys(rows[i].model for i in members))
                sep = "; " if any(", " in m for m in models) else ", "
                who = f"everywhere it was tested ({len(members)} rows: {join(models, sep)})"
            else:
                who = "for " + _subjects([(rows[i].model, labels[i]) for i in members])
            items.append(f"{cid} {who}" + (f": {kind}" if kind else ""))
    return items


def _not_evidence_line(rows: Sequence[VerdictRow], labels: Sequence[str | None]) -> str:
    """The rows their rules mark as not evidence, per kind (``tables.evidence_kind``) and claim."""
    groups: dict[str, dict[str, list[int]]] = {}
    for i, r in enumerate(rows):
        if not is_evidence(r):
            groups.setdefault(tables.evidence_kind(r), {}).setdefault(r.claim_id, []).append(i)
    parts = []
    for kind, claims in groups.items():
        items = [f"{cid} for {_subjects([(rows[i].model, labels[i]) for i in idx])}" for cid, idx in claims.items()]
        parts.append(f"{kind} — " + ", ".join(items))
    return "Reported but not counted as evidence, either way: " + "; ".join(parts) + "."


def _post_hoc_line(rows: Sequence[VerdictRow], labels: Sequence[str | None]) -> str | None:
    """Rows of a post-hoc rule whose pre-registered rule gives another verdict, or None."""
    differ = [(i, r) for i, r in enumerate(rows) if r.details.get("pre_registered_verdict") not in (None, r.verdict)]
    if not differ:
        return None
    return ("Where a rule changed after the first numbers, the rule declared before them reads otherwise: "
            + "; ".join(f"{r.claim_id} for {_subjects([(r.model, labels[i])])} is {r.verdict} "
                        f"(pre-registered: {r.details['pre_registered_verdict']})" for i, r in differ) + ".")


def run_shows(rows, *, extra: Iterable[str] = ()) -> list[str]:
    """What this run shows, in 3-7 plain sentences computed from the verdict rows, then ``extra``.

    First the count of verdicts and claims by outcome; then one sentence per outcome that occurs,
    naming per claim the models and variants with it (a claim decided the same way on all its rows
    is said to hold 'everywhere it was tested'; inconclusive rows are grouped by the kind of their
    reason, :func:`reason`); then which outcomes did not occur ('none disagrees with the paper');
    then, where a rule judged each seed and the seeds split, how. Only rows that count as evidence
    (``verdicts.is_evidence``) enter those sentences; the others (C1.late, a sanity check; C1's
    regimes under a decoder fitted to the output) are named in one sentence of their own, and a
    post-hoc rule whose pre-registered version gives another verdict in one more. ``extra``:
    sentences a notebook's own study functions computed, appended as given (a list of strings).
    ``rows``: verdict rows, or the path of a saved verdict file."""
    if isinstance(extra, str):
        raise TypeError("extra takes a list of sentences, e.g. extra=[sentence]; got one string")
    extra = list(extra)
    bad = [e for e in extra if not isinstance(e, str) or not e.strip()]
    if bad:
        raise ValueError(f"extra sentences must be non-empty strings, got {bad[:3]!r}")
    every = _ordered(_rows(rows))
    every_labels = _labels(every)
    counted = [i for i, r in enumerate(every) if is_evidence(r)]
    rows, labels = [every[i] for i in counted], [every_labels[i] for i in counted]
    n, k = len(rows), len(dict.fromkeys(r.claim_id for r in rows))
    counts = {v: sum(r.verdict == v for r in rows) for v in OUTCOME_ORDER}
    present = [v for v in OUTCOME_ORDER if counts[v]]
    on = f"{plural(n, 'verdict')} on {plural(k, 'claim')}"
    if not rows:
        lines = [f"None of the {plural(len(every), 'verdict')} of this run counts as evidence about the paper's "
                 "claims."]
    elif present == [REPRODUCED]:
        lines = [f"All {on} of the paper reproduce it." if n > 1 else f"The {on} of the paper reproduces it."]
    elif present == [NOT_REPRODUCED] and all(is_frozen_model_row(r) for r in rows):
        lines = [f"Not one of the {on} of the paper holds on the frozen models (a setting the paper does not "
                 "report)."]
    elif present == [NOT_REPRODUCED]:
        lines = [f"Not one of the {on} of the paper reproduces it: every one disagrees with the paper."]
    elif present == [INCONCLUSIVE]:
        lines = [f"None of the {on} of the paper is decided: this run neither confirms nor contradicts it."]
    else:
        parts = [f"{counts[v]} {v}" for v in present]
        verb = "is" if counts[present[0]] == 1 else "are"
        lines = [f"Of the {on} of the paper, {parts[0].split(' ', 1)[0]} {verb} "
                 + join([parts[0].split(" ", 1)[1]] + parts[1:]) + "."]
    left = len(every) - len(rows)
    if left and rows:
        lines[0] = lines[0][:-1] + f" ({left} more {'is' if left == 1 else 'are'} reported but not counted as evidence)."
    for v in present:
        for frozen, lead in ((False, _LEAD[v]), (True, _LEAD_FROZEN[v])):
            keep = [i for i, r in enumerate(rows) if is_frozen_model_row(r) == frozen]
            if any(rows[i].verdict == v for i in keep):
                lines.append(lead + "; ".join(_items([rows[i] for i in keep], [labels[i] for i in keep], v)) + ".")
    none = _NONE_FROZEN if all(is_frozen_model_row(r) for r in rows) else _NONE
    absent = [none[v] for v in OUTCOME_ORDER if not counts[v]]
    if absent and rows:
        text = ", and ".join(absent)
        lines.append(text[0].upper() + text[1:] + ".")
    if len(rows) < len(every):
        lines.append(_not_evidence_line(every, every_labels))
    post_hoc = _post_hoc_line(every, every_labels)
    if post_hoc:
        lines.append(post_hoc)
    split = [i for i, r in enumerate(rows) if r.per_seed and len(set(r.per_seed)) > 1]
    if split:
        groups: dict[tuple[str, str], list[int]] = {}
        for i in split:
            groups.setdefault((rows[i].claim_id, seed_counts(rows[i].per_seed)), []).append(i)
        lines.append("Seeds split inside a combined verdict: " + "; ".join(
            f"{cid} for {_subjects([(rows[i].model, labels[i]) for i in members])}: {text}"
            for (cid, text), members in groups.items()) + ".")
    return lines + extra


def print_findings(rows, *, title: str = "What this run shows", extra: Iterable[str] = ()) -> pd.DataFrame:
    """Print ``title`` and :func:`run_shows` as a list, and return :func:`claims_table` (a notebook's
    closing cell: ``findings.print_findings(rows)`` shows both). ``rows``: verdict rows, or the path
    of a saved verdict file."""
    rows = _rows(rows)
    lines = run_shows(rows, extra=extra)
    print(title)
    for line in lines:
        print(f"- {line}")
    print("\nThe paper's claims, as our rules read them, beside our results:")
    return claims_table(rows)


def scale_lines(scaled_rows) -> list[str]:
    """The scale clause of a notebook's C2-C4 verdicts, in the scale rule's words
    (``analysis.scale.SCALE_RULE``): per baseline and reading, how many verdicts, the baseline's
    switch measure, and whether they count as evidence. ``scaled_rows``: :func:`.scale.with_scale`'s
    dicts (rows without a ``scale`` entry are skipped); ``[]`` when none has one."""
    groups: dict[tuple, list] = {}
    for d in scaled_rows:
        s = d.get("scale") if isinstance(d, dict) else None
        if s is not None:
            groups.setdefault((s["model"], s["outcome"], s["evidence"]), []).append((d, s))
    lines = []
    for (model, outcome, label), items in groups.items():
        s = items[0][1]
        lo, hi = s["early_share_ci"]
        share = ("–" if s["early_share"] is None else f"{s['early_share']:.2f}") + (
            "" if lo is None or hi is None else f" [{lo:.2f}, {hi:.2f}]")
        n = len(items)
        lines.append(f"Scale: {plural(n, 'C2–C4 verdict')} here {'was' if n == 1 else 'were'} measured on {model}, "
                     f"whose deep-switch measure reads {outcome} (S1 {share}, C1.middle {s['middle']}, "
                     f"{s['n_layers']} blocks): {label}.")
    if any(not s["counts_as_evidence"] for items in groups.values() for _, s in items):
        lines.append("By the scale rule (`residshift.analysis.scale.SCALE_RULE`), a verdict on a baseline without "
                     "the deep switch is not counted as evidence against the paper's claims.")
    return lines
