"""``python -m residshift train-grid``: the plan at every profile (sizes, folders, statuses read from
fake run folders), the cost from a measured speed or plainly unknown, the launcher's scheduling on
fake runs (the subprocess call monkeypatched), bad requests (one line, exit status 2), and the
paper profile's dry run as a real subprocess (so CI runs it)."""
import json
import os
import subprocess
import sys
import threading
import time
from argparse import Namespace
from dataclasses import asdict, replace

import pytest
import torch

from residshift.tools.cli import main
from residshift.core.cache import _canonical
from residshift.core.paths import REPO_ROOT
from residshift.study import training
from residshift.tools import grid_launcher as GL
from residshift.tools.cli import train_config_from_args
from residshift.train import trainer as T
from residshift.train.lock import RunLockedError, run_lock, run_locked


@pytest.fixture()
def results(tmp_path, monkeypatch):
    monkeypatch.setenv("RESIDSHIFT_RESULTS", str(tmp_path / "results"))
    return tmp_path / "results"


def _finish(folder):
    (folder / "model").mkdir(parents=True)
    (folder / "model" / "config.json").write_text("{}")
    (folder / "summary.json").write_text("{}")


@pytest.mark.parametrize("profile", ["smoke", "default", "paper"])
def test_the_plan_is_the_grid_times_the_seeds(profile, results):
    P = GL.resolve_profile(profile)
    p = GL.plan(P)
    variants, seeds = training.grid(P), training.seeds(P)
    assert len(p.runs) == len(variants) * len(seeds) and p.variants == len(variants)
    assert [(r.name, r.seed) for r in p.runs] == [(v.name, s) for v in variants for s in seeds]
    assert p.device == P.device and {r.status for r in p.runs} == {"to do"}
    for r, (v, s) in zip(p.runs, [(v, s) for v in variants for s in seeds]):
        assert r.cfg == training.config(P, v, s).resolved(P.device)
        assert r.tokens == r.cfg.steps() * r.cfg.tokens_per_step() == r.tokens_left
        assert r.folder is None or r.folder.name.startswith(r.label + "-")
    if profile != "paper":  # the folder the notebooks read (the paper's gpt2 tokenizer may be absent here)
        assert p.key_note is None
        assert [r.folder for r in p.runs[:3]] == [T.run_dir_for(r.cfg, "cpu") for r in p.runs[:3]]
    lines = GL.format_plan(p)
    assert f"= {len(p.runs)} runs" in lines[0] and len([line for line in lines if line.startswith("   1  ")]) == 1
    assert lines[-1].endswith(f"tokens to train: {sum(r.tokens for r in p.runs):,}")


def _log(folder, steps):
    (folder / "log.jsonl").write_text("".join(json.dumps({"step": s, "loss": 1.0}) + "\n" for s in steps))


def test_statuses_come_from_the_run_folders(results):
    P = GL.resolve_profile("smoke")
    runs = GL.plan(P).runs
    done, partial, held, started, unreadable = (r.folder for r in runs[:5])
    _finish(done)
    partial.mkdir(parents=True)  # the steps come from the log: the checkpoint is never unpickled
    torch.save({"state": {"step": 4}}, partial / "checkpoint.pt")
    _log(partial, range(1, 6))
    started.mkdir(parents=True)
    (started / "config.json").write_text("{}")  # made, no step yet
    _log(started, [1, 2])  # a log without a checkpoint: nothing to resume from
    unreadable.mkdir(parents=True)
    (unreadable / "checkpoint.pt").write_bytes(b"not a checkpoint")
    _log(unreadable, [1, 2, 3])
    with run_lock(held):
        p = GL.plan(P)
    got = [(r.status, r.steps_done) for r in p.runs[:5]]
    steps = runs[0].steps
    assert got == [("done", steps), ("partial", 5), ("running", 0), ("to do", 0), ("partial", 3)]
    assert p.runs[0].tokens_left == 0 and p.runs[1].tokens_left == (steps - 5) * runs[1].cfg.tokens_per_step()
    assert GL.plan(P).runs[2].status == "to do"  # the lock ended with its holder
    text = "\n".join(GL.format_plan(p))
    assert f"partial (5/{steps} steps)" in text and "done: 1; partial: 2; running: 1;" in text


def test_without_the_tokenizer_a_folder_of_the_same_configuration_is_read(results, monkeypatch):
    monkeypatch.setattr(GL, "_tokenizer", lambda cfg: (None, "tokenizer 'gpt2' is not in the local cache"))
    P = GL.resolve_profile("paper", seeds=[0, 1])
    cfg = GL.plan(P, only=["baseline"]).runs[0].cfg
    folder = results / "train" / f"{cfg.label()}-0123456789abcdef0123"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"key": "x", "label": cfg.label(), "config": _canonical(asdict(cfg))}))
    _finish(folder)
    p = GL.plan(P, only=["baseline"])
    assert [(r.status, r.folder) for r in p.runs] == [("done", folder), ("to do", None)]
    assert "run keys unknown here (tokenizer 'gpt2' is not in the local cache)" in p.key_note
    assert "results/train/baseline-s1-<key>" in "\n".join(GL.format_plan(p))


def _bench(path, machine, shape, precision, tps):
    path.write_text(json.dumps({"machine": machine, "shapes": {"x": {"shape": shape, "precision": {
        precision: {"tokens_per_s": tps}}}}}))
    return path


def test_the_cost_uses_a_measured_speed_of_the_same_device_and_shape(results, tmp_path):
    p = GL.plan(GL.resolve_profile("paper"), only=["baseline"])
    c = p.runs[0].cfg
    shape = {"n_layer": c.layers, "n_head": c.heads, "n_embd": c.width, "block_size": c.context,
             "vocab_size": c.vocab, "batch": 16, "mlp": c.mlp}
    cpu = _bench(tmp_path / "cpu.json", {"cpu": "Some CPU"}, shape, "bf16-compile", 500.0)
    line = GL.cost_line(p, bench=[cpu])  # a CPU figure is no GPU figure
    assert line.startswith("cost: unknown: no measured tokens/s for ") and line.endswith(
        "run benchmarks/bench_train.py on it")
    other = _bench(tmp_path / "other.json", {"device": "cuda", "gpu": "GPU X"}, {**shape, "n_layer": 6},
                   "bf16-compile", 9e5)
    assert GL.cost_line(p, bench=[cpu, other]).startswith("cost: unknown")  # another shape
    gpu = _bench(tmp_path / "gpu.json", {"device": "cuda", "gpu": "GPU X"}, shape, "bf16-compile", 123456.0)
    line = GL.cost_line(p, bench=[cpu, other, gpu], slots=3)
    hours = p.tokens_left / 123456.0 / 3600
    assert line.startswith(f"cost: {hours:,.2f} GPU-hours for {p.tokens_left:,} tokens at 123,456 tokens/s")
    assert "bf16-compile, batch 16, measured on GPU X, benchmarks/gpu.json" in line
    assert f"about {hours / 3:,.2f} h of wall time on 3 GPUs" in line
    assert GL.measured_speed(replace(c, compile=False), "cuda", vocab=c.vocab, bench=[gpu]) is None  # precision


def test_the_default_profile_costs_from_the_committed_cpu_benchmark(results):
    p = GL.plan(GL.resolve_profile("default"), only=["baseline"])
    speed = GL.measured_speed(p.runs[0].cfg, "cpu", vocab=1024)
    assert speed is not None and speed["precision"] == "fp32-eager"
    data = json.loads((REPO_ROOT / speed["source"]).read_text())
    assert speed["tokens_per_s"] in [e["precision"]["fp32-eager"]["tokens_per_s"] for e in data["shapes"].values()]
    assert f"measured on {speed['machine']}" in GL.cost_line(p)
    for r in p.runs:
        r.status = "done"
    assert GL.cost_line(p) == "cost: nothing left to train"


def _child_config(cmd):
    """The TrainConfig `python -m residshift train` builds from a launcher command."""
    i = cmd.index("train")
    params = [cmd[j + 1] for j in range(i, len(cmd)) if cmd[j] == "-p"]
    ns = Namespace(profile=cmd[cmd.index("--profile") + 1], param=params, mode=None, alpha=None, layer=None,
                   seed=None)
    return train_config_from_args(ns).resolved(cmd[cmd.index("--device") + 1])


def test_the_launcher_skips_finished_runs_and_spreads_the_rest_over_the_gpus(results, monkeypatch):
    P = GL.resolve_profile("smoke", seeds=[0])
    p = GL.plan(P)
    p.device = "cuda"
    p.runs[0].status = "done"
    p.runs[1].status, p.runs[1].steps_done = "partial", 4
    p.runs[2].status = "running"
    calls, live, peak = [], [0], [0]
    guard = threading.Lock()

    def fake(cmd, *, env, log):
        with guard:
            calls.append((cmd, env.get("CUDA_VISIBLE_DEVICES"), log))
            live[0] += 1
            peak[0] = max(peak[0], live[0])
        time.sleep(0.05)
        with guard:
            live[0] -= 1
        return 3 if "--prepare-only" not in cmd and _child_config(cmd) == p.runs[4].cfg else 0

    monkeypatch.setattr(GL, "_spawn", fake)
    printed = []
    out = GL.launch(p, parallel=2, gpus=["4", "7"], echo=printed.append)
    todo = [r for r in p.runs if r.status in ("to do", "partial")]
    assert "--prepare-only" in calls[0][0] and calls[0][2].name == "prepare.log"
    runs = calls[1:]
    assert len(runs) == len(out) == len(todo) == len(p.runs) - 2 and peak[0] == 2
    assert sorted(_child_config(c).label() + str(_child_config(c).alpha) for c, _, _ in runs) == sorted(
        r.cfg.label() + str(r.cfg.alpha) for r in todo)
    for cmd, dev, log in runs:  # every child rebuilds its run's config exactly, on one of the two GPUs
        assert cmd[1:5] == ["-m", "residshift", "train", "--profile"] and "--no-progress" in cmd
        assert any(_child_config(cmd) == r.cfg for r in todo) and dev in ("4", "7") and log.suffix == ".log"
    assert {dev for _, dev, _ in runs} == {"4", "7"}
    assert [o.returncode for o in out].count(3) == 1
    assert any("skip" in line and p.runs[2].name in line for line in printed)
    assert any("resumes at step 4" in line for line in printed)


def test_one_at_a_time_and_torchrun_for_several_gpus_per_run(results, monkeypatch):
    p = GL.plan(GL.resolve_profile("smoke", seeds=[0]), only=["baseline", "learned"])
    p.device = "cuda"
    calls = []

    def fake(cmd, *, env, log):
        calls.append((cmd, env.get("CUDA_VISIBLE_DEVICES"), log))
        time.sleep(0.1)  # long enough that both slots take a run
        return 0

    monkeypatch.setattr(GL, "_spawn", fake)
    GL.launch(p, parallel=1, gpus=["0", "1", "2", "3"], echo=lambda s: None)
    assert [(d, log) for _, d, log in calls] == [("0", None), ("0", None)]  # in order, output to the terminal
    assert "--no-progress" not in calls[0][0] and _child_config(calls[0][0]) == p.runs[0].cfg
    calls.clear()
    GL.launch(p, parallel=2, gpus_per_run=2, gpus=["0", "1", "2", "3"], echo=lambda s: None)
    assert sorted(d for c, d, _ in calls if "--prepare-only" not in c) == ["0,1", "2,3"]
    assert all(c[1:6] == ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
               for c, _, _ in calls if "--prepare-only" not in c)
    assert GL.slot_devices(3, ["a", "b"]) == ["a", "b", "a"] and GL.slot_devices(2, []) == [None, None]
    with pytest.raises(GL.GridError, match="no GPU is visible"):
        GL.launch(p, gpus=[], echo=lambda s: None)
    for r in p.runs:
        r.status = "done"
    assert GL.launch(p, gpus=["0"], echo=calls.append) == [] and "nothing to train" in calls[-1]


@pytest.mark.parametrize("argv, message", [
    (["--profile", "nope", "--dry-run"], "unknown profile 'nope'; choose one of"),
    (["--profile", "smoke", "--parallel", "0", "--dry-run"], "--parallel must be at least 1"),
    (["--profile", "smoke", "--parallel", "x"], "argument --parallel: invalid int value"),
    (["--profile", "smoke", "--only", "nope", "--dry-run"], "--only: only= names ['nope'] are not in the grid"),
    (["--profile", "smoke", "--seeds", "1", "1", "--dry-run"], "--seeds: train_seeds must be distinct"),
    (["--profile", "smoke", "--device", "tpu", "--dry-run"], "--device must be cpu or cuda"),
    (["--profile", "smoke", "--bogus"], "unrecognized arguments: --bogus"),
    (["--profile", "smoke", "-p", "lens_windows=4", "--dry-run"], "-p lens_windows: train-grid takes train_* keys"),
    (["--profile", "smoke", "-p", "train_tokens", "--dry-run"], "must look like key=value"),
    (["--profile", "smoke", "-p", "train_tokenz=4", "--dry-run"], "train_tokenz"),
])
def test_bad_requests_are_one_line_and_exit_2(argv, message, results, capsys):
    assert main(["train-grid", *argv]) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.count("\n") == 1
    assert out.err.startswith("residshift train-grid: error: ") and message in out.err


def test_a_real_run_of_a_cuda_profile_without_a_gpu_is_refused(results, capsys, monkeypatch):
    monkeypatch.setattr(GL, "visible_gpus", lambda: [])
    assert main(["train-grid", "--profile", "smoke", "--device", "cuda", "--only", "baseline"]) == 2
    assert "no GPU is visible" in capsys.readouterr().err


def test_the_paper_dry_run_as_a_subprocess(tmp_path):
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(REPO_ROOT), RESIDSHIFT_RESULTS=str(tmp_path))
    env.setdefault("RESIDSHIFT_DATA", str(REPO_ROOT.parent / "shared" / "data"))
    r = subprocess.run([sys.executable, "-m", "residshift", "train-grid", "--profile", "paper", "--dry-run"],
                       env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    P = GL.resolve_profile("paper")
    n = len(training.grid(P)) * len(training.seeds(P))
    lines = r.stdout.splitlines()
    assert lines[0].startswith("train-grid: profile paper, device cuda: ") and lines[0].endswith(f"= {n} runs")
    assert sum(line[:4].strip().isdigit() for line in lines) == n
    assert lines[-2].startswith(f"done: 0; partial: 0; running: 0; to do: {n}; tokens to train: ")
    assert lines[-1].startswith("cost: ")


def test_the_run_lock_excludes_a_second_process_and_ends_with_it(tmp_path):
    run = tmp_path / "run"
    hold = ("import sys, time\nfrom residshift.train.lock import run_lock\nwith run_lock(sys.argv[1]):\n"
            "    print('held', flush=True)\n    time.sleep(120)\n")
    holder = subprocess.Popen([sys.executable, "-c", hold, str(run)], stdout=subprocess.PIPE,
                              env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    try:
        assert holder.stdout.readline().strip() == b"held"
        assert run_locked(run)
        with pytest.raises(RunLockedError, match=f"being trained by another process \\(pid {holder.pid} on "):
            with run_lock(run):
                pass
    finally:
        holder.kill()
        holder.wait()
    assert not run_locked(run)  # a killed holder leaves no lock
    with run_lock(run) as path:
        assert path.name == "train.lock"
    assert not (run / "train.lock").exists()


def test_the_launcher_skips_a_run_another_process_took(tmp_path, monkeypatch):
    """A run taken by another process after this launcher planned: its trainer exits with the trainer's
    LOCKED_EXIT at once (tests/test_trainer.py checks the trainer's side), and the launcher says it skipped
    the run instead of calling it a failure."""
    monkeypatch.setenv("RESIDSHIFT_RESULTS", str(tmp_path))
    P = GL.profiles.resolve("smoke")
    p = GL.plan(P, only=["baseline"], device="cpu")
    todo = [r for r in p.runs if r.status in ("to do", "partial")]
    spawned, said = [], []

    def spawn(cmd, env=None, log=None):
        spawned.append(cmd)
        return T.LOCKED_EXIT if len(spawned) == 1 else 0

    outcomes = GL.launch(p, spawn=spawn, echo=said.append)
    assert len(spawned) == len(todo) and len(outcomes) == len(todo) - 1
    assert any("another process took it" in s for s in said) and not any("FAILED" in s for s in said)

@pytest.mark.parametrize("profile", ["smoke", "default"])
def test_the_train_command_builds_the_grids_run_for_every_variant(profile):
    """`python -m residshift train --mode M [--alpha a --layer l] --seed s` is the grid's run: the same
    config (so the same key), the learned gates with the profile's train_gate_init, a fixed cut at its
    train_cut_site; a baseline takes neither, and -p train_gate_init=... reaches the gates."""
    P = GL.resolve_profile(profile)
    for v in training.grid(P):
        args = Namespace(profile=profile, param=[], mode=v.mode, seed=1, alpha=v.alpha,
                         layer=None if v.layer is None else [v.layer])
        if v.embedding is not None:
            args.param = [f"embedding={v.embedding}"]
        cfg = train_config_from_args(args)
        assert cfg == training.config(P, v, 1), v.name
        if v.mode in ("learned", "learned-token") and P.train_gate_init is not None:
            assert cfg.theta_init == float(P.train_gate_init)
        if v.mode == "baseline":
            assert cfg.theta_init is None and cfg.site == "block"
    args = Namespace(profile=profile, param=["train_gate_init=1.5"], mode="learned-token", seed=1, alpha=None,
                     layer=None)
    assert train_config_from_args(args).theta_init == 1.5


def test_p_shrinks_every_run_of_the_grid_and_the_launched_command_carries_it(results, capsys):
    """`train-grid -p train_tokens=...`: every planned run has the new budget, its key (folder) moves
    with it, and the command each run launches tells the trainer."""
    base = GL.plan(GL.resolve_profile("smoke"))
    small = GL.plan(GL.resolve_profile("smoke", params=["train_tokens=1536"]))
    assert len(small.runs) == len(base.runs)
    assert all(r.tokens == r.cfg.steps() * r.cfg.tokens_per_step() < b.tokens for r, b in zip(small.runs, base.runs))
    assert {r.folder for r in small.runs}.isdisjoint({b.folder for b in base.runs})
    cmd = GL.command(small.runs[0], "smoke", "cpu")
    assert any(a.startswith("tokens=") for a in cmd), cmd
    assert main(["train-grid", "--profile", "smoke", "-p", "train_tokens=1536", "--dry-run"]) == 0
    assert f"tokens to train: {sum(r.tokens for r in small.runs):,}" in capsys.readouterr().out


def test_the_guides_one_gpu_route_quotes_the_measured_speeds():
    """The guide's one-GPU numbers are arithmetic on the committed H200 benchmark and the paper profile:
    a changed speed or budget fails here until the guide is rewritten."""
    from residshift.core import profiles

    guide = " ".join((REPO_ROOT / "docs" / "guide.md").read_text().split())
    shapes = json.loads((REPO_ROOT / "benchmarks" / "bench-train-cuda.json").read_text())["shapes"]
    fast = shapes["paper"]["precision"]["bf16-compile"]["tokens_per_s"]
    deep = shapes["paper-ladder-24"]["precision"]["bf16-compile"]["tokens_per_s"]
    P = profiles.get("paper")
    rung = P["ladder_base_tokens"]
    grid = GL.plan(GL.resolve_profile("paper"))
    total = sum(r.tokens for r in grid.runs)
    assert f"{len(grid.runs)} runs × {P['train_tokens'] / 1e9:.2f}B tokens = {total / 1e9:.1f}B tokens: " \
           f"{round(total / fast / 3600)} H200-hours at the {round(fast):,} tokens/s" in guide
    assert f"{round(rung / 1e6)}M tokens, about {round(rung / fast / 60)} minutes at that speed (24 blocks: " \
           f"{round(deep):,} tokens/s, about {round(rung / deep / 60)} minutes)" in guide
    part = 2 * 3 * 524_288_000
    assert f"two variants × 3 seeds × 524M tokens: about {part / fast / 3600:.1f} h" in guide
