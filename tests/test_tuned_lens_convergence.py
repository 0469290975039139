"""Tuned lens, per-layer convergence: the relative-tolerance count, the converged / still-improving
rule, the fits that end by early stopping or at the cap, and how the figure and table show them."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest
import torch

from residshift.core import profiles
from residshift.measure import lens
from residshift.measure import tuned_lens as T
from residshift.study import alignment as A

from conftest import random_windows as _windows  # noqa: E402


# ------------------------------------------------------------------------------------------
# The count and the rule, on synthetic numbers
# ------------------------------------------------------------------------------------------


def test_counted_kl_counts_only_improvements_beyond_the_relative_tolerance():
    c = T.CountedKL(0.1)
    assert c([10.0, 1.0]) == [10.0, 1.0]  # the first evaluation sets the bests
    assert c([9.5, 0.5]) == [10.0, 0.5]  # 9.5 is within 10% of 10: not an improvement
    assert c([8.95, 0.46]) == [8.95, 0.5] and c.raw == [8.95, 0.46]
    assert c.best == [8.95, 0.5]
    strict = T.CountedKL(0.0, best=[1.0])  # resumed from saved bests
    assert strict([0.999]) == [0.999] and strict([0.999]) == [0.999]
    with pytest.raises(T.TunedLensError, match="returned 2 layers, earlier 1"):
        strict([1.0, 2.0])
    with pytest.raises(ValueError, match="rel_tol"):
        T.TunedLensConfig(rel_tol=1.0)


def _history(steps_best):
    """Evaluation records ``(step, best per layer)`` with step records in between (ignored)."""
    out = []
    for step, best in steps_best:
        out.append({"step": step, "loss": 1.0, "parts": [1.0] * len(best)})
        out.append({"step": step, "eval": best, "best": best, "kl": best})
    return out


def test_layer_convergence_branches():
    # layers: 0 improved last at 10, 1 at 30 (still improving), 2 never after the start, 3 at 20
    hist = _history([(0, [5, 5, 5, 5]), (10, [4, 4, 5, 4]), (20, [4, 3, 5, 3]), (30, [4, 2, 5, 3]),
                     (40, [4, 2, 5, 3])])
    conv = T.layer_convergence(hist, 40, eval_every=10, patience=2)
    assert conv["window"] == 20 and conv["last_improved"] == [10, 30, 0, 20]
    assert conv["converged"] == [True, False, True, True]  # 40 - 20 = the window: converged
    assert conv["unconverged"] == [1]
    # the same fit one evaluation earlier, at a cap of 30: layers 1 and 3 are still improving
    assert T.layer_convergence(hist[:-2], 30, eval_every=10, patience=2)["unconverged"] == [1, 3]
    # not judged without patience or without evaluations
    assert T.layer_convergence(hist, 40, eval_every=10, patience=None)["unconverged"] is None
    assert T.layer_convergence([{"step": 1, "loss": 1.0}], 1, eval_every=10, patience=2)["converged"] is None
    # a one-layer model's records hold numbers, not lists
    one = [{"step": 0, "eval": 2.0, "best": 2.0}, {"step": 5, "eval": 1.0, "best": 1.0}]
    assert T.layer_convergence(one, 5, eval_every=5, patience=1)["unconverged"] == [0]


def test_unconverged_layers_refuses_reports_that_cannot_say():
    assert T.unconverged_layers({"unconverged": [3, 7]}) == [3, 7]
    with pytest.raises(T.TunedLensError, match="refresh=True"):
        T.unconverged_layers({"steps": 20})  # a report from before per-layer convergence
    with pytest.raises(T.TunedLensError, match="tuned_patience"):
        T.unconverged_layers({"unconverged": None})


# ------------------------------------------------------------------------------------------
# Fits on a tiny model: early stop vs the cap
# ------------------------------------------------------------------------------------------


def test_fit_stops_early_once_every_layer_has_converged(tiny_llama):
    lm, _, info = tiny_llama
    train, es = _windows(8, 16, 21), _windows(2, 16, 22)
    # no evaluation can beat a layer's best by 99%: every layer converged after `patience` evaluations
    cfg = T.TunedLensConfig(window=16, steps=50, batch=2, lr=1e-2, eval_every=1, patience=2, rel_tol=0.99)
    _, rep = T.fit(lm, info, cfg, train=train, es=es)
    assert rep["stopped_early"] and rep["steps"] == 2
    assert rep["unconverged"] == [] and rep["converged"] == [True] * info.n_layers
    assert rep["last_improved"] == [0] * info.n_layers and rep["convergence_window"] == 2
    evals = [h for h in rep["history"] if "eval" in h]
    assert evals[-1]["eval"] == evals[0]["kl"] != evals[-1]["kl"]  # counted vs measured


def test_fit_at_the_cap_marks_the_layers_still_improving(tiny):
    lm, _, info = tiny["tiny-gpt2"]  # shows held-out gains reliably
    train, es = _windows(48, 20, 4), _windows(4, 20, 5)
    # from the logit lens (a closed-form start leaves these steps little to improve)
    cfg = T.TunedLensConfig(window=20, steps=6, batch=8, lr=3e-3, eval_every=1, patience=2, rel_tol=0.0,
                            init="zero")
    _, rep = T.fit(lm, info, cfg, train=train, es=es)
    assert not rep["stopped_early"] and rep["steps"] == 6
    # with rel_tol = 0 a layer improves whenever its measured KL is a new minimum
    kl = np.array([h["kl"] for h in rep["history"] if "eval" in h])
    steps = [h["step"] for h in rep["history"] if "eval" in h]
    last = [max(steps[i] for i in range(len(steps)) if kl[i, l] < kl[:i, l].min(initial=np.inf))
            for l in range(info.n_layers)]
    assert rep["last_improved"] == last
    assert rep["unconverged"] == [l for l in range(info.n_layers) if last[l] > 6 - 2] != []
    assert T.unconverged_layers(rep) == rep["unconverged"]


def test_resumed_fit_counts_from_the_checkpoints_bests(tiny, tmp_path):
    lm, _, info = tiny["tiny-gemma3"]
    train, es = _windows(12, 16, 9), _windows(2, 16, 10)
    cfg = T.TunedLensConfig(window=16, steps=8, batch=3, lr=1e-2, eval_every=1, patience=3, rel_tol=0.02,
                            checkpoint_every=1, seed=3)
    full, rep_full = T.fit(lm, info, cfg, train=train, es=es)
    ckpt = tmp_path / "ckpt.pt"
    T.fit(lm, info, cfg, train=train, es=es, checkpoint=ckpt, stop_after=4)
    resumed, rep_res = T.fit(lm, info, cfg, train=train, es=es, checkpoint=ckpt)
    for a, b in zip(full.state_dict().values(), resumed.state_dict().values()):
        assert torch.equal(a, b)
    for key in ("last_improved", "converged", "unconverged", "steps", "stopped_early"):
        assert rep_full[key] == rep_res[key], key
    evals = [(h["eval"], h["kl"]) for h in rep_full["history"] if "eval" in h]
    assert evals == [(h["eval"], h["kl"]) for h in rep_res["history"] if "eval" in h]
    assert any(e != k for e, k in evals)  # the tolerance withheld some improvements


def test_default_and_paper_profiles_judge_convergence():
    for name in ("smoke", "default", "paper"):
        cfg = profiles.stage(T.TunedLensConfig, profiles.resolve(name))
        assert cfg.patience and cfg.eval_every and cfg.steps % cfg.eval_every == 0, name


# ------------------------------------------------------------------------------------------
# The figure and the table
# ------------------------------------------------------------------------------------------


def _lens_result(L, n=6, seed=0):
    rng = np.random.default_rng(seed)
    per_seq = {c: torch.as_tensor(rng.uniform(0, 1, (n, L + 1)), dtype=torch.float32)
               for c in ("top1_input", "top1_next")}
    return lens.LensResult("m", L, list(per_seq), per_seq, {}, {})


def _report(L, unconverged, *, steps=40, stopped_early=False, n=3):
    rng = np.random.default_rng(1)
    kl = torch.as_tensor(rng.uniform(0.1, 3, (n, L + 1)), dtype=torch.float32)
    kl[:, -1] = 0
    last = [steps - 10 if l in unconverged else 10 for l in range(L)]
    return {"config": {"steps": 40, "batch": 4, "window": 64}, "steps": steps, "stopped_early": stopped_early,
            "fit_seconds": 12.0, "kl_logit": kl, "kl_tuned": kl / 2, "outside_mass": 0.1, "history": [],
            "convergence_window": 20, "last_improved": last, "converged": [l not in unconverged for l in range(L)],
            "unconverged": list(unconverged)}


def test_tuned_panel_and_table_mark_the_layers_still_improving():
    import matplotlib.pyplot as plt

    L = 4
    P = profiles.resolve("smoke", n_boot=50)
    results = {"a": _lens_result(L), "b": _lens_result(L, seed=1)}
    tuned = {"a": _lens_result(L, seed=2), "b": _lens_result(L, seed=3)}
    reports = {"a": _report(L, [1, 3]), "b": _report(L, [], steps=30, stopped_early=True)}
    fig, numbers = A.tuned_panel(results, tuned, reports, P)
    assert numbers["a"]["still improving at the cap"] == {"layers": [1, 3], "depth": [0.25, 0.75]}
    assert numbers["b"]["still improving at the cap"] == {"layers": [], "depth": []}
    hollow = [ln for ax in fig.axes for ln in ax.get_lines() if ln.get_marker() == "o" and ln.get_mfc() == "none"]
    # model a: input and next top-1 curves, and its tuned KL curve; model b: none
    assert len(hollow) == 3 and all(list(ln.get_xdata()) == [0.25, 0.75] for ln in hollow)
    top1_next = numbers["a"]["tuned lens"]["next"]["estimate"]
    assert any(list(ln.get_ydata()) == [top1_next[1], top1_next[3]] for ln in hollow)
    labels = [t.get_text() for leg in fig.legends for t in leg.get_texts()]
    assert A.UNCONVERGED_LABEL in labels
    fig2, _ = A.tuned_panel(results, tuned, {"a": _report(L, []), "b": reports["b"]}, P)
    assert A.UNCONVERGED_LABEL not in [t.get_text() for leg in fig2.legends for t in leg.get_texts()]
    plt.close("all")

    table = A.tuned_training_table(reports, {"a": L, "b": L})
    assert table.loc["a", "layers still improving at the cap"] == 2
    assert table.loc["a", "still improving (h_l)"] == "1, 3"
    assert table.loc["a", "all converged by step"] is None or np.isnan(table.loc["a", "all converged by step"])
    assert table.loc["b", "still improving (h_l)"] == "none" and table.loc["b", "all converged by step"] == 30


def test_convergence_note_names_how_each_fit_ended():
    assert "stopped early" in A._convergence_note(_report(4, [], steps=30, stopped_early=True))
    assert "the cap: every layer converged" in A._convergence_note(_report(4, []))
    note = A._convergence_note(_report(4, [1, 3]))
    assert "2 of 4 layers still improving" in note and "l = 1, 3" in note
