"""The committed text of a file, for tests of committed numbers.

A test that checks what the repository ships (the committed figures, verdicts, manifest) reads
``git show HEAD:<path>``, not the working tree: a user's own ``make study`` rewrites ``figures/``,
and a test of the committed numbers must not fail, or pass, because of that. Without git, or
outside a git checkout (an unpacked sdist), the test is skipped with the reason.
"""
import json
import shutil
import subprocess
from typing import Any

import pytest

from residshift.core.paths import REPO_ROOT


def committed_text(path: str) -> str:
    """``path`` (relative to the checkout) as committed at HEAD."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed: the committed files cannot be read")
    inside = subprocess.run(["git", "rev-parse", "--is-inside-work-tree"], cwd=REPO_ROOT, capture_output=True,
                            text=True)
    if inside.returncode != 0 or inside.stdout.strip() != "true":
        pytest.skip(f"{REPO_ROOT} is not a git checkout: the committed files cannot be read")
    shown = subprocess.run(["git", "show", f"HEAD:{path}"], cwd=REPO_ROOT, capture_output=True, text=True)
    if shown.returncode != 0:
        pytest.fail(f"{path} is not committed at HEAD ({shown.stderr.strip()})")
    return shown.stdout


def committed_json(path: str) -> Any:
    return json.loads(committed_text(path))
