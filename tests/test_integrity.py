"""Nothing lost and nothing silently wrong (issue 32): verified torch files (``cache.save_verified`` /
``load_verified``), damaged cache entries recomputed with a warning naming the file, damaged
checkpoints refused naming the file and the fix, files without a digest never adopted and nothing but
tensors, plain values, numpy arrays and storable classes unpickled (issue 50), a kill at any point of a
save leaving a loadable file, and the digest manifest of trained model folders."""
import os
import struct
from pathlib import Path

import pytest
import torch
from torch import nn

from residshift.core import cache
from residshift.core import fitting as F


def _replace_once(path, old: bytes, new: bytes):
    data = path.read_bytes()
    assert data.count(old) == 1, "the bytes to change must occur once"
    path.write_bytes(data.replace(old, new))


def _f32(*values) -> bytes:
    return struct.pack(f"<{len(values)}f", *values)


# ------------------------------------------------------------------------------------------
# The mechanism
# ------------------------------------------------------------------------------------------


def test_save_verified_writes_the_payload_and_its_sha256_and_loads_it_back(tmp_path):
    path = cache.save_verified({"x": torch.arange(4.0), "n": 3}, tmp_path / "a.pt")
    side = tmp_path / "a.pt.sha256"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.pt", "a.pt.sha256"]  # no temporary files left
    digest = side.read_text().split()[0]
    assert side.read_text() == f"{digest}  a.pt\n" and digest == cache._sha256_file(path)  # sha256sum format
    back = cache.load_verified(path)
    assert torch.equal(back["x"], torch.arange(4.0)) and back["n"] == 3
    with pytest.raises(FileNotFoundError):
        cache.load_verified(tmp_path / "missing.pt")


def test_a_changed_float_garbled_bytes_or_a_garbled_digest_file_are_damaged(tmp_path):
    path = cache.save_verified({"x": torch.tensor([1.5, 2.5, 3.25])}, tmp_path / "a.pt")
    _replace_once(path, _f32(2.5), _f32(2.75))
    assert torch.load(path, weights_only=False)["x"][1] == 2.75  # torch alone reads it silently
    with pytest.raises(cache.DamagedFileError, match=r"a\.pt is damaged \(sha256 mismatch: the file changed"):
        cache.load_verified(path)
    path = cache.save_verified({"x": 1}, tmp_path / "b.pt")
    (tmp_path / "b.pt.sha256").write_text("not a digest\n")
    with pytest.raises(cache.DamagedFileError, match="digest file b.pt.sha256 is garbled"):
        cache.load_verified(path)


class _Planted:
    """A harmless payload: unpickling it (weights_only=False) would create the file ``marker``."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (Path.touch, (Path(self.marker),))


def test_a_planted_pickle_never_runs_with_or_without_a_digest(tmp_path):
    marker = tmp_path / "ran"
    path = cache.save_verified({"x": _Planted(marker)}, tmp_path / "a.pt")  # its digest is right
    with pytest.raises(cache.DamagedFileError, match=r"a\.pt is damaged \(cannot be read: .*Unsupported global"):
        cache.load_verified(path)
    (tmp_path / "a.pt.sha256").unlink()
    with pytest.raises(cache.DamagedFileError, match=r"a\.pt is damaged \(it has no digest file a\.pt\.sha256"):
        cache.load_verified(path)
    assert not marker.exists() and not (tmp_path / "a.pt.sha256").exists()  # never ran, never adopted


def test_a_file_without_a_digest_is_never_adopted(tmp_path):
    path = tmp_path / "old.pt"
    cache.atomic_torch_save({"x": torch.tensor([1.5, 2.5])}, path)  # as older versions (or someone else) wrote it
    for _ in range(2):
        with pytest.raises(cache.DamagedFileError, match="has no digest file old.pt.sha256"):
            cache.load_verified(path)
    assert not (tmp_path / "old.pt.sha256").exists()


def test_numpy_arrays_and_storable_classes_load_with_weights_only(tmp_path):
    import numpy as np

    from residshift.measure.lens import LensResult

    obj = {"a": np.arange(3, dtype=np.int32), "b": np.array([True, False]), "c": np.float64(2.5),
           "r": LensResult("m", 2, ["x"], {"x": torch.ones(1, 3)}, {}, {"cur": np.zeros(2)})}
    back = cache.load_verified(cache.save_verified(obj, tmp_path / "a.pt"))
    assert back["a"].tolist() == [0, 1, 2] and back["b"].dtype == bool and back["c"] == 2.5
    assert isinstance(back["r"], LensResult) and torch.equal(back["r"].per_seq["x"], torch.ones(1, 3))


def _save_killed_at(monkeypatch, obj, path, rename: int):
    """``save_verified(obj, path)`` killed just before its ``rename``-th rename (1: the first digest
    file, 2: the payload, 3: the final digest file): that rename and everything after never happen."""
    real, calls = os.replace, []

    def killed(src, dst):
        calls.append(dst)
        if len(calls) == rename:
            raise KeyboardInterrupt
        real(src, dst)

    monkeypatch.setattr(os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        cache.save_verified(obj, path)
    monkeypatch.setattr(os, "replace", real)
    assert [Path(p).name for p in calls] == ["a.pt.sha256", "a.pt", "a.pt.sha256"][:rename]


@pytest.mark.parametrize("rename, expect", [(1, "old"), (2, "old"), (3, "new")])
def test_a_kill_at_any_point_of_a_save_leaves_a_file_that_loads(tmp_path, monkeypatch, rename, expect):
    path = tmp_path / "a.pt"
    cache.save_verified("old", path)
    _save_killed_at(monkeypatch, "new", path, rename)
    assert cache.load_verified(path) == expect
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary files left
    cache.save_verified("newer", path)  # and the next save starts clean
    assert cache.load_verified(path) == "newer" and len((tmp_path / "a.pt.sha256").read_text().splitlines()) == 1


def test_the_digest_file_states_between_the_renames_written_by_hand_still_load(tmp_path):
    path = tmp_path / "a.pt"
    cache.save_verified("old", path)
    old = cache._sha256_file(path)
    side = tmp_path / "a.pt.sha256"
    new_bytes = tmp_path / "new.pt"
    torch.save("new", new_bytes)
    new = cache._sha256_file(new_bytes)
    side.write_text(f"{new}  a.pt\n{old}  a.pt\n")  # killed after the first digest write
    assert cache.load_verified(path) == "old"
    new_bytes.replace(path)  # killed after the payload's rename
    assert cache.load_verified(path) == "new"
    side.write_text(f"{old}  a.pt\n")  # a payload whose digest is not listed is damaged
    with pytest.raises(cache.DamagedFileError, match="sha256 mismatch"):
        cache.load_verified(path)


def test_discard_removes_the_payload_before_its_digest(tmp_path, monkeypatch):
    path = cache.save_verified(1, tmp_path / "a.pt")
    cache.discard_verified(path)
    assert list(tmp_path.iterdir()) == []
    cache.discard_verified(path)  # nothing there: no error


# ------------------------------------------------------------------------------------------
# Cache entries: damage is a miss, recomputed with a warning naming the file
# ------------------------------------------------------------------------------------------


def _entry(tmp_path, monkeypatch):
    monkeypatch.setenv("RESIDSHIFT_RESULTS", str(tmp_path))
    calls = []

    def compute():
        calls.append(1)
        return {"loss": torch.tensor([1.5, 2.5, 3.25])}

    cache.cached("toy", {"n": 1}, compute, code=compute)
    return compute, calls, cache.entry_path("toy", {"n": 1}, code=compute)


def test_one_float_changed_in_a_cached_result_is_recomputed_with_a_warning(tmp_path, monkeypatch):
    compute, calls, path = _entry(tmp_path, monkeypatch)
    _replace_once(path, _f32(2.5), _f32(2.75))  # the reported case: one float changed, torch reads it
    with pytest.warns(cache.DamagedFileWarning, match=rf"cached result {path} is damaged \(sha256 mismatch.*"
                                                      r"recomputing it \(the new result replaces it\)"):
        value = cache.cached("toy", {"n": 1}, compute, code=compute)
    assert torch.equal(value["loss"], torch.tensor([1.5, 2.5, 3.25])) and len(calls) == 2
    assert torch.equal(cache.load("toy", {"n": 1}, code=compute)["loss"], value["loss"])  # replaced, verified
    assert path.with_suffix(".json").is_file()


def test_a_truncated_cache_entry_is_a_miss_naming_the_file(tmp_path, monkeypatch):
    compute, calls, path = _entry(tmp_path, monkeypatch)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.warns(cache.DamagedFileWarning, match=rf"{path} is damaged \(.*load\(\) returns None"):
        assert cache.load("toy", {"n": 1}, code=compute) is None
    assert sorted(p.name for p in path.parent.iterdir()) == []  # the damaged entry is gone, all of it
    compute2, calls, path = _entry(tmp_path, monkeypatch)  # stored again
    path.write_bytes(path.read_bytes()[:100])
    (path.parent / (path.name + ".sha256")).unlink()  # without its digest: never read at all
    with pytest.warns(cache.DamagedFileWarning, match=rf"{path} is damaged \(it has no digest file"):
        value = cache.cached("toy", {"n": 1}, compute2, code=compute2)
    assert torch.equal(value["loss"], torch.tensor([1.5, 2.5, 3.25])) and len(calls) == 2


def test_a_cache_entry_without_its_digest_is_computed_again_and_never_run(tmp_path, monkeypatch):
    compute, calls, path = _entry(tmp_path, monkeypatch)
    marker = tmp_path / "ran"
    torch.save({"loss": _Planted(marker)}, path)  # a planted entry, as a handed-over results folder may hold
    (path.parent / (path.name + ".sha256")).unlink()
    with pytest.warns(cache.DamagedFileWarning, match="has no digest file"):
        value = cache.cached("toy", {"n": 1}, compute, code=compute)
    assert torch.equal(value["loss"], torch.tensor([1.5, 2.5, 3.25])) and len(calls) == 2
    assert not marker.exists() and cache.load_verified(path)["loss"].shape == (3,)  # replaced by our own


# ------------------------------------------------------------------------------------------
# Fit checkpoints: damage is refused, naming the file and the fix
# ------------------------------------------------------------------------------------------


def _fit(tmp_path, steps, stop_after=None):
    torch.manual_seed(0)
    net = nn.Linear(6, 200)
    X = torch.randn(32, 6, generator=torch.Generator().manual_seed(1))

    def step(s, micro, backward):
        loss = net(X[F.epoch_batch(32, 8, s, 0)]).pow(2).mean()
        backward(loss)
        return loss.detach()

    r = F.fit(net, F.FitConfig(steps=steps, lr=0.01), step_fn=step, checkpoint=tmp_path / "ck.pt",
              stop_after=stop_after)
    return net, r


def test_bytes_flipped_inside_a_fit_checkpoint_are_refused_naming_the_file_and_the_fix(tmp_path):
    net, r = _fit(tmp_path, steps=6, stop_after=3)
    ck = tmp_path / "ck.pt"
    assert not r.finished and (tmp_path / "ck.pt.sha256").is_file()
    weights = net.weight.detach().numpy().tobytes()
    data = bytearray(ck.read_bytes())
    at = data.find(weights)
    assert at > 0
    data[at + 1000:at + 1400] = bytes(b ^ 0xFF for b in data[at + 1000:at + 1400])  # 400 bytes of weights
    ck.write_bytes(bytes(data))
    assert torch.load(ck, weights_only=False)["state"]["step"] == 3  # torch alone would resume from it
    with pytest.raises(F.FitError, match=rf"checkpoint {ck} is damaged \(sha256 mismatch: the file changed after "
                                         r"it was written.*\); delete it to start the fit over"):
        _fit(tmp_path, steps=6)


def test_a_truncated_fit_checkpoint_is_refused(tmp_path):
    _fit(tmp_path, steps=6, stop_after=3)
    ck = tmp_path / "ck.pt"
    ck.write_bytes(ck.read_bytes()[:2000])
    with pytest.raises(F.FitError, match=rf"checkpoint {ck} is damaged .*delete it to start the fit over"):
        _fit(tmp_path, steps=6)
    (tmp_path / "ck.pt.sha256").unlink()  # without its digest file: refused all the same
    with pytest.raises(F.FitError, match=r"ck\.pt (is damaged \(it )?has no digest file.*delete it to start the fit over"):
        _fit(tmp_path, steps=6)


def test_a_fit_checkpoint_without_its_digest_is_refused_not_resumed(tmp_path):
    _fit(tmp_path, steps=6, stop_after=3)
    (tmp_path / "ck.pt.sha256").unlink()  # a checkpoint from elsewhere, or older than digests
    with pytest.raises(F.FitError, match=r"ck\.pt (is damaged \(it )?has no digest file.*delete it to start the fit over"):
        _fit(tmp_path, steps=6)
    assert not (tmp_path / "ck.pt.sha256").exists()


# ------------------------------------------------------------------------------------------
# Folder manifests (trained models)
# ------------------------------------------------------------------------------------------


def test_manifest_lists_every_file_and_finds_a_changed_or_missing_one(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.bin").write_bytes(b"\x00" * 100)
    (tmp_path / "sub" / "b.json").write_text("{}")
    assert cache.verify_manifest(tmp_path) is False  # none yet
    cache.write_manifest(tmp_path)
    lines = (tmp_path / "SHA256SUMS").read_text().splitlines()
    assert [line.split("  ")[1] for line in lines] == ["a.bin", "sub/b.json"]
    assert cache.verify_manifest(tmp_path) is True
    (tmp_path / "a.bin").write_bytes(b"\x00" * 99 + b"\x01")
    with pytest.raises(cache.DamagedFileError, match=r"a\.bin is damaged \(sha256 mismatch"):
        cache.verify_manifest(tmp_path)
    (tmp_path / "a.bin").unlink()
    with pytest.raises(cache.DamagedFileError, match="listed in SHA256SUMS but missing"):
        cache.verify_manifest(tmp_path)


def test_a_damaged_dequantized_model_is_prepared_again_and_an_old_one_adopted(tmp_path, monkeypatch):
    """The dequantized-model cache (data/cache/models) is checked against its SHA256SUMS on every
    load: one float changed in its safetensors is found, named and the model prepared again; a folder
    prepared before the manifests existed is adopted."""
    import sys
    from pathlib import Path

    from residshift.core import models

    sys.path.insert(0, str(Path(__file__).parent))
    from test_models import write_gguf

    monkeypatch.setenv("RESIDSHIFT_CACHE", str(tmp_path / "cache"))
    model, tok = models.build_tiny("tiny-llama", seed=5)
    path = tmp_path / "tiny.gguf"
    write_gguf(path, model, tok)
    calls = []
    real = models._dequantize_gguf
    monkeypatch.setattr(models.embedded, "_dequantize_gguf", lambda *a: calls.append(a) or real(*a))
    folder = models.prepare_gguf(path)
    assert (folder / cache.MANIFEST).is_file() and cache.verify_manifest(folder)
    weights = next(folder.glob("*.safetensors"))
    clean = weights.read_bytes()
    data = bytearray(clean)
    data[-100] ^= 0x40  # one float of the last tensor
    weights.write_bytes(bytes(data))
    with pytest.warns(cache.DamagedFileWarning, match=f"{weights.name}.*sha256 mismatch.*preparing it again"):
        assert models.prepare_gguf(path) == folder
    assert len(calls) == 2 and weights.read_bytes() == clean and cache.verify_manifest(folder)

    (folder / cache.MANIFEST).unlink()  # prepared by an older version: adopted, not prepared again
    models.prepare_gguf(path)
    assert len(calls) == 2 and cache.verify_manifest(folder)


def test_a_trained_model_folder_with_a_manifest_is_checked_wherever_it_is_loaded(tmp_path):
    """load_model(folder) checks a folder residshift wrote (SHA256SUMS inside: a trained GPT) before
    reading it, so notebooks that read trained runs directly never read damaged weights; a folder of
    the user's without a manifest is read as before (and not written into)."""
    from residshift.core import models

    model, tok = models.build_tiny("tiny-llama", seed=3)
    folder = tmp_path / "model"
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    models.load_model(str(folder))
    assert not (folder / cache.MANIFEST).exists()  # not ours: not adopted
    cache.write_manifest(folder)
    models.load_model(str(folder))
    weights = next(folder.glob("*.safetensors"))
    data = bytearray(weights.read_bytes())
    data[-64] ^= 0x01
    weights.write_bytes(bytes(data))
    with pytest.raises(models.ModelError, match=f"{weights.name}.*sha256 mismatch.*save the model again"):
        models.load_model(str(folder))


def test_load_or_discard_recomputes_a_damaged_partial_result(tmp_path):
    path = tmp_path / "row.pt"
    cache.save_verified(torch.ones(3), path)
    assert torch.equal(cache.load_or_discard(path, what="row", then="again"), torch.ones(3))
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.warns(cache.DamagedFileWarning, match=r"row .*row\.pt is damaged .*deleted it; again"):
        assert cache.load_or_discard(path, what="row", then="again") is None
    assert not path.exists() and not cache.digest_path(path).exists()
    assert cache.load_or_discard(path, what="row", then="again") is None  # absent: None, no warning


def test_the_debris_of_a_killed_write_is_swept_and_a_live_writers_kept(tmp_path, monkeypatch):
    """A SIGKILLed writer leaves its temporary file (and a killed atomic_dir its folder); the next
    computation in that folder removes them, never a live writer's or anything else."""
    import subprocess
    import sys

    code = ("import os, sys, pathlib; from residshift.core import cache\n"
            "with cache.atomic_path(pathlib.Path(sys.argv[1]) / 'a.pt') as t:\n"
            "    t.write_bytes(b'x' * 1000); os.kill(os.getpid(), 9)\n")
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "toy")])
    code_dir = ("import os, sys, pathlib; from residshift.core import cache\n"
                "with cache.atomic_dir(pathlib.Path(sys.argv[1]) / 'model') as t:\n"
                "    (t / 'w').write_bytes(b'x'); os.kill(os.getpid(), 9)\n")
    subprocess.run([sys.executable, "-c", code_dir, str(tmp_path / "toy")])
    debris = sorted(p.name for p in (tmp_path / "toy").iterdir())
    assert len(debris) == 2 and all(p.startswith((".a.pt.", ".model.")) for p in debris)
    with cache.atomic_path(tmp_path / "toy" / "b.pt") as live:  # this process is alive: its file stays
        (tmp_path / "toy" / ".mine.tmp").write_text("not ours")
        monkeypatch.setenv("RESIDSHIFT_RESULTS", str(tmp_path))
        cache.cached("toy", {"n": 1}, lambda: 1, code=_nested_code)
        left = sorted(p.name for p in (tmp_path / "toy").iterdir() if p.name.startswith("."))
        assert left == sorted([".mine.tmp", live.name])


def _nested_code():
    return None


def test_a_folder_written_again_sweeps_what_a_killed_write_of_it_left(tmp_path):
    import subprocess
    import sys

    code = ("import os, sys, pathlib; from residshift.core import cache\n"
            "with cache.output_dir(pathlib.Path(sys.argv[1]) / 'out') as t:\n"
            "    (t / 'w').write_bytes(b'x'); os.kill(os.getpid(), 9)\n")
    subprocess.run([sys.executable, "-c", code, str(tmp_path)])
    assert len([p for p in tmp_path.iterdir() if p.name.startswith(".out.")]) == 1  # the killed write's folder
    with cache.output_dir(tmp_path / "out") as t:
        (t / "w").write_bytes(b"y")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
