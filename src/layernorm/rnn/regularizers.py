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

from ..checks import RNNTypeError, check_rates

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


class Regularized:
    """The rates of the recurrent regularizers and the sampling of their masks, mixed into
    ``layernorm.rnn.base.RecurrentBase`` (reads its configuration and ``_get``)."""
    # off unless set (these class values also serve modules pickled before they existed).
    # ``_rates`` = (recurrent_dropout, zoneout as given, dropconnect), ``_z_h`` / ``_z_c``
    # zoneout's rate of h and of c.
    _rates: tuple = (0.0, 0.0, 0.0)
    _z_h = _z_c = 0.0
    _regularized = False            # any rate > 0
    _held_masks = None              # a cell's recurrent-dropout and DropConnect masks

    def _store_rates(self, rates: tuple) -> None:
        self._rates, self._z_h, self._z_c = rates[:3], rates[3], rates[4]
        self._regularized = bool(rates[0] or rates[2] or rates[3] or rates[4])
        self._held_masks = None

    def _set_rate(self, **change) -> None:
        """Set one rate after construction, checked as the constructor checks it."""
        now = dict(zip(NAMES, self._rates), **change)
        self._store_rates(check_rates(type(self).__name__, self.mode, error_type=RNNTypeError,
                                      **now))

    @property
    def recurrent_dropout(self) -> float:
        """Recurrent (variational) dropout's rate p: W_hh (h_{t-1} * m), m = Bernoulli(1 - p) /
        (1 - p) per sequence (docs/rnn.md, "Recurrent regularizers")."""
        return self._rates[0]

    @recurrent_dropout.setter
    def recurrent_dropout(self, value) -> None:
        self._set_rate(recurrent_dropout=value)

    @property
    def zoneout(self) -> float | tuple[float, float]:
        """Zoneout's rate z (LSTM: (z_c, z_h) when given as a pair): h_t = k h_{t-1} + (1 - k)
        h~_t, k = Bernoulli(z) per step in training, z in eval."""
        return self._rates[1]

    @zoneout.setter
    def zoneout(self, value) -> None:
        self._set_rate(zoneout=value)

    @property
    def dropconnect(self) -> float:
        """DropConnect's rate p on W_hh: W_hh * M, M = Bernoulli(1 - p) / (1 - p) per forward."""
        return self._rates[2]

    @dropconnect.setter
    def dropconnect(self, value) -> None:
        self._set_rate(dropconnect=value)

    @property
    def _state_noise(self) -> bool:
        """Whether a forward in this mode changes the recurrence's states: recurrent dropout in
        training, zoneout in training and eval (its expectation). DropConnect only changes
        W_hh, which every path takes."""
        return bool(self._z_h or self._z_c or (self.training and self.recurrent_dropout))

    def _weight_masks(self, suffixes, like: torch.Tensor) -> dict | None:
        """DropConnect: {"weight_hh<suffix>": W_hh * M} for these directions, M sampled now
        (training with dropconnect > 0), else None."""
        if not (self.training and self.dropconnect):
            return None
        out = {}
        for suffix in suffixes:
            w = self._get("weight_hh", suffix)
            out["weight_hh" + suffix] = w * dropout_mask(w.shape, self.dropconnect, w)
        return out

    def _state_masks(self, T: int | None, B: int, like: torch.Tensor) -> tuple:
        """(h_mask (B, P) or None, zone_h, zone_c) for one direction: zone tensors (T, B, size),
        or (B, size) for one step of a cell (T None), or None where that rate is 0. P is the
        size of the h fed back (proj_size or hidden_size)."""
        H = self.hidden_size
        P = self.proj_size or H
        h_mask = dropout_mask((B, P), self.recurrent_dropout, like) \
            if self.training and self.recurrent_dropout else None
        lead = (B,) if T is None else (T, B)
        zone_h = zone_mask(lead + (P,), self._z_h, like, self.training)
        zone_c = zone_mask(lead + (H,), self._z_c, like, self.training) \
            if self.mode == "LSTM" else None
        return h_mask, zone_h, zone_c
