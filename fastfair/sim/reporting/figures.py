"""Figures drawn without pyplot: a run's plots leave pyplot's backend and its list of open
figures alone, so a notebook's own plots still show after a run, and no figure is left open."""

from __future__ import annotations

import base64
import io
from typing import Any, Optional, Tuple


def subplots(nrows: int = 1, ncols: int = 1, figsize: Optional[Tuple[float, float]] = None,
             **kwargs: Any) -> Tuple[Any, Any]:
    """``(figure, axes)`` as ``matplotlib.pyplot.subplots`` returns them, on a
    ``matplotlib.figure.Figure`` of its own that pyplot does not know (``savefig`` draws it
    with Agg); ``kwargs`` go to ``Figure.subplots`` (``sharex``, ...)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize)
    return fig, fig.subplots(nrows, ncols, **kwargs)


def png_base64(fig: Any, dpi: int = 100) -> str:
    """``fig`` as a PNG, base64-encoded (ASCII), for a ``data:image/png;base64,`` URI."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight")
    return base64.b64encode(buffer.getvalue()).decode("ascii")
