"""``make data``: the corpora from the Hugging Face hub into ``data/``, in the layout the loaders read.

``python -m residshift.tools.fetch [--dest DIR] [--only NAME ...] [--force]``

Every corpus comes from the hub copy :func:`residshift.core.data.load_corpus` falls back to (the
same ``datasets.load_dataset`` arguments: :func:`residshift.core.data.hub_arguments`) and is written
in the local files' format (``data/README.md``): tokenized WikiText as text lines, LAMBADA and ARC as
JSON lines, PIQA as questions plus a labels file, tiny-shakespeare as one text file. Each file is
written atomically (a temporary file, then a rename); its sha256 is printed, with whether it equals
the reference copy's (:data:`REFERENCE_SHA256`, the checksums of the curated files). Files already
present are kept (``--force`` rewrites them) and checked: a kept file that is not the reference copy
is named, and the command exits 1 saying how to rewrite it. Offline (``HF_HUB_OFFLINE`` set, or no
network) it stops with one line that says what to do when a file must be downloaded.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable, Iterable

from ..core import data as D
from ..core.cache import atomic_write_bytes
from ..core.paths import cache_dir, work_dir

REFERENCE_SHA256 = D.REFERENCE_SHA256  # the curated copies' sha256 (data/README.md)


class FetchError(RuntimeError):
    """The corpora could not be fetched (the message is one line that names the fix)."""


def default_dest() -> Path:
    """``data/`` in this checkout, or ``./residshift-out/data`` for an installed package (never
    ``$RESIDSHIFT_DATA``: that may be a shared, read-only copy)."""
    return work_dir() / "data"


def _jsonl(rows: Iterable[dict[str, Any]], *, ascii: bool = True) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=ascii) + "\n" for r in rows).encode()


def render_files(name: str, split: str, ds) -> dict[str, bytes]:
    """The local files (path relative to the data folder -> bytes) of a corpus split, from its raw
    hub copy ``ds`` (what ``datasets.load_dataset(**hub_arguments(name, split))`` returns)."""
    corpus = D.get_corpus(name)
    path = corpus.files[split]
    if corpus.wikitext:  # one row per line, with its "\n"; blank lines are "" on the hub, " \n" here
        return {path: "".join((t.rstrip("\n") or " ") + "\n" for t in ds["text"]).encode()}
    if name == "tiny-shakespeare":  # the 90/5/5 splits in order: the whole input.txt
        return {path: "".join(ds["text"]).encode()}
    if name == "lambada":
        return {path: _jsonl({"text": t} for t in ds["text"])}
    if name == "piqa":
        rows = list(ds)
        labels = "".join(f"{int(r['label'])}\n" for r in rows).encode()
        return {path: _jsonl({"goal": r["goal"], "sol1": r["sol1"], "sol2": r["sol2"]} for r in rows),
                D._PIQA_LABELS: labels}
    if name.startswith("arc-"):
        rows = D._normalise_hub(name, ds)
        return {path: _jsonl(({"choices": r["choices"], "query": r["query"], "gold": r["gold"]} for r in rows),
                             ascii=False)}  # llm-foundry's files keep non-ASCII characters as they are
    raise FetchError(f"no file format for corpus {name!r}; add one to residshift/tools/fetch.py")


def _sha256(blob: bytes) -> str:
    return hashlib.sha256(blob).hexdigest()


def _offline_error(detail: str = "") -> FetchError:
    return FetchError(
        "make data needs the Hugging Face hub" + (f" ({detail})" if detail else "") + ": connect to the "
        "network and unset HF_HUB_OFFLINE, or put the files in data/ by hand (layout in data/README.md) "
        "or point RESIDSHIFT_DATA at a folder that has them"
    )


def _default_load(**kwargs):
    import datasets  # lazy: datasets 0.5-1.2 s

    from huggingface_hub.utils import logging as hub_logging  # lazy, with datasets

    datasets.disable_progress_bars()
    hub_logging.set_verbosity_error()  # no retry warnings: a failure ends in one line (FetchError)
    return datasets.load_dataset(**kwargs, cache_dir=str(cache_dir() / "datasets"))


def fetch_corpora(dest: str | Path | None = None, names: Iterable[str] | None = None, *, force: bool = False,
                  load: Callable[..., Any] | None = None, log=print) -> dict[str, str]:
    """Fetch ``names`` (default: every corpus) into ``dest`` (default ``data/``); return
    ``{relative path: sha256}`` of every file written or kept. ``load`` stands in for
    ``datasets.load_dataset`` (tests). Raises :class:`FetchError` offline or on a hub failure."""
    dest = Path(dest) if dest is not None else default_dest()
    names = list(names) if names else list(D.CORPORA)
    for name in names:
        D.get_corpus(name)  # KeyError with the known names before anything is fetched
    load = load or _default_load
    out: dict[str, str] = {}
    for name in names:
        corpus = D.get_corpus(name)
        for split in corpus.splits:
            hub = D.hub_arguments(name, split)
            if hub is None:
                log(f"{name} ({split}): no hub copy; skipped")
                continue
            wanted = [corpus.files[split]] + ([D._PIQA_LABELS] if name == "piqa" else [])
            if not force and all((dest / rel).is_file() for rel in wanted):
                for rel in wanted:
                    out[rel] = digest = _sha256((dest / rel).read_bytes())
                    ref = REFERENCE_SHA256.get(rel)
                    note = ("" if ref is None else "the reference copy" if digest == ref
                            else f"NOT the reference copy {ref[:12]}")
                    log(f"{digest}  {dest / rel}  (kept: already there{'; ' + note if note else ''}; "
                        "--force rewrites it)")
                continue
            if D._hub_offline():
                raise _offline_error("HF_HUB_OFFLINE is set")
            shown = ", ".join(f"{k}={v!r}" for k, v in hub.items())
            try:
                ds = load(**hub)
            except Exception as err:  # the hub raises many kinds of errors
                text = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}".strip()
                if isinstance(err, (ConnectionError, TimeoutError)) or any(
                        w in text.lower() for w in ("offline", "couldn't reach", "connect", "resolve host")):
                    raise _offline_error(f"{name}: {text}") from err
                raise FetchError(f"{name} ({split}): the hub copy ({shown}) could not be loaded: {text}") from err
            for rel, blob in render_files(name, split, ds).items():
                atomic_write_bytes(dest / rel, blob)
                out[rel] = digest = _sha256(blob)
                ref = REFERENCE_SHA256.get(rel)
                note = ("matches the reference copy" if digest == ref else
                        f"differs from the reference copy {ref[:12]}…: same source, other bytes" if ref else "")
                log(f"{digest}  {dest / rel}  ({len(blob):,} bytes{'; ' + note if note else ''})")
    return out


def main_data(argv: list[str] | None = None) -> int:
    """``python -m residshift data`` / ``make data``: exit 0, 1 (offline or hub failure, one line),
    2 (bad arguments)."""
    parser = argparse.ArgumentParser(prog="residshift data", description="Fetch the corpora from the Hugging "
                                     "Face hub into data/ (the layout in data/README.md); prints each file's sha256.")
    parser.add_argument("--dest", default=None, help="data folder to write (default: data/ in this checkout)")
    parser.add_argument("--only", nargs="*", default=None, metavar="NAME",
                        help=f"corpora to fetch (default all: {', '.join(D.CORPORA)})")
    parser.add_argument("--force", action="store_true", help="rewrite files that are already there")
    args = parser.parse_args(argv)
    unknown = [n for n in args.only or [] if n not in D.CORPORA]
    if unknown:
        print(f"residshift data: error: unknown corpus {', '.join(unknown)}; known: {', '.join(D.CORPORA)}",
              file=sys.stderr)
        return 2
    where = Path(args.dest) if args.dest else default_dest()
    kept = {rel for rel in REFERENCE_SHA256 if (where / rel).is_file()} if not args.force else set()
    try:
        files = fetch_corpora(args.dest, args.only, force=args.force)
    except FetchError as err:
        print(f"residshift data: error: {err}", file=sys.stderr)
        return 1
    env = os.environ.get("RESIDSHIFT_DATA")
    print(f"data: {len(files)} files in {where}"
          + (f" (RESIDSHIFT_DATA={env} is set: the loaders read that folder first)" if env else ""))
    differ = [rel for rel, digest in files.items() if rel in kept and REFERENCE_SHA256[rel] != digest]
    if differ:
        print(f"residshift data: error: {len(differ)} kept files are not the reference copies ({', '.join(differ)}): "
              "`make data DATA_ARGS=--force` fetches them again", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main_data())
