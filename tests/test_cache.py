import json
import os
import shutil
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch

from residshift.core import cache


def test_key_is_stable_and_changes_with_config():
    a = {"model": "smollm2-135m", "n": 64, "alphas": [0.5, 1.0]}
    assert cache.config_key(a) == cache.config_key(dict(reversed(list(a.items()))))
    assert cache.config_key(a) != cache.config_key({**a, "n": 65})
    assert cache.config_key(a) != cache.config_key({**a, "alphas": [0.5, 0.9]})
    assert cache.config_key({"x": 1}) != cache.config_key({"x": "1"})


def test_cached_computes_once_per_config(tmp_path, monkeypatch):
    monkeypatch.setenv("RESIDSHIFT_RESULTS", str(tmp_path))
    calls = []

    def compute():
        calls.append(1)
        return {"loss": torch.tensor([1.0, 2.0])}

    first = cache.cached("toy", {"n": 1}, compute, code=compute)
    second = cache.cached("toy", {"n": 1}, compute, code=compute)
    assert len(calls) == 1 and torch.equal(first["loss"], second["loss"])
    cache.cached("toy", {"n": 2}, compute, code=compute)
    assert len(calls) == 2
    cache.cached("toy", {"n": 1}, compute, code=compute, refresh=True)
    assert len(calls) == 3
    sidecar = json.loads(cache.entry_path("toy", {"n": 1}, code=compute).with_suffix(".json").read_text())
    assert sidecar["config"] == {"n": 1}
    assert sidecar["code"]["fingerprint"] == cache.code_fingerprint(compute)


def test_failed_write_leaves_no_partial_file(tmp_path):
    target = tmp_path / "out.pt"

    class Unpicklable:
        def __reduce__(self):
            raise RuntimeError("no")

    with pytest.raises(RuntimeError):
        cache.atomic_torch_save({"x": Unpicklable()}, target)
    assert list(tmp_path.iterdir()) == []


def test_atomic_path_replaces_on_success_and_cleans_up_on_failure(tmp_path):
    target = tmp_path / "sub" / "out.txt"
    with cache.atomic_path(target) as tmp:
        assert tmp.parent == target.parent and tmp.name.startswith(".out.txt.") and tmp.is_file()
        tmp.write_text("one")
        assert not target.exists()  # nothing at the target until the block ends
    assert target.read_text() == "one" and os.listdir(target.parent) == ["out.txt"]
    with pytest.raises(KeyboardInterrupt):  # any exception, not only errors
        with cache.atomic_path(target, suffix=".npy") as tmp:
            assert tmp.suffix == ".npy"
            tmp.write_text("half")
            raise KeyboardInterrupt
    assert target.read_text() == "one" and os.listdir(target.parent) == ["out.txt"]


def test_atomic_writers_write_exactly_the_bytes(tmp_path):
    cache.atomic_write_bytes(tmp_path / "b", b"\x00\xffab")
    cache.atomic_write_text(tmp_path / "t", "é\n")
    assert (tmp_path / "b").read_bytes() == b"\x00\xffab" and (tmp_path / "t").read_bytes() == "é\n".encode()
    arr = np.arange(6, dtype=np.int32).reshape(2, 3)
    cache.atomic_save_npy(tmp_path / "a.npy", arr)
    np.save(tmp_path / "ref.npy", arr)
    assert (tmp_path / "a.npy").read_bytes() == (tmp_path / "ref.npy").read_bytes()
    cache.atomic_torch_save({"x": torch.arange(3)}, tmp_path / "x.pt")
    assert torch.equal(torch.load(tmp_path / "x.pt")["x"], torch.arange(3))
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_atomic_dir_replaces_a_folder_whole(tmp_path):
    target = tmp_path / "models" / "m"
    with cache.atomic_dir(target) as tmp:
        assert tmp.is_dir() and not any(tmp.iterdir()) and tmp.name.startswith(".m.")
        (tmp / "a").write_text("1")
    assert (target / "a").read_text() == "1"
    with cache.atomic_dir(target) as tmp:  # an existing folder is replaced, not merged
        (tmp / "b").write_text("2")
    assert sorted(p.name for p in target.iterdir()) == ["b"]

    class Boom(RuntimeError):
        pass

    with pytest.raises(Boom):
        with cache.atomic_dir(target) as tmp:
            (tmp / "c").write_text("3")
            raise Boom
    assert sorted(p.name for p in target.iterdir()) == ["b"]
    assert os.listdir(target.parent) == ["m"], "no temporary folder left"


def test_atomic_dir_move_aside_keeps_the_old_folder_until_the_new_one_is_in(tmp_path, monkeypatch):
    target = tmp_path / "site"
    with cache.atomic_dir(target, move_aside=True) as tmp:
        (tmp / "index.html").write_text("v1")
    with cache.atomic_dir(target, move_aside=True) as tmp:
        (tmp / "index.html").write_text("v2")
        assert (target / "index.html").read_text() == "v1"
    assert (target / "index.html").read_text() == "v2" and os.listdir(tmp_path) == ["site"]
    real = os.replace

    def fail_new(src, dst):  # the rename of the new folder into place fails
        if Path(dst) == target and ".old-" not in Path(src).name:
            raise OSError("disk gone")
        return real(src, dst)

    monkeypatch.setattr(cache.os, "replace", fail_new)
    with pytest.raises(OSError, match="disk gone"):
        with cache.atomic_dir(target, move_aside=True) as tmp:
            (tmp / "index.html").write_text("v3")
    assert (target / "index.html").read_text() == "v2" and os.listdir(tmp_path) == ["site"]


def test_atomic_dir_makes_folders_with_the_usual_mode(tmp_path):
    with cache.atomic_dir(tmp_path / "d"):
        pass
    (tmp_path / "plain").mkdir()
    assert (tmp_path / "d").stat().st_mode == (tmp_path / "plain").stat().st_mode


def test_config_must_be_json_like():
    with pytest.raises(TypeError, match="JSON-like"):
        cache.config_key({"f": object()})
    with pytest.raises(ValueError):
        cache.entry_path("../escape", {})


# ---------------------------------------------------------------------------------------------
# Code fingerprints: a change to the code that computed a result recomputes it
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def fake_package(tmp_path, monkeypatch):
    """A throwaway `residshift` source tree: core/a.py imports core/b.py, which imports nothing."""
    root = tmp_path / "residshift"
    (root / "core").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "core" / "__init__.py").write_text("")
    (root / "core" / "a.py").write_text("from . import b\n\n\ndef f(x):\n    return b.g(x) + 1\n")
    (root / "core" / "b.py").write_text("def g(x):\n    return 2 * x\n")
    (root / "core" / "c.py").write_text("def h(x):\n    return x\n")
    monkeypatch.setattr(cache, "PACKAGE_DIR", root)
    monkeypatch.setattr(cache, "_DISK", {})  # memos of the real package must not leak in
    monkeypatch.setattr(cache, "_LOADED", {})
    monkeypatch.setenv("RESIDSHIFT_RESULTS", str(tmp_path / "results"))
    return root


def _edit(path, text):
    old = path.stat().st_mtime_ns
    path.write_text(text)
    os.utime(path, ns=(old + 10**9, old + 10**9))  # a distinct mtime even on coarse clocks


def test_a_change_in_a_transitive_import_recomputes(fake_package):
    calls = []

    def compute():
        calls.append(1)
        return len(calls)

    code = "residshift.core.a"
    assert cache.code_modules(code) == ["residshift.core.a", "residshift.core.b"]  # __init__s re-export only
    assert cache.cached("toy", {"n": 1}, compute, code=code) == 1
    assert cache.cached("toy", {"n": 1}, compute, code=code) == 1
    fp, ckpt = cache.code_fingerprint(code), cache.config_key({"n": 1}, code=code)
    _edit(fake_package / "core" / "b.py", "def g(x):\n    return 3 * x\n")  # a fix two modules down
    assert cache.code_fingerprint(code) != fp
    assert cache.config_key({"n": 1}, code=code) != ckpt, "a checkpoint of other code must not resume"
    assert cache.cached("toy", {"n": 1}, compute, code=code) == 2
    _edit(fake_package / "core" / "c.py", "def h(x):\n    return -x\n")  # not imported by a
    assert cache.cached("toy", {"n": 1}, compute, code=code) == 2


def test_comment_lines_and_blank_lines_do_not_count(fake_package):
    fp = cache.code_fingerprint("residshift.core.b")
    _edit(fake_package / "core" / "b.py", "# a comment\n\ndef g(x):   \n    # double it\n\n    return 2 * x\n")
    assert cache.code_fingerprint("residshift.core.b") == fp
    _edit(fake_package / "core" / "b.py", "def g(y):\n    return 2 * y\n")
    assert cache.code_fingerprint("residshift.core.b") != fp


def test_docstrings_and_end_of_line_comments_do_not_count(fake_package):
    fp = cache.code_fingerprint("residshift.core.a")
    _edit(fake_package / "core" / "b.py",
          '"""What b holds."""\n\n\ndef g(x):\n    """Twice x."""\n    return 2 * (x)  # double it\n')
    assert cache.code_fingerprint("residshift.core.a") == fp
    _edit(fake_package / "core" / "b.py", '"""What b holds."""\n\n\ndef g(x):\n    return 2 * x + 0\n')
    assert cache.code_fingerprint("residshift.core.a") != fp


def test_a_docstring_edit_to_the_gpt_leaves_every_run_key_unchanged(tmp_path, monkeypatch):
    """What the thin-package issue asked: prose in the trained model's code retrains nothing; a
    change to what it computes still does (the trainer's key hashes the code it imports)."""
    from residshift.train import trainer

    copy = tmp_path / "residshift"
    shutil.copytree(cache.PACKAGE_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(cache, "PACKAGE_DIR", copy)

    def fingerprint():
        monkeypatch.setattr(cache, "_DISK", {})
        monkeypatch.setattr(cache, "_LOADED", {})  # read the copy, not the modules this process imported
        return trainer.training_code_fingerprint()

    before = fingerprint()
    gpt = copy / "core" / "models" / "gpt.py"
    text = gpt.read_text()
    assert "residshift.core.models.gpt" in cache.code_modules(trainer.__name__)
    _edit(gpt, text.replace('"""', '""" One space, and a sentence more.  ', 1) + "\n# a closing comment\n")
    assert fingerprint() == before
    _edit(gpt, text + "\nSCALE = 2.0\n")
    assert fingerprint() != before


def test_an_imported_module_keeps_the_fingerprint_of_the_code_it_runs(fake_package, monkeypatch):
    """Editing a file under a running kernel does not change what that kernel computes with; a
    reload (a new module spec) does."""
    mod = types.ModuleType("residshift.core.c")
    mod.__spec__ = object()
    monkeypatch.setitem(sys.modules, "residshift.core.c", mod)
    fp = cache.code_fingerprint("residshift.core.c")
    _edit(fake_package / "core" / "c.py", "def h(x):\n    return -x\n")
    assert cache.code_fingerprint("residshift.core.c") == fp
    mod.__spec__ = object()  # what importlib.reload does
    assert cache.code_fingerprint("residshift.core.c") != fp


def test_outside_code_counts_by_its_source_and_bad_targets_are_refused():
    def double(x):
        return 2 * x

    def triple(x):
        return 3 * x

    assert cache.code_fingerprint(double) != cache.code_fingerprint(triple)
    assert cache.code_fingerprint(double, None) == cache.code_fingerprint(double)
    with pytest.raises(ValueError, match="residshift module"):
        cache.code_fingerprint("torch.nn")
    with pytest.raises(TypeError, match="code="):
        cache.code_fingerprint(42)
    made = {}
    exec("def anonymous():\n    return 1\n", made)  # no file: its source cannot be read
    with pytest.raises(TypeError, match="source cannot be read"):
        cache.code_fingerprint(made["anonymous"])


def test_the_real_package_fingerprint_covers_imports_and_is_stable_across_runs():
    from residshift.measure import lens, tuned_lens

    mods = cache.code_modules(lens.run_lens)
    assert "residshift.measure.lens" in mods and "residshift.core.models.interface" in mods  # ModelInfo, via the __init__
    assert "residshift.core.cache" not in mods  # storing results computes nothing
    assert "residshift.core.profiles" not in mods  # its values reach results through the configs (in the key)
    assert "residshift.core.models" not in mods  # a package's __init__ only re-exports
    assert cache.code_fingerprint(lens.run_lens) == cache.code_fingerprint(lens)
    assert cache.code_fingerprint(lens) == cache.code_fingerprint("residshift.measure.lens")
    lens_obj = tuned_lens.TunedLens.__new__(tuned_lens.TunedLens)  # a method counts by its module
    assert cache.code_fingerprint(lens_obj.transform) == cache.code_fingerprint(tuned_lens)
    assert cache.code_fingerprint(lens.run_lens, tuned_lens) != cache.code_fingerprint(lens.run_lens)
    out = subprocess.run([sys.executable, "-c", "from residshift.core import cache; "
                          "print(cache.code_fingerprint('residshift.measure.lens'))"],
                         capture_output=True, text=True, check=True).stdout.strip()
    assert out == cache.code_fingerprint(lens)


def test_code_is_declared_where_a_result_is_cached(tmp_path, monkeypatch):
    """No guessing from the caller: every cached computation names its code, or gets an error saying how."""
    monkeypatch.setenv("RESIDSHIFT_RESULTS", str(tmp_path))
    for call in (lambda: cache.cached("toy", {"n": 1}, lambda: 1), lambda: cache.entry_path("toy", {"n": 1}),
                 lambda: cache.load("toy", {"n": 1}), lambda: cache.store("toy", {"n": 1}, 1)):
        with pytest.raises(TypeError, match="cache entry 'toy': pass code="):
            call()
    assert not any(tmp_path.iterdir())


def test_a_module_that_computes_nothing_moves_no_key(fake_package):
    """An import of the profiles (or any module in NOT_FINGERPRINTED) or a re-export in an __init__ is
    free: editing it changes no fingerprint, and its own imports are not followed."""
    (fake_package / "core" / "profiles.py").write_text("from . import c\nSIZES = {'n': 1}\n")
    _edit(fake_package / "core" / "a.py", "from . import b, profiles\n\n\ndef f(x):\n    return b.g(x) + 1\n")
    fp = cache.code_fingerprint("residshift.core.a")
    assert cache.code_modules("residshift.core.a") == ["residshift.core.a", "residshift.core.b"]
    _edit(fake_package / "core" / "profiles.py", "from . import c\nSIZES = {'n': 2}\n")
    _edit(fake_package / "core" / "c.py", "def h(x):\n    return -x\n")
    _edit(fake_package / "core" / "__init__.py", "from .c import h  # noqa: F401\n")
    assert cache.code_fingerprint("residshift.core.a") == fp
    _edit(fake_package / "core" / "b.py", "def g(x):\n    return 4 * x\n")  # code that computes: a new key
    assert cache.code_fingerprint("residshift.core.a") != fp


def test_package_inits_only_re_export():
    """Why the __init__ files may stay out of every fingerprint: they define nothing that computes."""
    import ast

    for init in cache.PACKAGE_DIR.rglob("__init__.py"):
        tree = ast.parse(init.read_text())
        for node in tree.body:
            value = getattr(node, "value", None)
            literal = isinstance(value, ast.Constant) or (isinstance(value, (ast.List, ast.Tuple))
                                                          and all(isinstance(e, ast.Constant) for e in value.elts))
            ok = isinstance(node, (ast.Import, ast.ImportFrom, ast.Expr)) or (
                isinstance(node, (ast.Assign, ast.AnnAssign)) and literal  # __version__, __all__
            ) or (isinstance(node, ast.FunctionDef) and node.name == "__getattr__")
            assert ok, f"{init}: line {node.lineno} computes something; move it into a module of the package"


def test_fingerprint_overhead_is_small_once_warm():
    """Not a timing target: a guard that the warm path stays memoized (no re-reading of files)."""
    from residshift.measure import lens

    cache.code_fingerprint(lens.run_lens)
    before = dict(cache._DISK)
    for _ in range(3):
        cache.code_fingerprint(lens.run_lens)
    assert all(cache._DISK[k] is v for k, v in before.items())
