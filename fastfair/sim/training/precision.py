"""The arithmetic of local training's forward and backward passes: ``fp32``, or ``bf16`` / ``fp16``
autocast (``torch.autocast``) on the CPU or on CUDA. Only the passes change: parameters,
gradients applied to them, updates, aggregation and every rule's state stay float32 / float64.

Autocast runs matrix products and convolutions in the low precision and keeps reductions,
losses and normalisations in float32 (torch's autocast op lists). fp16 has no loss scaling here:
a gradient below fp16's smallest subnormal (6e-8) inside the backward pass flushes to zero, so
prefer bf16 where the device has it.
"""

from __future__ import annotations

import contextlib
from typing import ContextManager

import torch

from fastfair.sim.training.settings import PRECISIONS

#: The values of ``precision``, and the autocast dtype of each (None: no autocast).
DTYPES = {name: None if dtype is None else getattr(torch, dtype)
          for name, dtype in PRECISIONS.items()}


def check_precision(precision: str, device: torch.device) -> None:
    """Raises ValueError unless ``device`` runs ``precision``'s passes natively: bf16 on a CPU
    whose oneDNN has bf16 kernels (AVX512-BF16, AMX or AVX-512 BW/VL/DQ) or a CUDA GPU with
    bf16 (compute capability 8.0 on); fp16 on a CPU with fp16 kernels (AVX512-FP16 or AMX-FP16)
    or any CUDA GPU. A refused precision would otherwise run emulated, many times slower than
    fp32. The message names the device and what to pass instead."""
    if precision not in DTYPES:
        raise ValueError(f"precision must be one of {', '.join(DTYPES)}; got {precision!r}")
    if precision == "fp32":
        return
    device = torch.device(device)
    if device.type == "cuda":
        ok = precision == "fp16" or torch.cuda.is_bf16_supported(including_emulation=False)
        where = f"the GPU {torch.cuda.get_device_name(device)}"
    elif device.type == "cpu":
        ops = torch.ops.mkldnn
        ok = torch.backends.mkldnn.is_available() and bool(
            ops._is_mkldnn_bf16_supported() if precision == "bf16"
            else ops._is_mkldnn_fp16_supported())
        where = "this CPU"
    else:
        ok, where = False, f"device {device}"
    if not ok:
        raise ValueError(f"precision {precision!r} (--precision): {where} has no native "
                         f"{precision} arithmetic for training; pass precision='fp32'"
                         + (" or 'fp16'" if device.type == "cuda" else ""))


def autocast(precision: str, device: torch.device) -> ContextManager:
    """The block's forward pass under ``torch.autocast`` of ``precision`` on ``device``'s type
    (the backward pass of what it records follows the same dtypes); nothing for fp32."""
    dtype = DTYPES[precision]
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(torch.device(device).type, dtype=dtype)
