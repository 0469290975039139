"""``python -m residshift lens MODEL``: the causal shift of any causal LM, in one command.

What it writes (into ``--out``, default ``results/lens/<model>-<key>/``, where ``key`` hashes the
request, so two requests never share a folder and a repeated one replaces its own):

- ``trajectory-<i>.png`` / ``.json``: notebook 02's trajectory map of each ``--text``: the top-1
  lens token at every layer and position, coloured by whether it is the input token ``x_t``, the
  next token ``x_{t+1}`` or another token (a model too deep for one 16:9 figure gets
  ``trajectory-<i>-layers-<a>-<b>.png``, one per layer range, beside the one ``.json``);
- ``alignment.png`` / ``.json``: notebook 03's alignment curves over a corpus sample (every lens
  metric per layer, input vs next token, 95% bootstrap CIs over windows, the unigram decoder as a
  dotted line), and ``c1.png`` (top-1 rate minus the unigram decoder's, the layers C1's rules read);
- ``shift.json``: the shift table (input fade, crossing, next-token emergence per depth metric, relative
  depth with CIs) and ``c1.json``: the C1 verdict rows (the rules of ``residshift.analysis.verdicts``);
- ``summary.md``: one page linking all of it, with the tied check, the decoder, sizes and times.

Everything goes into a temporary folder beside the target that is renamed into place at the end, so
an interrupted or failed run leaves nothing half-written. An ``--out`` folder that exists must be
empty or one residshift wrote (it holds ``.residshift-output``): a folder of the user's is refused
before anything is loaded, unless ``--force``; so is a folder of its own that holds files it did not
write (:func:`check_rerun`), and ``--out .``. The corpus pass is the lens's cached
``run_lens``: a repeated request recomputes nothing. ``MODEL`` may be a run folder ``residshift train``
wrote: the lens reads its ``model/`` (:func:`model_folder`).

Bad input (a path that is not a model, a ``.gguf`` transformers cannot read, a hub id offline, an
untied model without ``--decoder``, an empty or too short ``--text``, an unknown corpus, ``--windows 0``,
a device torch does not know or does not have, a non-empty ``--out`` folder of the user's) raises
:class:`LensCommandError` with one line naming the problem and the fix; the command line prints it
and exits with status 2.
"""
from __future__ import annotations

import json
import re
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Sequence

MIN_C1_LAYERS = 4  # C1's rules read h_1, a middle layer in h_2..h_(L-2) and h_(L-1)
MAX_MAP_TOKENS = 48  # a trajectory map draws at most this many tokens of a text (the rest is listed as cut)


class LensCommandError(ValueError):
    """A bad request to ``residshift lens``: the message is one line naming the problem and the fix."""


@dataclass(frozen=True)
class LensRequest:
    """What ``residshift lens`` computes. ``None`` fields take the ``profile``'s values
    (``lens_sentences``, ``lens_corpus``, ``lens_split``, ``lens_windows``, ...)."""

    model: str
    texts: tuple[str, ...] | None = None
    corpus: str | None = None
    split: str | None = None
    windows: int | None = None
    window: int | None = None
    decoder: str | None = None  # core.models.DECODERS: None needs a tied model
    device: str = "cpu"
    profile: str = "default"
    out: str | None = None
    force: bool = False  # replace an ``out`` folder residshift did not make (its files are deleted)
    remote: bool | str = False  # True: trace on NDIF; "local": that request run here (nnsight's dry run)

    def key(self) -> str:
        """A short hash of everything that changes the outputs (not ``out`` or ``force``)."""
        import hashlib

        fields = {k: v for k, v in asdict(self).items() if k not in ("out", "force")}
        return hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()[:10]


def check_request(req: LensRequest) -> tuple[LensRequest, Any]:
    """Validate ``req`` before anything is loaded; return it with the profile's values filled in,
    and the resolved profile namespace the lens functions read."""
    from ..core import profiles
    from ..core.cache import OutputDirError, check_output_dir
    from ..core.data import CORPORA
    from ..core.models import DECODERS

    if req.profile not in profiles.PROFILES:
        raise LensCommandError(f"unknown profile {req.profile!r}: use --profile {' | '.join(profiles.PROFILES)}")
    if req.decoder is not None and req.decoder not in ("output", "input"):
        raise LensCommandError(f"--decoder must be 'output' or 'input' (got {req.decoder!r}): "
                               f"output = {DECODERS['output']}; input = {DECODERS['input']}")
    if req.texts is not None:
        empty = [i for i, t in enumerate(req.texts) if not t or not t.strip()]
        if empty:
            raise LensCommandError(f"--text number {empty[0] + 1} is empty: give a sentence, e.g. "
                                   "--text \"The Eiffel Tower is in Paris.\"")
    if req.remote not in (False, True, "local"):
        raise LensCommandError(f"--remote takes no value or 'local' (got {req.remote!r}): --remote traces on NDIF, "
                               "--remote local runs the same request here")
    check_device(req.device)
    if req.out is not None:  # before anything is loaded: a user's folder is never replaced (core.cache)
        check_not_working_folder(req.out)
        try:
            check_output_dir(req.out, force=req.force)
        except OutputDirError as err:
            raise LensCommandError(str(err)) from None
    if req.corpus is not None and req.corpus not in CORPORA:
        raise LensCommandError(f"unknown corpus {req.corpus!r}: use --corpus one of {', '.join(CORPORA)}")
    for what, value, least in (("--windows", req.windows, 2), ("--window", req.window, 4)):
        if value is not None and value < least:
            raise LensCommandError(f"{what} {value} is too small: use at least {least} "
                                   f"({'a bootstrap over windows needs two' if what == '--windows' else 'tokens per window'})")
    P = profiles.resolve(req.profile, lens_corpus=req.corpus, lens_split=req.split, lens_windows=req.windows,
                         lens_window=req.window, device=req.device)
    corpus = CORPORA[P.lens_corpus]
    if P.lens_split not in corpus.files:
        split = req.split if req.split is not None else None
        if split is not None:
            raise LensCommandError(f"{P.lens_corpus} has no split {split!r}: use --split one of "
                                   f"{', '.join(corpus.files)}")
        P.lens_split = next(iter(corpus.files))  # the profile's split is not one of this corpus's
    if P.lens_windows < 2:
        raise LensCommandError(f"--windows {P.lens_windows} is too small: use at least 2")
    filled = replace(req, texts=tuple(req.texts) if req.texts else tuple(P.lens_sentences),
                     corpus=P.lens_corpus, split=P.lens_split, windows=int(P.lens_windows),
                     window=int(P.lens_window))
    return filled, P


def check_not_working_folder(out: str) -> None:
    """``--out .`` (or a folder above it): the folder would be replaced whole, the shell left in a
    deleted one, and with ``--force`` everything in it deleted; refused in one line."""
    here, target = Path.cwd().resolve(), Path(out).expanduser().resolve()
    if target == here or target in here.parents:
        what = "the folder you are working in" if target == here else "a folder above the one you are working in"
        raise LensCommandError(f"--out {out} is {what} ({target}): the command replaces its --out folder whole; "
                               "give a new folder, e.g. --out lens-out")


# the names of the files run() writes (see the module docstring), beside core.cache.OUTPUT_MARKER
OWN_FILES = re.compile(r"(summary\.md|request\.json|shift\.json|(alignment|c1)\.(png|json)"
                       r"|trajectory-\d+(\.json|\.png|-[\w.-]+\.png))")


def check_rerun(target: Path, *, force: bool) -> None:
    """A rerun into a folder this command wrote replaces it whole: refused, naming them, when it holds
    files the command did not write (a note the user added), unless ``force``. Refused rather than kept:
    the new folder takes the old one's place in one rename, and the user's files moved into it would sit
    in a folder a later rerun replaces again; a refusal loses nothing and says what to move."""
    from ..core.cache import OUTPUT_MARKER

    if force or not target.is_dir():
        return
    foreign = sorted(p.name for p in target.iterdir() if p.name != OUTPUT_MARKER and not OWN_FILES.fullmatch(p.name))
    if foreign:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        raise LensCommandError(f"{target} holds files this command did not write ({shown}), and a rerun replaces "
                               "the folder whole: move them out, give another --out, or add --force to delete them")


def model_folder(model: str) -> str:
    """Where ``load_model`` reads ``model``: a trained run folder (``results/train/<label>-<key>``, what
    ``residshift train`` writes) holds its model in ``model/``; anything else is read as given."""
    path = Path(model).expanduser()
    if (path / "model" / "config.json").is_file():
        return str(path / "model")
    if (path / "checkpoint.pt").is_file() and (path / "log.jsonl").is_file():
        raise LensCommandError(f"{model} is a training run that has not finished (no model/ yet): finish it with "
                               "the same `residshift train` command, then give this folder again")
    return model


def check_device(device: str) -> None:
    """Refuse a device torch does not know, or does not have here, with the fix (``core.machine``)."""
    from ..core.machine import device_problem

    why = device_problem(device)
    if why is not None:
        raise LensCommandError(f"--device {device!r} {why}")


def check_texts(loaded, texts: Sequence[str]) -> None:
    """Each ``--text`` encodes to enough tokens for a trajectory map (before the corpus pass runs)."""
    from ..measure.lens import LensError, encode

    _, tok, info = loaded
    for i, text in enumerate(texts, start=1):
        try:
            encode(tok, info, text)
        except LensError as err:
            raise LensCommandError(f"--text number {i}: {err}") from None


def load(req: LensRequest):
    """``load_model(req.model, decoder=req.decoder)`` with every loading error as one line that names the fix."""
    from ..core.models import ModelError, UntiedEmbeddingsError, load_model

    path = Path(req.model).expanduser()
    looks_like_path = req.model.startswith((".", "/", "~")) or path.suffix == ".gguf" or path.exists()
    if looks_like_path and not path.exists():
        raise LensCommandError(f"{req.model} does not exist: give a model folder (with config.json), a .gguf "
                               "file, a hub id (owner/name) or a name from `python -m residshift models`")
    if path.is_file() and path.suffix != ".gguf":
        raise LensCommandError(f"{req.model} is a file but not a .gguf: give a .gguf file or the folder that "
                               "holds config.json")
    try:
        if req.remote is True:  # the config and tokenizer from the hub; the weights stay on NDIF
            return load_model(req.model, remote=True, decoder=req.decoder)
        loaded = load_model(model_folder(req.model), device=req.device, decoder=req.decoder)
        if req.remote == "local":  # every trace goes through nnsight's serialize / deserialize
            loaded.info.remote = "local"
        return loaded
    except UntiedEmbeddingsError as err:
        if "no input or output" in str(err):
            raise LensCommandError(f"{req.model} has no input or output embedding module: the lens cannot "
                                   "read it; pick a causal LM with an embedding and an output head") from err
        raise LensCommandError(f"{req.model} does not tie its input and output embeddings: choose what the "
                               "lens reads through with --decoder output (the model's own head) or "
                               "--decoder input (the input embedding matrix)") from err
    except ModelError as err:
        first = str(err).strip().splitlines()[0]
        raise LensCommandError(f"cannot load {req.model}: {first}") from err
    except (OSError, ValueError) as err:  # transformers' own errors on a folder that is not a model
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise LensCommandError(f"cannot load {req.model}: {first} (is it a causal LM saved with "
                               "save_pretrained?)") from err


def _output(output_dir, target: Path, *, force: bool):
    """``core.cache.output_dir`` with its refusal as a LensCommandError (one line, exit status 2)."""
    import contextlib

    from ..core.cache import OutputDirError

    @contextlib.contextmanager
    def wrapped():
        try:
            with output_dir(target, force=force) as tmp:
                yield tmp
        except OutputDirError as err:
            raise LensCommandError(str(err)) from None

    return wrapped()


def tied_line(lm, info) -> str:
    """The tied check, in words: one tensor, or two with their largest difference."""
    import torch

    module = getattr(lm, "_module", lm)
    inp, out = module.get_input_embeddings(), module.get_output_embeddings()
    if info.tied:
        return "tied: yes (the input embedding and the output head are one tensor)"
    if inp.weight.shape == out.weight.shape and inp.weight.device.type != "meta":  # a remote model's are not here
        with torch.no_grad():
            gap = float((inp.weight.float() - out.weight.float()).abs().max())
        diff = f"largest |E_in - E_out| = {gap:.3g}"
    else:
        diff = f"shapes {tuple(inp.weight.shape)} vs {tuple(out.weight.shape)}"
    return (f"tied: no (the input embedding and the output head are two tensors, {diff}); the lens reads "
            f"through the {'output head' if info.decoder == 'output' else 'input embedding'} (--decoder {info.decoder})")


def default_out(req: LensRequest) -> Path:
    from ..core.paths import results_dir
    from ..study.tour import slug

    return results_dir() / "lens" / f"{slug(Path(req.model).name if Path(req.model).exists() else req.model)}-{req.key()}"


@dataclass
class LensReport:
    """What :func:`run` wrote and measured."""

    out: Path
    files: list[str]
    seconds: dict[str, float]
    info: dict[str, Any]
    rows: list = field(default_factory=list)


def _save(fig, folder: Path, name: str, numbers: Any) -> list[str]:
    import matplotlib.pyplot as plt

    from ..core.outputs import json_ready

    files = []
    if fig is not None:
        fig.savefig(folder / f"{name}.png", format="png", bbox_inches="tight", metadata={"Software": None})
        plt.close(fig)
        files.append(f"{name}.png")
    if numbers is not None:
        (folder / f"{name}.json").write_text(json.dumps(json_ready(numbers), indent=1) + "\n")
        files.append(f"{name}.json")
    return files


def _name_decoder(fig, what: str) -> None:
    """Prefix the figure's title with the model and the decoder it reads through."""
    title = fig._suptitle.get_text() if fig._suptitle is not None else ""
    fig.suptitle(f"{what}: {title}" if title else what, y=1.02)


def _progress_bar(desc: str) -> tuple[Callable[[int, int], None], Callable[[], None]]:
    from ..core.progress import progress

    bar = None

    def update(done: int, total: int) -> None:
        nonlocal bar
        if bar is None:
            bar = progress(total=total, desc=desc, unit="window")
        bar.update(done - bar.n)

    def close() -> None:
        if bar is not None:
            bar.close()

    return update, close


def decoder_label(info) -> str:
    return "logit lens" if info.decoder == "tied" else f"logit lens via {info.decoder} matrix"


def check_windows(P) -> int:
    """How many of the main pass's first windows the preprocessing check reruns: the profile's
    ``lens_check_windows``, at most the windows the main pass read (the rule compares the same draw)."""
    return min(int(P.lens_check_windows or 0), int(P.lens_windows))


def preprocessing_checked(P) -> bool:
    """Whether C1.depth gets notebook 03's preprocessing check: the corpus is WikiText (the one with a
    raw, word-tokenized form beside our detokenized text) and at least 2 check windows (a bootstrap)."""
    from ..core.data import get_corpus

    return bool(get_corpus(P.lens_corpus).wikitext) and check_windows(P) >= 2


def run(req: LensRequest, *, say: Callable[[str], None] = print) -> LensReport:
    """Compute everything ``residshift lens`` writes (see the module docstring) and move it into place."""
    from ..core.cache import output_dir
    from ..core.machine import cpu_facts
    from ..measure import lens, remote_lens
    from ..study import alignment, lens_setups, plotting, tour

    t_all = time.perf_counter()
    req, P = check_request(req)
    target = Path(req.out).expanduser() if req.out else default_out(req)
    check_rerun(target, force=req.force)
    seconds: dict[str, float] = {}
    t0 = time.perf_counter()
    loaded = load(req)
    lm, tok, info = loaded
    check_texts(loaded, req.texts)
    seconds["load"] = time.perf_counter() - t0
    say(f"{req.model}: {info.n_layers} layers, d {info.d_model}, vocab {info.vocab_size} ({info.source}); "
        f"loaded in {seconds['load']:.1f} s")
    say(tied_line(lm, info))
    plotting.set_theme()
    label = decoder_label(info)
    # the default folder is this request's own (results/lens/<model>-<key>): a rerun replaces it
    with _output(output_dir, target, force=req.force or req.out is None) as tmp:
        files: list[str] = []
        t0 = time.perf_counter()
        cut = []
        for i, text in enumerate(req.texts, start=1):
            entry = tour.decode_sentences(loaded, [text], max_tokens=MAX_MAP_TOKENS)
            n = entry["sentences"][0]["n_tokens"]
            if n > MAX_MAP_TOKENS:
                cut.append((i, n))
            figs, numbers = tour.trajectory_map(f"{req.model} ({label})", entry)
            numbers["decoder"] = info.decoder
            parts = list(figs.items())  # one sentence: "sentence-1", or its layer ranges for a deep model
            files += _save(parts[0][1] if len(parts) == 1 else None, tmp, f"trajectory-{i}", numbers)
            if len(parts) > 1:
                for part, fig in parts:
                    files += _save(fig, tmp, f"trajectory-{i}-{part.removeprefix('sentence-1-')}", None)
        seconds["trajectories"] = time.perf_counter() - t0
        for i, n in cut:
            say(f"text {i} has {n} tokens: its map draws the first {MAX_MAP_TOKENS}")

        t0 = time.perf_counter()
        update, close = _progress_bar(f"{Path(req.model).name} lens over {req.corpus} {req.split}")
        try:
            result = lens_setups.pretrained(P).run((lm, tok, info), progress=update,
                                                   metrics=remote_lens.METRICS if info.remote else None)
        finally:
            close()
        counts = lens.corpus_token_counts(tok, info, P.lens_corpus, P.lens_split)
        baseline = lens.unigram_baseline(result, counts)
        seconds["corpus"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        fig, numbers = alignment.metrics_panel({req.model: result}, {req.model: baseline}, P)
        _name_decoder(fig, f"{req.model} · {label}")
        files += _save(fig, tmp, "alignment", {"decoder": info.decoder, "curves": numbers})
        rows = []
        if info.n_layers >= MIN_C1_LAYERS:
            prep = None  # C1.depth's preprocessing check, as notebook 03: the first windows again on raw text
            if preprocessing_checked(P):
                t1 = time.perf_counter()
                prep = {alignment.PREPROCESSING: alignment.lens_pass(
                    loaded, P, metrics=alignment.SENSITIVITY_METRICS, detokenize=False, n=check_windows(P))}
                seconds["raw_text_check"] = time.perf_counter() - t1
                say(f"C1.depth's preprocessing check: {check_windows(P)} windows on raw text in "
                    f"{seconds['raw_text_check']:.0f} s")
            rows = alignment.c1_rows(result, baseline, P, model=req.model, decoder=label, preprocessing=prep)
            fig, numbers = alignment.c1_panel({label: {req.model: result}}, {req.model: baseline}, rows, P)
            _name_decoder(fig, f"{req.model} · {label}")
            files += _save(fig, tmp, "c1", {"decoder": info.decoder, "panel": numbers,
                                             "rows": [r.as_dict() for r in rows]})
        else:
            say(f"{info.n_layers} layers: C1's rules need at least {MIN_C1_LAYERS} (an early, a middle and a late layer)")
        transitions = alignment.transition_rows(result, P)
        shift = alignment.shift_numbers({req.model: transitions})[req.model]
        (tmp / "shift.json").write_text(json.dumps({"model": req.model, "decoder": info.decoder, "rows": shift},
                                                   indent=1) + "\n")
        files.append("shift.json")
        seconds["figures"] = time.perf_counter() - t0
        seconds["total"] = time.perf_counter() - t_all
        meta = {"request": asdict(req), "model": info.describe(), "tied": tied_line(lm, info),
                "decoder": info.decoder, "corpus_windows": result.n_seq,
                "analysed_positions": int(result.tokens["cur"].numel()), "seconds": seconds,
                # the corpus pass's own compute time, also when this call read it from the cache
                "corpus_compute_s": round(float(result.seconds), 1), "machine": cpu_facts()}
        (tmp / "request.json").write_text(json.dumps(meta, indent=1, default=str) + "\n")
        files.append("request.json")
        (tmp / "summary.md").write_text(summary_markdown(req, info, P, rows, transitions, files, seconds,
                                                         tied_line(lm, info), result, cut))
        files.append("summary.md")
    report = LensReport(out=target, files=files, seconds=seconds, info=info.describe(), rows=rows)
    say(f"wrote {len(files)} files to {target} in {seconds['total']:.0f} s "
        f"(load {seconds['load']:.0f} s, maps {seconds['trajectories']:.0f} s, corpus pass {seconds['corpus']:.0f} s, "
        f"figures {seconds['figures']:.0f} s); open {target / 'summary.md'}")
    return report


def _md_row(cells: Sequence[Any]) -> str:
    return "| " + " | ".join(str(c).replace("|", "\\|").replace("\n", " ") for c in cells) + " |"


def summary_markdown(req: LensRequest, info, P, rows, transitions, files, seconds, tied: str, result,
                     cut=()) -> str:
    """The one-page ``summary.md``: what was run, the tied check, the figures, the shift table, C1's rows."""
    from ..analysis import stats
    from ..study.alignment import _rel
    from ..study.tables import marks

    where_traced = "on NDIF" if info.remote is True else "through nnsight's local dry run of the remote path"
    lines = [f"# The causal shift in {req.model}", "",
             f"- model: `{req.model}` ({info.source}); {info.n_layers} layers, d {info.d_model}, "
             f"vocab {info.vocab_size}",
             f"- {tied}",
             *([f"- traced {where_traced}: "
                "decoded inside the trace (`residshift.measure.remote_lens`), so only per-layer metrics came back; "
                f"the metrics: {', '.join(result.columns)}"] if info.remote else []),
             f"- decoder: {decoder_label(info)} (`{info.decoder}`): logits_l = softcap(E · N(h_l)), E the "
             f"{'tied matrix' if info.decoder == 'tied' else info.decoder + ' matrix'}, N the final norm",
             f"- corpus sample: {result.n_seq} windows x {P.lens_window} tokens of {P.lens_corpus} {P.lens_split} "
             f"(seed {P.seed}), {int(result.tokens['cur'].numel())} analysed positions; 95% bootstrap CIs over "
             f"windows ({P.n_boot} resamples)",
             "- time: " + ", ".join(f"{k} {v:.1f} s" for k, v in seconds.items()),
             "", "## Trajectory maps", ""]
    for i, text in enumerate(req.texts, start=1):
        note = next((f" (first {MAX_MAP_TOKENS} of {n} tokens drawn)" for j, n in cut if j == i), "")
        maps = [f for f in files if f.startswith(f"trajectory-{i}") and f.endswith(".png")
                and f[len(f"trajectory-{i}"):len(f"trajectory-{i}") + 1] in (".", "-")]
        links = ", ".join(f"[{f[len(f'trajectory-{i}-'):-4]}]({f})" for f in maps) if len(maps) > 1 else ""
        lines.append(f"- [{text[:80]}](trajectory-{i}.png){note}" if not links else f"- {text[:80]}: {links}{note}")
    lines += ["", "## Alignment over the corpus sample", "",
              "![alignment curves](alignment.png)", "", "![C1](c1.png)" if rows else "", "",
              "## Where the representation shifts (relative depth l / L, 95% CIs)", "",
              _md_row(["metric", "input fade", "crossing", "never-cross share", "next emergence"]),
              _md_row(["---"] * 5)]
    for row in transitions:
        c = row["crossing"]
        lines.append(_md_row([row["metric"], _rel(row["fade"]), _rel(c), f"{c.frac_never:.3f}",
                              _rel(row["emergence"])]))
    if not rows:
        lines += ["", f"C1's rules need at least {MIN_C1_LAYERS} layers; this model has {info.n_layers}.", ""]
    else:
        lines += ["", "## C1's rules on this model", "",
                  "Each rule in full is in `c1.json` (`rows[].rule`) and in `residshift/analysis/verdicts/c1.py` "
                  "(`c1_regimes`, `c1_depth`). " + (
                      f"As in notebook 03, C1.depth's preprocessing check reran the first {check_windows(P)} "
                      "windows on raw (word-tokenized) text: a depth that moves by more than its interval is "
                      "inconclusive." if preprocessing_checked(P) else
                      f"{P.lens_corpus} has no raw / detokenized variant, so C1.depth here has no preprocessing "
                      "check."), "",
                  _md_row(["claim", "verdict", "statistic", "estimate [95% CI]", "why"]), _md_row(["---"] * 5)]
    for r in rows:
        lo, hi = r.ci
        est = stats.format_ci(r.estimate, lo, hi, 3) if r.estimate is not None else "-"
        lines.append(_md_row([r.claim_id, r.verdict + marks(r), r.statistic, est, str(r.details.get("why") or "") or "-"]))
    lines += ["", "Files: " + ", ".join(f"[{f}]({f})" for f in files + ["summary.md"]), ""]
    return "\n".join(lines)
