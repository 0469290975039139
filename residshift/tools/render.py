"""The executed notebooks of the committed default run, readable on any git host without running.

The runner renders them after every run that publishes to ``figures/`` (a default run without ``-p``), so
``docs/run/`` and ``figures/`` always come from the same run.

``python -m residshift.tools.render [--executed build/default] [--out docs/run]`` writes, for every
executed ``NN-name.ipynb``:

- ``docs/run/NN-name.ipynb``: the executed notebook, each figure that ``publish`` saved replaced by a
  markdown link to its committed file (``figures/NN-name.png``), so no figure's bytes are stored twice;
  JupyterLab and the offline book (``residshift book --executed docs/run``) show it with its figures;
- ``docs/run/NN-name.md``: the same notebook as markdown (nbconvert), which GitHub and GitLab render with
  the figures, since relative image links resolve in markdown files (they do not in a notebook's
  outputs there).

Why both: the markdown is what a git host shows; the notebook is what Jupyter and the book read. Text
outputs appear in both (a few kB per notebook); images only in ``figures/``. An image a notebook shows
without saving it (only an exercise's solution does, and the default run shows no solutions; tested) stays
inline in the notebook and is written beside the markdown (``NN-name_files/``).
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import re
import sys
from pathlib import Path

import nbformat

from ..core.cache import atomic_write_bytes, atomic_write_text
from ..core.paths import REPO_ROOT, build_dir

FIGURE_KEY = "residshift_figure"  # output metadata publish() sets: the saved figure's file name
NOTEBOOK = re.compile(r"^\d\d-[a-z0-9-]+\.ipynb$")
RENDERED = REPO_ROOT / "docs" / "run"  # where a default run's executed notebooks are rendered (committed)
STYLE = re.compile(r"<style[^>]*>.*?</style>\n?", re.S)


MARK = "residshift_copy"  # notebook metadata of every copy this module or tools.student writes
MD_MARK = "<!-- written by residshift.tools.render from the executed notebook; rerun it, do not edit -->\n"


class OverwriteError(ValueError):
    """A file the command would replace is not one it wrote; the message names it and the fix."""


def check_replaceable(*paths: Path) -> None:
    """Refuse, before anything is written, to replace a file that is not a copy residshift wrote."""
    for path in paths:
        if not path.exists():
            continue
        try:
            ours = (MARK in json.loads(path.read_text()).get("metadata", {}) if path.suffix == ".ipynb"
                    else path.read_text().startswith(MD_MARK))
        except (OSError, ValueError, AttributeError):
            ours = False
        if not ours:
            raise OverwriteError(f"{path} exists and residshift did not write it: move it, or choose another "
                                 "--out (nothing was written)")


def linked(nb, figures_rel: str):
    """``nb`` with every published figure's image output replaced by a markdown link to
    ``<figures_rel>/<file>`` (a copy; returns it and the number of links)."""
    nb = copy.deepcopy(nb)
    links = 0
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            name = out.get("metadata", {}).get(FIGURE_KEY)
            if name and "image/png" in out.get("data", {}):
                out["data"] = {"text/markdown": f"![{name}]({figures_rel}/{name})", "text/plain": f"<figure {name}>"}
                out["metadata"] = {FIGURE_KEY: name}
                links += 1
    return nb, links


def render(executed: Path, out: Path, figures: Path) -> dict[str, int]:
    """Write ``out/<stem>.ipynb`` and ``out/<stem>.md`` for one executed notebook; return their sizes
    (bytes) and the number of figures linked."""
    from nbconvert import MarkdownExporter

    nb = nbformat.read(executed, as_version=4)
    rel = Path(os.path.relpath(figures, out)).as_posix()
    nb, links = linked(nb, rel)
    for cell in nb.cells:  # papermill's per-cell timings change on every run: not worth a diff
        cell.get("metadata", {}).pop("execution", None)
        cell.get("metadata", {}).get("papermill", {}).clear()
    nb.metadata[MARK] = "rendering"
    text = nbformat.writes(nb)
    body, resources = MarkdownExporter().from_notebook_node(
        nb, resources={"output_files_dir": f"{executed.stem}_files"})
    check_replaceable(out / executed.name, out / f"{executed.stem}.md")
    atomic_write_text(out / executed.name, text)
    body = MD_MARK + STYLE.sub("", body)  # pandas' scoped CSS: git hosts strip the tag and would show its text
    atomic_write_text(out / f"{executed.stem}.md", body)
    for name, data in resources.get("outputs", {}).items():
        atomic_write_bytes(out / name, data)
    return {"ipynb_bytes": len(text.encode()), "md_bytes": len(body.encode()), "figures_linked": links,
            "images_inline": len(resources.get("outputs", {}))}


def render_all(executed: Path, out: Path, figures: Path, log=print) -> dict[str, dict[str, int]]:
    books = sorted(p for p in executed.glob("*.ipynb") if NOTEBOOK.match(p.name))
    if not books:
        raise SystemExit(f"residshift render: no executed notebooks in {executed}: run `make study` first")
    sizes = {}
    for path in books:
        sizes[path.stem] = render(path, out, figures)
        s = sizes[path.stem]
        log(f"{path.stem}: {s['md_bytes'] / 1e3:.0f} kB markdown, {s['ipynb_bytes'] / 1e3:.0f} kB notebook, "
            f"{s['figures_linked']} figures linked, {s['images_inline']} images inline")
    return sizes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="residshift render", description=__doc__.splitlines()[0])
    ap.add_argument("--executed", default=None, help="the executed notebooks (default build/default)")
    ap.add_argument("--out", default=str(RENDERED), help="where to write (default docs/run)")
    ap.add_argument("--figures", default=str(REPO_ROOT / "figures"), help="the figures they link to")
    args = ap.parse_args(argv)
    executed = Path(args.executed) if args.executed else build_dir() / "default"
    try:
        render_all(executed, Path(args.out), Path(args.figures))
    except OverwriteError as err:
        print(f"residshift render: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
