"""One look for every figure, and one way to save it.

``save_figure(fig, "03-alignment-curves-ranks")`` writes ``figures/03-alignment-curves-ranks.png`` and
``.pdf`` atomically and records in ``figures/MANIFEST.json`` which profile, commit and parameters
produced it, whether the code (package, notebooks, pyproject.toml) differed from that commit
(``code_dirty``; the outputs being written do not count) and a hash of that code (``code_hash``).
:func:`manifest_commits` names the commit(s) a set of outputs comes from. ``save_numbers`` does the same for the numbers a figure shows (``.json``), so notebook,
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

from ..core.cache import _canonical, atomic_write_text, code_state
from ..core.paths import REPO_ROOT, figures_dir

_NAME = re.compile(r"^\d\d-[a-z0-9][a-z0-9-]*$")
PALETTE = {"input": "#1b9e77", "next": "#d95f02", "other": "#bdbdbd"}


# Decoded tokens come from any script (Gemma's vocabulary spans CJK, Indic, Thai, Ethiopic, ...).
# matplotlib draws each glyph with the first font of this list that has it; DejaVu Sans (Latin,
# Greek, Cyrillic, Arabic) leads, the Noto fonts that `make browser` installs (Debian's fonts-noto-cjk
# and fonts-noto-core) follow. Fonts that are not installed are left out of the list.
FONT_FALLBACK = (
    "DejaVu Sans", "Noto Sans CJK JP", "Noto Sans", "Noto Sans Devanagari", "Noto Sans Bengali",
    "Noto Sans Thai", "Noto Sans Tamil", "Noto Sans Telugu", "Noto Sans Kannada", "Noto Sans Malayalam",
    "Noto Sans Gujarati", "Noto Sans Gurmukhi", "Noto Sans Oriya", "Noto Sans Sinhala",
    "Noto Sans Myanmar", "Noto Sans Khmer", "Noto Sans Lao", "Noto Sans Hebrew", "Noto Sans Arabic",
    "Noto Sans Georgian", "Noto Sans Armenian", "Noto Sans Ethiopic", "Noto Sans Math",
    "Noto Sans Symbols", "Noto Sans Symbols 2",
)


def _installed_fonts(families) -> list[str]:
    """The families of ``families`` that matplotlib can use, in order.

    matplotlib caches its font list once; fonts installed after that (``make browser``) are added here
    from the system's font files (``findSystemFonts``), so a stale cache never hides them."""
    from matplotlib import font_manager as fm

    have = {f.name for f in fm.fontManager.ttflist}
    missing = {name.replace(" ", "") for name in families if name not in have}
    if missing:
        known = {f.fname for f in fm.fontManager.ttflist}
        for path in fm.findSystemFonts():
            stem = Path(path).stem.split("-")[0]  # NotoSansCJK-Regular.ttc -> NotoSansCJK
            if path not in known and any(name.startswith(stem) for name in missing):
                try:
                    fm.fontManager.addfont(path)
                except (OSError, RuntimeError):  # an unreadable font file: skip it
                    continue
        have = {f.name for f in fm.fontManager.ttflist}
    return [name for name in families if name in have]


def set_theme() -> None:
    import seaborn as sns

    sns.set_theme(context="notebook", style="whitegrid", palette="colorblind",
                  rc={"figure.dpi": 110, "savefig.dpi": 150, "figure.autolayout": False,
                      "font.family": _installed_fonts(FONT_FALLBACK)})


def _check_name(name: str) -> str:
    if not _NAME.match(name):
        raise ValueError(
            f"figure name {name!r} must look like 'NN-short-name[-panel]' (two digits, the notebook's "
            "number, then lowercase words joined by '-'), so notebook and figure share a name"
        )
    return name


def git_commit() -> str:
    """The commit checked out (short sha), or "unknown" without git. Whether the code differs
    from it is a separate field of the manifest (``code_dirty``), not a suffix."""
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, text=True,
                              capture_output=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _record(filename: str, parameters: dict[str, Any] | None) -> None:
    folder = figures_dir()
    manifest = folder / "MANIFEST.json"
    entries = json.loads(manifest.read_text()) if manifest.is_file() else {}
    state = code_state()
    entries[filename] = {
        "profile": os.environ.get("RESIDSHIFT_PROFILE", "interactive"),
        "commit": state["commit"],
        "code_dirty": state["code_dirty"],
        "code_hash": state["code_hash"],
        "created": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "parameters": _canonical(parameters or {}),
    }
    atomic_write_text(manifest, json.dumps(dict(sorted(entries.items())), indent=2) + "\n")


def load_manifest(folder: Path | None = None) -> dict[str, dict[str, Any]]:
    """``{file name: entry}`` from ``MANIFEST.json`` in ``folder`` (default: the figures folder)."""
    manifest = Path(folder or figures_dir()) / "MANIFEST.json"
    return json.loads(manifest.read_text()) if manifest.is_file() else {}


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


def publish(fig, name: str, numbers: Any = None, *, parameters: Any = None,
            show: bool = True) -> list[Path]:
    """Save a figure and (optionally) the numbers behind it under one name, then show it.

    ``parameters`` may be the resolved profile (a ``SimpleNamespace``) or a dict; it goes to the
    manifest with every file. Returns the written paths.
    """
    params = vars(parameters) if hasattr(parameters, "__dict__") and not isinstance(parameters, dict) else parameters
    paths = save_figure(fig, name, parameters=params)
    if numbers is not None:
        paths.append(save_numbers(name, numbers, parameters=params))
    if show:
        import matplotlib.pyplot as plt

        plt.show()
    return paths
