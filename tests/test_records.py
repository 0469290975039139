"""RUNS.json and MANIFEST.json: concurrent writers keep every entry; a corrupt record is named with
its fix and blocks only what needs it (issue 32)."""
import multiprocessing
import shutil
import subprocess

import pytest

from residshift.core import outputs, records
from residshift.tools import runner
from residshift.core.paths import REPO_ROOT

N = 15


def _writer(kind, k, figures, go):
    import os

    os.environ["RESIDSHIFT_FIGURES"] = figures
    go.wait()
    for i in range(N):
        if kind == "manifest":
            outputs.record(f"0{k}-figure-{i}.png", {"i": i})
        else:
            records.record_run("default", f"0{k}-notebook-{i}", {"wall_s": float(i)})


@pytest.mark.parametrize("kind", ["manifest", "runs"])
def test_processes_recording_at_once_keep_every_entry(tmp_path, kind):
    """Three processes each recording 15 entries into one folder at once: all 45 are kept (the
    unlocked read-modify-write kept 20 of 30 with two)."""
    ctx = multiprocessing.get_context("fork")  # the parent has torch imported: no 3 s import per child
    go = ctx.Event()
    procs = [ctx.Process(target=_writer, args=(kind, k, str(tmp_path), go)) for k in range(3)]
    for p in procs:
        p.start()
    go.set()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    if kind == "manifest":
        got = outputs.load_manifest(tmp_path)
    else:
        got = records.load_runs(tmp_path / "RUNS.json")["default"]
    assert len(got) == 3 * N
    assert list(got) == sorted(got)  # still written in order
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "MANIFEST.json" if kind == "manifest" else "RUNS.json"]  # no lock or temporary file left


def test_the_code_state_is_computed_outside_the_lock(tmp_path, monkeypatch):
    """The slow part (a git status) runs before the lock is taken, so writers wait for a read and a
    write only."""
    monkeypatch.setenv("RESIDSHIFT_FIGURES", str(tmp_path))
    held = []

    def state():
        held.append((tmp_path / ".MANIFEST.json.lock").exists())
        return {"commit": "abc", "code_dirty": False, "code_hash": "h"}

    monkeypatch.setattr(outputs, "code_state", state)
    outputs.record("00-x.png", {})
    assert held == [False] and outputs.load_manifest(tmp_path)["00-x.png"]["commit"] == "abc"


GARBLED = '{\n  "default": {\n<<<<<<< HEAD\n    "00-a": {}\n=======\n    "00-b": {}\n>>>>>>> other\n  }\n}\n'


def test_a_corrupt_record_is_named_with_its_fix_and_left_as_it_is(tmp_path, monkeypatch):
    monkeypatch.setenv("RESIDSHIFT_FIGURES", str(tmp_path))
    (tmp_path / "RUNS.json").write_text(GARBLED)
    (tmp_path / "MANIFEST.json").write_text('{"00-a.png": {')
    with pytest.raises(records.CorruptRecordError) as err:
        records.record_run("default", "00-x", {"wall_s": 1.0})
    text = str(err.value)
    assert "RUNS.json holds a git merge conflict, not valid JSON (line 3)" in text and "delete it" in text
    assert len(text.splitlines()) == 1
    with pytest.raises(records.CorruptRecordError, match=r"RUNS.json .*line 3"):
        records.load_runs()
    assert (tmp_path / "RUNS.json").read_text() == GARBLED  # never overwritten: the other entries survive
    with pytest.raises(records.CorruptRecordError, match=r"MANIFEST.json is not valid JSON \(line 1\)"):
        outputs.save_numbers("00-numbers", {"a": 1})
    assert not (tmp_path / "00-numbers.json").exists()  # refused before anything was written
    assert (tmp_path / "MANIFEST.json").read_text() == '{"00-a.png": {'
    (tmp_path / "MANIFEST.json").write_text("[]")
    with pytest.raises(records.CorruptRecordError, match="holds a JSON list, not an object"):
        outputs.load_manifest()


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_a_corrupt_committed_record_names_git_checkout():
    tracked = subprocess.run(["git", "ls-files", "--error-unmatch", "figures/RUNS.json"], cwd=REPO_ROOT,
                             capture_output=True).returncode == 0
    if not tracked:
        pytest.skip("figures/RUNS.json is not committed in this checkout")
    assert records.corrupt_message(REPO_ROOT / "figures" / "RUNS.json", 12) == (
        "figures/RUNS.json is not valid JSON (line 12): restore it with "
        "`git checkout -- figures/RUNS.json` or delete it")


def test_a_corrupt_record_fails_a_run_before_any_kernel_and_not_a_dry_run(tmp_path, monkeypatch):
    from test_runner import _notebook

    folder = tmp_path / "notebooks"
    folder.mkdir()
    _notebook(folder / "00-first.ipynb", 'profile = "default"\nppl_windows = None',
              "raise SystemExit('a kernel started')")
    figures = tmp_path / "figures"
    figures.mkdir()
    monkeypatch.setenv("RESIDSHIFT_FIGURES", str(figures))
    (figures / "RUNS.json").write_text(GARBLED)
    lines = []
    runner.dry_run("smoke", folder=folder, log=lines.append)  # the estimate does not need RUNS.json
    assert any(line.startswith("last measured runs at this profile: unavailable (") and "RUNS.json" in line
               for line in lines)
    with pytest.raises(runner.RunFailed, match="RUNS.json holds a git merge conflict") as err:
        runner.run_notebooks("smoke", folder=folder, output_dir=tmp_path / "out", log=lambda *a, **k: None)
    assert not isinstance(err.value, runner.UsageError)
    assert not (tmp_path / "out").exists()  # refused before anything ran or was made
    (figures / "RUNS.json").unlink()
    (figures / "MANIFEST.json").write_text("{")
    with pytest.raises(runner.RunFailed, match="MANIFEST.json is not valid JSON"):
        runner.run_notebooks("smoke", folder=folder, output_dir=tmp_path / "out", log=lambda *a, **k: None,
                             record=False)


def test_the_book_names_a_corrupt_record_with_its_fix(tmp_path):
    from residshift.tools import book

    (tmp_path / "RUNS.json").write_text("{\n,")
    with pytest.raises(book.BookError, match=r"RUNS.json is not valid JSON \(line 2\): .*delete it") as err:
        book._runs(["default"], [tmp_path / "RUNS.json"])
    assert "rerun the notebooks" not in str(err.value)


def test_a_garbled_run_config_is_a_train_error_naming_the_file(tmp_path):
    from residshift.train.trainer import TrainError, _check_run_config

    (tmp_path / "config.json").write_text('{"key": "abc", ')
    with pytest.raises(TrainError, match=r"config.json is not valid JSON \(line 1\): delete that run folder"):
        _check_run_config(tmp_path, "abc")
    (tmp_path / "config.json").write_text('{"key": "abc"}')
    _check_run_config(tmp_path, "abc")  # a good one still passes
