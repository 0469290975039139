"""`make student`: solutions out, an answer cell and one folded hint per exercise, the rest unchanged."""
import json

import nbformat

from residshift.core.paths import REPO_ROOT
from residshift.tools import student


def test_every_solution_becomes_an_answer_cell_and_a_hint(tmp_path):
    costs = tmp_path / "costs.json"
    costs.write_text(json.dumps({"profile": "class", "cpu": {"cpu": "Test CPU"}, "notebooks": {
        "01-the-causal-shift": [{"exercise": 3, "seconds": 6.7, "ran": True, "homework": False}]}}))
    written = student.write_student(tmp_path / "out", costs)
    assert len(written) == len(list((REPO_ROOT / "notebooks").glob("[0-9][0-9]-*.ipynb")))
    for path in written:
        original = nbformat.read(REPO_ROOT / "notebooks" / path.name, as_version=4)
        copy = nbformat.read(path, as_version=4)
        tags = [c.metadata.get("tags", []) for c in copy.cells]
        headings = sum(bool(student.HEADING.search(c.source)) for c in original.cells if c.cell_type == "markdown")
        assert not any("solution" in t for t in tags)
        assert sum("answer" in t for t in tags) == sum("hint" in t for t in tags) == headings
        kept = [c.source for c in original.cells if "solution" not in c.metadata.get("tags", [])]
        assert [c.source for c, t in zip(copy.cells, tags) if not {"answer", "hint"} & set(t)] == kept
    nb = nbformat.read(tmp_path / "out" / "01-the-causal-shift.ipynb", as_version=4)
    hints = [c.source for c in nb.cells if "hint" in c.metadata.get("tags", [])]
    assert "`tour.shift_curves`" in hints[2] and "runs in 7 s at `class` (Test CPU)" in hints[2]
    assert "lm.trace (nnsight)" in hints[0]


def test_calls_lists_package_functions_in_order():
    src = "x = tour.a(1)\ny = b(x)\nz = tour.a(2) + np.sum(y)\nwith lm.trace(ids):\n    pass\n"
    assert student.calls(src, {"tour", "b"}) == ["tour.a", "b", "lm.trace (nnsight)"]


def test_copies_never_replace_a_notebook_or_a_students_answers(tmp_path):
    mine = tmp_path / "00-models-and-data.ipynb"
    mine.write_text("{}")  # the user's (or git's) notebook where a copy would go
    try:
        student.write_student(tmp_path, None)
        raise AssertionError("replaced a notebook residshift did not write")
    except student.OverwriteError as err:
        assert "00-models-and-data.ipynb exists and residshift did not write it" in str(err)
    assert mine.read_text() == "{}" and sorted(p.name for p in tmp_path.iterdir()) == [mine.name]
    out = tmp_path / "copies"
    first = student.write_student(out, None)
    assert student.write_student(out, None) == first  # the same copies again: fine
    nb = nbformat.read(first[1], as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell("my_answer = 42"))
    nbformat.write(nb, first[1])
    try:
        student.write_student(out, None)
        raise AssertionError("replaced a student's answers")
    except student.OverwriteError as err:
        assert first[1].name in str(err) and "--force" in str(err)
    assert "my_answer = 42" in first[1].read_text()
    student.write_student(out, None, force=True)
    assert "my_answer = 42" not in first[1].read_text()
