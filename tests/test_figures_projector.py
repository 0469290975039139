"""Figures that project (issue 36): each redrawn figure, built from small synthetic numbers, keeps
the properties a slide needs: linear axes where bars must add up, rank 1 on top, one colour per
role, no colliding tick labels, and a size within a 16:9 slide (1920 x 1080 px at the saved dpi)."""
import itertools
from types import SimpleNamespace

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
from matplotlib.colors import to_rgb  # noqa: E402
from matplotlib.container import BarContainer  # noqa: E402

from residshift.study import alignment, attribution, tour, training  # noqa: E402
from residshift.study.plotting import PALETTE, set_theme  # noqa: E402

SLIDE_PX = (1920, 1080)


@pytest.fixture(autouse=True)
def _theme():
    set_theme()
    yield
    plt.close("all")


def _px(fig) -> tuple[float, float]:
    """The saved size in pixels (``bbox_inches="tight"``, as ``plotting.save_figure`` saves)."""
    fig.canvas.draw()
    box = fig.get_tightbbox(fig.canvas.get_renderer())
    dpi = matplotlib.rcParams["savefig.dpi"]
    return box.width * dpi, box.height * dpi


def _fits_a_slide(fig) -> None:
    w, h = _px(fig)
    assert w <= SLIDE_PX[0] and h <= SLIDE_PX[1], f"{w:.0f} x {h:.0f} px"
    assert w / h <= 16 / 9 + 0.05, f"aspect {w / h:.2f}"


def _no_overlapping_ticks(fig) -> None:
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        for labels in (ax.get_xticklabels(), ax.get_yticklabels()):
            boxes = [t.get_window_extent(renderer) for t in labels if t.get_visible() and t.get_text()]
            for a, b in itertools.combinations(boxes, 2):
                assert not a.overlaps(b), f"{ax.get_title()!r}: tick labels overlap"


def _labelled_yticks(ax) -> int:
    lo, hi = sorted(ax.get_ylim())
    return sum(1 for t, lab in zip(ax.get_yticks(), ax.get_yticklabels()) if lo <= t <= hi and lab.get_text())


def _distance(a, b) -> float:
    return float(np.linalg.norm(np.subtract(to_rgb(a), to_rgb(b))))


# --------------------------------------------------------------------------------------------
# 09: stacked bars that add up, on linear axes, in colours that name sublayers
# --------------------------------------------------------------------------------------------


def _attribution_table(blocks: int = 8) -> pd.DataFrame:
    """A (model, token) table whose terms add up to delta at every block; block 0 dwarfs the rest."""
    rng = np.random.default_rng(0)
    rows = []
    for which in ("input", "next"):
        terms = {t: rng.normal(0, 1, blocks) for t in ("attn", "mlp", "rescale")}
        terms["rescale"][0] = -60.0  # the first block's rescaling, as in the pretrained models
        terms["delta"] = terms["attn"] + terms["mlp"] + terms["rescale"]
        for term, v in terms.items():
            rows += [["m", which, term, b, float(v[b]), float(v[b]) - 0.2, float(v[b]) + 0.2, 8, "windows"]
                     for b in range(blocks)]
    return pd.DataFrame(rows, columns=attribution.COLUMNS)


def test_09_bars_add_up_to_the_change_on_linear_axes():
    table = _attribution_table()
    fig, numbers = attribution.block_panel(table, title="m")
    assert attribution.table_from_numbers(numbers)[["term", "block", "estimate"]].equals(
        table[table.term != "attn_minus_mlp"][["term", "block", "estimate"]].reset_index(drop=True))
    sums: dict[tuple[int, float], float] = {}
    dots: dict[tuple[int, float], float] = {}
    for k, ax in enumerate(fig.axes):
        assert ax.get_yscale() == "linear" and ax.get_xscale() == "linear"
        assert _labelled_yticks(ax) >= 3
        for c in ax.containers:
            if isinstance(c, BarContainer):
                for bar in c:
                    key = (k, round(bar.get_x() + bar.get_width() / 2, 6))
                    sums[key] = sums.get(key, 0.0) + bar.get_height()
        for line in ax.lines:
            if line.get_marker() == "o":
                for x, y in zip(line.get_xdata(), line.get_ydata()):
                    dots[(k, round(float(x), 6))] = float(y)
    assert sums and set(sums) == set(dots)
    for key, total in sums.items():
        assert total == pytest.approx(dots[key], abs=1e-9)
    _no_overlapping_ticks(fig)


def test_09_a_dwarfing_block_gets_its_own_panel_and_a_flat_table_does_not():
    table = _attribution_table()
    t = table[(table.model == "m") & (table.which == "input")]
    assert attribution.own_scale_blocks(t) == [0]
    flat = t.copy()
    flat.loc[flat.block == 0, ["estimate", "lo", "hi"]] = 0.5
    assert attribution.own_scale_blocks(flat) == []
    fig, _ = attribution.block_panel(table)
    assert len(fig.axes) == 4  # per token: the own-scale panel and the rest


def test_09_sublayer_colours_are_none_of_the_token_colours():
    assert attribution.COLORS["mlp"] != PALETTE["next"]
    for term, colour in attribution.COLORS.items():
        for role, role_colour in PALETTE.items():
            assert _distance(colour, role_colour) > 0.25, (term, role)
    assert len(set(attribution.COLORS.values())) == len(attribution.COLORS)


# --------------------------------------------------------------------------------------------
# 03: the causal figure on linear axes with readable ticks
# --------------------------------------------------------------------------------------------


def _ci(values) -> dict:
    v = np.asarray(values, dtype=float)
    return {"estimate": v.tolist(), "lo": (v - 0.05).tolist(), "hi": (v + 0.05).tolist(), "level": 0.95,
            "stat": "mean"}


def test_03_causal_figure_is_linear_with_three_ticks_per_panel():
    L = 12
    residuals = list(range(0, L + 1, 2))
    inner = np.linspace(-0.02, 0.1, len(residuals))
    net_input = inner.copy()
    net_input[0] = 8.0  # h_0: the token's own embedding removed, far off the interior's scale
    numbers = {"m": {"n_layers": L, "basis": "lens", "residuals": residuals, "net_input": _ci(net_input),
                     "net_next": _ci(np.linspace(0, 2, len(residuals))), "control": _ci(inner + 0.05),
                     "skip_alpha_0.0": _ci(np.linspace(0.01, 12, L // 2))}}
    fig = alignment.causal_figure(numbers, {"m": list(range(0, L, 2))})
    for ax in fig.axes:
        assert ax.get_yscale() == "linear"
        assert _labelled_yticks(ax) >= 3, ax.get_title()
    lo, hi = fig.axes[0].get_ylim()
    assert hi < 8.0  # the far h_0 sits on the edge, written beside it, not stretching the axis
    assert any(t.get_text() == "8" for t in fig.axes[0].texts)
    _no_overlapping_ticks(fig)


def test_03_rank_panels_put_rank_1_on_top(monkeypatch):
    """metrics_panel inverts its rank and log10-rank axes (notebook 01's tug of war does too)."""
    n_layers, n_seq = 4, 6
    rng = np.random.default_rng(0)
    per_seq = {f"{m}_{w}": rng.uniform(1, 50, (n_seq, n_layers + 1)) for m in ("rank", "logrank", "top1")
               for w in ("input", "next")}
    res = SimpleNamespace(per_seq=per_seq, per_seq_median=per_seq, n_layers=n_layers, n_seq=n_seq)
    P = SimpleNamespace(n_boot=50, seed=0, lens_corpus="c", lens_split="s", lens_window=8)
    fig, _ = alignment.metrics_panel({"m": res}, {}, P)
    titled = {ax.get_title(): ax for ax in fig.axes if ax.get_title()}
    for metric in alignment.RANK_METRICS:
        ax = titled[alignment.LABEL[metric]]
        assert ax.yaxis_inverted(), metric
        assert "top" in alignment.LABEL[metric]
    assert not titled[alignment.LABEL["top1"]].yaxis_inverted()
    fig01, _ = tour.tug_of_war({"n_layers": 3, "model": "m", "positions": 3,
                                **{f"{m}_{w}_{s}": [1.0, 2.0, 3.0, 4.0] for m in ("rank", "logprob")
                                   for w in ("input", "next") for s in ("median", "q1", "q3")}})
    assert fig01.axes[0].yaxis_inverted() and "1 = top" in fig01.axes[0].get_ylabel()


# --------------------------------------------------------------------------------------------
# 02 and 06: maps and curves within a 16:9 slide
# --------------------------------------------------------------------------------------------


def _map_numbers(n_layers: int, n_tokens: int) -> dict:
    labels = [[(l + t) % 3 for t in range(n_tokens)] for l in range(n_layers + 1)]
    shown = [[f"tok{(l * t) % 97}"[:7] for t in range(n_tokens)] for l in range(n_layers + 1)]
    return {"model": "m", "n_layers": n_layers, "regimes": ["other", "input", "next"],
            "sentences": [{"sentence": "a b c", "tokens": [f"w{t}" for t in range(n_tokens)], "top1": shown,
                           "tokens_shown": [f"␣w{t}" for t in range(n_tokens)], "top1_shown": shown,
                           "labels": labels}]}


@pytest.mark.parametrize("n_layers, n_tokens, parts", [(18, 16, 1), (30, 16, 2), (28, 14, 2), (30, 40, 6)])
def test_02_maps_are_split_to_fit_a_slide(n_layers, n_tokens, parts):
    figs = tour.map_figures(_map_numbers(n_layers, n_tokens))
    assert len(figs) == parts
    shown = set()
    for fig in figs.values():
        _fits_a_slide(fig)
        ax = fig.axes[0]
        assert min(t.get_fontsize() for t in ax.get_xticklabels() + ax.get_yticklabels()) >= 9
        assert min(t.get_fontsize() for t in ax.texts) >= tour.MAP_FONT
        shown |= {(int(round(t.get_position()[1])), int(round(t.get_position()[0]))) for t in ax.texts}
        _no_overlapping_ticks(fig)
    assert shown == {(l, t) for l in range(n_layers + 1) for t in range(n_tokens)}  # every cell, once


def test_06_curves_wrap_into_rows_within_a_slide():
    P = SimpleNamespace(train_cut_alphas=[0.0, 0.5, 0.75, 0.9], train_cut_layers=[0, 2, 4, 5], train_layers=6,
                        train_cut_site="block", train_variants=["learned", "learned-token"], train_seeds=[0, 1, 2],
                        train_embedding="gemma", train_contrast_embedding=None, train_width=128,
                        train_gate_init=None)
    names = ["baseline", "learned", "learned-token"] + [training.fixed_name(a, l) for a, l in training.cut_cells(P)]
    rows = [{"variant": n, "seed": s, "step": k, "tokens": 50_000 * k, "val_loss": 6.0 - 0.2 * k + 0.01 * s}
            for n in names for s in P.train_seeds for k in range(1, 8)]
    fig, numbers = training.curves_panel(pd.DataFrame(rows), P)
    assert set(numbers) == set(names)
    _fits_a_slide(fig)
    drawn = [ax for ax in fig.axes if ax.axison]
    assert len(drawn) == 1 + len(P.train_cut_alphas)
    _no_overlapping_ticks(fig)
    assert training.slide_grid(5) == (2, 3) and training.slide_grid(2) == (1, 2)
    with pytest.raises(ValueError, match="at least one panel"):
        training.slide_grid(0)
