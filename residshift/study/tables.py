"""Verdict rows for readers, in one layout: the notebooks' tables, their printed sentences and the
README's results block all render a :class:`~residshift.analysis.verdicts.VerdictRow` through
:func:`verdict_record`; and :func:`save_verdicts` writes a notebook's rows (the analysis layer
computes them, this layer saves them).

Numbers are shown to 3 significant digits (estimates range from 0.001 nats to 0.7 of depth); an
interval whose level is not 95% says its level.
"""
from __future__ import annotations

import html
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from ..analysis.verdicts import LEVEL, VerdictError, VerdictRow, is_evidence
from ..core.outputs import save_numbers

COLUMNS = ("model", "variant", "claim", "verdict", "why", "statistic", "estimate [CI]", "n", "MDE", "per seed")
# The plain-text view (what a terminal or a text diff shows; a notebook shows the HTML table, every column):
# each column cut to its width, so that a notebook's largest verdict table stays under ~5 kB of text.
TEXT_WIDTHS = {"claim": 26, "model": 22, "variant": 20, "verdict": 16, "estimate [CI]": 26}
TEXT_WIDTH = max(TEXT_WIDTHS.values())


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


def evidence_kind(row: VerdictRow) -> str:
    """Why a row is not counted as evidence, in a few words (the text of ``details["evidence_why"]``
    before its colon); ``""`` for a row that counts."""
    if is_evidence(row):
        return ""
    return str(row.details.get("evidence_why") or "").split(":")[0].strip() or "marked by its rule"


def marks(row: VerdictRow) -> str:
    """What a row's rule marked, in brackets: a post-hoc rule with the verdict of the rule declared
    before the numbers (``details["pre_registered_verdict"]``), a row not counted as evidence
    (:func:`evidence_kind`), and a decided row whose rule could not reach every outcome at this profile's
    sizes (``details["underpowered"]``, ``verdicts.c1_underpowered``); ``""`` for a row with none."""
    return "".join(f" [{m}]" for m in mark_list(row))


def mark_list(row: VerdictRow) -> list[str]:
    """The marks of :func:`marks`, each in its own words."""
    out = []
    pre = row.details.get("pre_registered_verdict")
    if pre is not None:
        out.append(f"post hoc; the pre-registered rule: {pre}")
    if not is_evidence(row):
        out.append(f"not evidence: {evidence_kind(row)}")
    weak = str(row.details.get("underpowered") or "")
    if weak and weak not in str(row.details.get("why") or ""):  # an inconclusive row's why says it already
        out.append(weak)
    return out


def symbols(row: VerdictRow) -> str:
    """`*` when the row's rule was revised after its numbers, `°` when the row is no evidence either way."""
    return ("*" if row.details.get("pre_registered_verdict") is not None else "") + ("" if is_evidence(row) else "°")


def verdict_record(row: VerdictRow) -> dict[str, str]:
    """One row as the strings every view shows (:data:`COLUMNS`); an inconclusive verdict carries its
    reason (``details["why"]``), a marked one its marks (:func:`marks`), and ``n`` says when its units
    are seeds."""
    mde = row.details.get("mde")
    why = row.details.get("why") or ""
    n = "–" if row.n is None else str(row.n) + (" seeds" if row.details.get("unit") == "seed" else "")
    return {"model": row.model, "variant": row.variant or "–", "claim": row.claim_id,
            "verdict": row.verdict + symbols(row), "why": str(why).split(";")[0].strip() or "; ".join(mark_list(row)),
            "statistic": row.statistic, "estimate [CI]": evidence(row), "n": n,
            "MDE": "–" if mde is None else f"{number(mde)} {row.details.get('mde_unit', '')}".strip(),
            "per seed": per_seed_text(row)}


KEY = ("model", "variant", "claim")  # the index of a verdict table


class VerdictTable(pd.DataFrame):
    """A verdict table: a DataFrame (index, filter and compare it as one) that displays whole cells
    whatever the pandas display options, with each row's rule one click away.

    - In a notebook (``_repr_html_``): every cell whole (``display.max_colwidth`` does not apply), and
      a last column whose ``rule`` button unfolds the row's rule text (``<details>``).
    - As text (``repr``, ``print``): claim, model, variant, verdict and estimate, each cut to its width
      (:data:`TEXT_WIDTHS`); the reasons and rules are in the HTML view.

    ``rules`` maps a row's ``(model, variant, claim, statistic)`` to its rule text; it survives
    selections (``.loc``, ``.head``, ``.reset_index()``); :meth:`row_rules` reads it row by row.
    """

    _metadata = ["rules"]

    @property
    def _constructor(self):
        return VerdictTable

    def _row_keys(self) -> list[tuple | None]:
        """Each row's (model, variant, claim, statistic), read from the index levels or columns that
        hold them (``statistic`` None where the table no longer has it)."""
        def values(key):
            if key in self.index.names:
                return list(self.index.get_level_values(key))
            return list(self[key]) if key in self.columns else None
        cols = [values(k) for k in KEY + ("statistic",)]
        if any(c is None for c in cols[:3]):
            return [None] * len(self)
        stat = cols[3] if cols[3] is not None else [None] * len(self)
        return list(zip(*cols[:3], stat))

    def row_rules(self) -> list[str | None]:
        """The rule text of each row, in order (None where unknown)."""
        rules = getattr(self, "rules", None) or {}
        out = []
        for key in self._row_keys():
            if key is None:
                out.append(None)
            elif key[3] is not None:
                out.append(rules.get(key))
            else:  # the statistic column was dropped: every rule of the (model, variant, claim)
                found = list(dict.fromkeys(r for k, r in rules.items() if k[:3] == key[:3]))
                out.append("\n\n".join(found) if found else None)
        return out

    def _whole(self):
        return pd.option_context("display.max_colwidth", None, "display.max_columns", None,
                                 "display.max_rows", None, "display.width", 10_000)

    def __repr__(self) -> str:
        frame = pd.DataFrame(self)
        flat = frame.reset_index() if any(n in TEXT_WIDTHS for n in frame.index.names) else frame
        cols = [c for c in TEXT_WIDTHS if c in flat.columns] or list(flat.columns)
        cut = lambda x, w: (x if len(x) <= w else x[:w - 1] + "…")  # noqa: E731
        text = pd.DataFrame({c: [cut(str(v), TEXT_WIDTHS.get(c, 40)) for v in flat[c]] for c in cols})
        return text.to_string(index=False) if len(text) else pd.DataFrame(self).to_string()

    __str__ = __repr__

    def _repr_html_(self) -> str:
        esc = lambda x: html.escape(str(x))  # noqa: E731
        frame = pd.DataFrame(self).map(esc)
        frame.columns = [esc(c) for c in frame.columns]
        if isinstance(frame.index, pd.MultiIndex):
            frame.index = pd.MultiIndex.from_tuples([tuple(esc(v) for v in t) for t in frame.index],
                                                    names=frame.index.names)
        else:
            frame.index = pd.Index([esc(v) for v in frame.index], name=frame.index.name)
        rules = self.row_rules()
        if any(r is not None for r in rules):
            frame["rule"] = ["–" if r is None else
                             '<details><summary>rule</summary><div style="white-space: normal; '
                             f'min-width: 28em; max-width: 48em; text-align: left">{esc(r)}</div></details>'
                             for r in rules]
        with self._whole():
            return frame.to_html(escape=False, na_rep="–")


def verdict_table(rows: Sequence[VerdictRow]) -> VerdictTable:
    """Verdict rows as a table indexed by (model, variant, claim), one column per :data:`COLUMNS`
    entry: a :class:`VerdictTable`, which shows whole cells whatever the pandas display options and,
    in a notebook, each row's rule behind a ``rule`` button."""
    records = [verdict_record(r) for r in rows]
    frame = VerdictTable(pd.DataFrame(records, columns=list(COLUMNS)).set_index(list(KEY)))
    frame.rules = {tuple(rec[k] for k in KEY) + (rec["statistic"],): r.rule for rec, r in zip(records, rows)}
    return frame


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
