"""Results keyed by a hash of their configuration, written atomically.

>>> result = cached("lens-metrics", config, lambda: compute(config))   # computes once per config

The key is the sha256 of the configuration as canonical JSON plus a schema version, so a changed
configuration never reuses a stale result. Each entry is ``results/<kind>/<key>.pt`` (torch.save of
any picklable object of tensors, numbers, lists and dicts) with ``<key>.json`` beside it holding the
configuration, for a reader who wants to know what produced a file.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable

import torch

from .paths import results_dir

SCHEMA = 1  # bump when the meaning of cached results changes


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


def config_key(config: dict[str, Any]) -> str:
    payload = json.dumps({"schema": SCHEMA, "config": _canonical(config)}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:20]


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write to a temporary file beside ``path``, then rename: readers never see half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def atomic_torch_save(obj: Any, path: Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        torch.save(obj, tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def entry_path(kind: str, config: dict[str, Any]) -> Path:
    if not kind or "/" in kind or kind.startswith("."):
        raise ValueError(f"cache kind must be a plain name like 'lens-metrics', got {kind!r}")
    return results_dir() / kind / f"{config_key(config)}.pt"


def load(kind: str, config: dict[str, Any]) -> Any | None:
    path = entry_path(kind, config)
    if not path.is_file():
        return None
    return torch.load(path, weights_only=False)


def store(kind: str, config: dict[str, Any], value: Any) -> Path:
    path = entry_path(kind, config)
    atomic_torch_save(value, path)
    atomic_write_text(path.with_suffix(".json"), json.dumps(_canonical(config), indent=2))
    return path


def cached(kind: str, config: dict[str, Any], compute: Callable[[], Any], *, refresh: bool = False) -> Any:
    """Return the stored result for ``(kind, config)``, computing and storing it when absent."""
    if not refresh:
        hit = load(kind, config)
        if hit is not None:
            return hit
    value = compute()
    store(kind, config, value)
    return value
