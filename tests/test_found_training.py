"""residshift.study.found_training: the three "What this run found" lines of notebooks 06-10, on the
committed figures' numbers (each function's inputs rebuilt from ``figures/*.json`` as committed at
HEAD) and on small hand-built inputs that reach every outcome branch."""
import dataclasses

import numpy as np
import pandas as pd
import pytest

from committed import committed_json
from residshift.analysis import scale, verdicts
from residshift.analysis.verdicts import INCONCLUSIVE, NOT_REPRODUCED, REPRODUCED, VerdictRow, rows_from_json
from residshift.study import found_training as ft


def _fig(name: str):
    return committed_json(f"figures/{name}.json")


def _row(claim_id, variant, verdict, estimate=None, ci=(None, None), *, n=3, details=None,
         model="trained GPT 4x32", statistic="final validation loss, edited - baseline (nats, mean over seeds)"):
    return VerdictRow(model=model, variant=variant, claim_id=claim_id, claim="a claim", verdict=verdict,
                      statistic=statistic, estimate=estimate, ci=ci, level=0.95, n=n, rule="a rule",
                      details=details or {})


def _committed_switch(recipe: str = "gemma") -> scale.SwitchRow:
    rows = scale.trained_rows(_fig("08-misalignment-after-mitigation-regimes"),
                              _fig("08-misalignment-after-mitigation-verdicts"))
    return next(s for s in rows if s.unit == "seeds" and scale.recipe_of(s) == recipe)


def _switch(outcome: str, *, s1=0.3, ci=(0.2, 0.4), middle=REPRODUCED, why="") -> scale.SwitchRow:
    return dataclasses.replace(_committed_switch(), outcome=outcome, early_share=s1, early_share_ci=ci,
                               middle=middle, why=why)


def _three(lines):
    assert isinstance(lines, list) and len(lines) == 3 and all(isinstance(x, str) and x for x in lines)
    assert all(x.rstrip().endswith(".") for x in lines)
    return lines


MAX_LINE = 320  # issue 36: three lines a student reads, each the headline (the detail follows them)


def _short(lines):
    """Each line at most MAX_LINE characters (the committed runs: 14 variants in 06-08)."""
    assert [len(x) for x in _three(lines)] == [min(len(x), MAX_LINE) for x in lines], lines
    return lines


# --------------------------------------------------------------------------------------------
# 06
# --------------------------------------------------------------------------------------------


def _inputs_06():
    """``rows``, ``cuts`` (training.cut_table's columns, rebuilt with the same seed test from the
    committed per-seed final losses) and ``finals`` (the baseline's per-seed losses)."""
    rows = rows_from_json(_fig("06-training-with-attenuation-verdicts"))
    cut = _fig("06-training-with-attenuation-cut")
    base = np.asarray(cut["baseline"])
    finals = {("baseline", s): {"losses": [v]} for s, v in enumerate(base)}
    recs = []
    for key, v in cut.items():
        if key.startswith("alpha="):
            for block, per in zip(v["blocks"], v["per_seed"]):
                t = verdicts.seed_test(np.asarray(per) - base, sign=1, margin=verdicts.LOSS_MARGIN)
                recs.append({"alpha": float(key.split("=")[1]), "block": block, "change": t["estimate"],
                             "lo": t["lo"], "hi": t["hi"], "per_seed": t["per_seed"]})
    return rows, pd.DataFrame(recs).set_index(["alpha", "block"]), finals, base


def test_grid_found_on_the_committed_numbers():
    rows, cuts, finals, base = _inputs_06()
    first, second, third = _three(ft.grid_found(rows, cuts, finals, _committed_switch()))
    assert f"{base.mean():.3f} ± {np.std(base, ddof=1):.3f} nats" in first and "5 seeds" in first
    big = cuts["change"].abs().idxmax()
    r = cuts.loc[big]
    assert f"to {r['change']:+.3f} [{r['lo']:+.3f}, {r['hi']:+.3f}] (alpha={big[0]:g} at block {big[1]}, 5 of 5" in first
    assert f"the {len(cuts)} trained cuts change it by " in first
    hurts = [row.estimate for row in rows if row.claim_id == "C2-training.alpha0-hurts"]
    assert f"alpha = 0 hurts: 4 of 4 reproduced ({min(hurts):+.3f} to {max(hurts):+.3f})" in second
    assert "layer-sensitive: 1 reproduced (+0.704), 1 not reproduced (+0.002), 2 inconclusive" in second
    assert all(o in second for o in (REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE)) and "(5 seeds, " in second
    assert "underpowered" in second
    assert "near-bigram (no deep switch)" in third and "S1 = 0.74 [0.69, 0.78]" in third and "of the 12 C2 verdicts" in third
    assert "not evidence" in third


def test_grid_found_lines_are_short_on_the_committed_numbers():
    rows, cuts, finals, _ = _inputs_06()
    _short(ft.grid_found(rows, cuts, finals, _committed_switch()))


def test_grid_found_with_a_deep_switch_one_seed_and_an_untested_claim():
    cuts = pd.DataFrame([{"alpha": 0.0, "block": 1, "change": -0.02, "lo": None, "hi": None, "per_seed": [-0.02]}]
                        ).set_index(["alpha", "block"])
    rows = [_row("C2-training.alpha0-hurts", "alpha=0 at block 1", NOT_REPRODUCED, -0.02, n=1)]
    first, second, third = _three(ft.grid_found(rows, cuts, {("baseline", 0): {"losses": [4.0, 5.0]}},
                                                _switch(scale.DEEP_SWITCH)))
    assert "4.500 (one seed: no SD)" in first and "the one trained cut changes it by -0.020" in first
    assert "0 of 1 seeds higher" in first and " to " not in first  # one cut: the largest is the lowest
    assert "alpha = 0 hurts: not reproduced at block 1 (-0.020)" in second
    assert "layer-sensitive: not tested at this profile" in second and "a late cut helps: not tested" in second
    assert "deep switch" in third and scale.EVIDENCE_AGAINST in third and "because" not in third


def test_grid_found_with_an_inconclusive_switch():
    rows, cuts, finals, _ = _inputs_06()
    third = ft.grid_found(rows, cuts, finals, _switch(scale.SWITCH_INCONCLUSIVE, middle=NOT_REPRODUCED,
                                                      why="no quiet middle shown"))[2]
    assert "inconclusive (no quiet middle shown; deep switch not shown)" in third


def test_grid_found_names_what_is_missing():
    rows, cuts, finals, _ = _inputs_06()
    with pytest.raises(ValueError, match="baseline"):
        ft.grid_found(rows, cuts, {("alpha=0 @ block 0", 0): {"losses": [1.0]}}, _committed_switch())
    with pytest.raises(ValueError, match="cut_table"):
        ft.grid_found(rows, cuts.iloc[0:0], finals, _committed_switch())
    with pytest.raises(ValueError, match="c2_rows"):
        ft.grid_found([], cuts, finals, _committed_switch())
    with pytest.raises(ValueError, match="baseline_switch"):
        ft.grid_found(rows, cuts, finals, None)


# --------------------------------------------------------------------------------------------
# 07
# --------------------------------------------------------------------------------------------


def _inputs_07():
    rows = rows_from_json(_fig("07-learned-gates-and-benchmarks-verdicts"))
    alphas = pd.DataFrame(_fig("07-learned-gates-and-benchmarks-alphas")["final"]).set_index(["variant", "block"])
    compare = pd.DataFrame(_fig("07-learned-gates-and-benchmarks-compare")).set_index("variant")
    bench = _fig("07-learned-gates-and-benchmarks-benchmarks")
    items = bench.pop("items")
    table = pd.DataFrame(bench).set_index("variant")
    table.attrs["items"] = items
    return alphas, compare, rows, table


def test_gates_training_found_on_the_committed_numbers():
    alphas, compare, rows, table = _inputs_07()
    first, second, third = _three(ft.gates_training_found(alphas, compare, rows, table))
    for v in ("learned", "learned-token"):
        t = alphas.xs(v, level="variant")
        assert f"all from {t['start'].iloc[0]:.4f}" in first
        assert f"{v} most at block {int(t['attenuation'].idxmax())}" in first
        r = compare.loc[v]
        assert f"{v} {r['vs baseline']:+.3f} [{r['lo']:+.3f}, {r['hi']:+.3f}]" in second
    assert "5 seeds" in first and "concentrates on the last block: learned inconclusive (seeds disagree)" in first
    assert "material: not reproduced for both" in first
    assert "): inconclusive for both (beats 4 of 11 candidates)" in second
    assert "(2/5 lower) inconclusive (seeds disagree)" in second
    assert "vs every fixed cut (best alpha=0.9 @ block 5: -0.003 [-0.065, +0.059])" in second  # the committed best candidate
    assert "100 items per task" in third and "learned and learned-token inconclusive" in third
    assert "clears chance (one-sided 95% bound over items) on 1 of 4 tasks (arc-easy +0.172 above it)" in third


def test_gates_training_found_lines_are_short_on_the_committed_numbers():
    _short(ft.gates_training_found(*_inputs_07()))


def test_gates_training_found_with_a_lowest_cut_gates_that_did_not_move_and_no_benchmark():
    alphas = pd.DataFrame([{"variant": "learned", "block": b, "start": 0.05, "attenuation": a, "movement": 1e-5}
                           for b, a in enumerate([0.05, 0.05, 0.06])]).set_index(["variant", "block"])
    compare = pd.DataFrame([
        {"variant": "baseline", "vs baseline": 0.0, "lo": 0.0, "hi": 0.0, "per seed": [0.0, 0.0, 0.0]},
        {"variant": "alpha=0.5 @ block 2 (lowest-loss fixed cut)", "vs baseline": -0.03, "lo": -0.05, "hi": -0.01,
         "per seed": [-0.02, -0.03, -0.04]},
        {"variant": "learned", "vs baseline": -0.04, "lo": -0.06, "hi": -0.02, "per seed": [-0.03, -0.04, -0.05]},
    ]).set_index("variant")
    rows = [_row("C3-training.concentrates", "learned", INCONCLUSIVE, details={"why": "did not move"}),
            _row("C3-training.beats-baseline", "learned", REPRODUCED, -0.04, (-0.06, -0.02))]
    first, second, third = _three(ft.gates_training_found(alphas, compare, rows, pd.DataFrame()))
    assert "learned most at block 2 (0.0600, the last), did not move (at most 0.0000, below the 0.01 floor)" in first
    assert "concentrates on the last block: inconclusive (did not move) for learned" in first
    assert "learned -0.040 [-0.060, -0.020] (3/3 lower) reproduced" in second
    assert "every fixed cut" not in second  # no such row: not invented
    assert "fixed cuts: best alpha=0.5 @ block 2: -0.030 [-0.050, -0.010]" in second
    assert third.startswith("Benchmarks: none scored")


def test_gates_training_found_names_what_is_missing():
    alphas, compare, rows, table = _inputs_07()
    with pytest.raises(ValueError, match="alpha_table"):
        ft.gates_training_found(alphas.reset_index(), compare, rows, table)
    with pytest.raises(ValueError, match="compare_table"):
        ft.gates_training_found(alphas, compare.drop(columns="lo"), rows, table)
    with pytest.raises(ValueError, match="chance row"):
        ft.gates_training_found(alphas, compare, rows, table.drop(index="chance (uniform guess)"))
    missing = ft.gates_training_found(alphas, compare.drop(index="learned"), rows, table)[1]
    assert "learned: not in the comparison" in missing


# --------------------------------------------------------------------------------------------
# 08
# --------------------------------------------------------------------------------------------


def _persistence(rows):
    """training.persistence_table's columns, rebuilt from the misalignment rows (rank change and its
    interval; the loss change their loss clause recorded)."""
    recs = []
    for r in rows:
        if r.claim_id in ft.MISALIGN:
            states = "none" if r.estimate is None else r.statistic.split(" over ")[1].split(",")[0]
            recs.append({"variant": r.variant, "states": states, "rank change": r.estimate,
                         "rank CI": "" if r.ci[0] is None else f"[{r.ci[0]:.3f}, {r.ci[1]:.3f}]",
                         "loss change": (r.details.get("loss_change") or {}).get("estimate")})
    return pd.DataFrame(recs).set_index("variant")


def test_mitigation_found_on_the_committed_numbers():
    rows = rows_from_json(_fig("08-misalignment-after-mitigation-verdicts"))
    regimes = _fig("08-misalignment-after-mitigation-regimes")
    first, second, third = _three(ft.mitigation_found(rows, regimes, _persistence(rows), recipe="gemma"))
    assert "C1 on the trained baselines (5 seeds each, all must agree)" in first
    assert ("gemma: early reproduced, middle not reproduced, late reproduced → C1 not reproduced, "
            "S1 0.74 [0.69, 0.78] near-bigram") in first
    assert "nanogpt: early not reproduced" in first and "S1 0.87" in first
    assert "not reproduced for 4 (+0.277 to +0.700, loss +0.096 to +1.114)" in second
    assert "inconclusive for 4 (+0.010 to +0.104, loss +0.014 to +0.063)" in second
    assert "not applicable to 4 cuts at the last block" in second
    assert second.index("not reproduced for") < second.index("inconclusive for")
    assert "of the 24 C2/C3 verdicts, 24 are not evidence" in third and "near-bigram" in third


def test_mitigation_found_lines_are_short_on_the_committed_numbers():
    rows = rows_from_json(_fig("08-misalignment-after-mitigation-verdicts"))
    _short(ft.mitigation_found(rows, _fig("08-misalignment-after-mitigation-regimes"), _persistence(rows), recipe="gemma"))


def test_mitigation_found_with_a_reproduced_mitigation_and_nothing_edited():
    rows = rows_from_json(_fig("08-misalignment-after-mitigation-verdicts"))
    c1 = [r for r in rows if r.claim_id.startswith("C1")]
    mine = c1 + [_row("C3-training.misalignment", "learned", REPRODUCED, 0.2, (0.1, 0.3), n=5)]
    pers = pd.DataFrame([{"variant": "learned", "states": "h_1..h_5", "rank change": 0.2, "rank CI": "[0.100, 0.300]",
                          "loss change": 0.001}]).set_index("variant")
    second, third = ft.mitigation_found(mine, _fig("08-misalignment-after-mitigation-regimes"), pers)[1:]
    assert "reproduced for learned (+0.200 [0.100, 0.300], loss +0.001)" in second and "not applicable" not in second
    assert "of the 1 C3 verdict, 1 is reported, not evidence for the paper's regime" in third
    empty = ft.mitigation_found(c1, _fig("08-misalignment-after-mitigation-regimes"), pers.iloc[0:0])[1]
    assert empty.startswith("Input-token persistence: no edited variant")


def test_mitigation_found_names_what_is_missing():
    rows = rows_from_json(_fig("08-misalignment-after-mitigation-verdicts"))
    regimes = _fig("08-misalignment-after-mitigation-regimes")
    with pytest.raises(ValueError, match="recipe=P.train_embedding"):
        ft.mitigation_found(rows, regimes, _persistence(rows), recipe="nanogpt-xl")
    with pytest.raises(ValueError, match="misalignment_rows"):
        ft.mitigation_found([r for r in rows if r.claim_id.startswith("C1")], regimes, _persistence(rows))
    with pytest.raises(ValueError, match="regimes"):
        ft.mitigation_found(rows, {}, _persistence(rows))


# --------------------------------------------------------------------------------------------
# 09
# --------------------------------------------------------------------------------------------


def _table(numbers, n, unit):
    """attribution.window_table / seed_table's long format, rebuilt from a figure's numbers."""
    out = []
    for model, m in numbers.items():
        for which, terms in m.items():
            for term, v in terms.items():
                out += [[model, which, term, b, e, lo, hi, n, unit]
                        for b, (e, lo, hi) in enumerate(zip(v["estimate"], v["lo"], v["hi"]))]
    return pd.DataFrame(out, columns=list(ft.TABLE_COLUMNS))


def test_attribution_found_on_the_committed_numbers():
    pre = pd.concat([_table(_fig(f"09-who-removes-the-input-token-{m}"), 48, "windows")
                     for m in ("smollm2-135m", "gemma3-270m")])
    trained = _table(_fig("09-who-removes-the-input-token-trained"), 5, "seeds")
    first, second, third = _three(ft.attribution_found(pre, trained))
    assert ("smollm2-135m (48 windows, 30 blocks) falls most across block 0, -90.73 [-91.66, -89.87], mostly "
            "norm rescaling (-101.11)") in first
    assert first.count("mostly norm rescaling") == 2 and "gemma3-270m (48 windows, 18 blocks)" in first
    assert "gemma3-270m rises most across block 11, +4.86 [+4.67, +5.06], mostly MLP (+4.08)" in second
    assert ("all 4 variants (5 seeds): the input token falls most across block 0, -7.27 to -7.05, mostly norm "
            "rescaling; the next token rises most across block 0, +2.42 to +2.90, mostly MLP") in third


def test_attribution_found_lines_are_short_on_the_committed_numbers():
    pre = pd.concat([_table(_fig(f"09-who-removes-the-input-token-{m}"), 48, "windows")
                     for m in ("smollm2-135m", "gemma3-270m")])
    _short(ft.attribution_found(pre, _table(_fig("09-who-removes-the-input-token-trained"), 5, "seeds")))


def test_attribution_found_names_attention_and_the_skip_edit_when_they_lead():
    rows = []
    for which, parts in (("input", {"attn": [-3.0, -0.1], "mlp": [-1.0, 0.0], "skip": [0.0, -0.5], "rescale": [0.5, 0.0]}),
                         ("next", {"attn": [0.1, 2.0], "mlp": [0.0, 0.5], "skip": [0.0, 0.0], "rescale": [0.0, -0.1]})):
        for term, est in parts.items():
            rows += [["m", which, term, b, e, e - 0.1, e + 0.1, 3, "seeds"] for b, e in enumerate(est)]
        total = np.sum(list(parts.values()), axis=0)
        rows += [["m", which, "delta", b, e, e - 0.1, e + 0.1, 3, "seeds"] for b, e in enumerate(total)]
    t = pd.DataFrame(rows, columns=list(ft.TABLE_COLUMNS))
    first, second, third = ft.attribution_found(t, t)
    assert "m (3 seeds, 2 blocks) falls most across block 0, -3.50 [-3.60, -3.40], mostly attention (-3.00)" in first
    assert "m rises most across block 1, +2.40 [+2.30, +2.50], mostly attention (+2.00)" in second
    assert ("m (3 seeds): the input token falls most across block 0, -3.50 [-3.60, -3.40], mostly attention; "
            "the next token rises most across block 1") in third
    two = pd.concat([t, t.assign(model="n", estimate=t.estimate * 2)])
    third = ft.attribution_found(t, two)[2]
    assert "both variants (3 seeds): the input token falls most across block 0, -7.00 to -3.50, mostly attention" in third
    flat = t.assign(estimate=np.where(t.which == "next", -np.abs(t.estimate) - 0.01, np.abs(t.estimate) + 0.01))
    first, second, _ = ft.attribution_found(flat, flat)
    assert "m (3 seeds, 2 blocks) never falls on average; it rises least across block" in first
    assert "m never rises on average; it falls least across block" in second


def test_attribution_found_names_what_is_missing():
    with pytest.raises(ValueError, match="window_table"):
        ft.attribution_found(pd.DataFrame({"model": ["m"]}), pd.DataFrame({"model": ["m"]}))


# --------------------------------------------------------------------------------------------
# 10
# --------------------------------------------------------------------------------------------


def _mit_rows():
    return [d for d in _fig("10-the-scale-ladder-scale") if d["source"] == "10-the-scale-ladder"]


def test_ladder_found_on_the_committed_numbers():
    numbers = _fig("10-the-scale-ladder")
    first, second, third = _three(ft.ladder_found(numbers, _mit_rows()))
    assert "64 lens windows" in first and "at 358k → 1.43M → 5.73M tokens" in first
    assert "6x128 0.72 → 0.76 → 0.43 [0.40, 0.46]" in first
    assert "24x128 0.24 → 0.35 → 0.22 [0.20, 0.23]" in first and "smollm2-135m 0.14" in first
    assert "None of the 9 finished rungs has the deep switch" in second and "a quiet middle at 0" in second
    assert "tokens to reach smollm2-135m (S1 0.136), extrapolated in log10(tokens), not measured" in second
    assert "6x128 ~203M [98.5M, 588M], 12x128 ~13.1M [11.2M, 15.8M]" in second
    assert "[701M, never in 50%]" in second and "S1 alone" in second
    assert "Mitigation on trained GPT 24x128-r0 (10 seeds" in third
    assert "late-cut (block 23, alpha=0.9) -0.0156 [-0.0820, +0.0508]" in third and "inconclusive for both" in third
    assert "S1 = 0.52 [0.38, 0.65]: inconclusive (deep switch not shown)" in third
    assert "of the 2 C2/C3 verdicts, 2 are not evidence" in third


def test_ladder_found_lines_are_short_on_the_committed_numbers():
    _short(ft.ladder_found(_fig("10-the-scale-ladder"), _mit_rows()))


def test_ladder_found_with_a_deep_switch_rung_and_no_mitigation():
    numbers = {"readings": [
        {"rung": "8x64-r0", "shape": "8x64", "tokens": 1e6, "final": True, "S1": 0.3, "S1_lo": 0.2, "S1_hi": 0.4,
         "middle": REPRODUCED, "outcome": scale.DEEP_SWITCH},
        {"rung": "8x64-r0", "shape": "8x64", "tokens": 5e5, "final": False, "S1": 0.6, "S1_lo": None, "S1_hi": None,
         "middle": NOT_REPRODUCED, "outcome": scale.NEAR_BIGRAM}],
        "rows": [{"n": 16}], "pretrained": [{"model": "ref", "S1": 0.05}],
        "extrapolation": [{"shape": "8x64", "target": "ref (S1 0.05)", "S1_target": 0.05, "kind": None,
                           "tokens": None, "why": "the fitted line is nearly flat"}]}
    first, second, third = _three(ft.ladder_found(numbers, []))
    assert "at 1M tokens: 8x64 0.30 [0.20, 0.40]" in first and "0.60" not in first  # mid-run readings are not rungs
    assert "1 of the 1 finished rungs has the deep switch: 8x64-r0" in second
    assert "tokens to reach ref (S1 0.05)" in second and "8x64 never (the fitted line is nearly flat)" in second
    assert "S1 alone" not in second
    assert third.startswith("Mitigation comparison: none has run")
    nothing = _three(ft.ladder_found({**numbers, "readings": []}, []))
    assert nothing[0].startswith("No finished ladder rung")


def test_ladder_found_with_a_measured_target_and_a_counted_mitigation():
    numbers = _fig("10-the-scale-ladder")
    numbers["extrapolation"] = [{**e, "kind": "measured", "tokens": 5734400.0} if e["shape"] == "12x128" else e
                                for e in numbers["extrapolation"]]
    mit = _mit_rows()
    for d in mit:
        d["scale"] = {**d["scale"], "outcome": scale.DEEP_SWITCH, "counts_as_evidence": True,
                      "evidence": scale.evidence(d["verdict"], scale.DEEP_SWITCH)}
    second, third = ft.ladder_found(numbers, mit)[1:]
    assert "12x128 5.73M (measured)" in second
    assert "S1 = 0.52 [0.38, 0.65]: deep switch;" in third
    assert f"of the 2 C2/C3 verdicts, 2 are {scale.NO_EVIDENCE}." in third


def test_ladder_found_names_what_is_missing():
    with pytest.raises(ValueError, match="ladder_numbers"):
        ft.ladder_found({"rows": []}, [])


def test_no_package_module_imports_found_training():
    """Cache keys hash the source of a computation's residshift imports: nothing in the package may
    import this module, or editing a sentence would invalidate cached results."""
    from pathlib import Path

    import residshift

    root = Path(residshift.__file__).parent
    users = [p for p in root.rglob("*.py") if p.name != "found_training.py" and "found_training" in p.read_text()]
    assert users == []


def test_every_cut_is_said_once_where_the_gates_agree():
    def cut(verdict, beats, of):
        cands = {f"c{i}": {"verdict": REPRODUCED if i < beats else INCONCLUSIVE} for i in range(of)}
        return _row("C3-training.beats-best-cut", "v", verdict, details={"candidates": cands})

    same = [("learned", cut(INCONCLUSIVE, 4, 11)), ("learned-token", cut(INCONCLUSIVE, 4, 11))]
    assert ft._every_cut(same, 2) == "inconclusive for both (beats 4 of 11 candidates)"
    counts = [("learned", cut(INCONCLUSIVE, 5, 11)), ("learned-token", cut(INCONCLUSIVE, 4, 11))]
    assert ft._every_cut(counts, 2) == "inconclusive for both (beats 5 and 4 of 11 candidates)"
    totals = [("learned", cut(INCONCLUSIVE, 5, 11)), ("learned-token", cut(INCONCLUSIVE, 4, 9))]
    assert ft._every_cut(totals, 2) == "inconclusive for both (beats 5 of 11 and 4 of 9 candidates)"
    split = [("learned", cut(REPRODUCED, 11, 11)), ("learned-token", cut(INCONCLUSIVE, 4, 11))]
    assert ft._every_cut(split, 2) == ("learned reproduced (beats 11 of 11 candidates), "
                                       "learned-token inconclusive (beats 4 of 11 candidates)")
