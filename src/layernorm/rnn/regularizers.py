"""The recurrent regularizers of the modules (docs/rnn.md, "Recurrent regularizers"): the
sampling of their masks (their keywords are checked with the other constructor arguments,
``layernorm.checks.check_rates``).

    recurrent_dropout p   (Gal & Ghahramani 2016, "variational" dropout of the recurrence): one
                          mask m (B, H) per sequence, layer and direction, m = Bernoulli(1 - p) /
                          (1 - p); the recurrent term becomes W_hh (h_{t-1} * m). Nothing else
                          sees the mask (the output, the GRU's z h_{t-1}, the carried state).
    zoneout z             (Krueger et al. 2016): after the cell computes its candidate state
                          (h~_t, c~_t), h_t = k_t h_{t-1} + (1 - k_t) h~_t with k_t (B, H) =
                          Bernoulli(z) at every step (1 keeps the previous value); the same for c
                          with its own rate (LSTM: ``zoneout=(z_c, z_h)`` or one float for both).
                          Eval: k_t = z, the expectation.
    dropconnect p         (Wan et al. 2013; the "weight drop" of Merity et al.'s AWD-LSTM) on
                          W_hh: W_hh * M with M = Bernoulli(1 - p) / (1 - p) of W_hh's shape, one
                          per forward call, layer and direction; every path receives the masked
                          weight and autograd carries the gradient to the Parameter.

In training the masks are sampled here, as uniform draws compared with the rate
(``torch.rand(...).lt_(q)`` is Bernoulli(q), about half the cost of ``bernoulli_``) on the input's
device from torch's default generator (so ``torch.manual_seed`` reproduces a run); in eval there is no
recurrent-dropout or DropConnect mask and zoneout uses its expectation. A rate of 0 samples
nothing: the module runs exactly as without the keyword.
"""
from __future__ import annotations

import torch

NAMES = ("recurrent_dropout", "zoneout", "dropconnect")


def zoneout_repr(zoneout) -> str:
    return repr(tuple(zoneout)) if isinstance(zoneout, tuple) else repr(zoneout)


def _uniform(shape, like: torch.Tensor) -> torch.Tensor:
    """U(0, 1) draws for a mask: in float32 for half types (a bf16 uniform has 8 bits, so a
    comparison with the rate would round it), else in ``like``'s dtype."""
    dtype = like.dtype if like.dtype in (torch.float32, torch.float64) else torch.float32
    return torch.rand(shape, dtype=dtype, device=like.device)


def dropout_mask(shape, p: float, like: torch.Tensor) -> torch.Tensor:
    """Bernoulli(1 - p) / (1 - p) of ``shape``, in ``like``'s dtype and on its device: the mask of
    recurrent dropout and DropConnect (values 0 or 1 / (1 - p), mean 1)."""
    return _uniform(shape, like).ge_(p).div_(1 - p).to(like.dtype)


def zone_mask(shape, z: float, like: torch.Tensor, training: bool) -> torch.Tensor | None:
    """Zoneout's keep weights for ``shape``: Bernoulli(z) in training, z (the expectation) in
    eval; None for z = 0 (no zoneout)."""
    if not z:
        return None
    if training:
        return _uniform(shape, like).lt_(z).to(like.dtype)
    return torch.full(shape, z, dtype=like.dtype, device=like.device)
