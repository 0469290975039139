"""Every notebook: well-formed and teachable (static checks, fast), and at the smoke profile it writes
every figure and numbers file its code promises, with finite numbers and clean outputs (slow).

What a notebook promises is read from its code: each ``publish(fig, NAME, numbers)`` promises
``NAME.png``, ``NAME.pdf`` and, when numbers are passed, ``NAME.json``; ``save_figure(fig, NAME)`` the
figure files; ``save_numbers(NAME, ...)`` and ``save_verdicts(NAME, ...)`` ``NAME.json``. A NAME
written as an f-string inside ``for x in P.<key>:`` is expanded over the smoke profile's values
(``f"02-x-{tour.slug(name)}"`` over ``P.models``); any other f-string must match at least one file.
"""
from __future__ import annotations

import ast
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest

from residshift.core import profiles
from residshift.tools import runner

NOTEBOOKS = runner.list_notebooks()
IDS = [p.stem for p in NOTEBOOKS]
MAX_CELL_LINES = 25  # non-blank, non-comment lines of one code cell (issue 7: "no cell over ~25 lines")
SAVERS = {"publish": 1, "save_figure": 1, "save_numbers": 0, "save_verdicts": 0}  # position of NAME
FIGURE_FILES = ("png", "pdf")
MAX_CELL_TEXT = 5000  # characters of text one cell may print (issue 49: "no cell over ~5 kB")



def _parse_cell(source: str) -> ast.Module:
    """A code cell as Python: IPython magics and shell escapes blanked out, line numbers kept."""
    lines = ["" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines()]
    return ast.parse("\n".join(lines))

def _code_cells(nb) -> list:
    return [c for c in nb.cells if c.cell_type == "code"]


def code_lines(source: str) -> int:
    """Lines that count (as /work/shared/tools/nbstats.py counts them): not blank, not comments."""
    return sum(1 for line in source.splitlines() if line.strip() and not line.strip().startswith("#"))


def _call_name(node: ast.Call) -> str | None:
    f = node.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None


# --------------------------------------------------------------------------------------------
# What a notebook promises, read statically
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Promise:
    name: str  # a literal stem, or a regular expression when ``pattern``
    ext: str
    pattern: bool = False
    where: str = ""

    def found(self, folder: Path) -> list[Path]:
        if not self.pattern:
            p = folder / f"{self.name}.{self.ext}"
            return [p] if p.is_file() else []
        rx = re.compile(self.name + re.escape(f".{self.ext}") + "$")
        return [p for p in folder.iterdir() if rx.match(p.name)]


def _saver_calls(tree: ast.AST):
    """(call, saver name, NAME node, files) for every saving call in ``tree``."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or _call_name(node) not in SAVERS:
            continue
        saver = _call_name(node)
        pos = SAVERS[saver]
        name = node.args[pos] if len(node.args) > pos else next(
            (k.value for k in node.keywords if k.arg == "name"), None)
        if name is None:
            continue
        if saver == "publish":
            numbers = node.args[2] if len(node.args) > 2 else next(
                (k.value for k in node.keywords if k.arg == "numbers"), None)
            has_numbers = numbers is not None and not (isinstance(numbers, ast.Constant) and numbers.value is None)
            files = FIGURE_FILES + (("json",) if has_numbers else ())
        elif saver == "save_figure":
            files = FIGURE_FILES
        else:
            files = ("json",)
        yield node, saver, name, files


def _parents(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    return {child: parent for parent in ast.walk(tree) for child in ast.iter_child_nodes(parent)}


def _loops_around(node: ast.AST, parents: dict) -> list[ast.For]:
    loops = []
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.For):
            loops.append(node)
    return loops[::-1]


def _namespace(trees: list[ast.Module]) -> dict:
    """The notebook's imports, run for real, plus ``P`` = the smoke profile."""
    ns: dict = {}
    for tree in trees:
        for node in tree.body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                exec(compile(ast.Module(body=[node], type_ignores=[]), "<notebook imports>", "exec"), ns)
    ns["P"] = profiles.resolve("smoke")
    return ns


def _fstring_pattern(node: ast.JoinedStr) -> str:
    return "".join(re.escape(v.value) if isinstance(v, ast.Constant) else r"[a-z0-9-]+" for v in node.values)


def _expand(node: ast.JoinedStr, loops: list[ast.For], ns: dict) -> list[str] | None:
    """The f-string's values over the loops around it, when every loop runs over something the
    notebook's imports and the smoke profile can evaluate (``P.models``); else None."""
    combos: list[dict] = [{}]
    for loop in loops:
        if not isinstance(loop.target, ast.Name):
            return None
        try:
            values = list(eval(compile(ast.Expression(loop.iter), "<loop>", "eval"), dict(ns)))
        except Exception:  # noqa: BLE001 - a loop over values computed at run time: not expandable
            return None
        combos = [{**c, loop.target.id: v} for c in combos for v in values]
    code = compile(ast.Expression(node), "<name>", "eval")
    try:
        return [eval(code, {**ns, **c}) for c in combos]
    except Exception:  # noqa: BLE001
        return None


def promised_files(path: Path) -> list[Promise]:
    nb = nbformat.read(path, as_version=4)
    trees = [_parse_cell(c.source) for c in _code_cells(nb)]
    ns = None
    out = []
    for i, tree in enumerate(trees):
        parents = _parents(tree)
        for call, saver, name, files in _saver_calls(tree):
            where = f"code cell {i}: {saver}(...)"
            if isinstance(name, ast.Constant) and isinstance(name.value, str):
                out += [Promise(name.value, ext, where=where) for ext in files]
            elif isinstance(name, ast.JoinedStr):
                ns = _namespace(trees) if ns is None else ns
                names = _expand(name, _loops_around(call, parents), ns)
                if names is None:
                    out += [Promise(_fstring_pattern(name), ext, pattern=True, where=where) for ext in files]
                else:
                    out += [Promise(n, ext, where=where) for n in names for ext in files]
            else:
                raise AssertionError(f"{path.name} {where}: the name must be a string or an f-string "
                                     "literal, so the test can tell which files the notebook promises")
    return out


# --------------------------------------------------------------------------------------------
# Static checks (fast)
# --------------------------------------------------------------------------------------------


def test_promises_are_read_from_the_code(tmp_path):
    cells = [nbformat.v4.new_code_cell('profile = "default"', metadata={"tags": ["parameters"]}),
             nbformat.v4.new_code_cell("from residshift.study import tour\nfrom residshift.study.plotting import publish"),
             nbformat.v4.new_code_cell('publish(fig, "07-x-a", numbers, parameters=P)\npublish(fig, "07-x-b")'),
             nbformat.v4.new_code_cell('for name in P.models:\n    publish(fig, f"07-x-{tour.slug(name)}", {})'),
             nbformat.v4.new_code_cell('for k, v in results.items():\n    save_numbers(f"07-y-{k}", v)')]
    path = tmp_path / "07-x.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=cells), path)
    got = {(p.name, p.ext, p.pattern) for p in promised_files(path)}
    models = profiles.resolve("smoke").models
    expected = {("07-x-a", e, False) for e in ("png", "pdf", "json")} | {("07-x-b", e, False) for e in ("png", "pdf")}
    expected |= {(f"07-x-{m}", e, False) for m in models for e in ("png", "pdf", "json")}
    expected |= {(re.escape("07-y-") + "[a-z0-9-]+", "json", True)}
    assert got == expected
    (tmp_path / "07-y-first.json").write_text("{}")
    assert [p for p in promised_files(path) if p.pattern][0].found(tmp_path) == [tmp_path / "07-y-first.json"]
    assert _non_finite({"a": [1, 2.5, None, True], "b": {"c": float("nan")}}) == [".b.c"]


def test_there_are_notebooks():
    assert NOTEBOOKS and NOTEBOOKS[0].name.startswith("00-")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_notebook_is_well_formed(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata["kernelspec"]["name"] == "python3"
    assert nb.metadata["language_info"]["name"] == "python"
    ids = [c.get("id") for c in nb.cells]
    assert len(set(ids)) == len(ids), "cell ids must be unique"
    assert nb.cells[0].cell_type == "markdown" and nb.cells[0].source.startswith(f"# {path.name[:2]} · "), \
        "the first cell is markdown: '# NN · Title' then a one-paragraph summary"
    code = _code_cells(nb)
    assert "parameters" in code[0].metadata.get("tags", []), "first code cell must be tagged 'parameters'"
    assert re.search(r'^profile = "default"$', code[0].source, re.M)
    assert not any(c.get("outputs") or c.get("execution_count") for c in code), "commit notebooks without outputs"
    assert sum(c.cell_type == "markdown" for c in nb.cells) >= 3, "notebooks teach: add markdown"


FINDINGS_HEAD = "## What this run found"
MAX_FINDINGS = 5  # sentences a person wrote (issue 49)
SENTENCE_END = re.compile(r"[.!?](?=\s+[A-Z(*\[]|\s*$)")


def _findings(nb):
    checks = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and "findings-check" in c.metadata.get("tags", [])]
    assert len(checks) == 1, "end with one code cell tagged 'findings-check' (assertions on the saved numbers)"
    md = nb.cells[checks[0] - 1]
    assert md.cell_type == "markdown" and md.source.startswith(FINDINGS_HEAD), \
        f"the findings-check cell follows the authored findings: a markdown cell starting '{FINDINGS_HEAD}'"
    return md.source, nb.cells[checks[0]].source


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_findings_are_authored_and_hold_on_the_committed_numbers(path):
    """A notebook's findings are sentences in markdown, at most five, with numbers in them, and the cell
    after them states those numbers to ``findings.check``, which reads them from the committed
    figures/*.json: run here, it fails when a regeneration contradicts a sentence."""
    text, check = _findings(nbformat.read(path, as_version=4))
    body = text.split("\n", 1)[1] if "\n" in text else ""
    prose = re.sub(r"<details>.*?</details>", "", body, flags=re.S)
    n = len(SENTENCE_END.findall(prose.strip()))
    assert 1 <= n <= MAX_FINDINGS, f"{n} sentences under '{FINDINGS_HEAD}': at most {MAX_FINDINGS}"
    assert re.search(r"\d", prose), "findings state their numbers"
    assert f'findings.check("{path.name[:2]}", {{' in check, "the check cell states its numbers: findings.check(NN, {...})"
    exec(compile(check, f"{path.name}:findings-check", "exec"), {"__name__": "findings_check"})


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_figure_names_carry_the_notebook_number(path):
    number = path.name[:2]
    for p in promised_files(path):
        head = p.name if not p.pattern else re.sub(r"\\(.)", r"\1", p.name.split("[", 1)[0])
        assert head.startswith(number + "-"), f"{p.where}: {p.name!r} must start with {number}-"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_code_cells_are_short_steps(path):
    nb = nbformat.read(path, as_version=4)
    for i, c in enumerate(nb.cells):
        if c.cell_type != "code":
            continue
        n = 0 if "parameters" in c.metadata.get("tags", []) else code_lines(c.source)  # one line per key
        assert n <= MAX_CELL_LINES, (f"cell {i} has {n} code lines (> {MAX_CELL_LINES}): move the logic "
                                     "into the package and keep one step of the argument per cell")
        tree = _parse_cell(c.source)
        last = tree.body[-1] if tree.body else None
        if isinstance(last, ast.Expr):
            assert not (isinstance(last.value, ast.Name) and last.value.id == "P"), \
                f"cell {i} ends with `P`: a namespace dump is not an output a reader needs"
            if isinstance(last.value, ast.Call) and _call_name(last.value) in SAVERS:
                assert c.source.rstrip().endswith(";"), (
                    f"cell {i} ends with {_call_name(last.value)}(...), which would display its file "
                    "paths (PosixPath values): end the line with ';'")


def _guarded(source: str) -> bool:
    body = _parse_cell(source).body
    return (len(body) == 1 and isinstance(body[0], ast.If) and not body[0].orelse
            and isinstance(body[0].test, ast.Name) and body[0].test.id == "show_solutions")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_exercises_have_tagged_guarded_hidden_solutions(path):
    nb = nbformat.read(path, as_version=4)
    cells = nb.cells
    exercises = [i for i, c in enumerate(cells) if c.cell_type == "markdown" and re.search(r"^### Exercise \d", c.source, re.M)]
    solutions = [i for i, c in enumerate(cells) if "solution" in c.metadata.get("tags", [])]
    assert 2 <= len(exercises) <= 3, f"end with two or three exercises ('### Exercise k — title'), found {len(exercises)}"
    assert solutions == [i + 1 for i in exercises], "each exercise is followed by exactly one cell tagged 'solution'"
    assert re.search(r"^show_solutions = None$", _code_cells(nb)[0].source, re.M), \
        "declare show_solutions = None in the parameters cell (smoke runs the solutions)"
    for i in solutions:
        c = cells[i]
        assert c.cell_type == "code", f"cell {i} is tagged 'solution' but is not code"
        assert c.metadata.get("jupyter", {}).get("source_hidden") is True, \
            f'solution cell {i}: set metadata "jupyter": {{"source_hidden": true}}'
        assert _guarded(c.source), f"solution cell {i}: the whole body sits under `if show_solutions:`"


def parameters_disagreements(path: Path) -> list[str]:
    """Where papermill's reading of the cell tagged 'parameters' differs from Python's.

    ``papermill.inspect_notebook`` parses that cell line by line, not as Python: an annotated
    declaration (``x: int = 3``) is mangled (papermill 2.7.0 glues the next line onto its default, and
    a bare ``y: float`` is dropped) while papermill still injects it, and ``a = b = 1`` or
    ``a, b = 1, 2`` are skipped with a warning. ``residshift.tools.runner.declared_parameters`` reads
    the notebook's parameters through ``inspect_notebook`` to validate ``-p`` overrides, so every
    statement of the cell must be a plain ``name = value`` that papermill lists under that name with
    that value (compared as Python expressions) and nothing more.
    """
    import papermill as pm  # ~1.4 s to import: only the tests that need it

    nb = nbformat.read(path, as_version=4)
    cells = [c for c in _code_cells(nb) if "parameters" in c.metadata.get("tags", [])]
    if len(cells) != 1:
        return [f"{len(cells)} cells tagged 'parameters' (papermill reads the first; keep exactly one)"]
    problems, assigned = [], {}
    for node in _parse_cell(cells[0].source).body:
        if isinstance(node, ast.AnnAssign):
            problems.append(f"line {node.lineno}: annotated declaration {ast.unparse(node)!r} "
                            "(papermill misreads it; drop the annotation)")
            if node.value is not None and isinstance(node.target, ast.Name):
                assigned[node.target.id] = node.value  # and compare what papermill made of it
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            assigned[node.targets[0].id] = node.value
        else:
            problems.append(f"line {node.lineno}: {ast.unparse(node)!r} is not `name = value`")
    listed = pm.inspect_notebook(str(path))
    for name, value in assigned.items():
        if name not in listed:
            problems.append(f"{name} is assigned but papermill does not list it")
            continue
        try:
            same = ast.dump(ast.parse(listed[name]["default"], mode="eval").body) == ast.dump(value)
        except SyntaxError:
            same = False
        if not same:
            problems.append(f"{name}: papermill reads the default {listed[name]['default']!r}, "
                            f"Python {ast.unparse(value)!r}")
    problems += [f"papermill lists {name}, which the cell does not assign" for name in set(listed) - set(assigned)]
    return problems


def test_parameters_check_catches_what_papermill_misreads(tmp_path):
    """The check below on a notebook made to fail it: papermill's own reading of an annotated
    declaration, a chained and a tuple assignment disagrees with Python's, and the check says so;
    a cell of plain assignments (a comment, a multi-line list) passes."""
    def notebook(source):
        path = tmp_path / "nb.ipynb"
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source, metadata={"tags": ["parameters"]})])
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        nbformat.write(nb, path)
        return path

    good = notebook('profile = "default"\nseed = None  # a comment\nlayers = [\n    1,\n    2,\n]')
    assert parameters_disagreements(good) == []
    bad = parameters_disagreements(notebook('profile = "default"\nx: int = 3\ny: float\na = b = 1\nc, d = 1, 2'))
    text = "\n".join(bad)
    assert "annotated declaration 'x: int = 3'" in text and "annotated declaration 'y: float'" in text
    assert "'a = b = 1' is not `name = value`" in text and "'c, d = (1, 2)' is not `name = value`" in text
    assert "x: papermill reads the default" in text  # papermill's mangled default, not only our rule


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_papermill_reads_the_parameters_cell_as_python_does(path):
    """No annotated assignment (``ast.AnnAssign``) in the cell tagged 'parameters', and
    ``papermill.inspect_notebook`` lists exactly the names the cell assigns, with their values: the
    names ``-p`` may override (``runner.check_overrides``) are the ones papermill will inject."""
    assert parameters_disagreements(path) == []


# --------------------------------------------------------------------------------------------
# The smoke run delivers (slow)
# --------------------------------------------------------------------------------------------


def _reject_constant(name):
    raise ValueError(f"non-finite number {name} (JSON has no NaN / Infinity: write null)")


def _non_finite(value, where="") -> list[str]:
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return []
    if isinstance(value, (int, float)):
        return [] if math.isfinite(value) else [where or "<top>"]
    if isinstance(value, dict):
        return [w for k, v in value.items() for w in _non_finite(v, f"{where}.{k}")]
    if isinstance(value, list):
        return [w for i, v in enumerate(value) for w in _non_finite(v, f"{where}[{i}]")]
    return [f"{where}: unexpected {type(value).__name__}"]


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_notebook_delivers_at_smoke_profile(path, smoke_study):
    promises = promised_files(path)
    folder, figures, failures = smoke_study
    assert failures[path.stem] is None, failures[path.stem]
    executed = nbformat.read(folder / path.name, as_version=4)

    outputs = [(i, o) for i, c in enumerate(executed.cells) if c.cell_type == "code" for o in c.get("outputs", [])]
    errors = [o for _, o in outputs if o.get("output_type") == "error"]
    assert not errors, json.dumps(errors)[:2000]
    warnings = [f"cell {i}: {o['text'][:300]}" for i, o in outputs
                if o.get("output_type") == "stream" and o.get("name") == "stderr" and re.search(r"\w+Warning\b", o["text"])]
    assert not warnings, "library warnings reach the reader:\n" + "\n".join(warnings)
    paths = [f"cell {i}" for i, o in outputs if "PosixPath(" in str(o.get("data", {}).get("text/plain", ""))]
    assert not paths, f"PosixPath values shown in {paths}: end the saving line with ';'"
    sizes = {}
    for i, o in outputs:
        text = o.get("text", "") if o.get("output_type") == "stream" else o.get("data", {}).get("text/plain", "")
        sizes[i] = sizes.get(i, 0) + len("".join(text) if isinstance(text, list) else text)
    big = {i: n for i, n in sizes.items() if n > MAX_CELL_TEXT}
    assert not big, f"cells printing more than {MAX_CELL_TEXT} characters of text (a reader scrolls past them): {big}"

    assert promises, f"{path.name} saves no figure or numbers"
    manifest = json.loads((figures / "MANIFEST.json").read_text())
    for p in promises:
        found = p.found(figures)
        assert found, f"{path.name} promised {p.name}.{p.ext} ({p.where}) but the smoke run did not write it"
        assert all(f.name in manifest for f in found), f"{[f.name for f in found]} missing from MANIFEST.json"
    for f in sorted(figures.glob(f"{path.name[:2]}-*.json")):
        data = json.loads(f.read_text(), parse_constant=_reject_constant)
        bad = _non_finite(data)
        assert not bad, f"{f.name}: non-finite numbers at {bad[:10]}"
    for f in sorted(figures.glob(f"{path.name[:2]}-*.png")):
        assert f.stat().st_size > 1000, f"{f.name} is (nearly) empty"


@pytest.mark.slow
def test_03_without_a_tuned_lens_runs_to_its_end_on_the_logit_lens(tmp_path, monkeypatch):
    """The class profile's 03 (``tuned_steps = 0``, issue 51) on tiny models: nothing tuned is fitted, drawn
    or judged, every later cell (verdicts, C1 figure, shift depths, findings check, solutions) still runs,
    and the notebook says in words where the default run's tuned lens is."""
    monkeypatch.setenv("RESIDSHIFT_FIGURES", str(tmp_path / "figures"))
    runner.run_notebooks("smoke", only=["03"], overrides={"tuned_steps": 0}, output_dir=tmp_path,
                         log=lambda *a, **k: None)
    nb = nbformat.read(tmp_path / "03-alignment-curves.ipynb", as_version=4)
    cells = {c.get("id"): c for c in nb.cells}
    assert not [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not cells["a03-12"].outputs and not cells["a03-14"].outputs
    assert "`figures/03-alignment-curves-tuned-lens.png`" in cells["a03-11"].source
    figures = tmp_path / "figures"
    assert not (figures / "03-alignment-curves-tuned-lens.png").exists()
    rows = json.loads((figures / "03-alignment-curves-verdicts.json").read_text())
    rows = rows["rows"] if isinstance(rows, dict) else rows
    decoders = {r.get("variant") for r in rows}
    assert "logit lens" in decoders and "tuned lens" not in decoders
    assert (figures / "03-alignment-curves-c1.png").is_file() and (figures / "03-alignment-curves-shift-depth.png").is_file()
