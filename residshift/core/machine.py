"""The CPU a speed figure was measured on, recorded beside every time this package writes.

CPUs of one kind of machine differ (some have native bf16, ``avx512_bf16`` / ``amx_bf16``, some emulate
it and run bf16 about 3x slower), so a time without its CPU cannot be compared with another.
"""
from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any

# torch is imported inside the functions that need it: the command line imports this module before it
# parses its arguments, and a bad argument must not wait ~2 s for torch.


# oneMKL's conditional numerical reproducibility, strict, on its AVX2 code path. oneMKL otherwise picks its
# GEMM kernels by CPU vendor (AVX-512 on an Intel Xeon, AVX2 on an AMD EPYC), so the same training run
# rounds differently on the two and the trajectories drift apart (issue 34: 7 of 59 verdict rows of
# notebooks 06-08 flipped between a fresh clone on each). benchmarks/cpu_repro.py measured 30 trainer
# steps at the default shape: with this setting the final weights are bit-identical on an Intel Xeon
# (avx512_fp16 class; torch 2.11) and an AMD EPYC (torch 2.13), and identical to the EPYC's default;
# without it the Xeon's differ (benchmarks/cpu-repro-*.json; the cost there was 1.27x per step, none
# on the EPYC). A whole grid run (baseline, seed 1: 350 steps with its evaluations) trained on both came
# out with the same weights and validation loss (benchmarks/cpu-repro-grid-run.json). The whole default
# grid, trained on each (the committed one on the Xeon, a fresh clone's on the EPYC): 12 of the 13
# variants whose curves notebook 06 draws came out identical, the token-gated one (learned-token) did not, up to 0.08 nats in a
# validation loss (benchmarks/cpu-repro-grid-curves.json). Its gate logit LN(x) . w is a
# matrix-vector product, which the strict mode does not name among the products it makes reproducible
# (benchmarks/cpu_repro.py --mode learned-token hashes that model per setting; the device check runs it
# on the device machine's host). CPUs without
# AVX-512 run ATen's own kernels on AVX2 and round differently again (the ATEN_CPU_CAPABILITY row there). oneMKL reads the variable at its first call, so it must be set before any matrix
# product runs in the process: `python -m residshift` sets it first thing, and the Makefile exports it.
REPRODUCIBLE_KERNELS = {"MKL_CBWR": "AVX2,STRICT"}

# oneMKL's code branches for MKL_CBWR="[BRANCH=]<branch>[,STRICT]" (its developer guide, "Specifying Code
# Branches"; SSE3, SSSE3, AVX and the MIC ones are deprecated there but still read). oneMKL ignores a value
# it does not know, silently: a typo would cost the reproducibility the setting is for.
MKL_BRANCHES = ("AUTO", "COMPATIBLE", "SSE2", "SSE3", "SSSE3", "SSE4_1", "SSE4_2", "AVX", "AVX2", "AVX2_E1",
                "AVX512", "AVX512_E1", "AVX512_MIC", "AVX512_MIC_E1")


class KernelSettingError(ValueError):
    """``MKL_CBWR`` holds a value oneMKL does not know; the message names the valid ones."""


def check_mkl_cbwr(value: str) -> None:
    """Refuse an ``MKL_CBWR`` value that is not ``[BRANCH=]<branch>[,STRICT]`` (:data:`MKL_BRANCHES`)."""
    branch, _, flag = value.strip().upper().partition(",")
    if branch.removeprefix("BRANCH=") in MKL_BRANCHES and flag in ("", "STRICT"):
        return
    raise KernelSettingError(
        f"MKL_CBWR={value!r} is not a oneMKL setting: use <branch> or <branch>,STRICT with <branch> one of "
        f"{', '.join(MKL_BRANCHES)} (this package's choice: MKL_CBWR={REPRODUCIBLE_KERNELS['MKL_CBWR']}), or unset it")


def use_reproducible_kernels() -> None:
    """Ask oneMKL for its reproducible kernels in this process and the ones it starts (unless the
    user chose a setting: an existing ``MKL_CBWR`` is kept, if oneMKL knows it, else
    :class:`KernelSettingError`). Effective only before the first matrix product of the process."""
    for key, value in REPRODUCIBLE_KERNELS.items():
        os.environ.setdefault(key, value)
    check_mkl_cbwr(os.environ["MKL_CBWR"])


def __getattr__(name: str) -> Any:  # ``machine.torch``, as when torch was imported at the top (tests patch it)
    if name == "torch":
        import torch

        return torch
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def kernels_note() -> str | None:
    """Why CPU training here may not reproduce the committed numbers bit for bit, or None."""
    import torch

    if not torch.backends.mkl.is_available():
        return None
    off = {k: os.environ.get(k) for k, v in REPRODUCIBLE_KERNELS.items() if os.environ.get(k) != v}
    if not off:
        return None
    want = " ".join(f"{k}={v}" for k, v in REPRODUCIBLE_KERNELS.items())
    return (f"note: {', '.join(f'{k}={v!r}' for k, v in off.items())} in this process: oneMKL picks its kernels "
            f"by CPU, so runs trained here can differ from the committed ones in the last bits and drift from "
            f"there. Start Jupyter or Python with {want} (make lab and python -m residshift do) for runs "
            "that are bit-identical on Intel and AMD CPUs.")


def cpu_facts() -> dict[str, Any]:
    """The CPU a speed figure was measured on: model name, native bf16 flags, threads, 1-min load."""
    import torch

    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        lines = []
    names = [l.split(":", 1)[1].strip() for l in lines if l.startswith("model name")]
    flags = next((set(l.split(":", 1)[1].split()) for l in lines if l.startswith("flags")), set())
    name = names[0] if names else platform.processor() or platform.machine()
    return {"cpu": name, "native_bf16": sorted(flags & {"avx512_bf16", "amx_bf16"}),
            "threads": torch.get_num_threads(), "load_1min": os.getloadavg()[0]}


def device_problem(device: str) -> str | None:
    """Why ``device`` cannot run here (a phrase to follow the device's name), or None when it can:
    a string torch does not parse as a device, CUDA on a machine without it, or a kind of device
    this package does not run on (it runs on cpu, cuda and mps)."""
    import torch

    try:
        kind = torch.device(device).type
    except (RuntimeError, TypeError):
        return "is not a torch device: use cpu or cuda (cuda:N for one GPU)"
    if kind == "cuda" and not torch.cuda.is_available():
        return "asked for, but torch sees no CUDA GPU on this machine: use cpu"
    if kind not in ("cpu", "cuda", "mps"):
        return "is not a device this package runs on: use cpu or cuda (cuda:N for one GPU)"
    return None
