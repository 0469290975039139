"""What each notebook's exercise solutions cost on the real models at a profile (``default``).

    make exercises        # runs this: the notebooks at `default` with show_solutions=true, then the table

The notebooks run through ``python -m residshift run`` into ``build/exercises/`` with their figures
and run records sent to ``build/exercises/figures/`` (the committed ``figures/`` stay untouched), and
reuse the results cache, so what is timed beyond a normal run is the solutions themselves. Each
exercise's cost is papermill's recorded duration of its solution cell(s) (the code cells between
its heading and the next). Written: ``benchmarks/exercises-default.json`` (per notebook and
exercise: seconds, whether it ran, homework = more than HOMEWORK_S seconds) with the CPU it ran on.
``--collect`` only reads an existing ``build/exercises/``.
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
HEADING = re.compile(r"^#{2,4}\s*Exercise\s+(\d+)\s*[—-]\s*(.+)$", re.M)


def exercises(notebook: dict) -> list[dict]:
    """The exercises of an executed notebook: number, title, seconds of their solution cells, status."""
    out, current = [], None
    for cell in notebook["cells"]:
        src = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            m = HEADING.search(src)
            if m:
                current = {"exercise": int(m.group(1)), "title": m.group(2).strip(), "seconds": 0.0,
                           "ran": False, "error": False}
                out.append(current)
            elif src.lstrip().startswith("## ") and current is not None and "Exercise" not in src:
                current = None
            continue
        if current is None or "show_solutions" not in src:
            continue
        pm = cell.get("metadata", {}).get("papermill", {})
        current["seconds"] += float(pm.get("duration") or 0.0)
        current["ran"] = current["ran"] or bool(cell.get("outputs"))
        current["error"] = current["error"] or pm.get("status") == "failed" or pm.get("exception") is True
    for e in out:
        e["seconds"] = round(e["seconds"], 1)
        e["homework"] = e["seconds"] > HOMEWORK_S
    return out


def collect(folder: Path, profile: str) -> dict:
    sys.path.insert(0, str(ROOT))
    from residshift.train.trainer import cpu_facts

    table = {}
    for path in sorted(folder.glob("[0-9][0-9]-*.ipynb")):
        table[path.stem] = exercises(json.loads(path.read_text()))
    return {"profile": profile, "homework_above_s": HOMEWORK_S, "cpu": cpu_facts(), "notebooks": table}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default="default")
    ap.add_argument("--collect", action="store_true", help="only read build/exercises/")
    ap.add_argument("--only", nargs="*", default=None, help="notebook numbers")
    ap.add_argument("--json", default=str(ROOT / "benchmarks" / "exercises-default.json"))
    a = ap.parse_args(argv)
    folder = ROOT / "build" / "exercises"
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
            flag = "ERROR" if e["error"] else ("homework" if e["homework"] else "class")
            print(f"{nb} exercise {e['exercise']}: {e['seconds']:7.1f} s  {flag:8s}  {e['title']}")
    return 1 if any(e["error"] for rows in result["notebooks"].values() for e in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
