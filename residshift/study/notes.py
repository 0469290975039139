"""Small pieces of text the notebooks print, computed, never typed.

``runtime("03-alignment-curves")`` tells a reader how long the notebook took the last time it
was measured (the runner records every notebook's wall time and peak memory in ``RUNS.json``
beside the figures: the committed ``figures/RUNS.json`` for the default profile, the build
folder's for smoke runs).
"""
from __future__ import annotations

from pathlib import Path

from ..core.paths import REPO_ROOT, figures_dir
from ..core.records import load_runs


def _runs() -> dict:
    runs: dict = {}
    for path in (REPO_ROOT / "figures" / "RUNS.json", figures_dir() / "RUNS.json"):
        if Path(path).is_file():
            for profile, books in load_runs(path).items():
                runs.setdefault(profile, {}).update(books)
    return runs


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


def runtime(notebook: str) -> str:
    """One line: the measured run time (and peak memory) of ``notebook`` at each profile."""
    parts = []
    for profile, books in sorted(_runs().items()):
        entry = books.get(notebook)
        if not entry or "wall_s" not in entry:
            continue
        text = f"{profile}: {_duration(float(entry['wall_s']))}"
        if entry.get("peak_rss_mib"):
            text += f", peak {float(entry['peak_rss_mib']) / 1024:.1f} GiB"
        when = entry.get("finished")
        if when:
            text += f" ({str(when)[:10]})"
        parts.append(text)
    line = ("Measured run time — " + "; ".join(parts) + " (as the runner last measured it)."
            if parts else "Run time: not measured yet (the runner records it in RUNS.json).")
    print(line)
    return line
