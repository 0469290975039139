"""The training grid on a cluster: ``train-grid --engine submitit``.

The same :func:`residshift.tools.grid_launcher.plan` and cost line as ``train-grid``, and the same
``python -m residshift train`` command per run, submitted through `submitit
<https://github.com/facebookincubator/submitit>`_: one Slurm job array (``--cluster slurm``, or
``auto`` where ``sbatch`` is found) or submitit's local executor (``--cluster local``: the jobs run as
processes of this machine, which is how the tests run it). A run that needs several GPUs on several
nodes is one job of ``--nodes`` nodes x ``--gpus-per-run`` tasks: submitit starts one process per
task and :class:`TrainJob` exports torch.distributed's ``env://`` rendezvous (``MASTER_ADDR``,
``MASTER_PORT``, ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``) before the trainer joins its process group,
as ``torchrun --nnodes`` would. ``train-grid --commands`` prints the plain commands instead, for
people who submit by hand (one line per run; a multi-node run under ``torchrun --nnodes N
--nproc-per-node G --rdzv-backend c10d --rdzv-endpoint HOST:PORT -m residshift train ...``).

What the run lock does and does not do: each trainer holds ``train.lock`` in its run folder with
``flock``, which excludes a second trainer of the same run on the same host, and on a shared filesystem
only where that filesystem's ``flock`` reaches across hosts (NFS may not). So submit a grid from one
place, once: the plan marks runs another process holds as ``running``, and a job whose run was taken
since exits with the trainer's "locked" status, which is reported, not retried.
"""
from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ..core.paths import REPO_ROOT, results_dir
from .grid_launcher import LOCKED_EXIT, GridError, Outcome, Plan, command

CLUSTERS = ("auto", "slurm", "local")


@dataclass
class TrainJob:
    """One run's training command, as a submitit job (picklable: the command and its environment)."""

    cmd: list[str]
    env: dict[str, str]

    def __call__(self) -> int:
        env = {**os.environ, **self.env}
        import submitit

        job = submitit.JobEnvironment()
        if job.num_tasks > 1:  # one process per task: the rendezvous torchrun would set up
            dist = submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=False)
            env.update(MASTER_ADDR=dist.master_addr, MASTER_PORT=str(dist.master_port), RANK=str(dist.rank),
                       WORLD_SIZE=str(dist.world_size), LOCAL_RANK=str(dist.local_rank),
                       LOCAL_WORLD_SIZE=str(dist.local_world_size))
        rc = subprocess.run(self.cmd, cwd=REPO_ROOT, env=env).returncode
        if rc not in (0, LOCKED_EXIT):
            raise RuntimeError(f"the trainer exited with status {rc}")
        return rc


def executor(p: Plan, *, cluster: str = "auto", folder: Path | None = None, gpus_per_run: int = 1, nodes: int = 1,
             timeout_min: int = 24 * 60, slurm: Mapping[str, Any] | None = None):
    """A submitit executor for ``p``'s runs: ``nodes`` x ``gpus_per_run`` tasks per job (one GPU each on
    CUDA), ``slurm``'s items as ``slurm_<key>`` parameters (partition, account, ...)."""
    import submitit

    if cluster not in CLUSTERS:
        raise GridError(f"--cluster {cluster!r}: use one of {', '.join(CLUSTERS)}")
    if nodes < 1:
        raise GridError(f"--nodes must be at least 1, got {nodes}")
    folder = folder or results_dir() / "train-grid" / p.profile / "submitit"
    ex = submitit.AutoExecutor(folder=folder, cluster=None if cluster == "auto" else cluster)
    cuda = p.device.split(":")[0] == "cuda"
    params: dict[str, Any] = {"name": f"residshift-{p.profile}", "timeout_min": int(timeout_min), "nodes": nodes,
                              "tasks_per_node": gpus_per_run}
    if cuda:
        params["gpus_per_node"] = gpus_per_run
    params.update({f"slurm_{k}": v for k, v in (slurm or {}).items()})
    try:
        ex.update_parameters(**params)
    except (ValueError, TypeError) as err:
        raise GridError(f"submitit refused the parameters: {str(err).splitlines()[0]}") from None
    return ex


def submit(p: Plan, *, cluster: str = "auto", folder: Path | None = None, gpus_per_run: int = 1, nodes: int = 1,
           timeout_min: int = 24 * 60, slurm: Mapping[str, Any] | None = None, wait: bool = True,
           echo: Callable[[str], None] = print) -> list[Outcome]:
    """Submit every run of ``p`` that is not done (nor held) as one job array; with ``wait``, wait for
    them and return their outcomes (else the jobs' ids are printed and ``[]`` returned)."""
    todo = [r for r in p.runs if r.status in ("to do", "partial")]
    if not todo:
        echo("nothing to submit: every run is done or running elsewhere")
        return []
    ex = executor(p, cluster=cluster, folder=folder, gpus_per_run=gpus_per_run, nodes=nodes,
                  timeout_min=timeout_min, slurm=slurm)
    env = {"OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE")}
    # one process per task: no torchrun inside a job (submitit starts the tasks, TrainJob joins them)
    jobs = []
    with ex.batch():
        for run in todo:
            jobs.append((run, ex.submit(TrainJob(command(run, p.profile, p.device, quiet=True), env))))
    echo(f"submitted {len(jobs)} runs to {ex.cluster} as one array ({', '.join(j.job_id for _, j in jobs[:3])}"
         f"{' ...' if len(jobs) > 3 else ''}); logs in {ex.folder}")
    if not wait:
        return []
    outcomes = []
    for run, job in jobs:
        t0 = time.perf_counter()
        try:
            rc = next((r for r in job.results() if r), 0)  # one result per task
        except Exception as err:  # noqa: BLE001 - submitit wraps the job's error: report it, go on
            echo(f"FAILED: {run.name}, seed {run.seed}: {str(err).strip().splitlines()[-1]}")
            rc = 1
        if rc == LOCKED_EXIT:
            echo(f"skip {run.name}, seed {run.seed}: another process took it")
            continue
        outcomes.append(Outcome(run, int(rc), None, time.perf_counter() - t0, Path(job.paths.stdout)))
    return outcomes


def commands(p: Plan, *, gpus_per_run: int = 1) -> list[str]:
    """One shell line per run that is not done: what ``train-grid`` would launch."""
    import shlex

    return [shlex.join(command(r, p.profile, p.device, gpus_per_run=gpus_per_run, quiet=True))
            for r in p.runs if r.status in ("to do", "partial")]


def slurm_params(items: Sequence[str]) -> dict[str, Any]:
    """``["partition=gpu", "account=x"]`` -> ``{"partition": "gpu", "account": "x"}``."""
    out = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise GridError(f"--slurm {item!r} must look like key=value (e.g. --slurm partition=gpu)")
        out[key.strip()] = value
    return out
