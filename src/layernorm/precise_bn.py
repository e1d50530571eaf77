"""Population statistics for batch norm from one pass over (a sample of) the training set.

Batch norm is evaluated with running averages of its batch statistics. The usual exponential
moving average (momentum 0.1) mostly remembers the last few batches, computed with weights that
have changed since; when the per-batch statistics move during training (or are noisy, as at small
batch sizes, or per time step in a BN-LSTM) the evaluation statistics do not match what the
network was trained with. The fix used by batch norm's own paper (Ioffe & Szegedy 2015, "the
population statistics"), and known as "precise BN": freeze the weights, run the training data
through the network once with batch statistics, and give every batch equal weight.

    import layernorm
    layernorm.recompute_batch_stats(model, train_loader)              # DataLoader of (x, y)
    layernorm.recompute_batch_stats(model, [x[i:i + 64] for i in ...]) # or plain batches
    model.eval(); evaluate(model)

``estimator="batch_mean"`` gives instead the average over the batches of each batch's mean and
unbiased variance: what the running averages tend to when the weights stop changing (torch's
``momentum=None``, a cumulative average), with neither their lag behind the weights nor their
noise. Scoring a model both ways separates what the running averages lose to their lag from what
the per-batch variance estimate itself costs (docs/report.md, "Scoring a run").

Covers ``layernorm.BatchNorm``, torch's ``BatchNorm1d/2d/3d`` (statistics per channel over the
batch and any spatial dims) and the BN-LSTM / BN-GRU / BN-RNN of ``layernorm.rnn``
(``norm="batch"``: statistics per time step, over the examples active at that step).
"""
from __future__ import annotations

from typing import Any, Callable, Iterable

import torch
from torch import nn

from .norms import BatchNorm

__all__ = ["recompute_batch_stats"]

ESTIMATORS = ("pooled", "batch_mean")


class _Moments:
    """Exact pooled mean and sum of squared deviations (Chan et al.'s parallel update), float64,
    and the sums of the batches' own means and unbiased variances (``batch_mean``). Rows are
    independent slots (time steps of a BN-LSTM; one row for a feed-forward layer)."""

    def __init__(self, slots: int, width: int) -> None:
        self.count = torch.zeros(slots, dtype=torch.float64)
        self.mean = torch.zeros(slots, width, dtype=torch.float64)
        self.m2 = torch.zeros(slots, width, dtype=torch.float64)
        self.batches = torch.zeros(slots, dtype=torch.float64)     # batches of >= 2 values
        self.sum_mean = torch.zeros(slots, width, dtype=torch.float64)
        self.sum_var = torch.zeros(slots, width, dtype=torch.float64)

    def add(self, t0: int, mean: torch.Tensor, m2: torch.Tensor, n: int) -> None:
        """Merge batch moments of slots t0, t0 + 1, ... (rows of mean / m2) over n values each."""
        k = min(mean.shape[0], self.count.shape[0] - t0)
        if k <= 0 or n <= 0:
            return
        sl = slice(t0, t0 + k)
        mean, m2 = mean[:k].detach().double().cpu(), m2[:k].detach().double().cpu()
        na, total = self.count[sl, None], self.count[sl, None] + n
        delta = mean - self.mean[sl]
        self.mean[sl] += delta * (n / total)
        self.m2[sl] += m2 + delta ** 2 * (na * n / total)
        self.count[sl] += n
        if n >= 2:      # a batch of one value has no variance (batch norm raises in training)
            self.batches[sl] += 1
            self.sum_mean[sl] += mean
            self.sum_var[sl] += m2 / (n - 1)

    def write(self, mean_buf: torch.Tensor, var_buf: torch.Tensor,
              estimator: str = "pooled") -> torch.Tensor:
        """Copy the statistics of every slot that saw >= 2 values into the buffers (the variance
        unbiased, as torch's running_var): pooled over every value, or (``batch_mean``) the
        average of the batches' own statistics; returns the mask of slots written."""
        pooled = estimator == "pooled"
        seen = self.count >= 2 if pooled else self.batches >= 1
        rows = seen.nonzero().flatten()
        if len(rows):
            if pooled:
                mean, var = self.mean[rows], self.m2[rows] / (self.count[rows, None] - 1)
            else:
                nb = self.batches[rows, None]
                mean, var = self.sum_mean[rows] / nb, self.sum_var[rows] / nb
            view = mean_buf.view(-1, mean_buf.shape[-1])
            vview = var_buf.view(-1, var_buf.shape[-1])
            view[rows.to(view.device)] = mean.to(view)
            vview[rows.to(vview.device)] = var.clamp_min(0).to(vview)
        return seen


def _feedforward_bn(module: nn.Module) -> bool:
    if isinstance(module, BatchNorm):
        return module.track_running_stats
    return isinstance(module, nn.modules.batchnorm._BatchNorm) and \
        module.running_mean is not None


def _recurrent_bn(module: nn.Module) -> bool:
    from .rnn.cells import RecurrentBase
    return isinstance(module, RecurrentBase) and module.norm == "batch"


def _default_forward(model: nn.Module, batch: Any) -> Any:
    if isinstance(batch, (torch.Tensor, nn.utils.rnn.PackedSequence)):
        return model(batch)
    if isinstance(batch, dict):
        return model(**batch)
    if isinstance(batch, (tuple, list)) and batch and isinstance(batch[0], torch.Tensor):
        return model(batch[0])      # (x, y, ...) as a DataLoader yields it: the inputs only
    raise TypeError(f"recompute_batch_stats expected each batch to be a tensor, a (x, y, ...) "
                    f"tuple or a dict of keyword arguments, received {type(batch).__name__}. "
                    f"Pass forward=lambda model, batch: model(...) to say how to call the model.")


@torch.no_grad()
def recompute_batch_stats(model: nn.Module, batches: Iterable, *, num_batches: int | None = None,
                          forward: Callable[[nn.Module, Any], Any] | None = None,
                          estimator: str = "pooled") -> int:
    """Replace the running statistics of every batch-norm layer in ``model`` by population
    statistics: the exact mean and (unbiased) variance over every value the layer normalizes in
    one pass over ``batches``, each value weighted equally (a cumulative average, not an
    exponential one). Returns the number of batch-norm layers updated (0: the model has none).

    batches: an iterable of batches (a DataLoader, a list of tensors...), each a tensor or a
        PackedSequence, a ``(x, y, ...)`` tuple (the model gets ``x``) or a dict of keyword
        arguments; or anything, with ``forward``. One pass; ``num_batches`` stops after that many.
    forward: ``forward(model, batch)`` calls the model on one batch (e.g. with lengths).
    estimator: "pooled" (the default: every value weighted equally, as above) or "batch_mean":
        every batch weighted equally, the average of each batch's mean and unbiased variance
        (per step, over the batches with >= 2 examples active there) -- the limit of the running
        averages at fixed weights (torch's ``momentum=None``).

    During the pass the batch-norm layers normalize with batch statistics (train mode), as in
    training, and every other module is in eval mode (no dropout); each layer's statistics are
    those of its inputs as the network computes them with the layers below it in that state. The
    weights are not changed, no gradients are computed, and every module's train/eval mode and
    ``num_batches_tracked`` are restored afterwards. BN-LSTM (``layernorm.LSTM(norm="batch")``):
    statistics per time step, over the examples active at that step; steps the pass never reaches
    keep their previous statistics, steps it reaches are marked as trained (so evaluation uses
    them). A batch with a single example raises the layer's own error, as in training.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"recompute_batch_stats expected a torch.nn.Module, received "
                        f"{type(model).__name__}.")
    if estimator not in ESTIMATORS:
        raise ValueError(f"recompute_batch_stats expected estimator in {ESTIMATORS}, received "
                         f"{estimator!r}. Pass 'pooled' (population statistics) or "
                         f"'batch_mean' (the average of the batches' statistics).")
    if num_batches is not None and (not isinstance(num_batches, int) or num_batches < 1):
        raise ValueError(f"num_batches must be None or an integer >= 1, received "
                         f"{num_batches!r}.")
    ff = [m for m in model.modules() if _feedforward_bn(m)]
    rec = [m for m in model.modules() if _recurrent_bn(m)]
    if not ff and not rec:
        return 0
    forward = forward or _default_forward
    modes = {m: m.training for m in model.modules()}
    saved = {m: {k: b.clone() for k, b in m.named_buffers(recurse=False) if b is not None}
             for m in ff + rec}

    # feed-forward layers: the moments of each layer's input, per channel (dim 1)
    ff_moments = {m: _Moments(1, m.num_features) for m in ff}

    def hook(module, inputs):
        x = inputs[0].detach().double()
        dims = [d for d in range(x.dim()) if d != 1]
        n = x.numel() // x.shape[1] if x.dim() > 1 else x.numel()
        mean = x.mean(dims)
        m2 = ((x - mean.view((1, -1) + (1,) * (x.dim() - 2))) ** 2).sum(dims)
        ff_moments[module].add(0, mean[None], m2[None], n)

    # recurrent layers: every batch-norm Term reports (running buffers, t0, mean, var, n)
    owners: dict[int, tuple[nn.Module, str, str, _Moments]] = {}
    for m in rec:
        buffers = dict(m.named_buffers(recurse=False))
        for name, buf in buffers.items():
            if name.startswith("running_mean"):
                var_name = "running_var" + name[len("running_mean"):]
                owners[id(buf)] = (m, name, var_name, _Moments(buf.shape[0], buf.shape[1]))

    def observe(running, t0, mean, var, n):
        entry = owners.get(id(running[0]))
        if entry is not None:
            entry[3].add(t0, mean, var * n, n)

    from .rnn.cells import observe_batch_stats
    handles = [m.register_forward_pre_hook(hook) for m in ff]
    seen_any = False
    try:
        model.eval()
        for m in ff + rec:
            m.train()
        with observe_batch_stats(observe):
            for i, batch in enumerate(batches):
                if num_batches is not None and i >= num_batches:
                    break
                forward(model, batch)
                seen_any = True
    finally:
        for h in handles:
            h.remove()
        for m, training in modes.items():
            m.training = training
        for m, bufs in saved.items():          # undo the pass's EMA updates and counters
            for k, b in bufs.items():
                getattr(m, k).copy_(b)
    if not seen_any:
        raise ValueError("recompute_batch_stats received no batches: pass an iterable with at "
                         "least one batch of training inputs (e.g. the training DataLoader).")
    for m, mom in ff_moments.items():
        mom.write(m.running_mean[None], m.running_var[None], estimator)
    for m, name, var_name, mom in owners.values():
        seen = mom.write(getattr(m, name), getattr(m, var_name), estimator)
        tracked = m.num_batches_tracked
        reached = seen[:tracked.shape[0]].to(tracked.device)
        tracked[reached] = tracked[reached].clamp_min(1)
    return len(ff) + len(rec)
