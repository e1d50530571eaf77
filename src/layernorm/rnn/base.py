"""``RecurrentBase``: the parameters, buffers and per-direction math that the cells
(``layernorm.rnn.cells``) and the stacked modules (``layernorm.rnn.modules``) share (the
recurrent regularizers' rates and masks mixed in from ``regularizers``); and ``TorchLayout``,
torch's weight layout and fused op for the stacked modules. Their errors and checks of
arguments, inputs and states are ``layernorm.checks``'."""
from __future__ import annotations

import math
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import _VF, nn
from torch.nn.utils.rnn import PackedSequence

from ..checks import RNNTypeError, check_choice, check_rates, check_rnn_args
from ..vocabulary import RNN_NORMS
from .. import recurrence
from .. import ops
from ..recurrence import NONLINEARITIES, StepFn, gru_step, lstm_step, rnn_step
from ._norm_kinds import NORM_KINDS
from . import regularizers as _reg
from .terms import Term, gate_groups, last_trained_slot


def _no_forget_bias(who: str, kwargs: dict) -> None:
    if kwargs.get("forget_bias"):
        raise ValueError(f"{who}.from_torch copies the torch module's biases, so forget_bias="
                         f"{kwargs['forget_bias']} would be overwritten. Add it to the torch "
                         f"module's bias_ih[H:2H] before copying, or leave it out.")


GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


class RecurrentBase(_reg.Regularized, nn.Module):
    """Parameters, buffers and per-direction math shared by the cells and the stacked modules.

    A "direction" is one (layer, direction) of a stack, or the whole cell; its tensors carry a
    suffix (``_l0``, ``_l1_reverse``, or ``""`` for a cell), named as in torch.
    """
    # The fast paths (the cells' one-step ops; a stack's fused recurrence). Set it to False (on
    # the class or an instance) to run the readable terms and loop instead.
    use_fused = True
    # torch's cells take input_size and hidden_size 0 (empty states); its modules refuse them
    _zero_sizes = False
    recurrent_gain = None           # gain_hh's initial value when not gain_init
    # while a forward with DropConnect runs: {"weight_hh<suffix>": W_hh * M}, read by ``_get``
    # before the Parameters, so every path receives the masked weight
    _masked = None

    def __init__(self, mode: str, input_size: int, hidden_size: int, *, bias: bool = True,
                 norm: str = "layer", gain_init: float | None = None,
                 recurrent_gain: float | None = None, eps: float = 1e-5,
                 momentum: float = 0.1, max_length: int = 100, nonlinearity: str = "tanh",
                 proj_size: int = 0, forget_bias: float = 0.0, recurrent_dropout: float = 0.0,
                 zoneout: float | tuple[float, float] = 0.0, dropconnect: float = 0.0,
                 device=None, dtype=None) -> None:
        super().__init__()
        who = type(self).__name__
        rates = check_rates(who, mode, recurrent_dropout, zoneout, dropconnect,
                            error_type=RNNTypeError)
        check_choice(norm, RNN_NORMS, "norm")
        check_rnn_args(who, mode, norm, nonlinearity, self._zero_sizes, input_size=input_size,
                       hidden_size=hidden_size, max_length=max_length, proj_size=proj_size,
                       eps=eps, momentum=momentum, gain_init=gain_init,
                       recurrent_gain=recurrent_gain, gains=NORM_KINDS[norm].gains,
                       forget_bias=forget_bias, bias=bias)
        self.mode, self.input_size, self.hidden_size = mode, input_size, hidden_size
        self.bias, self.proj_size, self.forget_bias = bias, proj_size, float(forget_bias)
        self.norm, self.eps, self.momentum, self.max_length = norm, eps, momentum, max_length
        # what norm= means for this module, resolved once (the only look-up of the string)
        self._kind = kind = NORM_KINDS[norm]
        self.gain_init = kind.default_gain if gain_init is None else float(gain_init)
        # gain_hh's initial value (None: gain_init), docs/rnn.md "Long sequences"
        self.recurrent_gain = None if recurrent_gain is None else float(recurrent_gain)
        self.nonlinearity = nonlinearity
        if any(rates[:1] + rates[2:]):     # the defaults stay the class's (pickles, repr)
            self._store_rates(rates)
        self._factory = {"device": device, "dtype": dtype}
        if kind.running_stats:
            self.register_buffer("num_batches_tracked",
                                 torch.zeros(max_length, dtype=torch.long, device=device))

    def __setstate__(self, state: dict) -> None:
        if "_kind" not in state and "norm" in state:   # pickled before the kind was kept
            state["_kind"] = NORM_KINDS[state["norm"]]
        super().__setstate__(state)

    # ---- registration ----------------------------------------------------------------------
    def _add_direction(self, suffix: str, input_size: int) -> None:
        G, H = GATES[self.mode] * self.hidden_size, self.hidden_size
        f = self._factory

        def param(name, *shape):
            self.register_parameter(name + suffix, nn.Parameter(torch.empty(*shape, **f)))

        param("weight_ih", G, input_size)
        param("weight_hh", G, self.proj_size or H)
        if self.bias:
            param("bias_ih", G)
            param("bias_hh", G)
        if self.proj_size:
            param("weight_hr", self.proj_size, H)   # h_t = W_hr (o * tanh(...)), as torch
        if self._kind.gains:
            if self.mode == "RNN":
                param("gain", H)                 # one LN over the sum (eq. 4)
            else:
                param("gain_ih", G)
                param("gain_hh", G)
            if self.mode == "LSTM":
                param("gain_c", H)
                if self.bias:
                    param("bias_c", H)
        if self._kind.running_stats:
            terms = {"RNN": (("", H),), "GRU": (("_ih", G), ("_hh", G)),
                     "LSTM": (("_ih", G), ("_hh", G), ("_c", H))}[self.mode]
            for term, size in terms:
                self.register_buffer(f"running_mean{term}{suffix}",
                                     torch.zeros(self.max_length, size, **f))
                self.register_buffer(f"running_var{term}{suffix}",
                                     torch.ones(self.max_length, size, **f))

    def reset_parameters(self) -> None:
        """torch's initialisation, U(-1/sqrt(H), 1/sqrt(H)), for the weights (and, with
        norm="none", the biases). Normalized layers: gains ``gain_init``, biases 0, as in the
        authors' code (no forget-gate bias). Then an LSTM's ``forget_bias`` is added to the
        forget-gate slice of every ``bias_ih`` (so with a norm the forget gate's total bias is
        exactly ``forget_bias``)."""
        bound = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size else 0.0   # as torch
        H = self.hidden_size
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.startswith("gain_hh") and self.recurrent_gain is not None:
                    p.fill_(self.recurrent_gain)
                elif name.startswith("gain"):
                    p.fill_(self.gain_init)
                elif name.startswith("bias") and self._kind.gains:
                    p.zero_()
                else:
                    p.uniform_(-bound, bound)
            if self.forget_bias:
                for name, p in self.named_parameters():
                    if name.startswith("bias_ih"):
                        p[H:2 * H] += self.forget_bias      # torch's gate order i, f, g, o
        self.reset_running_stats()

    def reset_running_stats(self) -> None:
        if not self._kind.running_stats:
            return
        for name, buf in self.named_buffers():
            if name.startswith("running_mean"):
                buf.zero_()
            elif name.startswith("running_var"):
                buf.fill_(1)
        self.num_batches_tracked.zero_()

    def flatten_parameters(self) -> None:
        """No-op, for code written for torch.nn.RNNBase (cuDNN weight packing does not apply)."""

    # ---- torch's own module, for norm="none" ------------------------------------------------
    def _torch_module(self) -> nn.Module:
        raise NotImplementedError

    def to_torch(self) -> nn.Module:
        """The torch.nn module (LSTM, GRU, RNN or their cells) that computes what this
        ``norm="none"`` module computes, holding the *same* Parameter objects (training one
        trains the other). Other norms have no torch equivalent and raise ValueError."""
        if not self._kind.torch_twin:
            raise ValueError(f"{type(self).__name__}(norm={self.norm!r}) has no torch.nn "
                             f"equivalent; to_torch() needs norm='none'. Build it with "
                             f"norm='none' (from_torch copies torch's weights) to get one.")
        used = [f"{n}={getattr(self, n)!r}" for n in _reg.NAMES if getattr(self, n)]
        if used:
            raise ValueError(f"{type(self).__name__}(norm='none', {', '.join(used)}) has no "
                             f"torch.nn equivalent: torch's module has no recurrent dropout, "
                             f"zoneout or DropConnect, so to_torch() would compute another "
                             f"function. Build the module with those rates at 0 and load this "
                             f"one's state_dict into it, then call to_torch() on that.")
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")      # torch's dropout-with-one-layer warning, again
            twin = self._torch_module()
        for name, p in self.named_parameters():
            setattr(twin, name, p)               # RNNBase.__setattr__ refreshes _flat_weights
        return twin.train(self.training)

    def __prepare_scriptable__(self):
        """torch.jit.script: norm="none" scripts as torch's own module (``to_torch()``, same
        Parameters); the normalized recurrences are Python loops TorchScript cannot compile."""
        if self._kind.torch_twin:
            return self.to_torch()
        raise RuntimeError(
            f"torch.jit.script cannot compile {type(self).__name__}(norm={self.norm!r}): its "
            f"time loop and normalizations are Python code. Use torch.jit.trace(module, "
            f"example_inputs) instead (the trace records the loop for the example's sequence "
            f"length, see docs/rnn.md), or torch.compile / torch.export; norm='none' scripts as "
            f"torch.nn.{self.mode}.")

    # ---- the math of one direction -----------------------------------------------------------
    def _get(self, name: str, suffix: str) -> torch.Tensor | None:
        # the Parameter dict first: 20x cheaper than nn.Module.__getattr__, which a step calls
        # ten times (a tensor set in a Parameter's place, as weight drop does, is found after it)
        key = name + suffix
        if self._masked is not None:             # DropConnect's masked W_hh, during a forward
            w = self._masked.get(key)
            if w is not None:
                return w
        p = self._parameters.get(key)
        return p if p is not None else getattr(self, key, None)

    def _terms(self, suffix: str, batch_sizes: torch.Tensor | None = None) -> dict[str, Term]:
        """The normalized terms of one direction for this forward call."""
        H, who = self.hidden_size, f"{type(self).__name__}(norm={self.norm!r})"
        kind, g = self._kind, lambda name: self._get(name, suffix)  # noqa: E731
        common = {"eps": self.eps, "training": self.training, "momentum": self.momentum,
                  "batch_sizes": batch_sizes, "who": who, "fused": self.use_fused}
        if kind.running_stats and (not self.training or (
                batch_sizes is not None and int(torch.as_tensor(batch_sizes).min()) < 2)):
            # Eval (or a training step with one active example) reads the running statistics.
            common["last_slot"] = last_trained_slot(self.num_batches_tracked)
        run = lambda term: ((g("running_mean" + term), g("running_var" + term))  # noqa: E731
                            if kind.running_stats else None)
        if self.mode == "RNN":
            bias = None if not self.bias else g("bias_ih") + g("bias_hh")
            return {"a": kind.term((H,), g("gain"), bias, running=run(""), **common)}
        groups = gate_groups(self.mode, H)
        terms = {"ih": kind.term(groups, g("gain_ih"), g("bias_ih"), running=run("_ih"),
                                 **common),
                 "hh": kind.term(groups, g("gain_hh"), g("bias_hh"), running=run("_hh"),
                                 **common)}
        if self.mode == "LSTM":
            terms["c"] = kind.term((H,), g("gain_c"), g("bias_c"), running=run("_c"), **common)
        return terms

    def _input_term(self, x: torch.Tensor, suffix: str, terms: dict[str, Term],
                    time_step: int = 0) -> torch.Tensor:
        """W_x x for every step at once, normalized (LSTM, GRU); for the RNN the normalization
        acts on the sum with W_h h, so only W_x x. x: (T, B, I), or (B, I) at step time_step
        -> (..., G)."""
        xw = F.linear(x, self._get("weight_ih", suffix))
        if self.mode == "RNN":
            return xw
        return terms["ih"].all_steps(xw) if x.dim() == 3 else terms["ih"](xw, time_step)

    def _step_fn(self, suffix: str, terms: dict[str, Term]) -> StepFn:
        """step(xg_t, state, t, h_mask=None) -> new state (h_t first) for one direction;
        ``h_mask`` (B, P): recurrent dropout, h_{t-1} * h_mask enters W_hh (``run_direction``
        passes the running rows)."""
        w_hh = self._get("weight_hh", suffix)
        if self.mode == "LSTM":
            w_hr = self._get("weight_hr", suffix)
            return lambda xg, s, t, h_mask=None: lstm_step(xg, s[0], s[1], w_hh, terms["hh"],
                                                           terms["c"], t, w_hr, h_mask)
        if self.mode == "GRU":
            return lambda xg, s, t, h_mask=None: gru_step(xg, s[0], w_hh, terms["hh"], t,
                                                          h_mask)
        act = NONLINEARITIES[self.nonlinearity]
        return lambda xg, s, t, h_mask=None: rnn_step(xg, s[0], w_hh, terms["a"], act, t,
                                                      h_mask)

    def _step_once(self, suffix: str, x: torch.Tensor, state: tuple,
                   h_mask: torch.Tensor | None = None) -> tuple | None:
        """One step of one direction on the fast path: x (B, I), state of (B, H) -> new state,
        h_t first; the same equations as ``_step_fn`` in fewer ops, through ``ops.cell``'s
        entries (which choose, once per call, the C step, the reference step in few torch ops,
        or torch's own cell op for norm="none"). None where that path does not run (``use_fused``
        off, batch norm's running statistics, or autocast, whose casts the readable step takes):
        the caller takes the readable step. ``h_mask``: recurrent dropout of a layer-normalized
        GRU (the LSTM and RNN take h_{t-1} * h_mask as their state instead: their h_{t-1} only
        enters W_hh h_{t-1})."""
        if not self.use_fused or self._kind.running_stats:
            return None
        g = lambda name: self._get(name, suffix)  # noqa: E731
        w_ih, w_hh, b_ih, b_hh = g("weight_ih"), g("weight_hh"), g("bias_ih"), g("bias_hh")
        if self._kind.torch_twin:
            return ops.torch_cell(self.mode, self.nonlinearity, x, state, w_ih, w_hh, b_ih, b_hh)
        if self.mode == "LSTM":
            return ops.lstm_cell(x, state[0], state[1], w_ih, w_hh, g("gain_ih"), b_ih,
                                 g("gain_hh"), b_hh, g("gain_c"), g("bias_c"), self.eps)
        if self.mode == "GRU":
            h = ops.gru_cell(x, state[0], w_ih, w_hh, g("gain_ih"), b_ih, g("gain_hh"), b_hh,
                             self.eps, h_mask)
        else:
            bias = None if b_ih is None else b_ih + b_hh
            h = ops.rnn_cell(x, state[0], w_ih, w_hh, g("gain"), bias, self.eps,
                             self.nonlinearity)
        return None if h is None else (h,)

    def _count_steps(self, steps: Sequence[int]) -> None:
        """Record that the running statistics of these steps were updated (norm="batch")."""
        if self._kind.running_stats and self.training:
            slots = [t for t in steps if t < self.max_length]
            if slots:
                self.num_batches_tracked[slots] += 1

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}, norm={self.norm!r}"
        if self._kind.gains:
            s += f", gain_init={self.gain_init}"
        if self.recurrent_gain is not None:
            s += f", recurrent_gain={self.recurrent_gain}"
        if not self.bias:
            s += ", bias=False"
        if self.mode == "RNN" and self.nonlinearity != "tanh":
            s += f", nonlinearity={self.nonlinearity!r}"
        if self.forget_bias:
            s += f", forget_bias={self.forget_bias}"
        if self._kind.running_stats:
            s += f", max_length={self.max_length}, momentum={self.momentum}"
        if self.recurrent_dropout:
            s += f", recurrent_dropout={self.recurrent_dropout}"
        if self._z_h or self._z_c:
            s += f", zoneout={_reg.zoneout_repr(self.zoneout)}"
        if self.dropconnect:
            s += f", dropconnect={self.dropconnect}"
        return s


def _copy_from_torch(ours: RecurrentBase, theirs: nn.Module) -> RecurrentBase:
    """Copy torch's weight_ih/weight_hh/bias_ih/bias_hh tensors (same names and shapes)."""
    with torch.no_grad():
        for name, p in theirs.named_parameters():
            getattr(ours, name).copy_(p)
    return ours


class TorchLayout:
    """torch's weight layout for the stacked modules, mixed into ``layernorm.rnn.modules._Stack``
    (reads its configuration and Parameters): the weight lists torch.nn.RNNBase exposes
    (``_all_weights``, ``_flat_weights``, ``all_weights``: weight-drop / AWD-LSTM code reads them),
    cuDNN's flat weight buffer, the equivalent torch module and, for ``norm="none"``, torch's own
    fused RNN op on these Parameters."""

    @staticmethod
    def _suffix(layer: int, direction: int) -> str:
        """The names' suffix of one layer and direction, as torch's: ``_l0``, ``_l1_reverse``."""
        return f"_l{layer}" + ("_reverse" if direction else "")

    @property
    def _all_weights(self) -> list[list[str]]:
        """Parameter names per (layer, direction): torch's first (weight_ih, weight_hh, bias_ih,
        bias_hh, weight_hr, as the configuration has them), then the normalization's gains and
        biases. From the configuration, so a name whose Parameter was deleted (weight drop)
        keeps its place."""
        torch_names = ["weight_ih", "weight_hh"] + (["bias_ih", "bias_hh"] if self.bias else []) \
            + (["weight_hr"] if self.proj_size else [])
        extra = [] if not self._kind.gains else ["gain"] if self.mode == "RNN" else \
            ["gain_ih", "gain_hh"] + (["gain_c"] + (["bias_c"] if self.bias else [])
                                      if self.mode == "LSTM" else [])
        return [[n + self._suffix(layer, d) for n in torch_names + extra]
                for layer in range(self.num_layers) for d in range(self.num_directions)]

    @property
    def _flat_weights_names(self) -> list[str]:
        """torch's flat list, exactly: the tensors torch's op takes (every layer and direction,
        torch's order), so code that counts or walks torch's weights (``weight_norm``'s tests,
        weight drop) sees what it sees on torch's module. The normalization's gains and biases
        are in ``_norm_weights_names``."""
        k = (4 if self.bias else 2) + (1 if self.proj_size else 0)
        return [n for names in self._all_weights for n in names[:k]]

    @property
    def _norm_weights_names(self) -> list[str]:
        """The normalization's Parameters (``gain_*``, ``bias_c``) in layer order: what this
        module has beyond torch's ``_flat_weights_names`` (empty for norm="none")."""
        k = (4 if self.bias else 2) + (1 if self.proj_size else 0)
        return [n for names in self._all_weights for n in names[k:]]

    @property
    def _flat_weights(self) -> list[torch.Tensor | None]:
        """The tensors of ``_flat_weights_names`` (None for one deleted and not yet set, as
        torch)."""
        return [getattr(self, n, None) for n in self._flat_weights_names]

    @property
    def _norm_weights(self) -> list[torch.Tensor | None]:
        """The tensors of ``_norm_weights_names``."""
        return [getattr(self, n, None) for n in self._norm_weights_names]

    @property
    def all_weights(self) -> list[list[torch.Tensor]]:
        return [[getattr(self, n) for n in names] for names in self._all_weights]

    def flatten_parameters(self) -> None:
        """norm="none" on a CUDA device: put the weights in one cuDNN buffer, as
        torch.nn.RNNBase.flatten_parameters does (called after ``.to()`` / ``.cuda()`` too), so
        torch's op runs without compacting them at every call. A no-op otherwise."""
        weights = self._flat_weights
        if not self._kind.torch_twin or not weights or not all(
                isinstance(w, torch.Tensor) and w.is_cuda and w.dtype == weights[0].dtype and
                torch.backends.cudnn.is_acceptable(w) for w in weights):
            return
        if len({w.data_ptr() for w in weights}) != len(weights):
            return                                   # aliased weights: torch's copying path
        import torch.backends.cudnn.rnn as cudnn_rnn
        mode = self.mode if self.mode != "RNN" else "RNN_" + self.nonlinearity.upper()
        with torch.cuda.device_of(weights[0]), torch.no_grad():
            if torch._use_cudnn_rnn_flatten_weight():
                torch._cudnn_rnn_flatten_weight(
                    weights, (4 if self.bias else 2) + (1 if self.proj_size else 0),
                    self.input_size, cudnn_rnn.get_cudnn_mode(mode), self.hidden_size,
                    self.proj_size, self.num_layers, self.batch_first, self.bidirectional)

    def _apply(self, fn, recurse=True):
        out = super()._apply(fn, recurse)
        self.flatten_parameters()
        return out

    def _torch_module(self) -> nn.Module:
        cls = {"LSTM": nn.LSTM, "GRU": nn.GRU, "RNN": nn.RNN}[self.mode]
        kw = {"nonlinearity": self.nonlinearity} if self.mode == "RNN" else {}
        if self.proj_size:
            kw["proj_size"] = self.proj_size
        return cls(self.input_size, self.hidden_size, num_layers=self.num_layers, bias=self.bias,
                   batch_first=self.batch_first, dropout=self.dropout,
                   bidirectional=self.bidirectional, device="meta", **kw)

    def _torch_forward(self, input, hx: tuple[torch.Tensor, ...], packed: bool):
        """norm="none": torch's own fused op (what torch.nn.LSTM / GRU / RNN call), on this
        module's Parameters in torch's flat order: the same numbers and the same speed."""
        if self.mode == "LSTM":
            fn, state = _VF.lstm, hx
        else:
            fn = {"GRU": _VF.gru, "tanh": _VF.rnn_tanh, "relu": _VF.rnn_relu}[
                "GRU" if self.mode == "GRU" else self.nonlinearity]
            state = hx[0]
        weights = self._flat_weights
        if self._masked is not None:                # DropConnect: W_hh * M in torch's list
            weights = [self._masked.get(n, w) for n, w in zip(self._flat_weights_names, weights)]
        args = (weights, self.bias, self.num_layers, self.dropout, self.training,
                self.bidirectional)
        if packed:
            result = fn(input.data, input.batch_sizes, state, *args)
            output = PackedSequence(result[0], input.batch_sizes, input.sorted_indices,
                                    input.unsorted_indices)
        else:
            result = fn(input, state, *args, self.batch_first)
            output = result[0]
        return output, tuple(result[1:])
