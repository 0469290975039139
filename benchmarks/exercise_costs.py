"""What each notebook's exercise solutions cost on the real models at a profile (``default``).

    make exercises        # runs this: the notebooks at `default` with show_solutions=true, then the table

The notebooks run through ``python -m residshift run`` into ``build/exercises/`` with their figures
and run records sent to ``build/exercises/figures/`` (the committed ``figures/`` stay untouched), and
reuse the results cache, so what is timed beyond a normal run is the solutions themselves. Each
exercise's cost is papermill's recorded duration of its solution cell(s) (the code cells between
its heading and the next). The solutions end in asserts that check their answer, so the table is an
answer check too: an exercise *passed* when its solution cells ran and none raised; one that raised
failed, with the error's last line (``AssertionError: ...``) recorded, and one that never ran (an
earlier cell failed, papermill stopped there) failed with that said. Written:
``benchmarks/exercises-<profile>.json`` (per notebook and exercise: seconds, ran, passed, error line,
homework = more than HOMEWORK_S seconds) with the CPU it ran on, and the notebooks of ``notebooks/``
that have no executed copy (``missing``: a run with ``--only`` or one that stopped early).
``build/exercises/`` is ``$RESIDSHIFT_BUILD/exercises`` where that is set; ``--collect`` only reads it
(``--executed`` another folder: ``make class-key`` collects ``build/class-key/`` into
``benchmarks/exercises-class.json``). The book's instructor page renders each question with its executed
solution from there.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HOMEWORK_S = 60.0  # a solution that takes longer than this on two cores is homework, not a class exercise
HEADING = re.compile(r"^#{2,4}\s*Exercise\s+(\d+)\s*[—–-]\s*(.+)$", re.M)
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
NOT_RUN = "did not run: an earlier cell failed and papermill stopped there"


def exercise_folder() -> Path:
    """Where ``make exercises`` writes the executed notebooks: ``build/exercises/`` (``$RESIDSHIFT_BUILD``)."""
    sys.path.insert(0, str(ROOT))
    from residshift.core.paths import build_dir

    return build_dir() / "exercises"


def error_line(cell: dict) -> str | None:
    """The last line of the error a code cell raised (``AssertionError: ...``), or None."""
    for out in cell.get("outputs", []):
        if out.get("output_type") == "error":
            lines = [ANSI.sub("", ln).rstrip() for ln in ANSI.sub("", (out.get("traceback") or [""])[-1]).splitlines()]
            lines = [ln for ln in lines if ln.strip()]
            return lines[-1] if lines else f"{out.get('ename', 'error')}: {out.get('evalue', '')}"
    return None


def exercises(notebook: dict) -> list[dict]:
    """The exercises of an executed notebook: number, title, seconds of their solution cells, status."""
    out, current = [], None
    for cell in notebook["cells"]:
        src = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            m = HEADING.search(src)
            if m:
                current = {"exercise": int(m.group(1)), "title": m.group(2).strip(), "seconds": 0.0,
                           "ran": False, "error": False, "error_line": None, "cells": 0}
                out.append(current)
            elif src.lstrip().startswith("## ") and current is not None and "Exercise" not in src:
                current = None
            continue
        if current is None or "show_solutions" not in src:
            continue
        pm = cell.get("metadata", {}).get("papermill", {})
        current["seconds"] += float(pm.get("duration") or 0.0)
        current["ran"] = current["ran"] or bool(cell.get("outputs"))
        current["cells"] += 1
        failed = pm.get("status") == "failed" or pm.get("exception") is True or error_line(cell) is not None
        current["error"] = current["error"] or failed
        if failed and current["error_line"] is None:
            current["error_line"] = error_line(cell) or "the solution cell failed (no error output recorded)"
        if pm.get("status") == "pending" or (not cell.get("outputs") and cell.get("execution_count") is None):
            current["not_run"] = True
    for e in out:
        e["seconds"] = round(e["seconds"], 1)
        e["homework"] = e["seconds"] > HOMEWORK_S
        e["passed"] = e["cells"] > 0 and not e["error"] and not e.pop("not_run", False)
        if not e["passed"] and e["error_line"] is None:
            e["error_line"] = NOT_RUN if e["cells"] else "no solution cell (`if show_solutions:`) after the heading"
        del e["cells"]
    return out


def collect(folder: Path, profile: str) -> dict:
    sys.path.insert(0, str(ROOT))
    from residshift.train.trainer import cpu_facts

    table = {}
    for path in sorted(folder.glob("[0-9][0-9]-*.ipynb")):
        table[path.stem] = exercises(json.loads(path.read_text()))
    missing = [p.stem for p in sorted((ROOT / "notebooks").glob("[0-9][0-9]-*.ipynb")) if p.stem not in table]
    return {"profile": profile, "homework_above_s": HOMEWORK_S, "cpu": cpu_facts(), "notebooks": table,
            "missing": missing}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default="default")
    ap.add_argument("--collect", action="store_true", help="only read build/exercises/")
    ap.add_argument("--only", nargs="*", default=None, help="notebook numbers")
    ap.add_argument("--json", default=None, help="default benchmarks/exercises-<profile>.json")
    ap.add_argument("--executed", default=None, help="the executed notebooks (default build/exercises)")
    a = ap.parse_args(argv)
    a.json = a.json or str(ROOT / "benchmarks" / f"exercises-{a.profile}.json")
    folder = Path(a.executed) if a.executed else exercise_folder()
    if not a.collect:
        env = {**os.environ, "RESIDSHIFT_FIGURES": str(folder / "figures")}
        cmd = [sys.executable, "-m", "residshift", "run", "--profile", a.profile, "-p", "show_solutions=true",
               "--output-dir", str(folder)] + (["--only", *a.only] if a.only else [])
        subprocess.run(cmd, check=True, cwd=ROOT, env=env)
    result = collect(folder, a.profile)
    tmp = Path(a.json).with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=1) + "\n")
    tmp.replace(a.json)
    for nb, rows in result["notebooks"].items():
        for e in rows:
            flag = "FAILED" if not e["passed"] else ("homework" if e["homework"] else "class")
            print(f"{nb} exercise {e['exercise']}: {e['seconds']:7.1f} s  {flag:8s}  {e['title']}"
                  + (f"\n    {e['error_line']}" if e["error_line"] else ""))
    for stem in result["missing"]:
        print(f"{stem}: not in {folder} (run it: python benchmarks/exercise_costs.py --only {stem[:2]})")
    return 1 if any(not e["passed"] for rows in result["notebooks"].values() for e in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
