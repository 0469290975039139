"""The CPU a speed figure was measured on, recorded beside every time this package writes.

CPUs of one kind of machine differ (some have native bf16, ``avx512_bf16`` / ``amx_bf16``, some emulate
it and run bf16 about 3x slower), so a time without its CPU cannot be compared with another.
"""
from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any

import torch


def cpu_facts() -> dict[str, Any]:
    """The CPU a speed figure was measured on: model name, native bf16 flags, threads, 1-min load."""
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
    try:
        kind = torch.device(device).type
    except (RuntimeError, TypeError):
        return "is not a torch device: use cpu or cuda (cuda:N for one GPU)"
    if kind == "cuda" and not torch.cuda.is_available():
        return "asked for, but torch sees no CUDA GPU on this machine: use cpu"
    if kind not in ("cpu", "cuda", "mps"):
        return "is not a device this package runs on: use cpu or cuda (cuda:N for one GPU)"
    return None
