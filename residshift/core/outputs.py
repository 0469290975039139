"""What the notebooks write besides figures, and the record of where every output came from.

``save_numbers("03-alignment-curves-ranks", numbers)`` writes ``figures/03-alignment-curves-ranks.json``
atomically and records in ``figures/MANIFEST.json`` which profile, commit and parameters produced it
(under the manifest's lock, atomically: processes saving into one folder at once keep every entry;
a corrupt manifest is refused with the fix named, never overwritten: ``residshift.core.records``),
whether the code (package, notebooks, pyproject.toml) differed from that commit (``code_dirty``; the
outputs being written do not count) and a hash of that code (``code_hash``).
:func:`manifest_commits` names the commit(s) a set of outputs comes from; :func:`manifest_problems`
lists the outputs that do not come from committed code. ``residshift.study.plotting`` saves the
figures through the same record, so notebook, figure and numbers share one name, and
``residshift.study.tables.save_verdicts`` the verdict tables. :func:`json_ready` is the one cleaner
that makes numbers JSON-safe (strict for verdict details, which ``analysis.verdicts`` checks).
"""
from __future__ import annotations

import datetime as _dt
import json
import math
import re
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .cache import _canonical, atomic_write_text, code_state
from .paths import IN_CLONE, REPO_ROOT, active_profile, figures_dir
from .records import CorruptRecordError, read_record, updating  # noqa: F401 - CorruptRecordError re-exported

_NAME = re.compile(r"^\d\d-[a-z0-9][a-z0-9-]*$")


class NotJSONError(TypeError, ValueError):
    """A value :func:`json_ready` (strict) cannot make JSON-like; the message names its type."""


def json_ready(value: Any, *, strict: bool = False, what: str = "values") -> Any:
    """``value`` made JSON-safe: mappings to dicts with string keys, lists and tuples to lists,
    numpy arrays and torch tensors to (nested) lists, numpy scalars to Python ones, bools to
    ``bool``, integers to ``int``, floats to ``float`` with NaN and +-inf replaced by ``None``;
    ``None`` and strings stay.

    Lenient (default; what ``save_numbers`` should receive): a DataFrame becomes its records (index
    included, ``reset_index``), pandas' missing value ``pd.NA`` becomes ``None``, and anything else
    is returned as it is. ``strict=True``: anything else (a DataFrame, ``pd.NA``, a set, an object)
    raises :class:`NotJSONError`, "``<what>`` must be JSON-like ...".
    """
    if not strict and hasattr(value, "to_dict") and hasattr(value, "columns"):  # a DataFrame
        return json_ready(value.reset_index().to_dict(orient="records"))
    if isinstance(value, Mapping):
        return {str(k): json_ready(v, strict=strict, what=what) for k, v in value.items()}
    if isinstance(value, (torch.Tensor, np.ndarray)):
        return json_ready(value.tolist(), strict=strict, what=what)
    if isinstance(value, (list, tuple)):
        return [json_ready(v, strict=strict, what=what) for v in value]
    if not strict and isinstance(value, np.generic):
        value = value.item()  # np.str_ -> str, np.datetime64 -> datetime, ...
    if isinstance(value, (bool, np.bool_)):  # before int: a bool stays a bool
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        value = float(value)
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, str):
        return value
    if strict:
        raise NotJSONError(f"{what} must be JSON-like (numbers, strings, lists, dicts); got "
                           f"{type(value).__name__}: convert it first")
    if type(value).__name__ == "NAType":  # pandas' missing value in nullable integer columns
        return None
    return value


def check_name(name: str) -> str:
    if not _NAME.match(name):
        raise ValueError(
            f"figure name {name!r} must look like 'NN-short-name[-panel]' (two digits, the notebook's "
            "number, then lowercase words joined by '-'), so notebook and figure share a name"
        )
    return name


def git_commit() -> str:
    """The commit checked out (short sha), or "unknown" without git. Whether the code differs
    from it is a separate field of the manifest (``code_dirty``), not a suffix."""
    if not IN_CLONE:  # an installed copy: a git repository above site-packages is not this code's
        return "unknown"
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, text=True,
                              capture_output=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def record(filename: str, parameters: dict[str, Any] | None) -> None:
    """Record in the figures folder's ``MANIFEST.json`` which profile, commit and parameters made
    ``filename``. The code state (a ``git status``) is computed first; the read-modify-write runs
    under the manifest's lock and writes atomically (``core.records.updating``), so processes saving
    into one folder at once keep every entry. A corrupt manifest raises ``CorruptRecordError`` naming
    the fix and is left untouched (its other entries are not silently dropped)."""
    state = code_state()
    entry = {
        "profile": active_profile(),
        "commit": state["commit"],
        "code_dirty": state["code_dirty"],
        "code_hash": state["code_hash"],
        "created": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "parameters": _canonical(parameters or {}),
    }
    with updating(figures_dir() / "MANIFEST.json") as entries:
        entries[filename] = entry
        ordered = dict(sorted(entries.items()))
        entries.clear()
        entries.update(ordered)


def load_manifest(folder: Path | None = None) -> dict[str, dict[str, Any]]:
    """``{file name: entry}`` from ``MANIFEST.json`` in ``folder`` (default: the figures folder);
    ``{}`` when absent, ``CorruptRecordError`` (one line naming the fix) when it is not valid JSON."""
    return read_record(Path(folder or figures_dir()) / "MANIFEST.json")


def manifest_problems(entries: dict[str, dict[str, Any]]) -> list[str]:
    """Entries that do not show committed code: old format (no ``code_dirty``), code that differed
    from its commit, or no commit at all. Empty when every output comes from committed code."""
    out = []
    for name, e in sorted(entries.items()):
        if "code_dirty" not in e:
            out.append(f"{name}: old-format entry (commit {e.get('commit')!r}); regenerate it")
        elif e["code_dirty"] is not False:
            out.append(f"{name}: made from uncommitted code (commit {e.get('commit')}, code_dirty "
                       f"{e['code_dirty']}); commit the code, then regenerate it")
        elif e.get("commit") in (None, "", "unknown"):
            out.append(f"{name}: no commit recorded")
    return out


def manifest_commits(names=None, *, folder: Path | None = None) -> list[str]:
    """The commit(s) the outputs ``names`` (file names like ``03-x.json`` or stems like ``03-x``;
    default: every entry) come from, sorted. An output made from uncommitted code shows as
    ``<sha>-dirty``. Raises KeyError naming any output the manifest does not list."""
    entries = load_manifest(folder)
    if names is None:
        picked = list(entries.values())
    else:
        names = [names] if isinstance(names, str) else list(names)
        picked, missing = [], []
        for n in names:
            hits = [e for k, e in entries.items() if k == n or Path(k).stem == n]
            picked += hits
            if not hits:
                missing.append(n)
        if missing:
            raise KeyError(f"the manifest has no entry for {missing}; run the notebooks that write them")
    out = set()
    for e in picked:
        commit = str(e.get("commit", "unknown"))
        out.add(commit + "-dirty" if e.get("code_dirty") and not commit.endswith("-dirty") else commit)
    return sorted(out)


def save_numbers(name: str, numbers: Any, *, parameters: dict[str, Any] | None = None) -> Path:
    """Save the numbers behind a figure or table as ``figures/<name>.json`` (same name rule) and
    record it in the manifest (:func:`record`); a corrupt manifest raises ``CorruptRecordError``
    before anything is written."""
    check_name(name)
    target = figures_dir() / f"{name}.json"
    read_record(target.parent / "MANIFEST.json")  # a corrupt manifest: refused before anything is written
    atomic_write_text(target, json.dumps(_canonical(numbers), indent=2) + "\n")
    record(target.name, parameters)
    return target
