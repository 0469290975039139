"""``make class-key``: the class answer key, committed in ``docs/class/``.

    python -m residshift.tools.classkey [--only 03 04]

1. Runs the class notebooks (``core.profiles.CLASS_NOTEBOOKS``) at the ``class`` profile with
   ``-p show_solutions=true`` through the runner into ``build/class-key/``; their figures and the run's
   ``RUNS.json`` go to ``build/class-key/figures/``. Each solution ends in asserts that check its answer, so
   a failed check stops the run in that cell and nothing is recorded or rendered.
2. Records what the run measured: its entries are merged into ``benchmarks/RUNS-class.json`` (what the
   runner's time line and the book's instructor page read at ``class``), and
   ``benchmarks/exercise_costs.py --collect`` writes each solution's cost and answer check to
   ``benchmarks/exercises-class.json`` (what ``make student PROFILE=class`` puts in its hints).
3. Renders every class notebook executed in ``build/class-key/`` as ``tools.render`` renders the default run
   into ``docs/run/`` (``NN-name.ipynb`` and ``NN-name.md``), into ``docs/class/``, with the PNGs they show
   copied into ``docs/class/figures/`` (only those, so a git host shows them from the markdown). The folder
   is written beside and swapped in whole (``core.cache.output_dir``: a folder residshift did not write
   is refused), so figures of an earlier key do not linger.

It never writes the committed ``figures/`` or ``docs/run/``: both are refused as targets before anything runs.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Iterable

import nbformat

from ..core.cache import OutputDirError, output_dir
from ..core.paths import COMMITTED_FIGURES, REPO_ROOT, build_dir
from ..core.profiles import CLASS_NOTEBOOKS
from ..core.records import duration, load_runs, updating
from . import runner
from .render import FIGURE_KEY, NOTEBOOK, RENDERED, render

PROFILE = "class"
KEY = REPO_ROOT / "docs" / "class"  # committed
BENCHMARKS = REPO_ROOT / "benchmarks"


class TargetError(ValueError):
    """A target the key must not write (figures/, docs/run/); the message is one line naming the fix."""


def shown_figures(nb) -> list[str]:
    """The published figures an executed notebook shows (``publish`` marks each PNG output with its file name)."""
    return list(dict.fromkeys(o.get("metadata", {}).get(FIGURE_KEY) for c in nb.cells for o in c.get("outputs", [])
                              if o.get("metadata", {}).get(FIGURE_KEY) and "image/png" in o.get("data", {})))


def _inside(path: Path, folder: Path) -> bool:
    path, folder = Path(path).resolve(), Path(folder).resolve()
    return path == folder or folder in path.parents


def check_targets(out: Path, executed: Path) -> None:
    """Refuse a key written into (or over) the committed ``figures/`` or ``docs/run/``, or run into them."""
    for what, path in (("--out", out), ("the executed notebooks' folder", executed),
                       ("the figures' folder", Path(executed) / "figures")):
        for kept in (COMMITTED_FIGURES, RENDERED):
            if _inside(path, kept) or _inside(kept, path):
                raise TargetError(f"{what} {path} would write {kept.relative_to(REPO_ROOT)}/, which only a default run "
                                "writes: choose another folder (default docs/class and build/class-key)")


def render_key(executed: Path, out: Path, stems: Iterable[str] = CLASS_NOTEBOOKS, log=print) -> dict[str, int]:
    """Render the executed notebooks ``stems`` (two-digit numbers) of ``executed`` into ``out`` (replaced
    whole), each linking its figures in ``out/figures/``, copied there from ``executed/figures``. Returns the
    files and bytes written."""
    check_targets(out, executed)
    books = [p for p in sorted(Path(executed).glob("*.ipynb")) if NOTEBOOK.match(p.name) and p.name[:2] in set(stems)]
    if not books:
        raise TargetError(f"no executed class notebooks in {executed}: run `python -m residshift.tools.classkey`")
    with output_dir(out, made_by="residshift class-key") as tmp:
        (tmp / "figures").mkdir()
        for path in books:
            for name in shown_figures(nbformat.read(path, as_version=4)):
                shutil.copyfile(Path(executed) / "figures" / name, tmp / "figures" / name)
            s = render(path, tmp, tmp / "figures")
            log(f"{path.stem}: {s['md_bytes'] / 1e3:.0f} kB markdown, {s['ipynb_bytes'] / 1e3:.0f} kB notebook, "
                f"{s['figures_linked']} figures linked, {s['images_inline']} images inline")
    files = [p for p in Path(out).rglob("*") if p.is_file()]
    return {"files": len(files), "bytes": sum(p.stat().st_size for p in files)}


def record_runs(executed: Path, stems: Iterable[str], benchmarks: Path = BENCHMARKS, profile: str = PROFILE) -> Path:
    """Merge the ``profile`` entries of ``executed/figures/RUNS.json`` for ``stems`` into
    ``benchmarks/RUNS-<profile>.json`` (``core.records.committed_runs``)."""
    ran = load_runs(Path(executed) / "figures" / "RUNS.json").get(profile, {})
    target = Path(benchmarks) / f"RUNS-{profile}.json"
    with updating(target) as runs:
        mine = runs.setdefault(profile, {})
        mine.update({stem: e for stem, e in ran.items() if stem[:2] in set(stems)})
        runs[profile] = dict(sorted(mine.items()))
    return target


def collect_exercises(executed: Path, benchmarks: Path = BENCHMARKS, profile: str = PROFILE) -> str:
    """``benchmarks/exercise_costs.py --collect`` on ``executed`` into ``benchmarks/exercises-<profile>.json``
    (what it printed); raises :class:`runner.RunFailed` when an answer check did not pass."""
    table = Path(benchmarks) / f"exercises-{profile}.json"
    cmd = [sys.executable, str(REPO_ROOT / "benchmarks" / "exercise_costs.py"), "--profile", profile, "--collect",
           "--executed", str(executed), "--json", str(table)]
    proc = subprocess.run(cmd, cwd=str(REPO_ROOT), capture_output=True, text=True)
    if proc.returncode != 0:
        said = (proc.stdout + proc.stderr).strip().splitlines()
        raise runner.RunFailed(f"an answer check did not pass at {profile} ({said[-1] if said else 'no output'}); "
                               f"see {table}")
    return proc.stdout


def class_runs_table(runs: dict[str, dict], pages: dict[str, str], session_s: float) -> str:
    """The class notebooks' last measured runs at ``class`` (``runs``: ``{stem: RUNS.json entry}``) as an HTML
    table: wall time, peak memory, the load average when each started, whether it fits a session's run
    (at most ``session_s``), and their sum once every one is measured. ``pages``: stem -> the book's page."""
    by_number = {stem[:2]: (stem, e) for stem, e in runs.items()}
    rows, walls = [], []
    for number in CLASS_NOTEBOOKS:
        stem, e = by_number.get(number, (None, {}))
        name = f'<a href="{pages[stem]}">{number}</a>' if stem in pages else number
        if e.get("wall_s") is None:
            rows.append(f'<tr><td>{name}</td><td colspan="4"><span class="not-measured">not measured yet</span></td></tr>')
            continue
        walls.append(float(e["wall_s"]))
        mem, load = e.get("peak_rss_mib"), (e.get("machine") or {}).get("load_1min_at_start")
        rows.append(f"<tr><td>{name}</td><td>{duration(walls[-1])}</td>"
                    f"<td>{'' if mem is None else f'{mem / 1024:.1f} GiB'}</td><td>{'' if load is None else load}</td>"
                    f"<td>{'yes' if walls[-1] <= session_s else 'no'}</td></tr>")
    if len(walls) == len(CLASS_NOTEBOOKS):
        rows.append(f"<tr><td>in all</td><td>{duration(sum(walls))}</td><td></td><td></td><td></td></tr>")
    return ('<table class="instructor"><thead><tr><th>notebook</th><th>wall time at class</th><th>peak memory</th>'
            f"<th>load average at start</th><th>run fits a session</th></tr></thead><tbody>{''.join(rows)}</tbody></table>")


def build(only: Iterable[str] | None = None, *, executed: Path | None = None, out: Path = KEY,
          benchmarks: Path = BENCHMARKS, profile: str = PROFILE, log=print) -> dict[str, int]:
    """Run, record and render the class answer key (the module's docstring); returns :func:`render_key`'s
    sizes. ``profile`` other than ``class`` is for tests (``smoke``: the same steps on tiny models)."""
    stems = list(only or CLASS_NOTEBOOKS)
    unknown = [s for s in stems if s not in CLASS_NOTEBOOKS]
    if unknown:
        raise runner.UsageError(f"--only {' '.join(unknown)}: the class key holds notebooks {' '.join(CLASS_NOTEBOOKS)}")
    executed = Path(executed) if executed else build_dir() / "class-key"
    check_targets(out, executed)
    before = os.environ.get("RESIDSHIFT_FIGURES")
    os.environ["RESIDSHIFT_FIGURES"] = str(executed / "figures")  # this run's figures, whatever the caller set
    try:
        runner.run_notebooks(profile, only=stems, overrides={"show_solutions": True}, output_dir=executed, log=log)
    finally:
        if before is None:
            os.environ.pop("RESIDSHIFT_FIGURES", None)
        else:
            os.environ["RESIDSHIFT_FIGURES"] = before
    log(collect_exercises(executed, benchmarks, profile).rstrip())
    log(f"run times -> {record_runs(executed, stems, benchmarks, profile)}")
    sizes = render_key(executed, out, log=log)
    log(f"{out}: {sizes['files']} files, {sizes['bytes'] / 1e3:.0f} kB")
    return sizes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="residshift classkey", description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="+", default=None, help=f"some of {' '.join(CLASS_NOTEBOOKS)} (default all)")
    args = ap.parse_args(argv)
    try:
        build(args.only)
    except runner.UsageError as err:
        print(f"residshift classkey: error: {err}", file=sys.stderr)
        return 2
    except (runner.RunFailed, TargetError, OutputDirError) as err:
        print(f"residshift classkey: error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
