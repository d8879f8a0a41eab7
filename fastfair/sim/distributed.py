"""This process's place in a ``torch.distributed`` group: which slice of a cohort it trains and
the collectives that assemble a round (the cohort's per-client vectors, its weighted sum)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


def check_device(device: torch.device) -> None:
    """Refuses a CUDA ``device`` this process cannot compute on, before any data loads: a torch
    that sees no CUDA GPU, a device index past the ones it sees, or fastfair's compiled core built
    without CUDA (with the rebuild command). ValueError naming ``--device``."""
    if device.type != "cuda":
        return
    if not torch.cuda.is_available():
        raise ValueError(f"device (--device) {str(device)!r}: this torch ({torch.__version__}) "
                         "sees no CUDA GPU (a CPU build of torch, or no GPU visible); pass "
                         "--device cpu")
    count = torch.cuda.device_count()
    if device.index is not None and device.index >= count:
        raise ValueError(f"device (--device) {str(device)!r}: this torch sees {count} CUDA "
                         f"GPU(s), cuda:0 to cuda:{count - 1}")
    from fastfair import build_info

    if not build_info()["cuda"]:
        raise ValueError(
            f"device (--device) {str(device)!r} needs fastfair's compiled core built with CUDA, "
            "and this one was built without it; rebuild it with FASTFAIR_CUDA=ON pip install -c "
            "constraints.txt -e '.[sim]' on a machine with nvcc (docs/install.md), or pass "
            "--device cpu")


@dataclass
class Distributed:
    """This process's place in a ``torch.distributed`` group (rank 0 of 1 when alone)."""

    rank: int = 0
    world_size: int = 1
    joined: bool = False  # this object initialised the default group, so close() ends it
    #: Where this process computes: collectives run on tensors of this device.
    device: torch.device = torch.device("cpu")

    @classmethod
    def from_environment(cls, device: str = "cpu") -> "Distributed":
        """This process under torchrun (``WORLD_SIZE`` > 1): joins the default process group,
        NCCL on CUDA (each process on GPU ``LOCAL_RANK`` when ``device`` names no index) and gloo
        on the CPU; alone otherwise."""
        import os

        where = torch.device(device)
        if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
            return cls(device=where)
        import torch.distributed as dist

        if where.type == "cuda":
            if where.index is None:
                where = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
            torch.cuda.set_device(where)
        joined = not dist.is_initialized()
        if joined:
            dist.init_process_group("nccl" if where.type == "cuda" else "gloo")
        return cls(dist.get_rank(), dist.get_world_size(), joined, where)

    def close(self) -> None:
        """Ends the process group that :meth:`from_environment` joined (a no-op otherwise).
        A group left to interpreter shutdown can abort the process from gloo's threads."""
        if self.joined:
            import torch.distributed as dist

            dist.destroy_process_group()
            self.joined = False

    def my_slice(self, m: int) -> slice:
        bounds = np.linspace(0, m, self.world_size + 1).round().astype(int)
        return slice(int(bounds[self.rank]), int(bounds[self.rank + 1]))

    def gather(self, values: np.ndarray, m: int) -> np.ndarray:
        """Concatenates each rank's slice of a length-m float64 vector, in rank order."""
        if self.world_size == 1:
            return values
        import torch.distributed as dist

        full = torch.zeros(m, dtype=torch.float64, device=self.device)
        full[self.my_slice(m)] = torch.from_numpy(values).to(self.device)
        dist.all_reduce(full)  # slices are disjoint, so the sum is the concatenation
        return full.cpu().numpy()

    def gather_rows(self, rows: torch.Tensor, m: int) -> torch.Tensor:
        """Concatenates each rank's rows ``[slice, P]`` of an ``[m, P]`` tensor, in rank order."""
        if self.world_size == 1:
            return rows
        full = torch.zeros(m, rows.shape[1], dtype=rows.dtype, device=rows.device)
        full[self.my_slice(m)] = rows
        return self.sum(full)

    def max_int(self, value: int) -> int:
        """The largest of every process's ``value`` (``value`` itself when alone): one
        all-reduce of one int64, which every process must call at the same point."""
        if self.world_size == 1:
            return value
        import torch.distributed as dist

        held = torch.tensor([value], dtype=torch.int64, device=self.device)
        dist.all_reduce(held, op=dist.ReduceOp.MAX)
        return int(held.item())

    def barrier(self) -> None:
        """Waits until every process gets here (nothing when alone)."""
        if self.world_size > 1:
            import torch.distributed as dist

            dist.barrier()

    def sum(self, tensor: torch.Tensor) -> torch.Tensor:
        if self.world_size > 1:
            import torch.distributed as dist

            dist.all_reduce(tensor)
        return tensor
