"""How the process runs a simulation: torch's and the kernels' thread counts, the C allocator's
reuse of freed memory, and the cores that are idle now."""

from __future__ import annotations

import contextlib
from typing import Callable, Iterator, List, Optional, Sequence, TypeVar

import torch

T = TypeVar("T")
R = TypeVar("R")


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Runs the block with ``n`` intra-op torch threads and ``n`` OpenMP threads in fastfair's
    kernels (both restored after). Small models' ops run in microseconds on one thread, while
    several threads contending for busy cores turn each into milliseconds of synchronisation."""
    import fastfair

    before = torch.get_num_threads(), fastfair.get_num_threads()
    torch.set_num_threads(n)
    fastfair.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before[0])
        fastfair.set_num_threads(before[1])


@contextlib.contextmanager
def kept_heap() -> Iterator[None]:
    """Runs the block with the C allocator (glibc's malloc) keeping freed memory for reuse:
    nothing is handed back to the OS and no block gets a mapping of its own. A round allocates
    its cohort's tensors anew, and glibc maps every block above 32 MB fresh, so the first touch
    of each page faults and zeroes it (a sixth of a round of 1000 clients; docs/benchmarks.md,
    design measurements).
    Process-wide while it lasts: memory held at the peak is reused, not returned. After it,
    glibc's limits are set back to their defaults and the kept memory is released
    (``malloc_trim``). Without glibc, the block runs as it is. It holds for the main arena: a
    thread glibc has moved to a secondary arena (after lock contention with other threads) still
    maps blocks of 64 MB and more, whose heaps cannot hold them."""
    import ctypes

    libc = ctypes.CDLL(None)
    if not (hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim")
            and hasattr(libc, "gnu_get_libc_version")):
        yield
        return
    trim_threshold, mmap_max = -1, -4  # malloc.h's M_TRIM_THRESHOLD, M_MMAP_MAX
    libc.mallopt(mmap_max, 0)
    libc.mallopt(trim_threshold, 2 ** 31 - 1)
    try:
        yield
    finally:
        libc.mallopt(trim_threshold, 128 * 1024)
        libc.mallopt(mmap_max, 65536)
        libc.malloc_trim(0)


def run_tuned(threads: Optional[int], run: Callable[[], R]) -> R:
    """``run()`` under :func:`kept_heap` and :func:`torch_threads` (``threads``; as they are
    for None)."""
    with kept_heap(), (torch_threads(threads) if threads is not None
                       else contextlib.nullcontext()):
        return run()


def idle_cores(limit: int = 4) -> int:
    """The cores no other process keeps busy now: the CPUs this process may run on less the
    one-minute load average, between 1 and ``limit``. More torch threads than idle cores make
    every op wait for a descheduled thread (docs/benchmarks.md, design measurements)."""
    import os

    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(limit, (cpus or 1) - round(os.getloadavg()[0])))


def one_thread_each(fn: Callable[[T], R], items: Sequence[T]) -> List[R]:
    """``[fn(item) for item in items]``, computed ``min(torch.get_num_threads(), len(items))``
    at a time on threads of their own, with torch's intra-op threads set to one meanwhile
    (process-wide; restored after): each item's arithmetic runs on one thread, so its bits do
    not depend on the thread count. Items are handed out in order as threads free up (give
    the longest first). Results in the order of ``items``; the first exception raised is
    raised here."""
    from concurrent.futures import ThreadPoolExecutor

    workers = max(1, min(torch.get_num_threads(), len(items)))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        if workers == 1:
            return [fn(item) for item in items]
        with ThreadPoolExecutor(workers) as pool:
            return list(pool.map(fn, items))
    finally:
        torch.set_num_threads(threads)
