"""HostBuffer hands its array out again only once nothing can see the last batch taken."""

from __future__ import annotations

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from fastfair.sim.data.base import HostBuffer  # noqa: E402


def test_a_buffer_in_use_is_never_handed_out_again():
    buffer = HostBuffer()
    first = buffer.take(100)
    part = first[10:20]          # a tensor sharing the memory keeps it in use
    address = first.data_ptr()
    del first
    second = buffer.take(100)
    assert second.data_ptr() != address
    assert not np.shares_memory(second.numpy(), part.numpy())


def test_a_buffer_nothing_sees_is_reused():
    buffer = HostBuffer()
    first = buffer.take(100)
    address = first.data_ptr()
    del first
    assert buffer.take(100).data_ptr() == address           # CPython frees on the last reference
    held = buffer.take(50)
    assert buffer.take(50).data_ptr() != held.data_ptr()    # still held: a new array
    assert buffer.take(10, np.int64).dtype == torch.int64   # another dtype: a new array


def test_a_copy_starts_without_an_array():
    buffer = HostBuffer()
    kept = buffer.take(8)
    twin = copy.deepcopy(buffer)
    assert twin.take(8).data_ptr() != kept.data_ptr()
