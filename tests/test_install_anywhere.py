"""An installed (non-editable) copy of the package writes nothing beside itself: `residshift lens` run from an
empty folder puts its cache entries under ./residshift-out and the user cache directory, never under the
install target, and the commands that need the notebooks refuse in one line (issue 51)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MOVED = ("RESIDSHIFT_RESULTS", "RESIDSHIFT_CACHE", "RESIDSHIFT_BUILD", "RESIDSHIFT_FIGURES", "RESIDSHIFT_PROFILE")


def _files(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_mtime_ns for p in folder.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts}


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    target = tmp_path_factory.mktemp("site") / "site-packages"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                           "--disable-pip-version-check", "--target", str(target), str(ROOT)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return target


def _run(installed: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(installed), "HOME": str(cwd.parent / "home"),
           "XDG_CACHE_HOME": str(cwd.parent / "xdg"), "HF_HUB_OFFLINE": "1"}
    for var in MOVED:
        env.pop(var, None)
    return subprocess.run([sys.executable, "-m", "residshift", *args], cwd=cwd, env=env, capture_output=True,
                          text=True)


@pytest.mark.slow
def test_lens_from_an_installed_copy_writes_nothing_under_site_packages(installed, tmp_path):
    if not os.environ.get("RESIDSHIFT_DATA"):
        pytest.skip("needs the shared corpora (RESIDSHIFT_DATA)")
    work = tmp_path / "empty"
    work.mkdir()
    before = _files(installed)
    done = _run(installed, work, "lens", "tiny-llama", "--out", "x")
    assert done.returncode == 0, done.stderr[-2000:]
    assert _files(installed) == before  # nothing added or rewritten beside the package
    assert (work / "x" / "summary.md").is_file()
    assert any((work / "residshift-out" / "results").rglob("*.json"))  # the lens's cache entries
    assert not (ROOT / "residshift-out").exists()


def test_an_installed_copy_knows_it_is_not_a_clone(installed, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in MOVED}
    probe = subprocess.run([sys.executable, "-c", "import residshift.core.paths as p; "
                            "print(p.IN_CLONE, p.results_dir(), p.cache_dir(), p.figures_dir())"],
                           cwd=tmp_path, env={**env, "PYTHONPATH": str(installed),
                                              "XDG_CACHE_HOME": str(tmp_path / "xdg")},
                           capture_output=True, text=True)
    clone, results, cache, figures = probe.stdout.split()
    assert clone == "False"
    assert Path(results) == tmp_path / "residshift-out" / "results"
    assert Path(cache) == tmp_path / "xdg" / "residshift"
    assert Path(figures).is_relative_to(tmp_path / "residshift-out" / "build")


@pytest.mark.parametrize("command", ["run", "report", "book", "train-grid"])
def test_commands_that_need_the_notebooks_refuse_outside_a_clone(installed, tmp_path, command):
    done = _run(installed, tmp_path, command)
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "needs a clone of the repository" in done.stderr
    assert not any(tmp_path.iterdir())  # nothing half-written
