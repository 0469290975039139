"""benchmarks/bench_bounds.py: its FLOP formulas agree with torch's FlopCounterMode on tiny models,
and its --quick path writes a row for every stage."""
import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


def _module():
    spec = importlib.util.spec_from_file_location("bench_bounds", ROOT / "benchmarks" / "bench_bounds.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_bounds"] = mod  # its dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


bb = _module()
B, T = 2, 24


def _model(name):
    if name == "gpt":
        from residshift.core.models.gpt import GPT, GPTConfig

        return GPT(GPTConfig(n_layer=2, n_head=2, n_embd=32, block_size=32, vocab_size=128))
    from residshift.core.models import build_tiny

    return build_tiny(name)[0]


def _counted(run):
    with bb.flop_counter() as fc:
        run()
    return fc.get_total_flops()


MODELS = ["tiny-llama", "tiny-gemma3", "tiny-gpt2", "gpt"]


@pytest.mark.parametrize("name", MODELS)
def test_forward_flops_match_flop_counter(name):
    m = _model(name)
    a = bb.arch_of(m.config)
    ids = torch.randint(0, a.vocab, (B, T), generator=torch.Generator().manual_seed(0))
    fwd = bb.block_gemms(a, B, T, a.layers) + [bb.head_gemm(a, B * T)]
    with torch.no_grad():
        counted = _counted(lambda: m(ids))
    assert bb.total_flops(fwd) == pytest.approx(counted, rel=1e-3)


@pytest.mark.parametrize("name", MODELS)
def test_training_backward_flops_match_flop_counter(name):
    m = _model(name)
    a = bb.arch_of(m.config)
    ids = torch.randint(0, a.vocab, (B, T), generator=torch.Generator().manual_seed(0))
    counted = _counted(lambda: m(ids).logits.logsumexp(-1).sum().backward())
    assert bb.total_flops(bb.train_step_gemms(a, B, T)) == pytest.approx(counted, rel=0.03)


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gemma3", "tiny-gpt2"])
def test_frozen_backward_flops_match_flop_counter(name):
    """Frozen weights (the gate fits, the tuned lens's head): only the inputs' gradients."""
    m = _model(name).requires_grad_(False)
    a = bb.arch_of(m.config)
    ids = torch.randint(0, a.vocab, (B, T), generator=torch.Generator().manual_seed(0))
    emb = m.get_input_embeddings()(ids).detach().requires_grad_(True)
    fwd = bb.block_gemms(a, B, T, a.layers) + [bb.head_gemm(a, B * T)]
    counted = _counted(lambda: m(inputs_embeds=emb).logits.logsumexp(-1).sum().backward())
    assert bb.total_flops(fwd + bb.backward(fwd, weights=False)) == pytest.approx(counted, rel=0.03)


def test_recorder_sees_the_formula_gemms():
    m = _model("tiny-llama")
    a = bb.arch_of(m.config)
    ids = torch.randint(0, a.vocab, (B, T), generator=torch.Generator().manual_seed(0))
    with torch.no_grad(), bb.GemmRecorder() as rec:
        m(ids)
    fwd = bb.block_gemms(a, B, T, a.layers) + [bb.head_gemm(a, B * T)]
    assert bb.total_flops(rec.gemms) == pytest.approx(bb.total_flops(fwd), rel=1e-3)


def test_quick_run_writes_every_stage(tmp_path, monkeypatch):
    monkeypatch.setenv("RESIDSHIFT_RESULTS", str(tmp_path / "results"))
    path = tmp_path / "bench-bounds.json"
    bb.main(["--quick", "--rounds", "1", "--json", str(path)])
    out = json.loads(path.read_text())
    assert [r["stage"] for r in out["stages"]] == list(bb.STAGES)
    for r in out["stages"]:
        assert r["flops"] > 0 and r["bound_s"] > 0 and r["measured_s"] > 0
        assert r["multiple"] == pytest.approx(r["measured_s"] / r["bound_s"], rel=0.5)
        assert isinstance(r["met"], bool) and r["target"] in (1.5, 2.0)
    assert out["machine"]["cpu"] and out["machine"]["threads"] >= 1
    assert out["gemm_rates"] and all(g["gflops"] > 0 for g in out["gemm_rates"])
    assert "load_at_start" in out and "load_at_end" in out
