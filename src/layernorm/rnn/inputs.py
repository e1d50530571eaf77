"""The stacked modules' checks of their input (a tensor or a PackedSequence) and of hx
(``InputChecks``, mixed into ``layernorm.rnn.modules``' stacks): torch's exception types,
messages naming what was expected, what was received and the fix."""
from __future__ import annotations

import torch
from torch.nn.utils.rnn import PackedSequence

from ..checks import RNNInputError, RNNTypeError, check_dtype, check_state_dtype
from ..recurrence.lengths import checked


class InputChecks:
    """Mixed into ``layernorm.rnn.modules._Stack`` (reads its configuration)."""

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
