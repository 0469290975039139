"""Files handed over by someone else, and what killed writes leave (issue 50): a planted pickle in a
run folder never runs (the grid's dry run reads steps from the log; the trainer refuses a checkpoint
it cannot check, and loads checked ones with ``weights_only=True``), a checkpoint without its digest
file is refused in one line, debris of a killed write is swept when a run starts, saved models get
the umask's file modes, and a pickled or truncated model file is refused in one line naming it.

The security cases use a harmless payload: unpickling it creates a marker file in ``tmp_path``."""
import dataclasses
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from residshift.core import cache, models
from residshift.core import fitting as F
from residshift.core.models import ModelError, load_model
from residshift.core.paths import REPO_ROOT
from residshift.tools import grid_launcher as GL
from residshift.tools.cli import main
from residshift.train import trainer as T

# A tiny run (as tests/test_trainer.py): real WikiText-2 text, the in-process byte tokenizer.
BASE = dict(layers=2, heads=2, width=32, context=32, tokenizer="tiny-llama", corpus="wikitext-2",
            split="validation", val_corpus="wikitext-2", val_split="test", tokens=32 * 8 * 6, batch_size=8,
            lr=3e-3, warmup=2, eval_every=4, eval_windows=8, checkpoint_every=2, bf16=False, compile=False)


def cfg(**kw):
    return T.TrainConfig(**{**BASE, **kw})


class Payload:
    """Unpickling it opens ``marker`` for writing, which creates the file: proof that the pickle ran."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def plant(path: Path, marker: Path, *, digest: bool) -> Path:
    """A checkpoint-shaped pickle with the payload at ``path`` (and a matching ``.sha256`` if ``digest``);
    checks first that unpickling it really runs the payload (so the tests below can fail)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"format": F.FORMAT, "module": {}, "state": Payload(marker)}, path)
    torch.load(path, weights_only=False)
    assert marker.exists()
    marker.unlink()
    if digest:
        cache.digest_path(path).write_text(f"{cache._sha256_file(path)}  {path.name}\n")
    return path


def one_line(text: str) -> str:
    text = text.strip()
    assert len(text.splitlines()) == 1, text
    return text


# ------------------------------------------------------------------------------------------
# Planted pickles
# ------------------------------------------------------------------------------------------


def test_a_dry_run_of_the_grid_never_unpickles_a_checkpoint(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RESIDSHIFT_RESULTS", str(tmp_path / "results"))
    marker = tmp_path / "ran"
    run = GL.plan(GL.resolve_profile("smoke")).runs[0]
    plant(run.folder / "checkpoint.pt", marker, digest=True)
    (run.folder / "log.jsonl").write_text("".join(json.dumps({"step": s, "loss": 5.0}) + "\n" for s in (1, 2, 3)))
    assert main(["train-grid", "--profile", "smoke", "--dry-run"]) == 0
    assert not marker.exists()
    assert f"partial (3/{run.steps} steps)" in capsys.readouterr().out  # the step, read from the log


@pytest.mark.parametrize("digest", [False, True], ids=["no-digest", "digest"])
def test_a_planted_checkpoint_is_refused_by_the_trainer_and_runs_nothing(tmp_path, digest):
    marker = tmp_path / "ran"
    ck = plant(tmp_path / "run" / "checkpoint.pt", marker, digest=digest)
    with pytest.raises(T.TrainError) as err:
        T.train(cfg(), ck.parent, progress=False)
    assert not marker.exists()
    message = one_line(str(err.value))
    assert message.startswith(f"checkpoint {ck} ") and message.endswith("delete it to start the run over")
    assert ("cannot be read" if digest else "is damaged (it has no digest file checkpoint.pt.sha256") in message
    assert not (ck.parent / "summary.json").exists()


def test_a_planted_fit_checkpoint_without_a_digest_runs_nothing(tmp_path):
    marker = tmp_path / "ran"
    ck = plant(tmp_path / "ck.pt", marker, digest=False)
    net = nn.Linear(3, 2)

    def step(s, micro, backward):
        loss = net(torch.ones(4, 3)).pow(2).mean()
        backward(loss)
        return loss.detach()

    with pytest.raises(F.FitError, match=rf"^checkpoint {ck} is damaged \(it has no digest file ck\.pt\.sha256"
                                         r".*; delete it to start the fit over$"):
        F.fit(net, F.FitConfig(steps=2, lr=0.1), step_fn=step, checkpoint=ck)
    assert not marker.exists()


# ------------------------------------------------------------------------------------------
# Checkpoints: no digest refused; debris swept; a resume is bit for bit
# ------------------------------------------------------------------------------------------


def _flip(path: Path, start: int, n: int) -> None:
    data = bytearray(path.read_bytes())
    data[start:start + n] = bytes(b ^ 0xFF for b in data[start:start + n])
    path.write_bytes(bytes(data))


def test_a_checkpoint_without_its_digest_file_is_refused_in_one_cli_line(tmp_path, capsys):
    """The reported case: ``.sha256`` deleted and bytes flipped inside the weights resumed silently."""
    c = cfg()
    out = tmp_path / "cli"
    fields = [a for f in dataclasses.fields(c) for a in ("-p", f"{f.name}={json.dumps(getattr(c, f.name))}")]
    base = ["train", "--profile", "smoke", *fields, "--out", str(out), "--no-progress"]
    assert main(base + ["--stop-after", "2"]) == 0
    ck = out / "checkpoint.pt"
    emb = torch.load(ck, weights_only=True)["module"]["transformer.wte.weight"].numpy().tobytes()
    _flip(ck, ck.read_bytes().find(emb) + 4000, 400)
    (out / "checkpoint.pt.sha256").unlink()
    capsys.readouterr()
    assert main(base) == 2
    err = one_line(capsys.readouterr().err)
    assert err == (f"residshift train: error: checkpoint {ck} is damaged (it has no digest file checkpoint.pt.sha256: "
                   "residshift did not write it, or a write was killed); delete it to start the run over")
    assert not (out / "summary.json").exists() and not (out / "checkpoint.pt.sha256").exists()  # not adopted


# Temporary names of versions before the names carried their writer (a kill left them; never live
# under the run's lock), and files that are not ours to delete.
OLD_DEBRIS = [".checkpoint.pt.k3j_9xa2.tmp", ".checkpoint.pt.sha256.abcdefgh.tmp", ".log.jsonl.a1b2c3d4.tmp",
              ".summary.json.zz_00019.tmp", ".model.0123abcd"]
KEPT = ["notes.txt", ".checkpoint.pt.backup", ".checkpoint.pt.k3j_9xa2.tmp.mine", ".other.abcdefgh.tmp",
        ".model.mine", ".model.0123ABCD", "model.0123abcd"]

# A process killed (no cleanup runs: os._exit) while it writes a checkpoint and a model folder.
KILLED_WRITE = """
import os, sys
from pathlib import Path
from residshift.core import cache
run = Path(sys.argv[1])
with cache.atomic_path(run / "checkpoint.pt") as tmp:
    tmp.write_bytes(b"a whole checkpoint" * 1000)
    with cache.atomic_dir(run / "model") as folder:
        (folder / "model.safetensors").write_bytes(b"weights")
        os._exit(9)
"""


def test_debris_of_a_killed_write_is_swept_when_the_run_starts_and_the_run_resumes_bit_for_bit(tmp_path):
    c = cfg()
    full = T.train(c, tmp_path / "full", progress=False)
    run = T.train(c, tmp_path / "part", progress=False, stop_after=3)
    ck = run / "checkpoint.pt"
    saved = torch.load(ck, weights_only=True)  # tensors and plain values only: no allow-list needed
    assert saved["state"]["step"] == 3 and isinstance(saved["config"], dict)
    before = {p.name for p in run.iterdir()}
    killed = subprocess.run([sys.executable, "-c", KILLED_WRITE, str(run)], cwd=REPO_ROOT, capture_output=True,
                            text=True, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert killed.returncode == 9, killed.stderr
    debris = {p.name for p in run.iterdir()} - before
    assert len(debris) == 2 and all(name.startswith((".checkpoint.pt.", ".model.")) for name in debris)
    for name in OLD_DEBRIS + KEPT:
        if name.startswith(".model."):
            (run / name).mkdir()
            shutil.copy(ck, run / name / "model.safetensors")
        else:
            shutil.copy(ck, run / name)
    T.train(c, run, progress=False)
    left = {p.name for p in run.iterdir()}
    assert not left & (debris | set(OLD_DEBRIS)) and set(KEPT) <= left
    assert curve(run) == curve(full)
    from safetensors.torch import load_file

    a, b = load_file(full / "model" / "model.safetensors"), load_file(run / "model" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert T.read_summary(run)["val_loss"] == T.read_summary(full)["val_loss"]


def curve(run: Path) -> list[tuple]:
    """Each record's step, training loss and validation loss (timings differ between runs)."""
    return [(r["step"], r.get("loss"), r.get("eval")) for r in T.read_log(run)]


# ------------------------------------------------------------------------------------------
# File modes
# ------------------------------------------------------------------------------------------


@pytest.fixture()
def umask():
    """Set the process's umask for the test (restored after)."""
    before = os.umask(0o022)
    os.umask(before)
    yield lambda mask: os.umask(mask)
    os.umask(before)


def _modes(folder: Path) -> dict[str, int]:
    return {p.relative_to(folder).as_posix(): stat.S_IMODE(p.stat().st_mode) for p in [folder, *folder.rglob("*")]}


def test_a_trained_models_files_get_the_umasks_mode(tmp_path, umask):
    umask(0o022)
    run = T.train(cfg(tokens=32 * 8 * 2, eval_every=0), tmp_path / "r", progress=False)
    modes = _modes(run)
    assert "model/model.safetensors" in modes
    assert {name: mode for name, mode in modes.items() if mode != (0o755 if (run / name).is_dir() else 0o644)} == {}


def test_a_dequantized_models_files_get_the_umasks_mode(tmp_path, umask):
    umask(0o027)
    model, tok = models.build_tiny("tiny-gpt2", seed=1)
    models._atomic_save_pretrained(model, tok, tmp_path / "m", {"name": "x"})
    modes = _modes(tmp_path / "m")
    assert "model.safetensors" in modes
    assert {n: m for n, m in modes.items() if m != (0o750 if (tmp_path / "m" / n).is_dir() else 0o640)} == {}


# ------------------------------------------------------------------------------------------
# Model folders from elsewhere
# ------------------------------------------------------------------------------------------


def _foreign_folder(path: Path):
    """A model folder residshift did not write (no SHA256SUMS), and its model."""
    model, tok = models.build_tiny("tiny-gpt2", seed=3)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path, model


@pytest.mark.parametrize("content", ["weights", "payload"])
def test_a_pickled_model_file_is_refused_in_one_line(tmp_path, content):
    folder, model = _foreign_folder(tmp_path / "m")
    (folder / "model.safetensors").unlink()
    marker = tmp_path / "ran"
    torch.save(model.state_dict() if content == "weights" else Payload(marker), folder / "pytorch_model.bin")
    with pytest.raises(ModelError) as err:
        load_model(str(folder))
    message = one_line(str(err.value))
    assert message.startswith(f"{folder / 'pytorch_model.bin'} is a pickled model file") and "safetensors" in message
    assert not marker.exists()


def test_a_truncated_safetensors_file_in_a_foreign_folder_is_one_line_naming_it(tmp_path):
    folder, _ = _foreign_folder(tmp_path / "m")
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:weights.stat().st_size // 2])
    with pytest.raises(ModelError) as err:
        load_model(str(folder))
    message = one_line(str(err.value))
    assert message.startswith(f"{weights} cannot be read (") and "truncated or damaged" in message
