"""The JSON records several processes update: ``RUNS.json`` and ``MANIFEST.json`` beside the figures.

:func:`read_record` reads one (``{}`` when absent). A record that is not valid JSON (both are
committed, so a git merge conflict is enough) raises :class:`CorruptRecordError`, one line naming
the file, the line and the fix: ``figures/RUNS.json is not valid JSON (line 3): restore it with
`git checkout -- figures/RUNS.json` or delete it``.

:func:`updating` is the only way to change one: it holds an exclusive ``flock`` on
``.<name>.lock`` beside the record (``residshift.core.models.preparing``: it waits for the holder,
and the holder removes the file on release) while it reads the record, lets the caller change the
dict, and writes it back atomically (temporary file + rename, ``cache.atomic_write_text``). Two
processes recording at once (two notebooks saving figures into one folder, two runs) therefore keep
every entry. Callers compute whatever is slow (``code_state()``: a ``git status``) *before* entering,
so the lock is held for a read and a write only.

Writing into a corrupt record is refused (:class:`CorruptRecordError`, the same line): the file holds
every other output's provenance and the last measured runs, and starting it anew would silently
drop them. The runner checks both records before it starts a kernel (:func:`check_records`), so a
run fails at once instead of at its first saved figure; readers that only show a record (``run
--dry-run``'s last measured times) say it is unavailable and go on.
"""
from __future__ import annotations

import contextlib
import json
import os
import subprocess
from pathlib import Path
from typing import Any, Iterator

from .paths import COMMITTED_FIGURES, REPO_ROOT, figures_dir


class CorruptRecordError(ValueError):
    """A record is not valid JSON (or not a JSON object); the message names the file and the fix."""


def shown(path: Path) -> str:
    """``path`` relative to the checkout when it lies inside it (``figures/RUNS.json``), else in full."""
    path = Path(path)
    try:
        return str(path.resolve().relative_to(REPO_ROOT.resolve()))
    except ValueError:
        return str(path)


def _tracked(path: Path) -> bool:
    """Whether git tracks ``path`` in this checkout (then ``git checkout`` can restore it)."""
    try:
        return subprocess.run(["git", "ls-files", "--error-unmatch", str(path)], cwd=REPO_ROOT,
                              capture_output=True).returncode == 0
    except OSError:
        return False


def corrupt_message(path: Path, line: int | None = None, what: str = "is not valid JSON") -> str:
    name = shown(path)
    where = f" (line {line})" if line else ""
    fix = (f"restore it with `git checkout -- {name}` or delete it" if _tracked(path)
           else "delete it (the next run writes a new one)")
    return f"{name} {what}{where}: {fix}"


def read_record(path: Path) -> dict[str, Any]:
    """The JSON object in ``path``, ``{}`` when the file does not exist; :class:`CorruptRecordError`
    when it is not valid JSON or not an object (a merge conflict, a half-copied file)."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        conflict = "<<<<<<<" in text
        raise CorruptRecordError(corrupt_message(
            path, err.lineno, "holds a git merge conflict, not valid JSON" if conflict else "is not valid JSON")) from None
    if not isinstance(data, dict):
        raise CorruptRecordError(corrupt_message(path, None, f"holds a JSON {type(data).__name__}, not an object"))
    return data


def check_records(*paths: Path) -> None:
    """Raise :class:`CorruptRecordError` for the first of ``paths`` that exists and is corrupt."""
    for path in paths:
        read_record(path)


@contextlib.contextmanager
def updating(path: Path) -> Iterator[dict[str, Any]]:
    """Yield the record in ``path`` (``{}`` when absent) under an exclusive lock; when the block ends
    without an exception, write the dict back atomically (in the order the caller left it). A
    corrupt record raises :class:`CorruptRecordError` and is left as it is."""
    from .cache import atomic_write_text  # lazy: torch ~1 s; readers of a record need neither
    from .models import preparing

    path = Path(path)
    with preparing(path):
        data = read_record(path)
        yield data
        atomic_write_text(path, json.dumps(data, indent=2) + "\n")


# --------------------------------------------------------------------------------------------
# RUNS.json: the runner writes it, notes and the report read it
# --------------------------------------------------------------------------------------------


COMMITTED_PROFILE = "default"  # the one profile whose runs write the committed figures/ (and their RUNS.json)


def run_figures_dir(profile: str, out_dir: Path, *, publish: bool = True) -> Path:
    """Where a run at ``profile`` writes its figures, ``MANIFEST.json`` and ``RUNS.json``:
    ``RESIDSHIFT_FIGURES`` when set, else the committed ``figures/`` for a :data:`COMMITTED_PROFILE` run
    that ``publish``-es (the runner's, without ``-p``), else ``<out_dir>/figures`` (``build/<profile>/figures``)."""
    if os.environ.get("RESIDSHIFT_FIGURES"):
        return Path(os.environ["RESIDSHIFT_FIGURES"])
    return COMMITTED_FIGURES if profile == COMMITTED_PROFILE and publish else Path(out_dir) / "figures"


def runs_path() -> Path:
    """``RUNS.json`` beside the figures: the last measured run of each notebook, per profile."""
    return figures_dir() / "RUNS.json"


def is_cold(entry: dict[str, Any]) -> bool:
    """Whether a recorded run belongs to a ``run`` invocation that started from an empty results
    cache (nothing computed or trained to reuse): the cost a fresh clone pays, training included.
    Its ``invocation`` also names the embedded models already prepared when it started (a fresh
    clone's ``make study`` prepares them just before, in about a minute or two each)."""
    return bool((entry.get("invocation") or {}).get("from_empty_caches"))


def record_run(profile: str, notebook: str, entry: dict[str, Any]) -> Path:
    """Record one notebook's measured run under ``RUNS.json[profile][notebook]``: read, change and
    write (atomically) under the file's lock (``core.records.updating``), so two runs recording at
    once keep both entries. The last run from empty caches survives a later warm or partial rerun:
    the new entry keeps it under ``"cold_run"`` (until another run from empty caches replaces it).
    A corrupt ``RUNS.json`` raises ``CorruptRecordError`` naming the fix and is left untouched."""
    from ..core.cache import _canonical  # lazy: torch ~1 s; not for notes or `run` usage errors

    path = runs_path()
    entry = {k: v for k, v in entry.items() if k != "cold_run"}
    with updating(path) as runs:
        old = runs.get(profile, {}).get(notebook) or {}
        if not is_cold(entry):
            kept = {k: v for k, v in old.items() if k != "cold_run"} if is_cold(old) else old.get("cold_run")
            if kept:
                entry["cold_run"] = kept
        runs.setdefault(profile, {})[notebook] = _canonical(entry)
        ordered = {p: dict(sorted(v.items())) for p, v in sorted(runs.items())}
        runs.clear()
        runs.update(ordered)
    return path


def load_runs(path: Path | None = None) -> dict[str, dict[str, dict[str, Any]]]:
    """``{profile: {notebook stem: entry}}`` from ``RUNS.json`` (empty when absent; a corrupt one
    raises ``CorruptRecordError``, one line naming the fix)."""
    return read_record(Path(path) if path else runs_path())


def committed_runs(profile: str) -> Path:
    """A profile's measured run times committed beside the benchmarks (``benchmarks/RUNS-<profile>.json``):
    only the default profile's runs write the committed ``figures/RUNS.json``, so another profile's times
    reach a fresh clone this way (``make class-key`` writes the class profile's)."""
    return REPO_ROOT / "benchmarks" / f"RUNS-{profile}.json"


def own_runs(profile: str, figures: Path | None = None) -> dict[str, dict[str, Any]]:
    """``{notebook stem: entry}``: the last measured run of each notebook at ``profile`` itself, never
    another profile's: ``profile``'s entries of the ``RUNS.json`` in ``figures`` (the folder this run
    records into, :func:`run_figures_dir`) and of its committed record (``figures/RUNS.json`` for the default
    profile, :func:`committed_runs` for the others); the newest ``finished`` wins. A corrupt file raises
    ``CorruptRecordError``."""
    committed = COMMITTED_FIGURES / "RUNS.json" if profile == COMMITTED_PROFILE else committed_runs(profile)
    merged: dict[str, dict[str, Any]] = {}
    for path in dict.fromkeys([*([Path(figures) / "RUNS.json"] if figures else []), committed]):
        for stem, entry in (read_record(path).get(profile) or {}).items():
            if stem not in merged or str(entry.get("finished", "")) >= str(merged[stem].get("finished", "")):
                merged[stem] = entry
    return merged


def duration(seconds: float) -> str:
    """``45 s`` under two minutes, else ``3.1 min``: a measured wall time as every reader shows it."""
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def runtime_line(profile: str, entry: dict[str, Any] | None) -> str:
    """The runner's line before a notebook: its last measured run at ``profile`` (:func:`own_runs`), or
    ``not measured yet at <profile>``."""
    if not entry or entry.get("wall_s") is None:
        return f"not measured yet at {profile}"
    extra = [f"peak {entry['peak_rss_mib'] / 1024:.1f} GiB"] if isinstance(entry.get("peak_rss_mib"), (int, float)) else []
    extra += [str(entry["finished"])[:10]] if entry.get("finished") else []
    extra += [f"-p {k}={json.dumps(v)}" for k, v in sorted((entry.get("overrides") or {}).items())]
    return f"last measured at {profile}: {duration(float(entry['wall_s']))}" + (f" ({', '.join(extra)})" if extra else "")
