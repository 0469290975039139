"""The command line's last line of defence (issue 50): every ``OSError`` (a results folder that is a file
or read-only, a full disk) and every error class of the package ends in one line ``residshift: ...``
naming the path, exit status 1, while a bug keeps its traceback; a bad argument is refused before torch
is imported; an ``MKL_CBWR`` oneMKL does not know is refused in one line naming the valid ones."""
import errno
import os
import subprocess
import sys

import pytest

from residshift.core import machine
from residshift.core.paths import REPO_ROOT
from residshift.tools import cli
from residshift.tools.cli import entry

TRAIN = ["train", "--profile", "smoke", "--no-progress", "--stop-after", "1"]


def _env(**extra):
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "HF_HUB_OFFLINE": "1"}
    env.update(extra)
    return env


def _raising(err):
    def main(argv=None):
        raise err

    return main


def _one_line(err: str) -> str:
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("residshift: ") and "Traceback" not in err, err
    return lines[0]


# ---- OSErrors: one line naming the path -----------------------------------------------------------


@pytest.mark.parametrize("command", [TRAIN, ["lens", "tiny-llama", "--profile", "smoke", "--windows", "3",
                                            "--window", "24", "--text", "The cat sat on the mat."]])
def test_a_results_folder_that_is_a_file_is_one_line(tmp_path, monkeypatch, capsys, command):
    results = tmp_path / "results"
    results.write_text("not a folder")
    monkeypatch.setenv("RESIDSHIFT_RESULTS", str(results))
    assert entry(command) == 1
    line = _one_line(capsys.readouterr().err)
    assert f"Not a directory: {results}/" in line and f"RESIDSHIFT_RESULTS={results}" in line, line
    assert "a file stands where a folder is needed" in line
    assert results.read_text() == "not a folder"


def test_a_read_only_results_folder_is_one_line(tmp_path, monkeypatch, capsys):
    """A folder nothing may be created in (simulated: these tests run as root, which modes do not stop)."""
    results = tmp_path / "read-only"
    results.mkdir()
    monkeypatch.setenv("RESIDSHIFT_RESULTS", str(results))
    real_mkdir = os.mkdir

    def mkdir(path, mode=0o777, **kw):
        if str(path).startswith(str(results) + os.sep):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fspath(path))
        return real_mkdir(path, mode, **kw)

    monkeypatch.setattr(os, "mkdir", mkdir)
    assert entry(TRAIN) == 1
    line = _one_line(capsys.readouterr().err)
    assert f"Permission denied: {results}/train" in line and "make it writable" in line, line


def test_a_full_disk_is_one_line_naming_the_folder(tmp_path, monkeypatch, capsys):
    """``write()`` on a full disk raises ENOSPC without a file name: the line names the folder written in."""
    import pathlib

    def full(self, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(pathlib.Path, "write_bytes", full)
    out = tmp_path / "run"
    assert entry([*TRAIN, "--out", str(out)]) == 1
    line = _one_line(capsys.readouterr().err)
    assert line.startswith(f"residshift: No space left on device, writing in {out}") and "the disk is full" in line


def test_out_dot_force_is_one_line_and_the_working_folder_is_untouched(tmp_path, capsys, monkeypatch):
    here = tmp_path / "work"
    here.mkdir()
    (here / "paper.tex").write_text("mine")
    monkeypatch.chdir(here)
    for out in (".", ".."):
        assert entry(["lens", "tiny-llama", "--profile", "smoke", "--out", out, "--force"]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and err.startswith(f"residshift lens: error: --out {out} is ") and \
            "working in" in err and "Traceback" not in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["work"]
    assert [p.name for p in here.iterdir()] == ["paper.tex"]


def test_an_oserror_names_its_paths_and_the_setting_that_put_it_there(monkeypatch, tmp_path):
    monkeypatch.setenv("RESIDSHIFT_CACHE", str(tmp_path / "cache"))
    err = OSError(errno.EBUSY, os.strerror(errno.EBUSY), ".", None, "..old-1234")  # as os.replace raises it
    assert cli.error_line(err) == (f"{os.strerror(errno.EBUSY)}: . -> ..old-1234; it is in use "
                                   "(the current folder, a mount point): choose another folder")
    err = FileNotFoundError(errno.ENOENT, "No such file or directory", str(tmp_path / "cache" / "x.json"))
    assert cli.error_line(err) == \
        f"No such file or directory: {tmp_path}/cache/x.json (RESIDSHIFT_CACHE={tmp_path}/cache)"


# ---- the package's errors: one line; a bug: its traceback --------------------------------------------


def test_the_packages_own_errors_are_one_line(monkeypatch, capsys):
    from residshift.core.models import ModelNotAvailableError, UnknownModelError

    for err in (ModelNotAvailableError("model.safetensors is cut short\nredownload it: residshift prepare x"),
                UnknownModelError("unknown model 'x'; see `residshift models`")):
        monkeypatch.setattr(cli, "main", _raising(err))
        assert entry(["models"]) == 1
        line = _one_line(capsys.readouterr().err)
        assert line == f"residshift: {' '.join(str(err.args[0]).split())}", line


@pytest.mark.parametrize("bug", [TypeError("unsupported operand"), ValueError("a library's own error"),
                                 KeyError("ppl")])
def test_a_bug_keeps_its_traceback(monkeypatch, bug):
    monkeypatch.setattr(cli, "main", _raising(bug))
    with pytest.raises(type(bug)):
        entry(["profiles"])


# ---- arguments before torch -----------------------------------------------------------------------


@pytest.mark.parametrize("argv", [["train-grid", "--bogus"], ["train", "--bogus"], ["train-grid", "--parallel", "x"]])
def test_a_bad_argument_is_refused_before_torch_is_imported(argv):
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "residshift", *argv], capture_output=True,
                          text=True, env=_env(), cwd=REPO_ROOT, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.splitlines()
    says = "error: unrecognized arguments: --bogus" if "--bogus" in argv else "error: argument --parallel: invalid int"
    assert any(line.startswith(f"residshift{' train-grid' if argv[0] == 'train-grid' else ''}: {says}")
               for line in lines), proc.stderr[-2000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in lines if line.startswith("import time:")}
    assert "residshift.tools.cli" in imported  # -X importtime did report
    assert not {"torch", "transformers", "residshift.tools.grid_launcher"} & imported


# ---- MKL_CBWR ---------------------------------------------------------------------------------------


def test_an_unknown_mkl_cbwr_is_one_line_naming_the_valid_values():
    proc = subprocess.run([sys.executable, "-m", "residshift", "profiles", "smoke"], capture_output=True, text=True,
                          env=_env(MKL_CBWR="garbage"), cwd=REPO_ROOT, timeout=300)
    assert proc.returncode == 1 and proc.stdout == ""
    line = _one_line(proc.stderr)
    assert "MKL_CBWR='garbage'" in line and "AUTO, COMPATIBLE" in line and "AVX2,STRICT" in line, line


@pytest.mark.parametrize("value", ["AVX2,STRICT", "AUTO", "COMPATIBLE", "BRANCH=AVX2", "avx512,strict", "SSE4_2"])
def test_the_settings_onemkl_documents_are_kept(monkeypatch, value):
    monkeypatch.setenv("MKL_CBWR", value)
    machine.use_reproducible_kernels()
    assert os.environ["MKL_CBWR"] == value


@pytest.mark.parametrize("value", ["garbage", "AVX3", "AVX2,LOOSE", "AVX2,STRICT,STRICT", ""])
def test_other_settings_are_refused(monkeypatch, value):
    monkeypatch.setenv("MKL_CBWR", value)
    with pytest.raises(machine.KernelSettingError, match="is not a oneMKL setting"):
        machine.use_reproducible_kernels()


def test_ladder_p_gets_the_same_value_check(capsys):
    assert cli.main(["ladder", "--profile", "smoke", "-p", "ladder_rungs=0", "--plan"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "residshift ladder: error: -p ladder_rungs=0: ladder_rungs must be an integer of at least 1", err
