"""The training rules (notebooks 06-08): seeds are the unit; every outcome reachable at each profile's
number of seeds; an inconclusive row says why."""
import json

import numpy as np
import pytest

from residshift.analysis import verdicts as V
from residshift.core import profiles
from residshift.study import tables

R, N, I = V.REPRODUCED, V.NOT_REPRODUCED, V.INCONCLUSIVE
PROFILE_SEEDS = {p: len(profiles.resolve(p).train_seeds) for p in profiles.PROFILE_NAMES}


def _check(rows):
    for r in rows:
        assert r.verdict in V.OUTCOMES and "{" not in r.rule and r.claim == V.CLAIMS[r.claim_id]
        assert r.details["unit"] == "seed"
        assert r.verdict != I or r.details["why"]  # an inconclusive row names its reason
        json.dumps(r.as_dict())


def _grid(effects, *, S=5, W=32, seed_sd=0.0, seed=0):
    """Baseline [S, W] losses (seeds differ a lot: 0.08 nats) and, per effect, a run of the same seeds
    whose paired per-seed change is ``effect`` plus N(0, seed_sd) (training noise)."""
    rng = np.random.default_rng(seed)
    base = 4.5 + rng.normal(0, 0.08, (S, 1)) + rng.normal(0, 0.3, (S, W))
    return base, [base + e + rng.normal(0, seed_sd, (S, 1)) + rng.normal(0, 0.01, (S, W)) for e in effects]


def test_seed_test_outcomes_and_reasons():
    t = V.seed_test([0.05, 0.06, 0.04, 0.055, 0.05], sign=1, margin=0.005)
    assert t["verdict"] == R and t["lo"] > 0 and t["df"] == 4 and t["mde"] < 0.02
    assert V.seed_test([-0.02, -0.03, -0.01, -0.02, -0.025], sign=1, margin=0.005)["verdict"] == N
    t = V.seed_test([0.05, -0.04, 0.06, -0.03, 0.01], sign=1, margin=0.005)
    assert t["verdict"] == I and t["why"].startswith("seeds disagree: 3 of 5") and "underpowered" in t["why"]
    t = V.seed_test([0.002, 0.003, 0.0025, 0.002, 0.003], sign=1, margin=0.005)  # real but immaterial
    assert t["verdict"] == N
    t = V.seed_test([0.004, 0.0045, 0.0042, 0.0048, 0.0041], sign=1, margin=0.0045)
    assert t["verdict"] == I and "not material" in t["why"]
    t = V.seed_test([0.1], sign=1, margin=0.005)
    assert t["verdict"] == I and t["why"].startswith("not assessable at this profile")
    # a precision flip (one seed each way) is within training noise: inconclusive, never a side
    assert V.seed_test([-0.037, 0.038], sign=-1, margin=0.005)["verdict"] == I
    with pytest.raises(ValueError, match="NaN"):
        V.seed_test([0.1, np.nan], sign=1, margin=0.005)


@pytest.mark.parametrize("profile", list(PROFILE_SEEDS))
def test_every_outcome_is_reachable_at_each_profiles_seeds(profile):
    """At the profile's seeds and the seed-to-seed spread of a paired loss difference seen in the
    committed grid's order of magnitude (0.02 nats), each training rule can say each outcome within
    a plausible effect; one seed cannot say anything."""
    S = PROFILE_SEEDS[profile]
    reach = V.seed_reach(S, 0.02, margin=V.LOSS_MARGIN)
    assert reach["reachable"], reach["why"]
    assert V.LOSS_MARGIN <= reach["reproduced_from"] < V.PLAUSIBLE_LOSS_EFFECT
    assert -V.PLAUSIBLE_LOSS_EFFECT < reach["not_reproduced_below"] < V.LOSS_MARGIN
    # and the rules do reach them at this S: a clear effect, none, and noise
    base, (hurt, none, noisy) = _grid([0.1, -0.05, 0.0], S=S, seed_sd=0.0)
    noisy = base + np.linspace(-0.1, 0.1, S)[:, None]
    assert V.c2_training_alpha0(base, hurt, block=0, model="g")[0].verdict == R
    assert V.c2_training_alpha0(base, none, block=0, model="g")[0].verdict == N
    assert V.c2_training_alpha0(base, noisy, block=0, model="g")[0].verdict == I
    assert not V.seed_reach(1, 0.02, margin=V.LOSS_MARGIN)["reachable"]


def test_benchmark_rule_is_not_assessable_with_too_few_items():
    P = profiles.resolve("default")
    items = {t: P.train_bench_limits[t] for t in P.train_bench_tasks if t in ("lambada", "piqa", "arc-easy",
                                                                              "arc-challenge")}
    reach = V.bench_reach(items)
    assert not reach["reachable"] and reach["why"].startswith("not assessable at this profile")
    assert reach["items_needed_at_best"] > max(items.values())
    assert V.bench_reach({t: 5000 for t in items})["reachable"]
    # the row says so instead of a bare "inconclusive"
    rng = np.random.default_rng(0)
    before = {t: (rng.random((3, n)) < 0.5).astype(float) for t, n in items.items()}
    row, = V.c4_benchmarks(before, before, model="g", variant="v", n_boot=50)
    assert row.verdict == I and row.details["why"].startswith("not assessable")
    assert "not assessable" in tables.verdict_record(row)["verdict"]


def test_c2_training_alpha0_per_seed_values_and_pairing():
    base, (hurt,) = _grid([0.1])
    row, = V.c2_training_alpha0(base, hurt, block=3, model="gpt")
    _check([row])
    assert row.verdict == R and row.n == 5 and len(row.details["per_seed_values"]) == 5
    assert row.details["windows_per_seed"] == 32 and row.details["mde"] > 0
    rec = tables.verdict_record(row)
    assert rec["n"] == "5 seeds" and rec["per seed"].count(",") == 4
    with pytest.raises(ValueError, match="pair them by seed"):
        V.c2_training_alpha0(base, hurt[:2], block=3, model="gpt")


@pytest.mark.parametrize("S", sorted(set(PROFILE_SEEDS.values())))
def test_c2_training_layer_sensitive_all_three_outcomes(S):
    base, runs = _grid([0.1, 1.0, 0.3], S=S)
    row, = V.c2_training_layer_sensitive(base, dict(zip([0, 2, 4], runs)), alpha_value=0.0, model="gpt")
    _check([row])
    assert row.verdict == R and row.details["most_harmful_block"] == 2 and row.details["least_harmful_block"] == 0
    base, runs = _grid([0.01, 0.012, 0.011], S=S)
    assert V.c2_training_layer_sensitive(base, dict(zip([0, 2, 4], runs)), alpha_value=0.0,
                                         model="gpt")[0].verdict == N
    base, runs = _grid([0.0, 0.1], S=S, seed_sd=0.1, seed=3)
    row, = V.c2_training_layer_sensitive(base, dict(zip([0, 2], runs)), alpha_value=0.0, model="gpt")
    assert row.verdict == I and row.details["why"]


@pytest.mark.parametrize("S", sorted(set(PROFILE_SEEDS.values())))
def test_c2_training_late_cut_all_three_outcomes(S):
    kw = dict(alpha_value=0.5, n_layers=6, model="gpt")
    base, runs = _grid([0.3, 0.02, -0.05], S=S)
    row, = V.c2_training_late_cut(base, dict(zip([0, 4, 5], runs)), **kw)
    _check([row])
    assert row.verdict == R and row.variant == "block 5, alpha=0.5" and row.details["blocks"] == [4, 5]
    base, runs = _grid([0.02, 0.01], S=S)
    assert V.c2_training_late_cut(base, dict(zip([4, 5], runs)), **kw)[0].verdict == N
    base, runs = _grid([0.0, -0.01], S=S, seed_sd=0.1, seed=1)
    row, = V.c2_training_late_cut(base, dict(zip([4, 5], runs)), **kw)
    assert row.verdict == I and row.details["why"]
    with pytest.raises(ValueError, match="late cuts"):
        V.c2_training_late_cut(base, {2: runs[0]}, **kw)


def test_c3_training_beats_baseline_and_every_cut():
    base, (gated, cut_a, cut_b) = _grid([-0.05, 0.02, -0.01])
    row, = V.c3_training_beats_baseline(gated, base, model="g", variant="learned")
    _check([row])
    assert row.verdict == R
    cands = {"baseline": base, "alpha=0.5 @ block 4": cut_a, "alpha=0.9 @ block 5": cut_b}
    row, = V.c3_training_beats_every_cut(gated, cands, model="g", variant="learned")
    _check([row])
    assert row.verdict == R and row.details["best_candidate"] == "alpha=0.9 @ block 5"
    # a cut as good as the gates: beating the baseline is not beating the best cut
    cands["alpha=0.75 @ block 5"] = gated + 0.0005
    assert V.c3_training_beats_every_cut(gated, cands, model="g", variant="learned")[0].verdict == N
    base, (noisy,) = _grid([-0.01], seed_sd=0.05, seed=2)
    row, = V.c3_training_beats_every_cut(noisy, {"baseline": base}, model="g", variant="learned")
    assert row.verdict == I and row.details["why"]


def _ranks(shift, *, S=5, W=16, L=6, seed_sd=0.0, seed=0):
    rng = np.random.default_rng(seed)
    base = np.linspace(0.0, 2.0, L + 1)[None, None] + rng.normal(0, 0.05, (S, W, L + 1))
    return base, base + shift + rng.normal(0, seed_sd, (S, 1, 1))


def test_training_misalignment_outcomes_loss_and_not_applicable():
    before, after = _ranks(0.3)
    loss = np.full((5, 16), 4.5)
    kw = dict(model="g", variant="learned", loss_before=loss, loss_after=loss)
    row, = V.training_misalignment(before, after, after_layers=range(1, 6), **kw)
    _check([row])
    assert row.claim_id == "C3-training.misalignment" and row.verdict == R
    assert V.training_misalignment(before, before - 0.2, after_layers=range(1, 6), **kw)[0].verdict == N
    before, after = _ranks(0.0, seed_sd=0.3, seed=4)
    assert V.training_misalignment(before, after, after_layers=range(1, 6), **kw)[0].verdict == I
    # a fixed cut: the same rank change does not count when the loss is materially worse
    before, after = _ranks(0.3)
    worse = loss + np.linspace(0.2, 0.3, 5)[:, None]
    row, = V.training_misalignment(before, after, after_layers=[5], model="g", variant="alpha=0 @ block 4",
                                   fixed_cut=True, loss_before=loss, loss_after=worse)
    assert row.claim_id == "C2-training.cut-misalignment" and row.verdict == N
    assert row.details["loss_materially_worse"] and row.details["why"].startswith("not a mitigation")
    row, = V.training_misalignment(before, after, after_layers=[5], model="g", variant="alpha=0.9 @ block 4",
                                   fixed_cut=True, loss_before=loss, loss_after=loss - 0.01)
    assert row.verdict == R
    row, = V.training_misalignment(before, after, after_layers=[], model="g", variant="alpha=0 @ block 5",
                                   fixed_cut=True, loss_before=loss, loss_after=loss)
    assert row.verdict == I and row.details["why"].startswith("not applicable")
    assert row.details["per_seed_values"] is None and tables.verdict_record(row)["per seed"] == "–"
    with pytest.raises(ValueError, match="before the output"):
        V.training_misalignment(before, after, after_layers=[6], **kw)


def test_training_emergence_shift_forced_is_not_applicable():
    L = 6
    x = np.linspace(0, 1, L + 1)
    before = np.broadcast_to(x ** 2, (5, 8, L + 1)).copy()
    earlier = np.broadcast_to(np.sqrt(x), (5, 8, L + 1)).copy() + np.random.default_rng(0).normal(0, 0.01, (5, 1, 1))
    row, = V.training_emergence_shift(before, earlier, model="g", variant="learned")
    _check([row])
    assert row.verdict == R and row.estimate < 0
    row, = V.training_emergence_shift(before, earlier, model="g", variant="alpha=0 @ block 4", forced=True)
    assert row.verdict == I and "forces" in row.details["why"]


def test_c1_across_seeds_is_unanimous():
    def rows(v):
        return [V._row("C1.early", model="m", variant="lens", verdict=v, statistic="s", estimate=0.2, lo=0.1,
                       hi=0.3, level=0.95, n=64, rule="r")]
    out, = V.c1_across_seeds([rows(R)] * 5, model="m")
    assert out.verdict == R and out.per_seed == (R,) * 5 and out.n == 5
    out, = V.c1_across_seeds([rows(R)] * 4 + [rows(N)], model="m")
    assert out.verdict == I and out.details["why"] == "seeds disagree"


def test_every_committed_training_rule_can_reach_each_outcome():
    """The committed default grid: at its seeds and the seed-to-seed spread each row measured, each
    rule could have said reproduced and not reproduced (within a plausible effect). Read from the
    commit (``git show HEAD:figures/...``), not the working tree a user's own run rewrites."""
    from committed import committed_json

    rows = []
    for name in ("06-training-with-attenuation-verdicts", "07-learned-gates-and-benchmarks-verdicts",
                 "08-misalignment-after-mitigation-verdicts"):
        path = f"figures/{name}.json"
        rows += [r for r in V.rows_from_json(committed_json(path), path)
                 if r.details.get("unit") == "seed" and r.details.get("sd")]
    assert len(rows) >= 20  # the committed grid's rows, in the seed-unit layout
    for r in rows:
        reach = V.seed_reach(r.n, r.details["sd"], margin=r.details["margin"])
        assert reach["reachable"], (r.claim_id, r.variant, reach["why"])
