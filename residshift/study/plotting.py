"""One look for every figure, and one way to save it.

``save_figure(fig, "03-alignment-curves-ranks")`` writes ``figures/03-alignment-curves-ranks.png`` and
``.pdf`` atomically and records in ``figures/MANIFEST.json`` which profile, commit and parameters
produced it. ``save_numbers`` does the same for the numbers a figure shows (``.json``), so notebook,
figure and numbers share one name.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import re
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from ..core.cache import _canonical, atomic_write_text
from ..core.paths import REPO_ROOT, figures_dir

_NAME = re.compile(r"^\d\d-[a-z0-9][a-z0-9-]*$")
PALETTE = {"input": "#1b9e77", "next": "#d95f02", "other": "#bdbdbd"}


def set_theme() -> None:
    import seaborn as sns

    sns.set_theme(context="notebook", style="whitegrid", palette="colorblind",
                  rc={"figure.dpi": 110, "savefig.dpi": 150, "figure.autolayout": False})


def _check_name(name: str) -> str:
    if not _NAME.match(name):
        raise ValueError(
            f"figure name {name!r} must look like 'NN-short-name[-panel]' (two digits, the notebook's "
            "number, then lowercase words joined by '-'), so notebook and figure share a name"
        )
    return name


def git_commit() -> str:
    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, text=True,
                             capture_output=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO_ROOT,
                               text=True, capture_output=True).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _record(filename: str, parameters: dict[str, Any] | None) -> None:
    folder = figures_dir()
    manifest = folder / "MANIFEST.json"
    entries = json.loads(manifest.read_text()) if manifest.is_file() else {}
    entries[filename] = {
        "profile": os.environ.get("RESIDSHIFT_PROFILE", "interactive"),
        "commit": git_commit(),
        "created": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "parameters": _canonical(parameters or {}),
    }
    atomic_write_text(manifest, json.dumps(dict(sorted(entries.items())), indent=2) + "\n")


def save_figure(fig, name: str, *, parameters: dict[str, Any] | None = None,
                formats: tuple[str, ...] = ("png", "pdf")) -> list[Path]:
    """Save ``fig`` as ``figures/<name>.<fmt>`` (atomically) and record it in the manifest."""
    _check_name(name)
    folder = figures_dir()
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for fmt in formats:
        target = folder / f"{name}.{fmt}"
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=f".{fmt}", dir=folder)
        os.close(fd)
        try:
            # A fixed creation date keeps the PDF byte-stable across reruns.
            meta = {"CreationDate": None} if fmt == "pdf" else ({"Software": None} if fmt == "png" else None)
            fig.savefig(tmp, format=fmt, bbox_inches="tight", metadata=meta)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        paths.append(target)
        _record(target.name, parameters)
    return paths


def save_numbers(name: str, numbers: Any, *, parameters: dict[str, Any] | None = None) -> Path:
    """Save the numbers behind a figure or table as ``figures/<name>.json`` (same name rule)."""
    _check_name(name)
    target = figures_dir() / f"{name}.json"
    atomic_write_text(target, json.dumps(_canonical(numbers), indent=2) + "\n")
    _record(target.name, parameters)
    return target
