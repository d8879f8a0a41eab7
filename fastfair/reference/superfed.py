"""Reference SuPerFed client gradients by autograd in float64 (the oracle of the fused passes).

The one reference that needs PyTorch (for autograd); torch is imported when it is called, so
``fastfair.reference`` imports with NumPy alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Tuple

import numpy as np

from fastfair._arrays import import_torch

if TYPE_CHECKING:
    import torch


def element_mask(offsets: np.ndarray, values: np.ndarray) -> torch.Tensor:
    """Per-segment values spread over the elements of each segment.

    Parameters
    ----------
    offsets
        ``[S + 1]`` segment boundaries; segment s covers elements ``offsets[s]:offsets[s+1]``.
    values
        ``[m, S]`` one value per client and segment.

    Returns
    -------
    torch.Tensor
        ``[m, P]`` float64, ``out[i, j] = values[i, s]`` for j in segment s
        (``P = offsets[-1] - offsets[0]``).
    """
    torch = import_torch("fastfair.reference.superfed.element_mask")
    sizes = torch.as_tensor(np.diff(offsets))
    return torch.repeat_interleave(torch.as_tensor(values, dtype=torch.float64), sizes, dim=1)


def superfed_gradients(f: torch.Tensor, l: torch.Tensor, g: torch.Tensor, lam: np.ndarray,
                       offsets: np.ndarray, twinned: np.ndarray,
                       loss: Callable[[torch.Tensor], torch.Tensor], *, mu: float, nu: float,
                       prox: str = "paper") -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    r"""Gradients of :math:`\ell(\theta(\lambda)) + R_{prox} + R_{orth}` with respect to ``f`` and
    ``l`` (``[m, P]`` each), and ``d loss / d mixed``, by autograd.

    :math:`\theta(\lambda) = (1 - \lambda) f + \lambda l` on twinned layers, ``f`` elsewhere;
    ``'paper'``: :math:`R_{prox} = \frac{\mu}{2}\|f - g\|^2`; ``'reference_code'``:
    :math:`\mu \sum_{s\ twinned} \|f_s - g_s\|`; :math:`R_{orth} = \nu \cos^2(f, l)` over the
    twinned layers. ``loss`` maps the mixed models ``[m, P]`` to one scalar (summed over
    clients). The gradient of ``l`` is zero on shared layers.

    Parameters
    ----------
    f, l
        ``[m, P]`` the clients' federated and local models (any float dtype; used in float64).
    g
        ``[P]`` the global model.
    lam
        ``[m, S]`` the mixing coefficients λ per client and segment.
    offsets
        ``[S + 1]`` segment boundaries of the flat parameter vector.
    twinned
        ``[S]`` bool, the segments that have a local twin.
    loss
        Maps the mixed models ``[m, P]`` to one scalar tensor.
    mu, nu
        Weights of the proximal and orthogonality terms.
    prox
        ``'paper'`` or ``'reference_code'`` (see above).

    Returns
    -------
    (grad_f, grad_l, grad_mixed)
        ``[m, P]`` float64 tensors each.

    Raises
    ------
    ModuleNotFoundError
        When PyTorch is not installed (this oracle needs autograd): names the extra to install.
    """
    torch = import_torch("fastfair.reference.superfed_gradients (autograd)")
    m = f.shape[0]
    tw_el = element_mask(offsets, np.repeat(twinned[None, :].astype(np.float64), m, 0))
    lam_el = element_mask(offsets, np.asarray(lam, dtype=np.float64)) * tw_el
    f = f.detach().double().requires_grad_(True)
    l = l.detach().double().requires_grad_(True)
    g = g.detach().double()
    mixed = (1 - lam_el) * f + lam_el * l
    data = loss(mixed)
    r_prox: Any  # a tensor, or the float 0.0 before any segment adds to it
    if prox == "paper":
        r_prox = 0.5 * mu * ((f - g) ** 2).sum()
    else:
        r_prox = 0.0
        for s in np.flatnonzero(twinned):
            a, b = int(offsets[s]), int(offsets[s + 1])
            r_prox = r_prox + mu * torch.linalg.vector_norm(f[:, a:b] - g[a:b], dim=1).sum()
    ft, lt = f * tw_el, l * tw_el
    cos = (ft * lt).sum(1) / (ft.norm(dim=1) * lt.norm(dim=1))
    total = data + r_prox + nu * (cos ** 2).sum()
    gf, gl = torch.autograd.grad(total, [f, l])
    mixed_leaf = mixed.detach().requires_grad_(True)
    (gmix,) = torch.autograd.grad(loss(mixed_leaf), [mixed_leaf])
    return gf, gl * tw_el, gmix
