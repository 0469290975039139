"""``make student``: the notebooks as a student gets them, in ``build/student/`` (never in ``notebooks/``).

Each exercise's solution cells (tagged ``solution``) are replaced by one empty code cell to write the
answer in (tagged ``answer``) and one folded hint: the package functions the answer key calls, read
from the solution's code, and what the solution costs to run, read from the measured exercise costs
(``benchmarks/exercises-<profile>.json``, written by ``make exercises``) where they exist. The rest of
each notebook is unchanged, so the student's copy runs exactly as the lecture's does.

    python -m residshift.tools.student [--profile class] [--out build/student] [--costs FILE]

``--profile`` injects the profile into each copy's parameters (papermill's injected-parameters cell), so
Run All in JupyterLab gives that profile's sizes; ``--lab`` keeps the solutions (the teacher's copy that
``make lab PROFILE=class`` opens, in ``build/lab/<profile>/``). Students and teachers edit these copies,
never the tracked notebooks.
"""
from __future__ import annotations

import argparse
import ast
import copy
import json
import re
import sys
from pathlib import Path

import nbformat

from ..core.cache import atomic_write_text
from ..core.paths import REPO_ROOT, build_dir
from .render import MARK, OverwriteError, check_replaceable

NNSIGHT = ("trace", "scan", "generate")  # the nnsight entry points a solution may open
HEADING = re.compile(r"^#{2,4}\s*Exercise\s+(\d+)\s*[—–-]\s*(.+)$", re.M)


def package_names(nb) -> set[str]:
    """The names a notebook imports from residshift (modules and functions), as its cells bind them."""
    names: set[str] = set()
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        try:
            tree = ast.parse(_without_magics(cell.source))
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("residshift"):
                names.update(a.asname or a.name for a in node.names)
    return names


def _without_magics(source: str) -> str:
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())


def calls(source: str, ours: set[str]) -> list[str]:
    """The package functions a solution calls (``module.function`` or ``function``) and the nnsight traces
    it opens, in order of first use."""
    out: list[str] = []
    for node in ast.walk(ast.parse(_without_magics(source))):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in ours:
            out.append(f"{f.value.id}.{f.attr}")
        elif isinstance(f, ast.Name) and f.id in ours:
            out.append(f.id)
        elif isinstance(f, ast.Attribute) and f.attr in NNSIGHT and isinstance(f.value, ast.Name):
            out.append(f"{f.value.id}.{f.attr} (nnsight)")
    return list(dict.fromkeys(out))


def hint(solution: str, ours: set[str], cost: dict | None, profile: str) -> str:
    used = calls(solution, ours)
    lines = ["<details><summary>Hint</summary>", ""]
    lines.append("The answer key calls " + ", ".join(f"`{u}`" for u in used) + "." if used
                 else "The answer key needs nothing beyond torch and what this notebook has already computed.")
    if cost is not None and cost.get("ran"):
        lines.append(f"It runs in {cost['seconds']:.0f} s at `{profile}` ({cost.get('cpu', 'this CPU')})"
                     + (": homework, not a class exercise." if cost.get("homework") else "."))
    return "\n".join(lines + ["", "</details>"])


def student_copy(nb, costs: list[dict] | None = None, profile: str = "default"):
    """``nb`` with each solution replaced by an answer cell and a folded hint (a new notebook)."""
    nb = copy.deepcopy(nb)
    ours = package_names(nb)
    by_number = {int(c["exercise"]): c for c in costs or []}
    cells, number, pending = [], None, []

    def flush():
        if pending:
            code = "\n".join(c.source for c in pending)
            cells.append(nbformat.v4.new_markdown_cell(hint(code, ours, by_number.get(number), profile),
                                                       metadata={"tags": ["hint"]}, id=f"hint-{number}"))
            cells.append(nbformat.v4.new_code_cell(f"# Your answer to exercise {number}\n",
                                                   metadata={"tags": ["answer"]}, id=f"answer-{number}"))
            pending.clear()

    for cell in nb.cells:
        if "solution" in cell.metadata.get("tags", []):
            pending.append(cell)
            continue
        flush()
        if cell.cell_type == "markdown" and (m := HEADING.search(cell.source)):
            number = int(m.group(1))
        cells.append(cell)
    flush()
    nb.cells = cells
    return nb


def with_profile(nb, profile: str):
    """``nb`` with ``profile`` injected as papermill injects parameters (the cell after ``parameters``)."""
    from papermill.parameterize import parameterize_notebook

    nb = copy.deepcopy(nb)
    nb.metadata.setdefault("papermill", {})  # what papermill's own reader adds before it parameterizes
    for cell in nb.cells:
        cell.metadata.setdefault("tags", [])
    nb = parameterize_notebook(nb, {"profile": profile})
    for cell in nb.cells:
        if not cell.metadata.get("tags"):
            cell.metadata.pop("tags", None)
        elif "injected-parameters" in cell.metadata["tags"]:
            cell.id = "injected-parameters"  # the same copy every time (a rerun finds nothing changed)
    return nb


def write_student(out: Path, costs_file: Path | None, *, profile: str | None = None,
                  solutions: bool = False, force: bool = False) -> list[Path]:
    """Write the copies into ``out``. A file there that residshift did not write is never replaced, and a
    copy that differs from the one this would write (a student's answers in it) only with ``force``."""
    data = json.loads(costs_file.read_text()) if costs_file and costs_file.is_file() else {}
    cpu = (data.get("cpu") or {}).get("cpu")
    written, prepared = [], []
    for path in sorted((REPO_ROOT / "notebooks").glob("[0-9][0-9]-*.ipynb")):
        costs = [dict(c, cpu=cpu) for c in data.get("notebooks", {}).get(path.stem, [])]
        nb = nbformat.read(path, as_version=4)
        if not solutions:
            nb = student_copy(nb, costs, data.get("profile", "default"))
        if profile is not None:
            nb = with_profile(nb, profile)
        nb.metadata[MARK] = "lab" if solutions else "student"
        prepared.append((out / path.name, nb))
    check_replaceable(*(target for target, _ in prepared))  # never a notebook the user or git owns
    edited = [t.name for t, nb in prepared if t.is_file() and t.read_text() != nbformat.writes(nb)]
    if edited and not force:
        raise OverwriteError(f"{len(edited)} copies in {out} differ from the ones this would write (answers written "
                             f"in them?): {', '.join(edited)}; add --force to replace them, or choose another --out")
    for target, nb in prepared:
        atomic_write_text(target, nbformat.writes(nb))
        written.append(target)
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="residshift student", description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="folder to write (default build/student)")
    ap.add_argument("--costs", default=str(REPO_ROOT / "benchmarks" / "exercises-default.json"),
                    help="the measured exercise costs (make exercises); skipped when absent")
    ap.add_argument("--profile", default=None, help="inject this profile into every copy (e.g. class)")
    ap.add_argument("--lab", action="store_true", help="keep the solutions (the teacher's copies)")
    ap.add_argument("--force", action="store_true", help="replace copies that were edited since")
    args = ap.parse_args(argv)
    if args.profile is not None:
        from ..core.profiles import PROFILES

        if args.profile not in PROFILES:
            ap.error(f"unknown profile {args.profile!r}; known: {', '.join(PROFILES)}")
    out = Path(args.out) if args.out else build_dir() / ("lab" if args.lab else "student") / (args.profile or "default")
    try:
        written = write_student(out, Path(args.costs), profile=args.profile, solutions=args.lab, force=args.force)
    except OverwriteError as err:
        print(f"residshift student: error: {err}", file=sys.stderr)
        return 2
    what = "with their solutions" if args.lab else "solutions removed; answer cells and hints added"
    print(f"copies of {len(written)} notebooks in {out} ({what}"
          + (f"; profile {args.profile} injected" if args.profile else "") + ")")
    return 0


if __name__ == "__main__":
    sys.exit(main())
