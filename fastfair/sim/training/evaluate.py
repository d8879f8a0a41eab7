"""Evaluation of one or several global models on every client of a batch, in large batches."""

from __future__ import annotations

from typing import Iterator, Optional, Tuple

import numpy as np
import torch

from fastfair.sim.data.base import ClientBatch
from fastfair.sim.models.flat import FlatModel
from fastfair.sim.process import one_thread_each
from fastfair.sim.training.schedule import segment_ids


def evaluate_clients(model: FlatModel, params: torch.Tensor, batch: ClientBatch,
                     chunk: Optional[int] = None, accuracy: bool = True
                     ) -> Tuple[np.ndarray, Optional[np.ndarray]]:
    """Loss and accuracy of a model ``params [P]``, or of L models ``params [L, P]``, on each
    client's samples, ``chunk`` samples per forward pass (default ``model.eval_rows``).

    Returns ``(loss, accuracy)`` as float64 NumPy arrays, ``[m]`` for one model and ``[L, m]``
    for L: per-client means of the model's sample loss and accuracy (cross-entropy and
    ``argmax == y`` by default, averaged over positions for a label per position; NaN for a
    client with no samples; accuracy None when ``accuracy`` is False, for a round's losses).
    The L models read the same inputs in one forward pass per chunk, in inference mode; on the
    CPU the chunks run concurrently on the process's torch threads, one thread each
    (:func:`fastfair.sim.process.one_thread_each`), so the results do not depend on the thread
    count.
    Runs on the device of ``params`` and ``batch``; only the results travel to the host.
    """
    chunk = chunk or model.eval_rows
    counts = batch.counts
    m = len(counts)
    device = params.device
    p = params.reshape(-1, params.shape[-1])
    L = p.shape[0]
    seg = segment_ids(counts, device)
    loss_sum = torch.zeros(L, m, dtype=torch.float64, device=device)
    hit_sum = torch.zeros(L, m, dtype=torch.float64, device=device)

    def scored(start: int) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        with torch.inference_mode():
            xs, ys = batch.x[start:start + chunk], batch.y[start:start + chunk]
            n = xs.shape[0]
            # Whole multiples of 16 rows keep every model's block of outputs 64-byte aligned:
            # BLAS kernels round differently at other alignments, and a run's numbers must not
            # depend on how many models share the pass.
            pad = -n % 16
            if pad:
                xs = torch.cat([xs, xs[:1].expand(pad, *xs.shape[1:])])
                ys = torch.cat([ys, ys[:1].expand(pad, *ys.shape[1:])])
            logits = model.forward(p, xs.unsqueeze(0).expand(L, *xs.shape))
            ys = ys.unsqueeze(0).expand(L, *ys.shape)
            loss = model.sample_loss(logits, ys)[:, :n].double()
            return loss, model.sample_hits(logits, ys)[:, :n] if accuracy else None

    starts = list(range(0, batch.x.shape[0], chunk))
    # On the CPU the chunks run concurrently, one thread each: the same bits on any thread
    # count. Their sums are added in chunk order.
    parts = one_thread_each(scored, starts) if device.type == "cpu" else map(scored, starts)
    with torch.inference_mode():
        for start, (chunk_loss, chunk_hits) in zip(starts, parts):
            segs = seg[start:start + chunk_loss.shape[1]]
            loss_sum.index_add_(1, segs, chunk_loss)
            if chunk_hits is not None:
                hit_sum.index_add_(1, segs, chunk_hits)
    with np.errstate(invalid="ignore", divide="ignore"):
        sizes = counts.astype(np.float64)
        mean_loss = loss_sum.cpu().numpy() / sizes
        acc = hit_sum.cpu().numpy() / sizes if accuracy else None
    if params.dim() == 1:
        return mean_loss[0], None if acc is None else acc[0]
    return mean_loss, acc


def _chunk_logits(model: FlatModel, params: torch.Tensor, batch: ClientBatch,
                  chunk: Optional[int]) -> Iterator[Tuple[torch.Tensor, torch.Tensor]]:
    """``(logits [n, *label_shape, C], labels [n, *label_shape])`` of the one model
    ``params [P]`` on ``batch``, ``chunk`` samples per forward pass (default
    ``model.eval_rows``); the caller holds inference mode."""
    chunk = chunk or model.eval_rows
    p = params.reshape(1, -1)
    for start in range(0, batch.x.shape[0], chunk):
        xs = batch.x[start:start + chunk]
        yield model.forward(p, xs.unsqueeze(0))[0], batch.y[start:start + chunk]


def logit_margins(model: FlatModel, params: torch.Tensor, batch: ClientBatch,
                  chunk: Optional[int] = None) -> np.ndarray:
    r"""``[N]`` float64 score of each sample of ``batch`` for a binary task (two classes, one
    label per sample): the logit margin :math:`z_1 - z_0` of the model ``params [P]``, the
    log-odds of class 1 under the softmax, in inference mode, ``chunk`` samples per forward
    pass (default ``model.eval_rows``). Its ranking is what :func:`~fastfair.sim.reporting.
    metrics.auroc` scores."""
    parts = []
    with torch.inference_mode():
        for logits, _ in _chunk_logits(model, params, batch, chunk):
            parts.append((logits[:, 1] - logits[:, 0]).double().cpu())
    if not parts:
        return np.zeros(0)
    return torch.cat(parts).numpy()


def class_scores(model: FlatModel, params: torch.Tensor, batch: ClientBatch,
                 chunk: Optional[int] = None, k: int = 5
                 ) -> Tuple[Optional[np.ndarray], np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """What top-k accuracy, calibration and per-class accuracy are computed from, for the model
    ``params [P]`` on every sample of ``batch`` (a classification task), in inference mode,
    ``chunk`` samples per forward pass (default ``model.eval_rows``).

    Returns ``(topk [m], confidence [R], correct [R], labels [R], offsets [m + 1])``: each
    client's top-k accuracy (the share of its predictions whose label is among the k largest
    logits; None when the task has k classes or fewer), and for every prediction (a sample, or a
    position of a sample for a label per position: R = N or N T) the softmax probability of its
    top class, whether that class is the label, and the label; ``offsets`` delimit each
    client's predictions in them.
    """
    top_hits, confidence, correct, labels_seen = [], [], [], []
    with torch.inference_mode():
        for logits, ys in _chunk_logits(model, params, batch, chunk):
            logits = logits.reshape(-1, logits.shape[-1])
            target = ys.reshape(-1)
            probs = torch.softmax(logits.double(), dim=-1)
            top = probs.max(dim=-1)
            confidence.append(top.values.cpu())
            correct.append((top.indices == target).cpu())
            labels_seen.append(target.cpu())
            if logits.shape[-1] > k:
                top_hits.append((logits.topk(k, dim=-1).indices == target[:, None]).any(-1).cpu())
    per = max(1, int(np.prod(batch.y.shape[1:])))  # predictions per sample
    offsets = np.asarray(batch.offsets, dtype=np.int64) * per
    conf = torch.cat(confidence).numpy() if confidence else np.zeros(0)
    hit = torch.cat(correct).numpy().astype(np.float64) if correct else np.zeros(0)
    labels = torch.cat(labels_seen).numpy() if labels_seen else np.zeros(0, np.int64)
    if not top_hits:
        return None, conf, hit, labels, offsets
    sizes = np.diff(offsets)
    owner = np.repeat(np.arange(sizes.size), sizes)
    sums = np.bincount(owner, torch.cat(top_hits).numpy().astype(np.float64), sizes.size)
    with np.errstate(invalid="ignore", divide="ignore"):
        return sums / sizes, conf, hit, labels, offsets
