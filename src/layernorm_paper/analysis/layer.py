"""The normalized layer the analysis measures, ``h = f(g * (a - mu) / sigma + b)`` with ``a = W x``.

Paper sections 5.1 and 5.2 (docs/paper.md sections 3 and 4). One definition shared by the
invariance table and the geometry measurements; each method only decides where ``mu`` and ``sigma``
come from:

    batch   mu, sigma^2 of each unit over the examples of the batch      functional.moments(a, (0,))
    layer   mu, sigma^2 of each example over the H units                 functional.moments(a, (-1,))
    rms     mu = 0, sigma^2 = mean(a^2) over the H units                 functional.moments(a, (-1,), center=False)
    weight  mu = 0, sigma^2 = ||w_i||^2 (a statistic of the weights)     no eps, as in weight_norm
    none    mu = 0, sigma = 1: the plain (generalized) linear model

The affine map after the statistics is ``functional.apply_moments`` (eps inside the square root,
variance clamped at 0) for every method. Weight norm is written as "statistics of W, then the same
affine map" rather than through ``torch.nn.utils.parametrizations.weight_norm`` because the exact
Fisher information (``geometry``) differentiates per output with ``torch.func.vmap``, for which
torch's ``_weight_norm`` backward has no batching rule (slow fallback + warning); the tests check
that both give the same layer.
"""
from __future__ import annotations

import contextlib
from typing import Callable, Iterator

import torch

from layernorm import functional as LF
from layernorm.checks import check_choice, check_float, check_nonempty
from layernorm.vocabulary import LABELS, NORMS

_TABLE1 = ("batch", "weight", "layer")   # the columns of the paper's Table 1, in its order
# Every norm of the project's table, Table 1's three first, then the others in the table's order.
METHODS = _TABLE1 + tuple(n for n in NORMS if n not in _TABLE1)
METHOD_NAMES = {m: LABELS[m] for m in METHODS}


def check_method(method: str) -> None:
    check_choice(method, METHODS, "normalization method")


def check_data(x: torch.Tensor, who: str, *, min_examples: int = 2) -> None:
    """Data for a layer: a non-empty (N, D) float tensor with at least ``min_examples`` rows."""
    check_float(x, who)
    check_nonempty(x, who)
    if x.dim() != 2 or x.shape[0] < min_examples:
        raise ValueError(f"{who} expected data of shape (N, D) with N >= {min_examples} examples "
                         f"(batch statistics need at least two), received shape {tuple(x.shape)}. "
                         f"Pass a 2-D tensor with one example per row.")


def check_scales(scales, who: str) -> tuple[float, ...]:
    """Scale factors d must be finite and > 0 (a negative d flips signs, d = 0 erases the input)."""
    scales = tuple(float(d) for d in scales)
    if not scales:
        raise ValueError(f"{who} expected at least one scale factor d > 0, received none. "
                         f"Pass e.g. scales=(0.25, 0.5, 1, 2, 4).")
    bad = [d for d in scales if not (d > 0 and d < float("inf"))]
    if bad:
        raise ValueError(f"{who} expected scale factors d > 0 (finite), received {bad}. "
                         f"Rescaling by d <= 0 is not a re-scaling (it erases or flips the "
                         f"input): use positive factors such as 0.25 ... 4.")
    return scales


def summed_inputs(W: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """a = W x for a batch: x (N, D), W (H, D) -> a (N, H)."""
    return x @ W.transpose(0, 1)


def statistics(method: str, a: torch.Tensor, W: torch.Tensor
               ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """(mu, sigma^2) of the summed inputs a (N, H) under ``method``, broadcastable to a.

    ``None`` for mu means mu = 0; ``None`` for sigma^2 means no normalization (sigma = 1).
    """
    check_method(method)
    if method == "batch":
        return LF.moments(a, (0,))                                    # (1, H) each
    if method == "layer":
        return LF.moments(a, (-1,))                                   # (N, 1) each
    if method == "rms":
        return LF.moments(a, (-1,), center=False)                     # None, (N, 1)
    if method == "weight":
        return None, W.to(LF.stats_dtype(W.dtype)).square().sum(-1).unsqueeze(0)  # None, (1, H)
    return None, None


def method_eps(method: str, eps: float) -> float:
    """The eps a method actually uses: weight norm (like torch's weight_norm) and no
    normalization have none."""
    return 0.0 if method in ("weight", "none") else float(eps)


def normalized_layer(method: str, W: torch.Tensor, x: torch.Tensor, g: torch.Tensor,
                     b: torch.Tensor, *, eps: float = 1e-5,
                     f: Callable[[torch.Tensor], torch.Tensor] | None = None) -> torch.Tensor:
    """h = f(g * (a - mu) / sqrt(sigma^2 + eps) + b), a = W x.

    W: (H, D), x: (N, D), g, b: (H,) -> h: (N, H). ``f=None`` returns the normalized summed
    inputs themselves (e.g. the logits of a softmax GLM).
    """
    a = summed_inputs(W, x)                                           # (N, H)
    mean, var = statistics(method, a, W)
    if var is None:
        y = a * g + b
    else:
        y = LF.apply_moments(a, mean, var, weight=g, bias=b, eps=method_eps(method, eps))
    return y if f is None else f(y)


def load_digits_xy(dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """The 1797 8x8 handwritten digits bundled with scikit-learn (no download): images (1797, 64)
    with raw pixel values 0..16, and labels (1797,) int64."""
    from sklearn.datasets import load_digits
    data = load_digits()
    return (torch.as_tensor(data.data, dtype=dtype),
            torch.as_tensor(data.target, dtype=torch.long))


@contextlib.contextmanager
def single_thread() -> Iterator[None]:
    """Run torch on one thread inside the block (restored after). The analysis works on tiny
    tensors, where extra threads only add contention on a shared machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)
