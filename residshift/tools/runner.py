"""Execute the notebooks headless with papermill, in reading order, at a profile.

``python -m residshift run --profile smoke --only 00 -p ppl_windows=2``

Every notebook in ``notebooks/`` named ``NN-name.ipynb`` runs in order; ``--only`` picks by whole
two-digit number (``03``) or whole name (``03-alignment``), never by prefix. The profile's value of
each parameter the notebook's tagged ``parameters`` cell declares is injected, then ``-p``
overrides. Parameters are strict, and checked before any kernel starts: ``-p`` with a key that no
selected notebook declares, a value of another kind or range than the profiles give that key
(:func:`check_override_values`: ``-p ppl_windows=0``), an unknown profile or notebook, or an
``--output-dir`` that is a file is a :class:`UsageError` (the command line exits with status 2).
A corrupt ``MANIFEST.json`` or ``RUNS.json`` in the figures folder the run writes fails it at once
(:class:`RunFailed`, naming the fix; ``residshift.core.records``).

Executed copies go to ``build/<profile>/``. Papermill writes each one under a hidden name beside it
(:func:`partial_path`), renamed onto ``NN-name.ipynb`` only when the notebook finished, so a run
killed mid-notebook never replaces the last finished copy with a half-run one (and the book refuses
half-run copies). On a failure the runner names the notebook and the failing cell, publishes the
executed copy (papermill's error record in it: the book shows the notebook as stopped there) and
raises :class:`RunFailed`; a kernel that died is a RunFailed too, its half-run copy left under the
hidden name. SIGINT and SIGTERM stop a run cleanly (the half-run copy and the kernels' IPython
folder, ``build/.ipython/run-*``, are removed); a SIGKILLed run's folder is swept by the next run.
Figures go to ``figures/`` from a default run without ``-p`` only (:data:`COMMITTED_PROFILE`, the study
the README reports): this runner is the one place that chooses it. Every other run's go to
``build/<profile>/figures`` (:func:`run_figures_dir`), so a test (smoke), lecture (class), GPU (paper) or
changed-parameter run never overwrites the committed ones, and neither does papermill by hand or JupyterLab
(``core.paths.figures_dir``). ``RESIDSHIFT_FIGURES`` overrides all of them.

Each finished notebook's wall time and peak memory (the high-water mark of the kernel's own process
tree: :class:`PeakMemory`) are recorded in ``RUNS.json`` beside the figures (:func:`record_run`,
under the file's lock, so concurrent runs keep every entry), so run-time claims are always the last
measurement. Before each notebook the runner prints that notebook's last measured run at the running
profile (``core.records.own_runs``: ``figures/RUNS.json`` for default, ``benchmarks/RUNS-<profile>.json`` and
this run's own record for the others), or ``not measured yet at <profile>``: never another profile's time.
``--dry-run`` prints the work a profile asks of each notebook (:func:`estimate_work`)
without running anything; a corrupt ``RUNS.json`` only makes its last-measured line unavailable.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import tempfile
import platform
import re
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterable

import psutil

from ..core import profiles
from ..core.paths import COMMITTED_FIGURES, REPO_ROOT, build_dir, results_dir
from ..core.records import (CorruptRecordError, check_records, own_runs,
                            record_run, run_figures_dir, runtime_line)

try:
    import resource  # Unix only
except ImportError:
    resource = None

NOTEBOOK = re.compile(r"^(\d\d)-[a-z0-9-]+\.ipynb$")


class RunFailed(RuntimeError):
    """A notebook failed (the command line exits with status 1)."""


class UsageError(RunFailed):
    """The request itself is wrong: unknown profile, notebook or parameter (exit status 2)."""


def notebooks_dir() -> Path:
    return Path(os.environ.get("RESIDSHIFT_NOTEBOOKS", REPO_ROOT / "notebooks"))


def list_notebooks(folder: Path | None = None, only: Iterable[str] | None = None) -> list[Path]:
    """The ``NN-name.ipynb`` notebooks of ``folder`` in order; ``only`` picks by whole number (two
    digits: ``03``) or whole name (``03-alignment``, ``03-alignment.ipynb``). Anything else (``0``,
    ``3``, ``03-align``) is a :class:`UsageError` naming the valid numbers: a prefix would pick
    several notebooks (``0`` was all ten), and ``3`` for ``03`` is one more spelling to get wrong."""
    folder = Path(folder or notebooks_dir())
    found = sorted(p for p in folder.glob("*.ipynb") if NOTEBOOK.match(p.name))
    if only:
        wanted = [str(o) for o in only]

        def hits(w: str) -> list[Path]:
            return [p for p in found if w in (p.stem[:2], p.stem, p.name)]

        missing = [w for w in wanted if not hits(w)]
        if missing:
            raise UsageError(
                f"--only: no notebook matches {missing}; give "
                f"two-digit numbers ({', '.join(p.stem[:2] for p in found) or 'none found'}) or whole names "
                f"({found[0].stem if found else 'NN-name'})")
        picked = {p for w in wanted for p in hits(w)}
        return [p for p in found if p in picked]
    return found


def check_profile(profile: str) -> dict[str, Any]:
    try:
        return profiles.get(profile)
    except KeyError as err:
        raise UsageError(str(err)) from None


def declared_parameters(path: Path) -> dict[str, Any]:
    import papermill as pm  # lazy: papermill ~1.4 s; notes, report, trainer import this module

    params = pm.inspect_notebook(str(path))
    if "profile" not in params:
        raise RunFailed(
            f"{path.name} has no tagged 'parameters' cell declaring `profile`; add a code cell tagged "
            "'parameters' with `profile = \"default\"` and the notebook's parameters"
        )
    return {name: spec for name, spec in params.items()}


def check_overrides(books: list[Path], overrides: dict[str, Any]) -> None:
    """Every ``-p`` key must be declared by at least one selected notebook (else UsageError)."""
    if "profile" in overrides:
        raise UsageError("choose the profile with --profile, not -p profile=...")
    declared = {book.stem: set(declared_parameters(book)) - {"profile"} for book in books}
    valid = set().union(*declared.values()) if declared else set()
    unknown = sorted(k for k in overrides if k not in valid)
    if not unknown:
        return
    elsewhere = []
    others = [p for p in list_notebooks(books[0].parent) if p not in books] if books else []
    for key in unknown:
        where = [p.stem for p in others if key in declared_parameters(p)]
        if where:
            elsewhere.append(f"{key} is declared by {', '.join(where)} (add it with --only)")
    raise UsageError(
        f"-p {', '.join(unknown)}: no selected notebook ({', '.join(declared)}) declares "
        f"{'it' if len(unknown) == 1 else 'them'}; valid keys: {', '.join(sorted(valid)) or '(none)'}"
        + (f". {'; '.join(elsewhere)}" if elsewhere else "")
    )


def check_override_values(profile: str, overrides: dict[str, Any]) -> None:
    """Each ``-p`` value of a profile key must be of a kind the profiles give that key (UsageError
    naming the key, the value and what is allowed; ``profiles.value_problem``, the check a notebook's
    own ``profiles.from_namespace`` runs): ``-p ppl_windows=0`` is refused here, before a kernel
    starts, not deep inside a notebook. Keys the profiles do not define (a notebook's own
    parameters) and keys every profile leaves ``None`` are not checked."""
    known = profiles.get(profile)
    for key, value in overrides.items():
        must = profiles.value_problem(key, value, words="json") if key in known else None
        if must is not None:
            example = json.dumps(known[key], separators=(",", ":"))
            example = example if len(example) <= 60 else None
            raise UsageError(f"-p {key}={json.dumps(value)}: {key} must be {must}"
                             + (f" (the {profile} profile's value: -p {key}={example})" if example else ""))


def parameters_for(path: Path, profile: str, overrides: dict[str, Any]) -> dict[str, Any]:
    declared = declared_parameters(path)
    values = check_profile(profile)
    chosen = {"profile": profile}
    for name in declared:
        if name in overrides:
            chosen[name] = overrides[name]
        elif name in values:
            chosen[name] = values[name]
    return chosen


# --------------------------------------------------------------------------------------------
# Measuring a notebook: wall time and the kernel's peak resident memory
# --------------------------------------------------------------------------------------------


def _high_water_mark(pid: int) -> int | None:
    """Peak resident set size of a process in bytes (Linux: VmHWM), or None when unreadable."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _children_maxrss() -> int:
    if resource is None:
        return 0
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss


KERNEL = "ipykernel"  # in the command line of the kernel papermill starts (python -m ipykernel_launcher -f ...)


def _cmdline(proc: psutil.Process) -> str:
    try:
        return " ".join(proc.cmdline())
    except psutil.Error:
        return ""


class PeakMemory:
    """Peak resident memory of the process tree the block starts: papermill's kernel and whatever
    the kernel starts, nothing else.

    A thread polls every ``interval`` s for the *direct* children of this process that are new since
    the block began (and, with ``kernel``, whose command line contains it: the runner passes
    :data:`KERNEL`), and keeps the peak of each of them and of their descendants: on Linux the
    process's own high-water mark (``VmHWM``, exact however short the peak), elsewhere the polled
    resident size (a lower bound). ``peak_bytes`` sums those peaks.

    Processes the block did not start are not counted: those running before it, and those another
    thread of this process starts meanwhile that are not the kernel (under pytest-xdist, a worker's
    other tests). Nor are the kernel's descendants that have not exec'd (their command line is their
    parent's): between vfork and exec a child reports its parent's high-water mark as its own, so a
    kernel that starts a subprocess (``git status`` for the manifest) could read twice its size (04 at
    default read 8.55 GiB where its last committed run read 4.3), and a worker forked without exec
    shares its parent's pages (its own allocations go uncounted; the
    notebooks start none). ``getrusage(RUSAGE_CHILDREN)`` is not used on Linux: it is the running maximum over
    every child ever reaped, and a child's maximum there includes this process's own resident memory
    that the child shared between fork and exec, so a small notebook run from a big process (a test
    worker holding models) reported that process's size. Elsewhere, where no high-water mark can be
    read, it is a floor when it rises during the block.
    """

    def __init__(self, interval: float = 0.2, *, kernel: str | None = None):
        self.interval = interval
        self.kernel = kernel
        self.peaks: dict[int, int] = {}
        self.roots: dict[int, str] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _tree(self, me: psutil.Process) -> list[psutil.Process]:
        try:
            direct = me.children(recursive=False)
        except psutil.Error:
            return []
        found = []
        for child in direct:
            if child.pid in self._before:
                continue
            if child.pid not in self.roots:
                # Asked again at every poll: between fork and exec a child still shows this process's
                # command line (and, after vfork, this process's memory), so it is not yet what it
                # will be.
                line = _cmdline(child)
                if not line or line == self._own or (self.kernel is not None and self.kernel not in line):
                    continue
                self.roots[child.pid] = line
            found.append(child)
            try:
                below = child.children(recursive=True)
            except psutil.Error:
                below = []
            for proc in below:
                # A descendant that still shows its parent's command line has not exec'd: after
                # vfork it reports the parent's high-water mark as its own, after fork its pages are
                # the parent's, counted already.
                try:
                    parent = proc.parent()
                except psutil.Error:
                    continue
                if parent is None or _cmdline(proc) != _cmdline(parent):
                    found.append(proc)
        return found

    def _poll(self) -> None:
        me = psutil.Process()
        while True:
            for proc in self._tree(me):
                peak = _high_water_mark(proc.pid)
                if peak is None:
                    try:
                        peak = proc.memory_info().rss
                    except psutil.Error:
                        continue
                self.peaks[proc.pid] = max(self.peaks.get(proc.pid, 0), peak)
            if self._stop.wait(self.interval):
                return

    def __enter__(self) -> "PeakMemory":
        me = psutil.Process()
        self._before = {p.pid for p in me.children(recursive=False)}
        self._own = _cmdline(me)
        self._rusage0 = _children_maxrss()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        rusage = _children_maxrss()
        exact = sys.platform.startswith("linux")
        self._rusage_peak = (rusage * (1 if sys.platform == "darwin" else 1024)
                             if rusage > self._rusage0 and not exact else 0)

    @property
    def peak_bytes(self) -> int:
        return max(sum(self.peaks.values()), getattr(self, "_rusage_peak", 0))


# The integrity files beside results (core.cache.DIGEST_SUFFIX, core.cache.MANIFEST): they record a
# result, they are not one (a warm run that adopts old entries writes them and computes nothing).
DIGEST_FILES = (".sha256", "SHA256SUMS")


def results_snapshot(folder: Path | None = None) -> dict[str, int]:
    """Every file under the results cache with its modification time (ns), digest files left out
    (:data:`DIGEST_FILES`): compare two with :func:`results_written` to count what a notebook wrote."""
    folder = Path(folder) if folder is not None else results_dir()
    found: dict[str, int] = {}
    stack = [folder] if folder.is_dir() else []
    while stack:
        with os.scandir(stack.pop()) as entries:
            for e in entries:
                if e.is_dir(follow_symlinks=False):
                    stack.append(e.path)
                elif e.is_file(follow_symlinks=False) and not e.name.endswith(DIGEST_FILES):
                    found[e.path] = e.stat().st_mtime_ns
    return found


def results_written(before: dict[str, int], after: dict[str, int]) -> int:
    """Files new or rewritten between two snapshots: 0 for a notebook that only reused cached
    results (a warm run), more for one that computed."""
    return sum(1 for path, t in after.items() if before.get(path) != t)


SLOWEST_CELLS = 3  # RUNS.json keeps each notebook's slowest cells: where its time goes


def slowest_cells(executed: Path, k: int = SLOWEST_CELLS) -> list[dict[str, Any]]:
    """The ``k`` code cells of an executed notebook that took longest (papermill's per-cell
    ``duration``): ``[{"cell": id, "s": seconds, "code": first line}]``, longest first."""
    import nbformat  # lazy: only after a run

    try:
        nb = nbformat.read(str(executed), as_version=4)
    except (OSError, ValueError):
        return []
    cells = []
    for c in nb.cells:
        d = c.get("metadata", {}).get("papermill", {}).get("duration")
        if c.cell_type == "code" and isinstance(d, (int, float)):
            cells.append({"cell": c.get("id"), "s": round(float(d), 1),
                          "code": next((l for l in c.source.splitlines() if l.strip()), "")[:100]})
    return sorted(cells, key=lambda c: -c["s"])[:k]


def models_prepared() -> list[str]:
    """The embedded models already dequantized into the model cache."""
    from ..core.models import EMBEDDED, embedded_cache_path  # lazy: torch ~1 s

    return [n for n in EMBEDDED if (embedded_cache_path(n) / "residshift.json").is_file()]


def _run_entry(seconds: float, peak: int, params: dict[str, Any], overrides: dict[str, Any],
               load: float | None, profile_values: dict[str, Any], written: int | None = None,
               executed: Path | None = None, invocation: dict[str, Any] | None = None) -> dict[str, Any]:
    from ..core.cache import code_state  # lazy: torch ~1 s; not for notes or `run` usage errors
    from ..core.machine import cpu_facts

    state = code_state()
    cpu = cpu_facts()
    return {
        "wall_s": round(seconds, 1),
        "results_written": written,
        "peak_rss_mib": round(peak / 2**20),
        "finished": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "device": params.get("device", profile_values.get("device")),
        "overrides": {k: v for k, v in overrides.items() if k in params},
        "commit": state["commit"], "code_dirty": state["code_dirty"],
        "machine": {"system": platform.system(), "arch": platform.machine(), "cpus": os.cpu_count(),
                    "cpu": cpu["cpu"], "native_bf16": cpu["native_bf16"],
                    "load_1min_at_start": None if load is None else round(load, 2)},
        "slowest_cells": [] if executed is None else slowest_cells(executed),
        "invocation": invocation or {},
    }


# --------------------------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------------------------


IPYTHON_DIRS = ".ipython"  # under build/: each run's IPYTHONDIR, removed at its end, swept when stale
HELD = ".held"  # in each of them: flock'ed by the run that uses it, so a sweep can tell a live one


def partial_path(target: Path) -> Path:
    """Where papermill writes while a notebook runs: ``.<stem>.partial.ipynb`` beside ``target``.
    The book never reads it (the name does not match ``NN-name.ipynb``); only a notebook that
    finished (or failed with papermill's error record) is renamed onto ``target``."""
    return target.with_name(f".{target.stem}.partial.ipynb")


def sweep_ipython_dirs(root: Path | None = None) -> list[Path]:
    """Remove the IPython folders under ``build/.ipython`` that no live run holds (a run killed with
    SIGKILL cannot remove its own); return the removed ones."""
    import fcntl

    root = Path(root) if root is not None else build_dir() / IPYTHON_DIRS
    removed = []
    for folder in sorted(root.glob("run-*")) if root.is_dir() else []:
        try:
            fd = os.open(folder / HELD, os.O_RDONLY)
        except FileNotFoundError:
            if time.time() - folder.stat().st_mtime < 60:  # being made just now
                continue
        else:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # a live run holds it
            finally:
                os.close(fd)
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed


def _ipython_dir() -> tuple[Path, int]:
    """A fresh IPYTHONDIR under ``build/.ipython`` with its ``.held`` file locked (the fd is returned
    to close at the end); stale ones of killed runs are swept first."""
    import fcntl

    sweep_ipython_dirs()
    root = build_dir() / IPYTHON_DIRS
    root.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=f"run-{os.getpid()}-", dir=root))
    fd = os.open(folder / HELD, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return folder, fd


class _TermAsExit:
    """While the block runs (in the main thread), SIGTERM raises ``SystemExit(143)`` like SIGINT's
    KeyboardInterrupt, so the ``finally`` clauses run: the half-run copy and the IPython folder
    are removed, the environment is restored. A handler someone else installed is left alone."""

    def __enter__(self):
        import signal

        self._old = None
        if threading.current_thread() is threading.main_thread() and \
                signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
            def _raise(signum, frame):
                raise SystemExit(128 + signum)

            self._old = signal.signal(signal.SIGTERM, _raise)
        return self

    def __exit__(self, *exc):
        import signal

        if self._old is not None:
            signal.signal(signal.SIGTERM, self._old)


def _publish(partial: Path, target: Path) -> None:
    """Rename the executed copy onto ``target`` (its papermill metadata then names ``target``)."""
    import nbformat  # lazy: only after a run

    try:
        nb = nbformat.read(str(partial), as_version=4)
        if nb.metadata.get("papermill", {}).get("output_path") is not None:
            nb.metadata["papermill"]["output_path"] = str(target)
            nbformat.write(nb, str(partial))
    except (OSError, ValueError):
        pass  # the copy is whatever papermill wrote; publish it as it is
    os.replace(partial, target)


def check_output_dir(out_dir: Path) -> Path:
    if out_dir.exists() and not out_dir.is_dir():
        raise UsageError(f"--output-dir {out_dir} is a file, not a folder: choose a folder for the executed "
                         "notebooks (default build/<profile>)")
    return out_dir


def run_notebooks(profile: str = "default", *, only: Iterable[str] | None = None,
                  overrides: dict[str, Any] | None = None, output_dir: str | Path | None = None,
                  folder: Path | None = None, record: bool = True, log=print) -> list[Path]:
    """Run the notebooks; return the executed copies' paths. Raises RunFailed on the first failure
    (or before any kernel starts when the figures folder's ``MANIFEST.json``, or ``RUNS.json`` with
    ``record``, is corrupt) and UsageError (before running anything) on an unknown profile,
    notebook or ``-p`` key, a ``-p`` value of the wrong type or range, or an ``output_dir`` that is
    a file.

    Each notebook executes into :func:`partial_path` and is renamed onto ``<output_dir>/NN-name.ipynb``
    only when papermill finished it (or failed it, with its error recorded in the copy); an
    interrupted run (SIGINT, SIGTERM) removes the half-run copy, a killed one (SIGKILL) leaves it
    under the hidden name, and the last finished copy stays where it was."""
    import papermill as pm  # lazy: papermill ~1.4 s; notes, report, trainer import this module

    values = check_profile(profile)
    overrides = overrides or {}
    books = list_notebooks(folder, only)
    if not books:
        raise UsageError(f"no notebooks found in {folder or notebooks_dir()}")
    check_overrides(books, overrides)
    check_override_values(profile, overrides)
    out_dir = check_output_dir(Path(output_dir) if output_dir else build_dir() / profile)
    env_before = {k: os.environ.get(k) for k in ("RESIDSHIFT_PROFILE", "RESIDSHIFT_FIGURES", "OMP_WAIT_POLICY",
                                                 "PYTHONPATH", "RESIDSHIFT_HEADLESS", "IPYTHONDIR")}
    figures = run_figures_dir(profile, out_dir, publish=not overrides)
    try:  # the records this run writes: a corrupt one fails it now, not at its first saved figure
        check_records(figures / "MANIFEST.json", *([figures / "RUNS.json"] if record else []))
        expected = own_runs(profile, figures)  # the running profile's own measured runs, for its time line
    except CorruptRecordError as err:
        raise RunFailed(str(err)) from None
    out_dir.mkdir(parents=True, exist_ok=True)
    ipython_dir, held = _ipython_dir()
    done = []
    try:
        os.environ["RESIDSHIFT_PROFILE"] = profile
        # no one watches these kernels: text progress bars, not widgets frozen at 0% (core.progress); the
        # startup file switches tqdm.auto too, for the modules that import it directly
        os.environ["RESIDSHIFT_HEADLESS"] = "1"
        from ..core.progress import write_startup
        write_startup(ipython_dir)
        os.environ["IPYTHONDIR"] = str(ipython_dir)
        # Kernels start with OpenMP threads that sleep at barriers instead of spinning (unless the user
        # chose otherwise): on a CPU shared with other work, spinning threads steal the cores the other
        # threads need (notebook 06's cold smoke run took 205 s spinning, 22 s passive, on this 2-core
        # machine under load).
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        # the kernels import this checkout's package, not whichever one the environment installed
        # (a virtual environment shared with another checkout would otherwise run that one's code and
        # write its results and figures into that checkout)
        os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT)] + ([env_before["PYTHONPATH"]]
                                                                          if env_before["PYTHONPATH"] else []))
        if not env_before["RESIDSHIFT_FIGURES"]:  # the one place the committed figures/ can be chosen
            os.environ["RESIDSHIFT_FIGURES"] = str(figures)
        # which `run` this notebook was part of, and whether that run started from empty caches
        invocation = {"started": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                      "notebooks": [b.stem[:2] for b in books],
                      "from_empty_caches": not results_snapshot() if record else None,
                      "models_prepared_at_start": models_prepared() if record else None}
        with _TermAsExit():
            for i, book in enumerate(books, 1):
                params = parameters_for(book, profile, overrides)
                target = out_dir / book.name
                partial = partial_path(target)
                shown = ", ".join(f"{k}={v!r}" for k, v in params.items())
                log(f"[{i}/{len(books)}] {book.name}  ({shown})", flush=True)
                log(f"      {runtime_line(profile, expected.get(book.stem))}", flush=True)
                load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
                t0, before = time.perf_counter(), results_snapshot()
                try:
                    with PeakMemory(kernel=KERNEL) as mem:
                        pm.execute_notebook(str(book), str(partial), parameters=params, kernel_name="python3",
                                            cwd=str(book.parent), progress_bar=False, log_output=False)
                except pm.PapermillExecutionError as err:
                    _publish(partial, target)  # papermill's copy records the error: the book shows it failed
                    raise RunFailed(
                        f"{book.name} failed in cell {err.cell_index} (execution count {err.exec_count}): "
                        f"{err.ename}: {err.evalue}\n  executed copy kept at {target}"
                    ) from None
                except Exception as err:  # the kernel died (out of memory?) or would not start
                    raise RunFailed(
                        f"{book.name} stopped ({type(err).__name__}: {err}); the half-run copy is kept at "
                        f"{partial} (the book does not read it){'; the last finished copy is still at ' + str(target) if target.exists() else ''}"
                    ) from None
                except BaseException:  # interrupted (SIGINT, SIGTERM): no half-run copy left behind
                    partial.unlink(missing_ok=True)
                    raise
                _publish(partial, target)
                seconds = time.perf_counter() - t0
                log(f"      done in {seconds:.1f} s, peak memory {mem.peak_bytes / 2**30:.2f} GiB -> {target}",
                    flush=True)
                if record:
                    entry = _run_entry(seconds, mem.peak_bytes, params, overrides, load, values,
                                       results_written(before, results_snapshot()), executed=target,
                                       invocation=invocation)
                    try:
                        record_run(profile, book.stem, entry)
                    except CorruptRecordError as err:  # garbled while this run ran (a merge, say)
                        raise RunFailed(f"{book.name} finished ({target}) but its run was not recorded: {err}") from None
                done.append(target)
    finally:
        for k, v in env_before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(ipython_dir, ignore_errors=True)
        os.close(held)
    if figures.resolve() == COMMITTED_FIGURES.resolve() and done:  # published: the readable copies follow
        from .render import RENDERED, render

        for target in done:
            render(target, RENDERED, COMMITTED_FIGURES)
        log(f"docs/run: {len(done)} executed notebooks rendered for a git host (figures linked, not copied)")
    reason = readme_refresh_skipped(profile, only=only, overrides=overrides, folder=folder)
    if reason is None:
        refresh_readme(log=log)
    else:
        log(f"README: results block not regenerated ({reason})", flush=True)
    return done


# --------------------------------------------------------------------------------------------
# After a full default run: the README's results block
# --------------------------------------------------------------------------------------------


def readme_refresh_skipped(profile: str, *, only: Iterable[str] | None = None,
                           overrides: dict[str, Any] | None = None, folder: Path | None = None) -> str | None:
    """Why a finished run must not regenerate the README's results block, or None when it should:
    only a run of every notebook of this checkout at the default profile, without ``-p``, whose
    figures went to the committed ``figures/``, makes the numbers the README reports."""
    if profile != "default":
        return f"the {profile} profile; the README reports the default profile"
    if only:
        return "--only ran a subset of the notebooks"
    if overrides:
        return f"-p {', '.join(sorted(overrides))} changed the default profile's parameters"
    figures = run_figures_dir(profile, build_dir() / profile).resolve()
    if figures != (REPO_ROOT / "figures").resolve():
        return f"figures went to {figures} (RESIDSHIFT_FIGURES), not the committed figures/"
    books = Path(folder or notebooks_dir()).resolve()
    if books != (REPO_ROOT / "notebooks").resolve():
        return f"the notebooks came from {books}, not this checkout's notebooks/"
    return None


def refresh_readme(*, log=print) -> None:
    """``python -m residshift report`` in a fresh process (this layer does not import ``study``):
    rewrite the README's results block from ``figures/`` and ``benchmarks/``. Raises RunFailed
    when it fails."""
    import subprocess  # lazy: only a full default run gets here

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    cmd = [sys.executable, "-m", "residshift", "report"]
    proc = subprocess.run(cmd, cwd=str(REPO_ROOT), env=env, capture_output=True, text=True)
    said = (proc.stdout.strip() or proc.stderr.strip()).splitlines()
    if proc.returncode != 0:
        raise RunFailed(
            f"every notebook ran, but regenerating the README failed (`python -m residshift report`, exit "
            f"{proc.returncode}: {said[-1] if said else 'no output'}); fix that, then run the command again"
        )
    log(f"README: results block regenerated from figures/ (python -m residshift report: "
        f"{said[-1] if said else 'done'})", flush=True)


# --------------------------------------------------------------------------------------------
# Dry run: the work a profile asks of each notebook
# --------------------------------------------------------------------------------------------

# Layer counts for the estimate only, when a model's config cannot be read here (not downloaded).
KNOWN_LAYERS = {"smollm2-135m": 30, "gemma3-270m": 18, "google/gemma-2-2b": 26}


def model_layers(name: str) -> int | None:
    """The number of decoder layers of a model name, read from its config where it is on disk."""
    from ..core import models  # lazy: torch ~1 s; dry-run estimates only

    try:
        if name in models.TINY:
            return models._tiny_config(name, 259, 256, 257, 258).num_hidden_layers
        if name in models.EMBEDDED:
            cfg = models.embedded_cache_path(name) / "config.json"
            if cfg.is_file():
                return int(json.loads(cfg.read_text())["num_hidden_layers"])
            if models.EMBEDDED[name].layers:
                return models.EMBEDDED[name].layers
        elif Path(name).expanduser().is_dir():
            cfg = json.loads((Path(name).expanduser() / "config.json").read_text())
            return int(cfg.get("num_hidden_layers") or cfg.get("n_layer"))
        elif name not in KNOWN_LAYERS:
            from transformers import AutoConfig  # lazy: transformers ~0.8 s; hub names only

            return int(AutoConfig.from_pretrained(name.removeprefix("hub:")).num_hidden_layers)
    except Exception:  # noqa: BLE001 - an estimate: an unreadable config falls back below
        pass
    return KNOWN_LAYERS.get(name)


def _n(x: float) -> str:
    for unit, size in (("E", 1e18), ("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= size:
            return f"{x / size:.1f}{unit}"
    return f"{x:g}"


def grid_size(P: dict[str, Any]) -> tuple[int, int] | None:
    """``(configurations, seeds)`` of the training grid at the profile values ``P``, counted by the grid's
    own code (``study.training.grid``, what ``train-grid`` plans), or None when ``P`` has no grid."""
    from types import SimpleNamespace

    from ..study import training  # lazy: torch

    if not P.get("train_tokens"):
        return None
    ns = SimpleNamespace(**P)
    return len(training.grid(ns)), len(training.seeds(ns))


def ladder_tokens(P: dict[str, Any]) -> tuple[int, int]:
    """``(runs, tokens)`` of the scale ladder at ``P``: every shape of ``ladder_shapes`` at
    ``ladder_base_tokens x 4^k`` for ``k < ladder_rungs``, one seed (``study.ladder.rungs``)."""
    shapes, rungs = len(P.get("ladder_shapes") or []), int(P.get("ladder_rungs") or 0)
    return shapes * rungs, shapes * sum(int(P.get("ladder_base_tokens") or 0) * 4 ** k for k in range(rungs))


def estimate_work(keys: Iterable[str], P: dict[str, Any], layers: dict[str, int | None], *,
                  grid: tuple[int, int] | None = None) -> list[str]:
    """Lines describing the work of a notebook that reads ``keys`` of the profile values ``P``.

    ``keys``: what the notebook's ``parameters`` cell declares. Grouped by stage: forward tokens,
    tokens x layers for lens-style passes (every layer's residual decoded), and the fits (tuned lens,
    gates, GPTs trained from scratch) with their training tokens.
    """
    keys = set(keys)
    models = list(P.get("models") or []) + (list(P.get("extra_models") or []) if "extra_models" in keys else [])
    known = [layers.get(m) for m in models]
    total_layers = sum(l for l in known if l) if all(known) else None
    per_layer = "?" if total_layers is None else _n(total_layers)
    lines = []

    def tokens(n_key, w_key):
        return (P.get(n_key) or 0) * (P.get(w_key) or 0)

    def layer_line(what, toks, factor=1):
        tl = "?" if total_layers is None else _n(toks * total_layers * factor)
        extra = f" x {factor}" if factor != 1 else ""
        lines.append(f"{what}: {_n(toks)} tokens x {per_layer} layers (all models){extra} = {tl} token-layers")

    if {"ppl_windows", "ppl_window"} <= keys:
        lines.append(f"perplexity: {len(models)} models x {_n(tokens('ppl_windows', 'ppl_window'))} tokens forward")
    if "lens_sentences" in keys and not {"lens_windows"} & keys:
        lines.append(f"lens on {len(P.get('lens_sentences') or [])} sentences x {len(models)} models")
    if {"lens_windows", "lens_window"} <= keys:
        layer_line("logit lens", tokens("lens_windows", "lens_window"))
    if {"causal_windows", "causal_window"} <= keys:
        n_alpha = len(P.get("causal_alphas") or [])
        n_dir = len(P.get("causal_directions") or [])
        layer_line("causal profile (one forward per layer and edit)", tokens("causal_windows", "causal_window"),
                   n_alpha + n_dir)
    if {"sweep_windows", "sweep_window"} <= keys:
        layer_line("attenuation sweep (tail replays per layer and alpha)", tokens("sweep_windows", "sweep_window"),
                   len(P.get("sweep_alphas") or []))
    if {"atten_lens_windows", "atten_lens_window"} <= keys:
        layer_line("lens under attenuation", tokens("atten_lens_windows", "atten_lens_window"))
    if {"eval_windows", "eval_window"} <= keys:
        items = P.get("eval_items")
        lines.append(f"evaluation: {_n(tokens('eval_windows', 'eval_window'))} tokens per model and variant, "
                     f"{'all' if items is None else items} items per benchmark")
    # the fits, each named (no key-name guessing): (what, fits, of what, steps or None, batch, window, tokens)
    n_models = max(len(models), 1)
    fits = []
    if "tuned_steps" in keys:  # one tuned lens per model
        fits.append(("tuned", n_models, "over the models", P.get("tuned_steps"), P.get("tuned_batch") or 0,
                     P.get("tuned_window") or 0))
    if "gate_steps" in keys:  # a gate per model, kind and seed
        fits.append(("gate", len(P.get("gate_kinds") or [1]) * len(P.get("gate_seeds") or [1]) * n_models,
                     "over the models", P.get("gate_steps"), P.get("gate_batch") or 0, P.get("gate_window") or 0))
    for name, n_fits, of, steps, batch, window in fits:
        per_fit = (steps or 0) * batch * window
        if per_fit:
            lines.append(f"{name} fits: {n_fits} {of}, {steps} steps x {batch} x {window} tokens = "
                         f"{_n(per_fit)} training tokens per fit, {_n(per_fit * n_fits)} in all")
    if "ladder_shapes" in keys:  # the ladder (notebook 10): its own shapes and budgets, not the grid's
        runs, toks = ladder_tokens(P)
        lines.append(f"the scale ladder: {runs} runs ({len(P.get('ladder_shapes') or [])} shapes x "
                     f"{P.get('ladder_rungs')} rungs, one seed), {_n(toks)} training tokens in all; "
                     + ("the notebook trains the rungs its records lack" if P.get("ladder_in_study") else
                        "the notebook reads the committed records (`make ladder` trains them)")
                     + " (`residshift ladder --plan` costs it from a measured speed)")
    elif P.get("train_tokens") and "train_tokens" in keys:  # the grid of GPTs trained from scratch
        per_fit = P["train_tokens"]
        n_cfg, n_seeds = grid or (1, len(P.get("train_seeds") or [1]))
        n_fits = n_cfg * n_seeds
        line = (f"the training grid: {n_cfg} configurations x {n_seeds} seeds = {n_fits} runs of {_n(per_fit)} "
                f"training tokens, {_n(per_fit * n_fits)} in all, as `train-grid --dry-run` plans it (trained once "
                "into results/train/; the grid's other notebooks read the same runs)")
        layers_, width = P.get("train_layers"), P.get("train_width")
        if layers_ and width:  # ~12 L d^2 weights in its blocks
            n_params = 12 * layers_ * width ** 2
            line += f"; ~{_n(n_params)} block weights, ~{_n(6 * n_params * per_fit * n_fits)} FLOPs (6 N D)"
        lines.append(line)
    return lines


def dry_run(profile: str = "default", *, only: Iterable[str] | None = None,
            overrides: dict[str, Any] | None = None, folder: Path | None = None, log=print) -> dict[str, list[str]]:
    """Print (and return) the estimated work per notebook at ``profile``; runs nothing."""
    values = check_profile(profile)
    overrides = overrides or {}
    books = list_notebooks(folder, only)
    check_overrides(books, overrides)
    check_override_values(profile, overrides)
    P = {**values, **overrides}
    layers = {m: model_layers(m) for m in [*(P.get("models") or []), *(P.get("extra_models") or [])]}
    shown = ", ".join(f"{m} ({l if l else '?'} layers)" for m, l in layers.items())
    log(f"profile {profile}: models {shown}; device {P.get('device')}")
    try:
        last = own_runs(profile, run_figures_dir(profile, build_dir() / profile, publish=not overrides))
    except CorruptRecordError as err:  # the estimate does not need it: say so and go on
        log(f"last measured runs at this profile: unavailable ({err})")
        last = None
    out = {}
    for book in books:
        keys = set(declared_parameters(book))
        out[book.stem] = estimate_work(keys, P, layers, grid=grid_size(P) if "train_tokens" in keys else None) \
            or ["(no sized work)"]
        log(f"{book.stem}")
        for line in out[book.stem] + ([runtime_line(profile, last.get(book.stem))] if last is not None else []):
            log(f"    {line}")
    return out
