"""Where the best single cut sits (residshift.study.attenuation, notebooks 04-05): the regions,
the selection over every block and its confirmation on further windows, the figure panel, and
the tables of both notebooks, every branch on synthetic numbers."""
from __future__ import annotations

import matplotlib
import numpy as np
import pandas as pd
import pytest
import torch

matplotlib.use("Agg")

from residshift.analysis import verdicts  # noqa: E402
from residshift.attenuate import gates as G  # noqa: E402
from residshift.core import profiles  # noqa: E402
from residshift.study import attenuation as A  # noqa: E402

INIT = 1 - float(torch.sigmoid(torch.tensor(G.THETA_INIT)))


# --------------------------------------------------------------------------------------------
# Regions
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("L,early,late", [(18, range(0, 6), range(12, 18)), (30, range(0, 10), range(20, 30)),
                                          (4, range(0, 2), range(3, 4))])
def test_depth_regions_split_the_blocks_in_thirds(L, early, late):
    got = [A.depth_region(l, L) for l in range(L)]
    assert [l for l, r in enumerate(got) if r == "early"] == list(early)
    assert [l for l, r in enumerate(got) if r == "late"] == list(late)
    assert all(r == "middle" for l, r in enumerate(got) if l not in early and l not in late)
    assert [l for l in range(L) if verdicts.is_late(l, L)] == list(late)  # the late region is the rules'
    assert A.depth_region(None, L) == "unmodified"


def test_depth_region_rejects_a_block_outside_the_model():
    with pytest.raises(ValueError, match="not a block"):
        A.depth_region(18, 18)
    with pytest.raises(ValueError, match="not a block"):
        A.depth_region(-1, 18)


# --------------------------------------------------------------------------------------------
# Selection and confirmation on synthetic grids
# --------------------------------------------------------------------------------------------

LAYERS, ALPHAS = list(range(9)), [0.0, 0.5, 0.9, 1.0]


def _grid(cells: dict, n=8, seed=0):
    """A 9-block grid: every cut costs ~0.5 nats except the given {(block, alpha): mean} cells."""
    rng = np.random.default_rng(seed)
    d = rng.normal(0.5, 0.01, (9, 4, n))
    d[:, 3] = 0.0
    for (l, a), m in cells.items():
        d[l, ALPHAS.index(a)] = m + rng.normal(0, 0.001, n)
    return d


def _conf(mean, n=40, sd=0.002, seed=1):
    return np.random.default_rng(seed).normal(mean, sd, n)


def test_selection_finds_the_best_cell_anywhere_and_the_best_late_cell():
    d = _grid({(1, 0.9): -0.02, (7, 0.9): -0.005, (8, 0.9): 0.01})
    s = A.best_cut_selection(d, LAYERS, ALPHAS, n_layers=9)
    assert (s["overall"]["layer"], s["overall"]["alpha"], s["overall"]["region"]) == (1, 0.9, "early")
    assert (s["late"]["layer"], s["late"]["alpha"]) == (7, 0.9)
    assert s["late"] == {**s["late"], "region": "late"}
    cand = verdicts.late_cut_candidates(d, LAYERS, ALPHAS, n_layers=9)[0]  # notebook 04 confirms it already
    assert (cand["layer"], cand["alpha"]) == (7, 0.9)
    assert s["lowest"]["layer"] == 1


def test_selection_lets_the_unmodified_model_win():
    d = _grid({(4, 0.9): 0.002, (8, 0.9): 0.01})
    s = A.best_cut_selection(d, LAYERS, ALPHAS, n_layers=9)
    assert s["overall"] == {"layer": None, "alpha": 1.0, "selection_mean": 0.0, "region": "unmodified"}
    assert (s["lowest"]["layer"], s["lowest"]["region"]) == (4, "middle")
    assert s["late"]["layer"] == 8
    with pytest.raises(ValueError, match="alpha < 1"):
        A.best_cut_selection(d[:, 3:], LAYERS, [1.0], n_layers=9)


@pytest.mark.parametrize("mean,sd,status", [(-0.01, 0.002, "confirmed"), (0.004, 0.002, "ruled out"),
                                            (-0.001, 0.05, "undecided")])
def test_confirmation_status_reads_one_cell(mean, sd, status):
    d = {"m": {"dloss": _grid({(1, 0.9): -0.02, (7, 0.9): -0.005}), "layers": LAYERS, "alphas": ALPHAS}}
    conf = {"m": {(1, 0.9): _conf(mean, sd=sd), (7, 0.9): _conf(0.003)}}
    s = A.best_cut_summary(d, conf, {"m": 9}, n_boot=200)["m"]
    assert s["overall"]["status"] == status
    assert s["overall"]["mean"] == pytest.approx(conf["m"][(1, 0.9)].mean())
    assert s["overall"]["lo"] < s["overall"]["mean"] < s["overall"]["hi"]
    assert s["late"]["status"] == "ruled out" and s["late"]["region"] == "late"
    diff = s["overall_minus_late"]  # paired on the same confirmation windows
    assert diff["delta"] == pytest.approx((conf["m"][(1, 0.9)] - conf["m"][(7, 0.9)]).mean())
    assert s["n_selection"] == 8 and s["n_confirmation"] == 40 and not s["same_cell"]
    assert (s["early_blocks"], s["late_blocks"], s["first_late_block"]) == ("blocks 0-2", "blocks 6-8", 6)


def test_summary_when_the_best_cell_is_late_or_unmodified():
    late = {"m": {"dloss": _grid({(7, 0.9): -0.02}), "layers": LAYERS, "alphas": ALPHAS}}
    s = A.best_cut_summary(late, {"m": {(7, 0.9): _conf(-0.01)}}, {"m": 9}, n_boot=200)["m"]
    assert s["same_cell"] and s["overall_minus_late"] is None and s["overall"]["region"] == "late"
    none = {"m": {"dloss": _grid({(8, 0.9): 0.01}), "layers": LAYERS, "alphas": ALPHAS}}
    s = A.best_cut_summary(none, {"m": {(8, 0.9): _conf(0.01)}}, {"m": 9}, n_boot=200)["m"]
    assert s["overall"]["layer"] is None and s["overall"]["status"] == "unmodified"
    assert s["overall_minus_late"] is None and "mean" not in s["lowest"]
    with pytest.raises(ValueError, match="confirm_dloss lacks cell"):
        A.best_cut_summary(late, {"m": {(8, 0.9): _conf(0.0)}}, {"m": 9}, n_boot=200)


# --------------------------------------------------------------------------------------------
# The best-cut table (04): every branch
# --------------------------------------------------------------------------------------------


def _summary(case):
    cells = {"early confirmed": ({(1, 0.9): -0.02, (7, 0.9): -0.005}, {(1, 0.9): _conf(-0.01), (7, 0.9): _conf(0.004)}),
             "early ruled out": ({(1, 0.9): -0.02, (7, 0.9): 0.01}, {(1, 0.9): _conf(0.004), (7, 0.9): _conf(0.01)}),
             "middle undecided": ({(4, 0.5): -0.02, (7, 0.9): -0.005},
                                  {(4, 0.5): _conf(-0.001, sd=0.05), (7, 0.9): _conf(0.004)}),
             "late": ({(7, 0.9): -0.02}, {(7, 0.9): _conf(-0.01)}),
             "late ruled out": ({(7, 0.9): -0.02}, {(7, 0.9): _conf(0.007)}),
             "unmodified": ({(8, 0.9): 0.01}, {(8, 0.9): _conf(0.01)})}[case]
    d = {"m": {"dloss": _grid(cells[0]), "layers": LAYERS, "alphas": ALPHAS}}
    return A.best_cut_summary(d, {"m": cells[1]}, {"m": 9}, n_boot=200)


def test_best_cut_table_has_one_row_per_cell_with_its_numbers():
    s = _summary("early confirmed")
    t = A.best_cut_table(s)
    assert list(t.index) == [("m", "best cut over all blocks"), ("m", "best late cell")]
    o = t.loc[("m", "best cut over all blocks")]
    assert (o.block, o.alpha, o.region, o.status) == (1, 0.9, "early", "confirmed")
    assert o["confirmation mean"] == pytest.approx(round(s["m"]["overall"]["mean"], 4))
    assert o.lo < o["confirmation mean"] < o.hi and 0 <= o["p (one-sided)"] <= 0.05 and o.MDE > 0
    late = t.loc[("m", "best late cell")]
    assert (late.block, late.region, late.status) == (7, "late", "ruled out")


@pytest.mark.parametrize("case,overall", [("early ruled out", (1, "early", "ruled out")),
                                          ("middle undecided", (4, "middle", "undecided")),
                                          ("late", (7, "late", "confirmed")),
                                          ("late ruled out", (7, "late", "ruled out"))])
def test_best_cut_table_reads_every_status(case, overall):
    o = A.best_cut_table(_summary(case)).loc[("m", "best cut over all blocks")]
    assert (o.block, o.region, o.status) == overall


def test_best_cut_table_when_the_unmodified_model_wins():
    t = A.best_cut_table(_summary("unmodified"))
    o = t.loc[("m", "best cut over all blocks")]
    assert o.status == "unmodified" and o.region == "unmodified" and o.alpha == 1.0
    assert pd.isna(o.block) and pd.isna(o["confirmation mean"])
    assert t.loc[("m", "best late cell")].block == 8


# --------------------------------------------------------------------------------------------
# The panel
# --------------------------------------------------------------------------------------------


def _table(d):
    from residshift.attenuate import sweep

    return sweep.summarize({"dloss": torch.as_tensor(d), "layers": LAYERS, "alphas": ALPHAS}, n_boot=100)


def test_best_cut_panel_marks_the_regions_and_both_cells():
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    s1, s2 = _summary("early confirmed"), _summary("unmodified")
    summary = {"a": s1["m"], "b": s2["m"]}
    tables = {"a": _table(_grid({(1, 0.9): -0.02, (7, 0.9): -0.005})), "b": _table(_grid({(8, 0.9): 0.01}))}
    fig, numbers = A.best_cut_panel(tables, summary)
    ax_a, ax_b = fig.axes[:2]
    assert ax_a.get_ylim() == ax_b.get_ylim() and ax_a.get_yscale() == "symlog"
    assert all(float(t).is_integer() for t in ax_a.get_xticks())
    spans = {(round(p.get_x(), 2), round(p.get_x() + p.get_width(), 2)) for p in ax_a.patches
             if isinstance(p, Rectangle)}
    assert {(5.5, 8.5), (-0.5, 2.5)} <= spans  # late: blocks 6-8; early: blocks 0-2
    per = pd.DataFrame(numbers["a"]["per_block"])
    assert list(per.layer) == LAYERS and per.loc[1, "alpha"] == 0.9 and per.loc[1, "dloss"] < 0
    assert numbers["a"]["overall"]["layer"] == 1 and numbers["b"]["overall"]["layer"] is None
    assert len(ax_a.containers) == 2 and len(ax_b.containers) == 1  # confirmation bars: overall + late; late only
    (leg,) = fig.legends
    fig.canvas.draw()
    box = leg.get_window_extent()
    assert box.y1 <= min(ax.get_window_extent().y0 for ax in fig.axes[:2])  # below the data
    with pytest.raises(ValueError, match="share no model"):
        A.best_cut_panel(tables, {"c": s1["m"]})
    plt.close("all")


# --------------------------------------------------------------------------------------------
# On a tiny model: the cells not already confirmed are swept on the same confirmation windows
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny():
    from residshift.core.models import load_model

    return load_model("tiny-llama")


@pytest.fixture(scope="module")
def P():
    return profiles.resolve("smoke", models=["tiny-llama"], sweep_windows=4, sweep_confirm_windows=4,
                            sweep_window=24, atten_boot=100)


def test_best_cut_anywhere_reuses_confirmations_and_sweeps_the_rest(tiny, P):
    from residshift.attenuate import sweep
    from residshift.core.data import token_windows

    models = {"tiny-llama": tiny}
    sweeps = A.run_sweeps(models, P, verbose=False)
    conf = A.confirm_sweeps(models, sweeps, P, verbose=False)
    r = dict(sweeps["tiny-llama"])
    d = r["dloss"].clone()
    a = r["alphas"].index(0.5)
    d[0, a] = -1.0  # make block 0 (early), alpha 0.5 the best cell on the grid
    r["dloss"] = d
    late = verdicts.late_cut_candidates(d, r["layers"], r["alphas"], n_layers=tiny.info.n_layers)[0]
    key = (late["layer"], late["alpha"])
    marked = {"tiny-llama": {**conf["tiny-llama"], key: conf["tiny-llama"][key] + 0.5}}  # reused, not recomputed
    s = A.best_cut_anywhere(models, {"tiny-llama": r}, marked, P, verbose=False)["tiny-llama"]
    assert (s["overall"]["layer"], s["overall"]["alpha"], s["overall"]["region"]) == (0, 0.5, "early")
    assert s["late"]["mean"] == pytest.approx(float(np.mean(marked["tiny-llama"][key])))
    w = token_windows(P.sweep_corpus, P.sweep_split, tiny.tokenizer, length=P.sweep_window,
                      n=P.sweep_windows + P.sweep_confirm_windows, seed=P.seed,
                      prepend_bos=tiny.info.prepend_bos)[P.sweep_windows:]
    ref = sweep.naive_sweep(tiny.model, tiny.info, w, [0], [0.5])["dloss"][0, 0].numpy()
    assert s["overall"]["mean"] == pytest.approx(float(ref.mean()), abs=1e-4)
    assert s["n_confirmation"] == P.sweep_confirm_windows and s["n_selection"] == P.sweep_windows
    t = A.best_cut_table({"tiny-llama": s})
    assert t.loc[("tiny-llama", "best cut over all blocks")].block == 0
    import json

    json.dumps(s)  # the summary is saved as figure numbers
    with pytest.raises(ValueError, match="sweep_windows"):
        A.confirm_cells(models, {"tiny-llama": {**r, "dloss": d[..., :2]}}, {"tiny-llama": [(0, 0.5)]}, P)


# --------------------------------------------------------------------------------------------
# Notebook 05: where the gates attenuate beside where the best fixed cut sits
# --------------------------------------------------------------------------------------------


def _alpha_numbers(att_by_seed: dict, L: int, name="m", kind="scalar"):
    return {f"{name}/{kind}/seed{s}": {"layers": list(range(L)), "attenuation_mean": list(map(float, a))}
            for s, a in att_by_seed.items()}


CUT = {"m": {"layer": 1, "alpha": 0.9, "dloss": -0.01, "label": "block 1, alpha=0.9"}}


def test_gate_attenuation_reads_alpha_stats_and_saved_numbers_alike():
    att = {0: np.linspace(0.01, 0.1, 6), 1: np.linspace(0.02, 0.2, 6)}
    saved = _alpha_numbers(att, 6)
    astats = {("m", "scalar", s): {"layers": list(range(6)), "mean": torch.tensor(1 - a)} for s, a in att.items()}
    a, b = A.gate_attenuation(saved), A.gate_attenuation(astats)
    assert a["m"]["scalar"]["seeds"] == b["m"]["scalar"]["seeds"] == ["0", "1"]
    np.testing.assert_allclose(a["m"]["scalar"]["attenuation"], b["m"]["scalar"]["attenuation"], atol=1e-6)
    with pytest.raises(ValueError, match="expected alpha_stats"):
        A.gate_attenuation({"m-scalar-0": {"layers": [0], "attenuation_mean": [0.1]}})
    with pytest.raises(ValueError, match="attenuation values"):
        A.gate_attenuation({"m/scalar/seed0": {"layers": [0, 1], "attenuation_mean": [0.1]}})


def test_gate_ranking_orders_by_the_seed_average():
    att = {0: [0.01, 0.03, 0.002, 0.02, 0.002, 0.002], 1: [0.01, 0.15, 0.002, 0.04, 0.002, 0.002]}
    g = A.gate_ranking(_alpha_numbers(att, 6), {"m": 6})["m"]["scalar"]
    assert g["order"][:3] == [1, 3, 0] and g["top_per_seed"] == [1, 1]
    assert g["mean"][1] == pytest.approx(0.09) and (g["min"][1], g["max"][1]) == (0.03, 0.15)
    assert g["region"][1] == "early" and g["region"][5] == "late"
    assert g["moved"] == pytest.approx(0.15 - INIT)
    with pytest.raises(ValueError, match="n_layers lacks"):
        A.gate_ranking(_alpha_numbers(att, 6), {"x": 6})


def test_gate_cut_table_cut_block_is_the_most_attenuated():
    att = {0: [0.01, 0.03, 0.002, 0.02, 0.002, 0.002], 1: [0.01, 0.15, 0.002, 0.04, 0.002, 0.002]}
    t = A.gate_cut_table(_alpha_numbers(att, 6), CUT, n_layers={"m": 6})
    g = t.loc[("m", "scalar")]
    assert (g["top block"], g.region, g["seeds agree on top"], g["runner-up block"]) == (1, "early", True, 3)
    assert (g["1-α top"], g["seed min"], g["seed max"]) == pytest.approx((0.09, 0.03, 0.15))
    assert g["1-α runner-up"] == pytest.approx(0.03) and g["1-α final block"] == pytest.approx(0.002)
    assert (g["fixed cut block"], g["cut's rank"], g.seeds) == (1, 1, 2)
    assert g.moved >= verdicts.MIN_GATE_MOVEMENT


def test_gate_cut_table_ranks_the_cut_block_and_names_disagreeing_seeds():
    att = {0: [0.05, 0.03, 0.002, 0.02, 0.002, 0.06], 1: [0.04, 0.03, 0.002, 0.01, 0.002, 0.01]}
    g = A.gate_cut_table(_alpha_numbers(att, 6), CUT, n_layers={"m": 6}).loc[("m", "scalar")]
    assert g["cut's rank"] == 3 and not g["seeds agree on top"] and g["top block"] == 0


def test_gate_cut_table_unmodified_wins_and_gates_that_did_not_move():
    att = {0: [INIT + 0.001] + [INIT] * 5}
    cut = {"m": {"layer": None, "alpha": 1.0, "dloss": 0.0, "label": "unmodified (alpha = 1)"}}
    g = A.gate_cut_table(_alpha_numbers(att, 6, kind="token"), cut, n_layers={"m": 6}).loc[("m", "token")]
    assert g["top block"] == 0 and g.seeds == 1 and g["fixed cut block"] is None and g["cut's rank"] is None
    assert g.moved < verdicts.MIN_GATE_MOVEMENT


def test_gate_cut_table_names_its_missing_inputs():
    with pytest.raises(ValueError, match="cuts lacks"):
        A.gate_cut_table(_alpha_numbers({0: [0.01] * 6}, 6), {}, n_layers={"m": 6})
    partial = {"m/scalar/seed0": {"layers": [3, 4, 5], "attenuation_mean": [0.01, 0.02, 0.03]}}
    g = A.gate_cut_table(partial, CUT, n_layers={"m": 6}).loc[("m", "scalar")]
    assert g["cut's rank"] is None and g["top block"] == 5 and g["1-α final block"] == pytest.approx(0.03)


def test_a_significant_but_immaterial_improvement_is_not_confirmed():
    assert A.confirmation_status(0.001, -0.004, margin=0.005, mean=-0.002) == "ruled out"
    assert A.confirmation_status(0.001, -0.008, margin=0.005, mean=-0.004) == "undecided"
    assert A.confirmation_status(0.001, -0.012, margin=0.005, mean=-0.008) == "confirmed"
