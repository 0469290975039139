"""The study's primary claims, and the numbers its authored findings are checked against.

``saved(name)`` reads ``figures/<name>.json``: the numbers behind a figure of the committed default
study. A notebook's findings cell asserts its authored sentences on them, so that a regeneration that
contradicts a sentence fails the notebook (and the test that runs every findings cell on the committed
numbers).
"""
from __future__ import annotations

import json
from typing import Any

from .core.paths import REPO_ROOT

FIGURES = REPO_ROOT / "figures"


def saved(name: str) -> Any:
    """The numbers of ``figures/<name>.json`` (the committed default study; written by its runner)."""
    path = FIGURES / f"{name}.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: run `make study` (the default profile writes figures/)")
    return json.loads(path.read_text())
