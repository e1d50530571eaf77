"""Stacked, optionally bidirectional recurrent modules with torch.nn.LSTM / GRU / RNN's interface.

    lstm = layernorm.LSTM(32, 64, num_layers=2, norm="layer")       # LN-LSTM (paper section 3.1)
    out, (h_n, c_n) = lstm(x)                                       # x: (T, B, 32)
    bn = layernorm.LSTM(32, 64, norm="batch", max_length=50)        # BN-LSTM baseline
    same = layernorm.LSTM.from_torch(torch.nn.LSTM(32, 64), norm="none")   # == the torch module

``norm="none"`` calls torch's own fused op (``_torch_forward``, in ``base.TorchLayout``; the
input checks are ``layernorm.checks.InputChecks``) except for an LSTM or GRU on packed CPU
float32 input, which runs the C time loop without normalization where it runs
(``ops.plain_lstm_direction``; 2-4x faster there, equal to torch's op to float rounding). For
the normalized norms ``_run_direction`` is the one place where a fused operator takes over one
layer and direction (its docstring); else ``_loop_direction`` runs the reference loop
``layernorm.recurrence.run_direction`` (proj_size, torch.jit.trace).
"""
from __future__ import annotations

import warnings
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pad_packed_sequence

from .. import ops
from ..checks import (InputChecks, RNNInputError, RNNTypeError, autocast_on, check_keywords,
                      real_number)
from .base import RecurrentBase, TorchLayout, _copy_from_torch, _no_forget_bias
from ..recurrence import run_direction


# ---- ONNX export
# Through torch's default exporter (``torch.onnx.export(model, args)``, which
# captures the model with torch.export and then translates each operator of the graph to ONNX).
#
# The fused LN-LSTM / LN-GRU recurrences are registered operators (``torch.ops.layernorm.ln_lstm``
# / ``ln_gru``, docs/rnnfast.md) with no ONNX translation. While that exporter captures the model,
# the operators' entries run the same equations as their reference loop of torch ops instead
# (``layernorm.ops.native``: ``Where.onnx``), which it translates op by op. Everything else
# (torch.compile, a plain torch.export) keeps seeing the one registered operator. The ONNX graph
# is the loop unrolled for the example's sequence length, as the legacy exporter's trace is.

def _autocast_dtype(x: torch.Tensor) -> torch.dtype | None:
    """The dtype of an RNN's output under autocast (the fused operators' rule, torch's: the
    autocast dtype, float64 input excepted), or None without autocast."""
    if not autocast_on(x) or x.dtype == torch.float64:
        return None
    return torch.get_autocast_dtype(x.device.type)


_TORCH_CASTS: dict = {}  # (mode, device type, autocast dtype) -> whether torch's op is cast


def _torch_casts(mode: str, device: torch.device, dtype: torch.dtype) -> bool:
    """Whether autocast to ``dtype`` casts torch.nn.LSTM / GRU / RNN (``mode``) on ``device``:
    asked of torch's own module once (one step of a one-unit layer) and remembered. On the CPU
    it casts the LSTM and the RNN but not the GRU (which runs, and returns, float32); where it
    does not, a module here returns its result in the input's dtype, as torch's does. Where
    torch's module fails under that autocast, the answer is True (the autocast rule holds)."""
    key = (mode, device.type, dtype)
    found = _TORCH_CASTS.get(key)
    if found is None:
        module = {"LSTM": nn.LSTM, "GRU": nn.GRU, "RNN": nn.RNN}[mode](1, 1, device=device)
        try:
            with torch.no_grad(), torch.autocast(device.type, dtype=dtype):
                found = module(torch.zeros(1, 1, 1, device=device))[0].dtype == dtype
        except RuntimeError:
            found = True
        _TORCH_CASTS[key] = found
    return found


def _reverse_index(lengths: torch.Tensor, T: int) -> torch.Tensor:
    """(T, B) index that reverses each example within its own length and leaves padding in place."""
    t = torch.arange(T, device=lengths.device).unsqueeze(1)           # (T, 1)
    return torch.where(t < lengths, lengths - 1 - t, t)


class _Stack(TorchLayout, InputChecks, RecurrentBase):
    _mode = ""

    _KEYWORDS = ("input_size", "hidden_size", "num_layers", "bias", "batch_first", "dropout",
                 "bidirectional", "proj_size", "norm", "gain_init", "recurrent_gain", "eps",
                 "momentum", "max_length", "nonlinearity", "forget_bias", "recurrent_dropout",
                 "zoneout", "dropconnect", "device", "dtype")

    def _fused(self) -> bool:
        """Whether the module's configuration has fused operators (LN-LSTM / LN-GRU, BN-LSTM /
        BN-GRU without projection; norm="none" LSTM / GRU): ``use_fused``, an LSTM or GRU with
        biases (norm="none" also without). Where each then runs is the operator's choice
        (``layernorm.ops.native``)."""
        return self.use_fused and self.mode in ("LSTM", "GRU") and (
            self.bias or self._kind.torch_twin)

    def _bn_direction(self, suffix: str, x: torch.Tensor, state: tuple, batch_sizes,
                      masks: dict):
        """One direction of the fused BN-LSTM / BN-GRU: ``ops.bn_direction`` given this
        direction's tensors, and this module's terms' ``_update`` as its statistics callback;
        None where its kernels do not run."""
        terms = self._terms(suffix, batch_sizes)
        return ops.bn_direction(
            self.mode, x, state, self._get("weight_ih", suffix),
            tuple(self._get(n, suffix) for n in ops.BN_PARAMS[self.mode]),
            {name: term.running for name, term in terms.items()}, terms["hh"].last_slot,
            lambda name, *stats: terms[name]._update(*stats), batch_sizes,
            training=self.training, eps=self.eps, who=terms["ih"].who, **masks)

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 proj_size: int = 0, *, norm: str = "layer", gain_init: float | None = None,
                 recurrent_gain: float | None = None,
                 eps: float = 1e-5, momentum: float = 0.1, max_length: int = 100,
                 nonlinearity: str = "tanh", forget_bias: float = 0.0,
                 recurrent_dropout: float = 0.0, zoneout: float | tuple[float, float] = 0.0,
                 dropconnect: float = 0.0, device=None, dtype=None, **unknown) -> None:
        who = type(self).__name__
        check_keywords(who, unknown, self._KEYWORDS)
        super().__init__(self._mode, input_size, hidden_size, bias=bias, norm=norm,
                         gain_init=gain_init, recurrent_gain=recurrent_gain, eps=eps,
                         momentum=momentum, max_length=max_length,
                         nonlinearity=nonlinearity, proj_size=proj_size, forget_bias=forget_bias,
                         recurrent_dropout=recurrent_dropout, zoneout=zoneout,
                         dropconnect=dropconnect, device=device, dtype=dtype)
        if not isinstance(num_layers, int) or isinstance(num_layers, bool):
            raise RNNTypeError(f"{who} expected num_layers to be a positive int, received "
                               f"{num_layers!r} ({type(num_layers).__name__}). Pass e.g. "
                               f"num_layers=1.")
        if num_layers < 1:
            raise ValueError(f"num_layers must be greater than zero: {who} expected num_layers "
                             f"to be a positive int, received "
                             f"{num_layers!r}. Pass e.g. num_layers=1.")
        if not real_number(dropout):
            raise RNNTypeError(f"dropout should be a number in range [0, 1]: {who} expected "
                               f"dropout to be a number in [0, 1], received "
                               f"{dropout!r} ({type(dropout).__name__}). Pass a float, e.g. "
                               f"dropout=0.1.")
        if not 0 <= dropout <= 1:
            raise ValueError(f"dropout should be a number in range [0, 1]: {who} expected "
                             f"dropout in [0, 1], received {dropout!r}. It is "
                             f"the probability of zeroing an element.")
        if dropout > 0 and num_layers == 1:
            warnings.warn(f"dropout option adds dropout after all but last recurrent layer, so "
                          f"non-zero dropout expects num_layers greater than 1, but got "
                          f"dropout={dropout} and num_layers={num_layers}", UserWarning,
                          stacklevel=2)
        self.num_layers, self.batch_first = num_layers, bool(batch_first)
        self.dropout, self.bidirectional = float(dropout), bool(bidirectional)
        self.num_directions = 2 if bidirectional else 1
        out_size = proj_size or hidden_size
        for layer in range(num_layers):
            layer_input = input_size if layer == 0 else out_size * self.num_directions
            for d in range(self.num_directions):
                self._add_direction(self._suffix(layer, d), layer_input)
        self.reset_parameters()
        self.flatten_parameters()

    def _input_term(self, x: torch.Tensor, suffix: str, terms, time_step: int = 0):
        """As the cells' ``_input_term``; without autograd the all-steps GEMM of an LSTM/GRU
        whose recurrence runs in the loop (norm "batch" or "none", or no biases) goes through
        ``ops.input_linear`` (weight packed once for oneDNN and cached)."""
        if self.use_fused and x.dim() == 3 and self.mode != "RNN":
            return terms["ih"].all_steps(ops.input_linear(x, self._get("weight_ih", suffix)))
        return super()._input_term(x, suffix, terms, time_step)

    # ---- forward -----------------------------------------------------------------------------
    def _run_direction(self, layer: int, direction: int, x: torch.Tensor,
                       state: tuple[torch.Tensor, ...], batch_sizes: torch.Tensor | None,
                       h_mask: torch.Tensor | None = None, zone: tuple | None = None):
        """One layer, one direction: x (T, B, I) already in processing order (reversed for the
        backward direction) -> (out (T, B, H), final state). batch_sizes (the input's
        ``PackedSequence.batch_sizes`` itself, (T,) int64 on the CPU, the batch sorted by
        decreasing length) describes a variable-length batch (None: all examples have length
        T); the one length encoding, as it is, down to the kernels
        (``layernorm.recurrence.lengths``).

        Each fused operator chooses once where it runs (``layernorm.ops.native``) and returns
        None where its kernels do not run; then THE loop ``run_direction`` (``_loop_direction``)
        runs the readable terms. In order: one step (T = 1) through the cells' step
        (``_step_once``, cheaper than a whole-sequence operator); norm="none" on packed input
        through the C time loop without normalization (``ops.plain_*_direction``); LN-LSTM /
        LN-GRU through the inference kernels (no graph) or the operator ``ops.ln_lstm`` /
        ``ops.ln_gru`` (which itself runs its reference loop where no kernel does); BN-LSTM /
        BN-GRU through ``ops.bn_direction``. Returns None only for norm="none", whose caller then
        runs torch's own op.

        The recurrent regularizers (``regularizers``): ``h_mask`` (B, P) recurrent dropout,
        ``zone`` zoneout's (T, B, size) weights per state tensor (None where off), passed to
        the fused operators and to the loop alike; DropConnect's W_hh * M is what ``_get``
        returns during the forward, so every path takes it.
        """
        suffix = self._suffix(layer, direction)
        g = lambda name: self._get(name, suffix)  # noqa: E731
        masks = {}
        if h_mask is not None or zone is not None:
            zone_h, zone_c = (None, None) if zone is None else (tuple(zone) + (None,))[:2]
            masks = {"h_mask": h_mask, "zone_h": zone_h}
            if self.mode == "LSTM":
                masks["zone_c"] = zone_c
        elif x.shape[0] == 1:                     # one step: few ops beat the operator
            new = self._step_once(suffix, x[0], state)
            if new is not None:
                return new[0].unsqueeze(0), new
        if self._kind.torch_twin and not masks:        # norm="none": None -> torch's op
            if self.mode == "LSTM":
                b = None if not self.bias else g("bias_ih") + g("bias_hh")
                done = ops.plain_lstm_direction(x, state[0], state[1], g("weight_ih"),
                                                g("weight_hh"), b, batch_sizes)
                return None if done is None else (done[0], done[1:])
            done = ops.plain_gru_direction(x, state[0], g("weight_ih"), g("weight_hh"),
                                           g("bias_ih"), g("bias_hh"), batch_sizes)
            return None if done is None else (done[0], done[1:])
        if self._kind.fused and self._fused():  # one opaque operator, also under torch.compile
            # the layer's tensors, looked up once for both paths (by INFERENCE_PARAMS' names)
            params = [g(n) for n in ops.INFERENCE_PARAMS[self.mode]]
            done = None if masks else ops.ln_inference(     # no graph: W_x x_t in the loop
                self.mode, x, state, params, batch_sizes, self.eps)
            if done is not None:
                return done
            w_ih, w_hh, gain_ih, bias_ih, gain_hh, bias_hh, *ln_c = params
            xw = ops.input_linear(x, w_ih, pooled=True)  # (input LN: in the kernel)
            inputs = {"batch_sizes": batch_sizes, "eps": self.eps, "gain_x": gain_ih,
                      "bias_x": bias_ih}
            if self.mode == "LSTM":
                out, h, c = ops.ln_lstm(xw, *state, w_hh, gain_hh, bias_hh, *ln_c, **inputs,
                                        **masks)
                return out, (h, c)
            # GRU: LN over (r, z) jointly, and over U h: split gain_hh, bias_hh
            H2 = 2 * self.hidden_size
            out, h = ops.ln_gru(xw, state[0], w_hh, gain_hh[:H2], bias_hh[:H2], gain_hh[H2:],
                                bias_hh[H2:], **inputs, **masks)
            return out, (h,)
        if self._kind.running_stats and self._fused() and not self.proj_size:
            done = self._bn_direction(suffix, x, state, batch_sizes, masks)  # the C time loop
            if done is not None:
                return done
        return self._loop_direction(layer, direction, x, state, batch_sizes, h_mask, zone)

    def _loop_direction(self, layer: int, direction: int, x: torch.Tensor,
                        state: tuple[torch.Tensor, ...], batch_sizes: torch.Tensor | None,
                        h_mask: torch.Tensor | None = None, zone: tuple | None = None):
        """``_run_direction`` through THE loop ``run_direction`` (the readable path: any norm,
        proj_size, and torch.jit.trace, which records it step by step). Under autocast the
        output and the final state are in the autocast dtype, as the fused operators return
        them (and torch.nn.LSTM): the GEMMs run in it, the normalizations in float32."""
        suffix = self._suffix(layer, direction)
        terms = self._terms(suffix, batch_sizes)
        if torch.jit.is_tracing():                  # plain torch ops only in a trace
            xg = RecurrentBase._input_term(self, x, suffix, terms)
        else:
            xg = self._input_term(x, suffix, terms)                      # (T, B, G)
        out, state = run_direction(self._step_fn(suffix, terms), xg, state,
                                   batch_sizes=batch_sizes, h_mask=h_mask, zone=zone)
        dtype = _autocast_dtype(x)
        if dtype is not None and out.dtype != dtype:
            out, state = out.to(dtype), tuple(s.to(dtype) for s in state)
        return out, state

    def _forward(self, input, hx: tuple[torch.Tensor, ...] | None):
        """Checks, unbatched input and hx as torch, then one of three paths: torch's own fused
        RNN op (norm="none"), empty outputs (a batch of 0 examples), or the normalized layers."""
        packed = isinstance(input, PackedSequence)
        if packed:
            self._check_packed(input)
            x_any, B, unbatched = input.data, int(input.batch_sizes[0]), False
        else:
            self._check_input(input)
            x_any, unbatched = input, input.dim() == 2
            if unbatched:                               # torch: (T, I), hx (L * D, H)
                input = input.unsqueeze(0 if self.batch_first else 1)
            B = input.shape[0 if self.batch_first else 1]
        if hx is None:
            hx = tuple(x_any.new_zeros(self.num_layers * self.num_directions, B, size)
                       for size in self._state_sizes())
        else:
            self._check_hx(hx, None if unbatched else B, x_any)
            if unbatched:
                hx = tuple(h.unsqueeze(1) for h in hx)
            if packed and input.sorted_indices is not None:
                hx = tuple(h.index_select(1, input.sorted_indices) for h in hx)

        # DropConnect: W_hh * M of every layer and direction, read through ``_get`` (and in
        # torch's weight list) by whichever path runs
        if self._regularized and self.dropconnect and self.training and B:
            self._masked = self._weight_masks(
                [self._suffix(k, d) for k in range(self.num_layers)
                 for d in range(self.num_directions)], x_any)
            try:
                output, h_n = self._paths(input, hx, packed, B)
            finally:
                self._masked = None
        else:
            output, h_n = self._paths(input, hx, packed, B)

        if packed and input.unsorted_indices is not None:
            h_n = tuple(h.index_select(1, input.unsorted_indices) for h in h_n)
        if unbatched:
            output = output.squeeze(0 if self.batch_first else 1)
            h_n = tuple(h.squeeze(1) for h in h_n)
        dtype = _autocast_dtype(x_any)
        if dtype is not None and not _torch_casts(self.mode, x_any.device, dtype):
            # an autocast that torch does not apply to its module of this mode (the GRU on the
            # CPU): the same computation, the result in the input's dtype, as torch's returns
            data = output.data if packed else output
            if data.dtype != x_any.dtype:
                data = data.to(x_any.dtype)
                output = output._replace(data=data) if packed else data
                h_n = tuple(h.to(x_any.dtype) for h in h_n)
        return output, h_n

    def _paths(self, input, hx: tuple[torch.Tensor, ...], packed: bool, B: int):
        """torch's own fused RNN op (norm="none" without recurrent dropout or zoneout, which
        that op cannot take), empty outputs (a batch of 0 examples), or the normalized layers
        (and norm="none" with those regularizers: the readable loop, no normalization)."""
        if self._kind.torch_twin and not (self._regularized and self._state_noise):
            # on packed input the C time loop without normalization, where it runs (2-4x
            # faster than torch's op there, docs/rnnfast.md; asked before the batch is laid
            # out for it); else torch's own op (which a trace records for any length)
            if packed and self._fused() and not self.proj_size and not (
                    self.training and (self._regularized or self.dropout)) \
                    and ops.plain_runs(input.data, *hx, *self._flat_weights):
                done = self._normalized_forward(input, hx, packed)
                if done is not None:
                    return done
            return self._torch_forward(input, hx, packed)
        if B == 0:
            return self._empty_forward(input, hx)
        return self._normalized_forward(input, hx, packed)

    def _empty_forward(self, x: torch.Tensor, hx: tuple[torch.Tensor, ...]):
        """A batch of 0 examples: empty outputs of torch's shapes, still connected to the
        parameters and the input (their gradients are zeros), no statistics updated."""
        T = x.shape[1 if self.batch_first else 0]
        width = (self.proj_size or self.hidden_size) * self.num_directions
        zero = (sum(p.sum() for p in self._flat_weights + self._norm_weights) + x.sum()) * 0
        shape = (0, T, width) if self.batch_first else (T, 0, width)
        return x.new_zeros(shape) + zero, tuple(h + zero for h in hx)

    def _direction_masks(self, T: int, B: int, state: tuple) -> tuple:
        """(h_mask, zone) of one layer and direction for ``_run_direction``, sampled now
        (``regularizers``): (None, None) when this forward has no recurrent dropout or
        zoneout."""
        if not (self._regularized and self._state_noise):
            return None, None
        h_mask, zone_h, zone_c = self._state_masks(T, B, state[0])
        zone = None if zone_h is None and zone_c is None else \
            (zone_h, zone_c) if self.mode == "LSTM" else (zone_h,)
        return h_mask, zone

    def _normalized_forward(self, input, hx: tuple[torch.Tensor, ...], packed: bool):
        """norm="layer" / "batch" over checked input (B >= 1) and hx in processing order (and
        norm="none": on packed input through the C loop, None where it does not run; with
        recurrent dropout or zoneout, which torch's op cannot take, the readable loop with no
        normalization)."""
        if packed:
            # Work in the packed (decreasing length) order: active examples are a prefix.
            x, lengths = pad_packed_sequence(PackedSequence(input.data, input.batch_sizes))
            batch_sizes = input.batch_sizes         # checked where it entered (inputs)
        else:
            x = input.transpose(0, 1) if self.batch_first else input
            batch_sizes = lengths = None                 # lengths: (B,) int64 on the CPU
        T, B = x.shape[0], x.shape[1]
        n_state = len(hx)
        tracing = torch.jit.is_tracing()
        if tracing:
            warnings.warn(f"torch.jit.trace records {type(self).__name__}(norm={self.norm!r})'s "
                          f"time loop for this input's {T} steps: the traced module is only "
                          f"right for sequences of length {T} (see docs/rnn.md). Trace with the "
                          f"length you will run, or use torch.export / torch.compile.",
                          torch.jit.TracerWarning, stacklevel=3)
        # The fused kernels have no projection; a trace records plain torch ops.
        run = self._loop_direction if self.proj_size or tracing else self._run_direction
        if packed:
            rev = _reverse_index(lengths.to(x.device), T).unsqueeze(-1)   # (T, B, 1)
            reverse = lambda y: y.gather(0, rev.expand(-1, -1, y.shape[-1]))  # noqa: E731
        else:
            reverse = lambda y: y.flip(0)  # noqa: E731

        finals = []
        layer_input = x
        for layer in range(self.num_layers):
            outs = []
            for d in range(self.num_directions):
                k = layer * self.num_directions + d
                state0 = tuple(h[k] for h in hx)
                xd = reverse(layer_input) if d else layer_input
                done = run(layer, d, xd, state0, batch_sizes,
                           *self._direction_masks(T, B, state0))
                if done is None:    # norm="none" where the C loop does not run: torch's op
                    return None
                out, state = done
                outs.append(reverse(out) if d else out)
                finals.append(state)
            layer_input = torch.cat(outs, -1) if len(outs) > 1 else outs[0]
            if self.dropout > 0 and self.training and layer < self.num_layers - 1:
                layer_input = F.dropout(layer_input, self.dropout, training=True)
        if self._kind.running_stats:  # only BN counts steps (a list over T would fix T in a graph)
            n_active = batch_sizes if packed else [B] * T
            self._count_steps([t for t in range(T) if n_active[t] >= 2])

        h_n = tuple(torch.stack([s[i] for s in finals]) for i in range(n_state))
        if packed:
            data = pack_padded_sequence(layer_input, lengths).data
            output = PackedSequence(data, input.batch_sizes, input.sorted_indices,
                                    input.unsorted_indices)
        else:
            output = layer_input.transpose(0, 1) if self.batch_first else layer_input
        return output, h_n

    @classmethod
    def from_torch(cls, module: nn.Module, *, norm: str = "layer", **kwargs):
        """Build from a torch.nn.LSTM / GRU / RNN with the same configuration and its weights.

        ``norm="none"`` then computes what the torch module computes; another norm keeps the
        weights and adds the normalization (gains ``gain_init``, normalization biases are torch's
        ``bias_ih`` / ``bias_hh``). Extra keyword arguments go to the constructor.
        """
        expected = {"LSTM": nn.LSTM, "GRU": nn.GRU, "RNN": nn.RNN}[cls._mode]
        if not isinstance(module, expected):
            raise TypeError(f"{cls.__name__}.from_torch expected a torch.nn.{expected.__name__}, "
                            f"received {type(module).__name__}. Pass the matching torch module.")
        _no_forget_bias(cls.__name__, kwargs)
        if getattr(module, "proj_size", 0):
            kwargs.setdefault("proj_size", module.proj_size)
        if isinstance(module, nn.RNN):
            kwargs.setdefault("nonlinearity", module.nonlinearity)
        p = module.weight_ih_l0
        ours = cls(module.input_size, module.hidden_size, num_layers=module.num_layers,
                   bias=module.bias, batch_first=module.batch_first, dropout=module.dropout,
                   bidirectional=module.bidirectional, norm=norm, device=p.device, dtype=p.dtype,
                   **kwargs)
        return _copy_from_torch(ours, module)

    def extra_repr(self) -> str:
        s = super().extra_repr()
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if self.batch_first:
            s += ", batch_first=True"
        if self.dropout:
            s += f", dropout={self.dropout}"
        if self.bidirectional:
            s += ", bidirectional=True"
        if self.proj_size:
            s += f", proj_size={self.proj_size}"
        return s


class LSTM(_Stack):
    """LN-LSTM (``norm="layer"``, the paper's section 3.1), BN-LSTM (``"batch"``, Cooijmans et
    al.) or exactly torch.nn.LSTM (``"none"``, which runs torch's own op), with torch.nn.LSTM's
    arguments and returns (docs/rnn.md).

    ``forward(input, hx=None) -> output, (h_n, c_n)``: input (T, B, I), (B, T, I) with
    batch_first, unbatched (T, I), or a PackedSequence (PackedSequence out); hx = (h_0, c_0),
    h_0 (num_layers * num_directions, B, proj_size or H), c_0 (..., B, H), without B for an
    unbatched input. ``proj_size``: h_t = W_hr (o * tanh(...)) as torch (the normalized layers
    then run the readable loop). Extra keywords: ``gain_init`` (gains' initial value; default
    1.0, 0.1 for "batch"), ``recurrent_gain`` (the initial gain of the normalized W_h h,
    default ``gain_init``; 0.5 keeps an LN-LSTM's gradient bounded over long sequences,
    docs/rnn.md "Long sequences"), ``eps``, ``forget_bias`` (added to the forget gate's bias at
    initialisation; default 0 as the paper's code), and for "batch" ``max_length`` (steps with
    their own running statistics; later steps use the last one's) and ``momentum``.
    """
    _mode = "LSTM"

    def forward(self, input, hx: tuple[torch.Tensor, torch.Tensor] | None = None):
        if hx is not None and not (isinstance(hx, (tuple, list)) and len(hx) == 2):
            raise RNNInputError(f"LSTM expected hx = (h_0, c_0), a tuple of two tensors, "
                                f"received {type(hx).__name__}. Pass both states, or hx=None "
                                f"for zeros.")
        output, (h_n, c_n) = self._forward(input, None if hx is None else tuple(hx))
        return output, (h_n, c_n)


class GRU(_Stack):
    """LN-GRU (``norm="layer"``: the four LNs of docs/rnn.md), per-step batch-normalized GRU
    (``"batch"``) or exactly torch.nn.GRU (``"none"``). ``forward(input, hx=None) -> output,
    h_n``, shapes as torch.nn.GRU. Keywords as ``layernorm.LSTM``."""
    _mode = "GRU"

    def forward(self, input, hx: torch.Tensor | None = None):
        output, (h_n,) = self._forward(input, None if hx is None else (hx,))
        return output, h_n


class RNN(_Stack):
    """LN-RNN (``norm="layer"``, eq. 4: one LN of W_x x + W_h h), per-step batch-normalized RNN
    (``"batch"``) or exactly torch.nn.RNN (``"none"``); ``nonlinearity`` "tanh" or "relu".
    ``forward(input, hx=None) -> output, h_n``."""
    _mode = "RNN"

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1,
                 nonlinearity: str = "tanh", bias: bool = True, batch_first: bool = False,
                 dropout: float = 0.0, bidirectional: bool = False, **kwargs) -> None:
        # torch.nn.RNN's positional order: nonlinearity comes fourth.
        super().__init__(input_size, hidden_size, num_layers, bias, batch_first, dropout,
                         bidirectional, nonlinearity=nonlinearity, **kwargs)

    def forward(self, input, hx: torch.Tensor | None = None):
        output, (h_n,) = self._forward(input, None if hx is None else (hx,))
        return output, h_n
