"""A reader's run harms nothing (issue 51): papermill by hand and JupyterLab write their figures under
``build/<profile>/figures``; only ``python -m residshift run --profile default`` publishes to ``figures/``.
A lecture starts from copies with its profile injected (``make lab PROFILE=class``)."""
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from residshift.core import paths, records
from residshift.core.paths import REPO_ROOT
from residshift.tools import student


def _committed_state():
    """``git status`` of the checkout and the bytes and times of every file under figures/."""
    status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=REPO_ROOT,
                            capture_output=True, text=True).stdout
    files = {p.relative_to(REPO_ROOT).as_posix(): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
             for p in sorted(paths.COMMITTED_FIGURES.rglob("*")) if p.is_file()}
    return status, files


@pytest.mark.slow
def test_papermill_by_hand_leaves_the_checkout_untouched(tmp_path):
    before = _committed_state()
    env = {k: v for k, v in os.environ.items() if k not in ("RESIDSHIFT_FIGURES", "RESIDSHIFT_PROFILE")}
    env.update(HF_HUB_OFFLINE="1", RESIDSHIFT_RESULTS=str(tmp_path / "results"), RESIDSHIFT_BUILD=str(tmp_path / "build"))
    papermill = Path(sys.executable).parent / "papermill"
    proc = subprocess.run([str(papermill), str(REPO_ROOT / "notebooks" / "01-the-causal-shift.ipynb"),
                           str(tmp_path / "out.ipynb"), "-p", "profile", "smoke", "--cwd", str(REPO_ROOT / "notebooks")],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert _committed_state() == before  # before: the six figures/01-* files and MANIFEST.json rewritten
    written = tmp_path / "build" / "smoke" / "figures"
    assert (written / "01-the-causal-shift-tug-of-war.png").is_file()
    manifest = json.loads((written / "MANIFEST.json").read_text())
    assert {e["profile"] for e in manifest.values()} == {"smoke"}


def test_only_the_runners_default_run_publishes(monkeypatch, tmp_path):
    monkeypatch.delenv("RESIDSHIFT_FIGURES", raising=False)
    monkeypatch.delenv("RESIDSHIFT_PROFILE", raising=False)
    monkeypatch.setenv("RESIDSHIFT_BUILD", str(tmp_path))
    monkeypatch.setattr(paths, "_profile", None)
    assert paths.figures_dir() == tmp_path / "interactive" / "figures"  # a kernel that resolved no profile yet
    paths.use_profile("class")
    assert paths.figures_dir() == tmp_path / "class" / "figures"
    assert records.run_figures_dir("default", tmp_path / "default") == paths.COMMITTED_FIGURES
    assert records.run_figures_dir("default", tmp_path / "default", publish=False) == tmp_path / "default" / "figures"
    assert records.run_figures_dir("class", tmp_path / "class") == tmp_path / "class" / "figures"


def test_lab_copies_carry_the_profile_and_the_solutions(tmp_path):
    written = student.write_student(tmp_path, None, profile="class", solutions=True)
    nb = nbformat.read(written[3], as_version=4)
    original = nbformat.read(REPO_ROOT / "notebooks" / written[3].name, as_version=4)
    tags = [c.metadata.get("tags", []) for c in nb.cells]
    at = tags.index(["injected-parameters"])
    assert tags[at - 1] == ["parameters"] and 'profile = "class"' in nb.cells[at].source
    assert [c.source for i, c in enumerate(nb.cells) if i != at] == [c.source for c in original.cells]
