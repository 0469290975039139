"""Results keyed by a hash of their configuration and of the code that computed them, written atomically.

>>> result = cached("lens-metrics", config, lambda: compute(config), code=run_lens)

The key is the sha256 of the configuration as canonical JSON, a schema version and the
*code fingerprint* (:func:`code_fingerprint`): the hash of the source of the given residshift
modules and of every residshift module they import, directly or not (found statically with
``ast``; only the code counts: comments, docstrings and layout do not). So a changed configuration never reuses a
stale result, and neither does a fix to the code that computed it. Each entry is
``results/<kind>/<key>.pt`` (torch.save of tensors, numbers, strings, lists, dicts, numpy arrays and
:func:`storable` classes), ``<key>.pt.sha256`` (its sha256, ``sha256sum`` format) and ``<key>.json``
holding the configuration, the code fingerprint (with the modules it covers) and the corpus files
read, for a reader who wants to know what produced a file.

Nothing lost and nothing silently wrong: every file is written to a temporary name and renamed
into place (:func:`atomic_path`, :func:`atomic_dir`), and torch files of results and checkpoints
go through :func:`save_verified` / :func:`load_verified`, which check the sha256 written with the
file on every load and unpickle with ``weights_only=True`` (tensors, plain values, numpy arrays and
:func:`storable` classes only), so a file handed over by someone else cannot run code. A cache entry
whose bytes changed, that has no digest file, or that cannot be read (truncated, garbled), is a
miss: :func:`cached` deletes it, warns (:class:`DamagedFileWarning`, naming the file and why;
notebooks show it) and recomputes it; :func:`load` returns None with the same warning. Checkpoints
instead refuse with an error naming the file and the fix (``core.fitting``, ``train.trainer``).
The corpus files a result read (``name/split`` -> sha256, recorded by ``core.data`` as it reads
them, :func:`note_corpus`) are listed in the entry's ``.json``; an entry whose corpora changed since
is a miss too (:class:`StaleResultWarning`). Trained model folders carry a ``SHA256SUMS`` manifest
(:func:`write_manifest`, :func:`verify_manifest`).

``code=`` is required: each computation declares, where it is cached, the code that computes it
(residshift modules as objects or dotted names, functions, methods, classes or instances; anything
defined outside the package, a notebook's lambda, counts by its own source). The fingerprint covers
those modules and everything they import, except the modules that compute no result
(:data:`NOT_FINGERPRINTED`: this module, the paths, the profiles whose values enter every key through
the configs, the progress bars, the run records, and the packages' ``__init__`` files, which only
re-export), whose own imports are not followed either. So an import added for convenience (the
profiles in a stage module, a re-export in an ``__init__``) moves no key, and a change to the code
that computes a result still invalidates it. Resumable partial files (checkpoints) use
:func:`config_key` with the same ``code=``, so a code change never resumes from another code's
checkpoint.

:func:`code_state` says which commit the code is at and whether the code (package, notebooks,
pyproject.toml) differs from it; the figures manifest records it.
"""
from __future__ import annotations

import ast
import contextlib
import datetime as _dt
import functools
import glob
import hashlib
import inspect
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import types
import warnings
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import numpy as np
import torch
from numpy._core.multiarray import _reconstruct as _numpy_reconstruct, scalar as _numpy_scalar

from .paths import IN_CLONE, REPO_ROOT, results_dir

SCHEMA = 2  # bump when the meaning of cached results changes (2: keys include the code fingerprint)
PACKAGE = "residshift"
PACKAGE_DIR = Path(__file__).resolve().parents[1]
# Modules that store and locate results but compute none: a change to them recomputes nothing.
# Modules that compute no cached result, left out of every fingerprint (their imports are not followed):
# caching and paths; the profiles (their values reach a result only through a config, which is in the key);
# progress bars; RUNS.json / MANIFEST.json. Package __init__ files (re-exports only:
# tests/test_cache.py checks they define nothing) are left out the same way (_computes_nothing).
NOT_FINGERPRINTED = frozenset({"residshift.core.cache", "residshift.core.paths", "residshift.core.profiles",
                               "residshift.core.progress", "residshift.core.records"})


def _canonical(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _canonical(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return value  # keep 1.0 distinct from 1 in JSON; both are stable
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, torch.dtype):
        return str(value)
    if isinstance(value, Path):
        return str(value)
    raise TypeError(
        f"cache configs must be JSON-like (dict, list, str, number, bool, None); got "
        f"{type(value).__name__}: convert it to one of those first"
    )


@contextlib.contextmanager
def atomic_path(path: Path, *, suffix: str = ".tmp") -> Iterator[Path]:
    """Yield a new empty file beside ``path`` (``.<name>.<writer>-XXXXXXXX<suffix>``, :func:`_writer`; the
    umask's mode) to write;
    when the block ends it replaces ``path`` in one rename, so readers never see half a file. On any
    exception it is removed and ``path`` is left as it was. ``path``'s folder is created if missing.

    >>> with atomic_path(target) as tmp:
    ...     fig.savefig(tmp)
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.{_writer()}-", suffix=suffix, dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; the file we publish gets the usual mode
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def atomic_dir(target: Path, *, move_aside: bool = False,
               before_swap: Callable[[Path], None] | None = None) -> Iterator[Path]:
    """Yield a new empty folder beside ``target`` (``.<name>.XXXXXXXX``) to fill; when the block
    ends it takes ``target``'s place in one rename. On any exception it is removed and ``target``
    is left as it was. ``target``'s folder is created if missing.

    An existing ``target`` is deleted just before the rename (``shutil.rmtree``; its errors
    propagate), or with ``move_aside=True`` renamed to ``.<name>.old-XXXXXXXX`` first and deleted
    (errors ignored) once the new folder is in place, so it is never half deleted where readers look
    (it is renamed back when the final rename fails). ``before_swap(tmp)``, when given, runs once
    the block is done and before anything is replaced; what it raises propagates, ``target``
    untouched.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    sweep_debris(target.parent, prefix=f".{target.name}.")  # what a killed earlier write of it left
    tmp = _new_dir(target)
    try:
        yield tmp
        if before_swap is not None:
            before_swap(tmp)
        if not target.exists():
            os.replace(tmp, target)
        elif not move_aside:
            shutil.rmtree(target)
            os.replace(tmp, target)
        else:
            old = target.parent / f".{target.name}.old-{tmp.name.rpartition('.')[2]}"
            os.replace(target, old)
            try:
                os.replace(tmp, target)
            except BaseException:
                os.replace(old, target)
                raise
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


# Temporary names carry their writer (a tag of this host, and the process id), so the debris of a
# killed write (a whole checkpoint, at paper size 1.5 GB) can be told from a live writer's file and swept.
_HOST = hashlib.sha256(socket.gethostname().encode()).hexdigest()[:4]
_DEBRIS = re.compile(r"\.[^/]+\.(?:old-)?([0-9a-f]{4})(\d+)-[A-Za-z0-9_]{8}(?:\.tmp)?")


def _writer() -> str:
    return f"{_HOST}{os.getpid()}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def sweep_debris(folder: Path, *, recursive: bool = False, prefix: str = ".") -> list[Path]:
    """Remove what killed writes left in ``folder``: temporary files and folders of :func:`atomic_path`
    and :func:`atomic_dir` (names starting with ``prefix``) whose writer ran on this host and is gone.
    Returns what was removed."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    removed = []
    pattern = glob.escape(prefix) + "*"
    for p in folder.rglob(pattern) if recursive else folder.glob(pattern):
        m = _DEBRIS.fullmatch(p.name)
        if m is None or m.group(1) != _HOST or _alive(int(m.group(2))):
            continue
        shutil.rmtree(p, ignore_errors=True) if p.is_dir() and not p.is_symlink() else p.unlink(missing_ok=True)
        removed.append(p)
    return removed


_SWEPT: set[str] = set()  # folders swept by this process (once each)


def _umask() -> int:
    """The process's umask, read without changing it where the system allows (Linux: /proc), else
    by setting and restoring it."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


# --------------------------------------------------------------------------------------------
# Folders a command writes for the user (--out): never one the user made
# --------------------------------------------------------------------------------------------

OUTPUT_MARKER = ".residshift-output"  # in every folder a command writes with output_dir()


class OutputDirError(ValueError):
    """``--out`` names a file, or a non-empty folder residshift did not make; the message names the fix."""


def check_output_dir(target: str | Path, *, force: bool = False, option: str = "--out") -> Path:
    """``target`` if a command may write its folder there, else :class:`OutputDirError`.

    Allowed: a path that does not exist, an empty folder, or a folder that holds
    :data:`OUTPUT_MARKER` (one residshift wrote, which a rerun replaces). Refused: a file, and a
    non-empty folder without the marker (it is the user's: replacing it would delete their files),
    unless ``force``.
    """
    target = Path(target).expanduser()
    if target.exists() and not target.is_dir():
        raise OutputDirError(f"{option} {target} is a file: give the path of a folder (it is created)")
    if force or not target.is_dir() or (target / OUTPUT_MARKER).is_file() or not any(target.iterdir()):
        return target
    raise OutputDirError(
        f"{option} {target} is a folder that residshift did not make and it is not empty: give a new "
        f"or empty folder, or add --force to replace it (everything in it is deleted)")


@contextlib.contextmanager
def output_dir(target: str | Path, *, force: bool = False, option: str = "--out",
               made_by: str = PACKAGE) -> Iterator[Path]:
    """Write a command's output folder: :func:`check_output_dir`, then :func:`atomic_dir` (the old
    folder stays whole until the new one is complete), with :data:`OUTPUT_MARKER` inside, so the
    next run knows the folder is its own. ``target`` is checked again just before the swap (the
    user may have put files there meanwhile); if it is refused then, the finished folder is kept
    beside it and the error names it.

    >>> with output_dir(args.out, force=args.force) as tmp:
    ...     (tmp / "summary.md").write_text(text)
    """
    target = check_output_dir(target, force=force, option=option)
    marker = json.dumps({"made_by": made_by,
                         "created": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")})

    def recheck(tmp: Path) -> None:
        try:
            check_output_dir(target, force=force, option=option)
        except OutputDirError as err:
            kept = target.parent / f"{target.name}.new-{tmp.name.rpartition('.')[2]}"
            os.replace(tmp, kept)
            raise OutputDirError(f"{err}; the finished output is in {kept}") from None

    with atomic_dir(target, move_aside=True, before_swap=recheck) as tmp:
        (tmp / OUTPUT_MARKER).write_text(marker + "\n")
        yield tmp


def _new_dir(target: Path) -> Path:
    """A new folder ``.<name>.<writer>-XXXXXXXX`` beside ``target``, made like any folder (the umask's mode,
    not mkdtemp's 0700), so the folder that replaces ``target`` has the usual permissions."""
    for _ in range(100):
        tmp = target.parent / f".{target.name}.{_writer()}-{secrets.token_hex(4)}"
        try:
            tmp.mkdir()
            return tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary folder name beside {target}")


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (see :func:`atomic_path`)."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically (see :func:`atomic_path`)."""
    atomic_write_bytes(path, text.encode())


def atomic_torch_save(obj: Any, path: Path) -> None:
    """``torch.save(obj, path)`` atomically (see :func:`atomic_path`)."""
    with atomic_path(path) as tmp:
        torch.save(obj, tmp)


def atomic_save_npy(path: Path, array: np.ndarray) -> None:
    """``np.save`` of ``array`` to ``path`` atomically (see :func:`atomic_path`)."""
    with atomic_path(path, suffix=".npy") as tmp, open(tmp, "wb") as f:
        np.save(f, array)


# --------------------------------------------------------------------------------------------
# Verified torch files: a sha256 written with the file, checked on every load
# --------------------------------------------------------------------------------------------

DIGEST_SUFFIX = ".sha256"
MANIFEST = "SHA256SUMS"  # a folder's digest manifest (write_manifest / verify_manifest)
_HEX = frozenset("0123456789abcdef")


class DamagedFileError(RuntimeError):
    """A verified file (or folder) whose bytes are not the ones written, or that cannot be read.

    ``path`` is the file, ``reason`` says what is wrong (``sha256 mismatch: ...``, ``cannot be
    read: ...``, ``its digest file ... is garbled``); callers turn it into a recomputation (cache entries, partial results) or a
    refusal that names the fix (checkpoints, trained models)."""

    def __init__(self, path: Path, reason: str):
        self.path, self.reason = Path(path), reason
        super().__init__(f"{path} is damaged ({reason})")


class DamagedFileWarning(UserWarning):
    """A damaged cached result was deleted and is being recomputed (the message names the file)."""


class StaleResultWarning(UserWarning):
    """A cached result was computed from corpus files that have changed since; it is recomputed."""


def digest_path(path: Path) -> Path:
    """The digest file of ``path``: ``<path>.sha256`` beside it."""
    path = Path(path)
    return path.with_name(path.name + DIGEST_SUFFIX)


def _digest_lines(digests: Iterable[str], name: str) -> str:
    """``sha256sum`` format: one ``<hex>  <name>`` line per digest (so ``sha256sum -c`` reads it)."""
    return "".join(f"{d}  {name}\n" for d in dict.fromkeys(digests))


def _listed_digests(path: Path) -> set[str] | None:
    """The digests the digest file of ``path`` lists; None when there is none. A digest file that
    exists but holds no well-formed line raises DamagedFileError."""
    side = digest_path(path)
    try:
        text = side.read_text(encoding="ascii")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as err:
        raise DamagedFileError(path, f"its digest file {side.name} cannot be read: {err}") from err
    digests = set()
    for line in text.splitlines():
        word = line.split(" ", 1)[0].lower()
        if len(word) != 64 or not set(word) <= _HEX:
            raise DamagedFileError(path, f"its digest file {side.name} is garbled")
        digests.add(word)
    if not digests:
        raise DamagedFileError(path, f"its digest file {side.name} is empty")
    return digests


class _HashingWriter:
    """A file-like writer that hashes what it writes. torch.save writes its zip sequentially; this
    writer has no ``seek``, so a torch that needed one would fail loudly rather than hash other
    bytes than the file holds (the tests compare the digest with the file's)."""

    def __init__(self, f):
        self.f, self.sha = f, hashlib.sha256()

    def write(self, data) -> int:
        self.sha.update(data)
        return self.f.write(data)

    def flush(self) -> None:
        self.f.flush()


def save_verified(obj: Any, path: Path) -> Path:
    """``torch.save(obj)`` to ``path`` atomically, with its sha256 in ``<path>.sha256``; read it back
    with :func:`load_verified`.

    The object is serialized into a temporary file beside ``path`` and hashed as it is written (one
    pass, no copy in memory). The payload and its digest file are two renames, so the digest file
    is written first listing the new digest *and* the ones it listed before (or, for a file without
    one, the digest of the payload being replaced), then the payload is renamed into place, then
    the digest file is rewritten with the new digest alone: a kill at any point leaves a payload
    whose digest is listed. Concurrent writers of one path: one complete write wins; an unlucky
    interleaving can at worst make the file read as damaged, never as wrong. What it costs:
    ``benchmarks/bench_integrity.py``.
    """
    path = Path(path)
    side = digest_path(path)
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            writer = _HashingWriter(f)
            torch.save(obj, writer)
        new = writer.sha.hexdigest()
        try:
            before = _listed_digests(path) or set()
        except DamagedFileError:  # a garbled digest file: it is about to be replaced anyway
            before = set()
        if not before and path.is_file():  # a file of an older version: keep it loadable until replaced
            before = {_sha256_file(path)}
        atomic_write_text(side, _digest_lines([new, *sorted(before - {new})], path.name))
    atomic_write_text(side, _digest_lines([new], path.name))  # the payload is in place: only its digest
    return path


# What a verified file may hold: torch.load(weights_only=True) unpickles tensors, numbers, strings,
# lists, tuples and dicts; numpy arrays and the project's result classes (:func:`storable`) are allowed
# by name. Nothing else is ever called while a file is read, so a planted pickle cannot run code.
_SAFE: list[Any] = [np.ndarray, np.dtype, _numpy_reconstruct, _numpy_scalar]


def storable(cls: type) -> type:
    """Class decorator: instances of ``cls`` (a dataclass of plain fields) may be stored in a verified
    file and read back with ``weights_only=True`` (it is rebuilt from its fields; no code of the file runs)."""
    _SAFE.append(cls)
    return cls


def _safe_globals() -> list[Any]:
    dtypes = [t for t in vars(np.dtypes).values() if isinstance(t, type) and issubclass(t, np.dtype)]
    return [*_SAFE, *dtypes]


def load_verified(path: Path, *, map_location: Any = None) -> Any:
    """``torch.load`` of a file written by :func:`save_verified`, after checking its sha256.

    The file is opened once; its bytes are hashed and must be one of the digests its ``.sha256``
    file lists, then ``torch.load`` reads the same open file (so a file renamed over it meanwhile
    is not mixed in) with ``weights_only=True``: only tensors, plain values, numpy arrays and
    :func:`storable` classes are rebuilt, so a file handed over by someone else cannot run code.
    Raises :class:`DamagedFileError` (naming the file and why) when the digest file is missing
    (a digest proves the file is the one written; a file without one is never adopted), differs,
    is garbled, or the bytes cannot be read (truncated, foreign, or holding other objects);
    raises FileNotFoundError when ``path`` does not exist.
    """
    path = Path(path)
    with open(path, "rb") as f:
        listed = _listed_digests(path)
        if listed is None:
            raise DamagedFileError(path, f"it has no digest file {digest_path(path).name}: residshift did not "
                                         "write it, or a write was killed")
        digest = hashlib.file_digest(f, "sha256").hexdigest()
        if digest not in listed:
            listed_short = ", ".join(sorted(d[:12] for d in listed))
            raise DamagedFileError(path, f"sha256 mismatch: the file changed after it was written; its "
                                         f"sha256 starts {digest[:12]}, {digest_path(path).name} lists {listed_short}")
        f.seek(0)
        try:
            with torch.serialization.safe_globals(_safe_globals()):
                return torch.load(f, weights_only=True, map_location=map_location)
        except Exception as err:  # truncated, garbled, not a torch file, or objects we do not rebuild
            first = (str(err).splitlines() or [""])[0]
            if "Weights only load failed" in first:
                first = next((ln.strip() for ln in str(err).splitlines() if "Unsupported global" in ln), first)
            raise DamagedFileError(path, f"cannot be read: {type(err).__name__}: {first}") from err


def discard_verified(path: Path) -> None:
    """Delete ``path`` and then its digest file (in that order: a kill in between leaves a digest
    file without a payload, harmless, never a damaged payload without a digest, which would load
    as a legacy file)."""
    path = Path(path)
    path.unlink(missing_ok=True)
    digest_path(path).unlink(missing_ok=True)


def _sha256_file(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def write_manifest(folder: Path) -> Path:
    """Write ``folder/SHA256SUMS``: the sha256 of every file under ``folder`` (relative paths,
    ``sha256sum`` format, sorted), atomically. Write it into a folder before it is renamed into
    place (:func:`atomic_dir`), so a folder in place always has its manifest."""
    folder = Path(folder)
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST)
    lines = "".join(f"{_sha256_file(p)}  {p.relative_to(folder).as_posix()}\n" for p in files)
    target = folder / MANIFEST
    atomic_write_text(target, lines)
    return target


def check_folder(folder: Path, *, adopt: bool = True) -> None:
    """:func:`verify_manifest` of a folder residshift wrote (a dequantized model, a trained model):
    raises :class:`DamagedFileError` naming the file that differs. A folder written before the
    manifests existed is adopted when ``adopt`` (its manifest is written now, so later damage is
    found; a read-only folder stays unadopted)."""
    if not verify_manifest(folder) and adopt:
        with contextlib.suppress(OSError):
            write_manifest(folder)


def load_or_discard(path: Path, *, what: str, then: str) -> Any | None:
    """The verified torch file at ``path`` for results that can be recomputed (cache entries,
    partial rows), or None when it is absent or damaged; a damaged one is deleted (with its digest
    file) and a DamagedFileWarning says ``<what> <path> is damaged (<why>): deleted it; <then>``."""
    path = Path(path)
    if not path.is_file():
        return None
    try:
        return load_verified(path)
    except DamagedFileError as err:
        discard_verified(path)
        warnings.warn(f"{what} {path} is damaged ({err.reason}): deleted it; {then}", DamagedFileWarning,
                      stacklevel=3)
        return None


def verify_manifest(folder: Path) -> bool:
    """Check every file ``folder/SHA256SUMS`` lists against its digest: True when all match, False
    when the folder has no manifest (written before residshift wrote them); raises
    :class:`DamagedFileError` naming the first file that is missing or differs (files the manifest
    does not list are not checked)."""
    folder = Path(folder)
    manifest = folder / MANIFEST
    try:
        text = manifest.read_text(encoding="utf-8")
    except FileNotFoundError:
        return False
    for line in text.splitlines():
        digest, sep, name = line.partition("  ")
        if not sep or len(digest) != 64 or not set(digest) <= _HEX or not name:
            raise DamagedFileError(manifest, f"line {line[:80]!r} is not '<sha256>  <file>'")
        file = folder / name
        if not file.is_file():
            raise DamagedFileError(file, f"listed in {MANIFEST} but missing")
        if _sha256_file(file) != digest:
            raise DamagedFileError(file, f"sha256 mismatch: the file changed after it was written "
                                         f"(see {MANIFEST})")
    return True


# --------------------------------------------------------------------------------------------
# Code fingerprints
# --------------------------------------------------------------------------------------------


def _normalized_source(text: str) -> str:
    """The code of ``text`` without its prose: parsed and unparsed, so comments, blank lines and layout
    drop out, with every string statement (docstrings) removed, so a key moves only when what runs does.
    A fragment that does not parse falls back to dropping blank and comment-only lines."""
    try:
        tree = ast.parse(textwrap.dedent(text))
    except SyntaxError:
        lines = (line.rstrip() for line in text.splitlines())
        return "\n".join(line for line in lines if line and not line.lstrip().startswith("#"))
    return ast.unparse(_NoDocstrings().visit(tree))


class _NoDocstrings(ast.NodeTransformer):
    """Drops statements that are only a string (a docstring does nothing when it runs)."""

    def generic_visit(self, node: ast.AST) -> ast.AST:
        super().generic_visit(node)
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and all(isinstance(b, ast.stmt) for b in body):
            kept = [b for b in body if not (isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant)
                                            and isinstance(b.value.value, str))]
            node.body = kept or [ast.Pass()]
        return node


def _module_file(name: str) -> Path | None:
    parts = name.split(".")
    if parts[0] != PACKAGE:
        return None
    if len(parts) == 1:
        return PACKAGE_DIR / "__init__.py"
    rel = Path(*parts[1:])
    for candidate in (PACKAGE_DIR / rel.with_suffix(".py"), PACKAGE_DIR / rel / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _is_package(name: str) -> bool:
    path = _module_file(name)
    return path is not None and path.name == "__init__.py"


def _imports(name: str, text: str) -> set[str]:
    """residshift modules that module ``name`` imports anywhere in its body (static, via ast)."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return set()
    package = name if _is_package(name) else name.rpartition(".")[0]
    found: set[str] = set()

    def add(mod: str) -> None:
        if mod == PACKAGE or mod.startswith(PACKAGE + "."):
            found.add(mod)

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                add(a.name)
                if _is_ours(a.name) and _is_package(a.name):  # `import residshift.core.models as m`
                    found.update(_reexported(a.name, "*"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            add(mod)
            for a in node.names:  # `from .core import cache` imports the module residshift.core.cache
                if _module_file(f"{mod}.{a.name}") is not None:
                    add(f"{mod}.{a.name}")
                    if _is_package(f"{mod}.{a.name}"):  # a package as a namespace: whatever it re-exports
                        found.update(_reexported(f"{mod}.{a.name}", "*"))
                elif _is_ours(mod) and _is_package(mod):  # a name a package re-exports: the module defining it
                    found.update(_reexported(mod, a.name))
    out = set()
    for mod in found:  # importing a.b.c runs a/__init__ and a/b/__init__ too
        parts = mod.split(".")
        out.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    return {m for m in out if _module_file(m) is not None}


def _reexported(package: str, name: str) -> set[str]:
    """The modules a package's ``__init__`` takes ``name`` from (``from .interface import ModelInfo``);
    every module it imports when the name is not found there (a lazy ``__getattr__``: be safe)."""
    text = _module_file(package).read_text(encoding="utf-8")
    every = _imports(package, text)
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom) and any((a.asname or a.name) == name for a in node.names):
            base = package.split(".")[: len(package.split(".")) - (node.level - 1)] if node.level else []
            mod = ".".join(base + ([node.module] if node.module else [])) if node.level else (node.module or "")
            sub = f"{mod}.{name}"
            return {sub} if _module_file(sub) is not None else ({mod} if _module_file(mod) is not None else every)
    return every


_DISK: dict[Path, tuple[tuple[int, int], str, frozenset[str]]] = {}  # file -> (stat, hash, imports)
_LOADED: dict[str, tuple[int, int, str, frozenset[str]]] = {}  # module -> (id, spec id, hash, imports)


def _module_entry(name: str) -> tuple[str, frozenset[str]]:
    """(hash of the normalized source, residshift imports) of one residshift module.

    A module already imported is hashed once per import (keyed by the module object and its spec,
    which a reload replaces), so editing a file under a running kernel does not change the
    fingerprint of the code that kernel actually runs; a module not imported is read from disk.
    """
    path = _module_file(name)
    if path is None:
        raise ValueError(f"{name!r} is not a module of the {PACKAGE} package (no file under {PACKAGE_DIR})")
    mod = sys.modules.get(name)
    if mod is not None:
        seen = _LOADED.get(name)
        if seen is not None and seen[:2] == (id(mod), id(getattr(mod, "__spec__", None))):
            return seen[2], seen[3]
    st = path.stat()
    stamp = (st.st_mtime_ns, st.st_size)
    cached_disk = _DISK.get(path)
    if cached_disk is None or cached_disk[0] != stamp:
        text = path.read_text(encoding="utf-8")
        digest = hashlib.sha256(_normalized_source(text).encode()).hexdigest()
        cached_disk = (stamp, digest, frozenset(_imports(name, text)))
        _DISK[path] = cached_disk
    if mod is not None:
        _LOADED[name] = (id(mod), id(getattr(mod, "__spec__", None)), cached_disk[1], cached_disk[2])
    return cached_disk[1], cached_disk[2]


def _computes_nothing(name: str) -> bool:
    """Left out of fingerprints: :data:`NOT_FINGERPRINTED` and the packages' ``__init__`` files."""
    return name in NOT_FINGERPRINTED or _is_package(name)


def _closure(modules: Iterable[str], without: frozenset[str] = frozenset()) -> dict[str, str]:
    """``{module: source hash}`` for ``modules`` and their transitive residshift imports, not following
    the imports of the modules that compute nothing (:func:`_computes_nothing`) or of ``without``."""
    out: dict[str, str] = {}
    modules = set(modules)
    todo = list(modules)
    while todo:
        name = todo.pop()
        if name in out or name in without or (_computes_nothing(name) and name not in modules):
            continue
        digest, imports = _module_entry(name)
        out[name] = digest
        todo.extend(m for m in imports if m not in out)
    return out


def _is_ours(module_name: str | None) -> bool:
    return bool(module_name) and (module_name == PACKAGE or module_name.startswith(PACKAGE + "."))


def _targets(obj: Any, *, strict: bool) -> tuple[set[str], list[str]]:
    """(residshift modules, outside sources) that ``obj`` stands for."""
    if obj is None:
        return set(), []
    if isinstance(obj, (list, tuple, set, frozenset)):
        mods, srcs = set(), []
        for item in obj:
            m, s = _targets(item, strict=strict)
            mods |= m
            srcs += s
        return mods, srcs
    if isinstance(obj, str):
        if not _is_ours(obj) or _module_file(obj) is None:
            raise ValueError(f"code={obj!r}: a module name must name a {PACKAGE} module, like "
                             "'residshift.measure.lens' (pass functions or modules for anything else)")
        return {obj}, []
    if isinstance(obj, types.ModuleType):
        return _targets(obj.__name__, strict=strict)
    if isinstance(obj, functools.partial):
        return _targets(obj.func, strict=strict)
    if inspect.ismethod(obj):
        return _targets(obj.__func__, strict=strict)
    if inspect.isfunction(obj) or inspect.isclass(obj):
        if _is_ours(obj.__module__) and _module_file(obj.__module__) is not None:
            return {obj.__module__}, []
        try:
            return set(), [f"{obj.__module__}.{obj.__qualname__}:" + _normalized_source(inspect.getsource(obj))]
        except (OSError, TypeError):
            if strict:
                raise TypeError(
                    f"code={obj!r}: its source cannot be read, so results computed with it cannot be "
                    f"keyed by it. Define it in a file or a notebook cell, or pass the {PACKAGE} "
                    "modules it runs instead") from None
            return set(), [f"{obj.__module__}.{obj.__qualname__}"]
    if _is_ours(type(obj).__module__):  # an instance of one of our classes: its class's code
        return _targets(type(obj), strict=strict)
    if callable(obj) and strict:
        return _targets(type(obj), strict=strict)
    if strict:
        raise TypeError(f"code= takes {PACKAGE} modules, module names, functions, methods or classes; "
                        f"got {type(obj).__name__}")
    return set(), []


def _fingerprint(modules: set[str], sources: list[str], without: Iterable[str] = ()) -> tuple[str, list[str]]:
    covered = _closure(modules, frozenset(without))
    h = hashlib.sha256()
    names = sorted(n for n in covered if n in modules or not _computes_nothing(n))
    for name in names:
        h.update(f"{name}\0{covered[name]}\n".encode())
    for src in sorted(set(sources)):
        h.update(hashlib.sha256(src.encode()).digest())
    return h.hexdigest()[:20], names + [s.split(":", 1)[0] for s in sorted(set(sources))]


def code_fingerprint(*code: Any, without: Iterable[str] = ()) -> str:
    """The fingerprint of ``code`` (modules, names, functions, classes; see the module docstring):
    a hash of their source and of every residshift module they import, transitively. ``without``:
    modules (dotted names) the computation declares it does not depend on, whose imports are not
    followed either (the trainer's tokenizer module: the tokenizer enters a run's key by its own
    fingerprint)."""
    return _fingerprint(*_targets(list(code), strict=True), without)[0]


def code_modules(*code: Any, without: Iterable[str] = ()) -> list[str]:
    """The residshift modules (and outside sources) a fingerprint of ``code`` covers."""
    return _fingerprint(*_targets(list(code), strict=True), without)[1]


def _resolve_code(code: Any, kind: str) -> tuple[str, list[str]]:
    if isinstance(code, CodeFingerprint):
        return code.fingerprint, code.modules
    if code is None:
        raise TypeError(f"cache entry {kind!r}: pass code=, the code that computes the result (the function "
                        "or module; its imports count too), e.g. cached(kind, config, compute, code=run_lens)")
    return _fingerprint(*_targets(code, strict=True))


class CodeFingerprint:
    """A fingerprint computed once and passed as ``code=`` to several calls."""

    def __init__(self, *code: Any):
        self.fingerprint, self.modules = _fingerprint(*_targets(list(code), strict=True))

    def __repr__(self) -> str:
        return f"CodeFingerprint({self.fingerprint}, {len(self.modules)} modules)"


# --------------------------------------------------------------------------------------------
# Keys, entries
# --------------------------------------------------------------------------------------------


def config_key(config: dict[str, Any], *, code: Any = None) -> str:
    """The key of ``config``; with ``code=`` it also covers that code's fingerprint (use it for
    checkpoints and partial results, so another code's checkpoint is never resumed).

    Without ``code=`` the key is the configuration's alone, for naming a configuration (for
    example a decoder id); :func:`cached`, :func:`load` and :func:`store` always add the code.
    """
    payload: dict[str, Any] = {"schema": SCHEMA, "config": _canonical(config)}
    if code is not None:
        payload["code"] = _resolve_code(code, "config_key")[0]
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:20]


def _check_kind(kind: str) -> str:
    if not kind or "/" in kind or kind.startswith("."):
        raise ValueError(f"cache kind must be a plain name like 'lens-metrics', got {kind!r}")
    return kind


def _path(kind: str, config: dict[str, Any], fingerprint: str) -> Path:
    payload = {"schema": SCHEMA, "config": _canonical(config), "code": fingerprint}
    key = hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:20]
    return results_dir() / _check_kind(kind) / f"{key}.pt"


def entry_path(kind: str, config: dict[str, Any], *, code: Any = None) -> Path:
    """Where the result of ``(kind, config)`` computed by ``code`` lives."""
    _check_kind(kind)
    return _path(kind, config, _resolve_code(code, kind)[0])


def _load(path: Path, then: str) -> Any | None:
    """The verified entry at ``path``, or None when absent; a damaged one is deleted with its digest
    file (:func:`load_or_discard`, the warning ending with ``then``) and its ``.json``, and is None."""
    existed = path.is_file()
    value = load_or_discard(path, what="cached result", then=then)
    if existed and not path.is_file():  # it was damaged and is gone: its description goes with it
        path.with_suffix(".json").unlink(missing_ok=True)
    return value


def _store(path: Path, config: dict[str, Any], value: Any, fingerprint: str, modules: list[str],
           read: dict[str, str]) -> Path:
    save_verified(value, path)
    sidecar = {"config": _canonical(config), "code": {"fingerprint": fingerprint, "modules": modules},
               "corpora": dict(sorted(read.items())),
               "created": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
    atomic_write_text(path.with_suffix(".json"), json.dumps(sidecar, indent=2))
    return path


# The corpus files a computation reads: ``data`` calls :func:`note_corpus` with each file's sha256 as it is
# read; every computation in progress (nested :func:`cached` calls) records it, and the entry keeps the list.
# A stored entry is reused only while every corpus file it read still has the digest it had.
_READING: list[dict[str, str]] = []


def note_corpus(label: str, digest: str) -> None:
    """Record that the computations in progress read corpus ``label`` (``name/split``) with ``digest``."""
    for frame in _READING:
        frame[label] = digest


def _corpora_read(path: Path) -> dict[str, str] | None:
    """The corpora an entry was computed from (its ``.json``), or None for an entry that does not say."""
    try:
        read = json.loads(path.with_suffix(".json").read_text()).get("corpora")
    except (OSError, ValueError):
        return None
    return read if isinstance(read, dict) else None


def _still_current(read: dict[str, str]) -> str | None:
    """None when every corpus in ``read`` still has its digest; else the first that changed, in words."""
    from . import data  # lazy: data imports this module

    for label, digest in read.items():
        now = data.current_digest(label)
        if now != digest:
            return f"{label} had sha256 {digest[:12]}, now {now[:12] if now else 'missing'}"
    return None


def load(kind: str, config: dict[str, Any], *, code: Any = None) -> Any | None:
    """The stored result of ``(kind, config)`` computed by ``code``, or None (also for a damaged
    entry, which is deleted with a DamagedFileWarning naming it, and for one computed from other
    corpus bytes than the files now hold)."""
    _check_kind(kind)
    return _hit(_path(kind, config, _resolve_code(code, kind)[0]), "load() returns None for it")


def _hit(path: Path, then: str) -> Any | None:
    value = _load(path, then)
    if value is None:
        return None
    read = _corpora_read(path)
    changed = "it does not list the corpora it read" if read is None else _still_current(read)
    if changed:
        warnings.warn(f"cached result {path} was computed from other corpus bytes ({changed}); {then}",
                      StaleResultWarning, stacklevel=3)
        return None
    for label, digest in read.items():  # an outer computation read them too, through this result
        note_corpus(label, digest)
    return value


def store(kind: str, config: dict[str, Any], value: Any, *, code: Any = None,
          corpora: dict[str, str] | None = None) -> Path:
    """Store ``value`` as the result of ``(kind, config)``; ``corpora``: the corpus files it read
    (``name/split`` -> sha256), which must hold the same bytes for :func:`load` to return it."""
    _check_kind(kind)
    fingerprint, modules = _resolve_code(code, kind)
    return _store(_path(kind, config, fingerprint), config, value, fingerprint, modules, corpora or {})


def cached(kind: str, config: dict[str, Any], compute: Callable[[], Any], *, code: Any = None,
           refresh: bool = False) -> Any:
    """Return the stored result for ``(kind, config, code)``, computing and storing it when absent.

    ``code``: what computes the result (see the module docstring) (required).
    A damaged entry is a miss: it is deleted, a DamagedFileWarning names it, and the recomputed
    result replaces it. So is an entry computed from corpus files whose bytes have changed since
    (a StaleResultWarning names the file): the corpora a result reads are part of its identity.
    """
    _check_kind(kind)
    fingerprint, modules = _resolve_code(code, kind)
    path = _path(kind, config, fingerprint)
    if not refresh:
        hit = _hit(path, "recomputing it (the new result replaces it)")
        if hit is not None:
            return hit
    if str(path.parent) not in _SWEPT:
        _SWEPT.add(str(path.parent))
        sweep_debris(path.parent)
    _READING.append({})
    try:
        value = compute()
    finally:
        read = _READING.pop()
    _store(path, config, value, fingerprint, modules, read)
    return value


# --------------------------------------------------------------------------------------------
# Which code made an output: commit, uncommitted changes, a hash of the code
# --------------------------------------------------------------------------------------------

CODE_PATHS = ("residshift", "notebooks", "pyproject.toml")  # the profiles live in residshift/core


def _git(*args: str) -> str:
    if not IN_CLONE:  # an installed copy: a git repository above site-packages is not this code's
        raise OSError("not a clone")
    return subprocess.run(["git", *args], cwd=REPO_ROOT, text=True, capture_output=True,
                          check=True).stdout.strip()


def _notebook_code(path: Path) -> str:
    """The code cells of a notebook (outputs and execution counts do not count)."""
    try:
        nb = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return path.read_bytes().hex()
    cells = [c.get("source", "") for c in nb.get("cells", []) if c.get("cell_type") == "code"]
    return "\n\x1e".join("".join(c) if isinstance(c, list) else c for c in cells)


_DIGESTS: dict[Path, tuple[tuple[int, int], str]] = {}


def _file_digest(path: Path, read: Callable[[Path], str]) -> str:
    st = path.stat()
    stamp = (st.st_mtime_ns, st.st_size)
    seen = _DIGESTS.get(path)
    if seen is None or seen[0] != stamp:
        seen = (stamp, hashlib.sha256(read(path).encode()).hexdigest())
        _DIGESTS[path] = seen
    return seen[1]


def code_hash() -> str:
    """A hash of the code a run depends on: every package module (normalized source), the code
    cells of every notebook and pyproject.toml."""
    h = hashlib.sha256()
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        rel = path.relative_to(PACKAGE_DIR.parent).as_posix()
        digest = _file_digest(path, lambda p: _normalized_source(p.read_text(encoding="utf-8")))
        h.update(f"{rel}\0{digest}\n".encode())
    for path in sorted((REPO_ROOT / "notebooks").glob("*.ipynb")):
        h.update(f"notebooks/{path.name}\0{_file_digest(path, _notebook_code)}\n".encode())
    project = REPO_ROOT / "pyproject.toml"
    if project.is_file():
        h.update(f"pyproject.toml\0{_file_digest(project, lambda p: p.read_text(encoding='utf-8'))}\n".encode())
    return h.hexdigest()[:20]


def code_state() -> dict[str, Any]:
    """``{"commit", "code_dirty", "code_hash"}``: the commit checked out (short sha, "unknown"
    without git), whether the code (package, notebooks, pyproject.toml; untracked files included)
    differs from it (None without git), and :func:`code_hash`. Outputs being written (figures,
    the manifest) do not count."""
    try:
        commit = _git("rev-parse", "--short", "HEAD")
        dirty: bool | None = bool(_git("status", "--porcelain", "--untracked-files=all", "--", *CODE_PATHS))
    except (OSError, subprocess.CalledProcessError):
        commit, dirty = "unknown", None
    return {"commit": commit, "code_dirty": dirty, "code_hash": code_hash()}
