import json

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from residshift.core import profiles
from residshift.core import runner


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
              f"'env': os.environ.get('RESIDSHIFT_PROFILE')}}, open({str(out)!r}, 'w'))")
    _notebook(folder / "01-second.ipynb", 'profile = "default"', "x = 1")
    (folder / "notes.ipynb").write_text("{}")  # not NN-name: ignored
    return folder, out


def test_runner_injects_profile_values_and_overrides(books, tmp_path):
    folder, seen = books
    done = runner.run_notebooks("smoke", only=["00"], folder=folder, output_dir=tmp_path / "out",
                                overrides={"seed": 7}, log=lambda *a, **k: None)
    assert [p.name for p in done] == ["00-first.ipynb"]
    got = json.loads(seen.read_text())
    assert got == {"profile": "smoke", "ppl_windows": profiles.get("smoke")["ppl_windows"],
                   "seed": 7, "env": "smoke"}
    assert (tmp_path / "out" / "00-first.ipynb").is_file()


def test_runner_runs_in_order(books, tmp_path):
    folder, _ = books
    done = runner.run_notebooks("smoke", folder=folder, output_dir=tmp_path / "out",
                                log=lambda *a, **k: None)
    assert [p.name for p in done] == ["00-first.ipynb", "01-second.ipynb"]


def test_broken_notebook_fails_loudly_and_keeps_the_copy(books, tmp_path):
    folder, _ = books
    _notebook(folder / "02-broken.ipynb", 'profile = "default"', "raise ValueError('deliberate')")
    with pytest.raises(runner.RunFailed) as err:
        runner.run_notebooks("smoke", only=["02"], folder=folder, output_dir=tmp_path / "out",
                             log=lambda *a, **k: None)
    text = str(err.value)
    assert "02-broken.ipynb" in text and "cell" in text and "deliberate" in text
    assert (tmp_path / "out" / "02-broken.ipynb").is_file()


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
    with pytest.raises(KeyError, match="smoke"):
        runner.run_notebooks("huge", folder=folder)
    assert runner.parse_overrides(["n=3", "models=[\"a\"]", "name=x"]) == {"n": 3, "models": ["a"], "name": "x"}
    with pytest.raises(runner.RunFailed, match="key=value"):
        runner.parse_overrides(["oops"])


def test_cli_exits_nonzero_on_failure(books, monkeypatch, capsys):
    from residshift.__main__ import main

    folder, _ = books
    _notebook(folder / "02-broken.ipynb", 'profile = "default"', "1/0")
    monkeypatch.setenv("RESIDSHIFT_NOTEBOOKS", str(folder))
    assert main(["run", "--profile", "smoke", "--only", "02"]) == 1
    assert "02-broken.ipynb" in capsys.readouterr().err
