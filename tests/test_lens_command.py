"""``python -m residshift lens MODEL`` on tiny models built in-process: what it writes, untied models
by explicit choice, and one line + exit status 2 + nothing written for every kind of bad input."""
import json

import pytest
import torch

from residshift.tools.cli import main
from residshift.core import models
from residshift.tools import lens_command as lc

FAST = ["--profile", "smoke", "--windows", "3", "--window", "24"]
TEXT = "The cat sat on the mat."


def _run(args, tmp_path, capsys):
    out = tmp_path / "out"
    status = main(["lens", *args, *FAST, "--out", str(out)])
    return status, out, capsys.readouterr()


def _written(out):
    names = {p.name for p in out.iterdir() if p.name != ".residshift-output"}  # the folder's owner mark
    expected = {"summary.md", "alignment.png", "alignment.json", "c1.png", "c1.json", "shift.json",
                "request.json"}
    assert expected <= names and any(n.startswith("trajectory-") for n in names), names
    summary = (out / "summary.md").read_text()
    for name in names:  # the summary links every file it wrote
        assert f"]({name})" in summary, name
    return summary


def _untied_folder(tmp_path):
    model, tok = models.build_tiny("tiny-llama", tie_word_embeddings=False, seed=2)
    folder = tmp_path / "untied"
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def test_lens_on_a_local_folder_writes_every_output(tmp_path, capsys):
    model, tok = models.build_tiny("tiny-gpt2", seed=1)
    model.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    status, out, cap = _run([str(tmp_path / "m"), "--text", TEXT, "--text", "A second sentence here."],
                            tmp_path, capsys)
    assert status == 0, cap.err
    summary = _written(out)
    maps = sorted(p.name for p in out.glob("trajectory-2*.png"))  # one map, or its token / layer ranges
    assert maps and (out / "trajectory-2.json").is_file() and "tied: yes" in summary
    assert all(m in summary for m in maps)
    c1 = json.loads((out / "c1.json").read_text())
    assert {r["claim_id"] for r in c1["rows"]} >= {"C1.early", "C1.middle", "C1.late", "C1", "C1.depth"}
    meta = json.loads((out / "request.json").read_text())
    assert meta["corpus_windows"] == 3 and meta["decoder"] == "tied"
    assert "raw_text_check" in meta["seconds"] and "preprocessing check reran the first 3 windows" in summary
    # never more check windows than the main pass read (the rule compares the first windows of one draw)
    P = lc.check_request(lc.LensRequest("m", profile="default", windows=4))[1]
    assert P.lens_check_windows > 4 and lc.check_windows(P) == 4 and lc.preprocessing_checked(P)
    assert lc.check_windows(lc.check_request(lc.LensRequest("m", profile="default", windows=2))[1]) == 2
    assert f"wrote {len(list(out.iterdir())) - 1} files to {out}" in cap.out  # where everything went
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "no temporary folders left"


def test_an_untied_model_needs_a_decoder_and_then_names_it_everywhere(tmp_path, capsys):
    folder = _untied_folder(tmp_path)
    status, out, cap = _run([str(folder), "--text", TEXT], tmp_path, capsys)
    assert status == 2 and not out.exists()
    assert cap.err.count("\n") == 1 and "--decoder output" in cap.err and "--decoder input" in cap.err
    for decoder in ("output", "input"):
        out = tmp_path / decoder
        assert main(["lens", str(folder), "--text", TEXT, "--decoder", decoder, *FAST, "--out", str(out)]) == 0
        summary = _written(out)
        assert "tied: no" in summary and f"`{decoder}`" in summary
        for name in ("alignment.json", "c1.json", "shift.json", "trajectory-1.json", "request.json"):
            assert json.loads((out / name).read_text())["decoder"] == decoder, name
    cap = capsys.readouterr()
    assert "tied: no" in cap.out  # the tied check is printed


def test_lens_on_a_trained_gpt_run_folder_and_a_gguf_file(tmp_path, capsys):
    from residshift.core.models import byte_tokenizer
    from residshift.core.models.gpt import GPT, GPTConfig

    torch.manual_seed(0)
    gpt = GPT(GPTConfig(n_layer=4, n_head=2, n_embd=32, block_size=64, vocab_size=259,
                        residual="fixed", alpha=0.5, alpha_layers=[1])).eval()
    gpt.save_pretrained(tmp_path / "run" / "final")
    byte_tokenizer().save_pretrained(tmp_path / "run" / "final")
    status, out, cap = _run([str(tmp_path / "run" / "final"), "--text", TEXT], tmp_path, capsys)
    assert status == 0, cap.err
    _written(out)

    from test_models import write_gguf

    model, tok = models.build_tiny("tiny-llama", seed=4)
    write_gguf(tmp_path / "m.gguf", model, tok)
    out = tmp_path / "gguf-out"
    assert main(["lens", str(tmp_path / "m.gguf"), "--text", TEXT, *FAST, "--out", str(out)]) == 0
    _written(out)

    untied, _ = models.build_tiny("tiny-llama", seed=4, tie_word_embeddings=False)
    write_gguf(tmp_path / "u.gguf", untied, tok, tied=False)
    assert main(["lens", str(tmp_path / "u.gguf"), "--text", TEXT, *FAST, "--out", str(tmp_path / "x")]) == 2
    assert "--decoder" in capsys.readouterr().err and not (tmp_path / "x").exists()
    out = tmp_path / "untied-out"
    assert main(["lens", str(tmp_path / "u.gguf"), "--decoder", "output", "--text", TEXT, *FAST,
                 "--out", str(out)]) == 0, capsys.readouterr().err
    _written(out)


@pytest.mark.parametrize("args, says", [
    (["tiny-llama", "--text", "  "], "--text number 1 is empty"),
    (["tiny-llama", "--corpus", "wikitext-9"], "unknown corpus 'wikitext-9'"),
    (["tiny-llama", "--windows", "0"], "--windows 0 is too small"),
    (["tiny-llama", "--decoder", "lm_head"], "--decoder must be 'output' or 'input'"),
    (["tiny-llama", "--corpus", "wikitext-2", "--split", "dev"], "no split 'dev'"),
    (["./no/such/folder"], "does not exist"),
    (["nobody-here/no-such-model"], "cannot load nobody-here/no-such-model"),
])
def test_bad_input_is_one_line_exit_2_and_nothing_written(tmp_path, capsys, monkeypatch, args, says):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    out = tmp_path / "out"
    status = main(["lens", *args, "--profile", "smoke", "--out", str(out)])
    err = capsys.readouterr().err
    assert status == 2 and says in err and err.count("\n") == 1, err
    assert not out.exists() and not list(tmp_path.iterdir())


def test_a_file_that_is_not_a_model_and_a_gguf_transformers_cannot_read(tmp_path, capsys):
    junk = tmp_path / "weights.bin"
    junk.write_bytes(b"not a model")
    assert main(["lens", str(junk), "--out", str(tmp_path / "o1")]) == 2
    assert "not a .gguf" in capsys.readouterr().err
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF but not really")
    assert main(["lens", str(bad), "--out", str(tmp_path / "o2")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("residshift lens: error: cannot load") and err.count("\n") == 1, err
    assert not (tmp_path / "o1").exists() and not (tmp_path / "o2").exists()


def test_a_failure_midway_leaves_nothing_half_written(tmp_path, monkeypatch):
    from residshift.measure import lens

    def broken(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(lens, "run_lens", broken)
    out = tmp_path / "out"
    with pytest.raises(RuntimeError, match="disk full"):
        lc.run(lc.LensRequest("tiny-llama", texts=(TEXT,), profile="smoke", windows=3, out=str(out)),
               say=lambda s: None)
    assert not out.exists() and not list(tmp_path.iterdir())


def test_request_defaults_come_from_the_profile_and_the_key_ignores_out():
    req, P = lc.check_request(lc.LensRequest("tiny-llama", profile="smoke", corpus="tiny-shakespeare"))
    assert req.split == "train" and req.windows == P.lens_windows and req.texts == tuple(P.lens_sentences)
    a = lc.LensRequest("m", out="x").key()
    assert a == lc.LensRequest("m", out="y").key() != lc.LensRequest("m", windows=5).key()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["smollm2-135m", "gemma3-270m"])
def test_lens_on_the_embedded_models(tmp_path, capsys, name):
    out = tmp_path / name
    status = main(["lens", name, "--text", TEXT, "--windows", "4", "--window", "48", "--out", str(out)])
    assert status == 0, capsys.readouterr().err
    summary = _written(out)
    meta = json.loads((out / "request.json").read_text())
    assert meta["model"]["layers"] == {"smollm2-135m": 30, "gemma3-270m": 18}[name] and "tied: yes" in summary
    traj = json.loads((out / "trajectory-1.json").read_text())
    # one row of decoded tokens per residual state h_0..h_L
    assert len(traj["sentences"][0]["top1"]) == meta["model"]["layers"] + 1


# ---- a trained run folder (issue 50) ----------------------------------------------------------------


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    """A run folder as ``residshift train`` writes it (config.json, log.jsonl, model/, summary.json):
    two steps of a tiny 4-layer GPT (C1's rules read 4) on WikiText-2 with the byte tokenizer."""
    from residshift.train import trainer as T

    cfg = T.TrainConfig(layers=4, heads=2, width=32, context=32, tokenizer="tiny-llama", corpus="wikitext-2",
                        split="validation", val_corpus="wikitext-2", val_split="test", tokens=32 * 8 * 2,
                        batch_size=8, lr=3e-3, warmup=1, eval_every=2, eval_windows=4, checkpoint_every=2,
                        bf16=False, compile=False)
    return T.train(cfg, tmp_path_factory.mktemp("train") / "baseline-s0-0123456789", progress=False)


def _guide_run_folder() -> str:
    """The trained-model argument of docs/guide.md's lens examples (``results/train/...``)."""
    import re

    from residshift.core.paths import REPO_ROOT

    found = re.findall(r"residshift lens (results/train/\S+)", (REPO_ROOT / "docs" / "guide.md").read_text())
    assert len(found) == 1, found
    return found[0]


def test_lens_reads_a_trained_run_folder_as_the_guide_says(trained_run, tmp_path, capsys):
    """Before: the run folder's own config.json (the TrainConfig) was read as a model's and the command
    ended in "Couldn't instantiate the backend tokenizer"; the guide pointed at a ``final/`` that the
    trainer never writes."""
    assert {"config.json", "model", "summary.json"} <= {p.name for p in trained_run.iterdir()}
    status, out, cap = _run([str(trained_run), "--text", TEXT], tmp_path, capsys)
    assert status == 0, cap.err
    summary = _written(out)
    assert "tied: yes" in summary
    meta = json.loads((out / "request.json").read_text())
    assert meta["model"]["layers"] == 4 and meta["request"]["model"] == str(trained_run)
    # the guide's command names the run folder itself: results/train/<label>-<key>, no subfolder
    rel = _guide_run_folder().removeprefix("results/train/")
    assert "/" not in rel and rel.startswith("baseline-s0-<"), rel


def test_an_unfinished_run_folder_is_one_line(tmp_path, capsys):
    run = tmp_path / "baseline-s0-abc"
    run.mkdir()
    for name in ("config.json", "log.jsonl", "checkpoint.pt"):
        (run / name).write_text("{}")
    status, out, cap = _run([str(run), "--text", TEXT], tmp_path, capsys)
    assert status == 2 and cap.err.count("\n") == 1 and "has not finished (no model/ yet)" in cap.err, cap.err
    assert not out.exists()
