"""Tuned lens, the closed-form start and its KL refinement: the least-squares start equals a direct
solve, refinement never keeps a state worse than the start, exclusions carry their reason, the
configuration refuses bad values naming the fix, and the cache key follows the new fields."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from residshift.core import cache, profiles
from residshift.measure import tuned_lens as T
from residshift.study import alignment as A

from conftest import random_windows as _windows  # noqa: E402


def _residuals(lm, info, ids):
    return T.collect_stack(lm, info, ids)


def _direct(hs, l, skip_first=1):
    """``X = [h_l, 1]`` and ``Y = h_L`` as float64 rows (positions from ``skip_first``)."""
    x = hs[l][:, skip_first:].reshape(-1, hs[l].shape[-1]).double()
    y = hs[-1][:, skip_first:].reshape(-1, hs[-1].shape[-1]).double()
    return torch.cat([x, torch.ones(len(x), 1, dtype=torch.float64)], 1), y


# ------------------------------------------------------------------------------------------
# The closed-form start
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gemma3", "tiny-gpt2"])
def test_closed_form_start_equals_a_direct_least_squares_solve(tiny, name):
    lm, _, info = tiny[name]
    ids = _windows(6, 24, 31)  # 6 x 23 = 138 rows > d + 1 = 65: the unridged problem is determined
    sums = T.LeastSquares(info.n_layers, info.d_model)
    parts = [_residuals(lm, info, part) for part in (ids[:4], ids[4:])]
    for part in parts:  # accumulated over two batches
        sums.add(part)
    hs = [torch.cat(h) for h in zip(*parts)]
    plain = sums.solve(0.0)
    assert plain["rows"] == 6 * 23
    for l in range(info.n_layers):
        X, Y = _direct(hs, l)
        beta = torch.linalg.lstsq(X, Y).solution  # [d + 1, d]: rows of A^T, then the intercept
        torch.testing.assert_close(plain["A"][l], beta[:-1].T, rtol=1e-6, atol=1e-6, msg=f"A_{l}")
        torch.testing.assert_close(plain["c"][l], beta[-1], rtol=1e-6, atol=1e-6, msg=f"c_{l}")
    # the ridge: centred covariance plus ridge x its mean diagonal; the intercept is not penalised
    ridged = sums.solve(0.1)
    for l in range(info.n_layers):
        X, Y = _direct(hs, l)
        x, y = X[:, :-1], Y
        xc, yc = x - x.mean(0), y - y.mean(0)
        S = xc.T @ xc / len(x)
        lam = 0.1 * torch.trace(S) / info.d_model
        At = torch.linalg.solve(S + lam * torch.eye(info.d_model, dtype=torch.float64), xc.T @ yc / len(x))
        torch.testing.assert_close(ridged["lam"][l], lam)
        torch.testing.assert_close(ridged["A"][l], At.T, rtol=1e-7, atol=1e-9)
        torch.testing.assert_close(ridged["c"][l], y.mean(0) - At.T @ x.mean(0), rtol=1e-7, atol=1e-9)
        assert not torch.allclose(ridged["A"][l], plain["A"][l], atol=1e-4)  # the ridge matters here


def test_set_start_makes_each_translator_the_least_squares_map(tiny):
    lm, _, info = tiny["tiny-llama"]
    ids = _windows(5, 20, 32)
    sums = T.LeastSquares(info.n_layers, info.d_model)
    sums.add(_residuals(lm, info, ids))
    sol = sums.solve(1e-3)
    lens = T.TunedLens(info)
    T.set_start(lens, sol)
    h = torch.randn(7, info.d_model)
    for l in range(info.n_layers):
        torch.testing.assert_close(lens.transform(l, h).double(), h.double() @ sol["A"][l].T + sol["c"][l],
                                   rtol=1e-5, atol=1e-5)
    assert torch.equal(lens.transform(info.n_layers, h), h)  # T_L stays the identity


def test_fit_starts_from_the_closed_form_in_either_collection_mode(tiny):
    lm, _, info = tiny["tiny-gemma3"]
    train, es = _windows(20, 16, 33), _windows(2, 16, 34)
    cfg = T.TunedLensConfig(window=16, steps=1, batch=2, lr=1e-9, eval_every=1, lstsq_windows=18, ridge=1e-2)
    ref = T.LeastSquares(info.n_layers, info.d_model)
    for i in range(0, 18, T.COLLECT_BATCH):
        ref.add(_residuals(lm, info, train[i:min(18, i + T.COLLECT_BATCH)]))
    expected = T.TunedLens(info)
    T.set_start(expected, ref.solve(1e-2))
    for collect in ("once", "per_step"):
        lens, rep = T.fit(lm, info, cfg, train=train, es=es, collect=collect)
        assert rep["start"]["windows"] == 18 and rep["start"]["rows"] == 18 * 15
        first = [h for h in rep["history"] if "eval" in h][0]
        assert first["step"] == 0
        # the step-0 evaluation is the closed-form start's early-stopping KL
        start_kl = T.evaluate_kl(lm, info, expected, es, batch=2)["tuned"].mean(0)[:-1]
        torch.testing.assert_close(torch.tensor(first["kl"]), start_kl, rtol=1e-5, atol=1e-6)
    zero = dataclasses.replace(cfg, init="zero")
    _, rep = T.fit(lm, info, zero, train=train, es=es)
    logit = T.evaluate_kl(lm, info, None, es, batch=2)["logit"].mean(0)[:-1]
    first = [h for h in rep["history"] if "eval" in h][0]
    torch.testing.assert_close(torch.tensor(first["kl"]), logit, rtol=1e-5, atol=1e-6)
    assert rep["start"] == {"init": "zero"}


# ------------------------------------------------------------------------------------------
# Refinement keeps, per layer, the better of start and refined
# ------------------------------------------------------------------------------------------


def _es_kl(lm, info, lens, es):
    return T.evaluate_kl(lm, info, lens, es, batch=2)["tuned"].mean(0)[:-1]


@pytest.mark.parametrize("lr,expect", [(3.0, "start"), (3e-3, "mixed")])
def test_refinement_never_keeps_a_state_worse_than_the_start(tiny, lr, expect):
    lm, _, info = tiny["tiny-gpt2"]
    train, es = _windows(48, 20, 35), _windows(3, 20, 36)
    cfg = T.TunedLensConfig(window=20, steps=8, batch=8, lr=lr, eval_every=2, patience=2, rel_tol=0.0,
                            lstsq_windows=8, ridge=1e-2)
    lens, rep = T.fit(lm, info, cfg, train=train, es=es)
    start_kl = torch.tensor([h for h in rep["history"] if "eval" in h][0]["kl"])
    kept_kl = _es_kl(lm, info, lens, es)
    assert torch.all(kept_kl <= start_kl * (1 + 1e-5) + 1e-7), (kept_kl, start_kl)
    start = T.TunedLens(info)
    sums = T.LeastSquares(info.n_layers, info.d_model)
    sums.add(_residuals(lm, info, train[:8]))
    T.set_start(start, sums.solve(1e-2))
    for l, kept in enumerate(rep["kept"]):
        same = all(torch.equal(a, b) for a, b in zip(lens.translators[l].parameters(),
                                                      start.translators[l].parameters()))
        assert same == (kept == "start"), l
        if kept == "refined":
            assert kept_kl[l] < start_kl[l]
    if expect == "start":  # an lr this large only makes things worse: every layer keeps its start
        assert rep["kept"] == ["start"] * info.n_layers
    else:
        assert "refined" in rep["kept"]


# ------------------------------------------------------------------------------------------
# Convergence and exclusion, with reasons
# ------------------------------------------------------------------------------------------


def test_exclusions_name_each_layer_and_why():
    conv = {"window": 50, "last_improved": [0, 575, 25, 600], "converged": [True, False, True, False],
            "unconverged": [1, 3]}
    cfg = T.TunedLensConfig(steps=600, eval_every=25, patience=2)
    reasons = T.exclusion_reasons(conv, 600, cfg)
    assert set(reasons) == {1, 3}
    assert "h_1 still improving at the step cap (600 steps)" in reasons[1] and "step 575" in reasons[1]
    assert "raise tuned_steps" in reasons[3]
    assert T.exclusion_reasons({**conv, "unconverged": []}, 600, cfg) == {}
    assert T.exclusion_reasons({**conv, "unconverged": None}, 600, cfg) is None


def test_a_fit_reports_converged_layers_and_excluded_ones_with_their_reason(tiny, capsys):
    lm, tok, info = tiny["tiny-gpt2"]
    train, es = _windows(48, 20, 4), _windows(4, 20, 5)
    capped = T.TunedLensConfig(window=20, steps=6, batch=8, lr=3e-3, eval_every=1, patience=2, rel_tol=0.0,
                               init="zero")
    _, rep = T.fit(lm, info, capped, train=train, es=es)
    assert rep["unconverged"] and set(rep["excluded"]) == set(rep["unconverged"])
    note = A._convergence_note(rep)
    for l in rep["unconverged"]:
        assert rep["excluded"][l] in note
    # the closed-form start with a tolerance no step can meet: every layer converged, nothing excluded
    done = dataclasses.replace(capped, init="lstsq", lstsq_windows=16, rel_tol=0.99, steps=50)
    _, rep = T.fit(lm, info, done, train=train, es=es)
    assert rep["stopped_early"] and rep["unconverged"] == [] and rep["excluded"] == {}
    assert rep["kept"] == ["start"] * info.n_layers
    assert "every layer converged" in A._convergence_note(rep)


# ------------------------------------------------------------------------------------------
# Configuration: validation and the cache key
# ------------------------------------------------------------------------------------------


def test_bad_start_settings_are_refused_naming_the_fix(tiny):
    with pytest.raises(ValueError, match=r"init must be one of \('lstsq', 'zero'\)"):
        T.TunedLensConfig(init="ols")
    with pytest.raises(ValueError, match="lower lstsq_windows or raise train_windows"):
        T.TunedLensConfig(train_windows=16, lstsq_windows=32)
    with pytest.raises(ValueError, match="lstsq_windows=0"):
        T.TunedLensConfig(lstsq_windows=0)
    for bad in (-1e-3, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="ridge must be a finite number >= 0"):
            T.TunedLensConfig(ridge=bad)
    with pytest.raises(ValueError, match="checkpoint_every must be >= 0"):
        T.TunedLensConfig(checkpoint_every=-1)
    # too few rows for an unridged solve: refused, naming the profile key to raise
    lm, _, info = tiny["tiny-llama"]
    cfg = T.TunedLensConfig(window=8, steps=1, batch=1, ridge=0.0, lstsq_windows=2)
    with pytest.raises(T.TunedLensError, match="singular.*raise ridge .*tuned_ridge"):
        T.fit(lm, info, cfg, train=_windows(2, 8, 37), es=None)


def test_profiles_set_the_start_and_from_profile_reads_it():
    for name in ("smoke", "default", "paper"):
        P = profiles.resolve(name)
        cfg = profiles.stage(T.TunedLensConfig, P)
        assert (cfg.init, cfg.lstsq_windows, cfg.ridge) == (P.tuned_init, P.tuned_lstsq_windows, P.tuned_ridge)
        assert cfg.init == "lstsq" and cfg.lstsq_windows <= cfg.train_windows, name
    cfg = profiles.stage(T.TunedLensConfig, profiles.resolve("smoke", tuned_init="zero", tuned_ridge=0.5))
    assert cfg.init == "zero" and cfg.ridge == 0.5


def test_the_cache_key_changes_with_the_start_settings(tiny):
    _, _, info = tiny["tiny-llama"]
    base = T.TunedLensConfig()
    key = cache.config_key(T.cache_config(info, base))
    seen = {key}
    for change in ({"init": "zero"}, {"lstsq_windows": 32}, {"ridge": 1e-2}, {"checkpoint_every": 10}):
        other = dataclasses.replace(base, **change)
        k = cache.config_key(T.cache_config(info, other))
        assert k not in seen, change
        seen.add(k)
        assert T.checkpoint_path(info, other) != T.checkpoint_path(info, base)
    assert cache.config_key(T.cache_config(info, dataclasses.replace(base))) == key
