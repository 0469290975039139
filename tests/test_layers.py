"""The package's layers: data flows notebooks -> study -> stages -> core, never back.

Every ``from ..x import`` / ``import residshift.x`` in a module (at top level or inside a function)
is checked against the layer order below; a lower layer that imports a higher one is a cycle
waiting to happen, and the reason ``core`` holds the output manifest rather than ``study``.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

import residshift

PACKAGE = Path(residshift.__file__).parent
# what each sub-package may import from the package (itself always)
ALLOWED = {
    "core": set(),
    "analysis": {"core"},  # statistics and verdict rules: pure functions of numbers
    "measure": {"core", "analysis"},
    "attenuate": {"core", "analysis", "measure"},
    "train": {"core", "analysis", "measure"},
    "study": {"core", "measure", "analysis", "attenuate", "train"},
}


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
    return out


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_a_layer_imports_only_the_layers_below_it(layer):
    bad = []
    for path in sorted((PACKAGE / layer).rglob("*.py")):
        for target in _imports(path) - {layer} - ALLOWED[layer]:
            if target in ALLOWED:
                bad.append(f"{path.relative_to(PACKAGE)} imports residshift.{target}")
    assert not bad, "\n".join(bad)


def test_the_checker_sees_function_level_and_relative_imports(tmp_path):
    mod = PACKAGE / "analysis" / "verdicts.py"
    assert "core" in _imports(mod) and "study" not in _imports(mod)
    assert "core" in _imports(PACKAGE / "study" / "plotting.py")
