"""One trainer per run folder on one host: an exclusive ``fcntl.flock`` on ``<run>/train.lock``.

:func:`run_lock` holds it for a block; :func:`run_locked` probes whether another process holds it.
The trainer (``residshift.train.trainer``) holds it while it trains a run, so two trainers on the same
host never train the same folder: the second is refused at once (``python -m residshift train`` exits
with status 75), and the grid launcher (``python -m residshift train-grid``) skips such a run
(``running``).

The file names its holder and is removed on release; a killed holder leaves the file but not the
lock (the kernel drops it), so the next process takes it.

What it does not do: exclude a process on another host. ``flock`` is per host, and on a network file
system shared by several hosts (NFS, Lustre) it may not be seen across them. On a cluster, one run is
one job (``train-grid --engine submitit`` submits each run once, as a Slurm array task; see
``docs/guide.md``), and that, not this lock, keeps two hosts off one folder.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import socket
from pathlib import Path

LOCK_FILE = "train.lock"


class RunLockedError(RuntimeError):
    """Another process holds the run folder's lock (it is training that run now)."""


@contextlib.contextmanager
def run_lock(run: str | Path):
    """Hold an exclusive lock on ``run/train.lock`` for the block (a folder made here and left empty
    is removed again); raise :class:`RunLockedError` at once when another process holds it."""
    run = Path(run)
    made = not run.exists()
    path = run / LOCK_FILE
    while True:
        run.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except FileNotFoundError:  # the folder was removed just now by a holder that made it
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise RunLockedError(f"{run} is being trained by another process ({holder} holds {path}); wait for "
                                 "it to finish (a rerun then reuses or resumes the run) or stop that process") from None
        try:  # the holder that released just now may have removed the file: lock the current one
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                break
        except FileNotFoundError:
            pass
        os.close(fd)
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
        yield path
    finally:
        path.unlink(missing_ok=True)  # while still held: the next process makes a fresh file
        os.close(fd)  # releases the lock
        if made:  # nothing was written: leave no empty folder behind
            with contextlib.suppress(OSError):
                run.rmdir()


def run_locked(run: str | Path) -> bool:
    """Whether another process holds ``run``'s lock now (a probe: takes and drops it at once)."""
    try:
        fd = os.open(Path(run) / LOCK_FILE, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except OSError:
        return True
    finally:
        os.close(fd)
