"""Every notebook: well-formed (static checks, fast) and runs headless at the smoke profile (slow)."""
import json
import re

import nbformat
import pytest

from residshift.core import runner

NOTEBOOKS = runner.list_notebooks()


def test_there_are_notebooks():
    assert NOTEBOOKS and NOTEBOOKS[0].name.startswith("00-")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_is_well_formed(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata["kernelspec"]["name"] == "python3"
    assert nb.metadata["language_info"]["name"] == "python"
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert "parameters" in code[0].metadata.get("tags", []), "first code cell must be tagged 'parameters'"
    assert re.search(r'^profile = "default"$', code[0].source, re.M)
    assert not any(c.get("outputs") for c in code), "commit notebooks without outputs"
    number = path.name[:2]
    for name in re.findall(r'save_(?:figure|numbers)\([^,]*?,?\s*"([^"]+)"', "\n".join(c.source for c in code)):
        assert name.startswith(number + "-"), f"figure {name!r} must carry the notebook's number {number}"
    assert sum(c.cell_type == "markdown" for c in nb.cells) >= 3, "notebooks teach: add markdown"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_at_smoke_profile(path, tmp_path):
    done = runner.run_notebooks("smoke", only=[path.stem], output_dir=tmp_path,
                                log=lambda *a, **k: None)
    executed = nbformat.read(done[0], as_version=4)
    errors = [o for c in executed.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors, json.dumps(errors)[:2000]
