"""What notebooks 03-05 found: three lines each, computed from the numbers the notebook holds.

- 03 alignment-curves: :func:`alignment_found` (C1 per model under the logit lens, where the next token
  emerges against the paper's reference, what the tuned lens adds);
- 04 attenuation-sweep: :func:`sweep_found` (where the best single cut sits, the C2 verdicts, what
  cutting one skip path outright costs);
- 05 learned-gates: :func:`gates_found` (where the gates attenuate, their loss against the unmodified
  model and the best fixed cut, misalignment and benchmarks).

Every number of a loss names the windows it was measured on (selection, confirmation, lens or test
windows: how many, which corpus and split), so one cut read in 04 and 05 is not mistaken for one
measurement. Each function names every model of the run (a model without the rows it needs says so)
and raises ``ValueError`` naming the fix when its inputs lack what it reads.

Only notebooks and tests import this module: no module of the package may, so that it stays out of
the source fingerprints that key the cached results (``residshift.core.cache``).
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

import pandas as pd

from ..analysis import verdicts
from ..analysis.verdicts import VerdictRow
from .alignment import PAPER_REF
from .attenuation import LOSS_SPLIT
from .lens_setups import ATTEN_SPLIT
from .prose import every, first_reason, join

_ARROW = "→"


# --------------------------------------------------------------------------------------------
# Shared formatting
# --------------------------------------------------------------------------------------------


def _rows(rows: Iterable[Any], who: str) -> list[VerdictRow]:
    """Verdict rows, from objects or from a verdict file's dicts."""
    out = []
    for r in rows if rows is not None else []:
        out.append(r if isinstance(r, VerdictRow) else VerdictRow.from_dict(r))
    if not out:
        raise ValueError(f"{who} needs this notebook's verdict rows: pass `rows` after the cell that builds them "
                         "(or residshift.analysis.verdicts.load_verdicts on its figures/*-verdicts.json)")
    return out


def _models(rows: Sequence[VerdictRow], models: Iterable[str] | None) -> list[str]:
    """The run's models: ``models`` where given (a model without rows is then named), else in row order."""
    seen = list(dict.fromkeys(r.model for r in rows))
    return list(models) if models is not None else seen


def _find(rows: Sequence[VerdictRow], model: str, claim_id: str, variant: str | None = None,
          **details: Any) -> VerdictRow | None:
    for r in rows:
        if r.model == model and r.claim_id == claim_id and (variant is None or r.variant == variant) and all(
                r.details.get(k) == v for k, v in details.items()):
            return r
    return None


def _signed(x: float | None, digits: int = 4) -> str:
    return "n/a" if x is None else f"{x:+.{digits}f}"


def _ci(m: float | None, lo: float | None, hi: float | None, digits: int = 4, *, signed: bool = True) -> str:
    """``+0.0070 [+0.0027, +0.0114]``; the value alone where the interval is missing."""
    f = (lambda x: _signed(x, digits)) if signed else (lambda x: "n/a" if x is None else f"{x:.{digits}f}")
    if lo is None or hi is None:
        return f"{f(m)} (no interval)"
    return f"{f(m)} [{f(lo)}, {f(hi)}]"


def _why(row: VerdictRow) -> str:
    """`` (why)`` for an inconclusive row that says why, else nothing."""
    why = first_reason(row)
    return f" ({why})" if why else ""






def _for(names: Sequence[str], total: int, noun: str = "") -> str:
    """``for both`` / ``for all 3`` (``noun`` after it) where every item of ``total`` shares a verdict,
    else ``for a and b``."""
    return "for " + every(names, total, noun)


def _by_verdict(items: Sequence[tuple[str, str, str]]) -> str:
    """``(name, number, verdict)`` triples as one clause: the numbers, then ``→ verdict for both`` where
    the verdicts agree; each number with its own verdict where they differ."""
    if not items:
        return ""
    verdicts_ = list(dict.fromkeys(v for _, _, v in items))
    if len(verdicts_) == 1 and len(items) > 1:
        return (", ".join(f"{n} {x}".rstrip() for n, x, _ in items) + f" {_ARROW} {verdicts_[0]} "
                + _for([n for n, _, _ in items], len(items)))
    return "; ".join(f"{n} {x}".rstrip() + f" {_ARROW} {v}" for n, x, v in items)


Item = tuple[str, str, "float | None", str, VerdictRow]  # model, gate kind, estimate, estimate as text, row


def _labels(items: Sequence[Item], *, numbers: bool = True) -> str:
    """``a scalar x and token y, b token z``: the items' labels, one model's gate kinds together."""
    by: dict[str, list[str]] = {}
    for model, kind, _, text, _ in items:
        by.setdefault(model, []).append(" ".join(x for x in (kind, text if numbers else "") if x))
    return join([f"{m} {join(ks)}".rstrip() for m, ks in by.items()])


def _grouped(items: Sequence[Item], total: int, *, every: bool = False) -> str:
    """Items grouped by verdict, the group's shared reason once (reasons that differ are left to the
    detail): a verdict held by one item names it with its number (``a scalar +0.0011 [...] not
    reproduced``); one held by several says how many (``3 others inconclusive``; ``… for all 4`` where
    it is every one of ``total``), or (``every``) names each, with its number where it has one."""
    groups = []
    for v in dict.fromkeys(x[4].verdict for x in items):
        mine = [x for x in items if x[4].verdict == v]
        whys = list(dict.fromkeys(first_reason(x[4]) for x in mine))
        groups.append((v + (f" ({whys[0]})" if len(whys) == 1 and whys[0] else ""), mine))
    out = []
    for v, mine in sorted(groups, key=lambda g: len(g[1]) > 1):
        if len(mine) == 1 or (every and any(x[3] for x in mine)):
            out.append(f"{_labels(mine)} {v}")
        elif len(mine) == total:
            out.append(f"{v} {_for([x[0] for x in mine], total, 'gates')}")
        elif every:
            out.append(f"{v} for {_labels(mine)}")
        else:
            out.append(f"{len(mine)}{' others' if out else ''} {v}")
    return ", ".join(out)


# --------------------------------------------------------------------------------------------
# 03: alignment curves
# --------------------------------------------------------------------------------------------

_C1_PARTS = (("C1.early", "early"), ("C1.middle", "middle"), ("C1.late", "late"))


def _primary_depth(rows: Sequence[VerdictRow], model: str, decoder: str) -> VerdictRow | None:
    return next((r for r in rows if r.model == model and r.variant == decoder and r.claim_id == "C1.depth"
                 and r.details.get("primary", True)), None)


def _band_side(row: VerdictRow) -> str:
    """`` (above)`` etc.: where the depth's interval sits against the C1.depth band."""
    band = row.details.get("band")
    lo, hi = row.ci
    if not band or lo is None or hi is None:
        return ""
    if lo > band[1]:
        return " (above)"
    if hi < band[0]:
        return " (below)"
    if band[0] <= lo and hi <= band[1]:
        return " (inside)"
    return " (across an edge)"


def _bands(rows: Sequence[VerdictRow]) -> str:
    bands = list(dict.fromkeys(tuple(r.details["band"]) for r in rows if r.details.get("band")))
    return "" if not bands else "; C1.depth band " + "/".join(f"{a:g}–{b:g}" for a, b in bands)


def _depth_item(name: str, row: VerdictRow) -> tuple[str, str, str]:
    verdict = f"{row.verdict}{_why(row)}"
    if row.estimate is None:
        return name, "no emergence depth", verdict
    return name, f"{_ci(row.estimate, *row.ci, 2, signed=False)}{_band_side(row)}", verdict


def _regimes(rows: Sequence[VerdictRow], name: str) -> str | None:
    overall = _find(rows, name, "C1", "logit lens")
    parts = [(cid, label, _find(rows, name, cid, "logit lens")) for cid, label in _C1_PARTS]
    if overall is None and not any(r for _, _, r in parts):
        return None
    text = ", ".join(f"{label} {r.verdict}" + (" (a sanity check)" if cid == "C1.late" else "") + _why(r)
                     for cid, label, r in parts if r is not None)
    return f"{text} {_ARROW} C1 " + ("not judged" if overall is None else f"{overall.verdict}{_why(overall)}")


def alignment_found(rows: Iterable[Any], *, models: Iterable[str] | None = None) -> list[str]:
    """What notebook 03 found, in three lines computed from its C1 verdict rows (``rows``: the
    ``VerdictRow``s of ``alignment.c1_rows``, or ``figures/03-alignment-curves-verdicts.json``):

    1. C1 under the logit lens: the early, middle and late regime verdicts and the overall C1 verdict
       (C1.late marked as the sanity check it is), models with the same verdicts said once;
    2. where the next token emerges: the primary (top-1) emergence depth ``l/L`` with its 95% CI per
       model under the logit lens, where it sits against the C1.depth band, beside the paper's reference
       (Gemma-2-2B), and the C1.depth verdict (inconclusive: the first clause of why);
    3. what the tuned lens adds: its emergence depth, how much earlier or later than the logit lens's,
       and its C1.depth verdict (the only tuned rows that count as evidence); its own C1 verdict marked
       as not counted; a model without a tuned lens is named.

    ``models``: the run's models in order (a model with no rows is then named); default: the rows'.
    The layers, the reasons in full and the other metrics are in the detail the notebook prints next.
    """
    rows = _rows(rows, "alignment_found")
    if not any(r.claim_id in ("C1", "C1.depth") for r in rows):
        raise ValueError("alignment_found reads C1 and C1.depth rows (alignment.c1_rows); these rows hold "
                         f"{sorted({r.claim_id for r in rows})}: pass notebook 03's `rows`")
    names = _models(rows, models)
    regimes: dict[str, list[str]] = {}
    no_c1, depths, no_depth, tuned, no_tuned, tuned_c1 = [], [], [], [], [], []
    for name in names:
        text = _regimes(rows, name)
        if text is None:
            no_c1.append(name)
        else:
            regimes.setdefault(text, []).append(name)
        logit = _primary_depth(rows, name, "logit lens")
        if logit is None:
            no_depth.append(name)
        else:
            depths.append(_depth_item(name, logit))
        t = _primary_depth(rows, name, "tuned lens")
        if t is None:
            no_tuned.append(name)
            continue
        n, x, v = _depth_item(name, t)
        if logit is not None and logit.estimate is not None and t.estimate is not None:
            x += (f", {abs(logit.estimate - t.estimate):.2f} "
                  f"{'earlier' if t.estimate < logit.estimate else 'later'}")
        tuned.append((n, x, v))
        t_overall = _find(rows, name, "C1", "tuned lens")
        if t_overall is not None:
            tuned_c1.append((name, t_overall.verdict + ("" if verdicts.is_evidence(t_overall) else " (not counted)")))
    regime_text = "; ".join((f"{_for(ns, len(names)).removeprefix('for ')} models" if len(ns) == len(names) > 1
                             else join(ns)) + f": {text}" for text, ns in regimes.items())
    if no_c1:
        regime_text += ("; " if regime_text else "") + f"no logit-lens C1 rows for {join(no_c1)}"
    paper_model = PAPER_REF["model"].replace(" (paper)", "")
    depth_text = _by_verdict([(n, x, f"C1.depth {v}") for n, x, v in depths])
    if no_depth:
        depth_text += ("; " if depth_text else "") + f"no emergence depth for {join(no_depth)}"
    tuned_text = _by_verdict([(n, x, f"C1.depth {v}") for n, x, v in tuned])
    if tuned_c1:
        c1s = list(dict.fromkeys(v for _, v in tuned_c1))
        tuned_text += "; its C1 " + (f"{c1s[0]} {_for([n for n, _ in tuned_c1], len(tuned_c1))}" if len(c1s) == 1
                                     else ", ".join(f"{v} for {n}" for n, v in tuned_c1))
    if no_tuned:
        tuned_text += ("; " if tuned_text else "") + f"no tuned lens for {join(no_tuned)}"
    return [
        "C1 under the logit lens (a layer counts where its top-1 rate beats a unigram guess) — " + regime_text + ".",
        f"Next-token emergence depth l/L (logit lens, top-1, 95% CI; paper: {paper_model} ≈ "
        f"{PAPER_REF['relative']:.2f}{_bands(rows)}): " + depth_text + ".",
        "The tuned lens (it votes on C1.depth only): " + tuned_text + ".",
    ]


# --------------------------------------------------------------------------------------------
# 04: attenuation sweep
# --------------------------------------------------------------------------------------------


def _cell(c: Mapping[str, Any]) -> str:
    return f"block {c['layer']}, α = {c['alpha']:g}"


_STATUS = {"confirmed": "confirmed",
           "ruled out": "not confirmed (gain ≥ {margin:g} ruled out)",
           "undecided": "not confirmed (gain ≥ {margin:g} not ruled out)"}


def _records(table: Any, who: str, what: str) -> list[dict[str, Any]]:
    if isinstance(table, pd.DataFrame):
        return table.to_dict(orient="records")
    recs = list(table or [])
    if not recs:
        raise ValueError(f"{who} needs {what}")
    return [dict(r) for r in recs]


def _best_cut(name: str, s: Mapping[str, Any] | None) -> str:
    if s is None:
        return f"{name}: no best-cut numbers"
    o = s["overall"]
    if o.get("layer") is None:
        low = s["lowest"]
        return (f"{name}: no cut beats the unmodified model on the selection windows (least harmful "
                f"{_cell(low)}, {_signed(low['selection_mean'])})")
    head = f"{name} {_cell(o)} ({o['region']})"
    if o.get("mean") is None:
        return head + f": {_signed(o['selection_mean'])} on the selection windows, not measured on the confirmation ones"
    status = _STATUS.get(o.get("status"), str(o.get("status"))).format(margin=s["margin"])
    return head + f": {_ci(o['mean'], o['lo'], o['hi'])}, {status}"


def _ns(rows: Sequence[VerdictRow]) -> str:
    return "/".join(str(n) for n in dict.fromkeys(r.n for r in rows)) or "?"


def _c2(rows: Sequence[VerdictRow], names: Sequence[str]) -> str:
    parts = []
    for cid, label, where, digits in (("C2.layer-sensitive", "layer-sensitive (late-block contrast", "selection", 3),
                                      ("C2.late-cut", "late cut (", "confirmation", 4)):
        mine = [(n, _find(rows, n, cid)) for n in names]
        mine = [(n, r) for n, r in mine if r is not None]
        if mine:
            sep = ", " if label.endswith("contrast") else ""
            parts.append(f"{label}{sep}{_ns([r for _, r in mine])} {where} windows): " + _by_verdict(
                [(n, _ci(r.estimate, *r.ci, digits), f"{r.verdict}{_why(r)}") for n, r in mine]))
    missing = [n for n in names if _find(rows, n, "C2.layer-sensitive") is None and _find(rows, n, "C2.late-cut") is None]
    if missing:
        parts.append(f"no C2 rows for {join(missing)}")
    return "; ".join(parts)


def _alpha0(name: str, recs: Sequence[Mapping[str, Any]]) -> str:
    t = [r for r in recs if r["model"] == name]
    if not t:
        return f"{name}: no α = 0 column"
    b0 = next((r for r in t if int(r["block"]) == 0), None)
    rest = [r for r in t if int(r["block"]) != 0]
    first = "" if b0 is None else f" block 0 {_ci(b0['dloss'], b0.get('lo'), b0.get('hi'), 3)}"
    if not rest:
        return f"{name}{first}"
    cheap, worst = min(rest, key=lambda r: r["dloss"]), max(rest, key=lambda r: r["dloss"])
    span = (f"{_signed(cheap['dloss'], 2)} (block {int(cheap['block'])}) to {_signed(worst['dloss'], 2)} "
            f"(block {int(worst['block'])})")
    return f"{name}{first}, {'others' if b0 is not None else 'its blocks'} {span}"


def sweep_found(rows: Iterable[Any], best: Mapping[str, Mapping[str, Any]], alpha0: Any, *,
                corpus: str, split: str, models: Iterable[str] | None = None) -> list[str]:
    """What notebook 04 found, in three lines computed from its numbers:

    1. the best single cut over all blocks per model (``best``: ``attenuation.best_cut_anywhere`` or
       ``figures/04-attenuation-sweep-best-cut.json``): block, α, its region, its loss change with its CI
       on the confirmation windows, and whether it held;
    2. the C2 verdicts (``rows``: ``attenuation.c2_rows`` or the verdict file): layer-sensitive (the late
       blocks' contrast, on the selection windows) and the late cut (on the confirmation windows), with
       their CIs, models sharing a verdict said once;
    3. what cutting one skip path outright (α = 0) costs (``alpha0``: ``attenuation.alpha0_table`` or its
       saved records): block 0 with its CI and the range over the other blocks, a description of the
       trained model, not a test of C2.

    ``corpus``/``split``: where the grid's windows come from (``P.sweep_corpus``, ``P.sweep_split``); the
    confirmation windows are the next windows of the same seed and split, disjoint from the selection ones.
    The selection-window numbers, p-values and regions' blocks are in the detail the notebook prints next.
    """
    rows = _rows(rows, "sweep_found")
    if not isinstance(best, Mapping) or not best:
        raise ValueError("sweep_found needs the best-cut summary: pass `best` "
                         "(attenuation.best_cut_anywhere) or figures/04-attenuation-sweep-best-cut.json")
    recs = _records(alpha0, "sweep_found", "the α = 0 table: pass `alpha0` (attenuation.alpha0_table)")
    names = _models(rows, models) if models is not None else list(dict.fromkeys(
        [r.model for r in rows] + list(best)))
    first = next(iter(best.values()))
    n_sel, n_conf = first.get("n_selection"), first.get("n_confirmation")
    return [
        f"Best single cut (chosen on {n_sel} selection windows of {corpus} {split}), nats on the next {n_conf} "
        "confirmation windows: " + "; ".join(_best_cut(n, best.get(n)) for n in names) + ".",
        "C2, nats — " + _c2(rows, names) + ".",
        f"Cutting one skip path outright (α = 0, loss change on {n_sel} selection windows; a description, not a "
        "test of C2): " + "; ".join(_alpha0(n, recs) for n in names) + ".",
    ]


# --------------------------------------------------------------------------------------------
# 05: learned gates
# --------------------------------------------------------------------------------------------


def _kinds(rows: Sequence[VerdictRow], name: str) -> list[str]:
    return list(dict.fromkeys(r.variant for r in rows if r.model == name and r.claim_id.startswith("C3.")))


def _pairs(rows: Sequence[VerdictRow], names: Sequence[str]) -> list[tuple[str, str]]:
    """``(model, gate kind)`` for every model and gate kind with C3 rows."""
    return [(n, k) for n in names for k in _kinds(rows, n)]


def _items(rows: Sequence[VerdictRow], pairs, claim_id: str, digits: int = 4) -> list[Item]:
    """One claim's rows as items labelled ``model``, ``scalar`` (the gate kind without " gates")."""
    out = []
    for n, k in pairs:
        r = _find(rows, n, claim_id, k)
        if r is not None:
            text = "no estimate" if r.estimate is None else _ci(r.estimate, *r.ci, digits)
            out.append((n, str(k).removesuffix(" gates"), r.estimate, text, r))
    return out


def _concentration(rows: Sequence[VerdictRow], pairs) -> str:
    rel = [(n, k, e, "" if e is None else f"{e:.2g}×", r)
           for n, k, e, _, r in _items(rows, pairs, "C3.concentrates")]
    mat = _items(rows, pairs, "C3.concentrates.material")
    parts = []
    if rel:
        seeds = sorted({len(r.details.get("per_seed") or []) for *_, r in rel} - {0})
        parts.append(f"C3.concentrates (final block's 1 − α ÷ the largest other's, "
                     f"{'/'.join(map(str, seeds)) or '?'} seeds): " + _grouped(rel, len(pairs), every=True))
    if mat:
        floor = mat[0][4].details.get("min_attenuation", float("nan"))
        atts = [x[2] for x in mat if x[2] is not None]
        most = "" if not atts else f" (at most {max(atts):.3g})"
        plain = [(n, k, e, "", r) for n, k, e, _, r in mat]
        parts.append(f"material (1 − α ≥ {floor:g}): {_grouped(plain, len(pairs), every=True)}{most}")
    return "; ".join(parts)


def _cut_loss(recs: Sequence[Mapping[str, Any]], name: str) -> str:
    hit = next((r for r in recs if r["model"] == name and str(r["variant"]).startswith("best fixed cut")), None)
    return f"{name} none" if hit is None else f"{name} {_signed(hit['change'])}"


def _span(values: Sequence[float | None], digits: int) -> str:
    """`` (-0.001 to +0.056)``, `` (+0.020)`` where they round alike, ``""`` without a value."""
    est = sorted({_signed(round(x, digits) + 0.0, digits) for x in values if x is not None}, key=float)
    return "" if not est else f" ({est[0]})" if len(est) == 1 else f" ({est[0]} to {est[-1]})"


def _misalignment(rows: Sequence[VerdictRow], pairs) -> str:
    """The misalignment claims with the range of their estimates, claims whose verdicts group the same
    way said together."""
    claims: dict[str, list[str]] = {}
    for cid, label, digits in (("C3.misalignment", "input log-prob", 3), ("C3.misalignment.rank", "log10 rank", 4),
                               ("C3.emergence-shift", "emergence shift", 3)):
        items = _items(rows, pairs, cid, digits)
        if items:
            span = _span([x[2] for x in items], digits)
            plain = [(n, k, None, "", r) for n, k, _, _, r in items]
            claims.setdefault(_grouped(plain, len(pairs), every=True), []).append(f"{label}{span}")
    return "; ".join(f"{join(labels)}: {text}" for text, labels in claims.items()) or "no misalignment rows"


def _bench(rows: Sequence[VerdictRow], pairs) -> str:
    items = [(n, k, None, "", r) for n, k, _, _, r in _items(rows, pairs, "C3.benchmarks")]
    if not items:
        return "benchmarks: no rows"
    n_items = "/".join(str(n) for n in sorted({x[4].n for x in items}))
    return f"benchmarks ({n_items} items per task): {_grouped(items, len(pairs), every=True)}"


def gates_found(rows: Iterable[Any], loss_table: Any, *, corpus: str,
                models: Iterable[str] | None = None) -> list[str]:
    """What notebook 05 found, in three lines computed from its verdict rows (``rows``, or
    ``figures/05-learned-gates-verdicts.json``) and ``loss_table`` (``attenuation.loss_table`` or
    ``figures/05-learned-gates-loss.json``), one label per model and gate kind (``smollm2-135m scalar``):

    1. where the gates attenuate: the C3.concentrates verdicts with each gate's ratio of the final
       block's attenuation to the largest other block's, and whether the final block's is material;
    2. the loss on the test windows (``corpus``, split :data:`attenuation.LOSS_SPLIT`, how many: from the
       rows): gated minus unmodified and gated minus the best fixed cut, grouped by verdict (one gate:
       its CI; several: the range of their estimates), and each best fixed cut's own change on these
       windows (chosen on notebook 04's selection windows, so it need not repeat 04's numbers);
    3. the misalignment rows (input-token log-prob and rank, emergence shift) on the lens windows, and
       the benchmark verdicts, an inconclusive one with the first clause of its reason.

    Every gate's numbers and the reasons in full are in the detail the notebook prints next.
    """
    rows = _rows(rows, "gates_found")
    recs = _records(loss_table, "gates_found", "the loss table: pass `loss_table` (attenuation.loss_table)")
    if not any(r.claim_id.startswith("C3.") for r in rows):
        raise ValueError("gates_found reads C3 rows (concentration, loss, misalignment, benchmarks): pass "
                         f"notebook 05's `rows`; these hold {sorted({r.claim_id for r in rows})}")
    names = _models(rows, models)
    pairs = _pairs(rows, names)
    missing = [n for n in names if not _kinds(rows, n)]
    none = "" if not missing else f"; no C3 rows for {join(missing)}"
    n_test = next((r.n for r in rows if r.claim_id.startswith("C3.beats")), None)
    n_lens = next((r.n for r in rows if r.claim_id == "C3.misalignment"), None)
    cuts = [n for n in names if _kinds(rows, n)]
    alone = "" if not cuts else " (alone: " + ", ".join(_cut_loss(recs, n) for n in cuts) + ")"
    loss = []
    for cid, label in (("C3.beats-baseline", "vs unmodified"), ("C3.beats-best-cut", f"vs the best fixed cut{alone}")):
        items = _items(rows, pairs, cid)
        if items:
            loss.append(f"{label}: {_grouped(items, len(pairs))}")
        elif cid == "C3.beats-best-cut" and alone:
            loss.append(f"the best fixed cut{alone}")
    return [
        "Gate placement — " + (_concentration(rows, pairs) or "no concentration rows") + none + ".",
        f"Loss (nats, {n_test} evaluation windows of {corpus} {LOSS_SPLIT}) — "
        + ("; ".join(loss) or "no loss rows") + none + ".",
        f"Misalignment, gates − none, on {n_lens} lens windows of {corpus} {ATTEN_SPLIT}: " + _misalignment(rows, pairs)
        + "; " + _bench(rows, pairs) + none + ".",
    ]
