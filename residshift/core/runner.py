"""Execute the notebooks headless with papermill, in reading order, at a profile.

``python -m residshift run --profile smoke --only 00 -p ppl_windows=2``

Every notebook in ``notebooks/`` named ``NN-name.ipynb`` runs in order. The profile's value of each
parameter the notebook's tagged ``parameters`` cell declares is injected, then ``-p`` overrides.
Executed copies go to ``build/<profile>/``. Figures go to ``figures/``, except for the smoke
profile, whose figures go to ``build/smoke/figures`` so a test run never overwrites the committed
ones. On a failure the runner names the notebook and the failing cell, keeps the executed copy,
and raises :class:`RunFailed`.
"""
from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any, Iterable

from . import profiles
from .paths import REPO_ROOT, build_dir

NOTEBOOK = re.compile(r"^(\d\d)-[a-z0-9-]+\.ipynb$")


class RunFailed(RuntimeError):
    pass


def notebooks_dir() -> Path:
    return Path(os.environ.get("RESIDSHIFT_NOTEBOOKS", REPO_ROOT / "notebooks"))


def list_notebooks(folder: Path | None = None, only: Iterable[str] | None = None) -> list[Path]:
    folder = Path(folder or notebooks_dir())
    found = sorted(p for p in folder.glob("*.ipynb") if NOTEBOOK.match(p.name))
    if only:
        wanted = [str(o) for o in only]
        picked = [p for p in found if any(p.name.startswith(w) or p.stem == w for w in wanted)]
        missing = [w for w in wanted if not any(p.name.startswith(w) or p.stem == w for p in found)]
        if missing:
            raise RunFailed(f"no notebook matches {missing}; have: {[p.stem for p in found]}")
        return picked
    return found


def parse_overrides(items: Iterable[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise RunFailed(f"override {item!r} must look like key=value (e.g. -p lens_windows=8)")
        key, raw = item.split("=", 1)
        try:
            out[key.strip()] = json.loads(raw)
        except json.JSONDecodeError:
            out[key.strip()] = raw
    return out


def declared_parameters(path: Path) -> dict[str, Any]:
    import papermill as pm

    params = pm.inspect_notebook(str(path))
    if "profile" not in params:
        raise RunFailed(
            f"{path.name} has no tagged 'parameters' cell declaring `profile`; add a code cell tagged "
            "'parameters' with `profile = \"default\"` and the notebook's parameters"
        )
    return {name: spec for name, spec in params.items()}


def parameters_for(path: Path, profile: str, overrides: dict[str, Any]) -> dict[str, Any]:
    declared = declared_parameters(path)
    values = profiles.get(profile)
    chosen = {"profile": profile}
    for name in declared:
        if name in overrides:
            chosen[name] = overrides[name]
        elif name in values:
            chosen[name] = values[name]
    return chosen


def run_notebooks(profile: str = "default", *, only: Iterable[str] | None = None,
                  overrides: dict[str, Any] | None = None, output_dir: str | Path | None = None,
                  folder: Path | None = None, log=print) -> list[Path]:
    """Run the notebooks; return the executed copies' paths. Raises RunFailed on the first failure."""
    import papermill as pm

    profiles.get(profile)  # fail early on an unknown profile
    overrides = overrides or {}
    out_dir = Path(output_dir) if output_dir else build_dir() / profile
    out_dir.mkdir(parents=True, exist_ok=True)
    env_before = {k: os.environ.get(k) for k in ("RESIDSHIFT_PROFILE", "RESIDSHIFT_FIGURES")}
    os.environ["RESIDSHIFT_PROFILE"] = profile
    if profile == "smoke" and "RESIDSHIFT_FIGURES" not in os.environ:
        os.environ["RESIDSHIFT_FIGURES"] = str(out_dir / "figures")
    books = list_notebooks(folder, only)
    if not books:
        raise RunFailed(f"no notebooks found in {folder or notebooks_dir()}")
    done = []
    try:
        for i, book in enumerate(books, 1):
            params = parameters_for(book, profile, overrides)
            target = out_dir / book.name
            shown = ", ".join(f"{k}={v!r}" for k, v in params.items())
            log(f"[{i}/{len(books)}] {book.name}  ({shown})", flush=True)
            t0 = time.perf_counter()
            try:
                pm.execute_notebook(str(book), str(target), parameters=params, kernel_name="python3",
                                    cwd=str(book.parent), progress_bar=False, log_output=False)
            except pm.PapermillExecutionError as err:
                raise RunFailed(
                    f"{book.name} failed in cell {err.cell_index} (execution count {err.exec_count}): "
                    f"{err.ename}: {err.evalue}\n  executed copy kept at {target}"
                ) from None
            log(f"      done in {time.perf_counter() - t0:.1f} s -> {target}", flush=True)
            done.append(target)
    finally:
        for k, v in env_before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return done
