"""torch's weight layout for the stacked modules (``TorchLayout``, mixed into
``layernorm.rnn.modules``' stacks): the weight lists torch.nn.RNNBase exposes (``_all_weights``,
``_flat_weights``, ``all_weights``: weight-drop / AWD-LSTM code reads them), cuDNN's flat weight
buffer, the equivalent torch module and, for ``norm="none"``, torch's own fused RNN op on these
Parameters."""
from __future__ import annotations

import torch
from torch import _VF, nn
from torch.nn.utils.rnn import PackedSequence


class TorchLayout:
    """Mixed into ``layernorm.rnn.modules._Stack`` (reads its configuration and Parameters)."""

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
