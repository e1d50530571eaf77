"""The normalized terms of the recurrent layers (paper, section 3.1): a term computes
``N(a) * gain + bias`` for one summed-input term ``a``, with N layer norm (``LayerTerm``:
statistics of each example over the units), batch norm (``BatchTerm``: statistics over the
examples active at step t, running statistics per time step: Cooijmans et al.'s BN-LSTM
baseline) or the identity (``BiasTerm``). Which one a module builds is its norm kind's
(``_norm_kinds``), decided when the module is built."""
from __future__ import annotations

import contextlib
from typing import Callable, Sequence

import torch
import torch.nn.functional as F

from .. import functional as LF


def gate_groups(mode: str, hidden_size: int) -> tuple[int, ...]:
    """Sizes of the groups of units normalized jointly in one term (W_x x or W_h h)."""
    H = hidden_size
    return {"LSTM": (4 * H,), "GRU": (2 * H, H), "RNN": (H,)}[mode]


# Observers of batch-norm statistics: while ``observe_batch_stats(fn)`` is active, every update of
# a Term's running statistics also calls ``fn(running, t0, mean, var, n)`` with the batch statistics
# it used (``layernorm.recompute_batch_stats`` accumulates population statistics this way).
_BATCH_STAT_OBSERVERS: list[Callable] = []


@contextlib.contextmanager
def observe_batch_stats(fn: Callable):
    """Within the block, ``fn(running, t0, mean, var, n)`` sees every batch-norm Term's statistics:
    ``running`` = its (mean, var) buffers (max_length, G), ``mean``/``var`` (k, G) the batch mean
    and biased variance of steps t0 .. t0 + k - 1 over ``n`` examples."""
    _BATCH_STAT_OBSERVERS.append(fn)
    try:
        yield
    finally:
        _BATCH_STAT_OBSERVERS.remove(fn)


def last_trained_slot(num_batches_tracked: torch.Tensor) -> int | torch.Tensor:
    """The last step whose running statistics were trained (0 if none). An int read from the
    buffer; where its values cannot be read (a ``meta`` tensor, the fake tensors of
    torch.export / torch.onnx.export) the same index as a 0-d tensor computed from it, so the
    graph stays right for any trained length."""
    nbt = num_batches_tracked
    if nbt.device.type == "meta" or torch.compiler.is_exporting():
        steps = torch.arange(nbt.shape[0], device=nbt.device)
        return torch.where(nbt > 0, steps, 0).max()
    trained = nbt.nonzero()
    return int(trained.max()) if len(trained) else 0


def _slot(t: int, last_slot: int | torch.Tensor) -> int | torch.Tensor:
    """min(t, last_slot) for an int ``last_slot``; for a 0-d tensor one (``last_trained_slot``),
    the same as a 1-element index (a row of the buffers is then (1, G), which broadcasts)."""
    return min(t, last_slot) if isinstance(last_slot, int) else last_slot.clamp(max=t).view(1)


class Term:
    """``N(a) * gain + bias`` for one summed-input term ``a`` (..., G), built for one forward call;
    ``term(a, t)`` for step t's (B, G), ``term.all_steps(a)`` for a (T, B, G) sequence. The
    subclasses are the normalizations N.

    groups: sizes of the unit groups normalized jointly (LN); gain: (G,) or None; bias: (G,) or
    None. For batch norm: ``running`` = (mean, var) buffers of shape (max_length, G),
    ``batch_sizes`` = examples active at each step (sorted by decreasing length, so the active
    ones are a prefix) or None when all are, ``last_slot`` = the last step whose running
    statistics were trained (step t in eval uses slot min(t, last_slot)).
    """

    def __init__(self, groups: Sequence[int], gain: torch.Tensor | None,
                 bias: torch.Tensor | None, *, eps: float = 1e-5, training: bool = False,
                 running: tuple[torch.Tensor, torch.Tensor] | None = None,
                 momentum: float = 0.1, batch_sizes: Sequence[int] | None = None,
                 last_slot: int | torch.Tensor = 0, who: str = "", fused: bool = True) -> None:
        self.groups, self.eps = tuple(groups), eps
        self.gain, self.bias = gain, bias
        self.training, self.running, self.momentum = training, running, momentum
        self.batch_sizes, self.last_slot, self.who = batch_sizes, last_slot, who
        self.fused = fused

    def __call__(self, a: torch.Tensor, t: int | None = None) -> torch.Tensor:
        raise NotImplementedError

    def all_steps(self, a: torch.Tensor) -> torch.Tensor:
        """The term for every step of a (T, B, G) sequence at once."""
        return self(a)


class BiasTerm(Term):
    """norm="none": the identity, then the bias (torch's own terms)."""

    def __call__(self, a: torch.Tensor, t: int | None = None) -> torch.Tensor:
        return a if self.bias is None else a + self.bias


class LayerTerm(Term):
    """norm="layer": layer norm of each group of units with its gain and bias."""

    def __call__(self, a: torch.Tensor, t: int | None = None) -> torch.Tensor:
        if len(self.groups) == 1:
            return LF.layer_norm(a, self.groups[0], self.gain, self.bias, self.eps)
        k = len(self.groups)
        biases = self.bias.split(self.groups) if self.bias is not None else (None,) * k
        return torch.cat([LF.layer_norm(part, n, g, b, self.eps) for part, g, b, n in
                          zip(a.split(self.groups, -1), self.gain.split(self.groups), biases,
                              self.groups)], -1)


class BatchTerm(Term):
    """norm="batch": batch norm over the examples active at step t with the gain and bias,
    running statistics per time step."""

    def _fused_bn(self, a: torch.Tensor) -> bool:
        """Whether torch's batch-norm kernel (``F.batch_norm``: one pass forward and backward)
        computes this batch-norm term: its math is ours (the output normalized with the biased
        batch variance, the running variance lerped toward the unbiased one), so it applies
        unless ``fused`` is off (the readable ``moments`` / ``apply_moments`` path), the dtypes
        are ones the kernel does not take, or an observer is waiting for the batch statistics
        (``observe_batch_stats``), which the kernel does not return."""
        return (self.fused and not _BATCH_STAT_OBSERVERS
                and LF.fused_batch_norm_ok(a, self.gain, self.bias, *self.running))

    def all_steps(self, a: torch.Tensor) -> torch.Tensor:
        """The term for every step of a (T, B, G) sequence at once, with separate statistics per
        step: one reduction over the batch dim when every example is active, step by step
        otherwise."""
        if self.batch_sizes is not None:
            return torch.stack([self(a[t], t) for t in range(a.shape[0])])
        T, B, G = a.shape
        if self._fused_bn(a) and (T <= self.running[0].shape[0] or not self.training):
            return self._all_steps_fused(a)
        if self.training:
            LF.check_batch_size(a[0], self.who)
            mean, var = LF.moments(a, (1,))                          # (T, 1, G)
            self._update(0, mean[:, 0], var[:, 0], a.shape[1])
        else:
            slots = torch.arange(a.shape[0], device=a.device).clamp(max=self.last_slot)
            mean, var = self.running[0][slots].unsqueeze(1), self.running[1][slots].unsqueeze(1)
        return LF.apply_moments(a, mean, var, weight=self.gain, bias=self.bias, eps=self.eps)

    def _all_steps_fused(self, a: torch.Tensor) -> torch.Tensor:
        """``all_steps`` through one ``F.batch_norm`` call: the (T, B, G) term as a batch of B
        examples with T * G channels (step t, unit g), so each step keeps its own statistics and
        rows t of the running buffers are channels t * G ... (t + 1) * G - 1."""
        T, B, G = a.shape
        if self.training:
            LF.check_batch_size(a[0], self.who)
            rows = slice(0, T)
        else:
            rows = torch.arange(T, device=a.device).clamp(max=self.last_slot)
        gain = None if self.gain is None else self.gain.repeat(T)
        bias = None if self.bias is None else self.bias.repeat(T)
        y = self._kernel(a.transpose(0, 1).reshape(B, T * G), rows, gain, bias, self.training)
        return y.view(B, T, G).transpose(0, 1)                     # (T, B, G)

    def _kernel(self, x: torch.Tensor, rows, gain, bias, train: bool) -> torch.Tensor:
        """``F.batch_norm`` of x (N, C) with the running statistics of ``rows`` of the buffers
        (an int, slice or index; flattened to C values; None: none kept). The kernel gets copies
        of the rows, which in training it updates and the buffers then take: its autograd node
        keeps the statistics it was given (in eval, or at a training step with one active
        example, it saves them for the backward), and later steps and calls change the buffers
        in place, which must not invalidate a graph still alive."""
        running = (None, None) if rows is None else tuple(buf[rows].reshape(-1)
                                                          for buf in self.running)
        if rows is not None:          # (with or without autograd: one graph for a trace)
            running = tuple(r.clone() for r in running)
        y = F.batch_norm(x, *running, gain, bias, train, self.momentum, self.eps)
        if train and rows is not None:
            with torch.no_grad(), self._writing():
                for buf, r in zip(self.running, running):
                    buf[rows] = r.view_as(buf[rows])
        return y

    @contextlib.contextmanager
    def _writing(self):
        """The in-place update of the running statistics, with a clear error where a torch.func
        transform refuses it (the buffers are captured by the transformed function, as
        torch.nn.BatchNorm's are)."""
        try:
            yield
        except RuntimeError as e:
            if not (torch._C._are_functorch_transforms_active() and "captured" in str(e)):
                raise
            raise RuntimeError(
                f"{self.who} in training updates its running statistics (buffers) in place, "
                f"which a torch.func transform (grad, vjp, jacrev, ...) refuses for buffers the "
                f"transformed function captures from the module (torch.nn.BatchNorm raises the "
                f"same). Either call module.eval() first (the running statistics are then read, "
                f"not written), or pass the buffers as an argument of the transformed function: "
                f"torch.func.grad(lambda params, buffers: loss(torch.func.functional_call("
                f"module, (params, buffers), args)))(params, dict(module.named_buffers())), or "
                f"use norm='layer', which keeps no running statistics.") from e

    @torch.no_grad()
    def _update(self, t0: int, mean: torch.Tensor, var: torch.Tensor, n: int) -> None:
        """Running statistics of steps t0, t0 + 1, ... (rows of mean, var: (k, G)) from batch
        statistics over n examples; steps past max_length keep none. The running variance is the
        unbiased estimate, as in torch's BatchNorm."""
        mean_buf, var_buf = self.running
        for observe in _BATCH_STAT_OBSERVERS:
            observe(self.running, t0, mean, var, n)
        k = min(mean.shape[0], mean_buf.shape[0] - t0)
        if k > 0:
            with self._writing():
                mean_buf[t0:t0 + k].lerp_(mean[:k].to(mean_buf.dtype), self.momentum)
                var_buf[t0:t0 + k].lerp_((var[:k] * (n / (n - 1))).to(var_buf.dtype),
                                         self.momentum)

    def __call__(self, a: torch.Tensor, t: int | None = None) -> torch.Tensor:
        """Batch norm of a (B, G) term at step t over the examples active at t (a prefix)."""
        t = 0 if t is None else t
        mean_buf, var_buf = self.running
        n = a.shape[0] if self.batch_sizes is None else int(self.batch_sizes[t])
        if self.training and (t == 0 or self.batch_sizes is None):
            LF.check_batch_size(a[:n], self.who)
        if n == a.shape[0] and self._fused_bn(a):          # every example active: one kernel
            # a bool, also under torch.jit.trace, whose sizes are tensors (the trace is made
            # for the example's sizes; batch_norm takes no tensor for ``training``)
            train = bool(self.training and n >= 2)
            slot = t if train else _slot(t, self.last_slot)    # a tensor: < max_length
            past = isinstance(slot, int) and slot >= mean_buf.shape[0]     # past max_length
            return self._kernel(a, None if past else slot, self.gain, self.bias, train)
        if self.training and n >= 2:
            # Statistics of the active examples only: padding never enters them.
            mean, var = LF.moments(a[:n], (0,))                      # (1, G)
            self._update(t, mean, var, n)
        else:
            # Eval, or a training step with a single active example (no batch statistics exist):
            # the running statistics of this step; steps past the trained length reuse the last.
            slot = _slot(t, self.last_slot)
            mean, var = mean_buf[slot], var_buf[slot]
        return LF.apply_moments(a, mean, var, weight=self.gain, bias=self.bias, eps=self.eps)
