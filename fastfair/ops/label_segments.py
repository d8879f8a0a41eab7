"""Labels of a cohort's ragged feature rows, each client's rows through its own affine model."""

from __future__ import annotations

from typing import Any, Optional

from fastfair import _C
from fastfair._arrays import current_stream, detach, empty

Array = Any


def label_segments(x: Array, offsets: Array, W: Array, b: Array, *, scale: Optional[Array] = None,
                   shift: Optional[Array] = None, out: Optional[Array] = None,
                   stream: Optional[int] = None) -> Array:
    r"""The argmax labels of ragged segments of rows, segment i through its own model
    :math:`(W_i, b_i)`, after an optional in-place feature transform.

    .. math::
       x_{r} \leftarrow x_{r} \odot \mathrm{scale} + \mathrm{shift}_i, \qquad
       y_r = \operatorname*{argmax}_c\; b_{ic} + \sum_f x_{rf} W_{ifc}
       \qquad (\mathrm{offsets}_i \le r < \mathrm{offsets}_{i+1})

    The transform is float32 (the product, then the sum, each rounded, as ``x.mul_(scale)
    .add_(shift)``). The logits are float64: :math:`a_c = b_{ic}`, then for f = 0 .. F-1
    :math:`a_c \leftarrow a_c + x_{rf} W_{ifc}`, product and sum each rounded (no fused
    multiply-add); the first of equal maxima wins. The labels are therefore the same bits on the
    CPU (any ISA, any thread count), on CUDA and in the NumPy reference
    (:func:`fastfair.reference.label_segments`), and a row's label depends on its own row and its
    segment's model alone. One pass over the rows, no gathers: the synthetic data sets label a
    whole cohort with it (:class:`fastfair.sim.data.synthetic.SyntheticDataset`).

    Parameters
    ----------
    x
        ``[N, F]`` float32, C-contiguous (written in place when ``scale`` is given); finite.
    offsets
        ``[m + 1]`` int64 row offsets: ``0 = offsets[0] <= ... <= offsets[m] = N`` (checked for
        CPU arrays).
    W, b
        ``[m, F, C]`` and ``[m, C]`` float32, C-contiguous: segment i's model.
    scale, shift
        ``[F]`` and ``[m, F]`` float32, both or neither: the transform.
    out
        ``[N]`` int64 for the labels; default a new array.
    stream
        CUDA stream handle for CUDA arrays; default the current stream of their framework.

    Returns
    -------
    ``out``: ``[N]`` int64 labels in ``[0, C)``, in the framework and on the device of ``x``.
    """
    x, offsets, W, b = detach(x), detach(offsets), detach(W), detach(b)
    scale = None if scale is None else detach(scale)
    shift = None if shift is None else detach(shift)
    if (scale is None) != (shift is None):
        raise ValueError("scale and shift go together: pass both (x * scale + shift) or "
                         "neither")
    if out is None:
        if len(x.shape) != 2:
            raise ValueError(f"x must have shape [N, F]; got {tuple(x.shape)}")
        out = empty(x, [int(x.shape[0])], "int64")
    _C.label_segments(x, offsets, W, b, scale, shift, out, current_stream(x, stream))
    return out
