"""The README's numbers are generated from the saved results, never typed."""
import json

import pytest

from residshift.analysis.verdicts import VerdictRow
from residshift.core.paths import REPO_ROOT
from residshift.tools import report


def test_readme_headline_and_results_page_match_the_saved_numbers():
    assert report.check_readme(), "README headline or docs/results.md is stale: run `python -m residshift report`"


def test_the_readme_is_a_landing_page():
    """Under 20 KB, the two commands on its first screen, every verdict as a mark, links to the rest."""
    text = (REPO_ROOT / "README.md").read_text()
    assert len(text.encode()) < 20_000, f"README.md is {len(text.encode())} bytes: move detail to docs/"
    first = text[:text.index("## The notebooks")]
    assert "make study" in first and "make test" in first
    head = text.split(report.HEAD_START, 1)[1].split(report.HEAD_END, 1)[0]
    assert "| claim | notebook | model | variant | verdict per claim id |" in head
    for doc in ("docs/results.md", "docs/guide.md", "docs/definitions.md"):
        assert f"]({doc})" in text and (REPO_ROOT / doc).is_file()


def test_every_relative_link_of_the_readme_and_docs_resolves():
    import re

    bad = []
    for page in [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]:
        for url in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if not re.match(r"^[a-z]+:", url) and not (page.parent / url).exists():
                bad.append(f"{page.relative_to(REPO_ROOT)}: {url}")
    assert not bad, "links to nothing:\n" + "\n".join(bad)


def test_the_headline_marks_each_verdict(tmp_path):
    fig = tmp_path / "figures"
    fig.mkdir()
    assert "not produced yet" in report.render_headline(fig)
    rows = [VerdictRow(model="m", variant="v", claim_id="C2.late-cut", claim="c", verdict="not reproduced",
                       statistic="s", estimate=0.1, ci=(0.0, 0.2), level=0.95, n=8, rule="r"),
            VerdictRow(model="m", variant="v", claim_id="C2.layer-sensitive", claim="c", verdict="reproduced",
                       statistic="s", estimate=0.1, ci=(0.0, 0.2), level=0.95, n=8, rule="r",
                       details={"evidence": False, "evidence_why": "a check", "pre_registered_verdict": "inconclusive"})]
    (fig / "04-x-verdicts.json").write_text(json.dumps([r.as_dict() for r in rows]))
    (fig / "09-old-verdicts.json").write_text(json.dumps({"rows": []}))
    head = report.render_headline(fig)
    assert "| C2 | 04 | m | v | late-cut ✗, layer-sensitive ✓°* |" in head
    assert "`09-old-verdicts.json`" in head and head.startswith(report.HEAD_START) and head.endswith(report.HEAD_END)


def test_render_reads_the_saved_files(tmp_path):
    fig, bench = tmp_path / "figures", tmp_path / "benchmarks"
    fig.mkdir()
    bench.mkdir()
    assert "not produced yet" in report.render(fig, bench)
    (fig / "00-models-and-data.json").write_text(json.dumps({"perplexity": [
        {"model": "m", "windows": 4, "tokens": 252, "ppl": 12.345, "ppl_se": 0.5, "uniform_ppl": 259}]}))
    row = VerdictRow(model="m", variant="scalar", claim_id="C2.late-cut", claim="a late cut helps",
                     verdict="reproduced", statistic="mean dloss", estimate=-0.01234, ci=(-0.02, -0.004),
                     level=0.95, n=16, rule="the rule in words", per_seed=["reproduced", "inconclusive"],
                     details={"mde": 0.00512, "mde_unit": "nats"})
    other = VerdictRow(model="m", variant=None, claim_id="C1.middle", claim="c", verdict="inconclusive",
                       statistic="excess", estimate=0.5, ci=(0.25, 0.75), level=0.99, n=8, rule="rule two")
    (fig / "09-x-verdicts.json").write_text(json.dumps([row.as_dict(), other.as_dict()]))
    (fig / "08-old-verdicts.json").write_text(json.dumps({"m": {"c1": {"verdict": "reproduced", "d": 0.5}}}))
    text = report.render(fig, bench)
    assert "| m | 4 | 252 | 12.3 ± 0.5 | 259 |" in text
    assert ("| m | scalar | C2.late-cut | **reproduced** | mean dloss | -0.0123 [-0.02, -0.004] | 16 | "
            "0.00512 nats | reproduced, inconclusive |") in text
    assert "| m | – | C1.middle | **inconclusive** | excess | 0.5 [0.25, 0.75] (99% CI) | 8 | – | – |" in text
    assert "- **C2.late-cut**: the rule in words" in text and "- **C1.middle**: rule two" in text
    assert "`figures/08-old-verdicts.json` is in an older verdict layout" in text


def test_update_and_check_round_trip(tmp_path, monkeypatch):
    readme, results = tmp_path / "README.md", tmp_path / "results.md"
    readme.write_text(f"intro\n{report.COST_START}\nold\n{report.COST_END}\n{report.HEAD_START}\nold\n"
                      f"{report.HEAD_END}\noutro\n")
    results.write_text(f"top\n{report.START}\nold\n{report.END}\nend\n")
    assert not report.check_readme(readme, results)
    assert report.update_readme(readme, results)
    assert report.check_readme(readme, results) and not report.update_readme(readme, results)
    assert readme.read_text().startswith("intro\n") and readme.read_text().endswith("\noutro\n")
    assert results.read_text().startswith("top\n") and results.read_text().endswith("\nend\n")
    results.write_text("no markers")
    with pytest.raises(report.ReportError, match="results.md has no <!-- results:start"):
        report.check_readme(readme, results)
    readme.write_text("no markers")
    with pytest.raises(report.ReportError, match="README.md has no <!-- headline:start"):
        report.check_readme(readme, results)


def test_provenance_names_commits_run_times_and_uncommitted_outputs(tmp_path):
    fig = tmp_path / "figures"
    fig.mkdir()
    entry = {"profile": "default", "commit": "abc1234", "code_dirty": False, "code_hash": "h", "parameters": {}}
    (fig / "MANIFEST.json").write_text(json.dumps({"03-a.png": entry, "03-a.json": entry,
                                                   "04-b.png": {**entry, "commit": "def5678", "code_dirty": True}}))
    (fig / "RUNS.json").write_text(json.dumps({"default": {
        "03-a": {"wall_s": 90.0, "peak_rss_mib": 2048, "commit": "abc1234", "code_dirty": False,
                 "results_written": 3, "machine": {"cpus": 2, "load_1min_at_start": 1.25, "cpu": "Some CPU",
                                                   "native_bf16": ["amx_bf16"]},
                 "slowest_cells": [{"cell": "a", "s": 66.0, "code": "lenses = fit(x | y)"}]},
        "07-c": {"wall_s": 30.0, "peak_rss_mib": 512, "commit": "abc1234", "code_dirty": False,
                 "results_written": 0, "machine": {"cpus": 2, "load_1min_at_start": 0.5}}}}))
    text = report.section_provenance(fig, tmp_path)
    assert "| `03-a` | 1.5 | 2048 | 1.2 | 3 | 1.1: `lenses = fit(x / y)` | – | abc1234 | 2 | abc1234 | default |" in text
    assert "| `07-c` | 0.5 | 512 | 0.5 | 0 (all cached) | – | – | abc1234 | 0 | – | – |" in text  # a warm rerun
    assert "2 CPU cores, Some CPU (amx_bf16)" in text
    assert "| `04-…` | – |" in text and "def5678-dirty" in text
    assert "**1 outputs do not come from committed code**" in text
    assert "Total of the last runs: 2.0 minutes, of which notebooks 00–05 1.5" in text
    assert "No run from an empty results cache (a fresh clone's cost, training included) is recorded yet" in text
    (fig / "MANIFEST.json").write_text(json.dumps({"03-a.png": entry}))
    assert "Every output comes from committed code." in report.section_provenance(fig, tmp_path)
    # the grid's training time, and where it goes in the table
    (fig / "06-training-with-attenuation-grid.json").write_text(json.dumps({"train_seconds": 600.0, "runs": 70}))
    assert "Training the grid took 10.0 minutes of training time (70 runs" in report.section_provenance(fig, tmp_path)


def test_provenance_states_the_last_run_from_empty_caches_through_later_reruns(tmp_path):
    fig = tmp_path / "figures"
    fig.mkdir()
    (fig / "MANIFEST.json").write_text(json.dumps({"00-a.png": {"profile": "default", "commit": "abc1234"}}))
    inv = {"started": "2026-12-02T10:00:00Z", "notebooks": ["00", "06", "09"], "from_empty_caches": True,
           "models_prepared_at_start": []}
    cold = {s: {"wall_s": w, "commit": "abc1234", "code_dirty": False, "invocation": inv}
            for s, w in (("00-a", 120.0), ("06-b", 3600.0))}
    warm = {"wall_s": 6.0, "commit": "abc1234", "code_dirty": False, "cold_run": cold["00-a"],
            "invocation": {**inv, "started": "2026-12-02T14:00:00Z", "from_empty_caches": False}}
    (fig / "RUNS.json").write_text(json.dumps({"default": cold}))
    text = report.section_provenance(fig, tmp_path)
    assert "(as on a fresh clone; models prepared before it: none, 00 prepared them)" in text
    assert ("the run started 2026-12-02T10:00:00Z at commit abc1234 took 62.0 minutes for notebooks 00–06 "
            "(2.0 for 00–05; 00 2.0; 06 60.0); 09 did not finish in it. " in text)
    assert "come from other runs" not in text and "later reruns" not in text
    (fig / "RUNS.json").write_text(json.dumps({"default": {**cold, "09-c": {"wall_s": 6.0, "commit": "abc1234"}}}))
    text = report.section_provenance(fig, tmp_path)
    assert "The table's rows for 09 come from other runs." in text
    assert "summed" not in text, "one cold run and a notebook without any: nothing to sum"
    # a whole study measured in pieces: each notebook's latest cold run, summed, named as an estimate
    other = {"wall_s": 1800.0, "commit": "def5678", "code_dirty": False,
             "invocation": {**inv, "started": "2026-12-01T09:00:00Z", "notebooks": ["09"]}}
    (fig / "RUNS.json").write_text(json.dumps({"default": {**cold, "09-c": {"wall_s": 6.0, "commit": "abc1234",
                                                                              "cold_run": other},
                                                          "10-d": {"wall_s": 3.0}}}))
    text = report.section_provenance(fig, tmp_path)
    assert ("Each notebook's latest run from empty caches, summed (3 of 4 notebooks, 2 runs started "
            "2026-12-01T09:00:00Z, 2026-12-02T10:00:00Z): 92.0 minutes, an estimate of the whole study from a "
            "fresh clone (00 2.0 at abc1234; 06 60.0 at abc1234; 09 30.0 at def5678); no such run is recorded "
            "for 10. ") in text
    (fig / "RUNS.json").write_text(json.dumps({"default": {**cold, "00-a": warm}}))
    text = report.section_provenance(fig, tmp_path)
    assert "took 62.0 minutes" in text and "The table above shows later reruns where they replaced it." in text
    assert "Total of the last runs: 60.1 minutes" in text
    # a cold run holding none of 00-05 names no 00-05 subtotal (it would print 0.0)
    (fig / "RUNS.json").write_text(json.dumps({"default": {"06-b": cold["06-b"]}}))
    text = report.section_provenance(fig, tmp_path)
    assert "took 60.0 minutes for notebook 06 (06 60.0)" in text and "for 00–05;" not in text


def test_readme_says_how_long_a_fresh_clone_takes_in_one_run_or_as_a_named_sum(tmp_path):
    fig = tmp_path / "figures"
    fig.mkdir()
    assert "not measured yet" in report.render_cost(fig)
    machine = {"cpus": 2, "cpu": "Some CPU"}
    inv = {"started": "2026-12-02T10:00:00Z", "notebooks": ["00", "03", "06"], "from_empty_caches": True}
    cold = {s: {"wall_s": w, "commit": "abc1234", "machine": machine, "invocation": inv}
            for s, w in (("00-a", 600.0), ("03-b", 3000.0), ("06-c", 4200.0))}
    (fig / "RUNS.json").write_text(json.dumps({"default": cold}))
    text = report.render_cost(fig)
    assert text.startswith(report.COST_START) and text.endswith(report.COST_END)
    assert ("`make study`'s notebooks took 130 minutes in one run (installing the environment before them is not timed) on 2 cores (Some CPU); the longest are 06 (70 min) and "
            "03 (50 min).") in text
    # 03 rerun warm, keeping its cold run; 06's cold run from another day: a sum, said as such
    other = {**cold["06-c"], "invocation": {**inv, "started": "2026-12-01T09:00:00Z"}}
    runs = {"00-a": cold["00-a"], "03-b": {"wall_s": 60.0, "cold_run": cold["03-b"]}, "06-c": other,
            "10-d": {"wall_s": 6.0}}
    (fig / "RUNS.json").write_text(json.dumps({"default": runs}))
    text = report.render_cost(fig)
    assert ("`make study`'s notebooks take about 130 minutes, the sum of each notebook's latest run from empty "
            "caches (2 separate runs; none recorded for 10)") in text
    assert "the longest are 06 (70 min) and 03 (50 min)" in text, "03's cold run, not its warm rerun"


def test_every_image_the_readme_shows_is_committed():
    import re

    from residshift.core.paths import REPO_ROOT

    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", (REPO_ROOT / "README.md").read_text())
    assert images, "the README shows the key figures inline"
    missing = [i for i in images if not (REPO_ROOT / i).is_file()]
    assert not missing, f"README shows figures that do not exist: {missing}"


def test_rules_list_each_claim_id_once():
    row = VerdictRow(model="m", variant=None, claim_id="C2.layer-sensitive", claim="c", verdict="reproduced",
                     statistic="s", estimate=1.0, ci=(0.5, 1.5), level=0.95, n=8,
                     rule="C2.layer-sensitive. At alpha = 0.5, the spread")
    text = report._rules([row])
    assert "- **C2.layer-sensitive**: At alpha = 0.5, the spread" in text
    assert text.count("C2.layer-sensitive") == 1


def test_before_after_pairs_rows_across_a_rule_change():
    from residshift.analysis import verdicts as V
    from residshift.tools import report as R

    def row(cid, verdict, variant="logit lens", metric=None):
        return V.VerdictRow(model="m", variant=variant, claim_id=cid, claim="c", verdict=verdict,
                            statistic="s", estimate=0.1, ci=(0.0, 0.2), level=0.95, n=3, rule="r",
                            details={"metric": metric, "why": "x" if verdict == V.INCONCLUSIVE else ""})
    old = [row("C1.depth", V.REPRODUCED, metric="prob"), row("C2.layer-sensitive", V.REPRODUCED, variant=None),
           row("C3.concentrates", V.NOT_REPRODUCED, variant="scalar")]
    new = [row("C1.depth.sensitivity", V.REPRODUCED, metric="prob"),
           row("C2.layer-sensitive", V.INCONCLUSIVE, variant="late blocks, alpha=0.5"),
           row("C3.concentrates.material", V.NOT_REPRODUCED, variant="scalar"),
           row("C1.middle", V.REPRODUCED)]
    lines = R.before_after(old, new)
    assert [l[3] for l in lines] == [V.REPRODUCED, V.REPRODUCED, V.NOT_REPRODUCED, "–"]
    assert lines[1][-1].endswith("(changed)") and lines[3][-1].endswith("(new row)") and "(" not in lines[0][-1]


def test_item_scoring_benchmark_shows_each_models_ratios_to_the_bare_forward(tmp_path):
    b = {"cpu": {"cpu": "Test CPU"}, "items_per_task": 12, "rounds": 3, "batch_size": 16,
         "models": {"m": {"layers": 4, "s_per_item": {"bare": 0.2, "traced": 0.21, "gates": 0.25},
                          "traced_over_bare": 1.05, "gates_over_bare": 1.25, "load": [1.0, 1.4]}}}
    (tmp_path / "bench-item-scoring.json").write_text(json.dumps(b))
    part = report._item_scoring_benchmark(b)
    assert "| m | 4 | 0.200 | 0.210 | 0.250 | **1.05×** | **1.25×** | 1.0–1.4 |" in part
    assert "Test CPU" in part and "12 items per task" in part
    assert part in report.section_benchmarks(tmp_path, tmp_path)


SCALE_INPUTS = ("06-training-with-attenuation-verdicts", "07-learned-gates-and-benchmarks-verdicts",
                "08-misalignment-after-mitigation-verdicts", "08-misalignment-after-mitigation-regimes",
                "03-alignment-curves-metrics", "03-alignment-curves-c1", "03-alignment-curves-verdicts")


def _committed_figures(tmp_path):
    from committed import committed_text

    fig = tmp_path / "figures"
    fig.mkdir()
    for name in SCALE_INPUTS:
        (fig / f"{name}.json").write_text(committed_text(f"figures/{name}.json"))
    return fig


def test_scale_section_states_what_each_training_verdict_speaks_for(tmp_path):
    from residshift.analysis import scale as S
    from residshift.analysis import verdicts as V

    fig = _committed_figures(tmp_path)
    text = report.section_scale(fig, tmp_path)
    rows = [r for n in report.TRAINING_VERDICTS for r in json.loads((fig / f"{n}.json").read_text())
            if S.is_scaled(r["claim_id"])]
    counts = ", ".join(f"{k} {v}" for v in V.OUTCOMES if (k := sum(r["verdict"] == v for r in rows)))
    assert f"The {len(rows)} C2–C4 training verdicts of notebooks 06–08 ({counts})" in text
    assert f"<summary>The {len(rows)} C2–C4 training verdicts, each with the scale it speaks for" in text
    assert sum(line.startswith("| C") for line in text.splitlines()) == len(rows)
    load = [json.loads((fig / f"{n}.json").read_text()) for n in SCALE_INPUTS[2:]]
    switch = S.committed_rows(load[1], load[0], *load[2:])  # 08's regimes, 08's verdicts, then 03's three
    for s in switch:
        if s.unit != "seed":
            assert f"S1 = {S.share_text(s)}" in text and f"**{s.outcome}**" in text
    trained = {s.outcome for s in switch if s.unit == "seeds"}
    if trained == {S.NEAR_BIGRAM}:  # the committed numbers: the rule's words, printed
        assert "They speak for near-bigram models only" in text and "none of them is counted as evidence" in text
        assert f'read "{S.NOT_EVIDENCE}"' in text
    assert S.SCALE_RULE in text and text in report.render(fig, tmp_path)
    (fig / f"{report.LADDER}.json").unlink(missing_ok=True)
    assert report._ladder_sentence(fig) == ""
    reading = {"shape": "6x128", "final": True, "outcome": S.NEAR_BIGRAM, "middle": "not reproduced",
               "departure_depth": 0.17}
    ladder = {"readings": [{**reading, "rung": "6x128-r0", "S1": 0.74, "tokens": 358_400},
                           {**reading, "rung": "6x128-r1", "S1": 0.61, "tokens": 1_433_600}],
              "extrapolation": [{"shape": "6x128", "S1_target": S.SHARE_THRESHOLD, "kind": "extrapolated",
                                 "tokens": 9.1e6, "target": "the deep-switch threshold (S1 0.5)"}], "mitigation_rung": {"rung": "6x128-r1", "why": "the lowest S1"}}
    (fig / f"{report.LADDER}.json").write_text(json.dumps(ladder))
    sentence = report._ladder_sentence(fig)
    assert "6x128 S1 0.74 → 0.61 over 358k–1.43M tokens (near-bigram at the largest)" in sentence
    assert "No finished rung has the deep switch" in sentence and "None of the 2 shows a quiet middle" in sentence
    assert "leave the unigram level by l/L = 0.17" in sentence
    assert "for S1 alone; in brackets the 95% interval over windows" in sentence
    assert "6x128 would reach the deep-switch threshold (S1 0.5) at about 9.1M tokens" in sentence
    assert "declared on 6x128-r1" in sentence and sentence in report.section_scale(fig, tmp_path)


def test_scale_section_counts_verdicts_on_a_deep_switch_baseline_as_evidence(tmp_path):
    from residshift.analysis import scale as S

    fig = _committed_figures(tmp_path)
    regimes = json.loads((fig / "08-misalignment-after-mitigation-regimes.json").read_text())
    for i, per in enumerate(regimes["gemma"].values()):  # a late prediction: ~5% of the final top-1 after block 0
        per["next"][1] = (0.05 + 0.01 * i) * per["next"][-1]
    (fig / "08-misalignment-after-mitigation-regimes.json").write_text(json.dumps(regimes))
    v08 = json.loads((fig / "08-misalignment-after-mitigation-verdicts.json").read_text())
    for r in v08:  # and a quiet middle
        if r["claim_id"] == "C1.middle" and "gemma embedding" in r["model"]:
            r["verdict"], r["per_seed"] = "reproduced", ["reproduced"] * len(r["per_seed"])
    (fig / "08-misalignment-after-mitigation-verdicts.json").write_text(json.dumps(v08))
    text = report.section_scale(fig, tmp_path)
    assert "**deep switch**" in text and "All of them count as evidence, either way" in text
    assert f'read "{S.EVIDENCE_AGAINST}"' in text and "none of them is counted" not in text
    assert "only the pretrained" not in text


def test_scale_section_names_a_missing_input(tmp_path):
    fig = _committed_figures(tmp_path)
    (fig / "08-misalignment-after-mitigation-regimes.json").unlink()
    text = report.section_scale(fig, tmp_path)
    assert text == report._missing("Scale of the C2–C4 training verdicts",
                                   "figures/08-misalignment-after-mitigation-regimes.json")
    assert "not produced yet" in text


def test_tuned_lens_benchmark_names_both_recipes_and_how_each_fit_ended():
    def fit(steps, unconverged):
        return {"steps": steps, "seconds": 100.0, "load": [1.0, 2.0], "unconverged": unconverged,
                "converged_by_step": None if unconverged else steps}

    m = {"profile": "default", "layers": 4, "cpu": {"cpu": "Test CPU"}, "cpu_count": 2,
         "config": {"batch": 4, "window": 64, "train_windows": 256, "train_vocab": 2048, "eval_every": 25,
                    "es_windows": 2, "val_windows": 3, "lr": 1e-3},
         "sgd_config": {"lr": 1e-3}, "start": {"windows": 64, "seconds": 6.0},
         "sgd": fit(600, [0, 2]), "lstsq": fit(825, []), "lstsq_below_sgd_at": 4,
         "val_kl_mean": {"logit": 16.0, "sgd": 3.9, "start": 2.0, "lstsq": 1.45}}
    part = report._tuned_lens_benchmark({"models": {"m": m}})
    assert "Test CPU" in part and "2 of 4 layers still improving at the cap (h_l, l = 0, 2)" in part
    assert "every layer converged by step 825" in part and "**1.45**" in part and "at 4 of 4 layers" in part
    assert "predates the closed-form start" in report._tuned_lens_benchmark({"model": "m", "per_step_s": [1]})


def test_grid_section_adds_throughput_and_perplexity_when_saved(tmp_path):
    fig = tmp_path / "figures"
    fig.mkdir()
    grid = {"runs": 4, "variants": 2, "seeds": 2, "tokens_per_run": 1000, "precision": "fp32", "train_seconds": 120.0,
            "seconds_per_run": 30.0, "tokens_per_s": {"mean": 800.0, "min": 600.0, "max": 1000.0},
            "machine": {"cpu": "Some CPU", "threads": 2, "native_bf16": []}}
    (fig / "06-training-with-attenuation-grid.json").write_text(json.dumps(grid))
    old = report.section_grid(fig, tmp_path)  # a grid saved before issue 37: as before, nothing added
    assert "800 tokens/s on average" in old and "best run" not in old and "perplexities" not in old
    grid["throughput"] = {"runs": 4, "mean": 800.0, "best": 1000.0, "share_of_best": 0.8, "gap": 200.0,
                          "between": 150.0, "within": 50.0, "between_share": 0.75, "within_share": 0.25,
                          "variance_between_share": 0.9, "load": {"runs": 0}, "overhead_share": None,
                          "per_variant": {"fast": {"mean": 950.0, "min": 900.0, "max": 1000.0, "runs": 2},
                                          "slow": {"mean": 650.0, "min": 600.0, "max": 700.0, "runs": 2}}}
    (fig / "06-training-with-attenuation-grid.json").write_text(json.dumps(grid))
    metric = {"mean": 12.3456, "sd": 0.5}
    big = {"mean": 1234567.8, "sd": 4321.0}
    (fig / "06-training-with-attenuation-perplexity.json").write_text(json.dumps({
        "corpus": "wikitext-2-validation", "metrics": {"sliding_ppl": "sliding, per token",
                                                      "doc_bits_per_byte": "lm-eval, bits per byte"},
        "sliding": {"context": 32, "stride": 16, "windows": 4, "windows_total": 900},
        "lm_eval": {"max_length": 32, "documents": 2, "documents_total": 60},
        "metric_order": ["sliding_ppl", "doc_bits_per_byte"],
        "per_variant": {"baseline": {"sliding_ppl": metric, "doc_bits_per_byte": {"mean": 2.5, "sd": None},
                                     "seeds": 1},
                        "big": {"sliding_ppl": big, "doc_bits_per_byte": metric, "seeds": 2}}}))
    text = report.section_grid(fig, tmp_path)
    assert "80% of its best run's" in text and "variant explains 75%" in text and "no run recorded the load" in text
    assert "| `fast` | 2 | 950 | 900-1,000 |" in text
    grid["throughput"]["variants"] = ["slow", "fast"]  # the grid's order (the saved JSON's keys are sorted)
    (fig / "06-training-with-attenuation-grid.json").write_text(json.dumps(grid))
    text = report.section_grid(fig, tmp_path)
    assert text.index("| `slow` |") < text.index("| `fast` |")
    assert "| `baseline` | 1 | 12.35 ± 0.50 | 2.50 |" in text and "windows of 32 tokens" in text
    assert "| `big` | 2 | 1,234,568 ± 4,321 | 12.35 ± 0.50 |" in text
