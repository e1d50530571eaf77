"""Input checks shared by every public function: each error says what was expected, what was
received, and what to do."""
from __future__ import annotations

import difflib
import inspect
import math
import numbers

import torch


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


def check_eps(eps, who: str) -> float:
    """eps >= 0 and finite (added to the variance inside the square root). eps = 0 is allowed: the
    exact normalization, where a constant row divides 0 by 0 (NaN), as in torch."""
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real):
        raise TypeError(f"{who} expected eps to be a float >= 0, received {type(eps).__name__} "
                        f"{eps!r}. Pass a number, e.g. eps=1e-5.")
    if not (math.isfinite(eps) and eps >= 0):
        raise ValueError(f"{who} expected eps to be a finite float >= 0 (it is added to the "
                         f"variance inside the square root), received eps={eps!r}. Use a small "
                         f"positive value such as eps=1e-5; a negative eps gives NaN on constant "
                         f"rows.")
    return float(eps)


def check_momentum(momentum, who: str) -> None:
    """Running-average momentum in [0, 1], or None (cumulative average), as torch's BatchNorm."""
    if momentum is None:
        return
    if isinstance(momentum, bool) or not isinstance(momentum, numbers.Real):
        raise TypeError(f"{who} expected momentum to be a float in [0, 1] or None, received "
                        f"{type(momentum).__name__} {momentum!r}. Pass e.g. momentum=0.1.")
    if not 0 <= momentum <= 1:
        raise ValueError(f"{who} expected momentum in [0, 1] (the weight of the new batch in "
                         f"the running average), received momentum={momentum!r}. Use e.g. "
                         f"momentum=0.1, or momentum=None for a cumulative average.")


def check_size(n, who: str, what: str = "num_features") -> int:
    """A positive int size (a number of features or channels)."""
    if isinstance(n, bool) or not isinstance(n, numbers.Integral):
        raise TypeError(f"{who} expected {what} to be a positive int, received "
                        f"{type(n).__name__} {n!r}. Pass the number of features, e.g. {what}=256.")
    if n < 1:
        raise ShapeError(f"{who} expected {what} to be a positive int, received {what}={n}. "
                         f"Pass the number of features of the input (its size at the normalized "
                         f"dim).")
    return int(n)


def check_param_shape(p: torch.Tensor | None, shape: tuple[int, ...], name: str, who: str) -> None:
    """A gain or bias of exactly ``shape`` (or None)."""
    if p is not None and tuple(p.shape) != tuple(shape):
        raise ShapeError(f"{who} expected {name} of shape {tuple(shape)}, received {name} of shape "
                         f"{tuple(p.shape)}. Pass one value per normalized feature, e.g. "
                         f"torch.ones({', '.join(map(str, shape))}), or {name}=None.")


def check_kwargs(kwargs: dict, cls: type, who: str) -> None:
    """Keyword arguments that ``cls(...)`` accepts; a typo gets the closest valid name."""
    valid = [p for p in inspect.signature(cls).parameters if p not in ("self", "args", "kwargs")]
    for key in kwargs:
        if key not in valid:
            close = difflib.get_close_matches(key, valid, n=1)
            hint = f"Did you mean {close[0]!r}?" if close else "Remove it."
            raise TypeError(f"{who} got an unexpected keyword argument {key!r} for "
                            f"{cls.__name__}; expected one of {sorted(valid)}. {hint}")
