"""Notebooks 04-05's glue (residshift.study.attenuation) and the package pieces added for it:
the late-cut confirmation on further windows (verdicts), alpha quantiles and the cached alpha
summary of a fit, the gated lens with a subset of positions (gates)."""
from __future__ import annotations

import dataclasses

import matplotlib
import numpy as np
import pandas as pd
import pytest
import torch

matplotlib.use("Agg")

from residshift.core import forward
from residshift.measure import evaluate
from residshift.analysis import verdicts  # noqa: E402
from residshift.attenuate import gates as G  # noqa: E402
from residshift.core import profiles
from residshift.measure import lens  # noqa: E402
from residshift.study import tables  # noqa: E402
from residshift.study import attenuation as A  # noqa: E402

# --------------------------------------------------------------------------------------------
# verdicts: selection on the grid, confirmation on further windows
# --------------------------------------------------------------------------------------------


def _grid(seed=0, n=12, shift=None):
    rng = np.random.default_rng(seed)
    layers, alphas = list(range(9)), [0.0, 0.5, 0.9, 1.0]
    d = rng.normal(0.5, 0.05, (9, 4, n))
    d[:, 3] = 0.0
    d[6:, 2] = rng.normal(0.01, 0.02, (3, n))  # late, alpha 0.9: small and noisy
    if shift is not None:
        d[7, 2] += shift
    return d, layers, alphas


def test_late_cut_candidates_follow_the_rule():
    d, layers, alphas = _grid(shift=-0.05)
    picked = verdicts.late_cut_candidates(d, layers, alphas, n_layers=9)
    assert picked[0]["layer"] == 7 and picked[0]["alpha"] == 0.9
    assert all(c["layer"] >= 6 and c["alpha"] < 1 and c["selection_mean"] < 0 for c in picked)
    assert len(picked) <= 3 and picked[0]["late_cells"] == 3 * 3
    pos, *_ = _grid(shift=+0.5)
    pos[6:, 2] = np.abs(pos[6:, 2]) + 0.01  # nothing below 0: the single lowest
    one = verdicts.late_cut_candidates(pos, layers, alphas, n_layers=9)
    assert len(one) == 1 and one[0]["selection_mean"] > 0
    with pytest.raises(ValueError, match="late blocks"):
        verdicts.late_cut_candidates(d[:3], layers[:3], alphas, n_layers=9)


def test_confirmation_on_other_windows_equals_the_split_path():
    d, layers, alphas = _grid(n=16, shift=-0.03)
    sel, conf = np.arange(8), np.arange(8, 16)
    split = verdicts.c2_late_cut(d, layers, alphas, n_layers=9, model="m", select=sel, confirm=conf, n_boot=200)[0]
    cells = {(layers[li], alphas[ai]): d[li, ai, conf] for li in range(9) for ai in range(4)}
    other = verdicts.c2_late_cut(d[:, :, sel], layers, alphas, n_layers=9, model="m", confirm_dloss=cells,
                                 n_boot=200)[0]
    assert (other.verdict, other.variant, other.n) == (split.verdict, split.variant, split.n)
    assert other.estimate == pytest.approx(split.estimate) and other.ci == pytest.approx(split.ci)
    assert other.details["n_selection"] == 8 and other.details["mde"] == pytest.approx(split.details["mde"])


@pytest.mark.parametrize("shift, sd, outcome", [(-0.05, 0.01, verdicts.REPRODUCED),
                                                (+0.02, 0.002, verdicts.NOT_REPRODUCED),
                                                (-0.002, 0.05, verdicts.INCONCLUSIVE)])
def test_confirmation_on_other_windows_gives_each_outcome(shift, sd, outcome):
    d, layers, alphas = _grid(n=8, shift=-0.05)  # block 7 is selected
    picked = verdicts.late_cut_candidates(d, layers, alphas, n_layers=9)
    rng = np.random.default_rng(1)
    confirm = {(c["layer"], c["alpha"]): rng.normal(shift, sd, 40) for c in picked}
    row = verdicts.c2_late_cut(d, layers, alphas, n_layers=9, model="m", confirm_dloss=confirm, n_boot=300)[0]
    assert row.verdict == outcome and row.n == 40 and row.details["n_selection"] == 8


def test_confirmation_inputs_are_checked():
    d, layers, alphas = _grid(shift=-0.05)
    with pytest.raises(ValueError, match="lacks the chosen candidate"):
        verdicts.c2_late_cut(d, layers, alphas, n_layers=9, model="m", confirm_dloss={(0, 0.5): np.zeros(5)})
    with pytest.raises(ValueError, match="leave select and confirm None"):
        verdicts.c2_late_cut(d, layers, alphas, n_layers=9, model="m", select=[0, 1], confirm_dloss={})
    picked = verdicts.late_cut_candidates(d, layers, alphas, n_layers=9)
    uneven = {(c["layer"], c["alpha"]): np.zeros(5 + i) for i, c in enumerate(picked)}
    if len(picked) > 1:
        with pytest.raises(ValueError, match="same >= 2 confirmation windows"):
            verdicts.c2_late_cut(d, layers, alphas, n_layers=9, model="m", confirm_dloss=uneven)


# --------------------------------------------------------------------------------------------
# gates: alpha quantiles, the cached alpha summary, the gated lens on a subset of positions
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny():
    from residshift.core.models import load_model

    return load_model("tiny-llama")


@pytest.fixture(scope="module")
def windows(tiny):
    from residshift.core.data import token_windows

    _, tok, info = tiny
    return token_windows("wikitext-103", "test", tok, length=24, n=4, seed=0, prepend_bos=info.prepend_bos)


def _fit_result(info, gates_obj, tag):
    return {"config": {"model": info.name, "kind": gates_obj.kind, "tag": tag},
            "gates": G.gate_state(gates_obj, info)}


def test_alpha_quantiles_lie_in_the_gate_range(tiny, windows):
    lm, _, info = tiny
    token = G.TokenGates(range(info.n_layers), info.d_model)
    with torch.no_grad():
        token.w.normal_(0, 3.0)
        token.b.fill_(0.5)
    st = G.token_alpha_stats(lm, info, token, windows, quantiles=(0.1, 0.5, 0.9))
    q = st["q"]
    assert q.shape == (3, info.n_layers) and torch.all((q > 0) & (q < 1))
    assert torch.all(q[0] <= q[1]) and torch.all(q[1] <= q[2])
    assert torch.all(q[2] - q[0] > 0.05)  # the gates do vary over tokens here
    scalar = G.ScalarGates.from_alphas(range(info.n_layers), info.d_model, [0.3, 0.6, 0.9, 0.95][:info.n_layers])
    st = G.token_alpha_stats(lm, info, scalar, windows)
    assert torch.allclose(st["q"], scalar.alphas().expand(2, -1), atol=1e-6)
    with pytest.raises(ValueError, match="quantiles"):
        G.token_alpha_stats(lm, info, scalar, windows, quantiles=(1.5,))


def test_fitted_alpha_stats_is_cached_per_fit(tiny, windows):
    lm, tok, info = tiny
    a = G.ScalarGates.from_alphas(range(info.n_layers), info.d_model, [0.5] * info.n_layers)
    b = G.ScalarGates.from_alphas(range(info.n_layers), info.d_model, [0.8] * info.n_layers)
    kw = dict(corpus="wikitext-103", split="test", window=24, n=4, seed=0)
    ra = G.fitted_alpha_stats(lm, info, tok, _fit_result(info, a, "a"), **kw)
    rb = G.fitted_alpha_stats(lm, info, tok, _fit_result(info, b, "b"), **kw)
    assert torch.allclose(ra["mean"], torch.full((info.n_layers,), 0.5), atol=1e-6)
    assert torch.allclose(rb["mean"], torch.full((info.n_layers,), 0.8), atol=1e-6)
    again = G.fitted_alpha_stats(lm, info, tok, _fit_result(info, a, "a"), **kw)
    assert torch.equal(again["q"], ra["q"])


def test_gated_lens_with_positions_equals_the_lens_with_a_fixed_plan(tiny):
    """Scalar gates are fixed alphas: the gated lens must equal run_lens(attenuation=...)."""
    lm, tok, info = tiny
    alphas = [0.9, 0.4, 0.7, 0.95][:info.n_layers]
    g = G.ScalarGates.from_alphas(range(info.n_layers), info.d_model, alphas)
    kw = dict(corpus="wikitext-103", split="test", window=24, n=3, seed=0, batch=2,
              metrics=("logprob", "logrank", "top1"), positions=5)
    got = A.gated_lens(lm, info, tok, _fit_result(info, g, "fixed"), lens.LensPass(**kw))
    plan = {l: float(a) for l, a in zip(g.layers, g.alphas())}
    ref = lens.run_lens(lm, info, tok, attenuation=plan, **kw)
    assert got.tokens["cur"].numel() == 3 * 5
    for col in ref.per_seq:
        torch.testing.assert_close(got.per_seq[col], ref.per_seq[col], rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------------------------------
# The glue on a tiny model
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def P():
    return profiles.resolve("smoke", models=["tiny-llama"], sweep_windows=4, sweep_confirm_windows=4,
                            sweep_window=24, atten_lens_windows=3, atten_lens_window=24, atten_lens_positions=6,
                            eval_windows=3, eval_window=24, atten_boot=100, gate_seeds=[0])


@pytest.fixture(scope="module")
def sweeps(tiny, P):
    return A.run_sweeps({"tiny-llama": tiny}, P, verbose=False)


def test_sweep_figures_share_their_scale(sweeps, P):
    import matplotlib.pyplot as plt

    tables = A.sweep_tables({"a": sweeps["tiny-llama"], "b": sweeps["tiny-llama"]}, P)
    tables["b"] = tables["b"].assign(dloss=tables["b"].dloss * 3, lo=tables["b"].lo * 3, hi=tables["b"].hi * 3)
    fig, numbers = A.heatmap_panel(tables)
    images = [ax.images[0] for ax in fig.axes if ax.images]
    assert len(images) == 2 and images[0].norm is images[1].norm
    assert images[0].norm.vmax == pytest.approx(float(tables["b"].dloss.abs().max()))
    assert set(numbers) == {"a", "b"}
    fig2, _ = A.curves_panel(tables)
    ax0, ax1 = fig2.axes[:2]
    assert ax0.get_ylim() == ax1.get_ylim()
    plt.close("all")


def test_alpha0_overview_reads_block_0_the_cheapest_and_the_most_harmful_block():
    t = pd.DataFrame([{"model": "m", "block": b, "dloss": d, "lo": d - 0.1, "hi": d + 0.1}
                      for b, d in enumerate([0.005, 6.0, 4.3, 9.0])])
    o = A.alpha0_overview(t).loc["m"]
    assert (o["block 0 cost"], o.lo, o.hi) == pytest.approx((0.005, -0.095, 0.105))
    assert (o["cheapest other block"], o["cheapest cost"]) == (2, 4.3)
    assert (o["most harmful block"], o["most harmful cost"]) == (3, 9.0)


def test_verdict_grid_has_one_row_per_claim_and_one_column_per_model_and_variant():
    def row(model, claim, variant, verdict):
        return verdicts.VerdictRow(model=model, variant=variant, claim_id=claim, claim="c", verdict=verdict,
                                   statistic="s", estimate=0.0, ci=(None, None), level=None, n=1, rule="r")

    g = A.verdict_grid([row("a", "C3.x", "scalar gates", "reproduced"), row("b", "C3.x", "scalar gates", "inconclusive"),
                        row("a", "C3.y", None, "not reproduced")])
    assert list(g.index) == ["C3.x", "C3.y"] and ("b", "scalar gates") in g.columns
    assert g.loc["C3.x", ("b", "scalar gates")] == "inconclusive" and g.loc["C3.y", ("a", "")] == "not reproduced"
    assert g.loc["C3.y", ("b", "scalar gates")] == ""


def test_c2_rows_select_on_the_grid_and_confirm_on_further_windows(tiny, sweeps, P):
    models = {"tiny-llama": tiny}
    conf = A.confirm_sweeps(models, sweeps, P, verbose=False)
    picked = verdicts.late_cut_candidates(sweeps["tiny-llama"]["dloss"], sweeps["tiny-llama"]["layers"],
                                          sweeps["tiny-llama"]["alphas"], n_layers=tiny.info.n_layers)
    assert set(conf["tiny-llama"]) == {(c["layer"], c["alpha"]) for c in picked}
    assert all(len(v) == P.sweep_confirm_windows for v in conf["tiny-llama"].values())
    # the confirmation windows are the NEXT windows of the seed: a direct sweep of those windows agrees
    from residshift.attenuate import sweep
    from residshift.core.data import token_windows

    (layer, alpha), values = next(iter(conf["tiny-llama"].items()))
    w = token_windows(P.sweep_corpus, P.sweep_split, tiny.tokenizer, length=P.sweep_window,
                      n=P.sweep_windows + P.sweep_confirm_windows, seed=P.seed,
                      prepend_bos=tiny.info.prepend_bos)[P.sweep_windows:]
    ref = sweep.naive_sweep(tiny.model, tiny.info, w, [layer], [alpha])["dloss"][0, 0].numpy()
    np.testing.assert_allclose(values, ref, atol=1e-4)
    rows = A.c2_rows(models, sweeps, conf, P)
    assert [r.claim_id for r in rows] == ["C2.layer-sensitive", "C2.late-cut"]
    assert A.chosen_cut(rows, "tiny-llama") in set(conf["tiny-llama"])
    assert not A.late_cut_table(rows).empty and tables.verdict_table(rows).shape[0] == 2


def test_misalignment_of_a_cut_and_the_alignment_figure(tiny, P):
    import matplotlib.pyplot as plt

    models = {"tiny-llama": tiny}
    cuts = {"tiny-llama": (2, 0.5)}
    runs = A.cut_lens(models, cuts, P)
    rows = A.misalignment_rows(runs, cuts, P)
    assert [r.claim_id for r in rows] == ["C3.misalignment", "C3.misalignment.rank", "C3.emergence-shift"]
    assert rows[0].details["after_layers"] == [3, 4]
    loss = rows[0].details["loss_change"]
    direct = A._loss(runs["tiny-llama"]["cut"]) - A._loss(runs["tiny-llama"]["unmodified"])
    assert loss["delta"] == pytest.approx(direct.mean())
    fig, numbers = A.alignment_panel({"tiny-llama": {"unmodified": runs["tiny-llama"]["unmodified"],
                                                     "fixed cut": runs["tiny-llama"]["cut"]}}, P,
                                     markers={"tiny-llama": 2})
    ax_in, ax_next, ax_diff = fig.axes[:3]
    assert ax_in.get_ylim() == ax_next.get_ylim()
    assert min(ax_in.lines[0].get_xdata()) == 1  # from h_1: h_0 does not set the y range
    assert "fixed cut/change/logprob_input" in numbers["tiny-llama"]
    plt.close("all")


def test_gate_glue_on_fixed_gates(tiny, sweeps, P):
    """Concentration, losses, lens and benchmarks from two hand-made 'fits' (scalar and token)."""
    import matplotlib.pyplot as plt

    models = {"tiny-llama": tiny}
    info = tiny.info
    P2 = profiles.resolve("smoke", **{**vars(P), "gate_kinds": ["scalar", "token"], "eval_items": 6})
    last = [0.99] * (info.n_layers - 1) + [0.8]
    fits = {}
    for kind in ("scalar", "token"):
        g = (G.ScalarGates.from_alphas(range(info.n_layers), info.d_model, last) if kind == "scalar"
             else G.TokenGates(range(info.n_layers), info.d_model))
        fits[("tiny-llama", kind, 0)] = {**_fit_result(info, g, kind), "stopped_early": kind == "scalar",
                                         "steps": 5, "best_step": 4, "heldout": [(0, 1.0), (4, 0.9)],
                                         "heldout_base": 0.95, "heldout_init": 1.0, "heldout_best": 0.9,
                                         "seconds": 1.0}
    astats = A.alpha_stats(models, fits, P2)
    rows = A.concentration_rows(models, fits, astats, P2)
    assert [r.claim_id for r in rows[:2]] == ["C3.concentrates", "C3.concentrates.material"]
    assert rows[0].verdict == rows[1].verdict == verdicts.REPRODUCED  # 0.2 at the last block, 0.01 elsewhere
    assert rows[2].verdict == verdicts.INCONCLUSIVE  # the token 'fit' hit its cap
    assert "step cap" in rows[2].details["why"]
    fig, numbers = A.alpha_panel(astats, P2)
    band = np.asarray(numbers["tiny-llama/token/seed0"]["attenuation_q90_q10"])
    assert np.all((band > 0) & (band < 1))
    losses = A.test_losses(models, fits, sweeps, P2)
    d = losses["tiny-llama"]
    assert d["gates"]["scalar"].shape == (1, P.eval_windows)
    if d["cut_info"]["layer"] is None:
        np.testing.assert_array_equal(d["cut"], d["unmodified"])
    from residshift.core.data import token_windows

    w = token_windows(P.sweep_corpus, "test", tiny.tokenizer, length=P.eval_window, n=P.eval_windows, seed=P.seed,
                      prepend_bos=info.prepend_bos)
    np.testing.assert_allclose(d["unmodified"], forward.window_losses(tiny.model, info, w).mean(1).numpy(), atol=1e-5)
    lrows = A.loss_rows(losses, fits, P2)
    assert [r.claim_id for r in lrows] == ["C3.beats-baseline", "C3.beats-best-cut"] * 2
    table = A.loss_table(losses, P2)
    assert table[table.variant == "unmodified"].change.abs().max() == 0
    A.loss_panel(table)
    runs = A.gate_lens(models, fits, P2)
    mis = A.gate_misalignment_rows(runs, P2)
    assert {r.variant for r in mis} == {"scalar gates", "token gates"} and len(mis) == 6
    bench = A.benchmarks(models, fits, P2, verbose=False)
    b = bench["tiny-llama"]
    assert set(b.after) == {"scalar gates", "token gates"}
    assert all(b.after["scalar gates"][t].shape == (1, len(b.before[t])) for t in A.BENCH_TASKS)
    # one cost per configuration scored: unmodified, and 1 seed per kind
    assert set(b.seconds) == set(A.BENCH_TASKS) and all(
        {k: len(x) for k, x in v.items()} == {"unmodified": 1, "scalar gates": 1, "token gates": 1}
        and min(min(x) for x in v.values()) > 0 for v in b.seconds.values())
    assert b.task_items == {t: evaluate.task_size(t) for t in A.BENCH_TASKS}
    brows = A.benchmark_rows(bench, P2)
    assert len(brows) == 2 and all(r.details["mde"] > 0 for r in brows)
    power = A.benchmark_power_table(brows)
    assert len(power) == 2 and not A.benchmark_table(bench).empty
    _, need = verdicts.benchmark_items_needed(brows[0])
    assert power["items needed per task"][0] == need and "minutes (mean)" not in power
    # priced: items needed (capped at the task's size) x (unmodified + 1 seed's gates) x seconds per item
    priced = A.benchmark_power_table(brows, bench)
    row = {t: b.seconds[t]["unmodified"] + b.seconds[t][brows[0].variant] for t in A.BENCH_TASKS}
    want = {f: sum(min(need, b.task_items[t]) * 2 * f(row[t]) for t in A.BENCH_TASKS) / 60
            for f in (np.mean, np.min, np.max)}
    assert priced["configurations"][0] == 2
    assert [priced[f"minutes ({k})"][0] for k in ("mean", "min", "max")] == pytest.approx(
        [round(want[f], 3) for f in (np.mean, np.min, np.max)], abs=1e-3)
    # the range is the row's own configurations': the other kind's seconds do not move it
    other = "token gates" if brows[0].variant == "scalar gates" else "scalar gates"
    dear = dataclasses.replace(b, seconds={t: {**v, other: [1e6]} for t, v in b.seconds.items()})
    pd.testing.assert_frame_equal(A.benchmark_power_table(brows[:1], {"tiny-llama": dear}), priced[:1])
    # a task smaller than the items needed is named, and priced at its size
    small = dataclasses.replace(b, task_items={**b.task_items, "piqa": 5})
    one = A.benchmark_power_table(brows[:1], {"tiny-llama": small}).iloc[0]
    assert "piqa (5)" in one["tasks with fewer items"].split(", ")
    assert one["items to score"] == 5 + sum(min(need, b.task_items[t]) for t in A.BENCH_TASKS if t != "piqa")
    # a task with enough items is not named
    big = dataclasses.replace(b, task_items={t: 10 * need for t in A.BENCH_TASKS})
    assert A.benchmark_power_table(brows[:1], {"tiny-llama": big})["tasks with fewer items"][0] == ""
    A.fit_history_panel(fits)
    assert list(A.fit_table(fits)["ended by"]) == ["patience", "step cap"]
    plt.close("all")
