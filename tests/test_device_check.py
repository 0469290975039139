"""benchmarks/device_check.py: the one-line answer where there is no CUDA device, and its train and lens
sections run on the CPU at tiny sizes (the same code measures the GPU)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import device_check  # noqa: E402


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
def test_no_cuda_device_says_so_in_one_line_and_writes_nothing(tmp_path):
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "device_check.py"), "--out", str(tmp_path)],
                          capture_output=True, text=True, cwd=REPO, env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"},
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines == [device_check.NO_DEVICE] and lines[0].startswith("no CUDA device")
    assert list(tmp_path.iterdir()) == []


def test_unknown_section_is_refused_with_the_choices(capsys):
    if not torch.cuda.is_available():
        pytest.skip("the sections are checked after the CUDA check")
    with pytest.raises(SystemExit):
        device_check.main(["--sections", "trian"])


def test_train_section_measures_each_precision_in_the_grid_launchers_layout():
    shape = dict(n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=64, mlp="geglu", batch=2)
    out = device_check.train_section(device_check.Budget(600), 1, 1, device="cpu",
                                     shapes_=(("paper", shape, device_check.PRECISIONS[:2]),))
    entry = out["shapes"]["paper"]
    assert entry["shape"] == shape and set(entry["precision"]) == {"fp32-eager", "bf16-eager"}
    assert all(v["tokens_per_s"] > 0 for v in entry["precision"].values())
    assert entry["precision"]["fp32-eager"]["ratio_vs_fp32_eager"] == 1.0
    # the launcher reads exactly this layout (tools.grid_launcher.measured_speed)
    from residshift.tools import grid_launcher as G
    from residshift.train.trainer import TrainConfig

    cfg = TrainConfig(layers=2, heads=2, width=32, context=16, mlp="geglu", bf16=False, compile=False)
    data = {"machine": {"device": "cuda", "gpu": "Test GPU"}, **out}
    path = Path(__file__).parent / "_bench-train-cuda-test.json"
    try:
        path.write_text(json.dumps(data))
        speed = G.measured_speed(cfg, "cuda", vocab=64, bench=[path])
    finally:
        path.unlink(missing_ok=True)
    assert speed and speed["machine"] == "Test GPU"
    assert speed["tokens_per_s"] == entry["precision"]["fp32-eager"]["tokens_per_s"]


def test_a_spent_budget_skips_a_section_with_its_reason():
    out = device_check.train_section(device_check.Budget(0), 1, 1, device="cpu")
    assert all("budget" in v["skipped"] for v in out["shapes"].values())


def test_lens_section_times_a_random_draw_of_a_model_card(tmp_path):
    from residshift.core.models import build_tiny

    model, tok = build_tiny("tiny-llama")
    card = tmp_path / "tiny"
    model.config.save_pretrained(card)
    tok.save_pretrained(card)
    out = device_check.lens_section(device_check.Budget(600), tmp_path, 3, 12, 2, device="cpu",
                                    models=("tiny", "absent"))
    assert "no model card" in out["models"]["absent"]["skipped"]
    for dtype in ("float32", "bfloat16"):
        r = out["models"][f"tiny-{dtype}"]
        assert r["tokens"] == 36 and r["layers"] == model.config.num_hidden_layers and r["tokens_per_s"] > 0
        assert "rank_next" in " ".join(r["metrics"])


def test_the_command_line_asks_onemkl_for_its_reproducible_kernels_and_keeps_a_users_choice():
    code = ("import os, residshift.__main__ as m\n"
            "try:\n    m.main(['--version'])\nexcept SystemExit:\n    pass\n"
            "print(os.environ.get('MKL_CBWR'))")
    env = {"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"}
    run = lambda e: subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,  # noqa: E731
                                   env=e, timeout=120).stdout.strip().splitlines()[-1]
    assert run(env) == "AVX2,STRICT"
    assert run({**env, "MKL_CBWR": "COMPATIBLE"}) == "COMPATIBLE"


def test_kernels_note_names_the_setting_when_it_is_off(monkeypatch):
    from residshift.core import machine

    monkeypatch.setattr(machine.torch.backends.mkl, "is_available", lambda: True)
    monkeypatch.setenv("MKL_CBWR", "AVX2,STRICT")
    assert machine.kernels_note() is None
    monkeypatch.delenv("MKL_CBWR")
    note = machine.kernels_note()
    assert "MKL_CBWR=AVX2,STRICT" in note and "Intel and AMD" in note


def test_paper_steps_run_each_stage_once_on_a_random_gemma2(tmp_path):
    """The paper-steps section's code path on a CPU: a small Gemma-2 config (the device check uses
    Gemma2Config()'s defaults, Gemma-2-2B's shapes) and tiny sizes; every step runs and is timed."""
    from transformers import Gemma2Config

    from residshift.core.models import build_tiny

    model, tok = build_tiny("tiny-gemma3")
    tok.save_pretrained(tmp_path / "gemma3-270m")
    cfg = Gemma2Config(vocab_size=tok.vocab_size if hasattr(tok, "vocab_size") else 300, hidden_size=32,
                       intermediate_size=64, num_hidden_layers=3, num_attention_heads=2, num_key_value_heads=1,
                       head_dim=16)
    out = device_check.paper_steps_section(device_check.Budget(600), tmp_path, device="cpu", config=cfg,
                                           dtype=torch.float32, sizes={k: (2, 12) for k in ("lens", "tuned", "gate", "sweep")})
    assert out["model"]["layers"] == 3 and out["model"]["softcap"]
    assert set(out["steps"]) == {"trainer_micro_batch", "lens_batch", "tuned_lens_step", "token_gate_step", "sweep_cell"}
    tm = out["trainer_micro_batch"]
    assert (tm["share"], tm["micro_batch"], tm["context"]) == (256, 256, 1024)  # a CPU: the share in one pass
    assert all(r["seconds"] > 0 for r in out["steps"].values()), out["steps"]
    assert device_check.d2h_copies(lambda: None, "cpu") is None
    assert device_check.previous_lens_speeds(tmp_path / "absent.json") == {}
    committed = device_check.previous_lens_speeds(REPO / "benchmarks" / "bench-lens-cuda.json")
    assert committed and all(v > 0 for v in committed.values())
