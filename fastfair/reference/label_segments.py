"""Reference per-segment affine labelling (NumPy): the bit-exact twin of
``csrc/include/fastfair/label_segments.h`` (each NumPy ufunc rounds once, as the kernels do with
contraction off)."""

from __future__ import annotations

from typing import Optional, Tuple

import numpy as np


def label_segments(x: np.ndarray, offsets: np.ndarray, W: np.ndarray, b: np.ndarray,
                   scale: Optional[np.ndarray] = None, shift: Optional[np.ndarray] = None
                   ) -> Tuple[np.ndarray, np.ndarray]:
    r"""``(x', y)``: the rows after :math:`x \odot \mathrm{scale} + \mathrm{shift}_i` (float32;
    ``x`` itself unchanged) and their labels :math:`\operatorname{argmax}_c b_{ic} +
    \sum_f x'_{rf} W_{ifc}`, the logits summed in float64 from :math:`b_{ic}` in the order
    f = 0 .. F-1 (``x [N, F]``, ``offsets [m + 1]``, ``W [m, F, C]``, ``b [m, C]``)."""
    x = np.array(x, dtype=np.float32, copy=True)
    y = np.empty(x.shape[0], dtype=np.int64)
    for i in range(len(offsets) - 1):
        rows = slice(int(offsets[i]), int(offsets[i + 1]))
        if scale is not None and shift is not None:
            x[rows] = (x[rows] * scale) + shift[i]
        acc = np.broadcast_to(b[i].astype(np.float64), (x[rows].shape[0], b.shape[1])).copy()
        for f in range(x.shape[1]):
            acc = acc + x[rows, f:f + 1].astype(np.float64) * W[i, f].astype(np.float64)
        y[rows] = np.argmax(acc, axis=1)
    return x, y
