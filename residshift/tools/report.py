"""The README's headline verdicts and docs/results.md, generated from the numbers the notebooks and
benchmarks saved.

No number in either file is typed by hand: ``python -m residshift report`` rewrites the README's block
between ``<!-- headline:start -->`` and ``<!-- headline:end -->`` (every verdict, one mark per claim id:
:func:`render_headline`) and docs/results.md's block between ``<!-- results:start -->`` and
``<!-- results:end -->`` (every table, rule and benchmark: :func:`render`) from ``figures/*.json`` and
``benchmarks/*.json``; ``python -m residshift report --check`` (and a test) fails when either file
and those files disagree.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from ..analysis import scale, verdicts
from ..analysis.verdicts import (INCONCLUSIVE, NOT_REPRODUCED, REPRODUCED, is_evidence, is_verdict_layout,
                                 rows_from_json)
from ..core.cache import atomic_write_text
from ..core.outputs import load_manifest, manifest_problems
from ..core import profiles
from ..core.paths import REPO_ROOT
from ..core.records import is_cold, load_runs
from ..study import tables
from ..study.prose import join

START, END = "<!-- results:start -->", "<!-- results:end -->"
HEAD_START, HEAD_END = "<!-- headline:start -->", "<!-- headline:end -->"
COST_START, COST_END = "<!-- cost:start -->", "<!-- cost:end -->"
README = REPO_ROOT / "README.md"
RESULTS = REPO_ROOT / "docs" / "results.md"


class ReportError(RuntimeError):
    pass


def _load(path: Path) -> Any | None:
    return json.loads(path.read_text()) if path.is_file() else None


def _num(x: Any, digits: int = 2) -> str:
    if x is None:
        return "–"
    if isinstance(x, float) and x != x:  # NaN
        return "n/a"
    if isinstance(x, (int, float)):
        return f"{x:.{digits}f}"
    return str(x)


def _ci(value, lo, hi, digits: int = 2) -> str:
    if value is None:
        return "never"
    if lo is None or hi is None:
        return _num(value, digits)
    return f"{_num(value, digits)} [{_num(lo, digits)}, {_num(hi, digits)}]"


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def _missing(what: str, source: str) -> str:
    return f"_{what}: not produced yet (`{source}` is missing; run `make study`)._"


# --------------------------------------------------------------------------------------------
# Sections, one per source of numbers
# --------------------------------------------------------------------------------------------


def section_sanity(fig: Path, bench: Path) -> str:
    d = _load(fig / "00-models-and-data.json")
    if d is None:
        return _missing("Perplexity sanity check", "figures/00-models-and-data.json")
    rows = []
    for r in d["perplexity"]:
        rows.append([r["model"], str(r["windows"]), f"{r['tokens']:,}",
                     f"{_num(r['ppl'], 1)} ± {_num(r['ppl_se'], 1)}", f"{r['uniform_ppl']:,}"])
    text = ("**Sanity check** (notebook 00): perplexity on WikiText-2 validation windows, each window "
            "from scratch (± 1 SE over windows).\n\n"
            + _table(["model", "windows", "tokens scored", "perplexity", "uniform baseline"], rows))
    facts = d.get("models")
    if facts:
        text += "\n\n" + _model_facts(facts)
    defs = d.get("perplexity_definitions")
    if defs:
        text += "\n\n" + _perplexity_definitions(defs)
    return text


def _model_facts(facts) -> str:
    """Notebook 00's models table: size, depth, and the matrix the lens reads through."""
    rows = []
    for r in facts:
        if r.get("tied_same_tensor"):
            reads = "tied E (one tensor)"
        else:
            rel, cos = r.get("head_vs_embedding_rel_dist"), r.get("head_vs_embedding_row_cos")
            reads = (f"its output head (untied; head vs input embedding: relative distance {_num(rel, 3)}, "
                     f"row cosine {_num(cos, 4)})")
        rows.append([r["name"], f"{r['params'] / 1e6:,.0f}M", str(r["layers"]), str(r["d_model"]),
                     f"{r['vocab']:,}", reads, _num(r.get("load_s"), 1)])
    return ("Models (notebook 00; `load_s`: seconds to load the cached fp32 weights):\n\n"
            + _table(["model", "parameters", "layers", "d", "vocabulary", "lens reads through", "load (s)"], rows))


def _perplexity_definitions(defs) -> str:
    """Both WikiText perplexity definitions per model (notebook 00, ``evaluate.perplexity_definitions``)."""
    rows = [[r["model"], f"{_num(r['sliding_ppl'], 2)}", f"{_num(r['sliding_word_ppl'], 1)} ± "
             f"{_num(r['sliding_word_ppl_se'], 1)}",
             f"{r['sliding_windows']} of {r['sliding_windows_total']} (context {r['sliding_context']}, "
             f"stride {r['sliding_stride']})",
             f"{_num(r['doc_ppl'], 2)}", f"{_num(r['doc_word_ppl'], 1)}", f"{_num(r['doc_bits_per_byte'], 3)}",
             f"{r['documents']} of {r['documents_total']} (max_length {r['doc_max_length']})",
             "–" if "doc_unk" not in r else f"{r['doc_unk']}, as {'one special token' if r['doc_unk_special'] else 'text'}"]
            for r in defs]
    corpus = defs[0].get("corpus", "wikitext-2")
    return (f"Two definitions of WikiText perplexity ({corpus}, notebook 00): ours slides a window over "
            "the whole split (strided, so every token after the first window has context); "
            "lm-evaluation-harness's `wikitext` task scores each article in disjoint windows of `max_length` "
            "tokens and reports perplexity per word, which rises as `max_length` falls. Per-word numbers do "
            "not depend on the tokenizer; per-token ones do. lm-eval tokenizes with the tokenizer's defaults, "
            "which turn WikiText-v1's literal `<unk>` into a special token where the tokenizer has one.\n\n"
            + _table(["model", "sliding: per token", "sliding: per word", "sliding: windows",
                      "per article: per token", "per article: per word", "bits per byte", "articles",
                      "literal <unk> in those articles (lm-eval's tokenization)"], rows))


def section_harness(fig: Path, bench: Path) -> str:
    rows_in = _load(bench / "harness-default.json")
    if rows_in is None:
        return _missing("Evaluation harness", "benchmarks/harness-default.json")
    wanted = [("wikitext-103-validation", "ppl"), ("wikitext-103-validation", "word_ppl"),
              ("lambada", "acc"), ("piqa", "acc_norm"), ("arc-easy", "acc"),
              ("arc-challenge", "acc_norm")]
    models = list(dict.fromkeys(r["model"] for r in rows_in))
    by = {(r["model"], r["task"], r["metric"]): r for r in rows_in}
    rows = []
    for task, metric in wanted:
        cells = []
        n = None
        for m in models:
            r = by.get((m, task, metric))
            cells.append("–" if r is None else f"{_num(r['value'], 3 if r['value'] < 2 else 1)} ± "
                                               f"{_num(r['se'], 3 if r['value'] < 2 else 1)}")
            n = r["n"] if r else n
        rows.append([task, metric, str(n)] + cells)
    refs = [r for r in rows_in if r.get("reference") is not None]
    text = ("**Evaluation harness** (`benchmarks/bench_evaluate.py --profile default`; ± 1 SE; "
            "n = windows for perplexity, items for the tasks, a seeded subsample at this profile).\n\n"
            + _table(["task", "metric", "n"] + models, rows))
    if refs:
        ref_rows = [[r["model"], r["task"], r["metric"], _num(r["value"], 3), _num(r["reference"], 3),
                     f"{r['diff_in_se']:+.1f}",
                     f"{r.get('reference_what', '')} <{r.get('reference_url', '')}>"]
                    for r in refs]
        text += ("\n\nAgainst published numbers (references, not ours):\n\n"
                 + _table(["model", "task", "metric", "ours", "published", "Δ / SE", "source"], ref_rows))
    return text


def _depth(e: dict | None) -> str:
    if not e:
        return "–"
    if e.get("crossing") is None:
        return "never"
    return _ci(e.get("relative"), e.get("relative_lo"), e.get("relative_hi"), 2)


# Metrics whose half-way depths are meaningful (notebook 03 explains why the others are not);
# the full table is figures/03-alignment-curves-shift-table.json.
SHIFT_METRICS = ("top1", "prob", "logrank", "cos_centred")


def section_shift(fig: Path, bench: Path) -> str:
    d = _load(fig / "03-alignment-curves-shift-table.json")
    if d is None:
        return _missing("Shift layers", "figures/03-alignment-curves-shift-table.json")
    rows = []
    for model, entries in d.items():
        for e in entries:
            if e["metric"] not in SHIFT_METRICS:
                continue
            if "crossing" in e and isinstance(e["crossing"], dict):
                cross, fade, emerge = e["crossing"], e.get("fade"), e.get("emergence")
            else:  # a single estimate per metric
                cross, fade, emerge = e, None, None
            rows.append([model, e["metric"], str(cross["n_layers"]), _depth(fade), _depth(cross),
                         _depth(emerge), _ci(emerge.get("crossing"), emerge.get("lo"), emerge.get("hi"), 1)
                         if emerge and emerge.get("crossing") is not None else "–"])
    return ("**Where the shift happens** (notebook 03), as relative depth l / L with 95% bootstrap CIs "
            "over windows (our definitions, stated in notebook 03): *input fade*, where input "
            "alignment has fallen half-way from layer 0 to layer L; *crossing*, where next-token "
            "alignment first overtakes input alignment; *next-token emergence*, where next-token "
            "alignment has risen half-way. The paper reports a switch around layer 17 of 26 for "
            "Gemma-2-2B **[paper]**, relative depth ≈ 0.65. Half-way depths are not meaningful for "
            "every metric: the table shows the four where they are (all metrics: "
            "`figures/03-alignment-curves-shift-table.json`).\n\n"
            + _table(["model", "metric", "layers", "input fade", "crossing", "next-token emergence",
                      "emergence layer [95% CI]"], rows))


def _verdict_rows(rows) -> list[list[str]]:
    """One table line per :class:`~residshift.analysis.verdicts.VerdictRow` (``tables.verdict_record``)."""
    out = []
    for r in rows:
        rec = tables.verdict_record(r)
        rec["verdict"] = f"**{rec['verdict']}**"
        out.append([rec[c] for c in tables.COLUMNS])
    return out


def _without_prefix(rule: str, cid: str) -> str:
    """A rule's text without its own claim id in front (the list shows the id already)."""
    return rule[len(cid):].lstrip(". ") if rule.startswith(cid) else rule


def _rules(rows) -> str:
    """Each distinct rule once, under its claim id, folded."""
    seen: dict[tuple[str, str], None] = {}
    for r in rows:
        seen.setdefault((r.claim_id, r.rule), None)
    items = "\n".join(f"- **{cid}**: {_without_prefix(rule, cid)}" for cid, rule in seen)
    return f"<details><summary>Rules</summary>\n\n{items}\n\n</details>"


def section_provenance(fig: Path, bench: Path) -> str:
    """Which code made the outputs, and the last measured run of each notebook (``RUNS.json``)."""
    entries = load_manifest(fig)
    if not entries:
        return _missing("Provenance", "figures/MANIFEST.json")
    by_nb: dict[str, dict[str, Any]] = {}
    for name, e in entries.items():
        nb = by_nb.setdefault(name[:2], {"files": 0, "commits": set(), "profiles": set()})
        nb["files"] += 1
        nb["commits"].add(str(e.get("commit")) + ("-dirty" if e.get("code_dirty") else ""))
        nb["profiles"].add(str(e.get("profile")))
    runs = load_runs(fig / "RUNS.json").get("default", {})
    rows, total, first_half = [], 0.0, 0.0
    bounds = bound_multiples(_load(bench / BOUNDS_FILE))
    stems = sorted(set(runs) | {f"{k}-…" for k in by_nb if not any(r.startswith(k) for r in runs)})
    for stem in stems:
        r = runs.get(stem, {})
        nb = by_nb.get(stem[:2], {"files": 0, "commits": set(), "profiles": set()})
        total += r.get("wall_s") or 0.0
        first_half += (r.get("wall_s") or 0.0) if stem[:2] <= "05" else 0.0
        load = (r.get("machine") or {}).get("load_1min_at_start")
        written = r.get("results_written")
        slow = (r.get("slowest_cells") or [None])[0]
        rows.append([f"`{stem}`", _num(None if not r else r["wall_s"] / 60, 1), _num(r.get("peak_rss_mib"), 0),
                     _num(load, 1), "–" if written is None else ("0 (all cached)" if written == 0 else str(written)),
                     "–" if not slow else f"{slow['s'] / 60:.1f}: `{slow['code'].replace('|', '/')}`",
                     bounds.get(stem[:2], "–"),
                     str(r.get("commit", "–")) + ("-dirty" if r.get("code_dirty") else ""),
                     str(nb["files"]), ", ".join(sorted(nb["commits"])) or "–", ", ".join(sorted(nb["profiles"])) or "–"])
    problems = manifest_problems(entries)
    cpus = next(((r.get("machine") or {}).get("cpus") for r in runs.values()), None)
    models = sorted({f"{m['cpu']} ({', '.join(m.get('native_bf16') or []) or 'no native bf16'})"
                     for m in (r.get("machine") or {} for r in runs.values()) if m.get("cpu")})
    return ("**Provenance and run times** (`figures/MANIFEST.json`, `figures/RUNS.json`; the runner measures "
            f"every notebook it runs; {cpus or '?'} CPU cores"
            + (f", {'; '.join(models)}" if models else "")
            + ", load = 1-minute load average when the notebook "
            "started; results written = files the notebook wrote to the results cache, 0 when it only reused "
            "cached results, so a warm rerun shows as such; slowest cell = the notebook's longest cell, in minutes, "
            "and its first line; the times are those of the last run):\n\n"
            + _table(["notebook (default)", "minutes", "peak RSS (MiB)", "load", "results written", "slowest cell",
                      "× FLOP bound", "run at commit", "outputs", "outputs' commits", "profile"], rows)
            + f"\n\nTotal of the last runs: {_num(total / 60, 1)} minutes, of which notebooks 00–05 "
            f"{_num(first_half / 60, 1)}. " + _cold_run_note(runs) + _grid_time_note(fig, runs)
            + ("Every output comes from committed code." if not problems else
               f"**{len(problems)} outputs do not come from committed code** (first: {problems[0]}).")
            + "\n\n" + section_bounds(bench))


BOUNDS_FILE = "bench-bounds.json"
BOUND_STAGES = {"03": ("lens", "tuned-lens step"), "04": ("sweep cell",), "05": ("gate-fit step", "item scoring"),
                "06": ("training step",), "10": ("training step",)}
"""The stages of ``benchmarks/bench_bounds.py`` each notebook spends its time in."""
BOUNDS_COMMAND = "nice .venv/bin/python benchmarks/bench_bounds.py --json benchmarks/bench-bounds.json"


def bound_multiples(b: Mapping[str, Any] | None) -> dict[str, str]:
    """``{notebook prefix: "lens ×1.3, …"}``: each notebook's stages as multiples of their FLOP bound."""
    if not b:
        return {}
    rows = b.get("stages", [])
    out = {}
    for nb, stages in BOUND_STAGES.items():
        cells = [f"{r['stage']} ×{r['multiple']:.2f}" + (f" ({r['model']})" if len(mine) > 1 else "")
                 for st in stages for mine in [[r for r in rows if r["stage"] == st]] for r in mine]
        if cells:
            out[nb] = ", ".join(cells)
    return out


def section_bounds(bench: Path) -> str:
    """Every stage's time as a multiple of its fp32 GEMM bound on the machine it ran on
    (``benchmarks/bench-bounds.json``, written by ``benchmarks/bench_bounds.py``)."""
    b = _load(bench / BOUNDS_FILE)
    if b is None:
        return (f"_FLOP bounds: not measured yet (`benchmarks/{BOUNDS_FILE}` is missing; run "
                f"`{BOUNDS_COMMAND}`)._")
    m = b["machine"]
    rows = [[r["stage"], r["model"], r["unit"], _num(r["flops"] / 1e9, 1), _num(r["bound_s"], 3),
             _num(r["measured_s"], 3), f"{r['multiple']:.2f}", f"≤ {r['target']:.1f}", _met(r["met"])]
            for r in b["stages"]]
    loads = [x for r in b["stages"] for rd in r["rounds"] for x in rd["load"]]
    met = sum(r["met"] for r in b["stages"])
    return (f"**Stages against their FLOP bound** (`benchmarks/bench_bounds.py`, `benchmarks/{BOUNDS_FILE}`; "
            f"{m['cpu']}, {m['threads']} threads, 1-minute load {_num(min(loads), 1)}–{_num(max(loads), 1)} on "
            f"{m.get('cpu_count', '?')} cores shared with other processes): the bound is the time the stage's "
            "matrix products take at the sustained fp32 `torch.matmul` rate of their shapes, timed in the same "
            "process, interleaved with the stage over "
            f"{b['rounds']} rounds; load only adds time, so measured is the stage's fastest round and the bound "
            f"sums each product's fastest timing; × bound = measured / bound. {met} of {len(rows)} stages meet "
            "their target:\n\n"
            + _table(["stage", "model", "one unit", "GFLOP", "bound (s)", "measured (s)", "× bound", "target",
                      "met"], rows))


def _cold_run_note(runs: Mapping[str, Any]) -> str:
    """The last ``run`` that started from an empty results cache (what a fresh clone pays, the grid's
    training included): its notebooks and their total, kept in RUNS.json through later warm or
    partial reruns (``runner.record_run``), and whether the models were prepared before it."""
    by_start: dict[str, dict[str, dict[str, Any]]] = {}
    for stem, r in runs.items():
        c = r if is_cold(r) else r.get("cold_run")
        if c:
            by_start.setdefault(c["invocation"].get("started", "?"), {})[stem] = c
    if not by_start:
        return ("No run from an empty results cache (a fresh clone's cost, training included) is recorded yet: "
                "`python -m residshift run` records one when it starts with no cached results. ")
    started = max(by_start)
    cold = by_start[started]
    asked = next(iter(cold.values()))["invocation"].get("notebooks") or []
    missing = [n for n in asked if not any(s.startswith(n) for s in cold)]
    total = sum(c["wall_s"] for c in cold.values())
    first = sum(c["wall_s"] for s, c in cold.items() if s[:2] <= "05")
    stems = sorted(cold)
    commits = sorted({str(c.get("commit")) + ("-dirty" if c.get("code_dirty") else "") for c in cold.values()})
    same = all(runs[s] is c for s, c in cold.items())
    ready = next(iter(cold.values()))["invocation"].get("models_prepared_at_start")
    return ("From an empty results cache (as on a fresh clone"
            + ("" if ready is None else f"; models prepared before it: {', '.join(ready) or 'none, 00 prepared them'}")
            + f"): the run started "
            f"{started} at commit {', '.join(commits)} took {_num(total / 60, 1)} minutes for "
            + (f"notebooks {stems[0][:2]}–{stems[-1][:2]}" if len(stems) > 1 else f"notebook {stems[0][:2]}")
            + " ("
            + (f"{_num(first / 60, 1)} for 00–05; " if stems[0][:2] <= "05" < stems[-1][:2] else "")
            + "; ".join(f"{s[:2]} {_num(cold[s]['wall_s'] / 60, 1)}" for s in stems) + ")"
            + (f"; {', '.join(missing)} did not finish in it" if missing else "")
            + (". " if same else ". The table above shows later reruns where they replaced it. ")
            + ("" if set(cold) >= set(runs) else
               f"The table's rows for {', '.join(s[:2] for s in sorted(set(runs) - set(cold)))} come from other runs. ")
            + ("" if set(cold) >= set(runs) else _cold_sum_note(runs)))


def latest_cold(runs: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """``{notebook: its latest recorded run from empty caches}``, for the notebooks that have one."""
    cold = {s: (r if is_cold(r) else r.get("cold_run")) for s, r in runs.items()}
    return {s: c for s, c in cold.items() if c}


def render_cost(figures: Path | None = None) -> str:
    """The README's answer to "how long does ``make study`` take": the whole study from empty caches on
    the machine it was measured on, in one run where one covered every notebook, else each notebook's
    latest such run summed (said as an estimate); the two longest notebooks."""
    fig = Path(figures or REPO_ROOT / "figures")
    runs = load_runs(fig / "RUNS.json").get("default", {})
    have = latest_cold(runs)
    lines = [COST_START, "<!-- generated by `python -m residshift report` from figures/RUNS.json; do not edit by "
             "hand -->", ""]
    if not have:
        lines.append("_How long `make study` takes from a fresh clone is not measured yet (`figures/RUNS.json` "
                     "holds no run from empty caches)._")
    else:
        machines = sorted({f"{c['machine']['cpus']} cores ({c['machine']['cpu']})" for c in have.values()
                           if (c.get("machine") or {}).get("cpu")})
        starts = sorted({c["invocation"].get("started", "?") for c in have.values()})
        total = sum(c["wall_s"] for c in have.values()) / 60
        longest = sorted(have.items(), key=lambda kv: -kv[1]["wall_s"])[:2]
        whole = len(starts) == 1 and len(have) == len(runs)
        lines.append(
            "**How long.** From a fresh clone (empty caches: it prepares the models and trains the grid), "
            + (f"`make study`'s notebooks took {_num(total, 0)} minutes in one run (installing the environment before them is not timed)" if whole else
               f"`make study`'s notebooks take about {_num(total, 0)} minutes, the sum of each notebook's latest "
               f"run from empty caches ({len(starts)} separate runs"
               + ("" if len(have) == len(runs) else
                  f"; none recorded for {', '.join(s[:2] for s in sorted(set(runs) - set(have)))}") + ")")
            + f" on {join(machines) or 'an unrecorded machine'}; the longest are "
            + join([f"{s[:2]} ({_num(c['wall_s'] / 60, 0)} min)" for s, c in longest])
            + ". A rerun recomputes only what a change of code or inputs made stale. "
            "Each notebook's times are in [docs/results.md](docs/results.md) (Provenance).")
    lines += ["", COST_END]
    return "\n".join(lines)


def _cold_sum_note(runs: Mapping[str, Any]) -> str:
    """What a whole study from empty caches costs when no single cold run covered it: every notebook's
    latest run from empty caches, summed, with the runs it is made of (a sum of runs on possibly
    different days, loads and commits: an estimate, said as such)."""
    have = latest_cold(runs)
    starts = sorted({c["invocation"].get("started", "?") for c in have.values()})
    if len(starts) < 2:  # one run: the sentence before says it
        return ""
    return (f"Each notebook's latest run from empty caches, summed ({len(have)} of {len(runs)} notebooks, "
            f"{len(starts)} runs started {', '.join(starts)}): {_num(sum(c['wall_s'] for c in have.values()) / 60, 1)} "
            "minutes, an estimate of the whole study from a fresh clone ("
            + "; ".join(f"{s[:2]} {_num(c['wall_s'] / 60, 1)} at {c.get('commit', '?')}" for s, c in sorted(have.items()))
            + ")" + ("" if len(have) == len(runs) else
                     f"; no such run is recorded for {', '.join(s[:2] for s in sorted(set(runs) - set(have)))}")
            + ". ")


def _grid_time_note(fig: Path, runs: Mapping[str, Any]) -> str:
    """Where the training grid's time goes in the table: into whichever notebook first needed runs
    that did not exist yet (06 on a fresh clone), into none when they were trained beforehand."""
    g = _load(fig / "06-training-with-attenuation-grid.json")
    if g is None:
        return ""
    return (f"Training the grid took {_num(g['train_seconds'] / 60, 1)} minutes of training time "
            f"({g['runs']} runs, `figures/06-training-with-attenuation-grid.json`). A notebook that trains runs "
            "(06 on a fresh clone, or a later one after the training code changed) counts that time in its "
            "minutes; runs trained beforehand by `python -m residshift train-grid` count in none. ")


def section_verdicts(fig: Path, bench: Path) -> str:
    """Every verdict file's rows and rules; the training verdicts (06 on) open with what this machine's
    scale can say about them (:func:`section_scale`)."""
    parts = []
    for path in sorted(fig.glob("*verdict*.json")):
        if path.name.startswith(TRAINING_VERDICTS[0][:3]):
            parts.append(section_scale(fig, bench))
        data = _load(path)
        if not is_verdict_layout(data):
            parts.append(f"`figures/{path.name}` is in an older verdict layout and is not shown: rerun the "
                         "notebook that writes it.")
            continue
        rows = rows_from_json(data, f"figures/{path.name}")
        parts.append(f"From `figures/{path.name}`:\n\n"
                     + _table(["model", "variant", "claim", "verdict", "statistic", "estimate [95% CI]", "n",
                               "MDE", "per seed"], _verdict_rows(rows))
                     + "\n\n" + _rules(rows))
    if not parts:
        return _missing("Verdicts", "figures/*verdict*.json")
    return ("**Verdicts**, each from a rule in `residshift.analysis.verdicts` (a rule revised after its first "
            "numbers says *post hoc* in its text; statistic, test, level, correction and what produces each outcome are stated under each "
            "table; MDE = the minimum detectable effect at 80% power where the rule reports one):\n\n"
            + "\n\n".join(parts))


BEFORE_19 = "verdicts-before-issue-19"  # benchmarks/<this>/: the verdict files as the rules before issue 19 left them
BEFORE_19_COMMIT = "6d12dd2"  # the commit whose rules made those files (where they were copied from)


def _match_key(row) -> tuple:
    """What pairs a row under the old rules with one under the new: model, claim (a sensitivity or
    material row pairs with the claim it was split from), the depth metric, and the variant where it
    names a decoder, a cut or a gate (C2.layer-sensitive's variant changed with its rule)."""
    cid = row.claim_id.replace(".sensitivity", "").replace(".material", "")
    variant = None if cid == "C2.layer-sensitive" else row.variant
    return (row.model, cid, variant, row.details.get("metric"))


def before_after(old_rows, new_rows) -> list[list[str]]:
    """One line per new row: its verdict under the new rules beside the paired old row's ('–' when the
    claim is new), marking changes."""
    old, exact = {}, {}
    for r in old_rows:
        old.setdefault(_match_key(r), r)
        exact.setdefault((r.model, r.claim_id, r.variant, r.details.get("metric")), []).append(r)
    out = []
    for r in new_rows:  # the same claim id first (in order, for repeated rows), else the claim it was split from
        same = exact.get((r.model, r.claim_id, r.variant, r.details.get("metric")))
        o = same.pop(0) if same else old.get(_match_key(r))
        before = "–" if o is None else o.verdict
        mark = "" if o is not None and o.verdict == r.verdict else " (changed)" if o is not None else " (new row)"
        out.append([r.model, r.variant or "–", r.claim_id, before, f"**{r.verdict}**{mark}"])
    return out


BEFORE_34 = "verdicts-before-issue-34"  # benchmarks/<this>/: the verdict files as they stood before issue 34
BEFORE_34_COMMIT = "8ffc90c"
# What issue 34 changed, in words (the rows before and after are computed): filled in with the changes.
CHANGED_34 = ("the logit and tuned lenses read 344 windows instead of 32 (16 positions each), so that each C1 "
              "outcome is reachable at the real layer counts; the tuned lens starts from the closed-form least-squares "
              "map and is refined by KL to convergence on every layer; C1.early's extent rule and C1.depth are "
              "labelled post hoc; the tuned lens's C1.early and C1.middle rows are not counted as evidence; the training verdicts need the exact sign-flip test beside the "
              "t-interval, show the candidate that decides, hold gates and cuts to one 'not materially worse' "
              "clause, and the training grid was retrained with oneMKL's reproducible kernels (a run bit-identical on "
              "an Intel Xeon and an AMD EPYC; of the whole grid, every variant but the token-gated one).")


def _rules_change(old_dir: Path, new_files: list[Path], *, title: str, commit: str, what: str) -> str:
    """Each verdict row of ``new_files`` beside the row of the same name in ``old_dir`` (one revision)."""
    if not old_dir.is_dir():
        return _missing(f"Verdicts before and after {title}", f"benchmarks/{old_dir.name}/")
    lines, changed, total = [], 0, 0
    for path in new_files:
        old_path = old_dir / path.name
        new_data, old_data = _load(path), _load(old_path)
        if not (is_verdict_layout(new_data) and is_verdict_layout(old_data)):
            continue
        rows = before_after(rows_from_json(old_data, str(old_path)), rows_from_json(new_data, str(path)))
        changed += sum("(changed)" in r[-1] for r in rows)
        total += len(rows)
        lines.append(f"`{path.name}`:\n\n" + _table(["model", "variant", "claim", "before", "after"], rows))
    if not lines:
        return _missing(f"Verdicts before and after {title}", "figures/*verdicts.json")
    return (f"<details><summary><b>Verdicts before → after {title}</b> "
            f"({changed} of {total} rows changed verdict; before = the files in `benchmarks/{old_dir.name}/`, "
            f"made at commit {commit})</summary>\n\n"
            f"What changed: {what}\n\n" + "\n\n".join(lines) + "\n\n</details>")


def section_rules_change(fig: Path, bench: Path) -> str:
    """The rule revisions made after the numbers were seen, newest first: each verdict before and after,
    from the saved files of the last run before each revision. Issue 19's 'after' is the files as they
    stood before issue 34 (the revision in between them)."""
    parts = [_rules_change(bench / BEFORE_34, sorted(fig.glob("*verdicts.json")), title="issue 34",
                           commit=BEFORE_34_COMMIT, what=CHANGED_34)]
    after_19 = sorted((bench / BEFORE_34).glob("*verdicts.json")) or sorted(fig.glob("*verdicts.json"))
    parts.append(_rules_change(
        bench / BEFORE_19, after_19, title="the rules of issue 19", commit=BEFORE_19_COMMIT,
        what=("C1.early / C1.late judge a regime's extent (a run of at least "
              f"ceil({verdicts.C1_EXTENT_FRACTION:g} L) layers), "
              "not one layer; C1.depth is labelled post hoc, reads one primary metric (the others are sensitivity "
              "rows) and turns inconclusive when raw text moves it by more than its interval; "
              "C2.layer-sensitive compares late blocks only, with a permutation test; an improvement must be "
              "material to be reproduced; concentration is two rows (relative, material); every inconclusive row "
              "says why.")))
    return "\n\n".join(parts)


def _met(ok: bool) -> str:
    return "met" if ok else "**missed**"


def section_benchmarks(fig: Path, bench: Path) -> str:
    parts = []
    lens_b = _load(bench / "bench-lens.json")
    if lens_b is not None:
        parts.append(_lens_benchmark(lens_b))
    sweep_b = _load(bench / "bench-sweep.json")
    if sweep_b is not None:
        parts.append(
            f"**Sweep benchmark** (`benchmarks/bench_sweep.py`, {sweep_b['model']}, "
            f"{sweep_b['windows']} windows × {sweep_b['window']} tokens, every layer × "
            f"{sweep_b['alphas']} alphas): prefix-reusing sweep {_num(sweep_b['cheap_s'], 1)} s vs one "
            f"full forward per (layer, α) {_num(sweep_b['naive_s'], 1)} s: **{_num(sweep_b['speedup'], 2)}× "
            f"faster**, max |Δ dloss| between the two = {sweep_b['max_abs_diff_dloss']:.1e}.")
    harness_b = _load(bench / "bench-harness.json")
    if harness_b is not None:
        parts.append(_harness_benchmark(harness_b))
    items_b = _load(bench / "bench-item-scoring.json")
    if items_b is not None:
        parts.append(_item_scoring_benchmark(items_b))
    for path in sorted(bench.glob("bench-train*.json")):  # one file per machine measured
        b = _load(path)
        if b.get("machine", {}).get("device") != "cuda":
            parts.append(_train_benchmark(b, path.name))
    device_b = _device_check(bench)
    if device_b:
        parts.append(device_b)
    tuned_b = _load(bench / "bench-tuned-lens.json")
    if tuned_b is not None:
        parts.append(_tuned_lens_benchmark(tuned_b))
    if not parts:
        return _missing("Benchmarks", "benchmarks/bench-*.json")
    return "\n\n".join(parts)


def _load_range(b: dict) -> str:
    lo, hi = b.get("load_during") or [b.get("load_at_start"), b.get("load_at_end")]
    return f"1-min load average {_num(lo, 1)}–{_num(hi, 1)} on {b.get('cpu_count', '?')} cores"


def _lens_benchmark_before_compile(lens_b: dict) -> str:
    """bench-lens.json as written before the compiled metric function (no ``compile_s``): rerun
    ``benchmarks/bench_lens.py --bf16`` for the current layout."""
    rows = [["streamed metrics pass (fp32)", _num(lens_b["streamed_s"], 1),
             _num(lens_b["streamed_peak_mib"], 0)],
            ["streamed metrics pass, bf16 matmul", _num(lens_b.get("streamed_bf16_s"), 1),
             _num(lens_b.get("streamed_bf16_peak_mib"), 0)],
            ["bare unembedding matmuls (fp32)", _num(lens_b["bare_s"], 1), "–"],
            ["bare unembedding matmuls (bf16)", _num(lens_b.get("bare_bf16_s"), 1), "–"],
            ["reference: output_hidden_states + full logits + argsort",
             _num(lens_b.get("reference_s"), 1), _num(lens_b.get("reference_peak_mib"), 0)],
            ["streamed pass on a quarter of the tokens", _num(lens_b["streamed_quarter_s"], 1),
             _num(lens_b["streamed_quarter_peak_mib"], 0)]]
    check = lens_b.get("check", {})
    ratio_ref = (lens_b["reference_s"] / lens_b["streamed_s"]) if lens_b.get("reference_s") else None
    ratio_bare = lens_b["streamed_s"] / lens_b["bare_s"]
    return (
        f"**Lens benchmark** (`benchmarks/bench_lens.py --bf16`, {lens_b['model']}, "
        f"{lens_b['tokens']:,} tokens × {lens_b['layers']} layers, {lens_b['threads']} threads, "
        "one invocation):\n\n"
        + _table(["pass", "seconds", "peak traced memory (MiB)"], rows)
        + f"\n\nStreamed vs argsort reference: **{_num(ratio_ref, 2)}× faster** (target ≥ 10×: "
        f"{_met(ratio_ref is not None and ratio_ref >= 10)}); streamed / bare matmul: "
        f"**{_num(ratio_bare, 2)}×** (target ≤ 1.5×: {_met(ratio_bare <= 1.5)}). Memory of the streamed pass does not grow with the corpus "
        f"({_num(lens_b['streamed_quarter_peak_mib'], 0)} MiB at a quarter of the tokens, "
        f"{_num(lens_b['streamed_peak_mib'], 0)} MiB at all of them). Agreement with the reference: "
        f"ranks {_num(100 * check.get('rank_next_agree', float('nan')), 2)}% (the rest are float ties), "
        f"top-1 {_num(100 * check.get('top1_next_agree', float('nan')), 2)}%.")


def _reference_what(b: dict) -> str:
    """What the lens benchmark timed as its reference (files written before the package had a reference
    lens timed an argsort of the full logits; rerun ``bench_lens.py`` to time the package's)."""
    return b.get("reference", "output_hidden_states + full logits + argsort (the benchmark's reference "
                              "before the package's reference lens; rerun bench_lens.py to time that one)")


def _lens_benchmark(b: dict) -> str:
    if "compile_s" not in b:
        return _lens_benchmark_before_compile(b)
    mem = lambda key: _num(b.get(key + "_peak_mib"), 0)  # noqa: E731
    rows = [["streamed pass, compiled metric function (fp32)", _num(b["streamed_s"], 1), mem("streamed")],
            ["streamed pass, eager metric function (fp32)", _num(b.get("eager_s"), 1), mem("eager")],
            ["bare unembedding matmuls (fp32)", _num(b["bare_s"], 1), "–"],
            ["streamed pass, compiled, bf16 matmul", _num(b.get("streamed_bf16_s"), 1), mem("streamed_bf16")],
            ["bare unembedding matmuls (bf16)", _num(b.get("bare_bf16_s"), 1), "–"],
            [f"reference: {_reference_what(b)}", _num(b.get("reference_s"), 1), mem("reference")],
            ["streamed pass on a quarter of the tokens", _num(b["streamed_quarter_s"], 1),
             mem("streamed_quarter")],
            ["streamed pass on all of them", _num(b["streamed_full_s"], 1), mem("streamed_full")],
            ["compiling the metric functions (first call, empty inductor cache)", _num(b["compile_s"], 1), "–"]]
    check = b.get("check", {})
    ratio_ref, ratio_bare = b.get("speedup_vs_reference"), b["ratio_vs_bare_matmul"]
    pays = b["compile_pays_at_default"]
    text = (f"**Lens benchmark** (`benchmarks/bench_lens.py --bf16`, {b['model']}, "
            f"{b['tokens']:,} tokens × {b['layers']} layers × {b['vocab']:,} vocabulary, all metrics, "
            f"{b['threads']} threads, one invocation: {b['rounds']} interleaved rounds, seconds are their "
            f"mean, ratios the median of the per-round ratios; {_load_range(b)}):\n\n"
            + _table(["pass", "seconds", "peak memory above start (MiB)"], rows)
            + f"\n\nStreamed vs {'argsort ' if 'reference' not in b else ''}reference: **{_num(ratio_ref, 2)}× faster** "
            f"(target ≥ 10×: {_met(ratio_ref is not None and ratio_ref >= 10)}); streamed / bare matmul: "
            f"**{_num(ratio_bare, 2)}×** (target ≤ 1.5×: {_met(ratio_bare <= 1.5)}); eager / bare "
            f"{_num(b.get('ratio_eager_vs_bare_matmul'), 2)}×.")
    if b.get("reference_vs_bare_matmul"):
        text += (f" The reference itself takes {_num(b['reference_vs_bare_matmul'], 2)}× the bare fp32 "
                 "matmuls, so no lens that pays those matmuls can be 10× faster than it in fp32: the "
                 "reference target is out of reach on this CPU, by the cost of the matmuls alone.")
    if b.get("ratio_bf16_vs_bare_bf16") is not None:
        text += (f" With a bf16 matmul: streamed / bare bf16 {_num(b['ratio_bf16_vs_bare_bf16'], 2)}×, "
                 f"{_num(b.get('speedup_bf16_vs_reference'), 2)}× the reference; the bf16 matmul itself "
                 f"takes {_num(b.get('bf16_matmul_vs_fp32_matmul'), 2)}× the fp32 one on this CPU.")
    text += (f" Compiling costs {_num(b['compile_s'], 0)} s once per process and saves about "
             f"{_num(pays['eager_time_saved_s'], 0)} s on the default profile's lens pass of this model "
             f"({pays['default_logits']:,} logits): {'it pays' if pays['pays'] else 'it does **not** pay'}"
             " (the lens compiles on its own from 10⁹ logits per pass). Memory of the streamed pass does "
             f"not grow with the corpus ({mem('streamed_quarter')} MiB at a quarter of the tokens, "
             f"{mem('streamed_full')} MiB at all of them). Agreement with the reference: ranks "
             f"{_num(100 * check.get('rank_next_agree', float('nan')), 2)}% (the rest are float ties), top-1 "
             f"{_num(100 * check.get('top1_next_agree', float('nan')), 2)}%; compiled vs eager: ranks "
             f"{_num(100 * b['agreement_compiled_vs_eager']['rank_next_agree'], 2)}%, log-probs within "
             f"{b['agreement_compiled_vs_eager']['logprob_next_maxreldiff']:.0e} (relative).")
    return text


def _device_check(bench: Path) -> str | None:
    """The device check's files (``benchmarks/device_check.py`` on a CUDA machine): one paragraph and a table."""
    train, lens_b, ladder = (_load(bench / f"bench-{k}-cuda.json") for k in ("train", "lens", "ladder"))
    if train is None and lens_b is None and ladder is None:
        return None
    m = (train or lens_b or ladder)["machine"]
    rows = []
    for name, sh in ((train or {}).get("shapes") or {}).items():
        d = sh["shape"]
        for k, v in (sh.get("precision") or {}).items():
            rows.append([f"training step, {name} ({d['n_layer']} layers, width {d['n_embd']}, context "
                         f"{d['block_size']}, batch {d['batch']}), {k}", f"{v['tokens_per_s']:,.0f} tokens/s"
                         + (f" (compile {v['compile_s']:.0f} s)" if "compile_s" in v else "")])
    for name, v in ((lens_b or {}).get("models") or {}).items():
        if "tokens_per_s" in v:
            rows.append([f"logit lens, {name} architecture ({v['layers'] + 1} residuals, {v['tokens']:,} tokens)",
                         f"{v['tokens_per_s']:,.0f} tokens/s"])
    for rung, v in ((ladder or {}).get("rungs") or {}).items():
        cu, cpu = v.get("cuda"), v.get("cpu_record")
        if cu:
            rows.append([f"ladder rung {rung} (default profile): training + lens readings",
                         f"{cu['summary']['train_seconds']:.1f} + {cu['lens_seconds']:.1f} s"
                         + (f" (CPU record: {cpu['summary']['train_seconds']:.1f} + {cpu['lens_seconds']:.1f} s, "
                            f"{cpu['machine']['cpu']})" if cpu else "")])
    return (f"**Device check** (`benchmarks/device_check.py` on {m['gpu']}, host CPU {m['cpu']}, torch {m['torch']}, "
            f"CUDA {m['cuda']}; the lens rows time random draws of each embedded model's architecture, whose "
            "weights do not travel to the device machine):\n\n" + _table(["what", "measured"], rows))


def _train_benchmark(b: dict, name_: str = "bench-train.json") -> str:
    m, parts = b["machine"], []
    for name, sh in b["shapes"].items():
        d = sh["shape"]
        rows = [[k, f"{v['tokens_per_s']:,.0f}", f"{v['ratio_vs_fp32_eager']:.2f}×",
                 " / ".join(f"{x:,.0f}" for x in v["rounds"])] for k, v in sh["precision"].items()]
        rows += [[f"mode `{k}` ({sh['chosen']})", f"{v['tokens_per_s']:,.0f}",
                  f"{v['tokens_per_s'] / sh['modes']['baseline']['tokens_per_s']:.2f}× baseline",
                  " / ".join(f"{x:,.0f}" for x in v["rounds"])] for k, v in sh["modes"].items()]
        parts.append(f"*{name}* shape ({d['n_layer']} layers, width {d['n_embd']}, context {d['block_size']}, "
                     f"vocabulary {d['vocab_size']:,}, batch {d['batch']}):\n\n"
                     + _table(["variant", "tokens/s (median)", "ratio", "per round"], rows))
    t = b.get("targets") or {}
    text = (f"**Training throughput** (`benchmarks/{name_}` from `bench_train.py`, {m['cpu']}, {m['threads']} threads, "
            f"native bf16: {', '.join(m['cpu_bf16']) or 'none'}, torch {m['torch']}, {b['settings']['rounds']} "
            f"interleaved rounds of {b['settings']['steps']} steps; 1-min load average "
            f"{_num(m['load_avg_start'], 1)} → {_num(m['load_avg_end'], 1)}: the per-round columns show how much "
            "the shared CPU moved the numbers):\n\n" + "\n\n".join(parts))
    if t.get("bf16_speedup") is not None:
        native = ("this CPU has no native bf16, so autocast emulates it" if not m["cpu_bf16"]
                  else "on a CPU with native bf16")
        text += (f"\n\nTargets: best bf16 variant {t['bf16_speedup']:.2f}× fp32 eager (target ≥ "
                 f"{t['bf16_speedup_target']}×: {_met(t['bf16_speedup_met'])}; {native}); learned-gate "
                 f"cost {t['learned_cost']:+.1%} over baseline (target ≤ {t['learned_cost_target']:.0%}: "
                 f"{_met(t['learned_cost_met'])}).")
    c = b.get("calibration")
    if c:
        lines = [f"{r['label']}: validation loss {r['val_loss']:.3f} vs unigram {r['unigram_ce']:.3f} "
                 f"({r['below_unigram']:.2f} nats below) after {r['tokens']:,} tokens, {r['train_seconds']:.0f} s "
                 "of training" for r in (c[k] for k in ("baseline", "fixed_a0_last") if k in c)]
        text += (" Calibration of the `default` training size: " + "; ".join(lines)
                 + f"; a grid cutting every block would be {c['grid_runs']} runs (~{c['grid_minutes']:.0f} min).")
    return text


def _item_scoring_benchmark(b: dict) -> str:
    """``benchmarks/bench_item_scoring.py``: one benchmark item's cost per configuration, and the share
    above the model's own forward (the most that batching configurations into one call could save)."""
    rows = [[name, str(m["layers"]), _num(m["s_per_item"]["bare"], 3), _num(m["s_per_item"]["traced"], 3),
             _num(m["s_per_item"]["gates"], 3), f"**{_num(m['traced_over_bare'], 2)}×**",
             f"**{_num(m['gates_over_bare'], 2)}×**", f"{_num(m['load'][0], 1)}–{_num(m['load'][1], 1)}"]
            for name, m in b["models"].items()]
    return ("**What one benchmark item costs** (`benchmarks/bench_item_scoring.py`, notebook 05's tasks, "
            f"{b['items_per_task']} items per task, batch {b['batch_size']}, median of {b['rounds']} rotated rounds"
            + (f"; {b['cpu']['cpu']}" if isinstance(b.get("cpu"), dict) else "") + "): seconds per item with the "
            "module's own forward (bare), inside an nnsight trace that edits nothing (traced), and with token "
            "gates on every block (gates); the ratios are to bare. Batching configurations into one call, or "
            "scoring several from one forward, can save at most the part above 1: the gates edit every block, "
            "so no two configurations share a block's computation.\n\n"
            + _table(["model", "blocks", "bare s/item", "traced s/item", "gates s/item", "traced / bare",
                      "gates / bare", "load"], rows))


def _harness_benchmark(b: dict) -> str:
    rows = []
    auto = any("auto_s" in t[m] for t in b["tasks"].values() for m in ("bare", "attenuated") if m in t)
    for task, t in b["tasks"].items():
        for mode in ("bare", "attenuated"):
            if mode not in t:
                continue
            m = t[mode]
            rows.append([task, mode, str(t["questions"]), _num(t["choices_per_question"], 1),
                         f"{t['tokens_plain']:,} → {t['tokens_prefix']:,}",
                         " / ".join(_num(x, 1) for x in m["plain_s"]), " / ".join(_num(x, 1) for x in m["prefix_s"]),
                         f"**{_num(m['speedup'], 2)}×**"]
                        + ([f"{t.get('questions_shared_by_auto', '–')} of {t['questions']}",
                            " / ".join(_num(x, 1) for x in m.get("auto_s", [])) or "–",
                            f"**{_num(m.get('speedup_auto'), 2)}×**"] if auto else [])
                        + [f"{m['max_abs_diff_ll']:.1e}", str(m["pred_differ"] + m["pred_norm_differ"])]
                        + ([f"{m['max_abs_diff_ll_auto']:.1e}" if "max_abs_diff_ll_auto" in m else "–",
                            str(m["pred_differ_auto"] + m["pred_norm_differ_auto"]) if "pred_differ_auto" in m
                            else "not recorded"] if auto else []))
    head = (["task", "edit", "questions", "choices", "tokens through the model (plain → prefix)", "plain s",
             "prefix s", "speed-up"] + (["shared by auto", "auto s", "auto speed-up"] if auto else [])
            + ["max abs ΔLL (prefix)", "answers changed (prefix)"]
            + (["max abs ΔLL (auto)", "answers changed (auto)"] if auto else []))
    lo = min(t[m]["load"][0] for t in b["tasks"].values() for m in ("bare", "attenuated") if m in t)
    hi = max(t[m]["load"][1] for t in b["tasks"].values() for m in ("bare", "attenuated") if m in t)
    return (f"**Multiple-choice prefix reuse** (`benchmarks/bench_harness.py`, {b['model']}, the harness's "
            f"first {b['items']} items per task, batch {b['batch_size']}, {b['rounds']} rounds rotating "
            f"which path goes first, speed-up = median of the per-round ratios; 1-min load average "
            f"{_num(lo, 1)}–{_num(hi, 1)} on {b.get('cpu_count', '?')} cores"
            + (f"; {b['cpu']['cpu']}" if isinstance(b.get("cpu"), dict) else "") + "): each question's context runs "
            "once with a KV cache expanded across its choices, instead of once per choice"
            + (" (prefix); auto, the harness's default, does so only for the questions where the context tokens "
               "saved exceed the choices' own tokens (`evaluate.reuse_saves`) and runs the rest whole" if auto else "")
            + ".\n\n" + _table(head, rows)
            + "\n\nThe time falls far less than the tokens through the model ("
            + "; ".join(f"{task}: {t['tokens_plain'] / t['tokens_prefix']:.1f}× fewer tokens, "
                        f"speed-up {_num(t['bare']['speedup'], 2)}×" for task, t in b["tasks"].items() if "bare" in t)
            + "). Not profiled further; what the token count leaves out is the work per forward call "
            "(prefix reuse makes two traced forwards per batch, the second on an expanded KV cache) and "
            "the unembedding of every scored continuation token, which both paths pay alike. The "
            "per-round times show how much the shared CPU moved each pair."
            + "".join(f" On {task} prefix reuse is **slower** ({_num(t['bare']['speedup'], 2)}×): its shared "
                      f"contexts are short beside its choices ({t['tokens_plain'] / t['tokens_prefix']:.1f}× fewer "
                      "tokens), so the tokens it saves do not pay for the second forward per batch (our reading; not profiled)."
                      for task, t in b["tasks"].items() if "bare" in t and t["bare"]["speedup"] < 1))


def _tuned_lens_benchmark(b: dict) -> str:
    """bench-tuned-lens.json: the SGD recipe vs the closed-form start refined by KL, per model."""
    if "models" not in b:
        return ("**Tuned-lens fit**: `benchmarks/bench-tuned-lens.json` predates the closed-form start; "
                "rerun `benchmarks/bench_tuned_lens.py --json benchmarks/bench-tuned-lens.json`.")
    return "\n\n".join(_tuned_lens_model(name, m) for name, m in b["models"].items())


def _tuned_lens_model(name: str, m: dict) -> str:
    c, sgd, new, mean = m["config"], m["sgd"], m["lstsq"], m["val_kl_mean"]
    loads = [x for k in ("sgd", "lstsq") for x in m[k]["load"]]

    def ended(r: dict) -> str:
        if not r["unconverged"]:
            return f"every layer converged by step {r['converged_by_step']}"
        return (f"{len(r['unconverged'])} of {m['layers']} layers still improving at the cap "
                f"(h_l, l = {', '.join(map(str, r['unconverged']))}), kept out of verdicts")

    return (f"**Tuned-lens fit** (`benchmarks/bench_tuned_lens.py`, {name}, `{m['profile']}` profile: batches of "
            f"{c['batch']} windows × {c['window']} tokens from {c['train_windows']}, training vocabulary "
            f"{c['train_vocab']}, early stopping every {c['eval_every']} steps on {c['es_windows']} windows; "
            f"{m['cpu'].get('cpu', '?')}, 1-min load average {_num(min(loads), 1)}–{_num(max(loads), 1)} on "
            f"{m.get('cpu_count', '?')} cores). Held-out KL(final ‖ lens) over h_0..h_{m['layers'] - 1}, mean of "
            f"the {c['val_windows']} report windows: logit lens {_num(mean['logit'])} nats; SGD from the logit "
            f"lens (lr {m['sgd_config']['lr']}, {sgd['steps']} steps, {_num(sgd['seconds'], 0)} s: "
            f"{ended(sgd)}) {_num(mean['sgd'])}; the closed-form start alone ({m['start']['windows']} windows, "
            f"{_num(m['start']['seconds'], 0)} s) {_num(mean['start'])}; the start refined by KL (lr {c['lr']}, "
            f"{new['steps']} steps, {_num(new['seconds'], 0)} s: {ended(new)}) **{_num(mean['lstsq'])}**, lower "
            f"than SGD at {m['lstsq_below_sgd_at']} of {m['layers']} layers.")


def section_wikitext_agreement(fig: Path, bench: Path) -> str:
    """Our per-article (lm-eval) WikiText perplexity against lm-eval's own task, article by article."""
    d = _load(bench / "wikitext-ppl-agreement.json")
    if d is None:
        return _missing("WikiText perplexity vs lm-evaluation-harness", "benchmarks/wikitext-ppl-agreement.json")
    cfg = d["config"]
    rows = []
    for name, m in d["models"].items():
        docs = m["documents"]
        worst = max(docs, key=lambda x: x["abs_diff"])
        same = sum(x["same_text"] and x["same_tokens"] and x["words_ours"] == x["words_lm_eval"]
                   and x["bytes_ours"] == x["bytes_lm_eval"] for x in docs)
        rows.append([name, str(len(docs)), f"{same} of {len(docs)}",
                     _num(m["ours"]["word_perplexity"], 4), _num(m["lm_eval"]["word_perplexity"], 4),
                     f"{worst['abs_diff']:.1e} (article {worst['doc']}, {worst['rel_diff']:.1e} relative)"])
    return (f"**WikiText perplexity vs lm-evaluation-harness** (`benchmarks/validate_wikitext_ppl.py`, lm-eval "
            f"{cfg['lm_eval']}'s own `wikitext` task on our local {cfg['corpus']}, `max_length` {cfg['max_length']}; "
            f"articles: {cfg['documents_rule']}). Per article: the same detokenized text, tokens, word and byte "
            "counts, and the summed log-likelihood of both harnesses.\n\n"
            + _table(["model", "articles", "same text, tokens, words, bytes", "word ppl, ours", "word ppl, lm-eval",
                      "largest |Δ log-likelihood|"], rows))


def section_lm_eval(fig: Path, bench: Path) -> str:
    d = _load(bench / "lm-eval-agreement.json")
    if d is None:
        return _missing("Harness vs lm-evaluation-harness", "benchmarks/lm-eval-agreement.json")
    cfg, tasks = d["config"], d["tasks"]
    rows = []
    for task, c in tasks.items():
        for metric, agree in c["agree"].items():
            rows.append([task, str(c["n"]), f"{c['same_requests']} / {c['same_tokens']}", metric,
                         f"{100 * agree:.1f}% ({c['agree_count'][metric]})", _num(c["ours"][metric], 3),
                         _num(c["lm_eval"][metric], 3), f"{c['max_abs_diff']:.1e}",
                         f"{len([x for x in c['disagreements'] if x['metric'] == metric])}"])
    n_items = sum(c["n"] for c in tasks.values())
    tokens_known = all(c["same_tokens"] is not None for c in tasks.values())
    same = all(c["same_requests"] == c["n"] and c["same_tokens"] in (c["n"], None) for c in tasks.values())
    n_dis = sum(len(c["disagreements"]) for c in tasks.values())
    n_ties = sum(c["float_ties"] for c in tasks.values())
    name, worst = max(tasks.items(), key=lambda kv: kv[1]["max_abs_diff"])
    w = worst["worst"]
    text = (f"**Harness vs lm-evaluation-harness** (`make validate-harness`: "
            f"`benchmarks/validate_lm_eval.py`, lm-eval {cfg['versions']['lm_eval']} HFLM with its own "
            f"task configs on the local files, {cfg['model']} fp32, same weights: "
            f"{'yes' if cfg['same_weights'] else 'NO'}; ours: {cfg.get('harness', {}).get('module', '?')}; "
            f"{cfg['items_rule']}). Per item: identical request strings / token splits, agreement of "
            "the chosen answer (acc: argmax log-likelihood; acc_norm: per character; LAMBADA: greedy "
            "match), accuracy by each harness, largest |Δ log-likelihood| over every scored "
            "continuation.\n\n"
            + _table(["task", "n", "same strings / tokens", "metric", "same choice", "ours",
                      "lm-eval", "max abs ΔLL", "disagree"], rows)
            + f"\n\nTarget ≥ 99% same choice on every task and metric: {_met(d['meets_target'])}. ")
    if same:
        text += (f"The requests are identical on all {n_items} items, as strings"
                 + (" and as tokens" if tokens_known else " (token splits not recorded)") + ": both "
                 "harnesses build lm-eval's (context + \" \" + choice; LAMBADA's last space-separated "
                 "word with its space; trailing context spaces moved to the continuation and the pair "
                 "tokenized whole; no BOS with this tokenizer in either). ")
    else:
        text += ("Some requests differ as strings or tokens (counts above; items in "
                 "`benchmarks/lm-eval-agreement.txt`). ")
    text += (f"The log-likelihoods differ by float32 rounding only: at most {w['abs_diff']:.1e} nats "
             f"({name}, a continuation of {_num(w['ours'], 1)} nats, "
             f"{w['abs_diff'] / max(abs(w['ours']), 1e-12):.0e} relative), growing with the "
             "continuation's length, because lm-eval computes every position's full-vocabulary logits "
             "without an attention mask and sums float32 log-probabilities, while ours keeps only the "
             "continuation's logits (`logits_to_keep`), passes the mask, groups rows by a token "
             "budget (and, from prefix reuse on, runs a shared multiple-choice context once and its "
             "choices on the KV cache) and sums in float64. ")
    if n_dis:
        text += (f"{n_dis} item(s) chosen differently, {n_ties} of them float ties (the scores differ by "
                 "float noise and the two leading choices are closer than that).")
    else:
        text += "No item is chosen differently."
    return text

TRAINING_VERDICTS = ("06-training-with-attenuation-verdicts", "07-learned-gates-and-benchmarks-verdicts",
                     "08-misalignment-after-mitigation-verdicts")  # the C2-C4 training verdicts (08's also holds C1)
REGIMES_08 = "08-misalignment-after-mitigation-regimes"  # the trained baselines' lens curves, per recipe and seed
METRICS_03, C1_03, VERDICTS_03 = "03-alignment-curves-metrics", "03-alignment-curves-c1", "03-alignment-curves-verdicts"
LADDER = "10-the-scale-ladder"  # figures/<this>.json: the scale ladder (study/ladder.py), when it has run


def _tokens(n: float) -> str:
    from ..analysis.trend import tokens_text

    return tokens_text(n)


def _band(iv: Mapping[str, Any] | None) -> str:
    if not iv:
        return ""
    return f" ({_tokens(iv['lo']) if iv['lo'] else 'already'}–" + (_tokens(iv["hi"]) if iv["hi"] else "never") + ")"


def _ladder_sentence(fig: Path) -> str:
    """What the scale ladder (notebook 10, ``figures/10-the-scale-ladder.json``) found, in a few sentences
    printed from its numbers: per shape the early share of its largest finished rung and that rung's
    outcome, the rungs with the deep switch, the extrapolated budget to the threshold, and the mitigation's
    verdicts with their scale (``figures/10-the-scale-ladder-verdicts.json`` and the ``-scale`` file).
    ``""`` while the ladder has not run."""
    d = _load(fig / f"{LADDER}.json")
    if d is None:
        return ""
    fin = [r for r in d["readings"] if r["final"]]
    if not fin:
        return f"The scale ladder (`figures/{LADDER}.json`) has no finished rung yet."
    per = []
    for shape in dict.fromkeys(r["shape"] for r in fin):
        rs = sorted((r for r in fin if r["shape"] == shape), key=lambda r: r["tokens"])
        per.append(f"{shape} S1 " + " → ".join(_num(r["S1"]) for r in rs) + f" over {_tokens(rs[0]['tokens'])}–"
                   f"{_tokens(rs[-1]['tokens'])} tokens ({rs[-1]['outcome']} at the largest)")
    deep = sorted({r["rung"] for r in fin if r["outcome"] == scale.DEEP_SWITCH})
    quiet = sorted({r["rung"] for r in fin if r["middle"] == verdicts.REPRODUCED})
    deps = [r["departure_depth"] for r in fin if r.get("departure_depth") is not None]
    text = (f"The scale ladder (notebook 10, `figures/{LADDER}.json`: baselines trained longer and deeper, one seed "
            f"per rung, windows as the unit) gives {'; '.join(per)}. "
            + (f"Rungs with the deep switch: {', '.join(deep)}. " if deep else "No finished rung has the deep switch. ")
            + (f"Rungs with a quiet middle (C1.middle): {', '.join(quiet)}. " if quiet else
               f"None of the {len(fin)} shows a quiet middle (C1.middle)"
               + (f": their next-token curves leave the unigram level by l/L = {max(deps):.2f}. " if deps else ". ")))
    ex = [e for e in d["extrapolation"] if e["kind"] == "extrapolated"]
    if ex:
        text += ("Extrapolated, not measured (a straight line in log10 tokens through each shape's finished rungs"
                 + ("; for S1 alone" if not quiet else "") + "; in brackets the 95% interval over windows, one seed "
                 "per rung, so the spread between seeds is not in it): " + "; ".join(
                     f"{e['shape']} would reach {e['target']} at about {_tokens(e['tokens'])} tokens"
                     + _band(e.get("interval")) for e in ex)
                 + ". ")
    sc = _load(fig / f"{LADDER}-scale.json") or []
    mit = [r for r in sc if r.get("scale") and r.get("source") == LADDER]
    c = d.get("mitigation_rung") or {}
    if mit:
        counts = sum(bool(r["scale"]["counts_as_evidence"]) for r in mit)
        sc0 = mit[0]["scale"]
        text += (f"The mitigation comparison on {mit[0]['model'].removeprefix('trained GPT ')} ("
                 + "; ".join(f"{r['claim_id']} ({r.get('variant') or '–'}): **{r['verdict']}**, "
                             f"{_ci(r['estimate'], *(r.get('ci') or (None, None)), digits=3)} nats" for r in mit)
                 + f") runs on baselines that are {sc0['outcome']} across its {sc0['n']} seeds (S1 "
                 f"{_num(sc0['early_share'])} [{_num(sc0['early_share_ci'][0])}, {_num(sc0['early_share_ci'][1])}], "
                 f"C1.middle {sc0['middle']}); {counts} of its {len(mit)} verdicts count as evidence about the "
                 "paper's claims.")
    elif c.get("rung"):
        text += f"The mitigation is declared on {c['rung']} ({c['why']}) and has not run yet."
    return text


def _switch_phrase(s: scale.SwitchRow, label: str) -> str:
    why = f" ({s.why})" if s.why else ""
    return (f"{label} S1 = {scale.share_text(s)} ({scale.interval_text(s)}, {s.n_layers} blocks, C1.middle "
            f"{s.middle}): **{s.outcome}**{why}")


def _count_phrase(counts: Mapping[str, int], order) -> str:
    return ", ".join(f"{counts[k]} {k}" for k in order if counts.get(k))


def section_scale(fig: Path, bench: Path) -> str:
    """What the trained models' scale lets the C2-C4 training verdicts say (issue 33): one paragraph
    printed from the saved numbers (the trained baselines' and the pretrained references' deep-switch
    measure, ``analysis.scale.committed_rows``; the verdicts' count and what each counts as under
    ``analysis.scale.SCALE_RULE``), then each verdict beside the scale it speaks for."""
    what = "Scale of the C2–C4 training verdicts"
    data = {}
    for name in (*TRAINING_VERDICTS, REGIMES_08, METRICS_03, C1_03):
        d = _load(fig / f"{name}.json")
        if d is None:
            return _missing(what, f"figures/{name}.json")
        if name in TRAINING_VERDICTS and not is_verdict_layout(d):
            return (f"_{what}: `figures/{name}.json` is in an older verdict layout: rerun the notebook that "
                    "writes it._")
        data[name] = d
    v08 = data[TRAINING_VERDICTS[-1]]
    switch = scale.committed_rows(data[REGIMES_08], v08, data[METRICS_03], data[C1_03],
                                  _load(fig / f"{VERDICTS_03}.json"))
    recipe = profiles.resolve("default").train_embedding
    rows = scale.scale_training_verdicts({f"figures/{n}.json": data[n] for n in TRAINING_VERDICTS},
                                         data[REGIMES_08], v08, recipe=recipe)
    table = scale.scale_table(rows)
    scaled = [r["scale"] for r in rows if "scale" in r]
    if not table:
        return _missing(what, "C2–C4 rows in figures/0[6-8]-*-verdicts.json")
    trained = [s for s in switch if s.unit == "seeds"]
    pretrained = [s for s in switch if s.unit != "seeds" and s.unit != "seed"]
    contrast = profiles.resolve("default").train_contrast_embedding

    def arm(s):
        emb = scale.recipe_of(s)
        role = " (the grid's)" if emb == recipe else " (the contrast arm)" if emb == contrast else ""
        return f"{emb} embedding{role}"

    verdict_counts = {v: sum(r["verdict"] == v for r in table) for v in verdicts.OUTCOMES}
    reading_counts: dict[str, int] = {}
    for r in table:
        reading_counts[r["reading"]] = reading_counts.get(r["reading"], 0) + 1
    n, counted = len(table), sum(s["counts_as_evidence"] for s in scaled)
    baselines = sorted({s["model"] for s in scaled})
    outcomes = sorted({s["outcome"] for s in scaled})
    if counted == 0:
        kind = "near-bigram models" if outcomes == [scale.NEAR_BIGRAM] else "models without a shown deep switch"
        verdict_line = (f"They speak for {kind} only, and by the scale rule none of them is counted as evidence for "
                        "or against the paper's claims")
    elif counted == n:
        verdict_line = "All of them count as evidence, either way: their baselines have the deep switch"
    else:
        verdict_line = (f"{counted} of them count as evidence, either way (their baseline has the deep switch); the "
                        f"other {n - counted} speak for baselines without it and are not counted as evidence against "
                        "the paper's claims")
    deep_trained = [s for s in trained if s.outcome == scale.DEEP_SWITCH]
    deep_pre = [s.model for s in pretrained if s.outcome == scale.DEEP_SWITCH]
    if deep_trained:
        where = ""
    elif deep_pre:
        names = join(deep_pre)
        verb = "shows" if len(deep_pre) == 1 else "show"
        where = f" Of the models measured here, only the pretrained {names} {verb} the deep switch."
    else:
        where = " No model measured here shows the deep switch."
    ladder = _ladder_sentence(fig)
    text = ("**What this machine's scale can say about C2–C4** (issue 33; `residshift.analysis.scale`: the "
            "deep-switch measure and its scale clause, each a rule in words; the clause changes no verdict, it says "
            "which verdicts count as evidence). "
            "The paper's mitigations act on a deep switch, the next token predicted late after a quiet middle. "
            "Its measure is S1, the share of a model's final next-token top-1 already reached after block 0: deep "
            f"switch if S1's interval lies below {scale.SHARE_THRESHOLD:g} and C1.middle is reproduced, near-bigram "
            f"if it lies above {scale.SHARE_THRESHOLD:g} and C1.middle is not. The trained baselines "
            f"(`figures/{REGIMES_08}.json`): "
            + "; ".join(_switch_phrase(s, arm(s)) for s in trained)
            + f". The pretrained references (`figures/{METRICS_03}.json`): "
            + "; ".join(_switch_phrase(s, s.model) for s in pretrained)
            + f". The {n} C2–C4 training verdicts of notebooks {TRAINING_VERDICTS[0][:2]}–{TRAINING_VERDICTS[-1][:2]} ({_count_phrase(verdict_counts, verdicts.OUTCOMES)}) "
            f"are on {' and '.join(baselines)}. {verdict_line}: "
            + "; ".join(f"{k} read \"{label}\"" for label, k in reading_counts.items()) + "." + where
            + (f" {ladder}" if ladder else ""))
    head = [c for c in scale.SCALE_COLUMNS if c != "model"]  # the baseline column names the model
    lines = [[f"**{r[c]}**" if c == "verdict" else r[c] for c in head] for r in table]
    return (text + f"\n\n<details><summary>The {n} C2–C4 training verdicts, each with the scale it speaks for"
            "</summary>\n\n" + _table(head, lines) + f"\n\n{scale.SCALE_RULE}\n\n</details>")


def section_pilot(fig: Path, bench: Path) -> str:
    """The pilot (``study.pilot``): one baseline per embedding recipe, C1 on each, the chosen recipe."""
    b = _load(bench / "pilot-recipes.json")
    if b is None:
        return _missing("Pilot", "benchmarks/pilot-recipes.json (python -m residshift train --pilot)")
    rows = []
    for name, e in b["recipes"].items():
        v = {r["claim_id"]: r["verdict"] for r in e["verdicts"]}
        depth = next((r for r in e["verdicts"] if r["claim_id"] == "C1.depth" and r["details"].get("metric") == "top1"),
                     None)
        early = rows_from_json([next(r for r in e["verdicts"] if r["claim_id"] == "C1.early")])[0]
        rows.append([f"`{name}`", f"{e['tokens']:,}", _num(e["train_seconds"], 0), f"{e['tokens_per_s']:,.0f}",
                     f"{_num(e['val_loss'], 3)} ({_num(e['unigram_ce'], 3)})",
                     f"{_num(e['top1_input'][1], 3)} ({_num(e['unigram_top1_input'], 3)})",
                     _num(e["top1_next"][1], 3), _num(e["top1_next"][-1], 3),
                     f"{v.get('C1.early')} ({tables.evidence(early)})", v.get("C1.middle", "–"),
                     v.get("C1.late", "–"), "–" if depth is None else depth["verdict"]])
    m, chosen = b["machine"], b["chosen"]
    grid = profiles.resolve(b["profile"]).train_embedding
    text = (f"**Pilot: which embedding recipe gives a small GPT the early input regime** "
            f"(`python -m residshift train --pilot`, `benchmarks/pilot-recipes.json`; profile {b['profile']}, "
            f"one baseline per recipe, seed {b['seed']}, the training shape and budget of the profile's grid; "
            f"{m['cpu']}, {m['threads']} threads, native bf16: {', '.join(m['native_bf16']) or 'none'}, 1-min "
            f"load {_num(m.get('load_1min'), 1)} at the end; commit {b['code']['commit']}"
            f"{' with uncommitted changes' if b['code']['code_dirty'] else ''}). The lens reads the trained "
            "model's own windows as the units: a verdict says whether this one model has the regime. In "
            "brackets: the unigram decoder's loss and input-token top-1 on the same windows.\n\n"
            + _table(["recipe", "tokens", "s", "tokens/s", "val loss (unigram)", "input top-1 at h_1 (unigram)",
                      "next top-1 at h_1", "next top-1 at h_L", "C1.early", "C1.middle", "C1.late",
                      "C1.depth (top-1)"], rows)
            + f"\n\nThe recipe chosen: **`{chosen['recipe']}`** ({chosen['rule']}); "
            + (f"the {b['profile']} grid trains it." if grid == chosen["recipe"] else
               f"**the {b['profile']} grid still trains `{grid}`**."))
    return text


def section_grid(fig: Path, bench: Path) -> str:
    """What notebook 06's grid cost (``figures/06-training-with-attenuation-grid.json``)."""
    g = _load(fig / "06-training-with-attenuation-grid.json")
    if g is None:
        return _missing("Training grid", "figures/06-training-with-attenuation-grid.json (notebook 06)")
    m = g["machine"]
    text = (f"**The training grid** (notebook 06, `figures/06-training-with-attenuation-grid.json`): "
            f"{g['runs']} runs ({g['variants']} variants x {g['seeds']} seeds) of {g['tokens_per_run']:,} tokens, "
            f"{g['precision']}, trained in {_num(g['train_seconds'] / 60, 1)} minutes of training time in all "
            f"({_num(g['seconds_per_run'], 0)} s per run; {g['tokens_per_s']['mean']:,.0f} tokens/s on average, "
            f"{g['tokens_per_s']['min']:,.0f}-{g['tokens_per_s']['max']:,.0f} across runs) on {m['cpu']}, "
            f"{m['threads']} threads, native bf16: {', '.join(m['native_bf16']) or 'none'}.")
    if g.get("throughput"):  # grids saved before issue 37 lack it
        text += "\n\n" + _grid_throughput(g["throughput"])
    ppl = _load(fig / "06-training-with-attenuation-perplexity.json")
    if ppl and ppl.get("per_variant"):  # saved by 06 since issue 35 §3
        text += "\n\n" + _grid_perplexity(ppl)
    return text


def _pct(x: Any) -> str:
    return "–" if x is None else f"{100 * x:.0f}%"


def _grid_throughput(t: dict) -> str:
    """Where the grid's speed went (``training.throughput_numbers``, saved in the grid's JSON)."""
    load = t.get("load") or {}
    said = (f"{load['runs']} of {t['runs']} runs recorded the 1-min load ({_num(load.get('min'), 1)}-"
            f"{_num(load.get('max'), 1)}); tokens/s against it: r = {_num(load.get('r'))} across runs, "
            f"{_num(load.get('r_within_variant'))} within variants" if load.get("runs")
            else "no run recorded the load (trained before `host.json`)")
    per = t["per_variant"]
    rows = [[f"`{v}`", str(per[v]["runs"]), f"{per[v]['mean']:,.0f}", f"{per[v]['min']:,.0f}-{per[v]['max']:,.0f}"]
            for v in t.get("variants") or per]
    return (f"Its speed: the runs' mean tokens/s was {_pct(t.get('share_of_best'))} of its best run's; of the gap the "
            f"variant explains {_pct(t.get('between_share'))} (its fastest seed already slower than the best run), "
            f"{_pct(t.get('within_share'))} lies within a variant; the variants hold "
            f"{_pct(t.get('variance_between_share'))} of the variance; {said}; evaluations and checkpoints took "
            f"{_pct(t.get('overhead_share'))} of a run's seconds (not in tokens/s).\n\n"
            + _table(["variant", "runs", "tokens/s (mean)", "min-max"], rows))


def _grid_perplexity(p: dict) -> str:
    """Both WikiText perplexities of the trained models (``figures/06-training-with-attenuation-perplexity.json``)."""
    keys = p.get("metric_order") or list(p["metrics"])
    per = p["per_variant"]

    def num(x: Any) -> str:
        return f"{x:,.0f}" if isinstance(x, (int, float)) and abs(x) >= 100 else _num(x)

    def cell(x: dict) -> str:
        return num(x["mean"]) + ("" if x.get("sd") is None else f" ± {num(x['sd'])}")

    rows = [[f"`{v}`", str(per[v]["seeds"]), *[cell(per[v][k]) for k in keys]] for v in p.get("variants") or per]
    sl, le = p["sliding"], p["lm_eval"]
    return (f"**The trained models' WikiText perplexities** (notebook 06, "
            f"`figures/06-training-with-attenuation-perplexity.json`; {p['corpus']}, mean ± SD over seeds): sliding "
            f"windows of {sl['context']} tokens (stride {sl['stride']}, {sl['windows']} of {sl['windows_total']} "
            f"windows) and lm-eval's disjoint windows of {le['max_length']} tokens per article ({le['documents']} of "
            f"{le['documents_total']} articles).\n\n"
            + _table(["variant", "seeds", *[p["metrics"][k] for k in keys]], rows))


LENS_EXAMPLE = "docs/lens-example"  # `make lens-example`: python -m residshift lens on the embedded models


def section_lens_example(fig: Path, bench: Path) -> str:
    """``python -m residshift lens`` on the embedded models (``docs/lens-example/*/request.json``): sizes,
    the C1 verdicts and what each step took, on which CPU."""
    folder = bench.parent / LENS_EXAMPLE
    metas = sorted(folder.glob("*/request.json"))
    if not metas:
        return _missing("`residshift lens` example", f"{LENS_EXAMPLE}/*/request.json (make lens-example)")
    rows, cpus = [], set()
    for path in metas:
        m = _load(path)
        c1 = _load(path.parent / "c1.json") or {}
        v = {r["claim_id"]: r["verdict"] for r in c1.get("rows", []) if r["claim_id"] != "C1.depth.sensitivity"}
        sec, mach = m["seconds"], m["machine"]
        cpus.add(f"{mach['cpu']}, {mach['threads']} threads, native bf16: {', '.join(mach['native_bf16']) or 'none'}")
        rows.append([f"`{m['request']['model']}`",
                     f"{m['model']['layers']}", m["decoder"],
                     f"{m['corpus_windows']} x {m['request']['window']} ({m['request']['corpus']})",
                     _num(sec["load"], 0), _num(sec["trajectories"], 0), _num(m["corpus_compute_s"], 0),
                     _num(sec["total"], 0), _num(mach.get("load_1min"), 1),
                     ", ".join(f"{k} {x}" for k, x in v.items())])
    return ("**`python -m residshift lens MODEL` on the embedded models** (`make lens-example`, outputs in "
            f"`{LENS_EXAMPLE}/<model>/`, each with its `summary.md`; seconds on {'; '.join(sorted(cpus))}; the corpus pass's own compute time "
            "even where the run read it from the cache):\n\n"
            + _table(["model", "layers", "decoder", "windows x tokens", "load s", "maps s", "corpus pass s",
                      "total s", "1-min load", "C1 verdicts"], rows))


SECTIONS: list[Callable[[Path, Path], str]] = [section_sanity, section_shift, section_verdicts, section_rules_change,
                                               section_pilot,
                                               section_grid, section_lens_example,
                                               section_harness, section_benchmarks, section_lm_eval,
                                               section_wikitext_agreement, section_provenance]


# The verdicts grouped by claim (C1-C4), one mark per claim id: the README's headline table and the
# book's summary page (tools.book) both read them from here.
SUMMARY_HEADLINES = {"C1": "C1", "C2": "C2.late-cut", "C3": "C3.beats-baseline", "C4": "C4.benchmarks"}
VERDICT_MARKS = {REPRODUCED: "✓", NOT_REPRODUCED: "✗", INCONCLUSIVE: "?"}
NOT_EVIDENCE_MARK, POST_HOC_MARK = "°", "*"  # verdicts.is_evidence false; a post-hoc rule (tables.marks)


@dataclass
class ClaimTable:
    """The verdicts on one claim (C1-C4): one row per (notebook, model, variant), one column per
    claim id (``C2.late-cut``, ``C2-training.late-cut``, ...), in the order the files list them."""

    claims: list[str] = field(default_factory=list)
    rows: dict[tuple[str, str, str], dict[str, list]] = field(default_factory=dict)


def summary_tables(fig_src: Path) -> tuple[dict[str, ClaimTable], list[str]]:
    """``({"C1": ClaimTable, ...}, [verdict files not in the verdict layout])`` from every
    ``*verdicts.json`` in ``fig_src``, read through ``analysis.verdicts`` as the results tables are."""
    groups: dict[str, ClaimTable] = {}
    skipped = []
    for path in sorted(Path(fig_src).glob("*verdicts.json")):
        data = _load(path)
        if not is_verdict_layout(data):
            skipped.append(path.name)
            continue
        for row in rows_from_json(data, str(path)):
            table = groups.setdefault(row.claim_id[:2], ClaimTable())
            if row.claim_id not in table.claims:
                table.claims.append(row.claim_id)
            key = (path.name[:2], row.model, row.variant or "–")
            table.rows.setdefault(key, {}).setdefault(row.claim_id, []).append(row)
    return dict(sorted(groups.items())), skipped


def verdict_mark(row) -> str:
    """One verdict as its mark: ✓ reproduced, ✗ not reproduced, ? inconclusive; ° when the row does not
    count as evidence (``verdicts.is_evidence``), * when its rule was revised after its first numbers."""
    return (VERDICT_MARKS[row.verdict] + ("" if is_evidence(row) else NOT_EVIDENCE_MARK)
            + (POST_HOC_MARK if row.details.get("pre_registered_verdict") is not None else ""))


def marks_legend() -> str:
    return (", ".join(f"{m} {v}" for v, m in VERDICT_MARKS.items())
            + f"; {NOT_EVIDENCE_MARK} not counted as evidence for or against the paper (its rule says why: a "
              f"sanity check such as C1.late, or C1 read through a decoder fitted to the model's output), "
              f"{POST_HOC_MARK} a rule revised after its first numbers")


def render_headline(figures: Path | None = None) -> str:
    """The README's headline: every verdict of ``figures/*verdicts.json`` as one mark per claim id, one
    row per claim, notebook, model and variant (the numbers behind each are in docs/results.md)."""
    fig = Path(figures or REPO_ROOT / "figures")
    groups, skipped = summary_tables(fig)
    lines = [HEAD_START, "<!-- generated by `python -m residshift report` from figures/*verdicts.json; do not edit "
             "by hand -->", ""]
    if not groups:
        lines.append(_missing("Verdicts", "figures/*verdicts.json"))
    else:
        rows = []
        for group, table in groups.items():
            for (nb, model, variant), cells in table.rows.items():
                marks = ", ".join(f"{c[len(group):].lstrip('.-') or c} {''.join(verdict_mark(r) for r in cells[c])}"
                                  for c in table.claims if c in cells)
                rows.append([group, nb, model, variant, marks])
        lines += [_table(["claim", "notebook", "model", "variant", "verdict per claim id"], rows), "",
                  marks_legend() + "."]
        if skipped:
            lines.append(f"Not shown (an older verdict layout; rerun the notebook that writes it): "
                         f"{', '.join(f'`{n}`' for n in skipped)}.")
    lines += ["", HEAD_END]
    return "\n".join(lines)


def render(figures: Path | None = None, benchmarks: Path | None = None) -> str:
    fig = Path(figures or REPO_ROOT / "figures")
    bench = Path(benchmarks or REPO_ROOT / "benchmarks")
    body = "\n\n".join(section(fig, bench) for section in SECTIONS)
    return (f"{START}\n<!-- generated by `python -m residshift report` from figures/*.json and "
            f"benchmarks/*.json; do not edit by hand -->\n\n{body}\n\n{END}")


def _split(text: str, start: str = START, end: str = END, name: str = "docs/results.md") -> tuple[str, str, str]:
    if start not in text or end not in text:
        raise ReportError(f"{name} has no {start} … {end} block to fill")
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    return head, start + rest.split(end, 1)[0] + end, tail


def _blocks(readme: Path | None, results: Path | None):
    """(path, start, end, what renders it) for the README's headline and docs/results.md's results."""
    return [(Path(readme or README), HEAD_START, HEAD_END, render_headline),
            (Path(readme or README), COST_START, COST_END, render_cost),
            (Path(results or RESULTS), START, END, render)]


def update_readme(readme: Path | None = None, results: Path | None = None) -> bool:
    """Rewrite the README's headline block and docs/results.md's results block; True when either changed."""
    changed = False
    for path, start, end, make in _blocks(readme, results):
        text = path.read_text()
        head, old, tail = _split(text, start, end, path.name)
        new = make()
        if new != old:
            atomic_write_text(path, head + new + tail)
            changed = True
    return changed


def check_readme(readme: Path | None = None, results: Path | None = None) -> bool:
    """True when the README's headline and docs/results.md agree with the saved numbers."""
    return all(_split(path.read_text(), start, end, path.name)[1] == make()
               for path, start, end, make in _blocks(readme, results))
