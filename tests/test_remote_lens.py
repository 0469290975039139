"""The lens decoded inside the trace (``measure.remote_lens``), run through nnsight's local dry run of
the remote path (``remote="local"``: the request serialized, then run with our own modules hidden, as an
NDIF server would), against the local lens on the same tiny models: the same numbers, one-line refusals
for what only runs locally, and ``residshift lens --remote local`` writing what a local run writes."""
import json

import pytest
import torch

from residshift.core import models
from residshift.core.forward import collect_residuals
from residshift.measure import lens
from residshift.measure.remote_lens import METRICS, traced_metrics, traced_top
from residshift.tools import lens_command as lc
from residshift.tools.cli import main


def _ids(info, B=2, T=12, seed=0):
    return torch.randint(0, info.vocab_size, (B, T), generator=torch.Generator().manual_seed(seed))


def _untied(tmp_path, decoder):
    model, tok = models.build_tiny("tiny-llama", tie_word_embeddings=False, seed=5)
    model.save_pretrained(tmp_path / "untied")
    tok.save_pretrained(tmp_path / "untied")
    return models.load_model(str(tmp_path / "untied"), decoder=decoder)


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gpt2", "tiny-gemma3"])  # gemma3: the soft-cap
def test_metrics_decoded_inside_the_trace_equal_the_local_lens(name):
    lm, tok, info = models.load_model(name)
    ids = _ids(info)
    opt = lens.LensOptions(metrics=METRICS, positions=6, seed=1)
    local = lens.residual_metrics(info, collect_residuals(lm, info, ids), ids, options=opt)
    traced = traced_metrics(lm, info, ids, options=opt, remote="local")
    assert sorted(traced) == sorted(local) and traced["top1_next"].shape == (info.n_layers + 1, 2, 6)
    for c in local:
        torch.testing.assert_close(traced[c], local[c], rtol=1e-5, atol=1e-5, msg=c)
    top_local, top_traced = lens.decode_top(lm, info, ids, k=3), traced_top(lm, info, ids, k=3, remote="local")
    assert torch.equal(top_traced["ids"], top_local["ids"])
    torch.testing.assert_close(top_traced["probs"], top_local["probs"])
    torch.testing.assert_close(top_traced["model_logits"], top_local["model_logits"])


@pytest.mark.parametrize("decoder", ["output", "input"])
def test_an_untied_model_is_read_through_the_chosen_matrix_inside_the_trace(tmp_path, decoder):
    lm, tok, info = _untied(tmp_path, decoder)
    ids = _ids(info, seed=3)
    opt = lens.LensOptions(metrics=("rank", "logprob", "kl_final"))
    local = lens.residual_metrics(info, collect_residuals(lm, info, ids), ids, options=opt)
    traced = traced_metrics(lm, info, ids, options=opt, remote="local")
    for c in local:
        torch.testing.assert_close(traced[c], local[c], rtol=1e-5, atol=1e-5, msg=c)


def test_a_remote_corpus_pass_equals_the_local_one_and_refuses_what_runs_locally_only():
    lm, tok, info = models.load_model("tiny-llama")
    windows = _ids(info, B=5, T=10, seed=7)
    opt = lens.LensOptions(metrics=("top1", "logrank", "entropy"))
    local = lens.corpus_metrics(lm, info, windows, batch=2, options=opt)
    info.remote = "local"  # what `residshift lens --remote local` sets: every trace goes through the dry run
    remote = lens.corpus_metrics(lm, info, windows, batch=2, options=opt)
    for c in local.columns:
        torch.testing.assert_close(remote.per_seq[c], local.per_seq[c], rtol=1e-5, atol=1e-5)
    with pytest.raises(lens.LensError, match=r"cos_raw .*computed locally only.*pass metrics="):
        lens.corpus_metrics(lm, info, windows, options=lens.LensOptions(metrics=("cos_raw", "top1")))
    with pytest.raises(lens.LensError, match="no fitted decoder and no attenuation"):
        lens.corpus_metrics(lm, info, windows, options=opt, attenuation={1: 0.0})


def test_the_lens_command_with_remote_local_writes_what_a_local_run_writes(tmp_path, capsys):
    model, tok = models.build_tiny("tiny-gpt2", seed=1)
    model.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    fast = [str(tmp_path / "m"), "--profile", "smoke", "--windows", "3", "--window", "24", "--text", "The cat sat."]
    assert main(["lens", *fast, "--out", str(tmp_path / "here")]) == 0
    assert main(["lens", *fast, "--remote", "local", "--out", str(tmp_path / "there")]) == 0
    here, there = (json.loads((tmp_path / d / "shift.json").read_text()) for d in ("here", "there"))
    assert there["rows"] == here["rows"]  # the transition depths read from the top-1 and rank curves
    assert [r["verdict"] for r in json.loads((tmp_path / "there" / "c1.json").read_text())["rows"]] == \
        [r["verdict"] for r in json.loads((tmp_path / "here" / "c1.json").read_text())["rows"]]
    summary = (tmp_path / "there" / "summary.md").read_text()
    assert "local dry run of the remote path: decoded inside the trace" in summary
    assert json.loads((tmp_path / "there" / "request.json").read_text())["request"]["remote"] == "local"
    capsys.readouterr()
    assert main(["lens", *fast, "--remote", "ndif", "--out", str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--remote takes no value or 'local'" in err and not (tmp_path / "bad").exists()
    with pytest.raises(lc.LensCommandError, match="--remote takes"):
        lc.check_request(lc.LensRequest("tiny-llama", remote="yes"))
