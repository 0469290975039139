"""Notebook 03's study module: the adapters to the C1 rules, the tables and the figures.

The adapters are checked on hand-built lens results whose verdicts are known; the compute glue and the
figures run on a tiny random model (fast), and must produce finite numbers."""
import math

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest
import torch

from residshift.core import forward
from residshift.analysis import verdicts
from residshift.core import profiles
from residshift.tools import runner
from residshift.core.models import load_models
from residshift.measure import lens
from residshift.study import tables  # noqa: E402
from residshift.study import alignment as A

NOTEBOOK = runner.notebooks_dir() / "03-alignment-curves.ipynb"


def _P(**over):
    kw = dict(models=["tiny-llama"], lens_corpus="wikitext-2", lens_window=24, lens_windows=4, n_boot=60,
              causal_corpus="wikitext-2", causal_window=16, causal_windows=3, causal_batch=3)
    kw.update(over)
    return profiles.resolve("smoke", **kw)


# --------------------------------------------------------------------------------------------
# Profile keys reach the stage configs
# --------------------------------------------------------------------------------------------


def test_tuned_patience_reaches_the_config():
    from residshift.measure import tuned_lens

    cfg = profiles.stage(tuned_lens.TunedLensConfig, profiles.resolve("default", tuned_patience=7))
    assert cfg.patience == 7


# --------------------------------------------------------------------------------------------
# Adapters from lens results to the C1 rules
# --------------------------------------------------------------------------------------------


def _result(top1_in, top1_next, *, cur, nxt, per_window):
    """A LensResult with the given per-window curves and a token table of ``per_window`` positions."""
    n = top1_in.shape[0]
    per_seq = {"top1_input": torch.as_tensor(top1_in, dtype=torch.float32),
               "top1_next": torch.as_tensor(top1_next, dtype=torch.float32),
               "prob_next": torch.as_tensor(top1_next, dtype=torch.float32),
               "prob_input": torch.as_tensor(top1_in, dtype=torch.float32)}
    tokens = {"cur": torch.as_tensor(cur, dtype=torch.int32), "next": torch.as_tensor(nxt, dtype=torch.int32),
              "seq": torch.arange(n, dtype=torch.int32).repeat_interleave(per_window)}
    return lens.LensResult("m", top1_in.shape[1] - 1, list(per_seq), per_seq, {}, tokens)


def _regimes(n=30, L=12, *, late=0.4, seed=0):
    """Top-1 curves with an input regime at h_0..h_2, a quiet middle and a next regime from h_(L-2)
    (C1 asks for regimes of ceil(0.1 L) = 2 layers at L = 12)."""
    rng = np.random.default_rng(seed)
    ti = np.zeros((n, L + 1))
    tn = np.zeros((n, L + 1))
    ti[:, 0], ti[:, 1:3] = 0.95, 0.5
    tn[:, L - 2:] = late
    tn[:, L] = 0.45
    # token 7 is the corpus's most frequent token and makes up 1/4 of the input and next tokens: the
    # unigram decoder's top-1 rate is 0.25 on both, and every curve is shifted up by it
    per_window = 8
    cur = rng.integers(10, 50, n * per_window)
    cur[::4] = 7
    nxt = rng.integers(10, 50, n * per_window)
    nxt[1::4] = 7
    ti += 0.25 + rng.normal(0, 0.01, ti.shape)
    tn += 0.25 + rng.normal(0, 0.01, tn.shape)
    counts = np.ones(60)
    counts[7] = 1000
    return _result(ti, tn, cur=cur, nxt=nxt, per_window=per_window), counts


def test_c1_rows_judge_the_excess_over_the_unigram_decoder():
    P = _P()
    res, counts = _regimes()
    base = lens.unigram_baseline(res, counts)
    assert base["top_token"] == 7
    np.testing.assert_allclose(base["top1_input"].numpy(), 0.25)
    a = A.c1_arrays(res, base)
    assert a["top1_input"].shape == (30, 13) and a["unigram_next"].shape == (30,)
    rows = A.c1_rows(res, base, P, model="m", decoder="logit lens")
    by = {(r.claim_id, r.details.get("metric")): r for r in rows}
    assert by[("C1", None)].verdict == verdicts.REPRODUCED
    # the middle layers decode x_t / x_{t+1} at 0.25: exactly the frequency guess, so "quiet"
    assert by[("C1.middle", None)].estimate == pytest.approx(0.0, abs=0.02)
    assert {r.details["metric"] for r in rows if r.claim_id.startswith("C1.depth")} == {"top1", "prob"}
    assert [r.details["metric"] for r in rows if r.claim_id == "C1.depth"] == ["top1"]  # the primary metric
    # C1.late is a sanity check under any decoder; under the tuned lens (fitted to the output) C1.early,
    # C1.middle and C1 are reported but not evidence, with the same verdicts
    assert [r.claim_id for r in rows if not verdicts.is_evidence(r)] == ["C1.late"]
    tuned = A.c1_rows(res, base, P, model="m", decoder="tuned lens")
    assert [r.claim_id for r in tuned if not verdicts.is_evidence(r)] == ["C1.early", "C1.middle", "C1.late", "C1"]
    assert [r.verdict for r in tuned] == [r.verdict for r in rows]
    assert all(verdicts.is_evidence(r) for r in A.c1_rows(res, base, P, model="m", decoder="tuned lens",
                                                           fitted_to_output=False) if r.claim_id != "C1.late")
    # the same curves without the late regime: the next token never beats the frequency guess
    flat, counts = _regimes(late=0.0)
    flat.per_seq["top1_next"][:, -1] = flat.per_seq["top1_next"][:, -2]
    rows = A.c1_rows(flat, lens.unigram_baseline(flat, counts), P, model="m", decoder="logit lens")
    assert {r.claim_id: r.verdict for r in rows}["C1.late"] == verdicts.NOT_REPRODUCED


def test_c1_arrays_refuse_a_baseline_of_other_windows():
    res, counts = _regimes(n=30)
    other, _ = _regimes(n=12)
    with pytest.raises(ValueError, match="other windows"):
        A.c1_arrays(res, lens.unigram_baseline(other, counts))
    no_top1 = lens.LensResult("m", 3, ["prob_next"], {"prob_next": torch.zeros(2, 4)}, {}, {})
    with pytest.raises(ValueError, match="top1"):
        A.c1_arrays(no_top1, {})


def test_depth_curves_keep_only_meaningful_metrics():
    per_seq = {c: torch.zeros(3, 5) for c in ("logprob_next", "proj_next", "logrank_next", "top1_next")}
    res = lens.LensResult("m", 4, list(per_seq), per_seq, {}, {})
    assert set(A.depth_curves(res)) == {"logrank", "top1"}
    res = lens.LensResult("m", 4, ["logprob_next"], {"logprob_next": torch.zeros(3, 5)}, {}, {})
    with pytest.raises(ValueError, match="none of"):
        A.depth_curves(res)


def test_the_figure_shows_the_interval_c1_depth_judges():
    P = _P()
    res, counts = _regimes()
    rows = A.c1_rows(res, lens.unigram_baseline(res, counts), P, model="m", decoder="logit lens")
    depth = next(r for r in rows if r.claim_id == "C1.depth" and r.details["metric"] == "top1")
    tr = next(t for t in A.transition_rows(res, P) if t["metric"] == "top1")
    assert tr["emergence"].relative == pytest.approx(depth.estimate)
    assert tr["emergence"].relative_ci == pytest.approx(depth.ci)


def test_extremes_table_finds_the_peaks():
    per_seq = {"top1_input": torch.tensor([[0.9, 0.1, 0.0, 0.0]] * 3),
               "top1_next": torch.tensor([[0.0, 0.1, 0.6, 0.4]] * 3),
               "cos_raw_input": torch.tensor([[0.9, 0.1, 0.0, 0.0]] * 3),
               "cos_raw_next": torch.tensor([[0.5, 0.1, 0.2, 0.4]] * 3)}
    res = lens.LensResult("m", 3, list(per_seq), per_seq, {}, {})
    t = A.extremes_table({"m": res}, _P())
    assert t.loc[("m", "top1"), "next most aligned at"] == "h_2"
    assert not t.loc[("m", "top1"), "next peaks at h_L"]
    assert t.loc[("m", "cos_raw"), "next most aligned at"] == "h_0"
    assert t.loc[("m", "cos_raw"), "input peaks at h_0"]


def test_power_table_shrinks_with_more_windows():
    P = _P()
    out = {}
    for n in (12, 48):
        res, counts = _regimes(n=n)
        base = lens.unigram_baseline(res, counts)
        rows = A.c1_rows(res, base, P, model="m", decoder="logit lens")
        out[n] = A.power_table({"m": res}, {"m": base}, rows, P).loc["m"]
    assert out[12]["windows"] == 12 and out[12]["positions per window"] == 8
    # the SE of a mean over windows falls as 1/sqrt(n): four times the windows, about half the MDE
    assert out[48]["MDE early (h_1)"] == pytest.approx(out[12]["MDE early (h_1)"] / 2, rel=0.35)
    assert out[48]["MDE middle (Bonferroni)"] > out[48]["MDE early (h_1)"]  # a stricter level


def test_repeat_share_counts_repeated_tokens():
    res, _ = _regimes(n=2)
    res.tokens["next"] = res.tokens["cur"].clone()
    res.tokens["next"][0] = res.tokens["cur"][0] + 1
    idx = np.zeros(16, dtype=int)
    idx[8:] = 1
    share = A.repeat_share(res, {"token type": (idx, ["a", "b", "c"])})
    assert share.loc["a", "next == input"] == pytest.approx(7 / 8)
    assert share.loc["b", "next == input"] == 1.0 and math.isnan(share.loc["c", "next == input"])


# --------------------------------------------------------------------------------------------
# The package edit: token counts of the raw or the detokenized text
# --------------------------------------------------------------------------------------------


def test_corpus_token_counts_follow_the_detokenization(tiny_llama):
    lm, tok, info = tiny_llama
    det = lens.corpus_token_counts(tok, info, "wikitext-2", "validation")
    raw = lens.corpus_token_counts(tok, info, "wikitext-2", "validation", detokenize=False)
    at = tok.convert_tokens_to_ids("@")
    # WikiText writes "3 @-@ 4" and "1 @,@ 000"; the detokenized text has no such markers
    assert raw[at] > det[at] >= 0 and raw.sum() > det.sum()
    np.testing.assert_array_equal(det, lens.corpus_token_counts(tok, info, "wikitext-2", "validation",
                                                                detokenize=True))


# --------------------------------------------------------------------------------------------
# Compute glue and figures on a tiny model
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_study(tmp_path_factory):
    import os

    old = os.environ.get("RESIDSHIFT_RESULTS")
    os.environ["RESIDSHIFT_RESULTS"] = str(tmp_path_factory.mktemp("results"))
    P = _P()
    loaded = load_models(P.models, device=P.device)
    results = A.lens_passes(loaded, P, verbose=False)
    counts = A.token_counts(loaded, P)
    yield P, loaded, results, counts, A.unigram_baselines(results, counts)
    if old is None:
        os.environ.pop("RESIDSHIFT_RESULTS", None)
    else:
        os.environ["RESIDSHIFT_RESULTS"] = old


def _finite(x):
    if isinstance(x, dict):
        return all(_finite(v) for v in x.values())
    if isinstance(x, (list, tuple)):
        return all(_finite(v) for v in x)
    if isinstance(x, float):
        return math.isfinite(x)
    return True


def test_figures_and_tables_on_a_tiny_model(tiny_study):
    import matplotlib.pyplot as plt

    P, loaded, results, counts, baselines = tiny_study
    name = P.models[0]
    fig, numbers = A.metrics_panel(results, baselines, P)
    assert set(numbers[name]) >= {"top1_input", "top1_next", "logprob_next", "kl_final"}
    assert _finite({k: v["estimate"] for k, v in numbers[name].items()})
    rows = A.c1_rows(results[name], baselines[name], P, model=name, decoder="logit lens")
    fig2, c1n = A.c1_panel({"logit lens": results}, baselines, rows, P)
    assert _finite(c1n[name]["logit lens"]["next"]["estimate"])
    tr = {f"{name} · logit lens": A.transition_rows(results[name], P)}
    fig3, sn = A.shift_depth_panel(tr, rows, P)
    assert [r["metric"] for r in sn[f"{name} · logit lens"]] == ["top1", "prob", "logrank"]
    cross = A.crossing_table(results, P).loc[name]
    assert set(cross.index) == {m for m in lens.ORIENTATION if f"{m}_input" in results[name].per_seq}
    top1 = next(t for t in tr[f"{name} · logit lens"] if t["metric"] == "top1")["crossing"]
    if top1.relative is not None:  # the same estimate as the shift table's
        assert cross.loc["top1", "crossing l/L"] == pytest.approx(top1.relative, abs=1e-3)
    depth = A.depth_sensitivity_table(rows)
    assert list(depth.index.get_level_values("metric")) == [r.details["metric"] for r in rows
                                                             if r.claim_id.startswith("C1.depth")]
    assert len(tables.verdict_table(rows)) == len(rows)
    groups = A.token_groups(loaded, results, counts)
    fig4, grows = A.token_group_panel(results, groups, P)
    assert all(r["tokens"] >= A.MIN_GROUP_TOKENS for r in grows)
    plt.close("all")


def test_sensitivity_settings_on_a_tiny_model(tiny_study):
    import matplotlib.pyplot as plt

    P, loaded, results, counts, _ = tiny_study
    sens = A.sensitivity_passes(loaded, P, results)
    name = P.models[0]
    assert list(sens[name]) == list(A.SETTINGS)
    assert sens[name]["BOS flipped"].config["bos"] is not loaded[name].info.prepend_bos
    assert sens[name]["raw WikiText"].config["detokenize"] is False
    rows = A.sensitivity_rows(sens, counts, A.token_counts(loaded, P, detokenize=False), P)
    assert [r["setting"] for r in rows] == list(A.SETTINGS)
    assert all(r["C1"] in verdicts.OUTCOMES for r in rows)
    fig, numbers = A.sensitivity_panel(sens, P)
    assert set(numbers[name]) == set(A.SETTINGS)
    plt.close("all")


def test_first_windows_equal_a_pass_on_fewer_windows(tiny_study):
    P, loaded, results, _, _ = tiny_study
    name = P.models[0]
    head = A.first_windows(results[name], 2)
    direct = A.lens_pass(loaded[name], P, metrics=["top1", "logprob"], n=2)
    assert head.n_seq == 2 and head.config["n"] == 2
    for col in ("top1_next", "logprob_input"):
        torch.testing.assert_close(head.per_seq[col], direct.per_seq[col])
    torch.testing.assert_close(head.tokens["layers"]["rank_next"][:, :5], results[name].tokens["layers"]["rank_next"][:, :5])
    assert torch.equal(head.tokens["cur"], direct.tokens["cur"])
    assert A.first_windows(results[name], None) is results[name]
    with pytest.raises(ValueError, match="at least 2"):
        A.first_windows(results[name], 1)


def test_causal_glue_on_a_tiny_model(tiny_study):
    import matplotlib.pyplot as plt

    P, loaded, results, _, _ = tiny_study
    profs = A.causal_profiles(loaded, P, verbose=False)
    fig, numbers = A.causal_panel(profs, P)
    name = P.models[0]
    assert {"net_input", "net_next", "control"} <= set(numbers[name])
    frame, rows = A.causal_vs_lens(profs, {name: A.transition_rows(results[name], P)}, P)
    assert {"causal input stops", "lens input fade", "causal next starts", "lens next emergence"} <= set(frame.columns)
    assert rows[0]["causal"]["n_layers"] == results[name].n_layers
    peak = A.control_peak(profs)
    assert peak.loc[name, "windows"] == P.causal_windows and peak.loc[name, "MDE of a net effect (nats)"] > 0
    from residshift.measure import causal

    assert peak.loc[name, "layers profiled"] == len(profiles.stage(causal.CausalConfig, P).residuals(results[name].n_layers))
    plt.close("all")


# --------------------------------------------------------------------------------------------
# The package edit: a causal profile on every stride-th residual
# --------------------------------------------------------------------------------------------


def test_causal_stride_profiles_a_subset_and_transitions_map_back():
    from residshift.measure import causal as C

    cfg = C.CausalConfig(stride=2)
    assert cfg.residuals(6) == [0, 2, 4, 6] and cfg.residuals(5) == [0, 2, 4, 5]
    assert cfg.blocks(5) == [0, 2, 4] and C.CausalConfig().residuals(3) == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="stride"):
        C.CausalConfig(stride=0)
    # the full profile of a known curve, and the same profile seen at residuals 0, 2, 4, 6
    n = 20
    full_in = torch.tensor([4.0, 3.0, 3.0, 1.0, 0.0, 0.0, 5.0]).expand(n, 7).clone()
    full_nx = torch.tensor([0.0, 0.0, 0.0, 1.0, 4.0, 4.0, 9.0]).expand(n, 7).clone()

    def profile(cols):
        return {"directions": ["input", "next", "random"], "residuals": cols, "n_layers": 6,
                "delta": torch.stack([full_in[:, cols], full_nx[:, cols], torch.zeros(n, len(cols))])}

    sub = C.effect_transitions(profile([0, 2, 4, 6]), n_boot=30)
    # inner residuals h_2, h_4: input 3, 0 -> stays below 1.5 after 2 + 2 * (3 - 1.5) / 3 = 3.0
    assert sub["input_stops"]["index"] == pytest.approx(3.0)
    # next 0, 4 at h_2, h_4: half of 4 reached at 2 + 2 * 0.5 = 3.0
    assert sub["next_starts"]["index"] == pytest.approx(3.0) and sub["next_starts"]["relative"] == pytest.approx(0.5)
    full = C.effect_transitions(profile(list(range(7))), n_boot=30)
    assert full["next_starts"]["index"] == pytest.approx(3 + 1 / 3)  # 0,0,1,4,4 on h_1..h_5: half 2 at 3 + 1/3
    with pytest.raises(ValueError, match="increasing residual indices"):
        C.effect_transitions(profile([0, 3]), n_boot=10)


def test_causal_stride_runs_fewer_replays(tiny_llama, tmp_path, monkeypatch):
    from residshift.measure import causal as C

    monkeypatch.setenv("RESIDSHIFT_RESULTS", str(tmp_path))
    lm, tok, info = tiny_llama
    cfg = C.CausalConfig(corpus="wikitext-2", window=12, n_windows=2, batch=2, alphas=(0.0,), stride=2)
    out = C.run_cached(lm, info, cfg, tok)
    assert out["direction"]["residuals"] == [0, 2, 4] and out["direction"]["delta"].shape == (3, 2, 3)
    assert out["skip"]["layers"] == [0, 2] and out["skip"]["delta"].shape == (1, 2, 2)
    full = C.run_cached(lm, info, C.CausalConfig(corpus="wikitext-2", window=12, n_windows=2, batch=2,
                                                 alphas=(0.0,)), tok)
    # the profiled residuals give the same numbers as in the full profile
    torch.testing.assert_close(out["direction"]["delta"], full["direction"]["delta"][:, :, [0, 2, 4]])
    torch.testing.assert_close(out["skip"]["delta"], full["skip"]["delta"][:, :, [0, 2]])


def test_residuals_are_the_same_when_the_trace_stops_after_the_last_block(tiny):
    # collect_residuals stops the trace after the last block unless the logits are asked for
    for name, (lm, tok, info) in tiny.items():
        ids = torch.randint(0, 256, (2, 9), generator=torch.Generator().manual_seed(1))
        stopped = forward.collect_residuals(lm, info, ids)
        full, logits = forward.collect_residuals(lm, info, ids, return_logits=True)
        assert torch.equal(stopped, full), name
        assert stopped.shape == (info.n_layers + 1, 2, 9, info.d_model)
        with torch.no_grad():
            ref = lm._module(ids, output_hidden_states=True).hidden_states
        torch.testing.assert_close(stopped[0], ref[0].float(), msg=name)  # h_0: the block-0 input


def test_causal_evidence_counts_layers_whose_interval_clears_zero():
    import torch
    n, L = 12, 5
    rng = np.random.default_rng(0)
    delta = torch.zeros(3, n, L + 1)
    delta[0, :, 1:3] = 0.5 + torch.as_tensor(rng.normal(0, 0.01, (n, 2)), dtype=torch.float32)  # input, h_1..h_2
    delta[1, :, 4] = 0.3  # next at h_4 only
    prof = {"m": {"direction": {"delta": delta, "directions": ["input", "next", "random"],
                                "residuals": list(range(L + 1)), "clean": torch.zeros(n)}}}
    ev = A.causal_evidence(prof, _P())
    assert ev["m"] == {"profiled": [1, 2, 3, 4], "input": [1, 2], "next": [4]}
    rates = torch.tensor([[1.0, 0.0, 0.2, 0.01, 0.3, 0.4]] * 2)  # the lens's input top-1 at h_0..h_5
    res = lens.LensResult("m", L, ["top1_input"], {"top1_input": rates}, {}, {})
    t = A.causal_evidence_table(ev, {"m": res}, {"m": {"top1_input": torch.tensor([0.05, 0.05])}}).loc["m"]
    assert (t["layers profiled"], t["input used: layers"], t["next used: layers"]) == (4, 2, 1)
    assert (t["input used (h_l)"], t["next used (h_l)"]) == ("1, 2", "4")
    assert t["lens input top-1 <= unigram (h_l)"] == "1, 3" and t["input used where the lens is quiet (h_l)"] == "1"
