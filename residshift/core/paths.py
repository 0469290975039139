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


def figures_dir() -> Path:
    """Where ``save_figure`` writes. The runner points smoke runs away from the committed figures."""
    return _env_path("RESIDSHIFT_FIGURES", REPO_ROOT / "figures")


def build_dir() -> Path:
    return _env_path("RESIDSHIFT_BUILD", REPO_ROOT / "build")
