"""The three "What this run found" lines of notebooks 03-05 (``residshift.study.found``): on the committed
figures' numbers, and on small hand-built inputs that reach each outcome (reproduced, not reproduced,
inconclusive, a model without rows)."""
import pandas as pd
import pytest

from residshift.analysis.verdicts import VerdictRow, rows_from_json
from residshift.study import found
from committed import committed_json


def _fig(name):
    """A committed figure's numbers (as at HEAD: a local ``make study`` does not change them)."""
    return committed_json(f"figures/{name}.json")


def _verdicts(name):
    return rows_from_json(_fig(name), name)


def _three(lines):
    assert len(lines) == 3 and all(isinstance(x, str) and x and "\n" not in x for x in lines)
    return lines


MAX_LINE = 320  # issue 36: three lines a student reads, each the headline (the detail follows them)


def _short(lines):
    """Each line at most MAX_LINE characters (the committed runs: 3 models in 03, 2 in 04 and 05)."""
    assert [len(x) for x in _three(lines)] == [min(len(x), MAX_LINE) for x in lines], lines
    return lines


def _row(model, variant, claim_id, verdict, estimate=None, ci=(None, None), n=10, **details):
    return VerdictRow(model=model, variant=variant, claim_id=claim_id, claim="a claim", verdict=verdict,
                      statistic="a statistic", estimate=estimate, ci=ci, level=0.95, n=n, rule="a rule",
                      details=details)


# --------------------------------------------------------------------------------------------
# On the committed figures
# --------------------------------------------------------------------------------------------


def test_alignment_found_on_the_committed_numbers():
    rows = _verdicts("03-alignment-curves-verdicts")
    regimes, depth, tuned = _three(found.alignment_found(rows))
    names = list(dict.fromkeys(r.model for r in rows))
    assert all(n in depth and n in tuned for n in names)
    assert "paper: Gemma-2-2B ≈ 0.65; C1.depth band 0.5–0.8" in depth
    for r in rows:
        if r.claim_id == "C1.depth" and r.variant == "logit lens" and r.details["metric"] == "top1":
            assert f"{r.model} {r.estimate:.2f} [{r.ci[0]:.2f}, {r.ci[1]:.2f}]" in depth
            assert f"C1.depth {r.verdict}" in depth
        if r.claim_id == "C1" and r.variant == "logit lens":
            assert f"early {r.details['early']}, middle {r.details['middle']}" in regimes
            assert f"→ C1 {r.verdict}" in regimes
    assert "all 3 models: " in regimes  # the committed models share their C1 verdicts: said once
    assert "→ C1.depth inconclusive (preprocessing moves it) for all 3" in depth
    assert "no tuned lens for qwen25-coder-1.5b" in tuned


def test_alignment_found_lines_are_short_on_the_committed_numbers():
    _short(found.alignment_found(_verdicts("03-alignment-curves-verdicts")))


def test_sweep_found_on_the_committed_numbers():
    rows = _verdicts("04-attenuation-sweep-verdicts")
    best, alpha0 = _fig("04-attenuation-sweep-best-cut"), _fig("04-attenuation-sweep-alpha0")
    cut, c2, a0 = _three(found.sweep_found(rows, best, alpha0, corpus="wikitext-103", split="validation"))
    for name, s in best.items():
        o = s["overall"]
        assert f"{name} block {o['layer']}, α = {o['alpha']:g} ({o['region']}): " in cut
        assert f"{o['mean']:+.4f} [{o['lo']:+.4f}, {o['hi']:+.4f}]" in cut
        assert name in c2 and name in a0
    assert (f"on {best[name]['n_selection']} selection windows of wikitext-103 validation), nats on the next "
            f"{best[name]['n_confirmation']} confirmation windows") in cut
    late = next(r for r in rows if r.claim_id == "C2.late-cut")
    assert f"late cut ({late.n} confirmation windows): " in c2
    assert f"{late.model} {late.estimate:+.4f} [{late.ci[0]:+.4f}, {late.ci[1]:+.4f}]" in c2
    assert "→ reproduced for both" in c2 and "→ not reproduced for both" in c2


def test_sweep_found_lines_are_short_on_the_committed_numbers():
    _short(found.sweep_found(_verdicts("04-attenuation-sweep-verdicts"), _fig("04-attenuation-sweep-best-cut"),
                             _fig("04-attenuation-sweep-alpha0"), corpus="wikitext-103", split="validation"))


def test_gates_found_on_the_committed_numbers():
    rows = _verdicts("05-learned-gates-verdicts")
    loss = _fig("05-learned-gates-loss")
    where, losses, rest = _three(found.gates_found(rows, loss, corpus="wikitext-103"))
    for name in dict.fromkeys(r.model for r in rows):
        assert f"{name} scalar" in where and name in losses
        cut = next(r for r in loss if r["model"] == name and r["variant"].startswith("best fixed cut"))
        # the same cut as notebook 04, labelled with the windows it is measured on here
        assert f"{name} {cut['change']:+.4f}" in losses
    assert f"Loss (nats, {loss[0]['n']} evaluation windows of wikitext-103 test)" in losses
    base = next(r for r in rows if r.claim_id == "C3.beats-baseline" and r.verdict == "not reproduced")
    assert f"{base.model} scalar {base.estimate:+.4f} [{base.ci[0]:+.4f}, {base.ci[1]:+.4f}] not reproduced" in losses
    assert "3 others inconclusive" in losses and "inconclusive (seeds disagree)" in where
    assert "lens windows of wikitext-103 test" in rest and "not reproduced for all 4 gates" in rest
    assert "benchmarks (12 items per task): inconclusive (not assessable at this profile) for all 4 gates" in rest


def test_gates_found_lines_are_short_on_the_committed_numbers():
    _short(found.gates_found(_verdicts("05-learned-gates-verdicts"), _fig("05-learned-gates-loss"),
                             corpus="wikitext-103"))


# --------------------------------------------------------------------------------------------
# 03 on hand-built rows
# --------------------------------------------------------------------------------------------


def _depth(model, decoder, estimate, ci, verdict, why=""):
    return _row(model, decoder, "C1.depth", verdict, estimate, ci, metric="top1", primary=True, band=[0.5, 0.8],
                n_layers=20, layer=None if estimate is None else estimate * 20, why=why)


def _c1(model, early, middle, late, overall, why=""):
    return [_row(model, "logit lens", "C1.early", early), _row(model, "logit lens", "C1.middle", middle),
            _row(model, "logit lens", "C1.late", late, evidence=False),
            _row(model, "logit lens", "C1", overall, why=why)]


def test_alignment_found_reads_every_outcome_and_names_a_model_without_rows():
    rows = (_c1("a", "reproduced", "reproduced", "reproduced", "reproduced")
            + [_depth("a", "logit lens", 0.66, (0.62, 0.70), "reproduced"),
               _depth("a", "tuned lens", 0.55, (0.50, 0.60), "reproduced"),
               _row("a", "tuned lens", "C1", "not reproduced", evidence=False)]
            + _c1("b", "not reproduced", "inconclusive", "reproduced", "inconclusive", why="a middle layer undecided")
            + [_depth("b", "logit lens", 0.9, (0.85, 0.95), "not reproduced"),
               _depth("b", "tuned lens", 0.78, (0.7, 0.86), "inconclusive", why="across the band's edge")])
    regimes, depth, tuned = _three(found.alignment_found(rows, models=["a", "b", "c"]))
    assert "a: early reproduced, middle reproduced, late reproduced (a sanity check) → C1 reproduced" in regimes
    assert "b: early not reproduced, middle inconclusive" in regimes
    assert "→ C1 inconclusive (a middle layer undecided)" in regimes
    assert "no logit-lens C1 rows for c" in regimes
    assert "C1.depth band 0.5–0.8" in depth
    assert "a 0.66 [0.62, 0.70] (inside) → C1.depth reproduced" in depth
    assert "b 0.90 [0.85, 0.95] (above) → C1.depth not reproduced" in depth
    assert "no emergence depth for c" in depth
    assert "a 0.55 [0.50, 0.60] (inside), 0.11 earlier → C1.depth reproduced" in tuned
    assert "its C1 not reproduced (not counted) for a" in tuned
    assert "(across an edge)" in tuned and "C1.depth inconclusive (across the band's edge)" in tuned
    assert "no tuned lens for c" in tuned
    flat = [_depth("d", "logit lens", None, (None, None), "inconclusive", why="the curve does not rise")]
    _, depth, _ = _three(found.alignment_found(_c1("d", *["reproduced"] * 4) + flat))
    assert "d no emergence depth → C1.depth inconclusive (the curve does not rise)" in depth
    same = [_depth(m, "logit lens", 0.9, (0.85, 0.95), "inconclusive", why="preprocessing moves it: by 0.2")
            for m in ("e", "f")]
    regimes, depth, _ = _three(found.alignment_found(_c1("e", *["reproduced"] * 4) + _c1("f", *["reproduced"] * 4)
                                                     + same))
    assert regimes.count("early reproduced") == 1 and "both models: early" in regimes  # shared verdicts said once
    assert "e 0.90 [0.85, 0.95] (above), f 0.90 [0.85, 0.95] (above) → C1.depth inconclusive (preprocessing moves it) " \
           "for both" in depth


def test_alignment_found_refuses_rows_it_cannot_read():
    with pytest.raises(ValueError, match="pass `rows`"):
        found.alignment_found([])
    with pytest.raises(ValueError, match="reads C1 and C1.depth rows"):
        found.alignment_found([_row("a", "x", "C2.late-cut", "reproduced")])


# --------------------------------------------------------------------------------------------
# 04 on hand-built numbers
# --------------------------------------------------------------------------------------------


def _summary(overall, *, lowest=None, L=12):
    return {"n_layers": L, "n_selection": 8, "n_confirmation": 64, "margin": 0.005,
            "early_blocks": "blocks 0-3", "late_blocks": "blocks 8-11", "overall": overall,
            "lowest": lowest or overall}


def test_sweep_found_reads_every_outcome_and_names_a_model_without_rows():
    best = {"a": _summary({"layer": 1, "alpha": 0.9, "region": "early", "selection_mean": -0.02, "mean": -0.006,
                           "lo": -0.01, "hi": -0.002, "status": "confirmed"}),
            "b": _summary({"layer": None, "alpha": 1.0, "region": None, "selection_mean": 0.0},
                          lowest={"layer": 10, "alpha": 0.9, "region": "late", "selection_mean": 0.003})}
    rows = [_row("a", "late blocks, alpha=0.5", "C2.layer-sensitive", "reproduced", 0.8, (0.4, 1.2), n=8,
                 most_harmful_block=11, least_harmful_block=8, permutation_p=0.0005),
            _row("a", "block 10, alpha=0.9", "C2.late-cut", "inconclusive", 0.001, (-0.004, 0.006), n=64,
                 margin=0.005, why="the interval straddles the margin"),
            _row("b", "late blocks, alpha=0.5", "C2.layer-sensitive", "not reproduced", 0.01, (-0.02, 0.04), n=8,
                 most_harmful_block=9, least_harmful_block=10, permutation_p=0.4)]
    alpha0 = pd.DataFrame([{"model": m, "block": b, "dloss": d, "lo": d - 0.1, "hi": d + 0.1}
                           for m, ds in (("a", (0.004, 3.0, 9.0)), ("b", (8.8, 5.8, 26.4))) for b, d in enumerate(ds)])
    cut, c2, a0 = _three(found.sweep_found(rows, best, alpha0, corpus="wikitext-103", split="validation",
                                           models=["a", "b", "c"]))
    assert "chosen on 8 selection windows of wikitext-103 validation" in cut and "next 64 confirmation windows" in cut
    assert "a block 1, α = 0.9 (early): -0.0060 [-0.0100, -0.0020], confirmed" in cut
    assert "b: no cut beats the unmodified model on the selection windows (least harmful block 10, α = 0.9" in cut
    assert "c: no best-cut numbers" in cut
    assert ("layer-sensitive (late-block contrast, 8 selection windows): a +0.800 [+0.400, +1.200] → reproduced; "
            "b +0.010 [-0.020, +0.040] → not reproduced") in c2
    assert ("late cut (64 confirmation windows): a +0.0010 [-0.0040, +0.0060] → inconclusive (the interval "
            "straddles the margin)") in c2
    assert "no C2 rows for c" in c2
    assert "a block 0 +0.004 [-0.096, +0.104], others +3.00 (block 1) to +9.00 (block 2)" in a0
    assert "b block 0 +8.800" in a0 and "c: no α = 0 column" in a0
    held = {**best, "a": _summary({**best["a"]["overall"], "mean": 0.001, "lo": -0.004, "hi": 0.006,
                                   "status": "undecided"}),
            "b": _summary({**best["a"]["overall"], "mean": None})}
    cut = found.sweep_found(rows, held, alpha0, corpus="c", split="s")[0]
    assert "a block 1, α = 0.9 (early): +0.0010 [-0.0040, +0.0060], not confirmed (gain ≥ 0.005 not ruled out)" in cut
    assert "b block 1, α = 0.9 (early): -0.0200 on the selection windows, not measured on the confirmation ones" in cut


def test_sweep_found_refuses_missing_inputs():
    rows = [_row("a", "block 1, alpha=0.9", "C2.late-cut", "reproduced", -0.01, (-0.02, -0.006), n=64)]
    with pytest.raises(ValueError, match="best-cut summary"):
        found.sweep_found(rows, {}, [{"model": "a", "block": 0, "dloss": 0.1}], corpus="c", split="s")
    with pytest.raises(ValueError, match="alpha0_table"):
        found.sweep_found(rows, {"a": _summary({"layer": None})}, [], corpus="c", split="s")


# --------------------------------------------------------------------------------------------
# 05 on hand-built rows
# --------------------------------------------------------------------------------------------


def _gate_rows(model, kind, *, conc, base, vs_cut, bench, bench_why=""):
    seeds = [{"most_attenuated_block": 11}, {"most_attenuated_block": 11 if conc != "inconclusive" else 3}]
    return [_row(model, kind, "C3.concentrates", conc, 4.0, n=2, per_seed=seeds),
            _row(model, kind, "C3.concentrates.material", "not reproduced", 0.02, n=2, per_seed=seeds,
                 min_attenuation=0.05),
            _row(model, kind, "C3.beats-baseline", base, -0.008, (-0.012, -0.006), n=24),
            _row(model, kind, "C3.beats-best-cut", vs_cut, 0.001, (-0.004, 0.006), n=24),
            _row(model, kind, "C3.misalignment", "not reproduced", 0.02, (-0.01, 0.05), n=16),
            _row(model, kind, "C3.misalignment.rank", "not reproduced", 0.001, (0.0, 0.002), n=16),
            _row(model, kind, "C3.emergence-shift", "not reproduced", 0.0, (0.0, 0.0), n=16),
            _row(model, kind, "C3.benchmarks", bench, 0.0, (0.0, 0.0), n=12, worst_task="piqa", why=bench_why)]


def test_gates_found_reads_every_outcome_and_names_a_model_without_rows():
    rows = (_gate_rows("a", "scalar gates", conc="reproduced", base="reproduced", vs_cut="inconclusive",
                       bench="reproduced")
            + _gate_rows("a", "token gates", conc="inconclusive", base="not reproduced", vs_cut="not reproduced",
                         bench="inconclusive", bench_why="too few items"))
    loss = pd.DataFrame([{"model": "a", "variant": "unmodified", "change": 0.0, "lo": 0.0, "hi": 0.0, "n": 24},
                         {"model": "a", "variant": "best fixed cut (block 10, alpha=0.9)", "change": 0.0034,
                          "lo": -0.0036, "hi": 0.01, "n": 24}])
    where, losses, rest = _three(found.gates_found(rows, loss, corpus="wikitext-103", models=["a", "b"]))
    assert ("C3.concentrates (final block's 1 − α ÷ the largest other's, 2 seeds): a scalar 4× reproduced, "
            "a token 4× inconclusive; material (1 − α ≥ 0.05): not reproduced for both gates (at most 0.02)") in where
    assert where.endswith("; no C3 rows for b.") and losses.endswith("; no C3 rows for b.")
    assert "Loss (nats, 24 evaluation windows of wikitext-103 test)" in losses
    assert ("vs unmodified: a scalar -0.0080 [-0.0120, -0.0060] reproduced, a token -0.0080 [-0.0120, -0.0060] "
            "not reproduced") in losses
    assert ("vs the best fixed cut (alone: a +0.0034): a scalar +0.0010 [-0.0040, +0.0060] inconclusive, "
            "a token +0.0010 [-0.0040, +0.0060] not reproduced") in losses
    assert "on 16 lens windows of wikitext-103 test" in rest
    assert "input log-prob (+0.020), log10 rank (+0.0010) and emergence shift (+0.000): not reproduced for both gates" in rest
    assert "benchmarks (12 items per task): a scalar reproduced, a token inconclusive (too few items)" in rest
    assert rest.endswith("; no C3 rows for b.")
    undefined = [r if r.claim_id != "C3.emergence-shift" else
                 _row("a", r.variant, r.claim_id, "inconclusive", n=16, why="no depth with or without")
                 for r in rows]
    _, _, rest = _three(found.gates_found(undefined, loss, corpus="wikitext-103"))
    assert "emergence shift: inconclusive (no depth with or without) for both gates" in rest
    three = (_gate_rows("a", "scalar gates", conc="reproduced", base="reproduced", vs_cut="inconclusive",
                        bench="reproduced")
             + [r for k in ("token gates", "other gates") for r in _gate_rows(
                 "a", k, conc="reproduced", base="inconclusive", vs_cut="inconclusive", bench="reproduced")])
    _, losses, _ = _three(found.gates_found(three, loss, corpus="wikitext-103"))
    assert "vs unmodified: a scalar -0.0080 [-0.0120, -0.0060] reproduced, 2 others inconclusive;" in losses
    assert "vs the best fixed cut (alone: a +0.0034): inconclusive for all 3 gates" in losses


def test_gates_found_refuses_missing_inputs():
    rows = _gate_rows("a", "scalar gates", conc="reproduced", base="reproduced", vs_cut="reproduced",
                      bench="reproduced")
    with pytest.raises(ValueError, match="loss_table"):
        found.gates_found(rows, [], corpus="c")
    with pytest.raises(ValueError, match="reads C3 rows"):
        found.gates_found([_row("a", "x", "C1", "reproduced")], [{"model": "a"}], corpus="c")


def test_no_module_of_the_package_imports_found():
    # found.py stays out of every cached computation's source fingerprint (residshift.core.cache)
    import ast

    from residshift.core.paths import REPO_ROOT

    for path in (REPO_ROOT / "residshift").rglob("*.py"):
        if path.name == "found.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, (ast.Import, ast.ImportFrom)) else [])
            module = getattr(node, "module", None) or ""
            assert "found" not in names and not module.endswith("found"), f"{path} imports residshift.study.found"
