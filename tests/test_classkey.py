"""The class answer key (``make class-key``, ``tools.classkey``): rendered like docs/run into its own folder
with only the figures it shows, the run's times and exercise costs recorded for the class profile, and
never a byte of the committed ``figures/`` or ``docs/run/``."""
import base64
import hashlib
import io
import json

import nbformat
import pytest

from residshift.core.paths import COMMITTED_FIGURES, REPO_ROOT
from residshift.tools import classkey, render


def _tree(folder):
    """Every file under ``folder`` with its sha256 (what a write anywhere there would change)."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()} if folder.is_dir() else {}


def _png() -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (4, 4), "white").save(buf, format="PNG")
    return buf.getvalue()


def _executed(folder, png):
    """An executed class notebook that shows one published figure (as ``publish`` marks it) and an
    exercise's own plot, beside a figures folder holding that figure and one it does not show."""
    (folder / "figures").mkdir(parents=True)
    (folder / "figures" / "03-x-shown.png").write_bytes(png)
    (folder / "figures" / "03-x-not-shown.png").write_bytes(png)
    nb = nbformat.v4.new_notebook()
    shown = nbformat.v4.new_code_cell("publish(fig, '03-x-shown')", execution_count=1)
    shown.outputs = [nbformat.v4.new_output("display_data", data={"image/png": base64.b64encode(png).decode()},
                                            metadata={render.FIGURE_KEY: "03-x-shown.png"})]
    own = nbformat.v4.new_code_cell("plt.plot([1])", execution_count=2, metadata={"tags": ["solution"]})
    own.outputs = [nbformat.v4.new_output("display_data", data={"image/png": base64.b64encode(png).decode()})]
    nb.cells = [nbformat.v4.new_markdown_cell("# 03 · x"), shown, own]
    nbformat.write(nb, folder / "03-x.ipynb")
    nbformat.write(nb, folder / "05-not-a-class-notebook.ipynb")


def test_the_key_shows_its_figures_from_its_own_folder_and_replaces_itself_whole(tmp_path):
    png = _png()
    executed, out = tmp_path / "build" / "class-key", tmp_path / "docs" / "class"
    _executed(executed, png)
    (out / "figures").mkdir(parents=True)
    (out / ".residshift-output").write_text("{}")  # an earlier key (its marker): replaced whole
    (out / "figures" / "03-old.png").write_bytes(png)
    kept = _tree(COMMITTED_FIGURES), _tree(render.RENDERED)
    sizes = classkey.render_key(executed, out, log=lambda *a: None)
    assert sorted(p.name for p in (out / "figures").iterdir()) == ["03-x-shown.png"]  # only what it shows
    md = (out / "03-x.md").read_text()
    assert "![03-x-shown.png](figures/03-x-shown.png)" in md and "data:image" not in md
    assert (out / "03-x_files").is_dir() and not (out / "05-not-a-class-notebook.md").exists()
    assert sizes["files"] == len([p for p in out.rglob("*") if p.is_file()]) and sizes["bytes"] > 0
    assert (_tree(COMMITTED_FIGURES), _tree(render.RENDERED)) == kept


def test_the_key_never_writes_the_committed_figures_or_docs_run(tmp_path):
    executed = tmp_path / "build" / "class-key"
    _executed(executed, _png())
    kept = _tree(COMMITTED_FIGURES), _tree(render.RENDERED)
    for out, run_into in ((render.RENDERED, executed), (REPO_ROOT / "docs", executed),
                          (COMMITTED_FIGURES / "class", executed), (tmp_path / "key", COMMITTED_FIGURES.parent)):
        with pytest.raises(classkey.TargetError, match="which only a default run writes"):
            classkey.render_key(run_into, out, log=lambda *a: None)
        with pytest.raises(classkey.TargetError):
            classkey.build(["03"], executed=run_into, out=out, log=lambda *a: None)  # refused before any run
    assert (_tree(COMMITTED_FIGURES), _tree(render.RENDERED)) == kept
    with pytest.raises(classkey.runner.UsageError, match="the class key holds notebooks 00 01 02 03 04"):
        classkey.build(["05"], executed=executed, out=tmp_path / "key")


def test_the_runs_a_key_records_are_its_own_profiles(tmp_path):
    executed = tmp_path / "exec"
    (executed / "figures").mkdir(parents=True)
    run = {"wall_s": 42.0, "overrides": {"show_solutions": True}}
    (executed / "figures" / "RUNS.json").write_text(json.dumps({"class": {"03-x": run, "05-y": run},
                                                                "default": {"03-x": {"wall_s": 1.0}}}))
    (tmp_path / "RUNS-class.json").write_text(json.dumps({"class": {"00-z": {"wall_s": 9.0}, "03-x": {"wall_s": 7.0}}}))
    path = classkey.record_runs(executed, ["03"], tmp_path)
    assert json.loads(path.read_text()) == {"class": {"00-z": {"wall_s": 9.0}, "03-x": run}}


@pytest.mark.slow
def test_a_key_runs_renders_and_records_without_touching_the_committed_files(tmp_path):
    """The whole command on tiny models (the smoke profile stands in for class): notebook 01 with its
    solutions, its answer checks collected, its run recorded, rendered with its figures."""
    kept = _tree(COMMITTED_FIGURES), _tree(render.RENDERED), _tree(REPO_ROOT / "benchmarks")
    executed, out, bench = tmp_path / "exec", tmp_path / "key", tmp_path / "bench"
    bench.mkdir()
    classkey.build(["01"], executed=executed, out=out, benchmarks=bench, profile="smoke", log=lambda *a, **k: None)
    runs = json.loads((bench / "RUNS-smoke.json").read_text())["smoke"]
    assert list(runs) == ["01-the-causal-shift"] and runs["01-the-causal-shift"]["overrides"] == {"show_solutions": True}
    costs = json.loads((bench / "exercises-smoke.json").read_text())["notebooks"]["01-the-causal-shift"]
    assert costs and all(e["passed"] for e in costs)
    shown = sorted(p.name for p in (out / "figures").iterdir())
    assert shown and all(name.startswith("01-") for name in shown)
    assert all(f"(figures/{name})" in (out / "01-the-causal-shift.md").read_text() for name in shown)
    assert (_tree(COMMITTED_FIGURES), _tree(render.RENDERED), _tree(REPO_ROOT / "benchmarks")) == kept
