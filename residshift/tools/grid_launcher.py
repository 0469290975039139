"""``python -m residshift train-grid``: the training grid of notebooks 06-08, planned, costed and
launched outside the notebooks (the ``paper`` profile's grid needs GPUs).

>>> p = plan(profiles.resolve("paper"))            # every run: variant, seed, folder, tokens, status
>>> print(format_plan(p)); print(cost_line(p))    # what --dry-run prints
>>> launch(p, parallel=8)                          # what a real run does (one subprocess per run)

- **The grid** is :func:`residshift.study.training.grid` x ``seeds`` with each run's
  ``TrainConfig`` from :func:`residshift.study.training.config`, so a launched run lands in the very
  folder the notebooks read (``results/train/<label>-<key>``, :func:`trainer.run_dir_for`).
- **Status** of each run from its folder: ``done`` (``summary.json`` and the saved model),
  ``partial`` (a checkpoint: the steps its log records; a status never unpickles a checkpoint),
  ``running`` (another process holds the folder's lock, :func:`residshift.train.lock.run_lock`),
  ``to do``. The run key hashes the tokenizer: where it cannot be loaded here (the ``paper``
  profile's ``gpt2`` offline), the plan says so and reads the status from a folder holding the
  same configuration (its key unchecked).
- **Cost** in device-hours: the tokens still to train over a MEASURED training speed, read from
  ``benchmarks/bench-train*.json`` (:func:`measured_speed`: the entry of the same device kind, the
  same model shape and the run's precision; the machine it was measured on is printed beside it).
  Without one the cost is printed as unknown, never guessed. A GPU entry is a bench file whose
  ``machine`` has ``"device": "cuda"`` (or a ``"gpu"`` name), with the ``shapes`` layout of
  ``benchmarks/bench_train.py``.
- **Launch**: the runs still to do, one after another (``--parallel 1``) or K at once, each in its
  own subprocess ``python -m residshift train --profile P -p field=value ...`` (``torchrun`` with
  ``--gpus-per-run N > 1``), each slot bound to GPUs by ``CUDA_VISIBLE_DEVICES`` (round-robin
  over the visible ones). Finished runs are skipped, partial ones resume from their checkpoint (the
  trainer's resume), runs another process trains are left to it (the trainer holds the run folder's lock
  while it trains, and a second trainer exits at once with status 75, which the launcher reports as
  a skip). With K > 1 a first ``--prepare-only`` subprocess builds the tokenizer and
  the token stream the runs share, and each run logs to ``results/train-grid/<profile>/``.
  Interrupted, the same command resumes. Each finished run gets ``host.json`` (``training.record_host``:
  the 1-min load at its start and end, how many runs trained at once), read by notebook 06's throughput.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Sequence

from ..core import profiles
from ..core.cache import _canonical
from ..core.paths import REPO_ROOT, results_dir
from ..train import trainer as T
from ..train.lock import run_locked
from ..train.trainer import LOCKED_EXIT
from ..study import training

BENCH_GLOB = "bench-train*.json"  # under benchmarks/, written by benchmarks/bench_train.py
STATUSES = ("done", "partial", "running", "to do")


class GridError(ValueError):
    """A request the launcher cannot honour; the message names the fix (exit status 2)."""


# --------------------------------------------------------------------------------------------
# The plan
# --------------------------------------------------------------------------------------------


@dataclass
class PlannedRun:
    """One run of the grid: the variant's ``name`` (as the notebooks label it), the ``seed``, its
    device-resolved ``cfg``, the run ``folder`` (None: the key is unknown here), ``steps`` and
    ``tokens`` of the whole run, ``status`` (:data:`STATUSES`) and the ``steps_done`` it resumes
    from; ``overrides``: the TrainConfig fields that differ from the profile's (the command line)."""

    name: str
    seed: int
    cfg: T.TrainConfig
    folder: Path | None
    steps: int
    tokens: int
    status: str = "to do"
    steps_done: int = 0
    overrides: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return self.cfg.label()

    @property
    def tokens_left(self) -> int:
        return 0 if self.status == "done" else (self.steps - self.steps_done) * self.cfg.tokens_per_step()

    def status_text(self) -> str:
        if self.status == "partial":
            return f"partial ({self.steps_done:,}/{self.steps:,} steps)"
        return self.status


@dataclass
class Plan:
    profile: str
    device: str
    runs: list[PlannedRun]
    variants: int
    seeds: list[int]
    key_note: str | None = None  # why the run folders' keys are unknown here

    def count(self, status: str) -> int:
        return sum(r.status == status for r in self.runs)

    @property
    def tokens_left(self) -> int:
        return sum(r.tokens_left for r in self.runs)


def resolve_profile(profile: str, seeds: Sequence[int] | None = None, params: Sequence[str] = ()):
    """``profiles.resolve`` with ``train_seeds`` replaced by ``seeds`` when given and the ``-p`` items
    ``params`` (train_* keys only) on top, each checked as ``run -p`` checks it."""
    try:
        given = profiles.parse_overrides(params)
    except profiles.OverrideError as err:
        raise GridError(str(err)) from None
    wrong = [k for k in given if not k.startswith("train_")]
    if wrong:
        raise GridError(f"-p {wrong[0]}: train-grid takes train_* keys of the profile (`residshift profiles "
                        f"{profile}` lists them)")
    if seeds:
        given["train_seeds"] = [int(s) for s in seeds]
    try:
        P = profiles.resolve(profile, **given)
    except KeyError as err:
        raise GridError(str(err).strip("'\"")) from None
    except profiles.ParameterError as err:
        raise GridError(f"-p: {err}") from None
    try:
        training.seeds(P)
    except ValueError as err:
        raise GridError(f"--seeds: {err}") from None
    return P


def _overrides(profile: str, cfg: T.TrainConfig) -> dict[str, Any]:
    """The fields of ``cfg`` that ``python -m residshift train --profile <profile>`` must be told."""
    base = profiles.stage(T.TrainConfig, profiles.get(profile))
    return {f.name: getattr(cfg, f.name) for f in fields(cfg) if getattr(cfg, f.name) != getattr(base, f.name)}


def _tokenizer(cfg: T.TrainConfig):
    """The run's tokenizer, or the one-line reason it cannot be loaded here."""
    try:
        return T.load_tokenizer(cfg), None
    except T.TrainError as err:
        why = str(err).split("\n")[0]
        end = why.find(")")  # the loader's own reason, without the hub client's message after it
        why = why[:end + 1] if 0 < end < 200 else why
        return None, why if len(why) <= 200 else why[:197] + "..."


def _logged_step(folder: Path) -> int:
    """The last training step ``folder``'s log records: the checkpoint's step, or up to one
    checkpoint period past it after a kill. Read from the JSON log: a status never unpickles a
    checkpoint (a file handed over by someone else could run code)."""
    try:
        records = T.read_log(folder)
    except (OSError, ValueError):
        return 0
    return max((r["step"] for r in records if isinstance(r, dict) and "loss" in r and type(r.get("step")) is int),
               default=0)


def run_status(folder: Path | None, steps: int) -> tuple[str, int]:
    """``(status, steps done)`` of a run folder (see the module docstring)."""
    if folder is None or not folder.is_dir():
        return "to do", 0
    if (folder / "summary.json").is_file() and (folder / "model" / "config.json").is_file():
        return "done", steps
    done = _logged_step(folder) if (folder / "checkpoint.pt").is_file() else 0
    if run_locked(folder):
        return "running", done
    return ("partial", done) if done else ("to do", 0)


def _folder_by_config(cfg: T.TrainConfig) -> Path | None:
    """A run folder holding ``cfg`` (config.json), for when its key cannot be computed here."""
    want = _canonical(asdict(cfg))
    for cj in sorted((results_dir() / "train").glob(f"{cfg.label()}-*/config.json")):
        try:
            if json.loads(cj.read_text()).get("config") == want:
                return cj.parent
        except (OSError, ValueError):
            continue
    return None


def plan(P, *, only: Sequence[str] | None = None, device: str | None = None) -> Plan:
    """Every run of ``P``'s grid (``only``: those variants) with its folder, tokens and status.

    Loads the tokenizer (to compute the run keys) but no data, and needs no GPU.
    """
    device = device or P.device
    try:
        variants = training._select(training.grid(P), list(only) if only else None)
    except ValueError as err:
        raise GridError(f"--only: {err}") from None
    S = training.seeds(P)
    runs, note, tokenizer = [], None, None
    for v in variants:
        for s in S:
            cfg = training.config(P, v, s).resolved(device)
            if tokenizer is None and note is None:
                tokenizer, why = _tokenizer(cfg)
                if tokenizer is None:
                    note = (f"run keys unknown here ({why}); statuses read from folders holding the same "
                            "configuration")
            folder = (results_dir() / "train" / f"{cfg.label()}-{cfg.key(tokenizer)}" if tokenizer is not None
                      else _folder_by_config(cfg))
            steps = cfg.steps()
            status, done = run_status(folder, steps)
            runs.append(PlannedRun(v.name, s, cfg, folder, steps, steps * cfg.tokens_per_step(), status, done,
                                   _overrides(P.profile, cfg)))
    return Plan(P.profile, device, runs, len(variants), S, note)


def _where(folder: Path | None, label: str) -> str:
    if folder is None:
        return f"results/train/{label}-<key>"
    try:
        return str(folder.relative_to(REPO_ROOT))
    except ValueError:
        return str(folder)


def format_plan(p: Plan) -> list[str]:
    """The plan as printed lines: a header, one line per run, the totals."""
    cfg = p.runs[0].cfg if p.runs else None
    lines = [f"train-grid: profile {p.profile}, device {p.device}: {p.variants} variants x {len(p.seeds)} seeds "
             f"({', '.join(map(str, p.seeds))}) = {len(p.runs)} runs"]
    if cfg is not None:
        lines.append(f"each run: {cfg.layers} layers, width {cfg.width}, context {cfg.context}, "
                     f"{cfg.steps():,} steps x {cfg.tokens_per_step():,} tokens = {cfg.steps() * cfg.tokens_per_step():,} "
                     f"tokens, {'bf16' if cfg.bf16 else 'fp32'}{' compiled' if cfg.compile else ''}")
    if p.key_note:
        lines.append(f"note: {p.key_note}")
    w = max([len(r.name) for r in p.runs] + [7])
    lines.append(f"{'#':>4}  {'variant':<{w}}  {'seed':>4}  {'tokens':>15}  {'status':<26}  run folder")
    for i, r in enumerate(p.runs, 1):
        lines.append(f"{i:>4}  {r.name:<{w}}  {r.seed:>4}  {r.tokens:>15,}  {r.status_text():<26}  "
                     f"{_where(r.folder, r.label)}")
    lines.append("; ".join(f"{s}: {p.count(s)}" for s in STATUSES) + f"; tokens to train: {p.tokens_left:,}")
    return lines


# --------------------------------------------------------------------------------------------
# The cost, from a measured speed
# --------------------------------------------------------------------------------------------


def precision_key(cfg: T.TrainConfig) -> str:
    """The ``benchmarks/bench_train.py`` precision variant of a resolved config."""
    return f"{'bf16' if cfg.bf16 else 'fp32'}-{'compile' if cfg.compile else 'eager'}"


def _bench_device(machine: dict[str, Any]) -> tuple[str, str]:
    """(device kind, device name) of a bench file's ``machine``."""
    kind = machine.get("device") or ("cuda" if machine.get("gpu") else "cpu")
    kind = str(kind).split(":")[0]
    name = machine.get("gpu") if kind == "cuda" else machine.get("cpu")
    return kind, str(name or kind)


def _shape_matches(shape: dict[str, Any], cfg: T.TrainConfig, vocab: int | None) -> bool:
    want = {"n_layer": cfg.layers, "n_head": cfg.heads, "n_embd": cfg.width, "block_size": cfg.context}
    if any(shape.get(k) != v for k, v in want.items()):
        return False
    if vocab is not None and shape.get("vocab_size") != vocab:
        return False
    return shape.get("mlp", "gelu") == cfg.mlp


def _here(kind: str) -> str | None:
    """This machine's device name of ``kind`` (to prefer a measurement made on the same model)."""
    if kind == "cpu":
        return T.cpu_facts()["cpu"]
    try:
        import torch

        return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except Exception:
        return None


def measured_speed(cfg: T.TrainConfig, device: str, *, vocab: int | None = None,
                   bench: Sequence[Path] | None = None) -> dict[str, Any] | None:
    """The measured training speed of ``cfg``'s shape and precision on ``device``'s kind, or None.

    ``{"tokens_per_s", "precision", "machine", "source", "batch"}`` from the first of ``bench`` (default
    ``benchmarks/bench-train*.json``, bench-train.json first) with an entry of the same device kind,
    model shape (layers, heads, width, context, vocabulary where known, MLP) and precision; an entry
    measured on a device of the same name as this machine's wins.
    """
    kind = device.split(":")[0]
    if bench is None:
        folder = REPO_ROOT / "benchmarks"
        bench = sorted(folder.glob(BENCH_GLOB), key=lambda p: (p.name != "bench-train.json", p.name))
    prec = precision_key(cfg)
    found = []
    for path in bench:
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, ValueError):
            continue
        machine = data.get("machine", {}) if isinstance(data, dict) else {}
        bkind, name = _bench_device(machine)
        if bkind != kind:
            continue
        for entry in (data.get("shapes") or {}).values():
            tps = (entry.get("precision") or {}).get(prec, {}).get("tokens_per_s")
            if tps and _shape_matches(entry.get("shape", {}), cfg, vocab):
                found.append({"tokens_per_s": float(tps), "precision": prec, "machine": name,
                              "source": f"benchmarks/{Path(path).name}", "batch": entry["shape"].get("batch")})
    if not found:
        return None
    here = _here(kind)
    return next((f for f in found if f["machine"] == here), found[0])


def _vocab(p: Plan) -> int | None:
    cfg = p.runs[0].cfg
    if cfg.vocab is not None:
        return cfg.vocab
    tok, _ = _tokenizer(cfg)
    return None if tok is None else len(tok)


def cost_line(p: Plan, *, slots: int = 1, gpus_per_run: int = 1, bench: Sequence[Path] | None = None) -> str:
    """What the runs still to train cost, from a measured speed (or "unknown", never a guess)."""
    if not p.runs or p.tokens_left == 0:
        return "cost: nothing left to train"
    cfg = p.runs[0].cfg
    kind = p.device.split(":")[0]
    unit = "GPU" if kind == "cuda" else "CPU"
    speed = measured_speed(cfg, p.device, vocab=_vocab(p), bench=bench)
    shape = (f"{cfg.layers} layers, width {cfg.width}, context {cfg.context}, {cfg.mlp}, "
             f"{precision_key(cfg)}")
    if speed is None:
        return (f"cost: unknown: no measured tokens/s for {_here(kind) or kind} ({shape}); run "
                f"benchmarks/bench_train.py on it")
    hours = p.tokens_left / speed["tokens_per_s"] / 3600
    line = (f"cost: {hours:,.2f} {unit}-hours for {p.tokens_left:,} tokens at {speed['tokens_per_s']:,.0f} "
            f"tokens/s ({speed['precision']}, batch {speed['batch']}, measured on {speed['machine']}, "
            f"{speed['source']})")
    devices = slots * gpus_per_run
    if devices > 1 and unit == "GPU":  # CPU runs at once share the same cores: no such division
        line += f"; about {hours / devices:,.2f} h of wall time on {devices} {unit}s at once (linear scaling assumed)"
    return line


# --------------------------------------------------------------------------------------------
# Launching
# --------------------------------------------------------------------------------------------


def command(run: PlannedRun, profile: str, device: str, *, gpus_per_run: int = 1, quiet: bool = False,
            prepare_only: bool = False) -> list[str]:
    """The subprocess that trains ``run`` into the folder the notebooks read (the trainer's default)."""
    head = [sys.executable, "-m"]
    if gpus_per_run > 1:
        head += ["torch.distributed.run", "--standalone", "--nproc_per_node", str(gpus_per_run), "-m"]
    cmd = head + ["residshift", "train", "--profile", profile, "--device", device]
    for k, v in run.overrides.items():
        cmd += ["-p", f"{k}={json.dumps(list(v) if isinstance(v, tuple) else v)}"]
    if quiet:
        cmd.append("--no-progress")
    if prepare_only:
        cmd.append("--prepare-only")
    return cmd


def visible_gpus() -> list[str]:
    """The GPUs a child may be given: ``CUDA_VISIBLE_DEVICES`` when set, else torch's device count."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [g.strip() for g in env.split(",") if g.strip() and g.strip() != "-1"]
    try:
        import torch

        return [str(i) for i in range(torch.cuda.device_count())]
    except Exception:
        return []


def slot_devices(slots: int, gpus: Sequence[str], gpus_per_run: int = 1) -> list[str | None]:
    """``CUDA_VISIBLE_DEVICES`` of each slot: groups of ``gpus_per_run`` GPUs, round-robin over
    ``gpus`` (None for every slot when there are none: CPU runs)."""
    if not gpus:
        return [None] * slots
    n = len(gpus)
    return [",".join(gpus[(j * gpus_per_run + i) % n] for i in range(gpus_per_run)) for j in range(slots)]


def _spawn(cmd: list[str], *, env: dict[str, str], log: Path | None) -> int:
    """Run one child to the end (its output to ``log``, or to this terminal); its exit status."""
    if log is None:
        return subprocess.run(cmd, env=env, cwd=REPO_ROOT).returncode
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as f:
        f.write(f"\n$ {shlex.join(cmd)}\n".encode())
        f.flush()
        return subprocess.run(cmd, env=env, cwd=REPO_ROOT, stdout=f, stderr=subprocess.STDOUT).returncode


def _slug(run: PlannedRun) -> str:
    return re.sub(r"[^A-Za-z0-9.=]+", "-", f"{run.name}-s{run.seed}").strip("-")


@dataclass
class Outcome:
    run: PlannedRun
    returncode: int
    devices: str | None
    seconds: float
    log: Path | None


def launch(p: Plan, *, parallel: int = 1, gpus_per_run: int = 1, gpus: Sequence[str] | None = None,
           spawn: Callable[..., int] | None = None, echo: Callable[[str], None] = print) -> list[Outcome]:
    """Train the runs of ``p`` that are not done (nor held by another launcher), ``parallel`` at a
    time, each slot on its own GPUs (:func:`slot_devices`); returns each run's outcome."""
    spawn = spawn or _spawn
    if parallel < 1 or gpus_per_run < 1:
        raise GridError(f"--parallel and --gpus-per-run must be at least 1, got {parallel} and {gpus_per_run}")
    cuda = p.device.split(":")[0] == "cuda"
    gpus = list(visible_gpus() if gpus is None else gpus) if cuda else []
    if cuda and not gpus:
        raise GridError(f"device {p.device!r} but no GPU is visible (CUDA_VISIBLE_DEVICES / torch); run on a GPU "
                        "machine, or pass --device cpu")
    if cuda and gpus_per_run > len(gpus):
        raise GridError(f"--gpus-per-run {gpus_per_run} but only {len(gpus)} GPUs are visible")
    todo = [r for r in p.runs if r.status in ("to do", "partial")]
    for r in p.runs:
        if r.status == "running":
            echo(f"skip {r.name}, seed {r.seed}: another process is training it ({_where(r.folder, r.label)})")
    if not todo:
        echo("nothing to train: every run is done" + (" or running elsewhere" if p.count("running") else ""))
        return []
    slots = min(parallel, len(todo))
    devices = slot_devices(slots, gpus, gpus_per_run)
    if cuda and slots * gpus_per_run > len(gpus):
        echo(f"note: {slots} runs x {gpus_per_run} GPUs on {len(gpus)} visible GPUs: some GPUs take two runs")
    quiet = slots > 1
    logs = results_dir() / "train-grid" / p.profile if quiet else None
    base_env = {**os.environ, "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE")}

    def env_for(dev: str | None) -> dict[str, str]:
        return base_env if dev is None else {**base_env, "CUDA_VISIBLE_DEVICES": dev}

    if quiet:  # the shared tokenizer and token stream, once, before the runs that read them
        first = todo[0]
        echo(f"preparing the tokenizer and the token stream ({first.name}, seed {first.seed}) ...")
        rc = spawn(command(first, p.profile, p.device, quiet=True, prepare_only=True), env=env_for(devices[0]),
                   log=logs / "prepare.log")
        if rc != 0:
            echo(f"FAILED to prepare the data (exit {rc}); see {logs / 'prepare.log'}")
            return [Outcome(first, rc, devices[0], 0.0, logs / "prepare.log")]
    queue = list(enumerate(todo, 1))
    lock = threading.Lock()
    outcomes: list[Outcome] = []

    def worker(slot: int) -> None:
        while True:
            with lock:
                if not queue:
                    return
                i, run = queue.pop(0)
            dev = devices[slot]
            log = None if logs is None else logs / f"{_slug(run)}.log"
            resume = f" (resumes at step {run.steps_done:,})" if run.status == "partial" else ""
            echo(f"[{i}/{len(todo)}] start {run.name}, seed {run.seed}{resume}"
                 + (f" on GPU {dev}" if dev is not None else "") + (f"; log {log}" if log else ""))
            t0, start = time.perf_counter(), training.host_snapshot()
            # the trainer holds the run folder's lock while it trains: a run another process took
            # since the plan ends at once with LOCKED_EXIT, and is skipped here
            rc = spawn(command(run, p.profile, p.device, gpus_per_run=gpus_per_run, quiet=quiet),
                       env=env_for(dev), log=log)
            if rc == LOCKED_EXIT:
                echo(f"[{i}/{len(todo)}] skip {run.name}, seed {run.seed}: another process took it")
                continue
            out = Outcome(run, rc, dev, time.perf_counter() - t0, log)
            if rc == 0 and run.folder is not None:  # the load while it trained (issue 37; not in the summary)
                training.record_host(run.folder, start, trained_by="train-grid", parallel_runs=slots, order=i)
            with lock:
                outcomes.append(out)
            echo(f"[{i}/{len(todo)}] {'done' if rc == 0 else f'FAILED (exit {rc})'}: {run.name}, seed {run.seed} "
                 f"in {out.seconds:,.0f} s")

    threads = [threading.Thread(target=worker, args=(j,), daemon=True) for j in range(slots)]
    for t in threads:
        t.start()
    for t in threads:
        while t.is_alive():  # join in slices: Ctrl-C reaches this thread
            t.join(0.5)
    return outcomes


# --------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit status 2 (main_train_grid prints it)
        raise GridError(message)


def parser() -> argparse.ArgumentParser:
    """``train-grid``'s options: the command line parses them once before torch loads (``cli``), this again."""
    from .cli import add_train_grid_arguments

    return add_train_grid_arguments(_Parser(
        prog="residshift train-grid",
        description="Train the grid of notebooks 06-08 (plan, cost from a measured speed, launch)."))


def main_train_grid(argv: Sequence[str] | None = None) -> int:
    """``python -m residshift train-grid``: 0 when every launched run finished, 1 when one failed,
    2 on a bad request (one line on stderr)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if any(a in ("-h", "--help") for a in argv):
        parser().print_help()
        return 0
    try:
        args = parser().parse_args(argv)
        if args.parallel < 1:
            raise GridError(f"--parallel must be at least 1, got {args.parallel}")
        if args.gpus_per_run < 1:
            raise GridError(f"--gpus-per-run must be at least 1, got {args.gpus_per_run}")
        if args.device is not None and args.device.split(":")[0] not in ("cpu", "cuda"):
            raise GridError(f"--device must be cpu or cuda, got {args.device!r}")
        P = resolve_profile(args.profile, args.seeds, args.param)
        p = plan(P, only=args.only, device=args.device)
        for line in format_plan(p):
            print(line)
        print(cost_line(p, slots=args.parallel, gpus_per_run=args.gpus_per_run))
        if args.dry_run:
            return 0
        if args.commands or args.engine == "submitit":
            from . import cluster  # lazy: submitit

            if args.commands:
                print("\n".join(cluster.commands(p, gpus_per_run=args.gpus_per_run)))
                return 0
            outcomes = cluster.submit(p, cluster=args.cluster, gpus_per_run=args.gpus_per_run, nodes=args.nodes,
                                      timeout_min=args.timeout_min, slurm=cluster.slurm_params(args.slurm),
                                      wait=not args.no_wait)
        else:
            outcomes = launch(p, parallel=args.parallel, gpus_per_run=args.gpus_per_run)
    except (GridError, T.TrainError) as err:
        print(f"residshift train-grid: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\ninterrupted: the same command resumes (finished runs are kept, partial ones resume)",
              file=sys.stderr)
        return 130
    failed = [o for o in outcomes if o.returncode != 0]
    for o in failed:
        print(f"FAILED: {o.run.name}, seed {o.run.seed} (exit {o.returncode})"
              + (f"; log {o.log}" if o.log else ""), file=sys.stderr)
    if outcomes and not failed:
        print(f"{len(outcomes)} runs trained; the notebooks 06-08 read them from results/train/")
    return 1 if failed else 0
