"""Verdict rows for readers, in one layout: the notebooks' tables, their printed sentences and the
README's results block all render a :class:`~residshift.analysis.verdicts.VerdictRow` through
:func:`verdict_record`; and :func:`save_verdicts` writes a notebook's rows (the analysis layer
computes them, this layer saves them).

Numbers are shown to 3 significant digits (estimates range from 0.001 nats to 0.7 of depth); an
interval whose level is not 95% says its level.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from ..analysis.verdicts import LEVEL, VerdictError, VerdictRow
from ..core.outputs import save_numbers

COLUMNS = ("model", "variant", "claim", "verdict", "statistic", "estimate [CI]", "n", "MDE", "per seed")


def number(x: Any) -> str:
    """A number in 3 significant digits ("–" for none)."""
    if x is None:
        return "–"
    return f"{x:.3g}" if isinstance(x, (int, float)) else str(x)


def evidence(row: VerdictRow) -> str:
    """The estimate with its CI, and the CI's level when it is not 95%."""
    lo, hi = row.ci
    text = number(row.estimate) if lo is None or hi is None else f"{number(row.estimate)} [{number(lo)}, {number(hi)}]"
    if row.level is not None and lo is not None and abs(row.level - LEVEL) > 1e-9:
        text += f" ({100 * row.level:.3g}% CI)"
    return text


def per_seed_text(row: VerdictRow) -> str:
    """Each seed's verdict (rules judged per seed) or each seed's value (tests across seeds)."""
    values = row.details.get("per_seed_values")
    if row.per_seed and values is not None:
        return ", ".join(f"{v} ({number(x)})" for v, x in zip(row.per_seed, values))
    if row.per_seed:
        return ", ".join(row.per_seed)
    if values is not None:
        return ", ".join(number(x) for x in values)
    return "–"


def verdict_record(row: VerdictRow) -> dict[str, str]:
    """One row as the strings every view shows (:data:`COLUMNS`); an inconclusive verdict carries its
    reason (``details["why"]``), and ``n`` says when its units are seeds."""
    mde = row.details.get("mde")
    why = row.details.get("why") or ""
    n = "–" if row.n is None else str(row.n) + (" seeds" if row.details.get("unit") == "seed" else "")
    return {"model": row.model, "variant": row.variant or "–", "claim": row.claim_id,
            "verdict": row.verdict + (f" ({why})" if why else ""),
            "statistic": row.statistic, "estimate [CI]": evidence(row), "n": n,
            "MDE": "–" if mde is None else f"{number(mde)} {row.details.get('mde_unit', '')}".strip(),
            "per seed": per_seed_text(row)}


def verdict_table(rows: Sequence[VerdictRow]) -> pd.DataFrame:
    """Verdict rows as a table indexed by (model, variant, claim), whole cells shown."""
    frame = pd.DataFrame([verdict_record(r) for r in rows], columns=list(COLUMNS))
    return frame.set_index(["model", "variant", "claim"])


def verdict_lines(rows: Sequence[VerdictRow]) -> list[str]:
    """One printed sentence per verdict row (what the notebooks' closing sections quote)."""
    lines = []
    for r in rows:
        rec = verdict_record(r)
        lines.append(f"{r.model} · {r.claim_id} ({rec['variant']}): {rec['verdict']} — {r.statistic} = "
                     f"{rec['estimate [CI]']}" + (f"; per seed: {rec['per seed']}" if rec["per seed"] != "–" else ""))
    for line in lines:
        print(line)
    return lines


def power_lines(rows: Sequence[VerdictRow]) -> list[str]:
    """One sentence per row that carries a minimum detectable effect: what this profile can see.

    The MDE is the smallest true effect the row's test detects with 80% power; where it exceeds the
    rule's materiality margin, a real effect between the two could be missed (power gave way to the
    run-time budget). A 'not reproduced' needs the interval to exclude the margin, which can happen
    even then when the effect goes the other way.
    """
    lines = []
    for r in rows:
        mde, margin = r.details.get("mde"), r.details.get("margin")
        if mde is None:
            continue
        unit = r.details.get("mde_unit", "")
        size = f"{r.n} seeds" if r.details.get("unit") == "seed" else f"n = {r.n}"
        text = (f"{r.model} · {r.claim_id}" + (f" ({r.variant})" if r.variant else "")
                + f": with {size} the test detects an effect of {mde:.3g} {unit} with 80% power")
        if margin is not None and mde > margin:
            text += (f", more than the materiality margin of {margin:g} {unit}: a real effect between the two "
                     "could be missed (power gave way to the run-time budget)")
        elif margin is not None:
            text += f", within the materiality margin of {margin:g} {unit}"
        lines.append(text + ".")
    for line in lines:
        print(line)
    return lines


def rule_lines(*rules) -> list[str]:
    """The rules as the package states them (each function's rule text with its default parameters
    filled in, ``verdicts._rule``), printed: a notebook shows these instead of retyping them."""
    lines = []
    for fn in rules:
        doc = fn.__doc__ or ""
        if "Rule (default parameters):" not in doc:
            raise ValueError(f"{fn.__name__} states no rule (not a rule of residshift.analysis.verdicts)")
        text = " ".join(doc.split("Rule (default parameters):", 1)[1].split())
        lines.append(f"{fn.__name__}: {text}")
    for line in lines:
        print(line + "\n")
    return lines


def save_verdicts(name: str, rows: Sequence[VerdictRow], *, parameters: dict[str, Any] | None = None) -> Path:
    """Write ``figures/<name>.json``: a list of rows in the one layout (recorded in the manifest)."""
    rows = list(rows)
    if not rows:
        raise VerdictError("no verdict rows to save: call the rules first")
    bad = [type(r).__name__ for r in rows if not isinstance(r, VerdictRow)]
    if bad:
        raise VerdictError(f"save_verdicts takes VerdictRow objects (from the rules in "
                           f"residshift.analysis.verdicts), got {bad[:3]}")
    if "verdict" not in name:
        raise VerdictError(f"a verdict file's name must contain 'verdicts' (the report finds them by "
                           f"name), e.g. '04-attenuation-sweep-verdicts'; got {name!r}")
    return save_numbers(name, [r.as_dict() for r in rows], parameters=parameters)
