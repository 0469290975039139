"""The reader's tour, notebooks 00-02: the glue they call and the figures they draw.

- 00 models-and-data: :func:`load_and_describe` (architecture facts and the two tie checks, measured),
  :func:`perplexity_table` (the dequantization sanity check, cached), :func:`corpus_table`,
  :func:`perplexity_panel`, :func:`tokens_panel`, :func:`tour_numbers`, :func:`tie_table` (the tie
  check, raising where a study model is untied).
- 01 the-causal-shift: :func:`position_table` (what the lens decodes at a few depths),
  :func:`regime_shares`, :func:`layer0_misdecodes` (why layer 0 does not always decode its input),
  :func:`shift_curves` (rank, log-probability and raw cosine of the input and next token per
  layer, and the :func:`crossings` of their medians), :func:`tug_of_war` (its figure),
  :func:`depth_summary`, :func:`crossing_table`; "one curve, three answers": :func:`curve_numbers`
  (:func:`sentence_depths`, notebook 03's fade, crossing and emergence on one sentence, and
  :func:`block0_write`), :func:`one_curve` (its figure), :func:`block0_table`.
- 02 decoding-trajectories: :func:`decode_sentences`, :func:`trajectory_map` (layer x position maps
  of the top-1 lens token: :func:`trajectory_numbers`, drawn by :func:`map_figures` one sentence a
  figure, cut into layer ranges where a deep model would not fit a 16:9 slide),
  :func:`sentence_explorer` (try your own sentence, in JupyterLab),
  :func:`shares_panel`, :func:`regime_table`, :func:`slug`.

The notebooks' findings are written by their authors in markdown and checked against the saved numbers
(``residshift.claims``); nothing here writes sentences from numbers, only tables.

Every figure function returns ``(fig, numbers)``: the notebook publishes both under one name
(:func:`residshift.study.plotting.publish`). :func:`trajectory_map` returns ``({part: fig}, numbers)``:
the numbers under the model's name, each figure under that name and ``-<part>``. Numbers are JSON-ready (``core.outputs.json_ready``): no NaN,
missing is ``None``. Decoded tokens are shown by :func:`token_text` / :func:`display_token`: every
character a printable glyph (leading spaces as ``␣``, bytes that are not UTF-8 as ``⟨E3⟩``).
"""
from __future__ import annotations

import functools
import re
import time
import unicodedata
from types import SimpleNamespace
from typing import Any, Iterable, Mapping, Sequence

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
import torch
from matplotlib import font_manager
from matplotlib.colors import ListedColormap
from matplotlib.lines import Line2D

from ..analysis.stats import crossing_point
from ..core import cache, data
from ..core.outputs import json_ready
from ..core.models import (EMBEDDED, LoadedModel, embedding_gap, load_model, model_fingerprint, same_storage,
                           tie_write_probe)
from ..measure import lens
from ..core.forward import window_losses
from ..measure.evaluate import perplexity
from .plotting import PALETTE, integer_axis

# --------------------------------------------------------------------------------------------
# Shared helpers
# --------------------------------------------------------------------------------------------


def _font_families() -> tuple[str, ...]:
    families = matplotlib.rcParams["font.family"]
    return (families,) if isinstance(families, str) else tuple(families)


@functools.lru_cache(maxsize=8)
def _codepoints_of(families: tuple[str, ...]) -> frozenset[int]:
    """Code points of the fonts matplotlib draws text with for ``families`` (generic names such as
    ``sans-serif`` resolved as the renderer resolves them; fonts not installed are skipped)."""
    prop = font_manager.FontProperties(family=list(families))
    try:
        paths = font_manager.fontManager._find_fonts_by_props(prop)  # the renderer's fallback list
    except AttributeError:  # an older matplotlib: the first font only
        paths = [font_manager.findfont(prop)]
    covered: set[int] = set()
    for path in paths:
        try:
            covered.update(font_manager.get_font([path]).get_charmap())
        except (ValueError, RuntimeError, OSError):  # unreadable: skip
            continue
    return frozenset(covered)


def _drawable_codepoints() -> frozenset[int]:
    """Code points that some font of the current matplotlib font list can draw (read again whenever
    the list changes: ``plotting.set_theme`` adds the Noto fonts after the first figure may have
    been drawn)."""
    return _codepoints_of(_font_families())


# How display_token shows what a font cannot show, or shows as nothing.
NEWLINE, TAB, SPACE, EMPTY, MORE = "\u21b5", "\u21e5", "\u2423", "\u2205", "\u2026"  # ↵ ⇥ ␣ ∅ …
_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")  # SentencePiece byte fallback (Gemma, Llama)


@functools.lru_cache(maxsize=1)
def _byte_level_alphabet() -> dict[str, int]:
    """GPT-2's byte-level BPE alphabet, character -> byte (how SmolLM2's pieces spell raw bytes)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


def token_content(tokenizer, token_id: int) -> str | bytes:
    """What one token stands for: its decoded text, or its raw bytes where the text alone is not
    valid UTF-8 (a byte-fallback piece such as ``<0xE3>``, or a byte-level piece holding part of a
    character), which ``decode`` would turn into ``\\ufffd``."""
    text = tokenizer.decode([int(token_id)])
    convert = getattr(tokenizer, "convert_ids_to_tokens", None)
    if convert is None:
        return text
    piece = convert(int(token_id))
    if not isinstance(piece, str):
        return text
    match = _BYTE_PIECE.fullmatch(piece)
    if match:
        return bytes([int(match.group(1), 16)])
    if "\ufffd" in text and "\ufffd" not in piece:
        alphabet = _byte_level_alphabet()
        if piece and all(c in alphabet for c in piece):
            raw = bytes(alphabet[c] for c in piece)
            if raw.decode("utf-8", errors="replace") == text:  # it is a byte-level piece
                return raw
    return text


def _units(content: str | bytes, fonts: frozenset[int] | None) -> list[str]:
    """``content`` as display units, each one glyph or one readable notation (never split)."""
    text = content.decode("utf-8", errors="surrogateescape") if isinstance(content, bytes) else content
    units: list[str] = []
    pending: list[int] = []  # undecodable bytes, shown together as one ⟨E3 80⟩

    def flush():
        if pending:
            units.append("\u27e8" + " ".join(f"{b:02X}" for b in pending) + "\u27e9")
            pending.clear()

    for ch in text:
        code = ord(ch)
        if 0xDC80 <= code <= 0xDCFF:  # a byte that is not UTF-8 (surrogateescape)
            pending.append(code - 0xDC00)
            continue
        flush()
        cat = unicodedata.category(ch)
        if ch == "\n":
            units.append(NEWLINE)
        elif ch == "\t":
            units.append(TAB)
        elif code < 0x20 or code == 0x7F:  # ASCII control characters: their byte
            units.append(f"\u27e8{code:02X}\u27e9")
        elif (cat[0] == "C" or cat in ("Zl", "Zp") or (cat == "Zs" and ch != " ") or ch == "\ufffd"
              or (fonts is not None and ch != " " and code not in fonts)):
            units.append(f"\u27e8U+{code:04X}\u27e9")  # invisible, undrawable or a replacement char
        elif cat[0] == "M" and not units:
            units.append("\u25cc" + ch)  # a leading combining mark sits on a dotted circle
        else:
            units.append(ch)
    flush()
    # spaces that would be invisible: leading and trailing ones (and runs of them) as ␣
    lead = next((i for i, u in enumerate(units) if u != " "), len(units))
    trail = 0 if lead == len(units) else next(i for i, u in enumerate(reversed(units)) if u != " ")
    return _runs([SPACE] * lead + units[lead: len(units) - trail] + [SPACE] * trail)


def _runs(units: list[str]) -> list[str]:
    """Four or more equal ``␣`` or notation units in a row as one, counted: ``␣×4``, ``⟨U+FFFD⟩×8``."""
    out: list[str] = []
    i = 0
    while i < len(units):
        j = i
        while j < len(units) and units[j] == units[i]:
            j += 1
        n = j - i
        shown = units[i] == SPACE or units[i].startswith("\u27e8")
        out.extend([f"{units[i]}\u00d7{n}"] if shown and n >= 4 else units[i:j])
        i = j
    return out


def display_token(content: str | bytes, width: int | None = None, *, drawable: bool = False) -> str:
    """A token as a reader should see it in a table or a figure: every character a printable glyph.

    - leading and trailing spaces as ``␣`` (``" door"`` -> ``␣door``); four or more equal ``␣`` or
      notations in a row counted (``␣×4``);
    - line breaks as ``↵``, tabs as ``⇥``, the empty string as ``∅``;
    - control characters as their byte (``\\x06`` -> ``⟨06⟩``); bytes that are not UTF-8 (``bytes``
      input, e.g. from :func:`token_content`) likewise, a run of them together (``⟨E3 80⟩``);
    - format, private-use, unassigned and non-ASCII space characters and ``\\ufffd`` as their code
      point (``⟨U+200D⟩``); with ``drawable``, so are characters that no font of the current
      matplotlib theme can draw (a figure never shows an empty box);
    - a leading combining mark on a dotted circle (``◌``).

    ``width`` cuts the text to about that many characters with ``…`` (a notation is never split, and
    the first glyph or notation after any leading ``␣`` is always kept whole).
    """
    units = _units(content, _drawable_codepoints() if drawable else None)
    if not units:
        return EMPTY
    if width is not None and sum(map(len, units)) > width:
        kept, used = [], 0
        for u in units:
            visible = any(k != SPACE for k in kept)  # keep one unit besides leading spaces, whatever its size
            if visible and used + len(u) > width - 1:
                break
            kept.append(u)
            used += len(u)
        units = kept + ([MORE] if len(kept) < len(units) else [])
    return "".join(units)


# The key to display_token's notation (the book prints it beside every notebook that shows tokens):
# (what a token stands for, the width it is cut to, what its shown form means). The shown form is not
# typed here: token_key() computes it with display_token, so the key cannot drift from the function.
TOKEN_KEY: tuple[tuple[str | bytes, int | None, str], ...] = (
    (" door", None, "a space at the start or end of a token (here the token \" door\")"),
    ("    ", None, "four or more equal spaces or notations in a row, counted"),
    ("\n", None, "a line break"),
    ("\t", None, "a tab"),
    ("", None, "the empty string"),
    (b"\xee", None, "a byte that is not UTF-8 on its own (part of a character the tokenizer split), "
                    "in hexadecimal; several such bytes in a row together"),
    ("\x06", None, "an ASCII control character, by its byte in hexadecimal"),
    ("\u200d", None, "an invisible or undrawable character (or the replacement character U+FFFD), "
                     "by its Unicode code point"),
    ("\u0301", None, "a combining mark with no character before it, on a dotted circle"),
    ("international", 6, "a token cut short to fit its cell"),
    ("&#", None, "no notation: any other text is the token's own, as is (&# begins an HTML "
                 "character reference such as &#39;)"),
)
# The functions of this module that show tokens through display_token: a notebook that calls one
# shows tokens, and its page in the book carries the key (residshift.tools.book.shows_tokens).
SHOWS_TOKENS = ("display_token", "token_text", "position_table", "layer0_misdecodes", "trajectory_map")


def token_key() -> list[tuple[str, str]]:
    """``(shown form, meaning)`` of every notation of :func:`display_token` (:data:`TOKEN_KEY`)."""
    return [(display_token(content, width), meaning) for content, width, meaning in TOKEN_KEY]


def token_text(tokenizer, token_id: int, width: int | None = None, *, drawable: bool = False) -> str:
    """One token id as :func:`display_token` shows it (:func:`token_content`: raw bytes where the
    decoded text would hold ``\\ufffd``)."""
    return display_token(token_content(tokenizer, token_id), width, drawable=drawable)


def slug(name: str) -> str:
    """A model name as it appears in figure names: ``google/gemma-2-2b`` -> ``google-gemma-2-2b``."""
    return name.replace("/", "-").replace("_", "-").replace(".", "").lower()



# --------------------------------------------------------------------------------------------
# 00: models and data
# --------------------------------------------------------------------------------------------


def timed_load(name: str, **kwargs) -> tuple[LoadedModel, float]:
    """``load_model`` and the seconds it took."""
    t0 = time.perf_counter()
    loaded = load_model(name, **kwargs)
    return loaded, time.perf_counter() - t0


def model_row(loaded: LoadedModel, load_seconds: float | None = None) -> dict[str, Any]:
    """Architecture facts plus both tie checks, read off the loaded model.

    ``tied_same_tensor``: input embedding and output head share storage (``models.same_storage``,
    what ``load_model``'s own check reads); ``write_probe_diff``: ``models.tie_write_probe``. ``weights`` says where the weights came from (for the embedded models: which
    checkpoint and which GGUF quantization was dequantized).
    """
    lm, _, info = loaded
    module = lm._module
    inp, out = module.get_input_embeddings().weight, module.get_output_embeddings().weight
    row = info.describe()
    spec = EMBEDDED.get(info.name)
    row["weights"] = spec.description if spec else info.source
    row["tied_same_tensor"] = same_storage(inp, out)
    row["write_probe_diff"] = tie_write_probe(module)
    gap = embedding_gap(module)  # untied: how far the head the lens reads is from the input embedding
    row["head_vs_embedding_rel_dist"] = gap.get("rel_frobenius", 0.0 if gap["tied"] else None)
    row["head_vs_embedding_row_cos"] = gap.get("mean_row_cosine", 1.0 if gap["tied"] else None)
    row["dtype"] = str(info.embedding.dtype).removeprefix("torch.")
    if load_seconds is not None:
        row["load_s"] = round(load_seconds, 2)
    return row


def tie_table(models_table, tied: Sequence[str]):
    """Per model, the tie check as a table: one tensor (both checks of :func:`model_row`), the matrix
    the lens reads, and how far the output head is from the input embedding (relative Frobenius
    distance, mean cosine of matching rows; 0 and 1 for a tied model). Raises if a model of ``tied``
    (the study's models) is not one tensor."""
    rows = []
    for name, row in models_table.iterrows():
        one = bool(row["tied_same_tensor"] and row["write_probe_diff"] == 0)
        if name in tied and not one:
            raise AssertionError(f"{name} must tie its embeddings (one tensor): it does not")
        rows.append({"model": name, "one tensor": one, "write probe diff": row["write_probe_diff"],
                     "lens reads": row["decoder"], "head vs embedding (rel. Frobenius)": row["head_vs_embedding_rel_dist"],
                     "mean row cosine": row["head_vs_embedding_row_cos"]})
    return pd.DataFrame(rows).set_index("model")

def load_and_describe(names: Sequence[str], *, device: str = "cpu"):
    """Load every model; return ``({name: LoadedModel}, table)`` with one :func:`model_row` each."""
    loaded, rows = {}, []
    for name in names:
        loaded[name], seconds = timed_load(name, device=device)
        rows.append(model_row(loaded[name], seconds))
    return loaded, pd.DataFrame(rows).set_index("name")


LOGITS_BUDGET = 2**27  # logit entries per forward (512 MiB in fp32): batches shrink for big vocabularies


def sample_perplexity(loaded: LoadedModel, *, corpus: str, split: str, window: int, n: int,
                      seed: int = 0, batch_size: int | None = None) -> dict[str, Any]:
    """Perplexity on ``n`` seeded windows of ``window`` tokens (cached by configuration and code).

    Each window starts fresh (BOS where the model uses one), so early positions have little
    context: this is a sanity check of the weights, not the harness's sliding-window number.
    ``batch_size`` (default: as many windows as keep the logits within :data:`LOGITS_BUDGET`
    entries) changes memory, not the result.
    """
    lm, tok, info = loaded
    batch_size = batch_size or max(1, LOGITS_BUDGET // (window * info.vocab_size))
    config = {"model": info.name, "source": info.source, "corpus": corpus, "split": split,
              "window": window, "n": n, "seed": seed, "bos": info.prepend_bos,
              "dtype": str(info.embedding.dtype)}

    def compute():
        windows = data.token_windows(corpus, split, tok, length=window, n=n, seed=seed,
                                     prepend_bos=info.prepend_bos)
        losses = window_losses(lm, info, windows, batch_size=batch_size)
        if info.prepend_bos:  # predicting the first real token from BOS alone is not language modelling
            losses = losses[:, 1:]
        return perplexity(losses)

    result = dict(cache.cached("sample-perplexity", config, compute, code=sample_perplexity))
    result["model"] = info.name
    result["uniform_ppl"] = info.vocab_size
    return result


def perplexity_table(loaded: Mapping[str, LoadedModel], *, corpus: str, split: str, window: int,
                     n: int, seed: int = 0):
    """:func:`sample_perplexity` of every model, with its ratio to the uniform baseline."""
    ppl = pd.DataFrame([sample_perplexity(m, corpus=corpus, split=split, window=window, n=n, seed=seed)
                        for m in loaded.values()]).set_index("model")
    ppl["ppl / uniform"] = ppl["ppl"] / ppl["uniform_ppl"]
    return ppl


def perplexity_panel(ppl, *, corpus: str, split: str, window: int, n: int):
    """Each model's perplexity (95% CI) against its uniform baseline, on a log axis."""
    fig, ax = plt.subplots(figsize=(6.5, 0.9 + 0.6 * len(ppl)))
    ax.errorbar(ppl["ppl"], ppl.index, xerr=1.96 * ppl["ppl_se"].fillna(0), fmt="o", capsize=4,
                label="model (95% CI over windows)")
    ax.scatter(ppl["uniform_ppl"], ppl.index, marker="|", s=300, color="black",
               label="uniform guess (= vocabulary size)")
    ax.set_xscale("log")
    ax.set_xlim(1, 10 * ppl["uniform_ppl"].max())
    ax.set_ylim(-0.6, len(ppl) - 0.4)
    ax.set_xlabel(f"perplexity on {corpus} {split} (log scale)")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.35), ncol=2, fontsize=9, frameon=False)
    ax.set_title(f"{n} windows × {window} tokens per model")
    numbers = {"corpus": corpus, "split": split, "window": window, "windows": n,
               "models": json_ready(ppl[["ppl", "ppl_se", "loss", "loss_se", "uniform_ppl", "tokens"]])}
    return fig, numbers


def corpus_rows(tokenizers: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every named corpus split with its size; tokens per model for running-text corpora."""
    rows = []
    for name, corpus in data.CORPORA.items():
        for split in corpus.splits:
            row = data.corpus_stats(name, split)
            row.pop("source", None)  # a local path: not something to print or commit
            row["description"] = corpus.description
            if tokenizers and "words" in row:
                text = data.corpus_text(name, split)
                for model, tok in tokenizers.items():
                    row[f"tokens[{model}]"] = int(len(data.tokenize_text(text, tok)))
            rows.append(row)
    return rows


def corpus_table(loaded: Mapping[str, LoadedModel]):
    """:func:`corpus_rows` as a table, token counts under each loaded model's tokenizer."""
    table = pd.DataFrame(corpus_rows({name: m.tokenizer for name, m in loaded.items()}))
    counts = [c for c in table.columns if c in ("rows", "characters", "words") or c.startswith("tokens[")]
    return table.astype({c: "Int64" for c in counts})  # counts stay integers; missing stays missing


def tokens_panel(corpora, models: Sequence[str]):
    """Tokens per whitespace word of each running-text corpus, one bar per tokenizer."""
    text = corpora.dropna(subset=["words"]).copy()
    text["label"] = text["corpus"] + " " + text["split"]
    long = text.melt(id_vars=["label", "words"], value_vars=[f"tokens[{m}]" for m in models],
                     var_name="tokenizer", value_name="tokens")
    long["tokenizer"] = long["tokenizer"].str.slice(7, -1)
    long["tokens per word"] = long["tokens"] / long["words"]
    fig, ax = plt.subplots(figsize=(7, 0.8 + 0.45 * len(text)))
    sns.barplot(long, y="label", x="tokens per word", hue="tokenizer", ax=ax)
    ax.set_ylabel("")
    ax.legend(title="tokenizer", loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    ax.set_title("How finely each tokenizer cuts each running-text corpus")
    numbers = json_ready(long[["label", "tokenizer", "tokens", "words", "tokens per word"]]
                         .to_dict(orient="records"))
    return fig, {"tokens_per_word": numbers}


def perplexity_definitions(loaded: Mapping[str, LoadedModel], *, corpus: str, split: str, window: int,
                           n: int | None, doc_limit: int | None, max_length: int | None, seed: int = 0):
    """Both perplexities of every model (:func:`residshift.measure.evaluate.perplexity_definitions`):
    ours, a strided window of ``window`` tokens (stride ``window // 2``, ``n`` windows of the split),
    and lm-eval's, each article in disjoint windows of ``max_length`` tokens (``doc_limit`` articles);
    token and word perplexity both ways. One row per model (cached by the harness)."""
    from ..measure import evaluate as ev

    config = ev.EvalConfig(context=window, stride=max(1, window // 2), seed=seed)
    rows = [ev.perplexity_definitions(lm, info, tok, corpus=corpus, split=split, config=config, window_limit=n,
                                      doc_limit=doc_limit, max_length=max_length)
            for lm, tok, info in loaded.values()]
    return pd.DataFrame(rows).set_index("model")


def tour_numbers(models_table, ppl, corpora, definitions=None) -> dict[str, Any]:
    """The numbers notebook 00 saves beside its figures (the README's sanity table reads them);
    ``definitions``: :func:`perplexity_definitions`."""
    out = {"models": json_ready(models_table), "perplexity": json_ready(ppl),
           "corpora": json_ready(corpora.to_dict(orient="records"))}
    if definitions is not None:
        out["perplexity_definitions"] = json_ready(definitions)
    return out




# --------------------------------------------------------------------------------------------
# 01: the causal shift on one sentence
# --------------------------------------------------------------------------------------------


def position_table(tokenizer, ids: torch.Tensor, top1: torch.Tensor, layers: Iterable[int]):
    """One row per position ``t``: ``x_t``, ``x_{t+1}`` and the top-1 lens token at each layer.

    ``ids [T]`` (one sequence), ``top1 [L+1, T]``. The last position has no next token and is left
    out.
    """
    show = lambda i: repr(token_text(tokenizer, int(i)))  # noqa: E731 - quotes make spaces visible
    rows = []
    for t in range(len(ids) - 1):
        row = {"t": t, "input x_t": show(ids[t]), "next x_t+1": show(ids[t + 1])}
        row.update({f"layer {l}": show(top1[l, t]) for l in layers})
        rows.append(row)
    return pd.DataFrame(rows).set_index("t")


def regime_shares(labels: torch.Tensor, layers: Iterable[int] | None = None):
    """Share of analysed positions (``t = 1..T-2``) decoded as input / next / other, per layer.

    ``labels [L+1, T]`` from :func:`residshift.measure.lens.classify_decoded`; positions may be
    pooled over sentences by concatenating their analysed columns first.
    """
    lab = torch.as_tensor(labels)[:, 1:-1]
    layers = range(lab.shape[0]) if layers is None else list(layers)
    return pd.DataFrame({f"layer {l}": {r: round(float((lab[l] == k).float().mean()), 2)
                                        for k, r in enumerate(lens.REGIMES)} for l in layers}).T


def layer0_misdecodes(tokenizer, info, ids: torch.Tensor, top1: torch.Tensor):
    """Positions where the lens at ``h_0`` (the token's own scaled embedding) decodes another token.

    For each: the input and decoded tokens, the norms of both rows of ``E`` and the median row norm,
    so a reader can see whether the winning row simply is longer (``|e_v| cos(e_v, e_x) > |e_x|``
    suffices for ``e_v . e_x > e_x . e_x``) or whether the norm's gain must have done it.
    """
    E = info.embedding.detach().float()
    norms = E.norm(dim=-1)
    rows = []
    for t in range(len(ids)):
        x, v = int(ids[t]), int(top1[0, t])
        if x == v:
            continue
        cos = float(torch.nn.functional.cosine_similarity(E[x], E[v], dim=0))
        rows.append({"t": t, "input x_t": repr(token_text(tokenizer, x)),
                     "decoded at layer 0": repr(token_text(tokenizer, v)),
                     "|e_input|": round(float(norms[x]), 2), "|e_decoded|": round(float(norms[v]), 2),
                     "cos(e_decoded, e_input)": round(cos, 2),
                     "longer row wins without gain": bool(float(E[v] @ E[x]) > float(E[x] @ E[x]))})
    table = pd.DataFrame(rows, columns=["t", "input x_t", "decoded at layer 0", "|e_input|",
                                        "|e_decoded|", "cos(e_decoded, e_input)",
                                        "longer row wins without gain"])
    return table.set_index("t"), round(float(norms.median()), 2)


def shift_curves(info, hs: torch.Tensor, ids: torch.Tensor, *, model: str, sentence: str) -> dict[str, Any]:
    """Per layer, the median and quartiles over the analysed positions (``t = 1..T-2``) of the
    rank and log-probability of ``x_t`` and ``x_{t+1}`` under the lens, the median raw cosine
    ``cos(h_l, e_x)``, and the :func:`crossings` of the median curves. JSON-ready."""
    m = lens.residual_metrics(info, hs, ids, options=lens.LensOptions(metrics=["rank", "logprob", "cos_raw"]))
    numbers: dict[str, Any] = {"model": model, "sentence": sentence, "n_layers": info.n_layers,
                               "positions": int(m["rank_input"].shape[-1])}
    for metric in ("rank", "logprob", "cos_raw"):
        for which in lens.WHICH:
            v = m[f"{metric}_{which}"][:, 0, :].double().numpy()  # [L+1, positions]
            q1, med, q3 = np.percentile(v, [25, 50, 75], axis=1)
            numbers[f"{metric}_{which}_median"] = med.tolist()
            if metric != "cos_raw":
                numbers[f"{metric}_{which}_q1"], numbers[f"{metric}_{which}_q3"] = q1.tolist(), q3.tolist()
    numbers["events"] = crossings(numbers, info.n_layers)
    return json_ready(numbers)


def tug_of_war(numbers: Mapping[str, Any]):
    """Rank (all layers, log scale) and log-probability (layers 1..L) of ``x_t`` and ``x_{t+1}``,
    from :func:`shift_curves`: medians over positions, bands the inter-quartile range.

    The log-probability panel starts at layer 1: at ``h_0`` the input token's log-prob is about 0
    and the next token's can be hundreds of nats below, which would flatten every later layer (the
    numbers keep layer 0). Up means "more aligned" in both panels.
    """
    L = numbers["n_layers"]
    layers = np.arange(L + 1)
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    panels = ((axes[0], "rank", "rank (log scale; 1 = top)", 0),
              (axes[1], "logprob", "log-probability (nats)", 1))
    for ax, metric, ylabel, first in panels:
        for which in lens.WHICH:
            med, q1, q3 = (np.asarray(numbers[f"{metric}_{which}_{s}"], dtype=float) for s in ("median", "q1", "q3"))
            label = "input token $x_t$" if which == "input" else "next token $x_{t+1}$"
            ax.plot(layers[first:], med[first:], color=PALETTE[which], label=label, marker="o", ms=3)
            ax.fill_between(layers[first:], q1[first:], q3[first:], color=PALETTE[which], alpha=0.2)
        integer_axis(ax, "x")
        ax.set_xlabel("layer $l$ (0 = the embedding, input of block 0)")
        ax.set_ylabel(ylabel)
    axes[0].set_yscale("log")
    axes[0].invert_yaxis()
    axes[0].set_title("rank, layers 0..L", fontsize=10)
    axes[1].set_title("log-probability, layers 1..L (layer 0: see the table)", fontsize=10)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=2, frameon=False, bbox_to_anchor=(0.5, 0.0))
    fig.suptitle(f"{numbers['model']}: what the residual stream points at, layer by layer "
                 f"(one sentence, {numbers['positions']} positions: median and quartiles)")
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    return fig, dict(numbers)


def depth_summary(numbers: Mapping[str, Any], layers: Iterable[int]):
    """Median rank, log-probability and raw cosine of ``x_t`` / ``x_{t+1}`` at a few layers."""
    cols = {"rank": "rank", "logprob": "log-prob", "cos_raw": "cos(h, e)"}
    rows = {f"layer {l}": {f"{label} {which}": round(float(numbers[f"{metric}_{which}_median"][l]), 3)
                           for metric, label in cols.items() for which in lens.WHICH} for l in layers}
    return pd.DataFrame(rows).T


def crossing_table(numbers: Mapping[str, Any]):
    """The :func:`crossings` stored in :func:`shift_curves`'s numbers, as a table ("never" where an
    event does not happen)."""
    rows = {k: v if v is not None else {"layer": "never", "relative depth": "never"}
            for k, v in numbers["events"].items()}
    return pd.DataFrame(rows).T


def _first(flags) -> int | None:
    return next((l for l, f in enumerate(flags) if f), None)


def crossings(numbers: Mapping[str, Any], n_layers: int) -> dict[str, Any]:
    """Where, on the median curves of :func:`tug_of_war`, the stream changes what it is about.

    - ``rank crossing``: first (interpolated) layer where the next token's median rank beats the
      input token's; ``log-prob crossing`` the same for log-probability;
    - ``input leaves top-1``: first layer where the input token's median rank exceeds 1;
    - ``next becomes top-1``: first layer where the next token's median rank is 1.

    Crossing and "next becomes top-1" are different events: the first can come at layer 1 long
    before the second. Each depth is also given relative to ``L``.
    """
    rin, rnext = numbers["rank_input_median"], numbers["rank_next_median"]
    events = {
        "rank crossing": crossing_point(rin, rnext, orientation=-1),
        "log-prob crossing": crossing_point(numbers["logprob_input_median"], numbers["logprob_next_median"]),
        "input leaves top-1": _first(r > 1 for r in rin),
        "next becomes top-1": _first(r <= 1 for r in rnext),
    }
    return {k: None if v is None else {"layer": round(float(v), 2), "relative depth": round(float(v) / n_layers, 2)}
            for k, v in events.items()}


# --------------------------------------------------------------------------------------------
# 01: one curve, three answers (fade, crossing, emergence) and block 0's write
# --------------------------------------------------------------------------------------------

# The curves one_curve draws: log10 rank (the tug of war's measure, on a scale where the crossing is
# readable) and the top-1 rate (C1.depth's declared metric, verdicts.DEPTH_PRIMARY). Both are among the
# metrics notebook 03 computes the three depths for (alignment.DEPTH_METRICS).
ONE_CURVE_METRICS = ("logrank", "top1")
DEPTH_KINDS = ("fade", "crossing", "emergence")  # the keys of alignment.transition_rows, in depth order
DEPTH_LABEL = {"fade": "input fade", "crossing": "crossing", "emergence": "next-token emergence"}
DEPTH_STYLE = {"fade": (PALETTE["input"], "--"), "crossing": ("black", "-"), "emergence": (PALETTE["next"], "-.")}
CURVE_LABEL = {"logrank": r"$\log_{10}$ rank (mean over positions; 0 = top)",
               "top1": "top-1 rate (share of positions)"}


def sentence_depths(info, hs: torch.Tensor, ids: torch.Tensor, *, n_boot: int, seed: int,
                    metrics: Sequence[str] = ONE_CURVE_METRICS) -> dict[str, Any]:
    """Input fade, crossing and next-token emergence of one sentence, per metric, by notebook 03's own
    computation (:func:`residshift.study.alignment.transition_rows`) with the sentence's analysed
    positions (``t = 1..T-2``) in place of the corpus windows: fade = the mean input curve has fallen
    half-way from ``h_0`` to ``h_L``, crossing = the mean next-token curve first overtakes it,
    emergence = the mean next-token curve has risen half-way from ``h_1`` to ``h_L`` (C1.depth's rule).

    ``hs [L+1, 1, T, d]`` (``forward.collect_residuals``), ``ids [1, T]``. Returns, per metric, the mean
    curves ``input`` and ``next`` (``[L+1]``) and each depth as ``layer`` (interpolated), ``l/L`` and its
    bootstrap interval over positions (``lo``, ``hi`` in layers; ``None`` where the event never happens).
    """
    from . import alignment  # notebook 03's glue: imported here, where the depths are computed

    if hs.ndim != 4 or hs.shape[1] != 1:
        raise ValueError(f"expected the residuals of one sentence, [L+1, 1, T, d]; got {tuple(hs.shape)}")
    bad = [m for m in metrics if m not in alignment.DEPTH_METRICS]
    if bad:
        raise ValueError(f"{bad}: notebook 03 computes the three depths for {list(alignment.DEPTH_METRICS)} only")
    m = lens.residual_metrics(info, hs, ids, options=lens.LensOptions(metrics=list(metrics)))
    per_position = {col: v[:, 0, :].T.double() for col, v in m.items()}  # [positions, L+1]: positions as the sample
    sample = SimpleNamespace(per_seq=per_position, n_layers=info.n_layers)
    rows = alignment.transition_rows(sample, SimpleNamespace(n_boot=n_boot, seed=seed))
    L, out = info.n_layers, {}
    for row in rows:
        metric = row["metric"]
        entry = {w: per_position[f"{metric}_{w}"].mean(0).tolist() for w in lens.WHICH}
        for kind in DEPTH_KINDS:
            e = row[kind]
            entry[kind] = None if e.crossing is None else {
                "layer": round(e.crossing, 3), "l/L": round(e.crossing / L, 3),
                "lo": None if e.lo is None else round(e.lo, 3), "hi": None if e.hi is None else round(e.hi, 3)}
        out[metric] = entry
    return {"n_layers": L, "positions": int(m[f"{metrics[0]}_input"].shape[-1]), "n_boot": n_boot,
            "metrics": {k: out[k] for k in metrics}}


def block0_write(hs: torch.Tensor) -> dict[str, Any]:
    """How large block 0's update is next to the embedding it reads, over the analysed positions
    ``t = 1..T-2`` of one sentence (``hs [L+1, 1, T, d]`` from ``forward.collect_residuals``, one
    nnsight trace): medians over positions of ``|h_1 - h_0| / |h_0|`` (the write's relative size),
    ``|h_1| / |h_0|`` (how much the stream's norm grows) and ``cos(h_0, h_1)`` (how much of the
    embedding's direction is left)."""
    if hs.ndim != 4 or hs.shape[1] != 1 or hs.shape[0] < 2 or hs.shape[2] < 3:
        raise ValueError("expected the residuals of one sentence of at least 3 tokens, [L+1, 1, T, d]; "
                         f"got {tuple(hs.shape)}")
    h0, h1 = hs[0, 0, 1:-1].double(), hs[1, 0, 1:-1].double()
    n0 = h0.norm(dim=-1)
    stat = lambda x: round(float(x.median()), 4)  # noqa: E731 - torch's median: the lower middle value
    return {"positions": int(h0.shape[0]),
            "relative write": stat((h1 - h0).norm(dim=-1) / n0),
            "norm ratio": stat(h1.norm(dim=-1) / n0),
            "cos(h_0, h_1)": stat(torch.nn.functional.cosine_similarity(h0, h1, dim=-1))}


def curve_numbers(info, hs: torch.Tensor, ids: torch.Tensor, *, model: str, sentence: str, n_boot: int,
                  seed: int) -> dict[str, Any]:
    """Everything :func:`one_curve` and :func:`block0_table` read for one model and sentence:
    :func:`sentence_depths`, :func:`block0_write`, and the median ranks of :func:`shift_curves` (with
    its rank crossing) at layers 0 and 1. JSON-ready."""
    ranks = shift_curves(info, hs, ids, model=model, sentence=sentence)
    return json_ready({"model": model, "sentence": sentence,
                       **sentence_depths(info, hs, ids, n_boot=n_boot, seed=seed),
                       "block 0 write": block0_write(hs),
                       "median rank": {w: {f"layer {l}": ranks[f"rank_{w}_median"][l] for l in (0, 1)}
                                       for w in lens.WHICH},
                       "rank crossing (medians)": ranks["events"]["rank crossing"]})


def one_curve(numbers: Mapping[str, Mapping[str, Any]]):
    """One row per model, one panel per metric of :data:`ONE_CURVE_METRICS`: the mean input and
    next-token curves of one sentence over layers, with the input fade, the crossing and the
    next-token emergence (:func:`sentence_depths`) marked as labelled vertical lines.

    ``numbers``: ``{model: curve_numbers(...)}``. Returns ``(fig, numbers)``, the numbers being the
    input's with, per model, the three depths of C1.depth's metric side by side (``depths``).
    """
    if not numbers:
        raise ValueError("no model: pass {model: curve_numbers(...)} for at least one model")
    metrics = list(next(iter(numbers.values()))["metrics"])
    fig, axes = plt.subplots(len(numbers), len(metrics), figsize=(5.6 * len(metrics), 3.3 * len(numbers)),
                             squeeze=False)
    out: dict[str, Any] = {}
    for row, (name, num) in zip(axes, numbers.items()):
        L = num["n_layers"]
        layers = np.arange(L + 1)
        for ax, metric in zip(row, metrics):
            entry = num["metrics"][metric]
            for which in lens.WHICH:
                ax.plot(layers, entry[which], color=PALETTE[which], marker="o", ms=2.5, lw=1.6)
            for k, kind in enumerate(DEPTH_KINDS):  # labels one under another: close events stay readable
                at = entry[kind]
                if at is None:
                    continue
                color, ls = DEPTH_STYLE[kind]
                right = at["layer"] > 0.6 * L  # a label near the right edge goes to the marker's left
                ax.axvline(at["layer"], color=color, ls=ls, lw=1.3)
                ax.annotate(f"{DEPTH_LABEL[kind]}\n{at['layer']:.1f} ({at['l/L']:.2f})", (at["layer"], 1.0 - 0.17 * k),
                            xycoords=("data", "axes fraction"), xytext=(-3 if right else 3, -3),
                            textcoords="offset points", ha="right" if right else "left", va="top", fontsize=7.5,
                            color=color, bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 0.5})
            if lens.ORIENTATION[metric] < 0:
                ax.invert_yaxis()  # up = more aligned, as in the tug of war
            integer_axis(ax, "x")
            ax.set_xlim(-0.5, L + 0.5)
            ax.set_ylabel(CURVE_LABEL.get(metric, metric), fontsize=9)
            ax.set_title(f"{name} (L = {L})" + (": the verdict's metric" if metric == "top1" else ""), fontsize=10)
        row[0].set_xlabel("layer $l$")
        row[-1].set_xlabel("layer $l$")
        primary = "top1" if "top1" in num["metrics"] else metrics[0]
        out[name] = {**num, "depths": {"metric": primary, **{k: num["metrics"][primary][k] for k in DEPTH_KINDS}}}
    handles = [Line2D([], [], color=PALETTE["input"], marker="o", ms=3, label="input token $x_t$"),
               Line2D([], [], color=PALETTE["next"], marker="o", ms=3, label="next token $x_{t+1}$")]
    handles += [Line2D([], [], color=DEPTH_STYLE[k][0], ls=DEPTH_STYLE[k][1], label=DEPTH_LABEL[k]) for k in DEPTH_KINDS]
    fig.legend(handles=handles, loc="lower center", ncol=5, frameon=False, bbox_to_anchor=(0.5, 0.0), fontsize=9)
    first = next(iter(numbers.values()))
    fig.suptitle(f"One sentence, three answers to \"where is the shift?\" ({first['positions']} positions; "
                 "markers: layer (l/L))", fontsize=11)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return fig, json_ready(out)


def block0_table(numbers: Mapping[str, Mapping[str, Any]]):
    """One row per model from :func:`curve_numbers`: block 0's write (:func:`block0_write`: medians over
    positions of ``|h_1 - h_0| / |h_0|``, ``|h_1| / |h_0|`` and ``cos(h_0, h_1)``), both tokens' median
    ranks at layers 0 and 1, and the layer where the median rank curves cross (``None``: never)."""
    rows = []
    for name, num in numbers.items():
        w, r, cross = num["block 0 write"], num["median rank"], num["rank crossing (medians)"]
        rows.append({"model": name, "L": num["n_layers"], "positions": w["positions"],
                     "|h_1 - h_0| / |h_0|": w["relative write"], "|h_1| / |h_0|": w["norm ratio"],
                     "cos(h_0, h_1)": w["cos(h_0, h_1)"],
                     **{f"rank {which} @ l={l}": r[which][f"layer {l}"] for which in lens.WHICH for l in (0, 1)},
                     "rank crossing (layer)": None if cross is None else cross["layer"]})
    return pd.DataFrame(rows).set_index("model")

# --------------------------------------------------------------------------------------------
# 02: decoding trajectories
# --------------------------------------------------------------------------------------------


def decode_sentences(loaded: LoadedModel, sentences: Sequence[str | torch.Tensor], *,
                     max_tokens: int | None = None, refresh: bool = False) -> dict[str, Any]:
    """Top-1 lens token at every layer and position of each sentence, with its regime label.

    A sentence is a text (encoded as the model was trained, :func:`residshift.measure.lens.encode`)
    or its token ids ``[T]`` / ``[1, T]`` (encoded already: nothing is tokenized twice).
    ``max_tokens``: decode only the first ``max_tokens`` tokens (``n_tokens`` keeps the full count).
    Returns ``{"tok", "info", "sentences": [{"sentence", "ids" [T], "n_tokens", "top1" [L+1, T],
    "labels" [L+1, T]}]}`` (labels: :data:`residshift.measure.lens.REGIMES`).

    Cached under ``results/trajectories`` by (model, its weights' fingerprint, the matrix the lens
    reads, the sentences, ``max_tokens``) and the code, so a warm rerun of notebook 02 traces nothing.
    """
    lm, tok, info = loaded
    if info.remote:
        return {"tok": tok, "info": info, "sentences": _decode_sentences(loaded, sentences, max_tokens)}
    config = {"model": info.name, "source": info.source, "decoder": info.decoder,
              "weights": model_fingerprint(lm), "max_tokens": max_tokens,
              "sentences": [s if isinstance(s, str) else torch.as_tensor(s).reshape(-1).tolist() for s in sentences]}
    out = cache.cached("trajectories", config, lambda: _decode_sentences(loaded, sentences, max_tokens),
                       code=decode_sentences, refresh=refresh)
    return {"tok": tok, "info": info, "sentences": out}


def _decode_sentences(loaded: LoadedModel, sentences, max_tokens: int | None) -> list[dict[str, Any]]:
    lm, tok, info = loaded
    out = []
    for sentence in sentences:
        if isinstance(sentence, str):
            ids = lens.encode(tok, info, sentence)
        else:
            ids = torch.as_tensor(sentence).reshape(1, -1)
        n = int(ids.shape[1])
        if max_tokens is not None and n > max_tokens:
            ids = ids[:, :max_tokens]
        top1 = lens.decode_top(lm, info, ids, k=1)["ids"][:, 0, :, 0]
        text = sentence if isinstance(sentence, str) else tok.decode(ids[0].tolist(), skip_special_tokens=True)
        out.append({"sentence": text, "ids": ids[0], "n_tokens": n, "top1": top1,
                    "labels": lens.classify_decoded(top1, ids[0])})
    return out


MAP_FONT = 8.0  # points: the smallest text in a trajectory map (the tokens in its cells)
MAP_TICK_FONT = 9.0  # points: its axis labels
_CELL_W, _CELL_H = 0.66, 0.25  # inches per position / per layer
SLIDE_INCHES = (12.8, 7.2)  # 1920 x 1080 px at savefig.dpi 150: the most one map figure may take
_MAP_MARGIN_W, _MAP_MARGIN_H = 1.0, 1.9  # inches around the cells: layer axis; titles, token axis, legend


def map_chunks(n: int, cell: float, margin: float, room: float) -> list[range]:
    """``range(n)`` cut into the fewest near-equal consecutive chunks whose ``len * cell + margin``
    inches fit in ``room``: the layers or positions one map figure shows."""
    per = int((room - margin) // cell)
    if per < 1:
        raise ValueError(f"not even one cell of {cell} in fits {room} in minus a margin of {margin} in")
    k = -(-n // per)
    size = -(-n // k)
    return [range(i, min(i + size, n)) for i in range(0, n, size)]


def trajectory_numbers(name: str, entry: Mapping[str, Any], *, width: int = 7) -> dict[str, Any]:
    """What a trajectory map shows, JSON-ready: every decoded token (``tokens``, ``top1``: the
    decoded text), what the map draws for it (``tokens_shown``, ``top1_shown``: :func:`token_text`,
    ``" door"`` as ``␣door``, raw bytes as ``⟨E3⟩``, at most ``width`` characters) and every regime
    label, per sentence of ``entry`` (:func:`decode_sentences`)."""
    tok, info = entry["tok"], entry["info"]
    L = info.n_layers
    numbers: dict[str, Any] = {"model": name, "n_layers": L, "regimes": list(lens.REGIMES), "sentences": []}
    for s in entry["sentences"]:
        lab, ids, top1 = s["labels"].numpy(), s["ids"], s["top1"]
        T = lab.shape[1]
        numbers["sentences"].append({
            "sentence": s["sentence"], "tokens": [tok.decode([int(i)]) for i in ids],
            "top1": [[tok.decode([int(i)]) for i in row] for row in top1],
            "tokens_shown": [token_text(tok, ids[t], width, drawable=True) for t in range(T)],
            "top1_shown": [[token_text(tok, top1[l, t], width, drawable=True) for t in range(T)]
                           for l in range(L + 1)],
            "labels": lab.tolist()})
    return numbers


def trajectory_map(name: str, entry: Mapping[str, Any], *, width: int = 7):
    """The top-1 lens token in every (layer, position) cell of each sentence, coloured by regime
    (input = ``x_t``, next = ``x_{t+1}``, other), layer 0 at the bottom. Returns ``(figures, numbers)``:
    ``numbers`` from :func:`trajectory_numbers`, ``figures`` from :func:`map_figures` (one figure per
    sentence, split into layer or position ranges where a sentence would not fit a 16:9 slide)."""
    numbers = trajectory_numbers(name, entry, width=width)
    return map_figures(numbers), numbers


def map_figures(numbers: Mapping[str, Any]) -> dict[str, Any]:
    """``{part: figure}`` for the numbers of :func:`trajectory_numbers` (computed or saved): per
    sentence ``k`` (from 1) the part ``sentence-k``, or ``sentence-k-layers-a-b`` /
    ``...-tokens-c-d`` when its layers or positions are cut into ranges so that each figure fits
    :data:`SLIDE_INCHES` (1920 x 1080 px at the saved dpi). Cells grow with nothing and shrink with
    nothing: token text stays :data:`MAP_FONT` points, axis labels :data:`MAP_TICK_FONT`."""
    L = numbers["n_layers"]
    rows = map_chunks(L + 1, _CELL_H, _MAP_MARGIN_H, SLIDE_INCHES[1])
    out = {}
    for k, s in enumerate(numbers["sentences"], start=1):
        cols = map_chunks(len(s["tokens_shown"]), _CELL_W, _MAP_MARGIN_W, SLIDE_INCHES[0])
        for layers in rows:
            for positions in cols:
                part = f"sentence-{k}"
                if len(rows) > 1:
                    part += f"-layers-{layers[0]}-{layers[-1]}"
                if len(cols) > 1:
                    part += f"-tokens-{positions[0]}-{positions[-1]}"
                out[part] = _map_figure(numbers, s, layers, positions)
    return out


def _map_figure(numbers: Mapping[str, Any], s: Mapping[str, Any], layers: range, positions: range):
    """One sentence's map over ``layers`` x ``positions``, on one axis."""
    L = numbers["n_layers"]
    lab = np.asarray(s["labels"])[layers.start:layers.stop, positions.start:positions.stop]
    width = max(_CELL_W * len(positions) + _MAP_MARGIN_W, 6.5)
    size = (width, max(_CELL_H * len(layers) + _MAP_MARGIN_H, width * 9 / 16 + 0.2))  # never wider than 16:9
    fig, ax = plt.subplots(figsize=size)
    cmap = ListedColormap([PALETTE[r] for r in numbers["regimes"]])
    ax.imshow(lab, cmap=cmap, vmin=0, vmax=len(numbers["regimes"]) - 1, origin="lower", aspect="auto",
              interpolation="nearest", extent=(positions.start - 0.5, positions.stop - 0.5,
                                               layers.start - 0.5, layers.stop - 0.5))
    for l in layers:
        for t in positions:
            ax.text(t, l, s["top1_shown"][l][t], ha="center", va="center", fontsize=MAP_FONT)
    inputs = s["tokens_shown"]
    ticks = [inputs[t] + "\n→ " + (inputs[t + 1] if t + 1 < len(inputs) else "") for t in positions]
    ax.set_xticks(list(positions), ticks, fontsize=MAP_TICK_FONT)
    ax.set_yticks(list(layers))
    ax.tick_params(axis="y", labelsize=MAP_TICK_FONT)
    ax.set_ylabel("layer $l$")
    ax.grid(False)
    fonts = _drawable_codepoints()
    text = "".join(c if c.isspace() or ord(c) in fonts else f"\u27e8U+{ord(c):04X}\u27e9" for c in repr(s["sentence"]))
    where = []
    if len(layers) < L + 1:
        where.append(f"layers {layers[0]}–{layers[-1]} of 0–{L}")
    if len(positions) < len(inputs):
        where.append(f"tokens {positions[0]}–{positions[-1]} of 0–{len(inputs) - 1}")
    ax.set_title(text + (f"  ({'; '.join(where)})" if where else ""), fontsize=10)
    handles = [plt.Rectangle((0, 0), 1, 1, color=PALETTE[k]) for k in ("input", "next", "other")]
    fig.legend(handles, ["decodes the input token $x_t$", "decodes the next token $x_{t+1}$", "other"],
               loc="lower center", ncol=3, fontsize=10, frameon=False, bbox_to_anchor=(0.5, 0.0))
    fig.suptitle(f"{numbers['model']}: top-1 logit-lens token per layer and position "
                 "(x-axis: input token → next token)", fontsize=12)
    fig.tight_layout(rect=(0, 0.35 / size[1], 1, 1))
    return fig


MAX_OWN_TOKENS = 48  # the explorer draws at most this many tokens of the reader's sentence


class SentenceExplorer:
    """Try your own sentence: a text box and a model menu that redraw :func:`trajectory_map`.

    ``draw(text, model)`` does the work (tested without a frontend) and returns ``(figures, numbers)``, or
    raises ``ValueError`` naming the fix for an empty sentence or an unknown model; :meth:`widget`
    wraps it in ipywidgets (a ``Text`` box that redraws on Enter, a ``Dropdown`` of the loaded models,
    an ``Output`` area). Figures drawn here are shown, never saved: the committed figures stay the
    profile's sentences."""

    def __init__(self, loaded: Mapping[str, LoadedModel], *, max_tokens: int = MAX_OWN_TOKENS):
        if not loaded:
            raise ValueError("load at least one model first: SentenceExplorer({name: load_model(name)})")
        self.loaded, self.max_tokens = dict(loaded), max_tokens

    def draw(self, text: str, model: str):
        if model not in self.loaded:
            raise ValueError(f"unknown model {model!r}: choose one of {', '.join(self.loaded)}")
        if not isinstance(text, str) or not text.strip():
            raise ValueError("type a sentence first (an empty text has no tokens to decode)")
        _, tok, info = self.loaded[model]
        ids = lens.encode(tok, info, text)
        if ids.shape[1] > self.max_tokens:
            raise ValueError(f"the sentence has {ids.shape[1]} tokens; the map draws at most {self.max_tokens}: "
                             "shorten it")
        return trajectory_map(model, decode_sentences(self.loaded[model], [ids]))

    def widget(self, sentence: str = ""):
        import ipywidgets as widgets  # lazy: only in an interactive frontend
        from IPython.display import display

        box = widgets.Text(value=sentence, placeholder="type a sentence, then press Enter",
                           description="sentence", continuous_update=False,
                           layout=widgets.Layout(width="70%"))
        menu = widgets.Dropdown(options=list(self.loaded), description="model")
        out = widgets.Output()

        def redraw(_=None):
            out.clear_output(wait=True)
            with out:
                try:
                    figs, _numbers = self.draw(box.value, menu.value)
                except ValueError as err:
                    print(err)
                    return
                for fig in figs.values():
                    display(fig)
                    plt.close(fig)

        box.observe(redraw, names="value")
        menu.observe(redraw, names="value")
        if sentence:
            redraw()
        return widgets.VBox([widgets.HBox([box, menu]), out])


def sentence_explorer(loaded: Mapping[str, LoadedModel], sentence: str = ""):
    """The :class:`SentenceExplorer` widget in an interactive Jupyter frontend; ``None`` (nothing shown)
    in a headless run (papermill, ``residshift run``, a script: ``core.progress.headless``), whose
    executed notebook keeps the profile's sentences only."""
    from ..core.progress import headless

    explorer = SentenceExplorer(loaded)
    return None if headless() else explorer.widget(sentence)


def _pooled_labels(entry: Mapping[str, Any]) -> torch.Tensor:
    """Labels of the analysed positions (1..T-2) of every sentence, side by side ``[L+1, n]``."""
    return torch.cat([s["labels"][:, 1:-1] for s in entry["sentences"]], dim=1)


def shares_panel(trajectories: Mapping[str, Mapping[str, Any]]):
    """Per model: the share of analysed positions decoded as input / next / other at each relative
    depth ``l / L``, as lines (a share of 0 stays visible as a line on the axis)."""
    fig, axes = plt.subplots(1, len(trajectories), figsize=(5.2 * len(trajectories), 3.6), squeeze=False,
                             sharey=True)
    numbers = {}
    for ax, (name, entry) in zip(axes[0], trajectories.items()):
        L = entry["info"].n_layers
        lab = _pooled_labels(entry)
        depth = np.arange(L + 1) / L
        share = {r: (lab == k).double().mean(1).numpy() for k, r in enumerate(lens.REGIMES)}
        for r, style in (("input", "-o"), ("next", "-o"), ("other", "--")):
            ax.plot(depth, share[r], style, color=PALETTE[r] if r != "other" else "0.45", ms=3, label=r)
        ax.set_xlim(-0.02, 1.02)
        ax.set_ylim(-0.03, 1.03)
        ax.set_xlabel("relative depth $l / L$")
        ax.set_title(f"{name} (L = {L}; {lab.shape[1]} positions)", fontsize=10)
        numbers[name] = {"n_layers": L, "positions": int(lab.shape[1]),
                         **{r: [round(float(x), 4) for x in v] for r, v in share.items()}}
    axes[0, 0].set_ylabel("share of positions")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, ["input token $x_t$", "next token $x_{t+1}$", "other"], loc="lower center", ncol=3,
               frameon=False, bbox_to_anchor=(0.5, 0.0))
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    return fig, numbers


def _longest_run(layers: Sequence[int]) -> tuple[int, int] | None:
    best, start = None, None
    for i, l in enumerate(layers):
        if i == 0 or l != layers[i - 1] + 1:
            start = l
        if best is None or l - start > best[1] - best[0]:
            best = (start, l)
    return best


def _quiet_layers(s: Mapping[str, Any]) -> list[int]:
    """Layers ``1..L-1`` where fewer than half of the positions decode either ``x_t`` or ``x_{t+1}``."""
    return [l for l in range(1, s["n_layers"]) if s["input"][l] + s["next"][l] < 0.5]


def _next_over_input(s: Mapping[str, Any]) -> int | None:
    """The first layer where the next-token share exceeds the input share."""
    return _first(s["next"][l] > s["input"][l] for l in range(s["n_layers"] + 1))


def regime_table(shares: Mapping[str, Mapping[str, Any]]):
    """Per model, read off :func:`shares_panel`'s numbers: the input share at layer 0, the largest
    input share at any layer >= 1, the last layer where at least half the positions decode the
    input, the first layer where "next" outnumbers "input", the layers where fewer than half decode
    either (how many, and the longest run of them), the next share at the last layer and the first
    layer where the next share reaches half of it."""
    rows = []
    for name, s in shares.items():
        L = s["n_layers"]
        quiet = _quiet_layers(s)
        run = _longest_run(quiet)
        rows.append({
            "model": name, "L": L, "positions": s["positions"],
            "input @ l=0": round(s["input"][0], 2), "max input @ l≥1": round(max(s["input"][1:]), 2),
            "last l with input ≥ 0.5": max((l for l in range(L + 1) if s["input"][l] >= 0.5), default=None),
            "first l with next > input": _next_over_input(s),
            "layers with input+next < 0.5": len(quiet),
            "longest run of them": f"{run[0]}..{run[1]}" if run else "none",
            "next @ l=L": round(s["next"][L], 2),
            "first l with next ≥ half of it": _first(x >= s["next"][L] / 2 for x in s["next"]) if s["next"][L] > 0
            else None,
        })
    return pd.DataFrame(rows).set_index("model")
