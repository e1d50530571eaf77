"""The one-step modules (LSTMCell, GRUCell, RNNCell) and the equations of every recurrent layer.

Files: ``terms`` (the normalized terms ``Term``), ``layernorm.recurrence`` (the step functions
and THE time loop), ``base`` (``RecurrentBase``: parameters shared with the stacked modules),
``layernorm.checks`` (the exception types and checks); their names are importable from here
too.

The paper, section 3.1 (docs/rnn.md). Every recurrent layer here computes, at step t, normalized
*terms* (summed inputs) and then the gates of torch's LSTM / GRU / Elman RNN:

    LSTM   gates = N(W_x x_t) + b_ih + N(W_h h_{t-1}) + b_hh      N over all 4H gates jointly
           i, f, g, o = split(gates)                               torch's gate order
           c_t = sigmoid(f) * c_{t-1} + sigmoid(i) * tanh(g)       the raw c_t is carried
           h_t = sigmoid(o) * tanh(N(c_t) + b_c)                   N over H
    GRU    r, z = split(sigmoid(N(W_x x_t) + b + N(W_h h) + b))   N over 2H jointly
           n    = tanh(N(W x_t) + b_in + r * (N(U h) + b_hn))      U h normalized before r
           h_t  = (1 - z) * n + z * h_{t-1}                        torch's convention for z
    RNN    h_t  = f(N(W_x x_t + W_h h_{t-1}) + b_ih + b_hh)        eq. 4: one N over the sum

with N one of

    "layer"  layer norm with a gain (statistics of each example over the units)
    "batch"  batch norm with a gain (statistics over the examples active at step t, running
             statistics kept per time step: Cooijmans et al.'s BN-LSTM baseline)
    "none"   the identity: exactly torch.nn.LSTM / GRU / RNN (and LSTM has no b_c)

Biases. Each term's normalization has its bias added after it, and that bias is torch's own
``bias_ih`` / ``bias_hh``: so ``from_torch`` copies all four torch tensors unchanged and the
state_dict is torch's plus the gains (``gain_ih``, ``gain_hh``, and for LSTM ``gain_c``,
``bias_c``). For the LSTM gates and GRU's r, z the pair ``bias_ih + bias_hh`` is one bias split in
two, redundant exactly as it is in torch (the paper's b1 + b2 + b); GRU's ``bias_hh`` of the
candidate is multiplied by r, as in torch, and is the paper's b4. BN-LSTM's gate betas are fixed at
0 (Cooijmans et al.), so it has no more biases than torch either.
"""
from __future__ import annotations

import torch
from torch import nn

from .. import recurrence
from .. import ops
from .base import GATES, RNN_NORMS, RecurrentBase, _copy_from_torch  # noqa: F401
from .base import _no_forget_bias
from ..checks import (RNNInputError, RNNTypeError, check_dtype,  # noqa: F401
                       check_keywords, check_state_dtype)
from ..recurrence import NONLINEARITIES, StepFn, gru_step, lstm_step, rnn_step  # noqa: F401
from .terms import Term, gate_groups, observe_batch_stats  # noqa: F401
from . import regularizers as _reg


class _Cell(RecurrentBase):
    _mode = ""
    _zero_sizes = True

    _KEYWORDS = ("input_size", "hidden_size", "bias", "norm", "gain_init", "recurrent_gain",
                 "eps", "momentum", "max_length", "nonlinearity", "forget_bias",
                 "recurrent_dropout", "zoneout", "dropconnect", "device", "dtype")
    # ``_held_masks``: the recurrent-dropout and DropConnect masks held since the last
    # reset_dropout_masks(): ((batch, dtype, device) they were sampled for, h_mask or None,
    # W_hh's mask or None)

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, *,
                 norm: str = "layer", gain_init: float | None = None,
                 recurrent_gain: float | None = None, eps: float = 1e-5,
                 momentum: float = 0.1, max_length: int = 100, nonlinearity: str = "tanh",
                 forget_bias: float = 0.0, recurrent_dropout: float = 0.0,
                 zoneout: float = 0.0, dropconnect: float = 0.0, device=None, dtype=None,
                 **unknown) -> None:
        check_keywords(type(self).__name__, unknown, self._KEYWORDS)
        super().__init__(self._mode, input_size, hidden_size, bias=bias, norm=norm,
                         gain_init=gain_init, recurrent_gain=recurrent_gain, eps=eps,
                         momentum=momentum, max_length=max_length,
                         nonlinearity=nonlinearity, forget_bias=forget_bias,
                         recurrent_dropout=recurrent_dropout, zoneout=zoneout,
                         dropconnect=dropconnect, device=device, dtype=dtype)
        self._add_direction("", input_size)
        self.reset_parameters()

    def reset_dropout_masks(self) -> None:
        """Forget the recurrent-dropout and DropConnect masks: the next training call samples new
        ones, which the calls after it reuse (a cell has no sequence boundary, so, as Keras'
        cells, it keeps one mask per sequence until told: call this at the start of each
        sequence). Zoneout samples a new mask at every call (every step) and needs no reset."""
        self._held_masks = None

    def _masks(self, x: torch.Tensor) -> tuple:
        """(h_mask, zone (zone_h, zone_c), {"weight_hh": W_hh * M} or None) for one call on x
        (B, I): the held masks in training (sampled for this batch shape if none is held, or the
        held ones are for another), none in eval; zoneout's per call."""
        h_mask = w_masks = None
        if self.training and (self.recurrent_dropout or self.dropconnect):
            key = (x.shape[0], x.dtype, x.device)
            held = self._held_masks
            if held is None or held[0] != key:
                w = self._get("weight_hh", "")
                held = (key, _reg.dropout_mask((x.shape[0], self.hidden_size),
                                               self.recurrent_dropout, x)
                        if self.recurrent_dropout else None,
                        _reg.dropout_mask(w.shape, self.dropconnect, w)
                        if self.dropconnect else None)
                self._held_masks = held
            h_mask = held[1]
            if held[2] is not None:
                w_masks = {"weight_hh": self._get("weight_hh", "") * held[2]}
        zone = (_reg.zone_mask((x.shape[0], self.hidden_size), self._z_h, x, self.training),
                _reg.zone_mask((x.shape[0], self.hidden_size), self._z_c, x, self.training))
        return h_mask, zone, w_masks

    def _regularized_step(self, input: torch.Tensor, hx: tuple, time_step: int) -> tuple:
        """One step with the cell's regularizers (input (B, I), B >= 1): W_hh * M given to the
        path through ``_get``; h_{t-1} * h_mask into the recurrent product; zoneout after the
        step, k * h_{t-1} + (1 - k) * candidate."""
        h_mask, zone, w_masks = self._masks(input)
        self._masked = w_masks
        try:
            if self.mode == "GRU" and h_mask is not None:    # z h_{t-1} reads h unmasked
                new = None if self._kind.torch_twin else self._step_once("", input, hx, h_mask)
            else:
                # the LSTM's and RNN's h_{t-1} enters the step only through W_hh h_{t-1}: the
                # masked state in the fast step is exact
                state = hx if h_mask is None else (hx[0] * h_mask,) + hx[1:]
                new = self._step_once("", input, state)
            if new is None:
                new = self._readable_step(input, hx, time_step, h_mask)
        finally:
            self._masked = None
        return recurrence.zone_update(new, hx, zone[:len(new)])

    def _readable_step(self, input: torch.Tensor, hx: tuple, time_step: int,
                       h_mask: torch.Tensor | None = None) -> tuple:
        """The readable terms and step (any norm; batch norm counts the step)."""
        terms = self._terms("")
        xg = self._input_term(input, "", terms, time_step)
        new = self._step_fn("", terms)(xg, hx, time_step, h_mask)
        self._count_steps([time_step])
        return new

    def _torch_module(self) -> nn.Module:
        cls = {"LSTM": nn.LSTMCell, "GRU": nn.GRUCell, "RNN": nn.RNNCell}[self.mode]
        kw = {"nonlinearity": self.nonlinearity} if self.mode == "RNN" else {}
        return cls(self.input_size, self.hidden_size, self.bias, device="meta", **kw)

    def _check(self, x: torch.Tensor, hx: tuple) -> None:
        """The input and states as the cell takes them (torch's checks); a batch-1 step is short,
        so what is right passes one cheap test and only a mistake reaches the messages."""
        w = self._get("weight_ih", "")
        if isinstance(x, torch.Tensor) and x.dtype == w.dtype and x.dim() in (1, 2) and \
                x.shape[-1] == self.input_size:
            want = x.shape[:-1] + (self.hidden_size,)
            if all(isinstance(h, torch.Tensor) and h.shape == want and h.dtype == x.dtype and
                   h.device == x.device for h in hx):
                return
        who = type(self).__name__
        if not isinstance(x, torch.Tensor):
            raise RNNTypeError(f"{who} expected a tensor (B, {self.input_size}) or "
                               f"({self.input_size},), received {type(x).__name__}.")
        check_dtype(x, w, who)
        if x.dim() not in (1, 2) or x.shape[-1] != self.input_size:
            said = (f"{who}: Expected input to be 1D or 2D, got {x.dim()}D instead"
                    if x.dim() not in (1, 2) else f"input has inconsistent input_size: got "
                    f"{x.shape[-1]} expected {self.input_size}")          # torch's words
            raise RNNInputError(f"{said}: {who} expected an input of shape "
                                f"(B, {self.input_size}) or ({self.input_size},) "
                                f"(input_size={self.input_size}), received "
                                f"shape {tuple(x.shape)}. Pass one time step, or build the cell "
                                f"with input_size={x.shape[-1] if x.dim() else '...'}.")
        want = tuple(x.shape[:-1]) + (self.hidden_size,)
        for i, h in enumerate(hx):
            name = "hx" if len(hx) == 1 else f"hx[{i}]"
            if not isinstance(h, torch.Tensor):
                raise RNNTypeError(f"{who} expected {name} to be a tensor of shape {want}, "
                                   f"received {type(h).__name__}. Pass hx=None for zeros.")
            if tuple(h.shape) != want:
                said = (f"{who}: Expected {name} to be 1D or 2D, got {h.dim()}D instead"
                        if h.dim() not in (1, 2) else
                        f"hidden{i} has inconsistent hidden_size: got {h.shape[-1]}, expected "
                        f"{self.hidden_size}" if h.shape[-1] != self.hidden_size else
                        f"Input batch size {want[0] if want[:-1] else 1} doesn't match "
                        f"hidden{i} batch size {h.shape[0] if h.dim() == 2 else 1}")
                raise RNNInputError(f"{said}: {who} expected {name} of shape {want} (batch, "
                                    f"hidden_size), received {tuple(h.shape)}. Pass a state with "
                                    f"the input's batch size and hidden_size={self.hidden_size}, "
                                    f"or hx=None for zeros.")
            check_state_dtype(h, x, name, who)

    def _fast_weight(self, x, hx: tuple) -> torch.Tensor | None:
        """The hot path's gate: ``weight_ih`` where a step can skip ``_one_step`` (``use_fused``,
        norm "layer" or "none", a (B, I) input with B >= 1 of the weights' dtype, every state a
        (B, H) tensor of its dtype and device), else None. The same conditions as ``_check`` and
        ``_step_once`` in a few attribute reads; whatever fails them (or an entry of ``ops.cell``
        that returns None: autocast) takes ``_one_step``, which raises the error or runs the path
        that applies."""
        w = self._parameters.get("weight_ih")
        if w is None or not self.use_fused or self._kind.running_stats or self._regularized or \
                not isinstance(x, torch.Tensor) or x.dim() != 2:
            return None
        B, I = x.shape
        dtype = x.dtype
        if not B or I != self.input_size or dtype != w.dtype:
            return None
        want, device = (B, self.hidden_size), x.device
        for h in hx:
            if not (isinstance(h, torch.Tensor) and h.shape == want and h.dtype == dtype and
                    h.device == device):
                return None
        return w

    def _one_step(self, input: torch.Tensor, hx: tuple, time_step: int) -> tuple:
        self._check(input, hx)
        batched = input.dim() == 2
        if not batched:
            input, hx = input.unsqueeze(0), tuple(h.unsqueeze(0) for h in hx)
        if input.shape[0] == 0 or not self.hidden_size:   # empty states, as torch's cells
            zero = (sum(p.sum() for p in self.parameters()) + input.sum()) * 0
            new = tuple(h + zero for h in hx)
            return new if batched else tuple(h.squeeze(0) for h in new)
        if self._regularized:
            new = self._regularized_step(input, hx, time_step)
        else:
            new = self._step_once("", input, hx)
            if new is None:
                new = self._readable_step(input, hx, time_step)
        return new if batched else tuple(h.squeeze(0) for h in new)

    def _zeros(self, input: torch.Tensor) -> torch.Tensor:
        return input.new_zeros(tuple(input.shape[:-1]) + (self.hidden_size,))

    @classmethod
    def from_torch(cls, cell: nn.Module, *, norm: str = "layer", **kwargs):
        """Build from a torch.nn.{LSTM,GRU,RNN}Cell, copying its weights (norm="none": same
        outputs as the torch cell)."""
        expected = {"LSTM": nn.LSTMCell, "GRU": nn.GRUCell, "RNN": nn.RNNCell}[cls._mode]
        if not isinstance(cell, expected):
            raise TypeError(f"{cls.__name__}.from_torch expected a torch.nn.{expected.__name__}, "
                            f"received {type(cell).__name__}. Pass the matching torch cell.")
        _no_forget_bias(cls.__name__, kwargs)
        if isinstance(cell, nn.RNNCell):
            kwargs.setdefault("nonlinearity", cell.nonlinearity)
        p = cell.weight_ih
        ours = cls(cell.input_size, cell.hidden_size, bias=cell.bias, norm=norm,
                   device=p.device, dtype=p.dtype, **kwargs)
        return _copy_from_torch(ours, cell)


class LSTMCell(_Cell):
    """One LN-LSTM step (``norm="layer"``), BN-LSTM step (``"batch"``) or torch.nn.LSTMCell
    (``"none"``). ``forward(input, hx=None, time_step=0) -> (h_1, c_1)``; input (B, I) or (I,).
    ``time_step`` picks the per-step batch statistics of norm="batch" (ignored otherwise)."""
    _mode = "LSTM"

    def forward(self, input: torch.Tensor, hx: tuple[torch.Tensor, torch.Tensor] | None = None,
                time_step: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        if hx is None:
            hx = (self._zeros(input), self._zeros(input)) if isinstance(input, torch.Tensor) \
                else (None, None)
        hx = tuple(hx)
        w_ih = self._fast_weight(input, hx)
        if w_ih is not None:
            p = self._parameters                 # the step's tensors without _get's fallbacks
            w_hh, g_ih, g_hh, g_c = (p.get("weight_hh"), p.get("gain_ih"), p.get("gain_hh"),
                                     p.get("gain_c"))
            b_ih, b_hh, b_c = p.get("bias_ih"), p.get("bias_hh"), p.get("bias_c")
            if self._kind.torch_twin or (w_hh is None or g_ih is None or g_hh is None or
                                         g_c is None or self.bias and (b_ih is None or
                                                                       b_hh is None or
                                                                       b_c is None)):
                new = self._step_once("", input, hx)    # (or a tensor in a Parameter's place)
            else:
                new = ops.lstm_cell(input, hx[0], hx[1], w_ih, w_hh, g_ih, b_ih, g_hh, b_hh,
                                    g_c, b_c, self.eps)
            if new is not None:
                return new
        return self._one_step(input, hx, time_step)


class GRUCell(_Cell):
    """One LN-GRU step (the four LNs of docs/rnn.md), or torch.nn.GRUCell with ``norm="none"``.
    ``forward(input, hx=None, time_step=0) -> h_1``."""
    _mode = "GRU"

    def forward(self, input: torch.Tensor, hx: torch.Tensor | None = None,
                time_step: int = 0) -> torch.Tensor:
        if hx is None and isinstance(input, torch.Tensor):
            hx = self._zeros(input)
        w_ih = self._fast_weight(input, (hx,))
        if w_ih is not None:
            p = self._parameters                 # the step's tensors without _get's fallbacks
            w_hh, g_ih, g_hh = p.get("weight_hh"), p.get("gain_ih"), p.get("gain_hh")
            b_ih, b_hh = p.get("bias_ih"), p.get("bias_hh")
            if self._kind.torch_twin or (w_hh is None or g_ih is None or g_hh is None or
                                         self.bias and (b_ih is None or b_hh is None)):
                new = self._step_once("", input, (hx,))  # (or a tensor in a Parameter's place)
                h = None if new is None else new[0]
            else:
                h = ops.gru_cell(input, hx, w_ih, w_hh, g_ih, b_ih, g_hh, b_hh, self.eps,
                                 parts=lambda: self._affine_parts(g_ih, b_ih, g_hh, b_hh))
            if h is not None:
                return h
        return self._one_step(input, (hx,), time_step)[0]

    def _affine_parts(self, *tensors) -> tuple:
        """``recurrence.gru_affine_parts`` of these tensors, kept from one call to the next
        without autograd (the splits are a third of a batch-1 step's ops). The parts share the
        Parameters' storage, so in-place updates show through; they are kept while the same
        Parameter objects hold the same storage in the same inference mode, and never while
        tracing or compiling or for tensors other than Parameters (torch.func's)."""
        g_ih, b_ih, g_hh, b_hh = tensors
        key = (torch.is_inference_mode_enabled(), g_ih.data_ptr(), g_hh.data_ptr(),
               0 if b_ih is None else b_ih.data_ptr(), 0 if b_hh is None else b_hh.data_ptr())
        kept = self.__dict__.get("_kept_parts")
        if kept is not None and kept[0] is g_ih and kept[1] is b_ih and kept[2] is g_hh and \
                kept[3] is b_hh and kept[4] == key and not (torch.jit.is_tracing() or
                                                            torch.compiler.is_compiling()):
            return kept[5]
        parts = recurrence.gru_affine_parts(*tensors)
        if not (torch.jit.is_tracing() or torch.compiler.is_compiling() or
                any(t is not None and type(t) is not nn.Parameter for t in tensors)):
            self.__dict__["_kept_parts"] = (g_ih, b_ih, g_hh, b_hh, key, parts)
        return parts


class RNNCell(_Cell):
    """One LN-RNN step (eq. 4), or torch.nn.RNNCell with ``norm="none"``.
    ``forward(input, hx=None, time_step=0) -> h_1``."""
    _mode = "RNN"

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True,
                 nonlinearity: str = "tanh", **kwargs) -> None:
        super().__init__(input_size, hidden_size, bias, nonlinearity=nonlinearity, **kwargs)

    def forward(self, input: torch.Tensor, hx: torch.Tensor | None = None,
                time_step: int = 0) -> torch.Tensor:
        if hx is None and isinstance(input, torch.Tensor):
            hx = self._zeros(input)
        w_ih = self._fast_weight(input, (hx,))
        if w_ih is not None:
            p = self._parameters                 # the step's tensors without _get's fallbacks
            w_hh, gain, b_ih, b_hh = (p.get("weight_hh"), p.get("gain"), p.get("bias_ih"),
                                      p.get("bias_hh"))
            if self._kind.torch_twin or (w_hh is None or gain is None or
                                         self.bias and (b_ih is None or b_hh is None)):
                new = self._step_once("", input, (hx,))  # (or a tensor in a Parameter's place)
                h = None if new is None else new[0]
            else:
                bias = None if b_ih is None else b_ih + b_hh
                h = ops.rnn_cell(input, hx, w_ih, w_hh, gain, bias, self.eps, self.nonlinearity)
            if h is not None:
                return h
        return self._one_step(input, (hx,), time_step)[0]
