"""CohortMode's memory-format handling for alone training: convolutions and max pooling see
``channels_last`` inputs and give ``channels_last`` outputs with the values of the default
format."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from fastfair.sim.models.layers import CohortMode


def test_channels_last_layers_give_the_same_values_in_channels_last_format():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Conv2d(8, 4, 3), nn.Flatten(), nn.Linear(4 * 2 * 2, 3))
    x = torch.rand(5, 1, 8, 8, requires_grad=True)
    seen = []
    net[2].register_forward_hook(lambda m, i, o: seen.append(
        (i[0].is_contiguous(memory_format=torch.channels_last),
         o.is_contiguous(memory_format=torch.channels_last))))
    plain = net(x)
    with CohortMode(torch.zeros((), dtype=torch.int64), torch.ones(5, dtype=torch.bool),
                    channels_last=True):
        last = net(x)
        pooled = F.max_pool2d(torch.rand(2, 3, 4, 4), 2)
    assert seen == [(False, False), (True, True)]  # one input channel: made channels_last
    assert pooled.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(last, plain, rtol=1e-5, atol=1e-6)
    g_plain, = torch.autograd.grad(plain.sum(), x)
    g_last, = torch.autograd.grad(last.sum(), x)
    torch.testing.assert_close(g_last, g_plain, rtol=1e-5, atol=1e-6)
    with CohortMode(torch.zeros((), dtype=torch.int64), torch.ones(5, dtype=torch.bool)):
        assert not F.max_pool2d(torch.rand(2, 3, 4, 4), 2).is_contiguous(
            memory_format=torch.channels_last)  # off by default (the vmap path)
