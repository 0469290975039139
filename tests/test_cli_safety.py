"""Nothing of the user's is lost and every bad request ends in one line: ``--out`` never replaces a
folder residshift did not make, output files get the usual permissions, and the command line's error
paths (a too short ``--text``, an unknown device, ``--stop-after 0``, a file as a run folder, an
unknown model to prepare, Ctrl-C, a closed pipe) print one line with exit status 2 (130, 141)."""
import json
import os
import stat
import subprocess
import sys

import pytest

from residshift.tools.cli import entry, main
from residshift.core import cache
from residshift.core.paths import REPO_ROOT
from residshift.tools import lens_command as lc

LENS_FAST = ["--profile", "smoke", "--windows", "3", "--window", "24", "--text", "The cat sat on the mat."]


def _one_line_error(cap, command):
    lines = [line for line in cap.err.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"residshift {command}: error: "), cap.err
    assert "Traceback" not in cap.err
    return lines[0]


def _users_folder(tmp_path):
    folder = tmp_path / "paper"
    folder.mkdir()
    (folder / "draft.tex").write_text("my paper")
    return folder


# ---- --out ---------------------------------------------------------------------------------------


def test_lens_refuses_a_folder_of_the_users_and_replaces_only_its_own(tmp_path, capsys):
    folder = _users_folder(tmp_path)
    assert main(["lens", "tiny-llama", *LENS_FAST, "--out", str(folder)]) == 2
    line = _one_line_error(capsys.readouterr(), "lens")
    assert "did not make" in line and "--force" in line
    assert [p.name for p in folder.iterdir()] == ["draft.tex"] and (folder / "draft.tex").read_text() == "my paper"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["paper"], "nothing written beside it"

    assert main(["lens", "tiny-llama", *LENS_FAST, "--out", str(folder), "--force"]) == 0  # asked for
    assert not (folder / "draft.tex").exists() and (folder / "summary.md").is_file()
    # now the command's own folder (the marker says whose it is): a rerun may replace it without --force
    assert json.loads((folder / cache.OUTPUT_MARKER).read_text())["made_by"] == "residshift"
    assert lc.check_request(lc.LensRequest("tiny-llama", profile="smoke", out=str(folder)))[0].out == str(folder)


def test_book_refuses_a_folder_of_the_users_before_reading_any_notebook(tmp_path, capsys):
    folder = _users_folder(tmp_path)
    empty = tmp_path / "no-notebooks"
    empty.mkdir()
    assert main(["book", "--profile", "smoke", "--executed", str(empty), "--out", str(folder)]) == 2
    line = _one_line_error(capsys.readouterr(), "book")
    assert str(folder) in line and "--force" in line
    assert [p.name for p in folder.iterdir()] == ["draft.tex"]


def test_output_dir_allows_new_empty_and_own_folders_and_refuses_files(tmp_path):
    assert cache.check_output_dir(tmp_path / "new") == tmp_path / "new"
    (tmp_path / "empty").mkdir()
    assert cache.check_output_dir(tmp_path / "empty") == tmp_path / "empty"
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(cache.OutputDirError, match="is a file"):
        cache.check_output_dir(tmp_path / "a-file", force=True)
    with cache.output_dir(tmp_path / "own") as tmp:
        (tmp / "x.txt").write_text("1")
    with cache.output_dir(tmp_path / "own") as tmp:  # its own: replaced whole
        (tmp / "y.txt").write_text("2")
    assert sorted(p.name for p in (tmp_path / "own").iterdir()) == [cache.OUTPUT_MARKER, "y.txt"]


def test_a_folder_the_user_fills_during_the_run_is_kept_and_the_result_set_beside_it(tmp_path):
    target = tmp_path / "out"
    with pytest.raises(cache.OutputDirError, match="the finished output is in") as err:
        with cache.output_dir(target) as tmp:
            (tmp / "result.txt").write_text("done")
            target.mkdir()
            (target / "notes.txt").write_text("mine")  # the user's, written while the command ran
    assert [p.name for p in target.iterdir()] == ["notes.txt"]
    kept = [p for p in tmp_path.iterdir() if p.name.startswith("out.new-")]
    assert len(kept) == 1 and (kept[0] / "result.txt").read_text() == "done" and str(kept[0]) in str(err.value)


def test_written_files_get_the_umask_mode_not_mkstemps_0600(tmp_path):
    old = os.umask(0o022)
    try:
        cache.atomic_write_text(tmp_path / "numbers.json", "{}")
        cache.atomic_torch_save({"a": 1}, tmp_path / "x.pt")
    finally:
        os.umask(old)
    for name in ("numbers.json", "x.pt"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o644, name


# ---- one line, exit status 2 ---------------------------------------------------------------------


def test_lens_bad_text_and_device_are_one_line(tmp_path, capsys):
    out = tmp_path / "o"
    assert main(["lens", "tiny-llama", "--profile", "smoke", "--text", "a", "--out", str(out)]) == 2
    assert "--text number 1" in _one_line_error(capsys.readouterr(), "lens")
    assert main(["lens", "tiny-llama", "--profile", "smoke", "--device", "tpu", "--out", str(out)]) == 2
    assert "cpu or cuda" in _one_line_error(capsys.readouterr(), "lens")
    assert not out.exists()


@pytest.mark.parametrize("args, needle", [
    (["--stop-after", "0"], "positive number of steps"),
    (["--stop-after", "-3"], "positive number of steps"),
    (["--device", "tpu"], "not a torch device"),
])
def test_train_bad_requests_are_one_line(tmp_path, capsys, args, needle):
    assert main(["train", "--profile", "smoke", "--no-progress", "--out", str(tmp_path / "run"), *args]) == 2
    assert needle in _one_line_error(capsys.readouterr(), "train")
    assert not (tmp_path / "run").exists()


def test_train_into_a_file_is_one_line(tmp_path, capsys):
    (tmp_path / "run").write_text("not a folder")
    assert main(["train", "--profile", "smoke", "--no-progress", "--stop-after", "1", "--out",
                 str(tmp_path / "run")]) == 2
    assert "is a file" in _one_line_error(capsys.readouterr(), "train")


def test_prepare_an_unknown_model_is_one_line(capsys):
    assert main(["prepare", "nosuchmodel"]) == 2
    line = _one_line_error(capsys.readouterr(), "prepare")
    assert "'nosuchmodel'" in line and "smollm2-135m" in line


def test_an_interrupt_is_one_line_with_status_130(monkeypatch, capsys):
    import residshift.tools.cli as cli

    def interrupted(argv=None):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "main", interrupted)
    assert entry(["profiles"]) == 130
    err = capsys.readouterr().err.strip()
    assert err.startswith("residshift: interrupted") and len(err.splitlines()) == 1


def test_a_closed_pipe_ends_quietly():
    """``profiles`` prints more than a pipe holds when the reader reads nothing (``true`` exits at once)."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.run(f"{sys.executable} -m residshift profiles | true; echo ${{PIPESTATUS[0]}}",
                          shell=True, executable="/bin/bash", capture_output=True, text=True, env=env, timeout=120)
    assert proc.stderr == "" and proc.stdout.strip() in {"0", "141"}, proc.stderr


def test_a_rerun_into_its_own_out_refuses_to_delete_a_file_the_user_added(tmp_path, capsys):
    """Before: the rerun replaced the folder whole and notes.txt was gone without a word. Refused (not
    kept): the folder is swapped in one rename, so keeping would move the user's file into a folder the
    next rerun replaces again; the refusal names the file and loses nothing."""
    out = tmp_path / "lens-out"
    assert main(["lens", "tiny-llama", *LENS_FAST, "--out", str(out)]) == 0
    written = sorted(p.name for p in out.iterdir())
    capsys.readouterr()
    (out / "notes.txt").write_text("my notes")
    assert main(["lens", "tiny-llama", *LENS_FAST, "--out", str(out)]) == 2
    line = _one_line_error(capsys.readouterr(), "lens")
    assert "(notes.txt)" in line and "--force" in line and str(out) in line
    assert (out / "notes.txt").read_text() == "my notes" and sorted(p.name for p in out.iterdir()) == \
        sorted([*written, "notes.txt"])
    (out / "notes.txt").unlink()  # only its own files: the rerun replaces them
    assert main(["lens", "tiny-llama", *LENS_FAST, "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == written
    (out / "notes.txt").write_text("my notes")
    assert main(["lens", "tiny-llama", *LENS_FAST, "--out", str(out), "--force"]) == 0  # asked for
    assert sorted(p.name for p in out.iterdir()) == written
