"""Where things live on disk. Every location can be moved with an environment variable.

In a clone (the package sits beside ``pyproject.toml`` and ``notebooks/``) everything stays in the clone,
ignored by git except the committed ``figures/``. Installed anywhere else (``pip install .``, a wheel),
nothing is written beside the package: results and figures go under ``./residshift-out/`` in the working
directory (they belong to the project you run in), the dequantized models and tokenized corpora to the
user cache directory (``platformdirs``: ``~/.cache/residshift`` on Linux), since they are large and the same
for every project."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]  # the clone, when this package is one's ``residshift/``
IN_CLONE = (REPO_ROOT / "pyproject.toml").is_file() and (REPO_ROOT / "notebooks").is_dir()


def work_dir() -> Path:
    """The root of results and build outputs: the clone, else ``./residshift-out`` (read when called,
    so a process that changes directory writes where it now stands)."""
    return REPO_ROOT if IN_CLONE else Path.cwd() / "residshift-out"


def not_a_clone(command: str) -> str | None:
    """For a command that reads the notebooks or writes the committed records: None in a clone, else the
    one line naming the fix."""
    if IN_CLONE:
        return None
    return (f"residshift {command}: error: this command needs a clone of the repository (its notebooks/, "
            f"figures/ and benchmarks/); this residshift is installed at {REPO_ROOT / 'residshift'}. "
            "Clone it (git clone ...) and run the command there.")


def _env_path(var: str, default: Path) -> Path:
    value = os.environ.get(var)
    return Path(value).expanduser().resolve() if value else default


def cache_dir() -> Path:
    """Dequantized models, tokenized corpora (ignored by git). ``RESIDSHIFT_CACHE`` moves it."""
    if IN_CLONE:
        return _env_path("RESIDSHIFT_CACHE", REPO_ROOT / "data" / "cache")
    from platformdirs import user_cache_path  # lazy: installed copies only

    return _env_path("RESIDSHIFT_CACHE", user_cache_path("residshift"))


def results_dir() -> Path:
    """Expensive results keyed by configuration (ignored by git). ``RESIDSHIFT_RESULTS`` moves it."""
    return _env_path("RESIDSHIFT_RESULTS", work_dir() / "results")


COMMITTED_FIGURES = REPO_ROOT / "figures"  # written only by a default run through the runner (it sets RESIDSHIFT_FIGURES)
_profile: str | None = None  # the profile a notebook resolved (profiles.from_namespace), for figures_dir


def use_profile(name: str) -> None:
    """Record the profile this process runs at (a notebook's setup cell does, through ``from_namespace``)."""
    global _profile
    _profile = name


def active_profile() -> str:
    """``RESIDSHIFT_PROFILE`` (the runner sets it), else the profile a notebook resolved, else ``interactive``."""
    return os.environ.get("RESIDSHIFT_PROFILE") or _profile or "interactive"


def figures_dir() -> Path:
    """Where ``save_figure`` and ``save_numbers`` write: ``RESIDSHIFT_FIGURES`` when set, else
    ``build/<profile>/figures``. Only ``python -m residshift run --profile default`` (no ``-p``) points it at
    the committed ``figures/``; papermill by hand, JupyterLab and every other profile write under ``build/``."""
    return _env_path("RESIDSHIFT_FIGURES", build_dir() / active_profile() / "figures")


def build_dir() -> Path:
    return _env_path("RESIDSHIFT_BUILD", work_dir() / "build")
