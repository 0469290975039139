"""Progress bars: text in headless runs and scripts, widgets only in an interactive Jupyter frontend."""
from __future__ import annotations

import io
import types

import pytest
import tqdm.std

from residshift.core import progress as P


def _kernel_shell(allow_stdin: bool | None):
    """A stand-in for IPython's kernel shell whose current cell does (not) accept input."""
    kernel = types.SimpleNamespace() if allow_stdin is None else types.SimpleNamespace(_allow_stdin=allow_stdin)
    return types.SimpleNamespace(kernel=kernel)


@pytest.fixture
def no_env(monkeypatch):
    monkeypatch.delenv(P.ENV, raising=False)


def test_scripts_and_tests_get_text_bars(no_env):
    assert P._shell() is None and P.headless()
    bar = P.progress(range(3), desc="x", disable=True)
    assert type(bar) is tqdm.std.tqdm and list(bar) == [0, 1, 2]


@pytest.mark.parametrize("allow_stdin, expected", [(False, True), (True, False), (None, False)])
def test_kernel_falls_back_on_whether_the_cell_takes_input(no_env, monkeypatch, allow_stdin, expected):
    # nbclient (papermill, nbconvert --execute) runs cells with allow_stdin off; Jupyter frontends on
    monkeypatch.setattr(P, "_shell", lambda: _kernel_shell(allow_stdin))
    assert P.headless() is expected


@pytest.mark.parametrize("value", ["1", "true", "YES"])
def test_the_runners_switch_forces_text_even_in_an_interactive_kernel(monkeypatch, value):
    monkeypatch.setenv(P.ENV, value)
    monkeypatch.setattr(P, "_shell", lambda: _kernel_shell(True))
    assert P.headless()
    bar = P.progress(total=2, disable=True)
    assert type(bar) is tqdm.std.tqdm


def test_switch_off_allows_widgets_in_a_kernel_but_not_outside(monkeypatch):
    monkeypatch.setenv(P.ENV, "0")
    assert P.headless()  # no kernel: nothing could show a widget
    monkeypatch.setattr(P, "_shell", lambda: _kernel_shell(False))
    assert not P.headless()


def test_headless_kernel_bar_updates_sparingly(monkeypatch):
    monkeypatch.setenv(P.ENV, "1")
    monkeypatch.setattr(P, "_shell", lambda: _kernel_shell(False))
    assert P.progress(range(2), file=io.StringIO()).mininterval == P.HEADLESS_MININTERVAL
    assert P.progress(range(2), file=io.StringIO(), mininterval=0.5).mininterval == 0.5


def test_widget_branch_uses_tqdm_auto(monkeypatch):
    monkeypatch.setenv(P.ENV, "0")
    monkeypatch.setattr(P, "_shell", lambda: _kernel_shell(True))
    import tqdm.auto
    bar = P.progress(range(2), disable=True)
    assert type(bar) is tqdm.auto.tqdm


def test_bad_switch_names_the_fix(monkeypatch):
    monkeypatch.setenv(P.ENV, "maybe")
    with pytest.raises(ValueError, match="set it to 1"):
        P.headless()


def test_executed_notebooks_hold_the_text_bar_not_a_widget(tmp_path, monkeypatch):
    """End to end through ``python -m residshift run``'s runner: the kernel papermill starts sees the
    switch and the executed copy holds the bar's final text, no widget state."""
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    from residshift.tools import runner

    monkeypatch.delenv(P.ENV, raising=False)
    folder = tmp_path / "notebooks"
    folder.mkdir()
    nb = new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    params = new_code_cell('profile = "default"')
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, new_code_cell("import os\nfrom residshift.core.progress import progress\n"
                                      "print('switch', os.environ.get('RESIDSHIFT_HEADLESS'))\n"
                                      "for _ in progress(range(4), desc='steps'): pass\n"
                                      "from tqdm.auto import tqdm  # as core.fitting imports it\n"
                                      "for _ in tqdm(range(3), desc='fit'): pass")]
    nbformat.write(nb, folder / "00-bar.ipynb")
    (done,) = runner.run_notebooks("smoke", folder=folder, output_dir=tmp_path / "out", record=False,
                                   log=lambda *a, **k: None)
    outputs = nbformat.read(done, as_version=4).cells[-1].outputs
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "switch 1" in text and "steps: 100%" in text and "4/4" in text
    assert "fit: 100%" in text and "3/3" in text  # tqdm.auto switched by the kernel's startup file
    assert not [o for o in outputs if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    import os

    assert P.ENV not in os.environ and "IPYTHONDIR" not in os.environ  # the runner's process is left as it was


def test_text_bars_for_tqdm_auto_only_when_headless(monkeypatch):
    import tqdm.auto

    original = tqdm.auto.tqdm
    try:
        monkeypatch.setenv(P.ENV, "1")
        assert P.text_bars_for_tqdm_auto() and tqdm.auto.tqdm is not original
        import io
        bar = tqdm.auto.tqdm(total=2, file=io.StringIO())
        assert bar.mininterval == P.HEADLESS_MININTERVAL
        bar.close()
    finally:
        tqdm.auto.tqdm = original
    monkeypatch.setattr(P, "headless", lambda: False)  # an interactive frontend: widgets stay
    assert not P.text_bars_for_tqdm_auto() and tqdm.auto.tqdm is original
