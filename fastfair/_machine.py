"""The machine a run is measured on, in words: the CPU model (``/proc/cpuinfo``), the GPU's name
and the threads, as benchmarks and reproduced tables record them beside their wall times."""

from __future__ import annotations

import platform
from pathlib import Path
from typing import Any, Dict, Optional


def cpu_info() -> Dict[str, str]:
    """The fields of the first processor in ``/proc/cpuinfo`` (empty where it is not
    readable)."""
    fields: Dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if ":" in line:
                key, value = (part.strip() for part in line.split(":", 1))
                if key and key not in fields:
                    fields[key] = value
                if not line.strip() and fields:
                    break
    except OSError:
        pass
    return fields


def cpu_model() -> str:
    """The CPU model name, with its family and model numbers where the name alone is generic
    (a virtual machine's "AMD EPYC" covers several generations)."""
    info = cpu_info()
    name = info.get("model name") or platform.processor() or platform.machine()
    if "cpu family" in info and "model" in info:
        name = f"{name} (family {info['cpu family']}, model {info['model']})"
    return name


def describe(device: str, threads: Optional[int]) -> Dict[str, Any]:
    """``{"cpu", "gpu", "device", "threads"}`` of a run on ``device`` (``cpu``, ``cuda``,
    ``cuda:N``) with ``threads`` threads (None: the process's, as torch reports them): the GPU
    is the device's name (None on the CPU)."""
    import torch

    gpu = torch.cuda.get_device_name(torch.device(device)) if device.startswith("cuda") else None
    return {"cpu": cpu_model(), "gpu": gpu, "device": device,
            "threads": threads if threads is not None else torch.get_num_threads()}


def summary(machine: Dict[str, Any]) -> str:
    """:func:`describe`'s ``machine`` in one line: ``"<GPU> (cuda:0), <CPU>, 4 threads"``."""
    threads = machine["threads"]
    where = f"{machine['gpu']} ({machine['device']}), " if machine.get("gpu") else ""
    return f"{where}{machine['cpu']}, {threads} thread{'s' if threads != 1 else ''}"
