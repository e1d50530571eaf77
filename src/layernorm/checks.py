"""Input checks shared by every public function: each error says what was expected, what was
received, and what to do. The norms' checks first, then the recurrent modules' (``layernorm.rnn``:
their errors, arguments, inputs and states, raising the exception types torch raises for the
same mistakes). Public: the paper's reproduction checks its own arguments with the same helpers
(``check_choice``, ``check_float``, ``check_nonempty``)."""
from __future__ import annotations

import difflib
import inspect
import math
import numbers

import torch
from torch.nn.utils.rnn import PackedSequence

from .recurrence.lengths import checked


class ShapeError(ValueError, RuntimeError):
    """A tensor or size that does not have the shape asked for. It is a ValueError and also the
    RuntimeError torch raises for the same mistake, so callers may catch either."""


class DTypeError(TypeError, RuntimeError):
    """A tensor of a dtype that cannot be normalized. A TypeError, and also the RuntimeError torch
    raises for the same mistake (its NotImplementedError is one too)."""


def check_float(x: torch.Tensor, who: str) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{who} expected a torch.Tensor, received {type(x).__name__}. "
                        f"Convert it first, e.g. torch.as_tensor(x, dtype=torch.float32).")
    if not torch.is_floating_point(x):
        raise DTypeError(f"{who} expected a floating-point tensor (float16, bfloat16, float32 or "
                         f"float64), received dtype {x.dtype}. Convert it first, e.g. x.float().")


def check_nonempty(x: torch.Tensor, who: str) -> None:
    if x.numel() == 0:
        raise ValueError(f"{who} expected at least one example with at least one element, received "
                         f"an empty tensor of shape {tuple(x.shape)}. Skip empty batches before "
                         f"calling it (e.g. drop_last=True in the DataLoader, or filter them out).")


def check_trailing_shape(x: torch.Tensor, shape: tuple[int, ...], who: str) -> None:
    k = len(shape)
    if x.dim() < k or tuple(x.shape[x.dim() - k:]) != tuple(shape):
        got = tuple(x.shape[max(x.dim() - k, 0):])
        raise ShapeError(f"{who} expected an input whose last {k} dim(s) are {tuple(shape)} "
                         f"(normalized_shape), received shape {tuple(x.shape)} (last dims {got}). "
                         f"Build the layer with normalized_shape={got} or reshape the input.")


def check_channels(x: torch.Tensor, channels: int, who: str) -> None:
    if x.dim() < 2 or x.shape[1] != channels:
        got = x.shape[1] if x.dim() >= 2 else None
        raise ShapeError(f"{who} expected an input of shape (N, {channels}, ...) with the channel / "
                         f"feature dimension at dim 1, received shape {tuple(x.shape)} "
                         f"({got} channels). Build the layer with num_features={got} or "
                         f"transpose the input so that features are at dim 1.")


def check_choice(name: str, choices, what: str) -> None:
    if name not in choices:
        raise ValueError(f"unknown {what} {name!r}; expected one of {sorted(choices)}. "
                         f"Pick one of those names.")


def check_eps(eps, who: str, *, positive: bool = False, type_error: type = TypeError) -> float:
    """eps finite and >= 0 (added to the variance inside the square root), or > 0 where
    ``positive`` (the recurrent modules). eps = 0 is allowed otherwise: the exact normalization,
    where a constant row divides 0 by 0 (NaN), as in torch. A value that is not a number raises
    ``type_error``."""
    bound = "> 0" if positive else ">= 0"
    if not real_number(eps):
        raise type_error(f"{who} expected eps to be a finite number {bound}, received "
                         f"{type(eps).__name__} {eps!r}. Pass a number, e.g. eps=1e-5.")
    if not (math.isfinite(eps) and (eps > 0 if positive else eps >= 0)):
        raise ValueError(f"{who} expected eps to be a finite number {bound} (it is added to the "
                         f"variance inside the square root), received eps={eps!r}. Use a small "
                         f"positive value such as eps=1e-5; a negative eps gives NaN on constant "
                         f"rows.")
    return float(eps)


def check_momentum(momentum, who: str, *, running: bool = False,
                   type_error: type = TypeError) -> None:
    """Running-average momentum in [0, 1], or None (cumulative average), as torch's BatchNorm;
    in (0, 1] and not None where ``running`` (the recurrent modules' running statistics). A
    value that is not a number raises ``type_error``."""
    if momentum is None and not running:
        return
    bound, fix = ("(0, 1]", "momentum=0.1") if running else \
        ("[0, 1]", "momentum=0.1, or momentum=None for a cumulative average")
    if not real_number(momentum):
        raise type_error(f"{who} expected momentum to be a float in {bound}"
                         f"{'' if running else ' or None'}, received {type(momentum).__name__} "
                         f"{momentum!r}. Pass e.g. {fix}.")
    if not (0 < momentum <= 1 if running else 0 <= momentum <= 1):
        raise ValueError(f"{who} expected momentum in {bound} (the weight of the new batch in "
                         f"the running average), received momentum={momentum!r}. Use e.g. "
                         f"{fix}.")


def check_size(n, who: str, what: str = "num_features", *, zero_ok: bool = False,
               type_error: type = TypeError, value_error: type = ShapeError,
               torch_says: bool = False) -> int:
    """A size: an int, positive (a number of features, channels or units), or >= 0 where
    ``zero_ok``. ``torch_says``: the message starts with torch's own phrase for the mistake (the
    recurrent modules: "should be of type int", "must be greater than zero")."""
    low = 0 if zero_ok else 1
    want = "a positive int" if low else "an int >= 0"
    if isinstance(n, bool) or not isinstance(n, numbers.Integral):
        says = f"{what} should be of type int, got: {type(n).__name__}: " if torch_says else ""
        raise type_error(f"{says}{who} expected {what} to be {want}, received "
                         f"{type(n).__name__} {n!r}. Pass e.g. {what}=16.")
    if n < low:
        says = (f"{what} must be greater than {'' if low else 'or equal to '}zero: "
                if torch_says else "")
        raise value_error(f"{says}{who} expected {what} to be {want}, received {what}={n}. "
                          f"Pass e.g. {what}=16.")
    return int(n)


def check_param_shape(p: torch.Tensor | None, shape: tuple[int, ...], name: str, who: str) -> None:
    """A gain or bias of exactly ``shape`` (or None)."""
    if p is not None and tuple(p.shape) != tuple(shape):
        raise ShapeError(f"{who} expected {name} of shape {tuple(shape)}, received {name} of shape "
                         f"{tuple(p.shape)}. Pass one value per normalized feature, e.g. "
                         f"torch.ones({', '.join(map(str, shape))}), or {name}=None.")


def check_kwargs(kwargs: dict, cls: type, who: str) -> None:
    """Keyword arguments that ``cls(...)`` accepts (``check_keywords`` with its signature's)."""
    valid = [p for p in inspect.signature(cls).parameters if p not in ("self", "args", "kwargs")]
    check_keywords(who, {k: v for k, v in kwargs.items() if k not in valid}, valid,
                   owner=cls.__name__)


def check_keywords(who: str, unknown: dict, valid, owner: str | None = None) -> None:
    """A TypeError naming the first misspelt keyword of ``unknown`` (those not in ``valid``;
    ``owner``: the class they were meant for), the closest valid one, and the valid ones."""
    if not unknown:
        return
    name = next(iter(unknown))
    close = difflib.get_close_matches(name, list(valid), n=1)
    hint = f"Did you mean {close[0]!r}?" if close else "Remove it."
    takes = (f"{who} expected one of: {', '.join(sorted(valid))}." if valid else
             f"{owner or who} takes no keyword arguments.")
    raise TypeError(f"{who} got an unexpected keyword argument {name!r}"
                    f"{f' for {owner}' if owner else ''}. {hint} {takes}")


# ---- the recurrent modules and cells (layernorm.rnn)

def autocast_on(x: torch.Tensor) -> bool:
    """Whether autocast is on for x's device (False for a device autocast does not know, such as
    ``meta``)."""
    try:
        return torch.is_autocast_enabled("cpu" if x.is_cpu else x.device.type)
    except TypeError:                                  # torch < 2.4: no device argument
        return torch.is_autocast_enabled() or torch.is_autocast_cpu_enabled()
    except RuntimeError:                               # "unknown device type for autocast"
        return False


class RNNInputError(ValueError, RuntimeError):
    """A wrong shape, dtype or state given to a layernorm RNN. torch raises ValueError for some of
    these mistakes and RuntimeError for others: this is both, so code written for either catches
    it."""


class RNNTypeError(TypeError, ValueError, RuntimeError):
    """An argument of the wrong type (e.g. ``dropout="0.1"``, an integer input, a PackedSequence
    with non-integer batch sizes): a TypeError that is also what torch raises for it."""


class RNNArgumentError(ValueError, RuntimeError):
    """A constructor argument torch refuses with a ValueError in the stacked modules and with a
    RuntimeError at the first call in the cells (an unknown ``nonlinearity``): both, so code
    written for either catches it."""


def real_number(value) -> bool:
    """A real number that is not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def check_sizes(who: str, zero_ok: bool, **sizes) -> None:
    """input_size / hidden_size / max_length: ``check_size`` with torch's phrases and exception
    types (its modules: "must be greater than zero"; its cells take input_size and hidden_size 0,
    ``zero_ok``)."""
    for name, value in sizes.items():
        check_size(value, who, name, zero_ok=zero_ok and name != "max_length",
                   type_error=RNNTypeError, value_error=ValueError, torch_says=True)


def check_nonlinearity(nonlinearity, who: str) -> None:
    """torch.nn.RNN's "Unknown nonlinearity" (a ValueError there, a RuntimeError from
    torch.nn.RNNCell's forward)."""
    if nonlinearity not in ("tanh", "relu"):
        raise RNNArgumentError(f"Unknown nonlinearity {nonlinearity!r}. Select from 'tanh' or "
                               f"'relu': {who} expected nonlinearity 'tanh' or 'relu', received "
                               f"{nonlinearity!r}. Pass one of those.")


def check_dtype(x: torch.Tensor, weight: torch.Tensor, who: str) -> None:
    """The input's dtype is the weights' (torch's check, with torch's phrase "does not match weight
    dtype"; skipped under autocast, as torch), and it is on the weights' device."""
    if not torch.is_floating_point(x):
        raise RNNTypeError(f"RNN input dtype ({x.dtype}) does not match weight dtype "
                           f"({weight.dtype}): {who} expected a floating-point input of dtype "
                           f"{weight.dtype} (the weights'), received dtype {x.dtype}. Convert it: "
                           f"input.to({weight.dtype}).")
    if x.dtype != weight.dtype and not autocast_on(x):
        raise RNNInputError(f"RNN input dtype ({x.dtype}) does not match weight dtype "
                            f"({weight.dtype}): {who} expected an input of dtype {weight.dtype} "
                            f"(its weights'), received dtype {x.dtype}. Convert the input: "
                            f"input.to({weight.dtype}), or the module: module.to({x.dtype}).")
    if x.device != weight.device:
        raise RNNInputError(f"Input and parameter tensors are not at the same device: {who} "
                            f"expected an input on its parameters' device {weight.device}, "
                            f"received one on {x.device}. Move the input: "
                            f"input.to({str(weight.device)!r}), or the module: "
                            f"module.to({str(x.device)!r}).")


def check_state_dtype(h: torch.Tensor, x: torch.Tensor, name: str, who: str) -> None:
    if h.dtype != x.dtype and not autocast_on(x):
        raise RNNInputError(f"{who} expected {name} of dtype {x.dtype} (the input's), received "
                            f"{h.dtype}. Convert it: {name}.to({x.dtype}).")
    if h.device != x.device:
        raise RNNInputError(f"Input and hidden tensors are not at the same device: {who} "
                            f"expected {name} on the input's device {x.device}, received it on "
                            f"{h.device}. Move it: {name}.to({str(x.device)!r}).")


def check_rnn_args(who: str, mode: str, norm: str, nonlinearity, zero_ok: bool, *, input_size,
                   hidden_size, max_length, proj_size, eps, momentum, gain_init, recurrent_gain,
                   gains: bool, forget_bias, bias: bool) -> None:
    """The constructor arguments of the recurrent modules and cells (``layernorm.rnn``), after
    ``norm`` (``gains``: whether that norm has gains). Each error is the one torch raises for the
    same argument, where torch checks it."""
    check_nonlinearity(nonlinearity, who)
    if mode != "RNN" and nonlinearity != "tanh":
        raise ValueError(f"nonlinearity={nonlinearity!r} applies to RNN and RNNCell only, "
                         f"received it for {who}. Remove the argument.")
    check_sizes(who, zero_ok, input_size=input_size, hidden_size=hidden_size,
                max_length=max_length)
    if not isinstance(proj_size, int) or isinstance(proj_size, bool) or proj_size < 0:
        raise ValueError(f"proj_size should be a positive integer or zero to disable "
                         f"projections: {who} expected proj_size to be an int >= 0 (0: no "
                         f"projection), received {proj_size!r}. Pass e.g. proj_size=0.")
    if proj_size and mode != "LSTM":
        raise ValueError(f"proj_size argument is only supported for LSTM, not RNN or GRU: "
                         f"{who} expected no proj_size (a projection of the LSTM's h_t), "
                         f"received proj_size={proj_size}. Remove the argument.")
    if proj_size and proj_size >= hidden_size:
        raise ValueError(f"proj_size has to be smaller than hidden_size: {who} expected "
                         f"proj_size smaller than hidden_size={hidden_size}, received "
                         f"proj_size={proj_size}. Pass a smaller proj_size.")
    check_eps(eps, who, positive=True, type_error=ValueError)
    check_momentum(momentum, who, running=True, type_error=ValueError)
    if gain_init is not None and (not real_number(gain_init) or not math.isfinite(gain_init)):
        raise ValueError(f"{who} expected gain_init to be a finite number (the gains' initial "
                         f"value), received {gain_init!r}. Pass e.g. gain_init=1.0, or None "
                         f"for the default.")
    if recurrent_gain is not None:
        if not real_number(recurrent_gain) or not math.isfinite(recurrent_gain):
            raise ValueError(f"{who} expected recurrent_gain to be a finite number (the "
                             f"initial gain of the normalized recurrent term W_h h), received "
                             f"{recurrent_gain!r}. Pass e.g. recurrent_gain=0.5, or None for "
                             f"gain_init.")
        if mode == "RNN" or not gains:
            raise ValueError(f"recurrent_gain applies to an LSTM or GRU with norm='layer' or "
                             f"'batch' (the gain of the normalized W_h h), received it for "
                             f"{who}(norm={norm!r}). Remove it, or use gain_init.")
    if not real_number(forget_bias) or not math.isfinite(forget_bias):
        raise ValueError(f"{who} expected forget_bias to be a finite number, received "
                         f"{forget_bias!r}. Pass e.g. forget_bias=1.0.")
    if forget_bias and (mode != "LSTM" or not bias):
        raise ValueError(f"forget_bias applies to an LSTM with biases, received "
                         f"forget_bias={forget_bias} for {who}(bias={bias}). Remove it, or "
                         f"use an LSTM with bias=True.")


# the recurrent regularizers' keywords (``layernorm.rnn.regularizers``, docs/rnn.md)

def _rate(value, name: str, who: str, fix: str, error_type: type) -> float:
    """One rate: a real number (not a bool) in [0, 1)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise error_type(f"{name} should be a number in range [0, 1): {who} expected {name} to "
                         f"be a float in [0, 1), received {value!r} ({type(value).__name__}). "
                         f"{fix}")
    if not (math.isfinite(value) and 0 <= value < 1):
        raise ValueError(f"{name} should be a number in range [0, 1): {who} expected {name} in "
                         f"[0, 1) (the probability of dropping, or for zoneout of keeping the "
                         f"previous state; 1 would never update it), received {value!r}. {fix}")
    return float(value)


def check_rates(who: str, mode: str, recurrent_dropout, zoneout, dropconnect,
                error_type: type = TypeError) -> tuple[float, float | tuple[float, float],
                                                       float, float, float]:
    """Check the three keywords -> (recurrent_dropout, zoneout as stored, dropconnect, z_h, z_c).

    zoneout: one float (every state tensor), or for an LSTM / LSTMCell a pair (z_c, z_h); z_c is
    0 for a GRU / RNN (no cell state)."""
    p_rec = _rate(recurrent_dropout, "recurrent_dropout", who,
                  "Pass e.g. recurrent_dropout=0.25, or 0 for none.", error_type)
    p_w = _rate(dropconnect, "dropconnect", who, "Pass e.g. dropconnect=0.5, or 0 for none.",
                error_type)
    if isinstance(zoneout, (tuple, list)):
        if mode != "LSTM":
            raise ValueError(f"{who} expected zoneout to be one float (the rate of its one state "
                             f"h), received the pair {tuple(zoneout)!r}: a pair (z_c, z_h) "
                             f"applies to LSTM / LSTMCell, which have a cell state. Pass one "
                             f"float, e.g. zoneout=0.1.")
        if len(zoneout) != 2:
            raise ValueError(f"{who} expected zoneout as one float or a pair (z_c, z_h), "
                             f"received {len(zoneout)} values {tuple(zoneout)!r}. Pass e.g. "
                             f"zoneout=(0.5, 0.05), or one float for both.")
        fix = "Pass e.g. zoneout=(0.5, 0.05), or one float for both."
        z_c = _rate(zoneout[0], "zoneout[0] (z_c)", who, fix, error_type)
        z_h = _rate(zoneout[1], "zoneout[1] (z_h)", who, fix, error_type)
        stored: float | tuple[float, float] = (z_c, z_h)
    else:
        z_h = _rate(zoneout, "zoneout", who, "Pass e.g. zoneout=0.1, or 0 for none.", error_type)
        z_c = z_h if mode == "LSTM" else 0.0
        stored = z_h
    return p_rec, stored, p_w, z_h, z_c


# ---- the stacked modules' input and states

class InputChecks:
    """The stacked modules' checks of their input (a tensor or a PackedSequence) and of hx, mixed
    into ``layernorm.rnn.modules._Stack`` (reads its configuration): torch's exception types,
    messages naming what was expected, what was received and the fix."""

    def _check_input(self, x: torch.Tensor) -> None:
        """x: a tensor (T, B, I), (B, T, I) with batch_first, or unbatched (T, I)."""
        who = type(self).__name__
        layout = "(B, T, input_size)" if self.batch_first else "(T, B, input_size)"
        if not isinstance(x, torch.Tensor):
            raise RNNTypeError(f"{who} expected a tensor {layout} or a PackedSequence, received "
                               f"{type(x).__name__}.")
        if x.dim() not in (2, 3):
            raise RNNInputError(f"{who} expected a 3-D input {layout}, an unbatched 2-D input "
                                f"(T, input_size) or a PackedSequence, received a {x.dim()}-D "
                                f"tensor of shape {tuple(x.shape)}. Reshape it to one of those.")
        check_dtype(x, self.weight_ih_l0, who)
        if x.shape[-1] != self.input_size:
            raise RNNInputError(f"input.size(-1) must be equal to input_size. Expected "
                                f"{self.input_size}, got {x.shape[-1]}: "
                                f"{who} expected input of shape {layout} with input_size="
                                f"{self.input_size}, received shape {tuple(x.shape)} (last dim "
                                f"{x.shape[-1]}). Build it with input_size={x.shape[-1]} or fix "
                                f"the input's feature dimension.")
        T = x.shape[1] if self.batch_first and x.dim() == 3 else x.shape[0]
        if T == 0:
            raise RNNInputError(f"Expected sequence length to be larger than 0 in RNN: {who} "
                                f"expected a sequence length larger than 0, received input of "
                                f"shape {tuple(x.shape)}. Skip empty sequences.")

    def _check_packed(self, p: PackedSequence) -> None:
        """A PackedSequence as pack_padded_sequence / pack_sequence make it."""
        who = type(self).__name__
        bs = p.batch_sizes
        if not isinstance(bs, torch.Tensor) or bs.dtype != torch.int64 or bs.dim() != 1:
            got = (f"{bs.dtype} tensor of shape {tuple(bs.shape)}" if
                   isinstance(bs, torch.Tensor) else type(bs).__name__)
            raise RNNTypeError(f"{who} expected a PackedSequence whose batch_sizes is a 1-D int64 "
                               f"tensor, received {got}. Build it with "
                               f"torch.nn.utils.rnn.pack_padded_sequence(x, lengths) with integer "
                               f"lengths (not a mask).")
        if not isinstance(p.data, torch.Tensor) or p.data.dim() != 2:
            raise RNNInputError(f"{who} expected a PackedSequence with 2-D data (sum of lengths, "
                                f"input_size), received {getattr(p.data, 'shape', p.data)}.")
        check_dtype(p.data, self.weight_ih_l0, who)
        if p.data.shape[-1] != self.input_size:
            raise RNNInputError(f"input.size(-1) must be equal to input_size. Expected "
                                f"{self.input_size}, got {p.data.shape[-1]}: "
                                f"{who} expected a PackedSequence of input_size={self.input_size}, "
                                f"received data of shape {tuple(p.data.shape)}. Build it with "
                                f"input_size={p.data.shape[-1]} or fix the features.")
        sizes = bs.tolist()                      # a few ints: cheaper checked in Python
        if not sizes or sizes[-1] < 1 or sum(sizes) != p.data.shape[0] or \
                any(a < b for a, b in zip(sizes, sizes[1:])):
            raise RNNInputError(f"{who} expected a PackedSequence with positive, non-increasing "
                                f"batch_sizes summing to the {p.data.shape[0]} rows of data, "
                                f"received batch_sizes {sizes}. Build it with "
                                f"pack_padded_sequence / pack_sequence.")
        B = sizes[0]
        checked(bs, len(sizes), B, all(n == B for n in sizes))   # the operators skip it now
        s, u = p.sorted_indices, p.unsorted_indices
        if s is None and u is None:
            return
        ok = s is not None and u is not None and s.dim() == 1 and u.dim() == 1 and \
            s.dtype == torch.int64 and u.dtype == torch.int64 and len(s) == B and len(u) == B
        if ok and "meta" in (s.device.type, u.device.type):
            return                               # no values to check (shapes only)
        if ok:
            sl, ul = s.tolist(), u.tolist()
            ok = sorted(sl) == list(range(B)) and all(0 <= j < B and sl[j] == i
                                                       for i, j in enumerate(ul))
        if not ok:
            raise RNNInputError(f"{who} expected a PackedSequence whose sorted_indices is a "
                                f"permutation of range({B}) and unsorted_indices its inverse, "
                                f"received sorted_indices={None if s is None else s.tolist()}, "
                                f"unsorted_indices={None if u is None else u.tolist()}. Build it "
                                f"with pack_padded_sequence(..., enforce_sorted=False).")

    def _state_sizes(self) -> tuple[int, ...]:
        H = self.hidden_size
        return (self.proj_size or H, H) if self.mode == "LSTM" else (H,)

    def _check_hx(self, hx: tuple, batch: int | None, x: torch.Tensor) -> None:
        """hx: the states, each (L * D, batch, size), or (L * D, size) when batch is None
        (unbatched input)."""
        who, LD = type(self).__name__, self.num_layers * self.num_directions
        dims = [h.dim() for h in hx if isinstance(h, torch.Tensor)]
        want_dim = 2 if batch is None else 3
        if len(dims) == len(hx) and any(d != want_dim for d in dims):
            # torch's message for a state of the wrong rank, then ours
            kind = "unbatched 2-D" if batch is None else "batched 3-D"
            got = f"({', '.join(f'{d}-D' for d in dims)}) tensors" if len(hx) == 2 else \
                f"{dims[0]}-D tensor"
            torch_says = (f"For {kind} input, hx{' and cx' if len(hx) == 2 else ''} should also be "
                          f"{want_dim}-D but got {got}")
        else:
            torch_says = None
        for i, (h, size) in enumerate(zip(hx, self._state_sizes())):
            name = "hx" if len(hx) == 1 else f"hx[{i}]"
            want = (LD, size) if batch is None else (LD, batch, size)
            if not isinstance(h, torch.Tensor):
                raise RNNTypeError(f"{who} expected {name} to be a tensor of shape {want}, "
                                   f"received {type(h).__name__}. Pass hx=None for zeros.")
            if tuple(h.shape) != want:
                what = ("(num_layers * num_directions, hidden_size) for an unbatched 2-D input"
                        if batch is None else "(num_layers * num_directions, batch, " +
                        ("proj_size" if self.proj_size and i == 0 else "hidden_size") + ")")
                if torch_says is None:           # torch's phrase for a wrong size
                    # torch compares an unbatched input's state with a batch of one added
                    torch_want, got = (want, list(h.shape)) if batch is not None else \
                        ((LD, 1, size), [h.shape[0], 1, *h.shape[1:]])
                    torch_says = (f"Expected hidden{'' if len(hx) == 1 else f'[{i}]'} size "
                                  f"{torch_want}, got {got}")
                raise RNNInputError(f"{torch_says}: {who} expected {name} of shape {want} {what}, "
                                    f"received {tuple(h.shape)}. Pass hx=None for zeros, or a "
                                    f"state shaped like the one it returns.")
            check_state_dtype(h, x, name, who)
