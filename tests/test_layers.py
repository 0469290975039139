"""The package's layers: data flows one way, and the README, the package docstring and this test
say the same thing.

:data:`LAYERS` is the one description: a sub-package imports only sub-packages of lower layers
(never a sibling of its own layer, never a higher one). The README and ``residshift/__init__.py``
state the same order in the words :func:`diagram` renders (tested), and every
``from ..x import`` / ``import residshift.x`` in a module, at top level or inside a function, is
checked against it.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

import residshift
from residshift.core.paths import REPO_ROOT

PACKAGE = Path(residshift.__file__).parent
# highest first; the sub-packages of one layer are siblings and do not import each other
LAYERS: list[tuple[str, ...]] = [("tools",), ("study",), ("measure", "attenuate", "train"), ("analysis",), ("core",)]
ALLOWED = {pkg: {low for layer in LAYERS[i + 1:] for low in layer} for i, layer in enumerate(LAYERS) for pkg in layer}


def diagram() -> str:
    """The order in words: ``(notebooks | tools) → study → (measure | attenuate | train) → analysis → core``
    (the notebooks and the tools wing both stand on ``study``; neither imports the other)."""
    top, *rest = LAYERS
    parts = [layer[0] if len(layer) == 1 else "(" + " | ".join(layer) + ")" for layer in rest]
    return " → ".join(["(notebooks | " + " | ".join(top) + ")", *parts])


def _imports(path: Path) -> set[str]:
    """The sub-packages of residshift a module imports (relative or absolute)."""
    rel = path.relative_to(PACKAGE).parts
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the module's package
                base = list(rel[:-1])[: len(rel) - node.level] if node.level > 1 else list(rel[:-1])
                parts = base + (node.module.split(".") if node.module else [])
                if not parts:  # "from .. import x": x are sub-packages
                    out |= {a.name for a in node.names}
                else:
                    out.add(parts[0])
            elif node.module and node.module.startswith("residshift."):
                out.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            out |= {a.name.split(".")[1] for a in node.names if a.name.startswith("residshift.")}
    return out | set(_string_imports(path))


def _string_imports(path: Path) -> dict[str, str]:
    """Sub-packages a module imports by name rather than by statement: ``import_module("residshift.x...")``
    and module-level ``*_MODULES`` tables of such names (``{sub-package: the string}``)."""
    out = {}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = []
        if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module":
            names = [a.value for a in node.args[:1] if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id.endswith("_MODULES")
                                                   for t in node.targets):
            names = [c.value for c in ast.walk(node.value) if isinstance(c, ast.Constant) and isinstance(c.value, str)]
        out |= {n.split(".")[1]: n for n in names if n.startswith("residshift.") and n.count(".") >= 1}
    return out


# Imports by name that cross the layers, each with its reason; the test below fails when one is added,
# and when one of these goes away (then delete it here). None is left: the GPT model class moved to
# core/models/gpt.py, where the loader imports it plainly, and the cache fingerprints no longer shape
# the imports (their dependencies are declared: residshift.core.cache).
STRING_IMPORTS_ACROSS: dict[tuple[str, str], str] = {}


def test_imports_by_name_that_cross_the_layers_are_the_listed_ones():
    found = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        layer = rel.parts[0] if len(rel.parts) > 1 else None
        for target in _string_imports(path):
            if layer in ALLOWED and target in ALLOWED and target != layer and target not in ALLOWED[layer]:
                found.add((rel.as_posix(), target))
    assert found == set(STRING_IMPORTS_ACROSS), f"imports by name across the layers: {sorted(found)}"


def test_every_sub_package_has_a_layer():
    found = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    assert found == set(ALLOWED)


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_a_layer_imports_only_the_layers_below_it(layer):
    bad = []
    for path in sorted((PACKAGE / layer).rglob("*.py")):
        listed = {t for (f, t) in STRING_IMPORTS_ACROSS if f == path.relative_to(PACKAGE).as_posix()}
        for target in _imports(path) - {layer} - ALLOWED[layer] - listed:
            if target in ALLOWED:
                bad.append(f"{path.relative_to(PACKAGE)} imports residshift.{target}")
    assert not bad, "\n".join(bad)


def test_the_readme_and_the_package_docstring_draw_this_order():
    text = diagram()
    readme = " ".join((REPO_ROOT / "README.md").read_text(encoding="utf-8").split())
    doc = " ".join((residshift.__doc__ or "").split())
    assert text in readme, f"README.md should state the layering as: {text}"
    assert text in doc, f"residshift/__init__.py's docstring should state the layering as: {text}"


def test_the_checker_sees_function_level_and_relative_imports(tmp_path):
    mod = PACKAGE / "tools" / "report.py"
    assert {"analysis", "core", "claims"} <= _imports(mod) and "tools" not in _imports(mod) - {"tools"}
    assert "core" in _imports(PACKAGE / "study" / "plotting.py")
    probe = PACKAGE / "measure" / "_probe_for_test.py"
    try:
        probe.write_text("def f():\n    from ..attenuate import gates\n")
        assert "attenuate" in _imports(probe) and "attenuate" not in ALLOWED["measure"]
        probe.write_text("import importlib\nSTUDY_MODULES = {'x': 'residshift.study.tour'}\n"
                         "def g():\n    return importlib.import_module('residshift.train.trainer')\n")
        assert _string_imports(probe) == {"study": "residshift.study.tour", "train": "residshift.train.trainer"}
        assert {"study", "train"} <= _imports(probe)
    finally:
        probe.unlink()


def test_no_notebook_imports_the_tools_wing():
    """Notebooks call ``study`` and below; the command line, runner, book and report are for the
    person running them, not for the notebooks they run."""
    import json

    bad = []
    for nb in sorted((REPO_ROOT / "notebooks").glob("*.ipynb")):
        for cell in json.loads(nb.read_text(encoding="utf-8"))["cells"]:
            if cell["cell_type"] != "code":
                continue
            src = "".join(cell["source"])
            if "residshift.tools" in src or "residshift import tools" in src:
                bad.append(nb.name)
    assert not bad, f"notebooks importing residshift.tools: {sorted(set(bad))}"
