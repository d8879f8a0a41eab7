"""Affine maps of m models at once, ``x W + b`` for a whole cohort, in the layout BLAS runs
fastest and with each model's numbers independent of its company and of the thread count."""

from __future__ import annotations

import torch


def _products(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """``A [m, r, k] @ B [m, k, c]``, each model's product on one thread: given a single
    product, BLAS's threads may split its sum over k and round otherwise than the per-model
    products of a batch, and a model's numbers must not depend on its company."""
    threads = torch.get_num_threads()
    if A.shape[0] > 1 or threads == 1 or A.device.type != "cpu":
        return torch.bmm(A, B)
    torch.set_num_threads(1)
    try:
        return torch.bmm(A, B)
    finally:
        torch.set_num_threads(threads)


class _TransposedAffine(torch.autograd.Function):
    """``(W^T x^T + b)^T`` through :func:`_products`, forward and backward."""

    @staticmethod
    def forward(ctx, x, W, b):
        ctx.save_for_backward(x, W)
        # Contiguous [m, B, C] (a copy of 1/F of the product's reads): elementwise ops on a
        # transposed view take torch's scalar loop or its vector loop depending on the number of
        # models, and the two round exp differently.
        z = _products(W.transpose(1, 2), x.transpose(1, 2)).add_(b.unsqueeze(2))
        return z.transpose(1, 2).contiguous()

    @staticmethod
    def backward(ctx, grad):  # grad [m, B, C]
        x, W = ctx.saved_tensors
        # Under autocast the forward product ran in bf16 / fp16, and grad (and x, the output of
        # a layer before) come in that dtype; the backward products run in the parameters'
        # (autocast is off in backward), the gradient of x is cast back to x's by autograd.
        g = grad.transpose(1, 2).to(W.dtype)
        x = x.to(W.dtype)
        gx = _products(W, g).transpose(1, 2) if ctx.needs_input_grad[0] else None
        gW = _products(g, x).transpose(1, 2) if ctx.needs_input_grad[1] else None
        gb = g.sum(2) if ctx.needs_input_grad[2] else None
        return gx, gW, gb


def affine(x: torch.Tensor, W: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``x W + b`` for m models at once: ``x [m, B, F]``, ``W [m, F, C]``, ``b [m, C]`` ->
    ``[m, B, C]``. With fewer outputs than rows (C <= B) as :math:`(W^\top x^\top + b)^\top`:
    BLAS runs a product whose output rows are long faster (``[C, F] x [F, B]`` rather than
    ``[B, F] x [F, C]``, forward and backward; docs/benchmarks.md, design measurements), and the
    other way round when C > B."""
    if W.shape[2] <= x.shape[1]:
        return _TransposedAffine.apply(x, W, b)
    return torch.baddbmm(b.unsqueeze(1), x, W)
