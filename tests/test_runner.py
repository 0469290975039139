import contextlib
import json
import shutil
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from residshift.core import profiles, records
from residshift.tools import runner


def _notebook(path, params_src, body_src):
    nb = new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    cells = []
    if params_src is not None:
        cell = new_code_cell(params_src)
        cell.metadata["tags"] = ["parameters"]
        cells.append(cell)
    cells.append(new_code_cell(body_src))
    nb.cells = cells
    nbformat.write(nb, path)


@pytest.fixture
def books(tmp_path):
    folder = tmp_path / "notebooks"
    folder.mkdir()
    out = tmp_path / "seen.json"
    _notebook(folder / "00-first.ipynb", 'profile = "default"\nppl_windows = None\nseed = None',
              f"import json, os\njson.dump({{'profile': profile, 'ppl_windows': ppl_windows, 'seed': seed, "
              f"'env': os.environ.get('RESIDSHIFT_PROFILE'), 'omp': os.environ.get('OMP_WAIT_POLICY')}}, "
              f"open({str(out)!r}, 'w'))")
    _notebook(folder / "01-second.ipynb", 'profile = "default"', "x = 1")
    (folder / "notes.ipynb").write_text("{}")  # not NN-name: ignored
    return folder, out


def test_runner_injects_profile_values_and_overrides(books, tmp_path, monkeypatch):
    folder, seen = books
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    done = runner.run_notebooks("smoke", only=["00"], folder=folder, output_dir=tmp_path / "out",
                                overrides={"seed": 7}, log=lambda *a, **k: None)
    assert [p.name for p in done] == ["00-first.ipynb"]
    got = json.loads(seen.read_text())
    assert got == {"profile": "smoke", "ppl_windows": profiles.get("smoke")["ppl_windows"],
                   "seed": 7, "env": "smoke", "omp": "PASSIVE"}  # kernels' OpenMP threads sleep, not spin
    assert (tmp_path / "out" / "00-first.ipynb").is_file()
    import os

    assert "OMP_WAIT_POLICY" not in os.environ  # the runner's process is left as it was


def test_kernels_import_this_checkouts_package(books, tmp_path, monkeypatch):
    """A shadowing package earlier on the path (another checkout's, say) does not reach the kernels."""
    folder, _ = books
    fake = tmp_path / "elsewhere" / "residshift"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    monkeypatch.setenv("PYTHONPATH", str(fake.parent))
    seen = tmp_path / "pkg.txt"
    _notebook(folder / "02-third.ipynb", 'profile = "default"',
              f"import residshift\nopen({str(seen)!r}, 'w').write(residshift.__file__)")
    runner.run_notebooks("smoke", only=["02"], folder=folder, output_dir=tmp_path / "out",
                         log=lambda *a, **k: None, record=False)
    from residshift.core.paths import REPO_ROOT

    assert Path(seen.read_text()).resolve().is_relative_to(REPO_ROOT / "residshift")
    import os

    assert os.environ["PYTHONPATH"] == str(fake.parent)  # restored for the runner's own process


def test_runner_runs_in_order(books, tmp_path):
    folder, _ = books
    done = runner.run_notebooks("smoke", folder=folder, output_dir=tmp_path / "out",
                                log=lambda *a, **k: None)
    assert [p.name for p in done] == ["00-first.ipynb", "01-second.ipynb"]
    from residshift.tools import book

    for path in done:  # papermill's finished copies are whole runs to the book; no half-run copy is left
        nb = nbformat.read(path, as_version=4)
        assert book.unfinished(nb) is None and nb.metadata["papermill"]["output_path"] == str(path)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["00-first.ipynb", "01-second.ipynb"]


def test_broken_notebook_fails_loudly_and_keeps_the_copy(books, tmp_path):
    folder, _ = books
    _notebook(folder / "02-broken.ipynb", 'profile = "default"', "raise ValueError('deliberate')")
    with pytest.raises(runner.RunFailed) as err:
        runner.run_notebooks("smoke", only=["02"], folder=folder, output_dir=tmp_path / "out",
                             log=lambda *a, **k: None)
    text = str(err.value)
    assert "02-broken.ipynb" in text and "cell" in text and "deliberate" in text
    assert (tmp_path / "out" / "02-broken.ipynb").is_file()
    from residshift.tools import book

    nb = nbformat.read(tmp_path / "out" / "02-broken.ipynb", as_version=4)  # marked: the book shows it failed
    assert "deliberate" in book.execution_error(nb) and book.unfinished(nb) is None
    assert not runner.partial_path(tmp_path / "out" / "02-broken.ipynb").exists()


def test_notebook_without_parameters_cell_is_refused(books, tmp_path):
    folder, _ = books
    _notebook(folder / "03-noparams.ipynb", None, "x = 1")
    with pytest.raises(runner.RunFailed, match="parameters"):
        runner.run_notebooks("smoke", only=["03"], folder=folder, output_dir=tmp_path / "out",
                             log=lambda *a, **k: None)


def test_unknown_selection_profile_and_override_syntax(books):
    folder, _ = books
    with pytest.raises(runner.RunFailed, match="no notebook matches"):
        runner.list_notebooks(folder, ["42"])
    with pytest.raises(runner.UsageError, match="unknown profile 'huge'; choose one of smoke"):
        runner.run_notebooks("huge", folder=folder)
    assert profiles.parse_overrides(["n=3", "models=[\"a\"]", "name=x"]) == {"n": 3, "models": ["a"], "name": "x"}
    with pytest.raises(profiles.OverrideError, match="key=value"):
        profiles.parse_overrides(["oops"])


def test_cli_exits_nonzero_on_failure(books, monkeypatch, capsys):
    from residshift.tools.cli import main

    folder, _ = books
    _notebook(folder / "02-broken.ipynb", 'profile = "default"', "1/0")
    monkeypatch.setenv("RESIDSHIFT_NOTEBOOKS", str(folder))
    assert main(["run", "--profile", "smoke", "--only", "02"]) == 1
    assert "02-broken.ipynb" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# Strict parameters
# ---------------------------------------------------------------------------------------------


def test_an_override_no_selected_notebook_declares_is_an_error(books, tmp_path):
    folder, seen = books
    quiet = dict(folder=folder, output_dir=tmp_path / "out", log=lambda *a, **k: None)
    with pytest.raises(runner.UsageError) as err:
        runner.run_notebooks("smoke", only=["01"], overrides={"ppl_windows": 2, "tuned_steps": 3}, **quiet)
    text = str(err.value)
    assert "ppl_windows, tuned_steps" in text and "valid keys: (none)" in text
    assert "ppl_windows is declared by 00-first (add it with --only)" in text
    with pytest.raises(runner.UsageError, match="valid keys: ppl_windows, seed"):
        runner.run_notebooks("smoke", only=["00"], overrides={"sed": 3}, **quiet)
    with pytest.raises(runner.UsageError, match="--profile"):
        runner.run_notebooks("smoke", overrides={"profile": "paper"}, **quiet)
    assert not seen.exists() and not (tmp_path / "out").exists(), "nothing ran"
    runner.run_notebooks("smoke", overrides={"ppl_windows": 2}, **quiet)  # declared by 00: fine
    assert json.loads(seen.read_text())["ppl_windows"] == 2


@pytest.mark.parametrize("argv,says", [
    (["run", "--profile", "nope"], "unknown profile 'nope'"),
    (["run", "--profile", "smoke", "--only", "42"], "no notebook matches ['42']"),
    (["run", "--profile", "smoke", "-p", "tuned_steps=3"], "-p tuned_steps: no selected notebook"),
    (["run", "--profile", "smoke", "-p", "oops"], "key=value"),
    (["run", "--profile", "nope", "--dry-run"], "unknown profile 'nope'"),
    (["profiles", "nope"], "unknown profile 'nope'"),
])
def test_cli_bad_requests_are_one_line_with_status_2(books, monkeypatch, capsys, argv, says):
    from residshift.tools.cli import main

    folder, _ = books
    monkeypatch.setenv("RESIDSHIFT_NOTEBOOKS", str(folder))
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


# ---------------------------------------------------------------------------------------------
# Measured run times and memory; the dry run
# ---------------------------------------------------------------------------------------------


def test_each_run_records_its_own_wall_time_and_peak_memory(tmp_path, monkeypatch):
    """The second, small notebook must not inherit the first one's peak (getrusage would)."""
    folder = tmp_path / "notebooks"
    folder.mkdir()
    # the array lives for a second: the poller (every 0.2 s) reads the kernel's high-water mark while the
    # kernel is alive; a kernel that allocates, frees and exits between two polls (a loaded CI machine) was missed
    body = "import time\nimport numpy as np\na = np.ones({} * 2**17)  # MiB of float64\ntime.sleep(1)\ndel a"
    computes = ("\nimport os, pathlib\nr = pathlib.Path(os.environ['RESIDSHIFT_RESULTS']) / 'kind'\n"
                "r.mkdir(parents=True, exist_ok=True)\n(r / 'key.pt').write_text('result')")
    _notebook(folder / "00-big.ipynb", 'profile = "default"', body.format(400) + computes)
    _notebook(folder / "01-small.ipynb", 'profile = "default"', body.format(1))
    monkeypatch.setenv("RESIDSHIFT_FIGURES", str(tmp_path / "figures"))
    monkeypatch.setenv("RESIDSHIFT_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("RESIDSHIFT_CACHE", str(tmp_path / "cache"))  # no prepared model: a fresh clone
    runner.run_notebooks("default", folder=folder, output_dir=tmp_path / "out", log=lambda *a, **k: None)
    runs = records.load_runs(tmp_path / "figures" / "RUNS.json")
    big, small = runs["default"]["00-big"], runs["default"]["01-small"]
    assert big["peak_rss_mib"] >= 400 and small["peak_rss_mib"] < big["peak_rss_mib"] - 300
    assert big["wall_s"] > 0 and small["wall_s"] > 0
    assert (big["results_written"], small["results_written"]) == (1, 0)  # computed vs only reused
    assert big["machine"]["cpus"] >= 1 and isinstance(big["code_dirty"], bool) and big["machine"]["cpu"]
    # where the time went: the executed copy's cells, longest first (the big array's cell leads)
    assert big["slowest_cells"][0]["code"].startswith("import time") and big["slowest_cells"][0]["s"] >= 0
    assert len(big["slowest_cells"]) <= runner.SLOWEST_CELLS
    assert big["device"] == profiles.get("default")["device"]  # the profile's, though undeclared
    assert not [p for p in (tmp_path / "figures").iterdir() if p.name.startswith(".")]
    # both ran in one invocation that started from empty caches
    assert big["invocation"] == small["invocation"] and records.is_cold(big)
    assert big["invocation"]["notebooks"] == ["00", "01"] and "cold_run" not in big
    assert big["invocation"]["models_prepared_at_start"] == []
    # a later partial rerun (the results cache now holds 00's result) replaces the entry but keeps the cold one
    runner.run_notebooks("default", only=["01"], folder=folder, output_dir=tmp_path / "out", log=lambda *a, **k: None)
    again = records.load_runs(tmp_path / "figures" / "RUNS.json")["default"]
    assert not records.is_cold(again["01-small"]) and again["01-small"]["cold_run"] == small
    assert again["00-big"] == big


def test_the_last_run_from_empty_caches_survives_warm_reruns(tmp_path, monkeypatch):
    monkeypatch.setenv("RESIDSHIFT_FIGURES", str(tmp_path / "figures"))
    cold = lambda s: {"wall_s": s, "invocation": {"from_empty_caches": True}}  # noqa: E731
    warm = lambda s: {"wall_s": s, "invocation": {"from_empty_caches": False}}  # noqa: E731
    records.record_run("default", "00-x", cold(100.0))
    records.record_run("default", "00-x", warm(5.0))
    records.record_run("default", "00-x", warm(6.0))
    e = records.load_runs()["default"]["00-x"]
    assert e["wall_s"] == 6.0 and e["cold_run"] == cold(100.0), "kept through two warm reruns"
    records.record_run("default", "00-x", cold(90.0))
    assert records.load_runs()["default"]["00-x"] == cold(90.0), "a newer cold run replaces it"


def test_dry_run_estimates_without_running(books, tmp_path, capsys):
    folder, seen = books
    _notebook(folder / "02-lens.ipynb", 'profile = "default"\nlens_windows = None\nlens_window = None\n'
              'tuned_steps = None\ntuned_batch = None\ntuned_window = None\ntuned_lr = None',
              "raise SystemExit('ran')")
    out = runner.dry_run("smoke", folder=folder)
    P = profiles.get("smoke")
    tokens = P["lens_windows"] * P["lens_window"]
    layers = sum(runner.model_layers(m) for m in P["models"])
    assert f"= {runner._n(tokens * layers)} token-layers" in out["02-lens"][0]
    per_fit = P["tuned_steps"] * P["tuned_batch"] * P["tuned_window"]
    assert (f"tuned fits: {len(P['models'])} over the models, {P['tuned_steps']} steps x "
            f"{P['tuned_batch']} x {P['tuned_window']} tokens") in out["02-lens"][1]
    assert f"{runner._n(per_fit)} training tokens per fit" in out["02-lens"][1]
    assert out["01-second"] == ["(no sized work)"]
    assert "02-lens" in capsys.readouterr().out
    assert not seen.exists() and not (tmp_path / "build").exists()


def test_dry_run_counts_training_tokens_from_scratch():
    P = {"models": [], "train_tokens": 600_000, "train_lr": 3e-3, "train_layers": 6, "train_width": 128,
         "train_seeds": [0, 1]}
    (line,) = runner.estimate_work(set(P), P, {}, grid=(5, 2))
    assert line.startswith("the training grid: 5 configurations x 2 seeds = 10 runs of 600.0k training tokens, "
                           "6.0M in all")
    assert f"~{runner._n(12 * 6 * 128**2)} block weights" in line
    assert runner._n(4.2e18) == "4.2E" and runner._n(999) == "999"


def test_the_dry_run_counts_the_grid_and_the_ladder_as_their_commands_do():
    """`run --dry-run` and `train-grid --dry-run` agree on the grid's tokens at every profile (the
    grid's own code counts it); the ladder's notebook counts the ladder's rungs, not the grid."""
    from residshift.core import profiles
    from residshift.tools import grid_launcher

    for name in ("smoke", "default", "paper"):
        P = profiles.get(name)
        n_cfg, n_seeds = runner.grid_size(P)
        planned = grid_launcher.plan(profiles.resolve(name))
        assert n_cfg * n_seeds == len(planned.runs)
        line = runner.estimate_work({"train_tokens"}, P, {}, grid=(n_cfg, n_seeds))[0]
        assert f"{runner._n(sum(r.tokens for r in planned.runs))} in all" in line, (name, line)
    P = profiles.get("default")
    runs, toks = runner.ladder_tokens(P)
    (line,) = runner.estimate_work({"train_tokens", "ladder_shapes"}, P, {})
    assert runs == 9 and toks == 3 * 350 * 8 * 128 * 21 and line.startswith("the scale ladder: 9 runs")


def test_results_written_counts_new_and_rewritten_files(tmp_path):
    (tmp_path / "kind").mkdir()
    old = tmp_path / "kind" / "old.pt"
    old.write_text("a")
    before = runner.results_snapshot(tmp_path)
    assert runner.results_written(before, runner.results_snapshot(tmp_path)) == 0
    import os

    os.utime(old, ns=(before[str(old)] + 10**9, before[str(old)] + 10**9))  # rewritten in place
    (tmp_path / "kind" / "new.pt").write_text("b")
    assert runner.results_written(before, runner.results_snapshot(tmp_path)) == 2
    assert runner.results_snapshot(tmp_path / "absent") == {}


def test_digest_files_are_not_counted_as_results(tmp_path):
    """A warm run that only writes integrity files (a rewritten digest, the manifest of an adopted model
    folder) computed nothing: 0 written; a rewritten result counts."""
    from residshift.core import cache

    assert runner.DIGEST_FILES == (cache.DIGEST_SUFFIX, cache.MANIFEST)
    entry = tmp_path / "kind" / "old.pt"
    cache.save_verified({"x": 1}, entry)
    model = tmp_path / "kind" / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")  # a folder written before the manifests existed
    before = runner.results_snapshot(tmp_path)
    cache.check_folder(model)  # adopted: its manifest written now
    assert (model / cache.MANIFEST).is_file()
    cache.digest_path(entry).write_text(cache.digest_path(entry).read_text())
    assert runner.results_written(before, runner.results_snapshot(tmp_path)) == 0
    cache.save_verified({"x": 2}, entry)
    assert runner.results_written(before, runner.results_snapshot(tmp_path)) == 1


# ---------------------------------------------------------------------------------------------
# After a full default run: the README's results block
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("profile,kw,figures,says", [
    ("default", {}, None, None),
    ("smoke", {}, None, "smoke profile"),
    ("paper", {}, None, "paper profile"),
    ("default", {"only": ["03"]}, None, "--only"),
    ("default", {"overrides": {"ppl_windows": 2}}, None, "-p ppl_windows"),
    ("default", {}, "elsewhere", "RESIDSHIFT_FIGURES"),
    ("default", {"folder": Path("/tmp/other-notebooks")}, None, "other-notebooks"),
])
def test_only_a_full_default_run_into_the_committed_figures_regenerates_the_readme(
        profile, kw, figures, says, monkeypatch, tmp_path):
    if figures:
        monkeypatch.setenv("RESIDSHIFT_FIGURES", str(tmp_path / figures))
    else:
        monkeypatch.delenv("RESIDSHIFT_FIGURES", raising=False)  # the committed figures/
    monkeypatch.delenv("RESIDSHIFT_NOTEBOOKS", raising=False)
    reason = runner.readme_refresh_skipped(profile, **kw)
    assert reason is None if says is None else says in reason


def test_run_notebooks_refreshes_the_readme_after_a_full_default_run(books, tmp_path, monkeypatch):
    folder, _ = books
    monkeypatch.setattr(runner, "REPO_ROOT", tmp_path)  # this checkout: tmp_path/notebooks, tmp_path/figures
    monkeypatch.setenv("RESIDSHIFT_FIGURES", str(tmp_path / "figures"))
    calls, lines = [], []
    monkeypatch.setattr(runner, "refresh_readme", lambda **kw: calls.append(kw))
    log = lambda *a, **k: lines.append(" ".join(map(str, a)))  # noqa: E731
    runner.run_notebooks("default", only=["00"], folder=folder, output_dir=tmp_path / "out", log=log)
    assert calls == [] and "README: results block not regenerated (--only" in lines[-1]
    runner.run_notebooks("default", folder=folder, output_dir=tmp_path / "out", log=log)
    assert len(calls) == 1


def test_refresh_readme_runs_the_report_command_and_fails_loudly(monkeypatch):
    import subprocess
    import sys

    seen, result = [], {"rc": 0}

    def fake_run(cmd, **kw):
        seen.append((cmd, kw["cwd"]))
        return subprocess.CompletedProcess(cmd, result["rc"], stdout="README updated\n" if not result["rc"] else "",
                                           stderr="ReportError: README.md has no block\n" if result["rc"] else "")

    monkeypatch.setattr(subprocess, "run", fake_run)
    lines = []
    runner.refresh_readme(log=lambda *a, **k: lines.append(a[0]))
    assert seen == [([sys.executable, "-m", "residshift", "report"], str(runner.REPO_ROOT))]
    assert "README updated" in lines[0]
    result["rc"] = 1
    with pytest.raises(runner.RunFailed, match="regenerating the README failed.*no block"):
        runner.refresh_readme(log=lambda *a, **k: None)


# --------------------------------------------------------------------------------------------
# Issue 32: whole-number --only, -p values checked up front, the kernel's own memory, kills
# --------------------------------------------------------------------------------------------


def test_only_picks_whole_numbers_and_names(books):
    folder, _ = books
    assert [p.stem for p in runner.list_notebooks(folder, ["01"])] == ["01-second"]
    assert [p.stem for p in runner.list_notebooks(folder, ["01-second", "00"])] == ["00-first", "01-second"]
    assert [p.stem for p in runner.list_notebooks(folder, ["00-first.ipynb"])] == ["00-first"]
    for bad in ("0", "1", "00-fi"):  # a prefix used to pick every notebook it began ("0": all ten)
        with pytest.raises(runner.UsageError, match=r"no notebook matches .*two-digit numbers \(00, 01\)"):
            runner.list_notebooks(folder, [bad])


@pytest.mark.parametrize("param, says", [
    ("ppl_windows=0", "-p ppl_windows=0: ppl_windows must be an integer of at least 1"),
    ("ppl_windows=two", '-p ppl_windows="two": ppl_windows must be an integer of at least 1'),
    ("seed=-1", "-p seed=-1: seed must be an integer of at least 0"),
    ("seed=true", "-p seed=true: seed must be an integer of at least 0"),
])
def test_override_values_are_checked_against_the_profile_before_a_kernel_starts(
        books, tmp_path, monkeypatch, capsys, param, says):
    from residshift.tools.cli import main

    folder, seen = books
    monkeypatch.setenv("RESIDSHIFT_NOTEBOOKS", str(folder))
    for argv in (["run", "--profile", "smoke", "--only", "00", "-p", param, "--output-dir", str(tmp_path / "out")],
                 ["run", "--profile", "smoke", "--only", "00", "-p", param, "--dry-run"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert says in err and len(err.strip().splitlines()) == 1, err
    assert not seen.exists() and not (tmp_path / "out").exists()  # nothing ran


def test_override_kinds_follow_every_profile():
    check = runner.check_override_values
    check("smoke", {"ppl_windows": 2, "seed": 0, "train_lr": 1, "eval_items": None, "lens_positions": None,
                    "models": ["tiny-llama"], "causal_alphas": [0, 0.5], "train_corpus": {"path": "x"},
                    "device": "cpu", "show_solutions": False, "not_a_profile_key": "anything"})
    for bad, says in [({"models": "tiny-llama"}, "a JSON list of strings"), ({"show_solutions": 1}, "true/false"),
                      ({"causal_alphas": ["a"]}, "a JSON list of numbers"), ({"device": 3}, "a string"),
                      ({"train_lr": "fast"}, "a number"), ({"eval_items": 0}, "null or an integer of at least 1")]:
        with pytest.raises(runner.UsageError, match=says):
            check("smoke", bad)
    # 0 where it is a choice (profiles.ZERO_ALLOWED: no warmup, no extra checkpoints, no C1.depth check),
    # refused where it is a count
    check("default", {"train_warmup": 0, "train_checkpoint_every": 0, "lens_check_windows": 0})
    with pytest.raises(runner.UsageError, match=r"train_warmup must be an integer of at least 0"):
        check("default", {"train_warmup": -1})
    with pytest.raises(runner.UsageError, match=r"train_batch must be an integer of at least 1"):
        check("default", {"train_batch": 0})


def test_an_output_dir_that_is_a_file_is_a_one_line_usage_error(books, tmp_path, monkeypatch, capsys):
    from residshift.tools.cli import main

    folder, seen = books
    monkeypatch.setenv("RESIDSHIFT_NOTEBOOKS", str(folder))
    (tmp_path / "a-file").write_text("x")
    assert main(["run", "--profile", "smoke", "--only", "00", "--output-dir", str(tmp_path / "a-file")]) == 2
    err = capsys.readouterr().err
    assert "is a file, not a folder" in err and len(err.strip().splitlines()) == 1 and not seen.exists()


def test_peak_memory_counts_the_kernels_tree_only(monkeypatch):
    """Under pytest-xdist the small notebook's peak read 3,143 MiB: getrusage(RUSAGE_CHILDREN) counts the
    worker's own memory, which a child holds between fork and exec, and the poll counted any new
    descendant. Now: the kernel's tree, by its command line, and its own high-water marks."""
    import subprocess
    import sys

    hog = [sys.executable, "-c", "import time; a = bytearray(300 * 2**20); a[::4096] = b'x' * len(a[::4096]); "
           "time.sleep(1.5)"]
    grow = iter(range(10**6, 10**9, 10**7))
    monkeypatch.setattr(runner, "_children_maxrss", lambda: next(grow))  # rises during every block
    with runner.PeakMemory(interval=0.05, kernel="ipykernel") as mem:
        subprocess.run(hog, check=True)  # not a kernel: another test's process, say
    assert mem.peak_bytes == 0 and not mem.roots
    with runner.PeakMemory(interval=0.05, kernel="bytearray") as mem:  # this one is "the kernel"
        subprocess.run(hog, check=True)
    assert 300 * 2**20 <= mem.peak_bytes < 400 * 2**20 and len(mem.roots) == 1


def test_a_kernels_forked_child_is_not_counted_twice():
    """The kernel's own children that have not exec'd (a vfork before `git status`, a fork) show the
    kernel's memory as theirs (04 at default read 8.55 GiB where its committed run read 4.3). Only the
    kernel and descendants running their own program count."""
    import subprocess
    import sys

    hog = [sys.executable, "-c", "import os, time; a = bytearray(300 * 2**20); a[::4096] = b'x' * len(a[::4096]); "
           "pid = os.fork(); time.sleep(1.5); pid and os.waitpid(pid, 0)"]
    with runner.PeakMemory(interval=0.05, kernel="bytearray") as mem:
        subprocess.run(hog, check=True)
    assert 300 * 2**20 <= mem.peak_bytes < 400 * 2**20, mem.peaks
    grandchild = [sys.executable, "-c", "import subprocess, sys, time; a = bytearray(100 * 2**20); "
                  "a[::4096] = b'x' * len(a[::4096]); subprocess.run([sys.executable, '-c', "
                  "'b = bytearray(200 * 2**20); b[::4096] = bytes(len(b[::4096])); import time; time.sleep(1)'])"]
    with runner.PeakMemory(interval=0.05, kernel="bytearray") as mem:  # an exec'd grandchild counts
        subprocess.run(grandchild, check=True)
    assert 300 * 2**20 <= mem.peak_bytes < 450 * 2**20, mem.peaks


def test_a_small_notebook_run_from_a_big_process_reports_its_own_peak(tmp_path, monkeypatch):
    """The runner's process holds 700 MiB (an xdist worker that loaded models): the kernel's peak is
    the kernel's (the old measure reported ~990 MiB for a 53 MiB kernel)."""
    import numpy as np

    folder = tmp_path / "notebooks"
    folder.mkdir()
    _notebook(folder / "00-small.ipynb", 'profile = "default"', "x = 1")
    monkeypatch.setenv("RESIDSHIFT_FIGURES", str(tmp_path / "figures"))
    monkeypatch.setenv("RESIDSHIFT_RESULTS", str(tmp_path / "results"))
    big = np.ones(700 * 2**17)
    runner.run_notebooks("default", folder=folder, output_dir=tmp_path / "out", log=lambda *a, **k: None)
    del big
    peak = records.load_runs(tmp_path / "figures" / "RUNS.json")["default"]["00-small"]["peak_rss_mib"]
    assert 10 < peak < 400


def _finished_copy(source, target):
    nb = nbformat.read(source, as_version=4)
    for i, c in enumerate(c for c in nb.cells if c.cell_type == "code"):
        c.execution_count = i + 1
    nbformat.write(nb, target)
    return target.read_bytes()


def test_a_killed_or_stopped_run_keeps_the_last_finished_copy(tmp_path):
    """SIGKILL mid-notebook: the executed copy of the last finished run is untouched, the half-run
    copy waits under a hidden name the book does not read, and the next run sweeps the IPython
    folder left behind. SIGTERM: the runner removes both itself. The book refuses a half-run copy
    (one the old runner published) with the command that reruns it."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from residshift.tools import book

    folder = tmp_path / "notebooks"
    folder.mkdir()
    started = tmp_path / "started"
    _notebook(folder / "00-slow.ipynb", 'profile = "default"',
              f"open({str(started)!r}, 'w').write('x')\nimport time\ntime.sleep(300)")
    out, build = tmp_path / "out", tmp_path / "build"
    out.mkdir()
    old = _finished_copy(folder / "00-slow.ipynb", out / "00-slow.ipynb")
    assert book.unfinished(nbformat.read(out / "00-slow.ipynb", as_version=4)) is None
    env = dict(os.environ, RESIDSHIFT_NOTEBOOKS=str(folder), RESIDSHIFT_BUILD=str(build),
               RESIDSHIFT_FIGURES=str(tmp_path / "figures"), RESIDSHIFT_RESULTS=str(tmp_path / "results"))
    partial = runner.partial_path(out / "00-slow.ipynb")

    def start():
        started.unlink(missing_ok=True)
        proc = subprocess.Popen([sys.executable, "-m", "residshift", "run", "--profile", "smoke", "--only", "00",
                                 "--output-dir", str(out)], env=env, start_new_session=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 120
        while not (started.exists() and partial.exists()):
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read().decode()[-2000:]
            time.sleep(0.1)
        return proc

    proc = start()
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the runner and its kernel
        proc.wait(30)
    finally:
        proc.stderr.close()
    assert (out / "00-slow.ipynb").read_bytes() == old
    assert partial.is_file() and [p.name for p in out.iterdir() if book.NOTEBOOK.match(p.name)] == ["00-slow.ipynb"]
    left = list((build / runner.IPYTHON_DIRS).glob("run-*"))
    assert len(left) == 1
    half = tmp_path / "half"  # where the old runner put the half-run copy: the name the book reads
    half.mkdir()
    shutil.copyfile(partial, half / "00-slow.ipynb")
    with pytest.raises(book.BookError, match=r"00-slow.ipynb is half-run \(code cell \d is running, no error "
                                             r"recorded\): rerun it with `python -m residshift run --profile "
                                             r"smoke --only 00`"):
        book.build_book("smoke", executed=half, figures=tmp_path / "figures", out=tmp_path / "site",
                        log=lambda *a: None)
    assert not (tmp_path / "site").exists()

    proc = start()  # the next run sweeps the killed one's IPython folder ...
    try:
        assert not left[0].exists()
        proc.send_signal(signal.SIGTERM)  # ... and a stopped run cleans up after itself
        assert proc.wait(60) == 128 + signal.SIGTERM
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.stderr.close()
    assert (out / "00-slow.ipynb").read_bytes() == old and not partial.exists()
    assert not list((build / runner.IPYTHON_DIRS).glob("run-*"))


def test_only_the_default_profile_writes_the_committed_figures(monkeypatch, tmp_path):
    from residshift.core.paths import COMMITTED_FIGURES

    monkeypatch.delenv("RESIDSHIFT_FIGURES", raising=False)
    out = tmp_path / "build" / "class"
    assert records.run_figures_dir("default", out) == COMMITTED_FIGURES
    assert records.run_figures_dir("default", out, publish=False) == out / "figures"  # -p: not the study
    for profile in ("smoke", "class", "paper"):
        assert records.run_figures_dir(profile, tmp_path / profile) == tmp_path / profile / "figures"
    monkeypatch.setenv("RESIDSHIFT_FIGURES", str(tmp_path / "elsewhere"))
    assert records.run_figures_dir("class", out) == records.run_figures_dir("default", out) == tmp_path / "elsewhere"


def test_a_class_run_records_beside_its_own_figures_not_the_committed_ones(books, tmp_path, monkeypatch):
    """A lecture run (profile class) writes its figures, MANIFEST.json and RUNS.json under its output
    folder: the committed figures/ and figures/RUNS.json are left as they were."""
    from residshift.core.paths import REPO_ROOT

    folder, seen = books
    monkeypatch.delenv("RESIDSHIFT_FIGURES", raising=False)
    monkeypatch.setenv("RESIDSHIFT_RESULTS", str(tmp_path / "results"))
    committed = REPO_ROOT / "figures" / "RUNS.json"
    before = committed.read_bytes() if committed.is_file() else None
    probe = tmp_path / "figures-env.txt"
    _notebook(folder / "02-third.ipynb", 'profile = "default"',
              f"import os\nopen({str(probe)!r}, 'w').write(os.environ['RESIDSHIFT_FIGURES'])")
    out = tmp_path / "build" / "class"
    runner.run_notebooks("class", only=["00", "02"], folder=folder, output_dir=out, log=lambda *a, **k: None)
    assert json.loads(seen.read_text())["ppl_windows"] == profiles.get("class")["ppl_windows"]
    assert probe.read_text() == str(out / "figures")  # where save_figure writes in the kernel
    runs = records.load_runs(out / "figures" / "RUNS.json")
    assert set(runs) == {"class"} and set(runs["class"]) == {"00-first", "02-third"}
    assert (committed.read_bytes() if committed.is_file() else None) == before


def test_the_time_line_before_a_notebook_is_the_running_profiles_own(books, tmp_path, monkeypatch):
    """Issue 51: a class run showed the default profile's warm time. Before each notebook the runner prints
    its last measured run at the running profile (benchmarks/RUNS-<profile>.json and this run's own record;
    figures/RUNS.json only for default), or 'not measured yet at <profile>': never another profile's time."""
    folder, _ = books
    assert records.committed_runs("class") == records.REPO_ROOT / "benchmarks" / "RUNS-class.json"
    entry = lambda s, when: {"wall_s": s, "peak_rss_mib": 2048, "finished": when}  # noqa: E731
    committed = tmp_path / "committed"
    committed.mkdir()
    (committed / "RUNS.json").write_text(json.dumps({"default": {"00-first": entry(999.0, "2027-01-03T00:00:00Z"),
                                                                 "01-second": entry(998.0, "2027-01-03T00:00:00Z")}}))
    (tmp_path / "RUNS-class.json").write_text(json.dumps({"class": {"00-first": entry(37.0, "2027-01-01T00:00:00Z")},
                                                          "default": {"01-second": entry(997.0, "2027-01-02T00:00:00Z")}}))
    monkeypatch.setattr(records, "COMMITTED_FIGURES", committed)
    monkeypatch.setattr(records, "committed_runs", lambda p: tmp_path / f"RUNS-{p}.json")
    monkeypatch.setenv("RESIDSHIFT_FIGURES", str(tmp_path / "figures"))
    lines = []
    runner.run_notebooks("class", folder=folder, output_dir=tmp_path / "out", log=lambda *a, **k: lines.append(a[0]))
    said = [line.strip() for line in lines if "measured" in line]
    assert said == ["last measured at class: 37 s (peak 2.0 GiB, 2027-01-01)", "not measured yet at class"]
    # the run recorded itself: the next class run reads its own time, the newest of the two records
    again = records.own_runs("class", tmp_path / "figures")
    assert set(again) == {"00-first", "01-second"} and again["00-first"]["finished"] > "2027-01-01"
    assert records.own_runs("default")["00-first"]["wall_s"] == 999.0  # default: figures/RUNS.json
    assert records.runtime_line("class", {"wall_s": 150.0, "overrides": {"show_solutions": True}}) == \
        "last measured at class: 2.5 min (-p show_solutions=true)"
