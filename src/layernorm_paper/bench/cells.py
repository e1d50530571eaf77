"""The step tables of ``layernorm bench rnn``, through the public API only:

cells   ``layernorm.LSTMCell`` / ``GRUCell`` (norm="layer") against ``torch.nn.LSTMCell`` /
        ``GRUCell``: ``steps`` calls of the cell in a Python loop, as an online learner or an RL
        rollout makes them, at each batch size (1 and 32 by default); forward without grad, and
        forward+backward (the gradient of the last h given, through every step)
bn      BN-LSTM (``layernorm.LSTM(norm="batch")``, training mode: per-step batch statistics;
        the fused C time loop, and the readable loop with ``use_fused = False``) against LN-LSTM
        (``norm="layer"``) and ``torch.nn.LSTM`` on each sequence shape, with the time per step

Candidates of one row group are interleaved in every round (``harness.compare``); ratios are to
torch's module measured in the same run.
"""
from __future__ import annotations

import torch
from torch import nn

from .harness import CLOCKS, compare, module_steps

CELL_BATCHES = (1, 32)
CELL_COLUMNS = ["cell", "B", "steps", "I", "H", "impl", "fwd ms", "fwd ratio", "fwd+bwd ms",
                "ratio"]
BN_COLUMNS = ["shape", "impl", "fwd ms", "fwd ratio", "fwd+bwd ms", "ratio", "ms/step",
              "vs LN-LSTM"]


def _cell_steps(cell: nn.Module, xs: torch.Tensor, grad: torch.Tensor):
    """(forward without grad, training step) of ``cell`` over the steps of xs (T, B, I)."""
    def run():
        state = None
        for t in range(xs.shape[0]):
            state = cell(xs[t], state)
        return state

    def forward():
        with torch.no_grad():
            run()

    def train_step():
        for p in cell.parameters():
            p.grad = None
        state = run()
        (state[0] if isinstance(state, tuple) else state).backward(grad)
    return forward, train_step


def step_rows(table: str, cell: str, impls: dict, xs: torch.Tensor, grad: torch.Tensor, *,
              repeat: int, warmup: int, device: str, clock: str, **fields) -> list[dict]:
    """Rows of a step table: each of ``impls`` (name -> a cell-like module, torch's first, the
    anchor) driven by ``_cell_steps`` over xs, interleaved in the same rounds; ``fields`` (the
    sizes) go into every row before ``impl``."""
    fns = {}
    for impl, m in impls.items():
        fns[(impl, "fwd")], fns[(impl, "fb")] = _cell_steps(m.to(device), xs, grad)
    ms = compare(fns, warmup=warmup, repeat=repeat, device=device, clock=CLOCKS[clock])
    anchor = next(iter(impls))
    return [{"table": table, "cell": cell, **fields, "impl": impl, "fwd ms": ms[(impl, "fwd")],
             "fwd ratio": ms[(impl, "fwd")] / ms[(anchor, "fwd")],
             "fwd+bwd ms": ms[(impl, "fb")], "ratio": ms[(impl, "fb")] / ms[(anchor, "fb")]}
            for impl in impls]


def bench_cells(steps: int = 100, input_size: int = 128, hidden_size: int = 256, *,
                batches=CELL_BATCHES, cells=("lstm", "gru"), repeat: int = 7, warmup: int = 2,
                device: str = "cpu", clock: str = "wall") -> list[dict]:
    """One row per (cell, batch size, implementation); see the module docstring."""
    import layernorm
    rows = []
    for cell in cells:
        name = {"lstm": "LSTMCell", "gru": "GRUCell"}[cell]
        for B in batches:
            torch.manual_seed(0)
            impls = {f"torch.nn.{name}": getattr(nn, name)(input_size, hidden_size),
                     f"layernorm.{name}": getattr(layernorm, name)(input_size, hidden_size,
                                                                    norm="layer")}
            xs = torch.randn(steps, B, input_size, device=device)
            grad = torch.randn(B, hidden_size, device=device)
            rows += step_rows("cells", cell, impls, xs, grad, repeat=repeat, warmup=warmup,
                              device=device, clock=clock, B=B, steps=steps, I=input_size,
                              H=hidden_size)
    return rows


def bench_bn_lstm(shape=(100, 32, 128, 256), *, repeat: int = 7, warmup: int = 2,
                  device: str = "cpu", clock: str = "wall", loop: bool = True) -> list[dict]:
    """BN-LSTM vs LN-LSTM vs torch.nn.LSTM on one (T, B, I, H), training mode; ``ms/step`` is
    the forward+backward time over T, ``vs LN-LSTM`` the forward+backward time over LN-LSTM's.
    The BN-LSTM row is the fused path (the C time loop, where it applies); ``loop`` adds the
    readable path (``use_fused = False``: ``BatchTerm`` in THE loop) to the same rounds."""
    import layernorm
    T, B, I, H = shape
    torch.manual_seed(0)
    impls = {"torch.nn.LSTM": nn.LSTM(I, H),
             "LN-LSTM (norm=layer)": layernorm.LSTM(I, H, norm="layer"),
             "BN-LSTM (norm=batch)": layernorm.LSTM(I, H, norm="batch", max_length=T)}
    if loop:
        readable = layernorm.LSTM(I, H, norm="batch", max_length=T)
        readable.use_fused = False
        impls["BN-LSTM loop (use_fused=False)"] = readable
    x = torch.randn(T, B, I, device=device)
    grad = torch.randn(T, B, H, device=device)
    fns = {}
    for impl, m in impls.items():
        fns[(impl, "fwd")], fns[(impl, "fb")] = module_steps(m.to(device).train(), x, grad)
    ms = compare(fns, warmup=warmup, repeat=repeat, device=device, clock=CLOCKS[clock])
    ref, ln = "torch.nn.LSTM", "LN-LSTM (norm=layer)"
    return [{"table": "bn", "shape": f"{T}x{B}x{I}x{H}", "T": T, "B": B, "I": I, "H": H,
             "impl": impl, "fwd ms": ms[(impl, "fwd")],
             "fwd ratio": ms[(impl, "fwd")] / ms[(ref, "fwd")], "fwd+bwd ms": ms[(impl, "fb")],
             "ratio": ms[(impl, "fb")] / ms[(ref, "fb")], "ms/step": ms[(impl, "fb")] / T,
             "vs LN-LSTM": ms[(impl, "fb")] / ms[(ln, "fb")]} for impl in impls]
