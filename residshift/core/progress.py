"""Progress bars that read well wherever the code runs.

:func:`progress` is ``tqdm`` with the bar chosen per call: the widget bar (``tqdm.auto``, i.e.
``tqdm.notebook``) only in an interactive Jupyter frontend, the text bar (``tqdm.std``, on stderr)
everywhere else: scripts, the command line, tests, and notebooks executed headless. A widget bar in
a headless run is saved as widget state that no frontend ever updated, so the executed notebook
shows it frozen at 0%; a text bar is saved as the text it printed last.

:func:`headless` decides, in this order:

1. ``RESIDSHIFT_HEADLESS`` in the environment: ``1``/``true``/``yes`` is headless, ``0``/``false``/
   ``no`` is not (widget bars whenever a kernel can show them). ``python -m residshift run`` sets it
   to ``1`` for the kernels papermill starts (they inherit the runner's environment).
2. Not inside an IPython kernel (plain Python, IPython in a terminal, pytest): headless.
3. Inside a kernel, the cell being run does not accept keyboard input: headless. Jupyter frontends
   (Lab, Notebook, VS Code, Colab) send their cells with ``allow_stdin`` on; nbclient, which papermill
   and ``jupyter nbconvert --execute`` use, sends them with it off and no one watches the widgets.
   This is the fallback for headless runs that do not go through the runner.
"""
from __future__ import annotations

import os
import sys
from typing import Any, Iterable

ENV = "RESIDSHIFT_HEADLESS"
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")
HEADLESS_MININTERVAL = 5.0  # seconds between text updates in a kernel: the executed notebook keeps them


def _shell():
    """The running IPython kernel's shell, or None outside a kernel."""
    if "ipykernel.zmqshell" not in sys.modules or "IPython" not in sys.modules:
        return None
    shell = sys.modules["IPython"].get_ipython()
    return shell if shell is not None and hasattr(shell, "kernel") else None


def headless() -> bool:
    """True unless an interactive Jupyter frontend runs this code (see the module docstring)."""
    flag = os.environ.get(ENV, "").strip().lower()
    if flag and flag not in _TRUE + _FALSE:
        raise ValueError(f"{ENV}={os.environ[ENV]!r} is neither on nor off: set it to 1 (text progress "
                         f"bars) or 0 (widget bars in Jupyter), or unset it to detect")
    if flag in _TRUE:
        return True
    shell = _shell()
    if shell is None:
        return True
    if flag in _FALSE:
        return False
    return not bool(getattr(shell.kernel, "_allow_stdin", True))


def progress(iterable: Iterable | None = None, **tqdm_kwargs: Any):
    """A tqdm bar over ``iterable`` (or a manual one with ``total=``): text when :func:`headless`,
    the widget otherwise. ``tqdm_kwargs`` go to tqdm (``desc``, ``unit``, ``total``, ``leave``, ...).

    Inside a kernel the text bar updates at most every :data:`HEADLESS_MININTERVAL` seconds (unless
    ``mininterval`` is given), so the executed notebook does not store thousands of updates."""
    if headless():
        from tqdm.std import tqdm
        if _shell() is not None:
            tqdm_kwargs.setdefault("mininterval", HEADLESS_MININTERVAL)
    else:
        from tqdm.auto import tqdm
    return tqdm(iterable, **tqdm_kwargs)


def text_bars_for_tqdm_auto() -> bool:
    """In a headless kernel, make ``tqdm.auto.tqdm`` the text bar (updating at most every
    :data:`HEADLESS_MININTERVAL` seconds) for the modules that import it directly: ``core.fitting``
    and ``train.data``, whose source is part of the trained models' code fingerprint (editing them
    would retrain every run), so they keep their import and the switch happens here. The runner's
    kernels call it from an IPython startup file (:data:`STARTUP`) before any cell runs. Returns
    whether it switched (only when :func:`headless`)."""
    if not headless():
        return False
    import tqdm.auto
    import tqdm.std

    class TextBar(tqdm.std.tqdm):
        def __init__(self, *args, **kwargs):
            kwargs.setdefault("mininterval", HEADLESS_MININTERVAL)
            super().__init__(*args, **kwargs)

    tqdm.auto.tqdm = TextBar
    return True


# The IPython startup file the runner gives its headless kernels (``IPYTHONDIR/profile_default/startup``).
STARTUP = '''\
try:  # residshift: text progress bars in headless kernels (residshift.core.progress)
    from residshift.core.progress import text_bars_for_tqdm_auto
    text_bars_for_tqdm_auto()
except Exception as error:  # never stop a kernel from starting over progress bars
    print(f"residshift: progress bars left as they are ({error})")
'''


def write_startup(ipython_dir) -> None:
    """Write :data:`STARTUP` into ``ipython_dir``'s default profile (for ``IPYTHONDIR``)."""
    from pathlib import Path

    folder = Path(ipython_dir) / "profile_default" / "startup"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "00-residshift-progress.py").write_text(STARTUP)
