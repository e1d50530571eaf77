"""THE length encoding of a variable-length batch, and its one validator.

Lengths travel in one encoding from the modules to the time loops and the C kernels:
``batch_sizes`` (T,), int64 on the CPU, as ``PackedSequence.batch_sizes``: step t runs the first
``batch_sizes[t]`` examples of a batch sorted by decreasing length; ``None`` means every example
runs all T steps (``run_direction`` takes it, ``layernorm.ops`` passes it to the C kernels).
Callers holding per-example lengths in any order (``ln_*_sequence(lengths=...)``) get the sort
order and ``batch_sizes`` here; the Triton kernels, which read one length per example, get them
back with ``to_lengths``. Lengths passed to the operators are checked by ``check_lengths`` or
``check_batch_sizes``; the stacked modules check a PackedSequence where it enters them
(``layernorm.checks.InputChecks``) and record it (``checked``), so the operators of its layers and
directions do not check it again.
"""
from __future__ import annotations

import torch


def check_lengths(lengths, T: int, B: int) -> torch.Tensor:
    """Per-example true lengths (any order) -> (B,) int64 on the CPU, each in [0, T]."""
    if not isinstance(lengths, torch.Tensor):
        lengths = torch.as_tensor(lengths)
    if lengths.dim() != 1 or lengths.shape[0] != B or lengths.dtype.is_floating_point \
            or lengths.dtype == torch.bool:
        raise ValueError(f"lengths must be an integer tensor of shape ({B},) (one true length per "
                         f"example), received {lengths.dtype} of shape {tuple(lengths.shape)}. "
                         f"Pass e.g. torch.tensor([len(s) for s in batch]).")
    lengths = lengths.to("cpu", torch.int64)
    if not torch.compiler.is_compiling() and B and (int(lengths.min()) < 0
                                                   or int(lengths.max()) > T):
        raise ValueError(f"lengths must lie in [0, T={T}], received min {int(lengths.min())}, "
                         f"max {int(lengths.max())}. Clip them to the padded length T.")
    return lengths


def from_lengths(lengths, T: int, B: int):
    """Per-example lengths (any order) -> (order or None, batch_sizes or None): ``order`` sorts
    the batch by decreasing length (None when already sorted), ``batch_sizes`` as in the module
    docstring (None when every example runs all T steps)."""
    if lengths is None:
        return None, None
    lengths = check_lengths(lengths, T, B)
    sorted_len, order = torch.sort(lengths, descending=True, stable=True)
    batch_sizes = (sorted_len.unsqueeze(0) > torch.arange(T).unsqueeze(1)).sum(1)   # (T,)
    if torch.compiler.is_compiling():  # no data-dependent shortcuts in a graph
        return order, batch_sizes
    if torch.equal(order, torch.arange(B)):
        order = None
    if bool((batch_sizes == B).all()):
        batch_sizes = None
    return order, batch_sizes


# The last ``batch_sizes`` tensor checked where it entered (a module's PackedSequence, checked by
# ``layernorm.checks.InputChecks``): (the tensor, its version, T, B, the check's result). The operators
# each of its layers and directions calls find it here instead of checking it again.
_CHECKED: list = [None]


def checked(batch_sizes: torch.Tensor, T: int, B: int, full: bool) -> None:
    """Record that ``batch_sizes`` (T,) int64 on the CPU was checked for a batch of B (``full``:
    every example runs all T steps), so ``check_batch_sizes`` takes it as it is, unless it
    changes in place (not while torch.compile traces: a graph keeps no such record)."""
    if torch.compiler.is_compiling() or batch_sizes.is_inference():  # (no version counter:
        return                                        # an inference tensor is checked each time)
    _CHECKED[0] = (batch_sizes, batch_sizes._version, T, B, None if full else batch_sizes)


def check_batch_sizes(who: str, batch_sizes, T: int, B: int) -> torch.Tensor | None:
    """``batch_sizes`` of a batch sorted by decreasing length -> (T,) int64 on the CPU, or None
    when every example runs all T steps. A tensor already checked (``checked``) is not checked
    again."""
    kept = _CHECKED[0]
    if kept is not None and kept[0] is batch_sizes and kept[1] == batch_sizes._version \
            and kept[2] == T and kept[3] == B:
        return kept[4]
    return _validate(who, batch_sizes, T, B)


def _validate(who: str, batch_sizes, T: int, B: int) -> torch.Tensor | None:
    if not isinstance(batch_sizes, torch.Tensor):
        batch_sizes = torch.as_tensor(batch_sizes)
    if tuple(batch_sizes.shape) != (T,) or batch_sizes.dtype.is_floating_point:
        raise ValueError(f"{who} expected batch_sizes as an integer tensor of shape ({T},) (as "
                         f"PackedSequence.batch_sizes), received {batch_sizes.dtype} of shape "
                         f"{tuple(batch_sizes.shape)}.")
    batch_sizes = batch_sizes.to("cpu", torch.int64)
    if torch.compiler.is_compiling():
        return batch_sizes
    if T and (int(batch_sizes.max()) > B or int(batch_sizes.min()) < 0
              or bool((batch_sizes[1:] > batch_sizes[:-1]).any())):
        raise ValueError(f"{who} expected batch_sizes non-increasing in [0, B={B}] (a batch "
                         f"sorted by decreasing length), received {batch_sizes.tolist()}.")
    return None if bool((batch_sizes == B).all()) else batch_sizes


def encode(who: str, lengths, batch_sizes, T: int, B: int):
    """The caller's ``lengths`` (any order) or ``batch_sizes`` (sorted batch), checked -> (order
    or None, batch_sizes or None)."""
    if batch_sizes is None:
        return from_lengths(lengths, T, B)
    if lengths is not None:
        raise ValueError(f"{who} received both lengths and batch_sizes; pass one of them "
                         f"(lengths in any order, or batch_sizes for a sorted batch).")
    return None, check_batch_sizes(who, batch_sizes, T, B)


def to_lengths(order, batch_sizes, B: int) -> torch.Tensor | None:
    """The (B,) lengths, in the caller's order, that ``encode`` turned into (order,
    batch_sizes); None when every example runs all steps."""
    if batch_sizes is None:
        return None
    sizes = torch.as_tensor(batch_sizes, device="cpu")
    lengths = (sizes.unsqueeze(1) > torch.arange(B)).sum(0)              # sorted order
    if order is None:
        return lengths
    unsorted = torch.empty_like(lengths)
    unsorted[order] = lengths
    return unsorted
