"""The verdict schema and every rule, each driven to all three outcomes by constructed inputs."""
import json
import math

import numpy as np
import pytest

from residshift.analysis import stats
from residshift.analysis import verdicts as V
from residshift.study import tables

R, N, I = V.REPRODUCED, V.NOT_REPRODUCED, V.INCONCLUSIVE
RULES = [V.c1_regimes, V.c1_depth, V.c2_late_cut, V.c2_layer_sensitive, V.c3_beats_baseline,
         V.c3_beats_best_cut, V.c3_concentration, V.c3_misalignment, V.c3_benchmarks, V.c4_benchmarks,
         V.c2_training_alpha0, V.c2_training_layer_sensitive, V.c2_training_late_cut,
         V.c3_training_beats_baseline, V.c3_training_beats_every_cut, V.training_misalignment,
         V.training_emergence_shift]


def _by_id(rows):
    return {r.claim_id: r for r in rows}


def _check_rows(rows):
    for r in rows:
        assert isinstance(r, V.VerdictRow) and r.verdict in V.OUTCOMES
        assert "{" not in r.rule and r.claim == V.CLAIMS[r.claim_id]
        json.dumps(r.as_dict())  # JSON-safe


# --------------------------------------------------------------------------------------------
# The schema
# --------------------------------------------------------------------------------------------


def _row(**kw):
    base = dict(model="m", variant=None, claim_id="C2.late-cut", claim="a claim", verdict=R,
                statistic="mean dloss", estimate=-0.1, ci=(-0.2, -0.05), level=0.95, n=10, rule="a rule")
    return V.VerdictRow(**{**base, **kw})


def test_row_validates_and_cleans():
    r = _row(estimate=float("nan"), ci=[np.float64(-0.2), float("inf")], per_seed=[R, I],
             details={"a": np.arange(3), "b": np.float32(0.5), "c": (1, float("nan")), "d": np.bool_(True)})
    assert r.estimate is None and r.ci == (-0.2, None) and r.per_seed == (R, I)
    assert r.details == {"a": [0, 1, 2], "b": 0.5, "c": [1, None], "d": True}
    with pytest.raises(V.VerdictError, match="not one of"):
        _row(verdict="yes")
    with pytest.raises(V.VerdictError, match="claim_id"):
        _row(claim_id="C9.x")
    with pytest.raises(V.VerdictError, match="level"):
        _row(level=95)
    with pytest.raises(V.VerdictError, match="per-seed"):
        _row(per_seed=["maybe"])
    with pytest.raises(V.VerdictError, match="JSON-like"):
        _row(details={"x": object()})
    with pytest.raises(V.VerdictError, match="rule in words"):
        _row(rule="")


def test_save_and_load_round_trip(tmp_path):
    rows = [_row(), _row(claim_id="C1", verdict=N, estimate=None, ci=(None, None), level=None,
                         per_seed=[N, N], details={"k": 1}, source="03-alignment-curves-shift-table")]
    path = tables.save_verdicts("09-test-verdicts", rows, parameters={"seed": 0})
    assert path.name == "09-test-verdicts.json"
    data = json.loads(path.read_text())
    assert V.is_verdict_layout(data) and all(d["schema"] == V.SCHEMA for d in data)
    assert V.load_verdicts(path) == rows
    with pytest.raises(V.VerdictError, match="verdicts"):
        tables.save_verdicts("09-test-numbers", rows)
    with pytest.raises(V.VerdictError, match="no verdict rows"):
        tables.save_verdicts("09-test-verdicts", [])
    with pytest.raises(V.VerdictError, match="VerdictRow"):
        tables.save_verdicts("09-test-verdicts", [{"verdict": R}])
    old = tmp_path / "old-verdicts.json"
    old.write_text(json.dumps({"m": {"c1": {"verdict": R}}}))
    with pytest.raises(V.VerdictError, match="rerun the notebook"):
        V.load_verdicts(old)
    with pytest.raises(V.VerdictError, match="does not exist"):
        V.load_verdicts(tmp_path / "nope.json")
    bad = rows[0].as_dict() | {"extra": 1}
    with pytest.raises(V.VerdictError, match="unknown"):
        V.rows_from_json([bad])

def test_every_view_renders_a_row_the_same_way():
    row = _row(details={"mde": 0.0123, "mde_unit": "nats"}, per_seed=[R, N])
    rec = tables.verdict_record(row)
    assert list(rec) == list(tables.COLUMNS) and rec["MDE"] == "0.0123 nats" and rec["per seed"] == f"{R}, {N}"
    frame = tables.verdict_table([row])
    assert frame.reset_index().iloc[0].to_dict() == rec
    text = repr(frame)
    assert rec["estimate [CI]"] in text and "statistic" not in text  # the plain-text view: verdict and estimate
    # what a rule marked shows as a symbol, its words in the reason; an unmarked row shows none
    assert tables.marks(row) == "" and rec["verdict"] == R and rec["why"] == ""
    marked = _row(verdict=N, details={"post_hoc": True, "pre_registered_verdict": R, "evidence": False,
                                      "evidence_why": V.C1_LATE_WHY})
    rec = tables.verdict_record(marked)
    assert rec["verdict"] == f"{N}*°" and rec["why"].startswith("post hoc; the pre-registered rule")
    assert tables.marks(_row(details={"post_hoc": True})) == ""  # C1.depth: post hoc, no earlier rule to show



def test_every_rule_states_itself():
    for fn in RULES:
        assert "Rule (default parameters)" in fn.__doc__, fn.__name__
        assert "{" not in fn.__doc__.split("Rule (default parameters)")[1], fn.__name__
    for cid in V.CLAIMS:
        assert V._CLAIM_ID.match(cid), cid


def test_decision_helpers():
    assert V.threshold_verdict(0.2, 0.3, 0.1) == R
    assert V.threshold_verdict(0.0, 0.05, 0.1) == N
    assert V.threshold_verdict(0.05, 0.2, 0.1) == I
    assert V.threshold_verdict(None, 0.2, 0.1) == I
    assert V.improvement_verdict(-0.3, -0.1, sign=-1) == R
    assert V.improvement_verdict(-0.001, 0.01, sign=-1, margin=0.005) == N
    assert V.improvement_verdict(-0.01, 0.01, sign=-1, margin=0.005) == I
    assert V.improvement_verdict(0.1, 0.3, sign=1) == R
    assert V.improvement_verdict(-0.1, 0.001, sign=1, margin=0.005) == N
    assert V.band_verdict(0.55, 0.75, (0.5, 0.8)) == R
    assert V.band_verdict(0.1, 0.3, (0.5, 0.8)) == N and V.band_verdict(0.85, 0.9, (0.5, 0.8)) == N
    assert V.band_verdict(0.4, 0.6, (0.5, 0.8)) == I and V.band_verdict(None, 0.6, (0.5, 0.8)) == I


def test_the_rules_pieces():
    # "late": l >= 2/3 L, one definition for the sweep, the training grid and the figures
    assert [l for l in range(6) if V.is_late(l, 6)] == [4, 5] and V.first_late_block(6) == 4
    assert [l for l in range(30) if V.is_late(l, 30)] == list(range(20, 30)) and V.first_late_block(30) == 20
    assert V.first_late_block(26) == 18 and not V.is_late(17, 26)
    assert V.c1_middle_candidates(6) == [2, 3, 4]
    assert V.c1_min_run(4) == 1 and V.c1_min_run(5) == 2 and V.c1_min_run(30) == 2
    assert V.bonferroni_level(0.95, 5) == pytest.approx(0.99)
    sel, conf = V.selection_confirmation(7)
    assert sel.tolist() == [0, 2, 4, 6] and conf.tolist() == [1, 3, 5]
    # every rule's default parameters are the module's constants (one home for each number)
    assert V.c1_depth.__doc__.count(f"[{V.DEPTH_BAND[0]}, {V.DEPTH_BAND[1]}]") == 1
    import inspect
    for fn, name, const in [(V.c1_regimes, "margin", V.C1_MARGIN), (V.c1_depth, "band", V.DEPTH_BAND),
                            (V.c2_late_cut, "late_fraction", V.LATE_FRACTION),
                            (V.c2_training_late_cut, "late_fraction", V.LATE_FRACTION),
                            (V.c3_concentration, "min_attenuation", V.MIN_ATTENUATION),
                            (V.c2_layer_sensitive, "probe_alpha", V.PROBE_ALPHA),
                            (V.c3_beats_baseline, "margin", V.LOSS_MARGIN),
                            (V.c4_benchmarks, "margin", V.BENCH_MARGIN)]:
        assert inspect.signature(fn).parameters[name].default == const, (fn.__name__, name)


# --------------------------------------------------------------------------------------------
# C1
# --------------------------------------------------------------------------------------------


def _c1(h1, mid, late, *, n=40, L=12, noise=0.01, seed=0, extent=2):
    """Per-window top-1 rates: excess over the unigram decoder at h_1..h_extent (input), in the middle,
    and at h_(L-extent)..h_L (next)."""
    rng = np.random.default_rng(seed)
    uni_in, uni_next = rng.uniform(0.02, 0.08, n), rng.uniform(0.02, 0.08, n)
    ex_in, ex_next = np.zeros(L + 1), np.zeros(L + 1)
    ex_in[0], ex_in[1:1 + extent] = 0.9, h1
    ex_in[1 + extent:L - extent] = ex_next[1 + extent:L - extent] = mid
    ex_next[L - extent:] = late
    ti = uni_in[:, None] + ex_in + rng.normal(0, noise, (n, L + 1))
    tn = uni_next[:, None] + ex_next + rng.normal(0, noise, (n, L + 1))
    return dict(top1_input=ti, top1_next=tn, unigram_input=uni_in, unigram_next=uni_next)


def _c1_rows(h1, mid, late, *, extent=2, **kw):
    rows = V.c1_regimes(**_c1(h1, mid, late, extent=extent), model="m", decoder="logit lens", n_boot=400, **kw)
    _check_rows(rows)
    return _by_id(rows)


def test_c1_regimes_all_three_outcomes():
    assert V.c1_min_extent(12) == 2 and V.c1_min_extent(30) == 3 and V.c1_min_extent(6) == 1
    ok = _c1_rows(0.5, 0.0, 0.3)
    assert [ok[k].verdict for k in ("C1.early", "C1.middle", "C1.late", "C1")] == [R, R, R, R]
    assert ok["C1.early"].details["extent"] == [1, 2] and ok["C1.late"].details["extent"] == [10, 11]
    assert ok["C1.middle"].details["longest_quiet_run"] == list(range(3, 10))
    assert ok["C1.middle"].level == pytest.approx(1 - 0.05 / 9)
    # the next token does not beat a frequency guess before the output layer: not reproduced
    no_late = _c1_rows(0.5, 0.0, 0.0)
    assert no_late["C1.late"].verdict == N and no_late["C1"].verdict == N
    # something is decodable at every middle layer: middle not reproduced
    busy = _c1_rows(0.5, 0.3, 0.3)
    assert busy["C1.middle"].verdict == N and busy["C1"].verdict == N
    # middle layers sit at the margin: neither quiet nor busy
    edge = _c1_rows(0.5, 0.02, 0.3)
    assert edge["C1.middle"].verdict == I and edge["C1"].verdict == I
    assert edge["C1.middle"].details["why"] and edge["C1"].details["why"] == "inconclusive part(s): C1.middle"
    # the early regime alone, each outcome
    assert _c1_rows(0.0, 0.0, 0.3)["C1.early"].verdict == N
    assert _c1_rows(0.02, 0.0, 0.3)["C1.early"].verdict == I
    # h_0 is never used: a huge layer-0 input rate with nothing at h_1 is still 'not reproduced'
    assert _c1_rows(0.0, 0.0, 0.3)["C1"].verdict == N


def test_c1_regimes_judge_the_extent_of_a_regime_not_one_layer():
    # input decodable at h_1 only, nothing at h_2: one layer is not an early regime of 2 (L = 12)
    short = _c1_rows(0.5, 0.0, 0.3, extent=1)
    assert short["C1.early"].verdict == N and short["C1.early"].details["extent"] == [1]
    assert short["C1.early"].details["layer"] == 2 and short["C1.late"].verdict == N
    # ... and where h_2 sits at the margin, undecided, with the reason
    edge = _c1_rows(0.5, 0.02, 0.3, extent=1)
    assert edge["C1.early"].verdict == I and "h_2" in edge["C1.early"].details["why"]
    # a longer regime than required is reproduced, and its whole extent is reported
    long = _c1_rows(0.5, 0.0, 0.3, extent=4)
    assert long["C1.early"].verdict == R and long["C1.early"].details["extent"] == [1, 2, 3, 4]


def test_c1_regimes_skip_layers_whose_decoder_did_not_converge():
    rows = _c1_rows(0.5, 0.0, 0.3, unconverged=[2])
    assert rows["C1.early"].verdict == I and "did not converge at h_2" in rows["C1.early"].details["why"]
    assert 2 not in rows["C1.middle"].details["quiet_layers"]
    mid = _c1_rows(0.5, 0.3, 0.3, unconverged=[5])
    assert mid["C1.middle"].verdict == I and "not converged" in mid["C1.middle"].details["why"]
    with pytest.raises(ValueError, match="residual indices"):
        _c1_rows(0.5, 0.0, 0.3, unconverged=[40])


def test_c1_regimes_bad_input():
    d = _c1(0.5, 0.0, 0.3, L=4)
    with pytest.raises(ValueError, match="min_run"):
        V.c1_regimes(**d, model="m", decoder="d")  # h_2 only: one candidate for a run of 2
    d = _c1(0.5, 0.0, 0.3)
    d["unigram_input"] = d["unigram_input"][:5]
    with pytest.raises(ValueError, match="same windows"):
        V.c1_regimes(**d, model="m", decoder="d")


def test_c1_extent_is_labelled_post_hoc_beside_the_pre_registered_verdict():
    # input decodable at h_1 only (L = 12, k = 2): the extent rule says not reproduced, the rule declared
    # before the numbers (h_1 alone) reproduced; the same for C1.late at h_(L-1), and C1 combines them
    rows = _c1_rows(0.5, 0.0, 0.3, extent=1)
    early, late, c1 = rows["C1.early"], rows["C1.late"], rows["C1"]
    assert early.verdict == N and early.details["pre_registered_verdict"] == R
    assert early.details["pre_registered"]["layer"] == 1 and early.details["post_hoc"] is True
    assert early.details["pre_registered"]["ci"][0] > V.C1_MARGIN
    assert late.verdict == N and late.details["pre_registered_verdict"] == R and late.details["pre_registered"]["layer"] == 11
    assert rows["C1.middle"].verdict == R
    assert c1.verdict == N and c1.details["pre_registered_verdict"] == R and c1.details["post_hoc"] is True
    for r in (early, late, c1):
        assert "POST HOC" in r.rule and "pre_registered_verdict" in r.rule, r.claim_id
    assert V.C1_EXTENT_SINCE in early.rule and V.C1_EXTENT_SINCE in late.rule
    assert "post_hoc" not in rows["C1.middle"].details and "POST HOC" not in rows["C1.middle"].rule
    # where both rules agree the row still carries the pre-registered verdict (it is computed, not inferred)
    ok = _c1_rows(0.5, 0.0, 0.3)
    assert ok["C1.early"].details["pre_registered_verdict"] == R == ok["C1.early"].verdict
    # a layer whose decoder did not converge is not read by the pre-registered rule either
    assert _c1_rows(0.5, 0.0, 0.3, unconverged=[1])["C1.early"].details["pre_registered_verdict"] == I


def test_c1_late_is_a_sanity_check_and_a_fitted_decoder_is_not_evidence():
    rows = _c1_rows(0.5, 0.0, 0.3)
    assert not V.is_evidence(rows["C1.late"]) and rows["C1.late"].details["evidence_why"] == V.C1_LATE_WHY
    assert "rules out" in rows["C1.late"].rule and "SANITY CHECK" in rows["C1.late"].rule
    assert all(V.is_evidence(rows[k]) for k in ("C1.early", "C1.middle", "C1"))
    tuned = _c1_rows(0.5, 0.0, 0.3, fitted_to_output=True)
    for k in ("C1.early", "C1.middle", "C1"):
        assert not V.is_evidence(tuned[k]) and tuned[k].details["evidence_why"] == V.C1_FITTED_WHY, k
    assert tuned["C1.late"].details["evidence_why"] == V.C1_LATE_WHY
    # the mark does not change the verdict
    assert [tuned[k].verdict for k in ("C1.early", "C1.middle", "C1.late", "C1")] == [R, R, R, R]
    assert "fitted towards the model's final next-token distribution" in tuned["C1.early"].rule
    # across seeds the marks carry over; the pre-registered verdicts combine by unanimity
    by_seed = [V.c1_regimes(**_c1(0.5, 0.0, 0.3, extent=1, seed=s), model="m", decoder="d", n_boot=200)
               for s in range(3)]
    across = _by_id(V.c1_across_seeds(by_seed, model="m"))
    assert not V.is_evidence(across["C1.late"]) and V.is_evidence(across["C1.early"])
    assert across["C1.early"].verdict == N and across["C1.early"].details["pre_registered_verdict"] == R
    assert across["C1.early"].details["pre_registered_per_seed"] == [R, R, R]
    assert across["C1.early"].details["post_hoc"] and "post_hoc" not in across["C1.middle"].details


# C1 at the sizes it runs at: the default profile on the real models' layer counts (SmolLM2-135M 30
# blocks, Gemma-3-270M 18), with the noise measured on them (benchmarks/c1-noise.json)
REAL_LAYERS = {"smollm2-135m": 30, "gemma3-270m": 18}
OLD_DEFAULT = (32, 16)  # lens_windows x lens_positions before C1's sizes were derived


def _default_sizes():
    from residshift.core import profiles
    P = profiles.resolve("default")
    return P.lens_windows, P.lens_positions


@pytest.mark.parametrize("model", REAL_LAYERS)
def test_c1_reach_every_outcome_at_default_on_the_real_layer_counts(model):
    L = REAL_LAYERS[model]
    n, pos = _default_sizes()
    r = V.c1_reach(n, pos, L)
    assert r["reachable"] and r["why"] == "", r["why"]
    for part in ("early", "middle", "late"):
        assert r[part]["reproduced"] and r[part]["not_reproduced"] and r[part]["inconclusive"], part
    # the binding outcome: a middle layer exactly at the unigram level is certified quiet
    assert r["middle"]["family"] == L - 3 and r["middle"]["mde"] <= V.C1_MARGIN
    assert r["middle"]["half_width"] < r["middle"]["mde"] <= V.C1_MARGIN
    assert r["early"]["mde"] < r["middle"]["mde"]  # Bonferroni costs the middle more than one test


@pytest.mark.parametrize("model", REAL_LAYERS)
def test_c1_reach_at_the_old_sizes_middle_cannot_certify_the_unigram_level(model):
    """Why the default sizes changed: at 32 windows x 16 positions C1.middle's Bonferroni interval is
    wider than the margin, so only a layer BELOW a frequency guess could be quiet."""
    r = V.c1_reach(*OLD_DEFAULT, REAL_LAYERS[model])
    assert not r["middle"]["reproduced"] and r["middle"]["half_width"] > V.C1_MARGIN
    assert not r["early"]["not_reproduced"] and not r["reachable"]
    assert "C1.middle reproduced" in r["why"] and "C1.early not reproduced" in r["why"]
    assert r["middle"]["not_reproduced"] and r["early"]["reproduced"]  # the other side was never the problem


def test_default_windows_are_the_fewest_that_reach_every_outcome():
    n, pos = _default_sizes()
    assert V.c1_min_windows(pos, list(REAL_LAYERS.values())) == n
    assert not V.c1_reach(n - 1, pos, REAL_LAYERS["smollm2-135m"])["reachable"]
    # more positions per window buy the same power with fewer windows, never more windows
    assert V.c1_min_windows(2 * pos, [30, 18]) < n
    with pytest.raises(ValueError, match="no middle candidate"):
        V.c1_reach(n, pos, 3)
    with pytest.raises(ValueError, match="at least 2 windows"):
        V.c1_reach(1, pos, 30)
    with pytest.raises(ValueError, match="block counts"):
        V.c1_min_windows(pos, [])


def test_c1_noise_constants_are_the_measured_ones():
    """C1_NOISE_* round up the largest SDs measured at the middle layers at or below the margin."""
    from residshift.core.paths import REPO_ROOT
    data = json.loads((REPO_ROOT / "benchmarks" / "c1-noise.json").read_text())
    assert set(data["models"]) == set(REAL_LAYERS)
    between, within = [], []
    for name, m in data["models"].items():
        L = m["n_layers"]
        assert L == REAL_LAYERS[name]
        quiet = [l for l in V.c1_middle_candidates(L)
                 if all(m[w]["mean_excess"][l] < data["margin"] for w in ("input", "next"))]
        assert len(quiet) >= 4, name
        between += [m[w]["sd_between"][l] for w in ("input", "next") for l in quiet]
        within += [m[w]["sd_within"][l] for w in ("input", "next") for l in quiet]
        # the model sqrt(b^2 + w^2 / P) reproduces the SD measured directly at the default's 16 positions
        sd16 = max(m[w]["sd_by_positions"]["16"][l] for w in ("input", "next") for l in quiet)
        assert sd16 <= V.c1_reach(32, 16, L)["sd_window"] * 1.01, name
    assert max(between) <= V.C1_NOISE_BETWEEN < max(between) + 0.005
    assert max(within) <= V.C1_NOISE_WITHIN < max(within) + 0.005


@pytest.mark.parametrize("model", REAL_LAYERS)
def test_c1_regimes_reach_each_outcome_at_default_with_the_measured_noise(model):
    """c1_reach's promise, checked on the rule itself: windows with the measured noise at the default
    sizes, on the real layer count, give each outcome of each sub-rule."""
    L = REAL_LAYERS[model]
    n, pos = _default_sizes()
    sd, k = V.c1_reach(n, pos, L)["sd_window"], V.c1_min_extent(L)

    def verdicts_(h1, mid, late, seed=0):
        rows = V.c1_regimes(**_c1(h1, mid, late, n=n, L=L, noise=sd, extent=k, seed=seed), model=model,
                            decoder="logit lens", n_boot=400, min_run=V.c1_min_run(L))
        return {r.claim_id: r.verdict for r in rows}

    # c1_reach's MDEs are c1_power's on such windows (the noisiest middle layer: a few % above sd)
    power = V.c1_power(**_c1(0.2, 0.0, 0.2, n=n, L=L, noise=sd, extent=k))
    reach = V.c1_reach(n, pos, L)
    assert power["middle"] == pytest.approx(reach["middle"]["mde"], rel=0.1)
    assert power["early"] == pytest.approx(reach["early"]["mde"], rel=0.1)
    # regimes clear of the margin, and a middle exactly at the unigram level (excess 0): all reproduced
    assert verdicts_(0.2, 0.0, 0.2) == {"C1.early": R, "C1.middle": R, "C1.late": R, "C1": R}
    # early and late layers at the unigram level: not reproduced (the middle is quiet)
    assert verdicts_(0.0, 0.0, 0.0) == {"C1.early": N, "C1.middle": R, "C1.late": N, "C1": N}
    # every middle candidate decodable (h_2.. carry the early regime, ..h_(L-2) the late one): not reproduced
    assert verdicts_(0.2, 0.2, 0.2)["C1.middle"] == N
    # everything at the margin: all inconclusive
    assert verdicts_(0.02, 0.02, 0.02) == {"C1.early": I, "C1.middle": I, "C1.late": I, "C1": I}
    # at the old sizes the same unigram-level middle is never certified quiet
    n_old, pos_old = OLD_DEFAULT
    sd_old = V.c1_reach(n_old, pos_old, L)["sd_window"]
    old = V.c1_regimes(**_c1(0.2, 0.0, 0.2, n=n_old, L=L, noise=sd_old, extent=k), model=model,
                       decoder="logit lens", n_boot=400)
    assert _by_id(old)["C1.middle"].verdict == I


def _emerging(c, *, L=20, n=40, noise=0.02, seed=0, metric="top1"):
    rng = np.random.default_rng(seed)
    layers = np.arange(L + 1)
    curve = 1 / (1 + np.exp(-(layers - c * L) / 1.0))
    if metric == "logrank":
        curve = 3 - 3 * curve
    return curve + rng.normal(0, noise, (n, L + 1))


def test_c1_depth_all_three_outcomes():
    rows = V.c1_depth({"top1": _emerging(0.65), "logrank": _emerging(0.65, metric="logrank")},
                      model="m", decoder="logit lens", n_boot=300)
    _check_rows(rows)
    assert [r.verdict for r in rows] == [R, R] and 0.6 < rows[0].estimate < 0.7
    assert rows[1].details["curve_rises"]
    assert V.c1_depth({"top1": _emerging(0.3)}, model="m", decoder="d", n_boot=300)[0].verdict == N
    assert V.c1_depth({"top1": _emerging(0.5)}, model="m", decoder="d", n_boot=300)[0].verdict == I
    falling = V.c1_depth({"prob": 1 - _emerging(0.65)}, model="m", decoder="d", n_boot=100)[0]
    assert falling.verdict == I and not falling.details["curve_rises"]
    with pytest.raises(ValueError, match="no meaningful half-way depth"):
        V.c1_depth({"cos_raw": _emerging(0.65)}, model="m", decoder="d")


# --------------------------------------------------------------------------------------------
# C2 on frozen models
# --------------------------------------------------------------------------------------------


def _sweep(late_mean, late_sd, *, n=40, seed=0):
    """dloss [6 blocks, alphas (0, 0.5, 0.9, 1), n windows]; block 5 at alpha 0.9 gets (mean, sd)."""
    rng = np.random.default_rng(seed)
    d = np.zeros((6, 4, n))
    d[:, 0] = 5 + rng.normal(0, 0.5, (6, n))
    d[:, 1] = 0.3 + rng.normal(0, 0.05, (6, n))
    d[:, 2] = 0.02 + rng.normal(0, 0.005, (6, n))
    d[5, 2] = late_mean + rng.normal(0, late_sd, n)
    return d, list(range(6)), [0.0, 0.5, 0.9, 1.0]


def test_c2_late_cut_all_three_outcomes():
    d, layers, alphas = _sweep(-0.05, 0.01)
    row, = V.c2_late_cut(d, layers, alphas, n_layers=6, model="m", n_boot=300)
    _check_rows([row])
    assert row.verdict == R and row.variant == "block 5, alpha=0.9" and row.n == 20
    assert row.details["mde"] > 0 and row.details["n_selection"] == 20
    cands = row.details["candidates"]
    np.testing.assert_allclose([c["p_holm"] for c in cands], stats.holm([c["p"] for c in cands]))
    # every late cell hurts a little: nothing selected below 0, the lowest is confirmed >= 0
    d, layers, alphas = _sweep(0.02, 0.005)
    assert V.c2_late_cut(d, layers, alphas, n_layers=6, model="m", n_boot=300)[0].verdict == N
    # a tiny improvement drowned in noise: neither confirmed nor ruled out
    d, layers, alphas = _sweep(-0.003, 0.05)
    assert V.c2_late_cut(d, layers, alphas, n_layers=6, model="m", n_boot=300)[0].verdict == I


def test_c2_late_cut_holm_and_split():
    # three late candidates with the same confirmation differences, one-sided p ~ 0.019 each:
    # significant alone, not after Holm across three
    n = 20
    z = np.random.default_rng(1).normal(size=n)
    v = -0.01 + 0.02 * (z - z.mean()) / z.std(ddof=1)
    assert 0.0167 < stats.paired_ttest(v, alternative="less")["p"] < 0.05
    d = np.full((6, 2, 2 * n), 0.5)
    d[:, 1] = 0.0
    for layer in (4, 5):
        d[layer, 0, :n] = -0.1  # selection windows
        d[layer, 0, n:] = v     # confirmation windows
    d[3, 0, :n], d[3, 0, n:] = -0.1, v  # below the late blocks: not a candidate
    kw = dict(n_layers=6, model="m", select=np.arange(n), confirm=np.arange(n, 2 * n), n_boot=300,
              late_fraction=0.5)
    three = V.c2_late_cut(d, range(6), [0.5, 1.0], **kw)[0]
    assert three.details["k"] == 3 and three.verdict == I
    one = V.c2_late_cut(d, range(6), [0.5, 1.0], max_candidates=1, **kw)[0]
    assert one.details["k"] == 1 and one.verdict == R
    with pytest.raises(ValueError, match="overlap"):
        V.c2_late_cut(d, range(6), [0.5, 1.0], n_layers=6, model="m", select=[0, 1, 2], confirm=[2, 3])
    with pytest.raises(ValueError, match="or neither"):
        V.c2_late_cut(d, range(6), [0.5, 1.0], n_layers=6, model="m", select=[0, 1])
    with pytest.raises(ValueError, match="no swept block"):
        V.c2_late_cut(d[:2], [0, 1], [0.5, 1.0], n_layers=6, model="m")


def test_c2_layer_sensitive_all_three_outcomes():
    rng = np.random.default_rng(0)
    alphas = [0.5, 1.0]
    kw = dict(model="m", n_layers=6, n_perm=400)
    d = np.zeros((6, 2, 40))
    d[:, 0] = np.array([5.0, 3.0, 1.0, 0.1, 0.5, 2.0])[:, None] + rng.normal(0, 0.05, (6, 40))
    row, = V.c2_layer_sensitive(d, range(6), alphas, **kw)
    _check_rows([row])
    # only the late blocks (4 and 5 of 6) are compared: block 0's 5 nats do not enter
    assert row.details["compared_blocks"] == [4, 5]
    assert row.verdict == R and row.details["most_harmful_block"] == 5 and row.details["permutation_p"] < 0.01
    d[:, 0] = 0.2 + rng.normal(0, 0.01, (6, 40))
    assert V.c2_layer_sensitive(d, range(6), alphas, **kw)[0].verdict == N
    # no effect at all: the spread is > 0 by chance, the permutation test does not reject
    null = V.c2_layer_sensitive(d, range(6), alphas, **kw)[0]
    assert null.details["permutation_p"] > 0.05 and null.details["spread"] > 0
    d[4, 0] = 0.2 + rng.normal(0, 0.3, 40)
    d[5, 0] = 0.25 + rng.normal(0, 0.3, 40)
    row = V.c2_layer_sensitive(d, range(6), alphas, **kw)[0]
    assert row.verdict == I and row.details["why"]
    # significant but below the threshold: inconclusive, saying so
    d[4, 0], d[5, 0] = 0.2 + rng.normal(0, 0.01, 40), 0.25 + rng.normal(0, 0.01, 40)
    small = V.c2_layer_sensitive(d, range(6), alphas, threshold=0.1, **kw)[0]
    assert small.verdict == N  # every pair within +-0.1
    d[5, 0] = 0.29 + rng.normal(0, 0.05, 40)
    mid = V.c2_layer_sensitive(d, range(6), alphas, threshold=0.1, **kw)[0]
    assert mid.verdict == I and "below the 0.1 threshold" in mid.details["why"]
    # a shallow model: its last two blocks
    assert V.c2_layer_sensitive(d[:4], range(4), alphas, model="m", n_layers=4, n_perm=100)[0].details[
        "compared_blocks"] == [2, 3]
    with pytest.raises(ValueError, match="not swept"):
        V.c2_layer_sensitive(d, range(6), alphas, probe_alpha=0.25, **kw)


def test_permutation_spread_is_calibrated_under_no_effect():
    rng = np.random.default_rng(1)
    ps = [V.permutation_spread(rng.normal(0, 1, (4, 30)), n_perm=200, seed=i)["p"] for i in range(60)]
    assert 0.02 < np.mean(np.array(ps) <= 0.1) < 0.25  # about 10% of null draws below 0.1


def test_alpha0_is_described_not_judged_and_best_fixed_cut():
    d, layers, alphas = _sweep(-0.05, 0.01)
    rows = V.alpha0_summary(d, layers, alphas, n_boot=100)
    assert [r["layer"] for r in rows] == layers and all("verdict" not in r for r in rows)
    assert rows[0]["dloss"] == pytest.approx(d[0, 0].mean()) and rows[0]["lo"] < rows[0]["dloss"]
    with pytest.raises(ValueError, match="alpha = 0"):
        V.alpha0_summary(d[:, 1:], layers, alphas[1:])
    best = V.best_fixed_cut(d, layers, alphas)
    assert (best["layer"], best["alpha"]) == (5, 0.9)
    d, layers, alphas = _sweep(0.02, 0.005)  # every cut hurts: the unmodified model wins
    assert V.best_fixed_cut(d, layers, alphas) == {"layer": None, "alpha": 1.0, "dloss": 0.0,
                                                   "label": "unmodified (alpha = 1)"}
    d[1, 2] = -1.0
    assert V.best_fixed_cut(d, layers, alphas)["layer"] == 1
    assert V.best_fixed_cut(d, layers, alphas, late_fraction=0.5, n_layers=6)["layer"] is None


# --------------------------------------------------------------------------------------------
# C3
# --------------------------------------------------------------------------------------------


def _losses(deltas, *, n=30, noise=0.002, seed=0):
    rng = np.random.default_rng(seed)
    base = 3 + rng.normal(0, 0.3, n)
    return base, np.stack([base + d + rng.normal(0, noise, n) for d in deltas])


def test_c3_beats_baseline_all_three_outcomes():
    base, gated = _losses([-0.05, -0.04])
    row, = V.c3_beats_baseline(gated, base, model="m", variant="scalar", converged=[True, True],
                               steps=[30, 45], n_boot=300)
    _check_rows([row])
    assert row.verdict == R and row.per_seed == (R, R) and row.details["per_seed"][1]["steps"] == 45
    assert row.estimate == pytest.approx((gated - base).mean())
    base, gated = _losses([0.0, 0.0], noise=0.0005)
    assert V.c3_beats_baseline(gated, base, model="m", variant="s", n_boot=300)[0].verdict == N
    base, gated = _losses([-0.05, 0.0])
    row = V.c3_beats_baseline(gated, base, model="m", variant="s", n_boot=300)[0]
    assert row.verdict == I and row.per_seed == (R, N)
    # a fit that ran into its step cap is inconclusive whatever its numbers say
    base, gated = _losses([-0.05, -0.04])
    row = V.c3_beats_baseline(gated, base, model="m", variant="s", converged=[True, np.bool_(False)],
                              n_boot=300)[0]
    assert row.verdict == I and row.per_seed == (R, I) and row.details["not_converged"] == [1]
    # training: a baseline per seed, its own claim id
    row = V.c3_beats_baseline(gated, np.stack([base, base]), model="m", variant="s", setting="training",
                              n_boot=100)[0]
    assert row.claim_id == "C3-training.beats-baseline" and row.verdict == R
    with pytest.raises(ValueError, match="same windows"):
        V.c3_beats_baseline(gated, base[:10], model="m", variant="s")
    with pytest.raises(ValueError, match="setting"):
        V.c3_beats_baseline(gated, base, model="m", variant="s", setting="posthoc")


def test_c3_beats_best_cut_lets_the_unmodified_model_win():
    base, gated = _losses([-0.05, -0.04])
    cut = {"layer": None, "alpha": 1.0, "dloss": 0.0, "label": "unmodified (alpha = 1)"}
    row, = V.c3_beats_best_cut(gated, base, cut=cut, model="m", variant="s", n_boot=200)
    _check_rows([row])
    assert row.claim_id == "C3.beats-best-cut" and row.verdict == R and row.details["cut"]["alpha"] == 1.0
    assert V.c3_beats_best_cut(gated, base - 0.1, cut=cut, model="m", variant="s", n_boot=200)[0].verdict == N
    base, gated = _losses([-0.05, 0.0])
    assert V.c3_beats_best_cut(gated, base, cut=cut, model="m", variant="s", n_boot=200)[0].verdict == I


def test_c3_concentration_all_three_outcomes():
    kw = dict(layers=[0, 1, 2], n_layers=3, model="m", variant="scalar")
    rel, mat = V.c3_concentration([[0.99, 0.98, 0.8], [0.99, 0.97, 0.85]], **kw)
    _check_rows([rel, mat])
    assert rel.claim_id == "C3.concentrates" and mat.claim_id == "C3.concentrates.material"
    assert rel.verdict == R and mat.verdict == R and mat.estimate == pytest.approx(0.175)
    # alpha_last = 0.991: the final layer leads 3.6x (relative part holds) but 0.009 is not material
    rel, mat = V.c3_concentration([[0.9975, 0.9975, 0.991]], **kw)
    assert rel.verdict == R and mat.verdict == N
    assert V.c3_concentration([[0.5, 0.98, 0.9]], **kw)[0].verdict == N  # another layer leads
    rel, mat = V.c3_concentration([[0.85, 0.99, 0.8]], **kw)  # leads, but < 2x
    assert rel.verdict == I and "less than 2x" in rel.details["why"] and mat.verdict == R
    stuck = V.c3_concentration([[0.99, 0.98, 0.8]], converged=[False], steps=[15], **kw)
    assert [r.verdict for r in stuck] == [I, I] and stuck[0].details["per_seed"][0]["steps"] == 15
    assert "step cap" in stuck[1].details["why"]
    split = V.c3_concentration([[0.99, 0.98, 0.8], [0.5, 0.98, 0.9]], **kw)[0]
    assert split.verdict == I and "seeds disagree" in split.details["why"]
    assert V.c3_concentration([[0.7]], layers=[2], n_layers=3, model="m", variant="s")[0].verdict == R
    with pytest.raises(ValueError, match="final block"):
        V.c3_concentration([[0.5, 0.9]], layers=[0, 1], n_layers=3, model="m", variant="s")
    rows = V.c3_concentration([[0.99, 0.98, 0.8]], setting="training", **kw)
    assert [r.claim_id for r in rows] == ["C3-training.concentrates", "C3-training.concentrates.material"]


def test_c3_concentration_says_when_the_gates_did_not_move():
    kw = dict(layers=[0, 1, 2], n_layers=3, model="m", variant="scalar")
    # started at alpha 0.953 (theta = 3) and ended within 0.01 of it: never judged concentrated
    still = V.c3_concentration([[0.955, 0.952, 0.946]], start_alphas=[0.953] * 3, **kw)[0]
    assert still.verdict == I and still.details["per_seed"][0]["did_not_move"]
    assert "did not move" in still.rule
    moved = V.c3_concentration([[0.99, 0.98, 0.8]], start_alphas=[0.953] * 3, **kw)[0]
    assert moved.verdict == R and not moved.details["per_seed"][0]["did_not_move"]
    assert moved.details["per_seed"][0]["largest_movement"] == pytest.approx(0.153)
    plain = V.c3_concentration([[0.99, 0.98, 0.8]], **kw)[0]
    assert "did not move" not in plain.rule and "did_not_move" not in plain.details["per_seed"][0]


def _lens(n=40, L=12, shift=0.0, lp=0.0, lr=0.0, noise=0.01, seed=0):
    rng = np.random.default_rng(seed)
    layers = np.arange(L + 1)
    return {"logprob_input": -8 + lp + rng.normal(0, noise, (n, L + 1)),
            "logrank_input": 3 + lr + rng.normal(0, noise, (n, L + 1)),
            "top1_next": 0.4 / (1 + np.exp(-(layers - 8 + shift))) + rng.normal(0, noise, (n, L + 1))}


def test_c3_misalignment_all_three_outcomes():
    before = _lens()
    kw = dict(after_layers=range(9, 13), model="m", variant="scalar", n_boot=300)
    rows = _by_id(V.c3_misalignment(before, _lens(shift=2, lp=-1.0, lr=0.5, seed=1), **kw,
                                    loss_before=np.full(40, 3.0), loss_after=np.full(40, 2.9)))
    _check_rows(rows.values())
    assert [rows[k].verdict for k in ("C3.misalignment", "C3.misalignment.rank", "C3.emergence-shift")] == [R, R, R]
    assert rows["C3.misalignment"].estimate == pytest.approx(-1.0, abs=0.01)
    assert rows["C3.emergence-shift"].estimate == pytest.approx(-2 / 12, abs=0.02)
    assert rows["C3.misalignment"].details["loss_change"]["delta"] == pytest.approx(-0.1)
    same = _by_id(V.c3_misalignment(before, _lens(seed=1), **kw))
    assert {r.verdict for r in same.values()} == {N}
    noisy = _by_id(V.c3_misalignment(before, _lens(noise=1.0, seed=2), **kw))
    assert noisy["C3.misalignment"].verdict == I and noisy["C3.misalignment.rank"].verdict == I
    assert noisy["C3.emergence-shift"].verdict == I
    with pytest.raises(ValueError, match="lacks"):
        V.c3_misalignment({"logprob_input": before["logprob_input"]}, before, **kw)
    with pytest.raises(ValueError, match="after_layers"):
        V.c3_misalignment(before, before, after_layers=[0], model="m", variant="s")


# --------------------------------------------------------------------------------------------
# Benchmarks, paired by item
# --------------------------------------------------------------------------------------------


def _items(n, p=0.6, seed=0):
    return (np.random.default_rng(seed).random(n) < p).astype(float)


def _flip(x, k_worse, k_better, seed=0):
    y = x.copy()
    rng = np.random.default_rng(seed)
    right, wrong = np.flatnonzero(x == 1), np.flatnonzero(x == 0)
    y[rng.choice(right, k_worse, replace=False)] = 0
    y[rng.choice(wrong, k_better, replace=False)] = 1
    return y


def test_c3_benchmarks_all_three_outcomes():
    before = {"piqa": _items(1000), "arc-easy": _items(1000, seed=1)}
    same = {t: _flip(x, 10, 10) for t, x in before.items()}
    row, = V.c3_benchmarks(before, same, model="m", variant="scalar", n_boot=200)
    _check_rows([row])
    assert row.verdict == R and row.details["mde"] <= 0.03 and row.n == 1000
    worse = {"piqa": _flip(before["piqa"], 60, 0), "arc-easy": same["arc-easy"]}
    row = V.c3_benchmarks(before, worse, model="m", variant="s", n_boot=200)[0]
    assert row.verdict == N and row.details["worst_task"] == "piqa" and row.estimate == pytest.approx(-0.06)
    small = {"piqa": _items(24), "arc-easy": _items(24, seed=1)}
    row = V.c3_benchmarks(small, small, model="m", variant="s", n_boot=100)[0]
    assert row.verdict == I and row.details["mde"] > 0.03  # no change seen, but n = 24 cannot see 0.03
    # seeds: [n_seeds, n_items] after, one shared before
    two = {t: np.stack([same[t], worse[t]]) for t in before}
    row = V.c3_benchmarks(before, two, model="m", variant="s", n_boot=100)[0]
    assert row.per_seed == (R, N) and row.verdict == I
    with pytest.raises(ValueError, match="same tasks"):
        V.c3_benchmarks(before, {"piqa": same["piqa"]}, model="m", variant="s")
    with pytest.raises(ValueError, match="0/1"):
        V.c3_benchmarks({"piqa": before["piqa"] * 0.5}, {"piqa": same["piqa"]}, model="m", variant="s")


def test_c4_benchmarks_pairs_by_seed():
    before = {"lambada": np.stack([_items(1000, seed=s) for s in range(2)])}
    same = {"lambada": np.stack([_flip(before["lambada"][s], 5, 8, seed=s) for s in range(2)])}
    row, = V.c4_benchmarks(before, same, model="gpt", variant="gates", n_boot=100)
    _check_rows([row])
    assert row.claim_id == "C4.benchmarks" and row.per_seed == (R, R) and row.verdict == R
    worse = {"lambada": np.stack([_flip(before["lambada"][s], 80, 0, seed=s) for s in range(2)])}
    assert V.c4_benchmarks(before, worse, model="g", variant="v", n_boot=100)[0].verdict == N
    small = {"lambada": before["lambada"][:, :30]}
    assert V.c4_benchmarks(small, small, model="g", variant="v", n_boot=100)[0].verdict == I


# --------------------------------------------------------------------------------------------
# Training claims
# --------------------------------------------------------------------------------------------


def _runs(deltas, *, S=2, W=30, noise=0.001, seed=0):
    """Baseline [S, W] validation losses and, per delta, a run paired by seed and window."""
    rng = np.random.default_rng(seed)
    base = 3 + rng.normal(0, 0.2, (S, W))
    return base, [base + d + rng.normal(0, noise, (S, W)) for d in deltas]


def test_rules_reject_nan():
    base, gated = _losses([-0.05, -0.04])
    gated[0, 3] = math.nan
    with pytest.raises(ValueError, match="NaN"):
        V.c3_beats_baseline(gated, base, model="m", variant="s")


def test_an_improvement_must_clear_the_margin_to_be_reproduced():
    # significant but tiny (the 0.0004 log10-rank change of an earlier run): not reproduced, not "reproduced"
    assert V.improvement_outcome(0.0001, 0.0007, sign=1, margin=0.05, estimate=0.0004) == (N, "")
    v, why = V.improvement_outcome(0.01, 0.09, sign=1, margin=0.05, estimate=0.04)
    assert v == I and why.startswith("significant but not material")
    assert V.improvement_outcome(0.06, 0.09, sign=1, margin=0.05, estimate=0.075) == (R, "")
    v, why = V.improvement_outcome(-0.02, 0.09, sign=1, margin=0.05)
    assert v == I and "straddles" in why
    assert V.improvement_outcome(None, None, sign=1)[0] == I


def test_c1_depth_primary_metric_post_hoc_label_and_preprocessing():
    x = _emerging(0.65)
    rows = V.c1_depth({"top1": x, "prob": _emerging(0.65)}, model="m", decoder="d", n_boot=300)
    assert [r.claim_id for r in rows] == ["C1.depth", "C1.depth.sensitivity"]
    assert rows[0].details["post_hoc"] and "POST HOC" in rows[0].rule and V.DEPTH_PRIMARY == "top1"
    # the same depth under another preprocessing: stays reproduced
    same = V.c1_depth({"top1": x}, model="m", decoder="d", n_boot=300,
                      preprocessing={"raw": {"top1": x[:20] + 0.001}})[0]
    assert same.verdict == R and abs(same.details["preprocessing"]["raw"]["shift"]) < 0.05
    # a preprocessing change that moves the depth by more than its interval: inconclusive, saying so
    moved = V.c1_depth({"top1": x}, model="m", decoder="d", n_boot=300,
                       preprocessing={"raw": {"top1": x[:20] - _emerging(0.65, noise=0)[:20] + _emerging(0.75, noise=0)[:20]}})[0]
    assert moved.verdict == I and "preprocessing moves it" in moved.details["why"]
    with pytest.raises(ValueError, match="first k windows"):
        V.c1_depth({"top1": x}, model="m", decoder="d", preprocessing={"raw": {"top1": _emerging(0.65, L=10)}})


@pytest.mark.parametrize("profile", ["smoke", "default", "paper"])
def test_pretrained_rules_reach_every_outcome_at_each_profiles_sizes(profile):
    """At each profile's windows, with per-window noise of the size the real runs show (window-mean
    top-1 rates ~0.01, loss changes ~0.02 nats), each outcome of C1.early and C2.layer-sensitive can happen."""
    from residshift.core import profiles
    P = profiles.resolve(profile)
    n_lens, n_sweep = P.lens_windows, P.sweep_windows
    early = {V.c1_regimes(**_c1(h1, 0.0, 0.3, n=n_lens, noise=0.01, extent=2), model="m", decoder="d",
                          n_boot=200)[0].verdict for h1 in (0.5, 0.0, 0.02)}
    assert early == {R, N, I}, (profile, early)
    outcomes = set()
    # two compared blocks (the fewest any model has; a permutation test over 2 blocks and n windows
    # cannot give p below 2 / 2^n: the smoke profile sweeps 6 windows so that 'reproduced' can happen)
    for means, sd in (([0.0, 0.4], 0.02), ([0.01, 0.0], 0.002), ([0.0, 0.095], 0.03)):
        rng = np.random.default_rng(1)
        d = np.zeros((2, 2, n_sweep))
        d[:, 0] = np.array(means)[:, None] + rng.normal(0, sd, (2, n_sweep))
        outcomes.add(V.c2_layer_sensitive(d, [2, 3], [0.5, 1.0], model="m", n_layers=4)[0].verdict)
    assert outcomes == {R, N, I}, (profile, outcomes)


@pytest.mark.parametrize("model", REAL_LAYERS)
def test_c1_rows_at_the_class_profile_are_marked_underpowered_and_the_defaults_are_not(model):
    """The class profile's lens windows cannot reach every outcome of C1's sub-rules on either embedded
    model: c1_underpowered names what is missing, and c1_regimes marks its rows (an inconclusive row's
    why says it too); the default's windows reach every outcome, and nothing is marked."""
    from residshift.core import profiles

    L = REAL_LAYERS[model]
    c, d = profiles.resolve("class"), profiles.resolve("default")
    weak = V.c1_underpowered(c.lens_windows, c.lens_positions, L)
    assert set(weak) == {"C1.early", "C1.middle", "C1.late", "C1"}
    assert all(w.startswith(V.UNDERPOWERED) for w in weak.values()), weak
    assert "C1.middle" in weak["C1"] and f"{c.lens_windows} windows x {c.lens_positions} positions" in weak["C1.middle"]
    assert f"{V.c1_min_windows(c.lens_positions, [L])} windows would" in weak["C1.middle"]
    assert V.c1_underpowered(d.lens_windows, d.lens_positions, L) == dict.fromkeys(weak, "")

    def rows(n, **kw):
        return _by_id(V.c1_regimes(**_c1(0.5, 0.02, 0.3, n=n, L=L, extent=V.c1_min_extent(L)), model="m",
                                   decoder="logit lens", n_boot=200, min_run=V.c1_min_run(L), **kw))

    small = rows(c.lens_windows, n_positions=c.lens_positions)
    for cid, r in small.items():
        assert r.details["underpowered"] == weak[cid]
        assert (weak[cid] in r.details["why"]) == (r.verdict == I)
    from residshift.study import tables
    decided = [tables.verdict_record(r)["why"] for r in small.values() if r.verdict != I]
    assert all(V.UNDERPOWERED in w and w.count(V.UNDERPOWERED) == 1 for w in decided)
    big = rows(d.lens_windows, n_positions=d.lens_positions)
    assert not any("underpowered" in r.details for r in big.values())
    assert not any("underpowered" in r.details for r in rows(c.lens_windows).values())  # positions not given
