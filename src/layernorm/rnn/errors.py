"""The errors of the recurrent modules and their checks of arguments, inputs and states: the
exception types torch raises for the same mistakes, each message naming what was expected, what
was received and the fix."""
from __future__ import annotations

import difflib
import numbers

import torch

from ..ops.native import autocast_on  # noqa: F401  (the modules and cells)


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


def _real(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def check_keywords(who: str, unknown: dict, valid) -> None:
    """A TypeError naming the misspelt keyword and the closest valid one."""
    if not unknown:
        return
    name = next(iter(unknown))
    close = difflib.get_close_matches(name, list(valid), n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    raise TypeError(f"{who} got an unexpected keyword argument {name!r}.{hint} Valid keywords: "
                    f"{', '.join(sorted(valid))}.")


def check_sizes(who: str, zero_ok: bool, **sizes) -> None:
    """input_size / hidden_size / max_length: ints, positive (torch's modules: "must be greater
    than zero"), or >= 0 for input_size and hidden_size where ``zero_ok`` (torch's cells run with
    0 units and return empty states)."""
    for name, value in sizes.items():
        low = 0 if zero_ok and name != "max_length" else 1
        what = "a positive int" if low else "an int >= 0"
        if not isinstance(value, int) or isinstance(value, bool):
            raise RNNTypeError(f"{name} should be of type int, got: {type(value).__name__}: {who} "
                               f"expected {name} to be {what}, received {value!r} "
                               f"({type(value).__name__}). Pass e.g. {name}=16.")
        if value < low:
            raise ValueError(f"{name} must be greater than {'or equal to ' if not low else ''}"
                             f"zero: {who} expected {name} to be {what}, received {value!r}. "
                             f"Pass e.g. {name}=16.")


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


def _no_forget_bias(who: str, kwargs: dict) -> None:
    if kwargs.get("forget_bias"):
        raise ValueError(f"{who}.from_torch copies the torch module's biases, so forget_bias="
                         f"{kwargs['forget_bias']} would be overwritten. Add it to the torch "
                         f"module's bias_ih[H:2H] before copying, or leave it out.")
