"""Where things live on disk. Every location can be moved with an environment variable."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def _env_path(var: str, default: Path) -> Path:
    value = os.environ.get(var)
    return Path(value).expanduser().resolve() if value else default


def cache_dir() -> Path:
    """Dequantized models, tokenized corpora (ignored by git). ``RESIDSHIFT_CACHE`` moves it."""
    return _env_path("RESIDSHIFT_CACHE", REPO_ROOT / "data" / "cache")


def results_dir() -> Path:
    """Expensive results keyed by configuration (ignored by git). ``RESIDSHIFT_RESULTS`` moves it."""
    return _env_path("RESIDSHIFT_RESULTS", REPO_ROOT / "results")


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
    return _env_path("RESIDSHIFT_BUILD", REPO_ROOT / "build")
