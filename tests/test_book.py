"""The book, built from the smoke profile's executed notebooks and read in a real headless browser.

Fast tests check the pieces (summary, widgets, MathML). The slow test runs the smoke notebooks into
a temporary folder, builds the site, serves it on 127.0.0.1 and opens every page in Debian's
Chromium (``make browser`` installs it) through the Chrome DevTools protocol: every page loads,
every image has pixels, every internal link resolves, no request leaves the machine. It saves a
screenshot of the index as ``build/book/smoke-index.png`` in the checkout, for a person to look at.
"""
import functools
import http.server
import itertools
import json
import os
import shutil
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import nbformat
import pytest

from residshift.core.paths import REPO_ROOT
from residshift.tools import book

SCREENSHOT = REPO_ROOT / "build" / "book" / "smoke-index.png"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--no-default-browser-check",
         "--disable-extensions", "--remote-debugging-port=0", "--window-size=1280,1800"]


# --------------------------------------------------------------------------------------------
# Fast: the pieces
# --------------------------------------------------------------------------------------------


def _nb(*cells):
    nb = nbformat.v4.new_notebook()
    nb.cells = list(cells)
    return nb


def test_title_and_summary_take_the_first_heading_and_paragraph():
    nb = _nb(nbformat.v4.new_markdown_cell("# 07 · A title with $x_t$\n\nFirst paragraph\nspans lines.\n\n"
                                           "Second paragraph."),
             nbformat.v4.new_code_cell("1"))
    assert book.title_and_summary(nb, "fallback") == ("07 · A title with $x_t$", "First paragraph\nspans lines.")
    tagged = nbformat.v4.new_markdown_cell("Chosen summary.\n\nmore", metadata={"tags": ["summary"]})
    nb.cells.append(tagged)
    assert book.title_and_summary(nb, "fallback")[1] == "Chosen summary."
    assert book.title_and_summary(_nb(nbformat.v4.new_code_cell("1")), "fb") == ("fb", "")
    banner = nbformat.v4.new_markdown_cell('<span>An Exception was encountered at <a href="#x">In [2]</a></span>',
                                           metadata={"tags": [book.PAPERMILL_ERROR]})
    nb.cells.insert(0, banner)  # a failed run's banner is not the notebook's summary
    assert book.title_and_summary(nb, "fallback")[1] == "Chosen summary."


def test_equations_become_mathml_and_bad_ones_name_the_formula():
    out = book.markdown_html(r"inline $h_{l+1}(t) = h_l(t) + F_l$ and $$\operatorname{softcap}(E\,x)$$")
    assert out.count("<math") == 2 and "$" not in out and "\\operatorname" not in out
    with pytest.raises(book.BookError, match=r"\\left\( x"):
        book.markdown_html(r"broken $\left( x$")
    with pytest.raises(book.BookError, match=r"unknown command.*notacommand"):
        book.markdown_html(r"$\notacommand x$")


def test_progress_widgets_become_their_last_text():
    state = {"bar": {"model_name": "HBoxModel", "state": {"children": ["IPY_MODEL_l", "IPY_MODEL_p", "IPY_MODEL_r"]}},
             "l": {"model_name": "HTMLModel", "state": {"value": "sweep:\u2007100%"}},
             "p": {"model_name": "FloatProgressModel", "state": {"value": 4.0, "max": 4.0}},
             "r": {"model_name": "HTMLModel", "state": {"value": "\u20074/4\u2007[00:01&lt;00:00]"}}}
    cell = nbformat.v4.new_code_cell("loop()")
    cell.outputs = [nbformat.v4.new_output("display_data", data={
        book.WIDGET_VIEW: {"model_id": "bar", "version_major": 2, "version_minor": 0},
        "text/plain": "sweep:   0%|  | 0/4"})]
    nb = _nb(cell)
    nb.metadata["widgets"] = {book.WIDGET_STATE: {"state": state, "version_major": 2, "version_minor": 0}}
    book.static_widgets(nb)
    assert "widgets" not in nb.metadata
    assert nb.cells[0].outputs[0]["data"] == {"text/plain": "sweep: 100% |" + "█" * 20 + "| 4/4 [00:01<00:00]"}


def _stream(name, text):
    return nbformat.v4.new_output("stream", name=name, text=text)


def test_stream_outputs_coalesce_to_one_stderr_block_showing_the_last_state():
    cell = nbformat.v4.new_code_cell("sweep()")
    for model in ("a", "b", "c"):  # a tqdm bar per model on stderr, a printed line per model on stdout
        cell.outputs += [_stream("stderr", f"\r{model} sweep:   0%|  | 0/4"),
                         _stream("stderr", f"\r{model} sweep:  50%|# | 2/4"),
                         _stream("stderr", f"\r{model} sweep: 100%|##| 4/4"),
                         _stream("stdout", f"{model}: done\n"), _stream("stderr", "\n")]
        cell.outputs += [_stream("stderr", "\rfit:   0%|  | 0/2"), _stream("stderr", "\r" + " " * 30),
                         _stream("stderr", "\r")]  # a bar that clears itself (leave=False) shows nothing
    cell.outputs.append(nbformat.v4.new_output("display_data", data={"text/plain": "figure"}))
    quiet = nbformat.v4.new_code_cell("fit()")
    quiet.outputs = [_stream("stderr", "\rfit: 0%"), _stream("stderr", "\r    \r"), _stream("stdout", "ok\n")]
    nb = _nb(cell, quiet)
    book.coalesce_streams(nb)
    assert [(o.output_type, o.get("name")) for o in nb.cells[0].outputs] == [
        ("stream", "stderr"), ("stream", "stdout"), ("display_data", None)]
    assert nb.cells[0].outputs[0].text == "a sweep: 100%|##| 4/4\nb sweep: 100%|##| 4/4\nc sweep: 100%|##| 4/4\n"
    assert nb.cells[0].outputs[1].text == "a: done\nb: done\nc: done\n"
    assert [(o.output_type, o.get("name")) for o in nb.cells[1].outputs] == [("stream", "stdout")]
    body, _ = book._exporter().from_notebook_node(nb, resources={"book_nav": ""})
    assert body.count('data-mime-type="application/vnd.jupyter.stderr"') == 1


def test_missing_executed_notebooks_name_the_command(tmp_path):
    with pytest.raises(book.BookError, match="residshift run --profile smoke"):
        book.build_book("smoke", executed=tmp_path, out=tmp_path / "site")
    assert not (tmp_path / "site").exists()
    with pytest.raises(book.BookError, match="unknown profile"):
        book.build_book("no-such-profile", executed=tmp_path, out=tmp_path / "site")


# --------------------------------------------------------------------------------------------
# Slow: the whole book in a real browser
# --------------------------------------------------------------------------------------------


def chromium() -> str:
    for name in (os.environ.get("RESIDSHIFT_CHROMIUM"), "chromium", "chromium-browser"):
        if name and shutil.which(name):
            return shutil.which(name)
    # a machine without Chromium skips (`make test` installs it first where it can: apt-get and root or
    # passwordless sudo; .ci/run runs `make browser`, which fails when it cannot install it)
    pytest.skip("Chromium is not installed: run `make browser`, or set RESIDSHIFT_CHROMIUM to a Chromium binary")


def test_no_chromium_is_a_one_line_skip(monkeypatch):
    monkeypatch.delenv("RESIDSHIFT_CHROMIUM", raising=False)
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(pytest.skip.Exception, match="make browser") as err:
        chromium()
    assert "\n" not in str(err.value)


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def copyfile(self, source, outputfile):
        try:
            super().copyfile(source, outputfile)
        except (BrokenPipeError, ConnectionResetError):  # the client had what it wanted
            pass


class DevTools:
    """A headless Chromium driven over the DevTools protocol (one tab), recording every request."""

    def __init__(self, exe: str, profile_dir: Path):
        import websocket  # websocket-client

        self.log = open(profile_dir.parent / "chromium.log", "w")
        self.proc = subprocess.Popen([exe, *FLAGS, f"--user-data-dir={profile_dir}", "about:blank"],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        port_file = profile_dir / "DevToolsActivePort"
        for _ in range(300):
            if port_file.is_file() and len(port_file.read_text().split()) >= 2:
                break
            if self.proc.poll() is not None:
                raise RuntimeError(f"chromium exited with {self.proc.returncode}; see {self.log.name}")
            time.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
            tab = next(t for t in json.load(r) if t["type"] == "page")
        self.ws = websocket.create_connection(tab["webSocketDebuggerUrl"], timeout=60, suppress_origin=True)
        self.ids = itertools.count(1)
        self.events: list[dict] = []
        for method in ("Page.enable", "Network.enable", "Runtime.enable", "Log.enable"):
            self.call(method)

    def call(self, method: str, **params):
        n = next(self.ids)
        self.ws.send(json.dumps({"id": n, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == n:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self.events.append(msg)

    def wait_for(self, method: str, since: int, timeout: float = 60):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if any(e.get("method") == method for e in self.events[since:]):
                return
            self.events.append(json.loads(self.ws.recv()))
        raise TimeoutError(f"no {method} within {timeout} s")

    def open(self, url: str) -> dict:
        since = len(self.events)
        self.call("Page.navigate", url=url)
        self.wait_for("Page.loadEventFired", since)
        return self.evaluate(PAGE_PROBE)

    def evaluate(self, js: str):
        res = self.call("Runtime.evaluate", expression=js, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in res:
            raise RuntimeError(json.dumps(res["exceptionDetails"])[:500])
        return res["result"]["value"]

    def close(self):
        try:
            self.ws.close()
        finally:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            self.log.close()


PAGE_PROBE = r"""(() => {
  const prose = Array.from(document.querySelectorAll('.jp-MarkdownCell, .chapter-summary')).map(el => {
    const c = el.cloneNode(true); c.querySelectorAll('code, pre, math').forEach(x => x.remove());
    return c.textContent; }).join('\n');
  return {
    title: document.title,
    images: Array.from(document.images).map(i => ({src: i.currentSrc || i.src, w: i.naturalWidth,
                                                    complete: i.complete})),
    links: Array.from(document.querySelectorAll('a[href]')).map(a => a.href),
    ids: Array.from(document.querySelectorAll('[id]')).map(e => e.id),
    math: document.querySelectorAll('math').length,
    stderr: Array.from(document.querySelectorAll('.jp-Cell')).map(c =>
      c.querySelectorAll('[data-mime-type="application/vnd.jupyter.stderr"]').length),
    tex: (prose.match(/\$\$|\\[A-Za-z]{2,}/g) || []).slice(0, 5),
    sources: Array.from(document.querySelectorAll('script[src], link[href], iframe[src]'))
                  .map(e => e.src || e.href),
  };
})()"""


@pytest.fixture(scope="module")
def smoke_site(tmp_path_factory, request):
    exe = chromium()  # fail early, before the notebooks run
    root = tmp_path_factory.mktemp("book")
    executed, _, _ = request.getfixturevalue("smoke_study")  # the smoke run the notebook tests share
    t0 = time.perf_counter()
    index = book.build_book("smoke", executed=executed, out=root / "site", log=lambda *a, **k: None)
    seconds = time.perf_counter() - t0
    return exe, index.parent, executed, seconds


@pytest.mark.slow
def test_book_reads_offline_in_a_real_browser(smoke_site, tmp_path):
    exe, site, executed, seconds = smoke_site
    pages = sorted(p.name for p in site.glob("*.html"))
    stems = [p.stem for p in sorted(executed.glob("*.ipynb")) if book.NOTEBOOK.match(p.name)]
    assert pages == sorted(["index.html", "summary.html", "figures.html", "instructor.html"]
                           + [f"{s}.html" for s in stems])

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(site)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}/"
    browser = DevTools(exe, tmp_path / "profile")
    try:
        seen, todo, probes = set(), ["index.html"], {}
        while todo:  # crawl every page the site links to, starting from the index
            page = todo.pop(0)
            if page in seen:
                continue
            seen.add(page)
            probe = probes[page] = browser.open(base + page)
            if page == "index.html":
                SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
                import base64

                shot = browser.call("Page.captureScreenshot", format="png")
                SCREENSHOT.write_bytes(base64.b64decode(shot["data"]))
            if page == "summary.html":  # the handout prints on one page
                import base64
                import re

                pdf = base64.b64decode(browser.call("Page.printToPDF", preferCSSPageSize=True)["data"])
                summary_pages = len(re.findall(rb"/Type\s*/Page\b", pdf))
            for href in probe["links"]:
                url = urllib.parse.urldefrag(href).url
                if url.startswith(base) and url.endswith(".html"):
                    todo.append(url[len(base):])
        events = list(browser.events)
    finally:
        browser.close()

    assert seen == set(pages), f"pages not linked from the index: {set(pages) - seen}"
    problems = []
    for page, probe in probes.items():
        problems += [f"{page}: image without pixels {i['src']}" for i in probe["images"] if i["w"] <= 0]
        problems += [f"{page}: raw TeX {t!r}" for t in probe["tex"]]
        problems += [f"{page}: {n} stderr blocks in cell {i}" for i, n in enumerate(probe["stderr"]) if n > 1]
        for href in probe["links"]:
            url, frag = urllib.parse.urldefrag(href)
            if not url.startswith(base):
                continue  # outside links are only links: the check below proves nothing was fetched
            target = url[len(base):]
            if target.endswith(".html"):
                if frag and frag not in probes[target]["ids"]:
                    problems.append(f"{page}: broken anchor {target}#{frag}")
            else:
                try:
                    with urllib.request.urlopen(url, timeout=10) as r:
                        assert r.status == 200 and r.read()
                except Exception as err:
                    problems.append(f"{page}: broken link {target} ({err})")
    assert not problems, "\n".join(problems[:30])

    # No request left the machine: every request the browser made went to our server (or data:).
    requests = [e["params"]["request"]["url"] for e in events if e.get("method") == "Network.requestWillBeSent"]
    outside = sorted({u for u in requests if not (u.startswith(base) or u.startswith("data:"))})
    assert not outside, f"requests that left the machine: {outside}"
    failed = [e["params"] for e in events if e.get("method") == "Network.loadingFailed"]
    assert not failed, failed[:5]
    statuses = [(e["params"]["response"]["url"], e["params"]["response"]["status"]) for e in events
                if e.get("method") == "Network.responseReceived"]
    assert statuses and all(code in (200, 304) for _, code in statuses), [s for s in statuses if s[1] >= 400][:5]

    # The content: math typeset as MathML, a key figure per notebook, the verdict tables.
    assert sum(p["math"] for p in probes.values()) > 20
    text = (site / "index.html").read_text()
    assert text.count('<figure class="key-figure">') == len(stems)
    assert "<table" in text.split('id="results"', 1)[1], "the generated results tables are missing"
    assert summary_pages == 1, f"summary.html prints on {summary_pages} pages"
    summary = (site / "summary.html").read_text()
    assert summary.count('<section class="claim"') >= 3 and summary.count('<figure>') >= 3
    keyed = {s for s in stems if 'id="token-key"' in (site / f"{s}.html").read_text()}
    assert keyed and keyed == {s for s in stems if book.shows_tokens(nbformat.read(executed / f"{s}.ipynb", 4))}
    assert SCREENSHOT.stat().st_size > 10_000
    size = sum(p.stat().st_size for p in site.rglob("*") if p.is_file())
    print(f"\nbook: {len(pages)} pages, {size / 2**20:.1f} MiB, built in {seconds:.1f} s; "
          f"{len(requests)} requests, all to {base}; screenshot {SCREENSHOT}")


def test_solution_cells_are_folded():
    import nbformat

    from residshift.tools import book

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# 09 · T\n\nA summary."),
                nbformat.v4.new_code_cell("x = 1", metadata={"tags": ["solution"]}),
                nbformat.v4.new_code_cell("y = 2")]
    body, _ = book._exporter().from_notebook_node(nb, resources={"book_nav": ""})
    folded = body.split('<details class="book-solution">')
    assert len(folded) == 2 and "x" in folded[1].split("</details>")[0]
    assert "y" in folded[1].split("</details>")[1]  # the ordinary cell stays outside


def test_exercises_are_listed_with_the_anchor_nbconvert_gives_their_heading():
    import nbformat

    nb = _nb(nbformat.v4.new_markdown_cell("## Exercises\n\n### Exercise 1 — Attenuate two layers\n\ntext"),
             nbformat.v4.new_markdown_cell("### Exercise 2 — Why $\\alpha$?"),
             nbformat.v4.new_markdown_cell("### Not an exercise"))
    found = book.exercises(nb)
    assert [t for _, t in found] == ["Attenuate two layers", "Why $\\alpha$?"]
    for (anchor, _), cell in zip(found, nb.cells[:2]):
        assert f'id="{anchor}"' in book.markdown_html(cell.source, anchors=True)


def test_instructor_page_reads_the_measured_exercise_costs(tmp_path):
    from residshift.tools import book

    path = tmp_path / "ex.json"
    path.write_text('{"notebooks": {"06-x": [{"exercise": 2, "title": "t", "seconds": 121.8, "ran": true, '
                    '"error": false, "homework": true}]}}')
    costs = book.exercise_costs(path)
    assert "122 s" in book._exercise_cost(costs["06-x"][2]) and "homework" in book._exercise_cost(costs["06-x"][2])
    assert book._exercise_cost(None) == "" and book.exercise_costs(tmp_path / "none.json") == {}


def test_token_key_explains_every_glyph_the_token_maps_use_and_goes_on_pages_that_show_tokens():
    from residshift.study import tour

    key = dict(tour.token_key())
    for glyph in ("␣door", "␣×4", "↵", "⇥", "∅", "⟨EE⟩", "⟨06⟩", "⟨U+200D⟩", "inter…", "&#"):
        assert key.get(glyph), f"no meaning for {glyph!r}"
    assert len(key) == len(tour.TOKEN_KEY)  # each notation shown once
    page = book.token_key_html()
    assert "<dt><code>⟨EE⟩</code></dt>" in page and "<dt><code>&amp;#</code></dt>" in page

    assert book.shows_tokens(_nb(nbformat.v4.new_code_cell("fig, numbers = tour.trajectory_map(name, entry)")))
    assert book.shows_tokens(_nb(nbformat.v4.new_code_cell("show = token_text (tok, 3)")))
    assert not book.shows_tokens(_nb(nbformat.v4.new_markdown_cell("`token_text(tok, i)` shows a token"),
                                     nbformat.v4.new_code_cell("my_token_text(1); tour.slug('a')")))
    body, _ = book._exporter().from_notebook_node(_nb(nbformat.v4.new_code_cell("1")),
                                                  resources={"book_nav": "", "book_token_key": page})
    assert body.count('class="token-key"') == 1
    body, _ = book._exporter().from_notebook_node(_nb(nbformat.v4.new_code_cell("1")), resources={"book_nav": ""})
    assert 'class="token-key"' not in body


def test_summary_page_groups_the_saved_verdicts_by_claim_with_one_figure_each(tmp_path):
    from residshift.analysis.verdicts import CLAIMS, VerdictRow

    def row(model, variant, cid, verdict, **details):
        return VerdictRow(model=model, variant=variant, claim_id=cid, claim=CLAIMS[cid], verdict=verdict,
                          statistic="mean", estimate=0.123, ci=(0.1, 0.2), level=0.95, n=7, rule=f"{cid}. a rule",
                          details=details).as_dict()

    fig = tmp_path / "figures"
    fig.mkdir()
    (fig / "04-attenuation-sweep-verdicts.json").write_text(json.dumps([
        row("model-x", "block 3", "C2.late-cut", "not reproduced"),
        row("model-x", "block 3", "C2.layer-sensitive", "reproduced", evidence=False, evidence_why="a check"),
        row("model-y", None, "C2.late-cut", "inconclusive", pre_registered_verdict="reproduced")]))
    (fig / "07-learned-gates-and-benchmarks-verdicts.json").write_text(json.dumps([
        row("trained", "learned", "C4.benchmarks", "reproduced")]))
    (fig / "09-old-verdicts.json").write_text(json.dumps({"rows": []}))  # an older layout: named, not shown
    groups, skipped = book.report.summary_tables(fig)
    assert list(groups) == ["C2", "C4"] and skipped == ["09-old-verdicts.json"]
    assert groups["C2"].claims == ["C2.late-cut", "C2.layer-sensitive"]
    assert list(groups["C2"].rows) == [("04", "model-x", "block 3"), ("04", "model-y", "–")]

    site = tmp_path / "site"
    (site / "figures").mkdir(parents=True)
    (site / "figures" / book.SUMMARY_FIGURES["C2"][0]).write_bytes(b"png")  # C4's figure is missing
    page = book._summary_page("smoke", [], fig, site)
    c2, c4 = page.split('id="C2"')[1].split('id="C4"')
    assert c2.count("<tr><td>04</td>") == 2 and f'src="figures/{book.SUMMARY_FIGURES["C2"][0]}"' in c2
    assert '<span class="v-not-reproduced" title="not reproduced; mean 0.123 [0.1, 0.2], n = 7">✗</span>' in c2
    assert ">✓°</span>" in c2 and ">?*</span>" in c2  # not evidence; a post-hoc rule
    assert "not produced yet" in c4 and ">✓</span>" in c4 and "<img" not in c4
    assert CLAIMS["C2.late-cut"] in c2 and "09-old-verdicts.json" in page
    assert "summary-page" in page and '<a href="summary.html">' not in page  # no link to itself


def test_instructor_page_states_the_class_profiles_measured_times(tmp_path, monkeypatch):
    """Issue 51: the page listed warm default times as what fits a session, rounded 01 to "(0 min)" and said
    "Before class ... run --profile default". Now the class run's times come from its own record
    (benchmarks/RUNS-class.json, or build/class/figures), never from the committed figures/RUNS.json; a
    sub-minute run shows its seconds; before class means `make study PROFILE=class`; the exercise costs
    are the class profile's where `make class-key` measured them."""
    from residshift.tools import book

    entry = lambda s, load=None: {"wall_s": s, "peak_rss_mib": 3072, "finished": "2027-01-01T00:00:00Z",  # noqa: E731
                                  "machine": {"load_1min_at_start": load}}
    table = book.class_runs_table({"00-models-and-data": entry(37.0, 2.4), "01-the-causal-shift": entry(700.0)},
                                  {"00-models-and-data": "00-models-and-data.html"}, book.SESSION_RUN_S)
    assert '<td><a href="00-models-and-data.html">00</a></td><td>37 s</td><td>3.0 GiB</td><td>2.4</td><td>yes</td>' in table
    assert "<td>01</td><td>11.7 min</td>" in table and "<td>no</td>" in table
    assert table.count("not measured yet") == len(book.CLASS_NOTEBOOKS) - 2 and "in all" not in table
    every = {f"0{i}-x": entry(60.0 * (i + 1)) for i in range(len(book.CLASS_NOTEBOOKS))}
    assert "<td>in all</td><td>15.0 min</td>" in book.class_runs_table(every, {}, book.SESSION_RUN_S)

    committed, build = tmp_path / "committed", tmp_path / "build"
    committed.mkdir()
    (committed / "RUNS.json").write_text(json.dumps({"default": {"00-models-and-data": entry(66.0)}}))
    (tmp_path / "RUNS-class.json").write_text(json.dumps({"class": {"00-models-and-data": entry(48.0)}}))
    (tmp_path / "exercises-class.json").write_text(json.dumps({"notebooks": {"00-models-and-data": [
        {"exercise": 1, "title": "t", "seconds": 3.2, "ran": True, "error": False, "homework": False}]}}))
    monkeypatch.setattr(book, "COMMITTED_FIGURES", committed)
    monkeypatch.setattr(book, "committed_runs", lambda p: tmp_path / f"RUNS-{p}.json")
    monkeypatch.setattr(book, "CLASS_EXERCISE_COSTS", tmp_path / "exercises-class.json")
    monkeypatch.setenv("RESIDSHIFT_BUILD", str(build))
    ch = book.Chapter(path=Path("00-models-and-data.ipynb"), number="00", title_html="Models", summary_html="",
                      page="00-models-and-data.html", exercises=[("exercise-1", "t")])
    page = book._instructor_page("default", [ch], ["class", "default"], tmp_path / "nofigures", answers=tmp_path / "none")
    session = page.split("A 90-minute session")[1]
    assert '<td><a href="00-models-and-data.html">00</a></td><td>48 s</td>' in session and "66 s" not in session
    assert "(0 min)" not in page and "(3 s of solution at class; in class)" in page
    before = page.split("Before class")[1].split("A 90-minute session")[0]
    assert "make study PROFILE=class" in before and "--profile default" not in before


def _solved(number, title, question, outputs, *, failed=False):
    heading = nbformat.v4.new_markdown_cell(f"### Exercise {number} — {title}\n\n{question}")
    cell = nbformat.v4.new_code_cell(f"if show_solutions:\n    answer_{number}()", metadata={"tags": ["solution"]},
                                     execution_count=number)
    cell.outputs = outputs
    cell.metadata["papermill"] = {"status": "failed" if failed else "completed", "duration": 1.0}
    return [heading, cell]


def test_answer_key_renders_each_question_and_its_executed_solution_folded(tmp_path):
    """The instructor page's answer key, from synthetic executed notebooks of build/exercises/: the
    question (MathML), the solution's code and outputs (text, tables, images written beside the page,
    a raised assert with its last line) folded in <details>, the time measured at default beside it."""
    import base64
    import io

    from PIL import Image

    png = io.BytesIO()
    Image.new("RGB", (4, 3), "red").save(png, format="PNG")
    folder = tmp_path / "exercises"
    folder.mkdir()
    nb = _nb(nbformat.v4.new_markdown_cell("# 05 · Learned gates\n\nSummary."),
             nbformat.v4.new_markdown_cell("## Exercises"),
             *_solved(1, "Start at $\\alpha = 1$", "Fit the clamp gates for $n$ steps.",
                      [nbformat.v4.new_output("stream", name="stdout", text="after 80 steps 3.1234\n"),
                       nbformat.v4.new_output("display_data", data={
                           "image/png": base64.b64encode(png.getvalue()).decode(), "text/plain": "<Figure>"})]),
             *_solved(2, "Which tokens", "List them.",
                      [nbformat.v4.new_output("execute_result", data={"text/html": "<table><tr><td>tok</td></tr></table>",
                                                                      "text/plain": "df"}, execution_count=2),
                       nbformat.v4.new_output("error", ename="AssertionError", evalue="means differ",
                                              traceback=["\x1b[0;31mAssertionError\x1b[0m: means differ"])],
                      failed=True))
    nbformat.write(nb, folder / "05-learned-gates.ipynb")
    costs = {"05-learned-gates": {1: {"exercise": 1, "seconds": 84.0, "ran": True, "homework": True, "passed": True}}}
    site = tmp_path / "site"
    chapters = [book.Chapter(path=tmp_path / "05-learned-gates.ipynb", number="05", title_html="05",
                             summary_html="", page="05-learned-gates.html")]
    page = book.answer_key_html(folder, chapters=chapters, costs=costs, site=site)

    assert 'id="answer-key"' in page and '<a href="05-learned-gates.html">' in page
    first, second = page.split("<h4>")[1:]
    assert "Exercise 1 — Start at <math" in first and "Fit the clamp gates for <math" in first
    question, folded = first.split('<details class="book-solution answer">')
    assert "84 s of solution at default; homework" in folded and "answer check passed" in folded
    assert "answer_1()" in folded and "after 80 steps 3.1234" in folded
    img = folded.split('<img src="')[1].split('"')[0]
    assert (site / img).is_file() and Image.open(site / img).size == (4, 3)
    assert "<table><tr><td>tok</td></tr></table>" in second and "not timed at default yet" in second
    assert "answer check failed: AssertionError: means differ" in second and "\x1b" not in second
    assert page.count("<details") == page.count("</details>") == 2


def test_answer_key_without_executed_solutions_names_the_command(tmp_path):
    page = book.answer_key_html(tmp_path / "none", costs={})
    assert 'id="answer-key"' in page and "<code>make exercises</code>" in page and "<details" not in page
    assert "No executed solutions" in page
