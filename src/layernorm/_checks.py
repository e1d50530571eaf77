"""Input checks shared by every public function: each error says what was expected, what was
received, and what to do (STYLE.md habit 8)."""
from __future__ import annotations

import torch


def check_float(x: torch.Tensor, who: str) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{who} expected a torch.Tensor, received {type(x).__name__}. "
                        f"Convert it first, e.g. torch.as_tensor(x, dtype=torch.float32).")
    if not torch.is_floating_point(x):
        raise TypeError(f"{who} expected a floating-point tensor (float16, bfloat16, float32 or "
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
        raise ValueError(f"{who} expected an input whose last {k} dim(s) are {tuple(shape)} "
                         f"(normalized_shape), received shape {tuple(x.shape)} (last dims {got}). "
                         f"Build the layer with normalized_shape={got} or reshape the input.")


def check_channels(x: torch.Tensor, channels: int, who: str) -> None:
    if x.dim() < 2 or x.shape[1] != channels:
        got = x.shape[1] if x.dim() >= 2 else None
        raise ValueError(f"{who} expected an input of shape (N, {channels}, ...) with the channel / "
                         f"feature dimension at dim 1, received shape {tuple(x.shape)} "
                         f"({got} channels). Build the layer with num_features={got} or "
                         f"transpose the input so that features are at dim 1.")


def check_choice(name: str, choices, what: str) -> None:
    if name not in choices:
        raise ValueError(f"unknown {what} {name!r}; expected one of {sorted(choices)}. "
                         f"Pick one of those names.")
