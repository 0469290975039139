"""``train-grid --engine submitit``: the grid's plan submitted through submitit's local executor (the
Slurm path's tested fallback: same jobs, processes of this machine), a run of two tasks that join one
gloo process group through the rendezvous TrainJob exports, ``--commands`` and one-line refusals."""
import json

import pytest

from residshift.tools import cluster, grid_launcher as GL
from residshift.tools.cli import main
from residshift.train import trainer as T

pytestmark = pytest.mark.slow  # trains small GPTs in subprocesses (about a minute on 2 cores)


@pytest.fixture()
def results(tmp_path, monkeypatch):
    monkeypatch.setenv("RESIDSHIFT_RESULTS", str(tmp_path / "results"))
    return tmp_path / "results"


def test_a_two_run_smoke_grid_through_submitits_local_executor(results, capsys):
    P = GL.resolve_profile("smoke", seeds=[0, 1])
    p = GL.plan(P, only=["baseline"], device="cpu")
    assert [r.status for r in p.runs] == ["to do", "to do"]
    lines = cluster.commands(p)
    assert len(lines) == 2 and all(" -m residshift train --profile smoke" in line for line in lines)
    outcomes = cluster.submit(p, cluster="local", timeout_min=10, echo=print)
    assert [o.returncode for o in outcomes] == [0, 0], capsys.readouterr().out
    again = GL.plan(P, only=["baseline"], device="cpu")
    assert [r.status for r in again.runs] == ["done", "done"]  # the folders the notebooks read
    assert [r.folder for r in again.runs] == [T.run_dir_for(r.cfg, "cpu") for r in again.runs]
    assert cluster.submit(again, cluster="local", echo=print) == []
    assert "nothing to submit" in capsys.readouterr().out


def test_two_tasks_of_one_job_train_one_run_with_ddp(results):
    """--gpus-per-run 2 on a CPU: submitit starts two tasks, TrainJob exports the env:// rendezvous and
    the trainer joins a 2-process gloo group (what a multi-node Slurm job does with --nodes N)."""
    P = GL.resolve_profile("smoke", seeds=[0])
    p = GL.plan(P, only=["baseline"], device="cpu")
    (out,) = cluster.submit(p, cluster="local", gpus_per_run=2, timeout_min=10, echo=print)
    assert out.returncode == 0
    summary = json.loads((p.runs[0].folder / "summary.json").read_text())
    assert summary["world_size"] == 2, summary


def test_bad_cluster_requests_are_one_line(results, capsys):
    p = GL.plan(GL.resolve_profile("smoke", seeds=[0]), only=["baseline"], device="cpu")
    with pytest.raises(GL.GridError, match="--cluster 'pbs'"):
        cluster.executor(p, cluster="pbs")
    with pytest.raises(GL.GridError, match="must look like key=value"):
        cluster.slurm_params(["partition"])
    assert cluster.slurm_params(["partition=gpu", "account=lab"]) == {"partition": "gpu", "account": "lab"}
    assert main(["train-grid", "--profile", "smoke", "--only", "baseline", "--seeds", "0", "--commands"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1].split()[1:4] == ["-m", "residshift", "train"]
