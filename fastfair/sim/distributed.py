"""This process's place in a ``torch.distributed`` group: which slice of a cohort it trains and
the collectives that assemble a round (the cohort's per-client vectors, its weighted sum)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass
class Distributed:
    """This process's place in a ``torch.distributed`` group (rank 0 of 1 when alone)."""

    rank: int = 0
    world_size: int = 1
    joined: bool = False  # this object initialised the default group, so close() ends it

    @classmethod
    def from_environment(cls) -> "Distributed":
        """Joins the default process group when launched by torchrun (gloo on CPU)."""
        import os

        if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
            return cls()
        import torch.distributed as dist

        joined = not dist.is_initialized()
        if joined:
            dist.init_process_group("gloo")
        return cls(dist.get_rank(), dist.get_world_size(), joined)

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

        full = torch.zeros(m, dtype=torch.float64)
        full[self.my_slice(m)] = torch.from_numpy(values)
        dist.all_reduce(full)  # slices are disjoint, so the sum is the concatenation
        return full.numpy()

    def gather_rows(self, rows: torch.Tensor, m: int) -> torch.Tensor:
        """Concatenates each rank's rows ``[slice, P]`` of an ``[m, P]`` tensor, in rank order."""
        if self.world_size == 1:
            return rows
        full = torch.zeros(m, rows.shape[1], dtype=rows.dtype)
        full[self.my_slice(m)] = rows
        return self.sum(full)

    def sum(self, tensor: torch.Tensor) -> torch.Tensor:
        if self.world_size > 1:
            import torch.distributed as dist

            dist.all_reduce(tensor)
        return tensor
