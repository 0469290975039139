import pytest

from residshift.core import profiles


def test_profiles_share_their_keys():
    keys = {name: set(values) for name, values in profiles.PROFILES.items()}
    assert set(keys) == {"smoke", "class", "default", "paper"}
    assert keys["smoke"] == keys["class"] == keys["default"] == keys["paper"]


def test_class_is_the_default_on_the_embedded_models_at_lecture_sizes():
    from residshift.core.models import EMBEDDED

    c, d = profiles.resolve("class"), profiles.resolve("default")
    assert c.models == d.models and set(c.models) <= set(EMBEDDED) and c.extra_models == []
    assert c.device == "cpu" and not c.show_solutions
    # 00-04 in minutes: a few windows, no tuned lens (03 leaves it to default), a tiny causal pass
    assert 4 <= c.lens_windows <= 8 and c.lens_positions == d.lens_positions
    assert 1 <= c.lens_check_windows <= c.lens_windows
    assert c.ppl_windows <= 8 and c.tuned_steps == 0 and d.tuned_steps > 0
    assert c.tuned_lstsq_windows <= c.tuned_train_windows and c.causal_windows <= 4
    # 04 at class still computes what it teaches: the cut outright (alpha = 0) at every block, block 0
    # included, and the alpha C2.layer-sensitive probes, on at least a few windows
    from residshift.analysis.verdicts import PROBE_ALPHA

    assert {0.0, PROBE_ALPHA, 1.0} <= set(c.sweep_alphas) and c.sweep_windows >= 4
    assert profiles.CLASS_NOTEBOOKS == ("00", "01", "02", "03", "04")
    # 04-10: every count at most the default's (small but real: the same corpora and models)
    for key, value in vars(c).items():
        if isinstance(value, int) and not isinstance(value, bool) and isinstance(getattr(d, key), int):
            assert value <= getattr(d, key), key
        if key.endswith("_corpus") or key.endswith("_split"):
            assert value == getattr(d, key), key


def test_resolve_fills_none_from_the_profile():
    p = profiles.resolve("smoke", seed=None, ppl_windows=9)
    assert p.seed == profiles.get("smoke")["seed"] and p.ppl_windows == 9 and p.profile == "smoke"
    with pytest.raises(KeyError, match="not in profile"):
        profiles.resolve("smoke", no_such_parameter=1)


def test_smoke_uses_only_in_process_models():
    from residshift.core.models import TINY

    assert set(profiles.get("smoke")["models"]) <= set(TINY)


def test_a_key_in_two_sections_is_rejected(monkeypatch):
    sections = {k: v for k, v in profiles.SECTIONS.items()}
    sections["clash"] = {p: {"seed": 1} for p in profiles.PROFILE_NAMES}
    monkeypatch.setattr(profiles, "SECTIONS", sections)
    with pytest.raises(ValueError, match="seed"):
        profiles._build()


def test_resolve_takes_the_injected_profile_key_and_stays_strict():
    by_name = profiles.resolve(profile="smoke", seed=3, models=None)
    assert by_name.profile == "smoke" and by_name.seed == 3
    assert by_name.models == profiles.get("smoke")["models"]
    assert vars(profiles.resolve("smoke", profile="smoke")) == vars(profiles.resolve("smoke"))
    with pytest.raises(ValueError, match="two profiles"):
        profiles.resolve("smoke", profile="paper")
    with pytest.raises(KeyError, match="not in profile"):
        profiles.resolve(profile="smoke", tuned_stepz=4)
    with pytest.raises(TypeError, match="profile name"):
        profiles.resolve(seed=1)


def test_unknown_profile_is_one_readable_line():
    with pytest.raises(KeyError) as err:
        profiles.resolve("nope")
    text = str(err.value)
    assert text == "unknown profile 'nope'; choose one of smoke, class, default, paper"


def test_from_namespace_takes_the_declared_keys_only():
    from residshift.core import profiles

    P = profiles.from_namespace({"profile": "smoke", "seed": 3, "models": None, "x": 1, "_": None})
    assert P.seed == 3 and P.models == profiles.get("smoke")["models"] and not hasattr(P, "x")
    import pytest
    with pytest.raises(KeyError, match="parameters cell"):
        profiles.from_namespace({"seed": 1})


def test_a_notebook_reads_only_what_its_parameters_cell_declares():
    """What replaced the runner's static guess of the keys a notebook reads: reading an undeclared
    key fails at once, naming the line to add (the smoke run of every notebook exercises it)."""
    P = profiles.from_namespace({"profile": "smoke", "seed": None, "lens_windows": 2})
    assert (P.seed, P.lens_windows, P.profile) == (0, 2, "smoke")
    with pytest.raises(profiles.UndeclaredParameterError, match="add `gate_steps = None` to the cell tagged"):
        P.gate_steps
    with pytest.raises(AttributeError) as err:  # not a profile key: a plain AttributeError
        P.no_such_thing
    assert not isinstance(err.value, profiles.UndeclaredParameterError)
    assert getattr(P, "gate_steps", "absent") == "absent"  # hasattr / getattr with a default still work
    assert vars(P) == {"seed": 0, "lens_windows": 2, "profile": "smoke"}


# --------------------------------------------------------------------------------------------
# Stage configs: one rule maps a config's fields to profile keys
# --------------------------------------------------------------------------------------------


def test_stage_keys_follow_one_rule():
    from residshift.attenuate.gates import GateConfig
    from residshift.attenuate.sweep import SweepConfig
    from residshift.measure.evaluate import EvalConfig
    from residshift.measure.lens import LensPass
    from residshift.train.trainer import TrainConfig

    assert profiles.stage_keys(SweepConfig) == {
        "corpus": "sweep_corpus", "split": "sweep_split", "window": "sweep_window", "n_windows": "sweep_windows",
        "batch_size": "sweep_batch", "alphas": "sweep_alphas", "seed": "seed"}
    gate = profiles.stage_keys(GateConfig)
    assert gate["n_train"] == "gate_train" and gate["n_heldout"] == "gate_heldout" and "kind" not in gate
    assert profiles.stage_keys(EvalConfig) == {"context": "harness_context", "stride": "harness_stride",
                                               "batch_size": "harness_batch", "seed": "seed"}
    train = profiles.stage_keys(TrainConfig)
    assert train["batch_size"] == "train_batch" and train["layers"] == "train_layers" and "mode" not in train
    # one class, several prefixes: the lens windows of 01-03 and of 04-05
    assert profiles.stage_keys(LensPass, "lens")["n"] == "lens_windows"
    assert profiles.stage_keys(LensPass, "atten_lens") == {"window": "atten_lens_window", "n": "atten_lens_windows",
                                                           "positions": "atten_lens_positions", "seed": "seed"}
    with pytest.raises(TypeError, match="pass the profile keys' prefix"):
        profiles.stage_keys(LensPass)


def test_stage_builds_a_config_from_a_name_a_dict_or_a_namespace():
    from residshift.attenuate.sweep import SweepConfig

    P = profiles.resolve("smoke", sweep_windows=5)
    a = profiles.stage(SweepConfig, P, model="m")
    assert (a.model, a.n_windows, a.batch_size, a.alphas) == ("m", 5, P.sweep_batch, tuple(P.sweep_alphas))
    assert profiles.stage(SweepConfig, vars(P), model="m") == a
    assert profiles.stage(SweepConfig, "smoke", model="m", n_windows=5) == a  # a field given wins
    with pytest.raises(TypeError, match="has no field"):
        profiles.stage(SweepConfig, P, model="m", windows=3)
    values = profiles.get("smoke")
    del values["sweep_batch"]
    with pytest.raises(KeyError, match="reads the profile key 'sweep_batch'.*section 'attenuate'"):
        profiles.stage(SweepConfig, values, model="m")
    declared = profiles.from_namespace({"profile": "smoke", "sweep_corpus": None})
    with pytest.raises(profiles.UndeclaredParameterError, match="sweep_split"):
        profiles.stage(SweepConfig, declared, model="m")


# --------------------------------------------------------------------------------------------
# parameters_table: the setup cell's view of the resolved parameters
# --------------------------------------------------------------------------------------------


def _cell_globals(**declared):
    """A notebook's globals at its setup cell: IPython's names, the parameters cell's declarations
    (in order), then the setup cell's imports."""
    ns = {"__name__": "__main__", "_": None, "In": [], "Out": {}}
    ns.update(declared)
    ns.update({"np": object(), "profiles": profiles, "P": None})
    return ns


def test_parameters_table_lists_the_declared_keys_in_order():
    ns = _cell_globals(profile="smoke", seed=None, sweep_alphas=None, models=None, device=None)
    table = profiles.parameters_table(ns)
    assert list(table.columns) == ["parameter", "value", "source"]
    assert list(table["parameter"]) == ["seed", "sweep_alphas", "models", "device"]


def test_parameters_table_shows_the_profile_value_of_a_none_key():
    table = profiles.parameters_table(_cell_globals(profile="smoke", models=None, sweep_alphas=None))
    row = table.set_index("parameter")
    smoke = profiles.get("smoke")
    assert row.loc["models", "value"] == smoke["models"]
    assert row.loc["sweep_alphas", "value"] == smoke["sweep_alphas"]
    assert set(row["source"]) == {"profile smoke"}


def test_parameters_table_shows_an_override_and_its_source():
    ns = _cell_globals(profile="default", seed=7, models=["tiny-llama"], device=None,
                       ppl_windows=profiles.get("default")["ppl_windows"])  # what the runner injects
    row = profiles.parameters_table(ns).set_index("parameter")
    assert row.loc["seed", "value"] == 7 and row.loc["seed", "source"] == "override"
    assert row.loc["models", "value"] == ["tiny-llama"] and row.loc["models", "source"] == "override"
    assert row.loc["device", "source"] == "profile default"
    assert row.loc["ppl_windows", "source"] == "profile default"  # the profile's own value, injected


def test_parameters_table_ignores_names_that_are_not_profile_keys():
    ns = _cell_globals(profile="smoke", seed=None, not_a_key=3)
    ns["lm"] = object()
    assert list(profiles.parameters_table(ns)["parameter"]) == ["seed"]


def test_parameters_table_needs_a_profile_like_from_namespace():
    with pytest.raises(KeyError, match="parameters cell") as err:
        profiles.parameters_table({"seed": None, "models": None})
    with pytest.raises(KeyError) as same:
        profiles.from_namespace({"seed": None, "models": None})
    assert str(err.value) == str(same.value)
    with pytest.raises(KeyError, match="unknown profile"):
        profiles.parameters_table({"profile": "nope", "seed": None})


def test_parameters_table_leaves_the_namespace_and_p_alone():
    import copy

    ns = _cell_globals(profile="smoke", models=["tiny-llama"], seed=None, causal_alphas=None)
    before = copy.deepcopy({k: v for k, v in ns.items() if k not in ("np", "profiles")})
    P = profiles.from_namespace(ns)
    vars_before = copy.deepcopy(vars(P))
    table = profiles.parameters_table(ns)
    table["value"].iloc[0].append("mutated")  # the table holds copies
    assert {k: v for k, v in ns.items() if k not in ("np", "profiles")} == before
    assert vars(P) == vars_before and P.models == ["tiny-llama"]


def test_parameters_table_shows_whole_values():
    smoke = profiles.get("smoke")
    table = profiles.parameters_table(_cell_globals(profile="smoke", lens_sentences=None,
                                                    harness_limits=None, device=None))
    html, text = table._repr_html_(), repr(table)
    for shown in (html.replace("&#39;", "'"), text):
        assert "..." not in shown
        assert repr(smoke["lens_sentences"]) in shown and repr(smoke["harness_limits"]) in shown
        assert "'cpu'" in shown  # written as in a cell
    assert "<th></th>" not in html  # no row numbers


def test_importing_profiles_does_not_import_pandas():
    import subprocess
    import sys

    code = "import sys, residshift.core.profiles; print('pandas' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_the_command_line_shows_each_stages_config(capsys):
    from residshift.tools.cli import main

    assert main(["profiles", "smoke", "--stages"]) == 0
    out = capsys.readouterr().out
    assert "SweepConfig (sweep_*; notebooks 04-05)" in out
    assert f"    n_windows <- sweep_windows = {profiles.get('smoke')['sweep_windows']!r}" in out
    assert "    batch_size <- train_batch = 8" in out and "    seed <- seed = 0" in out


# --------------------------------------------------------------------------------------------
# Value checks where a notebook reads its parameters (issue 50): papermill by hand and JupyterLab
# get the runner's -p check, one line before any work
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("key, value, says", [
    ("ppl_windows", "abc", "ppl_windows must be an integer of at least 1"),  # papermill -p ppl_windows abc
    ("ppl_windows", 0, "ppl_windows must be an integer of at least 1"),
    ("ppl_windows", -1, "ppl_windows must be an integer of at least 1"),
    ("seed", 1.5, "seed must be an integer of at least 0"),
    ("seed", True, "seed must be an integer of at least 0"),
    ("models", "tiny-llama", "models must be a list of strings"),  # a string where a list is expected
    ("causal_alphas", ["a"], "causal_alphas must be a list of numbers"),
    ("eval_items", 0, "eval_items must be an integer of at least 1"),  # None there takes the profile's value
])
def test_a_notebooks_namespace_gets_the_runners_value_checks(key, value, says):
    ns = _cell_globals(**{"profile": "smoke", "seed": None, "models": None, "ppl_windows": None, key: value})
    with pytest.raises(profiles.ParameterError) as err:
        profiles.from_namespace(ns)
    text = str(err.value)
    assert says in text and "\n" not in text and "ask for fewer" not in text, text
    assert f"the smoke profile's value: {key} = {profiles.get('smoke')[key]!r}" in text, text


def test_the_values_the_runner_allows_pass_in_a_notebook_too():
    P = profiles.from_namespace(_cell_globals(profile="default", tuned_lr=1, causal_alphas=[0, 0.5],
                                              train_warmup=0, lens_positions=3, models=("tiny-llama",),
                                              harness_limits={"piqa": 5}, ppl_windows=None))
    assert (P.tuned_lr, P.train_warmup, P.lens_positions) == (1, 0, 3)
    assert P.ppl_windows == profiles.get("default")["ppl_windows"]


@pytest.mark.parametrize("value", [0, -1, 1.5, "x", True, [1], None])
def test_the_notebook_and_the_runner_refuse_the_same_values(value):
    """One check, two spellings: for every profile key, a notebook refuses exactly what ``-p`` refuses
    (None aside: in a notebook it takes the profile's value)."""
    from residshift.tools import runner

    for key in sorted(profiles.KEYS):
        try:
            runner.check_override_values("default", {key: value})
            runner_ok = True
        except runner.UsageError:
            runner_ok = False
        try:
            profiles.resolve("default", **{key: value})
            notebook_ok = True
        except profiles.ParameterError:
            notebook_ok = False
        assert notebook_ok == (runner_ok or value is None), (key, value)


def test_papermill_by_hand_stops_at_the_setup_cell_with_the_one_line(tmp_path):
    """``papermill notebooks/00-models-and-data.ipynb out.ipynb -p profile smoke -p ppl_windows 0``: the
    setup cell raises the one line; no cell after it runs (before: a ValueError deep in data.cut_windows
    advising to "ask for fewer" windows, after the models were loaded)."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    from residshift.core.paths import REPO_ROOT

    out = tmp_path / "out.ipynb"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "RESIDSHIFT_RESULTS": str(tmp_path / "results"),
           "RESIDSHIFT_FIGURES": str(tmp_path / "figures")}
    papermill = Path(sys.executable).parent / "papermill"
    proc = subprocess.run([str(papermill), str(REPO_ROOT / "notebooks" / "00-models-and-data.ipynb"), str(out),
                           "-p", "profile", "smoke", "-p", "ppl_windows", "0", "--cwd", str(REPO_ROOT / "notebooks")],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode != 0
    line = ("parameter ppl_windows = 0: ppl_windows must be an integer of at least 1 (the smoke profile's value: "
            "ppl_windows = 4; None takes it)")
    assert f"ParameterError: {line}" in proc.stderr, proc.stderr[-2000:]
    cells = [c for c in json.loads(out.read_text())["cells"] if c["cell_type"] == "code"]
    failed = [i for i, c in enumerate(cells) if any(o.get("output_type") == "error" for o in c.get("outputs", []))]
    assert len(failed) == 1 and "profiles.from_namespace(globals())" in "".join(cells[failed[0]]["source"])
    assert [o["evalue"] for o in cells[failed[0]]["outputs"] if o.get("output_type") == "error"] == [line]
    assert all(c.get("execution_count") is None for c in cells[failed[0] + 1:])  # nothing after it ran
    assert not (tmp_path / "results").exists()


def test_the_makefile_runs_the_class_notebooks_the_profiles_name():
    """`make study PROFILE=class` runs profiles.CLASS_NOTEBOOKS (the book and `make class-key` read that tuple)."""
    import re
    from pathlib import Path

    make = (Path(__file__).resolve().parents[1] / "Makefile").read_text()
    listed = re.search(r"^CLASS_NOTEBOOKS := (.+)$", make, re.M)
    assert listed and tuple(listed.group(1).split()) == profiles.CLASS_NOTEBOOKS
    assert "STUDY_ONLY ?= $(if $(filter class,$(PROFILE)),$(CLASS_NOTEBOOKS))" in make


def test_no_tuned_lens_is_a_value_a_notebook_accepts():
    """tuned_steps = 0 (the class profile's) is allowed wherever values are checked; negative is not."""
    assert profiles.value_problem("tuned_steps", 0) is None
    assert profiles.value_problem("tuned_steps", -1) == "an integer of at least 0"
