"""The errors of the recurrent modules and their checks of arguments, inputs and states: the
exception types torch raises for the same mistakes, each message naming what was expected, what
was received and the fix."""
from __future__ import annotations

import difflib
import numbers

import torch


class RNNInputError(ValueError, RuntimeError):
    """A wrong shape, dtype or state given to a layernorm RNN. torch raises ValueError for some of
    these mistakes and RuntimeError for others: this is both, so code written for either catches
    it."""


class RNNTypeError(TypeError, ValueError, RuntimeError):
    """An argument of the wrong type (e.g. ``dropout="0.1"``, an integer input, a PackedSequence
    with non-integer batch sizes): a TypeError that is also what torch raises for it."""


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


def autocast_on(x: torch.Tensor) -> bool:
    """Whether autocast is on for x's device."""
    try:
        return torch.is_autocast_enabled("cpu" if x.is_cpu else x.device.type)
    except TypeError:                                  # torch < 2.4: no device argument
        return torch.is_autocast_enabled() or torch.is_autocast_cpu_enabled()


def check_dtype(x: torch.Tensor, weight: torch.Tensor, who: str) -> None:
    """The input's dtype is the weights' (torch's check; skipped under autocast, as torch)."""
    if not torch.is_floating_point(x):
        raise RNNTypeError(f"{who} expected a floating-point input of dtype {weight.dtype} (the "
                           f"weights'), received dtype {x.dtype}. Convert it: "
                           f"input.to({weight.dtype}).")
    if x.dtype != weight.dtype and not autocast_on(x):
        raise RNNInputError(f"{who} received an input of dtype {x.dtype} but its weights are "
                            f"{weight.dtype}. Convert the input: input.to({weight.dtype}), or the "
                            f"module: module.to({x.dtype}).")


def check_state_dtype(h: torch.Tensor, x: torch.Tensor, name: str, who: str) -> None:
    if h.dtype != x.dtype and not autocast_on(x):
        raise RNNInputError(f"{who} expected {name} of dtype {x.dtype} (the input's), received "
                            f"{h.dtype}. Convert it: {name}.to({x.dtype}).")
    if h.device != x.device:
        raise RNNInputError(f"{who} expected {name} on the input's device {x.device}, received "
                            f"it on {h.device}. Move it: {name}.to({str(x.device)!r}).")


def _no_forget_bias(who: str, kwargs: dict) -> None:
    if kwargs.get("forget_bias"):
        raise ValueError(f"{who}.from_torch copies the torch module's biases, so forget_bias="
                         f"{kwargs['forget_bias']} would be overwritten. Add it to the torch "
                         f"module's bias_ih[H:2H] before copying, or leave it out.")
