"""The trainer: paired data and initialisation, run directories and reuse, resume equals an
uninterrupted run (stop_after and a real kill), DDP over 2 gloo processes, the streaming path on a
local stand-in, the unigram baseline, the CLI and its errors, and a trained model through the harness."""
import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as the CLI: a shared CPU runs sleeping threads faster

import json  # noqa: E402
import math  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from residshift.core import forward, profiles
from residshift.core.paths import REPO_ROOT  # noqa: E402
from residshift.train import data as D  # noqa: E402
from residshift.train import trainer as T  # noqa: E402
from residshift.train.lock import RunLockedError  # noqa: E402

# Tiny runs on real WikiText-2 text (validation split to train, test split to validate) with the
# in-process byte tokenizer: nothing to train or download, a few seconds each.
BASE = dict(layers=2, heads=2, width=32, context=32, tokenizer="tiny-llama", corpus="wikitext-2",
            split="validation", val_corpus="wikitext-2", val_split="test", tokens=32 * 8 * 10, batch_size=8,
            lr=3e-3, warmup=2, eval_every=4, eval_windows=8, checkpoint_every=2, bf16=False, compile=False)


def cfg(**kw):
    return T.TrainConfig(**{**BASE, **kw})


def evals(run):
    return [(r["step"], r["eval"]) for r in T.read_log(run) if "eval" in r]


def same_evals(a, b, tol):
    return [s for s, _ in a] == [s for s, _ in b] and [v for _, v in a] == pytest.approx([v for _, v in b], abs=tol)


def losses(run):
    return [r["loss"] for r in T.read_log(run) if "loss" in r]


def env():
    e = dict(os.environ)
    e.setdefault("RESIDSHIFT_DATA", str(REPO_ROOT.parent / "shared" / "data"))
    e["HF_HUB_OFFLINE"] = "1"
    e["PYTHONPATH"] = str(REPO_ROOT)
    e["OMP_NUM_THREADS"] = "1"
    return e


def cli_args(c: T.TrainConfig) -> list[str]:
    """-p arguments that rebuild ``c`` exactly on the command line."""
    from dataclasses import fields

    return [a for f in fields(c) for a in ("-p", f"{f.name}={json.dumps(getattr(c, f.name))}")]


# ------------------------------------------------------------------------------------------
# Data
# ------------------------------------------------------------------------------------------


def test_batches_depend_on_seed_and_step_only_and_shard_across_ranks():
    tokens = np.arange(10_000) % 251
    w = D.TokenWindows([tokens], length=16, bos_id=300)
    a = w.batch(5, 1, batch_size=8, accumulate=2, seed=3)
    assert a.shape == (8, 16) and torch.all(a[:, 0] == 300)
    assert torch.equal(a, D.TokenWindows([tokens], 16, 300).batch(5, 1, batch_size=8, accumulate=2, seed=3))
    assert not torch.equal(a, w.batch(5, 1, batch_size=8, accumulate=2, seed=4))
    # micro-step 1 of step 5 with 2 micro-steps = global micro-batch 11
    assert torch.equal(a, w.batch(11, 0, batch_size=8, accumulate=1, seed=3))
    halves = [w.batch(5, 1, batch_size=8, accumulate=2, seed=3, rank=r, world=2) for r in (0, 1)]
    assert torch.equal(torch.cat(halves), a)  # two processes together see the one-process batch
    # windows are consecutive non-overlapping slices of the stream behind the BOS
    first = w.windows([0, 1])
    assert torch.equal(first[0, 1:], torch.as_tensor(tokens[:15])) and torch.equal(first[1, 1:], torch.as_tensor(tokens[15:30]))
    # an epoch draws every full batch's windows once; shards behave as one stream
    idx = torch.cat([w.batch_index(s, 0, batch_size=8, seed=0) for s in range(w.n // 8)])
    assert len(set(idx.tolist())) == len(idx) == (w.n // 8) * 8
    sharded = D.TokenWindows([tokens[:4500], tokens[4500:9000]], length=16, bos_id=300)
    assert sharded.n == 2 * (4500 // 15)
    assert torch.equal(sharded.windows([300])[0, 1:], torch.as_tensor(tokens[4500:4515]))
    with pytest.raises(D.DataError, match="multiple of the number of processes"):
        w.batch(0, 0, batch_size=7, world=2)
    with pytest.raises(D.DataError, match="fewer than one window"):
        D.TokenWindows([tokens[:5]], length=16)


def test_unigram_cross_entropy():
    train = np.array([0, 0, 0, 1])
    # add-one: p(0) = 4/7, p(1) = 2/7, p(2) = 1/7
    assert D.unigram_cross_entropy(train, np.array([0, 1, 2]), 3) == pytest.approx(
        -(math.log(4 / 7) + math.log(2 / 7) + math.log(1 / 7)) / 3)
    # with little smoothing it is the entropy of the scored stream's own frequencies
    rng = np.random.default_rng(0)
    x = rng.choice(5, size=20_000, p=[0.5, 0.2, 0.15, 0.1, 0.05])
    p = np.bincount(x, minlength=5) / len(x)
    assert D.unigram_cross_entropy(x, x, 5, smoothing=1e-9) == pytest.approx(-(p * np.log(p)).sum(), rel=1e-6)
    with pytest.raises(D.DataError, match="token ids"):
        D.unigram_cross_entropy(train, np.array([5]), 3)


# ------------------------------------------------------------------------------------------
# Configuration and initialisation
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("profile", ["smoke", "default", "paper"])
def test_every_profile_gives_a_config(profile):
    c = profiles.stage(T.TrainConfig, profile, mode="fixed", alpha=0.5, alpha_layers=[1], seed=2)
    assert c.layers >= 2 and c.mode == "fixed" and c.alpha_layers == (1,) and c.seed == 2
    assert c.betas == (0.9, 0.95) and c.weight_decay == 0.1 and c.min_lr_ratio == 0.1 and c.grad_clip == 1.0
    if profile == "default":
        assert c.layers >= 6


@pytest.mark.parametrize("kw, match", [
    (dict(mode="bogus"), "unknown residual mode"),
    (dict(mode="fixed", alpha=1.5, alpha_layers=[0]), r"alpha must lie in \[0, 1\]"),
    (dict(mode="fixed", alpha=-0.1, alpha_layers=[0]), r"alpha must lie in \[0, 1\]"),
    (dict(mode="fixed", alpha=0.0, alpha_layers=[2]), "out of range for 2 layers"),
    (dict(mode="fixed", alpha=0.0), "needs alpha"),
    (dict(mode="learned", alpha=0.5), "only apply to mode 'fixed'"),
    (dict(lr=0.0), "lr must be"),
    (dict(batch_size=0), "batch_size"),
    (dict(micro_batch=0), "micro_batch must be 'auto' or a positive integer"),
    (dict(val_corpus=None), "needs a streamed corpus"),
    (dict(corpus={"name": "x"}), "with 'path'"),
])
def test_bad_configs_name_the_fix(kw, match):
    with pytest.raises(T.TrainError, match=match):
        cfg(**kw)


def test_variants_of_a_seed_share_their_initial_weights():
    base = T.init_model(cfg(), 259)
    shared = base.state_dict()
    for kw in (dict(mode="learned"), dict(mode="learned-token"), dict(mode="scalars"), dict(mode="backout"),
               dict(mode="fixed", alpha=0.0, alpha_layers=[1])):
        m = T.init_model(cfg(**kw), 259)
        own = {n for n, p in m.named_parameters() if any(p is q for q in m.gate_parameters())}
        sd = m.state_dict()
        assert set(sd) - set(shared) == own  # only the mode's own parameters are new
        assert all(torch.equal(sd[k], v) for k, v in shared.items()), kw
    other = T.init_model(cfg(seed=1), 259).state_dict()
    assert not torch.equal(other["transformer.h.0.attn.c_attn.weight"], shared["transformer.h.0.attn.c_attn.weight"])


def test_device_defaults_resolve_into_the_key():
    c = cfg(bf16=None, compile=None).resolved("cpu")
    assert c.compile == T.DEVICE_DEFAULTS["cpu"]["compile"]
    assert c.bf16 == (T.DEVICE_DEFAULTS["cpu"]["bf16"] and T._cpu_has_bf16())
    tok = T.load_tokenizer(c)
    assert c.key(tok) != c.with_(seed=1).key(tok) != c.with_(mode="learned").key(tok)


# ------------------------------------------------------------------------------------------
# Runs
# ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def learned_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "learned"
    c = cfg(mode="learned", tokens=32 * 8 * 40, eval_every=10, lr=1e-2)
    return c, T.train(c, out, progress=False)


def test_a_run_folder_holds_model_log_and_summary_and_the_loss_falls(learned_run):
    c, run = learned_run
    assert sorted(p.name for p in run.iterdir()) == ["config.json", "log.jsonl", "model", "summary.json"]
    s = T.read_summary(run)
    assert s["steps"] == 40 and s["tokens"] == 40 * 8 * 32 and s["tokens_per_s"] > 0
    ev = evals(run)
    assert [step for step, _ in ev] == [10, 20, 30, 40] and s["val_loss"] == ev[-1][1]
    assert s["best_val_loss"] == min(v for _, v in ev)
    assert ev[-1][1] < math.log(259) - 1.5  # well below a uniform guess over the 259 bytes
    assert s["unigram_ce"] == pytest.approx(D.unigram_cross_entropy(
        D.named_corpus_tokens("wikitext-2", "validation", T.load_tokenizer(c)),
        T.load_data(c, T.load_tokenizer(c)).val[:, 1:], 259))
    gates = [r for r in T.read_log(run) if "eval" in r]
    assert all(f"alpha/{l}" in r for r in gates for l in range(2))  # the learned alphas over training
    assert gates[-1]["alpha/0"] != gates[0]["alpha/0"]  # the gates received gradients
    assert s["learned"]["alpha/1"] == pytest.approx(gates[-1]["alpha/1"])


def test_the_trained_model_loads_keeps_its_tie_and_the_harness_agrees(learned_run):
    from residshift.core.models import load_model
    from residshift.measure import lens

    c, run = learned_run
    lm, tok, info = load_model(str(run / "model"))
    model = lm._module
    assert model.lm_head.weight is model.transformer.wte.weight  # the tie holds after training
    assert info.n_layers == 2 and len(tok) == 259 and model.config.residual == "learned"
    val = T.load_data(c, tok).val
    losses = forward.window_losses(lm, info, val, batch_size=4)
    assert float(losses.mean()) == pytest.approx(T.read_summary(run)["val_loss"], abs=1e-5)
    hs, logits = forward.collect_residuals(lm, info, val[:2], return_logits=True)
    torch.testing.assert_close(lens.lens_logits(info, hs[-1], info.n_layers), logits, rtol=1e-4, atol=1e-4)


def test_a_finished_run_is_reused(learned_run):
    c, run = learned_run
    before = {p.name: p.stat().st_mtime_ns for p in run.iterdir()}
    t0 = time.perf_counter()
    assert T.train(c, run, progress=False) == run
    assert time.perf_counter() - t0 < 30
    assert {p.name: p.stat().st_mtime_ns for p in run.iterdir()} == before


def test_default_run_folder_is_keyed_by_configuration(tmp_path, monkeypatch):
    monkeypatch.setenv("RESIDSHIFT_RESULTS", str(tmp_path))
    c = cfg(tokens=32 * 8 * 2, eval_every=0)
    run = T.train(c, progress=False)
    assert run == T.run_dir_for(c) and run.parent == tmp_path / "train" and run.name.startswith("baseline-s0-")
    assert T.run_dir_for(c.with_(seed=1)) != run


def test_resumed_run_equals_an_uninterrupted_one(tmp_path):
    c = cfg(mode="learned-token", dropout=0.1)
    full = T.train(c, tmp_path / "full", progress=False)
    part = T.train(c, tmp_path / "part", progress=False, stop_after=3)
    assert (part / "checkpoint.pt").is_file() and not (part / "summary.json").exists()
    assert len(losses(part)) == 3
    T.train(c, part, progress=False, stop_after=4)  # a second interruption
    T.train(c, part, progress=False)
    assert losses(part) == pytest.approx(losses(full), abs=1e-6)
    assert same_evals(evals(part), evals(full), 1e-6)
    assert not (part / "checkpoint.pt").exists()
    from safetensors.torch import load_file

    wa, wb = load_file(full / "model" / "model.safetensors"), load_file(part / "model" / "model.safetensors")
    assert all(torch.allclose(wa[k], wb[k], atol=1e-6) for k in wa)


@pytest.mark.slow
def test_a_killed_process_resumes_to_the_same_curve(tmp_path):
    c = cfg(tokens=32 * 8 * 40, checkpoint_every=1, eval_every=10)
    full = T.train(c, tmp_path / "full", progress=False)
    out = tmp_path / "killed"
    cmd = [sys.executable, "-m", "residshift", "train", "--profile", "smoke", *cli_args(c), "--out", str(out),
           "--no-progress"]
    proc = subprocess.Popen(cmd, env=env(), cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        if (out / "log.jsonl").is_file() and len(losses(out)) >= 5:
            break
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()[0].decode()[-2000:]
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert (out / "checkpoint.pt").is_file() and not (out / "summary.json").exists()
    assert 5 <= len(losses(out)) < 40
    # resume in a fresh process too (its code fingerprint is read like the killed one's)
    done = subprocess.run(cmd, env=env(), cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert losses(out) == pytest.approx(losses(full), abs=1e-6)
    assert same_evals(evals(out), evals(full), 1e-6)


def test_a_step_in_parts_equals_the_step_at_once(tmp_path):
    """What lets one GPU train the paper profile: the windows of a micro-step run in parts of
    ``micro_batch`` (each part's loss weighted by its share), with accumulation over micro-steps, and
    the run is the same run up to floating-point order."""
    c = cfg(batch_size=8, accumulate=2, tokens=32 * 16 * 6)
    whole = T.train(c, tmp_path / "whole", progress=False)
    parts = T.train(c.with_(micro_batch=2), tmp_path / "parts", progress=False)
    assert T.read_summary(whole)["micro_batch"] == 8 and T.read_summary(parts)["micro_batch"] == 2
    assert losses(parts) == pytest.approx(losses(whole), abs=1e-5)
    assert same_evals(evals(parts), evals(whole), 1e-5)
    from safetensors.torch import load_file

    wa, wb = load_file(whole / "model" / "model.safetensors"), load_file(parts / "model" / "model.safetensors")
    assert all(torch.allclose(wa[k], wb[k], atol=1e-5) for k in wa)
    with pytest.raises(T.TrainError, match="micro_batch 3 must divide the windows each process takes"):
        T.train(c.with_(micro_batch=3), tmp_path / "three", progress=False)
    assert not (tmp_path / "three").exists()  # refused before anything was written


@pytest.mark.slow
def test_ddp_over_two_gloo_processes_matches_one_process(tmp_path):
    c = cfg(tokens=32 * 8 * 12)
    single = T.train(c, tmp_path / "single", progress=False)
    out = tmp_path / "ddp"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "-m", "residshift", "train", "--profile", "smoke", *cli_args(c),
           "--out", str(out), "--no-progress", "--device", "cpu"]
    done = subprocess.run(cmd, env=env(), cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    s1, s2 = T.read_summary(single), T.read_summary(out)
    assert s2["world_size"] == 2 and s2["steps"] == s1["steps"] == 12
    assert losses(out) == pytest.approx(losses(single), abs=1e-4)
    assert same_evals(evals(out), evals(single), 1e-4)
    assert s2["val_loss"] == pytest.approx(s1["val_loss"], abs=1e-4)


# ------------------------------------------------------------------------------------------
# Errors, leftovers, the command line
# ------------------------------------------------------------------------------------------


def test_corrupt_checkpoint_and_vocabulary_mismatch_are_refused(tmp_path):
    c = cfg()
    run = T.train(c, tmp_path / "r", progress=False, stop_after=1)
    with pytest.raises(T.TrainError, match="vocabulary of 259 tokens but this run's is 300"):
        T.train(c.with_(vocab=300), run, progress=False)
    (run / "checkpoint.pt").write_bytes(b"garbage")
    with pytest.raises(T.TrainError, match="damaged.*delete it to start the run over"):
        T.train(c, run, progress=False)
    # nothing half-written: no model, no summary, no temporary files
    assert sorted(p.name for p in run.iterdir()) == ["checkpoint.pt", "checkpoint.pt.sha256", "config.json",
                                                     "log.jsonl"]
    with pytest.raises(T.TrainError, match="smaller than the tokenizer"):
        T.train(c.with_(vocab=100), tmp_path / "v", progress=False)
    assert not (tmp_path / "v").exists()
    other = T.train(c.with_(seed=5), tmp_path / "o", progress=False, stop_after=1)
    with pytest.raises(T.TrainError, match="another configuration"):
        T.train(c, other, progress=False)


def _flip(path, start, n):
    data = bytearray(path.read_bytes())
    data[start:start + n] = bytes(b ^ 0xFF for b in data[start:start + n])
    path.write_bytes(bytes(data))


def test_bytes_flipped_inside_a_training_checkpoint_are_refused_in_one_cli_line(tmp_path, capsys):
    from residshift.tools.cli import main

    c = cfg()
    out = tmp_path / "cli"
    base = ["train", "--profile", "smoke", *cli_args(c), "--out", str(out), "--no-progress"]
    assert main(base + ["--stop-after", "2"]) == 0
    ck = out / "checkpoint.pt"
    assert (out / "checkpoint.pt.sha256").is_file()
    emb = torch.load(ck, weights_only=False)["module"]["transformer.wte.weight"].numpy().tobytes()
    at = ck.read_bytes().find(emb)
    assert at > 0
    _flip(ck, at + 4000, 400)  # the reported case: 400 bytes inside the weights; torch reads them
    assert torch.load(ck, weights_only=False)["state"]["step"] == 2
    capsys.readouterr()
    assert main(base) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"residshift train: error: checkpoint {ck} is damaged (sha256 mismatch: the file "
                          "changed after it was written") and err.endswith("delete it to start the run over")
    assert not (out / "summary.json").exists()


def test_a_trained_model_carries_a_manifest_checked_when_the_run_is_reused(tmp_path):
    c = cfg(tokens=32 * 8 * 2, eval_every=0)
    run = T.train(c, tmp_path / "r", progress=False)
    names = [line.split("  ")[1] for line in (run / "model" / "SHA256SUMS").read_text().splitlines()]
    assert "model.safetensors" in names and "config.json" in names and "SHA256SUMS" not in names
    (run / "model" / "SHA256SUMS").unlink()  # a model saved by an older version: reused and adopted
    assert T.train(c, run, progress=False) == run and (run / "model" / "SHA256SUMS").is_file()
    weights = run / "model" / "model.safetensors"
    _flip(weights, weights.stat().st_size // 2, 4)
    with pytest.raises(T.TrainError, match=rf"the trained model of {run} is damaged: .*model\.safetensors is "
                                           rf"damaged \(sha256 mismatch.*delete {run} to train the run again"):
        T.train(c, run, progress=False)


@pytest.mark.parametrize("args, match", [
    (["--mode", "bogus"], "unknown residual mode 'bogus'"),
    (["--mode", "fixed", "--alpha", "1.5", "--layer", "0"], r"alpha must lie in \[0, 1\]"),
    (["--mode", "fixed", "--alpha", "0", "--layer", "7"], "out of range"),
    (["-p", "colour=3"], "unknown training settings"),
    (["--profile", "nope"], "unknown profile"),
])
def test_cli_errors_are_one_clear_line(args, match, capsys, tmp_path):
    from residshift.tools.cli import main

    assert main(["train", "--profile", "smoke", *args, "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("residshift train: error:")
    assert pytest.importorskip("re").search(match, err), err
    assert not (tmp_path / "x").exists()


def test_cli_trains_and_resumes(tmp_path, capsys):
    from residshift.tools.cli import main

    c = cfg(mode="fixed", alpha=0.0, alpha_layers=(1,))
    out = tmp_path / "cli"
    base = ["train", "--profile", "smoke", *cli_args(c), "--mode", "fixed", "--alpha", "0", "--layer", "1",
            "--out", str(out), "--no-progress"]
    assert main(base + ["--stop-after", "2"]) == 0
    assert "resumes" in capsys.readouterr().out
    assert main(base) == 0
    printed = capsys.readouterr().out
    assert "fixed-a0-l1-s0: validation loss" in printed and str(out) in printed
    direct = T.train(c, tmp_path / "api", progress=False)
    assert losses(out) == pytest.approx(losses(direct), abs=1e-6)


def test_a_run_another_process_trains_is_refused_at_once_and_a_finished_one_still_read(tmp_path, capsys):
    """The trainer holds ``train.lock`` while it trains: a second trainer of the folder (here the lock
    held by a child process, as another launcher would) is refused in one line, exit 75, and touches
    nothing; once the holder is gone the same call trains."""
    from residshift.tools.cli import main

    c = cfg(tokens=32 * 8 * 2, eval_every=0)
    out = tmp_path / "held"
    hold = ("import sys, time\nfrom residshift.train.lock import run_lock\nwith run_lock(sys.argv[1]):\n"
            "    print('held', flush=True)\n    time.sleep(60)\n")
    holder = subprocess.Popen([sys.executable, "-c", hold, str(out)], env=env(), stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(RunLockedError, match=f"pid {holder.pid} on "):
            T.train(c, out, progress=False)
        assert sorted(p.name for p in out.iterdir()) == ["train.lock"]
        assert main(["train", "--profile", "smoke", *cli_args(c), "--out", str(out), "--no-progress"]) == T.LOCKED_EXIT
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "being trained by another process" in err
    finally:
        holder.kill()
        holder.wait()
    assert T.train(c, out, progress=False) == out
    assert (out / "summary.json").is_file() and not (out / "train.lock").exists()


def test_the_trained_models_key_does_not_hash_the_model_loaders():
    """The run key covers the model, data, loop and loss (declared: the trainer and its imports, less
    the tokenizer module); the pretrained loaders (and so the lens command, the hub arguments of
    notebooks 00-05) are outside it, so editing them retrains nothing."""
    from residshift.core.cache import code_modules

    covered = set(code_modules(T.__name__, without=T.RUN_CODE_WITHOUT))
    assert {"residshift.train.trainer", "residshift.core.models.gpt", "residshift.core.gating",
            "residshift.core.fitting", "residshift.core.unembed", "residshift.train.data"} <= covered
    assert not {"residshift.core.models.loading", "residshift.core.models.embedded", "residshift.train.tokenizer",
                "residshift.core.interventions", "residshift.core.forward", "residshift.core.profiles"} & covered


# ------------------------------------------------------------------------------------------
# Streaming corpora (FineWeb-Edu in the paper profile) on a local stand-in
# ------------------------------------------------------------------------------------------


@pytest.fixture()
def standin(tmp_path, monkeypatch):
    """A JSON-lines corpus of WikiText-2 test articles, streamed through datasets like FineWeb-Edu."""
    monkeypatch.setenv("RESIDSHIFT_CACHE", str(tmp_path / "cache"))
    from residshift.core.data import corpus_text

    text = corpus_text("wikitext-2", "test")
    docs = [d for d in text.split("\n= ") if len(d) > 200]
    path = tmp_path / "docs.jsonl"
    path.write_text("".join(json.dumps({"text": d, "id": i}) + "\n" for i, d in enumerate(docs)))
    return {"path": "json", "data_files": str(path), "split": "train"}, docs


def test_prepare_stream_holds_out_validation_shards_and_extends(standin):
    from residshift.core.models import byte_tokenizer

    spec, docs = standin
    tok = byte_tokenizer()
    kw = dict(val_tokens=5_000, window=32, shard_tokens=20_000)
    small = D.prepare_stream(spec, tok, train_tokens=30_000, **kw)
    man = small.manifest
    assert man["val"]["tokens"] == 4992 and len(man["shards"]) == 2  # whole windows only
    assert all(s["tokens"] % 32 == 0 for s in man["shards"])
    eos = tok.eos_token_id
    first = tok(docs[0], add_special_tokens=False)["input_ids"] + [eos]
    assert small.val[:100].tolist() == first[:100]  # validation = the head of the stream
    shard0 = np.array(small.train_shards[0])
    big = D.prepare_stream(spec, tok, train_tokens=70_000, **kw)
    assert len(big.manifest["shards"]) == 4 and np.array_equal(np.array(big.train_shards[0]), shard0)
    assert big.folder == small.folder
    again = D.prepare_stream(spec, tok, train_tokens=10_000, **kw)  # already there: no work
    assert again.manifest == big.manifest


def test_training_on_a_streamed_corpus(standin, tmp_path):
    spec, _ = standin
    c = cfg(corpus=spec, val_corpus=None, val_tokens=4_000, shard_tokens=16_384, tokens=32 * 8 * 4,
            eval_every=2)
    run = T.train(c, tmp_path / "stream", progress=False)
    s = T.read_summary(run)
    assert s["steps"] == 4 and s["data"]["stream"] and s["data"]["train_tokens"] >= 32 * 8 * 4
    assert s["data"]["val_windows"] == 8 and math.isfinite(s["val_loss"])


def test_the_paper_profile_streams_fineweb_edu_with_these_load_dataset_arguments(tmp_path, monkeypatch):
    """The exact ``datasets.load_dataset`` call of the paper profile's corpus (no network: a stand-in
    stream), and the resume of an interrupted preparation past the documents already read."""
    import datasets

    from residshift.core.models import byte_tokenizer

    monkeypatch.setenv("RESIDSHIFT_CACHE", str(tmp_path / "cache"))
    calls = []

    class Stream:  # what load_dataset(..., streaming=True) returns: an iterable with skip()
        def __init__(self, rows):
            self.rows = rows

        def __iter__(self):
            return iter(self.rows)

        def skip(self, n):
            calls.append(("skip", n))
            return Stream(self.rows[n:])

    docs = [{"text": f"Document {i}: " + "an educational sentence. " * 20, "id": str(i)} for i in range(300)]

    def load_dataset(*args, **kwargs):
        calls.append((args, kwargs))
        return Stream(docs)

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    c = profiles.stage(T.TrainConfig, "paper").with_(context=32, tokens=8_192, val_tokens=2_048, shard_tokens=4_096,
                                                  eval_windows=4)
    assert c.corpus == {"path": "HuggingFaceFW/fineweb-edu", "name": "sample-10BT", "split": "train"}
    assert c.val_corpus is None  # validation: the head of the same stream, held out
    data = T.load_data(c, byte_tokenizer())
    assert calls == [((), {"path": "HuggingFaceFW/fineweb-edu", "name": "sample-10BT", "split": "train",
                           "streaming": True})]
    assert data.val.shape == (4, 32) and data.source["train_tokens"] >= 8_192
    calls.clear()
    T.load_data(c.with_(tokens=16_384), byte_tokenizer())  # a larger budget extends the stream
    assert calls[0][1]["streaming"] is True and calls[1][0] == "skip" and calls[1][1] > 0
