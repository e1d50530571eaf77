"""The regularizer table of ``layernorm bench rnn`` (``--tables regularizers``): LN-LSTM / LN-GRU
(norm="layer", one layer, training mode) with each recurrent regularizer (docs/rnn.md,
"Recurrent regularizers": recurrent dropout, zoneout, DropConnect) against the same module
without one, all candidates interleaved in every round (``harness.compare``), ratios to the
unregularized module measured in the same run, and the path each regularized forward took."""
from __future__ import annotations

import torch
from torch import nn

from .harness import CLOCKS, compare, module_steps

REG_COLUMNS = ["shape", "cell", "impl", "path", "fwd ms", "fwd ratio", "fwd+bwd ms", "ratio"]
# the regularizer rows: (name, keywords); "none" is the anchor
REGULARIZERS = (("none", {}), ("recurrent_dropout=0.25", {"recurrent_dropout": 0.25}),
                ("zoneout=0.1", {"zoneout": 0.1}), ("dropconnect=0.5", {"dropconnect": 0.5}),
                ("all three", {"recurrent_dropout": 0.25, "zoneout": 0.1, "dropconnect": 0.5}))


def _path_of(m: nn.Module, x: torch.Tensor) -> str:
    """Which path a training forward of this stack takes: "readable loop" where it calls
    ``_loop_direction`` (THE loop of ``layernorm.recurrence``), else "fused" (the operators)."""
    calls = []
    loop = m._loop_direction

    def spy(*args, **kwargs):
        calls.append(1)
        return loop(*args, **kwargs)
    m._loop_direction = spy
    try:
        with torch.no_grad():
            m(x)
    finally:
        del m._loop_direction
    return "readable loop" if calls else "fused"


def bench_regularizers(shape=(100, 32, 128, 256), *, cells=("lstm", "gru"), repeat: int = 7,
                       warmup: int = 2, device: str = "cpu", clock: str = "wall") -> list[dict]:
    """The recurrent regularizers' cost (docs/rnn.md, "Recurrent regularizers"): LN-LSTM /
    LN-GRU (norm="layer", one layer, training mode, so the masks are sampled at every call)
    with each regularizer against the same module without one, all interleaved in the same
    rounds; ratio = fwd+bwd time / the unregularized module's, "path" = the path the
    regularized forward took."""
    import layernorm
    T, B, I, H = shape
    rows = []
    for cell in cells:
        cls = {"lstm": layernorm.LSTM, "gru": layernorm.GRU}[cell]
        torch.manual_seed(0)
        base = cls(I, H, norm="layer").to(device)
        x = torch.randn(T, B, I, device=device)
        grad = torch.randn(T, B, H, device=device)
        fns, paths = {}, {}
        for name, kw in REGULARIZERS:
            m = cls(I, H, norm="layer", **kw).to(device)
            m.load_state_dict(base.state_dict())
            paths[name] = _path_of(m, x)
            fns[(name, "fwd")], fns[(name, "fb")] = module_steps(m, x, grad)
        ms = compare(fns, warmup=warmup, repeat=repeat, device=device, clock=CLOCKS[clock])
        for name, _ in REGULARIZERS:
            rows.append({"table": "regularizers", "shape": f"{T}x{B}x{I}x{H}", "T": T, "B": B,
                         "I": I, "H": H, "cell": cell, "impl": name, "path": paths[name],
                         "fwd ms": ms[(name, "fwd")],
                         "fwd ratio": ms[(name, "fwd")] / ms[("none", "fwd")],
                         "fwd+bwd ms": ms[(name, "fb")],
                         "ratio": ms[(name, "fb")] / ms[("none", "fb")]})
    return rows
