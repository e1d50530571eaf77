"""The TorchScript LN-LSTM that ``layernorm bench rnn`` times as a baseline: a scripted
cell-by-cell LN-LSTM in the style of PyTorch's benchmarks/fastrnns/custom_lstms.py
(LayerNormLSTMCell), which is what a user would write without this package.

The same equations as the paper's LN-LSTM (section 3.1) with the raw c carried, float32 as built;
the tests check it against the float64 reference of ``tests/reference.py`` (``ref_recurrent``).
"""
from __future__ import annotations

import warnings

import torch
from torch import nn

__all__ = ["ScriptLNLSTM"]


class _ScriptLNLSTMCell(nn.Module):
    """LN-LSTM cell as in fastrnns' LayerNormLSTMCell, except that the raw c is carried."""

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        H = hidden_size
        self.weight_ih = nn.Parameter(torch.randn(4 * H, input_size) / H ** 0.5)
        self.weight_hh = nn.Parameter(torch.randn(4 * H, H) / H ** 0.5)
        self.gain_ih, self.gain_hh = (nn.Parameter(torch.ones(4 * H)) for _ in range(2))
        self.bias_ih, self.bias_hh = (nn.Parameter(torch.zeros(4 * H)) for _ in range(2))
        self.gain_c, self.bias_c = nn.Parameter(torch.ones(H)), nn.Parameter(torch.zeros(H))
        self.hidden_size = H

    def forward(self, x: torch.Tensor, h: torch.Tensor, c: torch.Tensor):
        G, H = 4 * self.hidden_size, self.hidden_size
        igates = torch.nn.functional.layer_norm(torch.mm(x, self.weight_ih.t()), [G],
                                                self.gain_ih, self.bias_ih)
        hgates = torch.nn.functional.layer_norm(torch.mm(h, self.weight_hh.t()), [G],
                                                self.gain_hh, self.bias_hh)
        ingate, forgetgate, cellgate, outgate = (igates + hgates).chunk(4, 1)
        c = torch.sigmoid(forgetgate) * c + torch.sigmoid(ingate) * torch.tanh(cellgate)
        cn = torch.nn.functional.layer_norm(c, [H], self.gain_c, self.bias_c)
        return torch.sigmoid(outgate) * torch.tanh(cn), c


class _ScriptLNLSTMLayer(nn.Module):
    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        self.cell = _ScriptLNLSTMCell(input_size, hidden_size)

    def forward(self, x: torch.Tensor, h: torch.Tensor, c: torch.Tensor):
        outputs = torch.jit.annotate(list[torch.Tensor], [])
        for t in range(x.shape[0]):
            h, c = self.cell(x[t], h, c)
            outputs += [h]
        return torch.stack(outputs), h, c


class ScriptLNLSTM(nn.Module):
    """Stacked (optionally bidirectional) scripted LN-LSTM with torch.nn.LSTM's call signature
    (input (T, B, I); returns (output, None)); zero initial states."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1,
                 bidirectional: bool = False):
        super().__init__()
        D = 2 if bidirectional else 1
        self.hidden_size, self.num_layers, self.D = hidden_size, num_layers, D
        with warnings.catch_warnings():  # torch.jit.script is deprecated; it is the baseline
            warnings.simplefilter("ignore")
            self.layers = nn.ModuleList([
                torch.jit.script(_ScriptLNLSTMLayer(input_size if layer == 0 else D * hidden_size,
                                                    hidden_size))
                for layer in range(num_layers) for _ in range(D)])

    def forward(self, x: torch.Tensor):
        B, H = x.shape[1], self.hidden_size
        zeros = x.new_zeros(B, H)
        for layer in range(self.num_layers):
            outs = []
            for d in range(self.D):
                run = self.layers[layer * self.D + d]
                out = run(x.flip(0) if d else x, zeros, zeros)[0]
                outs.append(out.flip(0) if d else out)
            x = torch.cat(outs, -1) if self.D > 1 else outs[0]
        return x, None
