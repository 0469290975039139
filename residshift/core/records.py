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
import subprocess
from pathlib import Path
from typing import Any, Iterator

from .paths import REPO_ROOT


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
