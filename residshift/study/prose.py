"""The small pieces every computed sentence is built from (the notebooks' closing lines and findings):
lists in English, counts, and an inconclusive row's reason. One home, so two notebooks never word the
same thing two ways."""
from __future__ import annotations

import re
from typing import Sequence

from ..analysis.verdicts import INCONCLUSIVE, VerdictRow


def join(items: Sequence[str], sep: str = ", ") -> str:
    """``a, b and c`` (``sep`` between all but the last two); ``none`` for no items."""
    items = list(items)
    if not items:
        return "none"
    return items[0] if len(items) == 1 else sep.join(items[:-1]) + " and " + items[-1]


def plural(n: int, word: str) -> str:
    """``1 seed`` / ``3 seeds``."""
    return f"{n} {word}{'' if n == 1 else 's'}"


def every(names: Sequence[str], total: int, noun: str = "") -> str:
    """``both`` / ``all 4 variants`` (``noun`` after it) where ``names`` are every one of ``total``
    (more than one), else the names joined."""
    if len(names) == total and total > 1:
        return ("both" if total == 2 else f"all {total}") + (f" {noun}" if noun else "")
    return join(names)


def first_reason(row: VerdictRow) -> str:
    """An inconclusive row's reason (``details['why']``), its first clause (up to a ``;``, ``:`` or
    ``(``); ``""`` for a decided row. The reason in full is in the row and the verdict tables."""
    why = re.split(r"[;:(]", str(row.details.get("why") or ""))[0].strip()
    return why if row.verdict == INCONCLUSIVE else ""
