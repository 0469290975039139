"""residshift.study.training (notebooks 06-08) on a tiny grid trained in-process: the grid from the
profile keys, training then reuse, per-window final losses that match the trainer's, the verdict rows
of every rule the notebooks use, the harness and the lens on the trained models, and the panels."""
import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import matplotlib  # noqa: E402

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from residshift.analysis import verdicts  # noqa: E402
from residshift.core import profiles  # noqa: E402
from residshift.study import training as study  # noqa: E402
from residshift.train import trainer as T  # noqa: E402

# Tiny runs on real WikiText-2 text with the in-process byte tokenizer (as tests/test_trainer.py):
# 4 blocks so that early, middle and late exist; 4 steps per run.
TINY = dict(train_layers=4, train_heads=2, train_width=16, train_context=48, train_tokenizer="tiny-llama",
            train_split="validation", train_val_split="test", train_tokens=48 * 8 * 4, train_batch=8,
            train_warmup=1, train_eval_every=2, train_eval_windows=8, train_checkpoint_every=100, train_bf16=False,
            train_compile=False, train_seeds=[0, 1], train_cut_layers=[1, 3], train_cut_alphas=[0.0],
            train_variants=["learned", "learned-token"], train_bench_tasks=["arc-easy"],
            train_bench_limits={"arc-easy": 6}, train_lens_windows=4, train_lens_positions=None, train_boot=50)


def tiny_profile(**kw):
    return profiles.resolve("smoke", **{**TINY, **kw})


@pytest.fixture(scope="module")
def grid_runs(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("RESIDSHIFT_RESULTS", str(tmp_path_factory.mktemp("results")))
    P = tiny_profile()
    runs = study.train_grid(P, verbose=False)
    finals = study.final_evals(runs, P)
    yield P, runs, finals
    mp.undo()


# ------------------------------------------------------------------------------------------
# The grid
# ------------------------------------------------------------------------------------------


def test_grid_from_profile_keys():
    P = tiny_profile()
    names = [v.name for v in study.grid(P)]
    assert names == ["baseline", "alpha=0 @ block 1", "alpha=0 @ block 3", "learned", "learned-token",
                     "baseline (nanogpt embedding)"]
    every = tiny_profile(train_cut_alphas=[0.0, 0.5])
    every.train_cut_layers = None  # None = every block (the paper profile's value)
    # alpha = 0 at every block, other alphas at the late blocks only (l >= 2/3 L: block 3 of 4)
    assert study.cut_layers(every) == [0, 1, 2, 3] and study.cut_cells(every)[-1] == (0.5, 3)
    assert len(study.grid(every)) == 1 + 4 + 1 + 2 + 1
    cfg = study.config(P, study.grid(P)[2], 1)
    assert (cfg.mode, cfg.alpha, cfg.alpha_layers, cfg.seed, cfg.site) == ("fixed", 0.0, (3,), 1, "sublayer")
    assert cfg.layers == 4 and cfg.tokenizer == "tiny-llama" and cfg.embedding == "gemma"
    contrast = study.config(P, study.grid(P)[-1], 0)
    assert (contrast.mode, contrast.embedding) == ("baseline", "nanogpt")
    assert study.contrast_name(tiny_profile(train_contrast_embedding="gemma")) is None  # same recipe: no arm


def test_gate_init_reaches_the_learned_gates_only():
    P = tiny_profile(train_gate_init=2.5)
    by_name = {v.name: study.config(P, v, 0) for v in study.grid(P)}
    assert by_name["learned"].theta_init == 2.5 and by_name["learned-token"].theta_init == 2.5
    assert by_name["baseline"].theta_init is None and by_name["alpha=0 @ block 1"].theta_init is None
    # None keeps the model's default; the gated runs' keys differ only where the init differs
    keep = tiny_profile()
    keep.train_gate_init = None  # None = the model's default (the paper profile's value)
    default = {v.name: study.config(keep, v, 0) for v in study.grid(P)}
    assert default["learned"].theta_init is None and default["baseline"] == by_name["baseline"]


@pytest.mark.parametrize("kw, match", [
    (dict(train_cut_layers=[4]), "distinct blocks in 0..3"),
    (dict(train_cut_layers=[1, 1]), "distinct blocks"),
    (dict(train_cut_alphas=[1.0]), r"must lie in \[0, 1\)"),
    (dict(train_variants=["bogus"]), "unknown"),
    (dict(train_seeds=[0, 0]), "distinct"),
])
def test_bad_grid_settings_name_the_fix(kw, match):
    P = tiny_profile(**kw)
    with pytest.raises(ValueError, match=match):
        study.grid(P) and study.seeds(P)


def test_only_unknown_variant_is_an_error():
    with pytest.raises(ValueError, match="not in the grid"):
        study.train_grid(tiny_profile(), only="nope")


def test_profiles_define_the_grid_keys():
    for name in profiles.PROFILE_NAMES:
        P = profiles.resolve(name)
        grid = study.grid(P)
        assert grid[0].name == "baseline" and len(study.seeds(P)) >= 2
        assert all(l < P.train_layers for l in study.cut_layers(P))
    d = profiles.resolve("default")
    # seeds are the unit: 5 of them; 70 runs of ~50 s is about an hour on 2 cores
    assert len(study.seeds(d)) >= 5 and len(study.grid(d)) * len(study.seeds(d)) <= 70
    assert {(a, l) for a, l in study.cut_cells(d) if a > 0} == {(a, l) for a in (0.5, 0.75, 0.9) for l in (4, 5)}
    assert study.AUTHORS_CUT in study.cut_cells(d) and d.train_cut_site == "sublayer"
    assert any(verdicts.is_late(l, d.train_layers) for l in study.cut_layers(d))


# ------------------------------------------------------------------------------------------
# Training, reuse, final evaluation
# ------------------------------------------------------------------------------------------


def test_train_grid_trains_each_run_once_and_reuses_it(grid_runs, capsys):
    P, runs, _ = grid_runs
    assert set(runs) == {(v.name, s) for v in study.grid(P) for s in (0, 1)}
    assert len(set(runs.values())) == len(runs)  # one directory per configuration
    stamps = {k: (r / "summary.json").stat().st_mtime_ns for k, r in runs.items()}
    again = study.train_grid(P, only=["baseline", "learned"])
    assert "4 runs (4 reused, 0 trained" in capsys.readouterr().out
    assert all(again[k] == runs[k] and (runs[k] / "summary.json").stat().st_mtime_ns == stamps[k] for k in again)
    cost = study.grid_cost(runs)
    assert cost["runs"] == len(runs) and cost["train_seconds"] > 0


def test_grid_records_the_load_per_run_and_its_throughput(grid_runs):
    P, runs, _ = grid_runs
    hosts = [study.read_host(r) for r in runs.values()]  # written by train_grid beside each fresh run
    assert all(h["trained_by"] == "notebook" and h["load_1min_start"] is not None for h in hosts)
    assert sorted(h["order"] for h in hosts) == list(range(len(runs)))
    g = study.grid_numbers(runs, P)
    assert len(g["per_run"]) == len(runs) and {"variant", "seed", "tokens_per_s", "load_1min"} <= set(g["per_run"][0])
    t = g["throughput"]
    assert t["load"]["runs"] == len(runs) and set(t["per_variant"]) == {v.name for v in study.grid(P)}
    assert t["gap"] == pytest.approx(t["between"] + t["within"])
    assert 0 < t["share_of_best"] <= 1
    table = study.throughput_table(t)  # the notebook's view: numbers in columns, one row per variant and all runs
    assert list(table.index) == [*t["per_variant"], "all runs"] and table.loc["all runs", "max"] == t["best"]
    assert table.loc["all runs", "mean / best run"] == pytest.approx(t["share_of_best"])


def test_both_perplexities_per_variant_over_seeds(grid_runs):
    P, runs, _ = grid_runs
    some = {k: r for k, r in runs.items() if k[0] in ("baseline", "learned")}
    frame = study.perplexity_runs(some, P)
    assert len(frame) == 4 and (frame["sliding_context"] == P.train_context).all()
    assert (frame["doc_max_length"] == P.train_context).all() and (frame["documents"] == P.ppl_doc_limit).all()
    assert (frame["sliding_windows"] == P.ppl_windows).all()
    # per word is larger than per token here (the tiny-llama tokenizer splits a word into several tokens)
    assert (frame["sliding_word_ppl"] > frame["sliding_ppl"]).all() and (frame["doc_bits_per_byte"] > 0).all()
    table = study.perplexity_table(frame)
    assert list(table.index) == ["baseline", "learned"] and (table[("seeds", "n")] == 2).all()
    for v in ("baseline", "learned"):
        x = frame[frame.variant == v].sort_values("seed")
        for k, label in study.PPL_METRICS.items():
            assert table.loc[v, (label, "mean")] == pytest.approx(x[k].mean())
            assert table.loc[v, (label, "sd")] == pytest.approx(np.std(x[k].to_numpy(), ddof=1))
    numbers = study.perplexity_numbers(frame, table)
    assert numbers["per_variant"]["learned"]["doc_word_ppl"]["mean"] == pytest.approx(
        table.loc["learned", ("lm-eval, per word", "mean")])
    assert numbers["lm_eval"]["max_length"] == P.train_context and len(numbers["per_run"]) == 4
    one = study.perplexity_numbers(frame[frame.seed == 0], study.perplexity_table(frame[frame.seed == 0]))
    assert one["per_variant"]["baseline"]["sliding_ppl"]["sd"] is None  # one seed: no SD (null, not NaN)
    again = study.perplexity_runs({("baseline", 0): runs[("baseline", 0)]}, P)  # cached by the harness
    assert again["sliding_ppl"].iloc[0] == frame["sliding_ppl"].iloc[0]


def test_final_eval_matches_the_trainers_validation_loss(grid_runs):
    P, runs, finals = grid_runs
    for key, run in runs.items():
        x = finals[key]["losses"]
        assert x.shape == (P.train_eval_windows,)
        assert float(np.mean(x)) == pytest.approx(T.read_summary(run)["val_loss"], abs=1e-4)
    assert all(a == 1.0 for a in finals[("baseline", 0)]["alphas"].values())
    cut = finals[("alpha=0 @ block 3", 0)]["alphas"]
    assert cut[3] == 0.0 and cut[0] == 1.0
    learned = finals[("learned", 1)]["alphas"]
    assert all(0 < a < 1 for a in learned.values())
    # paired: different variants of one seed differ; the baseline is not its cut twin
    assert not np.allclose(finals[("baseline", 0)]["losses"], finals[("alpha=0 @ block 3", 0)]["losses"])


def test_curves_and_alpha_history(grid_runs):
    P, runs, _ = grid_runs
    frame = study.curves(runs)
    assert set(frame.variant) == {v.name for v in study.grid(P)}
    tps = P.train_batch * P.train_context
    assert (frame.tokens == frame.step * tps).all() and sorted(frame.step.unique()) == [2, 4]
    hist = study.alpha_history(frame)
    assert set(hist.variant) == {"learned", "learned-token"} and set(hist.block) == {0, 1, 2, 3}
    assert hist.alpha.between(0, 1).all()
    for fig, _ in (study.curves_panel(frame, P), study.alpha_panel(hist, P)):
        assert len(fig.axes) >= 2
        plt.close(fig)


# ------------------------------------------------------------------------------------------
# Rules
# ------------------------------------------------------------------------------------------


def test_c2_rows_use_the_training_rules(grid_runs):
    P, _, finals = grid_runs
    rows = study.c2_rows(finals, P)
    ids = [r.claim_id for r in rows]
    assert ids == ["C2-training.alpha0-hurts", "C2-training.alpha0-hurts", "C2-training.layer-sensitive",
                   "C2-training.late-cut"]
    assert all(r.n == 2 and r.details["unit"] == "seed" and len(r.details["per_seed_values"]) == 2 for r in rows)
    table = study.cut_table(finals, P)
    base = study.losses(finals, "baseline", [0, 1])
    cut = study.losses(finals, "alpha=0 @ block 1", [0, 1])
    assert table.loc[(0.0, 1), "change"] == pytest.approx((cut - base).mean())
    assert table.loc[(0.0, 1), "per_seed"] == [round(v, 4) for v in (cut - base).mean(1)]
    fig, numbers = study.cut_panel(finals, P)
    assert numbers["blocks"] == [1, 3] and np.asarray(numbers["alpha=0"]["per_seed"]).shape == (2, 2)
    plt.close(fig)
    frame = study.verdict_frame(rows)  # one short row per verdict, numbers in columns
    assert len(frame) == len(rows) and frame.index.names == ["claim", "variant"] and "marks" not in frame  # one model
    assert list(frame["estimate"]) == pytest.approx([r.estimate for r in rows])
    assert all(";" not in x and "[" not in x for x in frame["reason"])
    mde = study.mde_table(rows)  # every seed test: sd, MDE and the seeds the paper's 0.0056 nats would need
    assert len(mde) == sum(r.details.get("sd") is not None for r in rows) > 0
    need = mde.filter(like="seeds for").iloc[:, 0]
    assert list(need) == [int(np.ceil(((1.959964 + 0.841621) * sd / np.log(28.62 / 28.46)) ** 2)) for sd in mde["sd"]]


def test_first_reason_is_the_top_level_clause_without_numbers():
    why = ("not a mitigation: the loss is materially worse (+0.407 nats [0.36, 0.454]; t-interval [0.36, 0.454] "
           "excludes 0); underpowered: MDE 0.2 > margin 0.05")
    assert study._first_reason(why) == "not a mitigation: the loss is materially worse"
    assert study._first_reason("seeds disagree: 2 of 5 on the claimed side; underpowered") == \
        "seeds disagree: 2 of 5 on the claimed side"
    assert study._first_reason("") == ""


def test_best_cut_compare_and_c3_rows(grid_runs):
    P, _, finals = grid_runs
    cut = study.best_cut(finals, P)
    assert cut["variant"] in {"baseline", "alpha=0 @ block 1", "alpha=0 @ block 3"}
    assert study.cut_candidates(P) == ["baseline", "alpha=0 @ block 1", "alpha=0 @ block 3"]
    table = study.compare_table(finals, P, cut)
    assert table.loc["baseline", "vs baseline"] == 0 and {"learned", "learned-token"} <= set(table.index)
    rows = study.c3_rows(finals, P)
    assert [r.claim_id for r in rows] == ["C3-training.concentrates", "C3-training.concentrates.material",
                                          "C3-training.beats-baseline", "C3-training.beats-best-cut"] * 2
    # seeds are the unit; the gates are compared with every candidate, no selection step
    assert rows[2].n == 2 and set(rows[3].details["candidates"]) == set(study.cut_candidates(P))
    fig, _ = study.compare_panel(table, P)
    plt.close(fig)
    alphas = study.alpha_table(finals, P)
    assert alphas.loc[("learned", 3), "attenuation"] == pytest.approx(
        1 - np.mean([finals[("learned", s)]["alphas"][3] for s in (0, 1)]), abs=1e-4)


def test_benchmarks_table_with_chance_and_c4(grid_runs):
    P, runs, _ = grid_runs
    bench = study.benchmarks(runs, P, ["baseline", "learned"], verbose=False)
    c = bench["baseline"]["correct"]["arc-easy"]
    assert c.shape == (2, 6) and set(np.unique(c)) <= {0.0, 1.0}
    kept, total = bench["baseline"]["kept"]["arc-easy"]
    assert 6 <= kept <= total
    assert 0.2 <= bench["baseline"]["chance"]["arc-easy"] <= 0.34  # mostly 4 choices
    table = study.benchmark_table(bench, P)
    assert "chance (uniform guess)" in table.index and list(table.columns) == ["arc-easy (acc)"]
    import json

    numbers = study.benchmark_numbers(table)
    json.dumps(numbers, allow_nan=False)
    assert numbers["variant"][-2:] == ["chance (uniform guess)", "baseline above chance? (95%)"]
    assert numbers["items"] == {"arc-easy": 6}
    assert table.loc["baseline above chance? (95%)", "arc-easy (acc)"] in ("yes", "no: says nothing at this scale")
    rows = study.c4_rows(bench, P)
    assert [(r.claim_id, r.variant) for r in rows] == [("C4.benchmarks", "learned")]


def test_lens_c1_and_misalignment(grid_runs):
    P, runs, _ = grid_runs
    names = study.lens_variants(P)
    assert names == [v.name for v in study.grid(P)]
    lenses = study.lens_runs(runs, P, verbose=False)
    assert set(lenses) == {(n, s) for n in names for s in (0, 1)}
    unigrams = study.arm_unigrams(lenses, runs, P)
    assert set(unigrams) == {(n, s) for n in study.arms(P) for s in (0, 1)}
    fig, numbers = study.regimes_panel(lenses, unigrams, P)
    assert set(numbers) == {"gemma", "nanogpt"} and set(numbers["gemma"]) == {"0", "1"}
    assert len(numbers["gemma"]["0"]["next"]) == P.train_layers + 1
    plt.close(fig)
    summary, per_seed = study.c1_rows(lenses, unigrams, P)
    assert {"C1.early", "C1.middle", "C1.late", "C1", "C1.depth"} <= {r.claim_id for r in summary}
    k = len(summary) // 2  # rows per arm
    assert len(per_seed) == 2 * 2 * k and all(len(r.per_seed) == 2 for r in summary)
    assert study.c1_seed_table(per_seed).shape[0] == 4
    recipes = study.recipe_table(numbers, P, runs)
    assert list(recipes.index) == ["gemma", "nanogpt"] and set(recipes["seeds"]) == {2}
    h1 = [numbers["gemma"][s]["input"][1] for s in ("0", "1")]
    assert recipes.loc["gemma", "input top-1 at h_1"] == pytest.approx(np.mean(h1))
    assert recipes.loc["gemma", "max over seeds"] == pytest.approx(max(h1))
    assert recipes.loc["nanogpt", "val loss"] == pytest.approx(
        np.mean([T.read_summary(runs[(study.contrast_name(P), s)])["val_loss"] for s in (0, 1)]))
    switch = study.switch_table([study.baseline_switch(runs, P)])  # the scale the training verdicts speak for
    assert len(switch) == 1 and switch["unit"].iloc[0] == "seeds" and switch["n"].iloc[0] == 2
    assert switch["blocks"].iloc[0] == P.train_layers and {"S1", "S1 lo", "S1 hi", "outcome"} <= set(switch.columns)
    table = study.persistence_table(lenses, P)
    assert table.loc["alpha=0 @ block 3", "states"] == "none" and table.loc["learned", "states"] == "h_1..h_3"
    assert table.loc["alpha=0 @ block 1", "states"] == "h_2..h_3"
    mis = study.misalignment_rows(lenses, P)
    by = {(r.variant, r.claim_id): r for r in mis}
    assert by[("alpha=0 @ block 1", "C2-training.cut-misalignment")].details["after_layers"] == [2, 3]
    assert by[("alpha=0 @ block 3", "C2-training.cut-misalignment")].details["why"].startswith("not applicable")
    assert "forces" in by[("alpha=0 @ block 1", "C2-training.cut-emergence-shift")].details["why"]
    assert ("learned", "C3-training.emergence-shift") in by
    assert ("learned", "C3-training.misalignment") in by and "loss_change" in by[("learned", "C3-training.misalignment")].details
    fig, numbers = study.persistence_panel(lenses, P)
    assert set(numbers) == {"baseline", "alpha=0 @ block 1", "learned", "learned-token"}
    plt.close(fig)
