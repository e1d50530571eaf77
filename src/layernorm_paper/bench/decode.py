"""The decode table of ``layernorm bench rnn``: a stacked LN-LSTM / LN-GRU (``layernorm.LSTM`` /
``GRU``, norm="layer", 2 layers by default) called one step at a time, ``(1, B, I)`` in and the
state carried to the next call, as a decoder or a generator runs it, at batch 1 by default,
against ``torch.nn.LSTM`` / ``GRU`` of the same layers called the same way. Forward without grad
(``steps`` calls), and forward+backward (the gradient of the last call's h_n given, through
every step); the candidates of a row group interleaved in every round (``harness.compare``),
ratios to torch's module measured in the same run."""
from __future__ import annotations

import torch
from torch import nn

from .cells import step_rows

DECODE_LAYERS = 2
DECODE_BATCHES = (1,)
DECODE_COLUMNS = ["cell", "layers", "B", "steps", "I", "H", "impl", "fwd ms", "fwd ratio",
                  "fwd+bwd ms", "ratio"]


class _OneStep(nn.Module):
    """A sequence module called with one step, ``x_t`` (B, I) -> its new state (h_n[, c_n]),
    so that the cells' step loop (``cells.step_rows``) drives it as a decoder does."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, x: torch.Tensor, state):
        return self.module(x[None], state)[1]


def bench_decode(steps: int = 100, input_size: int = 128, hidden_size: int = 256, *,
                 layers: int = DECODE_LAYERS, batches=DECODE_BATCHES, cells=("lstm", "gru"),
                 repeat: int = 7, warmup: int = 2, device: str = "cpu",
                 clock: str = "wall") -> list[dict]:
    """One row per (cell, batch size, implementation); see the module docstring."""
    import layernorm
    rows = []
    for cell in cells:
        name = cell.upper()
        for B in batches:
            torch.manual_seed(0)
            impls = {f"torch.nn.{name}": getattr(nn, name)(input_size, hidden_size,
                                                           num_layers=layers),
                     f"layernorm.{name}": getattr(layernorm, name)(
                         input_size, hidden_size, num_layers=layers, norm="layer")}
            xs = torch.randn(steps, B, input_size, device=device)
            grad = torch.randn(layers, B, hidden_size, device=device)
            rows += step_rows("decode", cell, {k: _OneStep(m) for k, m in impls.items()}, xs,
                              grad, repeat=repeat, warmup=warmup, device=device, clock=clock,
                              layers=layers, B=B, steps=steps, I=input_size, H=hidden_size)
    return rows
