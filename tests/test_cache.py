import json

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

    first = cache.cached("toy", {"n": 1}, compute)
    second = cache.cached("toy", {"n": 1}, compute)
    assert len(calls) == 1 and torch.equal(first["loss"], second["loss"])
    cache.cached("toy", {"n": 2}, compute)
    assert len(calls) == 2
    cache.cached("toy", {"n": 1}, compute, refresh=True)
    assert len(calls) == 3
    sidecar = cache.entry_path("toy", {"n": 1}).with_suffix(".json")
    assert json.loads(sidecar.read_text()) == {"n": 1}


def test_failed_write_leaves_no_partial_file(tmp_path):
    target = tmp_path / "out.pt"

    class Unpicklable:
        def __reduce__(self):
            raise RuntimeError("no")

    with pytest.raises(RuntimeError):
        cache.atomic_torch_save({"x": Unpicklable()}, target)
    assert list(tmp_path.iterdir()) == []


def test_config_must_be_json_like():
    with pytest.raises(TypeError, match="JSON-like"):
        cache.config_key({"f": object()})
    with pytest.raises(ValueError):
        cache.entry_path("../escape", {})
