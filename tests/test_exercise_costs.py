"""benchmarks/exercise_costs.py reads each exercise's solution time from an executed notebook."""
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _module():
    spec = importlib.util.spec_from_file_location("exercise_costs", ROOT / "benchmarks" / "exercise_costs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _cell(kind, src, seconds=None, outputs=(), failed=False):
    c = {"cell_type": kind, "source": [src], "metadata": {}}
    if kind == "code":
        c["outputs"] = list(outputs)
        c["metadata"]["papermill"] = {"duration": seconds, "status": "failed" if failed else "completed",
                                      "exception": failed}
    return c


def test_exercise_costs_sum_solution_cells_and_flag_homework():
    mod = _module()
    nb = {"cells": [_cell("markdown", "## Something else"), _cell("code", "x = 1", 50.0),
                    _cell("markdown", "## Exercises\n\n### Exercise 1 — Shrink the windows"),
                    _cell("code", "if show_solutions:\n    pass", 12.5, outputs=[{"text": "ok"}]),
                    _cell("markdown", "### Exercise 2 — Fit the gates again"),
                    _cell("code", "if show_solutions:\n    a()", 70.0, outputs=[{"text": "ok"}]),
                    _cell("code", "if show_solutions:\n    b()", 5.0, failed=True)]}
    rows = mod.exercises(nb)
    assert [(r["exercise"], r["seconds"], r["homework"], r["error"]) for r in rows] == [
        (1, 12.5, False, False), (2, 75.0, True, True)]
    assert rows[0]["title"] == "Shrink the windows" and rows[0]["ran"]
