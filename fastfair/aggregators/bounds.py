r"""An opt-in bound on what one client can do to a round: a server-side clip of each update's
norm and a cap on each client's reported sample count. One implementation, shared by the
simulator (:mod:`fastfair.sim.rounds.engine`) and the Flower strategy
(:class:`fastfair.integrations.flwr.FastFairStrategy`).

Fair rules give more weight to clients with a high loss, and a poisoning client has a high loss;
count-weighted rules give all the weight to a client that claims a huge sample count. The bound
limits both, before the rule sees the round:

.. math::
   \tau = \begin{cases} b & \text{``update_norm_reference="absolute"''} \\
          b \cdot \operatorname{median}_{j \in S} \lVert X_j \rVert
          & \text{``update_norm_reference="median"'' (default)} \end{cases}
   \qquad s_i = \min\Big(1, \frac{\tau}{\lVert X_i \rVert}\Big) \quad (s_i = 1 \text{ if }
   \lVert X_i \rVert = 0)

   X_i \leftarrow s_i X_i, \qquad n_i \leftarrow \min(n_i, N)

with :math:`b` = ``max_update_norm``, :math:`X_i = w - w_i` client i's update (pseudo-gradient;
its norm over all parameter arrays), :math:`n_i` its sample count and :math:`N` =
``max_samples_per_client``. The rule then sees the clipped updates (q-FedAvg's squared norms
:math:`s_i^2 \lVert X_i\rVert^2`, FedMGDA's updates :math:`s_i X_i`) and the capped counts, and
the round's combined pseudo-gradient is :math:`\sum_i c_i s_i X_i`, so that no update moves the
global model by more than :math:`\lvert c_i \rvert \tau` (with lr = 1).

The median reference scales with the round (no unit to choose; a poisoned minority cannot move
it, but a majority of poisoned replies can); the absolute one is in the units of the parameters
and holds whatever the cohort does. ``None`` turns either part off; the default bound does
nothing.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional

import numpy as np

from fastfair._arrays import dtype_name, from_host
from fastfair.aggregators._checks import check_choice, check_scalar, host_array
from fastfair.aggregators.names import NORM_REFERENCES as NORM_REFERENCES  # re-exported


def _optional_positive(value: Any, name: str) -> Optional[float]:
    if value is None:
        return None
    return check_scalar(value, name, lo=0.0, lo_open=True)


def check_bound(max_update_norm: Any = None, update_norm_reference: str = "median",
                max_samples_per_client: Any = None, *,
                names: Optional[Mapping[str, str]] = None) -> None:
    """Raises ``TypeError``/``ValueError`` naming the argument unless the bound's options are
    valid: ``max_update_norm`` and ``max_samples_per_client`` None or a finite number > 0,
    ``update_norm_reference`` one of :data:`NORM_REFERENCES`. ``names``: how the errors name
    each argument (e.g. ``{"max_update_norm": "max_update_norm (--max-update-norm)"}``);
    default the argument's own name."""
    label = dict(names or {})
    _optional_positive(max_update_norm, label.get("max_update_norm", "max_update_norm"))
    check_choice(update_norm_reference,
                 label.get("update_norm_reference", "update_norm_reference"), NORM_REFERENCES)
    _optional_positive(max_samples_per_client,
                       label.get("max_samples_per_client", "max_samples_per_client"))


def _nonnegative(values: Any, name: str, hint: str = "") -> np.ndarray:
    """``values`` as a new ``[m]`` float64 array, refused (naming ``name``) unless 1-D real,
    finite and non-negative."""
    v = host_array(values, name)
    if v.ndim != 1:
        raise ValueError(f"{name} must be 1-D [m], one entry per client; got shape {v.shape}")
    if v.dtype.kind not in "biuf":
        raise TypeError(f"{name} must be real numbers; got dtype {v.dtype}")
    v = np.array(v, dtype=np.float64)
    bad = ~np.isfinite(v) | (v < 0)
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{name} must be finite and non-negative; got {v[k]} at position "
                         f"{k}{hint}")
    return v


def _norms(norms: Any) -> np.ndarray:
    v = _nonnegative(norms, "norms", " (drop the client whose update is not finite before "
                                      "bounding)")
    if v.shape[0] == 0:
        raise ValueError("norms must be 1-D with one entry per client (m >= 1); got shape (0,)")
    return v


def clip_threshold(norms: Any, max_update_norm: float,
                   update_norm_reference: str = "median") -> float:
    r"""The round's clipping threshold :math:`\tau`.

    .. math:: \tau = b \ \text{(absolute)} \quad\text{or}\quad
              \tau = b \cdot \operatorname{median}_j \lVert X_j \rVert \ \text{(median)}

    Parameters
    ----------
    norms
        ``[m]`` the round's update norms :math:`\lVert X_j \rVert` (finite, >= 0).
    max_update_norm
        :math:`b` > 0.
    update_norm_reference
        ``"median"`` (b is a multiple of the round's median norm) or ``"absolute"`` (b is the
        norm itself).

    Returns
    -------
    float
        :math:`\tau` >= 0.
    """
    b = check_scalar(max_update_norm, "max_update_norm", lo=0.0, lo_open=True)
    check_choice(update_norm_reference, "update_norm_reference", NORM_REFERENCES)
    v = _norms(norms)
    if update_norm_reference == "absolute":
        return b
    return float(b * np.median(v))


def clip_scales(norms: Any, max_update_norm: Optional[float],
                update_norm_reference: str = "median") -> np.ndarray:
    r"""Per-client scale factors of the update-norm clip.

    .. math:: s_i = \min\Big(1, \frac{\tau}{\lVert X_i \rVert}\Big)
              \ (s_i = 1 \text{ where } \lVert X_i \rVert = 0), \qquad
              \lVert s_i X_i \rVert = \min(\lVert X_i \rVert, \tau)

    with :math:`\tau` from :func:`clip_threshold`. Multiplying client i's coefficient by
    :math:`s_i` aggregates the clipped update without forming it:
    :math:`\sum_i c_i (s_i X_i) = \sum_i (c_i s_i) X_i`.

    Parameters
    ----------
    norms
        ``[m]`` update norms (finite, >= 0), all clients of the round (the median is over all).
    max_update_norm
        :math:`b` > 0, or None: no clip (all scales 1).
    update_norm_reference
        As :func:`clip_threshold`.

    Returns
    -------
    ``[m]`` float64 scales in ``[0, 1]``.
    """
    v = _norms(norms)
    check_choice(update_norm_reference, "update_norm_reference", NORM_REFERENCES)
    if max_update_norm is None:
        return np.ones_like(v)
    tau = clip_threshold(v, max_update_norm, update_norm_reference)
    scales = np.ones_like(v)
    over = v > tau
    scales[over] = tau / v[over]
    return scales


def cap_counts(num_samples: Any, max_samples_per_client: Optional[float]) -> np.ndarray:
    r"""Reported sample counts capped per client: :math:`n_i \leftarrow \min(n_i, N)`.

    Parameters
    ----------
    num_samples
        ``[m]`` finite, non-negative counts.
    max_samples_per_client
        :math:`N` > 0, or None: counts unchanged.

    Returns
    -------
    ``[m]`` float64 counts (a new array).
    """
    n = _nonnegative(num_samples, "num_samples")
    if max_samples_per_client is None:
        return n
    cap = check_scalar(max_samples_per_client, "max_samples_per_client", lo=0.0, lo_open=True)
    return np.minimum(n, cap)


class UpdateBound:
    r"""The bound's options, checked once; the methods apply them (see the module formulas).

    Parameters
    ----------
    max_update_norm
        :math:`b` > 0, or None (default): no update-norm clip.
    update_norm_reference
        ``"median"`` (default): :math:`\tau = b \cdot` the median update norm of the round
        (e.g. ``b = 3``: no update longer than three times the typical one); ``"absolute"``:
        :math:`\tau = b`, in the units of the parameters.
    max_samples_per_client
        :math:`N` > 0, or None (default): no cap on the reported sample counts.
    """

    __slots__ = ("max_update_norm", "update_norm_reference", "max_samples_per_client")

    def __init__(self, max_update_norm: Optional[float] = None,
                 update_norm_reference: str = "median",
                 max_samples_per_client: Optional[float] = None) -> None:
        check_bound(max_update_norm, update_norm_reference, max_samples_per_client)
        self.max_update_norm = _optional_positive(max_update_norm, "max_update_norm")
        self.update_norm_reference = str(update_norm_reference)
        self.max_samples_per_client = _optional_positive(max_samples_per_client,
                                                         "max_samples_per_client")

    @property
    def clips(self) -> bool:
        """Whether updates are clipped (``max_update_norm`` is set)."""
        return self.max_update_norm is not None

    @property
    def active(self) -> bool:
        """Whether the bound changes anything at all."""
        return self.clips or self.max_samples_per_client is not None

    def scales(self, norms: Any) -> np.ndarray:
        """:func:`clip_scales` with these options: ``[m]`` factors in ``[0, 1]``."""
        return clip_scales(norms, self.max_update_norm, self.update_norm_reference)

    def counts(self, num_samples: Any) -> np.ndarray:
        """:func:`cap_counts` with these options: ``[m]`` capped counts."""
        return cap_counts(num_samples, self.max_samples_per_client)

    @staticmethod
    def clipped_inputs(inputs: Dict[str, Any], scales: np.ndarray) -> Dict[str, Any]:
        r"""A rule's round inputs of the clipped updates :math:`s_i X_i` from those of the
        updates :math:`X_i`: ``sq_norms [m]`` times :math:`s_i^2`, ``updates`` times
        :math:`s_i` (rows ``[m, P]`` of any framework, scaled in their dtype, or per client a
        list of arrays, as the Flower strategy holds them); other inputs unchanged. The
        simulator and the Flower strategy both clip through this.

        Parameters
        ----------
        inputs
            Round input name -> value.
        scales
            ``[m]`` float64 factors (:meth:`scales`).

        Returns
        -------
        dict
            A new dict; ``inputs`` is left as it was.
        """
        s = np.asarray(scales, dtype=np.float64)
        out = dict(inputs)
        if "sq_norms" in out:
            out["sq_norms"] = np.asarray(out["sq_norms"], dtype=np.float64) * s ** 2
        if "updates" in out:
            u = out["updates"]
            if isinstance(u, (list, tuple)):
                out["updates"] = [[a * np.asarray(k, dtype=a.dtype) if a.dtype.kind == "f"
                                   else a * k for a in arrays] for arrays, k in zip(u, s)]
            else:
                column = from_host(s.astype(np.dtype(dtype_name(u))), u)
                out["updates"] = u * column[:, None]
        return out

    def __repr__(self) -> str:
        return (f"UpdateBound(max_update_norm={self.max_update_norm!r}, "
                f"update_norm_reference={self.update_norm_reference!r}, "
                f"max_samples_per_client={self.max_samples_per_client!r})")
