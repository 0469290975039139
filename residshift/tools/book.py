"""The executed study as a static book that builds and reads offline.

``python -m residshift book --profile smoke`` (or ``make book PROFILE=smoke``) renders the executed
notebooks of a profile (``build/<profile>/NN-name.ipynb``, written by ``python -m residshift run``)
and the figures they saved into ``build/book/<profile>/``:

- ``index.html`` walks through the study in order: each notebook's title, one paragraph (a markdown
  cell tagged ``summary``, else the first paragraph of the notebook's first markdown cell) and its key
  figure (the first image of a cell tagged ``key-figure``, else the first figure the notebook saved,
  else its first image output), then the generated results tables
  (:func:`residshift.tools.report.render` on the profile's numbers);
- ``NN-name.html``: each notebook with its outputs (nbconvert's JupyterLab template), one stderr block
  per cell (:func:`coalesce_streams`) and, where the notebook shows tokens, the key to their glyphs
  (:func:`token_key_html`);
- ``summary.html``: the handout, one printed page: every verdict of ``*verdicts.json`` grouped by
  claim (C1-C4), one row per notebook, model and variant, and one figure per claim
  (:data:`SUMMARY_FIGURES`); nothing on it is typed, every verdict comes from the files;
- ``figures.html``: every figure of ``MANIFEST.json`` with its numbers (.json), its PDF and the
  notebook that made it;
- ``instructor.html``: what each notebook teaches and its measured wall time and peak memory at each
  profile (``RUNS.json`` beside the figures, written by the runner; "not measured yet" otherwise), what
  to run before class and the class run's own times (``benchmarks/RUNS-class.json``, written by
  ``make class-key``: :func:`.classkey.class_runs_table`), then the answer key (:func:`answer_key_html`):
  every exercise's question and its solution as ``make exercises`` executed it into ``build/exercises/``
  (code and outputs, folded), with the solution's time and answer check from
  ``benchmarks/exercises-default.json``; without that folder the section names the command that makes it.

Only whole runs are rendered: a notebook that finished, or one that failed with papermill's error
record (its index entry says where it stopped). A half-run copy (a code cell papermill left
pending or running, or a code cell that never ran: a run killed mid-notebook) is a
:class:`BookError` naming the notebook and the ``python -m residshift run --profile P --only NN``
that reruns it (:func:`unfinished`), and so is a corrupt ``MANIFEST.json`` or ``RUNS.json`` (the
message names the fix: restore it with ``git checkout`` or delete it).

Offline by construction: nothing is fetched when the book is built (the inputs are local files,
the tools are Python packages) or when a page is opened. Equations are pre-rendered to MathML
(``latex2mathml``), which browsers draw natively: no script, no font files, no CDN. nbconvert's
default HTML would load MathJax and require.js from a CDN, and embed the ipywidgets manager from
another when a notebook holds widget state; here the template drops those, tqdm's widget bars become
their final text, the JupyterLab stylesheet is written once to ``_static/`` instead of into every
page, and output images are files instead of base64 in the HTML.

Why this route (measured on the smoke profile's six executed notebooks, 2-core machine at a load
average of 7-8; build = CPU seconds of the whole command, wall time was 1.5-3x that):

=====================================  =========  =======================================  ========
route                                  build      fetched (build / page open)              site
=====================================  =========  =======================================  ========
Jupyter Book 2 (mystmd 1.8.3, Node)    fails      site template from api.mystmd.org / –    –
Jupyter Book 1.0.4 (Sphinx 7.4,        4.7 s      nothing / MathJax 3 from a CDN           13 MB
myst-nb 1.4; 267 MB env of its own)
nbconvert 7.17, default lab HTML       8.0 s      nothing / MathJax 2.7 + require.js (CDN) 4.4 MB
this module (nbconvert + MathML)       11.4 s     nothing / nothing                        6.7 MB
=====================================  =========  =======================================  ========

This module also writes thumbnails and copies every figure (4.1 MB of the 6.7 MB are PNG, PDF and
JSON copies, so the gallery links work); ``build_book`` itself took 14 s wall. A notebook page
weighs 0.37-1.1 MB with its images and the 253 kB stylesheet shared by all pages (nbconvert's
default pages: 0.4-1.4 MB each, stylesheet and images inlined into every page, plus MathJax).
Jupyter Book 1 builds fastest, but brings its own pinned Sphinx stack and still needs a MathJax
copy we would have to ship; Jupyter Book 2 cannot build here at all.

MathML over a math script: KaTeX 0.19 (npm, so Node at setup) is 600 kB of script, CSS and fonts to
vendor, MathJax 2.7 from PyPI (jupyter-server-mathjax) 9.6 MB in 608 files; MathML needs neither
and no script runs at all. latex2mathml typesets all 147 formulas of the notebooks; a formula it
cannot typeset stops the build with an error naming it.
"""
from __future__ import annotations

import copy
import datetime as _dt
import html
import json
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
import nbformat
from latex2mathml.converter import convert
from nbconvert import HTMLExporter
from nbconvert.exporters.templateexporter import TemplateExporter
from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath
from nbconvert.preprocessors import CoalesceStreamsPreprocessor, ExtractOutputPreprocessor
from PIL import Image

from ..analysis.verdicts import CLAIMS
from ..core import profiles
from ..core.cache import check_output_dir, output_dir
from ..core.paths import COMMITTED_FIGURES, REPO_ROOT, build_dir
from ..core.records import CorruptRecordError, read_record
from ..core.records import COMMITTED_PROFILE, committed_runs, duration
from . import report
from .classkey import PROFILE as CLASS_PROFILE, CLASS_NOTEBOOKS, class_runs_table
from ..study import tables

NOTEBOOK = re.compile(r"^(\d\d)-[a-z0-9-]+\.ipynb$")
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
IMAGE_TYPES = ("image/png", "image/jpeg", "image/svg+xml")
_NOTEBOOK_LINK = re.compile(r"^(?:\.{0,2}/)*(?:notebooks/)?(\d\d-[a-z0-9-]+)\.ipynb(#.*)?$")
THUMB_WIDTH = 720
PAPERMILL_ERROR = "papermill-error-cell-tag"  # the banner cells papermill adds to a failed notebook


class BookError(RuntimeError):
    pass


@dataclass
class Chapter:
    """One executed notebook, as the book shows it."""

    path: Path
    number: str
    title_html: str
    summary_html: str
    page: str  # NN-name.html
    key_figure: str | None = None  # site-relative image path
    key_figure_link: str | None = None  # where clicking the key figure goes
    key_figure_caption: str = ""
    error: str | None = None  # the notebook stopped with this error
    figures: list[str] = field(default_factory=list)  # manifest PNG names made by this notebook
    exercises: list[tuple[str, str]] = field(default_factory=list)  # (anchor id, title) per exercise

    @property
    def stem(self) -> str:
        return self.path.stem


# --------------------------------------------------------------------------------------------
# Markdown with MathML equations
# --------------------------------------------------------------------------------------------


def _mathml(tex: str, display: bool) -> str:
    try:
        out = convert(tex, display="block" if display else "inline")
    except Exception as err:  # latex2mathml raises its own exception types on malformed input
        raise BookError(f"cannot typeset the formula {tex!r} as MathML ({type(err).__name__}: {err}); "
                        "fix its LaTeX") from None
    unknown = re.findall(r">(\\[A-Za-z]+)<", out)  # commands latex2mathml does not know stay as text
    if unknown:
        raise BookError(f"cannot typeset the formula {tex!r} as MathML: unknown command(s) {unknown}; "
                        "rewrite it with standard LaTeX commands")
    return out


def _renderer_class():
    class MathMLRenderer(IPythonRenderer):
        """nbconvert's markdown renderer, with equations turned into MathML instead of left for MathJax."""

        def block_math(self, body: str) -> str:
            return _mathml(body, display=True)

        def inline_math(self, body: str) -> str:
            return _mathml(body, display=False)

        def latex_environment(self, name: str, body: str) -> str:
            return _mathml(f"\\begin{{{name}}}{body}\\end{{{name}}}", display=True)

        def link(self, text: str, url: str, title: str | None = None) -> str:
            # A link to another notebook of the study opens its page in the book.
            m = _NOTEBOOK_LINK.match(url)
            return super().link(text, f"{m.group(1)}.html{m.group(2) or ''}" if m else url, title)

    return MathMLRenderer


def markdown_html(source: str, *, anchors: bool = False) -> str:
    """Markdown (with ``$...$`` math) to HTML, equations as MathML."""
    renderer = _renderer_class()(escape=False, exclude_anchor_links=not anchors)
    return MarkdownWithMath(renderer=renderer).render(source)


def _inline_html(source: str) -> str:
    out = markdown_html(source).strip()
    return out[3:-4] if out.startswith("<p>") and out.endswith("</p>") else out


# --------------------------------------------------------------------------------------------
# Reading the executed notebooks
# --------------------------------------------------------------------------------------------


def _tags(cell) -> list[str]:
    return list(cell.get("metadata", {}).get("tags", []))


def _paragraphs(source: str) -> list[str]:
    return [p.strip() for p in re.split(r"\n\s*\n", source) if p.strip()]


def title_and_summary(nb, fallback: str) -> tuple[str, str]:
    """Markdown of the notebook's title (its first heading) and of its one-paragraph summary.

    The summary is the first paragraph of a markdown cell tagged ``summary``, else the first
    paragraph of the first markdown cell that is not a heading."""
    md = [c for c in nb.cells if c.cell_type == "markdown" and c.source.strip()
          and PAPERMILL_ERROR not in _tags(c)]
    title = fallback
    for cell in md:
        heading = next((p for p in _paragraphs(cell.source) if p.startswith("#")), None)
        if heading:
            title = heading.splitlines()[0].lstrip("#").strip()
            break
    tagged = [c for c in md if "summary" in _tags(c)]
    for cell in tagged + md[:1]:
        body = [p for p in _paragraphs(cell.source) if not p.startswith("#")]
        if body:
            return title, body[0]
    return title, ""


def _widget_text(state: dict, model_id: str) -> str | None:
    """The text a (tqdm) widget showed last: its HTML labels and progress counts, in order."""
    model = state.get(model_id)
    if model is None:
        return None
    s = model.get("state", {})
    name = model.get("model_name", "")
    if name in ("HBoxModel", "VBoxModel", "BoxModel"):
        parts = [_widget_text(state, c.replace("IPY_MODEL_", "")) for c in s.get("children", [])]
        return " ".join(p for p in parts if p)
    if name in ("HTMLModel", "LabelModel", "TextModel"):
        text = html.unescape(re.sub(r"<[^>]+>", "", str(s.get("value", ""))))
        return re.sub(r"[\xa0\u2007]", " ", text).strip()
    if "Progress" in name:
        value, top = s.get("value", 0), s.get("max", 0)
        return "|" + "█" * round(20 * value / top) + " " * (20 - round(20 * value / top)) + "|" if top else ""
    return None


def static_widgets(nb) -> None:
    """Replace widget outputs (tqdm's progress bars) by the text they showed last; drop widget state.

    A page then needs no widget manager script (nbconvert would load one from a CDN)."""
    state = nb.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if WIDGET_VIEW not in data:
                continue
            text = _widget_text(state, data[WIDGET_VIEW].get("model_id", ""))
            if text is None:
                text = data.get("text/plain", "")
            out["data"] = {"text/plain": text}
    nb.metadata.pop("widgets", None)



def coalesce_streams(nb) -> None:
    """One stderr block per cell, showing what the terminal showed last.

    nbconvert's :class:`~nbconvert.preprocessors.CoalesceStreamsPreprocessor` merges consecutive
    stream outputs of the same name and collapses carriage-return redraws (a tqdm bar's updates) to
    their final state. tqdm writes to stderr while the cell prints to stdout, so a loop over models
    still leaves one stderr block per model between the printed lines (38 in 04's sweep cell at the
    default profile, 114 in 05's fit cell). Then: stderr blocks that show nothing (a bar that cleared
    itself, a lone newline) are dropped, the others are joined, one per line, into one block where the
    first stood, and the stdout blocks that now meet are merged by the same preprocessor."""
    merge = CoalesceStreamsPreprocessor()
    for i, cell in enumerate(nb.cells):
        if not cell.get("outputs"):
            continue
        merge.preprocess_cell(cell, {}, i)
        errs = [o for o in cell.outputs if o.output_type == "stream" and o.name == "stderr"]
        if not errs:
            continue
        shown = [o.text.replace("\r", "").rstrip().lstrip("\n") for o in errs]
        shown = [t for t in shown if t.strip()]
        first = next(j for j, o in enumerate(cell.outputs) if o is errs[0])  # no stderr before it
        rest = [o for o in cell.outputs if not (o.output_type == "stream" and o.name == "stderr")]
        if shown:
            errs[0].text = "\n".join(shown) + "\n"
            rest.insert(first, errs[0])
        cell.outputs = rest
        merge.preprocess_cell(cell, {}, i)


def shows_tokens(nb) -> bool:
    """Whether a code cell of the notebook calls one of the functions that show tokens through
    ``tour.display_token`` (``tour.SHOWS_TOKENS``): its page then carries the key to the glyphs."""
    from ..study.tour import SHOWS_TOKENS

    call = re.compile(r"\b(?:" + "|".join(SHOWS_TOKENS) + r")\s*\(")
    return any(c.cell_type == "code" and call.search(c.source) for c in nb.cells)


def token_key_html() -> str:
    """The key to the token glyphs (``tour.TOKEN_KEY``, shown as ``tour.display_token`` shows them)."""
    from ..study.tour import token_key

    items = "".join(f"<dt><code>{html.escape(shown)}</code></dt><dd>{html.escape(meaning)}</dd>"
                    for shown, meaning in token_key())
    return ('<aside class="token-key" id="token-key"><details open><summary>How tokens are shown</summary>'
            f"<dl>{items}</dl></details></aside>")


EXERCISE = re.compile(r"^###\s+Exercise\s+(\d+)\s*[—–-]\s*(.+?)\s*$", re.M)


def exercises(nb) -> list[tuple[str, str]]:
    """``(heading anchor, title)`` of every ``### Exercise k — title`` heading in the notebook."""
    out = []
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for m in EXERCISE.finditer(cell.source):
                anchor = re.search(r'id="([^"]+)"', markdown_html(m.group(0), anchors=True))  # nbconvert's id
                out.append((html.unescape(anchor.group(1)) if anchor else "", m.group(2)))
    return out


def execution_error(nb) -> str | None:
    """``"ename: evalue"`` of the first error output of an executed notebook, or None."""
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                return f"{out.get('ename', 'error')}: {out.get('evalue', '')}"
    return None


def unfinished(nb) -> str | None:
    """Why an executed notebook is not a whole run, or None when it is one: a code cell papermill
    left ``pending`` or ``running`` (a run killed mid-notebook), or, in a copy without papermill's
    per-cell record, a code cell with source that never ran. A run that failed is whole: papermill
    recorded its error (an error output, its banner), and the book shows it as stopped there."""
    if execution_error(nb) is not None or (nb.metadata.get("papermill") or {}).get("exception"):
        return None
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        status = (cell.metadata.get("papermill") or {}).get("status")
        if status is not None and status != "completed":
            return f"code cell {i} is {status}"
        if status is None and cell.source.strip() and cell.get("execution_count") is None:
            return f"code cell {i} never ran"
    return None


def _first_image(cells) -> tuple[int, int, str] | None:
    for ci, cell in cells:
        for oi, out in enumerate(cell.get("outputs", [])):
            for mime in IMAGE_TYPES:
                if mime in out.get("data", {}):
                    return ci, oi, mime
    return None


def site_figure_links(nb) -> None:
    """Point the figure links of a rendered notebook (``tools.render``: a published figure's output is a
    link to its committed file, not its bytes) at the site's copy, ``figures/<name>``."""
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            name = out.get("metadata", {}).get("residshift_figure")
            if name and "text/markdown" in out.get("data", {}):
                out["data"]["text/markdown"] = f"![{name}](figures/{name})"


def _figures_source(executed: Path, profile: str) -> Path:
    own = executed / "figures"
    if (own / "MANIFEST.json").is_file():
        return own
    if profile != COMMITTED_PROFILE:
        raise BookError(f"{own}/MANIFEST.json is missing: a {profile} run writes its figures there; run "
                        f"`python -m residshift run --profile {profile}` first")
    return COMMITTED_FIGURES


def _profile_note(profile: str) -> str:
    """The profile's models and its one-line description from ``residshift.core.profiles``."""
    values = profiles.get(profile)
    doc = profiles.__doc__ or ""
    m = re.search(rf"^- ``{re.escape(profile)}``: (.+?)(?=\n- |\n\n|\Z)", doc, flags=re.S | re.M)
    text = (" ".join(m.group(1).split()) + " ") if m else ""
    models = ", ".join(f"<code>{html.escape(str(x))}</code>" for x in values.get("models", []))
    return f"Profile <code>{html.escape(profile)}</code>: {html.escape(text)}Models: {models}."


# --------------------------------------------------------------------------------------------
# Pages
# --------------------------------------------------------------------------------------------

NOTEBOOK_TEMPLATE = r"""{%- extends 'index.html.j2' -%}
{% block html_head_js %}{% endblock html_head_js %}
{% block jupyter_widgets %}{% endblock jupyter_widgets %}
{% block notebook_css %}
<link rel="icon" href="data:,">
<link rel="stylesheet" href="_static/jupyterlab.css">
<link rel="stylesheet" href="_static/book.css">
{% endblock notebook_css %}
{% block html_head_js_mathjax %}{% endblock html_head_js_mathjax %}
{% block html_head_js_mermaidjs %}{% endblock html_head_js_mermaidjs %}
{% block body_header %}{{ super() }}
{{ resources.book_nav }}
{{ resources.get('book_token_key', '') }}
{% endblock body_header %}
{% block codecell %}
{%- if 'solution' in cell.metadata.get('tags', []) -%}
<details class="book-solution"><summary>Solution (click to unfold)</summary>
{{ super() }}
</details>
{%- else -%}
{{ super() }}
{%- endif -%}
{% endblock codecell %}
{% block body_footer %}
{{ resources.book_nav }}
{{ super() }}
{% endblock body_footer %}
"""

PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1.0">
<title>{title}</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="_static/jupyterlab.css">
<link rel="stylesheet" href="_static/book.css">
</head>
<body class="book-page" data-jp-theme-light="true">
{nav}
<main class="jp-RenderedHTMLCommon book-main">
{body}
</main>
{nav}
</body>
</html>
"""

BOOK_CSS = """
body.book-page { margin: 0; background: var(--jp-layout-color0, #fff); }
.book-nav { display: flex; flex-wrap: wrap; gap: 0.4em 1.2em; align-items: baseline; padding: 0.6em 1.2em;
  border-bottom: 1px solid #ddd; background: #f7f7f7; font: 14px/1.4 system-ui, sans-serif; }
.book-nav:last-child { border-top: 1px solid #ddd; border-bottom: none; }
.book-nav .book-title { font-weight: 600; margin-right: auto; }
.book-main { max-width: 64em; margin: 0 auto; padding: 1em 1.5em 3em; font-size: 15px; }
.book-main h1 { font-size: 1.9em; }
.chapter { border-top: 1px solid #e3e3e3; padding-top: 0.6em; margin-top: 1.6em; }
.chapter-summary { font-size: 1.02em; line-height: 1.55; }
figure.key-figure, figure.gallery-item { margin: 0.8em 0; }
figure.key-figure img { max-width: 100%; height: auto; border: 1px solid #e3e3e3; }
figure figcaption { font-size: 0.9em; color: #555; margin-top: 0.3em; }
.gallery { display: grid; grid-template-columns: repeat(auto-fill, minmax(20em, 1fr)); gap: 1.2em; }
.gallery-item img { width: 100%; height: auto; border: 1px solid #e3e3e3; }
.gallery-item .links a { margin-right: 0.8em; }
.gallery-item details pre { font-size: 0.8em; max-height: 18em; overflow: auto; }
.results table, table.instructor { font-size: 0.92em; }
table.instructor td, table.instructor th { text-align: left; vertical-align: top; }
.not-measured { color: #888; font-style: italic; }
.run-error { color: #a40000; border-left: 3px solid #a40000; padding-left: 0.6em; }
.note { color: #555; font-size: 0.95em; }
math[display="block"] { margin: 0.7em 0; }
/* as nbconvert's lab page: no collapsers, anchors only on hover, true colours in print */
.jp-Collapser { display: none; }
details.book-solution { border-left: 3px solid #bdbdbd; margin: 0.5em 0; padding-left: 0.6em; }
details.book-solution > summary { cursor: pointer; color: #555; font-style: italic; }
details.answer pre { font-size: 0.85em; max-height: 30em; overflow: auto; }
details.answer img { max-width: 100%; }
.answer-failed { color: #b00020; font-style: normal; }
.jp-InputArea, .jp-InputArea-editor { overflow: hidden; }
.cm-editor.cm-s-jupyter .highlight pre { padding: var(--jp-code-padding) 4px; margin: 0; font-family: inherit;
  font-size: inherit; line-height: inherit; color: inherit; }
.jp-OutputArea-output pre { line-height: inherit; font-family: inherit; }
.jp-RenderedText pre { color: var(--jp-content-font-color1); font-size: var(--jp-code-font-size); }
a.anchor-link { visibility: hidden; margin-left: 0.2em; text-decoration: none; }
h1:hover > a.anchor-link, h2:hover > a.anchor-link, h3:hover > a.anchor-link,
h4:hover > a.anchor-link { visibility: visible; }
.token-key { max-width: 64em; margin: 0.8em auto 0; padding: 0.4em 1em; border: 1px solid #e3e3e3;
  background: #fafafa; font: 13px/1.4 system-ui, sans-serif; }
.token-key summary { cursor: pointer; font-weight: 600; }
.token-key dl { display: grid; grid-template-columns: max-content 1fr; gap: 0.15em 1em; margin: 0.4em 0; }
.token-key dt { text-align: right; } .token-key dd { margin: 0; color: #444; }
.claim-body { display: grid; grid-template-columns: minmax(0, 70fr) minmax(0, 30fr); gap: 0.8em; align-items: start; }
.claim-body figure { margin: 0; } .claim-body img { width: 100%; height: auto; }
.book-main table.summary { font-size: 0.85em; border-collapse: collapse; table-layout: auto; width: 100%; margin: 0; }
.book-main table.summary th, .book-main table.summary td { padding: 0.1em 0.35em; text-align: left;
  vertical-align: top; }
.book-main table.summary th { font-weight: 600; border-bottom: 1px solid #bbb; }
table.summary td:nth-child(-n+3) { white-space: nowrap; }
table.summary .pair { white-space: nowrap; margin-right: 0.6em; } .claim-id { color: #555; }
.v-reproduced { color: #1a7f37; } .v-not-reproduced { color: #b3261e; } .v-inconclusive { color: #8a6d00; }
@media print {
  @page { size: A4; margin: 8mm; }
  .book-nav { display: none; }
  .book-main { max-width: none; padding: 0; }
  .summary-page .book-main { font-size: 7.5pt; }
  .summary-page h1 { font-size: 1.6em; margin: 0 0 0.2em; }
  .summary-page h2 { font-size: 1.15em; margin: 0.2em 0; }
  .summary-page .claim { margin-top: 0.4em; padding-top: 0.2em; break-inside: avoid; }
  .summary-page .note { font-size: 0.95em; margin: 0.2em 0; }
  .summary-page table.summary td, .summary-page table.summary th { padding: 0 0.3em; }
  .summary-page figcaption { font-size: 0.85em; } .summary-page figcaption code { font-size: 0.9em; }
}
* { -webkit-print-color-adjust: exact; print-color-adjust: exact; }
"""


def _nav(profile: str, chapters: list[Chapter], current: str, prev: Chapter | None = None,
         nxt: Chapter | None = None) -> str:
    links = [f'<a class="book-title" href="index.html">residshift · the study ({html.escape(profile)})</a>']
    if prev is not None:
        links.append(f'<a rel="prev" href="{prev.page}">← {prev.number}</a>')
    if nxt is not None:
        links.append(f'<a rel="next" href="{nxt.page}">{nxt.number} →</a>')
    for href, label in (("index.html", "Contents"), ("summary.html", "Summary"), ("figures.html", "Figures"),
                        ("instructor.html", "Instructor")):
        if href != current:
            links.append(f'<a href="{href}">{label}</a>')
    return '<nav class="book-nav">' + "\n".join(links) + "</nav>"


def _exporter():
    renderer = _renderer_class()

    class BookExporter(HTMLExporter):
        """nbconvert's JupyterLab HTML with nothing loaded from the network."""

        @jinja2.pass_context
        def markdown2html(self, context, source):
            cell = context.get("cell", {})
            r = renderer(escape=False, attachments=cell.get("attachments", {}),
                         anchor_link_text=self.anchor_link_text,
                         exclude_anchor_links=self.exclude_anchor_links)
            return MarkdownWithMath(renderer=r).render(source)

    exporter = BookExporter(template_name="lab", template_file="book-notebook.html.j2",
                            extra_loaders=[jinja2.DictLoader({"book-notebook.html.j2": NOTEBOOK_TEMPLATE})])
    exporter.register_preprocessor(ExtractOutputPreprocessor(enabled=True), enabled=True)
    return exporter


def _write(path: Path, data: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        path.write_text(data, encoding="utf-8")
    else:
        path.write_bytes(data)


def _thumbnail(src: Path, dst: Path) -> None:
    with Image.open(src) as im:
        if im.width > THUMB_WIDTH:
            im = im.resize((THUMB_WIDTH, round(im.height * THUMB_WIDTH / im.width)), Image.LANCZOS)
        dst.parent.mkdir(parents=True, exist_ok=True)
        im.save(dst)


def _numbers_for(stem: str, jsons: list[str]) -> str | None:
    """The .json holding a figure's numbers: same name, else the longest name that prefixes it."""
    if f"{stem}.json" in jsons:
        return f"{stem}.json"
    cands = [j for j in jsons if stem.startswith(j[:-5] + "-")]
    return max(cands, key=len) if cands else None


def _stylesheet() -> str:
    """JupyterLab's light theme and page CSS from nbconvert's lab template (written once per site)."""
    for base in TemplateExporter().template_paths:
        static = Path(base) / "lab" / "static"
        if (static / "index.css").is_file():
            return (static / "index.css").read_text() + "\n" + (static / "theme-light.css").read_text()
    raise BookError("nbconvert's lab template (static/index.css) was not found; reinstall nbconvert "
                    "(`make setup`)")


def _runs(profiles_: list[str], sources: list[Path]) -> dict[str, dict[str, dict]]:
    """``{profile: {notebook stem: entry}}`` merged from the RUNS.json files that exist (newest wins)."""
    merged: dict[str, dict[str, dict]] = {}
    for path in sources:
        if not path.is_file():
            continue
        try:
            data = read_record(path)
        except CorruptRecordError as err:  # the message names the fix (restore or delete it)
            raise BookError(str(err)) from None
        for prof, entries in (data or {}).items():
            if prof not in profiles_ or not isinstance(entries, dict):
                continue
            for stem, entry in entries.items():
                old = merged.setdefault(prof, {}).get(stem)
                if old is None or str(entry.get("finished", "")) >= str(old.get("finished", "")):
                    merged[prof][stem] = entry
    return merged


def _fmt_run(entry: dict | None) -> str:
    if not entry or entry.get("wall_s") is None:
        return '<span class="not-measured">not measured yet</span>'
    wall = duration(float(entry["wall_s"]))
    mem = entry.get("peak_rss_mib")
    mem_txt = f", peak {mem / 1024:.1f} GiB" if isinstance(mem, (int, float)) else ""
    when = f' title="finished {html.escape(str(entry.get("finished", "?")))}"'
    return f"<span{when}>{wall}{mem_txt}</span>"


def build_book(profile: str = "default", *, executed: str | Path | None = None,
               figures: str | Path | None = None, out: str | Path | None = None, force: bool = False,
               log=print) -> Path:
    """Render the executed notebooks of ``profile`` into a static site; return its ``index.html``.

    ``executed`` (default ``build/<profile>``) holds the executed ``NN-name.ipynb``; ``figures`` the
    figures, numbers and ``MANIFEST.json`` they saved (default: ``<executed>/figures`` when it has a
    manifest, which the smoke run writes, else ``figures/``); ``out`` defaults to
    ``build/book/<profile>``. The site is built beside ``out`` and moved into place when complete.
    A given ``out`` that exists must be empty or a site residshift wrote (``core.cache.output_dir``):
    a folder of the user's raises ``core.cache.OutputDirError`` before anything is rendered, unless
    ``force``."""
    t0 = time.perf_counter()
    try:
        profiles.get(profile)
    except (KeyError, ValueError) as err:  # an unknown profile: the message names the known ones
        raise BookError(str(err).strip("'\"")) from None
    if out is not None:
        check_output_dir(out, force=force)  # before any notebook is read: a user's folder is never replaced
    executed = Path(executed) if executed else build_dir() / profile
    books = sorted(p for p in executed.glob("*.ipynb") if NOTEBOOK.match(p.name)) if executed.is_dir() else []
    if not books:
        raise BookError(f"no executed notebooks (NN-name.ipynb) in {executed}: run "
                        f"`python -m residshift run --profile {profile}` first")
    fig_src = Path(figures) if figures else _figures_source(executed, profile)
    manifest_path = fig_src / "MANIFEST.json"
    try:
        manifest = read_record(manifest_path)
    except CorruptRecordError as err:  # the message names the fix (restore or delete it)
        raise BookError(str(err)) from None
    # the default folder (build/book/<profile>) is the book's own: a rebuild replaces it
    out, force = (Path(out).expanduser(), force) if out else (build_dir() / "book" / profile, True)
    with output_dir(out, force=force, made_by="residshift book") as tmp:  # the old site stays whole until the new one is in
        _build(profile, books, fig_src, manifest, tmp, executed, nbformat, report, log)
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    log(f"book: {len(books)} notebooks -> {out}/index.html ({size / 2**20:.1f} MiB) in "
        f"{time.perf_counter() - t0:.1f} s")
    return out / "index.html"


def _build(profile, books, fig_src, manifest, site: Path, executed: Path, nbformat, report, log) -> None:
    """Write the site into the empty folder ``site``."""
    _write(site / "_static" / "jupyterlab.css", _stylesheet())
    _write(site / "_static" / "book.css", BOOK_CSS)

    # Figures and numbers: copies of what the manifest lists, PNG thumbnails for the pages.
    pngs = sorted((n for n in manifest if n.endswith(".png") and (fig_src / n).is_file()),
                  key=lambda n: (manifest[n].get("created", ""), n))
    jsons = sorted(n for n in manifest if n.endswith(".json") and (fig_src / n).is_file())
    (site / "figures").mkdir()
    for name in manifest:
        if (fig_src / name).is_file():
            shutil.copyfile(fig_src / name, site / "figures" / name)
    for name in pngs:
        _thumbnail(fig_src / name, site / "figures" / "thumbs" / name)

    # Read every notebook first (titles and neighbours for the navigation).
    nbs, chapters = [], []
    for path in books:
        nb = nbformat.read(path, as_version=4)
        why = unfinished(nb)
        if why:
            raise BookError(f"{_rel(path)} is half-run ({why}, no error recorded): rerun it with "
                            f"`python -m residshift run --profile {profile} --only {path.stem[:2]}`")
        title, summary = title_and_summary(nb, path.stem)
        ch = Chapter(path=path, number=NOTEBOOK.match(path.name).group(1), title_html=_inline_html(title),
                     summary_html=markdown_html(summary), page=f"{path.stem}.html",
                     error=execution_error(nb))
        ch.figures = [n for n in pngs if n.startswith(ch.number + "-")]
        ch.exercises = exercises(nb)
        nbs.append(nb)
        chapters.append(ch)

    exporter = _exporter()
    for i, (ch, nb) in enumerate(zip(chapters, nbs)):
        nb = copy.deepcopy(nb)
        static_widgets(nb)
        coalesce_streams(nb)
        site_figure_links(nb)
        nav = _nav(profile, chapters, ch.page, chapters[i - 1] if i else None,
                   chapters[i + 1] if i + 1 < len(chapters) else None)
        resources = {"output_files_dir": f"{ch.stem}_files", "unique_key": ch.stem, "book_nav": nav,
                     "book_token_key": token_key_html() if shows_tokens(nb) else "",
                     "metadata": {"name": ch.stem, "path": str(ch.path.parent)}}
        body, res = exporter.from_notebook_node(nb, resources=resources)
        _write(site / ch.page, body)
        for rel, data in res.get("outputs", {}).items():
            _write(site / rel, data)
        # Key figure: a cell tagged key-figure, else the first saved figure, else the first output image.
        tagged = _first_image([(j, c) for j, c in enumerate(nb.cells) if "key-figure" in _tags(c)])
        if tagged is None and ch.figures:
            name = ch.figures[0]
            ch.key_figure, ch.key_figure_link = f"figures/thumbs/{name}", f"figures.html#{Path(name).stem}"
            ch.key_figure_caption = (f'<code>{html.escape(name)}</code> · '
                                     f'<a href="figures.html#{Path(name).stem}">numbers and all figures</a>')
        else:
            found = tagged or _first_image(list(enumerate(nb.cells)))
            if found is not None:
                ci, oi, mime = found
                # ExtractOutputPreprocessor works on a copy: find the file it wrote for that output
                # (nbconvert's template "{unique_key}_{cell_index}_{index}{extension}")
                fname = nb.cells[ci].outputs[oi].metadata.get("filenames", {}).get(mime) or next(
                    (rel for rel in res.get("outputs", {}) if Path(rel).name.startswith(f"{ch.stem}_{ci}_{oi}.")),
                    None)
                if fname:
                    ch.key_figure, ch.key_figure_link = fname, ch.page  # the lab template gives cells no id anchor
                    ch.key_figure_caption = f'<a href="{ch.page}">from the notebook</a>'
        log(f"book: {ch.page}")

    _write(site / "index.html", _index_page(profile, chapters, fig_src, executed, report))
    _write(site / "figures.html", _gallery_page(profile, chapters, manifest, pngs, jsons))
    _write(site / "instructor.html", _instructor_page(profile, chapters, list(profiles.PROFILES), fig_src,
                                                           site=site))
    _write(site / "summary.html", _summary_page(profile, chapters, fig_src, site))


# The summary page (summary.html): the verdicts grouped by claim, and for each claim one figure the
# notebooks save (copied into the site's figures/), with what it shows (no result is typed here).
SUMMARY_FIGURES: dict[str, tuple[str, str]] = {
    "C1": ("03-alignment-curves-c1.png", "what the logit lens and the tuned lens decode at each layer, "
           "as excess over a unigram guess (notebook 03)"),
    "C2": ("04-attenuation-sweep-best-cut.png", "the loss change when the skip path of one block of a "
           "frozen model is attenuated, per block, with the best cut (notebook 04)"),
    "C3": ("05-learned-gates-loss.png", "the test loss change of learned gates and of the best fixed cut "
           "against the unmodified model (notebook 05)"),
    "C4": ("07-learned-gates-and-benchmarks-compare.png", "the trained variants' final validation loss "
           "against the baseline's (notebook 07; the benchmark scores are in "
           "07-learned-gates-and-benchmarks-benchmarks.json)"),
}
def _claim_label(cid: str, group: str) -> str:
    """A claim id without its group (``C2-training.late-cut`` -> ``training.late-cut``), its words on hover."""
    short = cid[len(group):].lstrip(".-") or cid
    return f'<span class="claim-id" title="{html.escape(CLAIMS.get(cid, cid))}">{html.escape(short)}</span>'


def _verdict_marks(rows) -> str:
    """Each row's verdict as its mark (:func:`report.verdict_mark`),
    its statistic, estimate and n on hover."""
    out = []
    for r in rows:
        rec = tables.verdict_record(r)
        tip = html.escape(f"{rec['verdict']}; {rec['statistic']} {rec['estimate [CI]']}, n = {rec['n']}")
        mark = report.verdict_mark(r)
        out.append(f'<span class="v-{r.verdict.replace(" ", "-")}" title="{tip}">{mark}</span>')
    return "".join(out)


def _summary_page(profile, chapters, fig_src: Path, site: Path) -> str:
    groups, skipped = report.summary_tables(fig_src)
    legend = html.escape(report.marks_legend())
    parts = [f"<h1>Results summary</h1>"
             f'<p class="note">Every verdict in <code>{html.escape(_rel(fig_src))}/*verdicts.json</code> '
             f"(profile <code>{html.escape(profile)}</code>), grouped by claim: one row per notebook, model "
             f"and variant, with its verdict on each claim id. {legend}. Hover a verdict for its statistic, "
             f'estimate and n; the <a href="index.html#results">results tables</a> give every number and '
             f"rule.</p>"]
    if skipped:
        parts.append(f'<p class="run-error">Not shown (an older verdict layout; rerun the notebook that '
                     f'writes it): {", ".join(f"<code>{html.escape(n)}</code>" for n in skipped)}.</p>')
    if not groups:
        parts.append('<p class="not-measured">No verdicts yet: run the notebooks that write '
                     "<code>*verdicts.json</code>.</p>")
    for group, table in groups.items():
        head = report.SUMMARY_HEADLINES.get(group, group)
        body = "".join(
            f"<tr><td>{nb}</td><td>{html.escape(model)}</td><td>{html.escape(variant)}</td><td>"
            + " ".join(f'<span class="pair">{_claim_label(c, group)} {_verdict_marks(cells[c])}</span>'
                       for c in table.claims if c in cells) + "</td></tr>"
            for (nb, model, variant), cells in table.rows.items())
        fig = SUMMARY_FIGURES.get(group)
        if fig and (site / "figures" / fig[0]).is_file():
            figure = (f'<figure><a href="figures.html#{Path(fig[0]).stem}"><img src="figures/{fig[0]}" '
                      f'alt="{html.escape(fig[0])}"></a><figcaption><code>{html.escape(fig[0])}</code>: '
                      f"{html.escape(fig[1])}</figcaption></figure>")
        else:
            figure = (f'<p class="not-measured">{html.escape(fig[0]) if fig else "no figure chosen"}: '
                      "not produced yet</p>")
        parts.append(f'<section class="claim" id="{group}"><h2>{group}: {html.escape(CLAIMS.get(head, head))}</h2>'
                     f'<div class="claim-body"><table class="summary"><thead><tr><th>nb</th><th>model</th>'
                     f"<th>variant</th><th>verdicts</th></tr></thead><tbody>{body}</tbody></table>{figure}</div>"
                     f"</section>")
    return PAGE.format(title=f"Results summary · residshift · {profile}",
                       nav=_nav(profile, chapters, "summary.html"),
                       body="\n".join(parts)).replace('<body class="book-page"', '<body class="book-page summary-page"')


def _index_page(profile, chapters, fig_src: Path, executed: Path, report) -> str:
    parts = [f"<h1>Residual connections and the causal shift: the study, executed</h1>",
             f'<p class="note">{_profile_note(profile)} Built {_dt.datetime.now().strftime("%Y-%m-%d %H:%M")} '
             f"from <code>{html.escape(_rel(executed))}</code>. Read the notebooks in order; "
             f'<a href="#results">the results tables</a> close the page; <a href="summary.html">the summary</a> '
             f"puts every verdict and one figure per claim on one printable page.</p>",
             "<ol class=\"toc\">" + "".join(f'<li><a href="#nb-{c.number}">{c.title_html}</a></li>'
                                             for c in chapters)
             + '<li><a href="#results">Results (generated)</a></li></ol>']
    for ch in chapters:
        fig = ""
        if ch.key_figure:
            fig = (f'<figure class="key-figure"><a href="{ch.key_figure_link}"><img src="{ch.key_figure}" '
                   f'alt="key figure of notebook {ch.number}"></a><figcaption>{ch.key_figure_caption}'
                   f"</figcaption></figure>")
        if ch.error:
            fig = (f'<p class="run-error">This notebook stopped with an error ({html.escape(ch.error[:300])}); '
                   f'its page shows the outputs up to <a href="{ch.page}">the failing cell</a>.</p>{fig}')
        parts.append(f'<section class="chapter" id="nb-{ch.number}"><h2><a href="{ch.page}">{ch.title_html}'
                     f'</a></h2><div class="chapter-summary">{ch.summary_html}</div>{fig}'
                     f'<p><a href="{ch.page}">Read notebook {ch.number} with its outputs →</a></p></section>')
    try:
        block = report.render(fig_src)
    except Exception as err:
        raise BookError(f"the results tables could not be rendered from {fig_src} "
                        f"({type(err).__name__}: {err})") from err
    block = re.sub(r"<!--.*?-->", "", block, flags=re.S).strip()
    parts.append(f'<section class="chapter results" id="results"><h2>Results (generated)</h2>'
                 f'<p class="note">Rendered by <code>residshift.tools.report</code> from the numbers in '
                 f"<code>{html.escape(_rel(fig_src))}</code> (and <code>benchmarks/</code>), as in "
                 f"docs/results.md.</p>{markdown_html(block)}</section>")
    return PAGE.format(title=f"residshift · {profile}", nav=_nav(profile, chapters, "index.html"),
                       body="\n".join(parts))


def _gallery_page(profile, chapters, manifest, pngs, jsons) -> str:
    parts = [f"<h1>Figures</h1><p class=\"note\">Every figure the notebooks saved at profile "
             f"<code>{html.escape(profile)}</code> (from <code>MANIFEST.json</code>), with its numbers, "
             f"its vector version and the notebook that made it.</p>"]
    for ch in chapters:
        mine = [n for n in pngs if n.startswith(ch.number + "-")]
        numbers = [j for j in jsons if j.startswith(ch.number + "-")]
        if not mine and not numbers:
            continue
        items = []
        for name in mine:
            stem = Path(name).stem
            rec = manifest[name]
            num = _numbers_for(stem, jsons)
            links = [f'<a href="figures/{name}">PNG</a>']
            if f"{stem}.pdf" in manifest:
                links.append(f'<a href="figures/{stem}.pdf">PDF</a>')
            links.append(f'<a href="figures/{num}">numbers ({num})</a>' if num else
                         '<span class="not-measured">no numbers saved</span>')
            links.append(f'<a href="{ch.page}">notebook {ch.number}</a>')
            params = html.escape(json.dumps(rec.get("parameters", {}), indent=1))
            items.append(
                f'<figure class="gallery-item" id="{stem}"><a href="figures/{name}"><img '
                f'src="figures/thumbs/{name}" alt="{html.escape(stem)}"></a><figcaption><code>{stem}</code>'
                f'<div class="links">{" ".join(links)}</div><div>profile {html.escape(str(rec.get("profile")))}'
                f', commit {html.escape(str(rec.get("commit")))}, {html.escape(str(rec.get("created")))}</div>'
                f"<details><summary>parameters</summary><pre>{params}</pre></details></figcaption></figure>")
        nums = "".join(f'<li><a href="figures/{j}">{j}</a></li>' for j in numbers)
        nums = f"<p>Numbers saved by this notebook:</p><ul>{nums}</ul>" if nums else ""
        parts.append(f'<section class="chapter" id="nb-{ch.number}"><h2><a href="{ch.page}">{ch.title_html}'
                     f'</a></h2><div class="gallery">{"".join(items)}</div>{nums}</section>')
    return PAGE.format(title=f"Figures · residshift · {profile}", nav=_nav(profile, chapters, "figures.html"),
                       body="\n".join(parts))


SESSION_RUN_S = 10 * 60  # a notebook run that fits a 90-minute session beside reading and two exercises
EXERCISE_COSTS = REPO_ROOT / "benchmarks" / "exercises-default.json"  # `make exercises`
CLASS_EXERCISE_COSTS = REPO_ROOT / "benchmarks" / "exercises-class.json"  # `make class-key`


def exercise_costs(path: Path | None = None) -> dict[str, dict[int, dict[str, Any]]]:
    """``{notebook stem: {exercise number: {"seconds", "homework", ...}}}`` as ``make exercises``
    measured them at ``default`` (``benchmarks/exercise_costs.py``); empty when never measured."""
    path = Path(path or EXERCISE_COSTS)
    if not path.is_file():
        return {}
    data = json.loads(path.read_text())
    return {stem: {int(e["exercise"]): e for e in entries} for stem, entries in data.get("notebooks", {}).items()}


def _exercise_cost(entry: dict[str, Any] | None, profile: str = COMMITTED_PROFILE) -> str:
    if not entry or not entry.get("ran"):
        return ""
    kind = "homework" if entry.get("homework") else "in class"
    return f' <span class="cost">({entry["seconds"]:.0f} s of solution at {profile}; {kind})</span>'


def exercise_folder() -> Path:
    """The notebooks executed with their solutions (``make exercises``: ``build/exercises/``)."""
    return build_dir() / "exercises"


EXERCISES_COMMAND = ("<code>make exercises</code> (every notebook at <code>default</code> with "
                     "<code>show_solutions=true</code>, into <code>build/exercises/</code>; after "
                     "<code>make study</code> it reuses the cached results, so what it adds is the solutions; "
                     "<code>python -m residshift run --profile smoke -p show_solutions=true --output-dir "
                     "build/exercises</code> makes a quick one on tiny random models)")
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def solved_exercises(nb) -> list[dict[str, Any]]:
    """Per ``### Exercise k — title`` of an executed notebook: its number, title, the question (the
    heading's markdown from the heading on) and its solution cells (the code cells up to the next
    markdown cell)."""
    out: list[dict[str, Any]] = []
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            m = EXERCISE.search(cell.source)
            if m:
                out.append({"number": int(m.group(1)), "title": m.group(2),
                            "question": cell.source[m.end():].strip(), "cells": []})
            elif out and out[-1]["cells"]:
                out.append(None)  # prose after a solution closes the exercise
            continue
        if out and out[-1] is not None:
            out[-1]["cells"].append(cell)
    return [e for e in out if e is not None]


def _output_html(out, name: str, site: Path | None) -> str:
    """One output of a solution cell as HTML; an image is written to ``site/answers_files/name``."""
    kind = out.get("output_type")
    if kind == "stream":
        return f'<pre class="answer-{html.escape(out.get("name", "stdout"))}">{html.escape(out.get("text", ""))}</pre>'
    if kind == "error":
        tb = ANSI.sub("", "\n".join(out.get("traceback") or [f"{out.get('ename')}: {out.get('evalue')}"]))
        return f'<pre class="answer-error">{html.escape(tb)}</pre>'
    data = out.get("data", {})
    for mime, ext in (("image/png", "png"), ("image/jpeg", "jpg")):
        if mime in data and site is not None:
            import base64

            rel = f"answers_files/{name}.{ext}"
            _write(site / rel, base64.b64decode(data[mime]))
            return f'<img src="{rel}" alt="output of the solution" loading="lazy">'
    if "image/svg+xml" in data:
        return f'<div class="answer-svg">{data["image/svg+xml"]}</div>'
    if "text/html" in data:
        return f'<div class="answer-html">{data["text/html"]}</div>'
    if "text/plain" in data:
        return f"<pre>{html.escape(data['text/plain'])}</pre>"
    return ""


def _answer_status(cells, measured: dict[str, Any] | None) -> str:
    """How the solution ended: its error's last line, never run, or ran (the measured answer check wins)."""
    for cell in cells:
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                last = ANSI.sub("", (out.get("traceback") or [""])[-1]).strip().splitlines()
                line = last[-1] if last else f"{out.get('ename')}: {out.get('evalue')}"
                return f'<span class="answer-failed">answer check failed: {html.escape(line)}</span>'
    if not any(c.get("outputs") or c.get("execution_count") is not None for c in cells):
        return '<span class="answer-failed">not run</span>'
    if measured and measured.get("passed") is False:
        return f'<span class="answer-failed">failed at default: {html.escape(str(measured.get("error_line")))}</span>'
    return "answer check passed"


def answer_key_html(folder: Path | None = None, *, chapters: list[Chapter] = (), costs=None,
                    site: Path | None = None) -> str:
    """The answer key: per executed notebook of ``folder`` (default :func:`exercise_folder`), each
    exercise's question and, folded in ``<details>``, its solution's code and executed outputs, with
    the solution's time at default (``costs``: :func:`exercise_costs`). Images go to
    ``site/answers_files/``. Without executed notebooks it says which command makes them."""
    folder = Path(folder) if folder else exercise_folder()
    books = sorted(p for p in folder.glob("*.ipynb") if NOTEBOOK.match(p.name)) if folder.is_dir() else []
    head = '<h2 id="answer-key">Answer key</h2>'
    if not books:
        return (f'{head}<p class="note">No executed solutions in <code>{html.escape(_rel(folder))}</code>: '
                f"{EXERCISES_COMMAND} writes them, and the book shows them here.</p>")
    costs = exercise_costs() if costs is None else costs
    pages = {ch.stem: ch.page for ch in chapters}
    parts = [head, f'<p class="note">Every exercise with its solution as executed in '
                   f"<code>{html.escape(_rel(folder))}</code> ({EXERCISES_COMMAND}). Each solution ends in asserts "
                   f"that check its answer; beside it, what it took at default "
                   f"(<code>benchmarks/exercises-default.json</code>) and whether its check passed.</p>"]
    for path in books:
        nb = nbformat.read(path, as_version=4)
        title, _ = title_and_summary(nb, path.stem)
        link = f'<a href="{pages[path.stem]}">{_inline_html(title)}</a>' if path.stem in pages else _inline_html(title)
        parts.append(f'<section class="answers" id="answers-{path.stem[:2]}"><h3>{link}</h3>')
        measured = costs.get(path.stem, {})
        for ex in solved_exercises(nb):
            entry = measured.get(ex["number"])
            cost = _exercise_cost(entry) or ' <span class="cost">(not timed at default yet: <code>make exercises</code>)</span>'
            code = "\n\n".join(c.source for c in ex["cells"])
            outs = "".join(_output_html(o, f"{path.stem[:2]}-{ex['number']}-{ci}-{oi}", site)
                           for ci, c in enumerate(ex["cells"]) for oi, o in enumerate(c.get("outputs", [])))
            parts.append(f'<h4>Exercise {ex["number"]} — {_inline_html(ex["title"])}</h4>'
                         f'{markdown_html(ex["question"])}'
                         f'<details class="book-solution answer"><summary>Solution{cost}: '
                         f'{_answer_status(ex["cells"], entry)}</summary>'
                         f'<pre class="answer-code"><code>{html.escape(code)}</code></pre>'
                         f'{outs or "<p>(no output)</p>"}</details>')
        parts.append("</section>")
    return "".join(parts)


def _instructor_page(profile, chapters, all_profiles, fig_src: Path, *, answers: Path | None = None,
                     site: Path | None = None) -> str:
    sources = [fig_src / "RUNS.json", COMMITTED_FIGURES / "RUNS.json"] + [
        committed_runs(p) for p in all_profiles if p != COMMITTED_PROFILE] + [
        build_dir() / p / "figures" / "RUNS.json" for p in all_profiles]
    runs = _runs(all_profiles, sources)
    costs, costs_at = exercise_costs(CLASS_EXERCISE_COSTS), CLASS_PROFILE  # the lecture's own, where measured
    if not costs:
        costs, costs_at = exercise_costs(), COMMITTED_PROFILE
    head = "".join(f"<th>{html.escape(p)}</th>" for p in all_profiles)
    rows = []
    for ch in chapters:
        cells = "".join(f"<td>{_fmt_run(runs.get(p, {}).get(ch.stem))}</td>" for p in all_profiles)
        cost = costs.get(ch.stem, {})
        ex = "".join(f'<li><a href="{ch.page}#{html.escape(a)}">{_inline_html(t)}</a>{_exercise_cost(cost.get(k), costs_at)}</li>'
                     for k, (a, t) in enumerate(ch.exercises, start=1))
        rows.append(f'<tr><td><a href="{ch.page}">{ch.title_html}</a></td><td>{ch.summary_html}</td>'
                    f'<td><ol>{ex}</ol></td>{cells}</tr>')
    body = (f"<h1>For instructors</h1>"
            f'<p class="note">What each notebook teaches (its opening paragraph) and its last measured run '
            f"at each profile: wall time and the kernel's peak memory, as the runner recorded them in "
            f"<code>RUNS.json</code> beside the figures (other profiles than {COMMITTED_PROFILE}: "
            f"<code>build/&lt;profile&gt;/figures/</code>, or committed as <code>benchmarks/RUNS-&lt;profile&gt;.json</code>). Beside each exercise: what its solution cells took "
            f"at the class profile (<code>make class-key</code>, <code>benchmarks/exercises-class.json</code>), or at "
            f"default where class was never measured (<code>make exercises</code>, <code>benchmarks/exercises-default.json</code>); "
            f"over a minute on two cores is homework. The <a href=\"#answer-key\">answer key</a> at the end "
            f"of this page shows every solution as executed at default; <code>docs/class/</code> holds the class "
            f"notebooks executed with their solutions at the class profile.</p>"
            f'<table class="instructor"><thead><tr><th>notebook</th><th>what it teaches</th><th>exercises</th>{head}</tr>'
            f'</thead><tbody>{"".join(rows)}</tbody></table>'
            f'<h2>To hand out</h2><p><a href="summary.html">The results summary</a>: every verdict, grouped by '
            f"claim, and one figure per claim, generated from the saved numbers; it prints on one page.</p>"
            f"<h2>Before class</h2><p>On the machine the class uses: <code>make setup</code>, "
            f"<code>make models</code> (dequantize the embedded models once), then "
            f"<code>make study PROFILE=class</code>: notebooks {CLASS_NOTEBOOKS[0]}–{CLASS_NOTEBOOKS[-1]} "
            f"at the lecture's sizes (the embedded models at a few windows; the C1 verdicts are marked "
            f"underpowered and 03's tuned lens is left to the default run), which fills the result caches; "
            f"<code>make lab PROFILE=class</code> opens copies of the notebooks with those sizes set, "
            f"<code>make student PROFILE=class</code> writes the students' copies (answer cells and hints).</p>"
            f"<h2>A 90-minute session</h2><p>About 30 minutes to read a notebook together and two exercises "
            f"of about 25 minutes each, with the notebook's own run at the class profile (from warm caches, or "
            f"started at the beginning of the session) taking at most {SESSION_RUN_S // 60} minutes. The class "
            f"run's last measured times (<code>benchmarks/RUNS-class.json</code>, or this machine's "
            f"<code>build/class/figures/RUNS.json</code>):</p>"
            + class_runs_table(runs.get(CLASS_PROFILE, {}), {ch.stem: ch.page for ch in chapters}, SESSION_RUN_S)
            + "<p>Longer notebooks fit when they are run before class (their result caches then make the rerun "
            "short), or at the smoke profile to read the code (<code>-p</code> overrides shrink any sample).</p>"
            + answer_key_html(answers, chapters=chapters, costs=exercise_costs(), site=site))
    return PAGE.format(title=f"Instructor · residshift · {profile}",
                       nav=_nav(profile, chapters, "instructor.html"), body=body)


def _rel(path: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(path)
