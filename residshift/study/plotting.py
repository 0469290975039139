"""One look for every figure, and one way to save it.

``save_figure(fig, "03-alignment-curves-ranks")`` writes ``figures/03-alignment-curves-ranks.png`` and
``.pdf`` atomically and records them in ``figures/MANIFEST.json`` (profile, commit, code state,
parameters: ``residshift.core.outputs``, which also holds ``save_numbers`` for the ``.json`` beside
each figure and the manifest readers, re-exported here), so notebook, figure and numbers share one
name. ``publish`` does both and shows the figure.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import seaborn as sns
from matplotlib import font_manager as fm
from matplotlib.ticker import MaxNLocator

from ..core.cache import atomic_path
from ..core.outputs import (  # noqa: F401 (re-exported)
    check_name,
    git_commit,
    load_manifest,
    manifest_commits,
    manifest_problems,
    record,
    save_numbers,
)
from ..core.paths import figures_dir

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


def integer_axis(ax, which: str = "x", *, max_ticks: int | None = None) -> None:
    """Integer ticks on an axis that counts blocks or layers (``0..L``): never ``2.5``.

    ``which``: ``"x"``, ``"y"`` or ``"both"``; ``max_ticks`` caps how many (matplotlib's choice
    otherwise). Not for relative depth ``l / L``, which is a fraction."""
    if which not in ("x", "y", "both"):
        raise ValueError(f"which must be 'x', 'y' or 'both', got {which!r}")
    for name in ("x", "y") if which == "both" else (which,):
        axis = ax.xaxis if name == "x" else ax.yaxis
        if axis.get_scale() != "linear":
            raise ValueError(f"the {name} axis is on a {axis.get_scale()} scale: integer ticks are for a "
                             f"linear block/layer axis (call integer_axis on the axis that counts blocks)")
        axis.set_major_locator(MaxNLocator(integer=True, nbins=max_ticks or "auto"))


def set_theme() -> None:
    sns.set_theme(context="notebook", style="whitegrid", palette="colorblind",
                  rc={"figure.dpi": 110, "savefig.dpi": 150, "figure.autolayout": False,
                      "font.family": _installed_fonts(FONT_FALLBACK)})


def save_figure(fig, name: str, *, parameters: dict[str, Any] | None = None,
                formats: tuple[str, ...] = ("png", "pdf")) -> list[Path]:
    """Save ``fig`` as ``figures/<name>.<fmt>`` (atomically) and record it in the manifest."""
    check_name(name)
    folder = figures_dir()
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for fmt in formats:
        target = folder / f"{name}.{fmt}"
        # A fixed creation date keeps the PDF byte-stable across reruns.
        meta = {"CreationDate": None} if fmt == "pdf" else ({"Software": None} if fmt == "png" else None)
        with atomic_path(target, suffix=f".{fmt}") as tmp:
            fig.savefig(tmp, format=fmt, bbox_inches="tight", metadata=meta)
        paths.append(target)
        record(target.name, parameters)
    return paths


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
        show_saved(fig, paths[0])
    return paths


def show_saved(fig, png: Path) -> None:
    """Show the saved PNG itself (at the size the inline backend would draw the figure), its output
    marked with the file's name, so a rendering of the executed notebook can link to the committed file
    instead of storing its bytes twice (``residshift.tools.render``). Outside a kernel: ``plt.show()``."""
    from IPython import get_ipython

    if get_ipython() is None or getattr(get_ipython(), "kernel", None) is None:
        plt.show()
        return
    from IPython.display import Image, display
    from PIL import Image as PILImage

    with PILImage.open(png) as im:
        width = round(im.width * plt.rcParams["figure.dpi"] / plt.rcParams["savefig.dpi"])
    display(Image(filename=str(png), width=width), metadata={"residshift_figure": png.name})
    plt.close(fig)
